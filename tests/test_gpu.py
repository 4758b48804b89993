"""The CUDA kernels and ``backend="cupy"`` on a GPU (marked ``gpu``; skipped without a usable device).

Each kernel is compared on the device with its array-API twin run on the same CuPy arrays (exact
integers for resampling, 1e-12 relative for float64 sums), and ``sgmc.sample``, ``ksd``,
``tune_step_size`` and a bootstrap particle filter run end to end with ``backend="cupy"`` against
the NumPy backend fed the same numbers. Every path of the kernels is covered: absent and present
previous weights, float32 and float64, the control-variate difference, Stein at each kernel's
largest dimension and beta != -1/2, degenerate resampling weights at 10^6 particles, short
minibatch rows, and generator state saved on one device and resumed on another.

A CUDA error such as an illegal address is sticky: it fails every later call in the process. So
every test starts with a device-health check (a small kernel and a synchronisation) and is skipped
with the reason when an earlier test left the device unusable; ``asv_benchmarks/gpu_check.sh`` also
runs each test in a process of its own.
"""

from __future__ import annotations

import numpy as np
import pytest


def _ready() -> tuple[bool, str]:
    try:
        from sgmc.backends.cupy import device_status
    except Exception as exc:  # noqa: BLE001
        return False, f"the CuPy backend does not import ({exc})"
    return device_status()


_OK, _WHY = _ready()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _OK, reason=f"no usable CUDA device: {_WHY}")]

if _OK:
    import cupy as cp
    from array_api_compat import cupy as xp_cp


@pytest.fixture(autouse=True)
def healthy_device():
    """Skip, saying why, when the device no longer runs a kernel (a sticky error of an earlier test)."""
    try:
        a = cp.arange(1024, dtype=cp.float64)
        total = float((a * 2.0).sum())
        cp.cuda.Device().synchronize()
    except Exception as exc:  # noqa: BLE001 - any CUDA error makes the device unusable here
        pytest.skip(f"the device is unusable after an earlier failure in this process ({type(exc).__name__}: {exc})")
    assert total == 1023.0 * 1024.0
    yield

import sgmc
from sgmc import backends
from sgmc.datasets import logistic_regression_data
from sgmc.diagnostics import ksd
from sgmc.models import LogisticRegression


