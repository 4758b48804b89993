"""``sgmc.sample``: run stochastic gradient MCMC chains in one call.

The runner validates everything once, wires a model, a gradient estimator and a sampler, draws the
starting points, lets the estimator prepare (control variates find their centre and the chains start
there), splits the chains into groups with a stream each, runs the groups in this process or on an
executor (:mod:`sgmc.executors`, each group through the loop of :mod:`sgmc.chains`), and assembles a
:class:`~sgmc.Trace` from what every step reported.

Long runs survive interruption. With ``checkpoint=PATH`` the complete state of the run (the model,
sampler and estimator, every group's sampler and estimator state and generator, the draws so far
and the run's settings) is written atomically to PATH every ``checkpoint_every`` iterations, and
:func:`resume` continues from it with the same draws as an uninterrupted run. Ctrl-C during a run in
this process ends it at the end of the current iteration and returns the draws so far, and a
divergence keeps them on the error (``err.trace``), as does a checkpoint that cannot be written
(:class:`CheckpointWriteError`, disk full say). Checkpoint files hold data, not code
(:mod:`sgmc._checkpoint`): resuming runs nothing from the file and refuses a damaged one.
"""

from __future__ import annotations

import difflib
import inspect
import math
import os
import signal
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

from . import _checkpoint, backends
from ._array_api import as_float_array, check_finite, is_array
from ._param_names import model_param_names
from ._safefile import check_key
from ._progress import progress_bar, progress_scope, wants_progress
from ._validation import check_alloc, check_choice, check_int
from .chains import ChainsResult, DivergenceError, run_chains, step_stats
from .diagnostics.mixing import MixingWarning, warn_if_unmixed
from .diagnostics.runaway import RunawayChainWarning, warn_if_runaway
from .estimators import FullGradient, SupportsPrepare, make_estimator
from .adapt import adapt_step_size, default_burn_in, parse_auto
from .executors import GroupTask, RunSpec, WorkerLostError, check_executor, run_groups
from .models.base import check_compatible, check_target, require
from .samplers import make_sampler, step_sizes
from .trace import Trace

__all__ = ["sample", "resume", "DEFAULT_GROUP_SIZE", "SamplingInterruptedWarning", "CheckpointWriteError",
           "RunawayChainWarning", "MixingWarning"]


