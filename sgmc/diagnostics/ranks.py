"""Rank normalisation of MCMC draws (Vehtari, Gelman, Simpson, Carpenter and Buerkner 2021, section 4.1).

Draws pooled over chains are replaced by Phi^{-1}((rank - 3/8) / (S + 1/4)) with average ranks for
ties. The array API has no special functions, so the normal quantile is Wichura's AS 241
(:func:`ndtri`). Pooled medians and quantiles (NumPy's linear interpolation) live here too.
"""

from __future__ import annotations

import math

from .._array_api import Array, Namespace, array_namespace, device_of
from .._dispatch import native
from ._draws import _cummin, _pooled

__all__ = ["ndtri"]

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
    >>> from sgmc.diagnostics.ranks import ndtri
    >>> np.round(ndtri(np.array([0.025, 0.5, 0.975])), 6)
    array([-1.959964,  0.      ,  1.959964])
    """
    return _ndtri(array_namespace(p), p)


def _ndtri(xp: Namespace, p: Array) -> Array:
    """:func:`ndtri` in the namespace ``xp`` of ``p``."""
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


def _rank_normal_twin(xp: Namespace, v: Array) -> Array:
    """Phi^{-1}((r - 3/8) / (K + 1/4)) of the average ranks ``r`` along axis 0 of ``v`` (K, S).

    The array-API definition; a backend may register a faster ``"rank_normal"`` (the host's sorts
    rows in place and calls scipy's quantile) that must return the same values.
    """
    k = v.shape[0]
    return _ndtri(xp, (_average_ranks(xp, v) - 0.375) / (k + 0.25))


def _z_scale(xp: Namespace, x: Array) -> Array:
    """Rank-normalise each series of (M, n, S) over all its M n draws: Phi^{-1}((r - 3/8) / (K + 1/4))."""
    v = _pooled(xp, x)
    fast = native(xp, "rank_normal")
    z = fast(v) if fast is not None else NotImplemented
    if z is NotImplemented:
        z = _rank_normal_twin(xp, v)
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
