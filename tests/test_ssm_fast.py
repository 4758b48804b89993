"""Fast exact recursions of sgmc.ssm: compiled natives and parallel-in-time scans against their twins.

The sequential array-API recursions define the results; the Numba loops (``hmm_messages``,
``kalman_stats``) and the associative scan of HMM message products must reproduce them to rounding,
batched windows must reach them as one batch, and the fast paths are checked against hmmlearn and
statsmodels as independent references and against finite differences of the log-likelihood.
"""

from __future__ import annotations

import numpy as np
import pytest
from array_api_compat import numpy as npx

from sgmc import backends
from sgmc._dispatch import native
from sgmc.backends import _numba
from sgmc.ssm import LGSSM, Buffered, GaussianHMM, HMMParams, LGSSMParams, kalman_loglik, kalman_stats
from sgmc.ssm import hmm as hmm_mod
from sgmc.ssm import kalman as kalman_mod
from sgmc.ssm import kalman_scan
from sgmc.ssm.hmm_scan import messages_scan, prefix_products

try:
    from sgmc.backends import _numba_ssm

    HAVE_NATIVE = _numba.available() and native(np, "kalman_stats") is not None
except ImportError:  # pragma: no cover - Numba missing
    HAVE_NATIVE = False

needs_native = pytest.mark.skipif(not HAVE_NATIVE, reason="the compiled paths need Numba (pip install 'sgmc[cpu]')")


@pytest.fixture
def twin_only():
    """Run the array-API code (the compiled paths switched off) inside the test."""
    old = _numba.set_enabled(False)
    yield
    _numba.set_enabled(old)


def hmm_inputs(rng, b, L, K, masked=False):
    Pi = rng.dirichlet(np.ones(K) * 0.7, size=(b, K))
    logp = 4.0 * rng.standard_normal((b, L, K))
    if masked:
        logp = np.where((rng.random((b, L)) < 0.8)[..., None], logp, 0.0)
    p = np.exp(logp - logp.max(axis=-1, keepdims=True))
    return Pi, p, rng.dirichlet(np.ones(K), size=b), rng.random((b, L))


def random_lgssm(rng, b, n, m):
    A = 0.5 * rng.standard_normal((b, n, n)) / np.sqrt(n)
    Q0 = rng.standard_normal((b, n, n))
    R0 = rng.standard_normal((b, m, m))
    Q = Q0 @ np.swapaxes(Q0, -1, -2) + 0.5 * np.eye(n)
    R = R0 @ np.swapaxes(R0, -1, -2) + 0.3 * np.eye(m)
    return A, Q, rng.standard_normal((b, m, n)), R


def assert_close_all(got, want, rtol):
    for g, w in zip(got, want):
        g, w = backends.to_numpy(g), backends.to_numpy(w)
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * max(1.0, float(np.abs(w).max())))


# -- HMM ------------------------------------------------------------------------------------------


@needs_native
@pytest.mark.parametrize("b,L,K", [(1, 1, 2), (3, 40, 3), (2, 257, 4)])
@pytest.mark.parametrize("weighted", [False, True])
def test_hmm_native_equals_twin(b, L, K, weighted):
    Pi, p, p0, w = hmm_inputs(np.random.default_rng(L + K), b, L, K, masked=True)
    w = w if weighted else None
    fast = _numba_ssm.hmm_messages(Pi, p, p0, w)
    assert fast is not NotImplemented
    assert_close_all(fast, hmm_mod._messages_twin(npx, Pi, p, p0, w), rtol=1e-12)


@pytest.mark.parametrize("L", [1, 2, 37, 130])
@pytest.mark.parametrize("weighted", [False, True])
def test_hmm_scan_equals_twin(xb, L, weighted):
    Pi, p, p0, w = hmm_inputs(np.random.default_rng(L), 2, L, 3)
    Pi, p, p0, w = (xb.asarray(a) for a in (Pi, p, p0, w))
    w = w if weighted else None
    got = messages_scan(Pi, p, p0, w)
    want = hmm_mod._messages_twin(xb.xp, Pi, p, p0, w)
    assert_close_all(got, want, rtol=200 * xb.eps * max(1, np.log2(L)))


