"""Tests of the ``sgmc`` command: real runs of the small (--quick) configuration, and its errors."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import sgmc
from sgmc.cli import main

from _helpers import Z_TOL


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _table(stdout: str, marked: dict | None = None) -> dict:
    """Rows of the printed table by method: {method: (h, time, passes, log_loss, mean_error)}.

    A row marked NOT MIXED (sgmc.diagnostics.mixing) goes to ``marked`` when given (its text), and
    fails the parse otherwise.
    """
    lines = stdout.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.split()[:2] == ["method", "h"])
    rows = {}
    for ln in lines[start + 2:]:
        if not ln.strip():
            break
        cells = ln.split()
        if marked is not None and cells[1:3] == ["NOT", "MIXED"]:
            marked[cells[0]] = ln
            continue
        assert len(cells) == 6, ln
        rows[cells[0]] = tuple(float(c) for c in cells[1:])
    return rows


def _file_rows(quick_run: dict, labels) -> dict:
    """The rows --output recorded in each method's file (numbers kept for marked rows too)."""
    out = {}
    for label in labels:
        row = sgmc.Trace.load(str(quick_run["npz"].with_name(f"draws-{label}.npz"))).info["command"]["row"]
        out[label] = (row["h"], row["time"], row["passes"], row["log_loss"], row["mean_error"])
    return out


def _check_marks(stdout: str, marked: dict) -> None:
    """Each NOT MIXED row has its footnote: the reasons with their numbers and the fix."""
    for label in marked:
        note = next(ln for ln in stdout.splitlines() if ln.startswith(f"(*) {label} not mixed: "))
        assert ("R-hat" in note or "ESS" in note or "spread" in note) and "Fix: " in note


def _reference_norm(stdout: str) -> float:
    line = next(ln for ln in stdout.splitlines() if ln.startswith("mean error:"))
    return float(line.rsplit("=", 1)[1])


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli")
    png, npz = tmp / "trace.png", tmp / "draws.npz"
    code, out, err = _run(["run", "--quick", "--no-progress", "--plot", str(png), "--output", str(npz)])
    return {"code": code, "out": out, "err": err, "png": png, "npz": npz}


def test_quick_default_table(quick_run):
    assert quick_run["code"] == 0, quick_run["err"]
    assert quick_run["err"] == ""  # --no-progress: nothing on stderr
    # one chain of 1,000 kept draws at the curvature rule's step: the slow direction has not mixed
    # (bulk ESS 4 and 25), so the rows are marked, and their numbers are in --output's files only
    marked = {}
    printed = _table(quick_run["out"], marked)
    assert sorted([*printed, *marked]) == ["SGLD", "SGLD-CV"]
    _check_marks(quick_run["out"], marked)
    rows = _file_rows(quick_run, ["SGLD", "SGLD-CV"])
    for label, values in printed.items():
        assert values == pytest.approx(rows[label], rel=1e-2, abs=1e-2)
    ref_norm = _reference_norm(quick_run["out"])
    assert 1.0 < ref_norm < 100.0
    for h, seconds, passes, log_loss, mean_error in rows.values():
        assert all(math.isfinite(v) for v in (h, seconds, passes, log_loss, mean_error))
        assert h > 0 and seconds > 0 and passes > 0
        assert 0.0 < log_loss < math.log(2.0)  # better than chance
        assert mean_error < 0.2 * ref_norm
    # SGLD-CV starts at the mode: its posterior mean is close to the exact reference
    assert rows["SGLD-CV"][4] < 0.05 * ref_norm
    # SGLD: n = 0.01 N for 2000 iterations is 20 data passes; SGLD-CV adds the mode search and a full pass
    assert rows["SGLD"][2] == pytest.approx(20.0, rel=0.01)
    assert rows["SGLD-CV"][2] > rows["SGLD"][2]
    assert "reference: MALA" in quick_run["out"]


