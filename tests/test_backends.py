"""Backend registry, SPEC 7 random generators, subsampling, pickling, dispatch and explicit conversions."""

from __future__ import annotations

import dataclasses
import itertools
import math
import pickle
import types

import numpy as np
import pytest
from scipy import stats

import sgmc.backends._numpy as numpy_backend
from sgmc import Trace, backends
from sgmc._array_api import array_namespace, check_same_device, device_of
from sgmc._dispatch import native
from sgmc._sampling import subsample
from sgmc.backends import Backend, Generator, default_rng, get_backend
from sgmc.backends._base import numpy_dtype

strict = pytest.importorskip("array_api_strict")
torch = pytest.importorskip("torch")

# Threshold for the chi-square goodness-of-fit tests below: a correct sampler fails one of them with
# probability 1e-4 at a given seed; a sampler that favours some indices by a few percent is rejected.
P_MIN = 1e-4


# -- registry ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("key", "name"),
    [("numpy", "numpy"), ("np", "numpy"), ("array_api_strict", "array_api_strict"),
     ("strict", "array_api_strict"), ("array-api-strict", "array_api_strict"), ("torch", "torch")],
)
def test_get_backend_by_name(key, name):
    be = get_backend(key)
    assert isinstance(be, Backend)
    assert be.name == name
    assert get_backend(key) is be  # cached: one Backend object per library


def test_get_backend_by_namespace_array_and_generator():
    import array_api_compat.numpy as np_compat
    import array_api_compat.torch as torch_compat

    assert get_backend(np).name == "numpy"
    assert get_backend(np_compat).name == "numpy"
    assert get_backend(strict).name == "array_api_strict"
    assert get_backend(torch).name == "torch"
    assert get_backend(torch_compat).name == "torch"
    assert get_backend(np.zeros(2)).name == "numpy"
    assert get_backend(strict.zeros(2)).name == "array_api_strict"
    assert get_backend(torch.zeros(2)).name == "torch"
    gen = default_rng(0, backend="torch")
    assert get_backend(gen) is get_backend("torch")
    be = get_backend("numpy")
    assert get_backend(be) is be


def test_get_backend_rejects_unknown_inputs():
    with pytest.raises(ValueError, match="unknown backend 'mxnet'.*numpy"):
        get_backend("mxnet")
    with pytest.raises(TypeError, match="cannot infer a backend from float"):
        get_backend(1.5)


def test_available_backends_lists_installed_cpu_libraries():
    names = backends.available_backends()
    assert {"numpy", "array_api_strict", "torch"} <= set(names)
    from conftest import _cupy_ready

    assert ("cupy" in names) == _cupy_ready()


def test_numpy_dtype_maps_every_library():
    assert numpy_dtype(strict.float32) == np.float32
    assert numpy_dtype(torch.float64) == np.float64
    assert numpy_dtype(torch.int64) == np.int64
    assert numpy_dtype(np.float32) == np.float32


# -- default_rng: SPEC 7 semantics ---------------------------------------------------------------
def _draws(gen, n=8):
    return backends.to_numpy(gen.normal((n,)))


def test_default_rng_int_and_seedsequence_are_reproducible():
    np.testing.assert_array_equal(_draws(default_rng(3)), _draws(default_rng(3)))
    np.testing.assert_array_equal(_draws(default_rng(3)), _draws(default_rng(np.random.SeedSequence(3))))
    np.testing.assert_array_equal(_draws(default_rng(np.int64(3))), _draws(default_rng(3)))
    assert not np.array_equal(_draws(default_rng(3)), _draws(default_rng(4)))


def test_default_rng_none_draws_fresh_entropy():
    assert not np.array_equal(_draws(default_rng(None)), _draws(default_rng(None)))
    assert not np.array_equal(_draws(default_rng()), _draws(default_rng()))


def test_default_rng_uses_a_numpy_generator_in_place():
    ref = np.random.default_rng(11)
    expected = ref.standard_normal(6)
    after = ref.standard_normal(3)
    gen_np = np.random.default_rng(11)
    wrapped = default_rng(gen_np)
    np.testing.assert_array_equal(_draws(wrapped, 6), expected)
    # the wrapper shares the state: the numpy generator continues where the wrapper stopped
    np.testing.assert_array_equal(gen_np.standard_normal(3), after)


