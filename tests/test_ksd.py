"""Kernel Stein discrepancy against brute-force double loops, the stein-thinning package and closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.spatial.distance import pdist
from stein_thinning.kernel import make_precon, vfk0_imq
from stein_thinning.stein import ksd as st_ksd

from sgmc import backends
from sgmc._array_api import array_namespace, device_of
from sgmc.diagnostics import cumulative_ksd, ksd, ksd_preconditioner

PRECONDITIONERS = ["id", "med", "sclmed", "smpcov"]


def correlated_sample(n, d, seed, noise=0.3):
    """Correlated Gaussian points with scores of N(0, I) plus noise (a stochastic-gradient stand-in)."""
    rng = np.random.default_rng(seed)
    mix = np.eye(d) + 0.4 * np.tri(d, d, -1)
    x = rng.normal(size=(n, d)) @ mix.T + 0.5
    s = -x + noise * rng.normal(size=(n, d))
    return x, s


def brute_force(x, s, a, c=1.0, beta=-0.5):
    """Per-coordinate V-statistic sums sum_{k,k'} k0_j(x_k, x_k') by a plain double loop.

    k(x, y) = (c^2 + r^T A r)^beta with r = x - y; the Langevin Stein kernel of coordinate j is
    s_j s'_j k + s_j d_{y_j} k + s'_j d_{x_j} k + d_{x_j} d_{y_j} k with
    d_{x_j} k = 2 beta (A r)_j B^(beta-1) and
    d_{x_j} d_{y_j} k = -2 beta A_jj B^(beta-1) - 4 beta (beta-1) (A r)_j^2 B^(beta-2).
    """
    n, d = x.shape
    out = np.zeros(d)
    for i in range(n):
        for k in range(n):
            r = x[i] - x[k]
            ar = a @ r
            b = c * c + r @ ar
            dxk = 2 * beta * ar * b ** (beta - 1)
            dyk = -dxk
            dxdy = -2 * beta * np.diag(a) * b ** (beta - 1) - 4 * beta * (beta - 1) * ar**2 * b ** (beta - 2)
            out += s[i] * s[k] * b**beta + s[i] * dyk + s[k] * dxk + dxdy
    return out


def from_sums(per_coord, n, kind):
    if kind == "sum":
        return float(np.sum(np.sqrt(per_coord)) / n)
    return float(math.sqrt(per_coord.sum()) / n)


def spd(d, seed):
    rng = np.random.default_rng(seed)
    m = rng.normal(size=(d, d))
    return m @ m.T / d + 0.5 * np.eye(d)


# -- exact values ------------------------------------------------------------------------------


@pytest.mark.parametrize("beta", [-0.5, -0.3])
@pytest.mark.parametrize("pre", PRECONDITIONERS + ["matrix", "diagonal"])
def test_matches_brute_force_double_loop(pre, beta):
    x, s = correlated_sample(23, 3, seed=1)
    c = 0.8
    if pre == "matrix":
        lam = spd(3, 2)
        arg = lam
    elif pre == "diagonal":
        lam = np.diag([0.5, 2.0, 1.3])
        arg = np.diag(lam).copy()
    else:
        lam = np.linalg.inv(make_precon(x, pre))  # the package's Lambda^{-1}, inverted
        arg = pre
    sums = brute_force(x, s, np.linalg.inv(lam), c=c, beta=beta)
    for kind in ("sum", "joint"):
        got = float(ksd(x, s, c=c, beta=beta, kind=kind, preconditioner=arg, block=5))
        assert got == pytest.approx(from_sums(sums, 23, kind), rel=1e-12)


@pytest.mark.parametrize("pre", PRECONDITIONERS)
def test_agrees_with_stein_thinning(pre):
    # stein-thinning's KSD is the joint kind with k = (c' + r^T Linv r)^beta, c' = c^2, and returns
    # the cumulative sequence; its `make_precon` returns Lambda^{-1}.
    x, s = correlated_sample(120, 4, seed=3)
    linv = make_precon(x, pre)
    for c, beta in ((1.0, -0.5), (1.5, -0.7)):
        ref = st_ksd(lambda i, j: vfk0_imq(x[i], x[j], s[i], s[j], linv, c=c * c, beta=beta), 120)
        got = float(ksd(x, s, kind="joint", preconditioner=pre, c=c, beta=beta))
        assert got == pytest.approx(ref[-1], rel=1e-10)
        path = cumulative_ksd(x, s, kind="joint", preconditioner=pre, c=c, beta=beta, block=16)
        np.testing.assert_allclose(path, ref, rtol=1e-10)


def test_median_heuristic_exact_for_small_samples():
    x, _ = correlated_sample(301, 5, seed=4)
    ell = np.median(pdist(x))
    np.testing.assert_allclose(ksd_preconditioner(x, "med"), ell**2 * np.eye(5), rtol=1e-12)
    want = ell**2 / math.log(301) * np.eye(5)
    np.testing.assert_allclose(ksd_preconditioner(x, "sclmed"), want, rtol=1e-12)
    np.testing.assert_allclose(ksd_preconditioner(x, "smpcov"), np.cov(x, rowvar=False), rtol=1e-10)
    np.testing.assert_allclose(ksd_preconditioner(x, "id"), np.eye(5))


def test_median_heuristic_uses_equispaced_subsample_for_large_samples():
    # n > 1000: the median is taken over rows floor(i (n - 1) / 999), i = 0..999.
    x, _ = correlated_sample(4321, 3, seed=5)
    rows = np.linspace(0, 4320, 1000).astype(int)
    ell = np.median(pdist(x[rows]))
    np.testing.assert_allclose(ksd_preconditioner(x, "med"), ell**2 * np.eye(3), rtol=1e-12)
    full = np.median(pdist(x))
    assert abs(ell / full - 1) < 0.05  # the subsample estimate is close to the full median
    want = ell**2 / math.log(1000) * np.eye(3)
    np.testing.assert_allclose(ksd_preconditioner(x, "sclmed"), want, rtol=1e-12)


def test_precomputed_preconditioner_gives_same_value():
    x, s = correlated_sample(150, 3, seed=6)
    for pre in PRECONDITIONERS:
        lam = ksd_preconditioner(x, pre)
        for kind in ("sum", "joint"):
            a = float(ksd(x, s, kind=kind, preconditioner=pre))
            b = float(ksd(x, s, kind=kind, preconditioner=lam))
            assert a == pytest.approx(b, rel=1e-11)


@pytest.mark.parametrize("kind", ["sum", "joint"])
def test_block_size_does_not_change_result(kind):
    x, s = correlated_sample(157, 4, seed=7)
    lam = spd(4, 8)
    ref = float(ksd(x, s, kind=kind, preconditioner=lam, block=157))
    ref_path = cumulative_ksd(x, s, kind=kind, preconditioner=lam, block=157)
    for block in (1, 2, 7, 64, None, 1000):
        assert float(ksd(x, s, kind=kind, preconditioner=lam, block=block)) == pytest.approx(ref, rel=1e-12)
        path = cumulative_ksd(x, s, kind=kind, preconditioner=lam, block=block)
        np.testing.assert_allclose(path, ref_path, rtol=1e-11)


@pytest.mark.parametrize("kind", ["sum", "joint"])
@pytest.mark.parametrize("pre", ["id", "smpcov"])
def test_cumulative_matches_prefix_ksd(kind, pre):
    # A sample-dependent preconditioner is computed once from the whole sample, so prefixes use it too.
    x, s = correlated_sample(70, 3, seed=9)
    lam = ksd_preconditioner(x, pre)
    path = cumulative_ksd(x, s, kind=kind, preconditioner=pre, block=8)
    prefix = [float(ksd(x[:k], s[:k], kind=kind, preconditioner=lam)) for k in range(1, 71)]
    np.testing.assert_allclose(path, prefix, rtol=1e-11)
    first = from_sums(brute_force(x[:1], s[:1], np.linalg.inv(lam)), 1, kind)
    assert path[0] == pytest.approx(first, rel=1e-12)


def test_chains_axis():
    x, s = correlated_sample(3 * 40, 2, seed=10)
    x3, s3 = x.reshape(3, 40, 2), s.reshape(3, 40, 2)
    for kind in ("sum", "joint"):
        assert float(ksd(x3, s3, kind=kind)) == pytest.approx(float(ksd(x, s, kind=kind)), rel=1e-13)
        # cumulative over iterations: the k-th value pools the first k draws of every chain
        path = cumulative_ksd(x3, s3, kind=kind)
        assert path.shape == (40,)
        for k in (1, 7, 40):
            want = float(ksd(x3[:, :k], s3[:, :k], kind=kind))
            assert path[k - 1] == pytest.approx(want, rel=1e-11)


def test_integer_samples_are_promoted():
    x = np.arange(12).reshape(6, 2)
    v = ksd(x, -x)
    assert v.dtype == np.float64
    assert float(v) == pytest.approx(float(ksd(x.astype(float), -x.astype(float))), rel=1e-14)


# -- every backend ------------------------------------------------------------------------------


@pytest.mark.parametrize("pre", ["id", "med", "smpcov"])
def test_backends_agree(xb, pre):
    x, s = correlated_sample(90, 3, seed=11)
    # float32: rounding the inputs (relative 6e-8) and float32 tile products move the values by
    # about 4e-7 here (pair sums are accumulated in float64); 2e-5 leaves a factor of 50
    tol = 2e-5 if xb.float_dtype == "float32" else 1e-11
    X, S = xb.asarray(x), xb.asarray(s)
    for kind in ("sum", "joint"):
        want = float(ksd(x, s, kind=kind, preconditioner=pre))
        got = ksd(X, S, kind=kind, preconditioner=pre, block=32)
        assert array_namespace(got) is array_namespace(X)
        assert device_of(got) == device_of(X)
        assert got.dtype == xb.dtype
        assert tuple(got.shape) == ()
        assert float(xb.to_numpy(got)) == pytest.approx(want, rel=tol)
        path = cumulative_ksd(X, S, kind=kind, preconditioner=pre, block=32)
        assert path.dtype == xb.dtype and device_of(path) == device_of(X)
        want_path = cumulative_ksd(x, s, kind=kind, preconditioner=pre)
        np.testing.assert_allclose(xb.to_numpy(path), want_path, rtol=tol)


def test_user_preconditioner_on_backends(xb):
    x, s = correlated_sample(50, 3, seed=12)
    lam = spd(3, 13)
    tol = 2e-5 if xb.float_dtype == "float32" else 1e-11
    got = ksd(xb.asarray(x), xb.asarray(s), preconditioner=xb.asarray(lam))
    assert float(xb.to_numpy(got)) == pytest.approx(float(ksd(x, s, preconditioner=lam)), rel=tol)
    lam_xb = ksd_preconditioner(xb.asarray(x), "med")
    assert device_of(lam_xb) == device_of(xb.asarray(x))
    np.testing.assert_allclose(xb.to_numpy(lam_xb), ksd_preconditioner(x, "med"), rtol=tol)


# -- statistical behaviour ----------------------------------------------------------------------


def _gaussian_replicates(ns, reps, d, shift, seed):
    """KSD (both kinds) of iid N(shift e_1, I) samples scored against N(0, I): arrays (len(ns), reps)."""
    rng = np.random.default_rng(seed)
    out = {"sum": np.empty((len(ns), reps)), "joint": np.empty((len(ns), reps))}
    for a, n in enumerate(ns):
        for r in range(reps):
            x = rng.normal(size=(n, d))
            x[:, 0] += shift
            for kind in out:
                out[kind][a, r] = float(ksd(x, -x, kind=kind))
    return out


def test_exact_samples_match_closed_form_and_fall_like_root_n():
    # For x_1..x_n iid from pi with exact scores, E_pi[k0(x, y)] = 0 for independent x, y, so only
    # the diagonal survives in expectation: E[n KSD_joint^2] = E[k0(x, x)] = E|s|^2 c^(2 beta)
    # - 2 beta tr(A) c^(2 beta - 2) = d + d = 2d for N(0, I), A = I, c = 1, beta = -1/2 (and 2 per
    # coordinate for the per-coordinate sums). The replicates are independent, so the Monte Carlo
    # standard error of each mean is its sample sd / sqrt(reps); we allow 4.5 of them.
    ns = np.array([100, 200, 400, 800, 1600])
    reps, d = 12, 3
    res = _gaussian_replicates(ns, reps, d, shift=0.0, seed=20)
    nk2 = res["joint"] ** 2 * ns[:, None]
    mean, se = nk2.mean(), nk2.std(ddof=1) / math.sqrt(nk2.size)
    assert abs(mean - 2 * d) < 4.5 * se
    # Slope of log KSD on log n: n KSD^2 has a limiting law, so the slope is -1/2. OLS over all
    # replicates (independent) with its classical standard error; tolerance 4.5 standard errors.
    for kind in ("sum", "joint"):
        y = np.log(res[kind]).ravel()
        t = np.repeat(np.log(ns), reps)
        slope, intercept = np.polyfit(t, y, 1)
        resid = y - (slope * t + intercept)
        se_slope = math.sqrt(resid.var(ddof=2) / np.sum((t - t.mean()) ** 2))
        assert abs(slope + 0.5) < 4.5 * se_slope, (kind, slope, se_slope)
        assert se_slope < 0.05  # the test has power to see a wrong rate


def test_shifted_sample_stays_bounded_away_from_zero():
    # Samples from N(e_1, I) scored against N(0, I): KSD^2 -> E_{x,y~q} k0(x, y) > 0, so the KSD does
    # not decay. Joint kind: the log-log slope is near 0 (-0.02 here, standard error about 0.015), far
    # from -1/2. Sum kind: coordinates 2 and 3 are unbiased, so their terms still decay like n^-1/2 at
    # these n and pull the slope to about -0.1; it still stays far above -1/2. At the largest n both
    # kinds exceed their exact-sample expectations (sqrt(2d/n) joint, d sqrt(2/n) sum) many times over.
    ns = np.array([100, 400, 1600])
    reps, d = 6, 3
    res = _gaussian_replicates(ns, reps, d, shift=1.0, seed=21)
    t = np.repeat(np.log(ns), reps)
    for kind, floor in (("joint", -0.15), ("sum", -0.25)):
        slope = np.polyfit(t, np.log(res[kind]).ravel(), 1)[0]
        assert slope > floor, (kind, slope)
    assert res["joint"][-1].min() > 5 * math.sqrt(2 * d / ns[-1])
    assert res["sum"][-1].min() > 3 * d * math.sqrt(2 / ns[-1])


# -- bad input ----------------------------------------------------------------------------------


def test_bad_input_raises():
    x, s = correlated_sample(10, 2, seed=30)
    with pytest.raises(TypeError, match="samples"):
        ksd(x.tolist(), s)
    with pytest.raises(ValueError, match="shape of `samples`"):
        ksd(x, s[:, :1])
    with pytest.raises(ValueError, match=r"\(n, d\)"):
        ksd(x[:, 0], s[:, 0])
    with pytest.raises(ValueError, match="at least one point"):
        ksd(x[:0], s[:0])
    bad = s.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="scores"):
        ksd(x, bad)
    with pytest.raises(TypeError, match="real-valued"):
        ksd(x.astype(complex), s)
    with pytest.raises(ValueError, match="`c`"):
        ksd(x, s, c=0.0)
    with pytest.raises(TypeError, match="`c`"):
        ksd(x, s, c="1")
    with pytest.raises(ValueError, match="`beta`"):
        ksd(x, s, beta=0.5)
    with pytest.warns(UserWarning, match="beta"):
        ksd(x, s, beta=-1.5)
    with pytest.raises(ValueError, match="`kind`"):
        ksd(x, s, kind="l2")
    with pytest.raises(ValueError, match="`block`"):
        ksd(x, s, block=0)
    with pytest.raises(TypeError, match="`block`"):
        ksd(x, s, block=2.5)
    with pytest.raises(ValueError, match="`preconditioner`"):
        ksd(x, s, preconditioner="median")
    with pytest.raises(ValueError, match=r"\(2, 2\)"):
        ksd(x, s, preconditioner=np.eye(3))
    with pytest.raises(ValueError, match="symmetric"):
        ksd(x, s, preconditioner=np.array([[1.0, 0.5], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="positive definite"):
        ksd(x, s, preconditioner=np.array([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(ValueError, match="diagonal"):
        ksd(x, s, preconditioner=np.array([1.0, -1.0]))
    with pytest.raises(ValueError, match="distinct"):
        ksd(np.ones((5, 2)), s[:5], preconditioner="med")
    with pytest.raises(ValueError, match="at least 2"):
        ksd(x[:1], s[:1], preconditioner="smpcov")
    with pytest.raises(ValueError, match="`kind`"):
        ksd_preconditioner(x, "cov")


def test_mixed_libraries_and_devices_raise():
    pytest.importorskip("array_api_strict")
    import array_api_strict as strict

    x, s = correlated_sample(8, 2, seed=31)
    sx = backends.asarray(x, backend="array_api_strict")
    with pytest.raises(TypeError, match="scores"):
        ksd(sx, s)
    s1 = backends.asarray(s, backend="array_api_strict", device=strict.Device("device1"))
    with pytest.raises(ValueError, match="device"):
        ksd(sx, s1)
    with pytest.raises(TypeError, match="preconditioner"):
        ksd(sx, backends.asarray(s, backend="array_api_strict"), preconditioner=np.eye(2))


def test_package_exports_functions():
    # Importing a submodule binds it on the package; the package must still hand out the functions.
    import importlib

    importlib.import_module("sgmc.diagnostics.ess")
    importlib.import_module("sgmc.diagnostics.metrics")
    import sgmc.diagnostics as diagnostics

    for name in diagnostics.__all__:
        assert callable(getattr(diagnostics, name)), name
    from sgmc.diagnostics import ess

    assert callable(ess)
