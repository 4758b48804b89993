"""The CUDA kernels, checked without a GPU.

* Every ``.cu`` file compiles through NVRTC (to a cubin, so ptxas runs too) for sm_80 and sm_90.
* The real kernel source runs on the CPU: compiled as C++ with ``cuda_emu/emu.h`` (one POSIX thread
  per CUDA thread, a barrier for ``__syncthreads``), driven by the same host code
  (:mod:`sgmc.backends.cupy._native`) that launches it on a GPU, on random inputs and edge cases, and
  compared with the array-API twin: exactly for indices, to 1e-12 relative for float64 sums.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from array_api_compat import numpy as xp_np

from sgmc.backends.cupy import _native
from sgmc.backends.cupy._compile import (
    ARCHITECTURES,
    CUPY_ADDED_OPTIONS,
    KERNEL_FILES,
    compile_source,
    kernel_names,
    runtime_options,
)

try:
    from cupy_backends.cuda.libs import nvrtc as _nvrtc  # noqa: F401

    _NVRTC = ""
    try:
        _nvrtc.getVersion()
    except Exception as exc:  # noqa: BLE001
        _NVRTC = f"the NVRTC library does not load ({exc})"
except ImportError as exc:
    _NVRTC = f'CuPy/NVRTC are not installed ({exc}); pip install "sgmc[cuda-compile]"'

import cuda_emu

_CXX = cuda_emu.compiler()


@pytest.fixture(scope="session")
def emu(tmp_path_factory):
    if _CXX is None:
        pytest.skip("no C++ compiler (g++ or clang++) to run the kernel source on the CPU")
    return cuda_emu.EmuRuntime(tmp_path_factory.mktemp("cuda-emu"), _CXX)


def _rel(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


# ------------------------------------------------------------------------------------------------
# NVRTC


@pytest.mark.skipif(bool(_NVRTC), reason=_NVRTC or "nvrtc")
@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("filename", sorted(KERNEL_FILES))
def test_kernel_compiles_with_nvrtc(filename, arch):
    # a cubin, so that ptxas runs too (register allocation, shared memory limits)
    binary, log = compile_source(filename, arch, cubin=True, verbose=True)  # verbose: shared with the report
    assert binary[:4] == b"\x7fELF", f"{filename} for {arch}: NVRTC returned no cubin\n{log}"
    for name in kernel_names(filename):
        assert name.encode() in binary, f"kernel {name} missing from the {arch} cubin of {filename}"


@pytest.mark.skipif(bool(_NVRTC), reason=_NVRTC or "nvrtc")
def test_stein_kernel_compiles_at_the_largest_dimension():
    dim = _native.STEIN_MAX_DIM
    binary, _ = compile_source("stein.cu", "sm_80", {"SGMC_DIM": dim, "SGMC_BLOCK": _native.stein_block(dim)}, cubin=True)
    assert binary[:4] == b"\x7fELF"


def test_offline_checks_compile_with_the_options_cupy_adds_at_run_time():
    """The NVRTC checks and the report compile with what CuPy's RawModule adds (``-ftz=true`` ...)."""
    import inspect

    opts = runtime_options({"SGMC_BLOCK": 128}, "sm_90", "resample.cu")
    assert opts[-len(CUPY_ADDED_OPTIONS):] == CUPY_ADDED_OPTIONS
    assert "--fmad=false" in opts and "--gpu-architecture=sm_90" in opts and "-DSGMC_BLOCK=128" in opts
    try:
        from cupy.cuda import compiler
    except ImportError as exc:
        pytest.skip(f"CuPy is not installed ({exc})")
    src = inspect.getsource(compiler)
    for opt in CUPY_ADDED_OPTIONS:  # the installed CuPy still adds each one
        assert f"'{opt}'" in src or f'"{opt}"' in src, opt


