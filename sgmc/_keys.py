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

from .backends._values import TracingError, is_jax_key, is_tracer

__all__ = ["TracingError", "accept_keys", "as_generator", "is_jax_key", "refuse_tracing", "tracing"]


def as_generator(rng: Any) -> Any:
    """The generator a call draws from: ``rng`` itself, or a JAX key as a :class:`KeyStream`.

    Anything else passes through unchanged (an sgmc generator, or an object with its methods).

    Raises
    ------
    TypeError
        ``rng`` is a :class:`numpy.random.Generator` (named with its fix).
    """
    if is_jax_key(rng):
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


def refuse_tracing(what: str, why: str, *values: Any) -> None:
    """Raise :class:`TracingError` naming ``what`` and ``why`` when any of ``values`` is traced."""
    if tracing(*values):
        msg = (f"{what} cannot run under jax.jit, jax.lax.scan or jax.vmap: {why}; call it eagerly "
               "(sgmc.sample runs it step by step)")
        raise TracingError(msg)
