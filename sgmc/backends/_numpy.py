"""NumPy backend (CPU), with the native fast paths NumPy offers beyond the array API."""

from __future__ import annotations

import numpy as np
from array_api_compat import numpy as np_compat

from .._distinct import complete_rows, oversample
from . import _numba, _scatter
from ._base import Backend, HostGenerator, set_rows_inplace
from ._numpy_ranks import rank_normal


#: Fewest integer draws (batch times draws per row) for which a sparse subset draw runs the compiled
#: first-distinct pass (where Numba is on and already loaded) rather than the packed sort.
COMPILED_MIN_DRAWS = 0


def _from_host(a, dtype, device):
    return np.asarray(a) if dtype is None else np.asarray(a, dtype=dtype)


def subsample(rng, n_data: int, size: int, batch: int, replace: bool = False) -> np.ndarray:
    """Native twin of :func:`sgmc._sampling.subsample` for generators drawing NumPy arrays.

    Same draws, same result: the first ``size`` distinct values of each row of ``m`` i.i.d. integer
    draws, in draw order (rows short of ``size`` distinct values continue their own draws), or for dense
    subsets the ``size`` smallest of ``n_data`` uniform keys in key order. What differs is the
    arithmetic: copies of a value are found with one in-place sort per row of (value, position) keys
    packed into one integer, narrowed to int32 when they fit (a sort of half the width), and dropped
    sparsely (there are about ``size**2 / (2 n_data)`` of them); dense subsets use a partial sort.
    """
    gen = rng.numpy_generator
    if replace:
        # a flat size skips NumPy's shape product; the values fill the rows in the same order
        return gen.integers(0, n_data, size=batch * size, dtype=np.int64).reshape(batch, size)
    if size == n_data or size * 4 > n_data:
        keys = gen.random((batch, n_data))
        if size == n_data:
            return np.argsort(keys, axis=1, kind="stable")
        part = np.argpartition(keys, size - 1, axis=1)[:, :size]
        order = np.argsort(np.take_along_axis(keys, part, axis=1), axis=1, kind="stable")
        return np.take_along_axis(part, order, axis=1).astype(np.int64, copy=False)
    m = oversample(size, n_data)
    if batch * m >= COMPILED_MIN_DRAWS and _numba.loaded():
        # the compiled pass, one bitmap per row instead of a sort, where Numba is on and already loaded
        # (by a compiled path of the run): it saves about 20 us per draw of 1000 of 100,000, which
        # would take tens of thousands of draws to repay loading Numba for it alone; same values
        draws = gen.integers(0, n_data, size=batch * m, dtype=np.int64).reshape(batch, m)
        found = _numba.first_distinct(draws, size, n_data)
        if found is not NotImplemented:
            rows, ok = found
            if not ok.all():  # rows short of `size` distinct values continue their own draws
                rows[~ok] = complete_rows(draws[~ok], size, n_data)
            return rows
        return _first_distinct_sorted(draws, size, n_data, m)
    kind = _draw_kind(n_data, m)
    return _first_distinct_sorted(gen.integers(0, n_data, size=batch * m, dtype=kind).reshape(batch, m), size,
                                  n_data, m)


def _draw_kind(n_data: int, m: int):
    shift = (m - 1).bit_length()
    # NumPy draws the same values (and advances the generator alike) whatever the integer width.
    return np.int32 if ((n_data - 1) << shift | ((1 << shift) - 1)) < 2**31 else np.int64


def _first_distinct_sorted(draws: np.ndarray, size: int, n_data: int, m: int) -> np.ndarray:
    """The first ``size`` distinct values of each row of ``draws`` (batch, m), by one packed sort per row."""
    batch = draws.shape[0]
    draws = draws.astype(_draw_kind(n_data, m), copy=False)
    shift = (m - 1).bit_length()
    low = (1 << shift) - 1
    cols = np.arange(m, dtype=draws.dtype)
    out = None
    todo = None
    b = batch
    while b:
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
            ok = rank[:, -1] >= size
            if not complete:
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
        # rows short of `size` distinct values continue their own draws, as in the twin
        out[todo[~ok]] = complete_rows(draws[~ok], size, n_data)
        break
    return out


def ancestors_from_counts(counts: np.ndarray) -> np.ndarray:
    """Native twin of :func:`sgmc.ssm.resampling.ancestors_from_counts`: a histogram and a running sum.

    Slot ``k`` of a row descends from ``#{i : counts[i] <= k}``, the running sum of the histogram of
    the cumulative counts: one ``bincount`` and one integer ``cumsum`` over all rows at once.
    """
    b, n = counts.shape
    flat = counts if b == 1 else counts + (n + 1) * np.arange(b, dtype=np.int64)[:, None]
    hist = np.bincount(flat.reshape(-1), minlength=b * (n + 1)).reshape(b, n + 1)[:, :n]
    return np.cumsum(hist, axis=1)


def resample_systematic(weights: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Native twin of :func:`sgmc.ssm.resampling.systematic_ancestors`, the same arithmetic in place."""
    b, n = weights.shape
    c = np.cumsum(weights, axis=1, dtype=np.float64)
    c *= (n / float(c[0, -1])) if b == 1 else (n / c[:, -1:])
    c[:, -1] = n
    c += u[:, None]
    counts = c.astype(np.int64)  # floor: every entry is non-negative
    # Every scaled entry is at most n (1 + 3 eps) and the sum with u rounds once more, so no count
    # exceeds n unless u >= 1 - (4 n + 1) eps: only then is the clip of the twin needed.
    top = float(u[0]) if b == 1 else float(u.max())
    if top >= 1.0 - (4 * n + 2) * 2.0**-52:
        np.minimum(counts, n, out=counts)
    return ancestors_from_counts(counts)


def _first_taker(*paths):
    """One table entry from several native paths: the first that does not return ``NotImplemented``."""
    *first, last = paths

    def call(*args):
        for path in first:
            out = path(*args)
            if out is not NotImplemented:
                return out
        return last(*args)

    call.paths = paths
    call.__doc__ = "Native paths tried in turn: " + ", ".join(p.__module__ + "." + p.__name__ for p in paths)
    return call


def _table() -> dict:
    own = {
        "subsample": subsample,
        "set_rows": set_rows_inplace,
        "scatter_add": _scatter.scatter_add_numpy,
        "resample_systematic": resample_systematic,
        "ancestors_from_counts": ancestors_from_counts,
        "rank_normal": rank_normal,
    }
    # compiled CPU loops, when Numba is installed (pip install "sgmc[cpu]"); SGMC_NATIVE=0 disables.
    # Where both offer a path, the compiled one runs first and NumPy's takes what it declines.
    for name, path in _numba.natives().items():
        own[name] = _first_taker(path, own[name]) if name in own else path
    return own


def make_backend() -> Backend:
    backend = Backend(
        name="numpy",
        xp=np_compat,
        make_generator=lambda ss, device: HostGenerator(backend, ss, device),
        to_host=np.asarray,
        from_host=_from_host,
        quiet_float=lambda: np.errstate(over="ignore", invalid="ignore", divide="ignore"),
        default_device="cpu",
        native=_table(),
        numpy_arrays=True,
    )
    return backend

