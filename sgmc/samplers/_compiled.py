"""Blocks of iterations compiled by JAX: ``jax.jit`` of a ``jax.lax.scan`` over the sampler's own ``step``.

On JAX arrays, :func:`sgmc.chains.run_chains` runs a block of iterations (up to the next checkpoint,
the run's end or :data:`MAX_BLOCK`) as one compiled function, chains as an axis of the state, in
place of one dispatch per array operation. The block is the samplers' and estimators' own ``step`` and
``estimate`` traced with a key (:mod:`sgmc._keys`): the scan carries the group generator's key and
every draw splits it exactly as the step-by-step loop's :class:`~sgmc.backends._jax.JaxGenerator` does,
so a block makes the loop's draws, leaves the generator where the loop would, and a checkpoint at a
block's end resumes as the loop's does. Positions agree with the loop's to rounding (XLA fuses the
arithmetic).

A block spans divergence-check windows: it is a scan over whole windows that also returns the key
and state where each window ends, so the loop checks and records each window as before, and a
``stop()`` between two windows ends the run there with that window's state and generator. Each block
length and set of shapes is compiled once (ahead of time, so the compile time is measured apart and
reported as ``compile_time`` in the run's step statistics). Step sizes enter as an array, so a
schedule does not recompile. Kept draws are written into the run's preallocated buffer by a compiled
update that donates the buffer, so storing costs the kept draws' size, not the buffer's.

A sampler or estimator whose work has a shape that depends on values (DPP subsampling, the adaptive
subsample size, SCIR's rejection rounds) cannot be traced: the first block then declines before it
draws anything, runs step by step, and the loop continues the same stream. A block with a position
that is not finite is not kept either (the block computes that flag; one read of a value per block):
the loop runs those iterations again step by step from the same key and reports the divergence at
the check where it was found, as without compiled blocks.
"""

from __future__ import annotations

from typing import Any

from .._dispatch import native
from ._fused import Block

__all__ = ["CompiledPlan", "plan", "MAX_BLOCK", "BLOCK_BYTES"]

#: Most iterations in one compiled block.
MAX_BLOCK = 1000
#: Most bytes of the positions and gradients a block returns at once.
BLOCK_BYTES = 256 << 20


def plan(sampler: Any, estimator: Any, position: Any, backend: Any = None) -> "CompiledPlan | None":
    """A :class:`CompiledPlan` where the run's backend compiles blocks (JAX's native ``"block_runner"``).

    ``backend``: the run's (its plan's), whose native table is read; found from the model if omitted.
    """
    model = getattr(estimator, "model", None)
    if backend is not None:
        make = backend.native.get("block_runner")
    else:
        make = native(model.xp, "block_runner") if model is not None else None
    if make is None:
        return None
    return CompiledPlan(make(sampler, estimator), int(position.shape[-1]), position.dtype.itemsize)


class CompiledPlan:
    """Blocks of ``step`` compiled by the backend (module docstring), in the runner's block protocol.

    A block may span several divergence-check windows (``spans_windows``): it is compiled as a scan
    over whole windows that keeps the state where each ends, so the loop settles the windows one by
    one (checks, statistics, ``stop``) and may end at any of them with that state (``Block.at``).
    """

    spans_windows = True
    window_stats = True

    def __init__(self, runner: Any, dim: int = 1, itemsize: int = 8):
        self._runner = runner
        self._row_bytes = max(1, dim * itemsize)

    @property
    def declined(self) -> bool:
        """Whether the loop must go on step by step (the step cannot be traced, or a block diverged)."""
        return self._runner.declined

    @property
    def compile_seconds(self) -> float:
        """Seconds spent compiling, summed over the block shapes of the run."""
        return self._runner.compile_seconds

    def block_size(self, chains: int) -> int:
        """:data:`MAX_BLOCK`, or fewer so that a block's positions and gradients take at most :data:`BLOCK_BYTES`."""
        return max(1, min(MAX_BLOCK, BLOCK_BYTES // (2 * chains * self._row_bytes)))

    def draw(self, rng: Any, iterations: int, chains: int) -> tuple[Any, None]:
        """Nothing is drawn ahead: the block draws from the generator's key as it runs."""
        return rng, None

    def run(self, state: Any, hs: list, z: Any, idx: Any, keep_grads: bool = False, window: int = 0,
            watch: Any = None) -> Block | None:
        """Run ``len(hs)`` iterations from the generator ``z``; ``None`` where they must run step by step.

        ``window``: the divergence-check interval, when the block starts a window and spans whole ones;
        ``watch``: ``Watch.block_args`` of the loop's watch, whose per-window statistics the block then
        computes (``Block.stats``, folded in by ``Watch.window``).
        """
        out = self._runner.run(z, state, hs, keep_grads, window, watch)
        return None if out is None else Block(*out)

    def write(self, buffer: Any, start: int, rows: Any) -> Any:
        """``buffer[:, start:start + rows.shape[1], :] = rows``, in place (the buffer is donated)."""
        return self._runner.write(buffer, start, rows)
