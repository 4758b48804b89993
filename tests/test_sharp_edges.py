"""Nothing misleading: a mode finder that says when it failed, natural user models, did-you-mean errors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import sgmc
from sgmc.datasets import logistic_regression_data
from sgmc.diagnostics import rhat
from sgmc.models import LinearRegression, LogisticRegression, Model, take_rows
from sgmc import optimize
from sgmc.optimize import laplace

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def linear():
    r = np.random.default_rng(0)
    X = r.normal(size=(300, 2))
    y = X @ np.array([1.0, -1.0]) + r.normal(size=300)
    return LinearRegression(X, y)


# -- 4. the mode finder says when it failed ------------------------------------------------------------


@pytest.fixture(scope="module")
def skewed():
    """The quick start's first data set: a logistic posterior whose mode is far from the origin."""
    data = logistic_regression_data(n=10_000, dim=5, n_test=2_000, rng=0)
    return LogisticRegression(data.X, data.y)


def test_cv_starts_the_chains_at_the_mode(skewed):
    fit = laplace(skewed, 0)
    sd = np.sqrt(np.diag(np.linalg.inv(fit.precision)))
    trace = sgmc.sample(skewed, "sgld", "cv", step_size=5e-4, batch_size=100, n_iter=2, chains=2, rng=1,
                        progress=False, store_grads=True)
    # where the chains start: one step of h = 5e-4 from the centre moves them by about sqrt(h) = 0.02
    start = trace.draws[:, 0, :]
    assert np.all(np.abs(start - fit.mode) < 0.25 * sd + 3 * np.sqrt(5e-4))
    assert optimize.mode_gap(skewed, fit.mode) < 1e-6


def test_a_failed_mode_search_is_named(skewed):
    opts = {"opt_steps": 200, "polish": False}
    with pytest.warns(sgmc.ModeNotFoundWarning, match=r"stopped about [\d.e+]+ posterior standard deviations"):
        sgmc.sample(skewed, "sgld", "cv", step_size=5e-4, batch_size=100, n_iter=2, rng=1, progress=False,
                    estimator_options=opts)
    # a centre that is a stationary point raises nothing
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sgmc.sample(skewed, "sgld", "cv", step_size=5e-4, batch_size=100, n_iter=2, rng=1, progress=False)


def test_mode_gap_measures_posterior_standard_deviations(linear):
    mean, cov = linear.posterior()
    sd = np.sqrt(cov[0, 0])
    off = mean + np.array([3.0 * sd, 0.0])
    # for a Gaussian posterior the Newton decrement is the Mahalanobis distance
    expected = float(np.sqrt((off - mean) @ np.linalg.solve(cov, off - mean)))
    assert optimize.mode_gap(linear, off) == pytest.approx(expected, rel=1e-6)


def test_the_quick_start_example_converges():
    """The call of docs/quickstart.md reaches R-hat < 1.01 with default settings."""
    data = logistic_regression_data(n=10_000, dim=5, n_test=2_000, rng=3)
    model = LogisticRegression(data.X, data.y)
    trace = sgmc.sample(model, "sgld", "cv", step_size=1.5e-3, batch_size=100, n_iter=4000, chains=4, rng=1,
                        progress=False)
    assert float(np.max(rhat(trace.draws))) < 1.01


# -- 5. user models written the natural way -------------------------------------------------------------


class Poisson(Model):
    """The Poisson regression of docs/models.md, with the namespace given by the caller."""

    def __init__(self, X, y, xp):
        super().__init__(X.shape[0], X.shape[1], xp, X.dtype)
        self.X, self.y = X, y

    def log_prior(self, theta):
        return -0.05 * self.xp.sum(theta * theta, axis=-1)

    def grad_log_prior(self, theta):
        return -theta / 10.0

    def _batch(self, theta, idx):
        if idx is None:
            return theta @ self.X.T, self.y[None, :], None
        Xb = take_rows(self.xp, self.X, idx)
        return self.xp.matmul(Xb, theta[..., None])[..., 0], take_rows(self.xp, self.y, idx), Xb

    def log_lik(self, theta, idx=None):
        eta, y, _ = self._batch(theta, idx)
        return y * eta - self.xp.exp(eta)

    def grad_log_lik(self, theta, idx=None):
        eta, y, Xb = self._batch(theta, idx)
        Xb = self.X[None, ...] if Xb is None else Xb
        return (y - self.xp.exp(eta))[..., None] * Xb

    def grad_log_lik_sum(self, theta, idx=None, weights=None):
        eta, y, Xb = self._batch(theta, idx)
        r = y - self.xp.exp(eta)
        if weights is not None:
            r = r * weights
        if Xb is None:
            return r @ self.X
        return self.xp.matmul(r[:, None, :], Xb)[:, 0, :]


