"""Why SGNHT loses its fit on the Bayesian neural network of Figure 5: a step, noise and thermostat study.

SGNHT (Ding et al. 2014) has one thermostat xi per chain, which drives the *average* kinetic energy
rho.rho / d to 1. With minibatch gradients each coordinate's momentum is heated by that coordinate's
gradient noise, and the noise is far from uniform across the network's blocks (input weights B,
hidden biases b, output weights A, output biases a, log precisions). A scalar thermostat can then
hold the average at 1 while some blocks run hot and others cold. This script runs the sampler's own
``init``/``step`` (sgmc.samplers.SGNHT) on the digits set-up of ``sgmc reproduce bnn-mnist`` and
records, every ``--every`` iterations and for every chain, the thermostat, each block's kinetic
temperature (mean rho_i^2 over the block's coordinates), each block's mean squared weight, the log
precisions, and the test log-loss of the current draw. The configurations vary one thing at a time
against the full-size experiment's SGNHT (minibatch n = 1% of N, h = 0.01): the step (h = 0.003),
the gradient noise (control variates at the same h, and a 10x larger minibatch), and the friction
mechanism (SGHMC, which refreshes the momentum every iteration, with L = 1 at the same h).

    python docs/bnn_sgnht_study.py            # writes docs/results/repro-bnn-sgnht.json

The draws start from one N(0, 1) draw per coordinate (as the experiment's), burn-in included.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from docs._results import write_results  # noqa: E402  (first: it records the load at start)

import numpy as np  # noqa: E402


def blocks(model) -> dict:
    """Index slices of theta: B, b, A, a and the four log precisions."""
    out, lo = {}, 0
    for name, m in zip(("B", "b", "A", "a"), model.sizes):
        out[name] = slice(lo, lo + m)
        lo += m
    out["log-precisions"] = slice(lo, lo + 4)
    return out


def run(model, data, sampler_name, estimator_name, h, n_iter, every, chains, batch, seed, centre=None):
    """Iterate the sampler's own init/step and record the diagnostics every ``every`` iterations."""
    from sgmc import backends
    from sgmc.estimators import SupportsPrepare, make_estimator
    from sgmc.experiments.bnn import _log_loss
    from sgmc.samplers import make_sampler

    ss = np.random.SeedSequence(seed)
    init = np.random.default_rng(ss.spawn(1)[0]).normal(size=(chains, model.dim))
    if centre is not None:
        init = np.tile(centre, (chains, 1))
    rng = backends.default_rng(ss.spawn(1)[0])
    opts = {"centre": centre} if estimator_name == "cv" else {}
    est = make_estimator(estimator_name, model, batch, **opts)
    if isinstance(est, SupportsPrepare):
        est = est.prepare(rng, init).estimator
    smp = make_sampler(sampler_name, model, **({"n_leapfrog": 1} if sampler_name == "sghmc" else {}))
    state = smp.init(rng, init, est)
    parts = blocks(model)
    rec = {"iteration": [], "thermostat": [], "log_loss": [], "log_precisions": [],
           **{f"T_{k}": [] for k in parts}, **{f"w2_{k}": [] for k in parts if k != "log-precisions"}}
    t0 = time.perf_counter()
    for k in range(1, n_iter + 1):
        state, _ = smp.step(rng, state, est, h)
        if k % every:
            continue
        x = np.asarray(state.position)
        rho = np.asarray(state.momentum)
        if not np.all(np.isfinite(x)):
            rec["diverged_at"] = k
            break
        rec["iteration"].append(k)
        rec["thermostat"].append(np.asarray(getattr(state, "thermostat", np.full(chains, np.nan))).tolist())
        rec["log_loss"].append(_log_loss(np.asarray(model.predict_proba(x, data.X_test)), data.y_test).tolist())
        rec["log_precisions"].append(x[:, parts["log-precisions"]].tolist())
        for name, sl in parts.items():
            rec[f"T_{name}"].append(np.mean(rho[:, sl] ** 2, axis=1).tolist())
            if name != "log-precisions":
                rec[f"w2_{name}"].append(np.mean(x[:, sl] ** 2, axis=1).tolist())
    rec["seconds"] = time.perf_counter() - t0
    return rec


