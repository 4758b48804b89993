"""Gaussian models with closed-form posteriors: the reference targets for testing samplers.

:class:`Gaussian` estimates the mean of Gaussian data with known covariance under a Gaussian prior.
:class:`GaussianTarget` is a data-free N(mean, cov) target; with additive gradient noise it is the
review's section 2.5 example, for which :meth:`GaussianTarget.sgld_stationary_cov` gives SGLD's exact
stationary covariance (Nemeth and Fearnhead 2021, section 2.5).
"""

from __future__ import annotations

import math
from typing import Any

from .. import backends
from .._array_api import (
    Array,
    Namespace,
    array_namespace,
    as_float_array,
    check_finite,
    device_of,
    is_array,
)
from .._param_names import check_param_names
from .._validation import check_nonnegative, check_positive, check_step_size
from .base import Model, as_data_array, on_backend, take_rows

__all__ = ["Gaussian", "GaussianTarget"]


def _parameter(xp: Namespace, value: Any, device: Any, name: str, ref: Array, ref_name: str) -> Array:
    """An array parameter in the data's namespace and on its device.

    Arrays must already share the data's library and device (nothing is copied silently); nested
    sequences are converted explicitly.
    """
    if is_array(value):
        array_namespace(value, ref, names=(name, ref_name))
        return value
    return backends.asarray(as_data_array(value, name), backend=backends.get_backend(xp), device=device)


def _matrix(xp: Namespace, value: Any, dim: int, dtype: Any, device: Any, name: str, ref: Array, ref_name: str) -> Array:
    """A (dim, dim) symmetric positive definite matrix from a scalar or a matrix."""
    if isinstance(value, (int, float)):
        v = check_positive(value, name)
        return v * xp.eye(dim, dtype=dtype, device=device)
    m = _parameter(xp, value, device, name, ref, ref_name)
    m = as_float_array(xp, m, dtype, name)
    if tuple(m.shape) != (dim, dim):
        msg = f"`{name}` must be a positive scalar or a ({dim}, {dim}) matrix; got shape {tuple(m.shape)}"
        raise ValueError(msg)
    check_finite(xp, m, name)
    if not bool(xp.all(xp.abs(m - m.T) <= 1e-10 * (1.0 + xp.max(xp.abs(m))))):
        msg = f"`{name}` must be symmetric"
        raise ValueError(msg)
    if not bool(xp.all(xp.linalg.eigvalsh(m) > 0)):
        msg = f"`{name}` must be positive definite"
        raise ValueError(msg)
    return m


def _vector(xp: Namespace, value: Any, dim: int, dtype: Any, device: Any, name: str, ref: Array, ref_name: str) -> Array:
    if isinstance(value, (int, float)):
        return xp.full((dim,), float(value), dtype=dtype, device=device)
    v = _parameter(xp, value, device, name, ref, ref_name)
    v = as_float_array(xp, v, dtype, name)
    if tuple(v.shape) != (dim,):
        msg = f"`{name}` must be a scalar or have shape ({dim},); got {tuple(v.shape)}"
        raise ValueError(msg)
    check_finite(xp, v, name)
    return v


def _log_normal(xp: Namespace, theta: Array, mean: Array, precision: Array, logdet_cov: float, dim: int) -> Array:
    """``log N(theta; mean, precision^-1)`` for each row of ``theta`` (chains, dim): shape (chains,)."""
    r = theta - mean
    q = xp.sum((r @ precision) * r, axis=-1)
    return -0.5 * q - 0.5 * (dim * math.log(2 * math.pi) + logdet_cov)


def _grad_log_normal(theta: Array, mean: Array, precision: Array) -> Array:
    """Gradient of :func:`_log_normal` in ``theta``: (chains, dim)."""
    return -(theta - mean) @ precision


