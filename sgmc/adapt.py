"""``step_size="auto"``: the step size chosen during burn-in by the KSD of short windows.

The grid tuner (:mod:`sgmc.tuning`) runs one pilot per step size on a fixed grid. This module spends
the run's own burn-in instead. The chains advance in windows of equal length, each at one step of a
geometric ladder; the second half of a window is thinned to a few draws, the exact scores are taken
there, and the window is scored by the kernel Stein discrepancy of those draws (the review's eq. 13,
as :func:`sgmc.tuning.tune_step_size` scores its pilots; Nemeth and Fearnhead 2021, section 4). Every
window costs the same iterations and the same scores, so comparing KSDs compares KSD per cost.

The ladder moves toward the best step: up by the ratio while that improves, otherwise down, until the
best step has a worse (or divergent) neighbour on both sides. At that first bracket the kernel is
put on the posterior's scale (the median-distance preconditioner of the best window's draws, fixed
from then on) and every window so far is scored again with it: the windows start near the posterior,
where a unit kernel cannot tell a sample collapsed on the mode of a narrow posterior from a good one.
Then the ratio is refined (10, 10^(1/2), 10^(1/4)), and the finest bracket is scored again, up to
``repeats`` windows per step, with the KSDs averaged. A choice is never settled at the edge of what
was tried: when the burn-in ends before the best step is bracketed, a :class:`UserWarning` says so
and ``bracketed`` is False. A window whose chains stop being finite (or whose KSD is not) marks its
step and every larger one divergent, the chains go back to where they were before it, and the ladder
backs off (by the ratio squared while no step has yet been finite). Each window starts from a copy
of the end of the best window so far, so a window at a poor step does not leave the chains astray.
The burn-in left when the ladder is done runs at the chosen step.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

from . import backends
from ._stepbias import StepSizeBiasWarning, bound_step, inflation, local_gaussian, supports
from ._stepgrid import StepSizeEdgeWarning, default_grid
from .chains import ChainsProgress, DivergenceError, run_chains
from .diagnostics.ksd import ksd, ksd_preconditioner
from .models.base import require

__all__ = ["AutoStep", "AdaptResult", "adapt_step_size", "parse_auto", "default_burn_in", "StepSizeBiasWarning",
           "StepSizeEdgeWarning"]

_KINDS = ("sum", "joint")


@dataclass(frozen=True)
class AutoStep:
    """Settings of ``sample(..., step_size=AutoStep(...))``; ``step_size="auto"`` is ``AutoStep()``.

    Parameters
    ----------
    start : float, optional
        The first step tried. Default: the geometric middle of :func:`sgmc.tuning.default_grid` for
        the model and sampler (10^-1.5 / M for SGLD with curvature bound M).
    ratio : float, default 10
        The first ladder ratio (> 1); it is refined to its square root while ``min_ratio`` allows.
    min_ratio : float, default 10 ** 0.25
        The finest ratio; the ladder stops refining below it.
    window : int, optional
        Iterations per window. Default ``max(20, burn_in // 12)``.
    n_ksd : int, default 64
        Draws scored per window over all chains (at least one per chain): each costs one pass over
        the data for the exact score.
    ksd_kind : {"sum", "joint"}, default "sum"
        As in :func:`sgmc.tuning.tune_step_size`.
    repeats : int, default 3
        Windows per step of the final bracket (the best step and its neighbours at ``min_ratio``):
        once the bracket is found, the burn-in left scores them again, fewest windows first, and
        their KSDs are averaged, so that one noisy window does not decide.
    ksd_options : dict, optional
        Further keyword arguments for :func:`sgmc.diagnostics.ksd` (a fixed ``preconditioner`` array
        on the posterior's scale for a posterior much narrower than 1).
    sd_tolerance : float or None, default 1.1
        For SGLD, ULA and SGHMC: the most the marginal posterior sds may be inflated (or deflated) at
        stationarity, estimated on the local Gaussian approximation at the chains (the negative
        Hessian H there and the gradient estimator's noise covariance V measured at the chains,
        :mod:`sgmc._stepbias`). A KSD choice above the largest step within it is lowered to that
        step; a choice that mixes too slowly for the iterations after burn-in (autocorrelation time
        above a 50th of them, or fewer than 200 effective draws over all chains) is raised toward it,
        to the smallest step that mixes. When no step within the tolerance mixes, the smallest step
        that does is used, and a :class:`StepSizeBiasWarning` names its estimated sd
        inflation when that exceeds 1.2 (or ``sd_tolerance``, if larger). None keeps the KSD choice.

    Examples
    --------
    >>> import numpy as np
    >>> import sgmc
    >>> from sgmc.adapt import AutoStep
    >>> from sgmc.models import GaussianTarget
    >>> trace = sgmc.sample(GaussianTarget.review_example(), "sgld", "full", n_iter=2000, burn_in=1000,
    ...                     chains=4, step_size=AutoStep(window=100), rng=0, progress=False)
    >>> 0.05 < trace.info["step_size_auto"]["step_size"] < 4.0
    True
    """

    start: float | None = None
    ratio: float = 10.0
    min_ratio: float = 10.0 ** 0.25
    window: int | None = None
    n_ksd: int = 64
    ksd_kind: str = "sum"
    ksd_options: dict | None = field(default=None)
    repeats: int = 3
    sd_tolerance: float | None = 1.1

    def __post_init__(self) -> None:
        def bad(what: str, value: Any) -> None:
            msg = f"`step_size`: AutoStep's {what}; got {value!r}"
            raise ValueError(msg)

        if self.start is not None and not (_real(self.start) and math.isfinite(self.start) and self.start > 0):
            bad("start must be a positive finite step size or None", self.start)
        if not (_real(self.ratio) and math.isfinite(self.ratio) and self.ratio > 1):
            bad("ratio must be a finite number above 1", self.ratio)
        if not (_real(self.min_ratio) and 1 < self.min_ratio <= self.ratio):
            bad(f"min_ratio must be in (1, ratio={self.ratio!r}]", self.min_ratio)
        if self.window is not None and not (_int(self.window) and self.window >= 4):
            bad("window must be an int of at least 4 iterations or None", self.window)
        if not (_int(self.repeats) and self.repeats >= 1):
            bad("repeats must be a positive int", self.repeats)
        if self.sd_tolerance is not None and not (_real(self.sd_tolerance) and 1 < self.sd_tolerance < math.inf):
            bad("sd_tolerance must be a finite number above 1 or None", self.sd_tolerance)
        if not (_int(self.n_ksd) and self.n_ksd >= 1):
            bad("n_ksd must be a positive int", self.n_ksd)
        if self.ksd_kind not in _KINDS:
            bad(f"ksd_kind must be one of {_KINDS}", self.ksd_kind)
        opts = self.ksd_options or {}
        if not isinstance(opts, dict) or "kind" in opts or isinstance(opts.get("preconditioner"), str):
            bad("ksd_options must be a dict without 'kind' and with a fixed preconditioner array, if any", opts)


def _real(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def default_burn_in(step_size: Any, n_iter: int) -> int:
    """The burn-in of a run that gives none: half the iterations for ``"auto"`` (it adapts there),
    none otherwise."""
    return n_iter // 2 if isinstance(step_size, AutoStep) or (isinstance(step_size, str) and step_size == "auto") else 0


def parse_auto(step_size: Any, burn_in: int, n_iter: int) -> AutoStep | None:
    """``AutoStep`` for ``"auto"`` or an ``AutoStep``; None for any other ``step_size``.

    Raises ``TypeError`` naming ``step_size`` for another string, and ``ValueError`` when the burn-in
    is too short for three windows.
    """
    if isinstance(step_size, str):
        if step_size != "auto":
            msg = (f"`step_size` must be a positive number, a schedule or a sequence; got str ({step_size!r}: "
                   "the one string it takes is 'auto', adapted during burn-in)")
            raise TypeError(msg)
        step_size = AutoStep()
    if not isinstance(step_size, AutoStep):
        return None
    window = step_size.window or max(20, burn_in // 12)
    if burn_in < 3 * window:
        msg = (f"`step_size`='auto' adapts during burn-in and needs at least three windows of {window} "
               f"iterations; got burn_in={burn_in} (give burn_in >= {3 * window}, for example n_iter // 2 "
               f"with n_iter={n_iter})")
        raise ValueError(msg)
    return step_size


@dataclass
class AdaptResult:
    """What :func:`adapt_step_size` did.

    Attributes
    ----------
    step_size : float
        The chosen step (the smallest KSD among the windows).
    state : NamedTuple
        The sampler state of the chains at the end of the adaptation (burn-in left included).
    iterations : int
        Iterations used (the burn-in given).
    info : dict
        JSON-ready report: ``step_size``, ``bracketed``, ``path`` (one dict per window: ``step_size``,
        ``ksd`` (None when diverged), ``diverged``, ``ratio``), ``windows``, ``window``,
        ``iterations``, ``data_passes`` (per chain: the windows' gradient estimates, the scores, the
        bias check and the burn-in left), ``time`` (seconds), ``step_size_ksd`` (the ladder's choice)
        and ``sd_inflation`` (None where not estimated; otherwise ``low`` and ``high``, the smallest
        and largest ratio of the stationary marginal sds to the local Gaussian's at the chosen step,
        ``worst`` = max(high, 1 / low), ``tau`` its autocorrelation time in iterations,
        ``at_ksd_step`` the same ratios at the ladder's choice, and ``bounded``: worst <= 1.2, or
        ``sd_tolerance`` if larger).
    """

    step_size: float
    state: Any
    iterations: int
    info: dict


def _start(auto: AutoStep, model: Any, sampler: Any, estimator: Any, position: Any, rng: Any) -> float:
    if auto.start is not None:
        return float(auto.start)
    grid = default_grid(model, sampler, estimator=estimator, position=position[0, ...], rng=rng)
    return math.sqrt(min(grid) * max(grid))


def adapt_step_size(auto: AutoStep, model: Any, sampler: Any, estimator: Any, rng: Any, position: Any,
                    burn_in: int, n_after: int | None = None) -> AdaptResult:
    """Choose a step size during ``burn_in`` iterations of the chains at ``position`` (chains, dim).

    See the module docstring for the method. ``sampler`` and ``estimator`` are the configured objects
    of :func:`sgmc.sample`; ``rng`` is a stream of the run's generator; ``n_after`` the iterations
    the run goes on for after burn-in (default ``burn_in``), which decide how small a step still mixes.
    """
    require(model, ("grad_log_posterior",), "step_size='auto'")
    t0 = time.perf_counter()
    xp = model.xp
    backend = backends.get_backend(xp)
    chains = int(position.shape[0])
    window = auto.window or max(20, burn_in // 12)
    n_windows = burn_in // window
    half = window // 2
    per_chain = max(1, min(half, auto.n_ksd // chains))
    thin = max(1, half // per_chain)
    kept = list(range(window - 1, window - 1 - thin * per_chain, -thin))[::-1]
    kept = [k for k in kept if k >= window - half]
    n_data = max(int(model.n_data), 1)
    h0 = _start(auto, model, sampler, estimator, position, rng)
    init_rng, run_rng = rng.spawn(2)
    passes = 0.0

    # a step may update its state in place, so the chains go back to a copy of the best window's end
    best_position = xp.asarray(position, copy=True)
    live, live_is_best = None, False
    scores: dict[float, float] = {}   # exponent x (h = h0 * 10**x) -> mean KSD of its windows (inf: diverged)
    counts: dict[float, int] = {}
    path: list[dict] = []
    stored: list[tuple] = []           # (x, draws, grads, KSD) of every finite window, to rescore
    options = dict(auto.ksd_options or {})
    user_kernel = "preconditioner" in options
    kernel: dict = {"fixed": None}
    b = None
    log_r = math.log10(auto.ratio)
    min_log_r = math.log10(auto.min_ratio) * (1 - 1e-9)
    used = 0

    def run(steps: list, kept_idx: list, state: Any, score: bool):
        n = len(steps)
        draws = xp.empty((chains, len(kept_idx), model.dim), dtype=model.dtype, device=model.device)
        grads = xp.empty_like(draws) if score else None
        resume = ChainsProgress(0, 0, state, run_rng, draws, grads, [], [])
        res = run_chains(sampler, estimator, run_rng, state.position, steps, kept_idx,
                         store_grads="full" if score else False, score=model.grad_log_posterior,
                         check_every=max(1, n // 4), quiet_float=backend.quiet_float, resume=resume)
        ev = float(backends.to_numpy(res.stats["n_evals"]).sum()) / chains if n else 0.0
        return res, ev / n_data + (len(kept_idx) if score else 0)

    def score(draws: Any, grads: Any) -> float:
        with backend.quiet_float():
            value = float(ksd(draws, grads, kind=auto.ksd_kind, **options))
        return value if math.isfinite(value) else math.inf

    def rescore() -> None:
        """Fix the kernel's scale from the best window's draws and score every window with it."""
        windows = [w for w in stored if math.isfinite(scores[w[0]])]
        best = min(windows, key=lambda w: w[3])
        lam = ksd_preconditioner(best[1], "med") if not user_kernel else None
        kernel["fixed"] = True
        if lam is None:
            return
        options["preconditioner"] = lam
        for y in {w[0] for w in windows}:
            values = [score(w[1], w[2]) for w in windows if w[0] == y]
            scores[y] = sum(values) / len(values)
        for entry, w in zip([p for p in path if not p["diverged"]], windows):
            entry["ksd_scaled"] = scores[w[0]]

    def best_x() -> float | None:
        finite = {x: v for x, v in scores.items() if math.isfinite(v)}
        return min(finite, key=finite.get) if finite else None

    def diverged_from() -> float:
        bad = [x for x, v in scores.items() if not math.isfinite(v)]
        return min(bad) if bad else math.inf

    def known(x: float) -> bool:
        return any(abs(x - y) < 1e-9 for y in scores) or x >= diverged_from() - 1e-9

    def next_x() -> float | None:
        nonlocal log_r, b
        b = best_x()
        if b is None:       # nothing finite yet: back off fast
            return (min(scores) - 2 * log_r) if scores else 0.0
        while True:
            up, down = b + log_r, b - log_r
            if not known(up):
                return up
            if not known(down):
                return down
            if kernel["fixed"] is None:     # first bracket: the kernel on the posterior's scale, then again
                rescore()
                b = best_x()
                continue
            if log_r / 2 < min_log_r:
                break
            log_r /= 2
        # bracketed at the finest ratio: score the bracket again, fewest windows first, to average out noise
        trio = [y for y in scores if math.isfinite(scores[y]) and abs(y - b) <= log_r * (1 + 1e-9)]
        y = min(trio, key=lambda y: (counts[y], abs(y - b)))
        return y if counts[y] < auto.repeats else None

    while used + window <= burn_in:
        x = next_x()
        if x is None:
            break
        h = h0 * 10.0 ** x
        if not live_is_best:
            with backend.quiet_float():
                live = sampler.init(init_rng, xp.asarray(best_position, copy=True), estimator)
            passes += _init_passes(estimator, n_data)
        try:
            res, cost = run([h] * window, kept, live, True)
        except DivergenceError as err:
            # the window stopped at its first failed check: its iterations (and none of its scores) count
            part = err.partial
            done = int(part.n_done) if part is not None and part.n_done >= 0 else window
            n_evals = part.stats.get("n_evals") if part is not None else None
            ev = float(backends.to_numpy(n_evals).sum()) / chains if n_evals is not None else 0.0
            passes += ev / n_data
            used += window
            live_is_best = False
            scores[x], counts[x] = math.inf, 1
            path.append({"step_size": h, "ksd": None, "diverged": True, "ratio": 10.0 ** log_r,
                         "iterations": done})
            continue
        passes += cost
        used += window
        value = score(res.draws, res.grads)
        if math.isfinite(value):
            stored.append((x, res.draws, res.grads, value))
        b = best_x()
        n = counts.get(x, 0)
        scores[x], counts[x] = (scores[x] * n + value) / (n + 1) if n else value, n + 1
        live, live_is_best = res.state, math.isfinite(value) and (b is None or scores[x] <= scores[b])
        if live_is_best:
            best_position = xp.asarray(res.state.position, copy=True)
        path.append({"step_size": h, "ksd": value if math.isfinite(value) else None,
                     "diverged": not math.isfinite(value), "ratio": 10.0 ** log_r, "iterations": window})

    b = best_x()
    if b is None:
        tried = sorted(h0 * 10.0 ** x for x in scores)
        msg = (f"step_size='auto': every step tried during burn-in diverged ({', '.join(f'{h:.3g}' for h in tried)}); "
               "pass AutoStep(start=...) with a smaller first step")
        raise DivergenceError(msg, used, tried[0] if tried else math.nan)
    bracketed = any(x < b for x in scores) and any(x > b for x in scores)   # a divergent step counts
    h_best = h0 * 10.0 ** b
    if not bracketed:
        msg = (f"step_size='auto' chose {h_best:.4g} at the edge of the steps it tried: burn_in={burn_in} "
               f"left too few windows of {window} iterations to bracket it; increase burn_in (or pass "
               "AutoStep(start=...) nearer the right step)")
        warnings.warn(msg, StepSizeEdgeWarning, stacklevel=3)
    h_ksd = h_best
    bias = None
    if auto.sd_tolerance is not None and supports(sampler):
        h_best, bias, cost = _bound_bias(auto, model, sampler, estimator, rng.spawn(1)[0], best_position, h_ksd,
                                         burn_in if n_after is None else n_after, chains)
        passes += cost
    if h_best != h_ksd:
        live_is_best = False      # the burn-in left runs at the lowered step from the best window's end
    state = live if live_is_best else sampler.init(init_rng, best_position, estimator)
    passes += 0.0 if live_is_best else _init_passes(estimator, n_data)
    rest = burn_in - used
    if rest > 0:
        try:
            res, cost = run([h_best] * rest, [], state, False)
        except DivergenceError as err:
            msg = f"step_size='auto' chose {h_best:.4g}, which diverged in the burn-in after the adaptation: {err}"
            raise DivergenceError(msg, err.iteration + used, h_best) from err
        state, passes = res.state, passes + cost
    info = {"step_size": h_best, "bracketed": bool(bracketed), "start": h0, "window": window,
            "windows": len(path), "scored_per_window": len(kept) * chains, "iterations": burn_in,
            "data_passes": passes, "time": time.perf_counter() - t0, "path": path, "step_size_ksd": h_ksd,
            "sd_inflation": bias}
    return AdaptResult(h_best, state, burn_in, info)


_WARN_AT = 1.2      # the estimated sd factor above which the choice is reported as unbounded (goal: 1.25)
# a step mixes in the run when its autocorrelation time leaves at least this many effective draws per
# chain and over all chains (the mixing check of sgmc.diagnostics.mixing asks for a bulk ESS of 100)
_PER_CHAIN, _TOTAL = 50.0, 200.0


def _bound_bias(auto: AutoStep, model: Any, sampler: Any, estimator: Any, rng: Any, position: Any, h: float,
                n_after: int, chains: int) -> tuple:
    """``(step, report, passes)``: ``h`` lowered to keep the estimated sd inflation within
    ``auto.sd_tolerance`` where the run's length lets that step mix; a warning where it stays above 1.2 (or the tolerance)."""
    local = local_gaussian(model, estimator, position, rng)
    if local is None:
        return h, None, 0.0
    H, V, passes = local

    def evaluate(step: float) -> dict | None:
        return inflation(sampler, H, V, step)

    at_ksd = evaluate(h)
    if at_ksd is None:       # H not positive definite at the chains (or the map unstable there): no bound
        return h, None, passes
    budget = max(1.0, min(n_after / _PER_CHAIN, n_after * chains / _TOTAL))
    step, est = bound_step(evaluate, h, auto.sd_tolerance, budget)
    if est is None:
        return h, None, passes
    report = dict(est, at_ksd_step=at_ksd, bounded=est["worst"] <= max(_WARN_AT, auto.sd_tolerance))
    if not report["bounded"]:
        msg = (f"step_size='auto' chose {step:.4g}, where the posterior sds are estimated to be off by a factor "
               f"{est['worst']:.3g} (stationary sd ratios {est['low']:.3g} to {est['high']:.3g} on the local Gaussian "
               f"approximation, gradient noise included): the steps within {auto.sd_tolerance} mix too slowly for "
               f"the {n_after} iterations after burn-in (this one: {est['tau']:.3g} iterations per effective draw); "
               "raise n_iter, use a larger batch_size or control variates ('cv')")
        warnings.warn(msg, StepSizeBiasWarning, stacklevel=4)
    return step, report, passes


def _init_passes(estimator: Any, n_data: int) -> float:
    """Passes the estimator's state initialisation makes per chain (SAGA's gradient table, say)."""
    return float(getattr(estimator, "init_cost", 0.0)) / n_data
