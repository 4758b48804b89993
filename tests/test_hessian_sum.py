"""The GLMs' summed likelihood Hessian (``hess_log_lik_sum``) and the mode search that uses it.

References: the sum of the per-datum Hessians (``hess_log_lik``) added up by NumPy; central
differences of the full gradient; the closed-form posterior precision of the linear model.
"""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from sgmc.cli import methods as cli
from sgmc._blocks import RowSource
from sgmc.models import LinearRegression, LogisticRegression
from sgmc.optimize import negative_hessian


def _data(n=900, d=5, seed=0):
    r = np.random.default_rng(seed)
    X = r.normal(size=(n, d))
    y = (r.random(n) < 1.0 / (1.0 + np.exp(-X @ np.linspace(-1, 1, d)))).astype(float)
    return X, y, X @ np.linspace(1, -1, d) + r.normal(size=n)


X, Y_BIN, Y_LIN = _data()
MODELS = {"logistic": LogisticRegression(X, Y_BIN, prior_var=3.0),
          "linear": LinearRegression(X, Y_LIN, noise_var=0.6, prior_var=3.0)}


@pytest.mark.parametrize("kind", list(MODELS))
def test_sum_equals_the_per_datum_hessians_added_up(kind):
    m = MODELS[kind]
    theta = np.random.default_rng(2).normal(size=(3, X.shape[1])) * 0.5
    got = m.hess_log_lik_sum(theta)
    ref = np.sum(m.hess_log_lik(theta, np.tile(np.arange(X.shape[0]), (3, 1))), axis=1)
    assert got.shape == (3, X.shape[1], X.shape[1])
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12 * np.max(np.abs(ref)))
    np.testing.assert_allclose(m.hess_log_lik_sum(theta[1]), ref[1:2], rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("kind", list(MODELS))
def test_negative_hessian_matches_differences_of_the_gradient(kind):
    m = MODELS[kind]
    t = np.linspace(-0.3, 0.4, X.shape[1])
    P = negative_hessian(m, t)
    eps = 1e-5
    eye = np.eye(X.shape[1])
    g = m.grad_log_posterior(np.concatenate([t + eps * eye, t - eps * eye]))
    fd = -(g[: X.shape[1]] - g[X.shape[1]:]).T / (2 * eps)
    np.testing.assert_allclose(P, 0.5 * (fd + fd.T), rtol=1e-6, atol=1e-6 * np.max(np.abs(fd)))
    if kind == "linear":  # the conjugate model's precision in closed form
        np.testing.assert_allclose(P, X.T @ X / 0.6 + eye / 3.0, rtol=1e-12)


def test_rows_read_from_disk_give_the_in_memory_sum(tmp_path):
    path = tmp_path / "X.f64"
    X.tofile(path)
    disk = LogisticRegression(np.memmap(path, dtype=np.float64, mode="r", shape=X.shape), Y_BIN, prior_var=3.0)
    assert isinstance(disk.X, RowSource)
    disk.X.block_rows = 250  # several blocks, a ragged last one
    theta = np.full((2, X.shape[1]), 0.2)
    np.testing.assert_allclose(disk.hess_log_lik_sum(theta), MODELS["logistic"].hess_log_lik_sum(theta),
                               rtol=1e-12, atol=1e-10)


def test_run_takes_a_warm_start_only_where_newton_finishes_the_search():
    args = argparse.Namespace(burn_in=None)
    m = MODELS["logistic"]
    assert cli._opt_steps(args, m, 10_000) == cli.WARM_START_STEPS
    assert cli._opt_steps(args, m, 300) == 300
    assert cli._opt_steps(args, m, 10) == 100
    assert cli._opt_steps(argparse.Namespace(burn_in=5000), m, 5000) == 5000  # --burn-in given: as asked

    class NoHessian:  # a model without Hessians: the optimiser alone finds the mode, all burn-in steps
        n_data, dim = 10, 2

    assert cli._opt_steps(args, NoHessian(), 10_000) == 10_000
