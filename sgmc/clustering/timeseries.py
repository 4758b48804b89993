"""Correlated time series clustering (Ren et al. 2017; Aicher thesis 5.3.2, App. C.2) under EP.

Series ``i`` follows ``x_{i,t} = a_i x_{i,t-1} + lambda_i eta_{z_i,t} + N(0, sigma_x^2)``,
``y_{i,t} = x_{i,t} + N(0, sigma_{y,i}^2)`` (Eq. 5.9, with C.18's ``x_{i,t-1}`` typo corrected),
``x_{i,0} ~ N(0, p0_i)``, and each cluster has a latent factor ``eta_{k,t} ~ N(0, 1)`` that
correlates its series. EP approximates ``p(eta_k | y, z)`` by a diagonal Gaussian over ``t``
(Eq. C.15), stored as natural parameters (precision ``P``, precision times mean ``h``), arrays (K, T).

* The approximate collapsed term ``F~_k`` (Eq. 5.12) is a scalar Kalman filter whose predict step
  integrates the cavity of ``eta_{k,t}``: mean ``a mu + lambda m_t``, variance
  ``a^2 sigma^2 + sigma_x^2 + lambda^2 v_t`` (Eq. C.19), O(T) per cluster and vectorised over clusters.
* The tilted marginals of ``eta_{k,t}`` (Eq. C.20) come from the same filter and an RTS smoother
  over ``x``: ``eta_t`` is independent of everything else given ``(x_{t-1}, x_t)``, so its
  tilted mean and variance follow from the smoothed pair by conditioning
  ``x_t - a x_{t-1} = lambda eta_t + N(0, sigma_x^2)`` on the cavity prior ``N(m_t, v_t)``.
  The new site is the matched Gaussian divided by the cavity (precisions subtracted).

With ``v_t = 0`` and ``m_t = eta_{k,t}`` the same filter is the naive sampler's likelihood (Eq. C.8).

>>> import numpy as np
>>> from sgmc.clustering import TimeSeriesClusterModel
>>> y = np.zeros((3, 5))
>>> model = TimeSeriesClusterModel(y, a=0.9, lam=1.0, sigma_x2=0.01, sigma_y2=1.0)
>>> P, h = model.prior(2)
>>> model.log_predictive((P, h), 0).shape
(2,)
"""

from __future__ import annotations

import math
from typing import Any

from .._array_api import Array, array_namespace, device_of
from ._data import data_matrix
from ._scan import affine_scan, mobius_scan

__all__ = ["TimeSeriesClusterModel", "scalar_filter", "smoothed_differences", "eta_moments", "simulate_timeseries"]

_LOG_2PI = math.log(2.0 * math.pi)
_SCAN_ROWS = 64  # batches up to this many rows run the recursions as log-depth scans


def _per_series(xp, value, name, n, dtype, device, positive=True):
    """A scalar or (n,) parameter as an (n,) array, checked finite (and positive where required)."""
    arr = xp.asarray(value, dtype=dtype, device=device)
    if arr.ndim == 0:
        arr = xp.broadcast_to(arr, (n,))
    if arr.ndim != 1 or arr.shape[0] != n:
        msg = f"`{name}` must be a scalar or an array of shape ({n},), one value per series; got shape {tuple(arr.shape)}"
        raise ValueError(msg)
    if not bool(xp.all(xp.isfinite(arr))):
        msg = f"`{name}` must be finite"
        raise ValueError(msg)
    if positive and not bool(xp.all(arr > 0)):
        msg = f"`{name}` must be positive; got a value <= 0"
        raise ValueError(msg)
    return arr


