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

from sgmc.cli import main

from _helpers import Z_TOL


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _table(stdout: str) -> dict:
    """Rows of the printed table by method: {method: (h, time, passes, log_loss, mean_error)}."""
    lines = stdout.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.split()[:2] == ["method", "h"])
    rows = {}
    for ln in lines[start + 2:]:
        if not ln.strip():
            break
        cells = ln.split()
        assert len(cells) == 6, ln
        rows[cells[0]] = tuple(float(c) for c in cells[1:])
    return rows


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
    rows = _table(quick_run["out"])
    assert list(rows) == ["SGLD", "SGLD-CV"]
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
    with np.load(quick_run["npz"]) as data:
        assert data["draws_SGLD"].shape == (1, 1000, 10)
        assert data["draws_SGLD-CV"].shape == (1, 1000, 10)
        assert data["reference_mean"].shape == (10,)
        table = json.loads(str(data["table"]))
    assert [r["method"] for r in table] == ["SGLD", "SGLD-CV"]


def test_entry_point_subprocess():
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-m", "sgmc", "run", "--quick", "--no-progress"],
        capture_output=True, text=True, timeout=300, env=env, cwd=root,
    )
    assert proc.returncode == 0, proc.stderr
    rows = _table(proc.stdout)
    assert set(rows) == {"SGLD", "SGLD-CV"}


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
    with np.load(npz) as data:
        ref = data["reference_mean"]
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
                           "--iters", "600", "--batch-size", "50", "--seed", "1"])
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
        (["run", "--backend", "jax"], "argument --backend: invalid choice"),
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