def test_quick_plot_and_output(quick_run):
    png = quick_run["png"]
    assert png.stat().st_size > 1000
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # one file per method (two methods: the label after the stem), each a trace Trace.load opens, with
    # the command's settings and the method's row
    assert not quick_run["npz"].exists()
    marked = {}
    rows = {**_table(quick_run["out"], marked), **_file_rows(quick_run, marked)}
    for label in ("SGLD", "SGLD-CV"):
        path = quick_run["npz"].with_name(f"draws-{label}.npz")
        trace = sgmc.Trace.load(str(path))
        assert trace.draws.shape == (1, 1000, 10)
        cmd = trace.info["command"]
        assert cmd["method"] == label and cmd["seed"] == 0 and cmd["iters"] == 2000 and cmd["burn_in"] == 1000
        assert "--output" in cmd["argv"]
        assert len(cmd["reference_mean"]) == 10
        assert cmd["row"]["mean_error"] == pytest.approx(rows[label][4], rel=1e-2)
        assert trace.info["sampler"] == "sgld"
        assert str(path) in quick_run["out"]


def test_entry_point_subprocess():
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-m", "sgmc", "run", "--quick", "--no-progress"],
        capture_output=True, text=True, timeout=300, env=env, cwd=root,
    )
    assert proc.returncode == 0, proc.stderr
    marked = {}
    rows = _table(proc.stdout, marked)
    assert set(rows) | set(marked) == {"SGLD", "SGLD-CV"}
    _check_marks(proc.stdout, marked)


def test_linear_model_against_closed_form():
    code, out, err = _run(["run", "--quick", "--no-progress", "--model", "linear", "--iters", "600",
                           "--sampler", "sgld,sghmc", "--estimator", "cv"])
    assert code == 0, err
    rows = _table(out)
    assert list(rows) == ["SGLD-CV", "SGHMC-CV"]
    ref_norm = _reference_norm(out)
    assert "closed-form posterior mean" in out
    for h, seconds, passes, nll, mean_error in rows.values():
        # held-out predictive density of a unit-variance Gaussian: 0.5 log(2 pi e) = 1.419
        assert 1.3 < nll < 1.6
        assert mean_error < 0.05 * ref_norm


def test_mala_reference_against_quadrature(tmp_path):
    # d = 2: the posterior mean by brute-force quadrature on a fine grid is an independent answer; the
    # reference must agree within a few of its printed standard errors (plus the grid's error).
    npz = tmp_path / "ref.npz"
    code, out, err = _run(["run", "--quick", "--no-progress", "--dim", "2", "--n-data", "400", "--iters", "200",
                           "--output", str(npz)])
    assert code == 0, err
    line = next(ln for ln in out.splitlines() if ln.startswith("reference:"))
    assert "control variates of degree 2" in line
    se = float(line.split("standard error about ", 1)[1].split(" ", 1)[0])
    ref = np.asarray(sgmc.Trace.load(str(npz.with_name("ref-SGLD.npz"))).info["command"]["reference_mean"])
    from sgmc.datasets import logistic_regression_data

    d = logistic_regression_data(n=400, dim=2, n_test=1000, rng=0)
    X, y = np.asarray(d.X), np.asarray(d.y)
    # the grid spans 10 Laplace standard deviations either side of the reference, 201 points a side
    # (for a smooth, quickly decaying density the grid sum converges faster than any power of the spacing)
    p = 1.0 / (1.0 + np.exp(-X @ ref))
    sd = np.sqrt(np.diag(np.linalg.inv((X.T * (p * (1 - p))) @ X + np.eye(2) / 10.0)))
    a = np.linspace(ref[0] - 10 * sd[0], ref[0] + 10 * sd[0], 201)
    b = np.linspace(ref[1] - 10 * sd[1], ref[1] + 10 * sd[1], 201)
    A, B = np.meshgrid(a, b, indexing="ij")
    logp = -(A**2 + B**2) / 20.0
    for i in range(len(a)):
        eta = A[i, :, None] * X[:, 0] + B[i, :, None] * X[:, 1]
        logp[i] += (y * eta - np.logaddexp(0.0, eta)).sum(-1)
    w = np.exp(logp - logp.max())
    for edge in (w[0, :], w[-1, :], w[:, 0], w[:, -1]):
        assert edge.max() < 1e-12  # the grid holds all the mass
    mean = np.array([(w * A).sum(), (w * B).sum()]) / w.sum()
    assert np.linalg.norm(ref - mean) < Z_TOL * se + 1e-6, (ref, mean, se)


