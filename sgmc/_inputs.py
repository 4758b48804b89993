"""The first step of :func:`sgmc.sample`: check every argument once, before anything runs.

:func:`check_inputs` moves the model (and an array ``init``) to a requested backend, checks the
model against the protocol, every scalar and every combination of arguments (burn-in against the
run length, thinning that keeps at least two draws, ``max_time`` and ``checkpoint`` against the
executor, the trace's size against the memory), and returns the checked values as one frozen
:class:`RunInputs`. Nothing is drawn and nothing is built here, so a bad argument is told before any
work starts, in the order the arguments are listed.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from . import backends
from ._array_api import is_array
from ._progress import wants_progress
from ._safefile import check_key
from ._validation import check_alloc, check_choice, check_int
from .adapt import default_burn_in, parse_auto
from .executors import check_executor
from .models.base import model_facts
from .samplers import step_sizes

__all__ = ["RunInputs", "check_inputs", "DEFAULT_GROUP_SIZE"]

#: Chains per group when ``group_size`` is not given: large enough that the chains of a group share
#: the per-iteration Python overhead, small enough that 32 chains make 2 groups for 2 processes.
DEFAULT_GROUP_SIZE = 16


@dataclass(frozen=True)
class RunInputs:
    """The checked arguments of :func:`sgmc.sample` (``auto`` or ``step_sizes`` set, never both)."""

    model: Any
    init: Any
    n_iter: int
    chains: int
    burn_in: int
    thin: int
    kept: tuple
    group_size: int
    check_every: int
    store_grads: Any
    batch_size: Any
    auto: Any
    step_sizes: Any
    checkpoint: Any
    checkpoint_every: int
    checkpoint_key: Any
    max_time: float | None
    facts: Any = None  # the model's ModelFacts: what checking it found (estimators take it, not the model)


def _check_run_size(dim: int, n_iter: int, chains: int, n_kept: int, grads: bool) -> None:
    """Refuse a run whose trace (draws, gradients, per-iteration statistics) would not fit in memory."""
    per_chain = 8 * n_kept * int(dim) * (2 if grads else 1) + 8 * 8 * n_iter  # draws (+ grads), ~8 stats
    check_alloc(per_chain + 40 * n_kept, "n_iter", n_iter, "the trace of one chain")
    check_alloc(chains * per_chain + 40 * n_kept, "chains", chains, f"the trace of {chains} chains")


def check_max_time(max_time: Any, executor: Any, checkpoint: Any) -> float:
    """``max_time`` as seconds; it applies to runs in this process without checkpoints."""
    if isinstance(max_time, bool) or not isinstance(max_time, (int, float)) or not math.isfinite(max_time) or max_time <= 0:
        msg = f"`max_time` must be a positive number of seconds; got {max_time!r}"
        raise ValueError(msg)
    if executor is not None or checkpoint is not None:
        what = "executor" if executor is not None else "checkpoint"
        msg = f"`max_time` applies to runs in this process without checkpoints; it cannot be combined with `{what}`"
        raise ValueError(msg)
    return float(max_time)


def check_checkpoint_path(path: Any, executor: Any) -> Any:
    """A checkpoint path whose folder exists, for a run in this process."""
    if not isinstance(path, (str, os.PathLike)):
        msg = f"`checkpoint` must be a file path; got {type(path).__name__}"
        raise TypeError(msg)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        msg = f"`checkpoint`: the folder {folder!r} does not exist"
        raise ValueError(msg)
    if executor is not None:
        msg = (
            "`checkpoint` is supported for runs in this process (executor=None); with an executor the "
            "groups of chains run elsewhere and are not checkpointed"
        )
        raise ValueError(msg)
    return path


def check_inputs(model: Any, *, step_size: Any, batch_size: Any, n_iter: Any, chains: Any, burn_in: Any,
                 thin: Any, init: Any, store_grads: Any, progress: Any, check_every: Any, executor: Any,
                 group_size: Any, checkpoint: Any, checkpoint_every: Any, checkpoint_key: Any, backend: Any,
                 max_time: Any) -> RunInputs:
    """Check the arguments of :func:`sgmc.sample`; return them as a :class:`RunInputs`."""
    if backend is not None:
        model = backends.move(model, backend)
    facts = model_facts(model)
    if backend is not None and is_array(init):
        init = backends.move(init, backend, device=model.device)
    wants_progress(progress)
    n_iter = check_int(n_iter, "n_iter")
    chains = check_int(chains, "chains")
    thin = check_int(thin, "thin")
    check_every = check_int(check_every, "check_every")
    burn_in = default_burn_in(step_size, n_iter) if burn_in is None else check_int(burn_in, "burn_in", minimum=0)
    group_size = check_int(group_size if group_size is not None else DEFAULT_GROUP_SIZE, "group_size")
    if burn_in >= n_iter:
        msg = f"`burn_in`={burn_in} must be smaller than `n_iter`={n_iter}"
        raise ValueError(msg)
    check_choice(store_grads, "store_grads", (False, True, "estimate", "full"))
    if store_grads == "full":
        facts.require(("grad_log_posterior",), "store_grads='full'")
    if isinstance(batch_size, bool):
        msg = f"`batch_size` must be a positive int or a fraction in (0, 1); got {batch_size!r}"
        raise TypeError(msg)
    check_executor(executor)
    _check_run_size(model.dim, n_iter, chains, len(range(burn_in, n_iter, thin)), bool(store_grads))
    kept = tuple(range(burn_in, n_iter, thin))
    if thin > 1 and len(kept) < 2:
        msg = (
            f"`thin`={thin} keeps {len(kept)} draw(s) of the {n_iter - burn_in} iterations after burn-in; "
            "choose a thinning interval that keeps at least two"
        )
        raise ValueError(msg)
    if max_time is not None:
        max_time = check_max_time(max_time, executor, checkpoint)
    if checkpoint is not None:
        checkpoint = check_checkpoint_path(checkpoint, executor)
        checkpoint_every = check_int(
            checkpoint_every if checkpoint_every is not None else max(1, n_iter // 10), "checkpoint_every"
        )
    elif checkpoint_every is not None or checkpoint_key is not None:
        what = "checkpoint_every" if checkpoint_every is not None else "checkpoint_key"
        msg = f"`{what}` needs `checkpoint=PATH`, the file the checkpoints are written to"
        raise ValueError(msg)
    checkpoint_key = check_key(checkpoint_key, "checkpoint_key")
    auto = parse_auto(step_size, burn_in, n_iter)  # step_size='auto': adapted during burn-in (sgmc.adapt)
    hs = step_sizes(step_size, n_iter) if auto is None else None
    return RunInputs(model, init, n_iter, chains, burn_in, thin, kept, group_size, check_every, store_grads,
                     batch_size, auto, hs, checkpoint, checkpoint_every or 0, checkpoint_key, max_time, facts)
