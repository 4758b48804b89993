"""PyTorch's generator: draws made by a ``torch.Generator`` on the tensors' device, seeded from the run's
seed sequence, with no NumPy draw and no host copy once a run is set up.

Checked on the CPU: one seed gives one stream (and spawning gives the sequence's children), the draws
have the right distributions (the integers with no modulo skew, which ``torch.randint`` has), the
generator pickles and goes through the checkpoint codec, a run interrupted and resumed equals the
run left alone, a forged state is refused with a ValueError, and ``sgmc.sample`` on torch tensors
makes no NumPy draw and no ``torch.from_numpy`` copy per iteration. CUDA's own checks are in
``tests/test_torch_cuda.py``.
"""

from __future__ import annotations

import copy
import json
import os
import pickle
import signal

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import sgmc  # noqa: E402
from sgmc import backends  # noqa: E402
from sgmc.backends import HostGenerator, default_rng  # noqa: E402
from sgmc.backends._torch_random import TorchGenerator  # noqa: E402
from sgmc.models import LinearRegression  # noqa: E402

from _helpers import Z_TOL  # noqa: E402

TORCH = backends.get_backend("torch")


def _np(t):
    return t.detach().cpu().numpy()


def test_torch_backend_makes_a_torch_generator_on_the_cpu():
    g = default_rng(0, backend="torch")
    assert type(g) is TorchGenerator and g.device == torch.device("cpu")
    assert g.torch_generator.device == torch.device("cpu")
    x, u, k = g.normal((3, 4)), g.uniform((5,), dtype=torch.float32), g.integers(9, (2, 6))
    assert x.dtype == torch.float64 and tuple(x.shape) == (3, 4) and x.device.type == "cpu"
    assert u.dtype == torch.float32 and k.dtype == torch.int64 and tuple(k.shape) == (2, 6)


def test_a_bad_device_is_named():
    with pytest.raises(ValueError, match=r"`device` must be a torch device or its name .*got 'nowhere'"):
        default_rng(0, backend="torch", device="nowhere")


def test_same_seed_same_draws_and_integers_do_not_depend_on_dtype():
    a, b = default_rng(11, backend="torch"), default_rng(11, backend="torch")
    assert torch.equal(a.normal((50,)), b.normal((50,)))
    assert torch.equal(a.uniform((7, 3), dtype="float32"), b.uniform((7, 3), dtype=np.float32))
    wide, narrow = a.integers(1000, (40,)), b.integers(1000, (40,), dtype=torch.int32)
    assert narrow.dtype == torch.int32 and torch.equal(wide, narrow.to(torch.int64))
    assert torch.equal(a.normal((5,)), b.normal((5,)))  # the state after the draw did not depend on it
    assert not torch.equal(default_rng(12, backend="torch").normal((50,)), default_rng(11, backend="torch").normal((50,)))


def test_spawned_children_are_the_sequence_children():
    g = default_rng(3, backend="torch")
    kids = g.spawn(3)
    seqs = np.random.SeedSequence(3).spawn(3)
    for kid, seq in zip(kids, seqs):
        assert type(kid) is TorchGenerator and kid.device == g.device
        assert torch.equal(kid.normal((20,)), TorchGenerator(TORCH, seq).normal((20,)))
    # children are different streams, and a second spawn gives new ones
    a, b = g.spawn(2)
    assert not torch.equal(a.uniform((20,)), b.uniform((20,)))
    assert not torch.equal(TorchGenerator(TORCH, seqs[0]).uniform((20,)), a.uniform((20,)))


def test_cpu_state_holds_the_sequence_words():
    """The Mersenne Twister's 624 words come from the sequence, not from a 32-bit seed."""
    seq = np.random.SeedSequence(2024)
    g = TorchGenerator(TORCH, seq)
    state = g.torch_generator.get_state().numpy()
    words = state[24:24 + 8 * 624].view(np.uint64)
    np.testing.assert_array_equal(words, np.random.SeedSequence(2024).generate_state(624, np.uint32))
    # two sequences whose 64-bit seeds share their low 32 bits still give different streams
    h = torch.Generator()
    h.manual_seed(int(np.random.SeedSequence(2024).generate_state(1, np.uint64)[0]) + (1 << 32))
    assert not torch.equal(torch.rand(10, generator=h, dtype=torch.float64), g.uniform((10,)))


