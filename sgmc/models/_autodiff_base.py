"""What the autodiff-built models share: the data checks and the per-datum functions by vmap.

:class:`~sgmc.models.TorchModel` and :class:`~sgmc.models.JaxModel` differ only in the library that
differentiates and maps ``log_lik``; each builds ``_f_*``, ``_g_*``, ``_h_*`` and ``_hvp_*`` (the
per-datum log-likelihood, gradient, Hessian and Hessian-vector product, mapped over chains and data:
``*_batch`` on per-chain rows of a minibatch, ``*_all`` on all data) and ``_p``/``_gp`` for the prior.
The model protocol on top of them is written here once.
"""

from __future__ import annotations

from typing import Any, Callable

from .._array_api import Array, array_namespace, device_of
from .._param_names import check_param_names
from .base import Model, take_rows

__all__ = ["AutodiffModel", "data_parts", "over_chains"]


def data_parts(data: Any, log_lik: Any, log_prior: Any, *, is_array: Callable[[Any], bool], library: str,
               builder: str, noun: str, convert: str) -> tuple:
    """The data as a tuple of arrays of one library with a common first axis N, checked.

    ``noun`` names one array of the library ("torch tensor"), ``library`` the library ("PyTorch"),
    ``builder`` the public constructor ("from_torch") and ``convert`` how to make one ("torch.as_tensor(...)").
    """
    parts = tuple(data) if isinstance(data, (tuple, list)) else (data,)
    for k, part in enumerate(parts):
        if not is_array(part):
            msg = (
                f"`data` must hold {noun}s for {builder} (autodiff runs in {library}); entry {k} is a "
                f"{type(part).__module__}.{type(part).__name__}: convert it with {convert}, or "
                "write a model with analytic gradients (subclass sgmc.models.Model) to use NumPy arrays"
            )
            raise TypeError(msg)
    if not parts or parts[0].ndim < 1:
        msg = (
            f"`data` must be a {noun} or tuple of {noun}s with the N data along the first axis; "
            f"got {len(parts)} {noun}(s)"
        )
        raise ValueError(msg)
    n = int(parts[0].shape[0])
    if any(int(p.shape[0]) != n for p in parts):
        msg = f"every {noun} in `data` must have the same first dimension; got shapes {[tuple(p.shape) for p in parts]}"
        raise ValueError(msg)
    if not callable(log_lik) or (log_prior is not None and not callable(log_prior)):
        msg = (
            f"`log_lik` must be a callable and `log_prior` a callable or None; got {type(log_lik).__name__} "
            f"and {type(log_prior).__name__}"
        )
        raise TypeError(msg)
    return parts


def over_chains(vmap: Callable, fn: Callable, k: int, lead: int = 1) -> tuple[Callable, Callable]:
    """``fn`` of ``lead`` per-chain arguments and one datum of ``k`` parts, mapped per datum, then per chain.

    ``vmap`` is the library's (``torch.func.vmap`` or ``jax.vmap``: in-axes second). Returns the map on
    per-chain rows (a minibatch, data ``(chains, batch, ...)``) and the map on rows shared by all
    chains (all data, ``(N, ...)``).
    """
    inner = vmap(fn, (None,) * lead + (0,) * k)
    return vmap(inner, (0,) * lead + (0,) * k), vmap(inner, (0,) * lead + (None,) * k)


class AutodiffModel(Model):
    """The model protocol over per-datum functions that a subclass builds by autodiff and vmap."""

    def _attach(self, parts: tuple, dim: int, dtype: Any, log_lik: Callable, log_prior: Callable | None,
                param_names: Any) -> None:
        """Set N, dim, namespace, dtype and device from the checked data, and keep data and functions."""
        Model.__init__(self, int(parts[0].shape[0]), dim, array_namespace(parts[0]), dtype, device=device_of(parts[0]))
        self.param_names = check_param_names(param_names, self.dim)
        self.data = parts
        self.log_lik_fn = log_lik
        self.log_prior_fn = log_prior

    def _rows(self, idx: Array) -> tuple:
        return tuple(take_rows(self.xp, p, idx) for p in self.data)

    def log_prior(self, theta: Array) -> Array:
        if self.log_prior_fn is None:
            return self.xp.zeros(theta.shape[:-1], dtype=theta.dtype, device=device_of(theta))
        return self._p(theta)

    def grad_log_prior(self, theta: Array) -> Array:
        if self.log_prior_fn is None:
            return self.xp.zeros_like(theta)
        return self._gp(theta)

    def log_lik(self, theta: Array, idx: Array | None = None) -> Array:
        if idx is None:
            return self._f_all(theta, *self.data)
        return self._f_batch(theta, *self._rows(idx))

    def grad_log_lik(self, theta: Array, idx: Array | None = None) -> Array:
        if idx is None:
            return self._g_all(theta, *self.data)
        return self._g_batch(theta, *self._rows(idx))

    def hess_log_lik(self, theta: Array, idx: Array | None = None) -> Array:
        """Per-datum Hessians of log f, (chains, batch, dim, dim), by autodiff of the gradient."""
        if idx is None:
            return self._h_all(theta, *self.data)
        return self._h_batch(theta, *self._rows(idx))

    def hvp_log_lik(self, theta: Array, v: Array, idx: Array | None = None) -> Array:
        """Per-datum Hessian-vector products H_i(theta) v, (chains, batch, dim), with ``v`` (chains, dim)."""
        if idx is None:
            return self._hvp_all(theta, v, *self.data)
        return self._hvp_batch(theta, v, *self._rows(idx))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n_data={self.n_data}, dim={self.dim})"