def test_default_rng_passes_sgmc_generators_through():
    gen = default_rng(5, backend="array_api_strict")
    assert default_rng(gen, backend="array_api_strict") is gen
    assert default_rng(gen, backend=strict) is gen
    with pytest.raises(TypeError, match="belongs to backend 'array_api_strict'.*'numpy'"):
        default_rng(gen, backend="numpy")


@pytest.mark.parametrize("bad", ["seed", 1.5, [1, 2]])
def test_default_rng_rejects_bad_seed_types(bad):
    with pytest.raises(TypeError, match="`rng` must be None, a non-negative int"):
        default_rng(bad)


def test_default_rng_rejects_negative_seed():
    with pytest.raises(ValueError, match=r"`rng` \(a seed\) must be a non-negative integer"):
        default_rng(-1)


def test_spawn_streams_are_reproducible_and_independent():
    n = 20_000
    kids_a = default_rng(7).spawn(3)
    kids_b = default_rng(7).spawn(3)
    draws = [_draws(k, n) for k in kids_a]
    for k, d in zip(kids_b, draws):
        np.testing.assert_array_equal(_draws(k, n), d)
    # independent streams: sample correlations are N(0, 1/n) under independence
    for a, b in itertools.combinations(draws, 2):
        r = np.corrcoef(a, b)[0, 1]
        assert abs(r) < 4.5 / math.sqrt(n)
    # the parent's own stream differs from its children's
    parent = default_rng(7)
    assert not np.array_equal(_draws(parent, n), draws[0])


def test_spawn_keeps_backend_and_device(xb):
    gen = xb.rng(0)
    kids = gen.spawn(2)
    assert all(isinstance(k, Generator) for k in kids)
    for k in kids:
        assert k.backend is xb.backend
        x = k.normal((3,), dtype=xb.dtype)
        assert device_of(x) == device_of(gen.normal((1,), dtype=xb.dtype))


# -- draws: backend, device and dtype -------------------------------------------------------------
def test_draws_land_on_generator_device_and_dtype(xb):
    gen = xb.rng(1)
    ref = xb.asarray(np.zeros(1))
    dev = device_of(ref)
    z = gen.normal((4, 3), dtype=xb.dtype)
    u = gen.uniform((500,), dtype=xb.dtype)
    k = gen.integers(7, (500,))
    s = subsample(gen, 50, 10, 4)
    for a in (z, u, k, s):
        assert get_backend(a) is xb.backend
        assert device_of(a) == dev
    assert z.dtype == xb.dtype and tuple(z.shape) == (4, 3)
    assert u.dtype == xb.dtype
    assert k.dtype == xb.xp.int64 and s.dtype == xb.xp.int64
    assert tuple(s.shape) == (4, 10)
    u_np, k_np = xb.to_numpy(u), xb.to_numpy(k)
    assert u_np.min() >= 0.0 and u_np.max() < 1.0
    assert k_np.min() >= 0 and k_np.max() <= 6 and len(np.unique(k_np)) == 7
    # default dtype is float64
    assert gen.normal((2,)).dtype == xb.xp.float64


def test_host_backends_share_one_stream_per_seed(xb):
    """Host generators draw with PCG64, so integer draws agree across backends for one seed."""
    if xb.name in ("cupy", "jax", "torch"):
        pytest.skip(f"{xb.name} draws with its own generator")
    a = backends.to_numpy(subsample(default_rng(9), 100, 7, 5))
    b = xb.to_numpy(subsample(xb.rng(9), 100, 7, 5))
    np.testing.assert_array_equal(a, b)


# -- subsampling ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("n", "size"), [(1000, 10), (12, 3), (10, 8), (9, 9)])
def test_subsample_without_replacement_gives_distinct_indices(xb, n, size):
    idx = xb.to_numpy(subsample(xb.rng(2), n, size, 300))
    assert idx.shape == (300, size)
    assert idx.min() >= 0 and idx.max() < n
    srt = np.sort(idx, axis=1)
    assert np.all(np.diff(srt, axis=1) > 0)
    if size == n:
        np.testing.assert_array_equal(srt, np.broadcast_to(np.arange(n), (300, n)))