def test_h100_occupancy_arithmetic():
    from sgmc.backends.cupy.report import occupancy

    # 32 registers, 256 threads: 8 blocks fill the 2048 threads of an SM
    assert occupancy(32, 0, 256)[:2] == (1.0, 8)
    # 128 registers x 128 threads = 16 Ki registers per block: 4 blocks, 16 of 64 warps
    assert occupancy(128, 0, 128) == (0.25, 4, "registers")
    # 164 registers round up to 168 per thread (units of 256 per warp): 3 blocks of 4 warps
    assert occupancy(164, 31744, 128)[:2] == (12 / 64, 3)
    # shared memory: 100 KB + 1 KB reserved per block leaves room for 2 blocks in 228 KB
    assert occupancy(32, 100 * 1024, 256) == (0.25, 2, "shared memory")


def _fits(r):
    return r.spill_stores == 0 and r.spill_loads == 0 and r.stack == 0 and 0 < r.registers <= 255


@pytest.mark.skipif(bool(_NVRTC), reason=_NVRTC or "nvrtc")
def test_resource_report_covers_every_kernel_without_spills_or_stack():
    from sgmc.backends.cupy.report import markdown, resource_report

    rows = resource_report("sm_90")
    names = {r.kernel for r in rows}
    assert names == {n for f in KERNEL_FILES for n in kernel_names(f)}
    for r in rows:
        assert 0 < r.occupancy <= 1.0, r
        assert _fits(r), r
    assert markdown(rows).count("\n") == len(rows) + 1


@pytest.mark.skipif(bool(_NVRTC), reason=_NVRTC or "nvrtc")
def test_resource_report_reads_stack_frames():
    from sgmc.backends.cupy.report import _parse

    log = ("ptxas info    : Function properties for k\n"
           "ptxas         .     368 bytes stack frame, 360 bytes spill stores, 364 bytes spill loads\n"
           "ptxas info    : Used 254 registers, used 1 barriers, 368 bytes cumulative stack size, 24832 bytes smem\n")
    assert _parse(log)["k"] == {"registers": 254, "spill_stores": 360, "spill_loads": 364, "stack": 368,
                                "shared": 24832}


def _stein_cap_rows(arch, kind_sfx):
    from sgmc.backends.cupy.report import _rows

    kind, sfx = kind_sfx.split("_")
    cap = _native.stein_max_dim(kind, "float64" if sfx == "f64" else "float32")
    out = {}
    for d in sorted({1, 10, cap, cap + 1} - {_native.STEIN_MAX_DIM + 1}):
        bs = _native.stein_block(d)
        out[d] = {r.kernel: r for r in _rows("stein.cu", arch, {"SGMC_DIM": d, "SGMC_BLOCK": bs}, bs)}
    return cap, out


@pytest.mark.skipif(bool(_NVRTC), reason=_NVRTC or "nvrtc")
@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("kernel", ["joint_f64", "sum_f64", "joint_f32", "sum_f32"])
def test_stein_cap_is_where_registers_stop_sufficing(arch, kernel):
    """At d = 1, 10 and the kernel's cap everything fits registers; on the H100 (sm_90) one dimension
    more spills (or the cap is the largest compiled dimension)."""
    cap, rows = _stein_cap_rows(arch, kernel)
    name = f"stein_{kernel}"
    for d, table in rows.items():
        if d <= cap:
            assert _fits(table[name]), (d, table[name])
        elif arch == "sm_90":
            r = table[name]
            assert r.stack > 0 or r.spill_stores > 0, f"{name} still fits registers at d = {d}: raise its cap"


@pytest.mark.slow
@pytest.mark.skipif(bool(_NVRTC), reason=_NVRTC or "nvrtc")
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_stein_report_has_no_stack_frame_at_any_supported_dimension(arch):
    from sgmc.backends.cupy.report import stein_report

    rows = stein_report(arch)
    dims = {int(r.kernel.split("@")[1]) for r in rows}
    assert dims == set(range(1, _native.STEIN_MAX_DIM + 1))
    bad = [r for r in rows if not _fits(r)]
    assert not bad, bad


@pytest.mark.skipif(bool(_NVRTC), reason=_NVRTC or "nvrtc")
def test_nvrtc_reports_a_compile_error():
    import sgmc.backends.cupy._compile as comp

    good = comp.kernel_source("glm.cu")
    try:
        comp._SOURCES["glm.cu"] = good.replace("const T e = exp", "const T e = expo")
        with pytest.raises(RuntimeError, match="does not compile"):
            compile_source("glm.cu", "sm_90")
    finally:
        comp._SOURCES["glm.cu"] = good


