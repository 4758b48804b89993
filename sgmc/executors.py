"""Chain groups in this process or on any :class:`concurrent.futures.Executor`.

:func:`sgmc.sample` splits its chains into groups of ``group_size`` by a rule that does not look at
the executor, and gives every group its own stream spawned from the run's seed. A group's draws
therefore depend only on the seed and the group, not on where the group runs: in this process (the
default, one group after another, each group's chains one vectorised array), in the workers of a
``ProcessPoolExecutor`` (or ``"processes"``: a pool of one process per core, made for the run), or
on a Dask cluster (a ``distributed.Client`` or its ``get_executor()``, or ``"dask"``: the client of
this process).

Data go to each worker once. On Dask each group is one task, and a worker loads the run's spec (the
sampler, the estimator and the model they hold) at its first task and keeps it for the run: when
every worker sees this machine's temporary file (a ``LocalCluster``), the spec travels with each task
as a small pickle whose arrays the workers map from that file, as on a process pool below; otherwise
it is scattered once as one in-band pickle, so arrays arrive in aligned memory and round exactly as
they do here, and each worker fetches it once. (It is not broadcast: Dask's broadcast waits forever
for a worker that dies while it copies.) On a process pool the run's spec is
pickled once with its arrays out of band: the arrays are written to one temporary file (aligned,
removed at the end) that every worker maps copy-on-write, so neither the parent nor a worker holds a
second copy of the data, and each group is one task. Arrays that do not pickle out of band (torch
tensors), or a temporary file that cannot be written, fall back to one in-band pickle per bundle of
groups, one bundle per worker. Other executors (which may run their tasks on other machines, or in
threads) get the spec itself in bundles, one per worker (the executor's ``_max_workers`` when it
has one), so the model is pickled once per worker at most. The progress bar
counts the iterations of all groups: in process it moves every few iterations; with an executor it
moves as each task finishes.

A worker that dies (a ``BrokenProcessPool``, a Dask ``KilledWorker``) loses only the groups it was
running: groups that finished are kept, and the lost ones run once more, on a fresh process pool
or as new Dask tasks, from the same streams, so the draws are those of an uninterrupted run. If
they are lost again, :class:`WorkerLostError` names them and carries the finished groups.
"""

from __future__ import annotations

import concurrent.futures as cf
import mmap
import multiprocessing
import os
import pickle
import tempfile
import threading
import uuid
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, NamedTuple, Sequence

from .chains import ChainsResult, DivergenceError, run_chains

__all__ = [
    "GroupTask", "RunSpec", "WorkerLostError", "run_groups", "is_dask", "check_executor", "current_dask_client",
]


class GroupTask(NamedTuple):
    """One group of chains: its index, its generator and its starting positions."""

    index: int
    rng: Any
    position: Any


class RunSpec(NamedTuple):
    """Everything a group needs besides its own task: the same for every group of a run.

    The part of a run's plan (:class:`sgmc._plan.RunPlan`) that workers receive and checkpoints
    record; the backend pickles by name, and a group's loop takes its namespace from it.
    """

    sampler: Any
    estimator: Any
    step_sizes: Sequence[float]
    kept: Sequence[int]
    store_grads: bool | str
    score: Callable | None
    check_every: int
    backend: Any


class WorkerLostError(RuntimeError):
    """Worker processes died while running some groups of chains, twice: once and on the retry.

    Attributes
    ----------
    lost : list of int
        The groups that were lost.
    finished : dict
        ``{group: ChainsResult}`` of every group that finished.
    trace : Trace or None
        The finished groups' draws, set by :func:`sgmc.sample` (``trace.info["groups"]`` says which
        chains they are).
    """

    def __init__(self, msg: str, lost: list, finished: dict):
        super().__init__(msg)
        self.lost = sorted(lost)
        self.finished = dict(finished)
        self.group = self.lost[0] if self.lost else None
        self.partial = None
        self.trace = None


