"""The compiled CPU paths (Numba) equal their array-API twins; the library runs the same without them."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("numba", reason="the compiled CPU paths need Numba (pip install 'sgmc[cpu]')")

from array_api_compat import numpy as npx  # noqa: E402

from sgmc._dispatch import native  # noqa: E402
from sgmc.backends import _numba  # noqa: E402
from sgmc.backends import _numba_stein  # noqa: E402
from sgmc.backends._numba_stein import stein_row_sums  # noqa: E402
from sgmc.backends._numpy import subsample as numpy_subsample  # noqa: E402 - the compiled pass inside
from sgmc.diagnostics import _stein, ksd  # noqa: E402
from sgmc.models import BPMF, LinearRegression, LogisticRegression  # noqa: E402
from sgmc.ssm import resampling  # noqa: E402

pytestmark = pytest.mark.skipif(not _numba.available(), reason="SGMC_NATIVE=0 turns the compiled paths off")


@pytest.fixture(autouse=True)
def _glm_loop_at_every_size(monkeypatch):
    # the library routes only d >= GLM_MIN_DIM through the loop; the tests check it at small d too
    monkeypatch.setattr(_numba, "GLM_MIN_DIM", 0)


def _glm(kind, dtype, n=400, dim=5, seed=0):
    r = np.random.default_rng(seed)
    X = r.standard_normal((n, dim)).astype(dtype)
    if kind == "logistic":
        y = (r.random(n) < 0.5).astype(dtype)
        return LogisticRegression(X, y)
    y = (X @ r.standard_normal(dim) + r.standard_normal(n)).astype(dtype)
    return LinearRegression(X, y, noise_var=0.7)


@pytest.mark.parametrize("kind", ["logistic", "linear"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("chains", [1, 3])
@pytest.mark.parametrize("weighted", [False, True])
def test_glm_gradient_sums_equal_the_twin(kind, dtype, chains, weighted):
    model = _glm(kind, dtype)
    r = np.random.default_rng(1)
    theta = (3.0 * r.standard_normal((chains, model.dim))).astype(dtype)  # large |eta| on both sides
    centre = (theta + 0.3 * r.standard_normal(theta.shape)).astype(dtype)
    idx = r.integers(0, model.n_data, (chains, 64))
    idx[:, :5] = idx[:, :1]  # repeated rows
    w = r.random((chains, 64)).astype(dtype) if weighted else None
    tol = 1e-12 if dtype == np.float64 else 2e-5
    fast = model.grad_log_lik_sum(theta, idx, w)
    twin = model._grad_log_lik_sum(theta, idx, w)
    assert fast.dtype == twin.dtype and fast.shape == (chains, model.dim)
    np.testing.assert_allclose(fast, twin, rtol=tol, atol=tol * np.abs(twin).max())
    fast2 = model.grad_log_lik_diff_sum(theta, centre, idx, w)
    twin2 = model._grad_diff_sum(theta, centre, idx, w)
    np.testing.assert_allclose(fast2, twin2, rtol=tol, atol=tol * np.abs(twin2).max())
    # a broadcast centre (how the control-variate estimator passes it)
    c1 = np.broadcast_to(centre[:1], theta.shape)
    np.testing.assert_allclose(model.grad_log_lik_diff_sum(theta, c1, idx, w), model._grad_diff_sum(theta, c1, idx, w),
                               rtol=tol, atol=tol * np.abs(twin2).max())


def test_glm_native_is_registered_and_switchable():
    fast = native(np, "glm_grad_log_lik_sum")
    assert fast is not None
    model = _glm("logistic", np.float64)
    theta = np.ones((2, model.dim))
    idx = np.zeros((2, 3), dtype=np.int64)
    # inputs the loop does not take fall back to the twin (mixed dtypes)
    assert fast("logistic", model.X, model.y, theta.astype(np.float32), idx, None, 0.0) is NotImplemented
    old = _numba.set_enabled(False)
    try:
        assert fast("logistic", model.X, model.y, theta, idx, None, 0.0) is NotImplemented
        np.testing.assert_array_equal(model.grad_log_lik_sum(theta, idx), model._grad_log_lik_sum(theta, idx, None))
    finally:
        _numba.set_enabled(old)


def test_sampling_with_and_without_natives_agrees():
    import sgmc

    model = _glm("logistic", np.float64, n=2000, dim=3)
    kw = dict(step_size=1e-3, batch_size=100, n_iter=200, chains=2, rng=4, progress=False)
    a = sgmc.sample(model, "sgld", "minibatch", **kw).draws
    old = _numba.set_enabled(False)
    try:
        b = sgmc.sample(model, "sgld", "minibatch", **kw).draws
    finally:
        _numba.set_enabled(old)
    np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


def _bpmf(dtype, n=600, users=13, items=21, d=4, seed=0):
    r = np.random.default_rng(seed)
    u, i = r.integers(0, users, n), r.integers(0, items, n)
    return BPMF(u, i, r.integers(1, 6, n).astype(dtype), users, items, d=d, centre=True)


def _bpmf_twin(fn, *args):
    old = _numba.set_enabled(False)
    try:
        return fn(*args)
    finally:
        _numba.set_enabled(old)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("chains", [1, 3])
@pytest.mark.parametrize("weighted", [False, True])
def test_bpmf_gradient_sums_equal_the_twin(dtype, chains, weighted):
    model = _bpmf(dtype)
    r = np.random.default_rng(1)
    theta = r.standard_normal((chains, model.dim)).astype(dtype)
    centre = (theta + 0.3 * r.standard_normal(theta.shape)).astype(dtype)
    idx = r.integers(0, model.n_data, (chains, 200))  # users and items repeat within a batch
    idx[:, :7] = idx[:, :1]  # and so do ratings
    w = r.random((chains, 200)).astype(dtype) if weighted else None
    tol = 1e-12 if dtype == np.float64 else 2e-5
    fast = model.grad_log_lik_sum(theta, idx, w)
    twin = _bpmf_twin(model.grad_log_lik_sum, theta, idx, w)
    assert fast.dtype == twin.dtype and fast.shape == (chains, model.dim)
    assert not np.array_equal(fast, twin) or dtype == np.float32  # two computations, not one path twice
    np.testing.assert_allclose(fast, twin, rtol=tol, atol=tol * np.abs(twin).max())
    for c in (centre, np.broadcast_to(centre[:1], theta.shape)):  # the estimator broadcasts its centre
        fast2 = model.grad_log_lik_diff_sum(theta, c, idx, w)
        twin2 = _bpmf_twin(model.grad_log_lik_diff_sum, theta, c, idx, w)
        np.testing.assert_allclose(fast2, twin2, rtol=tol, atol=tol * np.abs(twin2).max())
    # a 1-d batch is every chain's
    np.testing.assert_allclose(model.grad_log_lik_sum(theta, idx[0]), _bpmf_twin(model.grad_log_lik_sum, theta, idx[0]),
                               rtol=tol, atol=tol * np.abs(twin).max())


def test_bpmf_native_is_registered_and_declines_what_it_does_not_take():
    fast = native(np, "bpmf_grad_log_lik_sum")
    assert fast is not None and native(np, "bpmf_grad_log_lik_diff_sum") is not None
    model = _bpmf(np.float64)
    theta = np.ones((2, model.dim))
    idx = np.zeros((2, 3), dtype=np.int64)
    args = (model.users, model.items, model.ratings)
    tail = (model.alpha, model.n_users, model.n_items, model.d)
    assert fast(*args, theta.astype(np.float32), idx, None, *tail) is NotImplemented  # mixed dtypes
    assert fast(*args, theta, idx[:1], None, *tail) is NotImplemented  # chains of idx and theta differ


def test_bpmf_sampling_with_and_without_natives_agrees():
    import sgmc

    model = _bpmf(np.float64, n=400)
    kw = dict(step_size=1e-3, batch_size=40, n_iter=100, chains=2, rng=4, progress=False)
    for est in ("minibatch", "cv"):
        opts = {"centre": np.zeros(model.dim)} if est == "cv" else None
        a = sgmc.sample(model, "sgld", est, estimator_options=opts, **kw).draws
        b = _bpmf_twin(lambda: sgmc.sample(model, "sgld", est, estimator_options=opts, **kw).draws)
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kind", ["joint", "sum"])
@pytest.mark.parametrize("beta", [-0.5, -0.3])
@pytest.mark.parametrize("pre", ["med", "matrix"])
@pytest.mark.parametrize("n", [2, 7, 257])
def test_stein_pair_sums_equal_the_twin(kind, beta, pre, n, monkeypatch):
    monkeypatch.setattr(_numba_stein, "STEIN_MAX_DIMS", {"joint": 32, "sum": 32})  # the loop at d = 4 too
    r = np.random.default_rng(2)
    d = 4
    x = r.standard_normal((n, d))
    s = -x + 0.2 * r.standard_normal((n, d))
    if pre == "matrix":
        a = r.standard_normal((d, d))
        spec = a @ a.T + d * np.eye(d)
    else:
        spec = "med"
    st = _stein.make_stein(npx, x, s, _stein.resolve_preconditioner(npx, x, spec), 1.3, beta, kind)
    for triangle in ("upper", "lower"):
        twin = _stein.row_sums_twin(npx, st, 16, triangle)
        fast = stein_row_sums(npx, st, 16, triangle)
        assert np.shape(fast) == np.shape(twin)
        np.testing.assert_allclose(fast, twin, rtol=1e-11, atol=1e-12 * max(1.0, float(np.abs(twin).max())))


def test_ksd_float32_and_large_dimension_take_the_right_path():
    r = np.random.default_rng(3)
    x = r.standard_normal((300, 3)).astype(np.float32)
    a = float(ksd(x, -x))
    old = _numba.set_enabled(False)
    try:
        b = float(ksd(x, -x))
    finally:
        _numba.set_enabled(old)
    assert a == pytest.approx(b, rel=1e-4)
    big = r.standard_normal((50, _numba.STEIN_MAX_DIM + 1))
    # float32 problems above the pair loop's dimensions: the tiled path declines and the seam runs the twin
    b32 = big.astype(np.float32)
    st32 = _stein.make_stein(npx, b32, -b32, _stein.resolve_preconditioner(npx, b32, "med"), 1.0, -0.5, "joint")
    assert stein_row_sums(npx, st32, 16, "upper") is NotImplemented
    # float64: the tiled path runs
    st = _stein.make_stein(npx, big, -big, _stein.resolve_preconditioner(npx, big, "med"), 1.0, -0.5, "joint")
    fast = _stein.row_sums(npx, st, 16, "upper")
    assert fast == pytest.approx(float(_numba_stein.stein_tiles(st, "upper")), rel=0, abs=0)
    assert fast == pytest.approx(float(_stein.row_sums_twin(npx, st, 16, "upper")), rel=1e-12)


@pytest.mark.parametrize("scheme", ["systematic", "stratified", "multinomial", "residual"])
def test_resampling_equals_the_twin(scheme):
    r = np.random.default_rng(5)
    w = r.random((6, 50)) ** 3
    w[2] = 0.0
    w[2, 7] = 1.0  # one particle holds all the weight
    w /= w.sum(axis=1, keepdims=True)
    u = r.random(6) if scheme == "systematic" else r.random((6, 50))
    fast = resampling.ancestors(w, u, scheme)
    twin = resampling._TWINS[scheme](w, u)
    np.testing.assert_array_equal(fast, twin)


def test_without_numba_natives_are_absent():
    code = (
        "import numpy as np; from sgmc._dispatch import native; "
        "print(native(np, 'glm_grad_log_lik_sum') is None, native(np, 'stein_row_sums') is None)"
    )
    env = dict(os.environ, SGMC_NATIVE="0")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["True", "True"]


@pytest.mark.parametrize("shape", [(100_000, 1000, 3), (50, 10, 5), (200, 40, 6), (1000, 250, 2)])
def test_subsample_equals_the_twin(shape):
    from sgmc._sampling import subsample_twin
    from sgmc.backends import default_rng

    n_data, size, batch = shape
    for seed in range(20):
        np.testing.assert_array_equal(numpy_subsample(default_rng(seed), n_data, size, batch),
                                      subsample_twin(default_rng(seed), n_data, size, batch, False))


def test_subsample_law_is_uniform_over_ordered_subsets():
    # N = 12, n = 3: every ordered triple of distinct indices has probability 1 / 1320
    from scipy import stats

    from sgmc.backends import default_rng

    rows = numpy_subsample(default_rng(11), 12, 3, 66_000)
    assert all(len(set(r)) == 3 for r in rows[:1000])
    code = (rows[:, 0] * 12 + rows[:, 1]) * 12 + rows[:, 2]
    counts = np.bincount(code, minlength=12**3)
    distinct = np.array([len({a, b, c}) == 3 for a in range(12) for b in range(12) for c in range(12)])
    assert counts[~distinct].sum() == 0
    observed = counts[distinct]
    chi2 = float(((observed - 50.0) ** 2 / 50.0).sum())
    assert stats.chi2.sf(chi2, observed.size - 1) > 1e-4


_FIRST_RUN = """
import numpy as np, sgmc
from sgmc.backends import _numba_kernels
from sgmc.models import LogisticRegression
r = np.random.default_rng(0)
X = r.standard_normal((4000, 40))
y = (r.random(4000) < 0.5).astype(float)
tr = sgmc.sample(LogisticRegression(X, y), "sgld", "minibatch", step_size=1e-4, batch_size=50, n_iter=10**7,
                 chains=1, rng=1, progress=False, max_time=1.0)