def summary(rec, tail_from: int) -> dict:
    """Means over chains and over the recorded iterations >= ``tail_from``."""
    it = np.asarray(rec["iteration"])
    sel = it >= tail_from
    if not np.any(sel):
        return {}
    out = {}
    for key, v in rec.items():
        if key in ("iteration", "seconds", "diverged_at", "log_precisions"):
            continue
        a = np.asarray(v, dtype=float)[sel]
        out[key] = float(np.mean(a))
    lp = np.asarray(rec["log_precisions"], dtype=float)[sel]     # (t, chains, 4)
    out["log_precision_B"] = float(np.mean(lp[..., 0]))
    out["final_log_loss"] = float(np.mean(np.asarray(rec["log_loss"])[-1]))
    out["max_T"] = max(out[k] for k in out if k.startswith("T_"))
    return out


def main(argv=None) -> int:
    from sgmc.datasets import mnist
    from sgmc.experiments.bnn import _N_REF, _sgd_centre
    from sgmc.models import BayesianNeuralNetwork

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=20_000, help="iterations, burn-in included (default 20,000)")
    p.add_argument("--every", type=int, default=250)
    p.add_argument("--chains", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--configs", default="all", help="comma-separated names, or all")
    p.add_argument("--results", default="repro-bnn-sgnht")
    args = p.parse_args(argv)

    data = mnist(None, seed=args.seed)
    model = BayesianNeuralNetwork(data.X, data.y, 100, 10, hidden="softmax")
    N = model.n_data
    batch = max(1, round(0.01 * N))
    configs = {
        "SGNHT h=0.01 (Figure 5's)": ("sgnht", "minibatch", 0.01, batch),
        "SGNHT h=0.003": ("sgnht", "minibatch", 0.003, batch),
        "SGNHT h=0.01, 10x minibatch": ("sgnht", "minibatch", 0.01, 10 * batch),
        "SGNHT-CV h=0.01": ("sgnht", "cv", 0.01, batch),
        "SGHMC L=1 h=0.01": ("sghmc", "minibatch", 0.01, batch),
    }
    if args.configs != "all":
        wanted = [c.strip() for c in args.configs.split(",")]
        configs = {k: v for k, v in configs.items() if any(k.startswith(w) for w in wanted)}
    centre = None
    if any(v[1] == "cv" for v in configs.values()):
        init0 = np.random.default_rng(np.random.SeedSequence(args.seed).spawn(1)[0]).normal(size=model.dim)
        centre = _sgd_centre(model, init0, 10_000, 1e-3 * _N_REF / N, batch, np.random.default_rng(args.seed))
    tail_from = args.iters // 2
    rows, raw = [], {}
    for label, (smp, est, h, n) in configs.items():
        print(f"{label} ...", file=sys.stderr, flush=True)
        rec = run(model, data, smp, est, h, args.iters, args.every, args.chains, n, [args.seed, 7],
                  centre if est == "cv" else None)
        raw[label] = rec
        s = summary(rec, tail_from)
        if not s:
            rows.append([label, h, n, "diverged", "diverged", "diverged", "diverged", "diverged", "diverged",
                         "diverged", "diverged"])
            continue
        rows.append([label, h, n, s["thermostat"] if smp == "sgnht" else "–", s["T_B"], s["T_b"], s["T_A"], s["T_a"],
                     s["T_log-precisions"], s["log_precision_B"], s["log_loss"]])
        print(f"  {s}", file=sys.stderr, flush=True)
    cols = ["configuration", "h", "n", "thermostat xi", "T(B)", "T(b)", "T(A)", "T(a)", "T(log precisions)",
            "log lambda_B", "test log-loss (draw)"]
    notes = (f"Means over {args.chains} chains and over iterations {tail_from}-{args.iters} (recorded every "
             f"{args.every}); T(block) is the block's mean rho_i^2, 1 at the target temperature.")
    curves = {}
    for label, rec in raw.items():
        it = rec["iteration"]
        curves[label] = {
            "columns": ["iteration", "thermostat xi", "T(B)", "T(A)", "log lambda_B", "log-loss"],
            "rows": [[it[i], (float(np.mean(rec["thermostat"][i])) if math.isfinite(np.mean(rec["thermostat"][i]))
                              else "–"),
                      float(np.mean(rec["T_B"][i])), float(np.mean(rec["T_A"][i])),
                      float(np.mean(np.asarray(rec["log_precisions"][i])[:, 0])), float(np.mean(rec["log_loss"][i]))]
                     for i in range(0, len(it), max(1, len(it) // 10))],
        }
    tables = {"summary": {"columns": cols, "rows": rows, "notes": notes}}
    for j, (label, tab) in enumerate(curves.items()):
        tables[f"curve{j}"] = dict(tab, notes=label)
    path = write_results(args.results, tables, extra={"settings": vars(args), "n_data": N, "dim": model.dim})
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
