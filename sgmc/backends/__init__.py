"""Backend registry: which array library runs the computation, and its random numbers.

Algorithms in sgmc never pick a backend themselves: the arrays they are given decide. This module
answers the questions that arise where no array comes in (simulators, ``default_rng``) and converts
explicitly between libraries.

>>> from sgmc import backends
>>> rng = backends.default_rng(0)                      # NumPy generator, SPEC 7 semantics
>>> x = backends.asarray([1.0, 2.0], backend="numpy")
>>> backends.get_backend(x).name
'numpy'
"""

from __future__ import annotations

import difflib
from types import ModuleType
from typing import Any, Callable

import numpy as np
import array_api_compat

from .._array_api import array_namespace, is_array
from ._base import Backend, Generator, HostGenerator

__all__ = [
    "Backend",
    "Generator",
    "get_backend",
    "available_backends",
    "default_rng",
    "asarray",
    "to_numpy",
    "synchronize",
    "register",
    "registered",
]

_LOADERS: dict[str, Callable[[], Backend]] = {}
_OWNS: dict[str, Callable[[Any], bool]] = {}
_CACHE: dict[str, Backend] = {}


def register(name: str, loader: Callable[[], Backend], owns: Callable[[Any], bool] | None = None) -> None:
    """Register a backend: ``loader() -> Backend`` runs on first use, ``owns(xp)`` recognises its namespace.

    Parameters
    ----------
    name : str
        Registry name; ``Backend.name`` of what ``loader`` returns must equal it, since backends
        pickle by name (a worker process must register the same name before it unpickles one).
    loader : callable
        Builds the :class:`Backend`; it may import the library (registration itself imports nothing).
    owns : callable, optional
        ``owns(namespace) -> bool``, true for the library's array-API namespace, so that
        ``get_backend(array)`` finds the backend from arrays alone. Without it only lookups by name
        find the backend.
    """
    _LOADERS[name] = loader
    if owns is not None:
        _OWNS[name] = owns
    else:
        _OWNS.pop(name, None)
    _CACHE.pop(name, None)


def _load_numpy() -> Backend:
    from ._numpy import make_backend

    return make_backend()


def _load_strict() -> Backend:
    from ._strict import make_backend

    return make_backend()


def _load_torch() -> Backend:
    from ._torch import make_backend

    return make_backend()


def _load_cupy() -> Backend:
    from .cupy import make_backend

    return make_backend()


register("numpy", _load_numpy, array_api_compat.is_numpy_namespace)
register("array_api_strict", _load_strict, array_api_compat.is_array_api_strict_namespace)
register("torch", _load_torch, array_api_compat.is_torch_namespace)
register("cupy", _load_cupy, array_api_compat.is_cupy_namespace)

_ALIASES = {"np": "numpy", "strict": "array_api_strict", "array-api-strict": "array_api_strict"}


def _by_name(name: str) -> Backend:
    key = _ALIASES.get(name, name)
    if key not in _LOADERS:
        close = difflib.get_close_matches(str(name), list(_LOADERS) + list(_ALIASES), n=1)
        hint = f" did you mean {_ALIASES.get(close[0], close[0])!r}?" if close else ""
        msg = f"unknown backend {name!r};{hint} known backends are {sorted(_LOADERS)}"
        raise ValueError(msg)
    if key not in _CACHE:
        try:
            backend = _LOADERS[key]()
        except ImportError as exc:
            msg = f"backend {key!r} is not installed ({exc}); install it or use backend='numpy'"
            raise ImportError(msg) from exc
        if backend.name != key:
            msg = f"the loader registered as {key!r} returned a backend named {backend.name!r}"
            raise ValueError(msg)
        _CACHE[key] = backend
    return _CACHE[key]


def _by_namespace(xp: Any) -> Backend:
    for name, owns in _OWNS.items():
        if owns(xp):
            return _by_name(name)
    label = getattr(xp, "__name__", type(xp).__name__)
    msg = (
        f"no registered backend claims the array namespace {label!r}; known backends are "
        f"{sorted(_LOADERS)} (register one with sgmc.backends.register)"
    )
    raise TypeError(msg)


def get_backend(obj: Any = "numpy") -> Backend:
    """Return the :class:`Backend` for a name, a namespace module, an array or a generator.

    Parameters
    ----------
    obj : str, module, array, Backend or Generator
        ``"numpy"``, ``"array_api_strict"``, ``"torch"``, ``"cupy"`` or a registered name; or an
        array namespace; or an array whose library is used.
    """
    if isinstance(obj, Backend):
        return obj
    if isinstance(obj, Generator):
        return obj.backend
    if isinstance(obj, str):
        return _by_name(obj)
    if isinstance(obj, ModuleType):
        return _by_namespace(obj)
    if is_array(obj):
        return _by_namespace(array_namespace(obj))
    msg = f"cannot infer a backend from {type(obj).__name__}; pass a backend name such as 'numpy'"
    raise TypeError(msg)


