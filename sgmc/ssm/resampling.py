"""Resampling for particle filters: multinomial, stratified, systematic and residual, in O(N).

Resampling replaces ``N`` weighted particles by ``N`` equally weighted ones: particle ``i`` gets
``O_i`` offspring with ``E[O_i] = N W_i`` for every scheme here, so that averages over the offspring
are unbiased for averages under the weights. The schemes differ in how much extra noise the offspring
counts carry (Douc, Cappe and Moulines 2005; Chopin and Papaspiliopoulos 2020, ch. 9):

* **multinomial**: the counts are Multinomial(N, W): ``Var O_i = N W_i (1 - W_i)``, the most noise.
  This is what the Aicher thesis (Alg. 2) uses.
* **residual**: particle ``i`` first gets ``floor(N W_i)`` offspring for certain; the remaining
  ``R = N - sum floor(N W_i)`` are drawn multinomially from the fractional parts. Only the
  fractional parts are random, so ``Var O_i <= R r_i (1 - r_i) <= N W_i (1 - W_i)`` with ``r_i`` the
  normalised fractional parts.
* **stratified**: one uniform in each stratum ``[k/N, (k+1)/N)``, pushed through the inverse CDF of
  the weights. ``O_i`` differs from ``N W_i`` by less than 2, and ``Var O_i <= N W_i (1 - W_i)``.
* **systematic**: the same grid of points ``(k + U)/N`` with a single uniform ``U`` for all strata.
  ``O_i`` is ``floor(N W_i)`` or ``ceil(N W_i)``, so ``Var O_i = f_i (1 - f_i)`` with ``f_i`` the
  fractional part of ``N W_i``: the least noise per particle, although the counts of different
  particles are strongly dependent (the ordering of particles matters).

Every scheme is written as one pass over cumulative weights: the *cumulative offspring counts*
``C_i = #{k : s_k < cdf_i}`` of sorted points ``s_k`` in [0, 1) are computed in closed form
(systematic, stratified) or by one ``searchsorted`` of the cumulative weights into sorted uniforms
(multinomial, residual), which are themselves produced in O(N) from plain uniforms by the
order-statistics recursion ``s_(N) = U_N^{1/N}``, ``s_(k) = s_(k+1) U_k^{1/k}`` (in logarithms:
a reversed cumulative sum), never by sorting. The ancestors follow from the integer counts. Weights
are never sorted.

Each scheme is a pure function of the weights and pre-drawn uniforms (``systematic_ancestors`` and
friends); it is the array-API twin that defines the result, and a backend may supply a native path
under the name ``"resample_<scheme>"`` (:func:`sgmc._dispatch.native`) that returns the same
integers. :func:`resample` draws the uniforms and dispatches.
"""

from __future__ import annotations

import math
from typing import Any

from .._array_api import Array, array_namespace, device_of
from .. import backends
from .._dispatch import dispatch, native

__all__ = [
    "SCHEMES",
    "resample",
    "uniforms_for",
    "multinomial_ancestors",
    "stratified_ancestors",
    "systematic_ancestors",
    "residual_ancestors",
    "ancestors_from_counts",
    "ess",
    "resample_if_low_ess",
]

SCHEMES = ("multinomial", "stratified", "systematic", "residual")


def _as_batch(weights: Array) -> tuple[Any, Array, bool]:
    xp = array_namespace(weights)
    if weights.ndim == 1:
        return xp, weights[None, :], True
    if weights.ndim != 2:
        msg = f"`weights` must have shape (N,) or (batch, N); got shape {tuple(weights.shape)}"
        raise ValueError(msg)
    return xp, weights, False


def _scaled_cdf(xp: Any, weights: Array) -> Array:
    """``N * cdf / cdf[-1]`` per row, in float64: the points the strata are compared with."""
    w = xp.astype(weights, xp.float64)
    b, n = weights.shape
    c = xp.cumulative_sum(w, axis=-1)
    # The last entry is exactly N (not N times a rounded ratio), so every row's counts end at N.
    last = xp.full((b, 1), float(n), dtype=xp.float64, device=device_of(weights))
    return xp.concat([c[:, :-1] * (float(n) / c[:, -1:]), last], axis=1)


