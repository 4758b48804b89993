"""``sgmc.sample``: run stochastic gradient MCMC chains in one call.

:func:`sample` is a short pipeline of named steps: check the inputs (:mod:`sgmc._inputs`), resolve
the run once into an immutable :class:`~sgmc._plan.RunPlan` (backend, namespaces, device, dtype,
sampler, estimator, step sizes, kept iterations, groups of chains and their streams, checkpoint
settings), prepare it (starting points; the estimator's set-up, where control variates find their
centre and the chains start there; ``step_size="auto"``), execute the groups in this process or on an
executor (:mod:`sgmc.executors`, each group through the loop of :mod:`sgmc.chains`, all of them
reading the plan's backend rather than asking for it again), and assemble a :class:`~sgmc.Trace`
(:mod:`sgmc._assemble`). :func:`resume` rebuilds the plan from a checkpoint and goes through the
same execute and assemble steps.

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
import os
import warnings
from typing import Any, Callable

from . import backends
from ._assemble import progress_result
from ._budget import Budget, StopOnInterrupt
from ._checkpoint_job import CheckpointWriteError, Job
from ._inputs import DEFAULT_GROUP_SIZE, check_inputs
from ._plan import prepare, resolve
from ._progress import progress_bar
from ._safefile import check_key
from .chains import DivergenceError, run_chains
from .diagnostics.mixing import MixingWarning, warn_if_unmixed
from .diagnostics.runaway import RunawayChainWarning, warn_if_runaway
from .executors import WorkerLostError, run_groups
from .trace import Trace

__all__ = ["sample", "resume", "DEFAULT_GROUP_SIZE", "SamplingInterruptedWarning", "CheckpointWriteError",
           "RunawayChainWarning", "MixingWarning"]


class SamplingInterruptedWarning(UserWarning):
    """Ctrl-C ended :func:`sample` early; the returned trace holds the draws made until then."""


_REQUIRED: Any = type("_Required", (), {"__repr__": lambda self: "<required>"})()


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
    inputs = check_inputs(
        model, step_size=step_size, batch_size=batch_size, n_iter=n_iter, chains=chains, burn_in=burn_in, thin=thin,
        init=init, store_grads=store_grads, progress=progress, check_every=check_every, executor=executor,
        group_size=group_size, checkpoint=checkpoint, checkpoint_every=checkpoint_every,
        checkpoint_key=checkpoint_key, backend=backend, max_time=max_time,
    )
    plan = resolve(inputs, sampler, estimator, rng, sampler_options, estimator_options)
    plan = prepare(plan, inputs.init, progress)
    return _execute(Job(plan), executor, progress, callback)


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
    job = Job.load(path, {"model": model, "sampler": sampler, "estimator": estimator}, check_key(key))
    return _execute(job, None, progress, callback)


def _execute(job: Job, executor: Any, progress: bool, callback: Callable | None) -> Trace:
    plan = job.plan
    spec, n_iter = plan.spec, plan.n_iter
    bar = _progress_bar(progress, n_iter * len(plan.tasks), f"{spec.sampler.name}/{spec.estimator.name}")
    if bar is not None and job.done():
        bar.update(job.done())
    stop = StopOnInterrupt(executor is None)
    try:
        with stop:
            if executor is None:
                complete, partial = _run_here(job, bar, callback, stop)
            else:
                try:
                    results = run_groups(spec, plan.tasks, executor, bar=bar,
                                         progress_every=max(1, n_iter // 200), callback=callback)
                except DivergenceError as err:
                    finished = err.finished or {}
                    g = err.group if err.group is not None else len(plan.tasks)
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
                        err.trace.info["groups"] = [list(plan.bounds[i]) for i in kept]
                    raise
                job.results, complete, partial = results, True, None
    finally:
        if bar is not None:
            bar.close()
    spec.backend.synchronize()
    if complete:
        if plan.path is not None:
            job.current = None
            job.save()
        trace = job.trace(job.results)
        trace.info["stopped"] = "max_time" if job.budget_iters is not None else None
        if plan.max_time is not None:
            trace.info["max_time"] = plan.max_time
        found = warn_if_runaway(trace, spec.sampler, spec.step_sizes, backend=plan.backend)
        warn_if_unmixed(trace, spec.sampler, spec.step_sizes, warn=not found, backend=plan.backend)
        return trace
    trace = job.trace(job.results + ([partial] if partial is not None else []), interrupted=True)
    trace.info["stopped"] = "interrupt"
    warn_if_runaway(trace, spec.sampler, spec.step_sizes, backend=plan.backend)
    warn_if_unmixed(trace, spec.sampler, spec.step_sizes, warn=False, backend=plan.backend)
    where = f"; resume with sgmc.resume({os.fspath(plan.path)!r})" if plan.path is not None else ""
    wanted = plan.settings["chains"]
    chains = f" of {trace.n_chains} of the {wanted} chains" if trace.n_chains < wanted else ""
    msg = (
        f"sampling interrupted after {trace.info['iterations_done']} of {n_iter} iterations{chains}; the "
        f"trace holds the draws so far (trace.info['interrupted'] is True){where}"
    )
    warnings.warn(msg, SamplingInterruptedWarning, stacklevel=3)
    return trace


def _warm_up(job: Job) -> None:
    """Two throwaway iterations on a copy of the first group's start, before the ``max_time`` clock.

    Compiled paths (Numba) compile, or load their machine code, on first use; here that cost is not
    charged to the budget. The copy, a generator of its own and a dropped result leave the run as it
    would be without this.
    """
    plan = job.plan
    spec, task, xp = plan.spec, plan.tasks[0], plan.xp
    rng = backends.default_rng(0, backend=plan.backend, device=task.rng.device)
    run_chains(spec.sampler, spec.estimator, rng, xp.asarray(task.position, copy=True), list(spec.step_sizes)[:2],
               [], store_grads=spec.store_grads, score=spec.score, quiet_float=plan.backend.quiet_float, backend=plan.backend)


def _run_here(job: Job, bar: Any, callback: Callable | None, stop: Callable[[], bool]) -> tuple:
    """Run the remaining groups in this process; return (complete, partial result or None)."""
    plan = job.plan
    spec, n_iter, tasks = plan.spec, plan.n_iter, plan.tasks
    if plan.max_time is not None and not job.results and job.current is None:
        _warm_up(job)
    every = max(1, n_iter // 200)
    while len(job.results) < len(tasks):
        g = len(job.results)
        halt, steps, kept = stop, spec.step_sizes, spec.kept
        if plan.max_time is not None:
            halt = Budget(stop, plan.max_time / len(tasks))
            if job.budget_iters is not None:  # an earlier group ran out: run this one as far
                steps = list(steps)[:job.budget_iters]
                kept = [i for i in kept if i < job.budget_iters]
        if stop() and job.current is None:
            if plan.path is not None:
                job.save()
            return False, None
        task = tasks[g]
        update = None
        if bar is not None:
            def update(done, offset=g * n_iter):
                bar.update(offset + done - bar.n)

        def save(progress, chains=int(task.position.shape[0])):
            job.current = progress
            job.save(lambda: job.results + [progress_result(progress, chains, plan.backend)])

        try:
            res = run_chains(
                spec.sampler, spec.estimator, task.rng, task.position, steps, kept,
                store_grads=spec.store_grads, score=spec.score, check_every=spec.check_every,
                progress=update, progress_every=every, callback=callback,
                quiet_float=plan.backend.quiet_float, resume=job.current,
                checkpoint=save if plan.path is not None else None, checkpoint_every=plan.every, stop=halt, backend=plan.backend,
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


def _progress_bar(progress, total, desc):
    return progress_bar(progress, total, desc)
