"""JAX's compiled blocks of iterations: ``jax.jit`` of a ``jax.lax.scan`` over a sampler's ``step``.

The runner's seam for them is the JAX backend's native ``"block_runner"``
(:mod:`sgmc.samplers._compiled` explains the blocks and their guarantees); this module holds what
touches JAX itself: tracing the step with a key stream, compiling ahead of time (so the compile is
timed apart), the donated write of kept draws, and the one copy of a block's step statistics to the
host.
"""

from __future__ import annotations

import time
from typing import Any

import jax
import jax.numpy as jnp

from ._values import TracingError

__all__ = ["BlockRunner"]

_UNTRACEABLE = (TracingError, jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError,
                jax.errors.TracerIntegerConversionError)


class BlockRunner:
    """Compiles and runs blocks of ``step`` for one sampler and estimator (one run's; not shared).

    ``run`` returns ``(state, positions, grads, infos)``, or ``None`` when the block must be run step by
    step (it cannot be traced, ``declined`` is then set; or it ended non-finite, and nothing was kept).
    """

    def __init__(self, sampler: Any, estimator: Any, stream: Any):
        self.sampler, self.estimator = sampler, estimator
        self._stream = stream  # KeyStream: a key as the generator of one traced step
        self.declined = False
        #: Seconds spent compiling, summed over the block shapes of the run.
        self.compile_seconds = 0.0
        self._compiled: dict = {}
        self._write = jax.jit(_write_rows, donate_argnums=0)

    def _function(self, n: int, keep_grads: bool, key: Any, state: Any, hs: Any) -> Any:
        sig = (n, keep_grads, jax.tree.structure(state),
               tuple((tuple(x.shape), str(x.dtype)) for x in jax.tree.leaves(state)))
        fn = self._compiled.get(sig)
        if fn is None:
            sampler, estimator, key_stream = self.sampler, self.estimator, self._stream

            def block(key, state, hs):
                def body(carry, h):
                    k, s = carry
                    stream = key_stream(k)
                    nxt, info = sampler.step(stream, s, estimator, h)
                    nxt = jax.tree.map(lambda new, old: new.astype(old.dtype), nxt, s)
                    return (stream.key, nxt), (nxt.position, nxt.grad if keep_grads else None, info)

                (key, state), out = jax.lax.scan(body, (key, state), hs)
                return key, state, out

            t0 = time.perf_counter()
            try:
                fn = jax.jit(block).lower(key, state, hs).compile()
            except _UNTRACEABLE:
                self.declined = True
                return None
            self.compile_seconds += time.perf_counter() - t0
            self._compiled[sig] = fn
        return fn

    def run(self, gen: Any, state: Any, hs: list, keep_grads: bool) -> Any:
        """Run ``len(hs)`` iterations from the generator ``gen`` (a :class:`~sgmc.backends._jax.JaxGenerator`)."""
        state = jax.tree.map(_typed, state)
        hs_arr = jnp.asarray(hs, dtype=state.position.dtype)
        fn = self._function(len(hs), bool(keep_grads), gen.key, state, hs_arr)
        if fn is None:
            return _step_by_step(self.sampler, self.estimator, gen, state, hs, keep_grads)
        new_key, new_state, (positions, grads, infos) = fn(gen.key, state, hs_arr)
        if not bool(jnp.all(jnp.isfinite(new_state.position))):
            # Diverged inside the block: leave the generator and state as they were, so that the step-by-step
            # loop runs the same iterations and reports the divergence at its iteration, with its draws.
            self.declined = True
            return None
        gen.continue_from(new_key)
        return new_state, positions, grads, _unstack(infos, len(hs))

    def write(self, buffer: Any, start: int, rows: Any) -> Any:
        """``buffer[:, start:start + rows.shape[1], :] = rows``, in the donated buffer."""
        return self._write(buffer, start, rows)


def _write_rows(buffer: Any, start: Any, rows: Any) -> Any:
    return jax.lax.dynamic_update_slice(buffer, rows.astype(buffer.dtype), (0, start, 0))


def _typed(x: Any) -> Any:
    """A state leaf as a JAX array of a fixed dtype (a Python count becomes a strongly typed integer)."""
    a = jnp.asarray(x)
    return jnp.asarray(a, dtype=a.dtype)


def _unstack(infos: Any, n: int) -> list:
    """The scan's stacked step infos as one info per iteration, with host values (one copy per block)."""
    host = jax.device_get(infos)
    leaves, tree = jax.tree.flatten(host)
    cols, same = [], True
    for leaf in leaves:
        if leaf.ndim == 1 and (leaf == leaf[0]).all():
            cols.append([leaf[0].item()] * n)   # the same number every iteration
        else:
            cols.append(list(leaf))
            same = False
    if same and n:  # every iteration's info is equal: one immutable info serves them all
        one = jax.tree.unflatten(tree, [c[0] for c in cols])
        if _immutable(one):
            return [one] * n
    return [jax.tree.unflatten(tree, [c[i] for c in cols]) for i in range(n)]


def _immutable(x: Any) -> bool:
    """Whether ``x`` holds nothing that could be changed in place (tuples of numbers and ``None``)."""
    if isinstance(x, tuple):
        return all(_immutable(c) for c in x)
    return x is None or isinstance(x, (bool, int, float, complex, str))


def _step_by_step(sampler: Any, estimator: Any, gen: Any, state: Any, hs: list, keep_grads: bool) -> tuple:
    positions, grads, infos = [], [], []
    for h in hs:
        state, info = sampler.step(gen, state, estimator, h)
        positions.append(state.position)
        grads.append(state.grad)
        infos.append(info)
    return state, jnp.stack(positions), jnp.stack(grads) if keep_grads else None, infos