def registered() -> list[str]:
    """Names of the registered backends, whether or not their library is installed."""
    return list(_LOADERS)


def available_backends() -> list[str]:
    """Names of the backends that import on this machine (CuPy only with a usable CUDA device)."""
    out = []
    for name in _LOADERS:
        try:
            b = _by_name(name)
        except ImportError:
            continue
        if not b.is_available():
            continue
        out.append(name)
    return out


def _seed_sequence(seed: Any) -> np.random.SeedSequence:
    if seed is None or (isinstance(seed, (int, np.integer)) and not isinstance(seed, bool)):
        if seed is not None and int(seed) < 0:
            msg = f"`rng` (a seed) must be a non-negative integer; got {seed}"
            raise ValueError(msg)
        return np.random.SeedSequence(None if seed is None else int(seed))
    if isinstance(seed, np.random.SeedSequence):
        return seed
    msg = (
        "`rng` must be None, a non-negative int, a numpy SeedSequence, a numpy Generator or an sgmc "
        f"Generator; got {type(seed).__name__}"
    )
    raise TypeError(msg)


def default_rng(seed: Any = None, *, backend: Any = "numpy", device: Any = None) -> Generator:
    """Return a random generator for ``backend`` (SPEC 7 semantics).

    Parameters
    ----------
    seed : None, int, numpy.random.SeedSequence, numpy.random.Generator or sgmc Generator
        ``None`` draws fresh OS entropy; an int or SeedSequence seeds PCG64 (CuPy: its own generator
        seeded from the sequence); a NumPy Generator is used as is (host backends only); an sgmc
        Generator is returned unchanged after checking it belongs to ``backend`` and ``device``.
    backend : str, module, array or Backend, default "numpy"
    device : optional
        Device the draws are made on; the backend's default if omitted.

    Returns
    -------
    Generator

    Examples
    --------
    >>> from sgmc.backends import default_rng
    >>> rng = default_rng(42)
    >>> rng.normal((2, 3)).shape
    (2, 3)
    >>> a, b = rng.spawn(2)      # independent streams, e.g. one per chain group
    """
    be = get_backend(backend)
    if isinstance(seed, Generator):
        if seed.backend != be:
            msg = (
                f"`rng` belongs to backend {seed.backend.name!r} but the arrays are {be.name!r}; "
                f"create it with sgmc.backends.default_rng(seed, backend={be.name!r})"
            )
            raise TypeError(msg)
        if device is not None and seed.device != device:
            if isinstance(seed, HostGenerator):
                return HostGenerator.from_numpy(be, seed.numpy_generator, device)
            msg = f"`rng` draws on device {seed.device!r} but the arrays are on {device!r}"
            raise ValueError(msg)
        return seed
    if isinstance(seed, np.random.Generator):
        if not be.on_cpu(be.default_device if device is None else device):
            # a device generator cannot share a host stream: seed it from the same sequence
            return be.make_generator(seed.bit_generator.seed_seq, device)
        return HostGenerator.from_numpy(be, seed, device)
    return be.make_generator(_seed_sequence(seed), device)


def asarray(x: Any, *, backend: Any = "numpy", dtype: Any = None, device: Any = None) -> Any:
    """Convert ``x`` (nested lists, NumPy or any array) to an array of ``backend``: an explicit copy.

    ``dtype`` may be a string (``"float32"``) or a dtype of the target library.
    """
    be = get_backend(backend)
    if is_array(x) and get_backend(x) != be:
        x = get_backend(x).to_host(x)
    if isinstance(dtype, str):
        dtype = getattr(be.xp, dtype)
    if be.numpy_arrays:
        return be.xp.asarray(x, dtype=dtype)
    if isinstance(x, np.ndarray) or not is_array(x):
        x = np.asarray(x)
        if dtype is None and x.dtype.kind == "f":
            dtype = getattr(be.xp, x.dtype.name)
        return be.from_host(x, dtype, device if device is not None else be.default_device)
    out = be.xp.asarray(x, dtype=dtype)
    if device is not None:
        out = be.xp.asarray(out, device=device)
    return out


def to_numpy(x: Any) -> np.ndarray:
    """Copy an array of any registered backend to a NumPy array (for I/O and plotting only)."""
    if isinstance(x, np.ndarray):
        return x
    if not is_array(x):
        return np.asarray(x)
    return get_backend(x).to_host(x)


def synchronize(backend: Any = "numpy") -> None:
    """Wait for queued device work (a no-op on CPU backends); use before reading wall clocks."""
    get_backend(backend).synchronize()
