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

from typing import Any

from .._dispatch import native
from ._fused import Block

__all__ = ["CompiledPlan", "plan", "MAX_BLOCK"]

#: Most iterations in one compiled block.
MAX_BLOCK = 1000


def plan(sampler: Any, estimator: Any, position: Any) -> "CompiledPlan | None":
    """A :class:`CompiledPlan` where the model's backend compiles blocks (JAX's native ``"block_runner"``)."""
    model = getattr(estimator, "model", None)
    make = native(model.xp, "block_runner") if model is not None else None
    if make is None:
        return None
    return CompiledPlan(make(sampler, estimator))


class CompiledPlan:
    """Blocks of ``step`` compiled by the backend (module docstring), in the runner's block protocol."""

    def __init__(self, runner: Any):
        self._runner = runner

    @property
    def declined(self) -> bool:
        """Whether the loop must go on step by step (the step cannot be traced, or a block diverged)."""
        return self._runner.declined

    @property
    def compile_seconds(self) -> float:
        """Seconds spent compiling, summed over the block shapes of the run."""
        return self._runner.compile_seconds

    def block_size(self, chains: int) -> int:
        return MAX_BLOCK

    def draw(self, rng: Any, iterations: int, chains: int) -> tuple[Any, None]:
        """Nothing is drawn ahead: the block draws from the generator's key as it runs."""
        return rng, None

    def run(self, state: Any, hs: list, z: Any, idx: Any, keep_grads: bool = False) -> Block | None:
        """Run ``len(hs)`` iterations from the generator ``z``; ``None`` where they must run step by step."""
        out = self._runner.run(z, state, hs, keep_grads)
        return None if out is None else Block(*out)

    def write(self, buffer: Any, start: int, rows: Any) -> Any:
        """``buffer[:, start:start + rows.shape[1], :] = rows``, in place (the buffer is donated)."""
        return self._runner.write(buffer, start, rows)
