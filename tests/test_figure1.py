"""The review's Figure 1: KSD picks h = 0.1, ESS prefers h = 1 (Nemeth and Fearnhead 2021, section 4).

Target N(0, Sigma) with Sigma = P^T diag(2, 1) P (P the rotation by pi/4); SGLD with the exact gradient
plus N(0, 0.01 I) noise; step sizes 1e-3, 1e-2, 1e-1, 1; 10^4 iterations from theta = (0, 0), thinned
to 1000 draws; KSD (eq. 13, exact scores) and ESS (minimum over the two coordinates) of each chain.
The paper averages 10 replicates; here every chain of one run is a replicate.
"""

import math
import warnings

import numpy as np
import pytest

import sgmc
from sgmc.diagnostics import ksd
from sgmc.diagnostics.ess import ess
from sgmc.estimators import NoisyGradient
from sgmc.models import GaussianTarget

STEPS = (1e-3, 1e-2, 1e-1, 1.0)


def figure1(replicates, seed):
    """Per-replicate KSD and ESS for each step size: dict h -> (ksd array, ess array)."""
    target = GaussianTarget.review_example()
    noisy = NoisyGradient(target, noise_sd=0.1)
    out = {}
    for i, h in enumerate(STEPS):
        with warnings.catch_warnings():  # the small steps have not mixed (sgmc.MixingWarning): the figure's point
            warnings.simplefilter("ignore", sgmc.MixingWarning)
            trace = sgmc.sample(target, "sgld", noisy, step_size=h, n_iter=10_000, thin=10, chains=replicates,
                                init=np.zeros(2), rng=seed * 100 + i, store_grads="full", progress=False)
        assert trace.draws.shape == (replicates, 1000, 2)
        k = np.array([float(ksd(trace.draws[c], trace.grads[c], kind="sum")) for c in range(replicates)])
        e = np.asarray(ess(trace.draws, per_chain=True)).min(axis=1)
        out[h] = (k, e)
    return out


def summary(values):
    """Mean and standard error of the mean over replicates."""
    return values.mean(), values.std(ddof=1) / math.sqrt(values.size)


def check_orderings(res, z):
    ksd_stats = {h: summary(res[h][0]) for h in STEPS}
    ess_stats = {h: summary(res[h][1]) for h in STEPS}
    # KSD: h = 0.1 has the smallest mean, and every other step size is worse by more than z standard
    # errors of the difference of two independent replicate means.
    best_k, se_k = ksd_stats[0.1]
    for h in STEPS:
        if h != 0.1:
            m, se = ksd_stats[h]
            assert m - best_k > z * math.hypot(se, se_k), (h, ksd_stats)
    # too small a step has not explored in the budget: KSD falls as h grows to 0.1
    assert ksd_stats[1e-3][0] > ksd_stats[1e-2][0] > ksd_stats[1e-1][0]
    # ESS: h = 1 has the largest mean, by the same margin rule
    best_e, se_e = ess_stats[1.0]
    for h in STEPS[:-1]:
        m, se = ess_stats[h]
        assert best_e - m > z * math.hypot(se, se_e), (h, ess_stats)
    return ksd_stats, ess_stats


def test_figure1_ksd_picks_0p1_and_ess_picks_1():
    # 40 replicates. The closest call is KSD at h = 1 against h = 0.1: over seeds 0-5 the gap in the
    # means was 0.013-0.026 and 2.6-6.3 standard errors of the difference (typically 5). Asking for 2.5
    # keeps the test meaningful (the gap is several times the Monte Carlo error of the averages) and
    # stable under changes to the random streams (a miss needs a 2.5-sd fluctuation). Every other
    # comparison clears it by a factor of 10 or more.
    res = figure1(replicates=40, seed=0)
    check_orderings(res, z=2.5)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1, 4))
def test_figure1_replication_study(seed):
    # 200 replicates per step size and seed: the orderings hold with a margin of 5 standard errors
    # (expected about 11), and the mean ESS
    # per coordinate matches the closed form for the thinned chain. In the eigenbasis of Sigma each
    # component is AR(1) with coefficient a_j = 1 - h / (2 sigma_j^2) per step (review eq. 8), so
    # A_j = a_j^10 per kept draw, and each coordinate gives the components equal weight, with
    # stationary variances c_j (review section 2.5). Then tau = sum_j c_j (1 + A_j) / (1 - A_j) / sum_j c_j
    # and ESS = 1000 / tau. Tolerance: 4 standard errors plus 5% for the estimator's finite-sample
    # bias and the transient from theta = 0 (both a few percent at these settings).
    res = figure1(replicates=200, seed=seed)
    check_orderings(res, z=5.0)
    target = GaussianTarget.review_example()
    noisy = NoisyGradient(target, noise_sd=0.1)
    for h in (0.1, 1.0):
        sig2 = np.array([2.0, 1.0])
        c = sig2 * (1 + h * 0.01 / 4) / (1 - h / (4 * sig2))
        a = (1 - h / (2 * sig2)) ** 10
        tau = np.sum(c * (1 + a) / (1 - a)) / np.sum(c)
        trace = sgmc.sample(target, "sgld", noisy, step_size=h, n_iter=10_000, thin=10, chains=200,
                            init=np.zeros(2), rng=seed * 1000 + int(10 * h), progress=False)
        e = np.asarray(ess(trace.draws, per_chain=True))         # (chains, 2)
        for j in range(2):
            m, se = summary(e[:, j])
            assert abs(m - 1000 / tau) < 4 * se + 0.05 * 1000 / tau, (h, j, m, 1000 / tau)