compiled = bool(_numba_kernels.glm_chains.signatures)
print(tr.info["stopped"], tr.info["iterations_done"], compiled)
"""


def test_first_run_of_a_process_does_not_spend_max_time_on_compiling(tmp_path):
    # a fresh process with an empty Numba cache: the compiled GLM loop (d = 40) compiles in the first
    # run, which takes longer than the whole budget; the run must still get its iterations
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), SGMC_NATIVE="1", OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", _FIRST_RUN], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    stopped, done, compiled = out.stdout.split()
    assert stopped == "max_time" and compiled == "True"
    assert int(done) >= 300, out.stdout  # without the warm-up: 100 (the first check of the clock)


_ONE_PATH = """
import sys
import numpy as np
import sgmc
from sgmc.ssm import resampling
before = "numba" in sys.modules
w = np.full((2, 100), 0.01)
resampling.ancestors(w, np.array([0.3, 0.6]), "systematic")
from sgmc.backends import _numba_kernels as k
loaded = sorted(n for n in ("systematic", "stratified", "multinomial", "glm_chains", "glm_chains_diff",
                            "first_distinct", "bpmf_chains") if getattr(k, n).signatures)
print(before, "sgmc.backends._numba_ssm_kernels" in sys.modules, ",".join(loaded))
"""


def test_compiled_code_loads_per_kernel_on_first_use():
    # importing sgmc loads no Numba; running one compiled path compiles (or loads) that kernel only
    out = subprocess.run([sys.executable, "-c", _ONE_PATH], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, SGMC_NATIVE="1"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False", "systematic"]


@pytest.mark.parametrize("kind", ["joint", "sum"])
@pytest.mark.parametrize("beta", [-0.5, -0.3])
@pytest.mark.parametrize("pre", ["med", "matrix"])
@pytest.mark.parametrize("n", [1, 7, 300])
def test_stein_tiled_path_equals_the_twin(kind, beta, pre, n, monkeypatch):
    """The tiled path (products by the BLAS, one compiled pass per tile) against the twin, over several tiles."""
    monkeypatch.setattr(_numba_stein, "STEIN_MAX_DIMS", {"joint": 0, "sum": 0})
    monkeypatch.setattr(_numba_stein, "TILE_ROWS", 16)
    monkeypatch.setattr(_numba_stein, "TILE_COLS", 40)  # tiles of unequal width, and a ragged last one
    r = np.random.default_rng(4)
    d = 6
    x = r.standard_normal((n, d))
    s = -x + 0.2 * r.standard_normal((n, d))
    if pre == "matrix":
        a = r.standard_normal((d, d))
        spec = a @ a.T + d * np.eye(d)
    else:
        spec = "med" if n > 1 else None
    st = _stein.make_stein(npx, x, s, _stein.resolve_preconditioner(npx, x, spec), 1.3, beta, kind)
    for triangle in ("upper", "lower"):
        twin = _stein.row_sums_twin(npx, st, 16, triangle)
        fast = stein_row_sums(npx, st, 16, triangle)
        assert fast is not NotImplemented and np.shape(fast) == np.shape(twin)
        np.testing.assert_allclose(fast, twin, rtol=1e-11, atol=1e-12 * max(1.0, float(np.abs(twin).max())))
    # the lower rows' running sums are the prefix V-statistics; their last is the upper total
    lower = stein_row_sums(npx, st, 16, "lower")
    np.testing.assert_allclose(np.sum(lower, axis=0), stein_row_sums(npx, st, 16, "upper"), rtol=1e-11)