def test_prefix_products_are_the_running_products():
    rng = np.random.default_rng(5)
    M = rng.random((2, 11, 3, 3)) + 0.1
    for reverse in (False, True):
        P, s = prefix_products(M, reverse=reverse)
        for t in range(11):
            want = np.eye(3)[None]
            for u in (range(t, 11) if reverse else range(t + 1)):
                want = want @ M[:, u]
            np.testing.assert_allclose(P[:, t] * np.exp(s[:, t])[:, None, None], want, rtol=1e-12)
            np.testing.assert_allclose(P[:, t].sum(axis=(-2, -1)), 1.0, rtol=1e-14)


def _hmm_params(rng, K, m):
    Pi = np.full((K, K), 0.15 / (K - 1)) + (0.85 - 0.15 / (K - 1)) * np.eye(K)
    mu = 2.0 * rng.standard_normal((K, m))
    S0 = rng.standard_normal((K, m, m))
    Sigma = S0 @ np.swapaxes(S0, -1, -2) + 0.5 * np.eye(m)
    return Pi, mu, Sigma


@pytest.mark.parametrize("path", ["native", "scan", "twin"])
def test_hmm_forward_backward_matches_hmmlearn(monkeypatch, path):
    hmm = pytest.importorskip("hmmlearn.hmm")
    if path == "native" and not HAVE_NATIVE:
        pytest.skip("the compiled paths need Numba")
    if path == "twin":
        monkeypatch.setattr(hmm_mod, "SCAN_MIN_LENGTH", 10**9)
    rng = np.random.default_rng(11)
    K, m = 3, 2
    T = 400
    Pi, mu, Sigma = _hmm_params(rng, K, m)
    y = rng.standard_normal((T, m)) * 2.0
    p0 = rng.dirichlet(np.ones(K))
    ref = hmm.GaussianHMM(K, covariance_type="full")
    ref.startprob_ = p0 @ Pi  # sgmc's p0 is the law of z_0, one step before y_1
    ref.transmat_, ref.means_, ref.covars_ = Pi, mu, Sigma
    ll_ref, post_ref = ref.score_samples(y)
    psi = np.linalg.cholesky(np.linalg.inv(Sigma))
    logp = hmm_mod._log_emission(npx, y[None], mu[None], psi[None])
    old = _numba.set_enabled(path == "native")
    try:
        ll, gamma, N, G = hmm_mod.forward_backward(Pi[None], logp, p0[None])
    finally:
        _numba.set_enabled(old)
    np.testing.assert_allclose(ll[0], ll_ref, rtol=1e-10)
    np.testing.assert_allclose(gamma[0], post_ref, atol=1e-9)
    np.testing.assert_allclose(G[0], post_ref.sum(axis=0), rtol=1e-9)
    np.testing.assert_allclose(N[0].sum(), T, rtol=1e-12)


def test_hmm_dispatch_runs_the_scan_for_few_long_series(monkeypatch):
    calls = []

    def record(*args):
        calls.append(args[1].shape)
        return messages_scan(*args)

    monkeypatch.setattr(hmm_mod, "messages_scan", record)
    rng = np.random.default_rng(0)
    old = _numba.set_enabled(False)
    try:
        for b, L in ((2, 500), (1, 8), (64, 40)):  # scan; too short; many windows (64 * 6 > SCAN_MAX_WORK)
            Pi, p, p0, w = hmm_inputs(rng, b, L, 3)
            hmm_mod.messages(npx, Pi, p, p0, w)
    finally:
        _numba.set_enabled(old)
    assert calls == [(2, 500, 3)]


def _hmm_model(T=300, K=3, m=2, seed=2):
    rng = np.random.default_rng(seed)
    Pi, mu, Sigma = _hmm_params(rng, K, m)
    model = GaussianHMM(rng.standard_normal((T, m)), K)
    theta = model.unconstrain(HMMParams(Pi, mu, Sigma))
    return model, np.stack([theta, theta + 0.1 * rng.standard_normal(theta.shape)])


