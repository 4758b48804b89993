"""The host's native rank normalisation against its array-API twin and against scipy."""

import numpy as np
import pytest
from array_api_compat import numpy as xp
from scipy.special import ndtri
from scipy.stats import rankdata

from sgmc._dispatch import native
from sgmc.backends._numpy_ranks import rank_normal
from sgmc.diagnostics.ranks import _rank_normal_twin


def _cases():
    rng = np.random.default_rng(5)
    yield "continuous", rng.standard_normal((4000, 6))
    yield "ties", np.round(rng.standard_normal((3001, 4)), 1)          # many equal values per column
    yield "discrete", rng.integers(0, 3, size=(999, 2)).astype(np.float64)
    yield "float32", rng.standard_normal((700, 3)).astype(np.float32)


@pytest.mark.parametrize("name,v", list(_cases()), ids=[c[0] for c in _cases()])
def test_native_equals_twin_and_scipy(name, v):
    assert native(xp, "rank_normal") is rank_normal
    fast = rank_normal(v)
    twin = _rank_normal_twin(xp, v)
    k = v.shape[0]
    ref = ndtri((rankdata(v, method="average", axis=0) - 0.375) / (k + 0.25))
    tol = 2e-5 if v.dtype == np.float32 else 1e-13   # float32 against the float64 reference
    assert fast.dtype == v.dtype and fast.shape == v.shape
    np.testing.assert_allclose(fast, twin, rtol=0, atol=tol)
    np.testing.assert_allclose(fast, ref, rtol=0, atol=tol)


def test_declines_what_it_does_not_take():
    v = np.random.default_rng(0).standard_normal((50, 2))
    v[3, 1] = np.nan
    assert rank_normal(v) is NotImplemented                 # the twin defines ranks of NaN
    assert rank_normal(np.ones((3, 2, 2))) is NotImplemented
    assert rank_normal(np.arange(6).reshape(3, 2)) is NotImplemented   # integers: the twin's dtype rules
