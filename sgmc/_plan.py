"""A run of :func:`sgmc.sample` resolved once: the immutable :class:`RunPlan`.

:func:`resolve` turns the checked arguments (:class:`sgmc._inputs.RunInputs`) into a plan: the
backend (asked for once, through the run's generator), its namespace, the host namespace, the device
and dtype, the sampler and the estimator, the step sizes and the kept iterations, the groups of
chains and the streams (initialisation, estimator set-up, adaptation, one per group), and the
checkpoint settings. :func:`prepare` does the set-up the plan calls for (the estimator's
preparation, the starting positions, ``step_size="auto"``) and returns a new plan with the groups'
tasks. Everything below reads the plan: the executors ship its :class:`~sgmc.executors.RunSpec`
(``plan.spec``, which names the backend, so workers find the namespace without asking), the
checkpoint records its parts, the loop takes its namespace, and the assembly its namespaces. The
plan pickles; its namespaces are read from the backend, which pickles by name.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

from . import backends
from ._array_api import as_float_array, check_finite, is_array
from ._progress import progress_scope
from .adapt import adapt_step_size
from .estimators import FullGradient, SupportsPrepare, make_estimator
from .executors import GroupTask, RunSpec
from .models.base import check_compatible
from .samplers import make_sampler

__all__ = ["RunPlan", "resolve", "prepare", "HOST"]

#: The host backend (NumPy), where statistics and run records live; fixed, so looked up once.
HOST = backends.get_backend("numpy")


@dataclass(frozen=True)
class RunPlan:
    """Everything a run needs, resolved once; a new plan (``dataclasses.replace``) for each set-up step.

    ``spec`` is what every group of chains needs (sampler, estimator, step sizes, kept iterations,
    gradients to store, divergence check interval, backend): the part executors ship to workers and
    checkpoints record. ``tasks`` is empty until :func:`prepare` has placed the chains.
    """

    model: Any
    spec: RunSpec
    device: Any
    dtype: Any
    bounds: list
    streams: tuple  # (init, prepare, adapt or None, (one per group, ...))
    settings: dict
    tasks: list = field(default_factory=list)
    auto: Any = None
    setup_time: float = 0.0
    setup_evals: float = 0.0
    path: Any = None
    every: int = 0
    key: Any = None
    max_time: float | None = None

    @property
    def backend(self) -> Any:
        return self.spec.backend

    @property
    def xp(self) -> Any:
        """The run's array namespace."""
        return self.spec.backend.xp

    @property
    def hx(self) -> Any:
        """The host namespace (statistics, records)."""
        return HOST.xp

    @property
    def n_iter(self) -> int:
        return len(self.spec.step_sizes)


def estimator_for(smp: Any, estimator: Any, options: dict) -> tuple[Any, dict]:
    """The estimator (a name or an object) and its options a sampler runs with: exact samplers get the full gradient."""
    if smp.exact:
        if isinstance(estimator, str):
            if estimator not in ("minibatch", "full"):
                msg = f"sampler {smp.name!r} uses the exact gradient; got estimator={estimator!r} (use 'full')"
                raise ValueError(msg)
            if "log_density" in options:
                msg = f"`estimator_options`: sampler {smp.name!r} sets 'log_density' itself; got {options['log_density']!r}"
                raise TypeError(msg)
            return "full", dict(options, log_density=smp.needs_log_density)
        if not isinstance(estimator, FullGradient):
            msg = f"sampler {smp.name!r} uses the exact gradient; pass estimator='full'"
            raise ValueError(msg)
    return estimator, options


