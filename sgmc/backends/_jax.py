"""JAX backend: ``jax.numpy`` arrays on JAX's devices, random numbers from ``jax.random`` keys.

``jax.numpy`` implements the array API itself, so it is the namespace. Two things set JAX apart from
the other libraries, and both are handled here or in :func:`sgmc._array_api.at`:

* Its arrays are immutable. Every update of part of an array in sgmc goes through
  :func:`sgmc._array_api.at`, which writes in place where the library allows it and builds a new
  array with ``x.at[idx].set(v)`` here.
* Its random numbers are counter-based: a key is split, never advanced. :class:`JaxGenerator` holds
  one key made from the seed's :class:`numpy.random.SeedSequence` and splits it once per draw; its
  children are made from the sequence's children (``spawn``), as for every other backend, so that a
  chain group gets the same stream in this process, in a worker process or on a Dask worker.

Float64 needs ``jax.config.update("jax_enable_x64", True)`` (or ``JAX_ENABLE_X64=1``); without it
JAX computes in float32 and the generator draws float32 and int32 (its warnings that int64 indices
are computed as int32 are silenced inside the sampling loop). A 64-bit array pickled to another
process (a worker of a process pool or of Dask) turns 64-bit mode on there, so that it arrives as it
left.
"""

from __future__ import annotations

import contextlib
import copyreg
import warnings
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from .._distinct import complete_fixed
from ._values import is_tracer
from ._base import REGISTRY_LOOKUP, Backend, Generator, numpy_dtype

__all__ = ["JaxGenerator", "make_backend"]


def _x64() -> bool:
    return bool(jax.config.jax_enable_x64)


def _canonical(dtype) -> np.dtype:
    """The dtype JAX computes in for ``dtype`` (float64 becomes float32 without 64-bit mode)."""
    return np.dtype(jax.dtypes.canonicalize_dtype(numpy_dtype(dtype)))


def _to_host(a) -> np.ndarray:
    return np.asarray(jax.device_get(a))


def _from_host(a: np.ndarray, dtype, device):
    a = np.asarray(a)
    if dtype is not None:
        a = a.astype(_canonical(dtype), copy=False)
    elif a.dtype.itemsize == 8 and not _x64():
        a = a.astype(_canonical(a.dtype), copy=False)  # what JAX would do, without its warning
    return jax.device_put(a, device)


@contextlib.contextmanager
def _quiet():
    """Inside the sampling loop: no warning that int64 indices are int32 without 64-bit mode.

    sgmc asks for int64 indices; JAX in 32-bit mode computes them in int32 (exact below 2**31
    data points) and warns at every such request.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Explicitly requested dtype int64", category=UserWarning)
        yield


def _sync() -> None:
    jax.effects_barrier()


def _on_cpu(device) -> bool:
    return device is None or getattr(device, "platform", "cpu") == "cpu"


def _device_ref(device):
    """Picklable name of a device: (platform, id), or None for the default device."""
    if device is None:
        return None
    return (str(device.platform), int(device.id))


def _device_from_ref(ref):
    if ref is None:
        return None
    platform, ident = ref
    for dev in jax.devices(platform):
        if dev.id == ident:
            return dev
    msg = f"JAX has no {platform} device with id {ident} in this process; it has {jax.devices(platform)}"
    raise ValueError(msg)


def _rebuild_device(platform: str, ident: int):
    return _device_from_ref((platform, ident))


def _reduce_device(dev):
    return (_rebuild_device, _device_ref(dev))


def _rebuild_array(host: np.ndarray, device_ref):
    if host.dtype.itemsize == 8 and host.dtype.kind in "fiuc" and not _x64():
        # A 64-bit array from a process in 64-bit mode (a run's worker): keep it 64-bit here too.
        jax.config.update("jax_enable_x64", True)
    return jax.device_put(host, _device_from_ref(device_ref))


def _reduce_array(a):
    # JAX's own pickling converts 64-bit arrays to 32 bits in a process without 64-bit mode
    # (a fresh worker); this one keeps the dtype, and the host copy travels out of band.
    dev = next(iter(a.devices())) if len(a.devices()) == 1 else None
    return (_rebuild_array, (np.asarray(jax.device_get(a)), _device_ref(dev)))


def _key_from(seed_seq: np.random.SeedSequence, device):
    """A threefry key holding 64 bits of the sequence's state."""
    words = jnp.asarray(seed_seq.generate_state(2, np.uint32))
    key = jax.random.wrap_key_data(words, impl="threefry2x32")
    return key if device is None else jax.device_put(key, device)


