"""The result of a run: draws, optional scores, and per-iteration statistics.

A :class:`Trace` keeps draws in the backend they were produced on (``(chains, draws, dim)``), the
gradient paired with each draw when asked (kernel Stein discrepancy needs them), and host-side
statistics of every iteration taken from what the sampler's steps reported: the step size, and per
chain the gradient evaluations, batch size, cumulative data passes, wall time, and the sampler's own
quantities (acceptance, thermostat). Each coordinate has a name (``param_names``, from the model),
which the summary table, the ArviZ export, the plots and saved files use. Saving and loading (``.npz``, NumPy on the host) is an I/O edge:
the file holds arrays, the settings as JSON and a SHA-256 of every array (optionally signed with a
key), is read without pickle, every declared size checked before anything is allocated or
decompressed, and a damaged file raises instead of loading (see ``docs/files.md``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import operator
import os
import zipfile
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import backends
from ._array_api import Array, array_namespace
from ._atomic import atomic_write
from ._param_names import check_param_names
from ._trace_checks import check_trace_fields
from ._safefile import array_digest, check_key

__all__ = ["Trace"]


@dataclass
class Trace:
    """Draws and statistics of a run of :func:`sgmc.sample`.

    Attributes
    ----------
    draws : array, shape (chains, n_draws, dim)
        Kept positions, after burn-in and thinning, in the model's backend.
    grads : array or None, shape (chains, n_draws, dim)
        Gradient of log pi paired with each draw: the estimator's value at that draw
        (``store_grads=True`` or ``"estimate"``) or the exact full-data gradient (``"full"``).
    iterations : list of int
        Iteration index (0-based) of each kept draw.
    stats : dict of numpy arrays
        ``step_size``, shape (n_iter,); and per chain, shape (chains, n_iter): ``n_evals`` (per-datum
        gradient evaluations of the iteration), ``batch_size`` (data points per gradient estimate),
        ``data_passes`` (cumulative ``n_evals`` divided by N; the set-up, which
        ``info["setup_data_passes"]`` counts, and the one estimate at the starting point that the
        sampler's ``init`` makes are excluded), ``wall_time``
        (seconds since the chain's group started sampling), and what the sampler reports:
        ``accepted`` and ``accept_prob`` (MALA), ``thermostat`` (SGNHT).
    info : dict
        Run settings and summaries: sampler, estimator, n_iter, burn_in, thin, the chain groups,
        set-up cost, and per-chain summaries (MALA's acceptance rate, SGNHT's final thermostat).
    param_names : tuple of str
        Names of the ``dim`` coordinates: the model's ``param_names`` for a run of
        :func:`sgmc.sample`, ``theta[0]``, ``theta[1]``, ... when none are given.

    Raises
    ------
    ValueError
        Naming ``param_names`` and the expected length when it does not hold one distinct name per
        coordinate.
    """

    draws: Array
    grads: Array | None = None
    iterations: list = field(default_factory=list)
    stats: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    param_names: Any = None

    def __post_init__(self) -> None:
        self.iterations = check_trace_fields(self.draws, self.grads, self.iterations, self.stats, self.info)
        self.param_names = check_param_names(self.param_names, int(self.draws.shape[-1]))

    # -- shape helpers ---------------------------------------------------------------------------
    @property
    def n_chains(self) -> int:
        return int(self.draws.shape[0])

    @property
    def n_draws(self) -> int:
        return int(self.draws.shape[1])

    @property
    def dim(self) -> int:
        return int(self.draws.shape[2])

    @property
    def xp(self):
        return array_namespace(self.draws)

    def flat_draws(self) -> Array:
        """All chains' draws stacked: shape ``(chains * n_draws, dim)``."""
        return self.xp.reshape(self.draws, (-1, self.dim))

    def flat_grads(self) -> Array:
        """All chains' stored gradients stacked: shape ``(chains * n_draws, dim)``."""
        if self.grads is None:
            msg = "this trace has no stored gradients; run sgmc.sample(..., store_grads=True)"
            raise ValueError(msg)
        return self.xp.reshape(self.grads, (-1, self.dim))

    def mean(self) -> Array:
        """Posterior mean estimate over all chains and draws, shape ``(dim,)``."""
        return self.xp.mean(self.flat_draws(), axis=0)

    def cov(self) -> Array:
        """Posterior covariance estimate over all chains and draws, shape ``(dim, dim)``."""
        xp = self.xp
        x = self.flat_draws()
        c = x - xp.mean(x, axis=0)
        return c.T @ c / (x.shape[0] - 1)

    def __repr__(self) -> str:
        s = self.info.get("sampler", "?")
        e = self.info.get("estimator", "?")
        return f"Trace(sampler={s!r}, estimator={e!r}, chains={self.n_chains}, draws={self.n_draws}, dim={self.dim})"

    def summary(self, prob: float = 0.89, names: Any = None):
        """The diagnostics table ArviZ users know, one row per coordinate, named by :attr:`param_names`.

        Columns ``mean``, ``sd``, ``hdi89_lb``/``hdi89_ub``, ``mcse_mean``, ``mcse_sd``, ``ess_bulk``,
        ``ess_tail``, ``r_hat``, computed by :func:`sgmc.diagnostics.summary` (equal to arviz-stats'
        values). ``prob`` is the HDI mass; ``names`` replaces the row names (default
        :attr:`param_names`).
        """
        from .diagnostics.summary import summary

        return summary(self.draws, prob=prob, names=self.param_names if names is None else names)

    def index(self, param: Any) -> int:
        """The coordinate of ``param``: a name of :attr:`param_names` or an integer in ``[0, dim)``.

        Raises
        ------
        ValueError
            Naming ``param``, for an unknown name (with the names there are) or an index out of range.
        """
        if isinstance(param, str):
            if param in self.param_names:
                return self.param_names.index(param)
            shown = ", ".join(repr(n) for n in self.param_names[:8]) + (", ..." if self.dim > 8 else "")
            msg = f"`param` {param!r} is not a parameter of this trace; its param_names are {shown}"
            raise ValueError(msg)
        try:
            j = None if isinstance(param, bool) else operator.index(param)
        except TypeError:
            j = None
        if j is None or not 0 <= j < self.dim:
            msg = f"`param` must be a name of param_names or an index in [0, {self.dim - 1}]; got {param!r}"
            raise ValueError(msg)
        return j

    # -- export ----------------------------------------------------------------------------------
    def to_arviz(self, var_name: str = "theta", *, split: bool = False):
        """Return an ArviZ ``InferenceData`` (``posterior`` and ``sample_stats`` groups).

        By default the posterior holds one variable ``var_name`` of shape (chain, draw, dim) whose
        last dimension, ``{var_name}_dim``, has :attr:`param_names` as coordinates, so
        ``idata.posterior[var_name].sel({var_name}_dim="age")`` picks a coefficient by name. With
        ``split=True`` every coordinate is a variable of its own, named by :attr:`param_names` (what
        ``az.summary`` and ``az.plot_trace`` then list by name).

        Requires the optional ``arviz`` package.
        """
        try:
            import arviz as az
        except ImportError as exc:
            msg = "to_arviz() needs the optional package arviz: pip install 'sgmc[arviz]'"
            raise ImportError(msg) from exc
        draws = backends.to_numpy(self.draws)
        kept = np.asarray(self.iterations, dtype=np.int64)
        sample_stats = {}
        for key, value in self.stats.items():
            value = np.asarray(value)
            if value.ndim == 1:
                value = np.broadcast_to(value[None, :], (self.n_chains, value.shape[0]))
            sample_stats[key] = np.ascontiguousarray(value[:, kept])
        if split:
            posterior = {name: np.ascontiguousarray(draws[:, :, j]) for j, name in enumerate(self.param_names)}
            return az.from_dict(posterior=posterior, sample_stats=sample_stats)
        coords = {f"{var_name}_dim": list(self.param_names)}
        dims = {var_name: [f"{var_name}_dim"]}
        return az.from_dict(
            posterior={var_name: draws}, sample_stats=sample_stats, coords=coords, dims=dims
        )

    def save(self, path: str, *, key: Any = None) -> None:
        """Write the trace to a ``.npz`` file (arrays copied to the host).

        The write is atomic: the data go to a temporary file in the same folder, which replaces
        ``path`` only once it is complete and synced, so an interrupted save leaves an earlier file at
        ``path`` intact. Besides the arrays, the parameter names (``param_names``, an array of text),
        the settings (``__meta__``, JSON) and the format (``__format__``), the archive holds a SHA-256
        of each array (``__sha256__``), which :meth:`load` checks: it detects damage, not tampering.
        With ``key`` (bytes or str, a secret you keep) the checksums are also signed with HMAC-SHA256
        (``__hmac__``), and ``load(path, key=...)`` refuses a file altered without the key. NumPy
        reads the file with ``np.load(path)`` (no pickle needed).
        """
        if not isinstance(path, (str, os.PathLike)):
            msg = f"`path` must be a file path (str or path-like); got {type(path).__name__}"
            raise TypeError(msg)
        key = check_key(key)
        arrays = {"draws": backends.to_numpy(self.draws), "iterations": np.asarray(self.iterations, dtype=np.int64),
                  "param_names": np.asarray(self.param_names, dtype=np.str_)}
        if self.grads is not None:
            arrays["grads"] = backends.to_numpy(self.grads)
        for k, v in self.stats.items():
            arrays[f"stat__{k}"] = backends.to_numpy(v)
        meta = json.dumps(_jsonable(self.info))
        payload = {k: np.asarray(v) for k, v in arrays.items()}
        for k, v in payload.items():
            if v.dtype.hasobject or v.dtype.fields is not None:
                msg = f"cannot save the trace: `{k}` holds Python objects (dtype {v.dtype}), which a file of data cannot hold"
                raise TypeError(msg)
        payload["__meta__"] = np.asarray(meta)
        payload["__format__"] = np.asarray(json.dumps({"format": _FORMAT, "version": _VERSION}))
        sums = json.dumps({k: array_digest(v) for k, v in payload.items()})
        payload["__sha256__"] = np.asarray(sums)
        if key is not None:
            payload["__hmac__"] = np.asarray(hmac.new(key, sums.encode(), hashlib.sha256).hexdigest())
        with atomic_write(path) as fh:
            np.savez_compressed(fh, **payload)

    @classmethod
    def load(cls, path: Any, *, backend: Any = "numpy", key: Any = None, verify: bool = True,
             max_bytes: int | None = None) -> "Trace":
        """Read a trace written by :meth:`save`; arrays are converted to ``backend``.

        Parameters
        ----------
        path : str, path-like or binary file object
            The file. An open file is read from where it is and left open.
        backend : str or Backend
            Where the arrays go.
        key : bytes or str, optional
            The key the trace was signed with (:meth:`save`): a signed file is refused without it,
            an unsigned one with it, and any file whose signature does not match.
        verify : bool, default True
            Refuse a file without checksums (``__sha256__``). ``verify=False`` reads one anyway:
            only for a file whose origin you trust.
        max_bytes : int, optional
            The most bytes the arrays may take once decompressed (default: 256 MiB or 64 times
            the file's size, whichever is larger), checked against the sizes the file declares
            before anything is decompressed.

        Raises
        ------
        ValueError
            Naming ``path``, when the file is damaged (truncated, altered: an array whose checksum
            does not match), has no checksums (unless ``verify=False``), does not match ``key``, is
            not a ``.npz`` archive or is not a trace saved by :meth:`save`, or declares more data
            than ``max_bytes``. Nothing in the file is unpickled.
        TypeError
            Naming ``path``, when it is neither a path nor a binary file object.
        """
        key = check_key(key)
        if not isinstance(verify, bool):
            msg = f"`verify` must be True or False; got {verify!r}"
            raise TypeError(msg)
        if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1):
            msg = f"`max_bytes` must be a positive integer or None; got {max_bytes!r}"
            raise ValueError(msg)
        arrays, meta = _read_trace(path, key, verify, max_bytes)
        draws = backends.asarray(arrays["draws"], backend=backend)
        grads = backends.asarray(arrays["grads"], backend=backend) if "grads" in arrays else None
        stats = {k[len("stat__"):]: v for k, v in arrays.items() if k.startswith("stat__")}
        iterations = [int(i) for i in arrays["iterations"]]
        names = arrays.get("param_names")  # files saved before names were kept have none
        if names is not None:
            if names.dtype.kind != "U" or names.shape != (int(draws.shape[-1]),):
                msg = (f"cannot read the trace file {_where(path)!r}: its param_names must be {int(draws.shape[-1])} "
                       f"names of text, one per coordinate; got an array of {names.dtype} and shape {names.shape}")
                raise ValueError(msg)
            names = [str(n) for n in names]
        return cls(draws=draws, grads=grads, iterations=iterations, stats=stats, info=meta, param_names=names)


_FORMAT = "sgmc trace"
_VERSION = 2
_MAX_MEMBERS = 10_000
_MIN_LIMIT = 256 << 20


def _where(path: Any) -> str:
    return os.fspath(path) if isinstance(path, (str, os.PathLike)) else str(getattr(path, "name", repr(path)))


def _read_trace(path: Any, key: bytes | None, verify: bool, max_bytes: int | None) -> tuple[dict, dict]:
    """The arrays and settings of a trace file, checked; ``ValueError`` naming ``path`` when wrong."""
    if isinstance(path, (str, os.PathLike)):
        with open(path, "rb") as fh:
            return _read_open(fh, _where(path), key, verify, max_bytes)
    if isinstance(path, (bool, int, float, bytes, bytearray)) or not all(
            callable(getattr(path, m, None)) for m in ("read", "seek", "tell")):
        msg = f"`path` must be a file path or a binary file object open for reading; got {type(path).__name__}"
        raise TypeError(msg)
    return _read_open(path, _where(path), key, verify, max_bytes)  # the caller's file: left open


def _read_open(fh: Any, where: str, key: bytes | None, verify: bool, max_bytes: int | None) -> tuple[dict, dict]:
    start = fh.tell()
    size = fh.seek(0, os.SEEK_END) - start
    fh.seek(start)
    head = fh.read(1)
    fh.seek(start)
    if head == b"\x80":
        msg = (f"cannot read the trace file {where!r}: it is a pickle, which is not loaded because loading it "
               "could run code")
        raise ValueError(msg)
    limit = max_bytes if max_bytes is not None else max(_MIN_LIMIT, 64 * size)
    try:
        with zipfile.ZipFile(fh) as zf:  # a ZipFile given a file object does not close it
            infos = zf.infolist()
            arrays = _members(zf, infos, where, limit)
    except zipfile.BadZipFile as err:
        msg = f"cannot read the trace file {where!r}: it is damaged or not a .npz archive saved by sgmc.Trace.save ({err})"
        raise ValueError(msg) from err
    except (OSError, EOFError, RuntimeError, NotImplementedError) as err:
        msg = f"cannot read the trace file {where!r}: it is damaged ({type(err).__name__}: {err})"
        raise ValueError(msg) from err
    missing = [k for k in ("draws", "iterations", "__meta__") if k not in arrays]
    if missing:
        msg = f"{where!r} is not a trace saved by sgmc.Trace.save: it has no {', '.join(missing)}"
        raise ValueError(msg)
    _verify(arrays, where, key, verify)
    try:
        meta = json.loads(str(arrays.pop("__meta__")))
        fmt = json.loads(str(arrays.pop("__format__"))) if "__format__" in arrays else {"version": 1}
    except (ValueError, RecursionError) as err:
        msg = f"cannot read the trace file {where!r}: its settings are not valid JSON ({type(err).__name__})"
        raise ValueError(msg) from err
    if not isinstance(fmt, dict) or fmt.get("version") not in (1, _VERSION) or not isinstance(meta, dict):
        found = fmt.get("version") if isinstance(fmt, dict) else fmt
        msg = f"cannot read the trace file {where!r}: format version {str(found)[:20]}, expected {_VERSION}"
        raise ValueError(msg)
    return arrays, meta


def _members(zf: zipfile.ZipFile, infos: list, where: str, limit: int) -> dict:
    """Every ``.npy`` member, its declared sizes checked against ``limit`` before any is decompressed."""
    if len(infos) > _MAX_MEMBERS:
        msg = f"cannot read the trace file {where!r}: it has {len(infos)} members, more than a trace has"
        raise ValueError(msg)
    total = 0
    for info in infos:
        if not info.filename.endswith(".npy") or info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            msg = f"cannot read the trace file {where!r}: member {info.filename[:60]!r} is not an array saved by sgmc"
            raise ValueError(msg)
        total += info.file_size
    if total > limit:
        msg = (f"cannot read the trace file {where!r}: its arrays declare {total} bytes, more than the "
               f"{limit} allowed for a file of this size; pass max_bytes= to read a larger trace you trust")
        raise ValueError(msg)
    out = {}
    for info in infos:
        name = info.filename[:-len(".npy")]
        if name in out:
            msg = f"cannot read the trace file {where!r}: member {name!r} appears twice"
            raise ValueError(msg)
        with zf.open(info) as f:
            out[name] = _npy(f, info.file_size, where, name)
    return out


def _npy(f: Any, declared: int, where: str, name: str) -> np.ndarray:
    """One ``.npy`` member: its header checked against its declared size, then exactly that many bytes."""
    try:
        version = np.lib.format.read_magic(f)
        reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = reader(f)
        if dtype.hasobject or dtype.fields is not None:
            raise ValueError("object and structured arrays are not read")
        count = 1
        for n in shape:
            count *= int(n)
        header = 6 + 2 + (2 if version == (1, 0) else 4)
    except (ValueError, TypeError, EOFError) as err:
        msg = f"cannot read the trace file {where!r}: member {name!r} is not a valid array ({err})"
        raise ValueError(msg) from err
    nbytes = count * dtype.itemsize
    if nbytes > declared:
        msg = f"cannot read the trace file {where!r}: member {name!r} declares more bytes than it holds"
        raise ValueError(msg)
    out = np.empty(count, dtype=dtype)
    view = memoryview(out.reshape(-1).view(np.uint8)) if nbytes else memoryview(b"")
    done = 0
    while done < nbytes:
        got = f.readinto(view[done:])
        if not got:
            msg = f"cannot read the trace file {where!r}: member {name!r} is truncated"
            raise ValueError(msg)
        done += got
    if f.read(1):
        msg = f"cannot read the trace file {where!r}: member {name!r} holds more bytes than its shape ({header})"
        raise ValueError(msg)
    return out.reshape(shape, order="F" if fortran else "C")


def _verify(arrays: dict, where: str, key: bytes | None, verify: bool) -> None:
    sums_raw = arrays.pop("__sha256__", None)
    signature = arrays.pop("__hmac__", None)
    if sums_raw is None:
        if verify or key is not None:
            msg = (f"cannot read the trace file {where!r}: it has no checksums (__sha256__), so damage cannot be "
                   "detected; load it with verify=False only if you trust where it came from")
            raise ValueError(msg)
        return
    text = str(sums_raw)
    if signature is not None and key is None:
        msg = f"the trace file {where!r} is signed: pass the key it was signed with (`key=`) to read it"
        raise ValueError(msg)
    if key is not None:
        if signature is None:
            msg = (f"the trace file {where!r} is not signed, but a key was given: it was saved without a key or "
                   "its signature was removed")
            raise ValueError(msg)
        want = hmac.new(key, text.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(str(signature), want):
            msg = f"the trace file {where!r} does not match its signature with this key: it was altered, or signed with another key"
            raise ValueError(msg)
    try:
        sums = json.loads(text)
    except (ValueError, RecursionError) as err:
        msg = f"cannot read the trace file {where!r}: it is damaged (its checksums are not valid JSON)"
        raise ValueError(msg) from err
    if not isinstance(sums, dict):
        msg = f"cannot read the trace file {where!r}: it is damaged (its checksums are not a mapping)"
        raise ValueError(msg)
    wrong = sorted(set(sums) ^ set(arrays)) or [k for k, v in arrays.items() if array_digest(v) != sums[k]]
    if wrong:
        msg = f"cannot read the trace file {where!r}: it is damaged (array {wrong[0]!r} does not match its checksum)"
        raise ValueError(msg)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    try:
        arr = backends.to_numpy(obj)
        return arr.tolist()
    except (TypeError, ValueError):
        return repr(obj)
