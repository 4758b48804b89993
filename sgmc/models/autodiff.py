"""Models written once in PyTorch, with per-datum gradients, Hessians and Hessian-vector products by autodiff.

The array API has no automatic differentiation, so sgmc's built-in models carry analytic gradients.
:func:`from_torch` builds a model from a per-datum log-likelihood (and log prior) written with torch
operations on one parameter vector and one datum: ``torch.func.grad`` differentiates it, and
``torch.func.vmap`` maps it over the minibatch and over the chains, so every estimator and sampler sees
the usual model protocol (:mod:`sgmc.models.base`) on torch tensors. Curvature comes the same way:
``hess_log_lik`` (``jacrev`` of the gradient) for estimators that use per-datum Hessians, and
``hvp_log_lik`` (the gradient of g(theta) . v, reverse over reverse) for Hessian-vector products.

torch is imported only when a model is built, so ``import sgmc`` never needs it.
"""

from __future__ import annotations

from typing import Any, Callable

from ._autodiff_base import AutodiffModel, data_parts, over_chains

__all__ = ["from_torch", "TorchModel"]


def _torch():
    # as _jax() in autodiff_jax.py: each names its own backend module in a plain import, which the import checks read
    try:
        from ..backends import _torch as torch_backend  # the one module that imports torch
    except ImportError as exc:  # pragma: no cover - torch is a test dependency
        msg = "sgmc.models.from_torch needs PyTorch (pip install torch)"
        raise ImportError(msg) from exc
    return torch_backend.torch


# Its help repeats from_jax's parameters and layout: each constructor's help stands alone.
def from_torch(log_lik: Callable, log_prior: Callable | None, data: Any, *, dim: int,
               param_names: Any = None) -> "TorchModel":
    """A model from a per-datum log-likelihood written in torch; gradients by ``torch.func``.

    Parameters
    ----------
    log_lik : callable
        ``log_lik(theta, *datum) -> scalar tensor``: log f(y_i | theta) for one parameter vector
        ``theta`` (dim,) and one datum (one row of each data tensor).
    log_prior : callable or None
        ``log_prior(theta) -> scalar tensor`` (up to a constant); ``None`` for a flat prior.
    data : torch.Tensor or tuple of torch.Tensor
        The N data along the first axis of every tensor (for regression, ``(X, y)``).
    dim : int
        Dimension of theta.
    param_names : sequence of str, optional
        Names of the ``dim`` coordinates (default ``theta[0]``, ...).

    Returns
    -------
    TorchModel
        A :class:`~sgmc.models.Model` on torch tensors: parameters take the data's floating dtype
        (float64 for integer data) and device.

    Raises
    ------
    TypeError
        When ``data`` holds NumPy arrays or other non-torch arrays: pass torch tensors
        (``torch.as_tensor(x)``), or write a model with analytic gradients (:class:`sgmc.models.Model`).

    Examples
    --------
    >>> import torch
    >>> from sgmc.models import from_torch
    >>> X = torch.randn(100, 2, dtype=torch.float64); y = (X[:, 0] > 0).double()
    >>> def log_lik(theta, x, y):
    ...     eta = x @ theta
    ...     return y * eta - torch.nn.functional.softplus(eta)
    >>> model = from_torch(log_lik, lambda th: -0.05 * th @ th, (X, y), dim=2)
    >>> model.grad_log_posterior(torch.zeros(3, 2, dtype=torch.float64)).shape
    torch.Size([3, 2])
    """
    return TorchModel(log_lik, log_prior, data, dim=dim, param_names=param_names)


class TorchModel(AutodiffModel):
    """The model :func:`from_torch` returns (see there): Hessians by ``jacrev`` of the gradient."""

    def __init__(self, log_lik: Callable, log_prior: Callable | None, data: Any, *, dim: int, param_names: Any = None):
        torch = _torch()
        parts = data_parts(data, log_lik, log_prior, is_array=lambda a: isinstance(a, torch.Tensor),
                           library="PyTorch", builder="from_torch", noun="torch tensor",
                           convert="torch.as_tensor(...)")
        floats = [p.dtype for p in parts if p.is_floating_point()]
        dtype = floats[0] if floats else torch.float64
        self._attach(parts, int(dim), dtype, log_lik, log_prior, param_names)
        k = len(parts)
        func = torch.func
        grad1 = func.grad(log_lik)
        hess1 = func.jacrev(grad1)

        def hvp1(theta, v, *datum):
            return func.grad(lambda t: torch.dot(grad1(t, *datum), v))(theta)

        vmap = func.vmap
        self._f_batch, self._f_all = over_chains(vmap, log_lik, k)
        self._g_batch, self._g_all = over_chains(vmap, grad1, k)
        self._h_batch, self._h_all = over_chains(vmap, hess1, k)
        self._hvp_batch, self._hvp_all = over_chains(vmap, hvp1, k, lead=2)
        if log_prior is not None:
            self._p = func.vmap(log_prior)
            self._gp = func.vmap(func.grad(log_prior))
