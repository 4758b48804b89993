"""Effective sample size and split-R-hat for MCMC draws.

For a stationary chain with integrated autocorrelation time tau = 1 + 2 sum_{t>=1} rho_t, the
variance of a sample mean over n draws is that of n / tau independent draws; n / tau is the effective
sample size (ESS). :func:`ess` estimates tau in two ways:

``"autocorr"``
    Multi-chain autocorrelation estimate of Vehtari, Gelman, Simpson, Carpenter and Buerkner (2021,
    "Rank-normalization, folding, and localization", section 3.2, their eq. 10), in its basic form
    without rank normalisation: chains are split in halves, the autocorrelation at lag t is
    rho_t = 1 - (W - mean_m acov_{m,t}) / var_plus with W and var_plus the within-chain and pooled
    variances of split-R-hat, and the sum is truncated by Geyer's (1992) initial positive sequence and
    made monotone by his initial monotone sequence. As in Stan, the first even lag after the
    truncation point is added once when positive, and tau is bounded below by 1 / log10(total draws).
    Autocovariances come from the FFT when the namespace has the ``fft`` extension (O(n log n));
    otherwise from direct sums over lags, computed in blocks of lags and stopped as soon as every
    series has reached its truncation point (O(n * truncation lag)). Both give the same numbers.
``"batch_means"``
    Non-overlapping batch means (Flegal and Jones 2010): the asymptotic variance is b times the
    variance of the means of batches of b draws (default b = floor(sqrt(n))), and
    ESS = total draws * var(draws) / that asymptotic variance.

:func:`rhat` is the split-R-hat of Gelman et al. (2013, Bayesian Data Analysis, 3rd ed., section 11.4),
as written in Vehtari et al. (2021) eqs. 3-4 without rank normalisation or folding: each chain is
split in half and R = sqrt(var_plus / W).

Arrays follow one convention: ``(chains, n, dim)``; ``(n, dim)`` is one chain; ``(n,)`` one chain of
a scalar. Results have shape ``(dim,)`` (or ``(chains, dim)`` per chain), and a 0-d array for 1-D
input, in the namespace, dtype and device of the draws.
"""

from __future__ import annotations

import math
from typing import Any

from .._array_api import Array, Namespace, array_namespace, as_float_array, check_finite, device_of, float_dtype

__all__ = ["ess", "ess_batch_means", "rhat"]

_METHODS = ("autocorr", "batch_means")


# -- input handling ------------------------------------------------------------------------------
def _as_draws(draws: Any, name: str, min_draws: int) -> tuple[Namespace, Array, int]:
    """Return ``(xp, x, ndim_in)`` with ``x`` of shape (chains, n, dim) and a floating dtype."""
    xp = array_namespace(draws, names=(name,))
    ndim = draws.ndim
    if ndim not in (1, 2, 3):
        msg = f"`{name}` must have shape (chains, n, dim), (n, dim) or (n,); got shape {tuple(draws.shape)}"
        raise ValueError(msg)
    x = as_float_array(xp, draws, float_dtype(xp, draws), name)
    if ndim == 1:
        x = xp.reshape(x, (1, x.shape[0], 1))
    elif ndim == 2:
        x = xp.reshape(x, (1, x.shape[0], x.shape[1]))
    if x.shape[0] < 1 or x.shape[2] < 1:
        msg = f"`{name}` must have at least one chain and one dimension; got shape {tuple(draws.shape)}"
        raise ValueError(msg)
    if x.shape[1] < min_draws:
        msg = f"`{name}` must have at least {min_draws} draws per chain; got {x.shape[1]}"
        raise ValueError(msg)
    check_finite(xp, x, name)
    return xp, x, ndim


def _series_layout(xp: Namespace, x: Array, per_chain: bool) -> Array:
    """(chains, n, dim) -> (M, n, S): M chains to combine, S independent series."""
    if not per_chain:
        return x
    c, n, d = x.shape
    # every chain becomes its own group of d series: (1, n, chains * d)
    return xp.reshape(xp.permute_dims(x, (1, 0, 2)), (1, n, c * d))


def _split(xp: Namespace, x: Array) -> Array:
    """Split every chain into its first and last halves (the middle draw is dropped for odd n)."""
    n = x.shape[1]
    half = n // 2
    return xp.concat([x[:, :half, :], x[:, n - half :, :]], axis=0)


# -- autocovariance ------------------------------------------------------------------------------
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
def _cummin(xp: Namespace, p: Array) -> Array:
    """Cumulative minimum along axis 0 by doubling (log2(K) vectorised steps)."""
    k = p.shape[0]
    s = 1
    while s < k:
        p = xp.concat([p[:s, ...], xp.minimum(p[s:, ...], p[:-s, ...])], axis=0)
        s *= 2
    return p


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
    out = total / tau
    return xp.where(ok, out, xp.full_like(out, math.nan))


def _ess_batch_means(xp: Namespace, x: Array, batch_size: int | None) -> Array:
    m, n, s = x.shape
    b = int(math.isqrt(n)) if batch_size is None else batch_size
    a = n // b
    if m * a < 2:
        msg = f"`batch_size`={b} leaves fewer than 2 batches in {m} chain(s) of {n} draws"
        raise ValueError(msg)
    used = x[:, n - a * b :, :]                                   # drop the oldest remainder
    means = xp.mean(xp.reshape(used, (m, a, b, s)), axis=2)       # (M, a, S)
    means = xp.reshape(means, (m * a, s))
    sigma2 = b * xp.var(means, axis=0, correction=1)
    var = xp.var(xp.reshape(used, (m * a * b, s)), axis=0, correction=1)
    ok = (sigma2 > 0) & (var > 0)
    safe = xp.where(ok, sigma2, xp.ones_like(sigma2))
    out = (m * n) * var / safe
    return xp.where(ok, out, xp.full_like(out, math.nan))