def test_hmm_gradient_fast_paths_agree_and_match_finite_differences(monkeypatch):
    model, theta = _hmm_model()
    ll, g = model.log_lik_and_grad(theta)  # the native where Numba is installed
    old = _numba.set_enabled(False)
    try:
        ll_scan, g_scan = model.log_lik_and_grad(theta)  # T = 300: the scan
        monkeypatch.setattr(hmm_mod, "SCAN_MIN_LENGTH", 10**9)
        ll_twin, g_twin = model.log_lik_and_grad(theta)  # the sequential twin
    finally:
        _numba.set_enabled(old)
    for ll_x, g_x in ((ll, g), (ll_scan, g_scan)):
        np.testing.assert_allclose(ll_x, ll_twin, rtol=1e-12)
        np.testing.assert_allclose(g_x, g_twin, rtol=1e-9, atol=1e-9 * np.abs(g_twin).max())
    rng = np.random.default_rng(0)
    d = 1e-5
    for _ in range(3):
        v = rng.standard_normal(theta.shape)
        fd = (model.log_lik(theta + d * v) - model.log_lik(theta - d * v)) / (2 * d)
        np.testing.assert_allclose(np.sum(g * v, axis=-1), fd, rtol=1e-6, atol=1e-5)


# -- Kalman ---------------------------------------------------------------------------------------


@needs_native
@pytest.mark.parametrize("n,m", [(1, 1), (2, 3), (3, 2), (2, 2)])
@pytest.mark.parametrize("b,L", [(1, 9), (3, 40), (2, 300)])
@pytest.mark.parametrize("masked,weighted", [(False, False), (True, True), (False, True)])
def test_kalman_native_equals_twin(n, m, b, L, masked, weighted):
    rng = np.random.default_rng(100 * n + 10 * m + L)
    A, Q, C, R = random_lgssm(rng, b, n, m)
    y = rng.standard_normal((L, m)) if b == 2 else rng.standard_normal((b, L, m))  # shared series too
    m0, P0 = rng.standard_normal((b, n)), np.broadcast_to(1.5 * np.eye(n), (b, n, n))
    mask = rng.random((b, L)) < 0.75 if masked else None
    w = rng.random((b, L)) if weighted else None
    yb = np.broadcast_to(y, (b, L, m))
    direct = _numba_ssm.kalman_stats(A, Q, C, R, yb, m0, P0, mask, w)
    assert direct is not NotImplemented
    ll, st = kalman_stats(A, Q, C, R, y, m0, P0, mask, w)
    llf = kalman_loglik(A, Q, C, R, y, m0, P0, mask)
    old = _numba.set_enabled(False)
    try:
        ll_t, st_t = kalman_stats(A, Q, C, R, y, m0, P0, mask, w, segment=64)
        llf_t = kalman_loglik(A, Q, C, R, y, m0, P0, mask)
    finally:
        _numba.set_enabled(old)
    assert_close_all((ll, llf, *st), (ll_t, llf_t, *st_t), rtol=1e-10)
    assert_close_all(direct, (ll_t, *st_t[:5]), rtol=1e-10)


@pytest.mark.parametrize("n,m,b,L", [(2, 3, 2, 1), (2, 3, 3, 40), (3, 2, 1, 130), (1, 1, 2, 33), (1, 2, 1, 20)])
@pytest.mark.parametrize("masked", [False, True])
def test_kalman_scan_equals_twin(xb, monkeypatch, n, m, b, L, masked):
    rng = np.random.default_rng(10 * n + m + L)
    A, Q, C, R = random_lgssm(rng, b, n, m)
    y = rng.standard_normal((b, L, m))
    m0, P0 = rng.standard_normal((b, n)), np.broadcast_to(1.5 * np.eye(n), (b, n, n))
    mask = rng.random((b, L)) < 0.7 if masked else None
    w = rng.random((b, L))
    args = [xb.asarray(a) for a in (A, Q, C, R, y, m0, P0)]
    mk = None if mask is None else xb.asarray(mask)
    ll, st = kalman_scan.kalman_stats_scan(*args, mk, xb.asarray(w))
    ll_f, none = kalman_scan.kalman_stats_scan(*args, mk, smooth=False)
    assert none is None
    monkeypatch.setattr(kalman_mod, "SCAN_MIN_LENGTH", 10**9)  # the sequential twin
    old = _numba.set_enabled(False)
    try:
        ll_t, st_t = kalman_stats(*args, mk, xb.asarray(w))
    finally:
        _numba.set_enabled(old)
    tol = 1e-9 if xb.float_dtype == "float64" else 2e-3
    assert_close_all((ll, ll_f, *st), (ll_t, ll_t, *st_t[:5]), rtol=tol)


