"""Chain groups on executors: the draws never depend on where the groups run.

``sgmc.sample`` splits the chains into groups of ``group_size`` and gives each group its own stream
spawned from the seed, so a run in this process, on a ``ProcessPoolExecutor`` (or
``executor="processes"``) and on a Dask cluster (the ``Client``, its ``get_executor()``, or
``executor="dask"``) must give bit-identical draws, stored gradients and statistics (wall time
aside). The module also checks how the groups are split, that the model is shipped to each worker
once, the error messages, and that the progress bar counts every group.

Everything that starts processes is made inside fixtures: one process pool (spawned, as
``executor="processes"`` starts its workers) and one Dask ``LocalCluster`` for the module.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import sgmc
import sgmc.run
from sgmc import executors
from sgmc.models import LogisticRegression

from _deadline import deadline

N_DATA, DIM = 5000, 4
CHAINS, GROUP_SIZE, SEED = 8, 3, 7
GROUPS = [[0, 3], [3, 6], [6, 8]]

# (sampler, estimator, sampler_options, estimator_options, step_size)
CASES = [
    ("sgld", "minibatch", {}, {}, 1e-4),
    ("sgld", "svrg", {}, {"update_every": 5}, 1e-4),
    ("sgld", "cv", {}, {"opt_steps": 50}, 1e-4),
    ("sghmc", "minibatch", {"n_leapfrog": 2}, {}, 1e-4),
    ("sghmc", "svrg", {"n_leapfrog": 2}, {"update_every": 5}, 1e-4),
    ("sghmc", "cv", {"n_leapfrog": 2}, {"opt_steps": 50}, 1e-4),
    ("mala", "full", {}, {}, 1e-4),
]
CASE_IDS = [f"{c[0]}-{c[1]}" for c in CASES]

DASK_CASES = [pytest.param(c, id=i) for c, i in zip(CASES, CASE_IDS)]

# Run-dependent timings: everything else in a trace must match bit for bit.
TIMING_INFO = ("setup_time", "sampling_time")
HANG_S = 240  # the tests wait on worker processes; one that takes longer than this hangs


@pytest.fixture(autouse=True)
def _bounded(request):
    """A test that hangs fails after HANG_S seconds with a message that says so and where it stood."""
    with deadline(HANG_S, request.node.nodeid):
        yield


def _design(seed: int = 0):
    r = np.random.default_rng(seed)
    X = np.concatenate([np.ones((N_DATA, 1)), r.normal(size=(N_DATA, DIM - 1))], axis=1)
    theta = np.array([0.5, -1.0, 1.0, 0.25])
    y = (r.random(N_DATA) < 1.0 / (1.0 + np.exp(-X @ theta))).astype(np.float64)
    return X, y


# Pickles of the model made in this process (the parent): the workers never pickle the model.
PICKLES = [0]


class CountingLogisticRegression(LogisticRegression):
    """A logistic regression that counts how often it is pickled in the parent process."""

    def __reduce_ex__(self, protocol):
        PICKLES[0] += 1
        return super().__reduce_ex__(protocol)


@pytest.fixture(scope="module")
def model():
    X, y = _design()
    return LogisticRegression(X, y)


@pytest.fixture(scope="module")
def pool():
    # spawned, as executor="processes" starts its workers: this process may hold threads (torch, JAX,
    # OpenMP pools started by earlier tests), and a forked child of such a process can deadlock
    with cf.ProcessPoolExecutor(2, mp_context=executors._safe_context()) as ex:
        yield ex


@pytest.fixture(scope="module")
def dask_client():
    distributed = pytest.importorskip("distributed")
    # dashboard_address=None falls back to the default port 8787 (and warns when another cluster on
    # the machine holds it); ":0" asks for any free port.
    # A nanny copies its pre-spawn variables (OMP_NUM_THREADS=1, MALLOC_TRIM_THRESHOLD_ ...) into the
    # environment of the process that starts it: restore this process's, so that the tests that run
    # after these (and the processes they start) see the environment they would see alone.
    saved = dict(os.environ)
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
    )
    _restore_environ(saved)
    client = distributed.Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()
        _restore_environ(saved)


def _restore_environ(saved: dict) -> None:
    for key in set(os.environ) - set(saved):
        del os.environ[key]
    os.environ.update(saved)


def _run(model, case, **kwargs):
    smp, est, so, eo, h = case
    options = dict(
        step_size=h, batch_size=50, n_iter=60, burn_in=10, thin=2, chains=CHAINS,
        group_size=GROUP_SIZE, rng=SEED, store_grads=True, progress=False,
        sampler_options=so, estimator_options=eo,
    )
    options.update(kwargs)
    return sgmc.sample(model, smp, est, **options)


def _same_bits(a, b) -> bool:
    a = np.asarray(a)
    b = np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def assert_identical(ref, other):
    """Draws, stored gradients, every stat but wall_time and every setting agree bit for bit."""
    assert _same_bits(ref.draws, other.draws)
    assert ref.grads is not None and other.grads is not None
    assert _same_bits(ref.grads, other.grads)
    assert ref.iterations == other.iterations
    assert set(ref.stats) == set(other.stats)
    for key in ref.stats:
        if key != "wall_time":
            assert _same_bits(ref.stats[key], other.stats[key]), key
    assert ref.stats["wall_time"].shape == other.stats["wall_time"].shape
    assert {k: v for k, v in ref.info.items() if k not in TIMING_INFO} == {
        k: v for k, v in other.info.items() if k not in TIMING_INFO
    }


_REFERENCE: dict = {}


def _reference(model, case):
    """The in-process trace of a case, computed once per module."""
    key = case[:2]
    if key not in _REFERENCE:
        _REFERENCE[key] = _run(model, case)
    return _REFERENCE[key]


# -- 1. same draws wherever the groups run ---------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_in_process_reference_is_sane(model, case):
    trace = _reference(model, case)
    assert trace.draws.shape == (CHAINS, 25, DIM)
    assert trace.info["groups"] == GROUPS
    assert np.all(np.isfinite(trace.draws)) and np.all(np.isfinite(trace.grads))
    # in process twice: deterministic
    assert_identical(trace, _run(model, case))


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_process_pool_gives_same_draws(model, pool, case):
    assert_identical(_reference(model, case), _run(model, case, executor=pool))


@pytest.mark.parametrize("case", CASES[:1] + CASES[-1:], ids=[CASE_IDS[0], CASE_IDS[-1]])
def test_processes_by_name_gives_same_draws(model, case):
    assert_identical(_reference(model, case), _run(model, case, executor="processes"))


# -- 2. the group size changes the draws, the executor never does ----------------------------------


def test_group_split_and_streams(model, pool):
    case = CASES[0]
    ref = _reference(model, case)
    assert ref.info["groups"] == [[0, 3], [3, 6], [6, 8]]
    by4 = _run(model, case, group_size=4)
    assert by4.info["groups"] == [[0, 4], [4, 8]]
    one = _run(model, case, group_size=None)  # the default (16) holds all 8 chains
    assert one.info["groups"] == [[0, 8]]
    # a different split draws from different streams ...
    assert not np.array_equal(ref.draws, by4.draws)
    assert not np.array_equal(ref.draws, one.draws)
    assert not np.array_equal(by4.draws, one.draws)
    # ... but the executor never changes them
    assert_identical(by4, _run(model, case, group_size=4, executor=pool))
    assert_identical(one, _run(model, case, group_size=None, executor=pool))


def test_each_group_has_its_own_stream(model, pool):
    """From a common start, groups of equal size must still draw different numbers."""
    start = np.zeros(DIM)
    for executor in (None, pool):
        trace = _run(model, CASES[0], chains=6, group_size=3, init=start, executor=executor)
        assert trace.info["groups"] == [[0, 3], [3, 6]]
        a, b = np.asarray(trace.draws[:3]), np.asarray(trace.draws[3:])
        assert not np.any(a == b), "two groups share a random stream"


# -- 3. data go to each worker once ----------------------------------------------------------------


def _counting_model():
    X, y = _design()
    return CountingLogisticRegression(X, y)


def _pickles_in_run(executor) -> int:
    m = _counting_model()
    before = PICKLES[0]
    trace = sgmc.sample(m, "sgld", "minibatch", step_size=1e-4, batch_size=50, n_iter=20, chains=6,
                        group_size=1, rng=SEED, progress=False, executor=executor)
    assert trace.info["groups"] == [[g, g + 1] for g in range(6)]
    return PICKLES[0] - before


def test_counting_model_counts():
    import pickle

    before = PICKLES[0]
    pickle.dumps(_counting_model())
    assert PICKLES[0] - before == 1


def test_model_not_pickled_in_process():
    assert _pickles_in_run(None) == 0


def test_model_pickled_once_per_worker_bundle(pool):
    assert 1 <= _pickles_in_run(pool) <= 2


# -- 4. errors -------------------------------------------------------------------------------------


def test_unknown_executor_is_a_type_error(model):
    with pytest.raises(TypeError, match="executor"):
        _run(model, CASES[0], executor=object())


def test_callback_needs_in_process(model, pool):
    for executor in (pool, "processes"):
        with pytest.raises(ValueError, match="callback"):
            _run(model, CASES[0], executor=executor, callback=lambda k, state: None)


def test_divergence_in_a_worker(model, pool):
    with pytest.raises(FloatingPointError, match="step_size"):
        _run(model, CASES[0], step_size=1e12, executor=pool)


def test_dask_by_name_without_distributed(model, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(ImportError, match=r"sgmc\[dask\]"):
        _run(model, CASES[0], executor="dask")


def test_dask_by_name_without_a_client():
    pytest.importorskip("distributed")
    code = textwrap.dedent(
        """
        import numpy as np
        import sgmc
        from sgmc.models import LogisticRegression
        r = np.random.default_rng(0)
        X = r.normal(size=(200, 2)); y = (r.random(200) < 0.5).astype(float)
        try:
            sgmc.sample(LogisticRegression(X, y), step_size=1e-3, n_iter=5, progress=False,
                        executor="dask")
        except ValueError as exc:
            print("ValueError:", exc)
        else:
            print("no error")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ValueError:"), out.stdout + out.stderr
    assert "distributed.Client" in out.stdout