# ------------------------------------------------------------------------------------------------
# resampling: exact integers


def _weights(rng, b, n, kind, dtype):
    if kind == "random":
        w = rng.random((b, n))
    elif kind == "zeros":  # zero weights, including the first and the last particle
        w = rng.random((b, n))
        w[:, ::3] = 0.0
        w[:, -1] = 0.0
        w[:, 1 % n] = 1.0
    else:  # all the mass on one particle
        w = np.zeros((b, n))
        w[:, n // 2] = 1.0
    w = w / w.sum(axis=1, keepdims=True)
    return w.astype(dtype)


@pytest.mark.parametrize("scheme", ["systematic", "stratified", "multinomial", "residual"])
def test_resampling_kernels_match_twins_exactly(emu, scheme):
    from sgmc.ssm import resampling

    twin = {
        "systematic": resampling.systematic_ancestors,
        "stratified": resampling.stratified_ancestors,
        "multinomial": resampling.multinomial_ancestors,
        "residual": resampling.residual_ancestors,
    }[scheme]
    fast = getattr(_native, "resample_" + scheme)
    rng = np.random.default_rng(11)
    cases = 0
    # n = 1, rows of 1 particle, n not a multiple of the 256-thread block, several blocks per row
    for b, n in [(1, 1), (3, 1), (1, 5), (4, 257), (2, 1000), (5, 33)]:
        for kind in ("random", "zeros", "spike"):
            for dtype in (np.float64, np.float32):
                w = _weights(rng, b, n, kind, dtype)
                u = rng.random((b,)) if scheme == "systematic" else rng.random((b, n))
                got = fast(emu, w, u)
                want = twin(w, u)
                assert got.dtype == np.int64
                np.testing.assert_array_equal(got, want, err_msg=f"{scheme} b={b} n={n} {kind} {dtype}")
                cases += 1
    # uniforms at the ends of [0, 1), where the floors change
    w = _weights(rng, 2, 64, "random", np.float64)
    for edge in (0.0, 1.0 - 2.0**-53):
        u = np.full((2,), edge) if scheme == "systematic" else np.full((2, 64), edge)
        np.testing.assert_array_equal(fast(emu, w, u), twin(w, u))
    assert cases == 36


def test_systematic_kernel_gives_each_particle_floor_or_ceil_copies(emu):
    rng = np.random.default_rng(5)
    w = _weights(rng, 3, 500, "random", np.float64)
    anc = _native.resample_systematic(emu, w, rng.random(3))
    counts = np.stack([np.bincount(a, minlength=500) for a in anc])
    assert np.all(counts >= np.floor(500 * w) - 1e-9) and np.all(counts <= np.ceil(500 * w) + 1e-9)
    assert np.all(np.diff(anc, axis=1) >= 0)


# ------------------------------------------------------------------------------------------------
# KSD pair sums


@pytest.mark.parametrize("kind", ["joint", "sum"])
def test_stein_kernel_matches_twin(emu, kind):
    from sgmc.diagnostics import _stein

    rng = np.random.default_rng(2)
    # n = 1; n below, at and above the 128-row block, not a multiple of it; several block rows
    for n, d, pre in [(1, 3, "id"), (37, 3, "med"), (128, 2, "smpcov"), (300, 3, "sclmed")]:
        x = rng.normal(size=(n, d)) + 2.0
        s = -(x - 2.0) + 0.3 * rng.normal(size=(n, d))
        P = _stein.resolve_preconditioner(xp_np, x, pre if n > 1 else "id")
        for beta in (-0.5, -0.3):
            st = _stein.make_stein(xp_np, x, s, P, 1.3, beta, kind)
            for tri in ("upper", "lower"):
                got = _native.stein_row_sums(emu, xp_np, st, 64, tri)
                want = _stein.row_sums_twin(xp_np, st, 64, tri)
                assert got.shape == want.shape and got.dtype == np.float64
                assert _rel(got, want) < 1e-12, (n, d, pre, beta, tri)


@pytest.mark.parametrize("kind", ["joint", "sum"])
def test_stein_kernel_at_its_cap_and_the_twin_above(emu, kind):
    """At the kernel's largest dimension it matches the twin; one dimension more runs the twin itself."""
    from sgmc.diagnostics import _stein

    class NoKernels:
        lib = np

        def kernel(self, *args):
            raise AssertionError("the twin should run above the cap")

    rng = np.random.default_rng(12)
    cap = _native.stein_max_dim(kind, np.float64)
    for d, rt in [(cap, emu), (cap + 1, NoKernels())]:
        x = rng.normal(size=(70, d))
        s = -x + 0.2 * rng.normal(size=(70, d))
        st = _stein.make_stein(xp_np, x, s, _stein.resolve_preconditioner(xp_np, x, "med"), 1.0, -0.4, kind)
        got = _native.stein_row_sums(rt, xp_np, st, 64, "upper")
        want = _stein.row_sums_twin(xp_np, st, 64, "upper")
        if d > cap:  # declined, so that the dispatcher runs the twin
            assert got is NotImplemented
            continue
        assert _rel(got, want) < 1e-12, d


def test_stein_kernel_float32(emu):
    from sgmc.diagnostics import _stein

    rng = np.random.default_rng(3)
    x64 = rng.normal(size=(200, 3))
    s64 = -x64 + 0.1 * rng.normal(size=(200, 3))
    x, s = x64.astype(np.float32), s64.astype(np.float32)
    P = _stein.resolve_preconditioner(xp_np, x, "med")
    for kind in ("joint", "sum"):
        st = _stein.make_stein(xp_np, x, s, P, 1.0, -0.5, kind)
        got = _native.stein_row_sums(emu, xp_np, st, 64, "upper")
        want = _stein.row_sums_twin(xp_np, st, 64, "upper")
        assert got.dtype == np.float64  # float32 pair terms, double accumulation, as the twin
        # the per-pair arithmetic is float32 in both: agreement to float32 rounding, not better
        assert _rel(got, want) < 1e-4


def test_stein_kernel_through_ksd(emu, monkeypatch):
    """``ksd`` itself, with the kernel as the NumPy backend's native path, gives the twin's value."""
    from sgmc import backends
    from sgmc.diagnostics import ksd

    rng = np.random.default_rng(4)
    x = rng.normal(size=(150, 4))
    s = -x
    want = ksd(x, s)
    calls = []

    def kernel_path(xp, st, block, tri):
        calls.append(tri)
        return _native.stein_row_sums(emu, xp, st, block, tri)

    from sgmc import _dispatch

    monkeypatch.setitem(backends.get_backend("numpy").native, "stein_row_sums", kernel_path)
    monkeypatch.setattr(_dispatch, "_TABLES", {})  # look the table up again
    got = ksd(x, s)
    assert calls == ["upper"]
    assert math.isclose(float(got), float(want), rel_tol=1e-12)


# ------------------------------------------------------------------------------------------------
# GLM minibatch gradient


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_glm_kernel_matches_twin(emu, dtype):
    from sgmc.models import LinearRegression, LogisticRegression

    rng = np.random.default_rng(6)
    tol = 1e-12 if dtype == np.float64 else 2e-5
    # batch not a multiple of the 128-thread block, dim above it, a single datum
    for n, d, chains, batch in [(500, 5, 7, 130), (1, 1, 1, 1), (300, 150, 3, 10)]:
        X = rng.normal(size=(n, d)).astype(dtype)
        y = (rng.random(n) < 0.5).astype(dtype)
        for model, kind, param in [
            (LogisticRegression(X, y), "logistic", 0.0),
            (LinearRegression(X, y, noise_var=0.7), "linear", 0.7),
        ]:
            theta = rng.normal(size=(chains, d)).astype(dtype)
            idx = rng.integers(0, n, (chains, batch))
            w = rng.random((chains, batch)).astype(dtype)
            w[0, 0] = 0.0  # a zero weight
            for weights in (None, w):
                got = _native.glm_grad_log_lik_sum(emu, kind, X, y, theta, idx, weights, param)
                want = model._grad_log_lik_sum(theta, idx, weights)
                assert got.dtype == want.dtype and got.shape == want.shape
                scale = np.abs(_terms_scale(model, theta, idx, weights))
                assert np.all(np.abs(got - want) <= tol * np.maximum(scale, 1e-300)), (n, d, kind)


def _terms_scale(model, theta, idx, weights):
    """sum_b |w r x| per coordinate: the size of the sum's terms, the yardstick for rounding."""
    g = np.abs(model.grad_log_lik(theta, idx))
    if weights is not None:
        g = g * np.abs(weights)[..., None]
    return g.sum(axis=1)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_glm_difference_kernel_matches_twin(emu, dtype):
    """The control-variate difference: one launch, residuals subtracted before rounding, like the twin."""
    from sgmc.models import LinearRegression, LogisticRegression

    rng = np.random.default_rng(16)
    tol = 1e-12 if dtype == np.float64 else 2e-5
    # several blocks per chain (1 chain, 1000 data), a few chains, dim above the block
    for n, d, chains, batch in [(2000, 6, 1, 1000), (500, 5, 7, 130), (300, 150, 3, 10)]:
        X = rng.normal(size=(n, d)).astype(dtype)
        y = (rng.random(n) < 0.5).astype(dtype)
        for model, kind, param in [
            (LogisticRegression(X, y), "logistic", 0.0),
            (LinearRegression(X, y, noise_var=0.7), "linear", 0.7),
        ]:
            theta = rng.normal(size=(chains, d)).astype(dtype)
            centre = (theta + 0.01 * rng.normal(size=(chains, d))).astype(dtype)
            idx = rng.integers(0, n, (chains, batch))
            w = rng.random((chains, batch)).astype(dtype)
            for weights in (None, w):
                got = _native.glm_grad_log_lik_diff_sum(emu, kind, X, y, theta, centre, idx, weights, param)
                want = model._grad_diff_sum(theta, centre, idx, weights)
                assert got.dtype == want.dtype and got.shape == want.shape
                # rounding of eta and of each residual: the yardstick is both points' terms
                terms = np.abs(model.grad_log_lik(theta, idx)) + np.abs(model.grad_log_lik(centre, idx))
                if weights is not None:
                    terms = terms * np.abs(weights)[..., None]
                scale = terms.sum(axis=1)
                assert np.all(np.abs(got - want) <= tol * np.maximum(scale, 1e-30)), (n, d, kind)


def test_glm_difference_near_the_centre_in_float32(emu):
    """theta = centre + 1e-4: the difference is small next to either sum, so subtracting two float32
    sums would lose it; subtracting per datum keeps it to float32 rounding of the difference itself."""
    from sgmc.models import LogisticRegression

    rng = np.random.default_rng(17)
    n, d, chains, batch = 40_000, 4, 2, 16_000  # sums of thousands: float32 keeps ~1e-4 of them
    X64 = rng.normal(size=(n, d))
    y64 = (rng.random(n) < 0.5).astype(np.float64)
    centre64 = rng.normal(size=(chains, d))
    theta64 = centre64 + 1e-4 * rng.normal(size=(chains, d))
    X, y = X64.astype(np.float32), y64.astype(np.float32)
    theta, centre = theta64.astype(np.float32), centre64.astype(np.float32)
    idx = rng.integers(0, n, (chains, batch))
    got = _native.glm_grad_log_lik_diff_sum(emu, "logistic", X, y, theta, centre, idx, None, 0.0)
    # the exact difference of the float32 inputs, in float64
    m64 = LogisticRegression(X.astype(np.float64), y.astype(np.float64))
    exact = m64._grad_diff_sum(theta.astype(np.float64), centre.astype(np.float64), idx, None)
    twin = LogisticRegression(X, y)._grad_diff_sum(theta, centre, idx, None)
    err = np.abs(got.astype(np.float64) - exact)
    # the twin's own error (float32 residuals, per datum) bounds what the kernel may lose
    assert np.max(err) <= 4 * max(np.max(np.abs(twin.astype(np.float64) - exact)), 1e-7 * np.max(np.abs(exact)))
    # two float32 sums subtracted would be off by about eps32 * |sum| >> |difference| * 1e-3
    a = _native.glm_grad_log_lik_sum(emu, "logistic", X, y, theta, idx, None, 0.0)
    b = _native.glm_grad_log_lik_sum(emu, "logistic", X, y, centre, idx, None, 0.0)
    assert np.max(np.abs((a - b).astype(np.float64) - exact)) > 10 * np.max(err)


def test_glm_spreads_few_chains_over_blocks():
    assert _native.glm_splits(1, 1000) == 8  # one tile of 128 data per block at least
    assert _native.glm_splits(1, 100_000) == _native.SPREAD_BLOCKS
    assert _native.glm_splits(1024, 100) == 1
    assert _native.glm_splits(100, 1000) == 3  # 300 blocks >= SPREAD_BLOCKS


def test_emulator_rejects_none_pointers(emu):
    """CuPy 13.0-13.6 pass None as a non-null pointer, so host code passes NULL as the integer 0."""
    k = emu.kernel("stochvol.cu", "stochvol_step_f64", {"SGMC_BLOCK": 256})
    a = np.zeros((1, 4))
    one = np.ones(1)
    out = [np.empty((1, 4)) for _ in range(3)] + [np.empty(1)]
    with pytest.raises(TypeError, match="w_prev.*None"):
        k((1,), (256,), (a, a, None, one, one, one, one, *out, np.int64(4)))
    with pytest.raises(TypeError, match="only 0"):
        k((1,), (256,), (a, a, 7, one, one, one, one, *out, np.int64(4)))
    k((1,), (256,), (a, a, _native.NULL, one, one, one, one, *out, np.int64(4)))  # NULL runs
    np.testing.assert_allclose(out[2], 0.25)  # no previous weights: uniform


def test_glm_native_declines_mixed_dtypes(emu):
    X = np.ones((4, 2))
    out = _native.glm_grad_log_lik_sum(emu, "logistic", X, np.ones(4), np.ones((1, 2), np.float32),
                                       np.zeros((1, 2), np.int64), None, 0.0)
    assert out is NotImplemented


# ------------------------------------------------------------------------------------------------
# stochastic volatility step


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_stochvol_kernel_matches_twin(emu, dtype):
    from sgmc.ssm.fused import sv_bootstrap_step_twin

    rng = np.random.default_rng(7)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    for b, n in [(3, 1000), (1, 1), (2, 300), (4, 7)]:
        args = [rng.normal(size=(b, n)), rng.normal(size=(b, n)), rng.normal(size=b),
                rng.uniform(0.5, 0.99, b), rng.uniform(0.2, 1.0, b), rng.uniform(0.3, 2.0, b)]
        args = [a.astype(dtype) for a in args]
        wp = rng.random((b, n)).astype(dtype)
        if n > 1:
            wp[:, 0] = 0.0  # a particle of weight zero stays at zero
        wp /= wp.sum(axis=1, keepdims=True)
        for w_prev in (None, wp):
            got = _native.stochvol_step(emu, *args, w_prev)
            want = sv_bootstrap_step_twin(*args, w_prev)
            for name, g, t in zip(want._fields, got, want):
                assert g.dtype == t.dtype and g.shape == t.shape, name
                assert _rel(g, t) < tol, (name, b, n, w_prev is None)


# ------------------------------------------------------------------------------------------------
# minibatch indices


def _twin_and_kernel(emu, seed, n_data, size, batch):
    from sgmc import backends
    from sgmc._sampling import subsample_twin

    a, b = backends.default_rng(seed), backends.default_rng(seed)
    got = _native.subsample(emu, a, n_data, size, batch, False)
    if got is NotImplemented:  # declined before drawing: the dispatcher runs the twin
        got = subsample_twin(a, n_data, size, batch, False)
    want = subsample_twin(b, n_data, size, batch, False)
    # the generators were consumed alike: their next draws agree
    assert a.uniform((3,)).tolist() == b.uniform((3,)).tolist()
    return got, want


def test_subsample_kernel_matches_twin(emu):
    # one row, rows of size 1, a row longer than the 128-thread tile, many rows
    for seed, (n_data, size, batch) in enumerate([(1000, 10, 1), (50, 1, 7), (100_000, 300, 3), (5000, 40, 64)]):
        got, want = _twin_and_kernel(emu, seed, n_data, size, batch)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, want)
        assert all(len(set(r)) == size for r in got.tolist())


