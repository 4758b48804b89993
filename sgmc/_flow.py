"""Branches that trace: a Python ``if`` on concrete values, ``jax.lax.cond`` on traced ones.

A step whose work depends on its state (an SVRG snapshot refreshed every ``k`` calls, a switching
control variate) branches through :func:`when`: eagerly it runs one branch, as plain Python; under
``jax.jit``, ``jax.lax.scan`` or ``jax.vmap`` the condition is a traced value and JAX's ``cond``
chooses on the device, with no synchronisation with the host. Both branches must then return values
of the same shapes and dtypes.
"""

from __future__ import annotations

from typing import Any, Callable

from ._array_api import namespace_name
from ._keys import tracing
from .backends._values import device_cond, host_namespace

__all__ = ["when", "on_host"]


def when(pred: Any, on_true: Callable[[], Any], on_false: Callable[[], Any]) -> Any:
    """``on_true()`` if ``pred`` else ``on_false()``, on the device when ``pred`` is traced by JAX."""
    if tracing(pred):
        return device_cond(pred, on_true, on_false)
    return on_true() if bool(pred) else on_false()


def on_host(xp: Any) -> bool:
    """Whether arrays of ``xp`` are NumPy's, so that asking for a value costs no synchronisation.

    Elsewhere (a GPU, JAX's compiled blocks) a step keeps its checks on the device and leaves what
    they find in its result for the runner's next check.
    """
    return host_namespace(namespace_name(xp))
