"""Shared parameter blocks of the switching models :class:`~sgmc.ssm.ARHMM` and :class:`~sgmc.ssm.SLDS`.

Both models have ``K`` regimes, each with a linear map ``A_k`` (``d x c``) and a noise precision
``Q_k^{-1} = psi_k psi_k^T`` (``psi_k`` lower triangular, ``d x d``), and a transition matrix ``Pi``
whose rows are normalised expanded means ``exp(eta)`` (thesis section 3.4.1). The priors are those
of thesis appendix A.2.1 (Eqs. A.59-A.61):

* each row of ``Pi`` ~ Dirichlet(``a``), as normalised Gamma(``a``, 1) expanded means; the log density
  in ``eta`` is ``a eta - exp(eta)``;
* ``A_k | Q_k`` matrix normal with mean 0, row covariance ``Q_k`` and column covariance ``v I_c``:
  ``(c / 2) log|Q_k^{-1}| - tr(A_k^T Q_k^{-1} A_k) / (2 v)``;
* ``Q_k^{-1}`` ~ Wishart with ``d + 1`` degrees of freedom and mean ``I``
  (``-(d + 1) tr(Q_k^{-1}) / 2``), carried to ``psi_k`` with the Cholesky Jacobian
  ``prod_i |psi_ii|^{d - i}`` (0-based ``i``).

The same formulas, with ``K = 1``, are the prior of :class:`~sgmc.ssm.LGSSM`'s ``(A, psi_Q)`` and
``psi_R`` blocks.
"""

from __future__ import annotations

from typing import Any

from .._array_api import Array, device_of

__all__ = ["dirichlet_terms", "dirichlet_grad", "regime_prior", "regime_prior_grads", "row_softmax", "lower_positions"]


def lower_positions(d: int) -> list:
    """Flat positions (row-major) of the lower triangle of a ``d x d`` matrix."""
    return [i * d + j for i in range(d) for j in range(i + 1)]


def row_softmax(xp: Any, eta: Array) -> Array:
    """``Pi = exp(eta) / sum exp(eta)`` row by row, shifted for stability."""
    e = xp.exp(eta - xp.max(eta, axis=-1, keepdims=True))
    return e / xp.sum(e, axis=-1, keepdims=True)


def dirichlet_terms(xp: Any, a: Any, eta: Array) -> Array:
    """Log density of the rows of ``Pi`` in ``eta`` (..., K, K), summed: shape ``(...)``."""
    return xp.sum(a * eta - xp.exp(eta), axis=(-2, -1))


def dirichlet_grad(xp: Any, a: Any, eta: Array) -> Array:
    """Gradient of :func:`dirichlet_terms` in ``eta``."""
    return a - xp.exp(eta)


def _jac(xp, d, dtype, device):
    return xp.asarray([float(d - i) for i in range(d)], dtype=dtype, device=device)


def regime_prior(xp: Any, A: Array, psi: Array, v: float) -> Array:
    """Matrix-normal-Wishart log density of ``A`` (..., d, c) and ``psi`` (..., d, d), per leading index."""
    d, c = A.shape[-2], A.shape[-1]
    mT = xp.matrix_transpose
    logdiag = xp.log(xp.abs(xp.linalg.diagonal(psi)))  # (..., d)
    Lq = psi @ mT(psi)
    lp = c * xp.sum(logdiag, axis=-1) - xp.sum(A * (Lq @ A), axis=(-2, -1)) / (2.0 * v)
    lp = lp - 0.5 * (d + 1) * xp.linalg.trace(Lq)
    return lp + xp.sum(_jac(xp, d, A.dtype, device_of(A)) * logdiag, axis=-1)


def regime_prior_grads(xp: Any, A: Array, psi: Array, v: float) -> tuple[Array, Array]:
    """Gradients of :func:`regime_prior` in ``A`` and ``psi`` (the latter lower triangular on packing)."""
    d, c = A.shape[-2], A.shape[-1]
    mT = xp.matrix_transpose
    eye = xp.eye(d, dtype=A.dtype, device=device_of(A))
    Lq = psi @ mT(psi)
    gA = -(Lq @ A) / v
    G = -(A @ mT(A)) / (2.0 * v) - 0.5 * (d + 1) * eye
    expo = c + _jac(xp, d, A.dtype, device_of(A))  # exponent of each |psi_ii|
    gpsi = 2.0 * G @ psi + eye * (expo / xp.linalg.diagonal(psi))[..., None, :]
    return gA, gpsi
