"""The KSD tables of Aicher (2020, chapter 3): buffered against unbuffered and full-series gradients.

Each table of the thesis is one ``--table``:

``3.2``  ARHMM (K = 2, m = 2, p = 1, the rotations of thesis section 3.5.2), ``T = 10^4`` and ``10^6``:
         SGLD and SGRLD with buffered subsequence gradients (``S = 2``, ``B = 0`` or ``2``) and with the
         full-series gradient (LD, RLD); log10 KSD by variable (``Pi`` through its expanded means,
         ``A``, the precisions' Cholesky factors for ``Sigma``).
``3.3``  LGSSM (n = m = 2, the rotating state of section 3.5.2), same samplers with ``S = 20``,
         ``B = 0`` or ``10``; log10 KSD of ``A``, ``Q`` and ``R`` (through their precision factors).
``3.4``  scalar LGSSM (``A = 0.9, Q = 0.5, R = 1``), ``T = 10^3`` and ``10^6``: SGLD with Full
         (``S = T``), No Buffer (``S = 40, B = 0``) and Buffer (``S = 40, B = 10``) gradients, each
         from the Kalman smoother (``N = inf``) and from the particle buffered estimator (``N``
         particles).
``3.5``  stochastic volatility and GARCH on exchange-rate returns: Full, No Buffer and Buffer particle
         gradients (``S = 40``, ``B = 0`` or ``10``). GARCH runs twice: with the thesis's score (the
         partial derivative that holds ``sigma_{t-1}^2`` fixed, ``score="partial"``, a different target
         from the GARCH posterior) and with the exact score.
``slds`` SLDS (K = 2, n = m = 2, section 3.5.2's parameters), the thesis's Figure 3.15 comparison as a
         table: SGRLD with the ``z``, ``x`` and ``xz`` Monte Carlo gradients (``S = 10``, ``B = 10``);
         the SLDS has no tractable likelihood, so the table reports, as the figure does, the error of
         the posterior means of ``A`` and ``Pi`` against the truth.

Protocol (as the thesis's, at a smaller scale). Every run has the same CPU-time budget (``--budget``
seconds of this process's CPU time, so that runs compare fairly on a shared machine; wall time is
reported beside it): a short pilot after a warm-up call (compilation, caches) sets the number of
iterations. Chains start away from the truth. Each method runs at every step of the thesis's grid
``eps in {1, 0.1, 0.01, 0.001}`` (SGLD ``h = 2 eps / T``; SGRLD ``h = 2 eps`` on its metric, which
carries the factor ``T``) and keeps the step with the smallest KSD; a run that diverges is reported
as such. The KSD (IMQ kernel, :func:`sgmc.diagnostics.ksd`) is computed per chain over the second
half of its draws (thinned draws per chain: ``--keep``, 50, bounded as below) with the scores of the
posterior at those draws: exact gradients (Kalman smoother, forward-backward) where the likelihood is
tractable, a particle smoother over the whole series (``--score-particles``, 1000) otherwise; the table
shows the mean and standard deviation over chains, as the thesis's tables do. The time to score is
bounded: it is ``chains x keep`` full-series gradients, run through the compiled exact recursions where
they exist, and is reported. :func:`scored_per_chain` sets ``keep``: ``--keep``, at most
``max(10, 1e7 / T)`` for exact scores and ``max(10, 1e8 / (T x particles x chains))`` otherwise (the
SLDS, which is not scored, averages that many draws for its posterior means), and at most half the
iterations: 10 at ``T = 10^6`` and on the exchange-rate series, 2 for a run of 4 iterations. Every
table has the column ``scored draws per chain`` with each row's number, and its note
(:func:`table_notes`) is generated from those rows, naming the rows whose runs made under 100
iterations in the budget (budget-bound). ``docs/ssm_ksd_control.py`` reruns a table at longer budgets
(the budget control).

Run ``python docs/ssm_ksd_table.py --table 3.3`` (``--T 10000 1000000`` sets the series lengths;
``--quick`` for a smoke run). Each table writes ``docs/results/ssm_ksd_<table>.json``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from typing import Any, NamedTuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from docs._results import write_results  # noqa: E402  (imported first: it records the load at start)

import numpy as np  # noqa: E402

import sgmc  # noqa: E402
from sgmc import backends  # noqa: E402
from sgmc.diagnostics import ksd  # noqa: E402
from sgmc.ssm import ARHMM, GARCH, LGSSM, SLDS, Buffered, StochasticVolatility  # noqa: E402
from sgmc.ssm.arhmm import ARHMMParams  # noqa: E402
from sgmc.ssm.lgssm import LGSSMParams  # noqa: E402
from sgmc.ssm.slds import SLDSParams  # noqa: E402

THESIS_EPS = (1.0, 0.1, 0.01, 0.001)


class Problem(NamedTuple):
    model: Any
    init: np.ndarray
    blocks: dict          # variable name -> slice of theta
    score: str            # "exact" or "particle"
    truth: Any = None


def rotation(angle):
    return np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])


def arhmm_problem(T, seed):
    """Thesis section 3.5.2: two alternating rotations, Pr(z_t != z_{t-1}) = 0.9."""
    truth = ARHMMParams(np.array([[0.1, 0.9], [0.9, 0.1]]),
                        np.stack([0.9 * rotation(-math.pi / 4), 0.9 * rotation(math.pi / 4)]),
                        np.stack([0.1 * np.eye(2)] * 2))
    proto = ARHMM(np.zeros((8, 2)), 2)
    _, y = proto.simulate(backends.default_rng(seed), T, proto.unconstrain(truth))
    model = ARHMM(np.asarray(y), 2)
    start = ARHMMParams(np.full((2, 2), 0.5), np.stack([0.5 * np.eye(2), -0.5 * np.eye(2)]), np.stack([np.eye(2)] * 2))
    blocks = {"pi": slice(0, 4), "A": slice(4, 12), "Sigma": slice(12, 18)}
    return Problem(model, np.asarray(model.unconstrain(start)), blocks, "exact", truth)


def lgssm2_problem(T, seed):
    """Thesis section 3.5.2: a rotating 2-d state (A = 0.7 R(pi/4), Q = 0.1 I) seen with noise R = I."""
    truth = LGSSMParams(0.7 * rotation(math.pi / 4), 0.1 * np.eye(2), np.eye(2), np.eye(2))
    proto = LGSSM(np.zeros((8, 2)))
    _, y = proto.simulate(backends.default_rng(seed), T, proto.unconstrain(truth))
    model = LGSSM(np.asarray(y))
    start = LGSSMParams(0.3 * np.eye(2), 0.5 * np.eye(2), np.eye(2), 2.0 * np.eye(2))
    blocks = {"A": slice(0, 4), "Q": slice(4, 7), "R": slice(7, 10)}
    return Problem(model, np.asarray(model.unconstrain(start)), blocks, "exact", truth)


def lgssm1_problem(T, seed):
    """The scalar LGSSM of Table 3.4 (A = 0.9, Q = 0.5, R = 1); theta = (A, 1/sqrt Q, 1/sqrt R)."""
    theta = np.array([0.9, 1 / math.sqrt(0.5), 1.0])
    _, y = LGSSM.simulate_scalar(backends.default_rng(seed), T, theta)
    blocks = {"A": slice(0, 1), "Q": slice(1, 2), "R": slice(2, 3)}
    return Problem(LGSSM(np.asarray(y)), np.array([0.5, 1.0, 1.0]), blocks, "exact", theta)


def fx_returns():
    from sgmc.datasets import exchange_rates

    return np.asarray(exchange_rates("dm").returns)[:, 0]


def sv_problem(T, seed):
    """Stochastic volatility on the DM/USD daily returns; theta = (atanh phi, 1/sigma, 1/tau)."""
    init = np.array([math.atanh(0.9), 2.0, 2.0])
    blocks = {"phi": slice(0, 1), "sigma": slice(1, 2), "tau": slice(2, 3)}
    return Problem(StochasticVolatility(fx_returns()), init, blocks, "particle")


def garch_problem(score):
    def make(T, seed):
        # alpha = 0.1, beta = 0.8, gamma = 0.05, tau = 0.3 in theta = (log mu, logit phi, logit lambda, tau)
        phi, lam = 0.85, 0.8 / 0.85
        init = np.array([math.log(0.1 / 0.15), math.log(phi / (1 - phi)), math.log(lam / (1 - lam)), 0.3])
        blocks = {"mu": slice(0, 1), "phi": slice(1, 2), "lambda": slice(2, 3), "tau": slice(3, 4)}
        return Problem(GARCH(fx_returns(), score=score), init, blocks, "particle")
    return make


def slds_problem(gradient):
    def make(T, seed):
        truth = SLDSParams(np.array([[0.9, 0.1], [0.1, 0.9]]),
                           np.stack([0.9 * rotation(-math.pi / 4), 0.9 * rotation(math.pi / 4)]),
                           np.stack([0.1 * np.eye(2)] * 2), np.eye(2), 0.1 * np.eye(2))
        proto = SLDS(np.zeros((8, 2)), 2)
        _, _, y = proto.simulate(backends.default_rng(seed), T, proto.unconstrain(truth))
        model = SLDS(np.asarray(y), 2, gradient=gradient)
        start = SLDSParams(np.full((2, 2), 0.5), np.stack([0.5 * np.eye(2), -0.5 * np.eye(2)]),
                           np.stack([0.3 * np.eye(2)] * 2), np.eye(2), 0.3 * np.eye(2))
        return Problem(model, np.asarray(model.unconstrain(start)), {}, "none", truth)
    return make


def buffered(S, B, **kw):
    return ("buffered", dict(subsequence_length=S, buffer=B, **kw))


def table_spec(table, args):
    """(problems, methods): problems name -> maker; methods label -> (sampler, estimator, options)."""
    N = args.particles
    if table == "3.2":
        return {"ARHMM": arhmm_problem}, {
            "SGLD (No Buffer)": ("sgld",) + buffered(2, 0), "SGLD (Buffer)": ("sgld",) + buffered(2, 2),
            "LD": ("sgld", "full", {}),
            "SGRLD (No Buffer)": ("sgrld",) + buffered(2, 0), "SGRLD (Buffer)": ("sgrld",) + buffered(2, 2),
            "RLD": ("sgrld", "full", {})}
    if table == "3.3":
        return {"LGSSM 2-d": lgssm2_problem}, {
            "SGLD (No Buffer)": ("sgld",) + buffered(20, 0), "SGLD (Buffer)": ("sgld",) + buffered(20, 10),
            "LD": ("sgld", "full", {}),
            "SGRLD (No Buffer)": ("sgrld",) + buffered(20, 0), "SGRLD (Buffer)": ("sgrld",) + buffered(20, 10),
            "RLD": ("sgrld", "full", {})}
    if table == "3.4":
        part = dict(method="particle", n_particles=N)
        return {"LGSSM 1-d": lgssm1_problem}, {
            "Full, N = inf": ("sgld", "full", {}), "Full, N particles": ("sgld", "full-particle", part),
            "No Buffer, N = inf": ("sgld",) + buffered(40, 0), "No Buffer, N particles": ("sgld",) + buffered(40, 0, **part),
            "Buffer, N = inf": ("sgld",) + buffered(40, 10), "Buffer, N particles": ("sgld",) + buffered(40, 10, **part)}
    if table == "3.5":
        part = dict(method="particle", n_particles=N)
        return {"SV": sv_problem, "GARCH (thesis score)": garch_problem("partial"),
                "GARCH (exact score)": garch_problem("exact")}, {
            "Full": ("sgld", "full-particle", part), "No Buffer": ("sgld",) + buffered(40, 0, **part),
            "Buffer": ("sgld",) + buffered(40, 10, **part)}
    if table == "slds":
        return {f"SLDS, {g} gradient": slds_problem(g) for g in ("z", "x", "xz")}, {
            "SGRLD (Buffer)": ("sgrld",) + buffered(10, 10)}
    raise ValueError(f"unknown table {table!r}")


def scores_at(prob, draws, n_particles, seed):
    """Scores of the posterior at the draws, in chunks of about 2e7 series points."""
    model = prob.model
    chunk = max(1, int(2e7 // model.T))
    out = []
    for i in range(0, draws.shape[0], chunk):
        d = np.ascontiguousarray(draws[i : i + chunk])
        if prob.score == "exact":
            out.append(np.asarray(model.grad_log_posterior(d)))
        else:
            est = Buffered(model, subsequence_length=model.T, buffer=0, method="particle", n_particles=n_particles)
            out.append(np.asarray(est.estimate(backends.default_rng(seed + i), None, d)[0]))
    return np.concatenate(out)


def score_cap(T, score, settings):
    """The most thinned draws per chain scored (or, without a score, averaged): the scoring time is
    bounded at about 1e7 series points per chain for exact scores, ``1e8 / (T x particles x chains)``
    draws otherwise (also where nothing is scored), and never below 10."""
    if score == "exact":
        cap = 1e7 / T
    else:
        cap = 1e8 / (T * settings["score_particles"] * settings["chains"])
    return max(10, int(cap))


def scored_per_chain(n_iter, T, score, settings):
    """Draws per chain a run of ``n_iter`` iterations keeps: ``--keep``, at most :func:`score_cap`, at
    most half the iterations (the second half is kept), at least 1. ``settings`` holds the script's
    options (``keep``, ``chains``, ``score_particles``), as ``vars(args)`` or a results file's."""
    return max(1, min(int(settings["keep"]), score_cap(T, score, settings), n_iter // 2))


def run_once(prob, method, eps, args, seed):
    """One run at one step: iterations from a CPU-time pilot, then the KSD per chain over the kept half."""
    sampler, estimator, opts = method
    model = prob.model
    T = model.T
    if estimator == "full-particle":
        estimator, opts = "buffered", dict(subsequence_length=T, buffer=0, **opts)
    h = 2 * eps / T if sampler == "sgld" else 2 * eps
    if estimator == "buffered" and opts.get("method") == "particle" and opts["subsequence_length"] == T:
        held = T * opts["n_particles"] * args.chains
        if held > args.max_particle_states:
            return {"skipped": f"not run: a full-series particle pass holds T x N x chains = {held:.1e} states "
                               f"(over --max-particle-states {args.max_particle_states:.0e})"}
    common = dict(chains=args.chains, init=prob.init, rng=seed, progress=False, estimator_options=opts)
    try:
        sgmc.sample(model, sampler, estimator, step_size=h, n_iter=1, **common)  # warm-up: compilation, caches
        pilot = 2
        c0 = time.process_time()
        sgmc.sample(model, sampler, estimator, step_size=h, n_iter=pilot, **common)
        per_iter = max((time.process_time() - c0) / pilot, 1e-6)
        if per_iter > 2 * args.budget:
            return {"skipped": f"not run: one iteration takes {per_iter:.0f} s of CPU, over twice the budget of {args.budget:g} s"}
        if per_iter * args.pilot < 0.2 * args.budget:       # cheap iterations: a longer pilot times them better
            pilot = args.pilot
            c0 = time.process_time()
            sgmc.sample(model, sampler, estimator, step_size=h, n_iter=pilot, **common)
            per_iter = max((time.process_time() - c0) / pilot, 1e-6)
        n_iter = int(min(args.max_iter, max(args.min_iter, args.budget / per_iter)))
        keep = scored_per_chain(n_iter, T, prob.score, vars(args))
        thin = max(1, (n_iter - n_iter // 2) // keep)
        c0, w0 = time.process_time(), time.perf_counter()
        tr = sgmc.sample(model, sampler, estimator, step_size=h, n_iter=n_iter, burn_in=n_iter - keep * thin,
                         thin=thin, **common)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    except (sgmc.DivergenceError, np.linalg.LinAlgError, FloatingPointError) as err:
        return {"diverged": type(err).__name__}
    draws = np.asarray(tr.draws)                       # (chains, keep, dim)
    if not np.all(np.isfinite(draws)):
        return {"diverged": "non-finite draws"}
    row = {"n_iter": n_iter, "cpu": cpu, "wall": wall, "mean": draws.reshape(-1, model.dim).mean(axis=0),
           "scored": int(draws.shape[1])}
    if prob.score == "none":
        return row
    c0 = time.process_time()
    try:
        sc = scores_at(prob, draws.reshape(-1, model.dim), args.score_particles, seed + 1).reshape(draws.shape)
    except sgmc.DivergenceError:            # the draws are finite, but the posterior's score there is not
        return {"diverged": "non-finite scores at the draws"}
    row["score_cpu"] = time.process_time() - c0
    if not np.all(np.isfinite(sc)):
        return {"diverged": "non-finite scores"}
    per_chain = {name: [math.log10(float(ksd(draws[c][:, b], sc[c][:, b]))) for c in range(draws.shape[0])]
                 for name, b in (("total", slice(None)),) + tuple(prob.blocks.items())}
    row["log10_ksd"] = {k: (float(np.mean(v)), float(np.std(v, ddof=1)) if len(v) > 1 else float("nan"))
                        for k, v in per_chain.items()}
    return row


def slds_error(prob, mean):
    """Squared errors of the posterior means of A and Pi against the truth (Figure 3.15's metrics)."""
    est = prob.model.constrain(mean)
    return (float(np.mean((np.asarray(est.A) - prob.truth.A) ** 2)),
            float(np.mean((np.asarray(est.Pi) - prob.truth.Pi) ** 2)))


def fmt(mean_sd):
    m, s = mean_sd
    return f"{m:.2f} ({s:.2f})"


#: The column that says how many draws of each chain were scored (or averaged, for the SLDS).
SCORED = "scored draws per chain"
#: Fewer iterations than this in a run make its row budget-bound: the chains have barely left the start.
FEW_ITERATIONS = 100


def score_kind(table):
    """How a table's draws are scored: exact scores, particle scores, or not at all (the SLDS)."""
    return {"3.5": "particle", "slds": "none"}.get(table, "exact")


def _cap_text(score, T, cap, settings):
    if score == "exact":
        return f"max(10, 1e7 / T) = {cap:g} at T = {T:g}"
    return (f"max(10, 1e8 / (T x {settings['score_particles']} particles x {settings['chains']} chains)) = "
            f"{cap:g}")


def table_notes(table, columns, rows, settings):
    """The note under a table, from what its rows record: the draws scored per chain (the column
    :data:`SCORED`), the rows whose iterations make them budget-bound, and the protocol's settings."""
    at = {c: i for i, c in enumerate(columns)}
    ran = [r for r in rows if r[at["iterations"]] is not None]
    score = score_kind(table)
    verb = "averaged for the posterior means" if score == "none" else "scored"
    parts = [f"{settings['chains']} chains from a common start away from the truth; {settings['budget']:g} s of "
             f"CPU time per run (set by a pilot after a warm-up); the step of the grid {list(settings['eps'])} with "
             "the smallest " + ("summed error" if table == "slds" else "total KSD (mean over chains)") + " is kept"]
    if ran:
        counts = sorted({int(r[at[SCORED]]) for r in ran})
        keep = int(settings["keep"])
        cap_by_T = {int(r[at["T"]]): score_cap(int(r[at["T"]]), score, settings) for r in ran}
        limits = [f"--keep {keep}"] + [f"at most {_cap_text(score, T_, c, settings)}"
                                       for T_, c in sorted(cap_by_T.items()) if c < keep]
        if any(int(r[at[SCORED]]) < min(keep, cap_by_T[int(r[at["T"]])]) for r in ran):
            limits.append("at most half the iterations")
        which = (f"{counts[0]} in every row" if len(counts) == 1
                 else f"{counts[0]} to {counts[-1]} by row (column '{SCORED}')")
        parts.append(f"thinned draws per chain from the second half {verb}: {which} ({'; '.join(limits)})")
        few = [f"{r[at['method']]} ({r[at['problem']]}): {r[at['iterations']]} iterations, {r[at[SCORED]]} draws"
               for r in ran if int(r[at["iterations"]]) < FEW_ITERATIONS]
        if few:
            parts.append(f"budget-bound rows (under {FEW_ITERATIONS} iterations in the budget: their KSD is where so few "
                         "iterations reach, not the sampler's accuracy at a longer run): " + "; ".join(few))
    if table != "slds":
        parts.append("log10 KSD mean (SD) over chains")
    if table == "3.4":
        parts.append(f"particle gradients N = {settings['particles']}; exact scores")
    elif table == "3.5":
        parts.append(f"particle gradients N = {settings['particles']}; scores by a full-series particle smoother "
                     f"with {settings['score_particles']} particles")
    return "; ".join(parts)


def run_table(table, args):
    """Every problem x method x step of one table; the best step per method; tables by series length."""
    problems, methods = table_spec(table, args)
    if args.methods:
        unknown = sorted(set(args.methods) - set(methods))
        if unknown:
            raise SystemExit(f"--methods: {unknown} not among {sorted(methods)}")
        methods = {k: v for k, v in methods.items() if k in args.methods}
    lengths = [None] if table == "3.5" else args.T
    tables = {}
    for T in lengths:
        rows, var_cols = [], None
        for pname, make in problems.items():
            prob = make(T, args.seed)
            names = list(prob.blocks)
            var_cols = names if var_cols in (None, names) else "mixed"
            for label, method in methods.items():
                tried, best, results = [], None, {}
                queue = sorted(args.eps, reverse=True)
                while queue:
                    eps = queue.pop(0)
                    t0 = time.perf_counter()
                    r = run_once(prob, method, eps, args, args.seed + 1)
                    if "skipped" in r:
                        tried.append(r["skipped"])
                        print(f"[{table}] {pname} T={prob.model.T} {label}: {r['skipped']}", flush=True)
                        break                      # the cost does not depend on the step
                    if "diverged" in r:
                        tried.append(f"{eps:g}: diverged")
                    elif prob.score == "none":
                        r["key"] = sum(slds_error(prob, r["mean"]))
                        tried.append(f"{eps:g}: {r['key']:.3g}")
                    else:
                        r["key"] = r["log10_ksd"]["total"][0]
                        tried.append(f"{eps:g}: {r['key']:.2f}")
                    results[eps] = r
                    print(f"[{table}] {pname} T={prob.model.T} {label} eps={eps:g}: {tried[-1]} "
                          f"({time.perf_counter() - t0:.0f} s wall)", flush=True)
                    if "diverged" not in r and (best is None or r["key"] < best[1]["key"]):
                        best = (eps, r)
                    # a best step on an edge of the grid extends the grid past that edge (two steps at most)
                    if not queue and best is not None and len(results) < len(args.eps) + 2:
                        if best[0] == max(results):
                            queue.append(best[0] * 10)
                        elif best[0] == min(results):
                            queue.append(best[0] / 10)
                rows.append((pname, int(prob.model.T), label, names, best, "; ".join(tried), prob))
        cols = ["problem", "T", "method", "eps", "iterations", SCORED, "CPU s", "wall s"]
        if table == "slds":
            cols += ["MSE of A (posterior mean)", "MSE of Pi (posterior mean)"]
        elif var_cols == "mixed":
            cols += ["log10 KSD", "log10 KSD by variable"]
        else:
            cols += ["log10 KSD"] + [f"log10 KSD {v}" for v in var_cols]
        cols += ["scoring CPU s", "grid (eps: log10 KSD, or error)"]
        body = []
        for pname, T_, label, names, best, tried, prob in rows:
            head = [pname, T_, label]
            width = len(cols) - len(head) - 1
            if best is None:
                body.append(head + [None] * width + [tried])
                continue
            eps, r = best
            cells = [eps, r["n_iter"], r["scored"], round(r["cpu"], 1), round(r["wall"], 1)]
            if table == "slds":
                cells += [f"{e:.2e}" for e in slds_error(prob, r["mean"])] + [None]
            else:
                ks = r["log10_ksd"]
                if var_cols == "mixed":
                    cells += [fmt(ks["total"]), ", ".join(f"{v} {fmt(ks[v])}" for v in names)]
                else:
                    cells += [fmt(ks["total"])] + [fmt(ks[v]) for v in names]
                cells += [round(r["score_cpu"], 1)]
            body.append(head + cells + [tried])
        notes = table_notes(table, cols, body, vars(args))
        tables["data" if T is None else f"T{T}"] = {"columns": cols, "rows": body, "notes": notes}
    return tables


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", required=True, choices=["3.2", "3.3", "3.4", "3.5", "slds"])
    ap.add_argument("--T", type=int, nargs="+", default=None, help="series lengths (default: the thesis's)")
    ap.add_argument("--methods", nargs="+", default=None, help="run only these methods (labels as in the table)")
    ap.add_argument("--eps", type=float, nargs="+", default=list(THESIS_EPS))
    ap.add_argument("--chains", type=int, default=5)
    ap.add_argument("--budget", type=float, default=10.0, help="CPU seconds per run")
    ap.add_argument("--pilot", type=int, default=20)
    ap.add_argument("--min-iter", type=int, default=4)
    ap.add_argument("--max-iter", type=int, default=50000)
    ap.add_argument("--keep", type=int, default=50,
                    help="thinned draws per chain scored for the KSD (see scored_per_chain for the bounds)")
    ap.add_argument("--particles", type=int, default=1000)
    ap.add_argument("--score-particles", type=int, default=1000,
                    help="particles of the full-series smoother that scores the draws of the particle problems")
    ap.add_argument("--max-particle-states", type=float, default=5e7,
                    help="skip full-series particle gradients that would hold more particle states than this")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="tiny settings, no results file")
    ap.add_argument("--results", default=None, help="results name (default ssm_ksd_<table>; 'none' writes nothing)")
    args = ap.parse_args(argv)
    if args.T is None:
        args.T = {"3.2": [10**4, 10**6], "3.3": [10**4, 10**6], "3.4": [10**3, 10**6], "slds": [10**4]}.get(args.table, [0])
    if args.quick:
        args.T = sorted({min(t, 500) for t in args.T})
        args.eps, args.chains, args.budget, args.pilot, args.keep, args.particles = [0.1], 2, 0.5, 3, 10, 50
        args.min_iter = 10
        args.results = args.results or "none"
    name = args.results or f"ssm_ksd_{args.table.replace('.', '')}"
    tables = run_table(args.table, args)
    for tid, t in tables.items():
        print(f"\n{tid}: " + " | ".join(t["columns"]))
        for r in t["rows"]:
            print("  " + " | ".join(str(x) for x in r))
    if name != "none":
        print("wrote", write_results(name, tables, extra={"settings": vars(args)}))
    return tables


if __name__ == "__main__":
    main()
