"""Resampling schemes: offspring counts, variance ordering, determinism, native twins and backends."""

from __future__ import annotations

import numpy as np
import pytest

from sgmc import backends
from sgmc.backends._numpy import make_backend
from sgmc.ssm import resampling as R
from sgmc.ssm.resampling import SCHEMES, ess, resample, resample_if_low_ess, sorted_uniforms

from _helpers import Z_TOL

N = 7
REPS = 20_000
W = np.array([0.31, 0.02, 0.0, 0.17, 0.25, 0.001, 0.249])
W = W / W.sum()


def _counts(anc: np.ndarray, n: int) -> np.ndarray:
    """Offspring counts per particle of each row of ancestors (rows, n)."""
    rows = anc.shape[0]
    flat = anc + n * np.arange(rows)[:, None]
    return np.bincount(flat.ravel(), minlength=rows * n).reshape(rows, n)


@pytest.fixture(scope="module")
def counts_by_scheme():
    batch = np.broadcast_to(W, (REPS, N)).copy()
    out = {}
    for i, scheme in enumerate(SCHEMES):
        anc = resample(backends.default_rng(100 + i), batch, scheme)
        assert anc.shape == (REPS, N) and anc.dtype == np.int64
        assert np.all(np.diff(anc, axis=1) >= 0)  # ancestors come out sorted
        out[scheme] = _counts(anc, N)
    return out


@pytest.mark.parametrize("scheme", SCHEMES)
def test_offspring_mean_is_n_w(counts_by_scheme, scheme):
    c = counts_by_scheme[scheme]
    assert np.all(c.sum(axis=1) == N)
    assert np.all(c[:, 2] == 0)  # a zero weight has no offspring
    mean = c.mean(axis=0)
    se = c.std(axis=0, ddof=1) / np.sqrt(REPS)
    err = np.abs(mean - N * W)
    assert np.all(err <= Z_TOL * se + 1e-12), (scheme, mean, N * W, se)


def test_multinomial_variance_matches_closed_form(counts_by_scheme):
    c = counts_by_scheme["multinomial"]
    var = c.var(axis=0, ddof=1)
    exact = N * W * (1 - W)
    # Standard error of a sample variance: sqrt((mu4 - sigma^4) / n), with the sample moments.
    d = c - c.mean(axis=0)
    se = np.sqrt(np.maximum((d**4).mean(axis=0) - var**2, 0) / REPS)
    assert np.all(np.abs(var - exact) <= Z_TOL * se + 1e-12), (var, exact)


def test_systematic_counts_are_floor_or_ceil(counts_by_scheme):
    c = counts_by_scheme["systematic"]
    nw = N * W
    assert np.all((c == np.floor(nw)) | (c == np.ceil(nw)))
    frac = nw - np.floor(nw)
    var = c.var(axis=0, ddof=1)
    d = c - c.mean(axis=0)
    se = np.sqrt(np.maximum((d**4).mean(axis=0) - var**2, 0) / REPS) + 1e-12
    assert np.all(np.abs(var - frac * (1 - frac)) <= Z_TOL * se)


def test_stratified_counts_within_two_of_n_w(counts_by_scheme):
    c = counts_by_scheme["stratified"]
    assert np.all(np.abs(c - N * W) < 2)


def test_residual_keeps_the_integer_parts(counts_by_scheme):
    c = counts_by_scheme["residual"]
    assert np.all(c >= np.floor(N * W))


@pytest.mark.parametrize("scheme", ["residual", "stratified", "systematic"])
def test_variance_ordering_below_multinomial(counts_by_scheme, scheme):
    var = counts_by_scheme[scheme].var(axis=0, ddof=1)
    mult = N * W * (1 - W)
    c = counts_by_scheme[scheme]
    d = c - c.mean(axis=0)
    se = np.sqrt(np.maximum((d**4).mean(axis=0) - var**2, 0) / REPS)
    assert np.all(var <= mult + Z_TOL * se + 1e-12), (scheme, var, mult)
    # and strictly lower in total, by a margin far beyond the noise
    assert var.sum() < 0.6 * mult.sum()


