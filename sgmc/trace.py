"""The result of a run: draws, optional scores, and per-iteration statistics.

A :class:`Trace` keeps draws in the backend they were produced on (``(chains, draws, dim)``), the
gradient paired with each draw when asked (kernel Stein discrepancy needs them), and host-side
statistics of every iteration taken from what the sampler's steps reported: the step size, and per
chain the gradient evaluations, batch size, cumulative data passes, wall time, and the sampler's own
quantities (acceptance, thermostat). Each coordinate has a name (``param_names``, from the model),
which the summary table, the ArviZ export, the plots and saved files use. Saving and loading (``.npz``, NumPy on the host) is an I/O edge:
the file holds arrays, the settings as JSON and a SHA-256 of every array, is read without pickle,
and a damaged file raises instead of loading.
"""

from __future__ import annotations

import json
import operator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import backends
from ._array_api import Array, array_namespace
from ._atomic import atomic_write
from ._param_names import check_param_names
from ._safefile import array_digest

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

    def save(self, path: str) -> None:
        """Write the trace to a ``.npz`` file (arrays copied to the host).

        The write is atomic: the data go to a temporary file in the same folder, which replaces
        ``path`` only once it is complete and synced, so an interrupted save leaves an earlier file at
        ``path`` intact. Besides the arrays, the parameter names (``param_names``, an array of text)
        and the settings (``__meta__``, JSON) the archive holds a SHA-256 of each array (``__sha256__``), which :meth:`load` checks. NumPy reads the file with
        ``np.load(path)`` (no pickle needed).
        """
        arrays = {"draws": backends.to_numpy(self.draws), "iterations": np.asarray(self.iterations, dtype=np.int64),
                  "param_names": np.asarray(self.param_names, dtype=np.str_)}
        if self.grads is not None:
            arrays["grads"] = backends.to_numpy(self.grads)
        for k, v in self.stats.items():
            arrays[f"stat__{k}"] = backends.to_numpy(v)
        meta = json.dumps(_jsonable(self.info))
        payload = {k: np.asarray(v) for k, v in arrays.items()}
        payload["__meta__"] = np.asarray(meta)
        payload["__sha256__"] = np.asarray(json.dumps({k: array_digest(v) for k, v in payload.items()}))
        with atomic_write(path) as fh:
            np.savez_compressed(fh, **payload)

    @classmethod
    def load(cls, path: str, *, backend: Any = "numpy") -> "Trace":
        """Read a trace written by :meth:`save`; arrays are converted to ``backend``.

        Raises
        ------
        ValueError
            Naming ``path``, when the file is damaged (truncated, altered: an array whose checksum
            does not match), is not a ``.npz`` archive or is not a trace saved by :meth:`save`.
            Nothing in the file is unpickled. Files saved before checksums were added load without
            that check.
        """
        try:
            arrays, meta = _read(path)
        except FileNotFoundError:
            raise
        except Exception as err:
            if isinstance(err, ValueError) and repr(path) in str(err):
                raise  # noqa: BLE001 - whatever a damaged archive raises, the user gets the file's name
            msg = f"cannot read the trace file {path!r}: it is damaged or not a .npz archive saved by sgmc.Trace.save ({type(err).__name__}: {err})"
            raise ValueError(msg) from err
        draws = backends.asarray(arrays["draws"], backend=backend)
        grads = backends.asarray(arrays["grads"], backend=backend) if "grads" in arrays else None
        stats = {k[len("stat__"):]: v for k, v in arrays.items() if k.startswith("stat__")}
        iterations = [int(i) for i in arrays["iterations"]]
        names = arrays.get("param_names")  # files saved before names were kept have none
        if names is not None:
            if names.dtype.kind != "U" or names.shape != (int(draws.shape[-1]),):
                msg = (f"cannot read the trace file {path!r}: its param_names must be {int(draws.shape[-1])} "
                       f"names of text, one per coordinate; got an array of {names.dtype} and shape {names.shape}")
                raise ValueError(msg)
            names = [str(n) for n in names]
        return cls(draws=draws, grads=grads, iterations=iterations, stats=stats, info=meta, param_names=names)


def _read(path: Any) -> tuple[dict, dict]:
    """The arrays and settings of a trace file, checked; ``ValueError`` naming ``path`` when wrong."""
    with open(path, "rb") as fh:
        try:
            data = np.load(fh, allow_pickle=False)
        except ValueError as err:
            msg = f"cannot read the trace file {path!r}: it is not a .npz archive saved by sgmc.Trace.save ({err})"
            raise ValueError(msg) from err
        if not isinstance(data, np.lib.npyio.NpzFile):
            msg = f"cannot read the trace file {path!r}: it holds a single array, not a trace saved by sgmc.Trace.save"
            raise ValueError(msg)
        with data:
            missing = [k for k in ("draws", "iterations", "__meta__") if k not in data.files]
            if missing:
                msg = f"{path!r} is not a trace saved by sgmc.Trace.save: it has no {', '.join(missing)}"
                raise ValueError(msg)
            arrays = {k: data[k] for k in data.files}
    sums = json.loads(str(arrays.pop("__sha256__"))) if "__sha256__" in arrays else None
    if sums is not None:
        wrong = sorted(set(sums) ^ set(arrays)) or [k for k, v in arrays.items() if array_digest(v) != sums[k]]
        if wrong:
            msg = f"cannot read the trace file {path!r}: it is damaged (array {wrong[0]!r} does not match its checksum)"
            raise ValueError(msg)
    meta = json.loads(str(arrays.pop("__meta__")))
    return arrays, meta


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