def test_subsample_kernel_continues_short_rows_like_the_twin(emu, monkeypatch):
    from sgmc import _sampling, backends

    # no margin for repeats: many rows come up short and continue their own draws
    monkeypatch.setattr(_sampling, "oversample", lambda size, n_data: size)
    monkeypatch.setattr(_native, "oversample", lambda size, n_data: size)
    for seed, (n_data, size, batch) in enumerate([(40, 8, 50), (33, 8, 300), (10_000, 200, 5)]):
        draws = backends.default_rng(seed).integers(n_data, (batch, size))
        short = int(np.sum(_sampling.first_distinct(draws, size)[1] == 0))
        got, want = _twin_and_kernel(emu, seed, n_data, size, batch)
        np.testing.assert_array_equal(got, want)
        assert all(len(set(r)) == size for r in got.tolist()) and got.max() < n_data
        # the generator gave exactly batch * size integers: its next draws are a fresh one's after those
        a = backends.default_rng(seed)
        if _native.subsample(emu, a, n_data, size, batch, False) is NotImplemented:
            _sampling.subsample_twin(a, n_data, size, batch, False)  # declined: the twin draws
        b = backends.default_rng(seed)
        b.integers(n_data, (batch, size))
        assert a.uniform((2,)).tolist() == b.uniform((2,)).tolist()
        assert seed == 2 or short > 0, "the case should have short rows"


