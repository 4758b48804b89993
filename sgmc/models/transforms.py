"""Reparametrised models: the same posterior in new coordinates.

:class:`Affine` writes theta = shift + L z. The log density of z differs from that of theta by the
constant log |det L|, so every sampler targets the same posterior, and gradients follow by the chain
rule, grad_z = L^T grad_theta. With L L^T close to the posterior covariance (the inverse Hessian at
the mode, from :func:`sgmc.optimize.laplace`), z is nearly standard normal: one step size suits every
direction, which is what makes a short MALA run an accurate reference.
"""

from __future__ import annotations

from typing import Any

from .._array_api import Array, array_namespace
from .._param_names import check_param_names
from .base import Model, check_compatible

__all__ = ["Affine"]


class Affine(Model):
    """The posterior of ``base`` in the coordinates z with theta = shift + L z.

    Parameters
    ----------
    base : Model
    shift : array (dim,)
    L : array (dim, dim)
        Invertible; usually the Cholesky factor of an approximate posterior covariance.
    param_names : sequence of str, optional
        Names of the coordinates of z (:attr:`param_names`; default ``z[0]``, ...).

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.models import GaussianTarget
    >>> from sgmc.models.transforms import Affine
    >>> target = GaussianTarget(np.array([1.0, -1.0]), np.array([[4.0, 0.0], [0.0, 0.25]]))
    >>> z = Affine(target, target.mean, np.linalg.cholesky(target.cov))
    >>> z.grad_log_posterior(np.zeros(2))           # z = 0 is the mode: theta = mean
    array([0., 0.])
    >>> z.to_theta(np.array([[1.0, 1.0]]))
    array([[ 3. , -0.5]])
    """

    def __init__(self, base: Model, shift: Array, L: Array, *, param_names: Any = None):
        super().__init__(base.n_data, base.dim, base.xp, base.dtype, getattr(base, "device", None))
        array_namespace(shift, L, names=("shift", "L"))
        check_compatible(base, shift, "shift")
        check_compatible(base, L, "L")
        if tuple(shift.shape) != (base.dim,) or tuple(L.shape) != (base.dim, base.dim):
            msg = (
                f"`shift` must have shape ({base.dim},) and `L` ({base.dim}, {base.dim}); got "
                f"{tuple(shift.shape)} and {tuple(L.shape)}"
            )
            raise ValueError(msg)
        self.base, self.shift, self.L = base, shift, L
        self.param_names = check_param_names(param_names, self.dim, prefix="z")

    def to_theta(self, z: Array) -> Array:
        """Map z ``(chains, dim)`` to theta."""
        return self.shift + z @ self.L.T

    def from_theta(self, theta: Array) -> Array:
        """Map theta ``(..., dim)`` to z = L^{-1} (theta - shift)."""
        xp = self.xp
        flat = xp.reshape(theta - self.shift, (-1, self.dim))
        z = xp.matrix_transpose(xp.linalg.solve(self.L, xp.matrix_transpose(flat)))
        return xp.reshape(z, theta.shape)

    def log_prior(self, z):
        return self.base.log_prior(self.to_theta(z))

    def grad_log_prior(self, z):
        return self.base.grad_log_prior(self.to_theta(z)) @ self.L

    def log_lik(self, z, idx=None):
        return self.base.log_lik(self.to_theta(z), idx)

    def grad_log_lik(self, z, idx=None):
        return self.base.grad_log_lik(self.to_theta(z), idx) @ self.L

    def grad_log_lik_sum(self, z, idx=None, weights=None):
        return self.base.grad_log_lik_sum(self.to_theta(z), idx, weights) @ self.L

    def log_posterior_and_grad(self, z):
        logp, g = self.base.log_posterior_and_grad(self.to_theta(z))
        return logp, g @ self.L

    def __repr__(self) -> str:
        return f"Affine({self.base!r})"


