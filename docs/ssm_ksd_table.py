"""SGLD with full, unbuffered and buffered gradients: KSD table (Aicher 2020, Tables 3.4-3.5).

For each problem this script runs SGLD with three gradient estimators for the same wall-clock
budget (as the thesis compares them at equal runtime):

* **Full**: the exact gradient over the whole series (Kalman / forward-backward; for models without
  a tractable likelihood, the particle smoother over the whole series, ``S = T``, ``B = 0``);
* **No Buffer**: subsequences of length ``S`` without buffer (``B = 0``, biased);
* **Buffer**: the same subsequences with ``B`` buffer times on each side;

and reports the kernel Stein discrepancy (sgmc.diagnostics.ksd, IMQ kernel, scores = exact
gradients of the log posterior at the draws where the likelihood is tractable, particle estimates
over the whole series otherwise) over all chains, in total and per coordinate (the KSD of each
coordinate's draws with that coordinate's score, the kernel on that coordinate only). Step sizes
follow the thesis's convention ``theta += eps g / T + N(0, 2 eps / T)``, i.e. sgmc's
``h = 2 eps / T``; with a grid (``--eps 1 0.1 0.01 0.001``, the thesis's) every method keeps its best
KSD. Chains start away from the truth (the thesis starts from prior draws).

Problems: the scalar LGSSM (phi = 0.9, Q = 0.5, R = 1) simulated with T = 1000 (``--long``:
T = 10^6), a 2-state Gaussian HMM fitted to the daily Deutsche mark / US dollar log returns
(sgmc.datasets.exchange_rates, 1866 returns; a regime-switching volatility model), and, when
sgmc.ssm provides them, the stochastic volatility and GARCH models on simulated data and on the
exchange-rate returns (particle smoothers).

Run ``python docs/ssm_ksd_table.py`` or ``--quick``. The table goes to ``docs/results/ssm_ksd_table.json``
(``--results``).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from docs._results import write_results  # noqa: E402  (imported first: it records the load at start)

import numpy as np  # noqa: E402

import sgmc  # noqa: E402
from sgmc import backends  # noqa: E402
from sgmc.diagnostics import ksd  # noqa: E402
from sgmc.ssm import LGSSM, Buffered, GaussianHMM, HMMParams  # noqa: E402


def lgssm_problem(T, seed):
    theta = np.array([0.9, 1 / math.sqrt(0.5), 1.0])
    _, y = LGSSM.simulate_scalar(backends.default_rng(seed), T, theta)
    return LGSSM(y), np.array([0.5, 1.0, 1.0]), "exact"  # start away from the truth (phi = 0.5, sigma = tau = 1)


def hmm_exchange_problem(T, seed):
    from sgmc.datasets import exchange_rates

    y = exchange_rates("dm").returns
    model = GaussianHMM(y, 2)
    init = model.unconstrain(HMMParams(np.array([[0.95, 0.05], [0.05, 0.95]]), np.array([[0.0], [0.0]]), np.array([[[0.3]], [[1.5]]])))
    return model, init, "exact"


def particle_problems(T, seed):
    """SV and GARCH (thesis section 3.5.2 parameters), simulated and on the DM/USD returns."""
    import sgmc.ssm as ssm

    out = {}
    specs = []
    if hasattr(ssm, "StochasticVolatility"):
        # phi = 0.9, sigma = 0.5, tau = 0.5 in theta = (atanh phi, 1/sigma, 1/tau)
        specs.append(("SV", ssm.StochasticVolatility, np.array([math.atanh(0.9), 2.0, 2.0])))
    if hasattr(ssm, "GARCH"):
        # alpha = 0.1, beta = 0.8, gamma = 0.05, tau = 0.3 in theta = (log mu, logit phi, logit lambda, tau)
        phi, lam = 0.85, 0.8 / 0.85
        specs.append(("GARCH", ssm.GARCH, np.array([math.log(0.1 / 0.15), math.log(phi / (1 - phi)), math.log(lam / (1 - lam)), 0.3])))
    for name, cls, theta in specs:
        _, y = cls.simulate_data(backends.default_rng(seed), T, theta)
        out[f"{name} (simulated)"] = (cls(np.asarray(y)), theta, "particle")
        if T <= 10**4:
            try:
                from sgmc.datasets import exchange_rates

                out[f"{name} (DM/USD)"] = (cls(exchange_rates("dm").returns[:, 0]), theta, "particle")
            except ImportError:
                pass
    return out


def scores_at(model, draws, method, n_particles, rng):
    """Scores at the draws, in chunks that keep (draws x T) arrays near 2e7 numbers."""
    chunk = max(1, int(2e7 // model.T))
    out = []
    for i in range(0, draws.shape[0], chunk):
        d = np.ascontiguousarray(draws[i : i + chunk])
        if method == "exact":
            out.append(model.grad_log_posterior(d))
        else:
            est = Buffered(model, subsequence_length=model.T, buffer=0, method="particle", n_particles=n_particles)
            out.append(est.estimate(rng, None, d)[0])
    return np.concatenate(out)


def run(name, model, init, method, args, rng_seed):
    """Each method at every eps of the grid; the row with the smallest KSD is kept (the thesis's protocol)."""
    best = {}
    for eps in args.eps:
        rows = run_one(model, init, method, args, rng_seed, eps)
        for label, row in rows.items():
            if label not in best or row[2] < best[label][2]:
                best[label] = row + (eps,)
    T = model.T
    print(f"\n{name}: T = {T}, S = {args.S}, B = {args.B}, h = 2 eps / T, eps grid {args.eps}, {args.chains} chains")
    names = [str(n) for n in getattr(model, "param_names", range(model.dim))]
    print(f"{'method':>10} {'eps':>7} {'iters':>7} {'time s':>7} {'log10 KSD':>10} " + " ".join(f"{n:>14}" for n in names))
    for label, (n_iter, wall, total, per, mean, eps) in best.items():
        print(f"{label:>10} {eps:7.3g} {n_iter:7d} {wall:7.1f} {math.log10(total):10.3f} " + " ".join(f"{math.log10(p):14.3f}" for p in per))
    print(f"{'':>10} posterior means: " + "; ".join(f"{k}: {np.array2string(v[4], precision=3)}" for k, v in best.items()))
    return best


def run_one(model, init, method, args, rng_seed, eps):
    T = model.T
    h = 2 * eps / T
    opts = dict(method=method, n_particles=args.particles) if method == "particle" else {}
    configs = {
        "Full": ("full", {}) if method == "exact" else ("buffered", dict(subsequence_length=T, buffer=0, **opts)),
        "No Buffer": ("buffered", dict(subsequence_length=args.S, buffer=0, **opts)),
        "Buffer": ("buffered", dict(subsequence_length=args.S, buffer=args.B, **opts)),
    }
    rows = {}
    for label, (est, eopts) in configs.items():
        # a pilot run measures the cost of an iteration; the run then fills the time budget
        t0 = time.perf_counter()
        sgmc.sample(model, "sgld", est, step_size=h, n_iter=5, chains=args.chains, init=init, rng=rng_seed,
                    progress=False, estimator_options=eopts)
        per_iter = (time.perf_counter() - t0) / 5
        n_iter = int(min(args.max_iter, max(args.min_iter, args.seconds / per_iter)))
        t0 = time.perf_counter()
        tr = sgmc.sample(model, "sgld", est, step_size=h, n_iter=n_iter, burn_in=n_iter // 2, chains=args.chains,
                         init=init, rng=rng_seed, progress=False, estimator_options=eopts)
        wall = time.perf_counter() - t0
        draws = tr.draws[:, :: max(1, tr.draws.shape[1] // args.keep), :]
        flat = draws.reshape(-1, model.dim)
        sc = scores_at(model, flat, method, args.particles * 4, backends.default_rng(rng_seed + 1))
        total = float(ksd(flat, sc))
        per = [float(ksd(flat[:, j : j + 1], sc[:, j : j + 1])) for j in range(model.dim)]
        rows[label] = (n_iter, wall, total, per, flat.mean(axis=0))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", type=int, default=1000)
    ap.add_argument("--long", action="store_true", help="T = 10^6 for the simulated problems")
    ap.add_argument("--S", type=int, default=20)
    ap.add_argument("--B", type=int, default=10)
    ap.add_argument("--eps", type=float, nargs="+", default=[0.1], help="step-size grid (thesis: 1 0.1 0.01 0.001)")
    ap.add_argument("--chains", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=20.0, help="wall-clock budget per method")
    ap.add_argument("--max-iter", type=int, default=20000)
    ap.add_argument("--min-iter", type=int, default=50)
    ap.add_argument("--keep", type=int, default=200, help="draws per chain used for the KSD")
    ap.add_argument("--particles", type=int, default=200)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--results", default="ssm_ksd_table",
                    help="results file docs/results/NAME.json (default ssm_ksd_table; 'none' writes nothing)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "figures", "ssm_ksd_table.png"))
    args = ap.parse_args(argv)
    if args.quick:
        args.seconds, args.keep, args.chains = 3.0, 50, 3
    T = 10**6 if args.long else args.T
    problems = {"LGSSM (simulated)": lgssm_problem(T, 0)}
    if args.long:
        args.keep = min(args.keep, 20)
        args.min_iter = min(args.min_iter, 10)
    else:
        try:
            problems["Gaussian HMM (DM/USD)"] = hmm_exchange_problem(T, 0)
        except ImportError as exc:
            print(f"skipping the exchange-rate problem: {exc}")
    problems.update(particle_problems(T, 0))
    results = {}
    for name, (model, init, method) in problems.items():
        results[name] = run(name, model, init, method, args, 1)
    if args.results != "none":
        body = [[name, label, int(r[0]), float(r[1]), math.log10(r[2])]
                for name, rows in results.items() for label, r in rows.items()]
        table = {"columns": ["problem", "method", "iterations", "wall s", "log10 KSD (total)"], "rows": body,
                 "formats": [None, None, None, ".1f", ".2f"],
                 "notes": f"{args.chains} chains, {args.seconds:g} s of sampling per method, step-size grid eps in "
                          f"{args.eps}, the best per method; S = {args.S}, B = {args.B}."}
        print("wrote", write_results(args.results, {"ksd": table}, extra={"settings": vars(args)}))
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return results
    fig = Figure(figsize=(4 * len(results), 3.2))
    FigureCanvasAgg(fig)
    for i, (name, rows) in enumerate(results.items()):
        ax = fig.add_subplot(1, len(results), i + 1)
        labels = list(rows)
        ax.bar(labels, [math.log10(rows[k][2]) for k in labels], color=["C0", "C1", "C2"])
        ax.set(title=name, ylabel="log10 KSD")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"figure: {args.out}")
    return results


if __name__ == "__main__":
    main()
