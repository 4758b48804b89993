"""The exact collapsed likelihood of a time series cluster in O(T) per cluster, for shared parameters.

Given the factor ``eta`` (T,), series ``i`` of the time series clustering model is Gaussian,
``y_i | eta ~ N(M eta, S)`` with ``M = lambda L``, ``L_{ts} = a^{t-s}`` (``s <= t``) and
``S = sigma_x^2 L L^T + p_0 v v^T + sigma_y^2 I``, ``v_t = a^t``. As a function of ``eta``,
``log N(y_i | M eta, S) = c_i + h_i^T eta - eta^T J eta / 2`` with ``J = M^T S^-1 M``,
``h_i = M^T S^-1 y_i`` and ``c_i = log N(y_i | 0, S)``. With ``eta ~ N(0, I)`` integrated out, a
cluster ``C`` of ``n`` series has

``log p(y_C) = sum_{i in C} c_i - log|I + n J| / 2 + h_C^T (I + n J)^-1 h_C / 2``, ``h_C = sum_{i in C} h_i``.

When every series has the same ``(a, lambda, sigma_x^2, sigma_y^2, p_0)``, ``J`` is shared: with its
eigendecomposition ``J = V diag(s) V^T`` (computed once, O(T^3)) and ``g_i = V^T h_i`` (once, O(N T^2)),

``log p(y_C) = sum c_i + sum_t [g_{C,t}^2 / (1 + n s_t) - log(1 + n s_t)] / 2``,

which costs O(T) per cluster given the running sums ``g_C`` and ``sum c_i``. This is the same
quantity as the joint Kalman filter of :func:`~sgmc.clustering.timeseries_gibbs.cluster_log_marginal`
(O(T n^3) per cluster), exactly, not an approximation; with per-series parameters the ``J_i`` differ and
the Kalman form is used instead.
"""

from __future__ import annotations

import math
from typing import Any

from .._array_api import Array

__all__ = ["SpectralMarginal", "shared_parameters"]

_LOG_2PI = math.log(2.0 * math.pi)


def shared_parameters(model: Any) -> bool:
    """Whether every series of ``model`` has the same ``a, lam, sigma_x2, sigma_y2, p0``."""
    xp = model.xp
    return all(bool(xp.all(v == v[0])) for v in (model.a, model.lam, model.sigma_x2, model.sigma_y2, model.p0))


class SpectralMarginal:
    """Per-series statistics ``g_i`` (N, T), ``c_i`` (N,) and the spectrum ``s`` (T,) of ``J``.

    Parameters
    ----------
    model : TimeSeriesClusterModel
        With the same parameters for every series (see :func:`shared_parameters`).
    """

    def __init__(self, model: Any):
        if not shared_parameters(model):
            msg = ("`model` must have the same a, lam, sigma_x2, sigma_y2 and p0 for every series for the "
                   "spectral form; use the Kalman form (method='kalman') otherwise")
            raise ValueError(msg)
        xp, dtype, dev = model.xp, model.dtype, model.device
        T = model.T
        a, lam = float(model.a[0]), float(model.lam[0])
        sx2, sy2, p0 = float(model.sigma_x2[0]), float(model.sigma_y2[0]), float(model.p0[0])
        t = xp.arange(T, dtype=dtype, device=dev)
        lag = t[:, None] - t[None, :]
        if a == 0.0:
            L = xp.eye(T, dtype=dtype, device=dev)
        else:
            L = xp.where(lag >= 0, xp.sign(xp.asarray(a, dtype=dtype)) ** lag * abs(a) ** xp.clip(lag, min=0.0), 0.0)
        v = (a ** (t + 1.0)) if a != 0.0 else xp.zeros((T,), dtype=dtype, device=dev)
        S = sx2 * (L @ L.T) + p0 * (v[:, None] * v[None, :]) + sy2 * xp.eye(T, dtype=dtype, device=dev)
        chol = xp.linalg.cholesky(S)
        M = lam * L
        W = xp.linalg.solve(S, M)  # S^-1 M (T, T)
        J = M.T @ W
        s, V = xp.linalg.eigh(0.5 * (J + J.T))
        self.xp = xp
        self.s = xp.clip(s, min=0.0)  # J is positive semi-definite; round-off only below 0
        self.g = model.y @ (W @ V)  # rows g_i = V^T M^T S^-1 y_i
        Sy = xp.linalg.solve(S, model.y.T)  # (T, N)
        logdet = 2.0 * xp.sum(xp.log(xp.linalg.diagonal(chol)))
        self.c = -0.5 * (T * _LOG_2PI + logdet + xp.sum(model.y.T * Sy, axis=0))

    def cluster_stats(self, z: Array, K: int) -> tuple[Array, Array, Array]:
        """Running sums ``g_C`` (K, T), ``sum c_i`` (K,) and sizes (K,) of the clusters of ``z``."""
        xp = self.xp
        oh = xp.astype(z[:, None] == xp.arange(K, device=z.device)[None, :], self.g.dtype)  # (N, K)
        return oh.T @ self.g, oh.T @ self.c, xp.sum(oh, axis=0)

    def log_marginal(self, g_sum: Array, c_sum: Array, n: Array) -> Array:
        """``log p(y_C)`` (B,) of clusters with sums ``g_sum`` (B, T), ``c_sum`` (B,) and sizes ``n`` (B,)."""
        xp = self.xp
        d = 1.0 + n[:, None] * self.s[None, :]
        return c_sum + 0.5 * xp.sum(g_sum * g_sum / d - xp.log(d), axis=1)