def initial_position(plan: RunPlan, init: Any, chains: int, rng: Any) -> Any:
    """Starting positions (chains, dim): N(0, I) draws, or ``init`` checked and broadcast."""
    model, xp = plan.model, plan.xp
    if init is None:
        return rng.normal((chains, model.dim), dtype=plan.dtype)
    if not is_array(init):
        init = backends.asarray(init, backend=plan.backend, dtype=plan.dtype, device=plan.device)
    check_compatible(model, init, "init")
    init = as_float_array(xp, init, plan.dtype, "init")
    if init.ndim == 1 and init.shape[0] == model.dim:
        init = xp.broadcast_to(init, (chains, model.dim))
    if tuple(init.shape) != (chains, model.dim):
        msg = f"`init` must have shape ({model.dim},) or ({chains}, {model.dim}); got {tuple(init.shape)}"
        raise ValueError(msg)
    check_finite(xp, init, "init")
    return init


def resolve(inputs: Any, sampler: Any, estimator: Any, rng: Any, sampler_options: dict | None,
            estimator_options: dict | None) -> RunPlan:
    """The plan of a run from its checked inputs: objects built, backend and streams fixed, nothing drawn."""
    model = inputs.model
    smp = make_sampler(sampler, model, **(sampler_options or {}))
    est, options = estimator_for(smp, estimator, dict(estimator_options or {}))
    est = make_estimator(est, model, inputs.batch_size, _checked=inputs.facts, **options)  # checked in _inputs
    gen = backends.default_rng(rng, backend=model.xp, device=model.device)  # the backend, asked for once
    init_rng, prep_rng, run_rng = gen.spawn(3)
    adapt_rng = None
    if inputs.auto is not None:
        run_rng, adapt_rng = run_rng.spawn(2)
    bounds = [(start, min(start + inputs.group_size, inputs.chains))
              for start in range(0, inputs.chains, inputs.group_size)]
    streams = (init_rng, prep_rng, adapt_rng, tuple(run_rng.spawn(len(bounds))))
    score = model.grad_log_posterior if inputs.store_grads == "full" else None
    spec = RunSpec(smp, est, inputs.step_sizes, list(inputs.kept), inputs.store_grads, score, inputs.check_every,
                   gen.backend)
    settings = {"n_iter": inputs.n_iter, "burn_in": inputs.burn_in, "thin": inputs.thin, "chains": inputs.chains}
    return RunPlan(model, spec, model.device, model.dtype, bounds, streams, settings, auto=inputs.auto,
                   path=inputs.checkpoint, every=inputs.checkpoint_every, key=inputs.checkpoint_key,
                   max_time=inputs.max_time)


def prepare(plan: RunPlan, init: Any, progress: Any) -> RunPlan:
    """Start positions, the estimator's set-up and ``step_size="auto"``: the plan with its groups' tasks."""
    init_rng, prep_rng, adapt_rng, streams = plan.streams
    spec, settings = plan.spec, dict(plan.settings)
    est, chains, burn_in = spec.estimator, settings["chains"], settings["burn_in"]
    position = initial_position(plan, init, chains, init_rng)
    t_setup = time.perf_counter()
    setup_evals = 0.0
    if isinstance(est, SupportsPrepare):
        with progress_scope(progress):
            prepared = est.prepare(prep_rng, position)
        est = prepared.estimator
        setup_evals += prepared.n_evals
        if prepared.start is not None and init is None:
            position = prepared.start
    setup_evals += float(est.init_cost)
    setup_time = time.perf_counter() - t_setup
    hs, kept = spec.step_sizes, spec.kept
    if plan.auto is not None:  # the burn-in chooses the step; the run goes on from the adapted chains
        n_iter = settings["n_iter"]
        adapted = adapt_step_size(plan.auto, plan.model, spec.sampler, est, adapt_rng, position, burn_in,
                                  n_iter - burn_in)
        position, settings["step_size_auto"] = adapted.state.position, adapted.info
        hs, kept = [adapted.step_size] * (n_iter - burn_in), [k - burn_in for k in kept]
    tasks = [GroupTask(g, streams[g], position[a:b, :]) for g, (a, b) in enumerate(plan.bounds)]
    spec = spec._replace(estimator=est, step_sizes=hs, kept=kept)
    return dataclasses.replace(plan, spec=spec, tasks=tasks, settings=settings, setup_time=setup_time,
                               setup_evals=setup_evals)
