"""Workers that die mid-run: finished groups are kept, lost groups run again from the same streams.

A model that kills the process it runs in (SIGKILL, at a chosen gradient call, never in the test's
own process) stands in for a worker that runs out of memory or is killed. Killed once, the run must
give the draws of an uninterrupted run, on ``executor="processes"``, on a ``ProcessPoolExecutor``
and on a Dask ``LocalCluster`` of processes; killed every time it runs a given group, the run must
raise :class:`sgmc.executors.WorkerLostError` naming that group and carrying the others' draws.
The module also checks that a process pool maps the run's arrays from one file instead of copying
them, and that the Dask workers keep one spec per run.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import signal
import time

import numpy as np
import pytest

import sgmc
from sgmc import executors
from sgmc.executors import WorkerLostError
from sgmc.models import LogisticRegression

from _deadline import deadline

N_DATA, DIM, SEED = 3000, 3, 11
HANG_S = 240  # every test here waits on worker processes; one that takes longer than this hangs


@pytest.fixture(autouse=True)
def _bounded(request):
    """A test that hangs fails after HANG_S seconds with a message that says so and where it stood."""
    with deadline(HANG_S, request.node.nodeid):
        yield


class DyingRegression(LogisticRegression):
    """A logistic regression whose minibatch gradient kills the worker process it runs in.

    At its ``at``-th gradient call in a task, in any process but the one that built it, and only for
    a group of ``chains`` chains (any group when None), it kills its own process. With ``once`` the
    first such process creates ``marker`` and dies; every later one finds the marker and lives.
    """

    def __init__(self, X, y, marker, at=5, chains=None, once=True):
        super().__init__(X, y)
        self.home = os.getpid()
        self.marker = str(marker)
        self.at = at
        self.kill_chains = chains
        self.once = once
        self.calls = 0

    def __setstate__(self, state):
        super().__setstate__(state)
        self.calls = 0

    def grad_log_lik_sum(self, theta, idx=None, weights=None):
        if self._chosen(theta):  # counted per chosen group (a Dask worker keeps the model between tasks)
            self.calls += 1
            if self.calls == self.at and os.getpid() != self.home:
                self._die()
        return super().grad_log_lik_sum(theta, idx, weights)

    def _chosen(self, theta) -> bool:
        return self.kill_chains is None or int(theta.shape[0]) == self.kill_chains

    def _die(self) -> None:
        if self.once:
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return
        else:
            with open(self.marker, "a") as fh:
                fh.write(f"{os.getpid()}\n")
        os.kill(os.getpid(), signal.SIGKILL)


def _data():
    r = np.random.default_rng(0)
    X = np.concatenate([np.ones((N_DATA, 1)), r.normal(size=(N_DATA, DIM - 1))], axis=1)
    y = (r.random(N_DATA) < 1.0 / (1.0 + np.exp(-X @ np.array([0.3, -1.0, 0.5])))).astype(float)
    return X, y


def _run(model, **kw):
    options = dict(step_size=1e-4, batch_size=30, n_iter=40, chains=5, group_size=2, rng=SEED,
                   progress=False, store_grads=True)
    options.update(kw)
    return sgmc.sample(model, "sgld", "minibatch", **options)


def _steady(X, y):
    """The dying model's class, never dying (its call count never equals ``at=0``).

    Runs compare with the reference bit for bit, so they use one class: a plain
    ``LogisticRegression`` may step in fused blocks, whose last bits differ from a subclass's steps.
    """
    return DyingRegression(X, y, os.devnull, at=0)


@pytest.fixture(scope="module")
def reference():
    """The uninterrupted in-process run (a model that never dies in this process)."""
    X, y = _data()
    return _run(_steady(X, y))


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_dying_model_lives_in_this_process(tmp_path, reference):
    X, y = _data()
    trace = _run(DyingRegression(X, y, tmp_path / "m", at=2, once=False))
    assert not (tmp_path / "m").exists()
    assert _same(trace.draws, reference.draws)


def test_processes_survive_a_killed_worker(tmp_path, reference):
    X, y = _data()
    marker = tmp_path / "killed"
    trace = _run(DyingRegression(X, y, marker, at=10), executor="processes")
    assert marker.exists(), "no worker was killed: the test tested nothing"
    assert _same(trace.draws, reference.draws)
    assert _same(trace.grads, reference.grads)
    assert trace.info["groups"] == reference.info["groups"]


def test_user_pool_survives_a_killed_worker(tmp_path, reference):
    X, y = _data()
    marker = tmp_path / "killed"
    with cf.ProcessPoolExecutor(2, mp_context=executors._safe_context()) as pool:
        trace = _run(DyingRegression(X, y, marker, at=25, chains=1), executor=pool)
    assert marker.exists()
    assert _same(trace.draws, reference.draws)


def test_a_group_lost_twice_names_it_and_keeps_the_others(tmp_path, reference):
    X, y = _data()
    marker = tmp_path / "deaths"
    # groups [0, 2], [2, 4], [4, 5]: the last one (one chain) kills every worker that runs it; one
    # worker runs the groups in order, so groups 0 and 1 finish first
    with cf.ProcessPoolExecutor(1, mp_context=executors._safe_context()) as pool:
        with pytest.raises(WorkerLostError, match=r"group\(s\) of chains \[2\]") as info:
            _run(DyingRegression(X, y, marker, at=3, chains=1, once=False), executor=pool)
    err = info.value
    assert len(marker.read_text().split()) == 2  # the first try and the retry
    assert err.lost == [2]
    assert sorted(err.finished) == [0, 1]
    assert err.trace is not None
    assert err.trace.info["groups"] == [[0, 2], [2, 4]]
    assert _same(err.trace.draws, np.asarray(reference.draws)[:4])


def test_the_data_file_is_mapped_and_removed(tmp_path, monkeypatch):
    X, y = _data()
    spec = executors.RunSpec(None, LogisticRegression(X, y), [1e-4], [0], False, None, 1, None)
    shared = executors._share(spec)
    try:
        assert shared.path is not None and os.path.getsize(shared.path) >= X.nbytes
        assert len(shared.head) < 10_000  # the arrays are out of band, not in the pickle
        assert all(off % 64 == 0 for off, _ in shared.layout)
        model = executors._load_shared(shared).estimator
        assert model.X.base is not None  # a view of the mapping, not a copy
        assert _same(model.X, X) and _same(model.y, y)
        # copy-on-write: a worker may write to its arrays without changing the file or other workers'
        assert model.X.flags.writeable
        model.X[0, 0] = 1e300
        again = executors._load_shared(shared).estimator
        assert _same(again.X, X)
    finally:
        executors._remove(shared.path)
    # a run leaves no file behind
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    _run(LogisticRegression(X, y), executor="processes", chains=2, n_iter=5)
    assert list(tmp_path.iterdir()) == []


def test_other_executors_get_the_spec_in_bundles(reference):
    # a ThreadPoolExecutor is no process pool: no data file, the spec object itself, in bundles
    X, y = _data()
    with cf.ThreadPoolExecutor(2) as ex:
        trace = _run(_steady(X, y), executor=ex)
    assert _same(trace.draws, reference.draws)
    assert executors._units(list(range(5)), None, 2) == [[0, 2, 4], [1, 3]]


def test_unwritable_temporary_folder_falls_back_to_in_band(monkeypatch, reference):
    X, y = _data()

    def refuse(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(executors.tempfile, "mkstemp", refuse)
    spec = executors.RunSpec(None, LogisticRegression(X, y), [1e-4], [0], False, None, 1, None)
    shared = executors._share(spec)
    assert shared.path is None and len(shared.head) > X.nbytes
    assert _same(executors._load_shared(shared).estimator.X, X)
    trace = _run(_steady(X, y), executor="processes")
    assert _same(trace.draws, reference.draws)


# -- Dask (last: the cluster's threads start here) -------------------------------------------------


@pytest.fixture(scope="module")
def dask_client():
    distributed = pytest.importorskip("distributed")
    import dask

    # a task whose worker died is lost at once (no rescheduling by Dask), so sgmc's own retry is tested
    saved = dict(os.environ)  # the nannies copy their pre-spawn variables into it (restored below)
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                           dashboard_address=":0")
    client = distributed.Client(cluster)
    # The cluster drops for good a worker whose name has been gone from the scheduler for
    # lost-worker-timeout (15 s by default; read when a worker leaves): a worker killed twice in a row
    # on a loaded machine can be, while its nanny restarts it. Here workers are killed on purpose.
    patience = dask.config.set({"distributed.deploy.lost-worker-timeout": "10 minutes"})
    try:
        yield client
    finally:
        patience.__exit__(None, None, None)
        client.close()
        cluster.close()
        for key in set(os.environ) - set(saved):
            del os.environ[key]
        os.environ.update(saved)


def _run_keys(client) -> list:
    """The keys of sgmc's group tasks that the scheduler still holds."""
    return client.run_on_scheduler(
        lambda dask_scheduler: sorted(str(k) for k in dask_scheduler.tasks if str(k).startswith("_run_pickled")))