def _run_group(spec: RunSpec, task: GroupTask, progress: Callable | None = None,
               progress_every: int = 1, callback: Callable | None = None) -> ChainsResult:
    return run_chains(
        spec.sampler, spec.estimator, task.rng, task.position, spec.step_sizes, spec.kept,
        store_grads=spec.store_grads, score=spec.score, check_every=spec.check_every,
        progress=progress, progress_every=progress_every, callback=callback,
        quiet_float=spec.backend.quiet_float, backend=spec.backend,
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
# every array in fresh, aligned memory. A worker unpickles a run's spec once per run and keeps it,
# keyed by the run's token, until the run tells it to forget (two runs may share a threaded worker).
_PICKLE_PROTOCOL = 4
_WORKER_SPECS: dict = {}  # run token -> spec
_WORKER_LOCK = threading.Lock()


def _forget_spec(token: str) -> None:
    """Drop a finished run's spec (and the data it holds) from a worker."""
    with _WORKER_LOCK:
        _WORKER_SPECS.pop(token, None)


def _run_pickled(token: str, blob: bytes, tasks_blob: bytes) -> bytes:
    """Dask worker entry point: load the spec (once per run and worker) and the tasks, run them.

    ``blob`` is an in-band pickle of the spec, or a pickled :class:`SharedSpec` whose arrays the
    worker maps from the file this machine's client wrote (workers on the client's machine only).
    """
    with _WORKER_LOCK:
        spec = _WORKER_SPECS.get(token)
        if spec is None:
            loaded = pickle.loads(blob)
            spec = _WORKER_SPECS[token] = _load_shared(loaded) if isinstance(loaded, SharedSpec) else loaded
    out = _run_bundle(spec, pickle.loads(tasks_blob))
    return pickle.dumps(out, protocol=_PICKLE_PROTOCOL)


def _file_id(path: str) -> tuple | None:
    """(device, inode, size) of ``path`` as this process sees it, or None when it cannot see it."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size)


# -- a run's spec for local processes: one pickle, its arrays in a file the workers map ---------------
_ALIGN = 64
_MAX_HEAD = 1 << 22  # a pickle larger than this holds data in band: bundle the groups instead
_MAX_INLINE = 1 << 20  # a Dask payload up to this size travels with each task instead of being scattered


class SharedSpec(NamedTuple):
    """A pickled :class:`RunSpec` whose out-of-band buffers lie in ``path`` at ``layout``."""

    head: bytes
    path: str | None
    layout: tuple  # ((offset, nbytes), ...)
    ident: tuple | None = None  # the file's (device, inode, size) as its writer saw it


def _share(spec: RunSpec) -> SharedSpec:
    """Pickle ``spec`` once, its arrays' buffers written to a temporary file (none if there are none).

    Buffers that cannot be written out of band, or a file that cannot be written, give an in-band
    pickle (``path`` None).
    """
    buffers: list = []
    head = pickle.dumps(spec, protocol=5, buffer_callback=buffers.append)
    if not buffers:
        return SharedSpec(head, None, ())
    path = None
    try:
        fd, path = tempfile.mkstemp(prefix="sgmc-data-", suffix=".bin")
        layout, offset = [], 0
        with os.fdopen(fd, "wb") as fh:
            for buf in buffers:
                raw = buf.raw()  # BufferError for a non-contiguous buffer
                pad = -offset % _ALIGN
                fh.write(b"\0" * pad)
                offset += pad
                fh.write(raw)
                layout.append((offset, raw.nbytes))
                offset += raw.nbytes
    except (OSError, BufferError):
        _remove(path)
        return SharedSpec(pickle.dumps(spec, protocol=_PICKLE_PROTOCOL), None, ())
    return SharedSpec(head, path, tuple(layout), _file_id(path))


def _remove(path: str | None) -> None:
    if path is not None:
        try:
            os.unlink(path)
        except OSError:
            pass


def _load_shared(shared: SharedSpec) -> RunSpec:
    """Worker side of :func:`_share`: the spec, its arrays views of the mapped file.

    The mapping is copy-on-write: the pages are shared with every other worker until one writes to
    an array (a model's work buffer, say), which then gets a private copy of the pages it wrote.
    """
    if shared.path is None:
        return pickle.loads(shared.head)
    with open(shared.path, "rb") as fh:
        st = os.fstat(fh.fileno())
        if shared.ident is not None and (st.st_dev, st.st_ino, st.st_size) != shared.ident:
            msg = (f"the run's data file {shared.path!r} is not the one the run wrote (device, inode or "
                   "size differ): this worker does not share the writer's temporary folder")
            raise FileNotFoundError(msg)
        size = st.st_size
        view = memoryview(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)) if size else memoryview(bytearray())
    return pickle.loads(shared.head, buffers=[view[o : o + n] for o, n in shared.layout])


def _run_shared(shared: SharedSpec, tasks: list) -> list:
    """Process-pool entry point: load the run's spec and run a list of groups."""
    return _run_bundle(_load_shared(shared), tasks)


def _safe_context() -> Any:
    """The "spawn" start method: each worker starts afresh, from this process as it is now.

    Forking after a library has started threads (PyTorch's and OpenMP's pools, BLAS) can deadlock
    the child. "forkserver" avoids that, but forks every worker from one server process that the
    first pool of this process started, and that keeps the environment variables, working folder
    and import path of that moment: a later run's workers would not see what was set since (or
    would still see what was removed). "spawn" gives every worker the caller's current ones.
    """
    return multiprocessing.get_context("spawn")


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

    Raises
    ------
    DivergenceError
        When a group diverged; ``err.finished`` holds every group that finished.
    WorkerLostError
        When workers died running some groups and again on the retry (see the module docstring).
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
    if is_dask(executor):
        results = _run_on_dask(spec, tasks, _dask_client(executor), bar, n_iter)
    else:
        results = _run_on_pool(spec, tasks, executor, bar, n_iter)
    return [results[t.index] for t in tasks]


def _units(tasks: list, shared: SharedSpec | None, workers: int) -> list:
    """Lists of groups, one per task: one group each, or one bundle per worker for in-band data."""
    if shared is not None and (shared.path is not None or len(shared.head) <= _MAX_HEAD):
        return [[t] for t in tasks]
    n_bundles = max(1, min(len(tasks), int(workers)))
    return [tasks[i::n_bundles] for i in range(n_bundles)]


def _collect(futures: dict, results: dict, bar: Any, n_iter: int, lost_errors: tuple) -> tuple:
    """Wait for ``futures`` (future -> its groups); return (first divergence, groups lost to dead workers)."""
    diverged, lost = None, []
    for fut in cf.as_completed(futures):
        try:
            out = fut.result()
        except DivergenceError as err:
            diverged = diverged if diverged is not None and diverged.group < err.group else err
            continue
        except lost_errors:
            lost.extend(t.index for t in futures[fut])
            continue
        for index, res in out:
            results[index] = res
        if bar is not None:
            bar.update(len(futures[fut]) * n_iter)
    return diverged, lost


def _run_on_pool(spec: RunSpec, tasks: list, executor: Any, bar: Any, n_iter: int) -> dict:
    """Groups on a concurrent.futures executor; on a process pool, lost groups run once more on a fresh one.

    A ``ProcessPoolExecutor`` runs on this machine, so its workers map the spec's arrays from a file
    (:func:`_share`); any other executor gets the spec object itself, in bundles, as it may pickle it
    for other machines (or not at all, as threads do).
    """
    workers = getattr(executor, "_max_workers", None) or len(tasks)
    local = isinstance(executor, cf.ProcessPoolExecutor)
    shared = _share(spec) if local else None
    results: dict = {}

    def submit(pool: Any, units: list) -> dict:
        if shared is None:
            return {pool.submit(_run_bundle, spec, u): u for u in units}
        return {pool.submit(_run_shared, shared, u): u for u in units}

    try:
        futures = submit(executor, _units(tasks, shared, workers))
        diverged, lost = _collect(futures, results, bar, n_iter, (BrokenProcessPool,))
        if lost and diverged is None:
            again = [t for t in tasks if t.index in set(lost)]
            n = min(len(again), int(workers), os.cpu_count() or 1)
            with cf.ProcessPoolExecutor(n, mp_context=_safe_context()) as pool:
                diverged, lost = _collect(submit(pool, _units(again, shared, n)), results, bar, n_iter,
                                          (BrokenProcessPool,))
    finally:
        if shared is not None:
            _remove(shared.path)
    _raise_diverged(diverged, results)
    _raise_lost(lost, results, "a worker process died (BrokenProcessPool)")
    return results


def _dask_lost_errors() -> tuple:
    import distributed

    killed = getattr(distributed, "KilledWorker", None)
    if killed is None:  # pragma: no cover - older releases keep it in the scheduler module
        from distributed.scheduler import KilledWorker as killed
    # a task whose input (the scattered spec) died with its workers is cancelled
    return (killed, cf.CancelledError)


def _run_on_dask(spec: RunSpec, tasks: list, client: Any, bar: Any, n_iter: int) -> dict:
    """One Dask task per group; groups whose workers were killed are submitted once more."""
    # a fresh key per run: a content-hashed key could collide with a previous run's data that
    # the scheduler is still releasing
    token = uuid.uuid4().hex
    lost_errors = _dask_lost_errors()
    results: dict = {}
    local = _share_with_local_workers(spec, client)
    submitted: list = []

    def submit(group: list) -> dict:
        blob = pickle.dumps(local if local is not None else spec, protocol=_PICKLE_PROTOCOL)
        # A small payload (the mapped file's pickle) goes with every task, so tasks depend on no other
        # key and a dead worker takes only its own tasks with it. A large one is scattered for each
        # try (what the first one scattered may have died with its worker), to one worker, from which
        # the others fetch it once; never broadcast, as Dask's broadcast copies to a fixed set of
        # workers and waits forever for one that dies meanwhile.
        payload = blob if len(blob) <= _MAX_INLINE else client.scatter(blob, hash=False)
        # in submission order (a list, not as_completed, which would need this client to be the default)
        futs = [(client.submit(_run_pickled, token, payload, pickle.dumps([t], protocol=_PICKLE_PROTOCOL),
                               pure=False), [t]) for t in group]
        submitted.extend(f for f, _ in futs)
        return dict(futs)

    try:
        diverged, lost = _collect_dask(submit(tasks), results, bar, n_iter, lost_errors)
        if lost and diverged is None:
            again = [t for t in tasks if t.index in set(lost)]
            diverged, lost = _collect_dask(submit(again), results, bar, n_iter, lost_errors)
    finally:
        # Nothing of this run stays on the cluster: Dask would otherwise run again, after this call, a
        # finished task whose result died with its worker while an error's traceback still refers to
        # its future (and a group that kills its worker would kill another one).
        client.cancel(submitted)
        # every worker forgets the spec; one that is dying or restarting has nothing to forget
        client.run(_forget_spec, token, on_error="ignore")
        if local is not None:
            _remove(local.path)
    _raise_diverged(diverged, results)
    _raise_lost(lost, results, "a Dask worker died (KilledWorker)")
    return results


def _share_with_local_workers(spec: RunSpec, client: Any) -> SharedSpec | None:
    """The spec with its arrays in a file every worker maps, when every worker sees that very file.

    Workers of a ``LocalCluster`` (or any on this machine) then hold no copy of the data beyond the
    shared pages, and this process none beyond its own arrays. Workers elsewhere (another machine,
    another file system, a container that does not see the temporary folder) cannot see the file
    (its device, inode and size differ or it is missing), and get the in-band pickle instead: None.
    """
    shared = _share(spec)
    if shared.path is None:
        return None
    try:
        seen = client.run(_file_id, shared.path, on_error="return")
    except Exception:  # noqa: BLE001 - any failure to ask the workers means: do not rely on the file
        seen = {}
    if not seen or any(v != shared.ident for v in seen.values()):
        _remove(shared.path)
        return None
    return shared


def _collect_dask(futures: dict, results: dict, bar: Any, n_iter: int, lost_errors: tuple) -> tuple:
    diverged, lost = None, []
    for fut, group in futures.items():
        try:
            out = pickle.loads(fut.result())
        except DivergenceError as err:
            diverged = diverged if diverged is not None and diverged.group < err.group else err
            continue
        except lost_errors:
            lost.extend(t.index for t in group)
            continue
        for index, res in out:
            results[index] = res
        if bar is not None:
            bar.update(n_iter)
    return diverged, lost


def _raise_lost(lost: list, results: dict, why: str) -> None:
    if not lost:
        return
    lost = sorted(set(lost))
    msg = (
        f"{why} while running the group(s) of chains {lost}, and again when they were retried on fresh "
        f"workers; {len(results)} group(s) finished: err.finished holds them and err.trace their draws "
        "(a worker dies when it runs out of memory or is killed: try fewer workers or smaller groups)"
    )
    raise WorkerLostError(msg, lost, results)


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
