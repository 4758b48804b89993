"""Chains that run away: draws that are finite but grow without bound or sit far outside the posterior.

A step size too large for a stochastic gradient sampler does not always end in overflow: the
position can grow geometrically for thousands of iterations while staying finite, or jump far out
and wander there, and a trace of such draws gives means and losses that look like results. Two checks
say so, per chain, with the iteration where it shows:

* **Growth** (always, no reference needed): the kept draws are cut into 16 blocks; ``a_b`` is the
  root-mean-square distance of block ``b``'s draws from the mean of the first block. A chain runs
  away when every block of the last quarter has ``a_b`` at least ``growth`` (50) times the median
  ``a_b`` of the first half. A stationary chain keeps the ratio near 1, and even a chain that does
  not mix at all (a random walk, the worst case for this statistic) stayed below 21 in 20,000
  simulated runs of 200 and 2,000 draws in one dimension (below 14 in two); a geometric growth by a
  factor of 1,000 through the kept draws reaches 50.
* **Reference scale** (when a centre ``mu`` and a precision ``P`` are known, such as the Laplace
  approximation at the mode): ``r = sqrt((theta - mu)^T P (theta - mu))``, whose square is about
  chi-square with ``d`` degrees of freedom, so about ``sqrt(d)``, under the posterior. A chain is
  far outside when the median ``r`` of the last quarter of its kept draws exceeds ``scale``
  (20) times ``sqrt(d)``: twenty times the posterior's typical radius; the reported iteration is
  the first kept draw beyond that radius.
* **Spread against the posterior's** (every iteration after burn-in, no reference needed; the
  samplers in :data:`STEIN_SAMPLERS`, whose state carries the gradient estimate at its position):
  by the Stein identity ``E[(theta - c) . grad log pi(theta)] = -d`` for any fixed ``c`` under any
  smooth target on R^d whose density vanishes at infinity, so ``T = -mean((theta_k - c) . g_k) / d``
  over a chain's iterations is 1 for draws from the posterior (a Gaussian's ``T`` is the average,
  over its principal directions, of the chains' variance over the posterior's). ``c`` is the chain's
  first kept draw and ``g_k`` the sampler's own (unbiased) gradient estimate at ``theta_k``, so the
  check costs one dot product per iteration. A chain whose ``T`` exceeds ``scale ** 2`` (400: a
  spread twenty times the posterior's, as for the reference check) by three standard errors
  (batch means over 16 blocks) is far outside the posterior. It catches a step size past the
  stability limit whose chains jump far out at the first iteration and oscillate there, stationary:
  the growth check sees no growth, and R-hat and ESS look healthy.

:class:`Watch` folds the per-iteration quantities into the loop of :func:`sgmc.chains.run_chains`
(and its compiled blocks): ``max |theta_k|`` of every chain at every iteration, burn-in included
(a running maximum on the arrays' device is checked for finiteness at every divergence check, so
a non-finite position at any iteration is found) and the Stein products after burn-in; they are
recorded as per-iteration statistics ``abs_max`` and ``stein`` of the trace.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, NamedTuple

from .. import backends
from .._array_api import Array, array_namespace

__all__ = ["RunawayChainWarning", "Runaway", "Watch", "find_runaway", "find_spread", "stein_spread",
           "runaway_message", "warn_if_runaway", "GROWTH", "SCALE", "BLOCKS", "STEIN_SAMPLERS"]

#: Blocks the kept draws are cut into for the growth check.
BLOCKS = 16
#: Growth factor of the root-mean-square distance (last quarter against the first half) that flags a chain.
GROWTH = 50.0
#: Multiple of the posterior's typical radius sqrt(d) that flags a chain against a reference.
SCALE = 20.0
#: Samplers whose state's ``grad`` is an unbiased estimate of grad log pi at ``position`` on R^d (the Stein check).
STEIN_SAMPLERS = frozenset({"sgld", "ula", "psgld", "sghmc", "sgnht", "sgld_corrected", "sghmc_corrected",
                            "baoab", "badodab"})


class RunawayChainWarning(UserWarning):
    """A chain's draws grow without bound or lie far outside the posterior's scale (finite, not results)."""


class Runaway(NamedTuple):
    """One chain found running away.

    Attributes
    ----------
    chain : int
        The chain's index in the trace.
    iteration : int
        The 0-based iteration (of the run, burn-in included) from which it shows.
    kind : str
        ``"growth"`` or ``"scale"``.
    factor : float
        Growth: the smallest ratio ``a_b / a_ref`` over the last quarter of blocks. Scale: the median
        ``r / sqrt(d)`` over the last quarter of the draws.
    """

    chain: int
    iteration: int
    kind: str
    factor: float


def find_runaway(draws: Array, iterations: Any, *, centre: Array | None = None, precision: Array | None = None,
                 growth: float = GROWTH, scale: float = SCALE) -> list:
    """The chains of ``draws`` that run away (see the module docstring), at most one finding per chain.

    Parameters
    ----------
    draws : array (chains, n, dim)
        Kept draws.
    iterations : sequence of int
        The iteration of each kept draw (``Trace.iterations``).
    centre, precision : arrays (dim,) and (dim, dim), optional
        A reference: the posterior's centre and precision (the Laplace approximation: the mode and the
        negative Hessian of log pi there). Without them only the growth check runs.
    growth, scale : float
        The thresholds (module docstring).

    Returns
    -------
    list of Runaway
        Sorted by chain; the reference check's finding where both checks flag a chain.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.diagnostics.runaway import find_runaway
    >>> rng = np.random.default_rng(0)
    >>> steady = rng.normal(size=(2, 1600, 3))
    >>> find_runaway(steady, range(1600))
    []
    >>> grows = steady * np.exp(np.linspace(0.0, 10.0, 1600))[None, :, None]
    >>> [(r.chain, r.kind) for r in find_runaway(grows, range(1600))]
    [(0, 'growth'), (1, 'growth')]
    """
    xp = array_namespace(draws)
    if draws.ndim != 3:
        msg = f"`draws` must have shape (chains, n, dim); got {tuple(draws.shape)}"
        raise ValueError(msg)
    its = [int(i) for i in iterations]
    chains, n, dim = (int(s) for s in draws.shape)
    if len(its) != n:
        msg = f"`iterations` must give one iteration per draw ({n}); got {len(its)}"
        raise ValueError(msg)
    found = {}
    if n >= 4 * BLOCKS:
        for c, b, f in _growth(xp, draws, growth):
            found[c] = Runaway(c, its[n - BLOCKS * (n // BLOCKS) + b * (n // BLOCKS)], "growth", f)
    if centre is not None and precision is not None and n >= 4:
        for c, j, f in _outside(xp, draws, centre, precision, scale):
            found[c] = Runaway(c, its[j], "scale", f)
    return [found[c] for c in sorted(found)]


def _growth(xp: Any, draws: Array, growth: float) -> list:
    chains, n, dim = (int(s) for s in draws.shape)
    size = n // BLOCKS
    x = xp.reshape(draws[:, n - BLOCKS * size:, :], (chains, BLOCKS, size, dim))
    first = xp.mean(x[:, 0, :, :], axis=1)                                  # (chains, dim)
    diff = x - first[:, None, None, :]
    a = xp.sqrt(xp.mean(xp.sum(diff * diff, axis=-1), axis=-1))           # (chains, BLOCKS)
    a_host = _rows(xp, a)
    out = []
    for c, row in enumerate(a_host):
        early = sorted(row[:BLOCKS // 2])
        ref = 0.5 * (early[len(early) // 2 - 1] + early[len(early) // 2])
        tail = row[-(BLOCKS // 4):]
        if not (ref > 0 and all(math.isfinite(v) for v in row)):
            continue
        factor = min(tail) / ref
        if factor >= growth:
            # the first block from which every later block stays above the threshold
            b = BLOCKS - 1
            while b > 0 and row[b - 1] >= growth * ref:
                b -= 1
            out.append((c, b, factor))
    return out


def _outside(xp: Any, draws: Array, centre: Array, precision: Array, scale: float) -> list:
    chains, n, dim = (int(s) for s in draws.shape)
    diff = draws - xp.reshape(centre, (1, 1, dim))
    r2 = xp.sum((diff @ precision) * diff, axis=-1)                          # (chains, n)
    limit = scale * math.sqrt(dim)
    out = []
    for c, row in enumerate(_rows(xp, xp.sqrt(xp.clip(r2, min=0.0)))):
        r = [float(v) for v in row]
        tail = sorted(r[-max(1, n // 4):])
        med = tail[len(tail) // 2] if len(tail) % 2 else 0.5 * (tail[len(tail) // 2 - 1] + tail[len(tail) // 2])
        if med > limit:
            first = next(j for j, v in enumerate(r) if v > limit)
            out.append((c, first, med / math.sqrt(dim)))
    return out


def _rows(xp: Any, a: Array) -> list:
    """A small (chains, k) array as host lists of floats, one transfer."""
    return backends.to_numpy(a).tolist()


class Watch:
    """The per-iteration quantities of the checks, folded into a loop over iterations (module docstring).

    ``abs_max``: ``max_i |theta_k,i|`` per chain at every iteration; ``stein``: ``(theta_k - c) . g_k``
    per chain after the first kept iteration ``start`` (0.0 up to and at it), with ``c`` the draw kept
    there. :meth:`one` records one iteration's, :meth:`block` a compiled block's (the same values up to
    the rounding of the sums); :attr:`top` is the running maximum of ``abs_max`` on the arrays' device.

    Parameters
    ----------
    xp : namespace
    sampler : Sampler
    start : int
        The first kept iteration (``n_iter`` when none is kept).
    position : array (chains, dim)
        The starting position (it starts the running maximum).
    resume : ChainsProgress, optional
        A loop continued from a checkpoint: the running maximum and ``c`` continue from it.
    """

    def __init__(self, xp: Any, sampler: Any, start: int, position: Array, resume: Any = None):
        self.xp, self.start = xp, start
        self.stein = getattr(sampler, "name", None) in STEIN_SAMPLERS
        self.top = xp.max(xp.abs(position), axis=-1)
        self.centre = None
        if resume is not None and resume.k:
            last = resume.infos[resume.k - 1].extras or {}
            if "abs_max" in last:
                self.top = xp.maximum(self.top, xp.asarray(last["abs_max"]))
            if resume.j:
                self.centre = xp.asarray(resume.draws[:, 0, :], copy=True)

    def one(self, k: int, position: Array, grad: Array, info: Any) -> Any:
        """``info`` (a StepInfo) with iteration ``k``'s ``abs_max`` (and ``stein``) in its extras."""
        xp = self.xp
        a = xp.max(xp.abs(position), axis=-1)
        self.top = xp.maximum(self.top, a)
        extras = dict(info.extras) if info.extras else {}
        extras["abs_max"] = a
        if self.stein:
            if k == self.start:
                self.centre = xp.asarray(position, copy=True)
            extras["stein"] = 0.0 if k <= self.start else xp.sum((position - self.centre) * grad, axis=-1)
        return info._replace(extras=extras)

    def block(self, k: int, positions: Array, grads: Array | None, infos: list) -> list:
        """The StepInfo of a block of iterations ``k, k + 1, ...`` with their ``abs_max`` (and ``stein``)."""
        xp = self.xp
        n = len(infos)
        a = xp.max(xp.abs(positions), axis=-1)                                # (iterations, chains)
        self.top = xp.maximum(self.top, xp.max(a, axis=0))
        u = None
        if self.stein and k + n > self.start:
            first = max(0, self.start - k)                                   # the block's first row after start
            if self.start >= k:
                self.centre = xp.asarray(positions[self.start - k, ...], copy=True)
                first += 1
            if first < n:
                u = xp.sum((positions[first:, ...] - self.centre[None, ...]) * grads[first:, ...], axis=-1)
        out = []
        for t, info in enumerate(infos):
            extras = dict(info.extras) if info.extras else {}
            extras["abs_max"] = a[t, ...]
            if self.stein:
                extras["stein"] = u[t - (n - u.shape[0]), ...] if u is not None and t >= n - u.shape[0] else 0.0
            out.append(info._replace(extras=extras))
        return out

    def finite(self) -> Array:
        """A 0-d boolean array: every position so far finite (the running maximum is; NaN propagates)."""
        return self.xp.all(self.xp.isfinite(self.top))


