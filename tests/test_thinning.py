"""Stein thinning: the stein-thinning package and a brute-force greedy search as oracles."""

from __future__ import annotations

import math

import numpy as np
import pytest
from stein_thinning.kernel import make_precon, vfk0_imq
from stein_thinning.thinning import thin

from sgmc._array_api import array_namespace, device_of
from sgmc.diagnostics import ksd, ksd_preconditioner, stein_thin


def biased_chain(n, d, seed):
    """An autocorrelated, over-dispersed AR(1) path for target N(0, I), with exact scores -x."""
    rng = np.random.default_rng(seed)
    x = np.empty((n, d))
    x[0] = 3.0
    rho = 0.8
    for t in range(1, n):
        x[t] = rho * x[t - 1] + math.sqrt(1 - rho**2) * 1.3 * rng.normal(size=d)
    return x, -x


def greedy_brute_force(x, s, m, linv, c=1.0, beta=-0.5):
    """Riabiz et al. (2022) Algorithm 1 on the full n x n Stein kernel matrix (stein-thinning's kernel)."""
    n = x.shape[0]
    ii, jj = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    i, j = ii.ravel(), jj.ravel()
    k0 = vfk0_imq(x[i], x[j], s[i], s[j], linv, c=c * c, beta=beta).reshape(n, n)
    chosen = []
    for _ in range(m):
        obj = np.diag(k0) + 2 * k0[:, chosen].sum(axis=1)
        chosen.append(int(np.argmin(obj)))
    return np.array(chosen)


@pytest.mark.parametrize("pre", ["id", "med", "sclmed", "smpcov"])
@pytest.mark.parametrize("standardize", [False, True])
def test_identical_to_stein_thinning(pre, standardize):
    x, s = biased_chain(400, 3, seed=1)
    want = thin(x, s, 60, standardize=standardize, preconditioner=pre)
    got = stein_thin(x, s, 60, preconditioner=pre, standardize=standardize)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("c, beta", [(1.0, -0.5), (0.6, -0.3)])
def test_matches_brute_force_greedy(c, beta):
    x, s = biased_chain(150, 2, seed=2)
    linv = make_precon(x, "med")
    want = greedy_brute_force(x, s, 40, linv, c=c, beta=beta)
    got = stein_thin(x, s, 40, preconditioner="med", c=c, beta=beta)
    np.testing.assert_array_equal(got, want)


def test_user_preconditioner_and_chains():
    x, s = biased_chain(240, 2, seed=3)
    lam = np.array([[2.0, 0.3], [0.3, 0.5]])
    want = greedy_brute_force(x, s, 25, np.linalg.inv(lam))
    np.testing.assert_array_equal(stein_thin(x, s, 25, preconditioner=lam), want)
    # (chains, n, d) input: indices refer to the chain-by-chain flattening
    got = stein_thin(x.reshape(4, 60, 2), s.reshape(4, 60, 2), 25, preconditioner=lam)
    np.testing.assert_array_equal(got, want)


def test_thinned_points_have_small_ksd():
    # Greedy selection minimises the joint KSD one point at a time, so the thinned set beats the
    # standard alternatives of the same size built from the same chain (with one fixed kernel).
    x, s = biased_chain(2000, 2, seed=4)
    lam = ksd_preconditioner(x, "med")
    m = 50
    idx = stein_thin(x, s, m, preconditioner=lam)
    thinned = float(ksd(x[idx], s[idx], kind="joint", preconditioner=lam))
    regular = float(ksd(x[:: 2000 // m], s[:: 2000 // m], kind="joint", preconditioner=lam))
    tail = float(ksd(x[-m:], s[-m:], kind="joint", preconditioner=lam))
    assert thinned < 0.5 * regular
    assert thinned < 0.5 * tail
    # and every greedy step is optimal: no single swap of the last point lowers the KSD
    head = idx[:-1]
    alt = []
    for j in range(0, 2000, 97):
        pick = np.r_[head, j]
        alt.append(float(ksd(x[pick], s[pick], kind="joint", preconditioner=lam)))
    assert thinned <= min(alt) * (1 + 1e-12)


def test_backends_agree(xb):
    x, s = biased_chain(200, 3, seed=5)
    want = stein_thin(x, s, 30)
    got = stein_thin(xb.asarray(x), xb.asarray(s), 30)
    assert array_namespace(got) is array_namespace(xb.asarray(x))
    assert device_of(got) == device_of(xb.asarray(x))
    assert got.dtype == xb.xp.int64
    got = xb.to_numpy(got)
    if xb.float_dtype == "float64":
        np.testing.assert_array_equal(got, want)
    else:
        # float32 rounding may swap near-tied candidates; the selected sets must be as good
        lam = ksd_preconditioner(x, "med")
        a = float(ksd(x[got], s[got], kind="joint", preconditioner=lam))
        b = float(ksd(x[want], s[want], kind="joint", preconditioner=lam))
        assert a == pytest.approx(b, rel=1e-3)


def test_bad_input_raises():
    x, s = biased_chain(20, 2, seed=6)
    with pytest.raises(ValueError, match="`m`"):
        stein_thin(x, s, 0)
    with pytest.raises(TypeError, match="`m`"):
        stein_thin(x, s, 2.5)
    with pytest.raises(TypeError, match="`standardize`"):
        stein_thin(x, s, 3, standardize="yes")
    x2 = x.copy()
    x2[:, 1] = 1.0
    with pytest.raises(ValueError, match="constant"):
        stein_thin(x2, s, 3, standardize=True)
    with pytest.raises(ValueError, match="shape of `samples`"):
        stein_thin(x, s[:5], 3)
    with pytest.raises(ValueError, match="`beta`"):
        stein_thin(x, s, 3, beta=1.0)
