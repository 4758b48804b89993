"""Have the chains mixed? One rule for :func:`sgmc.sample` (a :class:`MixingWarning`) and ``sgmc run`` (a marked row).

A trace whose chains have not explored the posterior gives means and standard deviations that look
like results and are not: a sampler whose step is far too small for the posterior's scale leaves
each chain near its start, so the reported standard deviations are a small fraction of the
posterior's. :func:`check_mixing` returns a structured verdict (:class:`Mixing`) from four checks,
each with its numbers and its fix:

* **R-hat**: the rank-normalised R-hat (Vehtari et al. 2021, their eq. 4 and section 4.2, as
  :func:`sgmc.diagnostics.rhat` computes it, which matches ArviZ) above :data:`RHAT_MAX` (1.05) in
  any coordinate; with one chain, the split R-hat of its two halves.
* **ESS**: the bulk effective sample size (:func:`sgmc.diagnostics.ess`) below :data:`ESS_MIN`
  (100) in any coordinate, across chains.
* **Stuck**: a chain whose draws are constant in a coordinate, or (two or more chains) chains whose
  spread is a small fraction (:data:`STUCK_RATIO`, a tenth) of the spread between their means in
  some coordinate: each chain sits where it started.
* **Spread against the posterior's** (the samplers whose state carries the gradient, see
  :mod:`sgmc.diagnostics.runaway`): the Stein ratio ``T``, the chains' variance over the
  posterior's by the identity ``E[(theta - c) . grad log pi] = -d``, below :data:`SPREAD_MIN`
  (0.01: a tenth of the posterior's standard deviation) by three standard errors. It catches chains
  that all start at the mode (the control-variate estimators start there) and barely move, where
  R-hat compares chains that agree.

The checks apply to a trace with at least :data:`MIN_DRAWS` (1,000) kept draws in all, chains
together: short runs are how tests, examples and step-size trials try things out, and warning on
each of them would teach users to ignore the warning. The verdict of a shorter trace says it was
not checked (``mixed`` is None); :func:`check_mixing` with ``min_draws=`` applies the rule to any
trace of at least 4 draws per chain. A long or wide trace is checked on at most :data:`MAX_DRAWS`
draws per chain (evenly thinned) and :data:`MAX_COORDS` coordinates (evenly spaced), so that the
check costs little beside the run.

False alarms on well-tuned runs: with ``n_e`` effective draws per split half-chain and ``M``
chains, ``R-hat^2 - 1`` is about ``F / n_e`` with ``F`` a chi-square with ``2M - 1`` degrees of
freedom over its degrees of freedom (the spread of the half-chains' means over its expectation), so
R-hat exceeds 1.05 when ``F > 0.1025 n_e``: for four chains and a bulk ESS of 400 (``n_e = 50``),
``P(chi2_7 / 7 > 5.1) < 1e-5`` per coordinate (the folded draws' R-hat likewise). The ESS rule
fires on a well-tuned run only when the estimate falls to a quarter of its expectation;
tests/test_mixing_flags.py counts the alarms over fixed seeds (none in 30 well-tuned runs).
"""

from __future__ import annotations

import math
import warnings
from typing import Any, NamedTuple

from .. import backends
from .._array_api import Array, device_of
from .ess import ess_of, rhat_of
from .runaway import STEIN_SAMPLERS, draws_backend, stein_spread

#: The host backend, where the verdict is computed; fixed, so looked up once.
_HOST = backends.get_backend("numpy")

__all__ = ["MixingWarning", "Mixing", "check_mixing", "mixing_message", "warn_if_unmixed", "RHAT_MAX", "ESS_MIN",
           "STUCK_RATIO", "SPREAD_MIN", "MIN_DRAWS", "MAX_COORDS", "MAX_DRAWS"]

#: Rank-normalised R-hat above which the chains have not mixed.
RHAT_MAX = 1.05
#: Bulk ESS (over all chains) below which the draws are too few to report.
ESS_MIN = 100.0
#: Within-chain sd over the sd of the chain means below which the chains are stuck where they started.
STUCK_RATIO = 0.1
#: Stein ratio (chains' variance over the posterior's) below which the chains did not move on its scale.
SPREAD_MIN = 0.01
#: Fewest kept draws (chains x draws) for which the checks apply.
MIN_DRAWS = 1000
#: Most coordinates checked (evenly spaced) in a high-dimensional trace, to keep the check's cost small.
MAX_COORDS = 256
#: Most draws per chain checked (evenly thinned): thinning by less than the autocorrelation time keeps
#: the ESS, and by more leaves nearly independent draws, far above ESS_MIN either way.
MAX_DRAWS = 2000