def _both_workers(client) -> None:
    """Wait until the cluster has both its workers again (the nannies restart killed ones)."""
    client.wait_for_workers(2, timeout=120)


def test_dask_survives_a_killed_worker(tmp_path, reference, dask_client):
    X, y = _data()
    marker = tmp_path / "killed"
    _both_workers(dask_client)
    trace = _run(DyingRegression(X, y, marker, at=10), executor=dask_client)
    assert marker.exists()
    assert _same(trace.draws, reference.draws)
    assert _same(trace.grads, reference.grads)


def test_dask_group_lost_twice(tmp_path, reference, dask_client):
    X, y = _data()
    marker = tmp_path / "deaths"
    _both_workers(dask_client)
    with pytest.raises(WorkerLostError, match=r"group\(s\) of chains \[(\d, )*2\]") as info:
        _run(DyingRegression(X, y, marker, at=3, chains=1, once=False), executor=dask_client)
    err = info.value
    # the group that kills its worker is lost; so may be a group Dask had queued on that worker, or
    # one that finished there before this process fetched its result (Dask keeps results on the
    # workers): every group is either finished or named as lost
    assert 2 in err.lost and not set(err.lost) & set(err.finished)
    assert set(err.lost) | set(err.finished) == {0, 1, 2}
    if not err.finished:  # possible when both tries lost everything: nothing to carry
        assert err.trace is None
    else:
        bounds = {0: [0, 2], 1: [2, 4], 2: [4, 5]}
        assert err.trace.info["groups"] == [bounds[g] for g in sorted(err.finished)]
        want = np.concatenate([np.asarray(reference.draws)[a:b] for a, b in err.trace.info["groups"]])
        assert _same(err.trace.draws, want)
    # nothing of the run stays on the cluster, though the error's traceback still refers to its futures:
    # Dask would otherwise run a lost result's task again after the run (here: kill another worker)
    assert info.tb is not None
    deadline_s = time.monotonic() + 30
    while _run_keys(dask_client) and time.monotonic() < deadline_s:
        time.sleep(0.2)
    assert _run_keys(dask_client) == []
    # the workers forget the run's spec, whatever happened (the nannies restart the killed ones)
    _both_workers(dask_client)
    held = dask_client.run(lambda: len(__import__("sgmc.executors").executors._WORKER_SPECS))
    assert set(held.values()) == {0}


