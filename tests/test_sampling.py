"""Discrete draws of :mod:`sgmc._sampling`: uniform subsets (native path and array-API twin) and
categorical draws by inverse CDF.

The array-API twin ``subsample_twin`` defines the result of a subset draw; a backend's native path
(NumPy's packed-integer sort, :func:`sgmc.backends._numpy.subsample`) must return the same indices
for the same generator state, including when short rows are drawn again. Host generators share one
PCG64 stream per seed, so the twin on array-api-strict and torch must reproduce NumPy's indices too.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

import sgmc._sampling as sampling
import sgmc.backends._numpy as numpy_backend
from sgmc.backends import default_rng
from sgmc._sampling import subsample_twin, categorical, first_distinct, subsample

# Threshold for the chi-square goodness-of-fit tests: a correct sampler fails one of them with
# probability 1e-4 at a given seed; a sampler that favours some outcomes by a few percent is rejected.
P_MIN = 1e-4

# (n_data, size, batch, replace): sparse (oversampled draws), sparse with int64 packed keys (n_data too
# large for int32 keys), one row, dense (ranked uniform keys), the full permutation, with replacement.
CASES = {
    "sparse": (100_000, 1000, 4, False),
    "sparse-int64-keys": (10**8, 100, 3, False),
    "sparse-one-row": (5000, 40, 1, False),
    "sparse-small": (1000, 10, 64, False),
    "dense": (100, 60, 5, False),
    "full": (50, 50, 3, False),
    "replace": (100, 30, 6, True),
    "replace-size-above-n": (10, 25, 4, True),
}


def _host_only(xb):
    if xb.name in ("cupy", "jax", "torch"):
        pytest.skip(f"{xb.name} draws with its own generator, not the host PCG64 stream")


# -- the native path and the twin agree index for index ---------------------------------------------
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_numpy_native_subsample_equals_the_twin(case, seed):
    n, size, batch, replace = CASES[case]
    fast = numpy_backend.subsample(default_rng(seed), n, size, batch, replace)
    twin = subsample_twin(default_rng(seed), n, size, batch, replace)
    assert isinstance(fast, np.ndarray) and fast.dtype == np.int64 and fast.shape == (batch, size)
    assert twin.dtype == np.int64
    np.testing.assert_array_equal(fast, twin)
    # and the public entry point on NumPy is the native path
    np.testing.assert_array_equal(subsample(default_rng(seed), n, size, batch, replace=replace), fast)
    # the generators are left in the same state
    a, b = default_rng(seed), default_rng(seed)
    numpy_backend.subsample(a, n, size, batch, replace)
    subsample_twin(b, n, size, batch, replace)
    np.testing.assert_array_equal(a.normal((4,)), b.normal((4,)))


@pytest.mark.parametrize("case", list(CASES))
def test_twin_on_every_backend_reproduces_numpy(xb, case):
    _host_only(xb)
    n, size, batch, replace = CASES[case]
    ref = numpy_backend.subsample(default_rng(5), n, size, batch, replace)
    twin = subsample_twin(xb.rng(5), n, size, batch, replace)
    assert twin.dtype == xb.xp.int64 and tuple(twin.shape) == (batch, size)
    np.testing.assert_array_equal(xb.to_numpy(twin), ref)
    np.testing.assert_array_equal(xb.to_numpy(subsample(xb.rng(5), n, size, batch, replace=replace)), ref)


def _counting(gen):
    """Wrap ``gen.integers`` to record each call (the twin makes one per round of draws)."""
    calls = []
    orig = gen.integers

    def integers(*args, **kwargs):
        calls.append(args)
        return orig(*args, **kwargs)

    gen.integers = integers
    return gen, calls


@pytest.mark.parametrize(("n", "size", "batch", "margin"), [(100, 20, 40, 1), (1000, 30, 50, 2), (100, 20, 1, 1)])
def test_native_and_twin_agree_when_short_rows_are_drawn_again(monkeypatch, n, size, batch, margin):
    """Shrink the oversampling margin (the module-level ``oversample`` both paths use) so that rows fall
    short of ``size`` distinct values and continue their own draws (without the generator, which both
    paths call once): both paths must still give the same indices, each row a set of distinct indices.

    (1000, 30, 50, 2) leaves one or two short rows, so the redraw is a single row (NumPy's one-row
    branch); (100, 20, 40, 1) leaves most rows short and needs several rounds.
    """
    tiny = lambda size, n_data: size + margin  # noqa: E731
    monkeypatch.setattr(sampling, "oversample", tiny)
    monkeypatch.setattr(numpy_backend, "oversample", tiny)
    shorts = []
    for seed in range(1, 5):
        # replay the first round to see which rows fall short
        first = default_rng(seed).integers(n, (batch, size + margin))
        first_rows, ok = first_distinct(first, size)
        short = int(np.sum(~ok))
        shorts.append(short)
        fast = numpy_backend.subsample(default_rng(seed), n, size, batch, False)
        gen, calls = _counting(default_rng(seed))
        twin = subsample_twin(gen, n, size, batch, False)
        np.testing.assert_array_equal(fast, twin)
        assert len(calls) == 1  # the generator is consumed alike whether or not rows fell short
        assert fast.shape == (batch, size) and fast.dtype == np.int64
        assert np.all(np.diff(np.sort(fast, axis=1), axis=1) > 0)
        assert fast.min() >= 0 and fast.max() < n
        # rows that were complete in the first round keep their first-round subset
        np.testing.assert_array_equal(fast[ok], first_rows)
    assert sum(shorts) > 0
    if batch > 1:
        assert all(0 < k < batch for k in shorts)


def test_retry_path_on_every_backend(xb, monkeypatch):
    _host_only(xb)
    tiny = lambda size, n_data: size + 1  # noqa: E731
    monkeypatch.setattr(sampling, "oversample", tiny)
    monkeypatch.setattr(numpy_backend, "oversample", tiny)
    ref = numpy_backend.subsample(default_rng(7), 100, 20, 40, False)
    gen, calls = _counting(xb.rng(7))
    twin = subsample_twin(gen, 100, 20, 40, False)
    assert len(calls) == 1
    np.testing.assert_array_equal(xb.to_numpy(twin), ref)


def test_first_distinct_keeps_draw_order():
    draws = np.array([[3, 3, 1, 4, 1, 5, 9], [2, 2, 2, 2, 7, 7, 2], [0, 1, 2, 3, 4, 5, 6]])
    rows, ok = first_distinct(draws, 3)
    np.testing.assert_array_equal(ok, [True, False, True])
    np.testing.assert_array_equal(rows, [[3, 1, 4], [0, 1, 2]])
    assert rows.dtype == np.int64


# -- the twin draws uniform subsets on every backend --------------------------------------------------
def _subset_codes(idx, n, size):
    """Index of each row's (sorted) subset among itertools.combinations(range(n), size)."""
    lookup = np.full(n**size, -1, dtype=np.int64)
    powers = n ** np.arange(size)
    for i, c in enumerate(itertools.combinations(range(n), size)):
        lookup[np.dot(c, powers)] = i
    codes = lookup[np.sort(idx, axis=1) @ powers]
    assert np.all(codes >= 0)
    return codes, math.comb(n, size)


