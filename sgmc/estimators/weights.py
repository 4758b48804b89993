"""Preferential subsampling weights: p_i for SGLD-PS and SGLD-CV-PS (thesis section 4.3).

The pseudo-variance E||g - grad log pi||^2 of a reweighted minibatch estimate is minimised, by
Cauchy-Schwarz, by weights proportional to a per-datum norm (Putcha's thesis, 2024): ||grad log f_i(theta)||
for SGLD-PS (Lemma 4.3.1; at the mode, eq. 4.3.6) and sqrt(tr(H_i Sigma H_i^T)) for SGLD-CV-PS's
approximate weights (eq. 4.3.11). O(N) passes run over blocks of data rows, so memory stays bounded.
"""

from __future__ import annotations

from typing import Any

from .._array_api import Array, is_array
from ..models.base import check_compatible, require
from ..optimize import negative_hessian

__all__ = ["WEIGHT_FLOOR", "ps_weights", "cv_ps_weights"]

#: Relative floor of the weights: p_i >= WEIGHT_FLOOR * max(p) (zero weights would break unbiasedness).
WEIGHT_FLOOR = 1e-12

#: Data rows per block when an O(N) pass materialises per-datum gradients or Hessians.
_BLOCK_ELEMENTS = 2**20


def _normalise(xp: Any, w: Array, floor: float) -> Array:
    """Weights to probabilities, each at least ``floor`` times the largest; uniform if all vanish."""
    top = xp.max(w, axis=-1, keepdims=True)
    w = xp.where(top > 0, xp.maximum(w, floor * top), xp.ones_like(w))
    return w / xp.sum(w, axis=-1, keepdims=True)


def _blocks(model: Any, rows_per: int):
    xp = model.xp
    step = max(1, _BLOCK_ELEMENTS // max(rows_per, 1))
    for start in range(0, model.n_data, step):
        stop = min(start + step, model.n_data)
        yield xp.arange(start, stop, dtype=xp.int64, device=model.device)


def _grad_norms(model: Any, theta: Array, centre: Array | None = None) -> Array:
    """``||grad log f_i(theta) - grad log f_i(centre)||`` (centre optional) for all i: (chains, N)."""
    xp = model.xp
    require(model, ("grad_log_lik",), "per-datum gradient norms (preferential weights)")
    chains = theta.shape[0]
    parts = []
    for ids in _blocks(model, chains * model.dim):
        idx = xp.broadcast_to(ids[None, :], (chains, ids.shape[0]))
        g = model.grad_log_lik(theta, idx)
        if centre is not None:
            g = g - model.grad_log_lik(centre, idx)
        parts.append(xp.sqrt(xp.sum(g * g, axis=-1)))
    return xp.concat(parts, axis=-1)


def ps_weights(model: Any, theta: Array, *, floor: float = WEIGHT_FLOOR) -> Array:
    """SGLD-PS optimal weights at ``theta`` (chains, dim): p_i proportional to ||grad log f_i(theta)||.

    Thesis Lemma 4.3.1; at the mode these are the approximate weights of eq. 4.3.6. Shape (chains, N).

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.models import LinearRegression
    >>> from sgmc.estimators import ps_weights
    >>> X = np.array([[1.0], [2.0]]); model = LinearRegression(X, np.array([0.0, 0.0]))
    >>> ps_weights(model, np.array([[1.0]]))      # |r_i| |x_i| = 1 and 4
    array([[0.2, 0.8]])
    """
    return _normalise(model.xp, _grad_norms(model, theta), floor)


def cv_ps_weights(model: Any, centre: Array, *, covariance: Array | None = None, floor: float = WEIGHT_FLOOR) -> Array:
    """SGLD-CV-PS approximate weights (thesis eq. 4.3.11): p_i proportional to sqrt(tr(H_i Sigma H_i^T)).

    H_i is the per-datum Hessian of the log-likelihood at ``centre`` (dim,) (``model.hess_log_lik``)
    and Sigma the Laplace covariance there (the inverse of :func:`sgmc.optimize.negative_hessian`, or
    ``covariance``). O(N d^3) once; the thesis advises against d above about 60. Shape (N,).
    """
    xp = model.xp
    require(model, ("hess_log_lik",), "SGLD-CV-PS approximate weights (weights='approx')")
    c = xp.reshape(centre, (1, -1))
    if covariance is None:
        covariance = xp.linalg.inv(negative_hessian(model, c))
    d = model.dim
    parts = []
    for ids in _blocks(model, d * d):
        H = model.hess_log_lik(c, ids[None, :])[0, ...]            # (b, d, d)
        HS = H @ covariance
        t = xp.sum(HS * H, axis=(-2, -1))
        parts.append(xp.sqrt(xp.maximum(t, xp.zeros_like(t))))
    return _normalise(xp, xp.concat(parts, axis=0), floor)


def _static_weights(model: Any, kind: Any, centre: Array | None, floor: float, for_cv: bool) -> Array | None:
    """(N,) probabilities for ``kind`` in {"uniform", "approx", "lipschitz", array}; None for "exact"."""
    xp = model.xp
    if not isinstance(kind, str):
        w = kind if is_array(kind) else xp.asarray(kind, dtype=model.dtype, device=model.device)
        check_compatible(model, w, "weights")
        if tuple(w.shape) != (model.n_data,) or not bool(xp.all(xp.isfinite(w))) or not bool(xp.all(w >= 0)) \
                or not bool(xp.any(w > 0)):
            msg = (f"`weights` as an array must have shape ({model.n_data},) with finite, non-negative entries "
                   f"and a positive sum; got shape {tuple(w.shape)}")
            raise ValueError(msg)
        return _normalise(xp, xp.astype(w, model.dtype), floor)
    if kind == "uniform":
        return xp.full((model.n_data,), 1.0 / model.n_data, dtype=model.dtype, device=model.device)
    if kind == "lipschitz":
        require(model, ("lipschitz",), "weights='lipschitz'")
        return _normalise(xp, model.lipschitz(), floor)
    if kind == "approx":
        if centre is None:
            return None
        if for_cv:
            return cv_ps_weights(model, centre, floor=floor)
        return ps_weights(model, xp.reshape(centre, (1, -1)), floor=floor)[0, :]
    return None  # exact: per step
