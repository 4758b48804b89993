"""JAX's compiled blocks of iterations: ``jax.jit`` of a ``jax.lax.scan`` over a sampler's ``step``.

The runner's seam for them is the JAX backend's native ``"block_runner"``
(:mod:`sgmc.samplers._compiled` explains the blocks and their guarantees); this module holds what
touches JAX itself: tracing the step with a key stream, compiling ahead of time (so the compile is
timed apart), the donated write of kept draws, and the one copy of a block's step statistics to the
host.
"""

from __future__ import annotations

import functools
import time
import types
from collections import OrderedDict
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._values import TracingError

__all__ = ["BlockRunner"]

_UNTRACEABLE = (TracingError, jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError,
                jax.errors.TracerIntegerConversionError)


class BlockRunner:
    """Compiles and runs blocks of ``step`` for one sampler and estimator (one run's; not shared).

    ``run`` returns ``(state, positions, grads, infos, at, stats)``, or ``None`` when the block must be run
    step by step (it cannot be traced, ``declined`` is then set; or a position in it is not finite, and
    nothing was kept). ``at(w)``, where the block kept them, gives the state where its window ``w`` ends;
    ``stats``, when asked for, each window's statistics for the loop's watch.
    """

    def __init__(self, sampler: Any, estimator: Any, stream: Any):
        self.sampler, self.estimator = sampler, estimator
        self._stream = stream  # KeyStream: a key as the generator of one traced step
        self.declined = False
        #: Seconds spent compiling, summed over the block shapes of the run.
        self.compile_seconds = 0.0
        self._compiled: dict = {}
        self._write = _WRITE
        self._held: list = []  # what the cache key names by identity, kept alive while the entry is
        try:
            self._key = (_fingerprint(sampler, self._held), _fingerprint(estimator, self._held))
            hash(self._key)
        except TypeError:  # something unhashable inside: compiled for this run only
            self._key = None

    def _function(self, windows: int, n: int, keep_grads: bool, stein: bool, args: tuple) -> Any:
        state = args[1]
        sig = (windows, n, keep_grads, stein, jax.tree.structure(state),
               tuple((tuple(x.shape), str(x.dtype)) for x in jax.tree.leaves(state)))
        fn = self._compiled.get(sig)
        if fn is None and self._key is not None:
            fn = _CACHE.get((self._key, sig))
            if fn is not None:
                _CACHE.move_to_end((self._key, sig))
                self._compiled[sig] = fn
        if fn is None:
            sampler, estimator, key_stream = self.sampler, self.estimator, self._stream
            want_grads = keep_grads or stein

            def body(carry, h):
                k, s = carry
                stream = key_stream(k)
                nxt, info = sampler.step(stream, s, estimator, h)
                nxt = jax.tree.map(lambda new, old: new.astype(old.dtype), nxt, s)
                return (stream.key, nxt), (nxt.position, nxt.grad if want_grads else None, info)

            def window(carry, hw):
                carry, out = jax.lax.scan(body, carry, hw)
                return carry, (carry if windows > 1 else None, out)  # (key, state) where each window ends

            def block(key, state, hs, centre, start):
                (key, state), (ends, out) = jax.lax.scan(window, (key, state), hs)
                positions, grads, infos = jax.tree.map(lambda a: jnp.reshape(a, (-1,) + a.shape[2:]), out)
                stats = _window_stats(positions, grads if stein else None, centre, start, windows)
                return key, state, ends, (positions, grads if keep_grads else None, infos), stats

            t0 = time.perf_counter()
            try:
                fn = jax.jit(block).lower(*args).compile()
            except _UNTRACEABLE:
                self.declined = True
                return None
            self.compile_seconds += time.perf_counter() - t0
            self._compiled[sig] = fn
            if self._key is not None:
                _CACHE[(self._key, sig)] = fn
                _HELD[(self._key, sig)] = self._held
                while len(_CACHE) > CACHE_SIZE:
                    old, _ = _CACHE.popitem(last=False)
                    _HELD.pop(old, None)
        return fn

    def run(self, gen: Any, state: Any, hs: list, keep_grads: bool, window: int = 0, watch: Any = None) -> Any:
        """Run ``len(hs)`` iterations from the generator ``gen`` (a :class:`~sgmc.backends._jax.JaxGenerator`).

        With ``window`` dividing ``len(hs)``, the block is a scan over windows of ``window`` iterations
        that also keeps the key and state where each window ends (when they are small: see
        :func:`_windows`), so the loop may end at any of them (``at``). With ``watch``, ``(centre,
        start, stein)`` of the loop's :class:`~sgmc.diagnostics.runaway.Watch`, the block also returns
        each window's statistics (:func:`_window_stats`), computed where the draws are and copied to the
        host with the block's finiteness flag.
        """
        state = jax.tree.map(_typed, state)
        n = len(hs)
        windows = _windows(n, window, state)
        dtype = state.position.dtype
        hs_arr = jnp.reshape(jnp.asarray(hs, dtype=dtype), (windows, n // windows))
        centre, start, stein = watch if watch is not None else (None, n, False)
        centre = jnp.zeros(state.position.shape, dtype) if centre is None else jnp.asarray(centre, dtype)
        args = (gen.key, state, hs_arr, centre, jnp.asarray(start, dtype=jnp.int32))
        fn = self._function(windows, n, bool(keep_grads), bool(stein), args)
        if fn is None:
            out = _step_by_step(self.sampler, self.estimator, gen, state, hs, keep_grads or stein)
            return (*out, None, None)
        new_key, new_state, ends, (positions, grads, infos), stats = fn(*args)
        # one copy to the host: the finiteness flag and, when asked for, the windows' statistics
        ok, stats = jax.device_get((stats[-1], stats[:-1] if watch is not None else None))
        if not ok:
            # Diverged inside the block: leave the generator and state as they were, so that the step-by-step
            # loop runs the same iterations and reports the divergence at its iteration, with its draws.
            self.declined = True
            return None
        gen.continue_from(new_key)

        def at(w: int) -> Any:
            """The state where window ``w`` of the block ends; the generator goes back to its key there."""
            key_w, state_w = jax.tree.map(lambda a: a[w], ends)
            gen.continue_from(key_w)
            return state_w

        return new_state, positions, grads, _unstack(infos, n), at if ends is not None else None, stats

    def write(self, buffer: Any, start: int, rows: Any) -> Any:
        """``buffer[:, start:start + rows.shape[1], :] = rows``, in the donated buffer."""
        return self._write(buffer, start, rows)


def _window_stats(positions: Any, grads: Any, centre: Any, start: Any, windows: int) -> tuple:
    """Per window of a block: ``(abs_max, stein, stein_n, all finite)`` as :class:`~sgmc.diagnostics.runaway.Watch` folds them.

    ``abs_max`` (windows, chains): the largest ``|theta_i|``; with ``grads``, ``stein`` (windows, chains):
    the sum of ``(theta_k - c) . g_k`` over the window's iterations after ``start`` (the block's index of
    the first kept iteration, whose position is then ``c``; below 0, ``c`` is ``centre``), and
    ``stein_n`` (windows,) their number; the last element says whether every position is finite.
    """
    n, chains = positions.shape[0], positions.shape[1]
    shape = (windows, n // windows, chains)
    abs_max = jnp.max(jnp.reshape(jnp.max(jnp.abs(positions), axis=-1), shape), axis=1)
    finite = jnp.all(jnp.isfinite(positions))
    if grads is None:
        return abs_max, None, None, finite
    i = jnp.arange(n)
    c = jnp.where(start >= 0, positions[jnp.clip(start, 0, n - 1)], centre)
    after = i > start
    u = jnp.where(after[:, None], jnp.sum((positions - c[None, ...]) * grads, axis=-1), 0.0)
    return (abs_max, jnp.sum(jnp.reshape(u, shape), axis=1),
            jnp.sum(jnp.reshape(after, shape[:2]), axis=1), finite)


#: Most bytes of window-end states one block keeps (beyond it, the block is one window).
_ENDS_BYTES = 64 << 20


def _windows(n: int, window: int, state: Any) -> int:
    """How many windows of ``window`` iterations the block of ``n`` is scanned as (1: one window)."""
    if window <= 0 or n <= window or n % window:
        return 1
    size = sum(int(x.size) * x.dtype.itemsize for x in jax.tree.leaves(state))
    return n // window if (n // window) * size <= _ENDS_BYTES else 1


def _write_rows(buffer: Any, start: Any, rows: Any) -> Any:
    return jax.lax.dynamic_update_slice(buffer, rows.astype(buffer.dtype), (0, start, 0))


_WRITE = jax.jit(_write_rows, donate_argnums=0)

#: Most compiled blocks kept across runs (the least recently used goes first).
CACHE_SIZE = 16
_CACHE: OrderedDict = OrderedDict()
_HELD: dict = {}
#: Most elements of a NumPy array named by its contents in a cache key (a larger one: by identity).
_BY_VALUE = 4096


def clear_cache() -> None:
    """Forget the compiled blocks kept across runs (and the objects their keys hold)."""
    _CACHE.clear()
    _HELD.clear()


def _fingerprint(obj: Any, held: list, depth: int = 0) -> Any:
    """A hashable summary of ``obj`` as far as a traced ``step`` can read it, for the cache of compiled blocks.

    Compiled blocks are kept across runs (``sgmc.sample`` called again with the same sampler settings,
    estimator and model compiles nothing), so the key must change whenever anything the trace reads
    does: numbers, strings and ``None`` enter by value, containers item by item, an object by its
    type and attributes (to a depth of four), a small NumPy array by its bytes, and everything else
    (JAX arrays, which are immutable; functions, classes and modules; large arrays; objects deeper
    than four levels) by identity, held in ``held`` so that the identity cannot be reused while the
    cached entry lives. A large NumPy array changed in place keeps its identity: the cached block
    would keep the old values, so change such data by building a new model (or call
    :func:`clear_cache`).
    """
    if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes)):
        return type(obj).__name__, obj
    if isinstance(obj, (tuple, list)):
        return type(obj).__name__, tuple(_fingerprint(o, held, depth) for o in obj)
    if isinstance(obj, (set, frozenset)):
        return type(obj).__name__, tuple(sorted((_fingerprint(o, held, depth) for o in obj), key=repr))
    if isinstance(obj, dict):
        return "dict", tuple(sorted((repr(k), _fingerprint(v, held, depth)) for k, v in obj.items()))
    if isinstance(obj, np.ndarray) and obj.size <= _BY_VALUE:
        return "ndarray", obj.shape, obj.dtype.str, obj.tobytes()
    held.append(obj)
    attrs = getattr(obj, "__dict__", None)
    array = hasattr(obj, "shape") and hasattr(obj, "dtype")  # JAX arrays carry an empty __dict__
    if attrs is None or array or depth >= 4 or isinstance(obj, _BY_IDENTITY):
        return "id", id(obj)
    return type(obj), tuple(sorted((k, _fingerprint(v, held, depth + 1)) for k, v in attrs.items()))


#: Objects named by identity whatever their attributes: code (two functions with no attributes differ).
_BY_IDENTITY = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
                functools.partial)