@pytest.mark.parametrize(("n", "size"), [(12, 3), (6, 3)])  # the sparse and the dense code paths
def test_twin_without_replacement_is_a_uniform_subset(xb, n, size):
    """Every size-subset is equally likely (chi-square over all C(n, size) subsets), and each position
    in a row is uniform (random order within the row)."""
    rows = 100_000
    idx = xb.to_numpy(subsample_twin(xb.rng(4), n, size, rows, False))
    assert idx.shape == (rows, size)
    assert np.all(np.diff(np.sort(idx, axis=1), axis=1) > 0)
    codes, n_subsets = _subset_codes(idx, n, size)
    counts = np.bincount(codes, minlength=n_subsets)
    assert stats.chisquare(counts).pvalue > P_MIN
    for j in range(size):
        assert stats.chisquare(np.bincount(idx[:, j], minlength=n)).pvalue > P_MIN


def test_twin_inclusion_frequencies_are_uniform(xb):
    """Index i is in a row with probability p = size / n; the scaled Pearson statistic is chi-square
    with n - 1 degrees of freedom (see test_backends.test_subsample_inclusion_frequencies_are_uniform)."""
    n, size, rows = 50, 5, 20_000
    idx = xb.to_numpy(subsample_twin(xb.rng(5), n, size, rows, False))
    counts = np.bincount(idx.ravel(), minlength=n)
    p = size / n
    expected = rows * p
    stat = np.sum((counts - expected) ** 2 / expected) / (1 - p)
    assert stats.chi2.sf(stat, n - 1) > P_MIN


def test_twin_with_replacement_is_iid_uniform(xb):
    n, size, rows = 10, 4, 50_000
    idx = xb.to_numpy(subsample_twin(xb.rng(6), n, size, rows, True))
    counts = np.bincount(idx.ravel(), minlength=n)  # multinomial(rows * size, 1/n)
    assert stats.chisquare(counts).pvalue > P_MIN
    # duplicates occur with the birthday probability 1 - prod_k (1 - k/n)
    has_dup = np.array([len(set(r)) < size for r in idx])
    p_dup = 1 - np.prod([1 - k / n for k in range(size)])
    se = math.sqrt(p_dup * (1 - p_dup) / rows)
    assert abs(has_dup.mean() - p_dup) < 4.5 * se