@pytest.mark.parametrize(("n", "size"), [(12, 3), (6, 3)])  # the sparse and the dense code paths
def test_subsample_without_replacement_is_a_uniform_subset(n, size):
    """Every size-subset is equally likely (chi-square over all C(n, size) subsets)."""
    rows = 100_000
    idx = numpy_backend.subsample(default_rng(np.random.default_rng(4)), n, size, rows, False)
    subsets = {c: i for i, c in enumerate(itertools.combinations(range(n), size))}
    codes = np.array([subsets[tuple(r)] for r in np.sort(idx, axis=1)])
    counts = np.bincount(codes, minlength=len(subsets))
    assert stats.chisquare(counts).pvalue > P_MIN
    # each position in a row is uniform too (random order within the row)
    for j in range(size):
        assert stats.chisquare(np.bincount(idx[:, j], minlength=n)).pvalue > P_MIN


def test_subsample_inclusion_frequencies_are_uniform(xb):
    """Each index is included in a row with probability p = size / n.

    Rows are independent, so the inclusion count of index i is Binomial(rows, p), and
    sum_i (O_i - E_i)^2 / E_i has mean (n - 1)(1 - p): dividing by (1 - p) gives a statistic that is
    chi-square with n - 1 degrees of freedom to a good approximation (the counts sum to rows * size).
    """
    n, size, rows = 50, 5, 20_000
    idx = xb.to_numpy(subsample(xb.rng(5), n, size, rows))
    counts = np.bincount(idx.ravel(), minlength=n)
    p = size / n
    expected = rows * p
    stat = np.sum((counts - expected) ** 2 / expected) / (1 - p)
    assert stats.chi2.sf(stat, n - 1) > P_MIN


def test_subsample_with_replacement_is_iid_uniform():
    n, size, rows = 10, 4, 50_000
    idx = backends.to_numpy(subsample(default_rng(6), n, size, rows, replace=True))
    counts = np.bincount(idx.ravel(), minlength=n)  # multinomial(rows * size, 1/n)
    assert stats.chisquare(counts).pvalue > P_MIN
    # duplicates occur with the birthday probability 1 - prod_k (1 - k/n)
    has_dup = np.array([len(set(r)) < size for r in idx])
    p_dup = 1 - np.prod([1 - k / n for k in range(size)])
    se = math.sqrt(p_dup * (1 - p_dup) / rows)
    assert abs(has_dup.mean() - p_dup) < 4.5 * se


def test_subsample_rows_are_independent_across_the_batch():
    idx = numpy_backend.subsample(default_rng(np.random.default_rng(8)), 1000, 10, 2, False)
    assert not np.array_equal(np.sort(idx[0]), np.sort(idx[1]))


# -- conversions ----------------------------------------------------------------------------------
def test_asarray_to_numpy_round_trip(xb):
    a = np.arange(12.0).reshape(3, 4) / 7.0
    x = xb.asarray(a)
    assert get_backend(x) is xb.backend
    assert x.dtype == xb.dtype
    back = xb.to_numpy(x)
    assert isinstance(back, np.ndarray)
    np.testing.assert_allclose(back, a, rtol=xb.eps)
    # integer data keep an integer dtype
    i = xb.asarray(np.arange(5))
    assert xb.xp.isdtype(i.dtype, "integral")
    np.testing.assert_array_equal(xb.to_numpy(i), np.arange(5))


def test_asarray_converts_between_backends_explicitly():
    x = torch.arange(4, dtype=torch.float64)
    y = backends.asarray(x, backend="array_api_strict", device=strict.Device("device1"))
    assert get_backend(y).name == "array_api_strict"
    assert y.device == strict.Device("device1")
    z = backends.asarray(y, backend="numpy")
    np.testing.assert_array_equal(z, [0.0, 1.0, 2.0, 3.0])
    w = backends.asarray([1, 2], backend="torch", dtype="float32")
    assert w.dtype == torch.float32
    assert backends.asarray([1.0, 2.0], backend="strict").dtype == strict.float64