class SamplingInterruptedWarning(UserWarning):
    """Ctrl-C ended :func:`sample` early; the returned trace holds the draws made until then."""


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (disk full, no permission ...); the run stopped there.

    Attributes
    ----------
    filename : str
        The checkpoint file.
    trace : Trace or None
        The draws made until the failed write (every group that ran, cut to the shortest), so
        nothing sampled is lost; :func:`resume` continues from the last checkpoint written.
    """

    def __init__(self, errno: Any, msg: str, filename: str):
        super().__init__(errno, msg, filename)
        self.trace = None

#: Chains per group when ``group_size`` is not given: large enough that the chains of a group share
#: the per-iteration Python overhead, small enough that 32 chains make 2 groups for 2 processes.
DEFAULT_GROUP_SIZE = 16


_REQUIRED: Any = type("_Required", (), {"__repr__": lambda self: "<required>"})()


def _initial_position(model, init, chains, rng):
    xp = model.xp
    if init is None:
        return rng.normal((chains, model.dim), dtype=model.dtype)
    if not is_array(init):
        init = backends.asarray(init, backend=backends.get_backend(xp), dtype=model.dtype, device=model.device)
    check_compatible(model, init, "init")
    init = as_float_array(xp, init, model.dtype, "init")
    if init.ndim == 1 and init.shape[0] == model.dim:
        init = xp.broadcast_to(init, (chains, model.dim))
    if tuple(init.shape) != (chains, model.dim):
        msg = f"`init` must have shape ({model.dim},) or ({chains}, {model.dim}); got {tuple(init.shape)}"
        raise ValueError(msg)
    check_finite(xp, init, "init")
    return init


def _estimator_for(smp: Any, estimator: Any, model: Any, batch_size: Any, options: dict) -> Any:
    """The estimator a sampler runs with: exact samplers get the full gradient."""
    if smp.exact:
        if isinstance(estimator, str):
            if estimator not in ("minibatch", "full"):
                msg = f"sampler {smp.name!r} uses the exact gradient; got estimator={estimator!r} (use 'full')"
                raise ValueError(msg)
            return FullGradient(model, log_density=smp.needs_log_density, **options)
        if not isinstance(estimator, FullGradient):
            msg = f"sampler {smp.name!r} uses the exact gradient; pass estimator='full'"
            raise ValueError(msg)
        return estimator
    return make_estimator(estimator, model, batch_size, **options)


def _groups(chains: int, group_size: int) -> list:
    return [(start, min(start + group_size, chains)) for start in range(0, chains, group_size)]


def _check_run_size(model: Any, n_iter: int, chains: int, n_kept: int, grads: bool) -> None:
    """Refuse a run whose trace (draws, gradients, per-iteration statistics) would not fit in memory."""
    per_chain = 8 * n_kept * int(model.dim) * (2 if grads else 1) + 8 * 8 * n_iter  # draws (+ grads), ~8 stats
    check_alloc(per_chain + 40 * n_kept, "n_iter", n_iter, "the trace of one chain")
    check_alloc(chains * per_chain + 40 * n_kept, "chains", chains, f"the trace of {chains} chains")


def sample(
    model: Any,
    sampler: Any = "sgld",
    estimator: Any = "minibatch",
    *,
    step_size: Any = _REQUIRED,
    batch_size: Any = None,
    n_iter: int = 1000,
    chains: int = 1,
    burn_in: int | None = None,
    thin: int = 1,
    init: Any = None,
    rng: Any = None,
    store_grads: bool | str = False,
    progress: bool = True,
    check_every: int = 100,
    sampler_options: dict | None = None,
    estimator_options: dict | None = None,
    callback: Callable | None = None,
    executor: Any = None,
    group_size: int | None = None,
    checkpoint: Any = None,
    checkpoint_every: int | None = None,
    checkpoint_key: Any = None,
    backend: Any = None,
    max_time: float | None = None,
    **unknown: Any,
) -> Trace:
    """Run stochastic gradient MCMC on ``model`` and return a :class:`~sgmc.Trace`.

    Parameters
    ----------
    model : Model
        A posterior following the :mod:`sgmc.models` protocol; its arrays decide the backend.
    sampler : str or Sampler, default "sgld"
        ``"sgld"``, ``"sghmc"``, ``"sgnht"``, ``"psgld"``, ``"ula"``, ``"mala"``, ``"sgrld"``,
        ``"sgrhmc"``, ``"recipe"``, ``"scir"``, ``"sgld_corrected"``, ``"sghmc_corrected"`` or a configured
        sampler object (see :mod:`sgmc.samplers`).
    estimator : str or GradientEstimator, default "minibatch"
        ``"full"``, ``"minibatch"``, ``"cv"``, ``"svrg"``, ``"ps"``, ``"cv-ps"``, ``"adaptive-cv"``,
        ``"adaptive-cv-ps"``, ``"saga"``, ``"dpp"`` (see ``docs/subsampling.md``), ``"minibatch-noise"``,
        ``"cv-switch"`` or a configured estimator. ULA and MALA always use the exact gradient.
    step_size : float, schedule, sequence, "auto" or AutoStep
        h in the review's convention (SGLD: theta' = theta + (h/2) g + N(0, h I)); a callable
        ``k -> h_k`` such as :class:`sgmc.samplers.polynomial`, or ``n_iter`` values. ``"auto"`` (or
        :class:`sgmc.adapt.AutoStep` with settings) chooses h during the burn-in by the KSD of short
        windows (:mod:`sgmc.adapt`; in this process, before the groups run), then samples at it:
        ``trace.info["step_size_auto"]`` reports the choice, its path and its data passes, which
        also start ``trace.stats["data_passes"]``; the stats cover the iterations after burn-in.
    batch_size : int or float, optional
        n for subsampling estimators (a float in (0, 1) is a fraction of N); default N / 100.
    n_iter : int
        Iterations after setup (burn-in included).
    chains : int
        Independent chains, advanced together as one array axis within each group.
    burn_in, thin : int
        Iterations discarded at the start (default none, or ``n_iter // 2`` for ``"auto"``, which adapts
        there), and the interval between kept draws.
    init : array (dim,) or (chains, dim), optional
        Starting positions; default N(0, I) draws, or the posterior mode for the estimators that find
        it (``"cv"``, ``"ps"``, ``"cv-ps"``, ``"adaptive-cv"``, ``"adaptive-cv-ps"``).
    rng : None, int, SeedSequence or Generator
        Seed (SPEC 7). Independent streams are spawned for initialisation, estimator set-up and each
        group of chains.
    store_grads : bool or {"estimate", "full"}
        Keep the gradient paired with each kept draw: the estimate the sampler used (``True`` or
        ``"estimate"``, free) or the exact full-data gradient (``"full"``, one O(N) pass per kept draw).
    progress : bool or {"auto", "always"}
        Show progress bars (the mode search of ``"cv"`` included): tqdm's when it is installed, a
        built-in text bar otherwise. ``True`` (or ``"auto"``) shows them only when standard error is
        a terminal; ``"always"`` shows them anywhere; ``False`` never.
    check_every : int
        Interval of the divergence check.
    sampler_options, estimator_options : dict, optional
        Keyword arguments for samplers and estimators given by name.
    callback : callable, optional
        ``callback(k, state)`` after every iteration of every group (in process only; keep it cheap).
    executor : None, "processes", "dask", concurrent.futures.Executor or distributed.Client, optional
        Where the groups run: ``None`` runs them in this process one after another; a
        ``ProcessPoolExecutor`` (or ``"processes"``, a pool of one process per core made for this
        run) in local processes; a Dask ``distributed.Client`` (or its ``get_executor()``, or
        ``"dask"`` for the client of this process) on a cluster (``pip install 'sgmc[dask]'``). The
        draws are the same wherever the groups run (bit for bit on NumPy). See
        ``docs/chains.md``.
    group_size : int, optional
        Chains per group (default :data:`DEFAULT_GROUP_SIZE`). Each group has its own random
        stream, so the draws depend on the group size but never on the executor.
    checkpoint : str or path-like, optional
        A file to which the complete state of the run is written (atomically) every
        ``checkpoint_every`` iterations, when Ctrl-C stops the run, and at the end;
        :func:`resume` continues from it. Checkpoints are written by runs in this process
        (``executor=None``). The file holds data, not code: arrays and JSON with checksums; the
        model's data set goes once per run to a file beside it (``PATH.HASH.data``), so each write
        costs the state and the draws. A model, sampler or estimator that is not made of sgmc's
        own classes is not stored and is passed to :func:`resume` again (checked against the
        model's fingerprint). See ``docs/files.md``.
    checkpoint_every : int, optional
        Iterations between checkpoints (default: a tenth of ``n_iter``).
    checkpoint_key : bytes or str, optional
        A secret that signs the checkpoint files (HMAC-SHA256), so that :func:`resume` with the
        same ``key`` refuses a file altered by anyone without it. Checksums alone detect damage,
        not tampering.
    backend : str or Backend, optional
        Run on this backend: the model's data (and an array ``init``) are copied there once, before
        anything else (:func:`sgmc.backends.move`); ``"cupy"`` runs everything on the current GPU,
        with the CUDA kernels of the hot loops. A missing library or GPU raises with what to
        install (``pip install "sgmc[gpu]"``). By default the model's arrays decide.
    max_time : float, optional
        A wall-clock budget in seconds for the iterations (set-up, such as the mode search of
        ``"cv"``, not included). The run stops at the end of the iteration in which the budget is
        spent and returns the trace of the iterations done (burn-in and thinning apply as usual):
        ``trace.info["stopped"]`` is ``"max_time"`` and ``trace.info["iterations_done"]`` says how
        many were done. Groups of chains that run one after another share the budget equally, and
        every group stops at the iteration count of the first one that ran out, so all chains
        have the same length. Runs in this process only: not with ``executor`` or ``checkpoint``.

    Returns
    -------
    Trace
        After Ctrl-C (in this process) the run stops at the end of the current iteration, a
        :class:`SamplingInterruptedWarning` is issued, and the trace holds the draws so far:
        ``trace.info["interrupted"]`` is True and ``trace.info["iterations_done"]`` says how far
        the chains got (with several groups of chains, those that had started, cut to the shortest).
        A second Ctrl-C interrupts at once. With an executor, Ctrl-C cancels the run as usual.

    Raises
    ------
    FloatingPointError
        When a chain's position stops being finite (the step size is too large): a
        :class:`~sgmc.chains.DivergenceError` whose ``trace`` attribute holds the draws up to the
        last check that found every position finite, and whose ``iteration`` and ``step_size``
        say where it happened.
    TypeError
        For a keyword :func:`sample` does not take, with the closest one it does.
    CheckpointWriteError
        An ``OSError`` naming the ``checkpoint`` file when a write fails (disk full, no
        permission); its ``trace`` holds the draws so far.

    Examples
    --------
    >>> import numpy as np
    >>> import sgmc
    >>> from sgmc.models import LinearRegression
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(1000, 2)); y = X @ np.array([1.0, -1.0]) + rng.normal(size=1000)
    >>> trace = sgmc.sample(LinearRegression(X, y), "sgld", step_size=1e-4, batch_size=100,
    ...                     n_iter=2000, burn_in=500, chains=4, rng=1, progress=False)
    >>> trace.draws.shape
    (4, 1500, 2)
    >>> np.round(trace.mean(), 1)
    array([ 1., -1.])
    """
    if unknown:
        _refuse_keywords(unknown)
    if step_size is _REQUIRED:
        msg = "sample() needs `step_size`: h in the review's convention, a schedule or n_iter values"
        raise TypeError(msg)
    if backend is not None:
        model = backends.move(model, backend)
    model = check_target(model)
    if backend is not None and is_array(init):
        init = backends.move(init, backend, device=model.device)
    xp = model.xp
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
        require(model, ("grad_log_posterior",), "store_grads='full'")
    if isinstance(batch_size, bool):
        msg = f"`batch_size` must be a positive int or a fraction in (0, 1); got {batch_size!r}"
        raise TypeError(msg)
    check_executor(executor)
    _check_run_size(model, n_iter, chains, len(range(burn_in, n_iter, thin)), bool(store_grads))
    kept = list(range(burn_in, n_iter, thin))
    if thin > 1 and len(kept) < 2:
        msg = (
            f"`thin`={thin} keeps {len(kept)} draw(s) of the {n_iter - burn_in} iterations after burn-in; "
            "choose a thinning interval that keeps at least two"
        )
        raise ValueError(msg)
    if max_time is not None:
        max_time = _check_max_time(max_time, executor, checkpoint)
    if checkpoint is not None:
        checkpoint = _check_checkpoint_path(checkpoint, executor)
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

    smp = make_sampler(sampler, model, **(sampler_options or {}))
    est = _estimator_for(smp, estimator, model, batch_size, dict(estimator_options or {}))

    backend = backends.get_backend(xp)
    rng = backends.default_rng(rng, backend=backend, device=model.device)
    init_rng, prep_rng, run_rng = rng.spawn(3)

    position = _initial_position(model, init, chains, init_rng)
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

    settings = {"n_iter": n_iter, "burn_in": burn_in, "thin": thin, "chains": chains}
    if auto is not None:  # the burn-in chooses the step; the run goes on from the adapted chains
        run_rng, adapt_rng = run_rng.spawn(2)
        adapted = adapt_step_size(auto, model, smp, est, adapt_rng, position, burn_in, n_iter - burn_in)
        position, settings["step_size_auto"] = adapted.state.position, adapted.info
        hs, kept = [adapted.step_size] * (n_iter - burn_in), [k - burn_in for k in kept]
    bounds = _groups(chains, group_size)
    streams = run_rng.spawn(len(bounds))
    tasks = [GroupTask(g, streams[g], position[a:b, :]) for g, (a, b) in enumerate(bounds)]
    score = model.grad_log_posterior if store_grads == "full" else None
    spec = RunSpec(smp, est, hs, kept, store_grads, score, check_every, backend)
    job = _Job(model, spec, tasks, bounds, setup_time, setup_evals, settings,
               path=checkpoint, every=checkpoint_every or 0, key=checkpoint_key)
    job.max_time = max_time
    return _execute(job, executor, progress, callback)


def resume(path: Any, *, model: Any = None, sampler: Any = None, estimator: Any = None, progress: bool = True,
           callback: Callable | None = None, key: Any = None) -> Trace:
    """Continue a run of :func:`sample` from its checkpoint file and return the whole trace.

    The draws are those of the uninterrupted run with the same arguments (bit for bit on NumPy),
    whether the run was stopped by Ctrl-C or killed. Checkpoints keep being written to the same file
    at the same interval, so a resumed run can itself be interrupted and resumed. A checkpoint of a
    finished run gives its trace at once.

    Nothing in the file is run: it holds arrays and JSON in a declared schema, every part checked
    against its SHA-256 before use, and objects are rebuilt only through the public constructors of
    sgmc's registered classes. A damaged or foreign file raises a ``ValueError`` naming it, and so
    does a model (rebuilt or passed) that does not match the run's fingerprint (class, parameter
    names, N, d, data). Checksums detect damage, not tampering; a run signed with
    ``checkpoint_key`` is read with the same ``key``.

    Parameters
    ----------
    path : str or path-like
        The ``checkpoint`` file of :func:`sample` (its data file ``PATH.HASH.data`` must be beside it).
    model, sampler, estimator : object, optional
        The run's model, sampler or estimator when it is not made of sgmc's own classes (a model
        class of your own, say): such objects are not stored, and the error says which to pass.
        The model must match the run's: the same class, ``param_names``, ``n_data``, ``dim``
        and data (compared by SHA-256).
    progress : bool
        Show a progress bar.
    callback : callable, optional
        ``callback(k, state)`` after every iteration, as in :func:`sample` (callbacks are not saved).
    key : bytes or str, optional
        The ``checkpoint_key`` the run was signed with; the files are refused when it does not
        match, when it is missing for a signed run, or when given for an unsigned one. Later
        checkpoints of the resumed run are signed with it too.

    Returns
    -------
    Trace

    Raises
    ------
    ValueError
        Naming ``path``, when the file is damaged, not an sgmc checkpoint, does not match ``key``,
        or needs an object passed again (naming the keyword), or when ``model`` does not match.

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> import sgmc
    >>> from sgmc.models import LinearRegression
    >>> r = np.random.default_rng(0)
    >>> X = r.normal(size=(500, 2)); y = X @ np.array([1.0, -1.0]) + r.normal(size=500)
    >>> path = os.path.join(tempfile.mkdtemp(), "run.ckpt")
    >>> trace = sgmc.sample(LinearRegression(X, y), step_size=1e-3, batch_size=50, n_iter=300,
    ...                     rng=1, progress=False, checkpoint=path, checkpoint_every=100)
    >>> again = sgmc.resume(path, progress=False)
    >>> bool((again.draws == trace.draws).all())
    True
    """
    job = _Job.load(path, {"model": model, "sampler": sampler, "estimator": estimator}, check_key(key))
    return _execute(job, None, progress, callback)


@dataclass
class _Job:
    """A run of :func:`sample` after set-up: what it needs to run, resume and assemble its trace."""

    model: Any
    spec: RunSpec
    tasks: list
    bounds: list
    setup_time: float
    setup_evals: float
    settings: dict
    path: Any = None
    every: int = 0
    results: list = field(default_factory=list)
    current: Any = None  # ChainsProgress of the group in progress, as last checkpointed
    max_time: float | None = None  # wall-clock budget of the iterations (seconds), shared by the groups
    budget_iters: int | None = None  # iterations done when a group ran out of the budget

    file: Any = None  # the run's data file, once written (see sgmc._checkpoint)
    key: Any = None  # the secret that signs the checkpoint files (never written to them)

    def _roles(self) -> dict:
        return {"model": self.model, "sampler": self.spec.sampler, "estimator": self.spec.estimator}

    def _shared(self) -> dict:
        return {"spec": self.spec, "bounds": self.bounds, "settings": self.settings,
                "setup_time": self.setup_time, "setup_evals": self.setup_evals}

    def prepare(self) -> None:
        """Write the run's data file (model, sampler, estimator, settings) before sampling starts."""
        if self.file is None:
            try:
                self.file = _checkpoint.prepare(self.path, self._shared(), self._roles(), self.key)
            except OSError as err:
                where = os.fspath(self.path)
                msg = f"cannot write the data file of the checkpoint {where!r}: {err.strerror or err}"
                raise CheckpointWriteError(err.errno, msg, err.filename or where) from err

    def save(self, sampled: Callable[[], list] | None = None) -> None:
        """Write the checkpoint; a failure raises :class:`CheckpointWriteError` with ``sampled()``'s trace."""
        state = {"tasks": self.tasks, "results": self.results, "current": self.current, "every": self.every,
                 "max_time": self.max_time, "budget_iters": self.budget_iters}
        where = os.fspath(self.path)
        try:
            self.file = _checkpoint.write(self.path, self._shared(), self._roles(), state, self.file, self.key)
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
    def load(cls, path: Any, supplied: dict, key: Any = None) -> "_Job":
        shared, state, run = _checkpoint.read(path, supplied, key)
        roles = shared["roles"]
        spec = shared.get("spec")
        needed = ("tasks", "results", "current", "every", "max_time", "budget_iters")
        if not (isinstance(spec, RunSpec) and isinstance(state, dict) and all(k in state for k in needed)
                and all(k in shared for k in ("bounds", "setup_time", "setup_evals", "settings"))
                and isinstance(state.get("tasks"), list)
                and all(isinstance(t, GroupTask) for t in state["tasks"])
                and all(isinstance(r, ChainsResult) for r in state.get("results", [None]))):
            msg = f"{os.fspath(path)!r} is not a checkpoint written by sgmc.sample(..., checkpoint=...)"
            raise ValueError(msg)
        job = cls(roles["model"], spec, state["tasks"], shared["bounds"], shared["setup_time"], shared["setup_evals"],
                  shared["settings"], path=path, every=state["every"], results=state["results"],
                  current=state["current"], max_time=state["max_time"], budget_iters=state["budget_iters"],
                  key=key)
        job.file = run
        return job

    @property
    def n_iter(self) -> int:
        return len(self.spec.step_sizes)

    def done(self) -> int:
        """Iterations done, summed over groups."""
        return self.n_iter * len(self.results) + (self.current.k if self.current is not None else 0)

    def trace(self, results: list, interrupted: bool = False) -> Trace:
        return _assemble(self, results, interrupted)


