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
import sys
from types import ModuleType
from typing import Any, Callable

import numpy as np
import array_api_compat

from .._array_api import array_namespace, device_of, is_array
from ._base import REGISTRY_LOOKUP, Backend, Generator, HostGenerator
from ._values import is_jax_key

__all__ = [
    "Backend",
    "Generator",
    "HostGenerator",
    "get_backend",
    "available_backends",
    "default_rng",
    "asarray",
    "to_numpy",
    "synchronize",
    "register",
    "registered",
    "require",
    "move",
]

_LOADERS: dict[str, Callable[[], Backend]] = {}
_OWNS: dict[str, Callable[[Any], bool]] = {}
_CACHE: dict[str, Backend] = {}
_INSTALL: dict[str, str] = {}


def register(
    name: str,
    loader: Callable[[], Backend],
    owns: Callable[[Any], bool] | None = None,
    *,
    install: str | None = None,
) -> None:
    """Register a backend: ``loader() -> Backend`` runs on first use, ``owns(xp)`` recognises its namespace.

    After registration the name works wherever sgmc takes ``backend=`` (``sample``, the models,
    the data sets, ``ksd``, ``tune_step_size``, ``default_rng``, ``asarray``, :func:`move`), and
    arrays of the library find their backend by themselves. docs/backends.md has a worked example.

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
    install : str, optional
        How to install the library, quoted when ``loader`` raises ``ImportError``.

    Examples
    --------
    A backend under a new name for the array-api-strict namespace (a real one would wrap JAX, dpnp,
    ...), with host-drawn random numbers:

    >>> import array_api_strict
    >>> from sgmc import backends
    >>> from sgmc.backends import Backend, HostGenerator
    >>> def load():
    ...     strict = backends.get_backend("array_api_strict")
    ...     be = Backend(name="mystrict", xp=array_api_strict,
    ...                  make_generator=lambda seq, device: HostGenerator(be, seq, device),
    ...                  to_host=strict.to_host, from_host=strict.from_host,
    ...                  default_device=strict.default_device)
    ...     return be
    >>> backends.register("mystrict", load)
    >>> backends.asarray([1.0, 2.0], backend="mystrict").shape
    (2,)
    """
    _LOADERS[name] = loader
    if install is not None:
        _INSTALL[name] = install
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


def _load_jax() -> Backend:
    from ._jax import make_backend

    return make_backend()


def _owns_jax(xp: Any) -> bool:
    # JAX's namespace itself, not any module that takes its name (and without importing JAX)
    return array_api_compat.is_jax_namespace(xp) and sys.modules.get(xp.__name__) is xp


def _load_cupy() -> Backend:
    from .cupy import make_backend

    return make_backend()


register("numpy", _load_numpy, array_api_compat.is_numpy_namespace)
register("array_api_strict", _load_strict, array_api_compat.is_array_api_strict_namespace,
         install="pip install array-api-strict")
register("torch", _load_torch, array_api_compat.is_torch_namespace, install="pip install torch")
register("cupy", _load_cupy, array_api_compat.is_cupy_namespace, install='pip install "sgmc[gpu]"')
register("jax", _load_jax, _owns_jax, install='pip install "sgmc[jax]"')

# "jaxlib" is the module of JAX's array and device types, by which stored devices find their backend
_ALIASES = {"jax.numpy": "jax", "jaxlib": "jax", "np": "numpy", "strict": "array_api_strict", "array-api-strict": "array_api_strict"}


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
            how = _INSTALL.get(key, "install its library")
            msg = f"backend {key!r} is not installed here ({exc}); {how}, or use backend='numpy'"
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
        ``"numpy"``, ``"array_api_strict"``, ``"torch"``, ``"cupy"``, ``"jax"`` or a registered name; or an
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


REGISTRY_LOOKUP[:] = [get_backend]  # backends unpickle by name through the registry


def require(backend: Any) -> Backend:
    """The backend for ``backend`` (a name or a Backend), checked to be able to compute here.

    Raises
    ------
    ImportError
        The backend's library is not installed; the message says how to install it (for CuPy,
        ``pip install "sgmc[gpu]"``).
    RuntimeError
        The library is installed but cannot compute here (CuPy without a usable CUDA device); the
        message says why.
    """
    be = get_backend(backend)
    if not be.is_available():
        why = be.unavailable_reason() or "its is_available() check is false"
        msg = f"backend {be.name!r} cannot compute on this machine: {why}"
        raise RuntimeError(msg)
    return be


