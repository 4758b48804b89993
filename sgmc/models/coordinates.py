"""Well-conditioned coordinates for a posterior: theta = L z, with the prior carried through exactly.

Columns on their natural scales (age in years, income in currency units, a 0/1 flag) give a
posterior whose curvature spans many orders of magnitude, so no single step size suits every
direction: a step small enough for the stiffest coordinate leaves the others where they started.
In the coordinates z with theta = L z the posterior is the same distribution (the log density of z
is that of theta at L z plus the constant log abs(det L)), and gradients follow by the chain rule,
grad_z = L^T grad_theta. With L from the Laplace scale at the mode (L^T H L = I for H the negative
Hessian there, :func:`laplace_factor`) or from the columns' location and scale
(:func:`standardising_factor`), z is close to standard normal, which is the setting in which the
review's step-size rules (Nemeth and Fearnhead 2021, section 3) are stated.

For the generalised linear models the map is folded into the data: eta = x . theta = (x L) . z, so
the model in z is the same GLM on the design X L, with the prior N(0, prior_var I) on theta = L z. It
keeps every likelihood method (minibatch gradients, control-variate differences, per-datum
Hessians and Lipschitz constants), so every estimator and sampler runs on it unchanged. Other
models, and data read from disk, get :class:`~sgmc.models.transforms.Affine` with no shift.
:func:`sgmc.conditioning.sample_conditioned` samples in z and returns the draws on the user's scale.
"""

from __future__ import annotations

import math
from typing import Any

from .. import backends
from .._array_api import Array, array_namespace, device_of
from .._blocks import RowSource
from .._param_names import check_param_names, default_names
from .base import Model, check_compatible
from .glm import LinearRegression, LogisticRegression
from .transforms import Affine

__all__ = [
    "ConditionedLinearRegression",
    "ConditionedLogisticRegression",
    "conditioned",
    "laplace_factor",
    "standardising_factor",
]


def laplace_factor(precision: Array) -> Array:
    """L with ``L^T precision L = I``: ``L = R^{-T}`` for the Cholesky factor ``precision = R R^T``.

    ``L L^T`` is the inverse of ``precision`` (the Laplace covariance when ``precision`` is the
    negative Hessian of the log posterior at its mode), and L is upper triangular.

    Raises
    ------
    ValueError
        Naming ``precision`` when it is not a square matrix or not positive definite.

    Examples
    --------
    >>> import numpy as np
    >>> P = np.array([[4.0, 1.0], [1.0, 9.0]])
    >>> L = laplace_factor(P)
    >>> np.allclose(L.T @ P @ L, np.eye(2))
    True
    """
    xp = array_namespace(precision, names=("precision",))
    if precision.ndim != 2 or precision.shape[0] != precision.shape[1]:
        msg = f"`precision` must be a square matrix (dim, dim); got shape {tuple(precision.shape)}"
        raise ValueError(msg)
    sym = 0.5 * (precision + xp.matrix_transpose(precision))
    try:
        R = xp.linalg.cholesky(sym)
    except (ValueError, RuntimeError):  # NumPy's and PyTorch's LinAlgError
        R = xp.full_like(sym, float("nan"))
    if not bool(xp.all(xp.isfinite(R))):
        msg = "`precision` must be positive definite (its Cholesky factor is not finite)"
        raise ValueError(msg)
    eye = xp.eye(sym.shape[0], dtype=sym.dtype, device=getattr(sym, "device", None))
    return xp.linalg.solve(xp.matrix_transpose(R), eye)


def standardising_factor(X: Array) -> Array:
    """L such that the columns of ``X L`` are standardised: coefficients of centred, unit-sd columns.

    A column with spread is centred and scaled, x~_j = (x_j - m_j) / s_j, when ``X`` has a constant
    non-zero column (an intercept) to absorb the centring; without one it is only scaled by its root
    mean square, x~_j = x_j / r_j. A constant column is divided by its value; a column of zeros is
    left alone. The map needs the data only (no mode search); unlike :func:`laplace_factor` it
    ignores the likelihood's weights and the correlation between columns.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.column_stack([np.ones(4), [20.0, 40.0, 60.0, 80.0]])
    >>> Xt = X @ standardising_factor(X)
    >>> np.allclose(Xt.mean(axis=0), [1.0, 0.0]), np.allclose(Xt.std(axis=0), [0.0, 1.0])
    (True, True)
    """
    xp = array_namespace(X, names=("X",))
    if X.ndim != 2:
        msg = f"`X` must be 2-D (n_data, dim); got shape {tuple(X.shape)}"
        raise ValueError(msg)
    dim = int(X.shape[1])
    mean = xp.mean(X, axis=0)
    sd = xp.std(X, axis=0)
    rms = xp.sqrt(xp.mean(X * X, axis=0))
    tiny = 1e-12
    const = [j for j in range(dim) if float(sd[j]) <= tiny * max(float(rms[j]), 1e-300) and float(rms[j]) > 0]
    cols = [[0.0] * dim for _ in range(dim)]  # cols[j][k]: entry (j, k) of L
    for j in range(dim):
        if j in const:
            cols[j][j] = 1.0 / float(mean[j])
        elif float(rms[j]) == 0.0:
            cols[j][j] = 1.0
        elif const:
            s = float(sd[j])
            cols[j][j] = 1.0 / s
            k = const[0]  # theta_k absorbs the centring: x~_j = (x_j - m_j) / s_j
            cols[k][j] = -float(mean[j]) / (s * float(mean[k]))
        else:
            cols[j][j] = 1.0 / float(rms[j])
    return xp.asarray(cols, dtype=X.dtype, device=getattr(X, "device", None))