# -- 5. the progress bar covers all groups ---------------------------------------------------------


class Recorder:
    """A tqdm stand-in: counts the iterations it is told about."""

    def __init__(self, total):
        self.total = total
        self.n = 0
        self.steps = []
        self.closed = False

    def update(self, k):
        self.steps.append(k)
        self.n += k

    def close(self):
        self.closed = True


def _recorded_run(model, monkeypatch, executor):
    pytest.importorskip("tqdm")
    bars = []

    def fake_bar(progress, total, desc):
        assert progress
        bars.append(Recorder(total))
        return bars[-1]

    monkeypatch.setattr(sgmc.run, "_progress_bar", fake_bar)
    trace = _run(model, CASES[0], chains=8, group_size=3, n_iter=40, burn_in=0, thin=1,
                 progress=True, executor=executor)
    assert trace.info["groups"] == GROUPS
    assert len(bars) == 1
    bar = bars[0]
    assert bar.total == 120
    assert bar.n == 120
    assert all(k >= 0 for k in bar.steps)
    assert bar.closed
    return bar


def test_progress_in_process(model, monkeypatch):
    bar = _recorded_run(model, monkeypatch, None)
    assert len(bar.steps) >= 3  # it moves while the groups run, not only at the end


def test_progress_with_process_pool(model, monkeypatch, pool):
    _recorded_run(model, monkeypatch, pool)


