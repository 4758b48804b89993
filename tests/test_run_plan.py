"""sgmc.sample resolves a run once into an immutable plan (sgmc._plan.RunPlan).

The backend is asked for once per run: every function named ``get_backend`` or ``array_namespace`` in
any sgmc module is wrapped and the calls of one ``sample`` counted. The plan is frozen, pickles (its
namespaces come from the backend, which pickles by name), and its groups, run from the unpickled
copy, give the draws of ``sample``. ``sample`` itself stays a short pipeline.
"""

from __future__ import annotations

import ast
import collections
import dataclasses
import importlib
import importlib.util
import inspect
import pathlib
import pickle
import warnings
import pkgutil
import textwrap

import numpy as np
import pytest

import sgmc
import sgmc.run
from sgmc import _array_api, backends
from sgmc._inputs import check_inputs
from sgmc._plan import RunPlan, prepare, resolve
from sgmc.chains import run_chains
from sgmc.models import LogisticRegression

LOOKUPS = ("get_backend", "array_namespace")


def _data(n=500, d=3, seed=0):
    X = np.random.default_rng(seed).normal(size=(n, d))
    return X, (X[:, 0] > 0).astype(float)


def _count_lookups(monkeypatch, run):
    """Calls of ``get_backend``/``array_namespace`` (wherever an sgmc module binds them) made by ``run()``."""
    counts = collections.Counter()
    originals = {"get_backend": backends.get_backend, "array_namespace": _array_api.array_namespace}

    def wrapped(name):
        orig = originals[name]

        def counted(*args, **kwargs):
            counts[name] += 1
            return orig(*args, **kwargs)
        return counted

    names = [n for _, n, _ in pkgutil.walk_packages(sgmc.__path__, "sgmc.")
             if not any(part in n for part in ("cli", "experiments", "rnn"))]
    for mod in [sgmc] + [importlib.import_module(n) for n in names]:
        for name in LOOKUPS:
            if getattr(mod, name, None) is originals[name]:
                monkeypatch.setattr(mod, name, wrapped(name))
    run()
    return sum(counts.values()), dict(counts)


def _small_run(model, **kw):
    opts = dict(sampler="sgld", step_size=1e-3, batch_size=50, n_iter=200, rng=1, progress=False)
    opts.update(kw)
    return lambda: sgmc.sample(model, **opts)


def test_numpy_run_asks_for_the_backend_at_most_twice(monkeypatch):
    X, y = _data()
    total, counts = _count_lookups(monkeypatch, _small_run(LogisticRegression(X, y)))
    assert total <= 2, counts
    # several groups, a checkpoint-free resume-free run with stored gradients: still once per run, not per group
    total, counts = _count_lookups(monkeypatch, _small_run(LogisticRegression(X, y), chains=4, group_size=2))
    assert total <= 2, counts
    # long enough for the mixing verdict (R-hat and ESS on the kept draws): still at most twice
    run = _small_run(LogisticRegression(X, y), n_iter=4000)

    def quiet():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", sgmc.MixingWarning)  # the verdict is what is counted, not its result
            return run()

    total, counts = _count_lookups(monkeypatch, quiet)
    assert total <= 2, counts


@pytest.mark.parametrize("estimator", ["full", "minibatch"])
@pytest.mark.parametrize("lib", ["jax", "torch"])
def test_jax_and_torch_runs_ask_for_the_backend_at_most_twice(monkeypatch, lib, estimator):
    # the minibatch draw is handed its namespace by the generator, as the runner is by the plan
    X, y = _data(200)
    if lib == "jax":
        jax = pytest.importorskip("jax")
        jax.config.update("jax_enable_x64", True)
        X, y = jax.numpy.asarray(X), jax.numpy.asarray(y)
    else:
        torch = pytest.importorskip("torch")
        X, y = torch.as_tensor(X), torch.as_tensor(y)
    total, counts = _count_lookups(monkeypatch, _small_run(LogisticRegression(X, y), estimator=estimator,
                                                           n_iter=50))
    assert total <= 2, counts


