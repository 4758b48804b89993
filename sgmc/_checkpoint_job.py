"""A run in progress: its :class:`~sgmc._plan.RunPlan` and what it has done, written to and read from checkpoints.

:class:`Job` holds the immutable plan and the mutable progress (the finished groups' results, the
group in progress as last checkpointed, the iteration count at which a ``max_time`` budget ran
out). :meth:`Job.save` writes it through :mod:`sgmc._checkpoint` (the plan's parts under the keys
the checkpoint files have always had: ``spec``, ``bounds``, ``settings``, ``setup_time``,
``setup_evals``; the progress under ``tasks``, ``results``, ``current``, ``every``, ``max_time``,
``budget_iters``), and :meth:`Job.load` rebuilds the plan from a file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable

from . import _checkpoint
from ._assemble import assemble
from ._plan import RunPlan
from .chains import ChainsResult
from .executors import GroupTask, RunSpec
from .trace import Trace

__all__ = ["Job", "CheckpointWriteError"]


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (disk full, no permission ...); the run stopped there.

    Attributes
    ----------
    filename : str
        The checkpoint file.
    trace : Trace or None
        The draws made until the failed write (every group that ran, cut to the shortest), so
        nothing sampled is lost; :func:`sgmc.resume` continues from the last checkpoint written.
    """

    def __init__(self, errno: Any, msg: str, filename: str):
        super().__init__(errno, msg, filename)
        self.trace = None


_STATE = ("tasks", "results", "current", "every", "max_time", "budget_iters")
_SHARED = ("bounds", "setup_time", "setup_evals", "settings")


@dataclass
class Job:
    """A run of :func:`sgmc.sample` after set-up: its plan, and its progress so far."""

    plan: RunPlan
    results: list = field(default_factory=list)
    current: Any = None  # ChainsProgress of the group in progress, as last checkpointed
    budget_iters: int | None = None  # iterations done when a group ran out of the budget
    file: Any = None  # the run's data file, once written (see sgmc._checkpoint)

    def _roles(self) -> dict:
        p = self.plan
        return {"model": p.model, "sampler": p.spec.sampler, "estimator": p.spec.estimator}

    def _shared(self) -> dict:
        p = self.plan
        return {"spec": p.spec, "bounds": p.bounds, "settings": p.settings, "setup_time": p.setup_time,
                "setup_evals": p.setup_evals}

    def save(self, sampled: Callable[[], list] | None = None) -> None:
        """Write the checkpoint; a failure raises :class:`CheckpointWriteError` with ``sampled()``'s trace.

        The first write also writes the run's data file (model, sampler, estimator, settings), so the
        model is encoded and fingerprinted when a checkpoint is written, not before sampling starts.
        """
        p = self.plan
        state = {"tasks": p.tasks, "results": self.results, "current": self.current, "every": p.every,
                 "max_time": p.max_time, "budget_iters": self.budget_iters}
        where = os.fspath(p.path)
        try:
            self.file = _checkpoint.write(p.path, self._shared(), self._roles(), state, self.file, p.key)
        except OSError as err:
            earlier = f"; sgmc.resume({where!r}) continues from the last checkpoint written" if self.file else ""
            msg = (f"cannot write the checkpoint {where!r}: {err.strerror or err}; the draws so far are on "
                   f"this error (err.trace){earlier}")
            new = CheckpointWriteError(err.errno, msg, err.filename or where)
            new.trace = self.trace(sampled() if sampled is not None else list(self.results), interrupted=True)
            raise new from err
        except _checkpoint.NotStorable as err:
            msg = f"cannot write the checkpoint {where!r}: {err}"
            new = _checkpoint.NotStorable(msg)
            new.trace = self.trace(sampled() if sampled is not None else list(self.results), interrupted=True)
            raise new from err

    @classmethod
    def load(cls, path: Any, supplied: dict, key: Any = None) -> "Job":
        """The job of a checkpoint file: the plan rebuilt from the file's parts, and the progress."""
        shared, state, run = _checkpoint.read(path, supplied, key)
        roles = shared["roles"]
        spec = shared.get("spec")
        if not (isinstance(spec, RunSpec) and isinstance(state, dict) and all(k in state for k in _STATE)
                and all(k in shared for k in _SHARED)
                and isinstance(state.get("tasks"), list)
                and all(isinstance(t, GroupTask) for t in state["tasks"])
                and all(isinstance(r, ChainsResult) for r in state.get("results", [None]))):
            msg = f"{os.fspath(path)!r} is not a checkpoint written by sgmc.sample(..., checkpoint=...)"
            raise ValueError(msg)
        model = roles["model"]
        plan = RunPlan(model, spec, model.device, model.dtype, shared["bounds"],
                       (None, None, None, tuple(t.rng for t in state["tasks"])), shared["settings"], tasks=state["tasks"],
                       setup_time=shared["setup_time"], setup_evals=shared["setup_evals"], path=path,
                       every=state["every"], key=key, max_time=state["max_time"])
        return cls(plan, results=state["results"], current=state["current"], budget_iters=state["budget_iters"],
                   file=run)

    def done(self) -> int:
        """Iterations done, summed over groups."""
        return self.plan.n_iter * len(self.results) + (self.current.k if self.current is not None else 0)

    def trace(self, results: list, interrupted: bool = False) -> Trace:
        return assemble(self.plan, results, interrupted)
