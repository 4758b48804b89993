"""Chains that run away are reported (sgmc.diagnostics.runaway), and healthy ones are not.

Both directions: stationary chains, slowly mixing ones and random walks (the worst case for the growth
statistic) are never flagged; geometric growth and draws far outside a known posterior are, with the
chain and the iteration where it shows, by :func:`find_runaway`, by :func:`sgmc.sample` (a
:class:`sgmc.RunawayChainWarning`) and in ``trace.info["runaway"]``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import sgmc
from sgmc.diagnostics.runaway import GROWTH, find_runaway
from sgmc.models import GaussianTarget


def _ar1(rng, n, d, phi, reps):
    """``reps`` stationary AR(1) chains (phi < 1) or random walks (phi = 1), shape (reps, n, d)."""
    e = rng.standard_normal((reps, n, d))
    if phi == 1.0:
        return np.cumsum(e, axis=1)
    x = np.empty_like(e)
    x[:, 0] = e[:, 0] / np.sqrt(1.0 - phi * phi)
    for t in range(1, n):
        x[:, t] = phi * x[:, t - 1] + e[:, t]
    return x


@pytest.mark.parametrize("phi", [0.0, 0.9, 0.99, 0.999, 1.0])
@pytest.mark.parametrize("d", [1, 10])
def test_healthy_and_unmixed_chains_are_not_flagged(phi, d):
    rng = np.random.default_rng(int(1000 * phi) + d)
    reps = 400 if d == 1 else 100
    draws = _ar1(rng, 400, d, phi, reps)
    assert find_runaway(draws, range(1000, 1400)) == []


def test_random_walks_stay_far_below_the_threshold():
    # 4,000 random walks in one dimension: none comes within a factor 2 of the growth threshold
    rng = np.random.default_rng(7)
    draws = np.cumsum(rng.standard_normal((4000, 256, 1)), axis=1)
    assert find_runaway(draws, range(256), growth=GROWTH / 2) == []


def test_geometric_growth_is_flagged_with_chain_and_iteration():
    rng = np.random.default_rng(3)
    n = 1600
    draws = rng.standard_normal((3, n, 4))
    draws[1] *= np.exp(np.linspace(0.0, 12.0, n))[:, None]  # chain 1 grows e^12-fold through the run
    iterations = list(range(5000, 5000 + 2 * n, 2))
    found = find_runaway(draws, iterations)
    assert [(r.chain, r.kind) for r in found] == [(1, "growth")]
    # the spread passes 50 times its early level near 12 t / n = log(50) + the early level (t/n ~ 0.33 + 0.12)
    it = found[0].iteration
    assert iterations[int(0.3 * n)] <= it <= iterations[int(0.75 * n)]
    assert found[0].factor > GROWTH


def test_draws_far_outside_the_reference_are_flagged():
    rng = np.random.default_rng(5)
    cov = np.array([[2.0, 0.5], [0.5, 1.0]])
    mu = np.array([1.0, -1.0])
    draws = rng.multivariate_normal(mu, cov, size=(4, 800))
    precision = np.linalg.inv(cov)
    assert find_runaway(draws, range(800), centre=mu, precision=precision) == []
    # over-dispersed by 5x in sd (a biased sampler, not a runaway): still not flagged
    wide = mu + 5.0 * (draws - mu)
    assert find_runaway(wide, range(800), centre=mu, precision=precision) == []
    # chain 2 jumps 1000 sds away at its draw 300 and wanders there
    draws[2, 300:] += np.array([1000.0 * np.sqrt(2.0), 0.0])
    found = find_runaway(draws, range(100, 900), centre=mu, precision=precision)
    assert [(r.chain, r.kind, r.iteration) for r in found] == [(2, "scale", 400)]


def test_find_runaway_checks_its_arguments():
    with pytest.raises(ValueError, match="draws"):
        find_runaway(np.zeros((10, 3)), range(10))
    with pytest.raises(ValueError, match="iterations"):
        find_runaway(np.zeros((1, 10, 3)), range(9))


def test_sample_warns_about_a_chain_that_grows_without_overflowing():
    # SGLD on N(0, 1) with the exact gradient is theta' = (1 - h/2) theta + sqrt(h) z: unstable for h > 4.
    # At h = 4.02 the chains grow by 1% per step, e^20 in 2,000 steps: finite, but not the posterior.
    target = GaussianTarget(np.zeros(1), np.eye(1))
    with pytest.warns(sgmc.RunawayChainWarning, match=r"chain 0 runs away from iteration \d+") as rec:
        trace = sgmc.sample(target, "sgld", "full", step_size=4.02, n_iter=2000, burn_in=200, chains=2,
                            init=np.zeros((2, 1)), rng=0, progress=False)
    assert bool(np.all(np.isfinite(trace.draws)))
    found = trace.info["runaway"]
    assert [r["chain"] for r in found] == [0, 1]
    assert all(r["kind"] == "growth" and 200 <= r["iteration"] < 2000 for r in found)
    assert "step_size=4.02" in str(rec[0].message)


def test_sample_is_quiet_on_healthy_runs():
    target = GaussianTarget(np.zeros(3), np.diag([1.0, 0.1, 0.01]))
    with warnings.catch_warnings():
        warnings.simplefilter("error", sgmc.RunawayChainWarning)
        # the slow coordinate (variance 1, h = 0.01: autocorrelation time ~ 400 iterations) has a bulk ESS
        # near 50 in these runs: not mixed (sgmc.MixingWarning, tests/test_mixing_flags.py), not running away
        warnings.simplefilter("ignore", sgmc.MixingWarning)
        for h, init in ((0.01, None), (0.015, np.full((4, 3), 30.0))):  # stationary; converging from far out
            trace = sgmc.sample(target, "sgld", "full", step_size=h, n_iter=3000, burn_in=0, chains=4,
                                init=init, rng=1, progress=False)
            assert trace.info["runaway"] == []