def test_user_csv(tmp_path):
    gen = np.random.default_rng(4)
    X = gen.normal(size=(2000, 3))
    eta = 0.3 + X @ np.array([0.5, -1.0, 0.8])
    y = gen.random(2000) < 1.0 / (1.0 + np.exp(-eta))
    path = tmp_path / "mine.csv"
    with open(path, "w") as fh:
        fh.write("u,v,w,outcome\n")
        for x, label in zip(X, y):
            fh.write(f"{x[0]:.6f},{x[1]:.6f},{x[2]:.6f},{int(label)}\n")
    code, out, err = _run(["run", "--no-progress", "--data", str(path), "--target", "outcome", "--intercept",
                           "--iters", "600", "--batch-size", "50", "--seed", "1", "--chains", "1"])
    assert code == 0, err
    assert "mine.csv" in out and "'outcome'" in out and "4 features incl. intercept" in out
    rows = _table(out)
    assert set(rows) == {"SGLD", "SGLD-CV"}
    for h, seconds, passes, log_loss, mean_error in rows.values():
        assert 0.0 < log_loss < math.log(2.0)
        assert mean_error < 0.2 * _reference_norm(out)


def test_other_backend():
    code, out, err = _run(["run", "--quick", "--no-progress", "--backend", "torch", "--model", "linear",
                           "--n-data", "2000", "--iters", "300", "--estimator", "cv"])
    assert code == 0, err
    assert "backend torch" in out
    assert list(_table(out)) == ["SGLD-CV"]


def test_help_and_version():
    code, out, _ = _run(["run", "--help"])
    assert code == 0 and "--sampler" in out and "--quick" in out
    code, out, _ = _run(["--version"])
    assert code == 0 and out.startswith("sgmc ")


@pytest.mark.parametrize(
    ("argv", "pattern"),
    [
        (["run", "--sampler", "nuts"], "--sampler: unknown name 'nuts'"),
        (["run", "--estimator", "cv,bogus"], "--estimator: unknown name 'bogus'"),
        (["run", "--backend", "mxnet"], "argument --backend: invalid choice"),
        (["run", "--iters", "1"], "argument --iters: expected an integer >= 2"),
        (["run", "--quick", "--iters", "100", "--burn-in", "100"], "--burn-in must be smaller than --iters"),
        (["run", "--step-size", "-1"], "argument --step-size: expected a positive number"),
        (["run", "--quick", "--step-size", "1e-4,2e-4,3e-4"], "--step-size takes one value or one per method"),
        (["run", "--target", "y"], "--target applies to --data"),
        (["run", "--intercept"], "--intercept applies to --data"),
        (["run", "--data", "x.csv", "--dim", "3"], "--dim sets the size of simulated data"),
        (["run", "--quick", "--plot", "trace.foo"], "--plot: cannot write 'foo'"),
        (["run", "--frobnicate"], "unrecognized arguments: --frobnicate"),
        (["run", "--quick", "--plot", "/no/such/dir/p.png"], "--plot: directory"),
        (["run", "--data", "/no/such/file.csv"], "cannot read CSV file"),
        (["launch"], "invalid choice: 'launch'"),
    ],
)
def test_usage_errors_are_one_line(argv, pattern):
    code, out, err = _run([*argv, "--no-progress"] if argv[0] == "run" else argv)
    assert code == 2
    assert err.startswith("sgmc: error: ")
    assert err.count("\n") == 1, err
    assert pattern in err
    assert "Traceback" not in err


