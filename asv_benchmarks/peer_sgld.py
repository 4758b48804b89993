"""SGLD on logistic regression: ``sgmc.sample`` against a hand-written NumPy loop, in one run.

Both implementations do the same work per iteration and chain: draw a minibatch of ``n`` indices
without replacement (each chain its own), gather those rows of ``X`` and ``y``, compute
``eta = X_b theta``, the sigmoid with one ``exp`` per datum, the weighted sum ``X_b^T (y_b - sigmoid)``,
add the N(0, 10 I) prior gradient, take the step ``theta + (h/2) g + sqrt(h) z`` and store ``theta`` in a
preallocated ``(chains, n_iter, d)`` array. The hand-written loop has no validation, no statistics and
no divergence check; it draws its minibatches whichever way is fastest in NumPy for the chain count
(``Generator.choice(..., replace=False)`` per chain, or one vectorised draw for all chains, chosen by a
timing pass before the measurement and reported).

Before timing (unless ``--no-check``), the hand-written loop runs on sgmc's own random streams and
must reproduce ``sgmc.sample`` draw for draw, so both sides provably compute the same thing.

The implementations alternate within every repetition (``sgmc, hand`` then ``hand, sgmc``; a third,
``--compare-with`` another copy of sgmc, joins the rotation) and the medians of CPU time and of wall
time are reported, so machine noise affects them alike. The process runs on the cores of ``--cores``
(default core 1) with one BLAS thread, checked before timing, and writes
``docs/results/peer_sgld.json`` (``--results``), which docs/performance.md renders.

Usage (from the repository root)::

    python asv_benchmarks/peer_sgld.py                     # d in {10, 100}, chains in {1, 32}
    python asv_benchmarks/peer_sgld.py --iters 500 --reps 3 --dims 10 --chains 1 32
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pinning import Clock, load, pin, verify  # noqa: E402

if __name__ == "__main__":
    CORES = pin()  # before NumPy starts its BLAS threads

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from docs._results import write_results  # noqa: E402  (imported before measuring: it records the load at start)

import numpy as np  # noqa: E402

import sgmc
from sgmc.models import LogisticRegression

N_DATA = 100_000
BATCH = 1_000
PRIOR_VAR = 10.0
STEP_SIZE = 1e-5


def make_data(n_data: int, dim: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Standard normal features and labels from a logistic model with theta ~ N(0, I / dim)."""
    r = np.random.default_rng(seed)
    X = r.standard_normal((n_data, dim))
    theta = r.standard_normal(dim) / math.sqrt(dim)
    y = (r.random(n_data) < 1.0 / (1.0 + np.exp(-X @ theta))).astype(np.float64)
    return X, y


# -- minibatch draws for the hand-written loop ------------------------------------------------------
def draw_choice(gen: np.random.Generator, n_data: int, n: int, chains: int) -> np.ndarray:
    """One ``Generator.choice`` without replacement per chain (one call into compiled code each)."""
    return np.stack([gen.choice(n_data, n, replace=False, shuffle=False) for _ in range(chains)])


def draw_vectorised(gen: np.random.Generator, n_data: int, n: int, chains: int) -> np.ndarray:
    """All chains at once: draw a few more than ``n`` with replacement, keep the first ``n`` distinct.

    Only valid for ``n`` much smaller than ``n_data``; redraws the (rare) rows that come up short.
    """
    dups = n * n / (2.0 * n_data)
    m = n + int(math.ceil(2.0 * dups + 8.0 * math.sqrt(dups + 1.0) + 4.0))
    bits = (m - 1).bit_length()
    pos = np.arange(m, dtype=np.int64)
    out = np.empty((chains, n), dtype=np.int64)
    rows = np.arange(chains)
    while rows.size:
        b = rows.size
        d = gen.integers(0, n_data, size=(b, m))
        key = np.sort((d << bits) | pos, axis=1)       # by value, then by draw position
        val = key >> bits
        later = np.zeros((b, m), dtype=bool)           # later copies of a value, in sorted order
        later[:, 1:] = val[:, 1:] == val[:, :-1]
        r, c = np.nonzero(later)
        keep = np.ones((b, m), dtype=bool)
        keep[r, key[r, c] & ((1 << bits) - 1)] = False
        counts = m - np.bincount(r, minlength=b)
        good = counts >= n
        kept = d[keep]
        start = np.cumsum(counts) - counts
        out[rows[good]] = kept[start[good][:, None] + pos[:n]]
        rows = rows[~good]
    return out


def draw_sgmc_stream(gen, n_data, n, chains):
    """sgmc's own subset draw on ``gen`` (used only by the equivalence check)."""
    from sgmc._sampling import subsample
    from sgmc.backends import default_rng

    return subsample(default_rng(gen), n_data, n, chains)


DRAWS = {"choice": draw_choice, "vectorised": draw_vectorised}


