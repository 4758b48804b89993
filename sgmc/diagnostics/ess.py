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

from .._array_api import Array, Namespace
from ._autocorr import _ess_core
from ._draws import _as_draws, _check_prob, _quantile_prob, _series_layout, _split
from .mcse import hdi, mcse
from .ranks import _median, _z_scale, ndtri

__all__ = ["ess", "rhat", "mcse", "hdi", "ndtri"]

_ESS_METHODS = ("bulk", "tail", "mean", "sd", "quantile", "autocorr")
_RHAT_METHODS = ("rank", "split", "identity")


def _finish(xp: Namespace, out: Array, chains: int, dim: int, per_chain: bool, ndim_in: int) -> Array:
    if per_chain:
        out = xp.reshape(out, (chains, dim))
        return out[:, 0] if ndim_in == 1 else out
    return xp.reshape(out, ()) if ndim_in == 1 else out


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
        prob = _quantile_prob(prob)
    xp, x, ndim_in = _as_draws(draws, "draws", min_draws=4)
    return ess_of(xp, x, method, prob, bool(per_chain), bool(split), ndim_in)


def ess_of(xp: Namespace, x: Array, method: str = "bulk", prob: float | None = None, per_chain: bool = False,
           split: bool = True, ndim_in: int = 3) -> Array:
    """:func:`ess` of checked draws ``x`` (chains, n, dim) of the namespace ``xp`` (a caller that knows it)."""
    chains, n, dim = x.shape
    y = _series_layout(xp, x, per_chain)
    out = _ess_core(xp, y, method, prob, split)
    return _finish(xp, out, chains, dim, per_chain, ndim_in)


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
    return rhat_of(xp, x, method, ndim_in, tuple(draws.shape))


def rhat_of(xp: Namespace, x: Array, method: str = "rank", ndim_in: int = 3, shape: tuple | None = None) -> Array:
    """:func:`rhat` of checked draws ``x`` (chains, n, dim) of the namespace ``xp`` (a caller that knows it)."""
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
            f"`draws` holds one chain (shape {shape or tuple(x.shape)}): the rank-normalised R-hat compares "
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
