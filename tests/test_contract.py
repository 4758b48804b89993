"""The step contract as users meet it: stateless, reusable estimator and sampler objects; a custom
estimator that follows the protocol without subclassing; the public surface; and source checks that
keep capability probing and backend-name comparisons out of the generic code.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import sgmc
from sgmc._sampling import categorical
from sgmc.estimators import SVRG, ControlVariate, EstimateInfo, Estimator
from sgmc.models import LogisticRegression
from sgmc.samplers import PSGLD, SGHMC, SamplerBase

SGMC_DIR = pathlib.Path(sgmc.__file__).resolve().parent
N_DATA, DIM = 2000, 3
TIMING_INFO = ("setup_time", "sampling_time")


@pytest.fixture(scope="module")
def model():
    r = np.random.default_rng(11)
    X = np.concatenate([np.ones((N_DATA, 1)), r.normal(size=(N_DATA, DIM - 1))], axis=1)
    theta = np.array([-0.3, 1.0, -0.5])
    y = (r.random(N_DATA) < 1.0 / (1.0 + np.exp(-X @ theta))).astype(np.float64)
    return LogisticRegression(X, y)


def _same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def assert_identical(a, b):
    assert _same_bits(a.draws, b.draws)
    assert set(a.stats) == set(b.stats)
    for key in a.stats:
        if key != "wall_time":
            assert _same_bits(a.stats[key], b.stats[key]), key
    assert {k: v for k, v in a.info.items() if k not in TIMING_INFO} == {
        k: v for k, v in b.info.items() if k not in TIMING_INFO
    }


# -- 6. a fresh interpreter imports everything -----------------------------------------------------


def test_fresh_import_has_no_cycle():
    code = "import sgmc; sgmc.diagnostics.ksd; sgmc.tune_step_size; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


# -- 7. one object, many runs ----------------------------------------------------------------------


def _snapshot(obj, depth: int = 0) -> dict:
    """Everything on an estimator or sampler: arrays copied, sgmc parts described recursively."""
    snap = {}
    for key, value in vars(obj).items():
        if isinstance(value, np.ndarray):
            snap[key] = ("array", value.copy())
        elif isinstance(value, (Estimator, SamplerBase)) and depth < 3:
            snap[key] = ("part", value, _snapshot(value, depth + 1))
        else:
            snap[key] = ("value", value)
    return snap


def assert_unchanged(obj, snap: dict):
    now = vars(obj)
    assert set(now) == set(snap), f"{type(obj).__name__} gained or lost attributes"
    for key, (kind, *before) in snap.items():
        value = now[key]
        if kind == "array":
            assert isinstance(value, np.ndarray), key
            assert _same_bits(value, before[0]), key
        elif kind == "part":
            assert value is before[0], key
            assert_unchanged(value, before[1])
        else:
            assert value is before[0] or value == before[0], key


def _twice(model, sampler, estimator, **kwargs):
    options = dict(step_size=1e-4, batch_size=40, n_iter=40, chains=4, group_size=2, rng=3,
                   progress=False, store_grads=True)
    options.update(kwargs)
    a = sgmc.sample(model, sampler, estimator, **options)
    b = sgmc.sample(model, sampler, estimator, **options)
    assert_identical(a, b)
    assert _same_bits(a.grads, b.grads)
    return a


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda m: SVRG(m, 40, update_every=4), id="svrg"),
        pytest.param(lambda m: ControlVariate(m, 40, centre=np.array([-0.3, 1.0, -0.5])), id="cv-centre"),
        pytest.param(lambda m: ControlVariate(m, 40, opt_steps=50), id="cv-no-centre"),
    ],
)
def test_estimator_object_reused(model, make):
    est = make(model)
    snap = _snapshot(est)
    trace = _twice(model, "sgld", est)
    assert trace.info["estimator"] == est.name
    assert_unchanged(est, snap)
    if isinstance(est, ControlVariate) and snap["centre"][1] is None:
        assert est.centre is None  # sgmc.sample found a centre on a new object, not on this one
    # and the object still behaves like a fresh one
    fresh = _twice(model, "sgld", make(model))
    assert_identical(trace, fresh)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: SGHMC(n_leapfrog=2), id="sghmc"),
        pytest.param(lambda: PSGLD(n_data=N_DATA), id="psgld"),
    ],
)
def test_sampler_object_reused(model, make):
    smp = make()
    snap = _snapshot(smp)
    trace = _twice(model, smp, "minibatch", step_size=1e-4)
    assert trace.info["sampler"] == smp.name
    assert_unchanged(smp, snap)
    assert_identical(trace, _twice(model, make(), "minibatch", step_size=1e-4))


# -- 8. a custom estimator following the protocol without subclassing ------------------------------


class ImportanceMinibatch:
    """Importance-sampled minibatch: n indices drawn with fixed probabilities q_i, reweighted.

    grad log p(theta) + sum_{j=1..n} grad log f_{i_j}(theta) / (n q_{i_j}) is unbiased for the full
    gradient. It has no state between calls, so ``init`` returns None.
    """

    name = "importance"
    init_cost = 0.0

    def __init__(self, model, batch_size, weights):
        self.model = model
        self.batch_size = int(batch_size)
        w = np.asarray(weights, dtype=np.float64)
        self.cdf = np.cumsum(w)
        self.q = w / w.sum()

    def init(self, rng, position):
        return None

    def estimate(self, rng, est_state, position):
        chains = position.shape[0]
        u = rng.uniform((chains, self.batch_size), dtype=position.dtype)
        idx = categorical(u, self.cdf)
        weights = 1.0 / (self.batch_size * self.q[idx])
        m = self.model
        g = m.grad_log_prior(position) + m.grad_log_lik_sum(position, idx, weights)
        return g, est_state, EstimateInfo(self.batch_size, self.batch_size)


class NoEstimate:
    name = "broken"
    init_cost = 0.0

    def init(self, rng, position):
        return None


def _importance(model, n=30):
    weights = 0.5 + np.linalg.norm(np.asarray(model.X), axis=1)
    return ImportanceMinibatch(model, n, weights)


def test_custom_estimator_is_unbiased(model):
    est = _importance(model)
    rng = sgmc.backends.default_rng(5)
    theta = np.broadcast_to(np.array([0.1, 0.5, -0.2]), (4000, DIM))
    g, state, info = est.estimate(rng, est.init(rng, theta), theta)
    assert state is None and info.n_evals == 30
    exact = np.asarray(model.grad_log_posterior(theta[:1]))[0]
    mean = g.mean(axis=0)
    se = g.std(axis=0, ddof=1) / np.sqrt(g.shape[0])
    assert np.all(np.abs(mean - exact) < 4.5 * se)


def test_custom_estimator_runs_through_sample(model):
    est = _importance(model)
    assert not isinstance(est, Estimator)
    trace = sgmc.sample(model, "sgld", est, step_size=1e-4, n_iter=50, chains=3, rng=2, progress=False)
    assert trace.info["estimator"] == "importance"
    assert trace.stats["n_evals"].shape == (3, 50)
    assert np.all(trace.stats["n_evals"] == 30)
    assert np.all(trace.stats["batch_size"] == 30)
    np.testing.assert_allclose(trace.stats["data_passes"][:, -1], 50 * 30 / N_DATA)
    assert np.all(np.isfinite(trace.draws))
    # deterministic like the built-in estimators
    again = sgmc.sample(model, "sgld", est, step_size=1e-4, n_iter=50, chains=3, rng=2, progress=False)
    assert_identical(trace, again)


def test_estimator_missing_estimate_is_rejected(model):
    with pytest.raises(TypeError, match="GradientEstimator"):
        sgmc.sample(model, "sgld", NoEstimate(), step_size=1e-4, n_iter=5, progress=False)


# -- 9. public surface -----------------------------------------------------------------------------


def test_array_namespace_is_public():
    from sgmc import _array_api

    assert "array_namespace" in sgmc.__all__
    assert sgmc.array_namespace is _array_api.array_namespace
    assert sgmc.array_namespace(np.zeros(2)) is sgmc.backends.get_backend("numpy").xp


# -- 10. source checks -----------------------------------------------------------------------------


def _tree(path: pathlib.Path) -> ast.AST:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


@pytest.mark.parametrize("name", ["run.py", "tuning.py"])
def test_no_attribute_probing(name):
    path = SGMC_DIR / name
    calls = [
        f"{name}:{node.lineno} {node.func.id}"
        for node in ast.walk(_tree(path))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        and node.func.id in ("hasattr", "getattr")
    ]
    assert calls == []


BACKEND_NAMES = {"numpy", "cupy", "torch", "array_api_strict", "jax"}


def _names_in(node: ast.AST) -> set:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value} & BACKEND_NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_names_in(e) for e in node.elts)) if node.elts else set()
    return set()


def _backend_comparisons(tree: ast.AST) -> list:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        for op, left, right in zip(node.ops, operands, operands[1:]):
            if isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
                names = _names_in(left) | _names_in(right)
                if names:
                    found.append((node.lineno, sorted(names)))
    return found


def test_backend_comparison_check_catches_examples():
    code = 'a == "numpy"\n"cupy" != b\nc in ("torch", "x")\nd not in ["array_api_strict"]\ne == "numpyish"\n'
    assert [line for line, _ in _backend_comparisons(ast.parse(code))] == [1, 2, 3, 4]


def test_no_backend_names_compared_outside_backends():
    files = [p for p in SGMC_DIR.rglob("*.py") if (SGMC_DIR / "backends") not in p.parents]
    assert len(files) > 10
    found = [
        f"{p.relative_to(SGMC_DIR.parent)}:{line} {names}"
        for p in files
        for line, names in _backend_comparisons(_tree(p))
    ]
    assert found == []