def scalar_filter(xp: Any, y: Array, a: Array, lam: Array, sx2: Array, sy2: Array, p0: Array,
                  eta_mean: Array, eta_var: Array, keep: bool = False, scan: bool | None = None):
    """Kalman filter of ``x_t = a x_{t-1} + lam eta_t + N(0, sx2)``, ``y_t = x_t + N(0, sy2)``,
    with ``eta_t ~ N(eta_mean_t, eta_var_t)`` integrated out (Eq. C.19), batched over a leading axis.

    Parameters
    ----------
    y, eta_mean, eta_var : arrays (B, T)
    a, lam, sx2, sy2, p0 : arrays (B,)
    keep : bool
        Also return the filtered and predicted moments.
    scan : bool, optional
        Evaluate the recursions by log-depth scans over time (:mod:`sgmc.clustering._scan`) instead
        of a loop over time steps; the default scans small batches (few rows, where the per-step
        overhead of the loop dominates) and loops over large ones.

    Returns
    -------
    ll : array (B,)
        ``log p(y_1..T)``.
    moments : tuple (mf, Pf, mp, Pp), arrays (B, T + 1) for filtered (index 0 is ``x_0``) and
        (B, T) for predicted, only when ``keep``.
    """
    B, T = y.shape
    # time-major (T, B) inputs of the predict step, so each step reads one contiguous row
    drift = xp.permute_dims(lam[:, None] * eta_mean, (1, 0))
    spread = xp.permute_dims(sx2[:, None] + (lam * lam)[:, None] * eta_var, (1, 0))
    if scan is None:
        scan = B <= _SCAN_ROWS
    if scan:
        return _filter_scan(xp, y, a, sy2, p0, lam[:, None] * eta_mean, sx2[:, None] + (lam * lam)[:, None] * eta_var, keep)
    yt = xp.permute_dims(y, (1, 0))
    a2 = a * a
    mf, Pf = xp.zeros_like(p0), p0
    mp_all, Pp_all, mf_all, Pf_all = [], [], [mf], [Pf]
    for t in range(T):
        mp = a * mf + drift[t, ...]
        Pp = a2 * Pf + spread[t, ...]
        gain = Pp / (Pp + sy2)
        mf = mp + gain * (yt[t, ...] - mp)
        Pf = gain * sy2
        mp_all.append(mp)
        Pp_all.append(Pp)
        mf_all.append(mf)
        Pf_all.append(Pf)
    mp_all, Pp_all = xp.stack(mp_all, axis=1), xp.stack(Pp_all, axis=1)  # (B, T)
    S = Pp_all + sy2[:, None]
    v = y - mp_all
    ll = -0.5 * xp.sum(_LOG_2PI + xp.log(S) + v * v / S, axis=1)
    if not keep:
        return ll, None
    return ll, (xp.stack(mf_all, axis=1), xp.stack(Pf_all, axis=1), mp_all, Pp_all)


def _filter_scan(xp, y, a, sy2, p0, drift, spread, keep):
    """:func:`scalar_filter` by scans: the variance Riccati map is Moebius, the mean map affine."""
    B, T = y.shape
    a_, sy2_ = a[:, None], sy2[:, None]
    a2 = a_ * a_
    ones = xp.ones((1, T), dtype=y.dtype, device=y.device)
    Pf = mobius_scan(xp, sy2_ * a2 * ones, sy2_ * spread, a2 * ones, spread + sy2_, p0)
    Pf = xp.concat([p0[:, None], Pf], axis=1)  # (B, T + 1)
    Pp = a2 * Pf[:, :T] + spread
    S = Pp + sy2_
    gain = Pp / S
    mf = affine_scan(xp, (1.0 - gain) * a_, (1.0 - gain) * drift + gain * y, xp.zeros_like(p0))
    mf = xp.concat([xp.zeros_like(p0)[:, None], mf], axis=1)
    mp = a_ * mf[:, :T] + drift
    v = y - mp
    ll = -0.5 * xp.sum(_LOG_2PI + xp.log(S) + v * v / S, axis=1)
    return ll, ((mf, Pf, mp, Pp) if keep else None)


def smoothed_differences(xp: Any, a: Array, moments: tuple, scan: bool | None = None):
    """Mean and variance (B, T) of ``d_t = x_t - a x_{t-1}`` under the RTS smoother of the filter
    moments ``(mf, Pf, mp, Pp)`` returned by :func:`scalar_filter` with ``keep=True``."""
    mf, Pf, mp, Pp = moments
    T = mp.shape[1]
    J = Pf[:, :T] * a[:, None] / Pp  # (B, T): gain from x_t's smoothed back to x_{t-1}
    if scan is None:
        scan = J.shape[0] <= _SCAN_ROWS
    if scan:  # backward affine recursions, run forward on the reversed time axis
        rev = lambda v: xp.flip(v, axis=1)  # noqa: E731
        ms = affine_scan(xp, rev(J), rev(mf[:, :T] - J * mp), mf[:, T])
        Ps = affine_scan(xp, rev(J * J), rev(Pf[:, :T] - J * J * Pp), Pf[:, T])
        ms = xp.concat([rev(ms), mf[:, T:]], axis=1)  # (B, T + 1), index 0 is x_0
        Ps = xp.concat([rev(Ps), Pf[:, T:]], axis=1)
    else:
        Jt, mft, Pft = (xp.permute_dims(v, (1, 0)) for v in (J, mf, Pf))
        mpt, Ppt = xp.permute_dims(mp, (1, 0)), xp.permute_dims(Pp, (1, 0))
        ms, Ps = mft[T, ...], Pft[T, ...]
        ms_all, Ps_all = [ms], [Ps]
        for t in range(T, 0, -1):
            Jk = Jt[t - 1, ...]
            ms = mft[t - 1, ...] + Jk * (ms - mpt[t - 1, ...])
            Ps = Pft[t - 1, ...] + Jk * Jk * (Ps - Ppt[t - 1, ...])
            ms_all.append(ms)
            Ps_all.append(Ps)
        ms = xp.stack(ms_all[::-1], axis=1)  # (B, T + 1), index 0 is x_0
        Ps = xp.stack(Ps_all[::-1], axis=1)
    a_ = a[:, None]
    d_mean = ms[:, 1:] - a_ * ms[:, :T]
    d_var = Ps[:, 1:] + a_ * a_ * Ps[:, :T] - 2.0 * a_ * J * Ps[:, 1:]
    return d_mean, d_var