def _rel(a, b):
    a = np.asarray(backends.to_numpy(a), dtype=np.float64)
    b = np.asarray(backends.to_numpy(b), dtype=np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


@pytest.mark.parametrize("scheme", ["systematic", "stratified", "multinomial", "residual"])
def test_resampling_kernels_on_device(scheme):
    from sgmc.ssm import resampling

    twin = getattr(resampling, f"{scheme}_ancestors")
    fast = backends.get_backend("cupy").native["resample_" + scheme]
    rng = np.random.default_rng(0)
    for b, n in [(1, 1), (3, 257), (2, 100_000)]:
        w = rng.random((b, n))
        w[:, ::4] = 0.0
        w[:, 0] = 1.0
        w /= w.sum(axis=1, keepdims=True)
        u = rng.random((b,)) if scheme == "systematic" else rng.random((b, n))
        wd, ud = cp.asarray(w), cp.asarray(u)
        got = fast(wd, ud)
        assert isinstance(got, cp.ndarray)
        np.testing.assert_array_equal(cp.asnumpy(got), cp.asnumpy(twin(wd, ud)))
        # and the host twin agrees except where the device's own cumulative sum rounds differently
        assert np.mean(cp.asnumpy(got) == twin(w, u)) > 0.999


@pytest.mark.parametrize("kind", ["joint", "sum"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_stein_kernel_on_device(kind, dtype):
    from sgmc.diagnostics import _stein

    rng = np.random.default_rng(1)
    x = cp.asarray(rng.normal(size=(3001, 10)).astype(dtype))
    s = -x + cp.asarray(0.1 * rng.normal(size=(3001, 10)).astype(dtype))
    pre = _stein.resolve_preconditioner(xp_cp, x, "med")
    st = _stein.make_stein(xp_cp, x, s, pre, 1.0, -0.5, kind)
    fast = backends.get_backend("cupy").native["stein_row_sums"]
    tol = 1e-12 if dtype == "float64" else 1e-4
    for tri in ("upper", "lower"):
        assert _rel(fast(xp_cp, st, 128, tri), _stein.row_sums_twin(xp_cp, st, 128, tri)) < tol


def test_glm_kernel_on_device():
    data = logistic_regression_data(n=5000, dim=10, n_test=10, rng=0)
    model = LogisticRegression(data.X, data.y, backend="cupy")
    rng = np.random.default_rng(2)
    theta = cp.asarray(rng.normal(size=(64, 10)))
    idx = cp.asarray(rng.integers(0, 5000, (64, 100)))
    w = cp.asarray(rng.random((64, 100)))
    fast = backends.get_backend("cupy").native["glm_grad_log_lik_sum"]
    got = fast("logistic", model.X, model.y, theta, idx, w, 0.0)
    table = backends.get_backend("cupy").native
    saved = table.pop("glm_grad_log_lik_sum")
    try:
        from sgmc import _dispatch

        _dispatch._TABLES.clear()
        want = model._grad_log_lik_sum(theta, idx, w)
    finally:
        table["glm_grad_log_lik_sum"] = saved
        _dispatch._TABLES.clear()
    assert _rel(got, want) < 1e-12


def test_stochvol_kernel_on_device():
    from sgmc.ssm.fused import sv_bootstrap_step, sv_bootstrap_step_twin

    rng = np.random.default_rng(3)
    b, n = 8, 10_000
    args = [cp.asarray(a) for a in (rng.normal(size=(b, n)), rng.normal(size=(b, n)), rng.normal(size=b),
                                    rng.uniform(0.8, 0.99, b), rng.uniform(0.2, 1.0, b), rng.uniform(0.3, 2.0, b))]
    got = sv_bootstrap_step(*args)
    want = sv_bootstrap_step_twin(*args)
    for g, t in zip(got, want):
        assert _rel(g, t) < 1e-12


def test_sample_end_to_end_on_cupy():
    data = logistic_regression_data(n=20_000, dim=10, n_test=10, rng=0)
    kw = dict(step_size=1e-4, n_iter=2000, burn_in=1000, chains=64, batch_size=200, rng=1, progress=False)
    gpu = sgmc.sample(LogisticRegression(data.X, data.y), backend="cupy", **kw)
    cpu = sgmc.sample(LogisticRegression(data.X, data.y), **kw)
    assert gpu.info["backend"] == "cupy" and isinstance(gpu.draws, cp.ndarray)
    # different random streams: compare posterior means within Monte Carlo error
    g = cp.asnumpy(gpu.draws).reshape(-1, 10)
    c = cpu.draws.reshape(-1, 10)
    se = np.sqrt(g.var(axis=0) / 64 + c.var(axis=0) / 64) * 10  # autocorrelated draws: generous
    assert np.all(np.abs(g.mean(axis=0) - c.mean(axis=0)) < 5 * se)


def test_ksd_and_tuning_end_to_end_on_cupy():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(5000, 10))
    for kind in ("sum", "joint"):
        got = ksd(x, -x, kind=kind, backend="cupy")
        assert isinstance(got, cp.ndarray)
        assert float(got) == pytest.approx(float(ksd(x, -x, kind=kind)), rel=1e-10)
    data = logistic_regression_data(n=5000, dim=5, n_test=10, rng=0)
    res = sgmc.tune_step_size(LogisticRegression(data.X, data.y), grid=[1e-5, 1e-4, 1e-3], pilot_iters=300,
                              chains=8, batch_size=100, rng=0, backend="cupy")
    assert res.best in (1e-5, 1e-4, 1e-3) and np.isfinite([r["ksd"] for r in res.table]).any()


def test_particle_filter_end_to_end_on_cupy():
    """A bootstrap SV particle filter (fused step + resampling kernels) on the GPU and on the host, fed
    the same pre-drawn numbers, gives the same log-likelihood estimate."""
    from sgmc.ssm.fused import sv_bootstrap_step
    from sgmc.ssm.resampling import ancestors

    rng = np.random.default_rng(5)
    b, n, T = 4, 4096, 50
    phi, sigma, tau = np.full(b, 0.95), np.full(b, 0.3), np.full(b, 0.7)
    y = rng.normal(size=(T, b))
    x0 = rng.normal(size=(b, n)) * sigma[0] / np.sqrt(1 - phi[0] ** 2)
    eps = rng.normal(size=(T, b, n))
    u = rng.random((T, b))

    def run(to):
        x, total = to(x0), 0.0
        for t in range(T):
            step = sv_bootstrap_step(x, to(eps[t]), to(y[t]), to(phi), to(sigma), to(tau))
            total = total + step.loglik
            anc = ancestors(step.weights, to(u[t]), "systematic")
            x = backends.get_backend(step.x).xp.take_along_axis(step.x, anc, axis=1)
        return backends.to_numpy(total)

    host = run(lambda a: a)
    dev = run(cp.asarray)
    np.testing.assert_allclose(dev, host, rtol=1e-9)


@pytest.mark.parametrize("resampling", ["systematic", "stratified", "multinomial", "residual"])
def test_library_particle_filter_on_cupy_is_unbiased(resampling):
    """``sgmc.ssm.particle.particle_filter`` on CuPy arrays (its resampling through the kernels):
    the likelihood estimate's exponential averages to the Kalman likelihood within its standard error."""
    from _helpers import Z_TOL
    from sgmc.ssm import LGSSM
    from sgmc.ssm.particle import ScalarLGSSMKernel, particle_filter

    phi, sig, tau = 0.9, 0.7, 1.0
    v0 = sig**2 / (1 - phi**2)
    _, y = LGSSM.simulate_scalar(backends.default_rng(3), 30, (phi, 1 / sig, 1 / tau), 0.0, v0)
    y = np.asarray(y)
    ll = float(LGSSM(y, P0=v0).log_lik(np.array([[phi, 1 / sig, 1 / tau]]))[0])
    B = 2000
    kernel = ScalarLGSSMKernel(*(cp.full(B, v) for v in (phi, sig, tau)), proposal="bootstrap")
    Y = cp.asarray(np.broadcast_to(y[None, :, None], (B, y.shape[0], 1)))
    res = particle_filter(backends.default_rng(7, backend="cupy"), kernel, Y, 64, resampling=resampling)
    assert isinstance(res.log_lik, cp.ndarray)
    ratio = np.exp(cp.asnumpy(res.log_lik) - ll)
    se = ratio.std(ddof=1) / np.sqrt(B)
    assert abs(ratio.mean() - 1.0) <= Z_TOL * se and se < 0.1


def test_subsample_kernel_on_device():
    from sgmc._sampling import subsample, subsample_twin

    for n_data, size, batch in [(100_000, 100, 1024), (5000, 300, 16)]:
        a = backends.default_rng(3, backend="cupy")
        b = backends.default_rng(3, backend="cupy")
        got = subsample(a, n_data, size, batch)
        want = subsample_twin(b, n_data, size, batch, False)
        np.testing.assert_array_equal(cp.asnumpy(got), cp.asnumpy(want))


# ------------------------------------------------------------------------------------------------
# every path of the kernels


def _native(name):
    return backends.get_backend("cupy").native[name]


def _twin_of(table_name, fn):
    """Run ``fn`` with the CuPy native ``table_name`` removed, so that the array-API twin runs."""
    from sgmc import _dispatch

    table = backends.get_backend("cupy").native
    saved = table.pop(table_name)
    _dispatch._TABLES.clear()
    try:
        return fn()
    finally:
        table[table_name] = saved
        _dispatch._TABLES.clear()


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("with_prev", [False, True])
def test_stochvol_kernel_paths(dtype, with_prev):
    """Absent previous weights (a NULL pointer, not None) and present ones, in both precisions."""
    from sgmc.ssm.fused import sv_bootstrap_step_twin

    rng = np.random.default_rng(21)
    b, n = 256, 2000  # enough rows for the kernel (fewer, longer rows run the twin)
    args = [cp.asarray(a.astype(dtype)) for a in (
        rng.normal(size=(b, n)), rng.normal(size=(b, n)), rng.normal(size=b), rng.uniform(0.8, 0.99, b),
        rng.uniform(0.2, 1.0, b), rng.uniform(0.3, 2.0, b))]
    wp = None
    if with_prev:
        w = rng.random((b, n)).astype(dtype)
        w[:, 0] = 0.0
        wp = cp.asarray(w / w.sum(axis=1, keepdims=True))
    got = _native("stochvol_step")(*args, wp)
    assert got is not NotImplemented
    want = sv_bootstrap_step_twin(*args, wp)
    tol = 1e-12 if dtype == "float64" else 1e-4
    for g, t in zip(got, want):
        assert g.dtype == t.dtype and _rel(g, t) < tol


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("chains", [1, 1024])
def test_glm_sum_and_difference_on_device(dtype, chains):
    """The gradient sum and the control-variate difference (one fused kernel), a few chains spread
    over blocks and many chains, weights absent (NULL) and present, against the twins on the device."""
    from sgmc.models import LinearRegression

    rng = np.random.default_rng(22)
    n, d, batch = 20_000, 10, 500
    X = rng.normal(size=(n, d)).astype(dtype)
    y = (rng.random(n) < 0.5).astype(dtype)
    tol = 1e-11 if dtype == "float64" else 1e-4
    for model in (LogisticRegression(X, y, backend="cupy"), LinearRegression(X, y, noise_var=0.5, backend="cupy")):
        kind, param = model._native_kind, model._native_param
        theta = cp.asarray(rng.normal(size=(chains, d)).astype(dtype))
        centre = theta + cp.asarray(1e-3 * rng.normal(size=(chains, d)).astype(dtype))
        idx = cp.asarray(rng.integers(0, n, (chains, batch)))
        w = cp.asarray(rng.random((chains, batch)).astype(dtype))
        for weights in (None, w):
            got = _native("glm_grad_log_lik_sum")(kind, model.X, model.y, theta, idx, weights, param)
            want = model._grad_log_lik_sum(theta, idx, weights)
            assert got.dtype == want.dtype and _rel(got, want) < tol
            got = _native("glm_grad_log_lik_diff_sum")(kind, model.X, model.y, theta, centre, idx, weights, param)
            want = model._grad_diff_sum(theta, centre, idx, weights)
            scale = float(cp.abs(model._grad_log_lik_sum(theta, idx, weights)).max())
            assert got.dtype == want.dtype
            assert float(cp.abs(got - want).max()) <= tol * scale


def test_glm_model_data_made_contiguous_once():
    X = np.asfortranarray(np.random.default_rng(23).normal(size=(1000, 5)))
    model = LogisticRegression(cp.asarray(X), cp.asarray(np.ones(1000)))
    assert model.X.flags.c_contiguous
    moved = backends.move(LogisticRegression(X, np.ones(1000)), "cupy")
    assert moved.X.flags.c_contiguous


@pytest.mark.parametrize("kind", ["joint", "sum"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_stein_kernel_at_its_largest_dimension_and_beta(kind, dtype):
    from sgmc.backends.cupy._native import stein_max_dim
    from sgmc.diagnostics import _stein

    d = stein_max_dim(kind, dtype)
    rng = np.random.default_rng(24)
    x = cp.asarray(rng.normal(size=(2000, d)).astype(dtype))
    s = -x + cp.asarray(0.1 * rng.normal(size=(2000, d)).astype(dtype))
    pre = _stein.resolve_preconditioner(xp_cp, x, "med")
    tol = 1e-11 if dtype == "float64" else 1e-4
    for beta in (-0.5, -0.3, -0.8):  # beta = -1/2 (reciprocal square root) and exp(beta log B)
        st = _stein.make_stein(xp_cp, x, s, pre, 1.0, beta, kind)
        got = _native("stein_row_sums")(xp_cp, st, 128, "upper")
        assert _rel(got, _stein.row_sums_twin(xp_cp, st, 128, "upper")) < tol, beta


@pytest.mark.parametrize("scheme", ["systematic", "stratified", "multinomial", "residual"])
def test_resampling_degenerate_weights_at_a_million(scheme):
    from sgmc.ssm import resampling

    n = 1_000_000
    w = np.zeros((2, n))
    w[0, 12345] = 1.0
    w[1, ::2] = 1.0  # half the particles, equal weights
    w /= w.sum(axis=1, keepdims=True)
    rng = np.random.default_rng(25)
    u = rng.random((2,)) if scheme == "systematic" else rng.random((2, n))
    wd, ud = cp.asarray(w), cp.asarray(u)
    got = _native("resample_" + scheme)(wd, ud)
    np.testing.assert_array_equal(cp.asnumpy(got), cp.asnumpy(getattr(resampling, f"{scheme}_ancestors")(wd, ud)))
    assert bool((got[0] == 12345).all())


def test_subsample_kernel_continues_short_rows_on_device(monkeypatch):
    from sgmc import _sampling
    from sgmc.backends.cupy import _native

    # one draw over the size, so that many rows fall short; patched where each path reads the name
    # (the twin in sgmc._sampling, the kernel's host side in sgmc.backends.cupy._native)
    kernel_calls = []

    def short(size, n_data):
        return size + 1

    def short_native(size, n_data):
        kernel_calls.append(size)
        return size + 1

    monkeypatch.setattr(_sampling, "oversample", short)
    monkeypatch.setattr(_native, "oversample", short_native)
    for n_data, size, batch in [(400, 100, 512), (100_000, 100, 1024)]:
        a = backends.default_rng(3, backend="cupy")
        b = backends.default_rng(3, backend="cupy")
        got = _sampling.subsample(a, n_data, size, batch)
        want = _sampling.subsample_twin(b, n_data, size, batch, False)
        np.testing.assert_array_equal(cp.asnumpy(got), cp.asnumpy(want))
        assert cp.asnumpy(a.uniform((4,))).tolist() == cp.asnumpy(b.uniform((4,))).tolist()
    assert kernel_calls == [100, 100]  # the kernel ran, on rows of size + 1 draws


def test_generator_state_is_plain_data_and_resumes():
    import copy

    from sgmc.backends.cupy import CupyGenerator

    g = backends.default_rng(5, backend="cupy")
    g.normal((1000,))
    st = g.__getstate__()
    assert set(st) == {"backend", "device", "seed_seq", "state_size", "state"}
    assert isinstance(st["state"], np.ndarray) and isinstance(st["device"], int) and st["backend"] == "cupy"
    assert all(isinstance(v, (int, list)) for v in st["seed_seq"].values())
    h = CupyGenerator.__new__(CupyGenerator)
    h.__setstate__(copy.deepcopy(st))
    assert cp.asnumpy(h.normal((5000,))).tolist() == cp.asnumpy(g.normal((5000,))).tolist()
    assert cp.asnumpy(h.spawn(2)[1].uniform((3,))).tolist() == cp.asnumpy(g.spawn(2)[1].uniform((3,))).tolist()


@pytest.mark.skipif(not _OK or cp.cuda.runtime.getDeviceCount() < 2, reason="needs two CUDA devices")
def test_generator_saved_on_one_device_resumes_on_another():
    import copy

    from sgmc.backends.cupy import CupyGenerator

    g = backends.default_rng(6, backend="cupy", device=0)
    g.uniform((777,))
    st = copy.deepcopy(g.__getstate__())
    st["device"] = 1
    h = CupyGenerator.__new__(CupyGenerator)
    h.__setstate__(st)
    assert h.device.id == 1
    a, b = h.normal((4000,)), g.normal((4000,))
    assert a.device.id == 1 and b.device.id == 0
    assert cp.asnumpy(a).tolist() == cp.asnumpy(b).tolist()
    # a kernel on the other device's arrays runs there
    with cp.cuda.Device(1):
        w = cp.full((1, 1000), 1e-3)
        anc = _native("resample_systematic")(w, cp.asarray([0.5]))
    assert anc.device.id == 1


def test_device_status_reports_usable():
    from sgmc.backends.cupy import device_status, nvrtc_status

    assert device_status() == (True, "") and nvrtc_status() == ""
