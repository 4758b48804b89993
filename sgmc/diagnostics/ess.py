"""Effective sample size, R-hat, Monte Carlo standard errors and HDIs for MCMC draws, as ArviZ computes them.

For a stationary chain with integrated autocorrelation time tau = 1 + 2 sum_{t>=1} rho_t, the
variance of a sample mean over n draws is that of n / tau independent draws; n / tau is the effective
sample size (ESS). Everything here follows Vehtari, Gelman, Simpson, Carpenter and Buerkner (2021,
"Rank-normalization, folding, and localization: an improved R-hat"), with the numbers of
``arviz-stats``:

* the multi-chain autocorrelation estimate (their section 3.2, eq. 10): chains are split in halves,
  rho_t = 1 - (W - mean_m acov_{m,t}) / var_plus with W and var_plus the within-chain and pooled
  variances, the sum truncated by Geyer's (1992) initial positive sequence and made monotone by his
  initial monotone sequence; as in Stan, the first even lag after the truncation point is added once
  when positive, and tau is bounded below by 1 / log10(total draws). A constant series counts as fully
  informative (ESS = number of draws). Autocovariances come from the FFT when the namespace has the
  ``fft`` extension; otherwise from direct sums over lags, stopped once every series is truncated.
* rank normalisation (section 4.1): draws pooled over chains are replaced by
  Phi^{-1}((rank - 3/8) / (S + 1/4)) with average ranks for ties; the normal quantile is Wichura's
  AS 241 (:func:`ndtri`), since the array API has no special functions. Bulk ESS is the ESS of the
  rank-normalised draws; tail ESS the smaller ESS of the indicators at the 5% and 95% quantiles; R-hat
  the larger split-R-hat of the rank-normalised and the folded (|x - median|) rank-normalised draws.
* Monte Carlo standard errors of the mean, the sd and quantiles (section 4.3), and the highest density
  interval of the pooled draws.

Arrays follow one convention: ``(chains, n, dim)``; ``(n, dim)`` is one chain; ``(n,)`` one chain of
a scalar. Results have shape ``(dim,)`` (or ``(chains, dim)`` per chain), and a 0-d array for 1-D
input, in the namespace, dtype and device of the draws.
"""

from __future__ import annotations

import math
from typing import Any

from .._array_api import Array, Namespace, array_namespace, as_float_array, check_finite, device_of, float_dtype, is_array

__all__ = ["ess", "rhat", "mcse", "hdi", "ndtri"]

_ESS_METHODS = ("bulk", "tail", "mean", "sd", "quantile", "autocorr")
_RHAT_METHODS = ("rank", "split", "identity")
_MCSE_METHODS = ("mean", "sd", "quantile")
_RESOLUTION = 1e-15


# -- input handling ------------------------------------------------------------------------------
def _as_draws(draws: Any, name: str, min_draws: int) -> tuple[Namespace, Array, int]:
    """Return ``(xp, x, ndim_in)`` with ``x`` of shape (chains, n, dim) and a floating dtype."""
    if not is_array(draws):
        msg = (
            f"`{name}` must be an array of shape (chains, n, dim), (n, dim) or (n,) (NumPy, CuPy, torch or "
            f"array-api-strict); got {type(draws).__name__}"
        )
        raise TypeError(msg)
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
    out = xp.where(ok, total / tau, xp.full_like(tau, math.nan))
    # A constant series (range below 1e-15) counts as fully informative, as in ArviZ: ESS = draws.
    spread = xp.max(x, axis=(0, 1)) - xp.min(x, axis=(0, 1))
    return xp.where(spread < _RESOLUTION, xp.full_like(out, total), out)


