"""Exact SSM recursions without compiled natives: scan or loop by their work, and JAX-compiled recursions.

Where a backend has no compiled recursion (PyTorch, JAX, array-api-strict, CuPy, NumPy without
Numba), the Kalman and HMM recursions choose between the parallel-in-time scan and the sequential
loop by a cost model (``sgmc.ssm.kalman_paths``): the choice must take the scan for long series
whatever the number of chains, keep the loop for many short windows, and never make the cost per
chain jump when chains are added; the values must equal the NumPy path (compiled where Numba is
installed) to 1e-10. On JAX the recursions trace: ``jax.jit(jax.grad(...))`` of the exact
log-likelihood equals the eager NumPy gradient. Timings are in asv_benchmarks/benchmarks/bench_ssm_no_cliff.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from sgmc._dispatch import native
from sgmc.ssm import GaussianHMM, HMMParams, kalman_grad, kalman_loglik, kalman_stats
from sgmc.ssm import hmm as hmm_mod
from sgmc.ssm import kalman as kalman_mod
from sgmc.backends import _numba
from sgmc.ssm.kalman_paths import HMM_COSTS, KALMAN_COSTS, LOOP_MAX_LENGTH, chain_groups, loop_cost, prefer_scan, scan_cost

COSTS = pytest.mark.parametrize("costs", [KALMAN_COSTS, HMM_COSTS], ids=["kalman", "hmm"])


def _lgssm(rng, b, n=2, m=3):
    A = 0.5 * rng.standard_normal((b, n, n)) / np.sqrt(n)
    Q0, R0 = rng.standard_normal((b, n, n)), rng.standard_normal((b, m, m))
    Q = Q0 @ np.swapaxes(Q0, -1, -2) + 0.5 * np.eye(n)
    R = R0 @ np.swapaxes(R0, -1, -2) + 0.3 * np.eye(m)
    return A, Q, rng.standard_normal((b, m, n)), R


def _hmm(rng, b, L, K=3):
    Pi = rng.dirichlet(np.ones(K) * 0.7, size=(b, K))
    logp = 4.0 * rng.standard_normal((b, L, K))
    return Pi, np.exp(logp - logp.max(axis=-1, keepdims=True)), rng.dirichlet(np.ones(K), size=b), rng.random((b, L))


def _chosen_cost(costs, b, L):
    return scan_cost(costs, b, L) if prefer_scan(costs, b, L) else loop_cost(costs, b, L)


# -- the choice -----------------------------------------------------------------------------------


@COSTS
def test_long_series_take_the_scan_whatever_the_chains(costs):
    for b in (1, 4, 16, 64, 4096):
        assert prefer_scan(costs, b, 10**6)
    assert prefer_scan(costs, 4, 20_000) and prefer_scan(costs, 16, 20_000)
    assert prefer_scan(costs, 10**5, LOOP_MAX_LENGTH + 1)


@COSTS
def test_many_short_windows_keep_the_loop(costs):
    assert not prefer_scan(costs, 1024, 32)
    assert not prefer_scan(costs, 1, 8)  # below the minimum length
    assert not prefer_scan(costs, 1, 10**6, min_length=10**9)
    assert prefer_scan(costs, 1, 64)  # one short series: few rounds beat 64 steps


@COSTS
@pytest.mark.parametrize("L", [256, 2048, 20_000, 10**6])
def test_cost_per_chain_of_the_chosen_path_has_no_cliff(costs, L):
    per_chain = [_chosen_cost(costs, b, L) / b for b in range(1, 65)]
    assert max(per_chain[b] / per_chain[b - 1] for b in range(1, 64)) <= 1.0 + 1e-12  # never rises
    assert per_chain[15] <= 1.5 * per_chain[3]  # 16 chains against 4


# -- values on a backend without natives ----------------------------------------------------------


@pytest.fixture
def torch_np():
    torch = pytest.importorskip("torch")
    from array_api_compat import torch as tx

    assert native(tx, "kalman_stats") is None and native(tx, "hmm_messages") is None  # no compiled recursion
    return torch


@pytest.mark.parametrize("b", [4, 16])
def test_kalman_on_torch_runs_the_scan_and_equals_numpy(torch_np, monkeypatch, b):
    calls = []
    inner = kalman_mod.kalman_stats_scan

    def record(*args, **kwargs):
        calls.append(tuple(args[4].shape))
        return inner(*args, **kwargs)

    monkeypatch.setattr(kalman_mod, "kalman_stats_scan", record)
    rng = np.random.default_rng(b)
    L = 600
    A, Q, C, R = _lgssm(rng, b)
    y = rng.standard_normal((b, L, 3))
    m0, P0 = rng.standard_normal((b, 2)), np.broadcast_to(1.5 * np.eye(2), (b, 2, 2)).copy()
    w = rng.random((b, L))
    args = (A, Q, C, R, y, m0, P0)
    ll_np, st_np = kalman_stats(*args, weight=w)
    llf_np = kalman_loglik(*args)
    assert calls == [] or native(np, "kalman_stats") is None
    calls.clear()
    targs = [torch_np.asarray(a) for a in args]
    ll_t, st_t = kalman_stats(*targs, weight=torch_np.asarray(w))
    llf_t = kalman_loglik(*targs)
    assert calls == [(b, L, 3), (b, L, 3)]
    for got, want in zip((ll_t, llf_t, *st_t), (ll_np, llf_np, *st_np)):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-10 * np.abs(want).max())


@pytest.mark.parametrize("b", [4, 16])
def test_hmm_on_torch_runs_the_scan_and_equals_numpy(torch_np, monkeypatch, b):
    calls = []
    inner = hmm_mod.messages_scan

    def record(*args):
        calls.append(tuple(args[1].shape))
        return inner(*args)

    monkeypatch.setattr(hmm_mod, "messages_scan", record)
    rng = np.random.default_rng(10 + b)
    L = 600
    Pi, p, p0, w = _hmm(rng, b, L)
    from array_api_compat import numpy as npx
    from array_api_compat import torch as tx

    want = hmm_mod.messages(npx, Pi, p, p0, w)
    calls.clear()
    got = hmm_mod.messages(tx, *(torch_np.asarray(a) for a in (Pi, p, p0, w)))
    assert calls == [(b, L, 3)]
    for g, v in zip(got, want):
        np.testing.assert_allclose(g.numpy(), v, rtol=1e-10, atol=1e-10 * np.abs(v).max())


def test_long_series_with_many_chains_never_loop_over_time(torch_np, monkeypatch):
    def no_loop(*args, **kwargs):
        raise AssertionError("a Python loop over time ran")

    monkeypatch.setattr(kalman_mod, "run", no_loop)
    monkeypatch.setattr(hmm_mod, "_messages_twin", no_loop)
    rng = np.random.default_rng(3)
    b, L = 32, LOOP_MAX_LENGTH + 100
    A, Q, C, R = (torch_np.asarray(a) for a in _lgssm(rng, b))
    y = torch_np.asarray(rng.standard_normal((b, L, 3)))
    ll, _ = kalman_stats(A, Q, C, R, y)
    assert ll.shape == (b,) and bool(torch_np.all(torch_np.isfinite(ll)))
    from array_api_compat import torch as tx

    logc = hmm_mod.messages(tx, *(torch_np.asarray(a) for a in _hmm(rng, b, L)))[0]
    assert bool(torch_np.all(torch_np.isfinite(logc)))


def test_chain_groups_bound_the_scan_and_change_no_value(monkeypatch):
    assert chain_groups(16, 10**6, max_elements=2**20) == [slice(i, i + 1) for i in range(16)]
    assert chain_groups(5, 100, max_elements=200) == [slice(0, 2), slice(2, 4), slice(4, 5)]
    assert chain_groups(3, 10**9, max_elements=10) == [slice(0, 1), slice(1, 2), slice(2, 3)]
    rng = np.random.default_rng(8)
    b, L = 5, 300
    A, Q, C, R = _lgssm(rng, b)
    y = rng.standard_normal((b, L, 3))
    mask, w = rng.random((b, L)) < 0.8, rng.random((b, L))
    Pi, p, p0, wh = _hmm(rng, b, L)
    from array_api_compat import numpy as npx

    old = _numba.set_enabled(False)
    try:
        whole = (*kalman_stats(A, Q, C, R, y, mask=mask, weight=w), hmm_mod.messages(npx, Pi, p, p0, wh))
        small = lambda b_, L_: chain_groups(b_, L_, max_elements=2 * L_)  # noqa: E731
        monkeypatch.setattr(kalman_mod, "chain_groups", small)
        monkeypatch.setattr(hmm_mod, "chain_groups", small)
        grouped = (*kalman_stats(A, Q, C, R, y, mask=mask, weight=w), hmm_mod.messages(npx, Pi, p, p0, wh))
    finally:
        _numba.set_enabled(old)
    for got, want in zip((grouped[0], *grouped[1][:5], *grouped[2]), (whole[0], *whole[1][:5], *whole[2])):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())


# -- JAX: the recursions under jax.jit -------------------------------------------------------------


@pytest.fixture
def jax_x64():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    return jax


def _sym(g):
    return 0.5 * (g + np.swapaxes(g, -1, -2))


def _kalman_case(b=3, L=40):
    rng = np.random.default_rng(5)
    A, Q, C, R = _lgssm(rng, b)
    y = rng.standard_normal((b, L, 3))
    m0, P0 = rng.standard_normal((b, 2)), np.broadcast_to(1.5 * np.eye(2), (b, 2, 2)).copy()
    return A, Q, C, R, y, m0, P0


def _hmm_case(T=64):
    rng = np.random.default_rng(6)
    K, m = 3, 2
    Pi = np.full((K, K), 0.1) + 0.7 * np.eye(K)
    mu = 2.0 * rng.standard_normal((K, m))
    S0 = rng.standard_normal((K, m, m))
    Sigma = S0 @ np.swapaxes(S0, -1, -2) + 0.5 * np.eye(m)
    y = rng.standard_normal((T, m)) * 2.0
    model = GaussianHMM(y, K)
    theta = model.unconstrain(HMMParams(Pi, mu, Sigma))
    return y, K, model, np.stack([theta, theta + 0.1 * rng.standard_normal(theta.shape)])


def _close(got, want):
    want = np.asarray(want)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10, atol=1e-10 * np.abs(want).max())


def test_jit_grad_of_the_kalman_loglik_equals_numpy(jax_x64):
    jax, jnp = jax_x64, jax_x64.numpy
    A, Q, C, R, y, m0, P0 = _kalman_case()
    ll_np, g_np = kalman_grad(A, Q, C, R, y, m0, P0)  # eager NumPy: the Fisher-identity gradient
    yj, m0j, P0j = jnp.asarray(y), jnp.asarray(m0), jnp.asarray(P0)

    def total(A, Q, C, R):
        return jnp.sum(kalman_loglik(A, Q, C, R, yj, m0j, P0j))

    value_and_grad = jax.jit(jax.value_and_grad(total, argnums=(0, 1, 2, 3)))
    ll_j, grads = value_and_grad(*(jnp.asarray(a) for a in (A, Q, C, R)))
    np.testing.assert_allclose(float(ll_j), float(np.sum(ll_np)), rtol=1e-10)
    for got, want, sym in zip(grads, g_np, (False, True, False, True)):
        got = np.asarray(got)
        _close(_sym(got) if sym else got, want)  # covariances: the symmetric part (entrywise gradient)


def test_hmm_loglik_and_its_jit_grad_equal_numpy(jax_x64):
    jax, jnp = jax_x64, jax_x64.numpy
    y, K, model, theta = _hmm_case()
    ll_np, g_np = model.log_lik_and_grad(theta)  # eager NumPy (Fisher's identity)
    jmodel = GaussianHMM(jnp.asarray(y), K)

    def loglik(th):  # the forward recursion of GaussianHMM.log_lik, without its finiteness check
        eta, mu_, psi = jmodel._split(th)
        yb = jnp.broadcast_to(jmodel.y[None], (th.shape[0],) + tuple(jmodel.y.shape))
        logp = hmm_mod._log_emission(jnp, yb, mu_, psi)
        return hmm_mod.forward_backward(jmodel._Pi(eta), logp, jmodel._p0_uniform(th.shape[0]))[0]

    ll_j, g_auto = jax.jit(jax.value_and_grad(lambda th: jnp.sum(loglik(th))))(jnp.asarray(theta))
    np.testing.assert_allclose(float(ll_j), float(np.sum(ll_np)), rtol=1e-10)
    _close(g_auto, g_np)


@pytest.mark.slow
def test_fisher_gradients_run_under_jit(jax_x64):
    """The Fisher-identity gradients (smoother statistics) and the default x_0 law, compiled."""
    jax, jnp = jax_x64, jax_x64.numpy
    A, Q, C, R, y, m0, P0 = _kalman_case(L=200)
    ll_np, g_np = kalman_grad(A, Q, C, R, y, m0, P0)
    ll_j, g_j = jax.jit(kalman_grad)(*(jnp.asarray(a) for a in (A, Q, C, R, y, m0, P0)))
    _close(ll_j, ll_np)
    for got, want in zip(g_j, g_np):
        _close(got, want)
    ll_default = jax.jit(kalman_loglik)(*(jnp.asarray(a) for a in (A, Q, C, R, y)))
    _close(ll_default, kalman_loglik(A, Q, C, R, y))
    y, K, model, theta = _hmm_case(T=300)
    ll_np, g_np = model.log_lik_and_grad(theta)
    jmodel = GaussianHMM(jnp.asarray(y), K)
    stats = jax.jit(lambda th: jmodel._stats(th, jmodel.y[None], jmodel._p0_uniform(th.shape[0]), None, None))
    ll_j, g_j = stats(jnp.asarray(theta))
    _close(ll_j, ll_np)
    _close(g_j, g_np)
