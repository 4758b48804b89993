"""Models written once in JAX, with per-datum gradients, Hessians and Hessian-vector products by autodiff.

The array API has no automatic differentiation, so sgmc's built-in models carry analytic gradients.
:func:`from_jax` builds a model from a per-datum log-likelihood (and log prior) written with
``jax.numpy`` on one parameter vector and one datum: ``jax.grad`` differentiates it and ``jax.vmap``
maps it over the minibatch and over the chains, so every estimator and sampler sees the usual model
protocol (:mod:`sgmc.models.base`) on JAX arrays, eagerly, inside ``jax.jit`` and in ``sgmc.sample``'s
compiled blocks. Curvature comes the same way: ``hess_log_lik`` (``jax.hessian``) for estimators that
use per-datum Hessians, and ``hvp_log_lik`` (forward over reverse: ``jax.jvp`` of the gradient) for
Hessian-vector products. It is the JAX counterpart of :func:`sgmc.models.from_torch`.

JAX is imported only when a model is built, so ``import sgmc`` never needs it.
"""

from __future__ import annotations

from typing import Any, Callable

from .._validation import check_int
from ._autodiff_base import AutodiffModel, data_parts, over_chains

__all__ = ["from_jax", "JaxModel"]


def _jax():
    # as _torch() in autodiff.py: each names its own backend module in a plain import, which the import checks read
    try:
        from ..backends import _jax as jax_backend  # the one module that imports jax
    except ImportError as exc:  # pragma: no cover - jax is a test dependency
        msg = "sgmc.models.from_jax needs JAX (pip install jax)"
        raise ImportError(msg) from exc
    return jax_backend.jax


# Its help repeats from_torch's parameters and layout: each constructor's help stands alone.
def from_jax(log_lik: Callable, log_prior: Callable | None, data: Any, *, dim: int,
             param_names: Any = None) -> "JaxModel":
    """A model from a per-datum log-likelihood written in ``jax.numpy``; gradients by ``jax.grad``.

    Parameters
    ----------
    log_lik : callable
        ``log_lik(theta, *datum) -> scalar``: log f(y_i | theta) for one parameter vector ``theta``
        (dim,) and one datum (one row of each data array).
    log_prior : callable or None
        ``log_prior(theta) -> scalar`` (up to a constant); ``None`` for a flat prior.
    data : jax.Array or tuple of jax.Array
        The N data along the first axis of every array (for regression, ``(X, y)``).
    dim : int
        Dimension of theta.
    param_names : sequence of str, optional
        Names of the ``dim`` coordinates (default ``theta[0]``, ...).

    Returns
    -------
    JaxModel
        A :class:`~sgmc.models.Model` on JAX arrays: parameters take the data's floating dtype
        (float64 for integer data in 64-bit mode) and device.

    Raises
    ------
    TypeError
        When ``data`` holds NumPy arrays or other non-JAX arrays (pass ``jax.numpy.asarray(x)``), or
        when ``log_lik``/``log_prior`` are not callables.
    ValueError
        When ``dim`` is not a positive integer, the data disagree on N, or ``log_lik`` does not return
        a scalar for one ``theta`` of shape (dim,) and one datum.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from sgmc.models import from_jax
    >>> X = jax.random.normal(jax.random.key(0), (100, 2)); y = (X[:, 0] > 0) * 1.0
    >>> def log_lik(theta, x, y):
    ...     eta = x @ theta
    ...     return y * eta - jax.nn.softplus(eta)
    >>> model = from_jax(log_lik, lambda th: -0.05 * th @ th, (X, y), dim=2)
    >>> model.grad_log_posterior(jnp.zeros((3, 2), dtype=X.dtype)).shape
    (3, 2)
    """
    return JaxModel(log_lik, log_prior, data, dim=dim, param_names=param_names)


class JaxModel(AutodiffModel):
    """The model :func:`from_jax` returns (see there): Hessians by ``jax.hessian``."""

    def __init__(self, log_lik: Callable, log_prior: Callable | None, data: Any, *, dim: int, param_names: Any = None):
        jax = _jax()
        jnp = jax.numpy
        parts = data_parts(data, log_lik, log_prior, is_array=lambda a: isinstance(a, jax.Array),
                           library="JAX", builder="from_jax", noun="JAX array", convert="jax.numpy.asarray(...)")
        dim = check_int(dim, "dim", minimum=1)
        floats = [p.dtype for p in parts if jnp.issubdtype(p.dtype, jnp.floating)]
        dtype = floats[0] if floats else jnp.result_type(float)
        self._attach(parts, dim, dtype, log_lik, log_prior, param_names)
        self._check_scalar(jax, log_lik, parts)
        k = len(parts)
        grad1 = jax.grad(log_lik)
        hess1 = jax.hessian(log_lik)

        def hvp1(theta, v, *datum):
            return jax.jvp(lambda t: grad1(t, *datum), (theta,), (v,))[1]

        vmap = jax.vmap
        self._f_batch, self._f_all = over_chains(vmap, log_lik, k)
        self._g_batch, self._g_all = over_chains(vmap, grad1, k)
        self._h_batch, self._h_all = over_chains(vmap, hess1, k)
        self._hvp_batch, self._hvp_all = over_chains(vmap, hvp1, k, lead=2)
        if log_prior is not None:
            self._p = vmap(log_prior)
            self._gp = vmap(jax.grad(log_prior))

    def _check_scalar(self, jax: Any, log_lik: Callable, parts: tuple) -> None:
        """``log_lik`` on one theta (dim,) and the first datum must give a scalar (checked by shape only)."""
        theta = jax.ShapeDtypeStruct((self.dim,), self.dtype)
        datum = tuple(jax.ShapeDtypeStruct(p.shape[1:], p.dtype) for p in parts)
        try:
            out = jax.eval_shape(log_lik, theta, *datum)
        except Exception as exc:  # the user's function failed on shapes: say which call
            msg = (
                f"`log_lik(theta, *datum)` failed on theta of shape ({self.dim},) (dim={self.dim}) and one datum of "
                f"shapes {[tuple(d.shape) for d in datum]}: {type(exc).__name__}: {exc}; check `dim`"
            )
            raise ValueError(msg) from exc
        if getattr(out, "shape", None) != ():
            msg = (
                f"`log_lik(theta, *datum)` must return a scalar for one theta ({self.dim},) and one datum; "
                f"got {getattr(out, 'shape', type(out).__name__)}"
            )
            raise ValueError(msg)