def test_csv_errors_are_one_line(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b,y\n1,2,0\n3,x,1\n")
    code, _, err = _run(["run", "--no-progress", "--data", str(bad), "--target", "y"])
    assert code == 2 and err.count("\n") == 1
    assert "line 3, column 'b' is not a number: 'x'" in err

    nonbinary = tmp_path / "cont.csv"
    nonbinary.write_text("a,y\n" + "".join(f"{i},{i * 0.5}\n" for i in range(50)))
    code, _, err = _run(["run", "--no-progress", "--data", str(nonbinary), "--target", "y"])
    assert code == 2 and "must hold only 0 and 1" in err and err.count("\n") == 1


def test_diverging_step_size_is_reported():
    code, out, err = _run(["run", "--quick", "--no-progress", "--model", "linear", "--estimator", "minibatch",
                           "--step-size", "1"])
    # a diverged method is a row of the table, not an error that discards the other methods
    assert code == 0 and err == ""
    assert "SGLD    diverged at iteration 100, h = 1\n" in out


# -- failures reported, true costs, Ctrl-C, one naming rule, --output ----------------------------------

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
LINEAR = ["run", "--quick", "--no-progress", "--model", "linear", "--iters", "300"]


def test_a_runaway_chain_is_a_marked_row_and_sgrld_svrg_has_a_working_default(tmp_path):
    # SGRLD with SVRG at h = 0.5 (the factor SGLD-SVRG uses) jumps to |theta| in the thousands: finite
    # draws, which used to be printed as a row with mean error 2e3
    code, out, err = _run(["run", "--quick", "--no-progress", "--sampler", "sgrld", "--estimator", "svrg",
                           "--step-size", "0.5"])
    assert code == 0, err
    line = next(ln for ln in out.splitlines() if ln.startswith("SGRLD-SVRG"))
    assert "ran away: chain 0 far outside the Laplace scale from iteration" in line and "no result" in line
    assert "ran away: the draws stayed finite" in out
    # the default step of the pair works: close to the reference (one chain of 1,000 draws has not
    # mixed in its slow direction, split R-hat ~1.2: a marked row, its numbers in --output's file)
    npz = tmp_path / "draws.npz"
    code, out, err = _run(["run", "--quick", "--no-progress", "--sampler", "sgrld", "--estimator", "svrg",
                           "--output", str(npz)])
    assert code == 0, err
    marked = {}
    rows = _table(out, marked)
    _check_marks(out, marked)
    row = sgmc.Trace.load(str(npz)).info["command"]["row"]  # one method: the file is --output itself
    h, passes, mean_error = row["h"], row["passes"], row["mean_error"]
    if "SGRLD-SVRG" in rows:
        assert rows["SGRLD-SVRG"][4] == pytest.approx(mean_error, rel=1e-2)
    assert mean_error < 0.05 * _reference_norm(out)
    # the true cost: the Fisher metric's pass at each of the 2000 steps, besides SVRG's
    assert passes > 2000


def test_data_passes_are_true_costs():
    code, out, err = _run([*LINEAR, "--sampler", "sgld,sgrld", "--estimator", "minibatch"])
    assert code == 0, err
    rows = _table(out)
    # 300 iterations at n = 0.01 N: 3 passes; the linear model's Fisher metric is constant (computed once)
    assert rows["SGLD"][2] == pytest.approx(3.0)
    assert rows["SGRLD"][2] == pytest.approx(3.0)
    code, out, err = _run(["run", "--quick", "--no-progress", "--iters", "300", "--sampler", "sgrld",
                           "--estimator", "minibatch"])
    assert code == 0, err
    assert _table(out)["SGRLD"][2] == pytest.approx(303.0)  # logistic: one metric pass per step


def test_names_take_hyphens_or_underscores():
    from sgmc.cli import CLI_ESTIMATORS, CLI_SAMPLERS
    from sgmc.cli.parsing import _split_names

    assert _split_names(["CV_PS,adaptive_cv", "Adaptive-CV-PS"], CLI_ESTIMATORS, "--estimator", []) == [
        "cv-ps", "adaptive-cv", "adaptive-cv-ps"]
    assert _split_names(["PSGLD"], CLI_SAMPLERS, "--sampler", []) == ["psgld"]
    with pytest.raises(ValueError, match=r"--estimator: unknown name 'cv_pss'; did you mean 'cv-ps'\?"):
        _split_names(["cv_pss"], CLI_ESTIMATORS, "--estimator", [])
    code, out, err = _run([*LINEAR, "--estimator", "cv_ps"])
    assert code == 0, err
    assert list(_table(out)) == ["SGLD-CV-PS"]


def test_a_methods_row_does_not_depend_on_the_other_methods():
    def row(argv, label):
        code, out, err = _run([*LINEAR, *argv])
        assert code == 0, err
        return next(ln for ln in out.splitlines() if ln.startswith(label + " ")).split()

    alone = row(["--sampler", "psgld", "--estimator", "minibatch"], "PSGLD")
    after = row(["--sampler", "sgld,psgld", "--estimator", "svrg,minibatch"], "PSGLD")
    # every column but the wall time
    assert alone[:2] + alone[3:] == after[:2] + after[3:]


def test_output_is_a_trace_with_the_settings(tmp_path):
    path = tmp_path / "run.npz"
    code, out, err = _run([*LINEAR, "--estimator", "svrg", "--seed", "3", "--output", str(path)])
    assert code == 0, err
    trace = sgmc.Trace.load(str(path))
    assert trace.info["estimator"] == "svrg" and trace.info["n_iter"] == 300 and trace.info["burn_in"] == 150
    cmd = trace.info["command"]
    assert cmd["seed"] == 3 and cmd["model"] == "linear" and cmd["method"] == "SGLD-SVRG"
    assert cmd["argv"][-2:] == ["--output", str(path)]
    assert trace.draws.shape == (1, 150, 10)


def test_unwritable_output_fails_before_sampling(tmp_path, monkeypatch):
    from sgmc.cli import run_command

    def never(*args, **kwargs):
        raise AssertionError("the set-up started before --output was checked")

    monkeypatch.setattr(run_command, "laplace", never)
    for target, why in ((tmp_path, "is a directory"), ("/proc/sgmc-out.npz", "cannot write '/proc/sgmc-out.npz'"),
                        (tmp_path / "no" / "x.npz", "does not exist")):
        code, out, err = _run([*LINEAR, "--estimator", "minibatch", "--output", str(target)])
        assert code == 2 and out == ""
        assert err.startswith("sgmc: error: --output") and why in err and err.count("\n") == 1


def test_a_closed_pipe_does_not_lose_the_output(tmp_path):
    path = tmp_path / "piped.npz"
    cmd = (f"{sys.executable} -m sgmc run --quick --no-progress --model linear --iters 200 "
           f"--estimator minibatch --output {path} | head -1")
    proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=300, env=ENV, cwd=ROOT)
    assert proc.stdout.startswith("sgmc run: linear regression")
    assert proc.stdout.count("\n") == 1
    assert proc.stderr == "", proc.stderr  # no error, no "Exception ignored" from a late flush
    assert sgmc.Trace.load(str(path)).draws.shape == (1, 100, 10)
    # a reader gone before anything is printed (``true`` reads nothing): the file is written, the
    # command ends quietly with 141 (128 + SIGPIPE, as a shell reports a process a closed pipe ended)
    path.unlink()
    cmd = cmd.replace("| head -1", "| true; exit ${PIPESTATUS[0]}")
    proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=300, env=ENV, cwd=ROOT)
    assert proc.returncode == 141 and proc.stderr == "", proc.stderr
    assert sgmc.Trace.load(str(path)).draws.shape == (1, 100, 10)