def stein_spread(stein: Any, start: int, dim: int, blocks: int = BLOCKS) -> list:
    """Per chain ``(T, se, block T values)`` of the Stein check from the ``stein`` statistic (module docstring).

    ``stein`` is a host array (chains, n_iter) of ``(theta_k - c) . g_k``; the iterations after
    ``start`` (the first kept one) are cut into ``blocks`` batches whose means give ``T`` and its
    standard error. Chains with fewer than ``2 * blocks`` such iterations get ``None``.
    """
    rows = [list(map(float, r)) for r in stein]
    out = []
    for row in rows:
        tail = row[start + 1:]
        size = len(tail) // blocks
        if size < 2:
            out.append(None)
            continue
        tail = tail[len(tail) - size * blocks:]
        ts = [-math.fsum(tail[b * size:(b + 1) * size]) / (size * dim) for b in range(blocks)]
        mean = math.fsum(ts) / blocks
        var = math.fsum((t - mean) ** 2 for t in ts) / (blocks - 1)
        out.append((mean, math.sqrt(var / blocks), ts))
    return out


def find_spread(stein: Any, start: int, dim: int, iterations_from: int | None = None, *, scale: float = SCALE) -> list:
    """The chains whose Stein ``T`` exceeds ``scale ** 2`` by three standard errors, as :class:`Runaway` (kind "spread").

    The reported iteration is the first of the batch (of :data:`BLOCKS`) from which every later
    batch's ``T`` exceeds ``scale ** 2``; ``factor`` is ``sqrt(T)``, the spread in posterior sds.
    """
    n_iter = len(stein[0]) if len(stein) else 0
    out = []
    limit = scale * scale
    for c, res in enumerate(stein_spread(stein, start, dim)):
        if res is None:
            continue
        t, se, ts = res
        if not (math.isfinite(t) and t - 3.0 * se > limit):
            continue
        b = len(ts) - 1
        while b > 0 and ts[b - 1] > limit:
            b -= 1
        size = (n_iter - start - 1) // len(ts)
        first = n_iter - size * len(ts)
        out.append(Runaway(c, first + b * size, "spread", math.sqrt(t)))
    return out