def eta_moments(xp: Any, y: Array, a: Array, lam: Array, sx2: Array, sy2: Array, p0: Array,
                eta_mean: Array, eta_var: Array, moments: tuple | None = None, scan: bool | None = None):
    """Tilted marginal means and variances of ``eta_t`` (Eq. C.20), arrays (B, T), and ``log F~`` (B,).

    Arguments as :func:`scalar_filter` (``moments``, if given, are its kept moments for these
    inputs and the filter is not rerun; the log-likelihood is then returned as None; ``scan`` as
    there). The RTS
    smoother of the filter with ``eta`` integrated gives the smoothed pairs ``(x_{t-1}, x_t)``;
    ``eta_t`` given the pair is Gaussian with precision ``1/v_t + lam^2/sx2`` and mean
    ``(m_t/v_t + lam d_t/sx2)/precision``, ``d_t = x_t - a x_{t-1}``.
    """
    ll = None
    if moments is None:
        ll, moments = scalar_filter(xp, y, a, lam, sx2, sy2, p0, eta_mean, eta_var, keep=True, scan=scan)
    d_mean, d_var = smoothed_differences(xp, a, moments, scan=scan)
    prec = 1.0 / eta_var + (lam * lam / sx2)[:, None]
    gain = (lam / sx2)[:, None] / prec
    mean = (eta_mean / eta_var) / prec + gain * d_mean
    var = 1.0 / prec + gain * gain * d_var
    return mean, var, ll


