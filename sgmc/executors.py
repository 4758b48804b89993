"""Chain groups in this process or on any :class:`concurrent.futures.Executor`.

:func:`sgmc.sample` splits its chains into groups of ``group_size`` by a rule that does not look at
the executor, and gives every group its own stream spawned from the run's seed. A group's draws
therefore depend only on the seed and the group, not on where the group runs: in this process (the
default, one group after another, each group's chains one vectorised array), in the workers of a
``ProcessPoolExecutor`` (or ``"processes"``: a pool of one process per core, made for the run), or
on a Dask cluster (a ``distributed.Client`` or its ``get_executor()``, or ``"dask"``: the client of
this process).

Data go to each worker once. On Dask the sampler, the estimator and the model they hold are
scattered to every worker once (as one in-band pickle, so arrays arrive in aligned memory and
round exactly as they do here) and each group is one task. On other executors the groups are
bundled into one task per worker (the executor's ``_max_workers`` when it has one), so the model is
pickled once per worker rather than once per group. The progress bar counts the iterations of all
groups: in process it moves every few iterations; with an executor it moves as each task finishes.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import pickle
import uuid
from typing import Any, Callable, NamedTuple, Sequence

from .chains import ChainsResult, DivergenceError, run_chains

__all__ = ["GroupTask", "RunSpec", "run_groups", "is_dask", "check_executor", "current_dask_client"]


class GroupTask(NamedTuple):
    """One group of chains: its index, its generator and its starting positions."""

    index: int
    rng: Any
    position: Any


class RunSpec(NamedTuple):
    """Everything a group needs besides its own task: the same for every group of a run."""

    sampler: Any
    estimator: Any
    step_sizes: Sequence[float]
    kept: Sequence[int]
    store_grads: bool | str
    score: Callable | None
    check_every: int
    backend: Any


def _run_group(spec: RunSpec, task: GroupTask, progress: Callable | None = None,
               progress_every: int = 1, callback: Callable | None = None) -> ChainsResult:
    return run_chains(
        spec.sampler, spec.estimator, task.rng, task.position, spec.step_sizes, spec.kept,
        store_grads=spec.store_grads, score=spec.score, check_every=spec.check_every,
        progress=progress, progress_every=progress_every, callback=callback,
        quiet_float=spec.backend.quiet_float,
    )


def _run_bundle(spec: RunSpec, tasks: list) -> list:
    """Worker entry point: run a bundle of groups one after another.

    A divergence stops the bundle; the error says which group diverged (``err.group``) and carries
    the groups the bundle finished before it (``err.finished``).
    """
    out = []
    for t in tasks:
        try:
            out.append((t.index, _run_group(spec, t)))
        except DivergenceError as err:
            err.group = t.index
            err.finished = dict(out)
            raise
    return out


# Dask moves its payloads as pickle-5 frames placed at arbitrary byte offsets, so NumPy arrays can
# arrive misaligned, and NumPy's fallbacks for misaligned operands round differently from BLAS: the
# draws would change in the last bit. Payloads therefore travel as in-band pickles, which rebuild
# every array in fresh, aligned memory. A worker unpickles a run's spec once and keeps the latest.
_PICKLE_PROTOCOL = 4
_WORKER_SPEC: list = [None, None]  # [token, spec]


def _forget_spec(token: str) -> None:
    """Drop a finished run's spec (and the data it holds) from a worker."""
    if _WORKER_SPEC[0] == token:
        _WORKER_SPEC[:] = [None, None]


def _run_pickled(token: str, blob: bytes, tasks_blob: bytes) -> bytes:
    """Dask worker entry point: unpickle the spec (once per run and worker) and the tasks, run them."""
    if _WORKER_SPEC[0] != token:
        _WORKER_SPEC[:] = [token, pickle.loads(blob)]
    out = _run_bundle(_WORKER_SPEC[1], pickle.loads(tasks_blob))
    return pickle.dumps(out, protocol=_PICKLE_PROTOCOL)


def _safe_context() -> Any:
    """A start method that does not fork a process whose libraries may hold threads.

    Forking after a library has started threads (PyTorch's and OpenMP's pools, BLAS) can deadlock
    the child; "forkserver" forks from a clean server process, "spawn" starts afresh.
    """
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


def is_dask(executor: Any) -> bool:
    """True for a ``distributed.Client`` or the executor from its ``get_executor()``."""
    return type(executor).__module__.split(".")[0] == "distributed"


def _dask_client(executor: Any) -> Any:
    try:
        import distributed
    except ImportError as exc:  # pragma: no cover - is_dask implies it imports
        msg = "running chains on Dask needs the optional extra: pip install 'sgmc[dask]'"
        raise ImportError(msg) from exc
    if isinstance(executor, distributed.Client):
        return executor
    return executor._client  # a distributed.client.ClientExecutor


