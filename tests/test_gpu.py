"""The CUDA kernels and ``backend="cupy"`` on a GPU (marked ``gpu``; skipped without a usable device).

Each kernel is compared on the device with its array-API twin run on the same CuPy arrays (exact
integers for resampling, 1e-12 relative for float64 sums), and ``sgmc.sample``, ``ksd``,
``tune_step_size`` and a bootstrap particle filter run end to end with ``backend="cupy"`` against
the NumPy backend fed the same numbers.
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
