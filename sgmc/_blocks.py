"""Data larger than memory: rows read on demand from a file, zarr or Dask array, and full passes in blocks.

A model built on a :class:`numpy.memmap` (or ``numpy.load(..., mmap_mode="r")``), a zarr array or a
Dask array keeps a :class:`RowSource` instead of the array. A minibatch gather reads only the rows it
needs: the indices are sorted and made unique first, so a file is read in increasing order, in one
read per run of consecutive rows (``os.pread`` on the file: nothing is mapped, so the data take no
address space). A zarr or Dask array stores its rows in chunks that are read (and decompressed) whole,
so its rows are grouped by the chunk they fall in and each touched chunk is read once per gather;
:class:`sgmc.estimators.ChunkedMinibatch` draws minibatches that touch few chunks. Passes
over all the data (the control-variate centre, SVRG's snapshot gradient, Newton steps of the mode
search, the exact scores of KSD) go through :func:`row_blocks`, ``block_rows`` rows at a time, so
memory is bounded by a block whatever N is.

This module is an I/O edge (like :mod:`sgmc.datasets.cache`): it reads files with NumPy and hands the rows
to the model's namespace through :func:`sgmc.backends.asarray`.
"""

from __future__ import annotations

import mmap
import os
from typing import Any, Iterator

import numpy as np

from . import backends

__all__ = ["RowSource", "LaggedRows", "is_out_of_core", "row_blocks", "out_of_core_design", "take",
           "check_dtype", "check_finite_blocks", "refuse_backend", "to_memory", "is_reader",
           "DEFAULT_BLOCK_BYTES"]

#: Bytes of data a full pass holds at once (rows per block = this / bytes per row).
DEFAULT_BLOCK_BYTES = 4 * 2**20


def _kind(data: Any) -> str | None:
    if isinstance(data, np.memmap):
        return "memmap"
    module = type(data).__module__ or ""
    if module.startswith("zarr"):
        return "zarr"
    if module.startswith("dask.array"):
        return "dask"
    return None


def is_out_of_core(data: Any) -> bool:
    """True for the arrays a model reads row by row: ``numpy.memmap``, zarr and Dask arrays."""
    return isinstance(data, _Rows) or _kind(data) is not None


def is_reader(data: Any) -> bool:
    """True for the row readers of this module (:class:`RowSource`, :class:`LaggedRows`)."""
    return isinstance(data, _Rows)


class _Rows:
    """What the readers of rows share: ``shape``, ``dtype``, ``take``, ``blocks``; no array conversion."""

    name: str
    shape: tuple
    dtype: np.dtype
    block_rows: int

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def blocks(self) -> Iterator[tuple[int, int, np.ndarray]]:
        """``(start, stop, rows)`` for consecutive blocks of ``block_rows`` rows covering the data."""
        for start, stop in row_blocks(self.shape[0], self.block_rows):
            yield start, stop, self.block(start, stop)

    def _whole(self, *args: Any, **kwargs: Any) -> Any:
        msg = (f"`{self.name}` is read from disk by rows ({self!r}), and this computation needs all of it in "
               "memory at once; load it first (numpy.asarray of the memmap, zarr or Dask array) to use it here")
        raise TypeError(msg)

    # a whole-array use (an index, a conversion) says what happened instead of failing somewhere inside
    __getitem__ = __array__ = _whole