def test_scalar_fast_path_equals_the_sequential_twin(xb, monkeypatch):
    rng = np.random.default_rng(9)
    b, L = 3, 300
    col = lambda v: xb.asarray(np.asarray(v)[:, None, None])  # noqa: E731
    args = (col([0.9, 0.5, -0.95]), col([0.25, 1.0, 0.1]), col([1.0, 0.7, 1.3]), col([0.25, 2.0, 1.0]),
            xb.asarray(rng.normal(size=(b, L, 1))), xb.asarray(rng.normal(size=(b, 1))), col([1.0, 2.0, 0.3]))
    w = xb.asarray(rng.uniform(size=(b, L)))
    old = _numba.set_enabled(False)
    try:
        fast = kalman_stats(*args, weight=w)
        ll_fast = kalman_loglik(*args)
        monkeypatch.setattr(kalman_mod, "FAST_MIN_LENGTH", 10**9)
        monkeypatch.setattr(kalman_mod, "SCAN_MIN_LENGTH", 10**9)
        loop = kalman_stats(*args, weight=w)
        ll_loop = kalman_loglik(*args)
    finally:
        _numba.set_enabled(old)
    tol = 1e-11 if xb.float_dtype == "float64" else 2e-3
    assert_close_all((fast[0], ll_fast, *fast[1]), (loop[0], ll_loop, *loop[1]), rtol=tol)


def test_kalman_dispatch_runs_the_scan_for_few_long_series(monkeypatch):
    calls = []
    inner = kalman_mod.kalman_stats_scan

    def record(*args, **kwargs):
        calls.append(args[4].shape)
        return inner(*args, **kwargs)

    monkeypatch.setattr(kalman_mod, "kalman_stats_scan", record)
    rng = np.random.default_rng(0)
    A, Q, C, R = random_lgssm(rng, 2, 2, 3)
    m0, P0 = np.zeros((2, 2)), np.broadcast_to(np.eye(2), (2, 2, 2))
    old = _numba.set_enabled(False)
    try:
        kalman_stats(A, Q, C, R, rng.standard_normal((2, 300, 3)), m0, P0)  # 2 * 9 <= SCAN_MAX_WORK
        kalman_loglik(A, Q, C, R, rng.standard_normal((2, 300, 3)), m0, P0)
        A8, Q8, C8, R8 = random_lgssm(rng, 40, 2, 3)
        kalman_stats(A8, Q8, C8, R8, rng.standard_normal((40, 30, 3)), np.zeros((40, 2)),
                     np.broadcast_to(np.eye(2), (40, 2, 2)))  # many short windows: the loop
    finally:
        _numba.set_enabled(old)
    assert calls == [(2, 300, 3), (2, 300, 3)]


