"""The model protocol: posteriors with analytic per-datum gradients.

A posterior over ``theta`` in R^d for N independent data is

    log pi(theta) = log p(theta) + sum_{i=1}^N log f(y_i | theta) + const.

The array API has no automatic differentiation, so a model supplies the per-datum log-likelihood terms
and their gradients for a batch of indices, the log prior and its gradient, and ``n_data`` (N).
Estimators only ever call :meth:`Model.grad_log_lik_sum`, which a model should implement without
materialising the (chains, batch, dim) tensor of per-datum gradients when it can.

Shapes: ``theta`` is ``(chains, dim)``; ``idx`` is ``None`` (all data) or an int64 array
``(chains, batch)`` of per-chain indices; ``weights`` has the shape of ``idx``.

Writing your own model
----------------------
Subclass :class:`Model` and implement ``log_prior``, ``grad_log_prior``, ``log_lik`` and
``grad_log_lik`` (and, for speed, ``grad_log_lik_sum``), using ``xp`` from the data::

    from sgmc.models import Model, take_rows
    from sgmc._array_api import array_namespace

    class PoissonRegression(Model):
        '''y_i ~ Poisson(exp(x_i . theta)), theta ~ N(0, I).'''

        def __init__(self, X, y):
            super().__init__(X.shape[0], X.shape[1], array_namespace(X, y), X.dtype)
            self.X, self.y = X, y

        def log_prior(self, theta):
            return -0.5 * self.xp.sum(theta**2, axis=-1)

        def grad_log_prior(self, theta):
            return -theta

        def _eta(self, theta, idx):
            xp = self.xp
            if idx is None:
                return theta @ self.X.T, self.y[None, :], None
            Xb = take_rows(xp, self.X, idx)
            return xp.matmul(Xb, theta[..., None])[..., 0], take_rows(xp, self.y, idx), Xb

        def log_lik(self, theta, idx=None):
            eta, y, _ = self._eta(theta, idx)
            return y * eta - self.xp.exp(eta)          # up to a constant

        def grad_log_lik(self, theta, idx=None):
            eta, y, Xb = self._eta(theta, idx)
            Xb = self.X[None, ...] if Xb is None else Xb
            return (y - self.xp.exp(eta))[..., None] * Xb

Any object with the same attributes and methods works: the base class only adds conveniences.
"""

from __future__ import annotations

import math
from typing import Any

from .._array_api import (
    Array,
    Namespace,
    array_namespace,
    as_float_array,
    check_finite,
    device_of,
    is_array,
    namespace_name,
)

__all__ = ["Model", "take_rows", "as_data_array", "check_compatible"]


def take_rows(xp: Namespace, a: Array, idx: Array) -> Array:
    """Rows ``a[idx]`` for an integer index array of any shape: result ``idx.shape + a.shape[1:]``."""
    flat = xp.reshape(idx, (-1,))
    out = xp.take(a, flat, axis=0)
    return xp.reshape(out, tuple(idx.shape) + tuple(a.shape[1:]))


def as_data_array(x: Any, name: str) -> Array:
    """Arrays pass through; lists and scalars become NumPy arrays (the I/O edge)."""
    if is_array(x):
        return x
    from .. import backends

    try:
        return backends.asarray(x, backend="numpy")
    except (TypeError, ValueError) as exc:
        msg = f"`{name}` must be an array or nested sequence of numbers; got {type(x).__name__}"
        raise TypeError(msg) from exc


def check_compatible(model: Any, x: Array, name: str) -> None:
    """Raise unless ``x`` is an array of ``model.xp`` on ``model.device`` (when the model states one).

    Raises
    ------
    TypeError
        ``x`` comes from another array library.
    ValueError
        ``x`` lives on another device.
    """
    xp = array_namespace(x, names=(name,))
    if xp is not model.xp:
        msg = (
            f"`{name}` is a {namespace_name(xp)} array but `model data` is a {namespace_name(model.xp)} "
            f"array; convert explicitly with sgmc.backends.asarray(..., backend={namespace_name(model.xp)!r})"
        )
        raise TypeError(msg)
    device = getattr(model, "device", None)
    if device is not None and device_of(x) != device:
        msg = (
            f"`{name}` is on device {device_of(x)!r} but `model data` is on device {device!r}; move it "
            "explicitly (sgmc never copies between devices silently)"
        )
        raise ValueError(msg)