# -- rank normalisation ----------------------------------------------------------------------------
# Wichura (1988), Algorithm AS 241 (PPND16): the standard normal quantile to about 1e-16 relative,
# as three rational functions (central region, tail, far tail).
_AS241_A = (3.3871328727963666080e0, 1.3314166789178437745e2, 1.9715909503065514427e3, 1.3731693765509461125e4,
            4.5921953931549871457e4, 6.7265770927008700853e4, 3.3430575583588128105e4, 2.5090809287301226727e3)
_AS241_B = (1.0, 4.2313330701600911252e1, 6.8718700749205790830e2, 5.3941960214247511077e3,
            2.1213794301586595867e4, 3.9307895800092710610e4, 2.8729085735721942674e4, 5.2264952788528545610e3)
_AS241_C = (1.42343711074968357734e0, 4.63033784615654529590e0, 5.76949722146069140550e0, 3.64784832476320460504e0,
            1.27045825245236838258e0, 2.41780725177450611770e-1, 2.27238449892691845833e-2, 7.74545014278341407640e-4)
_AS241_D = (1.0, 2.05319162663775882187e0, 1.67638483018380384940e0, 6.89767334985100004550e-1,
            1.48103976427480074590e-1, 1.51986665636164571966e-2, 5.47593808499534494600e-4, 1.05075007164441684324e-9)
_AS241_E = (6.65790464350110377720e0, 5.46378491116411436990e0, 1.78482653991729133580e0, 2.96560571828504891230e-1,
            2.65321895265761230930e-2, 1.24266094738807843860e-3, 2.71155556874348757815e-5, 2.01033439929228813265e-7)
_AS241_F = (1.0, 5.99832206555887937690e-1, 1.36929880922735805310e-1, 1.48753612908506148525e-2,
            7.86869131145613259100e-4, 1.84631831751005468180e-5, 1.42151175831644588870e-7, 2.04426310338993978564e-15)


def _poly(coefs: tuple, r: Array) -> Array:
    out = coefs[-1] + 0.0 * r
    for c in coefs[-2::-1]:
        out = out * r + c
    return out


def ndtri(p: Array) -> Array:
    """Standard normal quantile Phi^{-1}(p), elementwise (Wichura 1988, AS 241; relative error ~1e-16).

    The array API has no special functions, so the rank-normalised diagnostics carry their own.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.diagnostics.ess import ndtri
    >>> np.round(ndtri(np.array([0.025, 0.5, 0.975])), 6)
    array([-1.959964,  0.      ,  1.959964])
    """
    xp = array_namespace(p)
    q = p - 0.5
    central = xp.abs(q) <= 0.425
    r_c = 0.180625 - q * q
    x_c = q * _poly(_AS241_A, r_c) / _poly(_AS241_B, r_c)
    tail_p = xp.where(q <= 0, p, 1.0 - p)
    tail_p = xp.where(central, xp.full_like(p, 0.5), tail_p)        # keeps log() finite where unused
    r = xp.sqrt(-xp.log(tail_p))
    near = r <= 5.0
    x_n = _poly(_AS241_C, r - 1.6) / _poly(_AS241_D, r - 1.6)
    x_f = _poly(_AS241_E, r - 5.0) / _poly(_AS241_F, r - 5.0)
    x_t = xp.where(near, x_n, x_f)
    x_t = xp.where(q < 0, -x_t, x_t)
    return xp.where(central, x_c, x_t)


def _cummax(xp: Namespace, p: Array) -> Array:
    return -_cummin(xp, -p)


def _average_ranks(xp: Namespace, v: Array) -> Array:
    """Ranks 1..K along axis 0 of ``v`` (K, S), ties given their average rank (scipy's "average")."""
    k = v.shape[0]
    order = xp.argsort(v, axis=0, stable=True)
    s = xp.take_along_axis(v, order, axis=0)
    pos = xp.astype(xp.arange(k, device=device_of(v)), v.dtype)[:, None] + xp.zeros_like(s)
    differs = s[1:, :] != s[:-1, :]
    edge = xp.ones_like(differs[:1, :])
    first = xp.concat([edge, differs], axis=0)                   # starts a run of equal values
    last = xp.concat([differs, edge], axis=0)                    # ends one
    start = _cummax(xp, xp.where(first, pos, xp.zeros_like(pos)))
    stop = xp.flip(_cummin(xp, xp.flip(xp.where(last, pos, xp.full_like(pos, k)), axis=0)), axis=0)
    ranks = 0.5 * (start + stop) + 1.0
    return xp.take_along_axis(ranks, xp.argsort(order, axis=0), axis=0)