class MixingWarning(UserWarning):
    """The chains of a run have not mixed: R-hat, ESS or their spread says the draws are not yet results."""


class Mixing(NamedTuple):
    """The verdict of :func:`check_mixing`.

    Attributes
    ----------
    mixed : bool or None
        False when a check failed, True when all passed, None when the trace is too short to check.
    reasons : list of dict
        One per failed check: ``{"check": "rhat" | "ess" | "stuck" | "spread", "text": ..., "fix": ...}``
        with the check's numbers (``value``, ``limit``, ``coordinate`` or ``chain``).
    rhat : float or None
        The largest R-hat over the coordinates checked (split R-hat for one chain); None where not
        computed (a short trace, a constant chain).
    ess_bulk : float or None
        The smallest bulk ESS over the coordinates checked (None likewise).
    spread : float or None
        The Stein ratio T averaged over the chains, where the sampler allows it.
    n_chains, n_draws : int
        The trace's shape.
    """

    mixed: bool | None
    reasons: list
    rhat: float | None
    ess_bulk: float | None
    spread: float | None
    n_chains: int
    n_draws: int

    def as_dict(self) -> dict:
        """Plain values, for ``trace.info["mixing"]`` and files."""
        return {k: (list(v) if isinstance(v, list) else v) for k, v in self._asdict().items()}


_FIX_MORE = "run more iterations (or more chains), or use a larger step size (step_size='auto' chooses one)"
_FIX_STUCK = ("the step size is far too small for the posterior's scale (or the chains start where the gradient "
              "vanishes): use a larger step size or step_size='auto', and more iterations")


def _coords(dim: int) -> list | None:
    if dim <= MAX_COORDS:
        return None
    return sorted({int(i * (dim - 1) / (MAX_COORDS - 1)) for i in range(MAX_COORDS)})