class Model:
    """Base class for posteriors over ``theta`` in R^``dim`` given ``n_data`` independent data.

    Subclasses implement the per-datum terms; this class provides the posterior and batching helpers.

    Attributes
    ----------
    n_data : int
        N, the number of data (0 for a target density with no data).
    dim : int
        Dimension of ``theta``.
    xp : namespace
        Array namespace of the model's data; parameters live in it too.
    dtype : dtype
        Floating dtype of parameters.
    device : object
        Device of the data.
    """

    has_data: bool = True

    def __init__(self, n_data: int, dim: int, xp: Namespace, dtype: Any, device: Any = None):
        self.n_data = int(n_data)
        self.dim = int(dim)
        self.xp = xp
        self.dtype = dtype
        self.device = device

    # -- to be provided by subclasses -------------------------------------------------------------
    def log_prior(self, theta: Array) -> Array:
        """Log prior density (up to a constant), shape ``(chains,)``."""
        raise NotImplementedError

    def grad_log_prior(self, theta: Array) -> Array:
        """Gradient of the log prior, shape ``(chains, dim)``."""
        raise NotImplementedError

    def log_lik(self, theta: Array, idx: Array | None = None) -> Array:
        """Per-datum log-likelihood terms, shape ``(chains, batch)`` (``batch = N`` for ``idx=None``)."""
        raise NotImplementedError

    def grad_log_lik(self, theta: Array, idx: Array | None = None) -> Array:
        """Per-datum log-likelihood gradients, shape ``(chains, batch, dim)``."""
        raise NotImplementedError

    # -- optional ---------------------------------------------------------------------------------
    def grad_log_lik_sum(
        self, theta: Array, idx: Array | None = None, weights: Array | None = None
    ) -> Array:
        """``sum_i w_i grad log f(y_i | theta)`` over the batch, shape ``(chains, dim)``."""
        g = self.grad_log_lik(theta, idx)
        if weights is not None:
            g = g * weights[..., None]
        return self.xp.sum(g, axis=-2)

    def hess_log_lik(self, theta: Array, idx: Array | None = None) -> Array:
        """Per-datum Hessians of the log-likelihood, shape ``(chains, batch, dim, dim)``."""
        msg = f"{type(self).__name__} does not provide per-datum Hessians"
        raise NotImplementedError(msg)

    def lipschitz(self, idx: Array | None = None) -> Array:
        """Per-datum Lipschitz constants of ``grad log f(y_i | .)``, shape ``idx.shape`` (or ``(N,)``)."""
        msg = f"{type(self).__name__} does not provide per-datum Lipschitz constants"
        raise NotImplementedError(msg)

    # -- derived ----------------------------------------------------------------------------------
    def _batched(self, theta: Array) -> tuple[Array, bool]:
        xp = self.xp
        if not is_array(theta):
            theta = xp.asarray(theta, dtype=self.dtype, device=self.device)
        check_compatible(self, theta, "theta")
        if theta.ndim == 1:
            theta = xp.reshape(theta, (1, -1))
            single = True
        else:
            single = False
        if theta.ndim != 2 or theta.shape[-1] != self.dim:
            msg = f"`theta` must have shape (dim,) or (chains, dim) with dim={self.dim}; got {tuple(theta.shape)}"
            raise ValueError(msg)
        return theta, single

    def log_posterior(self, theta: Array) -> Array:
        """Unnormalised full-data log posterior; ``theta`` of shape (dim,) or (chains, dim)."""
        theta, single = self._batched(theta)
        out = self.log_prior(theta)
        if self.has_data:
            out = out + self.xp.sum(self.log_lik(theta), axis=-1)
        return out[0, ...] if single else out

    def grad_log_posterior(self, theta: Array) -> Array:
        """Full-data gradient of the log posterior; ``theta`` of shape (dim,) or (chains, dim)."""
        theta, single = self._batched(theta)
        out = self.grad_log_prior(theta)
        if self.has_data:
            out = out + self.grad_log_lik_sum(theta)
        return out[0, ...] if single else out

    def zeros(self, chains: int) -> Array:
        """A ``(chains, dim)`` zero array in the model's namespace, dtype and device."""
        return self.xp.zeros((chains, self.dim), dtype=self.dtype, device=self.device)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n_data={self.n_data}, dim={self.dim})"


def check_positive(value: Any, name: str) -> float:
    """Validate a positive finite scalar hyperparameter."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        msg = f"`{name}` must be a positive number; got {value!r}"
        raise TypeError(msg) from None
    if not (math.isfinite(v) and v > 0):
        msg = f"`{name}` must be positive and finite; got {value!r}"
        raise ValueError(msg)
    return v


def validate_design(X: Any, y: Any, *, y_name: str = "y") -> tuple[Namespace, Array, Array, Any]:
    """Shared checks for regression data: 2-D finite X, 1-D finite y of matching length."""
    X = as_data_array(X, "X")
    y = as_data_array(y, y_name)
    xp = array_namespace(X, y, names=("X", y_name))
    if X.ndim != 2:
        msg = f"`X` must be 2-D (n_data, dim); got shape {tuple(X.shape)}"
        raise ValueError(msg)
    if y.ndim != 1 or y.shape[0] != X.shape[0]:
        msg = f"`{y_name}` must be 1-D with {X.shape[0]} entries to match `X`; got shape {tuple(y.shape)}"
        raise ValueError(msg)
    if X.shape[0] == 0:
        msg = "`X` has no rows; at least one datum is needed"
        raise ValueError(msg)
    dtype = X.dtype if xp.isdtype(X.dtype, "real floating") else xp.float64
    X = as_float_array(xp, X, dtype, "X")
    y = as_float_array(xp, y, dtype, y_name)
    check_finite(xp, X, "X")
    check_finite(xp, y, y_name)
    return xp, X, y, dtype