def test_normal_and_uniform_moments():
    g = default_rng(5, backend="torch")
    n = 200_000
    for dtype in (torch.float64, torch.float32):
        z = _np(g.normal((n,), dtype=dtype)).astype(np.float64)
        assert abs(z.mean()) < Z_TOL / np.sqrt(n)
        assert abs(z.var() - 1.0) < Z_TOL * np.sqrt(2.0 / n)
        u = _np(g.uniform((n,), dtype=dtype)).astype(np.float64)
        assert u.min() >= 0.0 and u.max() < 1.0
        assert abs(u.mean() - 0.5) < Z_TOL * np.sqrt(1.0 / 12.0 / n)


def test_integers_cover_the_range_evenly():
    g = default_rng(6, backend="torch")
    n, high = 140_000, 7
    k = _np(g.integers(high, (n,)))
    assert k.min() == 0 and k.max() == high - 1
    counts = np.bincount(k, minlength=high)
    expected = n / high
    # each count is binomial(n, 1/7): its standard deviation bounds the deviation
    assert np.all(np.abs(counts - expected) < Z_TOL * np.sqrt(expected * (1 - 1 / high)))
    assert _np(g.integers(1, (100,))).max() == 0
    with pytest.raises(ValueError, match="`high` must be a positive integer; got 0"):
        g.integers(0, (3,))


def test_integers_have_no_modulo_skew():
    """high = 3 * 2**26: a 32-bit word modulo high gives values below 2**26 probability 22/64, not 1/3.

    ``torch.randint`` does exactly that below 2**28; this generator's 63-bit words keep the skew below
    high / 2**63.
    """
    high, n = 3 * 2**26, 1_000_000
    k = _np(default_rng(7, backend="torch").integers(high, (n,)))
    assert k.min() >= 0 and k.max() < high
    p = 1.0 / 3.0
    frac = float(np.mean(k < 2**26))
    assert abs(frac - p) < Z_TOL * np.sqrt(p * (1 - p) / n), frac
    # the same check sees torch.randint's skew (so it can fail)
    gen = torch.Generator()
    gen.manual_seed(7)
    skewed = float((torch.randint(0, high, (n,), generator=gen) < 2**26).double().mean())
    assert abs(skewed - p) > Z_TOL * np.sqrt(p * (1 - p) / n)


def test_pickles_by_sequence_and_state():
    g = default_rng(8, backend="torch")
    g.normal((33,))  # move the stream, including torch's cached normal
    h = pickle.loads(pickle.dumps(g))
    assert type(h) is TorchGenerator and h.backend is TORCH and h.device == g.device
    assert torch.equal(h.normal((41,)), g.normal((41,)))
    assert torch.equal(h.integers(100, (9,)), g.integers(100, (9,)))
    assert torch.equal(h.spawn(2)[1].uniform((5,)), g.spawn(2)[1].uniform((5,)))
    st = g.__getstate__()
    assert set(st) == {"backend", "device", "seed_seq", "state"}
    assert st["device"] == "cpu" and st["state"].dtype == np.uint8


def _round_trip(obj):
    from sgmc._codec import Encoder
    from sgmc._decode import Decoder

    enc = Encoder("a")
    doc = json.loads(json.dumps(enc.encode(obj), allow_nan=False))
    return Decoder(dict(enc.arrays)).decode(doc), doc, enc


def test_the_codec_stores_the_generator_state_as_data():
    g = default_rng(9, backend="torch")
    g.uniform((17,))
    out, doc, _ = _round_trip({"rng": g})
    entry = doc["v"][0]  # the dict's one value
    assert entry["$t"] == "gen" and entry["k"] == "TorchGenerator" and entry["b"] == "torch"
    assert type(out["rng"]) is TorchGenerator
    assert torch.equal(out["rng"].normal((30,)), g.normal((30,)))


def test_a_host_stream_on_torch_still_round_trips():
    """A NumPy Generator given as ``rng`` (and files written before torch drew on its own) keep PCG64."""
    g = default_rng(np.random.default_rng(4), backend="torch")
    assert type(g) is HostGenerator
    g.normal((3,))
    out, doc, _ = _round_trip({"rng": g})
    assert doc["v"][0]["k"] == "HostGenerator" and type(out["rng"]) is HostGenerator
    assert torch.equal(out["rng"].normal((6,)), g.normal((6,)))