# Its backend and param_names are documented again in GaussianTarget: each class's help stands alone.
class Gaussian(Model):
    """Mean of Gaussian data with known covariance: y_i ~ N(theta, cov), theta ~ N(prior_mean, prior_cov).

    Parameters
    ----------
    y : array, shape (n_data, dim)
    cov : float or array (dim, dim), default 1.0
        Known data covariance (a scalar means ``cov * I``).
    prior_mean : float or array (dim,), default 0.0
    prior_cov : float or array (dim, dim), default 10.0
    backend : str or Backend, optional
        Move the arrays to this backend first (e.g. ``"cupy"``); by default the arrays decide.
    param_names : sequence of str, optional
        Names of the ``dim`` coordinates (:attr:`param_names`; default ``theta[0]``, ...).

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.models import Gaussian
    >>> y = np.random.default_rng(0).normal(1.0, 1.0, size=(1000, 2))
    >>> mean, cov = Gaussian(y).posterior()
    >>> bool(np.all(np.abs(mean - 1.0) < 0.1))
    True
    """

    def __init__(
        self, y: Any, cov: Any = 1.0, prior_mean: Any = 0.0, prior_cov: Any = 10.0, *, backend: Any = None,
        param_names: Any = None,
    ):
        y, cov, prior_mean, prior_cov = on_backend(backend, y, cov, prior_mean, prior_cov)
        y = as_data_array(y, "y")
        xp = array_namespace(y, names=("y",))
        if y.ndim != 2 or y.shape[0] == 0:
            msg = f"`y` must be 2-D (n_data, dim) with at least one row; got shape {tuple(y.shape)}"
            raise ValueError(msg)
        dtype = y.dtype if xp.isdtype(y.dtype, "real floating") else xp.float64
        y = as_float_array(xp, y, dtype, "y")
        check_finite(xp, y, "y")
        dev = device_of(y)
        super().__init__(y.shape[0], y.shape[1], xp, dtype, dev)
        self.param_names = check_param_names(param_names, self.dim)
        self.y = y
        self.cov = _matrix(xp, cov, self.dim, dtype, dev, "cov", y, "y")
        self.precision = xp.linalg.inv(self.cov)
        self.prior_mean = _vector(xp, prior_mean, self.dim, dtype, dev, "prior_mean", y, "y")
        self.prior_cov = _matrix(xp, prior_cov, self.dim, dtype, dev, "prior_cov", y, "y")
        self.prior_precision = xp.linalg.inv(self.prior_cov)
        self._logdet_cov = float(xp.sum(xp.log(xp.linalg.eigvalsh(self.cov))))
        self._logdet_prior = float(xp.sum(xp.log(xp.linalg.eigvalsh(self.prior_cov))))
        self._lip = float(xp.max(xp.linalg.eigvalsh(self.precision)))

    def log_prior(self, theta):
        return _log_normal(self.xp, theta, self.prior_mean, self.prior_precision, self._logdet_prior, self.dim)

    def grad_log_prior(self, theta):
        return _grad_log_normal(theta, self.prior_mean, self.prior_precision)

    def _rows(self, idx):
        return self.y[None, ...] if idx is None else take_rows(self.xp, self.y, idx)

    def log_lik(self, theta, idx=None):
        xp = self.xp
        r = self._rows(idx) - theta[:, None, :]
        q = xp.sum((r @ self.precision) * r, axis=-1)
        return -0.5 * q - 0.5 * (self.dim * math.log(2 * math.pi) + self._logdet_cov)

    def grad_log_lik(self, theta, idx=None):
        return (self._rows(idx) - theta[:, None, :]) @ self.precision

    def grad_log_lik_sum(self, theta, idx=None, weights=None):
        xp = self.xp
        if idx is None:
            ysum = xp.sum(self.y, axis=0)[None, :]
            wsum = float(self.n_data)
            if weights is not None:
                ysum = xp.sum(weights[..., None] * self.y[None, ...], axis=1)
                wsum = xp.sum(weights, axis=-1)[:, None]
        else:
            yb = take_rows(xp, self.y, idx)
            if weights is None:
                ysum = xp.sum(yb, axis=1)
                wsum = float(idx.shape[-1])
            else:
                ysum = xp.sum(weights[..., None] * yb, axis=1)
                wsum = xp.sum(weights, axis=-1)[:, None]
        return (ysum - wsum * theta) @ self.precision

    def hess_log_lik(self, theta, idx=None):
        xp = self.xp
        n = self.n_data if idx is None else idx.shape[-1]
        h = -self.precision
        return xp.broadcast_to(h, (theta.shape[0], n, self.dim, self.dim))

    def lipschitz(self, idx=None):
        xp = self.xp
        shape = (self.n_data,) if idx is None else tuple(idx.shape)
        return xp.full(shape, self._lip, dtype=self.dtype, device=self.device)

    def posterior(self) -> tuple[Array, Array]:
        """Closed-form posterior mean ``(dim,)`` and covariance ``(dim, dim)``."""
        xp = self.xp
        prec = self.prior_precision + self.n_data * self.precision
        cov = xp.linalg.inv(prec)
        cov = 0.5 * (cov + cov.T)
        rhs = self.prior_mean @ self.prior_precision + xp.sum(self.y, axis=0) @ self.precision
        return cov @ rhs, cov


