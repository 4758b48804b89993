"""What kind of value a call was given, asked without importing its library.

Steps accept JAX keys and traced JAX values (:mod:`sgmc._keys`); recognising them must not import
JAX for users who never use it, so these look at the value's type alone.
"""

from __future__ import annotations

from typing import Any

__all__ = ["from_jax", "is_tracer", "host_namespace", "summed_blocks"]

_JAX_MODULES = ("jax", "jaxlib")


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