# Its draws and backend parameters are documented again in find_runaway: each function's help stands alone.
def check_mixing(draws: Array, *, stein: Any = None, stein_n: Any = None, rhat_max: float = RHAT_MAX,
                 ess_min: float = ESS_MIN, min_draws: int = MIN_DRAWS, backend: Any = None) -> Mixing:
    """The mixing verdict of ``draws`` (chains, n, dim) by the rule of the module docstring.

    Parameters
    ----------
    draws : array (chains, n, dim)
        Kept draws (finite).
    stein, stein_n : host arrays (chains, n_iter), optional
        The run's Stein sums and their iterations per window (``trace.stats["stein"]`` and
        ``["stein_n"]``, :class:`sgmc.diagnostics.runaway.Watch`). Without them the spread check does
        not run.
    rhat_max, ess_min, min_draws : float
        The thresholds (module docstring).
    backend : Backend, optional
        The backend of ``draws`` when the caller knows it (a run's plan): its namespace and its copies
        to the host. Found from ``draws`` otherwise.

    Returns
    -------
    Mixing

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.diagnostics.mixing import check_mixing
    >>> rng = np.random.default_rng(0)
    >>> check_mixing(rng.normal(size=(4, 500, 2))).mixed
    True
    >>> stuck = rng.normal(size=(4, 1, 2)) + 0.001 * rng.normal(size=(4, 500, 2))
    >>> v = check_mixing(stuck)
    >>> v.mixed, sorted({r["check"] for r in v.reasons})
    (False, ['rhat', 'stuck'])
    """
    xp, to_host = draws_backend(draws, backend)
    chains, n, dim = (int(v) for v in draws.shape)
    if chains * n < min_draws or n < 4:
        return Mixing(None, [], None, None, None, chains, n)
    pick = _coords(dim)
    x = draws if pick is None else xp.take(draws, xp.asarray(pick, device=device_of(draws)), axis=2)
    if n > MAX_DRAWS:
        rows = [int(i * n / MAX_DRAWS) for i in range(MAX_DRAWS)]
        x = xp.take(x, xp.asarray(rows, device=device_of(draws)), axis=1)
    names = pick if pick is not None else list(range(dim))
    hx = _HOST.xp
    xh = hx.asarray(to_host(x), dtype=hx.float64)
    reasons = []
    sd = hx.std(xh, axis=1)                                             # (chains, dims)
    still = hx.argwhere(~(sd > 0))                                    # (pairs, 2): chain, coordinate
    const = [(int(c), names[int(i)]) for c, i in still[:1]] if still.shape[0] else []
    if const:
        c, i = const[0]
        reasons.append({"check": "stuck", "chain": c, "coordinate": i, "value": 0.0, "limit": STUCK_RATIO,
                        "text": f"chain {c} did not move: its draws are constant in {int(still.shape[0])} chain-coordinate "
                                f"pair(s) (first: coordinate {i})", "fix": _FIX_STUCK})
    elif chains > 1:
        within = hx.sqrt(hx.mean(sd * sd, axis=0))
        between = hx.std(hx.mean(xh, axis=1), axis=0, correction=1)
        ratio = hx.where(between > 0, within / hx.where(between > 0, between, 1.0), hx.inf)
        j = int(hx.argmin(ratio))
        if ratio[j] < STUCK_RATIO:
            reasons.append({"check": "stuck", "coordinate": names[j], "value": float(ratio[j]), "limit": STUCK_RATIO,
                            "text": f"the chains did not move relative to how far apart they are: in coordinate "
                                    f"{names[j]} their spread is {float(ratio[j]):.3g} of the spread of their means",
                            "fix": _FIX_STUCK})
    r_max = e_min = None
    if not const:
        r = rhat_of(hx, xh, "rank" if chains > 1 else "split")   # the host copy: no namespace to look up
        e = ess_of(hx, xh, "bulk")
        r_max, e_min = float(hx.max(r)), float(hx.min(e))
        if r_max > rhat_max:
            j = int(hx.argmax(r))
            kind = "rank-normalised R-hat" if chains > 1 else "split R-hat (one chain)"
            reasons.append({"check": "rhat", "coordinate": names[j], "value": r_max, "limit": rhat_max,
                            "text": f"{kind} {r_max:.3g} > {rhat_max:g} (coordinate {names[j]})", "fix": _FIX_MORE})
        if e_min < ess_min:
            j = int(hx.argmin(e))
            reasons.append({"check": "ess", "coordinate": names[j], "value": e_min, "limit": ess_min,
                            "text": f"bulk ESS {e_min:.3g} < {ess_min:g} across {chains} chain(s) of {n} draws "
                                    f"(coordinate {names[j]})", "fix": _FIX_MORE})
    spread = None
    if stein is not None and stein_n is not None and len(stein):
        res = [v for v in stein_spread(stein, stein_n, dim) if v is not None]
        if res:
            t = math.fsum(v[0] for v in res) / len(res)
            se = math.sqrt(math.fsum(v[1] ** 2 for v in res)) / len(res)
            spread = t
            if math.isfinite(t) and t + 3.0 * se < SPREAD_MIN:
                what = (f"the chains' spread is about {math.sqrt(t):.2g} of the posterior's standard deviation"
                        if t > 0 else "the chains still drift along the gradient, toward the posterior's bulk")
                reasons.append({"check": "spread", "value": t, "limit": SPREAD_MIN,
                                "text": f"{what} (Stein ratio {t:.3g} +- {se:.2g}; 1 for posterior draws)",
                                "fix": _FIX_STUCK})
    return Mixing(not reasons, reasons, r_max, e_min, spread, chains, n)


def mixing_message(verdict: Mixing, sampler: str, step_size: float | None = None) -> str:
    """The reasons, their numbers and their fixes, in one message (for :class:`MixingWarning`)."""
    h = f" at step_size={step_size:g}" if step_size is not None else ""
    fixes = []
    for r in verdict.reasons:
        if r["fix"] not in fixes:
            fixes.append(r["fix"])
    return (f"{sampler}{h}: the chains have not mixed ({verdict.n_chains} chain(s) x {verdict.n_draws} kept "
            f"draws): " + "; ".join(r["text"] for r in verdict.reasons) + ". Fix: " + "; or ".join(fixes)
            + ". Do not use these draws as results.")


def warn_if_unmixed(trace: Any, sampler: Any, step_sizes: Any, warn: bool = True, stacklevel: int = 4,
                    backend: Any = None) -> Mixing:
    """Check a trace of :func:`sgmc.sample`: set ``trace.info["mixing"]`` and warn when it has not mixed.

    ``warn=False`` records the verdict only (a run already flagged as running away or interrupted);
    ``backend`` is the backend of the draws, when the caller knows it.
    """
    stats = trace.stats if getattr(sampler, "name", None) in STEIN_SAMPLERS else {}
    verdict = check_mixing(trace.draws, stein=stats.get("stein"), stein_n=stats.get("stein_n"), backend=backend)
    trace.info["mixing"] = verdict.as_dict()
    if warn and verdict.mixed is False:
        hs = sorted({float(h) for h in step_sizes})
        warnings.warn(mixing_message(verdict, sampler.name, hs[0] if len(hs) == 1 else None), MixingWarning,
                      stacklevel=stacklevel)
    return verdict
