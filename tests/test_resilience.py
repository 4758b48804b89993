"""Nothing lost: atomic saves, checkpoints and resume, partial traces on Ctrl-C and on divergence."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import sgmc
from sgmc.models import LinearRegression

ROOT = Path(__file__).resolve().parent.parent


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["OPENBLAS_NUM_THREADS"] = "1"
    return env


@pytest.fixture(scope="module")
def model():
    r = np.random.default_rng(0)
    X = r.normal(size=(400, 3))
    y = X @ np.array([1.0, -1.0, 0.5]) + r.normal(size=400)
    return LinearRegression(X, y)


# -- 1. atomic saves ---------------------------------------------------------------------------------


def test_killed_save_leaves_the_earlier_trace_intact(tmp_path):
    path = tmp_path / "trace.npz"
    script = textwrap.dedent(f"""
        import sys
        import numpy as np
        import sgmc
        small = sgmc.Trace(draws=np.arange(6.0).reshape(1, 3, 2), iterations=[0, 1, 2])
        small.save({str(path)!r})
        big = sgmc.Trace(draws=np.random.default_rng(0).normal(size=(1, 3_000_000, 2)),
                         iterations=list(range(3_000_000)))
        print("saving", flush=True)
        big.save({str(path)!r})
        print("saved", flush=True)
    """)
    with subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=_env(), text=True) as proc:
        try:
            assert proc.stdout.readline().strip() == "saving"
            time.sleep(0.3)  # compressing 48 MB of random doubles takes well over a second
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    loaded = sgmc.Trace.load(str(path))
    np.testing.assert_array_equal(loaded.draws, np.arange(6.0).reshape(1, 3, 2))
    assert loaded.iterations == [0, 1, 2]


@pytest.mark.parametrize("content", ["truncated", "garbage", "foreign", "single"])
def test_loading_a_damaged_or_foreign_file_names_it(tmp_path, content):
    good = tmp_path / "good.npz"
    sgmc.Trace(draws=np.random.default_rng(1).normal(size=(2, 500, 3)), iterations=list(range(500))).save(str(good))
    path = tmp_path / f"{content}.npz"
    if content == "truncated":
        data = good.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif content == "garbage":
        path.write_bytes(os.urandom(2000))
    elif content == "foreign":
        np.savez(path, a=np.zeros(3))
    else:
        with open(path, "wb") as fh:
            np.save(fh, np.zeros(3))
    with pytest.raises(ValueError, match=str(path).replace(".", r"\.")):
        sgmc.Trace.load(str(path))


def test_cli_output_replaces_the_file_only_when_complete(tmp_path, monkeypatch, capsys):
    from sgmc import cli

    out = tmp_path / "run.npz"
    out.write_bytes(b"earlier results")

    def broken(fh, **arrays):
        fh.write(b"PK\x03\x04 partial")
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez_compressed", broken)
    code = cli.main(["run", "--quick", "--no-progress", "--model", "linear", "--iters", "100",
                     "--sampler", "sgld", "--estimator", "minibatch", "--output", str(out)])
    assert code == 2
    assert "disk full" in capsys.readouterr().err
    assert out.read_bytes() == b"earlier results"
    assert [p.name for p in tmp_path.iterdir()] == ["run.npz"]  # no temporary file left behind


# -- 2. checkpoints, resume, Ctrl-C -------------------------------------------------------------------

RUN_ARGS = dict(step_size=2e-3, batch_size=40, n_iter=300, chains=3, group_size=2, rng=7, progress=False)


def test_a_killed_run_resumes_bit_identically(tmp_path, model):
    ckpt = tmp_path / "run.ckpt"
    script = textwrap.dedent(f"""
        import os, signal
        import numpy as np
        import sgmc
        from sgmc.models import LinearRegression
        r = np.random.default_rng(0)
        X = r.normal(size=(400, 3)); y = X @ np.array([1.0, -1.0, 0.5]) + r.normal(size=400)

        def kill(k, state):
            if k == 130 and state.position.shape[0] == 1:  # in the second group of chains
                os.kill(os.getpid(), signal.SIGKILL)

        sgmc.sample(LinearRegression(X, y), "sghmc", "cv", checkpoint={str(ckpt)!r}, checkpoint_every=50,
                    callback=kill, **{RUN_ARGS!r})
    """)
    proc = subprocess.run([sys.executable, "-c", script], env=_env(), capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    resumed = sgmc.resume(str(ckpt), progress=False)
    full = sgmc.sample(model, "sghmc", "cv", **RUN_ARGS)
    np.testing.assert_array_equal(resumed.draws, full.draws)
    np.testing.assert_array_equal(resumed.stats["n_evals"], full.stats["n_evals"])
    assert resumed.info["interrupted"] is False and resumed.info["iterations_done"] == 300
    # the finished run's checkpoint gives the same trace again
    np.testing.assert_array_equal(sgmc.resume(str(ckpt), progress=False).draws, full.draws)


def _ctrl_c_at(iteration, chains_in_group):
    def callback(k, state):
        if k == iteration and state.position.shape[0] == chains_in_group:
            os.kill(os.getpid(), signal.SIGINT)

    return callback


@pytest.mark.parametrize(("sampler", "estimator"), [("sgld", "minibatch"), ("sgnht", "svrg"), ("mala", "full")])
def test_ctrl_c_returns_the_draws_so_far_and_resume_finishes_the_run(tmp_path, model, sampler, estimator):
    ckpt = tmp_path / "run.ckpt"
    with pytest.warns(sgmc.SamplingInterruptedWarning, match="interrupted after 121 of 300"):
        part = sgmc.sample(model, sampler, estimator, checkpoint=str(ckpt), callback=_ctrl_c_at(120, 2),
                           **RUN_ARGS)
    full = sgmc.sample(model, sampler, estimator, **RUN_ARGS)
    # the first group of chains stopped after iteration 121; the second had not started
    assert part.info["interrupted"] is True and part.info["iterations_done"] == 121
    assert part.draws.shape == (2, 121, 3)
    np.testing.assert_array_equal(part.draws, full.draws[:2, :121])
    resumed = sgmc.resume(str(ckpt), progress=False)
    np.testing.assert_array_equal(resumed.draws, full.draws)
    assert resumed.info["interrupted"] is False


def test_ctrl_c_in_a_later_group_keeps_every_started_group(model):
    with pytest.warns(sgmc.SamplingInterruptedWarning):
        part = sgmc.sample(model, "sgld", callback=_ctrl_c_at(49, 1), **RUN_ARGS)
    full = sgmc.sample(model, "sgld", **RUN_ARGS)
    assert part.draws.shape == (3, 50, 3)
    np.testing.assert_array_equal(part.draws, full.draws[:, :50])
    assert part.stats["n_evals"].shape == (3, 50)


def test_checkpoint_arguments_are_checked(tmp_path, model):
    with pytest.raises(ValueError, match="`checkpoint`: the folder"):
        sgmc.sample(model, checkpoint=str(tmp_path / "missing" / "c.ckpt"), **RUN_ARGS)
    with pytest.raises(ValueError, match="`checkpoint_every` needs `checkpoint=PATH`"):
        sgmc.sample(model, checkpoint_every=10, **RUN_ARGS)
    with pytest.raises(ValueError, match="executor=None"):
        sgmc.sample(model, checkpoint=str(tmp_path / "c.ckpt"), executor="processes", **RUN_ARGS)
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(b"not a pickle")
    with pytest.raises(ValueError, match="bad.ckpt"):
        sgmc.resume(str(bad))


# -- 3. divergence keeps what was sampled ----------------------------------------------------------------


def test_divergence_keeps_the_draws_up_to_the_last_finite_check(model):
    hs = [2e-3] * 250 + [1e6] * 250
    args = dict(batch_size=40, chains=3, group_size=2, rng=3, progress=False)
    with pytest.raises(FloatingPointError, match="diverged by iteration 300") as info:
        sgmc.sample(model, "sgld", step_size=hs, n_iter=500, **args)
    err = info.value
    assert isinstance(err, sgmc.DivergenceError)
    assert err.iteration == 300 and err.step_size == 1e6
    short = sgmc.sample(model, "sgld", step_size=hs[:200], n_iter=200, **args)
    # the first group diverged: its chains up to iteration 200, the last check that was finite
    assert err.trace.info["iterations_done"] == 200
    np.testing.assert_array_equal(err.trace.draws, short.draws[:2])
    assert np.isfinite(err.trace.draws).all()


def test_cli_reports_a_diverged_method_as_a_row_and_runs_the_others(capsys):
    from sgmc.cli import main

    code = main(["run", "--quick", "--no-progress", "--model", "linear", "--iters", "200",
                 "--step-size", "1e-4,10"])
    out = capsys.readouterr().out
    assert code == 0
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("SGLD")}
    assert "diverged at iteration 100, h = 10" in rows["SGLD-CV"]
    assert float(rows["SGLD"].split()[2]) >= 0  # the other method has its numbers


def test_checkpoints_resume_on_every_backend(xb, tmp_path):
    r = np.random.default_rng(0)
    X = r.normal(size=(200, 3))
    y = X @ np.array([1.0, -1.0, 0.5]) + r.normal(size=200)
    model = LinearRegression(xb.asarray(X), xb.asarray(y))
    args = dict(step_size=2e-3, batch_size=20, n_iter=40, chains=2, rng=xb.rng(5), progress=False)
    ckpt = tmp_path / "run.ckpt"
    with pytest.warns(sgmc.SamplingInterruptedWarning):
        sgmc.sample(model, "sgld", "svrg", checkpoint=str(ckpt), callback=_ctrl_c_at(20, 2), **args)
    resumed = sgmc.resume(str(ckpt), progress=False)
    full = sgmc.sample(model, "sgld", "svrg", **dict(args, rng=xb.rng(5)))
    assert type(resumed.draws) is type(full.draws)
    np.testing.assert_array_equal(xb.to_numpy(resumed.draws), xb.to_numpy(full.draws))
