"""The draws convention of the MCMC diagnostics: input checks, layouts and halves of chains.

Arrays are ``(chains, n, dim)``; ``(n, dim)`` is one chain and ``(n,)`` one chain of a scalar
(:mod:`sgmc.diagnostics.ess`). Inside, a diagnostic works on ``(M, n, S)``: M chains to combine and
S independent series.
"""

from __future__ import annotations

from typing import Any

from .._array_api import Array, Namespace, array_namespace, as_float_array, check_finite, float_dtype, is_array


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


def _pooled(xp: Namespace, x: Array) -> Array:
    return xp.reshape(x, (-1, x.shape[2]))


def _check_prob(prob: Any, name: str = "prob") -> float:
    ok = isinstance(prob, (int, float)) and not isinstance(prob, bool) and 0.0 < float(prob) < 1.0
    if not ok:
        msg = f"`{name}` must be a number in (0, 1); got {prob!r}"
        raise ValueError(msg)
    return float(prob)


def _quantile_prob(prob: Any) -> float:
    """``prob`` of ``method='quantile'``: required, a number in (0, 1)."""
    if prob is None:
        msg = "`prob` is required for method='quantile' (a number in (0, 1))"
        raise ValueError(msg)
    return _check_prob(prob)


def _cummin(xp: Namespace, p: Array) -> Array:
    """Cumulative minimum along axis 0 by doubling (log2(K) vectorised steps)."""
    k = p.shape[0]
    s = 1
    while s < k:
        p = xp.concat([p[:s, ...], xp.minimum(p[s:, ...], p[:-s, ...])], axis=0)
        s *= 2
    return p