# -- public API ----------------------------------------------------------------------------------
def ess(
    draws: Array,
    *,
    method: str = "autocorr",
    per_chain: bool = False,
    split: bool = True,
    batch_size: int | None = None,
) -> Array:
    """Effective sample size of the mean of each coordinate.

    Parameters
    ----------
    draws : array, shape (chains, n, dim), (n, dim) or (n,)
        MCMC draws; a 2-D array is one chain of a ``dim``-vector (pass ``draws[..., None]`` for
        several chains of a scalar).
    method : {"autocorr", "batch_means"}, default "autocorr"
        Autocorrelation with Geyer's initial monotone sequence (Vehtari et al. 2021, without rank
        normalisation), or non-overlapping batch means.
    per_chain : bool, default False
        False: one ESS per coordinate for all chains together (chains are combined through the
        within- and between-chain variances, so chains that disagree lower it). True: each chain on its
        own, shape ``(chains, dim)``.
    split : bool, default True
        Split each chain in two halves before combining (``"autocorr"`` only), which also penalises
        trends within a chain.
    batch_size : int, optional
        Batch length for ``"batch_means"``; default ``floor(sqrt(n))``.

    Returns
    -------
    array
        Shape ``(dim,)``, or ``(chains, dim)`` with ``per_chain=True``; 1-D input gives a 0-d array
        (shape ``(1,)`` with ``per_chain=True``). NaN for a coordinate with zero variance.

    Raises
    ------
    ValueError
        On bad shapes, fewer than 4 draws per chain, non-finite draws or an unknown method.

    Notes
    -----
    For an AR(1) chain x_t = rho x_{t-1} + e_t the ESS of n draws is n (1 - rho) / (1 + rho).

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.diagnostics.ess import ess
    >>> x = np.random.default_rng(0).normal(size=(4, 1000, 2))   # independent draws
    >>> e = ess(x)
    >>> e.shape, bool(np.all((e > 3000) & (e < 5000)))
    ((2,), True)
    >>> ess(x, per_chain=True).shape
    (4, 2)
    """
    if method not in _METHODS:
        msg = f"`method` must be one of {_METHODS}; got {method!r}"
        raise ValueError(msg)
    xp, x, ndim_in = _as_draws(draws, "draws", min_draws=4)
    chains, n, dim = x.shape
    y = _series_layout(xp, x, bool(per_chain))
    if method == "autocorr":
        out = _ess_autocorr(xp, _split(xp, y) if split else y)
    else:
        if batch_size is not None:
            if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
                msg = f"`batch_size` must be a positive int; got {batch_size!r}"
                raise ValueError(msg)
            if batch_size > n:
                msg = f"`batch_size`={batch_size} exceeds the {n} draws per chain"
                raise ValueError(msg)
        out = _ess_batch_means(xp, y, batch_size)
    if per_chain:
        out = xp.reshape(out, (chains, dim))
        return out[:, 0] if ndim_in == 1 else out
    return xp.reshape(out, ()) if ndim_in == 1 else out


def ess_batch_means(draws: Array, *, batch_size: int | None = None, per_chain: bool = False) -> Array:
    """Batch-means effective sample size: ``ess(draws, method="batch_means", ...)``.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.diagnostics.ess import ess_batch_means
    >>> x = np.random.default_rng(1).normal(size=(2, 2500, 3))
    >>> ess_batch_means(x).shape
    (3,)
    """
    return ess(draws, method="batch_means", batch_size=batch_size, per_chain=per_chain)


def rhat(draws: Array, *, split: bool = True) -> Array:
    """Split-R-hat (Gelman et al. 2013; Vehtari et al. 2021 eqs. 3-4, without rank normalisation).

    Parameters
    ----------
    draws : array, shape (chains, n, dim), (n, dim) or (n,)
        MCMC draws (a 2-D array is one chain, which is split in half).
    split : bool, default True
        Split each chain in half first (set False for the original potential scale reduction, which
        needs at least two chains).

    Returns
    -------
    array
        Shape ``(dim,)``; a 0-d array for 1-D input. Values near 1 indicate that the chains (and their
        halves) agree; values above about 1.01-1.1 indicate they have not mixed. NaN where the
        within-chain variance is zero.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.diagnostics.ess import rhat
    >>> x = np.random.default_rng(0).normal(size=(4, 500, 2))
    >>> bool(np.all(np.abs(rhat(x) - 1) < 0.01))
    True
    >>> x[0] += 3.0                     # one chain stuck elsewhere
    >>> bool(np.all(rhat(x) > 1.1))
    True
    """
    xp, x, ndim_in = _as_draws(draws, "draws", min_draws=4)
    if split:
        x = _split(xp, x)
    m, n, _ = x.shape
    if m < 2:
        msg = "`draws` must have at least two chains when split=False"
        raise ValueError(msg)
    means = xp.mean(x, axis=1)                                    # (M, dim)
    w = xp.mean(xp.var(x, axis=1, correction=1), axis=0)
    b_over_n = xp.var(means, axis=0, correction=1)
    var_plus = ((n - 1.0) / n) * w + b_over_n
    ok = w > 0
    safe = xp.where(ok, w, xp.ones_like(w))
    out = xp.sqrt(var_plus / safe)
    out = xp.where(ok, out, xp.full_like(out, math.nan))
    return xp.reshape(out, ()) if ndim_in == 1 else out