# -- categorical draws by inverse CDF -------------------------------------------------------------------
def test_categorical_exact_values_1d(xb):
    # weights (1, 0, 2, 1): total 4, cumulative (1, 1, 3, 4); u * 4 in [0, 1) -> 0, [1, 3) -> 2, [3, 4) -> 3
    cdf = xb.asarray(np.cumsum([1.0, 0.0, 2.0, 1.0]))
    u = xb.asarray(np.array([0.0, 0.125, 0.2421875, 0.25, 0.5, 0.6875, 0.74609375, 0.75, 0.875, 0.99609375]))
    got = categorical(u, cdf)
    assert got.dtype == xb.xp.int64 and tuple(got.shape) == (10,)
    np.testing.assert_array_equal(xb.to_numpy(got), [0, 0, 0, 2, 2, 2, 2, 3, 3, 3])
    # any shape of u with a 1-D cdf; a zero first weight is never drawn, even at u = 0
    cdf0 = xb.asarray(np.cumsum([0.0, 1.0, 0.0, 1.0]))
    u2 = xb.asarray(np.array([[0.0, 0.25], [0.5, 0.9375]]))
    got2 = categorical(u2, cdf0)
    assert tuple(got2.shape) == (2, 2)
    np.testing.assert_array_equal(xb.to_numpy(got2), [[1, 1], [3, 3]])


def test_categorical_exact_values_2d(xb):
    # row r of u draws from row r of cdf
    w = np.array([[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 5.0, 5.0], [2.0, 0.0, 0.0, 0.0], [0.0, 3.0, 0.0, 1.0]])
    cdf = xb.asarray(np.cumsum(w, axis=1))
    u = xb.asarray(np.array([
        [0.0, 0.25, 0.5, 0.96875],
        [0.0, 0.46875, 0.5, 0.96875],
        [0.0, 0.25, 0.5, 0.96875],
        [0.0, 0.71875, 0.75, 0.96875],
    ]))
    got = categorical(u, cdf)
    assert got.dtype == xb.xp.int64 and tuple(got.shape) == (4, 4)
    np.testing.assert_array_equal(xb.to_numpy(got), [[0, 1, 2, 3], [2, 2, 3, 3], [0, 0, 0, 0], [1, 1, 3, 3]])


def test_categorical_2d_never_draws_a_zero_last_weight_at_the_top_of_the_unit_interval():
    # u + row offset rounds up to the next row's start when u is within half an ulp of 1: the draw
    # must still be the row's last category of positive weight, not the zero-weight last one
    cdf = np.cumsum(np.array([[1.0, 0.0], [1.0, 0.0]]), axis=1)
    u = np.array([[1.0 - 2.0**-53], [1.0 - 2.0**-53]])
    np.testing.assert_array_equal(categorical(u, cdf), [[0], [0]])
    # float32 uniforms at large row numbers: never a zero-weight category
    rows = 1000
    cdf32 = np.cumsum(np.tile(np.array([1.0, 0.0], dtype=np.float32), (rows, 1)), axis=1)
    u32 = np.random.default_rng(0).random((rows, 2000), dtype=np.float32)
    assert np.all(categorical(u32, cdf32) == 0)


def test_categorical_frequencies_match_the_weights_1d(xb):
    w = np.array([0.1, 0.0, 0.3, 0.2, 0.4, 0.0])
    n = 40_000
    u = xb.rng(11).uniform((n,), dtype=xb.dtype)
    k = xb.to_numpy(categorical(u, xb.asarray(np.cumsum(w))))
    counts = np.bincount(k, minlength=len(w))
    assert counts.shape == (len(w),)
    assert counts[1] == 0 and counts[5] == 0  # zero weights are never drawn
    pos = w > 0
    assert stats.chisquare(counts[pos], n * w[pos] / w.sum()).pvalue > P_MIN


def test_categorical_frequencies_match_the_weights_2d(xb):
    w = np.array([[0.1, 0.0, 0.3, 0.2, 0.4], [5.0, 1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 2.0, 0.0, 2.0]])
    n = 30_000
    u = xb.rng(12).uniform((3, n), dtype=xb.dtype)
    k = xb.to_numpy(categorical(u, xb.asarray(np.cumsum(w, axis=1))))
    assert k.shape == (3, n)
    for r in range(3):
        counts = np.bincount(k[r], minlength=5)
        assert counts.shape == (5,)
        pos = w[r] > 0
        assert np.all(counts[~pos] == 0)
        assert stats.chisquare(counts[pos], n * w[r, pos] / w[r].sum()).pvalue > P_MIN
