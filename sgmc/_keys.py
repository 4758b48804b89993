"""Randomness as a value: what a sampler or estimator call accepts as ``rng``.

Every ``init``, ``step`` and ``estimate`` of sgmc takes its randomness as its first argument and
changes nothing behind the caller's back. Two kinds are accepted:

* an sgmc :class:`~sgmc.backends.Generator` (NumPy, array-api-strict, torch, CuPy, or the JAX
  backend's :class:`~sgmc.backends._jax.JaxGenerator`): a stream that the call advances, as a NumPy
  generator is advanced;
* a JAX key, typed (``jax.random.key(0)``) or raw (``jax.random.PRNGKey(0)``): a value, as in
  blackjax's kernels. The call splits it functionally, once per draw, so the same key gives the same
  draws eagerly, under ``jax.jit``, inside ``jax.lax.scan`` and per element under ``jax.vmap``. The
  caller splits its own key between calls (``key, sub = jax.random.split(key)``); a key passed twice
  gives the same draws twice.

:func:`as_generator` turns either into the object that the call draws from. It imports JAX only when
a JAX value arrives.
"""

from __future__ import annotations

import functools
from typing import Any

from .backends._values import from_jax, is_tracer

__all__ = ["TracingError", "accept_keys", "as_generator", "is_jax_key", "refuse_tracing", "tracing"]


_from_jax = from_jax


def is_jax_key(x: Any) -> bool:
    """Whether ``x`` is a JAX key: a typed key array, or a raw ``uint32`` key of shape ``(2,)``."""
    if not _from_jax(x):
        return False
    import jax  # noqa: PLC0415 - JAX is optional; it is imported only for its own values

    dtype = getattr(x, "dtype", None)
    if dtype is None:
        return False
    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        return True
    return str(dtype) == "uint32" and tuple(x.shape) == (2,)


def as_generator(rng: Any) -> Any:
    """The generator a call draws from: ``rng`` itself, or a JAX key as a :class:`KeyStream`.

    Anything else passes through unchanged (an sgmc generator, or an object with its methods).

    Raises
    ------
    TypeError
        ``rng`` is a :class:`numpy.random.Generator` (named with its fix).
    """
    if _from_jax(rng) and is_jax_key(rng):
        from .backends._jax import KeyStream  # noqa: PLC0415 - loads JAX's backend on first use

        return KeyStream(rng)
    if type(rng).__module__.startswith("numpy.random"):
        msg = (
            "`rng` must be an sgmc generator or a JAX key; got a numpy.random.Generator: wrap it with "
            "sgmc.backends.HostGenerator.from_numpy(sgmc.backends.get_backend('numpy'), gen) or make one "
            "with sgmc.backends.default_rng(seed)"
        )
        raise TypeError(msg)
    return rng


def tracing(*values: Any) -> bool:
    """Whether any of ``values`` is a JAX value being traced (inside ``jit``, ``grad``, ``vmap``, ``scan``)."""
    return any(is_tracer(v) for v in values)


def _takes_rng(method: Any) -> Any:
    if getattr(method, "_sgmc_takes_rng", False):
        return method

    @functools.wraps(method)
    def call(self: Any, rng: Any, *args: Any, **kwargs: Any) -> Any:
        return method(self, as_generator(rng), *args, **kwargs)

    call._sgmc_takes_rng = True
    return call


def accept_keys(cls: type, names: tuple[str, ...]) -> None:
    """Let the methods ``names`` that ``cls`` defines take a JAX key as ``rng`` (:func:`as_generator`).

    Called by the base classes of samplers and estimators for every subclass, a user's included.
    """
    for name in names:
        method = cls.__dict__.get(name)
        if callable(method):
            setattr(cls, name, _takes_rng(method))


class TracingError(TypeError):
    """A step whose work has a shape that depends on values, called under JAX tracing.

    ``jax.jit``, ``jax.lax.scan`` and ``jax.vmap`` need every shape fixed when the function is traced;
    DPP subsampling, the adaptive subsample size and SCIR's rejection rounds decide theirs from the
    values drawn. Call them eagerly (``sgmc.sample`` does, step by step).
    """


def refuse_tracing(what: str, why: str, *values: Any) -> None:
    """Raise :class:`TracingError` naming ``what`` and ``why`` when any of ``values`` is traced."""
    if tracing(*values):
        msg = (f"{what} cannot run under jax.jit, jax.lax.scan or jax.vmap: {why}; call it eagerly "
               "(sgmc.sample runs it step by step)")
        raise TracingError(msg)
