"""Backend objects and random generators.

The array API standard has no random numbers, so each backend supplies a :class:`Generator` that draws
on the backend's own device. Libraries without a usable generator of their own (array-api-strict,
torch on CPU) draw with NumPy's PCG64 on the host and convert once; CuPy draws on the GPU.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

import numpy as np

__all__ = ["Backend", "Generator", "HostGenerator", "numpy_dtype", "subsample_indices"]


def numpy_dtype(dtype: Any) -> np.dtype:
    """NumPy dtype with the same name as a dtype of any array library."""
    if isinstance(dtype, np.dtype) or (isinstance(dtype, type) and issubclass(dtype, np.generic)):
        return np.dtype(dtype)
    name = str(dtype).rsplit(".", 1)[-1].strip("'>")
    return np.dtype(name)


@dataclass(frozen=True, eq=False)
class Backend:
    """An array library known to sgmc.

    Attributes
    ----------
    name : str
        Registry name (``"numpy"``, ``"array_api_strict"``, ``"torch"``, ``"cupy"``).
    xp : module
        The array-API-compatible namespace.
    make_generator : callable
        ``make_generator(seed_sequence, device) -> Generator``.
    to_host : callable
        Converts a backend array to a NumPy array (an explicit copy; only I/O edges use it).
    from_host : callable
        ``from_host(ndarray, dtype, device) -> array``.
    default_device : object
        Device used when none is given.
    kernels : dict
        Native fast paths by name; empty unless a GPU is present.
    quiet_float : callable
        Returns a context manager that silences the library's floating-point warnings (overflow,
        invalid values); the runner reports divergence itself, with the step size that caused it.
    """

    name: str
    xp: ModuleType
    make_generator: Callable[[np.random.SeedSequence, Any], "Generator"]
    to_host: Callable[[Any], np.ndarray]
    from_host: Callable[[np.ndarray, Any, Any], Any]
    default_device: Any = None
    synchronize: Callable[[], None] = field(default=lambda: None)
    kernels: dict = field(default_factory=dict)
    quiet_float: Callable[[], Any] = field(default=contextlib.nullcontext)

    def __repr__(self) -> str:
        return f"Backend({self.name!r})"


class Generator:
    """Random numbers for one backend and device.

    Methods mirror the part of :class:`numpy.random.Generator` that sgmc uses, and every draw returns
    an array of the generator's backend on its device. Chains that need reproducible, independent
    streams get them with :meth:`spawn`.
    """

    backend: Backend
    device: Any

    def normal(self, shape: tuple[int, ...], dtype: Any = None) -> Any:
        """Standard normal draws."""
        raise NotImplementedError

    def uniform(self, shape: tuple[int, ...], dtype: Any = None) -> Any:
        """Uniform draws on [0, 1)."""
        raise NotImplementedError

    def integers(self, high: int, shape: tuple[int, ...]) -> Any:
        """Uniform int64 draws on {0, ..., high - 1}."""
        raise NotImplementedError

    def subsample(self, n_data: int, size: int, batch: int, replace: bool = False) -> Any:
        """``batch`` independent subsets of ``range(n_data)``, each of ``size`` indices, int64 (batch, size).

        Without replacement each row is a uniformly random ``size``-subset in uniformly random order.
        """
        raise NotImplementedError

    def spawn(self, n: int) -> list["Generator"]:
        """``n`` statistically independent child generators (SPEC 7 semantics)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<sgmc Generator backend={self.backend.name!r} device={self.device!r}>"