def runaway_message(found: list, sampler: str, step_size: float | None = None) -> str:
    """One sentence per finding, for a :class:`RunawayChainWarning`."""
    parts = []
    for r in found:
        if r.kind == "growth":
            parts.append(
                f"chain {r.chain} runs away from iteration {r.iteration}: the spread of its draws about "
                f"where the kept draws began grows {r.factor:.3g}-fold (last quarter against the first half)"
            )
        elif r.kind == "spread":
            parts.append(
                f"chain {r.chain} is far outside the posterior from iteration {r.iteration}: its spread is about "
                f"{r.factor:.3g} times the posterior's (Stein identity: -mean((theta - c) . grad) / d = "
                f"{r.factor ** 2:.3g}, 1 for posterior draws)"
            )
        else:
            parts.append(
                f"chain {r.chain} is far outside the posterior from iteration {r.iteration}: its draws lie "
                f"{r.factor:.3g} x sqrt(d) posterior standard deviations from the reference centre"
            )
    h = f" at step_size={step_size:g}" if step_size is not None else ""
    return (
        f"{sampler}{h}: " + "; ".join(parts) + ". The draws are finite but not from the posterior: "
        "decrease the step size (or check the gradient estimator), and do not use these draws as results"
    )


def warn_if_runaway(trace: Any, sampler: Any, step_sizes: Any, stacklevel: int = 4) -> list:
    """Run the growth and Stein checks on a trace of :func:`sgmc.sample`; record and warn about what they find.

    Sets ``trace.info["runaway"]`` (a list of ``{"chain", "iteration", "kind", "factor"}``, at most one
    per chain, the Stein finding first) and ``trace.info["abs_max"]`` (each chain's largest
    ``|theta_i|`` over every iteration, burn-in included), and issues one :class:`RunawayChainWarning`
    naming every chain found. Metropolis-adjusted samplers (MALA) target the posterior exactly, so
    their traces are not checked.
    """
    found = []
    stats = trace.stats
    if "abs_max" in stats and stats["abs_max"].shape[1]:
        trace.info["abs_max"] = [float(v) for v in stats["abs_max"].max(axis=1)]
    if not sampler.needs_log_density:
        found = find_runaway(trace.draws, trace.iterations)
        if "stein" in stats and len(trace.iterations):
            spread = {r.chain: r for r in find_spread(stats["stein"], int(trace.iterations[0]), int(trace.draws.shape[2]))}
            found = sorted({**{r.chain: r for r in found}, **spread}.values(), key=lambda r: r.chain)
    trace.info["runaway"] = [r._asdict() for r in found]
    if found:
        hs = sorted({float(h) for h in step_sizes})
        msg = runaway_message(found, sampler.name, hs[0] if len(hs) == 1 else None)
        warnings.warn(msg, RunawayChainWarning, stacklevel=stacklevel)
    return found
