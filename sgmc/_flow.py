"""Branches that trace: a Python ``if`` on concrete values, ``jax.lax.cond`` on traced ones.

A step whose work depends on its state (an SVRG snapshot refreshed every ``k`` calls, a switching
control variate) branches through :func:`when`: eagerly it runs one branch, as plain Python; under
``jax.jit``, ``jax.lax.scan`` or ``jax.vmap`` the condition is a traced value and JAX's ``cond``
chooses on the device, with no synchronisation with the host. Both branches must then return values
of the same shapes and dtypes.
"""

from __future__ import annotations

from typing import Any, Callable

from ._keys import tracing

__all__ = ["when"]


def when(pred: Any, on_true: Callable[[], Any], on_false: Callable[[], Any]) -> Any:
    """``on_true()`` if ``pred`` else ``on_false()``, on the device when ``pred`` is traced by JAX."""
    if tracing(pred):
        import jax  # noqa: PLC0415 - only traced JAX values come here

        return jax.lax.cond(pred, on_true, on_false)
    return on_true() if bool(pred) else on_false()