def test_continuation_is_uniform_on_short_rows():
    """The continued draws of many rows are uniform on range(n_data) (chi-square, fixed seed)."""
    from scipy import stats

    from sgmc._draw_continuation import continuation, row_keys

    draws = np.random.default_rng(18).integers(0, 1000, (4000, 20))
    ext = continuation(np, row_keys(np, draws), 20, 50, 7)
    counts = np.bincount(ext.ravel(), minlength=7)
    assert stats.chisquare(counts).pvalue > 1e-3
    assert ext.min() >= 0 and ext.max() < 7


# ------------------------------------------------------------------------------------------------
# host side: routing, caching, status, generator state (no GPU needed)


def test_resampling_degenerate_weights_at_scale(emu):
    """All the mass on one particle: every slot finds it by its own search (no serial run of writes)."""
    from sgmc.ssm import resampling

    rng = np.random.default_rng(13)
    n = 20_000
    w = np.zeros((2, n))
    w[0, 123] = 1.0
    w[1, -1] = 1.0
    for scheme in ("systematic", "stratified", "multinomial", "residual"):
        u = rng.random((2,)) if scheme == "systematic" else rng.random((2, n))
        got = getattr(_native, "resample_" + scheme)(emu, w, u)
        np.testing.assert_array_equal(got, getattr(resampling, scheme + "_ancestors")(w, u))
        assert np.all(got[0] == 123) and np.all(got[1] == n - 1), scheme