def ancestors_from_counts(counts: Array) -> Array:
    """Ancestor indices from cumulative offspring counts.

    Parameters
    ----------
    counts : int64 array (batch, N)
        Non-decreasing, ``counts[:, -1] == N``: ``counts[b, i]`` offspring in total go to particles
        ``0..i`` of row ``b``.

    Returns
    -------
    int64 array (batch, N)
        Non-decreasing ancestors: slot ``k`` of row ``b`` descends from the first particle ``i``
        with ``counts[b, i] > k``.
    """
    xp = array_namespace(counts)
    fast = native(xp, "ancestors_from_counts")
    if fast is not None:
        return fast(counts)
    b, n = counts.shape
    dev = device_of(counts)
    row = xp.arange(b, dtype=xp.int64, device=dev)[:, None]
    flat = xp.reshape(counts + row * (n + 1), (-1,))
    k = xp.arange(n, dtype=xp.int64, device=dev)[None, :] + row * (n + 1)
    idx = xp.searchsorted(flat, xp.reshape(k, (-1,)), side="right")
    return xp.reshape(idx, (b, n)) - row * n


def _counts(xp: Any, c: Array) -> Array:
    return xp.astype(c, xp.int64)


def systematic_counts(weights: Array, u: Array) -> Array:
    """Cumulative offspring counts of systematic resampling: ``min(floor(N cdf + u), N)``.

    The points are ``s_k = (k + 1 - u) / N``, ``k = 0..N-1`` (``1 - u`` is uniform on (0, 1]), and
    ``#{k : s_k <= cdf_i} = floor(N cdf_i + u)``: a floor of a non-negative number, which an
    integer conversion computes in the same pass.
    """
    xp = array_namespace(weights, u)
    v = _scaled_cdf(xp, weights)
    n = weights.shape[-1]
    c = xp.floor(v + xp.astype(u, xp.float64)[:, None])
    return xp.clip(_counts(xp, c), 0, n)


def systematic_ancestors(weights: Array, u: Array) -> Array:
    """Systematic resampling with pre-drawn uniforms ``u`` (batch,): the twin of ``resample_systematic``.

    The points are ``(k + 1 - u_b) / N``, ``k = 0..N-1``; particle ``i`` of row ``b`` gets every
    point in ``(cdf_{i-1}, cdf_i]``. Offspring counts are ``floor(N W_i)`` or ``ceil(N W_i)``.
    """
    return ancestors_from_counts(systematic_counts(weights, u))


def stratified_counts(weights: Array, u: Array) -> Array:
    """Cumulative offspring counts of stratified resampling with uniforms ``u`` (batch, N).

    With ``v = N cdf_i`` and ``m = floor(v)``, every stratum ``k < m`` lies below ``v`` and stratum
    ``m`` does when ``u_m < v - m``: ``C_i = m + [u_m < v - m]``.
    """
    xp = array_namespace(weights, u)
    v = _scaled_cdf(xp, weights)
    n = weights.shape[-1]
    m = xp.clip(xp.floor(v), 0.0, float(n))
    mi = xp.astype(m, xp.int64)
    um = xp.take_along_axis(xp.astype(u, xp.float64), xp.clip(mi, 0, n - 1), axis=1)
    extra = (um < v - m) & (mi < n)
    return mi + xp.astype(extra, xp.int64)


def stratified_ancestors(weights: Array, u: Array) -> Array:
    """Stratified resampling with pre-drawn uniforms ``u`` (batch, N): the twin of ``resample_stratified``.

    Point ``k`` is ``(k + u[b, k]) / N``, one uniform in each stratum.
    """
    return ancestors_from_counts(stratified_counts(weights, u))


