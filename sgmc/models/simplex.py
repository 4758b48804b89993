"""A Dirichlet-categorical posterior on the probability simplex, in the expanded-mean parametrisation.

Data z_i in {0, 1, ...}^K (one-hot categories, or a document's word counts) with a Dirichlet(alpha)
prior on theta in the simplex give the exact posterior Dirichlet(alpha + sum_i z_i). Samplers on the
simplex work with unnormalised weights omega_j > 0, theta = omega / sum(omega) (Patterson and Teh 2013,
"expanded mean"): with independent Gamma(alpha_j, 1) priors on omega, theta is Dirichlet(alpha), and the
per-datum log-likelihood sum_j z_ij log(omega_j / sum(omega)) has gradient z_i / omega - |z_i| / sum(omega).
SGRLD samples omega with the metric G = diag(1 / omega); SCIR (Baker et al. 2018) simulates each omega_j
by an exact Cox-Ingersoll-Ross transition with Gamma(a_j, 1) stationary law, a_j = alpha_j + counts_j,
which needs only the (subsampled) counts.
"""

from __future__ import annotations

from typing import Any

from .._array_api import Array, array_namespace, as_float_array, check_finite, device_of, is_array
from .._param_names import check_param_names
from .._validation import describe
from .base import Model, as_data_array, take_rows

__all__ = ["DirichletCategorical"]


def _inverse(w: Array) -> Array:
    """The expanded-mean metric's diagonal 1 / omega (module level, so samplers using it pickle)."""
    return 1.0 / w


def _inverse_grad(w: Array) -> Array:
    return -1.0 / (w * w)


class DirichletCategorical(Model):
    """theta ~ Dirichlet(alpha), z_i | theta ~ Multinomial(n_i, theta), parametrised by omega (expanded mean).

    Here n_i is the total count of datum i.

    Parameters
    ----------
    z : array, shape (n_data, K)
        Non-negative counts per datum (one-hot rows for categorical data).
    alpha : float or array (K,), default 1.0
        Dirichlet prior parameters.
    param_names : sequence of str, optional
        Names of the K coordinates (:attr:`param_names`; default ``omega[0]``, ...).

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.models import DirichletCategorical
    >>> z = np.eye(3)[[0, 0, 1, 0, 2, 0]]                  # six categorical observations
    >>> DirichletCategorical(z, alpha=0.5).posterior()
    array([4.5, 1.5, 1.5])
    """

    def __init__(self, z: Any, alpha: Any = 1.0, *, param_names: Any = None):
        z = as_data_array(z, "z")
        xp = array_namespace(z)
        if z.ndim != 2 or z.shape[0] < 1:
            msg = f"`z` must have shape (n_data, K) with at least one row; got {tuple(z.shape)}"
            raise ValueError(msg)
        dtype = z.dtype if xp.isdtype(z.dtype, "real floating") else xp.float64
        z = as_float_array(xp, z, dtype, "z")
        check_finite(xp, z, "z")
        if not bool(xp.all(z >= 0)):
            msg = "`z` must hold non-negative counts"
            raise ValueError(msg)
        super().__init__(z.shape[0], z.shape[1], xp, dtype, device=device_of(z))
        self.param_names = check_param_names(param_names, self.dim, prefix="omega")
        self.z = z
        expected = f"a positive number or a positive array of shape ({self.dim},)"
        if isinstance(alpha, (int, float)) and not isinstance(alpha, bool):
            alpha = xp.full((self.dim,), float(alpha), dtype=dtype, device=self.device)
        elif not is_array(alpha):
            try:
                if isinstance(alpha, (str, bytes, bool)) or alpha is None:
                    raise TypeError
                alpha = xp.asarray(alpha, dtype=dtype, device=self.device)
            except (TypeError, ValueError):
                msg = f"`alpha` must be {expected}; got {describe(alpha)}"
                raise TypeError(msg) from None
        alpha = as_float_array(xp, alpha, dtype, "alpha")
        if tuple(alpha.shape) != (self.dim,) or not bool(xp.all((alpha > 0) & xp.isfinite(alpha))):
            msg = f"`alpha` must be {expected}, finite; got {describe(alpha)}"
            raise ValueError(msg)
        self.alpha = alpha
        self._sizes = xp.sum(z, axis=1)

    def posterior(self) -> Array:
        """The exact posterior's Dirichlet parameters alpha + sum_i z_i, shape (K,)."""
        return self.alpha + self.xp.sum(self.z, axis=0)

    def count_sum(self, idx: Array | None = None) -> Array:
        """sum_{i in batch} z_i: shape (chains, K) for ``idx`` (chains, batch), or (1, K) for all data."""
        xp = self.xp
        if idx is None:
            return xp.sum(self.z, axis=0)[None, :]
        return xp.sum(take_rows(xp, self.z, idx), axis=1)

    # -- the expanded-mean posterior over omega > 0 -----------------------------------------------
    def log_prior(self, omega: Array) -> Array:
        xp = self.xp
        return xp.sum((self.alpha - 1.0) * xp.log(omega) - omega, axis=-1)

    def grad_log_prior(self, omega: Array) -> Array:
        return (self.alpha - 1.0) / omega - 1.0

    def log_lik(self, omega: Array, idx: Array | None = None) -> Array:
        xp = self.xp
        z = self.z[None, ...] if idx is None else take_rows(xp, self.z, idx)
        logp = xp.log(omega) - xp.log(xp.sum(omega, axis=-1, keepdims=True))
        return xp.sum(z * logp[:, None, :], axis=-1)

    def grad_log_lik(self, omega: Array, idx: Array | None = None) -> Array:
        xp = self.xp
        z = self.z[None, ...] if idx is None else take_rows(xp, self.z, idx)
        total = xp.sum(omega, axis=-1)[:, None, None]
        return z / omega[:, None, :] - xp.sum(z, axis=-1, keepdims=True) / total

    def grad_log_lik_sum(self, omega: Array, idx: Array | None = None, weights: Array | None = None) -> Array:
        xp = self.xp
        if weights is not None:
            return super().grad_log_lik_sum(omega, idx, weights)
        c = self.count_sum(idx)
        sizes = xp.sum(c, axis=-1, keepdims=True)
        return c / omega - sizes / xp.sum(omega, axis=-1, keepdims=True)

    def to_simplex(self, omega: Array) -> Array:
        """theta = omega / sum(omega) along the last axis."""
        return omega / self.xp.sum(omega, axis=-1, keepdims=True)

    def metric(self):
        """The expanded-mean metric G = diag(1 / omega) for SGRLD (D = diag(omega), Gamma = 1)."""
        from ..samplers.metrics import Metric

        return Metric(_inverse, grad=_inverse_grad, diagonal=True)

    def __repr__(self) -> str:
        return f"DirichletCategorical(n_data={self.n_data}, K={self.dim})"

