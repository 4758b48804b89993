"""Blocks of iterations compiled by JAX: ``jax.jit`` of a ``jax.lax.scan`` over the sampler's own ``step``.

On JAX arrays, :func:`sgmc.chains.run_chains` runs a block of iterations (up to the next divergence
check, checkpoint or :data:`MAX_BLOCK`) as one compiled function, chains as an axis of the state, in
place of one dispatch per array operation. The block is the samplers' and estimators' own ``step`` and
``estimate`` traced with a key (:mod:`sgmc._keys`): the scan carries the group generator's key and
every draw splits it exactly as the step-by-step loop's :class:`~sgmc.backends._jax.JaxGenerator` does,
so a block makes the loop's draws, leaves the generator where the loop would, and a checkpoint at a
block's end resumes as the loop's does. Positions agree with the loop's to rounding (XLA fuses the
arithmetic).

Each block length and set of shapes is compiled once (ahead of time, so the compile time is measured
apart and reported as ``compile_time`` in the run's step statistics). Step sizes enter as an array,
so a schedule does not recompile. Kept draws are written into the run's preallocated buffer by a
compiled update that donates the buffer, so storing costs the kept draws' size, not the buffer's.

A sampler or estimator whose work has a shape that depends on values (DPP subsampling, the adaptive
subsample size, SCIR's rejection rounds) cannot be traced: the first block then declines before it
draws anything, runs step by step, and the loop continues the same stream. A block whose last
position is not finite is not kept either (one read of a value per block, at the block's end, which
is a divergence check): the loop runs those iterations again step by step from the same key and
reports the divergence at the iteration where it happened, as without compiled blocks.
"""

from __future__ import annotations

import time
from typing import Any

from .._keys import TracingError
from ..backends._values import from_jax
from ._fused import Block

__all__ = ["CompiledPlan", "plan", "MAX_BLOCK"]

#: Most iterations in one compiled block.
MAX_BLOCK = 1000


def plan(sampler: Any, estimator: Any, position: Any) -> "CompiledPlan | None":
    """A :class:`CompiledPlan` for JAX arrays, ``None`` for every other library."""
    if not from_jax(position):
        return None
    return CompiledPlan(sampler, estimator)


class CompiledPlan:
    """Compiles and runs blocks of ``step`` for one sampler and estimator on JAX (module docstring)."""

    def __init__(self, sampler: Any, estimator: Any):
        import jax  # noqa: PLC0415 - JAX arrays only come here

        self.sampler, self.estimator = sampler, estimator
        self.declined = False
        #: Seconds spent compiling, summed over the block shapes of the run.
        self.compile_seconds = 0.0
        self._jax = jax
        self._compiled: dict = {}
        self._write = jax.jit(_write_rows, donate_argnums=0)

    def block_size(self, chains: int) -> int:
        return MAX_BLOCK

    def draw(self, rng: Any, iterations: int, chains: int) -> tuple[Any, None]:
        """Nothing is drawn ahead: the block draws from the generator's key as it runs."""
        return rng, None

    def _function(self, n: int, keep_grads: bool, key: Any, state: Any, hs: Any) -> Any:
        jax = self._jax
        sig = (n, keep_grads, jax.tree.structure(state),
               tuple((tuple(x.shape), str(x.dtype)) for x in jax.tree.leaves(state)))
        fn = self._compiled.get(sig)
        if fn is None:
            sampler, estimator = self.sampler, self.estimator

            def block(key, state, hs):
                from ..backends._jax import KeyStream  # noqa: PLC0415 - loaded with the JAX backend

                def body(carry, h):
                    k, s = carry
                    stream = KeyStream(k)
                    nxt, info = sampler.step(stream, s, estimator, h)
                    nxt = jax.tree.map(lambda new, old: new.astype(old.dtype), nxt, s)
                    return (stream.key, nxt), (nxt.position, nxt.grad if keep_grads else None, info)

                (key, state), out = jax.lax.scan(body, (key, state), hs)
                return key, state, out

            t0 = time.perf_counter()
            try:
                fn = jax.jit(block).lower(key, state, hs).compile()
            except (TracingError, jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError,
                    jax.errors.TracerIntegerConversionError):
                self.declined = True
                return None
            self.compile_seconds += time.perf_counter() - t0
            self._compiled[sig] = fn
        return fn

    def run(self, state: Any, hs: list, z: Any, idx: Any, keep_grads: bool = False) -> Block:
        """Run ``len(hs)`` iterations from the generator ``z``; step by step where the block cannot compile."""
        jax, gen = self._jax, z
        jnp = jax.numpy
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
        return Block(new_state, positions, grads, _unstack(jax, infos, len(hs)))

    def write(self, buffer: Any, start: int, rows: Any) -> Any:
        """``buffer[:, start:start + rows.shape[1], :] = rows``, in the donated buffer."""
        return self._write(buffer, start, rows)


def _write_rows(buffer: Any, start: Any, rows: Any) -> Any:
    import jax  # noqa: PLC0415

    return jax.lax.dynamic_update_slice(buffer, rows.astype(buffer.dtype), (0, start, 0))


def _typed(x: Any) -> Any:
    """A state leaf as a JAX array of a fixed dtype (a Python count becomes a strongly typed integer)."""
    import jax.numpy as jnp  # noqa: PLC0415

    a = jnp.asarray(x)
    return jnp.asarray(a, dtype=a.dtype)


def _unstack(jax: Any, infos: Any, n: int) -> list:
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


def _step_by_step(sampler: Any, estimator: Any, gen: Any, state: Any, hs: list, keep_grads: bool) -> Block:
    import jax.numpy as jnp  # noqa: PLC0415

    positions, grads, infos = [], [], []
    for h in hs:
        state, info = sampler.step(gen, state, estimator, h)
        positions.append(state.position)
        grads.append(state.grad)
        infos.append(info)
    return Block(state, jnp.stack(positions), jnp.stack(grads) if keep_grads else None, infos)