def sorted_uniforms(u: Array, n_valid: Array | None = None) -> Array:
    """Order statistics of uniforms in O(N), from plain uniforms ``u`` (batch, N), without sorting.

    ``s_(K) = U_K^{1/K}`` and ``s_(k) = s_(k+1) U_k^{1/k}``: the largest of ``K`` uniforms has
    distribution ``x^K``, and given it the others are uniform below it. In logarithms this is a
    reversed cumulative sum of ``log(U_k) / k``. With ``n_valid`` (batch,) only the first
    ``n_valid[b]`` entries of row ``b`` are order statistics (of ``n_valid[b]`` uniforms); the rest
    are set to 2 (beyond every cumulative weight).
    """
    xp = array_namespace(u)
    b, n = u.shape
    dev = device_of(u)
    k = xp.arange(1, n + 1, dtype=xp.float64, device=dev)[None, :]
    # 1 - U is in (0, 1]: its logarithm is finite.
    terms = xp.log(1.0 - xp.astype(u, xp.float64)) / k
    if n_valid is not None:
        valid = k <= xp.astype(n_valid, xp.float64)[:, None]
        terms = xp.where(valid, terms, 0.0)
    rev = xp.flip(xp.cumulative_sum(xp.flip(terms, axis=1), axis=1), axis=1)
    s = xp.exp(rev)
    if n_valid is not None:
        s = xp.where(valid, s, 2.0)
    return s


def _counts_below(xp: Any, s: Array, cdf01: Array) -> Array:
    """``#{k : s[b, k] < cdf01[b, i]}`` for sorted rows ``s`` (values in [0, 2]) and cdf in [0, 1]."""
    b, n = s.shape
    dev = device_of(s)
    off = xp.arange(b, dtype=xp.float64, device=dev)[:, None] * 3.0
    flat = xp.reshape(s + off, (-1,))
    idx = xp.searchsorted(flat, xp.reshape(cdf01 + off, (-1,)), side="left")
    row = xp.arange(b, dtype=xp.int64, device=dev)[:, None]
    return xp.reshape(idx, (b, n)) - row * n


def multinomial_counts(weights: Array, u: Array) -> Array:
    """Cumulative offspring counts of multinomial resampling with uniforms ``u`` (batch, N)."""
    xp = array_namespace(weights, u)
    n = weights.shape[-1]
    s = sorted_uniforms(u)
    return _counts_below(xp, s, _scaled_cdf(xp, weights) / float(n))


def multinomial_ancestors(weights: Array, u: Array) -> Array:
    """Multinomial resampling with pre-drawn uniforms ``u`` (batch, N): the twin of ``resample_multinomial``.

    The uniforms become order statistics by :func:`sorted_uniforms` (O(N), no sort); the ancestors
    are their inverse-CDF images.
    """
    return ancestors_from_counts(multinomial_counts(weights, u))


def residual_counts(weights: Array, u: Array) -> Array:
    """Cumulative offspring counts of residual resampling with uniforms ``u`` (batch, N)."""
    xp = array_namespace(weights, u)
    n = weights.shape[-1]
    w = xp.astype(weights, xp.float64)
    nw = w * (float(n) / xp.sum(w, axis=-1, keepdims=True))
    fl = xp.floor(nw)
    det = xp.astype(xp.cumulative_sum(fl, axis=-1), xp.int64)
    det = xp.clip(det, 0, n)
    r_count = n - det[:, -1]
    frac = nw - fl
    cf = xp.cumulative_sum(frac, axis=-1)
    tot = cf[:, -1:]
    cf01 = xp.where(tot > 0.0, cf / xp.where(tot > 0.0, tot, 1.0), 1.0)
    s = sorted_uniforms(u, r_count)
    return det + _counts_below(xp, s, cf01)


def residual_ancestors(weights: Array, u: Array) -> Array:
    """Residual resampling with pre-drawn uniforms ``u`` (batch, N): the twin of ``resample_residual``.

    ``floor(N W_i)`` offspring are kept deterministically; the remaining ``R_b`` are multinomial on
    the fractional parts, using the first ``R_b`` uniforms of row ``b`` as order statistics.
    """
    return ancestors_from_counts(residual_counts(weights, u))


_TWINS = {
    "multinomial": multinomial_ancestors,
    "stratified": stratified_ancestors,
    "systematic": systematic_ancestors,
    "residual": residual_ancestors,
}


def _check_scheme(scheme: str) -> None:
    if scheme not in _TWINS:
        msg = f"`scheme` must be one of {SCHEMES}; got {scheme!r}"
        raise ValueError(msg)


def uniforms_for(rng: Any, scheme: str, batch: int, n: int) -> Array:
    """The uniforms a scheme consumes: (batch,) for systematic, (batch, N) otherwise (float64)."""
    _check_scheme(scheme)
    xp = rng.backend.xp
    shape = (batch,) if scheme == "systematic" else (batch, n)
    return rng.uniform(shape, dtype=xp.float64)


