"""Per-variable kernel Stein discrepancy (the SSM papers' tables: log10 KSD per variable plus TOTAL)."""

import math

import numpy as np
import pytest

from sgmc.diagnostics import ksd, ksd_by_variable


def brute_imq_ksd(x, s, c=1.0, beta=-0.5):
    """Joint IMQ KSD V-statistic written out over all pairs (n x n x d), for small n."""
    n, d = x.shape
    diff = x[:, None, :] - x[None, :, :]
    r2 = np.sum(diff**2, axis=-1)
    base = c**2 + r2
    k = base**beta
    dk = 2 * beta * base ** (beta - 1)                     # grad_x k = dk (x - y), grad_y k = -dk (x - y)
    term1 = (s @ s.T) * k
    term2 = np.einsum("id,ijd->ij", s, -diff * dk[..., None])
    term3 = np.einsum("jd,ijd->ij", s, diff * dk[..., None])
    trace = -2 * beta * (d * base ** (beta - 1) + 2 * (beta - 1) * r2 * base ** (beta - 2))
    return math.sqrt(np.sum(term1 + term2 + term3 + trace)) / n


def test_per_coordinate_equals_brute_force_and_total_is_the_sum():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(150, 3)) * np.array([1.0, 2.0, 0.5])
    s = -x / np.array([1.0, 4.0, 0.25])                     # scores of N(0, diag(1, 4, 0.25))
    res = ksd(x, s, kind="per_coordinate")
    want = [brute_imq_ksd(x[:, [j]], s[:, [j]]) for j in range(3)]
    np.testing.assert_allclose(res.per_variable, want, rtol=1e-10)
    assert float(res.total) == pytest.approx(sum(want), rel=1e-12)
    assert list(res.log10()) == ["x[0]", "x[1]", "x[2]", "TOTAL"]
    # a block of coordinates is one variable with the joint kernel on its coordinates
    blocks = ksd_by_variable(x, s, {"a": [0, 2], "b": [1]})
    assert blocks.names == ["a", "b"]
    assert float(blocks.per_variable[0]) == pytest.approx(brute_imq_ksd(x[:, [0, 2]], s[:, [0, 2]]), rel=1e-10)


def test_the_biased_variable_stands_out():
    # Draws from N(0, I) scored against N(m, I) with m = (0.5, 0, 0): only the first variable's KSD grows.
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 400, 3))
    m = np.array([0.5, 0.0, 0.0])
    res = ksd(x, -(x - m), kind="per_coordinate")
    v = np.asarray(res.per_variable)
    ok = ksd(x, -x, kind="per_coordinate").per_variable
    assert v[0] > 3 * max(v[1], v[2])
    assert v[0] > 3 * float(ok[0])
    np.testing.assert_allclose(v[1:], np.asarray(ok)[1:], rtol=1e-12)


def test_backends(xb):
    rng = np.random.default_rng(2)
    x = rng.normal(size=(200, 2))
    res = ksd_by_variable(xb.asarray(x), xb.asarray(-x), preconditioner="med")
    ref = ksd_by_variable(x, -x, preconditioner="med")
    tol = 1e-9 if xb.float_dtype == "float64" else 1e-4
    np.testing.assert_allclose(xb.to_numpy(res.per_variable), ref.per_variable, rtol=tol)
    with pytest.raises(ValueError, match="groups"):
        ksd_by_variable(x, -x, [[0, 5]])
