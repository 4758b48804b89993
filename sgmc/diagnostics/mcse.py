"""Monte Carlo standard errors of posterior summaries, and highest density intervals, as ArviZ computes them.

The error of the mean is sd / sqrt(ESS); of the sd, the delta-method error; of a quantile, half the
distance between the draws at the 15.9% and 84.1% quantiles of the Beta law of the quantile's rank
(Vehtari, Gelman, Simpson, Carpenter and Buerkner 2021, section 4.3). The ESS is that of
:mod:`sgmc.diagnostics.ess`.
"""

from __future__ import annotations

import math

from .._array_api import Array, device_of
from ._autocorr import _ess_core
from ._draws import _as_draws, _check_prob, _pooled, _quantile_prob

__all__ = ["mcse", "hdi"]

_MCSE_METHODS = ("mean", "sd", "quantile")


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
        prob = _quantile_prob(prob)
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
