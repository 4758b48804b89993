"""Table 2's speed claim on equal terms: SGLD's whole cost and accuracy beside NUTS's.

The review's Table 2 (and ``sgmc reproduce logistic-table2``) times the SG columns without their
step-size tuning, while NUTS's time includes its warm-up (the adaptation of its step and mass matrix).
This script reruns the SGLD column of Table 2 at each ``--dims`` exactly as the experiment does (the
same data, theta_0, seeds, pilots and long run, :mod:`sgmc.experiments.logistic`) and times every part
of its cost on the process's CPU clock: the set-up (the Laplace fit at the mode, which gives the step
grid's scale and the pilots' KSD preconditioner), the tuning (the pilot runs over the step grid) and the
20,000 iterations. It scores the run at 2,500, 5,000, 10,000 and 20,000 iterations (the KSD, eq. 13,
of 1,000 draws thinned from the second half of the run so far, and of the last 1,000 draws), so that
the cost of reaching a given KSD can be read off.

NUTS's cost and KSD come from the results files of the reference runs
(``docs/results/repro-table2-refs-d<d>.json``, NumPyro, 1,000 warm-up and 1,000 draws, its CPU time
including the warm-up); NumPyro need not be installed here. NUTS was scored once, at the end of its
run, so its cost of reaching a KSD level is at most its whole run's: a ratio of NUTS's cost to SGLD's
at a level is an upper bound.

``--centres`` measures instead the centres of the CV columns' control runs (the unpolished SGD
estimates): their distance from the mode at the mode's curvature beside their Newton decrement.

Run from the repository root (a few CPU minutes each at d = 10, 50, 100)::

    python docs/table2_cost.py --dims 10 50 100
    python docs/table2_cost.py --centres --dims 10 50 100
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from docs._results import RESULTS_DIR, write_results  # noqa: E402  (imported first: it records the load at start)

import numpy as np  # noqa: E402

from sgmc import backends  # noqa: E402
from sgmc.experiments._logistic import METHODS, make_problem, metrics, run_method, sgd_mode, tune  # noqa: E402
from sgmc.experiments.logistic import FULL, thinned_tail  # noqa: E402
from sgmc.optimize import laplace  # noqa: E402

LENGTHS = (2500, 5000, 10000, 20000)


def nuts_reference(dim):
    """NUTS's CPU seconds (warm-up included) and KSD at ``dim`` from its results file, or None."""
    path = RESULTS_DIR / f"repro-table2-refs-d{dim}.json"
    if not path.is_file():
        return None
    table = json.loads(path.read_text(encoding="utf-8"))["tables"]["table2"]
    col = table["columns"].index("NUTS")
    rows = {r[0]: r for r in table["rows"]}
    cpu, k = rows["CPU time (s)"][col], rows["KSD"][col]
    if not isinstance(cpu, (int, float)) or not isinstance(k, (int, float)):
        return None
    return {"cpu": float(cpu), "ksd": float(k), "file": f"docs/results/{path.name}"}