def _interrupt(argv, wait):
    """Run ``sgmc`` in a subprocess, send SIGINT ``wait`` seconds after it starts the first method."""
    import signal
    import time

    proc = subprocess.Popen([sys.executable, "-m", "sgmc", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=ENV, cwd=ROOT)
    seen = []
    try:
        for line in proc.stderr:
            seen.append(line)
            if line.startswith("running "):
                break
        time.sleep(wait)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out, "".join(seen) + err


@pytest.mark.parametrize("phase, burn", [("burn-in", 999_000), ("sampling", 10)])
def test_ctrl_c_stops_the_whole_command(phase, burn):
    # a long first method (1e6 iterations), interrupted during its burn-in or after it; the second never runs
    code, out, err = _interrupt(["run", "--quick", "--model", "linear", "--estimator", "minibatch,svrg",
                                 "--iters", "1000000", "--burn-in", str(burn)], wait=1.5)
    assert code == 130, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines[-1] == "sgmc: interrupted"
    assert "error" not in err and "Traceback" not in err and "non-finite" not in err
    assert "running SGLD-SVRG" not in err
    row = next(ln for ln in out.splitlines() if ln.startswith("SGLD "))
    k = int(row.split("interrupted at iteration ")[1].split()[0])
    assert (k < burn) if phase == "burn-in" else (burn < k < 1_000_000)
    assert "interrupted during SGLD; not run: SGLD-SVRG" in out
