"""The exact samplers the thesis compares EP with on time series clustering (App. C.2.1-C.2.2).

* **Naive Gibbs** conditions on the factors ``eta``: ``z_i`` from ``(n_{-i,k} + alpha) p(y_i | eta_k)``
  (the scalar Kalman filter of Eq. C.8, O(T) per cluster, all series and clusters at once since
  ``eta`` is fixed during the sweep), then ``x_i | y_i, eta_{z_i}`` by forward filtering, backward
  sampling (all series at once), then ``eta_{k,t} | x, z`` in closed form (Gaussian prior, Gaussian
  observations ``x_{i,t} - a_i x_{i,t-1} = lambda_i eta_{k,t} + N(0, sigma_x^2)``). Drawing
  ``(z, x) | eta`` then ``eta | x, z`` is a valid (partially collapsed) Gibbs scan.
* **Collapsed Gibbs** (Ren et al. 2017) integrates ``eta`` too: ``F_k = p(y_{C_k + i}) / p(y_{C_k})``,
  where the series of one cluster form a linear Gaussian model with ``A = diag(a)``,
  ``Q = sigma_x^2 I + lambda lambda^T`` (Eq. C.13), evaluated by :func:`sgmc.ssm.kalman_loglik`
  in O(T N_k^3); all clusters go in one batch, padded to the largest by decoupled unit series whose
  known log-likelihood is subtracted. Per datum only ``K`` marginals are new (the ``K - 1`` other
  clusters with ``i`` added, the current one without it); the rest are the state's. When every series
  shares its parameters the same marginals cost O(T) per cluster by the spectral form of
  :mod:`sgmc.clustering.timeseries_marginal` (``method="auto"`` picks it then).

Both target the exact posterior (of ``(z, x, eta)`` and of ``z`` respectively).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from .._array_api import Array
from .._validation import check_int, check_positive
from ..ssm import kalman_loglik
from .ep_gibbs import check_assignments, collapsed_log_prior, draw_from_logits, onehot
from .timeseries import TimeSeriesClusterModel, scalar_filter
from .timeseries_marginal import SpectralMarginal, shared_parameters

__all__ = ["NaiveTSState", "CollapsedTSState", "cluster_log_marginal", "naive_init", "naive_sweep",
           "collapsed_init", "collapsed_sweep", "sample_states", "sample_eta"]

_PAD_LL = -0.5 * (math.log(2.0 * math.pi) + math.log(2.0))  # one step of a padded unit series


class NaiveTSState(NamedTuple):
    z: Array
    counts: Array
    eta: Array  # (K, T)


class CollapsedTSState(NamedTuple):
    z: Array
    counts: Array
    cluster_ll: Array  # (K,) log p(y_{C_k})
    spectral: Any = None  # SpectralMarginal when the O(T) form is used, else None (Kalman form)


def cluster_log_marginal(model: TimeSeriesClusterModel, members: Array) -> Array:
    """Exact ``log p(y_C)`` with ``eta`` and ``x`` integrated, for member masks ``members`` (b, N) bool."""
    xp = model.xp
    b, N = members.shape
    dtype, dev = model.dtype, model.device
    size = xp.sum(xp.astype(members, xp.int64), axis=1)
    n = max(int(xp.max(size)), 1)
    order = xp.argsort(xp.astype(~members, xp.int8), axis=1, stable=True)[:, :n]  # members first
    valid = xp.take_along_axis(members, order, axis=1)
    vf = xp.astype(valid, dtype)
    g = lambda v: xp.take(v, xp.reshape(order, (-1,)), axis=0)  # noqa: E731
    shape = (b, n)
    a = xp.reshape(g(model.a), shape) * vf
    lam = xp.reshape(g(model.lam), shape) * vf
    sx2 = xp.where(valid, xp.reshape(g(model.sigma_x2), shape), 1.0)
    sy2 = xp.where(valid, xp.reshape(g(model.sigma_y2), shape), 1.0)
    p0 = xp.where(valid, xp.reshape(g(model.p0), shape), 1.0)
    y = xp.reshape(g(model.y), (b, n, model.T)) * vf[:, :, None]
    eye = xp.eye(n, dtype=dtype, device=dev)
    diag = lambda v: v[:, :, None] * eye  # noqa: E731
    A = diag(a)
    Q = diag(sx2) + lam[:, :, None] * lam[:, None, :]
    C = xp.broadcast_to(eye, (b, n, n))
    R = diag(sy2)
    ll = kalman_loglik(A, Q, C, R, xp.permute_dims(y, (0, 2, 1)), m0=xp.zeros((b, n), dtype=dtype, device=dev), P0=diag(p0))
    n_pad = xp.astype(n - size, dtype)
    return ll - n_pad * (model.T * _PAD_LL)


def _members(xp, z, K):
    return z[None, :] == xp.arange(K, device=z.device)[:, None]  # (K, N)


def collapsed_init(model: TimeSeriesClusterModel, z: Any, K: int, method: str = "auto") -> CollapsedTSState:
    """State of the exact collapsed sampler for assignments ``z`` (N,) and ``K`` clusters.

    ``method`` is ``"kalman"`` (the joint Kalman filter, any parameters), ``"spectral"`` (O(T) per
    cluster, series sharing their parameters) or ``"auto"`` (spectral where it applies).
    """
    K = check_int(K, "K", minimum=1)
    if method not in ("auto", "kalman", "spectral"):
        msg = f"`method` must be 'auto', 'kalman' or 'spectral'; got {method!r}"
        raise ValueError(msg)
    xp = model.xp
    z = check_assignments(xp, z, model.n_data, K, device=model.device)
    counts = xp.sum(onehot(xp, z, K, model.dtype), axis=0)
    if method == "spectral" or (method == "auto" and shared_parameters(model)):
        spec = SpectralMarginal(model)
        return CollapsedTSState(z, counts, spec.log_marginal(*spec.cluster_stats(z, K)), spec)
    return CollapsedTSState(z, counts, cluster_log_marginal(model, _members(xp, z, K)))


def collapsed_conditional(model: TimeSeriesClusterModel, state: CollapsedTSState, i: int, alpha: float):
    """Unnormalised ``log p(z_i = k | z_-i, y)`` (K,), ``log p(y_{C_k - i})`` (K,), ``log p(y_{C_k + i})`` (K,)
    and the counts without ``i`` (K,).

    In the Kalman form only ``K`` marginals are computed: ``C_k + i`` for the clusters ``i`` is not
    in and ``C_k - i`` for its own; the others are ``state.cluster_ll``.
    """
    xp = model.xp
    K = state.counts.shape[0]
    if state.spectral is not None:
        spec = state.spectral
        G, C, n = spec.cluster_stats(state.z, K)
        own = xp.astype(state.z[i : i + 1] == xp.arange(K, device=model.device), model.dtype)
        G, C, n = G - own[:, None] * spec.g[i : i + 1, :], C - own * spec.c[i : i + 1], n - own
        ll_without = spec.log_marginal(G, C, n)
        ll_with = spec.log_marginal(G + spec.g[i : i + 1, :], C + spec.c[i : i + 1], n + 1.0)
        return collapsed_log_prior(xp, n, alpha) + ll_with - ll_without, ll_without, ll_with, n
    mem = _members(xp, state.z, K)
    me = xp.arange(model.n_data, device=model.device) == i
    own = state.z[i : i + 1] == xp.arange(K, device=model.device)  # (K,)
    changed = xp.where(own[:, None], mem & ~me[None, :], mem | me[None, :])
    ll = cluster_log_marginal(model, changed)
    ll_without = xp.where(own, ll, state.cluster_ll)
    ll_with = xp.where(own, state.cluster_ll, ll)
    counts = state.counts - xp.astype(own, model.dtype)
    return collapsed_log_prior(xp, counts, alpha) + ll_with - ll_without, ll_without, ll_with, counts


def _spectral_sweep(rng, model, state, alpha):
    xp = model.xp
    spec = state.spectral
    K = state.counts.shape[0]
    G, C, n = spec.cluster_stats(state.z, K)
    z = state.z
    ar = xp.arange(model.n_data, device=model.device)
    lp = spec.log_marginal(G, C, n)
    for i in range(model.n_data):
        gi, ci = spec.g[i : i + 1, :], spec.c[i : i + 1]
        own = xp.astype(z[i : i + 1] == xp.arange(K, device=model.device), model.dtype)  # (K,)
        G, C, n = G - own[:, None] * gi, C - own * ci, n - own
        lp_without = spec.log_marginal(G, C, n)
        lp_with = spec.log_marginal(G + gi, C + ci, n + 1.0)
        new = draw_from_logits(rng, collapsed_log_prior(xp, n, alpha) + lp_with - lp_without)
        e = onehot(xp, new, K, model.dtype)[0, :]
        G, C, n = G + e[:, None] * gi, C + e * ci, n + e
        lp = xp.where(e > 0, lp_with, lp_without)
        z = xp.where(ar == i, new, z)
    return CollapsedTSState(z, n, lp, spec)


def collapsed_sweep(rng: Any, model: TimeSeriesClusterModel, state: CollapsedTSState, alpha: float = 1.0) -> CollapsedTSState:
    """One sweep of the exact collapsed Gibbs sampler over all series (spectral or Kalman form, as
    chosen by :func:`collapsed_init`)."""
    alpha = check_positive(alpha, "alpha")
    if state.spectral is not None:
        return _spectral_sweep(rng, model, state, alpha)
    xp = model.xp
    K = state.counts.shape[0]
    ar = xp.arange(model.n_data, device=model.device)
    for i in range(model.n_data):
        logits, ll_without, ll_with, counts = collapsed_conditional(model, state, i, alpha)
        new = draw_from_logits(rng, logits)
        e = onehot(xp, new, K, model.dtype)[0, :]
        cl = xp.where(e > 0, ll_with, ll_without)
        state = CollapsedTSState(xp.where(ar == i, new, state.z), counts + e, cl)
    return state


def sample_states(rng: Any, model: TimeSeriesClusterModel, eta_rows: Array) -> Array:
    """``x | y, eta`` for every series (forward filter, backward sample): array (N, T + 1)."""
    xp = model.xp
    T = model.T
    a = model.a
    _, (mf, Pf, mp, Pp) = scalar_filter(xp, model.y, a, model.lam, model.sigma_x2, model.sigma_y2, model.p0,
                                        eta_rows, xp.zeros_like(eta_rows), keep=True)
    eps = rng.normal((model.n_data, T + 1), dtype=model.dtype)
    x = mf[:, T] + xp.sqrt(Pf[:, T]) * eps[:, T]
    out = [x]
    for t in range(T - 1, -1, -1):
        J = Pf[:, t] * a / Pp[:, t]
        mean = mf[:, t] + J * (x - mp[:, t])
        var = xp.clip(Pf[:, t] - J * J * Pp[:, t], min=0.0)
        x = mean + xp.sqrt(var) * eps[:, t]
        out.append(x)
    return xp.stack(out[::-1], axis=1)


def sample_eta(rng: Any, model: TimeSeriesClusterModel, x: Array, z: Array, K: int) -> Array:
    """``eta | x, z``: independent Gaussians per (k, t), array (K, T)."""
    xp = model.xp
    d = x[:, 1:] - model.a[:, None] * x[:, :-1]  # (N, T)
    oh = xp.matrix_transpose(onehot(xp, z, K, model.dtype))  # (K, N)
    w = model.lam / model.sigma_x2
    P = 1.0 + oh @ (model.lam * w)[:, None]
    h = oh @ (w[:, None] * d)
    eps = rng.normal((K, model.T), dtype=model.dtype)
    return h / P + eps / xp.sqrt(P)


def naive_init(rng: Any, model: TimeSeriesClusterModel, z: Any, K: int) -> NaiveTSState:
    """Naive-Gibbs state for ``z``: ``eta`` from one ``x``-then-``eta`` draw starting at ``eta = 0``."""
    K = check_int(K, "K", minimum=1)
    xp = model.xp
    z = check_assignments(xp, z, model.n_data, K, device=model.device)
    counts = xp.sum(onehot(xp, z, K, model.dtype), axis=0)
    x = sample_states(rng, model, xp.zeros((model.n_data, model.T), dtype=model.dtype, device=model.device))
    return NaiveTSState(z, counts, sample_eta(rng, model, x, z, K))


def naive_sweep(rng: Any, model: TimeSeriesClusterModel, state: NaiveTSState, alpha: float = 1.0) -> NaiveTSState:
    """One naive Gibbs scan: every ``z_i`` given ``eta``, then ``x`` given ``(z, eta)``, then ``eta`` given ``(x, z)``."""
    alpha = check_positive(alpha, "alpha")
    xp = model.xp
    K = state.counts.shape[0]
    loglik = model.naive_log_lik(state.eta)  # (N, K)
    z, counts = state.z, state.counts
    ar = xp.arange(model.n_data, device=model.device)
    for i in range(model.n_data):
        c = counts - onehot(xp, z[i : i + 1], K, model.dtype)[0, :]
        new = draw_from_logits(rng, collapsed_log_prior(xp, c, alpha) + loglik[i, :])
        counts = c + onehot(xp, new, K, model.dtype)[0, :]
        z = xp.where(ar == i, new, z)
    x = sample_states(rng, model, xp.take(state.eta, z, axis=0))
    return NaiveTSState(z, counts, sample_eta(rng, model, x, z, K))

