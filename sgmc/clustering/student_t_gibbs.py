"""The data-augmentation Gibbs samplers the thesis compares EP with on Student-t mixtures (App. C.1.1-C.1.2).

With ``t_nu(y | mu, Sigma) = int N(y | mu, Sigma / u) Gamma(u | nu/2, nu/2) du`` an auxiliary scale
``u_{i,k}`` is kept for every datum and cluster (Eq. C.3, with the ``1/2`` on the quadratic form that
the printed rate lacks):
``u_{i,k} ~ Gamma(nu/2 + d/2, nu/2 + (y_i - mu_k)^T Sigma_k^-1 (y_i - mu_k) / 2)`` if ``z_i = k``, else
``Gamma(nu/2, nu/2)``.

* **Naive Gibbs** scans ``z | mu, Sigma, u`` (each ``z_i`` from ``(n_{-i,k} + alpha) N(y_i | mu_k, Sigma_k / u_{i,k})``,
  the Dirichlet prior collapsed), ``(mu, Sigma) | z, u`` (the NIW posterior of Eq. C.2, all clusters at
  once) and ``u | z, mu, Sigma``.
* **Blocked Gibbs** draws the block ``(z, mu, Sigma) | u``: every ``z_i`` with ``(mu, Sigma)`` integrated
  out given ``u`` (the multivariate t of Eq. C.4 with the NIW statistics of the other data, kept up to
  date by adding and removing one datum), then ``(mu, Sigma) | z, u``; then ``u | z, mu, Sigma``.

With ``nu=None`` (Gaussian emissions) ``u = 1`` throughout; the blocked sampler is then the exact
collapsed Gibbs sampler of a Gaussian mixture.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from .._array_api import Array
from .._validation import check_int, check_positive
from ..samplers.scir import gamma_draws
from .ep_gibbs import check_assignments, collapsed_log_prior, draw_from_logits, onehot
from .niw import log_t_nodes, posterior_stats, sample_niw
from .student_t import StudentTMixtureModel

__all__ = ["NaiveTState", "BlockedTState", "naive_t_init", "naive_t_sweep", "blocked_t_init", "blocked_t_sweep",
           "sample_scales"]

_LOG_2PI = math.log(2.0 * math.pi)


class NaiveTState(NamedTuple):
    z: Array
    counts: Array
    mu: Array  # (K, d)
    Sigma: Array  # (K, d, d)
    u: Array  # (N, K)


class BlockedTState(NamedTuple):
    z: Array
    counts: Array
    u: Array  # (N, K)


def _quad(xp, y, mu, Sigma):
    """``(y_i - mu_k)^T Sigma_k^-1 (y_i - mu_k)`` (N, K) and ``log|Sigma_k|`` (K,)."""
    L = xp.linalg.cholesky(Sigma)
    e = y[:, None, :] - mu[None, :, :]  # (N, K, d)
    sol = xp.linalg.solve(L[None, ...], e[..., None])[..., 0]
    return xp.sum(sol * sol, axis=-1), 2.0 * xp.sum(xp.log(xp.linalg.diagonal(L)), axis=-1)


def sample_scales(rng: Any, model: StudentTMixtureModel, z: Array, mu: Array, Sigma: Array) -> Array:
    """``u | z, mu, Sigma`` (N, K) by Eq. C.3 (ones for Gaussian emissions)."""
    xp = model.xp
    K = mu.shape[0]
    N, d = model.y.shape
    if model.nu is None:
        return xp.ones((N, K), dtype=model.dtype, device=model.device)
    delta, _ = _quad(xp, model.y, mu, Sigma)
    oh = onehot(xp, z, K, model.dtype)
    half = 0.5 * model.nu
    shape = half + 0.5 * d * oh
    rate = half + 0.5 * delta * oh
    return gamma_draws(rng, shape) / rate


def _draw_params(rng, model, z, u, K):
    oh = onehot(model.xp, z, K, model.dtype)
    w = model.xp.sum(oh * u, axis=1)
    return sample_niw(rng, posterior_stats(model.prior(K), model.y, oh, w))


def _sweep_z(rng, model, z, counts, loglik, alpha):
    xp = model.xp
    K = counts.shape[0]
    ar = xp.arange(model.n_data, device=model.device)
    for i in range(model.n_data):
        c = counts - onehot(xp, z[i : i + 1], K, model.dtype)[0, :]
        new = draw_from_logits(rng, collapsed_log_prior(xp, c, alpha) + loglik[i, :], xp)
        counts = c + onehot(xp, new, K, model.dtype)[0, :]
        z = xp.where(ar == i, new, z)
    return z, counts


def naive_t_init(rng: Any, model: StudentTMixtureModel, z: Any, K: int) -> NaiveTState:
    """Naive-Gibbs state for ``z``: ``(mu, Sigma)`` from their conditional with ``u = 1``, then ``u``."""
    K = check_int(K, "K", minimum=1)
    xp = model.xp
    z = check_assignments(xp, z, model.n_data, K, device=model.device)
    counts = xp.sum(onehot(xp, z, K, model.dtype), axis=0)
    mu, Sigma = _draw_params(rng, model, z, xp.ones((model.n_data, K), dtype=model.dtype, device=model.device), K)
    return NaiveTState(z, counts, mu, Sigma, sample_scales(rng, model, z, mu, Sigma))


def naive_t_sweep(rng: Any, model: StudentTMixtureModel, state: NaiveTState, alpha: float = 1.0) -> NaiveTState:
    """One naive scan: ``z | mu, Sigma, u``; ``(mu, Sigma) | z, u``; ``u | z, mu, Sigma``."""
    alpha = check_positive(alpha, "alpha")
    xp = model.xp
    K = state.counts.shape[0]
    d = model.d
    delta, logdet = _quad(xp, model.y, state.mu, state.Sigma)
    loglik = -0.5 * (d * _LOG_2PI + logdet[None, :] - d * xp.log(state.u) + state.u * delta)
    z, counts = _sweep_z(rng, model, state.z, state.counts, loglik, alpha)
    mu, Sigma = _draw_params(rng, model, z, state.u, K)
    return NaiveTState(z, counts, mu, Sigma, sample_scales(rng, model, z, mu, Sigma))


def blocked_t_init(rng: Any, model: StudentTMixtureModel, z: Any, K: int) -> BlockedTState:
    """Blocked-Gibbs state for ``z``: ``u`` from one ``(mu, Sigma)`` draw with ``u = 1``."""
    s = naive_t_init(rng, model, z, K)
    return BlockedTState(s.z, s.counts, s.u)


def blocked_conditional(model: StudentTMixtureModel, stats: tuple, z: Array, u: Array, i: int):
    """``log p(y_i | z_i = k, u, y_-i, z_-i)`` (K,) and the cavity statistics (``i`` removed)."""
    xp = model.xp
    K = stats[0].shape[0]
    e_old = onehot(xp, z[i : i + 1], K, model.dtype)[0, :]
    w_old = xp.sum(e_old * u[i, :])
    yi = model.y[i, :]
    dstat = (w_old, w_old * yi, w_old * (yi[:, None] * yi[None, :]), xp.ones_like(w_old))
    cav = tuple(s - xp.reshape(e_old, (K,) + (1,) * (s.ndim - 1)) * ds for s, ds in zip(stats, dstat))
    return log_t_nodes(cav, yi, u[i, :][:, None], xp)[:, 0], cav


def blocked_t_sweep(rng: Any, model: StudentTMixtureModel, state: BlockedTState, alpha: float = 1.0) -> BlockedTState:
    """One blocked scan: every ``z_i | z_-i, u`` with ``(mu, Sigma)`` collapsed, ``(mu, Sigma) | z, u``, ``u | z, mu, Sigma``."""
    alpha = check_positive(alpha, "alpha")
    xp = model.xp
    K = state.counts.shape[0]
    z, counts, u = state.z, state.counts, state.u
    oh = onehot(xp, z, K, model.dtype)
    stats = posterior_stats(model.prior(K), model.y, oh, xp.sum(oh * u, axis=1))
    ar = xp.arange(model.n_data, device=model.device)
    for i in range(model.n_data):
        ll, cav = blocked_conditional(model, stats, z, u, i)
        c = counts - onehot(xp, z[i : i + 1], K, model.dtype)[0, :]
        new = draw_from_logits(rng, collapsed_log_prior(xp, c, alpha) + ll, xp)
        e_new = onehot(xp, new, K, model.dtype)[0, :]
        w = xp.sum(e_new * u[i, :])
        yi = model.y[i, :]
        dstat = (w, w * yi, w * (yi[:, None] * yi[None, :]), xp.ones_like(w))
        stats = tuple(s + xp.reshape(e_new, (K,) + (1,) * (s.ndim - 1)) * ds for s, ds in zip(cav, dstat))
        counts = c + e_new
        z = xp.where(ar == i, new, z)
    mu, Sigma = sample_niw(rng, stats)
    return BlockedTState(z, counts, sample_scales(rng, model, z, mu, Sigma))