class _StopOnInterrupt:
    """Turns Ctrl-C into a request to stop at the end of the current iteration (main thread only).

    Installed only over Python's default SIGINT handler; the first Ctrl-C restores that handler, so
    a second one interrupts at once.
    """

    def __init__(self, active: bool):
        self.requested = False
        self._old = None
        self._active = active and threading.current_thread() is threading.main_thread()

    def __enter__(self):
        if self._active and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._old = signal.signal(signal.SIGINT, self._handler)
        return self

    def _handler(self, signum, frame):
        self.requested = True
        signal.signal(signal.SIGINT, signal.default_int_handler)

    def __exit__(self, *exc):
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
        return False

    def __call__(self) -> bool:
        return self.requested


def _execute(job: _Job, executor: Any, progress: bool, callback: Callable | None) -> Trace:
    spec, n_iter = job.spec, job.n_iter
    if job.path is not None and executor is None:
        job.prepare()  # the data file, once: before sampling, so that a model it cannot hold is told at once
    bar = _progress_bar(progress, n_iter * len(job.tasks), f"{spec.sampler.name}/{spec.estimator.name}")
    if bar is not None and job.done():
        bar.update(job.done())
    stop = _StopOnInterrupt(executor is None)
    try:
        with stop:
            if executor is None:
                complete, partial = _run_here(job, bar, callback, stop)
            else:
                try:
                    results = run_groups(spec, job.tasks, executor, bar=bar,
                                         progress_every=max(1, n_iter // 200), callback=callback)
                except DivergenceError as err:
                    finished = err.finished or {}
                    g = err.group if err.group is not None else len(job.tasks)
                    before = []
                    for i in range(g):
                        if i not in finished:
                            break
                        before.append(finished[i])
                    err.trace = job.trace(before + ([err.partial] if err.partial is not None else []))
                    raise
                except WorkerLostError as err:  # the finished groups' draws, whichever they are
                    kept = sorted(err.finished)
                    if kept:
                        err.trace = job.trace([err.finished[i] for i in kept])
                        err.trace.info["groups"] = [list(job.bounds[i]) for i in kept]
                    raise
                job.results, complete, partial = results, True, None
    finally:
        if bar is not None:
            bar.close()
    spec.backend.synchronize()
    if complete:
        if job.path is not None:
            job.current = None
            job.save()
        trace = job.trace(job.results)
        trace.info["stopped"] = "max_time" if job.budget_iters is not None else None
        if job.max_time is not None:
            trace.info["max_time"] = job.max_time
        found = warn_if_runaway(trace, spec.sampler, spec.step_sizes)
        warn_if_unmixed(trace, spec.sampler, spec.step_sizes, warn=not found)
        return trace
    trace = job.trace(job.results + ([partial] if partial is not None else []), interrupted=True)
    trace.info["stopped"] = "interrupt"
    warn_if_runaway(trace, spec.sampler, spec.step_sizes)
    warn_if_unmixed(trace, spec.sampler, spec.step_sizes, warn=False)
    where = f"; resume with sgmc.resume({os.fspath(job.path)!r})" if job.path is not None else ""
    chains = f" of {trace.n_chains} of the {job.settings['chains']} chains" if trace.n_chains < job.settings["chains"] else ""
    msg = (
        f"sampling interrupted after {trace.info['iterations_done']} of {n_iter} iterations{chains}; the "
        f"trace holds the draws so far (trace.info['interrupted'] is True){where}"
    )
    warnings.warn(msg, SamplingInterruptedWarning, stacklevel=3)
    return trace


class _Budget:
    """A stop request: Ctrl-C (``interrupt``) or ``seconds`` passed since this object was made."""

    def __init__(self, interrupt: Callable[[], bool], seconds: float):
        self.interrupt = interrupt
        self.deadline = time.perf_counter() + seconds

    def __call__(self) -> bool:
        return self.interrupt() or time.perf_counter() >= self.deadline


def _check_max_time(max_time: Any, executor: Any, checkpoint: Any) -> float:
    if isinstance(max_time, bool) or not isinstance(max_time, (int, float)) or not math.isfinite(max_time) or max_time <= 0:
        msg = f"`max_time` must be a positive number of seconds; got {max_time!r}"
        raise ValueError(msg)
    if executor is not None or checkpoint is not None:
        what = "executor" if executor is not None else "checkpoint"
        msg = f"`max_time` applies to runs in this process without checkpoints; it cannot be combined with `{what}`"
        raise ValueError(msg)
    return float(max_time)


def _warm_up(job: _Job) -> None:
    """Two throwaway iterations on a copy of the first group's start, before the ``max_time`` clock.

    Compiled paths (Numba) compile, or load their machine code, on first use; here that cost is not
    charged to the budget. The copy, a generator of its own and a dropped result leave the run as it
    would be without this.
    """
    spec, task = job.spec, job.tasks[0]
    xp = spec.backend.xp
    rng = backends.default_rng(0, backend=spec.backend, device=task.rng.device)
    run_chains(spec.sampler, spec.estimator, rng, xp.asarray(task.position, copy=True), list(spec.step_sizes)[:2],
               [], store_grads=spec.store_grads, score=spec.score, quiet_float=spec.backend.quiet_float)


def _run_here(job: _Job, bar: Any, callback: Callable | None, stop: Callable[[], bool]) -> tuple:
    """Run the remaining groups in this process; return (complete, partial result or None)."""
    spec, n_iter = job.spec, job.n_iter
    if job.max_time is not None and not job.results and job.current is None:
        _warm_up(job)
    every = max(1, n_iter // 200)
    while len(job.results) < len(job.tasks):
        g = len(job.results)
        halt, steps, kept = stop, spec.step_sizes, spec.kept
        if job.max_time is not None:
            halt = _Budget(stop, job.max_time / len(job.tasks))
            if job.budget_iters is not None:  # an earlier group ran out: run this one as far
                steps = list(steps)[:job.budget_iters]
                kept = [i for i in kept if i < job.budget_iters]
        if stop() and job.current is None:
            if job.path is not None:
                job.save()
            return False, None
        task = job.tasks[g]
        update = None
        if bar is not None:
            def update(done, offset=g * n_iter):
                bar.update(offset + done - bar.n)

        def save(progress, chains=int(task.position.shape[0])):
            job.current = progress
            job.save(lambda: job.results + [_progress_result(progress, chains)])

        try:
            res = run_chains(
                spec.sampler, spec.estimator, task.rng, task.position, steps, kept,
                store_grads=spec.store_grads, score=spec.score, check_every=spec.check_every,
                progress=update, progress_every=every, callback=callback,
                quiet_float=spec.backend.quiet_float, resume=job.current,
                checkpoint=save if job.path is not None else None, checkpoint_every=job.every, stop=halt,
            )
        except DivergenceError as err:
            if any(r is not None and int(r.draws.shape[1]) for r in job.results + [err.partial]):
                err.trace = job.trace(job.results + [err.partial])   # none before the first kept draw
            raise
        if res.n_done < len(steps):
            if stop():  # Ctrl-C
                return False, res
            done = job.budget_iters
            job.budget_iters = res.n_done if done is None else min(done, res.n_done)
        job.results.append(res)
        job.current = None
    return True, None


def _refuse_keywords(unknown: dict) -> None:
    known = [p for p in inspect.signature(sample).parameters if p != "unknown"]
    name = next(iter(unknown))
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    hint = f"; did you mean `{close[0]}=`?" if close else f"; it takes {', '.join(known)}"
    msg = f"sample() got an unexpected keyword argument `{name}`{hint}"
    raise TypeError(msg)


def _check_checkpoint_path(path: Any, executor: Any) -> Any:
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


def _progress_result(progress: Any, chains: int) -> ChainsResult:
    """The result of a group stopped at a checkpoint: its draws and statistics so far."""
    hx = backends.get_backend("numpy").xp
    stats = step_stats(progress.infos, chains)
    stats["wall_time"] = hx.broadcast_to(hx.asarray(progress.wall, dtype=hx.float64)[None, :], (chains, progress.k))
    grads = None if progress.grads is None else progress.grads[:, :progress.j, :]
    return ChainsResult(progress.draws[:, :progress.j, :], grads, stats, progress.state, progress.k)


def _truncate(res: Any, n_done: int, kept: list) -> Any:
    n_keep = sum(1 for i in kept if i < n_done)
    stats = {k: v[:, :n_done] for k, v in res.stats.items()}
    grads = None if res.grads is None else res.grads[:, :n_keep, :]
    return res._replace(draws=res.draws[:, :n_keep, :], grads=grads, stats=stats, n_done=n_done)


def _assemble(job: _Job, results: list, interrupted: bool = False) -> Trace:
    model, spec = job.model, job.spec
    smp, est = spec.sampler, spec.estimator
    xp = model.xp
    hx = backends.get_backend("numpy").xp
    n_iter = job.n_iter
    if len(results) > 1 and results[-1].n_done == 0:
        results = results[:-1]
    n_done = min([r.n_done if r.n_done >= 0 else n_iter for r in results], default=0)
    kept = list(spec.kept)
    if n_done < n_iter:
        kept = [i for i in kept if i < n_done]
        results = [_truncate(r, n_done, spec.kept) for r in results]
    bounds = job.bounds[:len(results)]
    hs = list(spec.step_sizes)[:n_done]
    one = len(results) == 1
    draws = results[0].draws if one else xp.concat([r.draws for r in results], axis=0)
    grads = None
    if spec.store_grads:
        grads = results[0].grads if one else xp.concat([r.grads for r in results], axis=0)
    stats = {"step_size": hx.asarray(hs, dtype=hx.float64)}
    for key in results[0].stats:
        stats[key] = hx.concat([hx.asarray(r.stats[key]) for r in results], axis=0)
    n_chains = int(draws.shape[0])
    for key in ("n_evals", "batch_size"):
        stats.setdefault(key, hx.zeros((n_chains, n_done), dtype=hx.float64))
    n_data = max(int(model.n_data), 1)
    stats["data_passes"] = hx.cumulative_sum(stats["n_evals"], axis=1) / n_data
    stats["data_passes"] += job.settings.get("step_size_auto", {}).get("data_passes", 0.0)
    info = {
        "sampler": smp.name,
        "estimator": est.name,
        **job.settings,
        "n_data": model.n_data,
        "dim": model.dim,
        "backend": backends.get_backend(xp).name,
        "dtype": str(model.dtype),
        "grads": (("full" if spec.store_grads == "full" else "estimate") if spec.store_grads else None),
        "groups": [list(b) for b in bounds],
        "setup_time": job.setup_time,
        "setup_data_passes": job.setup_evals / n_data,
        "sampling_time": float(hx.max(stats["wall_time"][:, -1])) if n_done else 0.0,
        "interrupted": bool(interrupted),
        "iterations_done": n_done,
    }
    if job.path is not None:
        info["checkpoint"] = os.fspath(job.path)
    compile_s = sum(float(getattr(r, "compile_time", 0.0)) for r in results)
    if compile_s:  # JAX: seconds compiling blocks of iterations (sgmc.samplers._compiled)
        info["compile_time"] = compile_s
    if "accepted" in stats:
        info["n_accepted"] = hx.astype(hx.sum(stats["accepted"], axis=1), hx.int64).tolist()
        info["acceptance_rate"] = (hx.mean(stats["accepted"], axis=1) if n_done else hx.zeros(n_chains)).tolist()
    for key in stats:
        if key not in ("step_size", "n_evals", "batch_size", "data_passes", "wall_time", "accepted", "accept_prob",
                       "abs_max", "stein", "stein_n"):
            info[key] = stats[key][:, -1].tolist() if n_done else [float("nan")] * n_chains
    return Trace(draws=draws, grads=grads, iterations=kept, stats=stats, info=info,
                 param_names=model_param_names(model))


def _progress_bar(progress, total, desc):
    return progress_bar(progress, total, desc)