@partial(jax.jit, static_argnums=(1, 2))
def _normal(key, shape, dtype):
    key, sub = jax.random.split(key)
    return key, jax.random.normal(sub, shape, dtype)


@partial(jax.jit, static_argnums=(1, 2))
def _uniform(key, shape, dtype):
    key, sub = jax.random.split(key)
    return key, jax.random.uniform(sub, shape, dtype)


@partial(jax.jit, static_argnums=(1, 2))
def _integers(key, shape, dtype, high):
    key, sub = jax.random.split(key)
    return key, jax.random.randint(sub, shape, 0, high, dtype)


#: Largest range drawn by :func:`_scaled_integers` (in 64-bit mode).
_SCALED_MAX = 2**32


@partial(jax.jit, static_argnums=(1, 2, 3))
def _scaled_integers(key, shape, dtype, high):
    """Integers in ``[0, high)`` as ``floor(U * high)``, ``U`` a 64-bit uniform (52 random bits).

    One draw of bits per integer where ``jax.random.randint`` draws two and reduces them (about 3x
    the time of the whole SGLD step's other work on a CPU). Each integer's probability is a whole number
    of the 2**52 values of ``U`` over 2**52, within ``high / 2**52 <= 2**-20`` of ``1 / high``, relative.
    """
    key, sub = jax.random.split(key)
    u = jax.random.uniform(sub, shape, jnp.float64)
    return key, jnp.minimum(jnp.floor(u * high), high - 1).astype(dtype)


class JaxGenerator(Generator):
    """Random numbers from a ``jax.random`` key, split once per draw.

    Parameters
    ----------
    backend : Backend
        The ``"jax"`` backend.
    seed_seq : numpy.random.SeedSequence
        Seeds the key; :meth:`spawn` spawns its children, as :class:`~sgmc.backends.HostGenerator`
        does, so a seed gives the same streams whatever runs them.
    device : jax Device, optional
        Where the key lives and the draws are made (JAX's default device if omitted).

    Notes
    -----
    Integers are drawn in int64 (int32 without 64-bit mode) and then cast, so their values do not
    depend on the ``dtype`` asked for. The generator pickles as its sequence, key and device name.
    """

    def __init__(self, backend: Backend, seed_seq: np.random.SeedSequence, device=None):
        self.backend = backend
        self.device = device
        self._seed_seq = seed_seq
        self._key = _key_from(seed_seq, device)

    def _float(self, dtype) -> np.dtype:
        return _canonical(np.float64 if dtype is None else dtype)

    #: Whether the key may be a traced value (a :class:`KeyStream`); a generator's key is state.
    _traceable = False

    def _advance(self, key, out):
        if not self._traceable and is_tracer(key):
            msg = ("a JaxGenerator keeps its key in Python, so under jax.jit, jax.lax.scan or jax.vmap its "
                   "draws would be frozen at trace time; pass a JAX key as `rng` instead "
                   "(key = jax.random.key(seed), split per call)")
            raise TypeError(msg)
        self._key = key
        return out

    def normal(self, shape, dtype=None):
        return self._advance(*_normal(self._key, tuple(shape), self._float(dtype)))

    def uniform(self, shape, dtype=None):
        return self._advance(*_uniform(self._key, tuple(shape), self._float(dtype)))

    def integers(self, high, shape, dtype=None):
        wide = _canonical(np.int64)
        if isinstance(high, int) and 0 < high <= _SCALED_MAX and jax.config.jax_enable_x64:
            out = self._advance(*_scaled_integers(self._key, tuple(shape), wide, high))
        else:
            out = self._advance(*_integers(self._key, tuple(shape), wide, high))
        want = wide if dtype is None else _canonical(dtype)
        return out if want == wide else out.astype(want)

    def spawn(self, n):
        return [type(self)(self.backend, s, self.device) for s in self._seed_seq.spawn(n)]

    @property
    def key(self):
        """The current key (a new one after every draw)."""
        return self._key

    def continue_from(self, key) -> None:
        """Go on from ``key``: what a compiled block that drew from this generator's key leaves."""
        self._key = key

    def __getstate__(self) -> dict:
        return {"backend": self.backend, "device": _device_ref(self.device), "seed_seq": self._seed_seq,
                "key": np.asarray(jax.random.key_data(self._key))}

    def __setstate__(self, state: dict) -> None:
        self.backend = state["backend"]
        self.device = _device_from_ref(state["device"])
        self._seed_seq = state["seed_seq"]
        key = jax.random.wrap_key_data(jnp.asarray(np.asarray(state["key"], dtype=np.uint32)),
                                       impl="threefry2x32")
        self._key = key if self.device is None else jax.device_put(key, self.device)


