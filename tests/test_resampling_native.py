"""The compiled residual and multinomial resampling passes: equal to their twins, and right in law.

The twins (:mod:`sgmc.ssm.resampling`) define the integers; the compiled passes split each row's merge
in two halves from N = 64 on, so the sizes around that split and rows without any random offspring
(every ``N W_i`` an integer) are checked explicitly. The law of the residual scheme is checked
independently of both: the floors ``floor(N W_i)`` are kept in every draw, and the remaining offspring,
pooled over many draws, pass a chi-square test against the normalised fractional parts.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba", reason="the compiled CPU paths need Numba (pip install 'sgmc[cpu]')")
scipy_stats = pytest.importorskip("scipy.stats")

from sgmc import backends  # noqa: E402
from sgmc.backends import _numba  # noqa: E402
from sgmc.backends._numpy import make_backend  # noqa: E402
from sgmc.ssm import resampling as R  # noqa: E402

pytestmark = pytest.mark.skipif(not _numba.available(), reason="SGMC_NATIVE=0 turns the compiled paths off")

NATIVE = {"residual": _numba.resample_residual, "multinomial": _numba.resample_multinomial}


def _weights(rng, b, n, kind):
    if kind == "uniform":  # N W_i = 1 exactly: no random offspring
        return np.ones((b, n))
    if kind == "onehot":
        w = np.zeros((b, n))
        w[np.arange(b), rng.integers(0, n, b)] = 1.0
        return w
    w = rng.random((b, n)) ** (6 if kind == "skewed" else 1)
    if kind == "sparse":
        w[rng.random((b, n)) < 0.7] = 0.0
        w[:, 0] += 1e-3
    return w / w.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("scheme", ["residual", "multinomial"])
@pytest.mark.parametrize("kind", ["flat", "skewed", "sparse", "uniform", "onehot"])
def test_compiled_pass_equals_the_twin(scheme, kind):
    rng = np.random.default_rng(17)
    for b, n in [(1, 1), (2, 3), (3, 63), (2, 64), (4, 65), (1, 1000), (3, 4097), (1, 50_001)]:
        w = _weights(rng, b, n, kind)
        u = rng.random((b, n))
        twin = R._TWINS[scheme](w, u)
        fast = NATIVE[scheme](w, u)
        assert fast is not NotImplemented
        np.testing.assert_array_equal(fast, twin, err_msg=f"{scheme} {kind} b={b} n={n}")
        assert np.all(w[np.arange(b)[:, None], fast] > 0)  # only particles with weight have offspring
    # the registered native is what resampling runs on NumPy arrays
    w = _weights(rng, 2, 300, kind)
    u = rng.random((2, 300))
    np.testing.assert_array_equal(R.ancestors(w, u, scheme), NATIVE[scheme](w, u))


def test_compiled_paths_are_registered():
    table = make_backend().native
    assert table.get("resample_residual") is _numba.resample_residual
    assert table.get("resample_multinomial") is _numba.resample_multinomial


def test_residual_keeps_floors_and_draws_the_rest_by_the_fractional_parts():
    n, reps = 200, 4000
    rng = np.random.default_rng(3)
    w = rng.random(n) ** 3
    w /= w.sum()
    nw = n * w
    floors = np.floor(nw)
    r_count = n - int(floors.sum())
    frac = nw - floors
    anc = R.resample(backends.default_rng(9), np.broadcast_to(w, (reps, n)).copy(), "residual")
    counts = np.stack([np.bincount(a, minlength=n) for a in anc])
    # the floors are deterministic: every draw keeps them, and exactly R offspring are random
    assert np.all(counts >= floors)
    extra = counts - floors
    assert np.all(extra.sum(axis=1) == r_count)
    # E[O_i] = N W_i, within Monte Carlo error
    mean = counts.mean(axis=0)
    se = np.sqrt(r_count * (frac / frac.sum()) * (1 - frac / frac.sum()) / reps) + 1e-12
    assert np.all(np.abs(mean - nw) <= 4.5 * se)
    # pooled over draws, the random offspring are Multinomial(reps * R, frac / sum frac): chi-square
    pooled = extra.sum(axis=0)
    expected = reps * r_count * frac / frac.sum()
    keep = expected > 0
    assert np.all(pooled[~keep] == 0)
    p = scipy_stats.chisquare(pooled[keep], expected[keep]).pvalue
    assert p > 1e-4, p