def test_sorted_uniforms_are_order_statistics():
    rng = np.random.default_rng(5)
    n, reps = 9, 20_000
    s = sorted_uniforms(rng.random((reps, n)))
    assert np.all(np.diff(s, axis=1) >= 0) and np.all((s >= 0) & (s < 1))
    # E[U_(k)] = k / (n + 1), Var = k (n + 1 - k) / ((n + 1)^2 (n + 2))
    k = np.arange(1, n + 1)
    mean = k / (n + 1)
    sd = np.sqrt(k * (n + 1 - k) / ((n + 1) ** 2 * (n + 2)))
    assert np.all(np.abs(s.mean(axis=0) - mean) <= Z_TOL * sd / np.sqrt(reps))
    # rows shorter than n: the tail is marked with 2
    s2 = sorted_uniforms(rng.random((3, 5)), np.array([0, 2, 5]))
    assert np.all(s2[0] == 2) and np.all(s2[1, 2:] == 2) and np.all(s2[2] < 1)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_native_twin_agree(scheme):
    """The NumPy native path returns the array-API twin's integers for the same uniforms."""
    rng = np.random.default_rng(11)
    table = make_backend().native
    # without a compiled path for the scheme, NumPy's native part is the ancestors from the counts
    native = table.get("resample_" + scheme) or (
        lambda w, u: table["ancestors_from_counts"](getattr(R, scheme + "_counts")(w, u)))
    for b, n in [(1, 1), (1, 5), (4, 33), (3, 1000)]:
        w = rng.random((b, n)) ** 4
        w[:, : n // 3] = 0.0 if n > 2 else w[:, : n // 3]
        w /= w.sum(axis=1, keepdims=True)
        u = rng.random(b) if scheme == "systematic" else rng.random((b, n))
        twin = R._TWINS[scheme](w, u)
        fast = native(w, u)
        np.testing.assert_array_equal(fast, twin)
        assert np.all(w[np.arange(b)[:, None], twin] > 0)
    # uniforms at the edges of [0, 1), where rounding could push a count past N
    w = rng.random((2, 10**5))
    w /= w.sum(axis=1, keepdims=True)
    u = np.array([0.0, np.nextafter(1.0, 0.0)])
    if scheme != "systematic":
        u = np.tile(u[:, None], (1, 10**5))
    np.testing.assert_array_equal(native(w, u), R._TWINS[scheme](w, u))


@pytest.mark.parametrize("scheme", SCHEMES)
def test_backends_agree(xb, scheme):
    rng = np.random.default_rng(3)
    w = rng.random((3, 50)) ** 3
    w[:, 10:20] = 0.0
    w = (w / w.sum(axis=1, keepdims=True)).astype(xb.float_dtype)
    u = rng.random(3) if scheme == "systematic" else rng.random((3, 50))
    ref = R._TWINS[scheme](w, u)
    got = resample(None, xb.asarray(w), scheme, uniforms=xb.asarray(u, dtype=xb.xp.float64))
    np.testing.assert_array_equal(xb.to_numpy(got), ref)
    # the generator path runs on the backend and gives valid ancestors
    anc = xb.to_numpy(resample(xb.rng(1), xb.asarray(w), scheme))
    assert anc.shape == (3, 50) and np.all(w[np.arange(3)[:, None], anc] > 0)


def test_single_vector_and_known_values():
    w = np.array([0.5, 0.25, 0.125, 0.125])
    # points (k + 1 - u) / N with u = 0.5: 0.125, 0.375, 0.625, 0.875
    np.testing.assert_array_equal(resample(0, w, "systematic", uniforms=np.array([0.5])), [0, 0, 1, 2])
    np.testing.assert_array_equal(
        resample(0, w, "stratified", uniforms=np.array([0.0, 0.0, 0.0, 0.999])), [0, 0, 1, 3]
    )
    assert resample(3, w, "residual").shape == (4,)


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="scheme"):
        resample(0, np.ones(3) / 3, "bogus")
    with pytest.raises(ValueError, match="weights"):
        resample(0, np.ones((2, 2, 2)), "systematic")
    with pytest.raises(ValueError, match="threshold"):
        resample_if_low_ess(backends.default_rng(0), np.ones((1, 3)) / 3, 1.5)


def test_ess_triggered_resampling():
    w = np.array([[0.25, 0.25, 0.25, 0.25], [0.97, 0.01, 0.01, 0.01], [0.4, 0.3, 0.2, 0.1]])
    np.testing.assert_allclose(ess(w), [4.0, 1.0 / (0.97**2 + 3e-4), 1.0 / 0.3])
    anc, done = resample_if_low_ess(backends.default_rng(1), w, 0.8)
    assert done.tolist() == [False, True, False]
    np.testing.assert_array_equal(anc[[0, 2]], np.tile(np.arange(4), (2, 1)))
    anc, done = resample_if_low_ess(backends.default_rng(1), w, None)
    assert done.all()