def _plan(model, **kw):
    args = dict(step_size=1e-3, batch_size=40, n_iter=120, chains=3, burn_in=20, thin=2, init=None,
                store_grads=False, progress=False, check_every=100, executor=None, group_size=2, checkpoint=None,
                checkpoint_every=None, checkpoint_key=None, backend=None, max_time=None)
    args.update(kw)
    inputs = check_inputs(model, **args)
    return prepare(resolve(inputs, "sgld", "minibatch", 7, None, None), inputs.init, False)


def test_plan_is_frozen_and_pickles_to_the_same_draws():
    X, y = _data(300)
    model = LogisticRegression(X, y)
    plan = _plan(model)
    assert isinstance(plan, RunPlan) and dataclasses.is_dataclass(plan)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.spec = None
    assert plan.xp is backends.get_backend("numpy").xp and plan.backend.name == "numpy"
    assert [t.index for t in plan.tasks] == [0, 1] and plan.bounds == [(0, 2), (2, 3)]
    again = pickle.loads(pickle.dumps(plan))
    assert again.backend == plan.backend and again.xp is plan.xp
    assert list(again.spec.kept) == list(plan.spec.kept) and list(again.spec.step_sizes) == list(plan.spec.step_sizes)
    # the unpickled plan's groups, run by the loop alone, are the draws of sample with the same arguments
    draws = [run_chains(again.spec.sampler, again.spec.estimator, t.rng, t.position, again.spec.step_sizes,
                        again.spec.kept, backend=again.backend).draws for t in again.tasks]
    trace = sgmc.sample(model, "sgld", "minibatch", step_size=1e-3, batch_size=40, n_iter=120, chains=3, burn_in=20,
                        thin=2, group_size=2, rng=7, progress=False)
    np.testing.assert_array_equal(np.concatenate(draws, axis=0), trace.draws)


def test_prepare_returns_a_new_plan_and_leaves_the_resolved_one():
    X, y = _data(300)
    model = LogisticRegression(X, y)
    inputs = check_inputs(model, step_size=1e-3, batch_size=40, n_iter=60, chains=2, burn_in=None, thin=1, init=None,
                          store_grads=False, progress=False, check_every=100, executor=None, group_size=None,
                          checkpoint=None, checkpoint_every=None, checkpoint_key=None, backend=None, max_time=None)
    resolved = resolve(inputs, "sgld", "cv", 3, None, None)
    ready = prepare(resolved, inputs.init, False)
    assert resolved.tasks == [] and resolved.setup_evals == 0.0
    assert len(ready.tasks) == 1 and ready.setup_evals > 0  # the control variate's centre was found
    assert ready.spec.estimator is not resolved.spec.estimator


def _body_lines(func) -> int:
    """Source lines of a function's body, its docstring excluded."""
    src = textwrap.dedent(inspect.getsource(func))
    fn = ast.parse(src).body[0]
    body = fn.body[1:] if isinstance(fn.body[0], ast.Expr) and isinstance(fn.body[0].value, ast.Constant) else fn.body
    return body[-1].end_lineno - body[0].lineno + 1


def test_sample_is_a_short_pipeline():
    n = _body_lines(sgmc.run.sample)
    assert n <= 60, f"sample's body has {n} lines"
    assert _body_lines(sgmc.run.resume) <= 10


def _corridor():
    """docs/corridor_count.py, the measurement of docs/architecture.md, as a module."""
    path = pathlib.Path(__file__).resolve().parents[1] / "docs" / "corridor_count.py"
    spec = importlib.util.spec_from_file_location("corridor_count", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sample_checks_the_model_once_on_the_way_to_the_first_step():
    # commit 720b6a8 passed the model through 19 places (minibatch) and 104 (cv) before the first
    # iteration, checking it again in every estimator and every optimize function: at most half now
    count = _corridor().count_places
    mb, cv = count("minibatch"), count("cv")
    assert mb["places"] <= 9, mb["list"]
    assert cv["places"] <= 52, cv["list"]
    for got in (mb, cv):
        called = [p.split(":")[1] for p in got["list"]]
        assert called.count("model_facts") == 1, got["list"]
        assert not {"check_target", "require", "check_model", "provides", "model_param_names"} & set(called)
