"""The result of a run: draws, optional scores, and per-iteration statistics.

A :class:`Trace` keeps draws in the backend they were produced on (``(chains, draws, dim)``), the
gradient paired with each draw when asked (kernel Stein discrepancy needs them), and host-side
per-iteration statistics: step size, batch size, cumulative data passes and wall time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from . import backends
from ._array_api import Array, array_namespace

__all__ = ["Trace"]

_STAT_KEYS = ("step_size", "batch_size", "data_passes", "wall_time")


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
    stats : dict of numpy arrays, each of length n_iter
        ``step_size``, ``batch_size``, ``data_passes`` (cumulative per-datum gradient evaluations per
        chain divided by N) and ``wall_time`` (cumulative seconds since sampling began).
    info : dict
        Run settings and summaries: sampler, estimator, n_iter, burn_in, thin, setup cost, sampler
        state statistics (e.g. MALA acceptance rate per chain).
    """

    draws: Array
    grads: Array | None = None
    iterations: list = field(default_factory=list)
    stats: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)

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

    # -- export ----------------------------------------------------------------------------------
    def to_arviz(self, var_name: str = "theta"):
        """Return an ArviZ ``InferenceData`` (``posterior`` and ``sample_stats`` groups).

        Requires the optional ``arviz`` package.
        """
        try:
            import arviz as az
        except ImportError as exc:
            msg = "to_arviz() needs the optional package arviz: pip install 'sgmc[arviz]'"
            raise ImportError(msg) from exc
        draws = backends.to_numpy(self.draws)
        kept = self.iterations
        sample_stats = {}
        for key in ("step_size", "data_passes", "wall_time"):
            if key in self.stats:
                col = backends.to_numpy(self.stats[key])[kept]
                sample_stats[key] = backends.to_numpy(
                    backends.asarray([list(col)] * self.n_chains, backend="numpy")
                )
        coords = {f"{var_name}_dim": list(range(self.dim))}
        dims = {var_name: [f"{var_name}_dim"]}
        return az.from_dict(
            posterior={var_name: draws}, sample_stats=sample_stats, coords=coords, dims=dims
        )

    def save(self, path: str) -> None:
        """Write the trace to a ``.npz`` file (arrays copied to the host)."""
        arrays = {"draws": backends.to_numpy(self.draws), "iterations": backends.asarray(self.iterations, backend="numpy")}
        if self.grads is not None:
            arrays["grads"] = backends.to_numpy(self.grads)
        for k, v in self.stats.items():
            arrays[f"stat__{k}"] = backends.to_numpy(v)
        meta = json.dumps(_jsonable(self.info))
        backends.save_npz(path, arrays, meta)

    @classmethod
    def load(cls, path: str, *, backend: Any = "numpy") -> "Trace":
        """Read a trace written by :meth:`save`; arrays are converted to ``backend``."""
        arrays, meta = backends.load_npz(path)
        draws = backends.asarray(arrays["draws"], backend=backend)
        grads = backends.asarray(arrays["grads"], backend=backend) if "grads" in arrays else None
        stats = {k[len("stat__"):]: v for k, v in arrays.items() if k.startswith("stat__")}
        iterations = [int(i) for i in arrays["iterations"]]
        return cls(draws=draws, grads=grads, iterations=iterations, stats=stats, info=json.loads(meta))


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
