"""Branches and loops that trace: Python's on concrete values, JAX's ``cond`` and ``map`` on traced ones.

A step whose work depends on its state (an SVRG snapshot refreshed every ``k`` calls, a switching
control variate) branches through :func:`when`: eagerly it runs one branch, as plain Python; under
``jax.jit``, ``jax.lax.scan`` or ``jax.vmap`` the condition is a traced value and JAX's ``cond``
chooses on the device, with no synchronisation with the host. Both branches must then return values
of the same shapes and dtypes. Work split into groups of rows (:func:`over_groups`, a GLM's chains
gathered a few at a time so that their rows stay in cache) is a Python loop eagerly and one loop on
the device under tracing, where unrolling it would multiply the compiled program.
"""

from __future__ import annotations

from typing import Any, Callable

from ._array_api import namespace_name
from ._keys import tracing
from .backends._values import device_cond, device_map, host_namespace

__all__ = ["when", "on_host", "over_groups"]


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


def over_groups(xp: Any, fn: Callable[..., Any], step: int, *arrays: Any) -> Any:
    """``fn`` on groups of ``step`` leading rows of ``arrays`` (``None`` passes through), concatenated.

    Eagerly a Python loop over the groups (the last may be shorter). Traced by JAX, the whole groups
    run as one device loop (``jax.lax.map``) and the rest as one more call: the same values.
    """
    n = arrays[0].shape[0]

    def rows(a: Any, i: int, j: int) -> Any:
        return None if a is None else a[i:j, ...]

    if not tracing(arrays[0]):
        return xp.concat([fn(*(rows(a, i, min(i + step, n)) for a in arrays)) for i in range(0, n, step)], axis=0)
    whole = n // step * step
    grouped = tuple(None if a is None else xp.reshape(a[:whole, ...], (n // step, step, *a.shape[1:])) for a in arrays)
    out = device_map(lambda parts: fn(*parts), grouped)
    parts = [xp.reshape(out, (whole, *out.shape[2:]))]
    if whole < n:
        parts.append(fn(*(rows(a, whole, n) for a in arrays)))
    return parts[0] if len(parts) == 1 else xp.concat(parts, axis=0)