def _pooled(xp: Namespace, x: Array) -> Array:
    return xp.reshape(x, (-1, x.shape[2]))


def _z_scale(xp: Namespace, x: Array) -> Array:
    """Rank-normalise each series of (M, n, S) over all its M n draws: Phi^{-1}((r - 3/8) / (K + 1/4))."""
    k = x.shape[0] * x.shape[1]
    r = _average_ranks(xp, _pooled(xp, x))
    z = ndtri((r - 0.375) / (k + 0.25))
    return xp.reshape(z, tuple(x.shape))


def _median(xp: Namespace, x: Array) -> Array:
    """Median of each series of (M, n, S) over all its draws, shape (S,)."""
    s = xp.sort(_pooled(xp, x), axis=0)
    k = s.shape[0]
    if k % 2:
        return s[k // 2, :]
    return (s[k // 2 - 1, :] + s[k // 2, :]) / 2.0


def _quantile(xp: Namespace, x: Array, prob: float) -> Array:
    """Quantile ``prob`` of each series of (M, n, S) over all its draws (linear interpolation, type 7)."""
    s = xp.sort(_pooled(xp, x), axis=0)
    k = s.shape[0]
    h = (k - 1) * prob                            # NumPy's virtual index for the linear method
    lo = min(max(int(math.floor(h)), 0), k - 1)
    hi = min(lo + 1, k - 1)
    t = h - lo
    a, b = s[lo, :], s[hi, :]
    diff = b - a
    return b - diff * (1.0 - t) if t >= 0.5 else a + diff * t


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


def _check_prob(prob: Any, name: str = "prob") -> float:
    ok = isinstance(prob, (int, float)) and not isinstance(prob, bool) and 0.0 < float(prob) < 1.0
    if not ok:
        msg = f"`{name}` must be a number in (0, 1); got {prob!r}"
        raise ValueError(msg)
    return float(prob)


def _finish(xp: Namespace, out: Array, chains: int, dim: int, per_chain: bool, ndim_in: int) -> Array:
    if per_chain:
        out = xp.reshape(out, (chains, dim))
        return out[:, 0] if ndim_in == 1 else out
    return xp.reshape(out, ()) if ndim_in == 1 else out


# -- public API ----------------------------------------------------------------------------------
def ess(
    draws: Array,
    *,
    method: str = "bulk",
    prob: float | None = None,
    per_chain: bool = False,
    split: bool = True,
) -> Array:
    """Effective sample size of each coordinate (Vehtari et al. 2021), as ArviZ computes it.

    Parameters
    ----------
    draws : array, shape (chains, n, dim), (n, dim) or (n,)
        MCMC draws; a 2-D array is one chain of a ``dim``-vector (pass ``draws[..., None]`` for
        several chains of a scalar).
    method : {"bulk", "tail", "mean", "sd", "quantile", "autocorr"}, default "bulk"
        ``"bulk"``: split chains, rank-normalised (ESS of the rank-normalised draws, a location
        measure robust to heavy tails). ``"tail"``: the smaller ESS of the indicators
        ``draws <= q`` at the ``prob`` and ``1 - prob`` quantiles (default ``prob=0.05``).
        ``"mean"`` (alias ``"autocorr"``): the ESS of the sample mean, without rank normalisation.
        ``"sd"``: ESS of the squared centred draws. ``"quantile"``: ESS of the indicator at ``prob``.
    prob : float, optional
        The quantile for ``"tail"`` (default 0.05) and ``"quantile"`` (required).
    per_chain : bool, default False
        False: one ESS per coordinate for all chains together (chains are combined through the
        within- and between-chain variances, so chains that disagree lower it). True: each chain on its
        own, shape ``(chains, dim)``.
    split : bool, default True
        Split each chain in two halves before combining, which also penalises trends within a chain.

    Returns
    -------
    array
        Shape ``(dim,)``, or ``(chains, dim)`` with ``per_chain=True``; 1-D input gives a 0-d array
        (shape ``(1,)`` with ``per_chain=True``). A constant coordinate gets the number of draws, as in
        ArviZ.

    Raises
    ------
    ValueError
        On bad shapes, fewer than 4 draws per chain, non-finite draws or an unknown method.

    Notes
    -----
    For an AR(1) chain x_t = rho x_{t-1} + e_t the ESS of the mean of n draws is
    n (1 - rho) / (1 + rho). The values equal ``arviz_stats``' ``ess`` for the same method to about
    1e-12 relative (the rank transform uses Wichura's AS 241 normal quantile, :func:`ndtri`).

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.diagnostics.ess import ess
    >>> x = np.random.default_rng(0).normal(size=(4, 1000, 2))   # independent draws
    >>> e = ess(x)
    >>> e.shape, bool(np.all((e > 3000) & (e < 5000)))
    ((2,), True)
    >>> ess(x, method="tail").shape, ess(x, per_chain=True).shape
    ((2,), (4, 2))
    """
    if method == "batch_means":
        msg = (
            "`method='batch_means'` is no longer offered: with floor(sqrt(n)) batches it overstates the ESS "
            "of strongly autocorrelated chains and of chains that disagree; use method='mean' or 'bulk'"
        )
        raise ValueError(msg)
    if method not in _ESS_METHODS:
        msg = f"`method` must be one of {_ESS_METHODS}; got {method!r}"
        raise ValueError(msg)
    if method == "tail":
        prob = 0.05 if prob is None else _check_prob(prob)
    elif method == "quantile":
        if prob is None:
            msg = "`prob` is required for method='quantile' (a number in (0, 1))"
            raise ValueError(msg)
        prob = _check_prob(prob)
    xp, x, ndim_in = _as_draws(draws, "draws", min_draws=4)
    chains, n, dim = x.shape
    y = _series_layout(xp, x, bool(per_chain))
    out = _ess_core(xp, y, method, prob, bool(split))
    return _finish(xp, out, chains, dim, bool(per_chain), ndim_in)


def _rhat_basic(xp: Namespace, x: Array) -> Array:
    """sqrt((B / W + n - 1) / n) of (M, n, S); NaN where W = 0."""
    n = x.shape[1]
    w = xp.mean(xp.var(x, axis=1, correction=1), axis=0)
    b = n * xp.var(xp.mean(x, axis=1), axis=0, correction=1)
    ok = w > 0
    safe = xp.where(ok, w, xp.ones_like(w))
    out = xp.sqrt((b / safe + n - 1.0) / n)
    return xp.where(ok, out, xp.full_like(out, math.nan))


def rhat(draws: Array, *, method: str = "rank") -> Array:
    """Potential scale reduction R-hat of each coordinate (Vehtari et al. 2021), as ArviZ computes it.

    Parameters
    ----------
    draws : array, shape (chains, n, dim), (n, dim) or (n,)
        MCMC draws (a 2-D array is one chain).
    method : {"rank", "split", "identity"}, default "rank"
        ``"rank"``: the larger of the split-R-hat of the rank-normalised draws and of the
        rank-normalised folded draws ``|x - median|`` (their eq. 4 and section 4.2), which also
        detects chains that differ in scale. ``"split"``: split-R-hat of the raw draws (Gelman et al.
        2013). ``"identity"``: without splitting.

    Returns
    -------
    array
        Shape ``(dim,)``; a 0-d array for 1-D input. Values near 1 indicate that the chains (and their
        halves) agree; above about 1.01 they have not mixed. NaN where the within-chain variance is
        zero (a constant coordinate, as in ArviZ).

    Raises
    ------
    TypeError
        When ``draws`` is not an array, or is complex or half precision.
    ValueError
        On bad shapes, fewer than 4 draws per chain, non-finite draws, an unknown method, and a
        single chain with ``"rank"`` or ``"identity"`` (ArviZ returns NaN there; ``"split"`` compares
        the halves of one chain).

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
    if method not in _RHAT_METHODS:
        msg = f"`method` must be one of {_RHAT_METHODS}; got {method!r}"
        raise ValueError(msg)
    xp, x, ndim_in = _as_draws(draws, "draws", min_draws=4)
    chains = x.shape[0]
    if method == "identity":
        if chains < 2:
            msg = "`draws` must have at least two chains for method='identity'"
            raise ValueError(msg)
        out = _rhat_basic(xp, x)
    elif method == "split":
        out = _rhat_basic(xp, _split(xp, x))
    elif chains < 2:
        msg = (
            f"`draws` holds one chain (shape {tuple(draws.shape)}): the rank-normalised R-hat compares "
            "chains, so pass (chains, n, dim) with at least two chains, or method='split' to compare "
            "the two halves of one chain"
        )
        raise ValueError(msg)
    else:
        s = _split(xp, x)
        bulk = _rhat_basic(xp, _z_scale(xp, s))
        folded = _rhat_basic(xp, _z_scale(xp, xp.abs(s - _median(xp, s))))
        out = xp.where(xp.isnan(bulk) | xp.isnan(folded), xp.full_like(bulk, math.nan), xp.maximum(bulk, folded))
    return xp.reshape(out, ()) if ndim_in == 1 else out


# -- Monte Carlo standard errors ---------------------------------------------------------------------
def _beta_ppf(q: float, a: float, b: float) -> float:
    """Quantile of Beta(a, b) at ``q``, a Python float: SciPy's inverse regularised incomplete beta."""
    from scipy.special import betaincinv   # here, not at the top: ``import sgmc`` need not load scipy.special

    return float(betaincinv(a, b, q))


def mcse(draws: Array, *, method: str = "mean", prob: float | None = None) -> Array:
    """Monte Carlo standard error of the mean, sd or a quantile of each coordinate, as ArviZ computes it.

    Parameters
    ----------
    draws : array, shape (chains, n, dim), (n, dim) or (n,)
    method : {"mean", "sd", "quantile"}, default "mean"
        ``"mean"``: sd / sqrt(ESS_mean). ``"sd"``: the delta-method error of the sd,
        sqrt(Var(c^2) / ESS_mean / (4 E[c^2])) with c the centred draws (``arviz_stats``' formula;
        0 for a constant coordinate, whose sd is exactly 0, where ArviZ gives NaN).
        ``"quantile"``: half the distance between the draws at the 15.9% and 84.1% quantiles of the
        Beta(ESS p + 1, ESS (1 - p) + 1) law of the quantile's rank (Vehtari et al. 2021, section 4.3).
    prob : float, optional
        The quantile for ``"quantile"`` (required).

    Returns
    -------
    array
        Shape ``(dim,)`` (0-d for 1-D input), in the namespace of ``draws``. ``"quantile"`` computes
        the Beta quantiles on the host, one coordinate at a time.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.diagnostics.ess import mcse
    >>> x = np.random.default_rng(0).normal(size=(4, 1000, 1))
    >>> bool(abs(float(mcse(x)[0]) - 1 / np.sqrt(4000)) < 0.002)
    True
    """
    if method not in _MCSE_METHODS:
        msg = f"`method` must be one of {_MCSE_METHODS}; got {method!r}"
        raise ValueError(msg)
    if method == "quantile":
        if prob is None:
            msg = "`prob` is required for method='quantile' (a number in (0, 1))"
            raise ValueError(msg)
        prob = _check_prob(prob)
    xp, x, ndim_in = _as_draws(draws, "draws", min_draws=4)
    flat = _pooled(xp, x)
    if method == "mean":
        out = xp.std(flat, axis=0, correction=1) / xp.sqrt(_ess_core(xp, x, "mean", None, True))
    elif method == "sd":
        c = flat - xp.mean(flat, axis=0)
        c2 = c * c
        e = _ess_core(xp, x, "mean", None, True)
        evar = xp.mean(c2, axis=0)
        varvar = (xp.mean(c2 * c2, axis=0) - evar * evar) / e
        ok = evar > 0
        safe = xp.where(ok, evar, xp.ones_like(evar))
        # a constant coordinate's sd is exactly 0, without Monte Carlo error (ArviZ gives NaN)
        out = xp.where(ok, xp.sqrt(varvar / safe / 4.0), xp.zeros_like(evar))
    else:
        e = _ess_core(xp, x, "quantile", prob, True)
        s = xp.sort(flat, axis=0)
        size = s.shape[0]
        lo_idx, hi_idx = [], []
        for j in range(s.shape[1]):
            ej = float(e[j])
            if math.isfinite(ej) and ej > 0:
                a, b = ej * prob + 1.0, ej * (1.0 - prob) + 1.0
                p1 = _beta_ppf(0.1586553, a, b) * size - 1.0
                p2 = _beta_ppf(0.8413447, a, b) * size - 1.0
            else:
                p1, p2 = 0.0, size - 1.0
            lo_idx.append(int(math.floor(max(p1, 0.0))))
            hi_idx.append(int(math.ceil(min(p2, size - 1.0))))
        dev = device_of(s)
        i1 = xp.asarray(lo_idx, dtype=xp.int64, device=dev)[None, :]
        i2 = xp.asarray(hi_idx, dtype=xp.int64, device=dev)[None, :]
        out = (xp.take_along_axis(s, i2, axis=0) - xp.take_along_axis(s, i1, axis=0))[0, :] / 2.0
    return xp.reshape(out, ()) if ndim_in == 1 else out


def hdi(draws: Array, prob: float = 0.89) -> Array:
    """Highest density interval of each coordinate: the shortest interval holding ``floor(prob K)`` + 1 draws.

    The pooled draws of every coordinate are sorted and the narrowest window of ``floor(prob K)``
    consecutive gaps is kept (ArviZ's ``"nearest"`` method; the first such window on ties).

    Parameters
    ----------
    draws : array, shape (chains, n, dim), (n, dim) or (n,)
    prob : float, default 0.89
        Probability mass of the interval (ArviZ's default).

    Returns
    -------
    array, shape (dim, 2)
        Lower and upper bounds (shape ``(2,)`` for 1-D input).

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.diagnostics.ess import hdi
    >>> x = np.random.default_rng(0).normal(size=(2, 5000, 1))
    >>> np.round(hdi(x, 0.95), 1)
    array([[-2. ,  1.9]])
    """
    prob = _check_prob(prob)
    xp, x, ndim_in = _as_draws(draws, "draws", min_draws=1)
    s = xp.sort(_pooled(xp, x), axis=0)
    k = s.shape[0]
    inc = int(math.floor(prob * k))
    if inc >= k:
        msg = f"`draws` has too few draws ({k}) for an interval of probability {prob}"
        raise ValueError(msg)
    width = s[inc:, :] - s[: k - inc, :]
    i = xp.argmin(width, axis=0)[None, :]
    lo = xp.take_along_axis(s, i, axis=0)[0, :]
    hi = xp.take_along_axis(s, i + inc, axis=0)[0, :]
    out = xp.stack([lo, hi], axis=-1)
    return out[0, :] if ndim_in == 1 else out