def test_dask_specs_are_kept_per_run(reference):
    # two runs on one (threaded) worker: each keeps its own spec until it is forgotten
    import pickle

    X, y = _data()
    r = np.random.default_rng(5)
    X2 = r.normal(size=X.shape)
    y2 = (r.random(N_DATA) < 0.5).astype(float)
    specs = {}
    for token, (Xi, yi) in (("run-a", (X, y)), ("run-b", (X2, y2))):
        model = LogisticRegression(Xi, yi)
        smp = sgmc.samplers.make_sampler("sgld", model)
        est = sgmc.estimators.make_estimator("minibatch", model, 30)
        specs[token] = pickle.dumps(executors.RunSpec(
            smp, est, [1e-4] * 40, list(range(40)), True, None, 100, sgmc.backends.get_backend("numpy")))
    rng = sgmc.backends.default_rng(SEED).spawn(3)[2].spawn(3)
    start = np.zeros((2, DIM))
    task = pickle.dumps([executors.GroupTask(0, rng[0], start)])
    executors._WORKER_SPECS.clear()
    try:
        a1 = pickle.loads(executors._run_pickled("run-a", specs["run-a"], task))
        b1 = pickle.loads(executors._run_pickled("run-b", specs["run-b"], task))
        assert set(executors._WORKER_SPECS) == {"run-a", "run-b"}
        # the cached specs answer, whatever blob comes along: run-a's is still run-a's
        a2 = pickle.loads(executors._run_pickled("run-a", specs["run-b"], task))
        assert _same(a1[0][1].draws, a2[0][1].draws)
        assert not _same(a1[0][1].draws, b1[0][1].draws)
        executors._forget_spec("run-a")
        assert set(executors._WORKER_SPECS) == {"run-b"}
    finally:
        executors._WORKER_SPECS.clear()


def _spec_for(X, y):
    model = LogisticRegression(X, y)
    smp = sgmc.samplers.make_sampler("sgld", model)
    est = sgmc.estimators.make_estimator("minibatch", model, 30)
    return executors.RunSpec(smp, est, [1e-4] * 40, list(range(40)), True, None, 100,
                             sgmc.backends.get_backend("numpy"))


def _mapped_data(token):
    """In a worker: whether the cached spec's data is a view of a mapped file (no copy of its own)."""
    import mmap as _mmap

    spec = __import__("sgmc.executors").executors._WORKER_SPECS[token]
    X = spec.estimator.model.X
    base = X
    while getattr(base, "base", None) is not None and not isinstance(base, (_mmap.mmap, memoryview)):
        base = base.base
    return isinstance(base, (_mmap.mmap, memoryview)) and not X.flags.owndata