class RowSource(_Rows):
    """Rows of a 2-D out-of-core array, read when asked for.

    Parameters
    ----------
    data : numpy.memmap, zarr array or dask array, shape (n, d)
        A memmap that maps a whole C-ordered file region (as ``np.memmap(...)`` and
        ``np.load(..., mmap_mode="r")`` make it) is read from its file with ``os.pread``, and the
        source keeps no reference to the map; any other memmap (a strided view, say) is read through
        the map itself.
    name : str
        The argument's name, for error messages.
    block_bytes : int
        Bytes per block of :meth:`blocks`.
    layout : {"rows", "vector", "series"}
        ``"rows"``: ``data`` must be 2-D. ``"vector"``: ``data`` must be 1-D (one number per datum),
        and :meth:`take` returns 1-D. ``"series"``: 1-D or 2-D, a 1-D ``data`` read as one column
        ``(n, 1)``.

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> from sgmc._blocks import RowSource
    >>> path = os.path.join(tempfile.mkdtemp(), "X.f64")
    >>> np.arange(12.0).reshape(6, 2).tofile(path)
    >>> src = RowSource(np.memmap(path, dtype=np.float64, mode="r", shape=(6, 2)))
    >>> src.take(np.array([4, 1, 4])).tolist()
    [[8.0, 9.0], [2.0, 3.0], [8.0, 9.0]]
    """

    def __init__(self, data: Any, name: str = "X", block_bytes: int = DEFAULT_BLOCK_BYTES, layout: str = "rows"):
        kind = _kind(data)
        if kind is None:
            msg = f"`{name}` must be a numpy.memmap, zarr or Dask array to be read row by row; got {type(data).__name__}"
            raise TypeError(msg)
        shape = tuple(int(s) for s in data.shape)
        want = {"rows": (2,), "vector": (1,), "series": (1, 2)}[layout]
        if len(shape) not in want:
            what = {"rows": "2-D (n_data, dim)", "vector": "1-D (n_data,)", "series": "1-D (T,) or 2-D (T, obs_dim)"}
            msg = f"`{name}` must be {what[layout]}; got shape {shape}"
            raise ValueError(msg)
        self._source_1d = len(shape) == 1
        if layout == "series" and len(shape) == 1:
            shape = (shape[0], 1)
        self.name = name
        self.shape = shape
        self.dtype = np.dtype(data.dtype)
        self.kind = kind
        self.data = data
        self.path = None
        self.offset = 0
        if kind == "memmap" and isinstance(data.base, mmap.mmap) and data.flags.c_contiguous:
            self.kind, self.path, self.offset, self.data = "file", os.fspath(data.filename), int(data.offset), None
        self._cols = shape[1] if len(shape) == 2 else 1
        self.row_bytes = self.dtype.itemsize * self._cols
        self.block_rows = max(1, int(block_bytes) // max(self.row_bytes, 1))
        #: Row boundaries ``(K + 1,)`` of the storage chunks of a zarr or Dask array (None for a file).
        self.chunk_bounds = _chunk_bounds(data, shape[0]) if self.kind in ("zarr", "dask") else None

    def __repr__(self) -> str:
        where = self.path if self.path is not None else type(self.data).__name__
        return f"RowSource({where!r}, shape={self.shape}, dtype={self.dtype})"

    def take(self, idx: Any) -> np.ndarray:
        """Rows ``idx`` (any integer array, repeats allowed) as a host array ``(idx.size,) + shape[1:]``.

        Reads each needed row once, in increasing order.
        """
        flat = np.asarray(idx, dtype=np.int64).reshape(-1)
        if flat.size and (flat.min() < 0 or flat.max() >= self.shape[0]):
            msg = f"row index out of range for `{self.name}` with {self.shape[0]} rows"
            raise IndexError(msg)
        rows, inverse = np.unique(flat, return_inverse=True)
        return self._shaped(self._read(rows))[inverse.reshape(-1)]

    def _shaped(self, rows: np.ndarray) -> np.ndarray:
        return np.reshape(rows, (rows.shape[0],) + self.shape[1:])

    def block(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` as a host array."""
        if self.kind == "file":
            return self._shaped(self._pread(start, stop))
        if self.kind == "dask":
            return self._shaped(np.asarray(self.data[start:stop].compute(scheduler=_dask_scheduler())))
        return self._shaped(np.asarray(self.data[start:stop]))

    def _pread(self, start: int, stop: int) -> np.ndarray:
        n = stop - start
        out = np.empty((n, self._cols), dtype=self.dtype)
        view = memoryview(out).cast("B")
        fd = self._file()
        done, want, at = 0, n * self.row_bytes, self.offset + start * self.row_bytes
        while done < want:
            got = os.preadv(fd, [view[done:]], at + done)
            if got <= 0:
                msg = f"`{self.name}`: the file {self.path!r} ended before row {stop}; it has changed since the model was built"
                raise OSError(msg)
            done += got
        return out

    def _file(self) -> int:
        """The file's descriptor, opened at first use in this process (a copy sent to a worker opens its own)."""
        fd = self.__dict__.get("_fd")
        if fd is None:
            fd = self._fd = os.open(self.path, os.O_RDONLY)
        return fd

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_fd", None)
        return state

    def __del__(self) -> None:
        fd = self.__dict__.pop("_fd", None)
        if fd is not None:
            os.close(fd)

    def _read(self, rows: np.ndarray) -> np.ndarray:
        if self.kind == "file":
            # runs of consecutive rows, each read straight into its place in the output
            out = np.empty((rows.size, self._cols), dtype=self.dtype)
            if rows.size == 0:
                return out
            cut = np.flatnonzero(np.diff(rows) != 1) + 1
            starts = np.concatenate(([0], cut)).tolist()
            stops = np.concatenate((cut, [rows.size])).tolist()
            firsts = rows[starts].tolist()
            view, rb, fd, off = memoryview(out).cast("B"), self.row_bytes, self._file(), self.offset
            for a, b, r in zip(starts, stops, firsts):
                if os.preadv(fd, [view[a * rb:b * rb]], off + r * rb) != (b - a) * rb:
                    out[a:b] = self._pread(r, r + b - a)   # a short read: the careful loop, or its error
            return out
        if self.chunk_bounds is not None:
            return self._read_chunks(rows)
        return np.asarray(self.data[rows])

    def _read_chunks(self, rows: np.ndarray) -> np.ndarray:
        """Sorted unique ``rows`` of a zarr or Dask array, reading each chunk they touch once.

        The touched chunks go in groups of about ``block_rows`` rows (one chunk, when a chunk is
        larger): a zarr array is asked for each group's rows in one selection, a Dask array computes
        each group's chunks in one call. Memory is bounded by a group, however many chunks a gather touches.
        """
        out = np.empty((rows.size, self._cols), dtype=self.dtype)
        if rows.size == 0:
            return out
        bounds = self.chunk_bounds
        which = np.searchsorted(bounds, rows, side="right") - 1       # the chunk of each row
        cut = np.flatnonzero(np.diff(which)) + 1
        starts = np.concatenate(([0], cut)).tolist()
        stops = np.concatenate((cut, [rows.size])).tolist()
        touched = which[starts].tolist()
        group: list = []
        size = 0
        for a, b, c in zip(starts, stops, touched):
            group.append((a, b, c))
            size += int(bounds[c + 1] - bounds[c])
            if size >= self.block_rows:
                self._read_group(group, rows, out)
                group, size = [], 0
        if group:
            self._read_group(group, rows, out)
        return out

    def _read_group(self, group: list, rows: np.ndarray, out: np.ndarray) -> None:
        """Read the chunks of ``group`` (``(a, b, chunk)``: rows ``a:b`` of ``rows`` lie in ``chunk``) once each."""
        bounds = self.chunk_bounds
        if self.kind == "dask":
            ids = [c for _, _, c in group]
            got = np.asarray(self.data.blocks[ids].compute(scheduler=_dask_scheduler()))
            got = np.reshape(got, (got.shape[0], self._cols))
            sizes = np.asarray([bounds[c + 1] - bounds[c] for c in ids], dtype=np.int64)
            offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))
            for (a, b, c), off in zip(group, offsets.tolist()):
                out[a:b] = got[rows[a:b] - bounds[c] + off]
            return
        # zarr: one selection of the group's rows, for which zarr reads each of their chunks once
        # (several at a time) and keeps only the rows selected
        a, b = group[0][0], group[-1][1]
        sel = (rows[a:b],) if self._source_1d else (rows[a:b], slice(None))
        got = np.asarray(self.data.get_orthogonal_selection(sel))
        out[a:b] = np.reshape(got, (b - a, self._cols))


def _chunk_bounds(data: Any, n: int) -> np.ndarray:
    """Row boundaries ``(K + 1,)`` (int64) of the chunks of a zarr or Dask array along its first axis."""
    first = data.chunks[0]
    if isinstance(first, (tuple, list)):        # Dask: the size of every chunk along each axis
        return np.concatenate(([0], np.cumsum(np.asarray(first, dtype=np.int64))))
    step = max(1, int(first))                   # zarr: one chunk shape (the inner chunks of a sharded array)
    return np.append(np.arange(0, n, step, dtype=np.int64), np.int64(n))


def _dask_scheduler() -> Any:
    """The scheduler the user configured (a distributed client sets one), else the calling thread.

    A gather or a block of rows is a few small tasks: handing them to a thread pool costs more than
    running them, so without a configured scheduler they run synchronously.
    """
    import dask  # an optional dependency, present whenever a Dask array is

    return dask.config.get("scheduler", None) or "sync"


def row_blocks(n: int, block_rows: int) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` of consecutive blocks of at most ``block_rows`` covering ``range(n)``."""
    step = max(1, int(block_rows))
    for start in range(0, int(n), step):
        yield start, min(start + step, int(n))


def out_of_core_design(X: Any, y: Any, *, backend: Any = None) -> tuple[Any, RowSource, Any, Any]:
    """The checks of :func:`sgmc.models.base.validate_design` for an out-of-core ``X``.

    ``X`` becomes a :class:`RowSource` (checked finite block by block, one pass); ``y``, one number
    per datum, is read into memory as a NumPy array of ``X``'s dtype. Returns ``(xp, X, y, dtype)``.
    """
    refuse_backend(backend, f"`X` a {type(X).__name__}")
    src = X if isinstance(X, RowSource) else RowSource(X, "X")
    if src.dtype.kind != "f" or src.dtype.itemsize < 4:
        msg = f"`X` must hold float32 or float64 values; got {src.dtype}"
        raise TypeError(msg)
    y = np.asarray(to_memory(y), dtype=src.dtype)
    if y.ndim != 1 or y.shape[0] != src.shape[0]:
        msg = f"`y` must be 1-D with {src.shape[0]} entries to match `X`; got shape {tuple(y.shape)}"
        raise ValueError(msg)
    if not np.all(np.isfinite(y)):
        msg = f"`y` contains {int(np.sum(~np.isfinite(y)))} non-finite value(s) (NaN or inf); clean the data first"
        raise ValueError(msg)
    check_finite_blocks(src)
    yy = backends.asarray(y, backend="numpy")
    return backends.get_backend("numpy").xp, src, yy, yy.dtype


class LaggedRows(_Rows):
    """Rows ``(y_{t+p}, y_{t+p-1}, ..., y_t)`` of a series read from disk, made when asked for.

    The out-of-core twin of :func:`sgmc.ssm.arhmm.lagged`: row ``t`` of the result (``t = 0..T-p-1``)
    is the concatenation of the series' rows ``t + p``, ``t + p - 1``, ..., ``t``, so shape
    ``(T - p, m (p + 1))``. :meth:`take` reads each series row it needs once.

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> from sgmc._blocks import LaggedRows, RowSource
    >>> path = os.path.join(tempfile.mkdtemp(), "y.f64")
    >>> np.arange(5.0).tofile(path)
    >>> series = RowSource(np.memmap(path, dtype=np.float64, mode="r", shape=(5,)), "y", layout="series")
    >>> LaggedRows(series, 2).take(np.array([0, 2])).tolist()
    [[2.0, 1.0, 0.0], [4.0, 3.0, 2.0]]
    """

    def __init__(self, series: RowSource, p: int):
        self.series, self.p = series, int(p)
        T, m = series.shape
        self.name, self.dtype = series.name, series.dtype
        self.shape = (T - self.p, m * (self.p + 1))
        self.block_rows = max(1, series.block_rows // (self.p + 1))

    def __repr__(self) -> str:
        return f"LaggedRows({self.series!r}, p={self.p})"

    def _lag(self, rows: np.ndarray, n: int) -> np.ndarray:
        # rows: series rows t .. t + n + p - 1 -> the n lagged rows starting at t
        return np.concatenate([rows[self.p - j:self.p - j + n] for j in range(self.p + 1)], axis=-1)

    def take(self, idx: Any) -> np.ndarray:
        """Lagged rows ``idx`` (any integer array) as a host array ``(idx.size, m (p + 1))``."""
        flat = np.asarray(idx, dtype=np.int64).reshape(-1)
        lags = flat[:, None] + (self.p - np.arange(self.p + 1))
        return self.series.take(lags).reshape(flat.size, self.shape[1])

    def block(self, start: int, stop: int) -> np.ndarray:
        """Lagged rows ``start:stop``."""
        return self._lag(self.series.block(start, stop + self.p), stop - start)


def take(xp: Any, a: Any, idx: Any, dtype: Any = None) -> Any:
    """Rows ``a[idx]`` with shape ``idx.shape + a.shape[1:]``, for an array or a row reader of this module.

    For an array this is :func:`sgmc.models.base.take_rows`; for a :class:`RowSource` or
    :class:`LaggedRows` only the rows ``idx`` are read, and they come back in ``xp`` (``dtype`` when given).
    """
    if not isinstance(a, _Rows):
        flat = xp.reshape(idx, (-1,))
        return xp.reshape(xp.take(a, flat, axis=0), tuple(idx.shape) + tuple(a.shape[1:]))
    rows = a.take(backends.to_numpy(idx))
    rows = np.reshape(rows, tuple(idx.shape) + tuple(a.shape[1:]))
    return xp.asarray(rows) if dtype is None else xp.asarray(rows, dtype=dtype)


def check_dtype(src: RowSource, kinds: str, what: str) -> None:
    """Raise ``TypeError`` naming ``src.name`` unless its dtype's kind is in ``kinds`` (``"f"``, ``"iu"``, ...)."""
    ok = src.dtype.kind in kinds and not (src.dtype.kind == "f" and src.dtype.itemsize < 4)
    if not ok:
        msg = f"`{src.name}` must hold {what}; got dtype {src.dtype}"
        raise TypeError(msg)


def check_finite_blocks(src: _Rows) -> None:
    """One pass over ``src`` in blocks; ``ValueError`` naming the argument and the first non-finite row."""
    for start, _, rows in src.blocks():
        bad = ~np.isfinite(rows)
        if bad.any():
            first = start + int(np.argmax(bad.reshape(bad.shape[0], -1).any(axis=1)))
            msg = f"`{src.name}` contains non-finite value(s) (NaN or inf), first in row {first}; clean the data first"
            raise ValueError(msg)


def refuse_backend(backend: Any, what: str) -> None:
    """Models on data read from disk run on NumPy: refuse any other ``backend`` by name."""
    if backend is not None and backends.get_backend(backend) is not backends.get_backend("numpy"):
        msg = (f"`backend`={backend!r}: a model on data read from disk ({what}) runs on NumPy; load the data "
               "into memory first to move it elsewhere")
        raise ValueError(msg)


def to_memory(a: Any) -> Any:
    """A NumPy copy of a small memmap, zarr or Dask array (labels, responses); other values unchanged."""
    kind = _kind(a)
    if kind == "dask":
        return np.asarray(a.compute())
    if kind == "zarr":
        return np.asarray(a[...])
    if kind == "memmap":
        return np.array(a)          # a copy: the map is not kept
    return a
