"""The experiments' control-variate centres come from sgmc.optimize.find_mode with the L-BFGS polish.

Conditional (some coordinates held fixed) is checked against the full model's gradients by brute
force; the BNN centre is stationary for the weights given lambda = 1 (the gradient checked directly,
not through the search's own report) and its log precisions sit at their conditional mode.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from sgmc.experiments._centre import Conditional, library_centre
from sgmc.models import BayesianNeuralNetwork, LinearRegression


def _tiny_bnn():
    r = np.random.default_rng(3)
    X = r.normal(size=(120, 5))
    y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(int) + (X[:, 2] > 1).astype(int)
    return BayesianNeuralNetwork(X, y, 6, 3)


def test_conditional_restricts_the_model_and_rejects_a_bad_mask():
    model = _tiny_bnn()
    r = np.random.default_rng(0)
    values = r.normal(size=model.dim)
    free = np.zeros(model.dim, dtype=bool)
    free[::3] = True
    cond = Conditional(model, free, values)
    theta = r.normal(size=(2, cond.dim))
    full = np.tile(values, (2, 1))
    full[:, free] = theta
    np.testing.assert_allclose(cond.grad_log_posterior(theta), np.asarray(model.grad_log_posterior(full))[:, free])
    idx = np.asarray([[0, 5, 7], [1, 2, 3]])
    np.testing.assert_allclose(cond.grad_log_lik_sum(theta, idx),
                               np.asarray(model.grad_log_lik_sum(full, idx))[:, free])
    np.testing.assert_allclose(cond.log_posterior(theta), model.log_posterior(full))
    with pytest.raises(ValueError, match="`free` must be a boolean mask"):
        Conditional(model, free[:-1], values)


def test_library_centre_reaches_the_exact_mode_and_reports_the_gradient():
    r = np.random.default_rng(1)
    X = r.normal(size=(400, 6))
    model = LinearRegression(X, X @ r.normal(size=6) + r.normal(size=400))
    theta, info = library_centre(model, np.zeros(6), 0, n_steps=200)
    np.testing.assert_allclose(theta, np.asarray(model.posterior()[0]), atol=1e-6)
    g = float(np.linalg.norm(np.asarray(model.grad_log_posterior(theta))))
    assert info["grad_norm"] == pytest.approx(g) and not info["warned"]
    assert info["grad_norm_rel"] <= 1e-6 and info["gap"] < 1e-3


def test_bnn_centre_is_stationary_for_the_weights_and_sets_the_precisions():
    from sgmc.experiments.bnn import _library_centre

    model = _tiny_bnn()
    init = np.random.default_rng(2).normal(size=model.dim)
    centre, info = _library_centre(model, init, 300, None, 12, np.random.SeedSequence(4))
    at_one = centre.copy()
    at_one[-4:] = 0.0
    g = np.asarray(model.grad_log_posterior(at_one[None, :]))[0, :-4]
    logp = abs(float(model.log_posterior(at_one[None, :])[0]))
    assert np.linalg.norm(g) <= 1e-6 * max(1.0, logp)
    assert info["grad_norm"] == pytest.approx(float(np.linalg.norm(g)), rel=1e-6)
    lo = 0
    for j, m in enumerate(model.sizes):
        w2 = float(np.sum(centre[lo:lo + m] ** 2))
        assert centre[model.dim - 4 + j] == pytest.approx(math.log((0.5 * m + 1.0) / (1.0 + 0.5 * w2)))
        lo += m