class TimeSeriesClusterModel:
    """The correlated time series clustering model with its parameters fixed, for the samplers.

    Parameters
    ----------
    y : array (N, T)
        One series per row.
    a, lam : float or array (N,)
        Autoregression ``a_i`` and factor loading ``lambda_i`` of each series.
    sigma_x2 : float or array (N,)
        Idiosyncratic state noise variance (> 0).
    sigma_y2 : float or array (N,)
        Observation noise variance (> 0).
    p0 : float or array (N,)
        Variance of ``x_{i,0}`` (> 0; mean 0).

    Notes
    -----
    The thesis also resamples ``a, lambda, sigma_x^2, sigma_y^2`` by Ren et al.'s (2017) steps,
    which its documents do not give; here they are fixed and given.
    """

    def __init__(self, y: Array, a: Any = 0.95, lam: Any = 1.0, sigma_x2: Any = 0.01, sigma_y2: Any = 1.0,
                 p0: Any = 1.0):
        xp, y, dtype = data_matrix(y, "N series, T times")
        N, T = y.shape
        dev = device_of(y)
        self.xp, self.device, self.dtype = xp, dev, dtype
        self.y = y
        self.n_data, self.T = N, T
        self.a = _per_series(xp, a, "a", N, dtype, dev, positive=False)
        self.lam = _per_series(xp, lam, "lam", N, dtype, dev, positive=False)
        self.sigma_x2 = _per_series(xp, sigma_x2, "sigma_x2", N, dtype, dev)
        self.sigma_y2 = _per_series(xp, sigma_y2, "sigma_y2", N, dtype, dev)
        self.p0 = _per_series(xp, p0, "p0", N, dtype, dev)

    def _rows(self, idx):
        xp = self.xp
        return tuple(xp.take(v, idx, axis=0) for v in (self.y, self.a, self.lam, self.sigma_x2, self.sigma_y2, self.p0))

    def prior(self, K: int) -> tuple:
        """Natural parameters ``(P, h)`` of the prior ``eta_{k,t} ~ N(0, 1)``, arrays (K, T)."""
        xp = self.xp
        shape = (K, self.T)
        return (xp.ones(shape, dtype=self.dtype, device=self.device), xp.zeros(shape, dtype=self.dtype, device=self.device))

    def log_predictive(self, cav: tuple, i: int) -> Array:
        """``log F~_k`` for series ``i`` under each cluster's cavity ``(P, h)`` (K, T): array (K,)."""
        xp = self.xp
        P, h = cav
        K = P.shape[0]
        idx = xp.full((K,), i, dtype=xp.int64, device=self.device)
        y, a, lam, sx2, sy2, p0 = self._rows(idx)
        ll, _ = scalar_filter(xp, y, a, lam, sx2, sy2, p0, h / P, 1.0 / P)
        return ll

    def predict_and_match(self, cav: tuple, i: int):
        """``log F~_k`` (K,) for series ``i`` and a function of the drawn cluster (a (1,) int array)
        giving its new site: one filter over all ``K`` cavities serves both (the smoother then runs
        on the drawn cluster's row only). Equals :meth:`log_predictive` then :meth:`tilted_site`."""
        xp = self.xp
        P, h = cav
        K = P.shape[0]
        idx = xp.full((K,), i, dtype=xp.int64, device=self.device)
        y, a, lam, sx2, sy2, p0 = self._rows(idx)
        mean, var = h / P, 1.0 / P
        ll, moments = scalar_filter(xp, y, a, lam, sx2, sy2, p0, mean, var, keep=True)

        def match(k: Array) -> tuple:
            row = lambda v: xp.take(v, k, axis=0)  # noqa: E731
            m, v = row(mean), row(var)
            em, ev, _ = eta_moments(xp, row(y), row(a), row(lam), row(sx2), row(sy2), row(p0), m, v,
                                    moments=tuple(row(x) for x in moments))
            return self._site(em, ev, row(P), row(h))

        return ll, match

    def _site(self, mean, var, P, h):
        return self.xp.clip(1.0 / var - P, min=0.0), mean / var - h

    def tilted_site(self, cav: tuple, idx: Array) -> tuple:
        """New sites ``(P, h)`` (B, T) of series ``idx`` (B,) by moment matching against cavities (B, T)."""
        xp = self.xp
        P, h = cav
        y, a, lam, sx2, sy2, p0 = self._rows(idx)
        mean, var, _ = eta_moments(xp, y, a, lam, sx2, sy2, p0, h / P, 1.0 / P)
        return self._site(mean, var, P, h)

    def proper(self, q: tuple) -> Array:
        """Whether each diagonal Gaussian (leading axis) has positive precisions."""
        return self.xp.all(q[0] > 0, axis=-1)

    def naive_log_lik(self, eta: Array) -> Array:
        """``log p(y_i | z_i = k, eta)`` for every series and cluster (Eq. C.5): array (N, K)."""
        xp = self.xp
        K = eta.shape[0]
        N = self.n_data
        rep = lambda v: xp.reshape(xp.broadcast_to(v[:, None], (N, K)), (-1,))  # noqa: E731
        y = xp.reshape(xp.broadcast_to(self.y[:, None, :], (N, K, self.T)), (N * K, self.T))
        em = xp.reshape(xp.broadcast_to(eta[None, :, :], (N, K, self.T)), (N * K, self.T))
        ll, _ = scalar_filter(xp, y, rep(self.a), rep(self.lam), rep(self.sigma_x2), rep(self.sigma_y2),
                              rep(self.p0), em, xp.zeros_like(em))
        return xp.reshape(ll, (N, K))


def simulate_timeseries(rng: Any, z: Array, T: int, K: int, a: Any = 0.95, lam: Any = 1.0, sigma_x2: float = 0.01,
                        sigma_y2: float = 1.0, p0: float = 1.0):
    """Draw ``(y, x, eta)`` from the model for assignments ``z`` (N,): arrays (N, T), (N, T + 1), (K, T)."""
    xp = array_namespace(z)
    N = z.shape[0]
    dtype = xp.float64
    dev = device_of(z)
    a = _per_series(xp, a, "a", N, dtype, dev, positive=False)
    lam = _per_series(xp, lam, "lam", N, dtype, dev, positive=False)
    eta = rng.normal((K, T), dtype=dtype)
    ex = rng.normal((N, T + 1), dtype=dtype)
    ey = rng.normal((N, T), dtype=dtype)
    eta_i = xp.take(eta, z, axis=0)
    xs = [math.sqrt(p0) * ex[:, 0]]
    for t in range(T):
        xs.append(a * xs[-1] + lam * eta_i[:, t] + math.sqrt(sigma_x2) * ex[:, t + 1])
    x = xp.stack(xs, axis=1)
    y = x[:, 1:] + math.sqrt(sigma_y2) * ey
    return y, x, eta
