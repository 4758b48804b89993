"""Preferential and adaptive subsampling: per-step cost, and KSD against data passes, in one run.

``--what step`` (default): SGLD on logistic regression with N = 10^6, n = 1000, d = 10 through
``sgmc.sample`` with each estimator at a fixed centre (no mode search timed): plain minibatches
(without and with replacement), SGLD-PS and SGLD-CV-PS with approximate weights (alias-table draws),
SGLD-CV with the one-gather differences (``grad_log_lik_diff_sum``) and, for the before/after figure,
SGLD-CV on a model that gathers the rows twice (the base-class fallback), and ASGLD-CV-PS with V_0 set
from the starting point's distance to the centre (the subsample size it then draws is reported as
"mean n": it is not forced to equal n). The methods alternate within every repetition and the medians of microseconds
per iteration are reported with the ratio to plain minibatch SGLD at the same n.

``--what ksd``: the imbalanced logistic regression of ISLR ``Default`` (N = 10^4, 3.3% positives,
:func:`sgmc.datasets.default_credit`), n = 0.1% of N = 10: fixed-n SGLD-CV against ASGLD-CV-PS with V_0
from 10 SGLD-CV-PS pilot chains (thesis section 4.5.3), 10 chains of 10^4 iterations each, h = 0.1 /
lambda_max. Prints both KSD curves against data passes (pilot chains counted in ASGLD-CV-PS's set-up)
and the passes from which each stays at or below SGLD-CV's final KSD.

Everything runs on the cores of ``--cores`` (default: core 1) with one BLAS thread (checked); the step
study reports CPU time (wall time beside it), and each study writes its tables to
``docs/results/peer_subsampling_<what>.json``, which docs/subsampling.md renders.

Usage (from the repository root)::

    python asv_benchmarks/peer_subsampling.py --what step [--iters 2000] [--reps 5]
    python asv_benchmarks/peer_subsampling.py --what ksd [--iters 10000] [--chains 10] [--seeds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pinning import Clock, load, pin, verify  # noqa: E402

if __name__ == "__main__":
    CORES = pin()  # before NumPy starts its BLAS threads: every method on the same core, one thread

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from docs._results import write_results  # noqa: E402  (imported before measuring: it records the load at start)

import numpy as np  # noqa: E402

import sgmc  # noqa: E402
from sgmc.backends import default_rng  # noqa: E402
from sgmc.estimators import (  # noqa: E402
    AdaptiveControlVariatePS,
    ControlVariate,
    ControlVariatePS,
    Minibatch,
    PreferentialSubsampling,
)
from sgmc.models import LogisticRegression, Model  # noqa: E402
from sgmc.optimize import newton  # noqa: E402

RESULTS = {}  # table id -> table, written at the end
EXTRA = {}

N_DATA = 1_000_000
BATCH = 1_000
DIM = 10


class TwoGatherLogistic(LogisticRegression):
    """Logistic regression whose control-variate differences gather the rows twice (the fallback)."""

    grad_log_lik_diff_sum = Model.grad_log_lik_diff_sum


def step_study(args):
    r = np.random.default_rng(0)
    X = r.standard_normal((N_DATA, DIM))
    theta = r.standard_normal(DIM) / np.sqrt(DIM)
    y = (r.random(N_DATA) < 1.0 / (1.0 + np.exp(-X @ theta))).astype(np.float64)
    model = LogisticRegression(X, y)
    slow = TwoGatherLogistic(X, y)
    t0 = time.perf_counter()
    centre = np.asarray(newton(model, theta)[0]).reshape(-1)      # the mode: chains stay near it
    ests = {
        "SGLD (WOR)": Minibatch(model, BATCH),
        "SGLD (WR)": Minibatch(model, BATCH, replace=True),
        "SGLD-PS": PreferentialSubsampling(model, BATCH, "approx", centre),
        "SGLD-CV": ControlVariate(model, BATCH, centre),
        "SGLD-CV 2 gathers": ControlVariate(slow, BATCH, centre),
        "SGLD-CV-PS": ControlVariatePS(model, BATCH, "approx", centre),
    }
    a = AdaptiveControlVariatePS(model, BATCH, centre=centre, v0=1.0)
    start = centre + 0.01
    d2 = float(np.sum((start - centre) ** 2))
    ests["ASGLD-CV-PS"] = a.with_v0(a.v0 * a.coef * d2 / (BATCH - 0.5))
    print(f"set-up of weights and alias tables: {time.perf_counter() - t0:.1f} s")
    setup_s = time.perf_counter() - t0
    EXTRA["threads"] = verify(CORES)
    times = {k: {"cpu": [], "wall": []} for k in ests}
    batch, loads = {}, []
    names = list(ests)
    for rep in range(args.reps):
        loads.append(load())
        order = names if rep % 2 == 0 else names[::-1]
        for k in order:
            est = ests[k]
            m = est.model
            with Clock() as c:
                tr = sgmc.sample(m, "sgld", est, step_size=1e-7, n_iter=args.iters, chains=1, init=start, rng=rep,
                                 progress=False)
            times[k]["cpu"].append(c.cpu / args.iters * 1e6)
            times[k]["wall"].append(c.wall / args.iters * 1e6)
            batch[k] = float(tr.stats["batch_size"].mean())
    med = {k: {clk: statistics.median(v[clk]) for clk in v} for k, v in times.items()}
    base, wr = med["SGLD (WOR)"], med["SGLD (WR)"]
    print(f"\nN = {N_DATA}, n = {BATCH}, d = {DIM}, 1 chain, {args.iters} iterations x {args.reps} reps")
    print(f"{'method':<22} {'mean n':>7} {'CPU us/iter':>11} {'vs SGLD (WOR)':>14} {'vs SGLD (WR)':>13}")
    rows = []
    for k in names:
        t = med[k]["cpu"]
        print(f"{k:<22} {batch[k]:>7.0f} {t:>11.1f} {t / base['cpu']:>14.2f} {t / wr['cpu']:>13.2f}")
        rows.append([k, batch[k], t, med[k]["wall"], t / base["cpu"], t / wr["cpu"]])
    RESULTS["step"] = {
        "columns": ["method", "mean n", "CPU us/iter", "wall us/iter", "vs minibatch SGLD without replacement (CPU)",
                    "vs minibatch SGLD with replacement (CPU)"],
        "rows": rows, "formats": [None, ".0f", ".0f", ".0f", ".2f", ".2f"],
        "notes": f"1 chain, N = {N_DATA}, n = {BATCH}, d = {DIM}, medians of {args.reps} interleaved rounds of "
                 f"{args.iters} iterations; load average {min(loads):.1f}-{max(loads):.1f}; the weights and "
                 f"alias tables took {setup_s:.0f} s to set up (wall).",
    }
    EXTRA["loads"] = loads


def ksd_study(args):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "figures"))
    from _study import mode_and_curvature

    from sgmc.datasets import default_credit
    from sgmc.diagnostics import cumulative_ksd, ksd_preconditioner

    c = default_credit()
    model = LogisticRegression(c.X, c.y)
    mode, _, lam = mode_and_curvature(model)
    h = 0.1 / lam
    n = max(1, round(0.001 * model.n_data))
    EXTRA["threads"] = verify(CORES)
    summary = []
    for seed in range(args.seeds):
        summary.append(_ksd_one(args, model, mode, h, n, seed, cumulative_ksd, ksd_preconditioner))
    if args.seeds > 1:
        print("\nper seed: final KSD of SGLD-CV / ASGLD-CV-PS, passes of each, and the passes from which "
              "ASGLD-CV-PS stays at or below SGLD-CV's final KSD")
        for seed, row in enumerate(summary):
            print(f"  seed {seed}: KSD {row[0]:.3g} / {row[1]:.3g}, passes {row[2]:.1f} / {row[3]:.1f}, "
                  f"reached at {row[4]}")
    RESULTS["ksd"] = {
        "columns": ["seed", "final KSD, SGLD-CV", "final KSD, ASGLD-CV-PS", "data passes, SGLD-CV",
                    "data passes, ASGLD-CV-PS (pilots counted)", "ASGLD-CV-PS at or below SGLD-CV's final KSD from"],
        "rows": [[seed, *row] for seed, row in enumerate(summary)],
        "formats": [None, ".3g", ".3g", ".1f", ".1f", None],
        "notes": f"ISLR Default, n = {n}, h = 0.1 / lambda_max, {args.chains} chains x {args.iters} iterations "
                 f"per method and seed; pilot chains of {args.pilot_iters} iterations.",
    }


def _ksd_one(args, model, mode, h, n, seed, cumulative_ksd, ksd_preconditioner):
    fixed = ControlVariate(model, n, mode, replace=True)
    ad = AdaptiveControlVariatePS(model, n, centre=mode, pilot_step_size=h, pilot_iter=args.pilot_iters)
    ad = ad.prepare(default_rng(100 + seed), mode[None, :])
    pilot_passes = ad.n_evals / model.n_data
    ad = ad.estimator
    thin = max(1, args.iters // 2000)
    curves, pre = {}, None
    for name, est, extra in (("SGLD-CV", fixed, 0.0), ("ASGLD-CV-PS", ad, pilot_passes)):
        tr = sgmc.sample(model, "sgld", est, step_size=h, n_iter=args.iters, chains=args.chains, thin=thin,
                         store_grads="full", rng=seed, progress=False)
        draws, grads = np.asarray(tr.draws), np.asarray(tr.grads)
        if pre is None:
            pre = ksd_preconditioner(draws, "med")
        path = np.asarray(cumulative_ksd(draws, grads, preconditioner=pre))
        passes = extra + tr.info["setup_data_passes"] + tr.stats["data_passes"].mean(axis=0)[np.asarray(tr.iterations)]
        curves[name] = (passes, path, float(tr.stats["batch_size"].mean()))
    target = curves["SGLD-CV"][1][-1]
    print(f"\nseed {seed}. ISLR Default: N = {model.n_data}, d = {model.dim}, n = {n}, h = {h:.3g}, {args.chains} chains x "
          f"{args.iters} iterations; V_0 = {ad.v0:.4g} from {ad.pilot_chains} pilot chains of {ad.pilot_iter} "
          f"iterations ({pilot_passes:.2f} passes, counted)")
    print(f"{'method':<12} {'mean n_t':>8}  passes -> KSD at 10 checkpoints")
    for name, (passes, path, nbar) in curves.items():
        picks = np.unique(np.linspace(0, len(path) - 1, 10).round().astype(int))
        pts = "  ".join(f"{passes[i]:.2f}:{path[i]:.3g}" for i in picks)
        print(f"{name:<12} {nbar:>8.2f}  {pts}")
    when = "not reached"
    for name, (passes, path, _) in curves.items():
        # from where on the KSD stays at or below the target
        above = np.nonzero(path > target * (1 + 1e-12))[0]
        first = 0 if above.size == 0 else above[-1] + 1
        when = f"{passes[first]:.2f} passes" if first < len(path) else "not reached"
        print(f"{name}: at or below SGLD-CV's final KSD {target:.4g} from {when} on (total {passes[-1]:.2f} passes)")
    a, b = curves["SGLD-CV"], curves["ASGLD-CV-PS"]
    return a[1][-1], b[1][-1], a[0][-1], b[0][-1], when


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--what", choices=("step", "ksd"), default="step")
    ap.add_argument("--iters", type=int)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--chains", type=int, default=10)
    ap.add_argument("--pilot-iters", type=int, default=1000)
    ap.add_argument("--cores", default="1", help="the cores every method runs on (default: core 1)")
    ap.add_argument("--results", help="results file docs/results/NAME.json "
                                      "(default peer_subsampling_<what>; 'none' writes nothing)")
    ap.add_argument("--seeds", type=int, default=1, help="ksd: repeat with this many seeds (chains and pilots)")
    args = ap.parse_args(argv)
    if args.what == "step":
        args.iters = args.iters or 2000
        step_study(args)
    else:
        args.iters = args.iters or 10_000
        ksd_study(args)
    name = args.results or f"peer_subsampling_{args.what}"
    if name != "none":
        EXTRA["settings"] = vars(args)
        print("wrote", write_results(name, RESULTS, extra=EXTRA))


if __name__ == "__main__":
    main()