# -- the hand-written loop ----------------------------------------------------------------------------
def hand_sgld(X, y, n, chains, n_iter, h, seed, draw, *, streams=None):
    """Plain NumPy SGLD for logistic regression with minibatches drawn by ``draw``.

    ``streams=(init_gen, run_gen)`` replaces the generators (the equivalence check passes sgmc's).
    """
    n_data, dim = X.shape
    if streams is None:
        init_gen = run_gen = np.random.default_rng(seed)
    else:
        init_gen, run_gen = streams
    scale = n_data / n
    half_h = 0.5 * h
    sqrt_h = math.sqrt(h)
    draws = np.empty((chains, n_iter, dim))

    def grad(theta):
        idx = draw(run_gen, n_data, n, chains)
        Xb = np.take(X, idx, axis=0)                      # (chains, n, dim)
        eta = np.matmul(Xb, theta[:, :, None])[:, :, 0]   # (chains, n)
        e = np.exp(-np.abs(eta))                          # one exp per datum
        inv = 1.0 / (1.0 + e)
        r = np.take(y, idx) - np.where(eta >= 0, inv, e * inv)
        return -theta / PRIOR_VAR + scale * np.matmul(r[:, None, :], Xb)[:, 0, :]

    theta = init_gen.standard_normal((chains, dim))
    g = grad(theta)
    for k in range(n_iter):
        theta = theta + half_h * g + sqrt_h * run_gen.standard_normal((chains, dim))
        g = grad(theta)
        draws[:, k, :] = theta
    return draws


def run_sgmc(model, n, chains, n_iter, h, seed):
    # one group of chains, like the hand-written loop (one random stream, one vectorised array)
    return sgmc.sample(model, "sgld", "minibatch", step_size=h, batch_size=n, n_iter=n_iter,
                       chains=chains, group_size=chains, rng=seed, progress=False).draws


def check_equivalence(X, y, model, chains, n_iter=50, seed=3) -> float:
    """Run the hand-written loop on sgmc's random streams; return the largest draw difference."""
    init_ss, _, run_ss = np.random.SeedSequence(seed).spawn(3)
    (group_ss,) = run_ss.spawn(1)  # the one chain group's stream
    streams = (np.random.Generator(np.random.PCG64(init_ss)), np.random.Generator(np.random.PCG64(group_ss)))
    ours = run_sgmc(model, BATCH, chains, n_iter, STEP_SIZE, seed)
    hand = hand_sgld(X, y, BATCH, chains, n_iter, STEP_SIZE, seed, draw_sgmc_stream, streams=streams)
    return float(np.max(np.abs(np.asarray(ours) - hand)))


def pick_draw(n_data, n, chains, trials=40) -> str:
    """The faster of the two NumPy minibatch draws for this chain count (alternating, medians)."""
    gen = np.random.default_rng(0)
    times = {k: [] for k in DRAWS}
    for t in range(trials):
        for name in (list(DRAWS) if t % 2 == 0 else list(DRAWS)[::-1]):
            t0 = time.perf_counter()
            DRAWS[name](gen, n_data, n, chains)
            times[name].append(time.perf_counter() - t0)
    return min(times, key=lambda k: statistics.median(times[k]))