def sgld_costs(dim, seed, cfg):
    """SGLD at ``dim`` as in Table 2, each part of its cost timed, scored along its run."""
    problem = make_problem(cfg["n"], dim, seed)
    model = problem.model
    be = backends.get_backend(model.xp)
    # the set-up: make_problem's Laplace fit, repeated with its seed (the same work) to time it alone
    mode_seed = np.random.SeedSequence([seed, dim]).spawn(3)[2]
    c0 = time.process_time()
    laplace(model, backends.default_rng(mode_seed, backend=be, device=model.device), progress=False)
    setup = time.process_time() - c0
    k = [m[0] for m in METHODS].index("SGLD")
    seeds = np.random.SeedSequence([seed, dim, 1]).spawn(2 * len(METHODS) + 3)
    c0 = time.process_time()
    res = tune(problem, "sgld", "minibatch", cfg["pilot_iters"], cfg["grid"],
               backends.default_rng(seeds[2 * k], backend=be, device=model.device))
    tuning = time.process_time() - c0
    h = min((r for r in res.table if not r["diverged"]), key=lambda r: r["ksd"])["step_size"]
    run = run_method(problem, "sgld", "minibatch", h, cfg["iters"], cfg["sgd_steps"], seeds[2 * k + 1])
    chain = np.asarray(backends.to_numpy(run["trace"].draws[0]))
    path = []
    for L in LENGTHS:
        part = chain[:L]
        _, k_last, k_thin = metrics(problem, part[-cfg["keep"]:], thinned_tail(part, L // 2, cfg["keep"]))
        path.append({"iterations": L, "cpu": setup + tuning + run["cpu"] * L / cfg["iters"], "ksd": k_last,
                     "ksd_thin": k_thin})
        print(f"d = {dim}: SGLD, {L} iterations: KSD {k_last:.3g}, thinned {k_thin:.3g}", flush=True)
    return {"setup": setup, "tuning": tuning, "run": run["cpu"], "h": h, "path": path, "pilots": len(res.table)}


def recorded_gaps(dim):
    """{CV column: the Newton decrement recorded for its control centre} from the Table 2 results files."""
    out = {}
    for path in sorted(RESULTS_DIR.glob("repro-table2-*.json")):
        table = json.loads(path.read_text(encoding="utf-8"))["tables"].get("cv_controls")
        if table is None or "mode_gap (sds)" not in table["columns"]:
            continue
        col = table["columns"].index("mode_gap (sds)")
        for r in table["rows"]:
            if r[0] == dim and r[2] == "SGD only (control)":
                out[r[1]] = (r[col], f"docs/results/{path.name}")
    return out


def centres(dims, seed, cfg):
    """The control centres of Table 2's CV columns (the unpolished SGD estimates, each from the seed the
    experiment's control run used) measured two ways: the distance from the mode at the mode's curvature
    (mode_distance) and the Newton decrement at the centre (mode_gap), beside the decrement the results
    files recorded (the same point when the two decrements agree)."""
    rows = []
    for dim in dims:
        problem = make_problem(cfg["n"], dim, seed)
        be = backends.get_backend(problem.model.xp)
        seeds = np.random.SeedSequence([seed, dim, 1]).spawn(2 * len(METHODS) + 3)
        recorded = recorded_gaps(dim)
        for k, (label, _, est) in enumerate(METHODS):
            if est != "cv":
                continue
            ss = seeds[2 * k + 1]
            ss.spawn(2)                   # the long run's children (no long run diverged in Table 2's runs)
            opt_seed, _ = ss.spawn(2)     # the control run's
            _, _, gaps = sgd_mode(problem, cfg["sgd_steps"],
                                  backends.default_rng(opt_seed, backend=be, device=problem.model.device), polish=False)
            rec, src = recorded.get(label, (None, None))
            rows.append([dim, label, round(gaps["dist_sgd"], 2), round(gaps["gap_sgd"], 2),
                         round(float(rec), 2) if rec is not None else None, src])
            print(rows[-1], flush=True)
    return {"columns": ["d", "method", "distance from the mode (sds, mode's curvature)",
                        "Newton decrement (sds, curvature at the centre)", "decrement recorded by the Table 2 run",
                        "recorded in"],
            "rows": rows,
            "notes": (f"The control centres of Table 2's CV columns: {cfg['sgd_steps']} SGD steps from theta_0, not "
                      "polished, rerun with the seeds of the experiment's control runs. The distance from the mode "
                      "uses the negative Hessian at the mode (the Laplace precision), the Newton decrement "
                      "(sgmc.optimize.mode_gap) the one at the centre; the last columns give the decrement the Table 2 "
                      "run recorded, which identifies the point.")}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dims", type=int, nargs="+", default=[10, 50, 100])
    ap.add_argument("--seed", type=int, default=0, help="the experiment's seed (Table 2's runs used 0)")
    ap.add_argument("--results", default=None, help="results name (default table2_cost, or table2_centres)")
    ap.add_argument("--centres", action="store_true",
                    help="measure the CV columns' control centres instead (results table2_centres)")
    args = ap.parse_args(argv)
    cfg = dict(FULL)
    if args.centres:
        table = centres(args.dims, args.seed, cfg)
        print("wrote", write_results(args.results or "table2_centres", {"centres": table},
                                     extra={"settings": {**cfg, "dims": args.dims, "seed": args.seed}}))
        return
    whole, reach = [], []
    for dim in args.dims:
        s = sgld_costs(dim, args.seed, cfg)
        nuts = nuts_reference(dim)
        total = s["setup"] + s["tuning"] + s["run"]
        end = s["path"][-1]
        whole.append([dim, "SGLD", round(s["setup"], 2), round(s["tuning"], 2), round(s["run"], 2), round(total, 2),
                      end["ksd"], end["ksd_thin"], round(nuts["cpu"] / total, 1) if nuts else None,
                      round(end["ksd_thin"] / nuts["ksd"], 2) if nuts else None,
                      f"h = {s['h']:.3g} from {s['pilots']} pilots"])
        if nuts is None:
            whole.append([dim, "NUTS", None, None, None, None, None, None, None, None, "no reference results file"])
            continue
        whole.append([dim, "NUTS", "in its run", "in its run", nuts["cpu"], nuts["cpu"], nuts["ksd"], nuts["ksd"], 1.0, 1.0,
                      f"1,000 warm-up + 1,000 draws; {nuts['file']}"])
        for level, what in ((nuts["ksd"], "NUTS's KSD"), (end["ksd_thin"], "SGLD's KSD at 20,000 iterations")):
            hit = next((p for p in s["path"] if p["ksd_thin"] <= level), None)
            nuts_cost = nuts["cpu"] if nuts["ksd"] <= level else None
            reach.append([dim, what, level,
                          hit["iterations"] if hit else f"not within {LENGTHS[-1]}",
                          round(hit["cpu"], 2) if hit else None, nuts_cost,
                          round(nuts_cost / hit["cpu"], 1) if hit and nuts_cost else None])
    tables = {
        "equal_terms": {
            "columns": ["d", "method", "set-up CPU s", "tuning CPU s", "sampling CPU s", "total CPU s",
                        "KSD (last 1000)", "KSD (1000 thinned)", "NUTS total / this total",
                        "this KSD (thinned) / NUTS KSD", "note"],
            "rows": whole,
            "notes": ("Table 2's SGLD column rerun as the experiment runs it (N = 100,000; the same data, seeds and "
                      "step grid), each part on the process's CPU clock: set-up = the Laplace fit at the mode (the "
                      "step grid's scale and the pilots' KSD preconditioner); tuning = the pilot runs; sampling = "
                      "20,000 iterations. NUTS (NumPyro) from its results file: its CPU time includes its warm-up; "
                      "its KSD is of its 1,000 draws after warm-up. KSD: eq. 13 (unit IMQ kernel, exact scores)."),
        },
        "cost_to_ksd": {
            "columns": ["d", "KSD level", "value", "SGLD reaches it at (iterations)", "SGLD CPU s (all costs)",
                        "NUTS CPU s (at most)", "NUTS / SGLD (at most)"],
            "rows": reach,
            "notes": ("The CPU time each method takes to reach a KSD level: SGLD scored at 2,500, 5,000, 10,000 and "
                      "20,000 iterations (1,000 draws thinned from the second half of the run so far; cost = set-up + "
                      "tuning + that share of the sampling), NUTS at the end of its run only, so its cost is an "
                      "upper bound and so is the ratio; an empty NUTS cell: NUTS's KSD is above the level."),
        },
    }
    print("wrote", write_results(args.results or "table2_cost", tables, extra={"settings": {**cfg, "dims": args.dims, "seed": args.seed,
                                                                          "lengths": list(LENGTHS)}}))


if __name__ == "__main__":
    main()