# -- Dask (last: the cluster's threads start here) -------------------------------------------------


@pytest.mark.parametrize("case", DASK_CASES)
def test_dask_client_gives_same_draws(model, dask_client, case):
    assert_identical(_reference(model, case), _run(model, case, executor=dask_client))


@pytest.mark.parametrize("case", DASK_CASES)
def test_dask_executor_gives_same_draws(model, dask_client, case):
    executor = dask_client.get_executor()
    assert_identical(_reference(model, case), _run(model, case, executor=executor))


@pytest.mark.parametrize("case", CASES[:1] + CASES[-1:], ids=[CASE_IDS[0], CASE_IDS[-1]])
def test_dask_by_name_gives_same_draws(model, dask_client, case):
    assert_identical(_reference(model, case), _run(model, case, executor="dask"))


def test_dask_group_size_changes_draws_not_executor(model, dask_client):
    case = CASES[0]
    by4 = _run(model, case, group_size=4)
    assert_identical(by4, _run(model, case, group_size=4, executor=dask_client))
    assert not np.array_equal(by4.draws, _reference(model, case).draws)


def test_dask_model_scattered_once(dask_client):
    assert _pickles_in_run(dask_client) == 1


def test_dask_divergence_in_a_worker(model, dask_client):
    with pytest.raises(FloatingPointError, match="step_size"):
        _run(model, CASES[0], step_size=1e12, executor=dask_client)


