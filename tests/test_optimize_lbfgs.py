"""The L-BFGS polish of the mode search, for dimensions above POLISH_MAX_DIM (no dim x dim systems).

Checked against a posterior whose mode is known in closed form (Bayesian linear regression, the
conjugate posterior mean), at a dimension where find_mode's default does not polish.
"""

from __future__ import annotations

import numpy as np
import pytest

from sgmc.models import LinearRegression
from sgmc.optimize import POLISH_MAX_DIM, find_mode, lbfgs, mode_gap

DIM = POLISH_MAX_DIM + 100


@pytest.fixture(scope="module")
def problem():
    r = np.random.default_rng(7)
    X = r.normal(size=(3 * DIM, DIM))
    y = X @ r.normal(size=DIM) + r.normal(size=3 * DIM)
    model = LinearRegression(X, y)
    return model, np.asarray(model.posterior()[0])


def test_find_mode_polished_by_lbfgs_above_polish_max_dim_reaches_the_exact_mode(problem):
    model, exact = problem
    rough = find_mode(model, 0, np.zeros(DIM), n_steps=300, check=False, progress=False)
    rough_gap = mode_gap(model, rough, details=True)
    theta = find_mode(model, 0, np.zeros(DIM), n_steps=300, polish="lbfgs", progress=False)
    gap = mode_gap(model, theta, details=True)
    logp = abs(float(model.log_posterior(theta)))
    # the gradient at the returned point is below lbfgs's tolerance, and the point is the mode
    assert gap["grad_norm"] <= 1e-6 * logp
    assert np.max(np.abs(theta - exact)) < 1e-5
    # without the polish the search stops well away: the check reports it honestly
    assert rough_gap["grad_norm"] > 1e3 * gap["grad_norm"]
    assert rough_gap["kind"] == gap["kind"] and gap["kind"] in ("newton", "bound")
    assert gap["gap"] == pytest.approx(mode_gap(model, theta))


def test_lbfgs_from_far_counts_its_passes_and_returns_the_gradient_norm(problem):
    model, exact = problem
    passes = []
    theta, steps, norm = lbfgs(model, np.full(DIM, 3.0), passes=passes)
    assert np.max(np.abs(theta - exact)) < 1e-5
    g = np.asarray(model.grad_log_posterior(theta))
    assert norm == pytest.approx(float(np.linalg.norm(g)), rel=1e-9)
    # quasi-Newton: tens of steps on this quadratic (steepest ascent with line search needs hundreds)
    assert 1 <= steps <= 60 and passes[0] >= 2 * steps + 2


def test_bad_polish_is_named():
    model = LinearRegression(np.ones((4, 2)), np.ones(4))
    with pytest.raises(ValueError, match="`polish` must be"):
        find_mode(model, 0, np.zeros(2), n_steps=10, polish="bfgs", progress=False)
