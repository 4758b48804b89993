"""No question to the device per iteration: the sample loop off NumPy reads nothing back to the host.

A GPU stalls whenever the host reads a value back (``.item()``, ``float()``, ``bool()``, ``.cpu()``,
``np.asarray``). The runner does so only at its divergence check, every ``check_every`` iterations, and
at the end. Each case runs the same set-up twice, 100 and 200 iterations with ``check_every`` above
both, and counts the reads: the counts must be equal, so the extra 100 iterations read nothing.
"""

from __future__ import annotations

import contextlib
import sys

import numpy as np
import pytest

import sgmc
from sgmc import backends, models
from sgmc.ssm import LGSSM, GaussianHMM
from sgmc.ssm._divergence import _HINT, guarded

CASES = [
    ("sgld", "minibatch", None, None),
    ("sgld_corrected", "minibatch-noise", None, None),
    ("sghmc", "minibatch-noise", {"noise_estimate": "minibatch"}, None),
    ("sgld", "cv-switch", None, {"radius": 0.5}),
    ("sghmc", "svrg", None, {"update_every": 7}),
]


def _data():
    r = np.random.default_rng(1)
    X = r.standard_normal((400, 3))
    y = (r.random(400) < 1.0 / (1.0 + np.exp(-X @ np.array([1.0, -0.5, 0.25])))).astype(np.float64)
    return X, y


@contextlib.contextmanager
def _count_torch(monkeypatch):
    torch = pytest.importorskip("torch")
    from sgmc.backends._torch_random import _seeded

    n = [0]
    for name in ("item", "cpu", "numpy", "tolist", "__bool__", "__float__", "__int__", "__index__", "__array__"):
        orig = getattr(torch.Tensor, name)

        def counted(self, *a, _orig=orig, **k):
            # a CPU generator's state is read when it is seeded (spawned); on a GPU that step reads nothing
            if sys._getframe(1).f_code is not _seeded.__code__:
                n[0] += 1
            return _orig(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, counted)
    yield n


@contextlib.contextmanager
def _count_jax(monkeypatch):
    jax = pytest.importorskip("jax")
    from jax._src import array as jarray

    n = [0]
    cls = jarray.ArrayImpl
    for name in ("item", "tolist", "__bool__", "__float__", "__int__", "__index__", "__array__", "_value"):
        orig = getattr(cls, name)
        if isinstance(orig, property):
            def getter(self, _orig=orig):
                n[0] += 1
                return _orig.fget(self)

            monkeypatch.setattr(cls, name, property(getter))
            continue

        def counted(self, *a, _orig=orig, **k):
            n[0] += 1
            return _orig(self, *a, **k)

        monkeypatch.setattr(cls, name, counted)
    orig_get = jax.device_get

    def device_get(x, _orig=orig_get):
        n[0] += 1
        return _orig(x)

    monkeypatch.setattr(jax, "device_get", device_get)
    yield n


def _reads(backend, monkeypatch, sampler, estimator, s_opts, e_opts, n_iter):
    X, y = _data()
    model = models.LogisticRegression(X, y, backend=backend)
    counter = _count_torch if backend == "torch" else _count_jax
    with monkeypatch.context() as mp, counter(mp) as n:
        sgmc.sample(model, sampler, estimator, step_size=1e-3, batch_size=40, n_iter=n_iter, chains=2, rng=3,
                    progress=False, check_every=1000, burn_in=0, sampler_options=s_opts, estimator_options=e_opts)
    return n[0]


@pytest.mark.parametrize("backend", ["torch", "jax"])
@pytest.mark.parametrize("sampler,estimator,s_opts,e_opts", CASES, ids=[c[0] + "-" + c[1] for c in CASES])
def test_iterations_read_nothing_back(backend, monkeypatch, sampler, estimator, s_opts, e_opts):
    if backend == "jax":
        jax = pytest.importorskip("jax")
        if not jax.config.jax_enable_x64:
            pytest.skip("the suite runs JAX in 64-bit mode")
    short = _reads(backend, monkeypatch, sampler, estimator, s_opts, e_opts, 100)
    long = _reads(backend, monkeypatch, sampler, estimator, s_opts, e_opts, 200)
    assert long == short, f"{long - short} reads back to the host in 100 more iterations"


def _ssm_case(name, torch):
    if name == "lgssm":
        _, y = LGSSM.simulate_scalar(backends.default_rng(0), 400, [0.9, 2.0, 2.0])
        return LGSSM(torch.asarray(np.asarray(y))), {"init": [0.9, 2.0, 2.0], "batch_size": 10}
    r = np.random.default_rng(1)
    y = np.concatenate([r.normal(-2.0, 1.0, 100), r.normal(2.0, 1.0, 100)])
    return GaussianHMM(torch.asarray(y), 2), {"batch_size": 20}


@pytest.mark.parametrize("name", ["lgssm", "hmm"])
def test_state_space_gradients_read_nothing_back(monkeypatch, name):
    """The buffered gradients of the state space models leave their finiteness checks to the runner off NumPy."""
    torch = pytest.importorskip("torch")
    counts = []
    for n_iter in (100, 200):
        model, opts = _ssm_case(name, torch)
        with monkeypatch.context() as mp, _count_torch(mp) as n:
            sgmc.sample(model, "sgld", "buffered", step_size=1e-5, n_iter=n_iter, chains=2, rng=3, progress=False,
                        check_every=1000, burn_in=0, **opts)
        counts.append(n[0])
    assert counts[1] == counts[0], f"{counts[1] - counts[0]} reads back to the host in 100 more iterations"


def test_state_space_divergence_off_numpy_names_the_hint():
    """A step too large for an LGSSM on torch: the runner's check finds it and its message gives the advice."""
    torch = pytest.importorskip("torch")
    _, y = LGSSM.simulate_scalar(backends.default_rng(0), 1000, [0.9, 2.0, 2.0])
    with pytest.raises(sgmc.DivergenceError) as info:
        sgmc.sample(LGSSM(torch.asarray(np.asarray(y))), "sgld", "buffered", step_size=1e-2, n_iter=200, chains=2,
                    init=[0.9, 2.0, 2.0], rng=0, progress=False, check_every=50)
    err = info.value
    assert err.step_size == 1e-2 and err.iteration in (50, 100, 150, 200)
    assert "positions are no longer finite" in str(err) and _HINT in str(err), str(err)


def test_guard_off_numpy_passes_values_and_converts_failures(monkeypatch):
    """Off NumPy the guard reads nothing: a non-finite result is returned as it is (for the runner's check),
    while a factorisation that fails is still a divergence at once."""
    torch = pytest.importorskip("torch")
    xp = backends.get_backend("torch").xp
    theta = torch.zeros((2, 3), dtype=torch.float64)
    with monkeypatch.context() as mp, _count_torch(mp) as n:
        out = guarded(xp, "thing", lambda t: t + float("inf"), theta)
        first = guarded(xp, "thing", lambda t: (t / 0.0, 3), theta)
    assert n[0] == 0
    assert not bool(torch.isfinite(out).any()) and not bool(torch.isfinite(first[0]).any()) and first[1] == 3
    with pytest.raises(sgmc.DivergenceError, match="LinAlgError") as info:
        guarded(xp, "thing", lambda t: torch.linalg.cholesky(-torch.eye(2, dtype=torch.float64)), theta)
    assert _HINT in str(info.value)