def test_large_and_few_row_subsets_run_the_twin():
    from sgmc import backends
    from sgmc._sampling import subsample, subsample_twin

    class NoKernels:
        lib = np

        def kernel(self, *args):
            raise AssertionError("the twin should run")

    for n_data, size, batch in [(100_000, _native.SUBSAMPLE_MAX_SIZE + 1, 200), (100_000, 200, 4)]:
        a, b = backends.default_rng(1), backends.default_rng(1)
        assert _native.subsample(NoKernels(), a, n_data, size, batch) is NotImplemented  # the twin runs
        np.testing.assert_array_equal(subsample(a, n_data, size, batch), subsample_twin(b, n_data, size, batch, False))


def test_stochvol_native_leaves_few_long_rows_to_the_twin(emu):
    from sgmc.ssm.fused import sv_bootstrap_step, sv_bootstrap_step_twin

    rng = np.random.default_rng(14)
    b, n = 2, 64 * 256 + 1
    args = [rng.normal(size=(b, n)), rng.normal(size=(b, n)), rng.normal(size=b), np.full(b, 0.9),
            np.full(b, 0.3), np.full(b, 0.7)]
    assert _native.stochvol_step(emu, *args) is NotImplemented
    # and the dispatcher then runs the twin
    want = sv_bootstrap_step_twin(*args)
    got = sv_bootstrap_step(*args)
    np.testing.assert_allclose(got.loglik, want.loglik, rtol=1e-12)