def test_dask_callback_needs_in_process(model, dask_client):
    with pytest.raises(ValueError, match="callback"):
        _run(model, CASES[0], executor=dask_client, callback=lambda k, state: None)


def test_progress_with_dask(model, monkeypatch, dask_client):
    _recorded_run(model, monkeypatch, dask_client)


def test_dask_single_chain_groups_give_same_draws(model, dask_client):
    # one-chain groups take NumPy's matrix-vector paths, which round differently on misaligned
    # buffers: the run must still match the in-process one bit for bit
    for est, eo in (("svrg", {"update_every": 5}), ("cv", {"opt_steps": 50})):
        case = ("sgld", est, None, eo, 1e-4)
        ref = _run(model, case, chains=7, group_size=3)
        assert ref.info["groups"][-1] == [6, 7]
        assert_identical(ref, _run(model, case, chains=7, group_size=3, executor=dask_client))


def test_dask_client_that_is_not_the_default(model, dask_client):
    distributed = pytest.importorskip("distributed")
    case = CASES[0]
    with distributed.Client(dask_client.cluster, set_as_default=False) as other:
        assert_identical(_reference(model, case), _run(model, case, executor=other))
        # the workers forget the run's data once it is over
        held = other.run(lambda: len(__import__("sgmc.executors").executors._WORKER_SPECS))
        assert set(held.values()) == {0}


_NANNY_KEYS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MALLOC_TRIM_THRESHOLD_")
_ENV_AT_IMPORT = {k: os.environ.get(k) for k in _NANNY_KEYS}


def test_dask_cluster_leaves_the_environment_as_it_found_it(model, dask_client):
    # the cluster is up and has run work: the variables its nannies set are not left in this process
    assert_identical(_reference(model, CASES[0]), _run(model, CASES[0], executor=dask_client))
    assert {k: os.environ.get(k) for k in _NANNY_KEYS} == _ENV_AT_IMPORT