def _target_dtype(be: Backend, dtype: Any) -> Any:
    from ._base import numpy_dtype

    try:
        return getattr(be.xp, numpy_dtype(dtype).name)
    except (TypeError, AttributeError):
        return dtype


def _move_value(value: Any, be: Backend, device: Any, memo: dict) -> Any:
    if id(value) in memo:
        return memo[id(value)]
    if is_array(value):
        out = asarray(value, backend=be, device=device)
    elif hasattr(value, "xp") and hasattr(value, "__dict__") and not isinstance(value, ModuleType):
        out = _move_object(value, be, device, memo)
    elif isinstance(value, tuple) and hasattr(value, "_fields"):
        out = type(value)(*(_move_value(v, be, device, memo) for v in value))
    elif isinstance(value, (tuple, list)):
        out = type(value)(_move_value(v, be, device, memo) for v in value)
    elif isinstance(value, dict):
        out = {k: _move_value(v, be, device, memo) for k, v in value.items()}
    else:
        out = value
    memo[id(value)] = out
    return out


def _move_object(obj: Any, be: Backend, device: Any, memo: dict) -> Any:
    import copy

    new = copy.copy(obj)
    memo[id(obj)] = new
    first = None
    for key, value in vars(obj).items():
        if key == "xp":
            continue
        moved = _move_value(value, be, device, memo)
        if first is None and is_array(moved):
            first = moved
        new.__dict__[key] = moved
    new.xp = be.xp
    if "device" in vars(obj):
        new.device = device_of(first) if first is not None else device
    if "dtype" in vars(obj):
        new.dtype = _target_dtype(be, obj.dtype)
    hook = getattr(new, "_moved", None)
    if callable(hook):
        hook(be)
    return new


def move(obj: Any, backend: Any, *, device: Any = None) -> Any:
    """Copy an array, a model, or a tuple/list/dict of them to ``backend`` (and ``device``): the explicit move.

    This is what ``backend=`` does in :func:`sgmc.sample`, the model constructors, the data-set
    loaders, :func:`sgmc.diagnostics.ksd` and :func:`sgmc.tune_step_size`; sgmc copies data between
    libraries or devices nowhere else. A model is copied shallowly with every array attribute (and
    nested model) converted, and ``xp``, ``device`` and ``dtype`` updated; a model whose arrays are
    already there is returned as it is.

    Parameters
    ----------
    obj : array, model, or tuple/list/dict/NamedTuple of them
    backend : str or Backend
        Checked with :func:`require`: a missing library or GPU raises with what to install.
    device : optional
        Target device; the backend's default (CuPy: the current device) if omitted.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc import backends
    >>> from sgmc.models import LinearRegression
    >>> model = LinearRegression(np.eye(3), np.ones(3))
    >>> moved = backends.move(model, "array_api_strict")
    >>> backends.get_backend(moved.X).name, backends.get_backend(model.X).name
    ('array_api_strict', 'numpy')
    """
    be = require(backend)
    if device is None:
        device = be.default_device
    if is_array(obj):
        if get_backend(obj) == be and (device is None or device_of(obj) == device):
            return obj
        return asarray(obj, backend=be, device=device)
    xp = getattr(obj, "xp", None)
    if xp is not None and not isinstance(obj, ModuleType):
        same = get_backend(xp) == be
        here = getattr(obj, "device", None)
        if same and (device is None or here is None or here == device):
            return obj
        return _move_object(obj, be, device, {})
    if isinstance(obj, (tuple, list, dict)):
        return _move_value(obj, be, device, {})
    msg = f"`obj` must be an array, a model or a container of them; got {type(obj).__name__}"
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
    seed : None, int, numpy.random.SeedSequence, numpy.random.Generator, sgmc Generator or JAX key
        ``None`` draws fresh OS entropy; an int or SeedSequence seeds PCG64 (CuPy, torch and JAX: their
        own generators seeded from the sequence); a NumPy Generator is used as is (host backends
        only); an sgmc Generator is returned unchanged after checking it belongs to ``backend`` and
        ``device``; a JAX key seeds the sequence with its bits (the same key gives the same run).
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
        if device is not None and seed.device is not None and seed.device != device:
            # (a JAX key's stream has no device of its own: its draws go where the computation runs)
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
    if is_jax_key(seed):
        # a JAX key seeds the run's sequence with its bits: the same key, the same run
        import jax  # noqa: PLC0415 - only JAX keys come here

        data = jax.random.key_data(seed) if jax.dtypes.issubdtype(seed.dtype, jax.dtypes.prng_key) else seed
        seed = np.random.SeedSequence([int(w) for w in np.asarray(data, dtype=np.uint32).ravel()])
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
