"""PyTorch's generator on a CUDA device (marked ``gpu``; skipped where torch sees no CUDA device).

The draws are made on the device by a Philox ``torch.Generator`` seeded from the run's seed
sequence: the same seed gives the same CUDA draws, which differ from the CPU's (another generator);
the moments and the integers' evenness hold there too; the generator pickles and goes through the
checkpoint codec on its device; and ``sgmc.sample`` on CUDA tensors makes no NumPy draw and no
``torch.from_numpy`` copy per iteration. Run by ``asv_benchmarks/gpu_check.sh``.
"""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import sgmc  # noqa: E402
from sgmc.backends import default_rng  # noqa: E402
from sgmc.backends._torch_random import TorchGenerator  # noqa: E402
from sgmc.models import LinearRegression  # noqa: E402

from _helpers import Z_TOL  # noqa: E402
from test_torch_generator import _Calls  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")]
CUDA = "cuda:0"


def _np(t):
    return t.detach().cpu().numpy()


def test_same_seed_same_draws_on_the_device_and_not_the_cpu_draws():
    a, b = default_rng(11, backend="torch", device=CUDA), default_rng(11, backend="torch", device=CUDA)
    assert type(a) is TorchGenerator and a.device == torch.device(CUDA)
    x, y = a.normal((1000,)), b.normal((1000,))
    assert x.device == torch.device(CUDA) and torch.equal(x, y)
    assert torch.equal(a.integers(50, (64,)), b.integers(50, (64,)))
    cpu = default_rng(11, backend="torch").normal((1000,))
    assert not np.array_equal(_np(x), _np(cpu))  # CUDA draws are not CPU draws, by design
    kids = a.spawn(2)
    assert all(k.device == torch.device(CUDA) for k in kids)
    assert torch.equal(kids[1].uniform((9,)), TorchGenerator(a.backend, np.random.SeedSequence(11).spawn(2)[1],
                                                              CUDA).uniform((9,)))


def test_moments_and_even_integers_on_the_device():
    g = default_rng(5, backend="torch", device=CUDA)
    n = 1_000_000
    z = _np(g.normal((n,))).astype(np.float64)
    assert abs(z.mean()) < Z_TOL / np.sqrt(n) and abs(z.var() - 1.0) < Z_TOL * np.sqrt(2.0 / n)
    u = _np(g.uniform((n,), dtype=torch.float32)).astype(np.float64)
    assert u.min() >= 0.0 and u.max() < 1.0 and abs(u.mean() - 0.5) < Z_TOL * np.sqrt(1.0 / 12.0 / n)
    high, p = 3 * 2**26, 1.0 / 3.0
    k = _np(g.integers(high, (n,)))
    assert k.min() >= 0 and k.max() < high
    assert abs(float(np.mean(k < 2**26)) - p) < Z_TOL * np.sqrt(p * (1 - p) / n)


def test_pickle_and_codec_keep_the_stream_on_the_device():
    from sgmc._codec import Encoder
    from sgmc._decode import Decoder

    g = default_rng(8, backend="torch", device=CUDA)
    g.normal((33,))
    h = pickle.loads(pickle.dumps(g))
    assert h.device == torch.device(CUDA) and torch.equal(h.normal((41,)), g.normal((41,)))
    enc = Encoder("a")
    doc = json.loads(json.dumps(enc.encode({"rng": g}), allow_nan=False))
    out = Decoder(dict(enc.arrays)).decode(doc)["rng"]
    assert type(out) is TorchGenerator and out.device == torch.device(CUDA)
    assert torch.equal(out.uniform((17,)), g.uniform((17,)))


def _run(monkeypatch, n_iter):
    r = np.random.default_rng(0)
    X = r.normal(size=(300, 3))
    y = X @ np.linspace(1.0, -1.0, 3) + r.normal(size=300)
    model = LinearRegression(torch.as_tensor(X, device=CUDA), torch.as_tensor(y, device=CUDA))
    with monkeypatch.context() as m:
        calls = _Calls(m)
        tr = sgmc.sample(model, "sgld", "minibatch", step_size=2e-3, batch_size=30, n_iter=n_iter, chains=2,
                         rng=5, progress=False)
    assert tr.draws.device.type == "cuda"
    return calls


def test_no_numpy_draw_and_no_host_copy_per_iteration_on_the_device(monkeypatch):
    short, long = _run(monkeypatch, 20), _run(monkeypatch, 120)
    assert long.numpy_draws == short.numpy_draws == 0
    assert long.from_numpy == short.from_numpy, (short.from_numpy, long.from_numpy)