def _typed(x: Any) -> Any:
    """A state leaf as a JAX array of a fixed dtype (a Python count becomes a strongly typed integer)."""
    a = jnp.asarray(x)
    return jnp.asarray(a, dtype=a.dtype)


def _unstack(infos: Any, n: int) -> list:
    """The scan's stacked step infos as one info per iteration, with host values (one copy per block)."""
    host = jax.device_get(infos)
    leaves, tree = jax.tree.flatten(host)
    cols, same = [], True
    for leaf in leaves:
        if leaf.ndim == 1 and (leaf == leaf[0]).all():
            cols.append([leaf[0].item()] * n)   # the same number every iteration
        else:
            cols.append(list(leaf))
            same = False
    if same and n:  # every iteration's info is equal: one immutable info serves them all
        one = jax.tree.unflatten(tree, [c[0] for c in cols])
        if _immutable(one):
            return [one] * n
    return [jax.tree.unflatten(tree, [c[i] for c in cols]) for i in range(n)]


def _immutable(x: Any) -> bool:
    """Whether ``x`` holds nothing that could be changed in place (tuples of numbers and ``None``)."""
    if isinstance(x, tuple):
        return all(_immutable(c) for c in x)
    return x is None or isinstance(x, (bool, int, float, complex, str))


def _step_by_step(sampler: Any, estimator: Any, gen: Any, state: Any, hs: list, keep_grads: bool) -> tuple:
    positions, grads, infos = [], [], []
    for h in hs:
        state, info = sampler.step(gen, state, estimator, h)
        positions.append(state.position)
        grads.append(state.grad)
        infos.append(info)
    return state, jnp.stack(positions), jnp.stack(grads) if keep_grads else None, infos