@pytest.mark.parametrize("name", ["torch", "array_api_strict"])
def test_other_backends_give_same_draws_in_processes(name):
    # torch starts threads: executor="processes" must not fork this process (the child would hang)
    pytest.importorskip(name)
    from sgmc import backends

    r = np.random.default_rng(0)
    X = r.standard_normal((2000, 3))
    y = (r.random(2000) < 0.5).astype(float)
    m = LogisticRegression(backends.asarray(X, backend=name), backends.asarray(y, backend=name))
    kw = dict(step_size=1e-4, batch_size=50, n_iter=40, chains=5, group_size=2, rng=3, progress=False,
              store_grads=True, estimator_options={"update_every": 7})
    here = sgmc.sample(m, "sgld", "svrg", **kw)
    there = sgmc.sample(m, "sgld", "svrg", executor="processes", **kw)
    assert type(there.draws) is type(here.draws)
    assert _same_bits(backends.to_numpy(here.draws), backends.to_numpy(there.draws))
    assert _same_bits(backends.to_numpy(here.grads), backends.to_numpy(there.grads))


# -- 6. workers do not depend on state left behind by earlier code in this process ---------------

_FRESH_STATE_SCRIPT = '''
import os
import sys

import numpy as np

import sgmc
from sgmc import backends
from sgmc.models import LogisticRegression


class EnvDoubled(LogisticRegression):
    """Its gradient is doubled in any process that sees SGMC_TEST_DOUBLE."""

    def grad_log_lik_sum(self, theta, idx=None, weights=None):
        g = super().grad_log_lik_sum(theta, idx, weights)
        return 2 * g if os.environ.get("SGMC_TEST_DOUBLE") else g


def run(model, **kw):
    return sgmc.sample(model, "sgld", "svrg", step_size=1e-4, batch_size=50, n_iter=20, chains=4,
                       group_size=2, rng=3, progress=False, store_grads=True,
                       estimator_options={"update_every": 7}, **kw)


def same(a, b):
    a, b = backends.to_numpy(a), backends.to_numpy(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def main():
    r = np.random.default_rng(0)
    X = r.standard_normal((1000, 3))
    y = (r.random(1000) < 0.5).astype(float)
    # 1. a variable set for one run and removed after it is not seen by the next run's workers
    model = EnvDoubled(X, y)
    os.environ["SGMC_TEST_DOUBLE"] = "1"
    doubled = run(model, executor="processes")
    del os.environ["SGMC_TEST_DOUBLE"]
    later = run(model, executor="processes")
    here = run(model)
    print("env", same(here.draws, later.draws), not same(here.draws, doubled.draws))
    if "torch" not in sys.argv:
        return
    # 2. torch after what a test run may leave behind: threads started and then limited, the
    # variables threadpoolctl and torch's compiler set at import, a different default dtype
    import threadpoolctl  # noqa: F401  (sets KMP_DUPLICATE_LIB_OK)
    import torch

    Xt, yt = backends.asarray(X, backend="torch"), backends.asarray(y, backend="torch")
    torch.ones(200, 200) @ torch.ones(200, 200)  # the intra-op pool is up
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(os.getcwd(), "inductor"))
    os.environ["OMP_NUM_THREADS"] = "1"
    model = LogisticRegression(Xt, yt)
    here, there = run(model), run(model, executor="processes")
    print("torch", type(here.draws) is type(there.draws), same(here.draws, there.draws),
          same(here.grads, there.grads))


if __name__ == "__main__":
    main()
'''


def test_processes_start_from_the_callers_current_state(tmp_path):
    # Workers must start from this process as it is when the run starts, not as it was when an
    # earlier run started its pool (a forkserver keeps the environment of its first start), and
    # torch in the workers must give the draws it gives here whatever earlier code set in this
    # process. A fresh interpreter, so that no earlier test's pool or server exists.
    script = tmp_path / "fresh_state.py"
    script.write_text(_FRESH_STATE_SCRIPT)
    args = [sys.executable, str(script)]
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    else:
        args.append("torch")
    env = {k: v for k, v in os.environ.items() if k != "SGMC_TEST_DOUBLE"}
    out = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=HANG_S)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.split("\n")
    assert "env True True" in lines, out.stdout + out.stderr[-3000:]
    if "torch" in args:
        assert "torch True True True" in lines, out.stdout + out.stderr[-3000:]