def test_runtime_caches_modules_and_functions():
    from sgmc.backends.cupy._compile import CupyRuntime, nvrtc_options

    made, looked_up = [], []

    class Module:
        def __init__(self, code, options):
            made.append(options)

        def get_function(self, name):
            looked_up.append(name)
            return name

    class Runtime:
        device = 0

        @classmethod
        def getDevice(cls):
            return cls.device

    class Lib:
        RawModule = Module

        class cuda:  # noqa: N801 - mimics cupy.cuda
            runtime = Runtime

    rt = CupyRuntime.__new__(CupyRuntime)
    rt.lib, rt._modules, rt._functions = Lib, {}, {}
    for _ in range(3):
        assert rt.kernel("glm.cu", "glm_grad_f64", {"SGMC_BLOCK": 128}) == "glm_grad_f64"
    rt.kernel("glm.cu", "glm_grad_f32", {"SGMC_BLOCK": 128})
    assert len(made) == 1 and looked_up == ["glm_grad_f64", "glm_grad_f32"]
    assert made[0] == nvrtc_options({"SGMC_BLOCK": 128}, None, "glm.cu")
    Runtime.device = 1  # another device: its own module
    rt.kernel("glm.cu", "glm_grad_f64", {"SGMC_BLOCK": 128})
    assert len(made) == 2


