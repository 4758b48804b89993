"""The effective sample size of series: autocovariances, Geyer's truncation, and the ESS methods.

Vehtari et al. (2021, section 3.2, eq. 10): chains along the first axis of ``(M, n, S)`` are combined
through the within-chain and pooled variances, rho_t = 1 - (W - mean_m acov_{m,t}) / var_plus, and
the sum of autocorrelations is truncated by Geyer's (1992) initial positive and monotone sequences.
:func:`_ess_core` applies it to the transformed draws of each method (rank-normalised, squared,
indicators at quantiles); :func:`sgmc.diagnostics.ess` and :func:`sgmc.diagnostics.mcse` call it.
"""

from __future__ import annotations

import math

from .._array_api import Array, Namespace, device_of
from ._draws import _cummin, _pooled, _split
from .ranks import _quantile, _z_scale

_RESOLUTION = 1e-15


def _acov_fft(xp: Namespace, xc: Array) -> Array:
    """Biased autocovariances of centred series ``xc`` (M, n, S) at all lags: (M, n, S)."""
    n = xc.shape[1]
    nfft = 1
    while nfft < 2 * n:
        nfft *= 2
    f = xp.fft.rfft(xc, n=nfft, axis=1)
    p = xp.fft.irfft(f * xp.conj(f), n=nfft, axis=1)
    return p[:, :n, :] / n


def _acov_lags(xp: Namespace, xc: Array, start: int, stop: int) -> Array:
    """Biased autocovariances at lags ``start..stop-1`` by direct sums: (M, stop - start, S)."""
    n = xc.shape[1]
    cols = [xp.sum(xc[:, : n - t, :] * xc[:, t:, :], axis=1) / n for t in range(start, stop)]
    return xp.stack(cols, axis=1)


# -- Geyer truncation ------------------------------------------------------------------------------
def _tau_geyer(xp: Namespace, rho: Array) -> tuple[Array, Array]:
    """Integrated autocorrelation time from autocorrelations ``rho`` (L, S), L even.

    Pairs P_k = rho_{2k} + rho_{2k+1} are summed up to the first non-positive one, K (Geyer's initial
    positive sequence; the last available pair when none is), after replacing each by the minimum of
    the pairs before it (initial monotone sequence); rho_{2K} is added once when positive.
    Returns ``(tau, found)``, ``found`` saying whether a non-positive pair occurred.
    """
    even = rho[0::2, :]
    pairs = even + rho[1::2, :]
    n_pairs = pairs.shape[0]
    nonpos = xp.astype(pairs <= 0, xp.int64)
    before = xp.cumulative_sum(nonpos, axis=0) == 0          # pairs before the first non-positive one
    k_first = xp.sum(xp.astype(before, xp.int64), axis=0)    # (S,), n_pairs when none
    found = k_first < n_pairs
    k_trunc = xp.minimum(k_first, xp.full_like(k_first, n_pairs - 1))
    idx = xp.arange(n_pairs, device=device_of(rho))[:, None]
    keep = idx < k_trunc[None, :]
    mono = _cummin(xp, pairs)
    zero = xp.zeros_like(pairs)
    tau = -1.0 + 2.0 * xp.sum(xp.where(keep, mono, zero), axis=0)
    at_k = xp.sum(xp.where(idx == k_trunc[None, :], even, zero), axis=0)
    tau = tau + xp.where(at_k > 0, at_k, xp.zeros_like(at_k))
    return tau, found


def _one_at_lag0(xp: Namespace, rho: Array) -> Array:
    """Set rho_0 = 1 (its definition; the variance formula gives 1 - O(1/n))."""
    return xp.concat([xp.ones_like(rho[:1, :]), rho[1:, :]], axis=0)


def _ess_autocorr(xp: Namespace, x: Array, use_fft: bool | None = None, block: int = 64) -> Array:
    """Multi-chain ESS of (M, n, S): chains along axis 0 are combined, series along axis 2 are not."""
    m, n, s = x.shape
    mean_m = xp.mean(x, axis=1, keepdims=True)                  # (M, 1, S)
    xc = x - mean_m
    acov0 = xp.sum(xc * xc, axis=1) / n                          # (M, S)
    w = xp.mean(acov0, axis=0) * (n / (n - 1.0))                 # within-chain variance, ddof 1
    var_plus = w * ((n - 1.0) / n)
    if m > 1:
        var_plus = var_plus + xp.var(mean_m[:, 0, :], axis=0, correction=1)
    ok = var_plus > 0
    safe = xp.where(ok, var_plus, xp.ones_like(var_plus))
    n_lags = 2 * ((n - 1) // 2)                                  # whole pairs of lags below n
    if use_fft is None:
        use_fft = hasattr(xp, "fft")
    if use_fft:
        acov = _acov_fft(xp, xc)[:, :n_lags, :]
        rho = _one_at_lag0(xp, 1.0 - (w - xp.mean(acov, axis=0)) / safe)   # (L, S)
    else:
        parts = []
        stop = 0
        while stop < n_lags:
            start, stop = stop, min(n_lags, stop + 2 * block)
            parts.append(1.0 - (w - xp.mean(_acov_lags(xp, xc, start, stop), axis=0)) / safe)
            rho = _one_at_lag0(xp, xp.concat(parts, axis=0))
            _, done = _tau_geyer(xp, rho)
            if bool(xp.all(done | ~ok)):
                break
    tau, _ = _tau_geyer(xp, rho)
    total = float(m * n)
    tau = xp.maximum(tau, xp.full_like(tau, 1.0 / math.log10(total)))
    out = xp.where(ok, total / tau, xp.full_like(tau, math.nan))
    # A constant series (range below 1e-15) counts as fully informative, as in ArviZ: ESS = draws.
    spread = xp.max(x, axis=(0, 1)) - xp.min(x, axis=(0, 1))
    return xp.where(spread < _RESOLUTION, xp.full_like(out, total), out)


def _ess_core(xp: Namespace, x: Array, method: str, prob: float | None, split: bool) -> Array:
    """ESS of each series of (M, n, S) by ``method`` (Vehtari et al. 2021)."""
    cut = (lambda a: _split(xp, a)) if split else (lambda a: a)
    if method in ("mean", "autocorr"):
        return _ess_autocorr(xp, cut(x))
    if method == "bulk":
        return _ess_autocorr(xp, _z_scale(xp, cut(x)))
    if method == "sd":
        c = x - xp.mean(_pooled(xp, x), axis=0)
        return _ess_autocorr(xp, cut(c * c))
    if method == "quantile":
        q = _quantile(xp, x, prob)
        return _ess_autocorr(xp, cut(xp.astype(x <= q, x.dtype)))
    low, high = sorted((prob, 1.0 - prob))
    return xp.minimum(_ess_core(xp, x, "quantile", low, split), _ess_core(xp, x, "quantile", high, split))