def subsample_indices(gen: np.random.Generator, n_data: int, size: int, batch: int) -> np.ndarray:
    """Rows of indices drawn uniformly without replacement, vectorised over rows.

    For small ``size / n_data`` this draws a few more than ``size`` indices with replacement per row and
    keeps the first ``size`` distinct ones in draw order, which is exactly sequential sampling without
    replacement (and the conditioning on "enough distinct values" is invariant under relabelling, so
    each row stays a uniform subset). Dense cases use random keys and a partial sort.

    Repeats are found with one sort per row of (value, draw position) pairs packed into one integer,
    and dropped sparsely (there are about ``size**2 / (2 n_data)`` of them), so the cost is one bounded
    integer draw and one small sort per index.
    """
    if size == n_data or size * 4 > n_data:
        keys = gen.random((batch, n_data))
        if size == n_data:
            return np.argsort(keys, axis=1)
        part = np.argpartition(keys, size - 1, axis=1)[:, :size]
        # argpartition leaves the first `size` in arbitrary order; that order is irrelevant for sums
        return part.astype(np.int64, copy=False)
    expected_dups = size * size / (2.0 * n_data)
    m = size + int(math.ceil(2.0 * expected_dups + 8.0 * math.sqrt(expected_dups + 1.0) + 4.0))
    shift = (m - 1).bit_length()
    low = (1 << shift) - 1
    # Keys fit in int32 up to about 10^6 data, and the narrower sort is twice as fast; NumPy draws the
    # same values (and advances the generator alike) whatever the integer width.
    kind = np.int32 if ((n_data - 1) << shift | low) < 2**31 else np.int64
    cols = np.arange(m, dtype=kind)
    out = None
    todo = None
    b = batch
    while b:
        draws = gen.integers(0, n_data, size=b * m, dtype=kind).reshape(b, m)
        # Sort (value, position) keys row by row: copies of a value become adjacent with the earliest
        # draw first, and every later copy is dropped.
        key = np.left_shift(draws, shift)
        key |= cols
        key.sort(axis=1)
        key = key.reshape(-1)
        val = key >> shift
        repeat = val[1:] == val[:-1]
        repeat[m - 1 :: m] = False  # pairs that straddle two rows
        later = repeat.nonzero()[0]
        later += 1
        drop_col = key[later] & low
        keep = np.ones((b, m), dtype=bool)
        complete = later.size <= m - size  # then no row is short of `size` distinct values
        if b == 1 and complete:
            keep[0, drop_col] = False
            rows = draws[keep][None, :size].astype(np.int64)
        else:
            drop_row = later // m
            keep.reshape(-1)[drop_row * m + drop_col] = False
            # Keep the first `size` survivors: only the last m - size columns can rank beyond `size`.
            head_drops = np.bincount(drop_row[drop_col < size], minlength=b)
            tail = keep[:, size:]
            rank = np.cumsum(tail, axis=1)
            rank += (size - head_drops)[:, None]
            tail &= rank <= size
            if not complete:
                ok = rank[:, -1] >= size
                keep &= ok[:, None]
            rows = draws[keep].reshape(-1, size).astype(np.int64, copy=False)
        if complete and todo is None:
            return rows
        if out is None:
            out = np.empty((batch, size), dtype=np.int64)
            todo = np.arange(batch)
        if complete:
            out[todo] = rows
            break
        out[todo[ok]] = rows
        todo = todo[~ok]
        b = todo.size
    return out


class HostGenerator(Generator):
    """Generator that draws with NumPy's PCG64 on the host and converts to the backend once per draw."""

    def __init__(self, backend: Backend, seed_seq: np.random.SeedSequence, device: Any = None):
        self.backend = backend
        self.device = backend.default_device if device is None else device
        self._seed_seq = seed_seq
        self._np = np.random.Generator(np.random.PCG64(seed_seq))
        self._identity = backend.name == "numpy"

    @classmethod
    def from_numpy(cls, backend: Backend, gen: np.random.Generator, device: Any = None) -> "HostGenerator":
        """Wrap an existing :class:`numpy.random.Generator` (it is used, not copied)."""
        self = cls.__new__(cls)
        self.backend = backend
        self.device = backend.default_device if device is None else device
        self._seed_seq = gen.bit_generator.seed_seq
        self._np = gen
        self._identity = backend.name == "numpy"
        return self

    def _out(self, a: np.ndarray, dtype: Any) -> Any:
        if self._identity:
            return a
        return self.backend.from_host(a, dtype, self.device)

    def normal(self, shape, dtype=None):
        dt = np.float64 if dtype is None else numpy_dtype(dtype)
        return self._out(self._np.standard_normal(shape, dtype=dt), dtype)

    def uniform(self, shape, dtype=None):
        dt = np.float64 if dtype is None else numpy_dtype(dtype)
        return self._out(self._np.random(shape, dtype=dt), dtype)

    def integers(self, high, shape):
        return self._out(self._np.integers(0, high, size=shape, dtype=np.int64), None)

    def subsample(self, n_data, size, batch, replace=False):
        if replace:
            idx = self._np.integers(0, n_data, size=(batch, size), dtype=np.int64)
        else:
            idx = subsample_indices(self._np, n_data, size, batch)
        return self._out(idx, None)

    def spawn(self, n):
        return [HostGenerator(self.backend, s, self.device) for s in self._seed_seq.spawn(n)]

    @property
    def numpy_generator(self) -> np.random.Generator:
        """The underlying NumPy generator."""
        return self._np