def ancestors(weights: Array, uniforms: Array, scheme: str = "systematic") -> Array:
    """Ancestors from weights (batch, N) and pre-drawn uniforms, through the native path when one exists."""
    _check_scheme(scheme)
    xp = array_namespace(weights, uniforms)
    return dispatch(xp, "resample_" + scheme, _TWINS[scheme])(weights, uniforms)


def resample(rng: Any, weights: Array, scheme: str = "systematic", *, uniforms: Array | None = None) -> Array:
    """Draw ancestor indices for one or a batch of weight vectors.

    Parameters
    ----------
    rng : sgmc Generator, int, SeedSequence or None
        Only used when ``uniforms`` is not given.
    weights : float array (N,) or (batch, N)
        Non-negative weights with a positive sum per row (normalised inside).
    scheme : {"systematic", "stratified", "residual", "multinomial"}
        See the module docstring for what each guarantees about the offspring counts.
    uniforms : float array, optional
        Pre-drawn uniforms on [0, 1): (batch,) for systematic, (batch, N) otherwise. With them the
        result is a deterministic function of the inputs.

    Returns
    -------
    int64 array of the shape of ``weights``
        Ancestor indices, non-decreasing along each row; index ``i`` appears ``O_i`` times with
        ``E[O_i] = N W_i``.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.ssm import resample
    >>> w = np.array([0.5, 0.25, 0.125, 0.125])
    >>> resample(0, w, "systematic", uniforms=np.array([0.5]))
    array([0, 0, 1, 2])
    >>> resample(0, w, "residual").shape
    (4,)
    """
    _check_scheme(scheme)
    xp, w, single = _as_batch(weights)
    b, n = w.shape
    if n < 1:
        msg = "`weights` must hold at least one particle; got N = 0"
        raise ValueError(msg)
    if uniforms is None:
        rng = backends.default_rng(rng, backend=xp) if not hasattr(rng, "uniform") else rng
        uniforms = uniforms_for(rng, scheme, b, n)
    elif single:
        uniforms = xp.reshape(uniforms, (1,) if scheme == "systematic" else (1, n))
    anc = ancestors(w, uniforms, scheme)
    return anc[0, :] if single else anc


def ess(weights: Array) -> Array:
    """Effective sample size ``(sum W)^2 / sum W^2`` of each row of non-negative weights."""
    xp = array_namespace(weights)
    s = xp.sum(weights, axis=-1)
    return s * s / xp.sum(weights * weights, axis=-1)


def resample_if_low_ess(
    rng: Any, weights: Array, threshold: float | None, scheme: str = "systematic"
) -> tuple[Array, Array]:
    """ESS-triggered resampling of a batch: rows whose ESS is below ``threshold * N`` resample.

    Parameters
    ----------
    rng : sgmc Generator
    weights : (batch, N) normalised weights
    threshold : float in (0, 1] or None
        None resamples every row.
    scheme : str

    Returns
    -------
    ancestors : int64 (batch, N)
        The identity ``0..N-1`` in rows that keep their particles.
    resampled : bool (batch,)

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.backends import default_rng
    >>> from sgmc.ssm.resampling import resample_if_low_ess
    >>> w = np.array([[0.25, 0.25, 0.25, 0.25], [0.97, 0.01, 0.01, 0.01]])
    >>> anc, done = resample_if_low_ess(default_rng(1), w, 0.5)
    >>> done.tolist(), anc[0].tolist()
    ([False, True], [0, 1, 2, 3])
    """
    xp = array_namespace(weights)
    b, n = weights.shape
    anc = ancestors(weights, uniforms_for(rng, scheme, b, n), scheme)
    if threshold is None:
        return anc, xp.ones((b,), dtype=xp.bool, device=device_of(weights))
    if not (0.0 < float(threshold) <= 1.0) or math.isnan(float(threshold)):
        msg = f"`threshold` must be in (0, 1] or None; got {threshold!r}"
        raise ValueError(msg)
    low = ess(weights) < float(threshold) * n
    ident = xp.arange(n, dtype=xp.int64, device=device_of(weights))[None, :]
    return xp.where(low[:, None], anc, ident), low