def test_device_status_says_unusable_without_nvrtc(monkeypatch):
    cupy = pytest.importorskip("cupy")
    from cupy_backends.cuda.libs import nvrtc

    from sgmc.backends import cupy as cupy_backend

    monkeypatch.setattr(cupy.cuda.runtime, "getDeviceCount", lambda: 1)

    def broken():
        raise OSError("libnvrtc.so.12: cannot open shared object file")

    monkeypatch.setattr(nvrtc, "getVersion", broken)
    ok, why = cupy_backend.device_status()
    assert not ok and why.startswith("unusable") and "NVRTC" in why and "cannot open" in why


def test_generator_seed_sequence_travels_as_plain_data():
    import json

    from sgmc.backends.cupy import _seed_sequence, _seed_sequence_state

    parent = np.random.SeedSequence(2**70 + 5)
    child = parent.spawn(3)[2]
    child.spawn(2)
    for ss in (parent, child, np.random.SeedSequence([1, 2, 3])):
        st = json.loads(json.dumps(_seed_sequence_state(ss)))  # ints and lists only
        back = _seed_sequence(st)
        assert back.generate_state(4).tolist() == ss.generate_state(4).tolist()
        assert [c.generate_state(2).tolist() for c in back.spawn(2)] == [c.generate_state(2).tolist()
                                                                        for c in ss.spawn(2)]


def test_every_host_native_completes_short_rows_like_the_twin(monkeypatch):
    from sgmc import _sampling, backends
    from sgmc.backends import _numba, _numpy

    tiny = lambda size, n_data: size + 1  # noqa: E731 - most rows fall short
    monkeypatch.setattr(_sampling, "oversample", tiny)
    monkeypatch.setattr(_numpy, "oversample", tiny)
    for seed in range(3):
        want = _sampling.subsample_twin(backends.default_rng(seed), 40, 8, 50, False)
        for compiled in (False, True):  # the packed sort, then the compiled pass where Numba is here
            old = _numba.set_enabled(compiled)
            try:
                got = _numpy.subsample(backends.default_rng(seed), 40, 8, 50, False)
            finally:
                _numba.set_enabled(old)
            np.testing.assert_array_equal(got, want)
