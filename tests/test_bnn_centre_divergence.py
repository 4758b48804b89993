"""The BNN experiment's centre searches report a diverged search as FloatingPointError naming ``sgd_step``."""

from __future__ import annotations

import numpy as np
import pytest

from sgmc.experiments.bnn import _precision_modes, _sgd_centre
from sgmc.models import BayesianNeuralNetwork


def _tiny_bnn():
    r = np.random.default_rng(3)
    X = r.normal(size=(60, 4))
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 1).astype(int)
    return BayesianNeuralNetwork(X, y, 5, 3)


@pytest.mark.parametrize("bad", [np.inf, np.nan, 1e200])
def test_non_finite_or_overflowing_weights_raise_naming_sgd_step(bad):
    model = _tiny_bnn()
    w = np.ones(model.dim)
    w[1] = bad
    with pytest.raises(FloatingPointError, match=r"the SGD search .*diverged.*`sgd_step` \(was 0\.5\)"):
        _precision_modes(model, w, 0.5, "the SGD search")


def test_precision_modes_are_the_conditional_modes():
    model = _tiny_bnn()
    w = np.random.default_rng(1).normal(size=model.dim)
    out = _precision_modes(model, w.copy(), 0.5, "the search")
    lo = 0
    for j, m in enumerate(model.sizes):
        assert out[model.dim - 4 + j] == pytest.approx(np.log((m / 2 + 1) / (1 + np.sum(w[lo:lo + m] ** 2) / 2)))
        lo += m
    np.testing.assert_array_equal(out[:-4], w[:-4])


def test_sgd_centre_sets_the_precisions_at_their_modes():
    model = _tiny_bnn()
    init = np.random.default_rng(2).normal(size=model.dim)
    out = _sgd_centre(model, init, 40, 1e-3, 10, np.random.default_rng(5))
    assert np.all(np.isfinite(out))
    lo = 0
    for j, m in enumerate(model.sizes):
        assert out[model.dim - 4 + j] == pytest.approx(np.log((m / 2 + 1) / (1 + np.sum(out[lo:lo + m] ** 2) / 2)))
        lo += m
