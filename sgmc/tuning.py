"""Step-size selection by kernel Stein discrepancy on short pilot runs.

Stochastic gradient samplers are biased, and the bias grows with the step size h, while mixing
improves with it; effective sample size rewards the mixing and is blind to the bias, so it picks steps
that are too large. Nemeth and Fearnhead (2021, section 4 and Figure 1) instead run a pilot chain for
each h on a grid and keep the h whose sample has the smallest kernel Stein discrepancy (their eq. 13),
which sees both failures: too little exploration and a wrong stationary law. :func:`tune_step_size`
does that: one :func:`sgmc.sample` run per grid point, the exact full-data score stored at every kept
draw (``store_grads="full"``, so no second pass over the draws), the KSD of the pooled kept draws, and
for reference their ESS and the run time.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Sequence

from . import backends
from ._array_api import is_array
from ._progress import progress_bar
from ._validation import check_int
from .diagnostics.ess import ess
from .diagnostics.mixing import MixingWarning
from .diagnostics.runaway import RunawayChainWarning
from .diagnostics.ksd import ksd
from ._stepgrid import StepSizeEdgeWarning, _sampler_grid, default_grid
from .models.base import check_target
from .run import sample
from .samplers import NoiseCorrectionError
from .trace import Trace

__all__ = ["tune_step_size", "TuningResult", "default_grid", "StepSizeEdgeWarning"]

_KINDS = ("sum", "joint")


@dataclass(frozen=True)
class TuningResult:
    """What :func:`tune_step_size` measured.

    Attributes
    ----------
    best : float
        The step size with the smallest KSD.
    table : list of dict
        One row per grid point, in grid order, with keys ``step_size``, ``ksd`` (``inf`` for a run that
        diverged), ``ess`` (multi-chain ESS of the kept draws, minimum over coordinates; NaN when
        diverged), ``time`` (seconds for the pilot run, including the full-data scores at the kept
        draws) and ``diverged`` (bool).
    thin : int
        Thinning interval the pilot runs used (at least the requested one, so that every run keeps at
        most ``n_ksd`` draws in all).
    extended : int
        Pilot runs added beyond the ends of the given grid (``extend``); their rows are in ``table``,
        which is sorted by step size when any were added.
    traces : list of Trace or None
        The pilot traces (``None`` for diverged runs), when ``keep_traces=True``; otherwise ``None``.
    """

    best: float
    table: list = field(default_factory=list)
    thin: int = 1
    traces: list | None = None
    extended: int = 0

    @property
    def at_edge(self) -> bool:
        """True when ``best`` is the smallest or the largest step size of the grid."""
        steps = [row["step_size"] for row in self.table]
        return self.best in (min(steps), max(steps))

    def summary(self) -> str:
        """The table as aligned text, the chosen step size marked with ``*``."""
        lines = [f"{'step_size':>12} {'ksd':>10} {'ess':>9} {'time_s':>8}  note"]
        for row in self.table:
            note = "diverged" if row["diverged"] else ("*" if row["step_size"] == self.best else "")
            lines.append(
                f"{row['step_size']:>12.4g} {row['ksd']:>10.4g} {row['ess']:>9.1f} {row['time']:>8.2f}  {note}"
            )
        if self.at_edge:
            lines.append("best step size is at the edge of the grid: extend the grid beyond it")
        return "\n".join(lines)


def _beyond_edge(table: list) -> float | None:
    """The step one grid ratio beyond the end where the best finite KSD of ``table`` lies, or None
    when the best is bracketed by other steps (a larger step that diverged brackets it too)."""
    finite = [row for row in table if math.isfinite(row["ksd"])]
    if not finite:
        return None
    best = min(finite, key=lambda row: row["ksd"])["step_size"]
    steps = sorted({row["step_size"] for row in table})
    if len(steps) == 1:
        return best * 3.0
    if best == steps[0]:
        return steps[0] * steps[0] / steps[1]
    if best == steps[-1]:
        return steps[-1] * steps[-1] / steps[-2]
    return None


def _check_grid(grid: Any) -> list[float]:
    try:
        values = [float(h) for h in grid]
    except TypeError:
        msg = f"`grid` must be a sequence of positive step sizes; got {grid!r}"
        raise TypeError(msg) from None
    except ValueError:
        msg = f"`grid` must contain numbers only; got {list(grid)!r}"
        raise ValueError(msg) from None
    if not values:
        msg = "`grid` must contain at least one step size; got an empty sequence"
        raise ValueError(msg)
    bad = [h for h in values if not (math.isfinite(h) and h > 0)]
    if bad:
        msg = f"`grid` must contain positive finite step sizes; got {bad}"
        raise ValueError(msg)
    return values


def tune_step_size(
    model: Any,
    sampler: Any = "sgld",
    estimator: Any = "minibatch",
    *,
    grid: Sequence[float] | None = None,
    pilot_iters: int = 2000,
    chains: int = 4,
    batch_size: Any = None,
    burn_in: int = 0,
    thin: int = 1,
    init: Any = None,
    rng: Any = None,
    ksd_kind: str = "sum",
    n_ksd: int = 1000,
    ksd_options: dict | None = None,
    keep_traces: bool = False,
    progress: Any = True,
    sampler_options: dict | None = None,
    estimator_options: dict | None = None,
    backend: Any = None,
    extend: int = 3,
) -> TuningResult:
    """Choose a step size by the kernel Stein discrepancy of short pilot runs.

    For every h in ``grid``, run ``sgmc.sample(model, sampler, estimator, step_size=h, ...)`` for
    ``pilot_iters`` iterations with ``store_grads="full"``, thinned so that at most ``n_ksd`` draws
    are kept over all chains; score the pooled kept draws by :func:`sgmc.diagnostics.ksd` with the
    exact scores; return the h with the smallest KSD. A run whose chains diverge
    (:class:`FloatingPointError` from :func:`sgmc.sample`), or whose gradient-noise correction is not
    possible at that step (:class:`~sgmc.samplers.NoiseCorrectionError`), gets KSD ``inf`` and is
    marked in the table.

    Parameters
    ----------
    model : Model
        The posterior (see :mod:`sgmc.models`); its arrays decide the backend.
    sampler, estimator : str or object
        As in :func:`sgmc.sample`.
    grid : sequence of float, optional
        Candidate step sizes (positive). Default :func:`default_grid`: half-decades from 1e-4 to 10
        times the sampler's step unit (1 / M for SGLD, ULA and MALA, with M the curvature bound; the
        samplers whose step is on their own scale, such as pSGLD, SGRLD, SGRHMC, the recipe sampler
        and the momentum samplers, give theirs by ``step_unit`` from the Hessian at ``init``), otherwise
        the decades 1e-8 ... 1e-1. A choice at either end is extended past (``extend``).
    pilot_iters : int, default 2000
        Iterations per pilot run, burn-in included. KSD penalises a run that has not reached the
        target, so the budget should be the one you can afford for the real run or a fixed fraction of
        it: a step size that converges slowly is then rightly penalised.
    chains : int, default 4
        Chains per pilot run (pooled for the KSD; combined for the ESS).
    batch_size : int or float, optional
        As in :func:`sgmc.sample`.
    burn_in : int, default 0
        Iterations dropped from each pilot run before thinning. The default keeps the approach to
        the target in the score, as in the review's Figure 1.
    thin : int, default 1
        Minimum thinning; it is raised to ``ceil((pilot_iters - burn_in) / (n_ksd // chains))``.
    init : array, optional
        Starting position(s), as in :func:`sgmc.sample` (the same for every grid point).
    rng : None, int, SeedSequence or Generator
        Seed; every grid point runs on its own independent stream spawned from it.
    ksd_kind : {"sum", "joint"}, default "sum"
        ``"sum"`` is the review's eq. (13); ``"joint"`` the single-square-root form.
    n_ksd : int, default 1000
        Most draws (over all chains) that enter the KSD of one run; the KSD costs O(n_ksd^2 dim) and
        the stored scores ``n_ksd`` full-data gradient evaluations.
    ksd_options : dict, optional
        Further keyword arguments for :func:`sgmc.diagnostics.ksd` (``c``, ``beta``,
        ``preconditioner``, ``block``). With the default unit kernel scale, KSD cannot tell a sample
        collapsed onto the mode of a posterior much narrower than 1 from a good one; a preconditioner
        on the posterior's scale fixes that. Pass it as an array (for example
        :func:`sgmc.diagnostics.ksd_preconditioner` of a pilot sample) so that every step size is
        scored with the same kernel; the sample-dependent names (``"med"``, ...) are rejected here
        for that reason.
    keep_traces : bool, default False
        Keep the pilot traces in the result (they hold at most ``n_ksd`` draws each).
    progress : bool or {"auto", "always"}, default True
        A progress bar over the grid (shown on a terminal; see :func:`sgmc.sample`).
    sampler_options, estimator_options : dict, optional
        As in :func:`sgmc.sample`.

    backend : str or Backend, optional
        Tune on this backend: the model's data (and an array ``init``) are copied there once
        (:func:`sgmc.backends.move`), so the pilot runs and the KSD run there. By default the model's
        arrays decide.
    extend : int, default 3
        Most pilot runs to add beyond the ends of the grid. While the best step is the smallest or the
        largest step tried and runs are left, one more pilot runs one grid ratio beyond that end (the
        ratio of the two outermost steps on that side; upwards by 3 for a one-point grid), so that the choice is
        bracketed by worse steps instead of reported at an edge (a larger step that diverged brackets
        it too). When the added runs do not bracket it either, a :class:`StepSizeEdgeWarning` says so
        (and ``at_edge`` is True); ``extend=0`` runs the grid as given.

    Returns
    -------
    TuningResult
        ``best``, the per-step-size ``table``, the ``thin`` used and optionally ``traces``.

    Warns
    -----
    StepSizeEdgeWarning
        When the best step is still at an end of the steps tried after ``extend`` added runs.

    Raises
    ------
    ValueError
        For an empty or non-positive grid, bad counts, or an unknown ``ksd_kind``.
    FloatingPointError
        When every step size in the grid diverges.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.models import GaussianTarget
    >>> from sgmc.estimators import NoisyGradient
    >>> from sgmc.tuning import tune_step_size
    >>> target = GaussianTarget.review_example()
    >>> res = tune_step_size(target, "sgld", NoisyGradient(target, noise_sd=0.1),
    ...                      grid=[1e-3, 1e-1, 3.9], pilot_iters=4000, chains=4, n_ksd=400,
    ...                      init=np.zeros(2), rng=0)
    >>> res.best
    0.1
    >>> [row["step_size"] for row in res.table]
    [0.001, 0.1, 3.9]
    """
    if backend is not None:
        model = backends.move(model, backend)
    model = check_target(model)
    if backend is not None and is_array(init):
        init = backends.move(init, backend, device=model.device)
    values = _check_grid(grid) if grid is not None else None
    pilot_iters = check_int(pilot_iters, "pilot_iters", 1)
    chains = check_int(chains, "chains", 1)
    burn_in = check_int(burn_in, "burn_in", 0)
    thin = check_int(thin, "thin", 1)
    n_ksd = check_int(n_ksd, "n_ksd", 1)
    if burn_in >= pilot_iters:
        msg = f"`burn_in`={burn_in} must be smaller than `pilot_iters`={pilot_iters}"
        raise ValueError(msg)
    if n_ksd < chains:
        msg = f"`n_ksd`={n_ksd} must be at least `chains`={chains} (one kept draw per chain)"
        raise ValueError(msg)
    if ksd_kind not in _KINDS:
        msg = f"`ksd_kind` must be one of {_KINDS}; got {ksd_kind!r}"
        raise ValueError(msg)
    ksd_options = dict(ksd_options or {})
    if "kind" in ksd_options:
        msg = "pass the KSD kind as `ksd_kind`, not inside `ksd_options`"
        raise ValueError(msg)
    if isinstance(ksd_options.get("preconditioner"), str) and ksd_options["preconditioner"] != "id":
        msg = (
            f"`ksd_options['preconditioner']`={ksd_options['preconditioner']!r} depends on each "
            "pilot sample, so the step sizes would be scored with different kernels; compute it once "
            "with sgmc.diagnostics.ksd_preconditioner and pass the array"
        )
        raise ValueError(msg)
    per_chain = n_ksd // chains
    thin = max(thin, -(-(pilot_iters - burn_in) // per_chain))

    backend = backends.get_backend(model.xp)
    root = backends.default_rng(rng, backend=backend, device=model.device)
    if values is None:
        values = _sampler_grid(model, sampler, estimator, batch_size, init, root.spawn(1)[0],
                               sampler_options, estimator_options)
    streams = root.spawn(len(values))
    extend = check_int(extend, "extend", 0)

    def pilot(h: float, stream: Any) -> tuple[dict, Trace | None]:
        t0 = time.perf_counter()
        try:
            # a pilot at a poor step has not mixed or runs away: its KSD says so, the pilot is no result
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MixingWarning)
                warnings.simplefilter("ignore", RunawayChainWarning)
                trace = sample(
                    model, sampler, estimator, step_size=h, batch_size=batch_size,
                    n_iter=pilot_iters, chains=chains, burn_in=burn_in, thin=thin, init=init,
                    rng=stream, store_grads="full", progress=False,
                    sampler_options=sampler_options, estimator_options=estimator_options,
                )
        except (FloatingPointError, NoiseCorrectionError):   # diverged, or a noise correction infeasible
            return {"step_size": h, "ksd": math.inf, "ess": math.nan, "time": time.perf_counter() - t0,
                    "diverged": True}, None
        backend.synchronize()
        elapsed = time.perf_counter() - t0
        with backend.quiet_float():       # a wild but finite pilot may overflow the kernel: KSD inf
            value = float(ksd(trace.draws, trace.grads, kind=ksd_kind, **ksd_options))
        if not math.isfinite(value):
            value = math.inf
        ess_min = float(model.xp.min(ess(trace.draws))) if trace.n_draws >= 4 else math.nan
        return {"step_size": h, "ksd": value, "ess": ess_min, "time": elapsed, "diverged": False}, trace

    table: list[dict] = []
    traces: list[Trace | None] = []
    bar = progress_bar(progress, len(values), f"tuning {sampler if isinstance(sampler, str) else 'h'}")
    for h, stream in zip(values, streams):
        if bar is not None and table:
            bar.update(1)
        row, trace = pilot(h, stream)
        table.append(row)
        traces.append(trace)
    if bar is not None:
        bar.update(1)
        bar.close()

    added = 0
    while added < extend:
        h_new = _beyond_edge(table)
        if h_new is None:
            break
        row, trace = pilot(h_new, root.spawn(1)[0])
        table.append(row)
        traces.append(trace)
        added += 1
    if added:
        order = sorted(range(len(table)), key=lambda i: table[i]["step_size"])
        table = [table[i] for i in order]
        traces = [traces[i] for i in order]

    finite = [row for row in table if math.isfinite(row["ksd"])]
    if not finite:
        msg = (
            f"every step size in the grid {values} diverged or gave a non-finite KSD; "
            "try smaller step sizes"
        )
        raise FloatingPointError(msg)
    best = min(finite, key=lambda row: row["ksd"])["step_size"]
    if _beyond_edge(table) is not None:
        side = "smallest" if best == min(row["step_size"] for row in table) else "largest"
        msg = (f"tune_step_size chose {best:.4g}, the {side} step tried ({len(table)} pilots, {added} added "
               f"past the grid's ends with extend={extend}): a better step may lie beyond it; raise `extend` "
               "or pass a `grid` that reaches further that way")
        warnings.warn(msg, StepSizeEdgeWarning, stacklevel=2)
    return TuningResult(best=best, table=table, thin=thin, traces=traces if keep_traces else None,
                        extended=added)
