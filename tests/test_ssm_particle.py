"""Particle filters and particle score estimators on the scalar linear Gaussian model, against Kalman."""

from __future__ import annotations

import numpy as np
import pytest

from _helpers import Z_TOL, replay_rng
from sgmc import backends
from sgmc.ssm import LGSSM
from sgmc.ssm.particle import ScalarLGSSMKernel, particle_filter
from sgmc.ssm.subsequence import windows_at

PHI, SIG, TAU = 0.9, 0.7, 1.0
V0 = SIG**2 / (1 - PHI**2)
THETA = np.array([[PHI, 1 / SIG, 1 / TAU]])


@pytest.fixture(scope="module")
def series():
    """A short series and its exact log-likelihood and score (x_0 stationary, as in the kernel)."""
    T = 30
    _, y = LGSSM.simulate_scalar(backends.default_rng(3), T, (PHI, 1 / SIG, 1 / TAU), 0.0, V0)
    model = LGSSM(y, P0=V0)
    return np.asarray(y), float(model.log_lik(THETA)[0]), np.asarray(model.grad_log_lik(THETA)[0])


def _kernel(B, proposal, xp=np, dtype="float64"):
    mk = lambda v: backends.asarray(np.full(B, v, dtype=dtype), backend="numpy") if xp is np else v  # noqa: E731
    return ScalarLGSSMKernel(mk(PHI), mk(SIG), mk(TAU), proposal=proposal)


def _batch(y, B):
    return np.ascontiguousarray(np.broadcast_to(y[None, :, None], (B, y.shape[0], 1)))


@pytest.mark.parametrize("proposal", ["bootstrap", "optimal"])
@pytest.mark.parametrize("resampling,threshold", [("systematic", None), ("multinomial", None), ("residual", 0.5), ("stratified", 0.2)])
def test_likelihood_estimate_is_unbiased(series, proposal, resampling, threshold):
    """E[exp(loglik_hat)] = p(y): the mean ratio to the Kalman likelihood is 1 within its standard error."""
    y, ll, _ = series
    B = 400
    res = particle_filter(
        backends.default_rng(7), _kernel(B, proposal), _batch(y, B), 40, resampling=resampling, ess_threshold=threshold
    )
    ratio = np.exp(res.log_lik - ll)
    se = ratio.std(ddof=1) / np.sqrt(B)
    assert abs(ratio.mean() - 1.0) <= Z_TOL * se, (ratio.mean(), se)
    assert se < 0.1  # the test has power
    if threshold is not None:
        assert 0 < res.n_resampled.max() < y.shape[0]
    np.testing.assert_allclose(res.weights.sum(axis=1), 1.0)


def test_backends_match_numpy(xb, series):
    """The same seeds give the same filter on every backend (float64); float32 stays unbiased-close."""
    y, ll, g = series
    B = 8
    ref = particle_filter(backends.default_rng(1), _kernel(B, "optimal"), _batch(y, B), 64, stat_weight=np.ones((B, y.shape[0])))
    par = lambda v: xb.asarray(np.full(B, v))  # noqa: E731
    k = ScalarLGSSMKernel(par(PHI), par(SIG), par(TAU), proposal="optimal")
    got = particle_filter(replay_rng(xb, 1), k, xb.asarray(_batch(y, B)), 64, stat_weight=xb.asarray(np.ones((B, y.shape[0]))))
    ll_got, score_got = xb.to_numpy(got.log_lik), xb.to_numpy(got.score)
    if xb.float_dtype == "float64":
        np.testing.assert_allclose(ll_got, ref.log_lik, rtol=1e-10)
        np.testing.assert_allclose(score_got, ref.score, rtol=1e-8, atol=1e-8)
    else:
        # float32 draws differ; the estimates stay within a few particle standard errors of the truth
        assert np.all(np.abs(ll_got - ll) < 1.0)
        assert np.all(np.isfinite(score_got))


def test_masked_steps_are_no_ops(series):
    y, _, _ = series
    B, k = 6, 17
    Y = _batch(y, B)
    mask = np.zeros((B, y.shape[0]), dtype=bool)
    mask[:, :k] = True
    w = np.ones((B, y.shape[0]))
    full = particle_filter(backends.default_rng(4), _kernel(B, "bootstrap"), Y, 50, mask=mask, stat_weight=w)
    cut = particle_filter(backends.default_rng(4), _kernel(B, "bootstrap"), Y[:, :k], 50, stat_weight=w[:, :k])
    np.testing.assert_allclose(full.log_lik, cut.log_lik, rtol=1e-12)
    np.testing.assert_allclose(full.particles, cut.particles)
    np.testing.assert_allclose(full.score, cut.score, rtol=1e-12)