def test_to_numpy_passes_numpy_through_and_accepts_lists():
    a = np.ones(3)
    assert backends.to_numpy(a) is a
    np.testing.assert_array_equal(backends.to_numpy([1, 2]), [1, 2])


def test_device1_refuses_implicit_host_conversion():
    """The strict second device stands in for a GPU: only the explicit path reaches the host."""
    x = backends.asarray([1.0, 2.0], backend="strict", device=strict.Device("device1"))
    with pytest.raises((RuntimeError, ValueError, TypeError)):
        np.asarray(x)
    np.testing.assert_array_equal(backends.to_numpy(x), [1.0, 2.0])


def test_mixed_backends_raise_type_error_naming_the_fix():
    with pytest.raises(TypeError, match=r"`X` is a numpy array but `y` is a array_api_strict array.*asarray"):
        array_namespace(np.zeros(2), strict.zeros(2), names=("X", "y"))
    with pytest.raises(TypeError, match="`X` is a torch array but `y` is a numpy array"):
        array_namespace(torch.zeros(2), np.zeros(2), names=("X", "y"))


def test_mixed_devices_raise_value_error_naming_the_arrays():
    a = strict.zeros(2)
    b = strict.asarray([0.0, 1.0], device=strict.Device("device1"))
    with pytest.raises(ValueError, match=r"`X` is on device .*CPU_DEVICE.* but `y` is on device .*device1.*explicitly"):
        array_namespace(a, b, names=("X", "y"))
    with pytest.raises(ValueError, match="device"):
        check_same_device(a, b)
    assert array_namespace(b, b) is strict


def test_array_namespace_ignores_scalars_and_none_but_needs_an_array():
    assert array_namespace(np.zeros(1), None, 2.0) is not None
    with pytest.raises(TypeError, match="no arrays"):
        array_namespace(None, 1.0)


def test_save_and_load_npz_round_trip(tmp_path):
    # save_npz / load_npz moved into Trace.save / Trace.load: the .npz I/O edge is the trace's
    path = str(tmp_path / "x.npz")
    arrays = {"a": np.arange(3.0), "b": np.eye(2, dtype=np.float32)}
    Trace(draws=np.zeros((1, 2, 1)), iterations=[0, 1], stats=arrays, info={"k": 1}).save(path)
    out = Trace.load(path)
    assert set(out.stats) == {"a", "b"}
    np.testing.assert_array_equal(out.stats["a"], arrays["a"])
    assert out.stats["b"].dtype == np.float32
    assert out.info == {"k": 1}


def test_synchronize_is_callable_on_every_backend(xb):
    backends.synchronize(xb.name)


# -- dispatch: native fast paths by name ------------------------------------------------------------
def test_native_finds_the_numpy_subset_draw_and_nothing_else():
    import array_api_compat.numpy as np_compat

    # NumPy's draw (which runs the compiled first-distinct pass when Numba is installed)
    expected = numpy_backend.subsample
    assert native(np, "subsample") is expected
    assert native(np_compat, "subsample") is expected
    assert native(get_backend("numpy").xp, "subsample") is expected
    assert native(np, "no_such_kernel") is None
    assert native(strict, "subsample") is None  # array-api-strict runs the twins
    assert native(strict, "categorical") is None


def test_native_on_an_unknown_namespace_is_none_not_an_error():
    fake = types.ModuleType("fake")
    assert native(fake, "subsample") is None
    assert native(fake, "subsample") is None  # cached answer, same result


# -- pickling: backends by name, generators with their stream ---------------------------------------
@pytest.mark.parametrize("name", ["numpy", "array_api_strict", "torch"])
def test_backends_pickle_to_the_registry_object(name):
    be = get_backend(name)
    assert pickle.loads(pickle.dumps(be)) is be