def check_executor(executor: Any) -> None:
    """Raise unless ``executor`` is None, ``"processes"``, ``"dask"``, an Executor or a Dask client."""
    if executor is None or executor in ("processes", "dask") or isinstance(executor, cf.Executor) or is_dask(executor):
        return
    msg = (
        "`executor` must be None (run in this process), 'processes' (a local process pool), 'dask' "
        "(the current Dask client), a concurrent.futures.Executor such as ProcessPoolExecutor, or a "
        f"Dask distributed.Client (pip install 'sgmc[dask]'); got {executor!r}"
    )
    raise TypeError(msg)


def current_dask_client() -> Any:
    """The Dask client of this process (``executor="dask"``), with errors that say what to do."""
    try:
        import distributed
    except ImportError as exc:
        msg = "executor='dask' needs Dask's distributed scheduler: pip install 'sgmc[dask]'"
        raise ImportError(msg) from exc
    try:
        return distributed.get_client()
    except ValueError as exc:
        msg = (
            "executor='dask' found no Dask client in this process; start one first, e.g. "
            "distributed.Client(distributed.LocalCluster()) or distributed.Client('scheduler-address')"
        )
        raise ValueError(msg) from exc


def run_groups(
    spec: RunSpec,
    tasks: list,
    executor: Any = None,
    *,
    bar: Any = None,
    progress_every: int = 1,
    callback: Callable | None = None,
) -> list:
    """Run every group; return their :class:`~sgmc.chains.ChainsResult` in group order.

    Parameters
    ----------
    spec : RunSpec
    tasks : list of GroupTask
    executor : None, concurrent.futures.Executor or distributed.Client
    bar : tqdm-like, optional
        Progress bar over ``len(tasks) * n_iter`` iterations.
    progress_every : int
        In process, the number of iterations between updates of the bar.
    callback : callable, optional
        ``callback(k, state)`` after every iteration of every group (in process only).
    """
    n_iter = len(spec.step_sizes)
    if executor is None:
        out = []
        for g, task in enumerate(tasks):
            update = None
            if bar is not None:
                offset = g * n_iter

                def update(done, offset=offset):
                    bar.update(offset + done - bar.n)

            out.append(_run_group(spec, task, update, progress_every, callback))
        return out
    if callback is not None:
        msg = "`callback` runs in this process only; leave `executor=None` to use it"
        raise ValueError(msg)
    if executor == "processes":
        workers = min(len(tasks), os.cpu_count() or 1)
        with cf.ProcessPoolExecutor(workers, mp_context=_safe_context()) as pool:
            return run_groups(spec, tasks, pool, bar=bar)
    if executor == "dask":
        executor = current_dask_client()
    results: dict = {}
    if is_dask(executor):
        client = _dask_client(executor)
        # a fresh key per run: a content-hashed key could collide with a previous run's data that
        # the scheduler is still releasing
        token = uuid.uuid4().hex
        shared = client.scatter(pickle.dumps(spec, protocol=_PICKLE_PROTOCOL), broadcast=True, hash=False)
        futures = [
            client.submit(_run_pickled, token, shared, pickle.dumps([t], protocol=_PICKLE_PROTOCOL), pure=False)
            for t in tasks
        ]
        diverged = None
        try:
            # in submission order: as_completed would need this client to be the default one
            for fut in futures:
                try:
                    out = pickle.loads(fut.result())
                except DivergenceError as err:
                    diverged = diverged or err
                    continue
                for index, res in out:
                    results[index] = res
                if bar is not None:
                    bar.update(n_iter)
        finally:
            client.run(_forget_spec, token)
        _raise_diverged(diverged, results)
    else:
        workers = getattr(executor, "_max_workers", None) or len(tasks)
        n_bundles = max(1, min(len(tasks), int(workers)))
        bundles = [tasks[i::n_bundles] for i in range(n_bundles)]
        futures = {executor.submit(_run_bundle, spec, b): len(b) for b in bundles}
        diverged = None
        for fut in cf.as_completed(futures):
            try:
                out = fut.result()
            except DivergenceError as err:
                diverged = diverged if diverged is not None and diverged.group < err.group else err
                continue
            for index, res in out:
                results[index] = res
            if bar is not None:
                bar.update(futures[fut] * n_iter)
        _raise_diverged(diverged, results)
    return [results[t.index] for t in tasks]


def _raise_diverged(err: DivergenceError | None, results: dict) -> None:
    """Re-raise a group's divergence with every group that finished (``err.finished``)."""
    if err is None:
        return
    finished = dict(results)
    finished.update(getattr(err, "finished", None) or {})
    err.finished = finished
    if getattr(err, "group", None) is None:
        err.group = min(set(range(len(finished) + 1)) - set(finished))
    raise err