@pytest.mark.parametrize("forge", ["short", "dtype", "left"])
def test_a_forged_state_is_refused(forge):
    from sgmc._decode import Decoder

    g = default_rng(10, backend="torch")
    _, doc, enc = _round_trip({"rng": g})
    arrays = dict(enc.arrays)
    state_ref = doc["v"][0]["st"]
    name = next(k for k, v in arrays.items() if v.dtype == np.uint8 and v.size == g.__getstate__()["state"].size)
    bad = arrays[name].copy()
    if forge == "short":
        bad = bad[:100]
    elif forge == "dtype":
        bad = bad.astype(np.int16)
    else:
        bad[8:12] = np.frombuffer(np.int32(10_000).tobytes(), np.uint8)  # `left` past the 624 words
    arrays[name] = bad
    assert state_ref  # the document names the state
    with pytest.raises(ValueError):
        Decoder(arrays).decode(doc)


def _linear(n=300, d=3):
    r = np.random.default_rng(0)
    X = r.normal(size=(n, d))
    y = X @ np.linspace(1.0, -1.0, d) + r.normal(size=n)
    return LinearRegression(torch.as_tensor(X), torch.as_tensor(y))


ARGS = dict(step_size=2e-3, batch_size=30, n_iter=90, chains=3, group_size=2, rng=11, progress=False)


def test_a_resumed_torch_run_equals_the_run_left_alone(tmp_path):
    model = _linear()
    full = sgmc.sample(model, "sghmc", "minibatch", **ARGS)

    def stop(k, state):
        if k == 40 and state.position.shape[0] == 1:
            os.kill(os.getpid(), signal.SIGINT)

    path = tmp_path / "run.ckpt"
    with pytest.warns(sgmc.SamplingInterruptedWarning):
        sgmc.sample(model, "sghmc", "minibatch", checkpoint=str(path), checkpoint_every=20, callback=stop, **ARGS)
    resumed = sgmc.resume(str(path), progress=False)
    assert isinstance(full.draws, torch.Tensor)
    np.testing.assert_array_equal(_np(resumed.draws), _np(full.draws))


class _Calls:
    """Counts NumPy generator draws and ``torch.from_numpy`` copies (host to tensor) while installed.

    ``numpy.random.Generator`` and ``numpy.random.default_rng`` are replaced by a subclass that counts
    every method call, and ``torch.from_numpy`` by a counting wrapper.
    """

    def __init__(self, monkeypatch):
        self.numpy_draws = 0
        self.from_numpy = 0
        calls = self

        class Counting(np.random.Generator):
            pass

        def counted(name):
            method = getattr(np.random.Generator, name)

            def call(gen, *args, **kwargs):
                calls.numpy_draws += 1
                return method(gen, *args, **kwargs)

            return call

        for name in dir(np.random.Generator):
            if not name.startswith("_") and name not in ("bit_generator", "spawn") and callable(
                    getattr(np.random.Generator, name)):
                setattr(Counting, name, counted(name))
        original = torch.from_numpy

        def from_numpy(a):
            calls.from_numpy += 1
            return original(a)

        monkeypatch.setattr(np.random, "Generator", Counting)
        monkeypatch.setattr(np.random, "default_rng", lambda seed=None: Counting(np.random.PCG64(seed)))
        monkeypatch.setattr(torch, "from_numpy", from_numpy)


def _counted(monkeypatch, n_iter, sampler, estimator):
    model = _linear()
    with monkeypatch.context() as m:
        calls = _Calls(m)
        tr = sgmc.sample(model, sampler, estimator, step_size=2e-3, batch_size=30, n_iter=n_iter, chains=2,
                         rng=5, progress=False)
    assert isinstance(tr.draws, torch.Tensor)
    return calls


@pytest.mark.parametrize(("sampler", "estimator"), [("sgld", "minibatch"), ("sghmc", "cv")])
def test_no_numpy_draw_and_no_host_copy_per_iteration(monkeypatch, sampler, estimator):
    """Counts over a run of 20 and one of 120 iterations: the 100 more iterations add no call."""
    short, long = _counted(monkeypatch, 20, sampler, estimator), _counted(monkeypatch, 120, sampler, estimator)
    assert long.numpy_draws == short.numpy_draws == 0
    assert long.from_numpy == short.from_numpy, (short.from_numpy, long.from_numpy)


def test_the_counter_sees_host_draws(monkeypatch):
    """The same count sees the host generator's NumPy draws and copies (so the test above can fail)."""
    calls = _Calls(monkeypatch)
    g = HostGenerator(TORCH, np.random.SeedSequence(1))
    for _ in range(5):
        g.normal((3,))
    assert calls.numpy_draws == 5 and calls.from_numpy == 5


def test_deepcopy_keeps_the_stream():
    g = default_rng(12, backend="torch")
    g.normal((3,))
    h = copy.deepcopy(g)
    assert torch.equal(h.normal((8,)), g.normal((8,)))
