"""Shared pieces of the sgmc benchmark suite.

Every benchmark class derives from :class:`XPBenchmark`: its first parameter is the backend, and
``setup`` raises ``NotImplementedError`` (asv's "skip") when that backend cannot run here, so the
parameter grid is the same on every machine and results stay comparable. ``setup`` builds all inputs
once (data drawn with NumPy from fixed seeds, then converted to the backend) and makes one warm-up
call, so imports, first-call caches and kernel compilation are never timed. Timed methods end with
:meth:`XPBenchmark.sync`, which waits for queued device work (a no-op on CPU backends).

Sizes beyond the default grid are enabled with ``SGMC_BENCH_LARGE=1`` (see :func:`is_large`).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os

import numpy as np

#: Backends every benchmark is parametrised over (CPU machines run all three).
BACKENDS = ["numpy", "array_api_strict", "torch"]


@contextlib.contextmanager
def safe_import():
    """Import sgmc names without failing discovery on commits that lack them."""
    try:
        yield
    except ImportError:
        pass


def is_large() -> bool:
    """True when ``SGMC_BENCH_LARGE`` asks for the extra-large sizes."""
    return os.environ.get("SGMC_BENCH_LARGE", "") not in ("", "0")


def skip_unless_large(flag: bool = True) -> None:
    """Skip (``NotImplementedError``) a parameter combination marked large unless enabled."""
    if flag and not is_large():
        msg = "large size; set SGMC_BENCH_LARGE=1"
        raise NotImplementedError(msg)


def load_backend(name: str):
    """The sgmc backend ``name``, or ``NotImplementedError`` when it cannot run on this machine."""
    from sgmc import backends

    try:
        be = backends.get_backend(name)
    except ImportError as exc:
        msg = f"backend {name!r} is not installed"
        raise NotImplementedError(msg) from exc
    if not be.is_available():
        msg = "CuPy has no usable CUDA device"
        raise NotImplementedError(msg)
    if name == "torch":
        # Per-iteration arrays here are small, and on a 2-core machine torch's OpenMP pool spends more
        # time synchronising than computing (and stalls badly when the cores are shared). One
        # intra-op thread matches NumPy, whose per-call work in these benchmarks is single-threaded.
        import torch

        torch.set_num_threads(int(os.environ.get("SGMC_BENCH_TORCH_THREADS", "1")))
    return be


@functools.lru_cache(maxsize=8)
def logistic_data(n_data: int, dim: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Standard normal features and 0/1 labels from a logistic model with theta ~ N(0, I / dim).

    Cached: callers convert (copy) the arrays to their backend and must not modify them.
    """
    r = np.random.default_rng(seed)
    X = r.standard_normal((n_data, dim))
    theta = r.standard_normal(dim) / math.sqrt(dim)
    y = (r.random(n_data) < 1.0 / (1.0 + np.exp(-X @ theta))).astype(np.float64)
    return X, y


class XPBenchmark:
    """Base class: backend parameter, availability check, pre-built inputs and a warm-up call.

    Subclasses extend ``param_names``/``params`` (backend first), build their inputs in
    :meth:`prepare` and name the call to warm up in :meth:`warm_up`.
    """

    param_names = ("backend",)
    params = (BACKENDS,)

    def setup(self, backend, *args):
        self.be = load_backend(backend)
        self.xp = self.be.xp
        self.prepare(*args)
        self.warm_up(backend, *args)

    def prepare(self, *args) -> None:
        """Build the inputs (override)."""

    def warm_up(self, backend, *args) -> None:
        """One untimed call of the timed code path (override)."""

    def asarray(self, a):
        """A NumPy array converted to this benchmark's backend (an explicit copy)."""
        from sgmc import backends

        return backends.asarray(a, backend=self.be)

    def sync(self) -> None:
        """Wait for queued device work (no-op on CPU backends)."""
        self.be.synchronize()