@needs_native
def test_kalman_native_matches_statsmodels():
    sm_ks = pytest.importorskip("statsmodels.tsa.statespace.kalman_smoother")
    rng = np.random.default_rng(4)
    n, m, T = 2, 3, 200
    A, Q, C, R = (a[0] for a in random_lgssm(rng, 1, n, m))
    y = rng.standard_normal((T, m))
    m0, P0 = rng.standard_normal(n), np.eye(n)
    ks = sm_ks.KalmanSmoother(k_endog=m, k_states=n)
    ks.bind(np.asfortranarray(y.T))
    ks["design"], ks["obs_cov"], ks["transition"], ks["selection"], ks["state_cov"] = C, R, A, np.eye(n), Q
    ks.initialize_known(A @ m0, A @ P0 @ A.T + Q)  # statsmodels starts from the predicted x_1
    res = ks.smooth()
    ll, st = kalman_stats(A[None], Q[None], C[None], R[None], y, m0[None], P0[None])
    mean, cov = res.smoothed_state.T, np.moveaxis(res.smoothed_state_cov, -1, 0)
    np.testing.assert_allclose(ll[0], res.llf_obs.sum(), rtol=1e-10)
    np.testing.assert_allclose(st.S11[0], (cov + mean[:, :, None] * mean[:, None, :]).sum(axis=0), rtol=1e-8)
    np.testing.assert_allclose(st.Syx[0], y.T @ mean, rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("n,m", [(2, 3), (1, 1)])
def test_lgssm_gradient_matches_finite_differences(n, m):
    rng = np.random.default_rng(7)
    T = 120
    A = np.array([[0.8, 0.1], [-0.2, 0.7]])[:n, :n]
    model = LGSSM(rng.standard_normal((T, m)) if m > 1 else rng.standard_normal(T), state_dim=n)
    C = np.vstack([np.eye(n), rng.standard_normal((m - n, n))]) if m > n else np.eye(m, n)
    theta = model.unconstrain(LGSSMParams(A, 0.5 * np.eye(n), C, 0.8 * np.eye(m)))[None]
    _, g = model.log_lik_and_grad(theta)
    d = 1e-5
    for _ in range(3):
        v = rng.standard_normal(theta.shape)
        fd = (model.log_lik(theta + d * v) - model.log_lik(theta - d * v)) / (2 * d)
        np.testing.assert_allclose(np.sum(g * v, axis=-1), fd, rtol=1e-6, atol=1e-6)


# -- dispatch -------------------------------------------------------------------------------------


def _recorder(monkeypatch, name):
    table = backends.get_backend(np).native
    calls = []
    inner = table.get(name)

    def record(*args, **kwargs):
        calls.append(args[0].shape[0] if name == "kalman_stats" else args[1].shape)
        return inner(*args, **kwargs)

    monkeypatch.setitem(table, name, record)
    return calls


@needs_native
@pytest.mark.parametrize("kind", ["lgssm", "hmm"])
def test_buffered_windows_reach_the_native_as_one_batch(monkeypatch, kind):
    rng = np.random.default_rng(3)
    if kind == "lgssm":
        model = LGSSM(rng.standard_normal((500, 3)), state_dim=2)
        theta = model.unconstrain(LGSSMParams(0.5 * np.eye(2), np.eye(2), np.vstack([np.eye(2), [[0.3, 0.1]]]),
                                              np.eye(3)))
        name = "kalman_stats"
    else:
        model, th = _hmm_model(T=500)
        theta = th[0]
        name = "hmm_messages"
    calls = _recorder(monkeypatch, name)
    est = Buffered(model, subsequence_length=20, buffer=5, subsequences=8)
    pos = np.broadcast_to(theta, (4, model.dim)).copy()
    est.estimate(backends.default_rng(0), None, pos)
    if kind == "lgssm":
        assert calls == [4 * 8]  # chains x subsequences, one call
    else:
        assert len(calls) == 1 and calls[0][0] == 32 and calls[0][1] <= 30


@needs_native
def test_natives_are_registered_and_decline_what_they_do_not_take():
    assert native(np, "hmm_messages") is _numba_ssm.hmm_messages
    assert native(np, "kalman_stats") is _numba_ssm.kalman_stats
    rng = np.random.default_rng(0)
    Pi, p, p0, _ = hmm_inputs(rng, 1, 5, 2)
    assert _numba_ssm.hmm_messages(Pi.astype(np.float32), p.astype(np.float32), p0.astype(np.float32), None) is NotImplemented
    A, Q, C, R = random_lgssm(rng, 1, 2, 2)
    y, m0, P0 = rng.standard_normal((1, 5, 2)), np.zeros((1, 2)), np.eye(2)[None]
    bad_R = -R  # not positive definite: the twin's own behaviour is the result
    assert _numba_ssm.kalman_stats(A, Q, C, bad_R, y, m0, P0, None, None) is NotImplemented
    old = _numba.set_enabled(False)
    try:
        assert _numba_ssm.hmm_messages(Pi, p, p0, None) is NotImplemented
        assert _numba_ssm.kalman_stats(A, Q, C, R, y, m0, P0, None, None) is NotImplemented
    finally:
        _numba.set_enabled(old)
    assert _numba_ssm.kalman_stats(A, Q, C, R, y, m0, P0, None, None) is not NotImplemented