def test_local_dask_workers_map_the_data_file(reference, dask_client):
    X, y = _data()
    spec = _spec_for(X, y)
    shared = executors._share_with_local_workers(spec, dask_client)
    assert shared is not None and shared.path is not None and os.path.exists(shared.path)
    try:
        import pickle

        rng = sgmc.backends.default_rng(SEED).spawn(1)[0]
        task = pickle.dumps([executors.GroupTask(0, rng, np.zeros((2, DIM)))])
        blob = pickle.dumps(shared)
        assert len(blob) < 10_000  # the data are not in it: it travels with every task
        fut = dask_client.submit(executors._run_pickled, "mapped-run", blob, task, pure=False)
        assert len(pickle.loads(fut.result())) == 1
        held = dask_client.run(lambda: "mapped-run" in __import__("sgmc.executors").executors._WORKER_SPECS)
        where = [w for w, has in held.items() if has]
        assert len(where) == 1
        assert dask_client.run(_mapped_data, "mapped-run", workers=where) == {where[0]: True}
    finally:
        dask_client.run(executors._forget_spec, "mapped-run")
        executors._remove(shared.path)


def test_dask_workers_that_cannot_see_the_file_get_the_pickle(monkeypatch, reference, dask_client):
    X, y = _data()
    # as a worker on another machine would: the file it is told of is not the one written here
    monkeypatch.setattr(dask_client, "run", lambda fn, *a, **k: {"tcp://elsewhere:1": None})
    before = set(os.listdir(__import__("tempfile").gettempdir()))
    assert executors._share_with_local_workers(_spec_for(X, y), dask_client) is None
    after = set(os.listdir(__import__("tempfile").gettempdir()))
    assert not {f for f in after - before if f.startswith("sgmc-data-")}


def _recording_scatter(monkeypatch, client) -> list:
    calls = []
    real = client.scatter

    def scatter(data, *args, **kwargs):
        calls.append(kwargs)
        return real(data, *args, **kwargs)

    monkeypatch.setattr(client, "scatter", scatter)
    return calls


def _as_if_remote(monkeypatch) -> None:
    """The run's spec travels as it does to workers on other machines: one in-band pickle, scattered."""
    monkeypatch.setattr(executors, "_share_with_local_workers", lambda spec, client: None)
    monkeypatch.setattr(executors, "_MAX_INLINE", 0)


def test_dask_spec_is_never_broadcast(monkeypatch, reference, dask_client):
    # Dask's broadcast copies to a fixed set of workers and waits forever for one that dies meanwhile:
    # local workers get the mapped file's small pickle with each task, others a plain scatter
    X, y = _data()
    _both_workers(dask_client)
    calls = _recording_scatter(monkeypatch, dask_client)
    assert _same(_run(_steady(X, y), executor=dask_client).draws, reference.draws)
    assert calls == []
    _as_if_remote(monkeypatch)
    assert _same(_run(_steady(X, y), executor=dask_client).draws, reference.draws)
    assert len(calls) == 1 and not calls[0].get("broadcast", False)


def test_dask_survives_a_killed_worker_when_the_spec_is_scattered(monkeypatch, tmp_path, reference, dask_client):
    # scattered to one worker, the spec dies with it when that is the worker killed: every group
    # that needed it is lost and runs again; either way the draws are those of an uninterrupted run
    X, y = _data()
    marker = tmp_path / "killed"
    _both_workers(dask_client)
    _as_if_remote(monkeypatch)
    for at in (2, 30):  # early (the others still fetching the spec) and late
        marker.unlink(missing_ok=True)
        trace = _run(DyingRegression(X, y, marker, at=at), executor=dask_client)
        assert marker.exists()
        assert _same(trace.draws, reference.draws)
        _both_workers(dask_client)


def test_a_data_file_that_is_not_the_written_one_is_refused(tmp_path):
    # a worker that sees another file under the same name (another machine's temporary folder) must
    # not read it as the run's data
    X, y = _data()
    spec = executors.RunSpec(None, LogisticRegression(X, y), [1e-4], [0], False, None, 1, None)
    shared = executors._share(spec)
    try:
        assert shared.ident == executors._file_id(shared.path)
        assert _same(executors._load_shared(shared).estimator.X, X)
        dev, ino, size = shared.ident
        for other in ((dev, ino + 1, size), (dev, ino, size + 1)):
            with pytest.raises(FileNotFoundError, match=r"data file .*sgmc-data-.*not the one the run wrote"):
                executors._load_shared(shared._replace(ident=other))
    finally:
        executors._remove(shared.path)
