"""SGRLD with the complete-data Fisher metric against SGLD at the same time budget (Aicher 2020, 3.5).

Both samplers use the same buffered gradient estimator (subsequences of length ``S`` with ``B``
buffer times on each side) on a scalar LGSSM (phi = 0.9, Q = 0.5, R = 1) and a 2-state Gaussian HMM
(Pi = [[0.95, 0.05], [0.1, 0.9]], mu = (-1, 1), sigma^2 = (0.5, 0.8)), each simulated with ``T``
observations, and start away from the truth. SGRLD uses the model's
:meth:`fisher_metric` (:mod:`sgmc.ssm.fisher`). Every sampler runs for the same wall-clock budget at each
step size of its grid (SGLD: ``h = 2 eps / T`` for eps in ``--eps``, the thesis's convention; SGRLD:
``h`` in ``--h``, on the metric's scale, where steps of order one are natural) and keeps the step with
the smallest kernel Stein discrepancy over the second half of its draws (IMQ kernel, scores = exact
gradients of the log posterior at the draws, Kalman / forward-backward over the whole series). The
table gives, at that step, the iterations run, log10 KSD, the smallest bulk ESS over the coordinates
per second of sampling, and the posterior means.

Run ``python docs/ssm_precond.py`` (``--T 1000000`` for the long series; ``--seconds`` sets the
budget per run). Results go to ``docs/results/ssm-precond.json``.

``python docs/ssm_precond.py --study fisher`` compares the metric's two forms of E[x x^T]
(``moments="stationary"``, the complete-data Fisher information, and ``"identity"``, the thesis's
replacement) on the scalar LGSSM (Q = 0.5, R = 1, ``T`` = 1000 observations) at phi in ``--phis``: SGRLD
with the same buffered gradients at each step size of ``--h`` for a fixed number of data passes, and
with exact gradients at each step of ``--full-h`` for ``--full-iter`` iterations, from
(phi, psi_Q, psi_R) = (0.2, 1, 1), against an exact reference (random-walk Metropolis on the exact
Kalman posterior, proposal scaled by the Fisher metric at the truth, 64 chains). Results go to
``docs/results/ssm_fisher.json``.

``python docs/ssm_precond.py --study fisher --models ARHMM SLDS --switch-h 0.1 0.03 0.01 0.003`` runs
the same comparison on the thesis's switching models (section 3.5.2: two alternating rotations,
``A_k = 0.9 R(-+pi/4)``, ``Q_k = 0.1 I``; the ARHMM switching with probability 0.9, the SLDS with 0.1 and
seen through ``C = I``, ``R = 0.1 I``), ``T = 1000`` (``--switch-T``), from the truth: SGRLD with
buffered gradients (``S = B = 2``, the thesis's ARHMM setting; exact on each window for the ARHMM,
blocked Gibbs for the SLDS) and either form of the metric, and, on the ARHMM, MALA with exact gradients
(one data pass an iteration; it needs the exact log density, which the SLDS lacks). Mixing is the
smallest bulk ESS of the identified quantities (Pi's first column, A, Q, R) per data pass; the ARHMM's
posterior means are compared with MALA's. Results go to ``docs/results/ssm_fisher_switching.json``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from docs._results import write_results  # noqa: E402  (imported first: it records the load at start)

import numpy as np  # noqa: E402

import sgmc  # noqa: E402
from sgmc import backends  # noqa: E402
from sgmc.diagnostics import ess, ksd  # noqa: E402
from sgmc.ssm import LGSSM, GaussianHMM, HMMParams  # noqa: E402


def lgssm_problem(T, seed):
    theta = np.array([0.9, 1 / math.sqrt(0.5), 1.0])
    _, y = LGSSM.simulate_scalar(backends.default_rng(seed), T, theta)
    return LGSSM(np.asarray(y)), np.array([0.5, 1.0, 1.0])


def hmm_problem(T, seed):
    truth = HMMParams(np.array([[0.95, 0.05], [0.1, 0.9]]), np.array([[-1.0], [1.0]]), np.array([[[0.5]], [[0.8]]]))
    proto = GaussianHMM(np.zeros((T, 1)), 2)
    _, y = proto.simulate(backends.default_rng(seed), T, proto.unconstrain(truth))
    model = GaussianHMM(np.asarray(y), 2)
    init = np.asarray(model.unconstrain(HMMParams(np.array([[0.6, 0.4], [0.4, 0.6]]), np.array([[-0.5], [0.5]]),
                                                  np.array([[[1.0]], [[1.0]]]))))
    return model, init


def scores_at(model, draws):
    chunk = max(1, int(2e7 // model.T))
    return np.concatenate([np.asarray(model.grad_log_posterior(np.ascontiguousarray(draws[i : i + chunk])))
                           for i in range(0, draws.shape[0], chunk)])


def run_one(model, init, sampler, h, args):
    opts = dict(subsequence_length=args.S, buffer=args.B)
    common = dict(chains=args.chains, init=init, rng=args.seed, progress=False, estimator_options=opts)
    try:
        t0 = time.perf_counter()
        sgmc.sample(model, sampler, "buffered", step_size=h, n_iter=5, **common)
        per_iter = (time.perf_counter() - t0) / 5
        n_iter = int(min(args.max_iter, max(50, args.seconds / per_iter)))
        t0 = time.perf_counter()
        tr = sgmc.sample(model, sampler, "buffered", step_size=h, n_iter=n_iter, burn_in=n_iter // 2, **common)
    except (sgmc.DivergenceError, np.linalg.LinAlgError) as err:   # a step too large for the model
        return {"diverged": str(err).split("\n")[0]}
    wall = time.perf_counter() - t0
    draws = np.asarray(tr.draws)
    if not np.all(np.isfinite(draws)):
        return {"diverged": "non-finite draws"}
    kept = draws[:, :: max(1, draws.shape[1] // args.keep), :]
    flat = kept.reshape(-1, model.dim)
    sc = scores_at(model, flat)
    if not np.all(np.isfinite(sc)):
        return {"diverged": "non-finite scores"}
    return {"n_iter": n_iter, "wall": wall, "ksd": float(ksd(flat, sc)),
            "ess_s": float(np.min(np.asarray(ess(draws)))) / (wall / 2), "mean": flat.mean(axis=0)}


def reference_draws(model, truth, seed, chains=64, n_iter=6000):
    """Random-walk Metropolis on the exact posterior: proposal N(0, 2.38^2 / d G(truth)^{-1}) (any proposal
    is exact); ``chains`` chains from the truth, the first third discarded. Returns draws (chains, n, d)."""
    rng = np.random.default_rng(seed)
    d = model.dim
    G = np.asarray(model.fisher_metric().value(truth[None, :]))[0]
    L = np.linalg.cholesky(np.linalg.inv(G)) * 2.38 / math.sqrt(d)
    x = np.tile(truth, (chains, 1))
    lp = np.asarray(model.log_posterior(x))
    out = np.empty((chains, n_iter, d))
    for i in range(n_iter):
        y = x + rng.normal(size=(chains, d)) @ L.T
        ly = np.asarray(model.log_posterior(y))
        acc = np.log(rng.random(chains)) < ly - lp
        x = np.where(acc[:, None], y, x)
        lp = np.where(acc, ly, lp)
        out[:, i] = x
    return out[:, n_iter // 3 :]


def fisher_study(args):
    """SGRLD with moments='stationary' against moments='identity' on the scalar LGSSM (see the module)."""
    from sgmc.samplers import SGRLD

    init = np.array([0.2, 1.0, 1.0])
    n_buf = int(round(args.passes * args.T / (args.S + 2 * args.B)))
    runs = {  # table: (estimator, options, iterations, observations read per iteration and chain, steps)
        f"T{args.T}": ("buffered", dict(subsequence_length=args.S, buffer=args.B), n_buf, args.S + 2 * args.B, args.h),
        f"T{args.T}-full": ("full", {}, args.full_iter, args.T, args.full_h),
    }
    rows = {key: [] for key in runs}
    for phi in args.phis:
        truth = np.array([phi, 1 / math.sqrt(0.5), 1.0])
        _, y = LGSSM.simulate_scalar(backends.default_rng(args.seed), args.T, truth)
        model = LGSSM(np.asarray(y))
        ref = reference_draws(model, truth, args.seed)
        ref = np.concatenate([ref[..., :1], np.abs(ref[..., 1:])], axis=-1)   # psi's sign is not identified
        flat = ref.reshape(-1, model.dim)
        r_mean, r_sd = flat.mean(axis=0), flat.std(axis=0)
        ref_ess = np.asarray(ess(ref))
        print(f"phi={phi}: reference mean {np.round(r_mean, 4)}, sd {np.round(r_sd, 4)}, ESS {np.round(ref_ess)}", flush=True)
        for key, (estimator, opts, n_iter, per_iter, grid) in runs.items():
            burn = n_iter // 2
            for moments in ("stationary", "identity"):
                for h in grid:
                    sampler = SGRLD(metric=model.fisher_metric(moments=moments))
                    t0 = time.process_time()
                    try:
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")     # unmixed runs are reported in the table
                            tr = sgmc.sample(model, sampler, estimator, step_size=h, n_iter=n_iter, burn_in=burn,
                                             chains=args.chains, init=init, rng=args.seed, progress=False,
                                             estimator_options=opts)
                    except (sgmc.DivergenceError, np.linalg.LinAlgError) as err:
                        rows[key].append([phi, moments, h, n_iter, None, None, None, None, None, None,
                                          "diverged: " + str(err).split("\n")[0][:80]])
                        continue
                    cpu = time.process_time() - t0
                    draws = np.asarray(tr.draws)
                    draws = np.concatenate([draws[..., :1], np.abs(draws[..., 1:])], axis=-1)
                    if not np.all(np.isfinite(draws)):
                        rows[key].append([phi, moments, h, n_iter, None, None, None, None, None, None, "non-finite draws"])
                        continue
                    z = (draws.reshape(-1, model.dim).mean(axis=0) - r_mean) / r_sd
                    run_ess = np.asarray(ess(draws))
                    se = np.sqrt(1 / run_ess + 1 / ref_ess)        # Monte Carlo error of z (both runs), in sds
                    worst = int(np.argmax(np.abs(z)))
                    sd_ratio = draws[..., 0].std() / r_sd[0]
                    kept_passes = (n_iter - burn) * per_iter / args.T
                    ess_pass = float(np.min(run_ess)) / kept_passes
                    start = (draws[:, 0, 0].mean() - r_mean[0]) / r_sd[0]    # A at the end of burn-in
                    rows[key].append([phi, moments, h, n_iter, round(float(start), 2), f"{z[0]:+.2f} ± {se[0]:.2f}",
                                      f"{abs(z[worst]):.2f} ± {se[worst]:.2f}", round(float(sd_ratio), 2),
                                      round(ess_pass, 3), round(cpu, 1), ""])
                    print(key, rows[key][-1], flush=True)
    common = (f"{args.chains} chains from (phi, psi_Q, psi_R) = (0.2, 1, 1), the second half kept. Reference: "
              "random-walk Metropolis on the exact posterior, 64 chains x 4000 kept draws. "
              "A gap: (mean of A over the chains at the end of burn-in - reference mean) / reference sd; "
              "A bias: (mean of A - reference mean) / reference sd, ± its Monte Carlo error "
              "sqrt(1/ESS + 1/ESS_ref); max |bias|: the same for the worst of (A, |psi_Q|, |psi_R|); "
              "sd ratio A: sd of A / reference sd; min ESS / pass: smallest bulk ESS over the coordinates "
              "(all chains) per data pass of one chain in the kept half; CPU s: process time of the run.")
    columns = ["phi", "moments", "h", "iterations", "A gap (sd)", "A bias (sd)", "max |bias| (sd)", "sd ratio A",
               "min ESS / pass", "CPU s", "note"]
    tables = {}
    for key, (estimator, opts, n_iter, per_iter, grid) in runs.items():
        what = (f"buffered gradients S = {args.S}, B = {args.B}, {n_iter} iterations ({args.passes:g} data passes)"
                if estimator == "buffered" else f"exact gradients (Kalman smoother), {n_iter} iterations (data passes)")
        notes = f"Scalar LGSSM, Q = 0.5, R = 1, T = {args.T}; SGRLD with {what}; " + common
        tables[key] = {"columns": columns, "rows": rows[key], "notes": notes}
    path = write_results(args.results or "ssm_fisher", tables)
    print(f"wrote {path}")


def rotation(angle):
    return np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])


def switching_problem(kind, T, seed):
    """The thesis's section 3.5.2 settings: two alternating rotations (ARHMM, Pr(switch) = 0.9), or
    the SLDS with the same dynamics seen through C = I with noise R = 0.1 I (Pr(switch) = 0.1)."""
    from sgmc.ssm import ARHMM, SLDS
    from sgmc.ssm.arhmm import ARHMMParams
    from sgmc.ssm.slds import SLDSParams

    A = np.stack([0.9 * rotation(-math.pi / 4), 0.9 * rotation(math.pi / 4)])
    Q = np.stack([0.1 * np.eye(2)] * 2)
    if kind == "ARHMM":
        truth = ARHMMParams(np.array([[0.1, 0.9], [0.9, 0.1]]), A, Q)
        proto = ARHMM(np.zeros((8, 2)), 2)
        _, y = proto.simulate(backends.default_rng(seed), T, proto.unconstrain(truth))
        model = ARHMM(np.asarray(y), 2)
    else:
        truth = SLDSParams(np.array([[0.9, 0.1], [0.1, 0.9]]), A, Q, np.eye(2), 0.1 * np.eye(2))
        proto = SLDS(np.zeros((8, 2)), 2)
        _, _, y = proto.simulate(backends.default_rng(seed), T, proto.unconstrain(truth))
        model = SLDS(np.asarray(y), 2)
    return model, np.asarray(model.unconstrain(truth)), truth


def identified(model, draws):
    """The identified quantities of draws (chains, n, d): Pi's first column, A, and the noise
    covariances (Q, and R for the SLDS), as (chains, n, f). The expanded means ``eta`` behind Pi are
    not identified (their row sums keep the prior's spread), so ESS and means are taken on these."""
    c, n, d = draws.shape
    par = model.constrain(draws.reshape(-1, d))
    parts = [np.asarray(par.Pi)[..., :, 0], np.asarray(par.A).reshape(c * n, -1), np.asarray(par.Q).reshape(c * n, -1)]
    if hasattr(par, "R"):
        parts.append(np.asarray(par.R).reshape(c * n, -1))
    return np.concatenate(parts, axis=1).reshape(c, n, -1)


def _ess_pass(feats, passes):
    """Smallest bulk ESS over the identified quantities (all chains) per data pass of one chain, over
    all of them and over the entries of A (columns K to K + K m^2 of :func:`identified`)."""
    e = np.asarray(ess(feats))
    K = 2
    return float(np.min(e)) / passes, float(np.min(e[K:K + K * 4])) / passes


def switching_study(args):
    """SGRLD with the stationary complete-data Fisher and with the identity form against MALA (ARHMM)
    on the thesis's switching models; ESS per data pass, and the posterior means against MALA's."""
    from sgmc.samplers import SGRLD

    S, B = args.switch_S, args.switch_B
    tables = {}
    for kind in args.models:
        model, truth_theta, truth = switching_problem(kind, args.switch_T, args.seed)
        T, d = int(model.T), model.dim
        chains = args.chains if kind == "ARHMM" else args.slds_chains
        common = dict(chains=chains, init=truth_theta, rng=args.seed, progress=False)
        passes_wanted = args.switch_passes if kind == "ARHMM" else args.slds_passes
        rows, ref = [], None
        if kind == "ARHMM":                      # MALA on the exact posterior: one data pass an iteration
            best = None
            for h in args.mala_h:
                c0 = time.process_time()
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        tr = sgmc.sample(model, "mala", step_size=h, n_iter=args.mala_iter,
                                         burn_in=args.mala_iter // 2, **common)
                except (sgmc.DivergenceError, np.linalg.LinAlgError) as err:
                    rows.append([kind, "MALA (exact gradient)", "-", h, args.mala_iter, None, None, None, None, None,
                                 None, None, "diverged: " + str(err).split("\n")[0][:80]])
                    continue
                cpu = time.process_time() - c0
                draws = identified(model, np.asarray(tr.draws))
                acc = float(np.mean(np.asarray(tr.stats["accepted"])))
                passes = args.mala_iter - args.mala_iter // 2
                e, e_A = _ess_pass(draws, passes)
                rows.append([kind, "MALA (exact gradient)", "-", h, args.mala_iter, passes, round(e, 4), round(e_A, 4),
                             None, None, None, round(cpu, 1), f"acceptance {acc:.2f}"])
                print(rows[-1], flush=True)
                if best is None or e > best[0]:
                    best = (e, draws, len(rows) - 1)
            if best is not None:
                ref = best[1].reshape(-1, best[1].shape[-1])
                rows[best[2]][-1] += "; the reference for the means"
        per_iter = S + 2 * B
        n_iter = int(round(passes_wanted * T / per_iter))
        for moments in ("stationary", "identity"):
            for h in args.switch_h:
                sampler = SGRLD(metric=model.fisher_metric(moments=moments))
                c0 = time.process_time()
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        tr = sgmc.sample(model, sampler, "buffered", step_size=h, n_iter=n_iter, burn_in=n_iter // 2,
                                         estimator_options=dict(subsequence_length=S, buffer=B), **common)
                except (sgmc.DivergenceError, np.linalg.LinAlgError) as err:
                    rows.append([kind, "SGRLD (buffered)", moments, h, n_iter, None, None, None, None, None, None, None,
                                 "diverged: " + str(err).split("\n")[0][:80]])
                    continue
                cpu = time.process_time() - c0
                draws = np.asarray(tr.draws)
                if not np.all(np.isfinite(draws)):
                    rows.append([kind, "SGRLD (buffered)", moments, h, n_iter] + [None] * 7 + ["non-finite draws"])
                    continue
                passes = (n_iter - n_iter // 2) * per_iter / T
                est = model.constrain(draws.reshape(-1, d).mean(axis=0))
                draws = identified(model, draws)
                flat = draws.reshape(-1, draws.shape[-1])
                if ref is not None:
                    z = np.abs(flat.mean(axis=0) - ref.mean(axis=0)) / ref.std(axis=0)
                    sdr = np.median(flat.std(axis=0) / ref.std(axis=0))
                    bias, ratio = round(float(np.max(z)), 2), round(float(sdr), 2)
                else:
                    bias = ratio = None
                err_A = float(np.mean((np.asarray(est.A) - truth.A) ** 2))
                e, e_A = _ess_pass(draws, passes)
                rows.append([kind, "SGRLD (buffered)", moments, h, n_iter, round(passes, 1), round(e, 4), round(e_A, 4),
                             bias, ratio, f"{err_A:.2e}", round(cpu, 1), ""])
                print(rows[-1], flush=True)
        what = (f"T = {T} simulated from the thesis's section 3.5.2 parameters; {chains} chains from the truth, "
                f"the second half kept. SGRLD: buffered gradients S = {S}, B = {B}"
                + (" (blocked Gibbs on each window, the 'z' gradient)" if kind == "SLDS" else " (exact on each window)")
                + f", {n_iter} iterations ({passes_wanted:g} data passes per chain), the metric "
                "model.fisher_metric(moments=...) with 'stationary' (M_k = E[x x^T | z = k] of the switching process at "
                "theta, from the coupled Lyapunov equations: the complete-data Fisher) or 'identity' (M = I, the "
                "thesis's choice). ")
        what += (f"MALA: exact gradients and log density (forward-backward), {args.mala_iter} iterations, one data "
                 "pass each; the MALA run with the largest ESS per pass is the reference for the means. "
                 "min ESS / pass: smallest bulk ESS over the identified quantities (Pi's first column, A, Q; the "
                 "expanded means behind Pi are not identified) of all chains, per data pass of one chain in the "
                 "kept half (and over the entries of A alone); max |mean - MALA| (sd): the largest gap of a posterior mean from MALA's, in MALA's "
                 "posterior sds; sd ratio: median over coordinates of sd / MALA's sd; MSE of A: squared error of the "
                 "posterior mean of A against the truth; CPU s: process time of the run."
                 if kind == "ARHMM" else
                 "No MALA: the SLDS has no tractable likelihood, so no exact log density or gradient; the two metric "
                 "forms are compared by ESS per data pass and by the error of the posterior mean of A against the "
                 "truth (the thesis's Figure 3.15 measure). min ESS / pass as for the ARHMM, over Pi's first column, A, "
                 "Q and R; CPU s: process time.")
        tables[kind] = {"columns": ["model", "sampler", "moments", "h", "iterations", "kept data passes",
                                    "min ESS / pass", "min ESS / pass, A", "max |mean - MALA| (sd)", "sd ratio", "MSE of A", "CPU s",
                                    "note"], "rows": rows, "notes": what}
    path = write_results(args.results or "ssm_fisher_switching", tables)
    print(f"wrote {path}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--study", choices=["samplers", "fisher"], default="samplers")
    p.add_argument("--phis", type=float, nargs="+", default=[0.5, 0.9, 0.99], help="fisher study: phi of the LGSSM")
    p.add_argument("--passes", type=float, default=100.0, help="fisher study: data passes per chain (buffered)")
    p.add_argument("--full-iter", type=int, default=1000, help="fisher study: iterations with exact gradients")
    p.add_argument("--full-h", type=float, nargs="+", default=[1.0, 0.3, 0.1], help="fisher study: steps, exact gradients")
    p.add_argument("--T", type=int, default=10_000)
    p.add_argument("--S", type=int, default=20)
    p.add_argument("--B", type=int, default=10)
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--max-iter", type=int, default=20_000)
    p.add_argument("--keep", type=int, default=100, help="draws per chain kept for the KSD")
    p.add_argument("--eps", type=float, nargs="+", default=[1.0, 0.3, 0.1, 0.03, 0.01, 0.001], help="SGLD: h = 2 eps / T")
    p.add_argument("--h", type=float, nargs="+", default=[1.0, 0.3, 0.1, 0.03, 0.01, 0.001], help="SGRLD steps (metric scale)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--results", default=None)
    p.add_argument("--models", nargs="+", default=["LGSSM"], choices=["LGSSM", "ARHMM", "SLDS"],
                   help="fisher study: the scalar LGSSM, or the thesis's ARHMM and SLDS (ssm_fisher_switching)")
    p.add_argument("--switch-T", type=int, default=1000, help="fisher study, ARHMM/SLDS: series length")
    p.add_argument("--switch-S", type=int, default=2, help="fisher study, ARHMM/SLDS: subsequence length")
    p.add_argument("--switch-B", type=int, default=2, help="fisher study, ARHMM/SLDS: buffer")
    p.add_argument("--switch-passes", type=float, default=30.0, help="fisher study, ARHMM/SLDS: data passes per chain")
    p.add_argument("--switch-h", type=float, nargs="+", default=[0.1, 0.03, 0.01, 0.003], help="fisher study, ARHMM/SLDS: SGRLD steps")
    p.add_argument("--mala-h", type=float, nargs="+", default=[5e-4, 2.5e-4, 1.25e-4], help="fisher study, ARHMM: MALA steps")
    p.add_argument("--mala-iter", type=int, default=20000, help="fisher study, ARHMM: MALA iterations")
    p.add_argument("--slds-chains", type=int, default=2, help="fisher study, SLDS: chains (its Gibbs gradient is dear)")
    p.add_argument("--slds-passes", type=float, default=10.0, help="fisher study, SLDS: data passes per chain")
    args = p.parse_args(argv)
    if args.study == "fisher" and args.models != ["LGSSM"]:
        if "LGSSM" in args.models:
            p.error("--models: run the LGSSM study on its own (it writes ssm_fisher), ARHMM and SLDS together")
        switching_study(args)
        return
    if args.study == "fisher":
        if args.T == 10_000:
            args.T = 1000
        if args.h == [1.0, 0.3, 0.1, 0.03, 0.01, 0.001]:
            args.h = [1.0, 0.3, 0.1, 0.03, 0.01]
        fisher_study(args)
        return
    args.results = args.results or "ssm-precond"
    rows = []
    for name, make in (("LGSSM", lgssm_problem), ("Gaussian HMM", hmm_problem)):
        model, init = make(args.T, args.seed)
        for sampler, grid in (("sgld", [2 * e / args.T for e in args.eps]), ("sgrld", args.h)):
            best, tried = None, []
            for h in grid:
                r = run_one(model, init, sampler, h, args)
                tried.append(f"{h:.3g}" + (" (diverged)" if "diverged" in r else f": {math.log10(r['ksd']):.2f}"))
                if "diverged" not in r and (best is None or r["ksd"] < best[1]["ksd"]):
                    best = (h, r)
            print(f"{name} {sampler}: " + ", ".join(tried), flush=True)
            if best is None:
                rows.append([name, args.T, sampler, None, None, None, None, None, "all steps diverged", "; ".join(tried)])
                continue
            h, r = best
            rows.append([name, args.T, sampler.upper(), h, r["n_iter"], round(r["wall"], 1), round(math.log10(r["ksd"]), 3),
                         round(r["ess_s"], 2), np.array2string(r["mean"], precision=3, separator=", "), "; ".join(tried)])
    notes = (f"Buffered gradients S = {args.S}, B = {args.B}; {args.chains} chains; about {args.seconds:g} s per run; "
             "the step with the smallest KSD of each grid (h: log10 KSD for each step tried); "
             "min ESS/s = smallest bulk ESS over coordinates per second of the kept half.")
    table = {"columns": ["model", "T", "sampler", "h", "iterations", "time s", "log10 KSD", "min ESS/s",
                         "posterior mean", "grid (h: log10 KSD)"], "rows": rows, "notes": notes}
    tid = f"T{args.T}"
    path = write_results(args.results, {tid: table})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
