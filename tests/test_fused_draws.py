"""The fused blocks' straight draws (native ``"glm_fused_draws"``) against the estimators' own draws.

The reference is :meth:`FusedPlan.draw` with the native removed: the samplers' stream layout drawn
call by call through the estimator's ``subsample``. Both must give the same normals, the same indices
and leave the generator in the same state, with and without replacement, for every layout (SGLD, and
SGHMC with fresh momentum and several leapfrog steps).
"""

from __future__ import annotations

import numpy as np
import pytest

from sgmc import backends
from sgmc._dispatch import native
from sgmc.backends import _numba_fused, _numpy
from sgmc.estimators import ControlVariate, Minibatch
from sgmc.models import LogisticRegression
from sgmc.samplers import SGHMC, SGLD
from sgmc.samplers._fused import FusedPlan

pytestmark = pytest.mark.skipif(native(backends.get_backend("numpy").xp, "glm_fused_draws") is None,
                                reason="the fused draws need Numba (and SGMC_NATIVE not 0)")

R = np.random.default_rng(0)
X = R.normal(size=(600, 3))
MODEL = LogisticRegression(X, (R.random(600) < 0.5).astype(float))


def _both(sampler, est, iterations, chains, seed=11):
    plan = FusedPlan(sampler, est, None)
    r_fast, r_ref = backends.default_rng(seed), backends.default_rng(seed)
    z1, i1 = plan.draw(r_fast, iterations, chains)
    plan._fast_draws = None
    z2, i2 = plan.draw(r_ref, iterations, chains)
    return (z1, i1, r_fast), (z2, i2, r_ref)


@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("sampler", [SGLD(), SGHMC(n_leapfrog=3)], ids=["sgld", "sghmc"])
@pytest.mark.parametrize("chains", [1, 4])
def test_equal_to_the_estimators_draws(replace, sampler, chains):
    for est in (Minibatch(MODEL, 40, replace=replace), ControlVariate(MODEL, 40, centre=np.zeros(3), replace=replace)):
        (z1, i1, r1), (z2, i2, r2) = _both(sampler, est, 7, chains)
        np.testing.assert_array_equal(z1, z2)
        np.testing.assert_array_equal(i1, i2)
        assert i1.dtype == np.int64 and i1.shape == (7, sampler.n_leapfrog if hasattr(sampler, "n_leapfrog") else 1,
                                                     chains, 40)
        assert r1.numpy_generator.random() == r2.numpy_generator.random()  # the generator left alike
        if not replace:  # each row a set of distinct indices
            rows = i1.reshape(-1, 40)
            assert all(len(set(r.tolist())) == 40 for r in rows)


def test_rows_short_of_distinct_values_continue_as_subsample_does(monkeypatch):
    # no margin for repeats: most rows fall short and take subsample's continuation
    monkeypatch.setattr(_numpy, "oversample", lambda size, n_data: size)
    monkeypatch.setattr(_numba_fused, "oversample", lambda size, n_data: size)
    (z1, i1, r1), (z2, i2, r2) = _both(SGLD(), Minibatch(MODEL, 100), 20, 3)
    np.testing.assert_array_equal(i1, i2)
    assert all(len(set(r.tolist())) == 100 for r in i1.reshape(-1, 100))
    assert r1.numpy_generator.random() == r2.numpy_generator.random()


def test_dense_subsets_are_left_to_the_estimator():
    rng = backends.default_rng(0)
    assert _numba_fused.fused_draws(rng, 2, 1, 1, False, 1, 3, 600, 200, False) is NotImplemented
    assert _numba_fused.fused_draws(rng, 2, 1, 1, False, 1, 3, 600, 600, False) is NotImplemented
    z, idx = _numba_fused.fused_draws(rng, 2, 1, 1, False, 1, 3, 600, 149, False)
    assert idx.shape == (2, 1, 1, 149)