def profile(args) -> int:
    """Print where one ``sgmc.sample`` run spends its time, per case."""
    import cProfile
    import pstats

    for dim in args.dims:
        X, y = make_data(N_DATA, dim)
        model = LogisticRegression(X, y, prior_var=PRIOR_VAR)
        for chains in args.chains:
            run_sgmc(model, BATCH, chains, 20, STEP_SIZE, 0)
            prof = cProfile.Profile()
            prof.runcall(run_sgmc, model, BATCH, chains, args.iters, STEP_SIZE, 0)
            print(f"\n## d={dim} chains={chains}: {args.iters} iterations")
            pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(12)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iters", type=int, default=2000, help="SGLD iterations per run (default 2000)")
    ap.add_argument("--reps", type=int, default=5, help="alternating repetitions (default 5)")
    ap.add_argument("--dims", type=int, nargs="+", default=[10, 100])
    ap.add_argument("--chains", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--cores", default="1", help="the cores both implementations run on (default: core 1)")
    ap.add_argument("--compare-with", metavar="MODULE",
                    help="also time another importable copy of sgmc (e.g. an older commit's package "
                         "renamed to sgmc_old on PYTHONPATH) in the same alternation")
    ap.add_argument("--no-check", dest="check", action="store_false", help="skip the equivalence check")
    ap.add_argument("--profile", action="store_true",
                    help="instead of timing, profile one sgmc.sample run per case (cProfile, by own time)")
    ap.add_argument("--results", default="peer_sgld",
                    help="results file docs/results/NAME.json (default peer_sgld; 'none' writes nothing)")
    args = ap.parse_args(argv)
    other = importlib.import_module(args.compare_with) if args.compare_with else None

    print(f"# sgmc {sgmc.__version__}, numpy {np.__version__}, cores {sorted(CORES)}")
    if args.profile:
        print(f"# logistic regression N={N_DATA}, n={BATCH}, h={STEP_SIZE}: cProfile of sgmc.sample")
        return profile(args)
    print(f"# logistic regression N={N_DATA}, n={BATCH}, h={STEP_SIZE}, {args.iters} iterations, "
          f"{args.reps} alternating repetitions, medians of CPU and wall time")
    rows = []
    for dim in args.dims:
        X, y = make_data(N_DATA, dim)
        model = LogisticRegression(X, y, prior_var=PRIOR_VAR)
        other_model = other.models.LogisticRegression(X, y, prior_var=PRIOR_VAR) if other else None
        for chains in args.chains:
            if args.check:
                diff = check_equivalence(X, y, model, chains)
                if not diff <= 1e-9:
                    print(f"hand-written loop and sgmc disagree (max |diff| = {diff:g})", file=sys.stderr)
                    return 1
            draw_name = pick_draw(N_DATA, BATCH, chains)
            draw = DRAWS[draw_name]
            impls = {
                "sgmc": lambda it, seed: run_sgmc(model, BATCH, chains, it, STEP_SIZE, seed),
                "hand": lambda it, seed: hand_sgld(X, y, BATCH, chains, it, STEP_SIZE, seed, draw),
            }
            if other:
                impls["other"] = lambda it, seed: other.sample(
                    other_model, "sgld", "minibatch", step_size=STEP_SIZE, batch_size=BATCH, n_iter=it,
                    chains=chains, rng=seed, progress=False)
            for run in impls.values():  # warm-up
                run(20, 0)
            threads = verify(CORES)
            times = {k: {"wall": [], "cpu": []} for k in impls}
            loads = []
            for rep in range(args.reps):
                loads.append(load())
                order = list(impls) if rep % 2 == 0 else list(impls)[::-1]
                for which in order:
                    with Clock() as c:
                        impls[which](args.iters, rep)
                    times[which]["wall"].append(c.wall)
                    times[which]["cpu"].append(c.cpu)
            per = {k: {clk: statistics.median(v[clk]) / (args.iters * chains) * 1e6 for clk in v}
                   for k, v in times.items()}
            row = {"dim": dim, "chains": chains, "us": per, "hand_draw": draw_name, "all_s": times,
                   "load": loads, "threads": threads,
                   "ratio": {clk: per["sgmc"][clk] / per["hand"][clk] for clk in ("cpu", "wall")}}
            line = (f"d={dim:<4d} chains={chains:<3d} sgmc {per['sgmc']['cpu']:8.2f} CPU us/chain-iter   "
                    f"hand-written {per['hand']['cpu']:8.2f} ({draw_name} draw)   "
                    f"ratio {row['ratio']['cpu']:.2f} (wall {row['ratio']['wall']:.2f})")
            if other:
                row["ratio_other"] = {clk: per["sgmc"][clk] / per["other"][clk] for clk in ("cpu", "wall")}
                line += f"   {args.compare_with} {per['other']['cpu']:8.2f} (sgmc / it {row['ratio_other']['cpu']:.2f})"
            if args.check:
                row["check_max_abs_diff"] = diff
            rows.append(row)
            print(line, flush=True)

    cols = ["d", "chains", "sgmc CPU us/chain-iter", "hand-written CPU us/chain-iter", "hand-written draw",
            "sgmc / hand-written (CPU)", "sgmc / hand-written (wall)"]
    if other:
        cols += [f"{args.compare_with} CPU us/chain-iter", f"sgmc / {args.compare_with} (CPU)"]
    cols.append("load")
    table = []
    for r in rows:
        cells = [r["dim"], r["chains"], r["us"]["sgmc"]["cpu"], r["us"]["hand"]["cpu"], r["hand_draw"],
                 r["ratio"]["cpu"], r["ratio"]["wall"]]
        if other:
            cells += [r["us"]["other"]["cpu"], r["ratio_other"]["cpu"]]
        table.append(cells + [f"{min(r['load']):.1f}-{max(r['load']):.1f}"])
    scaling = []
    for dim in args.dims:
        one = [r for r in rows if r["dim"] == dim and r["chains"] == 1]
        for r in rows:
            if one and r["dim"] == dim and r["chains"] > 1:
                scaling.append([dim, r["chains"], r["us"]["sgmc"]["cpu"] * r["chains"] / one[0]["us"]["sgmc"]["cpu"],
                                r["us"]["hand"]["cpu"] * r["chains"] / one[0]["us"]["hand"]["cpu"]])
    tables = {"vs_numpy": {"columns": cols, "rows": table,
                           "formats": [None, None, ".1f", ".1f", None, ".2f", ".2f"]
                           + ([".1f", ".2f"] if other else []) + [None]}}
    if scaling:
        tables["scaling"] = {"columns": ["d", "chains C", "sgmc: C chains / 1 chain (CPU time per iteration)",
                                         "hand-written: C chains / 1 chain"],
                             "rows": scaling, "formats": [None, None, ".1f", ".1f"]}
    for t in tables.values():
        print("\n| " + " | ".join(t["columns"]) + " |")
        for row in t["rows"]:
            print("| " + " | ".join(f"{v:.2f}" if isinstance(v, float) else str(v) for v in row) + " |")
    if args.results != "none":
        settings = {"iters": args.iters, "reps": args.reps, "N": N_DATA, "n": BATCH, "step_size": STEP_SIZE,
                    "cores": sorted(CORES), "compare_with": args.compare_with}
        print("wrote", write_results(args.results, tables, extra={"settings": settings, "rows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