@pytest.mark.parametrize("how", ["array_namespace", "numpy module"])
def test_a_model_built_with_the_numpy_module_runs_every_estimator(how):
    rng = np.random.default_rng(0)
    X = np.column_stack([np.ones(4000), rng.normal(size=(4000, 2))])
    y = rng.poisson(np.exp(X @ np.array([0.5, 0.3, -0.2]))).astype(float)
    xp = sgmc.array_namespace(X, y) if how == "array_namespace" else np
    model = Poisson(X, y, xp)
    draws = {}
    for est in ("minibatch", "cv", "svrg"):
        tr = sgmc.sample(model, "sgld", est, step_size=1e-4, batch_size=100, n_iter=200, chains=2, rng=1,
                         progress=False, init=np.zeros(3) if est != "cv" else None)
        draws[est] = tr.draws
        assert np.isfinite(tr.draws).all()
    assert np.abs(draws["cv"].mean(axis=(0, 1)) - [0.5, 0.3, -0.2]).max() < 0.1


# -- 6. sharp edges --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"n_chains": 4}, TypeError, r"`n_chains`; did you mean `chains=`\?"),
        ({"stepsize": 1e-3}, TypeError, r"`stepsize`; did you mean `step_size=`\?"),
        ({"n_iters": 100}, TypeError, r"`n_iters`; did you mean `n_iter=`\?"),
        ({"rng": -1}, ValueError, r"`rng` \(a seed\) must be a non-negative integer; got -1"),
        ({"batch_size": True}, TypeError, r"`batch_size` must be a positive int or a fraction in \(0, 1\); got True"),
        ({"thin": 150}, ValueError, r"`thin`=150 keeps 1 draw\(s\)"),
    ],
)
def test_sample_names_the_mistake(linear, kwargs, error, match):
    args = {"step_size": 1e-3, "n_iter": 100, "progress": False, **kwargs}
    if "stepsize" in kwargs:
        args.pop("step_size")
    estimator = "full" if "batch_size" in kwargs else "minibatch"
    with pytest.raises(error, match=match):
        sgmc.sample(linear, "sgld", estimator, **args)


def test_options_still_reach_samplers_and_estimators(linear):
    tr = sgmc.sample(linear, "sghmc", "svrg", step_size=1e-3, n_iter=20, progress=False,
                     sampler_options={"n_leapfrog": 2}, estimator_options={"update_every": 5})
    assert tr.info["estimator"] == "svrg" and tr.n_draws == 20


@pytest.mark.parametrize(
    ("sampler", "estimator", "match"),
    [("sgdl", "minibatch", r"unknown sampler 'sgdl'; did you mean 'sgld'\?"),
     ("sgld", "minibtach", r"unknown estimator 'minibtach'; did you mean 'minibatch'\?")],
)
def test_unknown_names_get_a_suggestion(linear, sampler, estimator, match):
    with pytest.raises(ValueError, match=match):
        sgmc.sample(linear, sampler, estimator, step_size=1e-3, n_iter=10, progress=False)


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--model", "logisitc"], r"invalid choice: 'logisitc'.*did you mean 'logistic'\?"),
        (["--sampler", "sgdl"], r"unknown name 'sgdl'; did you mean 'sgld'\?"),
        (["--test-fraction", "0.3"], r"--test-fraction applies to --data; no --data file was given"),
    ],
)
def test_cli_usage_errors(capsys, argv, match):
    from sgmc.cli import main

    assert main(["run", "--quick", "--no-progress", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert __import__("re").search(match, err), err


@pytest.mark.parametrize("content", [bytes(range(256)) * 8, b"a,b\n1,\x002\n"])
def test_cli_binary_data_is_not_a_text_csv(tmp_path, capsys, content):
    from sgmc.cli import main

    path = tmp_path / "data.csv"
    path.write_bytes(content)
    assert main(["run", "--quick", "--no-progress", "--data", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "is not a text CSV file" in err


def test_cli_ctrl_c_prints_one_line_and_exits_130():
    script = textwrap.dedent("""
        import os, signal, sys
        from sgmc import cli
        from sgmc.cli import run_command

        def interrupt(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGINT)
            raise AssertionError("not interrupted")

        run_command.laplace = interrupt
        sys.exit(cli.main(["run", "--quick", "--model", "linear"]))
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 130, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("sgmc run:")]
    assert lines == ["sgmc: interrupted"]


def test_unknown_backend_gets_a_suggestion():
    with pytest.raises(ValueError, match=r"unknown backend 'troch'; did you mean 'torch'\?"):
        sgmc.backends.get_backend("troch")
