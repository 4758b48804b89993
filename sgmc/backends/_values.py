"""What kind of value a call was given, asked without importing its library.

Steps accept JAX keys and traced JAX values (:mod:`sgmc._keys`); recognising them must not import
JAX for users who never use it, so these look at the value's type alone.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TracingError", "from_jax", "is_tracer", "is_jax_key", "device_cond", "device_map", "host_namespace", "summed_blocks"]

_JAX_MODULES = ("jax", "jaxlib")


class TracingError(TypeError):
    """A step whose work has a shape that depends on values, called under JAX tracing.

    ``jax.jit``, ``jax.lax.scan`` and ``jax.vmap`` need every shape fixed when the function is traced;
    DPP subsampling, the adaptive subsample size and SCIR's rejection rounds decide theirs from the
    values drawn. Call them eagerly (``sgmc.sample`` does, step by step).
    """


def from_jax(x: Any) -> bool:
    """Whether ``x`` is a JAX value (an array, a key or a tracer)."""
    return type(x).__module__.split(".", 1)[0] in _JAX_MODULES


def is_tracer(x: Any) -> bool:
    """Whether ``x`` is a JAX value being traced (inside ``jit``, ``grad``, ``vmap``, ``scan``)."""
    return from_jax(x) and type(x).__name__.endswith("Tracer")


def host_namespace(name: str) -> bool:
    """Whether arrays of the namespace named ``name`` are NumPy's (reading a value costs no synchronisation)."""
    return name == "numpy"


def summed_blocks(name: str) -> bool:
    """Whether a block's per-iteration sums are taken at once (JAX's compiled blocks) rather than row by row."""
    return name == "jax"


def is_jax_key(x: Any) -> bool:
    """Whether ``x`` is a JAX key: a typed key array, or a raw ``uint32`` key of shape ``(2,)``."""
    if not from_jax(x):
        return False
    import jax  # noqa: PLC0415 - only JAX values come here

    dtype = getattr(x, "dtype", None)
    if dtype is None:
        return False
    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        return True
    return str(dtype) == "uint32" and tuple(x.shape) == (2,)


def device_map(fn: Any, xs: Any) -> Any:
    """``jax.lax.map``: ``fn`` over the leading axis of the pytree ``xs``, as one loop on the device."""
    import jax  # noqa: PLC0415 - only traced JAX values come here

    return jax.lax.map(fn, xs)


def device_cond(pred: Any, on_true: Any, on_false: Any) -> Any:
    """``jax.lax.cond`` on a traced ``pred``: the branch chosen on the device."""
    import jax  # noqa: PLC0415 - only traced JAX values come here

    return jax.lax.cond(pred, on_true, on_false)