class _Conditioned:
    """What the GLMs in z add to their base class: the prior of theta = L z, and the maps between scales."""

    base: Any
    L: Array

    def _setup(self, base: Any, L: Array, names: tuple) -> None:
        xp = base.xp
        self.base = base
        self.L = L
        self.shift = xp.zeros((base.dim,), dtype=base.dtype, device=device_of(base))
        self.X = base.X @ L
        self.param_names = check_param_names(names, base.dim, prefix="z")
        self._log_det = _log_abs_det(xp, L)
        self.__dict__.pop("block_elements", None)
        self._moved(backends.get_backend(xp))  # the GLM's own set-up for its backend (C-order copy of X)

    def to_theta(self, z: Array) -> Array:
        """Map z ``(..., dim)`` to theta = L z on the user's scale."""
        return z @ self.xp.matrix_transpose(self.L)

    def from_theta(self, theta: Array) -> Array:
        """Map theta ``(..., dim)`` to z = L^{-1} theta."""
        xp = self.xp
        flat = xp.reshape(theta, (-1, self.dim))
        z = xp.matrix_transpose(xp.linalg.solve(self.L, xp.matrix_transpose(flat)))
        return xp.reshape(z, theta.shape)

    def log_prior(self, z: Array) -> Array:
        return self.base.log_prior(self.to_theta(z)) + self._log_det

    def grad_log_prior(self, z: Array) -> Array:
        return self.base.grad_log_prior(self.to_theta(z)) @ self.L

    def prior_lipschitz(self) -> float:
        """Lipschitz constant of the prior gradient in z: the largest eigenvalue of L^T L / prior_var."""
        xp = self.xp
        gram = xp.matrix_transpose(self.L) @ self.L
        return float(xp.max(xp.linalg.eigvalsh(gram))) / self.base.prior_var

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.base!r})"


def _log_abs_det(xp: Any, L: Array) -> float:
    sign, logdet = xp.linalg.slogdet(L)
    if float(sign) == 0.0 or not math.isfinite(float(logdet)):
        msg = "`L` must be invertible (its determinant is zero)"
        raise ValueError(msg)
    return float(logdet)


class ConditionedLogisticRegression(_Conditioned, LogisticRegression):
    """:class:`~sgmc.models.LogisticRegression` in the coordinates z with theta = L z (see :func:`conditioned`)."""


class ConditionedLinearRegression(_Conditioned, LinearRegression):
    """:class:`~sgmc.models.LinearRegression` in the coordinates z with theta = L z (see :func:`conditioned`)."""

    def posterior(self) -> tuple[Array, Array]:
        """Closed-form posterior mean ``(dim,)`` and covariance ``(dim, dim)`` of z."""
        xp = self.xp
        mean, cov = self.base.posterior()
        Linv = xp.linalg.inv(self.L)
        zcov = Linv @ cov @ xp.matrix_transpose(Linv)
        return Linv @ mean, 0.5 * (zcov + xp.matrix_transpose(zcov))


_CONDITIONED = {LogisticRegression: ConditionedLogisticRegression, LinearRegression: ConditionedLinearRegression}


def conditioned(model: Model, L: Array, *, param_names: Any = None) -> Model:
    """The posterior of ``model`` in the coordinates z with theta = L z: the same distribution, new axes.

    For :class:`~sgmc.models.LogisticRegression` and :class:`~sgmc.models.LinearRegression` with
    data in memory, the result is the same GLM on the design ``X L`` with the prior of theta carried
    through (:class:`ConditionedLogisticRegression`, :class:`ConditionedLinearRegression`), so it
    keeps every likelihood method the estimators use; any other model (or a GLM whose rows are read
    from disk) gets :class:`~sgmc.models.transforms.Affine` with no shift. Either way the result has
    ``L``, ``base`` and ``to_theta``; :func:`sgmc.conditioning.user_trace` maps its draws back.

    Parameters
    ----------
    model : Model
    L : array (dim, dim)
        Invertible; :func:`laplace_factor` of the negative Hessian at the mode, or
        :func:`standardising_factor` of the design.
    param_names : sequence of str, optional
        Names of the coordinates of z (default ``z[0]``, ...).

    Raises
    ------
    ValueError
        Naming ``L`` when its shape does not match the model or it is singular.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.models import LogisticRegression
    >>> rng = np.random.default_rng(0)
    >>> X = np.column_stack([np.ones(200), rng.uniform(20, 90, 200)])
    >>> y = (rng.random(200) < 0.5).astype(float)
    >>> model = LogisticRegression(X, y)
    >>> zmodel = conditioned(model, standardising_factor(X))
    >>> theta = np.array([[0.3, -0.01]])
    >>> bool(np.allclose(zmodel.log_lik(zmodel.from_theta(theta)), model.log_lik(theta)))
    True
    """
    check_compatible(model, L, "L")
    dim = model.dim
    if tuple(L.shape) != (dim, dim):
        msg = f"`L` must have shape ({dim}, {dim}) to match the model; got {tuple(L.shape)}"
        raise ValueError(msg)
    names = default_names(dim, "z") if param_names is None else param_names
    cls = _CONDITIONED.get(type(model))
    if cls is None or isinstance(model.X, RowSource):
        xp = model.xp
        _log_abs_det(xp, L)
        shift = xp.zeros((dim,), dtype=model.dtype, device=model.device)
        return Affine(model, shift, L, param_names=names)
    out = cls.__new__(cls)
    out.__dict__.update(model.__dict__)
    out._setup(model, L, tuple(names))
    return out