def _scatter_add(m: int, index, values):
    """JAX: ``.at[index].add`` into zeros (repeated indices add up), the native ``scatter_add``."""
    return jnp.zeros((m, values.shape[1]), dtype=values.dtype).at[index].add(values)


@partial(jax.jit, static_argnums=(3, 4))
def _complete_rows(rows, ok, draws, size, n_data):
    """JAX: rows short of ``size`` distinct values continued (sgmc._distinct), on the device.

    ``lax.cond`` runs the continuation only when some row fell short (almost never), without
    asking the host; compiled once per shape, so an eager call is one dispatch.
    """
    return jax.lax.cond(jnp.all(ok), lambda: rows,
                        lambda: jnp.where(ok[:, None], rows, complete_fixed(draws, size, n_data, jnp)))


def _block_runner(sampler, estimator):
    """JAX: the compiled blocks of iterations of :mod:`sgmc.samplers._compiled` (a run's runner)."""
    from ._jax_blocks import BlockRunner  # noqa: PLC0415 - loaded by the first run that compiles blocks

    return BlockRunner(sampler, estimator, KeyStream)


def _set_rows(table, rows_idx, rows):
    """JAX: ``table.at[rows_idx].set(rows)``, a new table (JAX arrays are immutable)."""
    return table.at[rows_idx].set(rows)


def make_backend() -> Backend:
    copyreg.pickle(type(jnp.zeros(0)), _reduce_array)
    copyreg.pickle(type(jax.devices()[0]), _reduce_device)
    backend = Backend(
        name="jax",
        xp=jnp,
        make_generator=lambda ss, device: JaxGenerator(backend, ss, device),
        to_host=_to_host,
        from_host=_from_host,
        default_device=jax.devices()[0],
        synchronize=_sync,
        quiet_float=_quiet,
        on_cpu=_on_cpu,
        native={"set_rows": _set_rows, "scatter_add": _scatter_add, "complete_rows": _complete_rows,
                "block_runner": _block_runner},
    )
    return backend


class KeyStream(Generator):
    """A JAX key as the generator of one call: every draw splits the key, as :class:`JaxGenerator` does.

    A call of ``init``, ``step`` or ``estimate`` that is given a JAX key draws from one of these
    (:func:`sgmc._keys.as_generator`). It lives only for that call, so nothing outlives it: the same
    key gives the same draws eagerly and under ``jax.jit``, ``jax.lax.scan`` and ``jax.vmap``. A
    :class:`JaxGenerator` whose current key is ``k`` and a stream of ``k`` make the same draws.

    Parameters
    ----------
    key : JAX key
        Typed (``jax.random.key``) or raw (``jax.random.PRNGKey``, wrapped as threefry2x32).
    """

    def __init__(self, key):
        self.backend = REGISTRY_LOOKUP[0]("jax")
        self.device = None
        if not jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
            key = jax.random.wrap_key_data(key, impl="threefry2x32")
        self._key = key

    _traceable = True
    normal = JaxGenerator.normal
    uniform = JaxGenerator.uniform
    integers = JaxGenerator.integers
    _float = JaxGenerator._float
    _advance = JaxGenerator._advance

    def spawn(self, n):
        keys = jax.random.split(self._key, n + 1)
        self._key = keys[0]
        return [KeyStream(keys[i + 1]) for i in range(n)]

    @property
    def key(self):
        """The key after the draws made so far."""
        return self._key

    def __reduce__(self):
        msg = "a KeyStream lives for one call and does not pickle; pass its key (a value) instead"
        raise TypeError(msg)
