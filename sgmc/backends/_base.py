"""Backend objects and random generators.

The array API standard has no random numbers, so each backend supplies a :class:`Generator` that draws
on the backend's own device. Libraries without a usable generator of their own (array-api-strict)
draw with NumPy's PCG64 on the host and convert once; CuPy, torch and JAX draw with their own
generators on their devices.

Backends and generators pickle by the backend's registry name and compare by it, so a generator sent
to another process (a worker of a process pool or a Dask cluster) is the same generator there.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

import numpy as np

__all__ = ["Backend", "Generator", "HostGenerator", "numpy_dtype"]


def numpy_dtype(dtype: Any) -> np.dtype:
    """NumPy dtype with the same name as a dtype of any array library."""
    if isinstance(dtype, np.dtype) or (isinstance(dtype, type) and issubclass(dtype, np.generic)):
        return np.dtype(dtype)
    name = str(dtype).rsplit(".", 1)[-1].strip("'>")
    return np.dtype(name)


def _always(*_: Any) -> bool:
    return True


#: The registry's lookup by name, ``[get_backend]``: the package (:mod:`sgmc.backends`), which imports
#: this module, puts it here, so that a backend unpickles as the registry's backend of its name.
REGISTRY_LOOKUP: list = []


@dataclass(frozen=True, eq=False)
class Backend:
    """An array library known to sgmc.

    Attributes
    ----------
    name : str
        Registry name (``"numpy"``, ``"array_api_strict"``, ``"torch"``, ``"cupy"``, or a user's).
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
    synchronize : callable
        Waits for queued device work (a no-op on CPUs).
    native : dict
        Native fast paths by name, looked up through :func:`sgmc._dispatch.native`; each has an
        array-API twin in the library that defines its result.
    quiet_float : callable
        Returns a context manager that silences the library's floating-point warnings (overflow,
        invalid values); the runner reports divergence itself, with the step size that caused it.
    is_available : callable
        ``is_available() -> bool``: whether the library can compute here (a GPU library without a
        usable device is installed but not available). Never raises.
    unavailable_reason : callable
        ``unavailable_reason() -> str``: why ``is_available()`` is false, in words a user can act
        on (empty when it is true).
    on_cpu : callable
        ``on_cpu(device) -> bool``: whether arrays on ``device`` live in host memory, where
        cache-sized blocking of batched work pays.
    numpy_arrays : bool
        True when the backend's arrays are NumPy arrays, so host draws need no conversion.

    Notes
    -----
    Two backends are equal when their names are; a backend pickles as its name and unpickles as the
    registry's backend of that name.
    """

    name: str
    xp: ModuleType
    make_generator: Callable[[np.random.SeedSequence, Any], "Generator"]
    to_host: Callable[[Any], np.ndarray]
    from_host: Callable[[np.ndarray, Any, Any], Any]
    default_device: Any = None
    synchronize: Callable[[], None] = field(default=lambda: None)
    native: dict = field(default_factory=dict)
    quiet_float: Callable[[], Any] = field(default=contextlib.nullcontext)
    is_available: Callable[[], bool] = field(default=_always)
    unavailable_reason: Callable[[], str] = field(default=lambda: "")
    on_cpu: Callable[[Any], bool] = field(default=_always)
    numpy_arrays: bool = False

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Backend) and other.name == self.name

    def __hash__(self) -> int:
        return hash(("sgmc.Backend", self.name))

    def __reduce__(self):
        return (REGISTRY_LOOKUP[0], (self.name,))

    def __repr__(self) -> str:
        return f"Backend({self.name!r})"


class Generator:
    """Random numbers for one backend and device.

    Methods mirror the part of :class:`numpy.random.Generator` that sgmc uses, and every draw returns
    an array of the generator's backend on its device. Chains that need reproducible, independent
    streams get them with :meth:`spawn`. Draws built on these (subsets, categorical draws, particle
    resampling) live in :mod:`sgmc._sampling`.
    """

    backend: Backend
    device: Any

    def normal(self, shape: tuple[int, ...], dtype: Any = None) -> Any:
        """Standard normal draws."""
        raise NotImplementedError

    def uniform(self, shape: tuple[int, ...], dtype: Any = None) -> Any:
        """Uniform draws on [0, 1)."""
        raise NotImplementedError

    def integers(self, high: int, shape: tuple[int, ...], dtype: Any = None) -> Any:
        """Uniform draws on {0, ..., high - 1}, int64 unless ``dtype`` asks for a narrower integer type.

        The values drawn, and the generator's state after the draw, do not depend on ``dtype``.
        """
        raise NotImplementedError

    def spawn(self, n: int) -> list["Generator"]:
        """``n`` statistically independent child generators (SPEC 7 semantics)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<sgmc Generator backend={self.backend.name!r} device={self.device!r}>"


class HostGenerator(Generator):
    """Generator that draws with NumPy's PCG64 on the host and converts to the backend once per draw."""

    def __init__(self, backend: Backend, seed_seq: np.random.SeedSequence, device: Any = None):
        self.backend = backend
        self.device = backend.default_device if device is None else device
        self._seed_seq = seed_seq
        self._np = np.random.Generator(np.random.PCG64(seed_seq))
        self._identity = backend.numpy_arrays

    @classmethod
    def from_numpy(cls, backend: Backend, gen: np.random.Generator, device: Any = None) -> "HostGenerator":
        """Wrap an existing :class:`numpy.random.Generator` (it is used, not copied)."""
        self = cls.__new__(cls)
        self.backend = backend
        self.device = backend.default_device if device is None else device
        self._seed_seq = gen.bit_generator.seed_seq
        self._np = gen
        self._identity = backend.numpy_arrays
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

    def integers(self, high, shape, dtype=None):
        dt = np.int64 if dtype is None else numpy_dtype(dtype)
        return self._out(self._np.integers(0, high, size=shape, dtype=dt), dtype)

    def spawn(self, n):
        return [type(self)(self.backend, s, self.device) for s in self._seed_seq.spawn(n)]

    @property
    def numpy_generator(self) -> np.random.Generator:
        """The underlying NumPy generator."""
        return self._np


def set_rows_inplace(table: Any, rows_idx: Any, rows: Any) -> Any:
    """Native ``set_rows`` for libraries with integer-array assignment (NumPy, PyTorch, CuPy): in place."""
    table[rows_idx] = rows
    return table