@pytest.fixture(scope="module")
def score_runs(series):
    """Replicated score estimates with the optimal proposal: path and PaRIS at N = 100 (300
    replicates), the O(N^2) smoother at N = 50 (100 replicates; its cost grows like N^2)."""
    y, _, _ = series
    out = {}
    for sm, B, N in (("path", 300, 100), ("paris", 300, 100), ("poyiadjis_n2", 100, 50)):
        res = particle_filter(
            backends.default_rng(21), _kernel(B, "optimal"), _batch(y, B), N,
            stat_weight=np.ones((B, y.shape[0])), smoother=sm,
        )
        out[sm] = res.score
    return out


@pytest.mark.parametrize("smoother", ["path", "paris", "poyiadjis_n2"])
def test_score_estimators_match_kalman_gradient(series, score_runs, smoother):
    _, _, g = series
    s = score_runs[smoother]
    se = s.std(axis=0, ddof=1) / np.sqrt(s.shape[0])
    # the particle smoothers have an O(1/N) bias; at these N with the optimal proposal it is below
    # the Monte Carlo error of the replicates, so the mean must agree within Z_TOL standard errors
    assert np.all(np.abs(s.mean(axis=0) - g) <= Z_TOL * se), (s.mean(axis=0), g, se)


def test_paris_has_lower_variance_than_path(score_runs):
    v_path = score_runs["path"].var(axis=0, ddof=1)
    v_paris = score_runs["paris"].var(axis=0, ddof=1)
    # F-ratios with 299 degrees of freedom: a ratio below 0.7 is far outside the noise (P < 1e-3)
    assert np.all(v_paris < 0.7 * v_path), (v_paris, v_path)


def test_paris_backward_draws_fall_back_to_exact(series):
    """With no accept-reject rounds every backward index comes from the exact categorical draw."""
    y, _, g = series
    B = 120
    res = particle_filter(
        backends.default_rng(2), _kernel(B, "optimal"), _batch(y, B), 40,
        stat_weight=np.ones((B, y.shape[0])), smoother="paris", max_rejection_rounds=0,
    )
    se = res.score.std(axis=0, ddof=1) / np.sqrt(B)
    assert np.all(np.abs(res.score.mean(axis=0) - g) <= Z_TOL * se)


def test_particle_window_score_matches_exact_window_score():
    """``LGSSM.window_score(method="particle")`` averages to the Kalman window score (windows with start > 0)."""
    T, S, Bf = 60, 8, 4
    _, y = LGSSM.simulate_scalar(backends.default_rng(9), T, (PHI, 1 / SIG, 1 / TAU), 0.0, V0)
    model = LGSSM(y, P0=V0)
    reps = 200
    starts = np.tile(np.array([[5, 30, 52]]), (reps, 1))
    win = windows_at(starts, T, S, Bf, M=3)
    theta = np.tile(THETA, (reps, 1))
    exact, n_ex = model.window_score(None, theta[:1], windows_at(starts[:1], T, S, Bf, M=3), method="exact")
    part, n_ev = model.window_score(backends.default_rng(5), theta, win, method="particle", n_particles=100)
    assert part.shape == (reps, 3)
    np.testing.assert_array_equal(n_ev, np.full(reps, int(np.asarray(win.length)[0].sum())))
    se = part.std(axis=0, ddof=1) / np.sqrt(reps)
    assert np.all(np.abs(part.mean(axis=0) - exact[0]) <= Z_TOL * se), (part.mean(axis=0), exact, se)


def test_errors_name_the_argument(series):
    y, _, _ = series
    with pytest.raises(ValueError, match="smoother"):
        particle_filter(0, _kernel(2, "bootstrap"), _batch(y, 2), 10, smoother="bogus")
    with pytest.raises(ValueError, match="resampling"):
        particle_filter(0, _kernel(2, "bootstrap"), _batch(y, 2), 10, resampling="bogus")
    with pytest.raises(ValueError, match="Bt"):
        particle_filter(0, _kernel(3, "bootstrap"), _batch(y, 2), 10)
    with pytest.raises(ValueError, match="ess_threshold"):
        particle_filter(0, _kernel(2, "bootstrap"), _batch(y, 2), 10, ess_threshold=2.0)