# Its backend and param_names are documented again, as in Gaussian: each class's help stands alone.
class GaussianTarget(Model):
    """A data-free target N(mean, cov): the exact reference for samplers and diagnostics.

    Use it with the ``"full"`` estimator (exact gradients, i.e. ULA/MALA) or with
    :class:`sgmc.estimators.NoisyGradient` to add N(0, s^2 I) noise to the gradient as in the review's
    section 2.5 and Figure 1.

    Parameters
    ----------
    mean : array (dim,)
    cov : array (dim, dim)
    backend : str or Backend, optional
        Move the arrays to this backend first (e.g. ``"cupy"``); by default the arrays decide.
    param_names : sequence of str, optional
        Names of the ``dim`` coordinates (:attr:`param_names`; default ``theta[0]``, ...).

    Examples
    --------
    >>> from sgmc.models import GaussianTarget
    >>> target = GaussianTarget.review_example()     # D = diag(2, 1) rotated by pi/4
    >>> target.cov
    array([[1.5, 0.5],
           [0.5, 1.5]])
    """

    def __init__(self, mean: Any, cov: Any, *, backend: Any = None, param_names: Any = None):
        mean, cov = on_backend(backend, mean, cov)
        mean = as_data_array(mean, "mean")
        xp = array_namespace(mean, names=("mean",))
        if mean.ndim != 1:
            msg = f"`mean` must be 1-D; got shape {tuple(mean.shape)}"
            raise ValueError(msg)
        dtype = mean.dtype if xp.isdtype(mean.dtype, "real floating") else xp.float64
        mean = as_float_array(xp, mean, dtype, "mean")
        check_finite(xp, mean, "mean")
        dev = device_of(mean)
        super().__init__(0, mean.shape[0], xp, dtype, dev)
        self.param_names = check_param_names(param_names, self.dim)
        self.mean = mean
        self.cov = _matrix(xp, cov, self.dim, dtype, dev, "cov", mean, "mean")
        self.precision = xp.linalg.inv(self.cov)
        self._logdet = float(xp.sum(xp.log(xp.linalg.eigvalsh(self.cov))))

    @classmethod
    def review_example(cls, *, backend: Any = "numpy", dtype: str = "float64") -> "GaussianTarget":
        """The review's 2-D target: Sigma = P^T diag(2, 1) P with P the rotation by pi/4."""
        c = math.cos(math.pi / 4)
        s = math.sin(math.pi / 4)
        # P^T D P with P = [[c, s], [-s, c]]
        d1, d2 = 2.0, 1.0
        cov = [[c * c * d1 + s * s * d2, c * s * d1 - s * c * d2], [c * s * d1 - s * c * d2, s * s * d1 + c * c * d2]]
        return cls(backends.asarray([0.0, 0.0], backend=backend, dtype=dtype), backends.asarray(cov, backend=backend, dtype=dtype))

    def log_prior(self, theta):
        return _log_normal(self.xp, theta, self.mean, self.precision, self._logdet, self.dim)

    def grad_log_prior(self, theta):
        return _grad_log_normal(theta, self.mean, self.precision)

    def log_lik(self, theta, idx=None):
        return self.xp.zeros((theta.shape[0], 0), dtype=self.dtype, device=self.device)

    def grad_log_lik(self, theta, idx=None):
        return self.xp.zeros((theta.shape[0], 0, self.dim), dtype=self.dtype, device=self.device)

    def grad_log_lik_sum(self, theta, idx=None, weights=None):
        return self.xp.zeros_like(theta)

    def lipschitz_constant(self) -> float:
        """Largest eigenvalue of the precision (M in the review's notation)."""
        return float(self.xp.max(self.xp.linalg.eigvalsh(self.precision)))

    def sgld_stationary_cov(self, step_size: float, grad_noise_var: float = 0.0) -> Array:
        """Exact stationary covariance of SGLD with gradient noise N(0, grad_noise_var I).

        From the review's section 2.5: in the eigenbasis of ``cov`` with variances sigma_j^2, component
        j has variance ``sigma_j^2 (1 + h s^2 / 4) / (1 - h / (4 sigma_j^2))``; ULA is ``s = 0``. The
        recursion is stationary only for ``h < 4 min_j sigma_j^2``.
        """
        xp = self.xp
        h = check_step_size(step_size)
        s2 = check_nonnegative(grad_noise_var, "grad_noise_var")
        evals, evecs = xp.linalg.eigh(self.cov)
        if h >= 4.0 * float(xp.min(evals)):
            msg = f"`step_size`={h} is not below 4 * smallest variance = {4.0 * float(xp.min(evals))}: SGLD has no stationary law"
            raise ValueError(msg)
        c = evals * (1.0 + h * s2 / 4.0) / (1.0 - h / (4.0 * evals))
        return (evecs * c) @ evecs.T