@pytest.mark.parametrize("name", ["numpy", "array_api_strict", "torch"])
def test_pickled_generators_continue_the_stream(name):
    gen = default_rng(21, backend=name)
    gen.normal((5,))  # advance past the start
    copy = pickle.loads(pickle.dumps(gen))
    assert copy is not gen
    assert copy.backend is get_backend(name)
    assert copy.device == gen.device
    for draw in (lambda g: g.normal((7,)), lambda g: g.uniform((3, 2)), lambda g: g.integers(50, (9,)),
                 lambda g: subsample(g, 1000, 10, 3), lambda g: subsample(g, 20, 15, 2)):
        np.testing.assert_array_equal(backends.to_numpy(draw(copy)), backends.to_numpy(draw(gen)))
    # the copy is independent of the original: drawing from one does not advance the other
    ahead = backends.to_numpy(gen.normal((4,)))
    np.testing.assert_array_equal(backends.to_numpy(copy.normal((4,))), ahead)
    # spawned children agree too
    np.testing.assert_array_equal(
        backends.to_numpy(copy.spawn(2)[1].normal((3,))), backends.to_numpy(gen.spawn(2)[1].normal((3,)))
    )


@pytest.mark.parametrize("name", ["numpy", "array_api_strict", "torch"])
def test_default_rng_accepts_an_unpickled_generator(name):
    # used to raise "`rng` belongs to backend 'numpy' but the arrays are 'numpy'"
    copy = pickle.loads(pickle.dumps(default_rng(3, backend=name)))
    assert default_rng(copy, backend=name) is copy
    assert default_rng(copy, backend=get_backend(name)) is copy


def test_backends_compare_equal_by_name():
    be = get_backend("numpy")
    twin = dataclasses.replace(be, default_device="elsewhere")
    assert twin is not be
    assert twin == be and hash(twin) == hash(be)
    toy = dataclasses.replace(be, name="toy")
    assert toy != be and be != toy
    assert get_backend("torch") != be
    assert be != "numpy"  # a name is not a backend


# -- namespaces are identified by array-api-compat's predicates ------------------------------------
def test_a_module_named_like_jax_numpy_is_not_numpy():
    fake = types.ModuleType("jax.numpy")
    with pytest.raises(TypeError, match=r"no registered backend claims the array namespace 'jax.numpy'.*sgmc\.backends\.register"):
        get_backend(fake)
    for label in ("numpy_like", "my.numpy", "numpy.fake"):
        with pytest.raises(TypeError, match="register"):
            get_backend(types.ModuleType(label))


@pytest.fixture
def toy_backend():
    """Register a "toy" backend (NumPy's, renamed, with its own namespace); unregister it afterwards."""
    from sgmc import _dispatch

    ns = types.ModuleType("toy_xp")
    calls = []

    def loader():
        calls.append(1)
        return dataclasses.replace(get_backend("numpy"), name="toy", xp=ns)

    backends.register("toy", loader, owns=lambda xp: xp is ns)
    try:
        yield ns, calls
    finally:
        for table in (backends._LOADERS, backends._OWNS, backends._CACHE):
            table.pop("toy", None)
        _dispatch._TABLES.pop(id(ns), None)


def test_register_adds_a_backend_found_by_name_and_namespace(toy_backend):
    ns, calls = toy_backend
    assert calls == []  # registering loads nothing
    be = get_backend("toy")
    assert calls == [1]
    assert isinstance(be, Backend) and be.name == "toy" and be.xp is ns
    assert get_backend("toy") is be and calls == [1]  # loaded once, then cached
    assert get_backend(ns) is be
    assert pickle.loads(pickle.dumps(be)) is be
    assert be != get_backend("numpy")
    assert native(ns, "subsample") is get_backend("numpy").native["subsample"]  # the toy kept NumPy's native table
    # numpy's own namespace still belongs to numpy
    assert get_backend(np).name == "numpy"


def test_registering_without_owns_finds_the_backend_by_name_only(toy_backend):
    ns, _ = toy_backend
    backends.register("toy", lambda: dataclasses.replace(get_backend("numpy"), name="toy", xp=ns))
    assert get_backend("toy").xp is ns
    with pytest.raises(TypeError, match="register"):
        get_backend(ns)


def test_a_loader_must_return_the_registered_name(toy_backend):
    backends.register("toy", lambda: dataclasses.replace(get_backend("numpy"), name="other"))
    with pytest.raises(ValueError, match="registered as 'toy' returned a backend named 'other'"):
        get_backend("toy")


def test_the_registry_is_clean_after_the_toy_tests():
    with pytest.raises(ValueError, match="unknown backend 'toy'"):
        get_backend("toy")
