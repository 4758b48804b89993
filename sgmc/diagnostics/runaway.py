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
(and its compiled blocks), at every iteration, burn-in included: the largest ``|theta_i|`` of every
chain (a running maximum on the arrays' device, checked for finiteness at every divergence check, so
a non-finite position at any iteration is found even if a later one is finite again) and, after
burn-in, the sums the Stein check needs. They are recorded per window between divergence checks, as
the trace's statistics ``abs_max``, ``stein`` and ``stein_n``.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, NamedTuple

from .. import backends
from .._array_api import Array, array_namespace, namespace_name
from ..backends._values import summed_blocks

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


def draws_backend(draws: Array, backend: Any = None) -> tuple:
    """``(xp, to_host)`` for ``draws`` (chains, n, dim), its shape checked: ``backend``'s when given (a run's plan)."""
    xp = array_namespace(draws) if backend is None else backend.xp
    to_host = backends.to_numpy if backend is None else backend.to_host
    if draws.ndim != 3:
        msg = f"`draws` must have shape (chains, n, dim); got {tuple(draws.shape)}"
        raise ValueError(msg)
    return xp, to_host


# Its draws and backend parameters are documented again in check_mixing: each function's help stands alone.
def find_runaway(draws: Array, iterations: Any, *, centre: Array | None = None, precision: Array | None = None,
                 growth: float = GROWTH, scale: float = SCALE, backend: Any = None) -> list:
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
    backend : Backend, optional
        The backend of ``draws`` when the caller knows it (a run's plan): its namespace and its copies
        to the host. Found from ``draws`` otherwise.

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
    xp, to_host = draws_backend(draws, backend)
    its = [int(i) for i in iterations]
    chains, n, dim = (int(s) for s in draws.shape)
    if len(its) != n:
        msg = f"`iterations` must give one iteration per draw ({n}); got {len(its)}"
        raise ValueError(msg)
    found = {}
    if n >= 4 * BLOCKS:
        for c, b, f in _growth(xp, draws, growth, to_host):
            found[c] = Runaway(c, its[n - BLOCKS * (n // BLOCKS) + b * (n // BLOCKS)], "growth", f)
    if centre is not None and precision is not None and n >= 4:
        for c, j, f in _outside(xp, draws, centre, precision, scale):
            found[c] = Runaway(c, its[j], "scale", f)
    return [found[c] for c in sorted(found)]


def _growth(xp: Any, draws: Array, growth: float, to_host: Any = None) -> list:
    chains, n, dim = (int(s) for s in draws.shape)
    size = n // BLOCKS
    x = xp.reshape(draws[:, n - BLOCKS * size:, :], (chains, BLOCKS, size, dim))
    first = xp.mean(x[:, 0, :, :], axis=1)                                  # (chains, dim)
    diff = x - first[:, None, None, :]
    a = xp.sqrt(xp.mean(xp.sum(diff * diff, axis=-1), axis=-1))           # (chains, BLOCKS)
    a_host = _rows(xp, a, to_host)
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


def _rows(xp: Any, a: Array, to_host: Any = None) -> list:
    """A small (chains, k) array as host lists of floats, one transfer (``to_host``, or found from ``a``)."""
    return (backends.to_numpy if to_host is None else to_host)(a).tolist()


class Watch:
    """The per-iteration quantities of the checks, folded into a loop over iterations (module docstring).

    Every iteration, burn-in included, :meth:`one` (or :meth:`block`, for a compiled block of
    iterations) takes the elementwise running maximum of ``|theta|`` and, after the first kept
    iteration ``start``, adds ``u_k = (theta_k - c) . g_k`` (``c`` the draw kept at ``start``) to a
    running sum per chain, in iteration order, on the arrays' device. At the end of each window
    (every ``check_every`` iterations and the last: :meth:`flush`) they become the StepInfo extras of
    that iteration, per chain: ``abs_max`` (the window's largest ``|theta_i|``), ``stein`` (the sum of
    ``u_k``) and ``stein_n`` (its iterations); other iterations record 0 (:meth:`plain`). A checkpoint
    or a stop inside a window records the partial window (:meth:`peek`), and a loop resumed there
    reopens it (:meth:`reopen`), so the statistics of a resumed run equal an uninterrupted run's, bit
    for bit, like its draws.

    Parameters
    ----------
    xp : namespace
    sampler : Sampler
    start : int
        The first kept iteration (``n_iter`` when none is kept).
    position : array (chains, dim)
        The starting position (it starts the running maximum).
    resume : ChainsProgress, optional
        A loop continued from a checkpoint: ``c`` comes from its kept draws.
    """

    def __init__(self, xp: Any, sampler: Any, start: int, position: Array, resume: Any = None,
                 host: tuple | None = None):
        self.xp, self.start, self._host = xp, start, host
        self.stein = getattr(sampler, "name", None) in STEIN_SAMPLERS
        self.top = xp.max(xp.abs(position), axis=-1)
        self.centre = None
        if resume is not None and resume.j and self.stein:
            self.centre = xp.asarray(resume.draws[:, 0, :], copy=True)
        self._summed = summed_blocks(namespace_name(xp))
        # JAX's eager vecdot traces a vmap at every call: a compiled block's rows take the plain sum
        vecdot = None if self._summed else getattr(xp, "vecdot", None)
        self._dot = vecdot or (lambda a, b: xp.sum(a * b, axis=-1))
        self.m, self.s, self.n = None, None, 0
        self._zero = {"abs_max": 0.0, "stein": 0, "stein_n": 0} if self.stein else {"abs_max": 0.0}

    def one(self, k: int, position: Array, grad: Array) -> None:
        """Fold in iteration ``k``'s position (and gradient estimate)."""
        xp = self.xp
        ab = xp.abs(position)
        self.m = ab if self.m is None else xp.maximum(self.m, ab)
        if not self.stein or k < self.start:
            return
        if k == self.start:
            self.centre = xp.asarray(position, copy=True)
            return
        u = self._dot(position - self.centre, grad)
        self.s = u if self.n == 0 else self.s + u
        self.n += 1

    def block(self, k: int, positions: Array, grads: Array | None) -> None:
        """Fold in the iterations ``k, k + 1, ...`` of a compiled block: positions (iterations, chains, dim)."""
        xp = self.xp
        n = int(positions.shape[0])
        ab = xp.max(xp.abs(positions), axis=0)
        self.m = ab if self.m is None else xp.maximum(self.m, ab)
        if not self.stein or k + n <= self.start:
            return
        first = max(0, self.start - k)
        if self.start >= k:
            self.centre = xp.asarray(positions[first, ...], copy=True)
            first += 1
        if first >= n:
            return
        u = self._dot(positions[first:, ...] - self.centre[None, ...], grads[first:, ...])  # (rows, chains)
        if self._summed:  # JAX's compiled blocks: one sum, not a slice per row
            total = xp.sum(u, axis=0)
            self.s = total if self.n == 0 else self.s + total
            self.n += n - first
            return
        for t in range(n - first):  # in iteration order, as the one-step loop adds them
            self.s = u[t, ...] if self.n == 0 else self.s + u[t, ...]
            self.n += 1

    def block_args(self, k: int) -> tuple:
        """``(c, start - k, stein)`` for a compiled block from iteration ``k`` that computes :meth:`window`'s input."""
        return self.centre, self.start - k, self.stein

    def to_host(self) -> None:
        """Keep the quantities on the host from now on (``host``: ``(to_host, host namespace)``).

        For a loop whose compiled blocks return their window statistics on the host: folding them in
        and checking them then costs no device call.
        """
        to_host, hx = self._host
        if self.xp is hx:
            return

        def moved(a: Any) -> Any:
            return a if a is None or isinstance(a, (int, float)) else hx.asarray(to_host(a))

        self.top, self.m, self.s, self.centre = moved(self.top), moved(self.m), moved(self.s), moved(self.centre)
        self.xp = hx
        self._dot = lambda a, b: hx.sum(a * b, axis=-1)

    def window(self, k: int, a: int, b: int, stats: tuple, w: int, positions: Array) -> None:
        """Fold in iterations ``a .. b - 1``, window ``w`` of a block from ``k``, from the block's statistics.

        ``stats`` are ``(abs_max, stein)`` per window (windows, chains) as the block computed them with
        :meth:`block_args`, on the host when the watch was given ``host`` (it then moves there);
        ``positions`` (iterations, chains, dim) are the block's, for the centre.
        """
        if self._host is not None:
            self.to_host()
        xp = self.xp
        ab = stats[0][w, ...][:, None]
        self.m = ab if self.m is None else xp.maximum(self.m, ab)
        if not self.stein:
            return
        if a <= self.start < b:
            row = positions[self.start - k, ...]
            self.centre = xp.asarray(self._host[0](row) if self._host is not None else row, copy=True)
        n = b - max(a, self.start + 1)
        if n > 0:
            u = stats[1][w, ...]
            self.s = u if self.n == 0 else self.s + u
            self.n += n

    def plain(self, info: Any) -> Any:
        """``info`` with the zeros of an iteration inside a window."""
        return info._replace(extras={**info.extras, **self._zero} if info.extras else self._zero)

    def peek(self, info: Any) -> Any:
        """``info`` with the window so far, the window left open (a checkpoint or a stop inside it)."""
        xp = self.xp
        extras = dict(info.extras) if info.extras else {}
        extras["abs_max"] = xp.max(self.m, axis=-1) if self.m is not None else 0.0
        if self.stein:
            extras["stein"] = self.s if self.n else 0
            extras["stein_n"] = self.n
        return info._replace(extras=extras)

    def flush(self, info: Any) -> Any:
        """``info`` with the window's ``abs_max`` (and ``stein``, ``stein_n``); the window starts again."""
        out = self.peek(info)
        if self.m is not None:
            self.top = self.xp.maximum(self.top, out.extras["abs_max"])
        self.m, self.s, self.n = None, None, 0
        return out

    def reopen(self, info: Any) -> Any:
        """Continue the window that :meth:`peek` recorded in ``info``; return ``info`` as :meth:`plain`."""
        xp = self.xp
        extras = info.extras or {}
        a = extras.get("abs_max", 0.0)
        if not isinstance(a, (int, float)):
            self.m = xp.asarray(a)[:, None]
        n = int(extras.get("stein_n", 0)) if self.stein else 0
        if n:
            self.s, self.n = xp.asarray(extras["stein"]), n
        rest = {k: v for k, v in extras.items() if k not in self._zero}
        return self.plain(info._replace(extras=rest or None))

    def finite(self) -> Array:
        """A 0-d boolean array: every position folded in so far is finite (NaN propagates through the maxima)."""
        xp = self.xp
        ok = xp.all(xp.isfinite(self.top))
        return ok if self.m is None else ok & xp.all(xp.isfinite(self.m))


def stein_spread(stein: Any, counts: Any, dim: int, blocks: int = BLOCKS) -> list:
    """Per chain ``(T, se, [(first window, T_b), ...])`` of the Stein check, or None (module docstring).

    ``stein`` and ``counts`` are the statistics ``stein`` and ``stein_n`` of a trace (host arrays
    (chains, n_iter): window sums and their iterations at the windows' last iterations, 0 between).
    The windows are grouped in order into at most ``blocks`` batches of about equal iterations, whose
    means give ``T = -mean((theta_k - c) . g_k) / d`` and its standard error. Fewer than 4 windows:
    None.
    """
    out = []
    for srow, nrow in zip(stein, counts):
        wins = [(j, float(s), int(n)) for j, (s, n) in enumerate(zip(srow, nrow)) if n > 0]
        total = sum(w[2] for w in wins)
        if len(wins) < 4 or total == 0:
            out.append(None)
            continue
        nb = min(blocks, len(wins))
        batches, cur, acc = [], [], 0
        for w in wins:
            cur.append(w)
            acc += w[2]
            if acc >= total * (len(batches) + 1) / nb and len(batches) < nb - 1:
                batches.append(cur)
                cur = []
        if cur:
            batches.append(cur)
        ts = [(b[0][0], -math.fsum(w[1] for w in b) / (sum(w[2] for w in b) * dim)) for b in batches]
        t = -math.fsum(w[1] for w in wins) / (total * dim)
        weights = [sum(w[2] for w in b) / total for b in batches]
        var = math.fsum(wt * wt * (tb - t) ** 2 for wt, (_, tb) in zip(weights, ts)) * len(ts) / max(len(ts) - 1, 1)
        out.append((t, math.sqrt(var), ts))
    return out


def find_spread(stein: Any, counts: Any, dim: int, *, scale: float = SCALE) -> list:
    """The chains whose Stein ``T`` exceeds ``scale ** 2`` by three standard errors, as :class:`Runaway` (kind "spread").

    The reported iteration is where the first batch ends from which every later batch's ``T``
    exceeds ``scale ** 2`` (the windows are recorded at their ends); ``factor`` is ``sqrt(T)``, the
    spread in posterior standard deviations.
    """
    out = []
    limit = scale * scale
    for c, res in enumerate(stein_spread(stein, counts, dim)):
        if res is None:
            continue
        t, se, ts = res
        if not (math.isfinite(t) and t - 3.0 * se > limit):
            continue
        b = len(ts) - 1
        while b > 0 and ts[b - 1][1] > limit:
            b -= 1
        out.append(Runaway(c, int(ts[b][0]), "spread", math.sqrt(t)))
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


def warn_if_runaway(trace: Any, sampler: Any, step_sizes: Any, stacklevel: int = 4, backend: Any = None) -> list:
    """Run the growth and Stein checks on a trace of :func:`sgmc.sample`; record and warn about what they find.

    Sets ``trace.info["runaway"]`` (a list of ``{"chain", "iteration", "kind", "factor"}``, at most one
    per chain, the Stein finding first) and ``trace.info["abs_max"]`` (each chain's largest
    ``|theta_i|`` over every iteration, burn-in included), and issues one :class:`RunawayChainWarning`
    naming every chain found. Metropolis-adjusted samplers (MALA) target the posterior exactly, so
    their traces are not checked. ``backend`` is the backend of the draws, when the caller knows it.
    """
    found = []
    stats = trace.stats
    if "abs_max" in stats and stats["abs_max"].shape[1]:
        trace.info["abs_max"] = [float(v) for v in stats["abs_max"].max(axis=1)]
    if not sampler.needs_log_density:
        found = find_runaway(trace.draws, trace.iterations, backend=backend)
        if "stein" in stats and "stein_n" in stats:
            spread = {r.chain: r for r in find_spread(stats["stein"], stats["stein_n"], int(trace.draws.shape[2]))}
            found = sorted({**{r.chain: r for r in found}, **spread}.values(), key=lambda r: r.chain)
    trace.info["runaway"] = [r._asdict() for r in found]
    if found:
        hs = sorted({float(h) for h in step_sizes})
        msg = runaway_message(found, sampler.name, hs[0] if len(hs) == 1 else None)
        warnings.warn(msg, RunawayChainWarning, stacklevel=stacklevel)
    return found
