"""The KSD over many tiles against a brute-force O(n^2) evaluation of the Stein kernel, on every tiled path.

The compiled tiled path has three ways to take powers of B (a fast reciprocal square root for
beta = -1/2 where B's range allows it, 1 / sqrt otherwise, B^beta for other beta); each is checked at
sizes that span several row blocks and column tiles, for both kinds and both triangles.
"""

from __future__ import annotations

import numpy as np
import pytest
from array_api_compat import numpy as npx

from sgmc.diagnostics import _stein, cumulative_ksd, ksd


def brute_force_rows(x, s, a, c, beta):
    """Per-row, per-coordinate sums r_ij = sum_k k0_j(x_i, x_k) over all k, one row at a time.

    k(x, y) = (c^2 + r^T A r)^beta, r = x - y; k0_j = s_j s'_j k + s_j d_{y_j} k + s'_j d_{x_j} k
    + d_{x_j} d_{y_j} k, with d_{x_j} k = 2 beta (A r)_j B^(beta-1) and d_{x_j} d_{y_j} k =
    -2 beta A_jj B^(beta-1) - 4 beta (beta-1) (A r)_j^2 B^(beta-2).
    """
    n, d = x.shape
    out = np.empty((n, d))
    diag = np.diag(a)
    for i in range(n):
        r = x[i] - x
        ar = r @ a.T
        b = (c * c + np.sum(r * ar, axis=1))[:, None]
        dx = 2 * beta * ar * b ** (beta - 1)
        dxdy = -2 * beta * diag * b ** (beta - 1) - 4 * beta * (beta - 1) * ar**2 * b ** (beta - 2)
        out[i] = np.sum(s[i] * s * b**beta - s[i] * dx + s * dx + dxdy, axis=0)
    return out


def _sample(n, d, seed, scale=1.0):
    r = np.random.default_rng(seed)
    x = scale * r.standard_normal((n, d))
    s = -x / scale**2 + 0.3 / scale * r.standard_normal((n, d))
    return x, s


@pytest.mark.parametrize("d", [10, 40])
@pytest.mark.parametrize(
    "c,beta,scale,mode",
    # B = c^2 + |x - y|^2 up to about 1e31 in the second case, outside the fast reciprocal square root's range
    [(1.0, -0.5, 1.0, "rsqrt"), (2e14, -0.5, 3e14, "half"), (0.7, -0.3, 1.0, "pow")],
)
def test_ksd_over_many_tiles_matches_brute_force(d, c, beta, scale, mode):
    n = 600  # 5 row blocks of 128 (the last ragged), column tiles of 256 (the last ragged)
    x, s = _sample(n, d, seed=d, scale=scale)
    rows = brute_force_rows(x, s, np.eye(d), c, beta)
    per_coord = rows.sum(axis=0)
    want_sum = float(np.sum(np.sqrt(per_coord)) / n)
    want_joint = float(np.sqrt(per_coord.sum()) / n)
    assert float(ksd(x, s, c=c, beta=beta)) == pytest.approx(want_sum, rel=1e-12)
    assert float(ksd(x, s, c=c, beta=beta, kind="joint")) == pytest.approx(want_joint, rel=1e-12)
    # the lower triangle: the prefix V-statistics of the first k points for a few k
    path = cumulative_ksd(x, s, c=c, beta=beta, kind="joint")
    for k in (1, 129, 300, n):
        sub = brute_force_rows(x[:k], s[:k], np.eye(d), c, beta).sum()
        assert float(path[k - 1]) == pytest.approx(float(np.sqrt(sub) / k), rel=1e-11)
    numba_stein = pytest.importorskip("sgmc.backends._numba_stein")
    st = _stein.make_stein(npx, x, s, _stein.resolve_preconditioner(npx, x, None), c, beta, "sum")
    assert numba_stein._mode(st) == mode


def test_general_preconditioner_over_many_tiles_matches_brute_force():
    n, d = 400, 12
    x, s = _sample(n, d, seed=5)
    m = np.random.default_rng(6).standard_normal((d, d))
    lam = m @ m.T / d + 0.5 * np.eye(d)
    per_coord = brute_force_rows(x, s, np.linalg.inv(lam), 1.0, -0.5).sum(axis=0)
    got = float(ksd(x, s, preconditioner=lam))
    assert got == pytest.approx(float(np.sum(np.sqrt(per_coord)) / n), rel=1e-12)
    got = float(ksd(x, s, preconditioner=lam, kind="joint"))
    assert got == pytest.approx(float(np.sqrt(per_coord.sum()) / n), rel=1e-12)
