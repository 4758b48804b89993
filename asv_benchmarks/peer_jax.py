"""SGLD and SGLD-CV on logistic regression: sgmc against blackjax, SGMCMCJax and posteriors, in one run.

Every implementation does the same work per iteration and chain: draw ``n`` indices WITH replacement,
gather those rows of ``X`` and ``y``, evaluate the likelihood gradient there (SGLD-CV: at the position
and at the centre, from the same rows), add the N(0, 10 I) prior gradient and take the Langevin step
``theta + (h/2) g + sqrt(h) z``. All read the same data (float64, ``N = 10^5``) and, for SGLD-CV, the
same centre (the posterior mode, found here by Newton's method). The JAX peers run a jit-compiled
``lax.scan`` over the iterations (``vmap`` over chains); their compile time is measured apart (first
call minus a steady call of the same length) and left out of the per-iteration figures. posteriors
(PyTorch) runs a Python loop over ``posteriors.sgmcmc.sgld``; it has no control-variate estimator, so
its SGLD-CV cell is empty. sgmc keeps every draw (``(chains, n_iter, d)``); the JAX peers keep every
draw too (the scan's stacked output).

SGMCMCJax 0.2.13 needs ``jax.experimental.host_callback`` (gone from JAX 0.5), so it runs in a virtual
environment of its own as a child process that reads the same data from a ``.npy`` file and times a
run whenever this process asks, so the rounds stay interleaved. Make that environment with::

    python -m venv build/venv-sgmcmcjax
    build/venv-sgmcmcjax/bin/pip install sgmcmcjax==0.2.13 jax==0.4.30 jaxlib==0.4.30 "numpy<2" "scipy<1.14"

and pass ``--sgmcmcjax-python build/venv-sgmcmcjax/bin/python`` (or set ``SGMCMCJAX_PYTHON``). The other
peers come from the ``bench`` extra (``pip install -e .[bench]``).

Every contender runs on the same cores (``--cores``, default core 1): the process pins itself with
``os.sched_setaffinity`` before NumPy or JAX start a thread, sets every library's one-thread switch
(``XLA_FLAGS``, ``OMP_NUM_THREADS``, ...), starts the SGMCMCJax child under ``taskset``, and before the
timed rounds checks that no thread of either process may run elsewhere (``_pinning.verify``: JAX
starts thread pools whatever its flags say, so the pinning is what holds it to the cores). Within each
repetition the implementations run one after another, in an order that turns every round; the medians
of CPU time (``time.process_time``) and wall time are reported as microseconds per chain-iteration and
as ratios sgmc / peer, with the load average of each round, and written to
``docs/results/peer_jax.json`` (``--results``), which docs/performance.md renders. ``--compare-with MODULE`` adds another importable copy of sgmc (an
older commit's package, renamed) to the rotation.

``--what floor`` times sgmc alone: the default minibatch draw (without replacement) against the draw
with replacement, SGLD-CV against SGLD, and SGLD with the compiled paths (the fused blocks of
:mod:`sgmc.samplers._fused` among them) switched off against on, each as a ratio from interleaved
rounds of whole runs (each run's set-up included).

``--rows jax`` (:mod:`_peer_jax_backend`) times sgmc on JAX arrays (``backend="jax"``: compiled blocks
of the sampler's ``step``, 64-bit, minibatches drawn with replacement) against blackjax and sgmc's own
NumPy path in the same interleaved rounds, and writes ``docs/results/peer_jax_backend.json``. Each
``sample`` call compiles its blocks; the compile's wall and CPU seconds are measured around the block
compiler, left out of the per-iteration figures and reported apart, beside ``trace.info["compile_time"]``.
``--quick`` shortens any mode to 1000 iterations and 3 rounds (a few minutes for ``--rows jax``).

Usage (from the repository root)::

    python asv_benchmarks/peer_jax.py --sgmcmcjax-python build/venv-sgmcmcjax/bin/python
    python asv_benchmarks/peer_jax.py --what floor --dims 10 100 --chains 1
    python asv_benchmarks/peer_jax.py --rows jax            # --quick: a few minutes
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pinning import Clock, child_command, load, pin, verify  # noqa: E402

CORES = pin()  # before NumPy and JAX start their threads

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from docs._results import write_results  # noqa: E402  (imported before measuring: it records the load at start)

import numpy as np  # noqa: E402

WORKER = len(sys.argv) > 1 and sys.argv[1] == "--worker"
if WORKER:  # SGMCMCJax's environment has no sgmc: the workload's constants come on the command line
    BATCH, PRIOR_VAR, STEP_SIZE = int(sys.argv[5]), float(sys.argv[6]), float(sys.argv[7])
else:
    # The same workload as peer_sgld.py (sizes, prior, step, data), imported from beside this script.
    from peer_sgld import BATCH, N_DATA, PRIOR_VAR, STEP_SIZE, make_data  # noqa: E402


def mode(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The posterior mode by Newton's method (the control variates' centre, shared by all)."""
    theta = np.zeros(X.shape[1])
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-X @ theta))
        g = X.T @ (y - p) - theta / PRIOR_VAR
        H = (X * (p * (1 - p))[:, None]).T @ X + np.eye(X.shape[1]) / PRIOR_VAR
        step = np.linalg.solve(H, g)
        theta = theta + step
        if np.max(np.abs(step)) < 1e-12:
            break
    return theta


# -- sgmc ------------------------------------------------------------------------------------------------
def sgmc_runner(mod, X, y, centre, method, chains, replace=True):
    model = mod.models.LogisticRegression(X, y, prior_var=PRIOR_VAR)
    est_mod = mod.estimators
    if method == "sgld":
        est = est_mod.Minibatch(model, BATCH, replace=replace)
    else:
        est = est_mod.ControlVariate(model, BATCH, centre=centre, replace=replace)

    def run(n_iter, seed):
        return mod.sample(model, "sgld", est, step_size=STEP_SIZE, n_iter=n_iter, chains=chains,
                          group_size=chains, rng=seed, progress=False).draws

    return run


# -- JAX (blackjax; the same code serves SGMCMCJax's child process for the data set-up) ------------------
def _jax_loglik(jnp):
    def loglik(theta, xy):
        x, yi = xy
        eta = jnp.dot(x, theta)
        return yi * eta - jnp.logaddexp(0.0, eta)

    def logprior(theta):
        return -0.5 * jnp.sum(theta * theta) / PRIOR_VAR

    return loglik, logprior


def blackjax_runner(X, y, centre, method, chains, n_iter):
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    import blackjax
    from blackjax.sgmcmc import gradients

    Xj, yj = jnp.asarray(X), jnp.asarray(y)
    loglik, logprior = _jax_loglik(jnp)
    grad_fn = gradients.grad_estimator(logprior, loglik, X.shape[0])
    if method == "sgldcv":
        grad_fn = gradients.control_variates(grad_fn, jnp.asarray(centre), (Xj, yj))
    sgld = blackjax.sgld(grad_fn)
    # blackjax's SGLD step is theta + h g + sqrt(2h) z: half of sgmc's step size gives the same chain
    h = 0.5 * STEP_SIZE

    def one_chain(key, theta0):
        def body(theta, k):
            kb, ks = jax.random.split(k)
            idx = jax.random.randint(kb, (BATCH,), 0, X.shape[0])
            theta = sgld.step(ks, theta, (Xj[idx], yj[idx]), h)
            return theta, theta

        _, draws = jax.lax.scan(body, theta0, jax.random.split(key, n_iter))
        return draws

    run_all = jax.jit(jax.vmap(one_chain))

    def run(seed):
        key = jax.random.PRNGKey(seed)
        k0, k1 = jax.random.split(key)
        theta0 = jax.random.normal(k0, (chains, X.shape[1]), dtype=jnp.float64)
        return run_all(jax.random.split(k1, chains), theta0).block_until_ready()

    return run


def posteriors_runner(X, y, chains):
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import posteriors

    torch.set_default_dtype(torch.float64)
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    scale = X.shape[0] / BATCH

    def log_post(theta, batch):
        xb, yb = batch                                    # (chains, n, d), (chains, n)
        eta = torch.einsum("cnd,cd->cn", xb, theta)
        ll = torch.sum(yb * eta - torch.nn.functional.softplus(eta))
        return scale * ll - 0.5 * torch.sum(theta * theta) / PRIOR_VAR, torch.tensor([])

    # posteriors' SGLD step is theta + lr g + sqrt(2 lr) z: lr = h / 2 gives sgmc's chain
    transform = posteriors.sgmcmc.sgld.build(log_post, lr=0.5 * STEP_SIZE)

    def run(n_iter, seed):
        gen = torch.Generator().manual_seed(seed)
        torch.manual_seed(seed)
        state = transform.init(torch.randn(chains, X.shape[1], generator=gen))
        out = torch.empty(chains, n_iter, X.shape[1])
        for k in range(n_iter):
            idx = torch.randint(0, X.shape[0], (chains, BATCH), generator=gen)
            state, _ = transform.update(state, (Xt[idx], yt[idx]), inplace=True)
            out[:, k, :] = state.params
        return out

    return run


# -- SGMCMCJax in its own environment ------------------------------------------------------------------
def sgmcmcjax_worker() -> int:
    """Child process: read the data, then answer ``run METHOD CHAINS ITERS SEED`` lines with seconds."""
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    from sgmcmcjax.kernels import build_sgld_kernel, build_sgldCV_kernel

    X = jnp.asarray(np.load(sys.argv[2]))
    y = jnp.asarray(np.load(sys.argv[3]))
    centre = jnp.asarray(np.load(sys.argv[4]))
    loglik, logprior = _jax_loglik(jnp)

    def ll(theta, x, yi):
        return loglik(theta, (x, yi))

    cache = {}

    def get(method, chains, n_iter):
        key = (method, chains, n_iter)
        if key not in cache:
            # SGMCMCJax's SGLD step is theta + (dt/2) g + sqrt(dt) z, like sgmc's
            if method == "sgld":
                init_fn, kernel, get_params = build_sgld_kernel(STEP_SIZE, ll, logprior, (X, y), BATCH)
            else:
                init_fn, kernel, get_params = build_sgldCV_kernel(STEP_SIZE, ll, logprior, (X, y), BATCH,
                                                                  centre)

            def one_chain(key, theta0):
                state = init_fn(key, theta0)

                def body(state, i_k):
                    i, k = i_k
                    state = kernel(i, k, state)
                    return state, get_params(state)

                _, draws = jax.lax.scan(body, state, (jnp.arange(n_iter), jax.random.split(key, n_iter)))
                return draws

            cache[key] = jax.jit(jax.vmap(one_chain))
        return cache[key]

    for line in sys.stdin:
        parts = line.split()
        if not parts:
            continue
        method, chains, n_iter, seed = parts[1], int(parts[2]), int(parts[3]), int(parts[4])
        fn = get(method, chains, n_iter)
        t0, c0 = time.perf_counter(), time.process_time()
        k0, k1 = jax.random.split(jax.random.PRNGKey(seed))
        theta0 = jax.random.normal(k0, (chains, X.shape[1]), dtype=jnp.float64)
        fn(jax.random.split(k1, chains), theta0).block_until_ready()
        print(f"{time.perf_counter() - t0!r} {time.process_time() - c0!r}", flush=True)
    return 0


class SGMCMCJaxClient:
    def __init__(self, python, X, y, centre, tmp):
        paths = []
        for name, a in (("X", X), ("y", y), ("centre", centre)):
            p = os.path.join(tmp, f"{name}.npy")
            np.save(p, a)
            paths.append(p)
        env = dict(os.environ, JAX_PLATFORMS="cpu")  # the one-thread switches and cores, inherited
        env.pop("PYTHONPATH", None)
        cmd = [python, os.path.abspath(__file__), "--worker", *paths, str(BATCH), repr(PRIOR_VAR), repr(STEP_SIZE)]
        self.proc = subprocess.Popen(child_command(cmd, CORES), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env)

    def verify(self) -> dict:
        """The child's threads, checked from here (its environment may lack threadpoolctl)."""
        return verify(CORES, pid=str(self.proc.pid))

    def time(self, method, chains, n_iter, seed) -> tuple[float, float]:
        """(wall, CPU) seconds of one run in the child."""
        self.proc.stdin.write(f"run {method} {chains} {n_iter} {seed}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            msg = "the SGMCMCJax child process ended; run it by hand to see why"
            raise RuntimeError(msg)
        wall, cpu = line.split()
        return float(wall), float(cpu)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


# -- the measurement -----------------------------------------------------------------------------------
def _rounds(impls, reps):
    """impls: name -> callable(seed) returning (wall, cpu) seconds; interleaved, the order turning each round.

    Returns ``{name: {"wall": [...], "cpu": [...]}}`` and the load average before each round.
    """
    names = list(impls)
    times = {k: {"wall": [], "cpu": []} for k in names}
    loads = []
    for rep in range(reps):
        loads.append(load())
        shift = rep % len(names)
        order = names[shift:] + names[:shift]
        if rep % 2:
            order = order[::-1]
        for k in order:
            wall, cpu = impls[k](rep + 1)
            times[k]["wall"].append(wall)
            times[k]["cpu"].append(cpu)
    return times, loads


def _timed(fn):
    def t(seed):
        with Clock() as c:
            fn(seed)
        return c.wall, c.cpu

    return t


def _timed_after_compile(fn):
    """``(_timed(fn), compile seconds)``: ``fn(0)`` is called twice, and its first call less its second compiled."""
    t0 = time.perf_counter()
    fn(0)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    fn(0)
    return _timed(fn), first - (time.perf_counter() - t0)


def _per(times, n):
    """Medians in microseconds per chain-iteration, for each clock."""
    return {k: {clk: statistics.median(v[clk]) / n * 1e6 for clk in ("wall", "cpu")} for k, v in times.items()}


def peers(args) -> tuple[list[dict], list[dict]]:
    import sgmc

    other = importlib.import_module(args.compare_with) if args.compare_with else None
    rows, checks = [], []
    tmp = tempfile.mkdtemp(prefix="sgmc-peer-")
    for dim in args.dims:
        X, y = make_data(N_DATA, dim)
        centre = mode(X, y)
        sj = None
        if args.sgmcmcjax_python:
            sj = SGMCMCJaxClient(args.sgmcmcjax_python, X, y, centre, tmp)
        for method in args.methods:
            for chains in args.chains:
                n_iter = args.iters
                impls, compile_s = {}, {}
                run = sgmc_runner(sgmc, X, y, centre, method, chains)
                run(20, 0)
                impls["sgmc"] = _timed(lambda s, run=run: run(n_iter, s))
                if other is not None:
                    orun = sgmc_runner(other, X, y, centre, method, chains)
                    orun(20, 0)
                    impls["sgmc-before"] = _timed(lambda s, orun=orun: orun(n_iter, s))
                if "blackjax" in args.peers:
                    bj = blackjax_runner(X, y, centre, method, chains, n_iter)
                    impls["blackjax"], compile_s["blackjax"] = _timed_after_compile(bj)
                if sj is not None:
                    first = sj.time(method, chains, n_iter, 0)[0]
                    compile_s["sgmcmcjax"] = first - sj.time(method, chains, n_iter, 0)[0]
                    impls["sgmcmcjax"] = lambda s, m=method, c=chains: sj.time(m, c, n_iter, s)
                if "posteriors" in args.peers and method == "sgld":
                    pr = posteriors_runner(X, y, chains)
                    pr(20, 0)
                    impls["posteriors"] = _timed(lambda s, pr=pr: pr(n_iter, s))
                # every contender is set up (JAX's and torch's pools exist): check where their threads run
                checks.append({"row": f"{method} d={dim} chains={chains}", "this process": verify(CORES),
                               **({"sgmcmcjax": sj.verify()} if sj is not None else {})})
                times, loads = _rounds(impls, args.reps)
                per = _per(times, n_iter * chains)
                row = {"method": method, "dim": dim, "chains": chains, "us_per_chain_iter": per,
                       "compile_s": compile_s, "all_s": times, "load": loads}
                rows.append(row)
                print(f"{method:7s} d={dim:<4d} chains={chains:<3d} "
                      + "  ".join(f"{k} {v['cpu']:7.2f}" for k, v in per.items())
                      + f"  (CPU us/chain-iter; load {statistics.median(loads):.1f})", flush=True)
        if sj is not None:
            sj.close()
    return rows, checks


def floor(args) -> list[dict]:
    """sgmc alone: without/with replacement, and SGLD-CV/SGLD, one chain group."""
    import sgmc

    rows = []
    for dim in args.dims:
        X, y = make_data(N_DATA, dim)
        centre = mode(X, y)
        for chains in args.chains:
            runs = {
                "sgld_with": sgmc_runner(sgmc, X, y, centre, "sgld", chains, replace=True),
                "sgld_without": sgmc_runner(sgmc, X, y, centre, "sgld", chains, replace=False),
                "sgldcv_with": sgmc_runner(sgmc, X, y, centre, "sgldcv", chains, replace=True),
            }
            if args.compare_with:
                other = importlib.import_module(args.compare_with)
                runs["before_sgld_with"] = sgmc_runner(other, X, y, centre, "sgld", chains)
                runs["before_sgldcv_with"] = sgmc_runner(other, X, y, centre, "sgldcv", chains)
            for r in runs.values():
                r(20, 0)
            impls = {k: _timed(lambda s, r=r: r(args.iters, s)) for k, r in runs.items()}
            impls["sgld_with_off"] = _timed(lambda s, r=runs["sgld_with"]: _natives_off(r, args.iters, s))
            times, loads = _rounds(impls, args.reps)
            per = _per(times, args.iters * chains)
            cpu = {k: v["cpu"] for k, v in per.items()}
            row = {"dim": dim, "chains": chains, "us_per_chain_iter": per, "load": loads,
                   "without_over_with": cpu["sgld_without"] / cpu["sgld_with"],
                   "cv_over_sgld": cpu["sgldcv_with"] / cpu["sgld_with"],
                   "off_over_on": cpu["sgld_with_off"] / cpu["sgld_with"]}
            if args.compare_with:
                row["before_cv_over_sgld"] = cpu["before_sgldcv_with"] / cpu["before_sgld_with"]
            rows.append(row)
            print(f"d={dim:<4d} chains={chains:<3d} " + "  ".join(f"{k} {v:7.2f}" for k, v in cpu.items())
                  + f"  without/with {row['without_over_with']:.2f}  CV/SGLD {row['cv_over_sgld']:.2f}",
                  flush=True)
    return rows


PEER_NAMES = {"sgmc-before": "before", "blackjax": "blackjax", "sgmcmcjax": "SGMCMCJax",
              "posteriors": "posteriors"}


def peers_tables(rows) -> dict:
    names = []
    for r in rows:
        for k in r["us_per_chain_iter"]:
            if k not in names:
                names.append(k)
    others = [k for k in names if k != "sgmc"]
    cols = ["method", "d", "chains"] + [f"{PEER_NAMES.get(k, k)} CPU us" for k in names]
    cols += [f"sgmc / {PEER_NAMES.get(k, k)} (CPU)" for k in others]
    cols += [f"sgmc / {PEER_NAMES.get(k, k)} (wall)" for k in others] + ["load"]
    out = []
    for r in rows:
        per = r["us_per_chain_iter"]
        cells = [{"sgld": "SGLD", "sgldcv": "SGLD-CV"}[r["method"]], r["dim"], r["chains"]]
        cells += [per[k]["cpu"] if k in per else None for k in names]
        for clk in ("cpu", "wall"):
            cells += [per["sgmc"][clk] / per[k][clk] if k in per else None for k in others]
        cells.append(f"{min(r['load']):.1f}-{max(r['load']):.1f}")
        out.append(cells)
    formats = [None] * 3 + [".1f"] * len(names) + [".2f"] * (2 * len(others)) + [None]
    return {"peers": {"columns": cols, "rows": out, "formats": formats}}


def _natives_off(run, n_iter, seed):
    """``run`` with the compiled paths (the fused blocks among them) switched off in this process."""
    from sgmc.backends import _numba

    old = _numba.set_enabled(False)
    try:
        return run(n_iter, seed)
    finally:
        _numba.set_enabled(old)


def floor_tables(rows) -> dict:
    cols = ["d", "chains", "SGLD with replacement, CPU us", "without / with replacement", "SGLD-CV / SGLD",
            "compiled paths off / on"]
    out = [[r["dim"], r["chains"], r["us_per_chain_iter"]["sgld_with"]["cpu"], r["without_over_with"],
            r["cv_over_sgld"], r.get("off_over_on")] for r in rows]
    if rows and "before_cv_over_sgld" in rows[0]:
        cols.append("before: SGLD-CV / SGLD")
        for o, r in zip(out, rows):
            o.append(r["before_cv_over_sgld"])
    cols.append("load")
    for o, r in zip(out, rows):
        o.append(f"{min(r['load']):.1f}-{max(r['load']):.1f}")
    return {"floor": {"columns": cols, "rows": out,
                      "formats": [None, None, ".1f"] + [".2f"] * (len(cols) - 4) + [None]}}


def print_table(table) -> None:
    print("\n| " + " | ".join(table["columns"]) + " |")
    print("|" + "---|" * len(table["columns"]))
    for row in table["rows"]:
        print("| " + " | ".join(f"{v:.2f}" if isinstance(v, float) else str(v) for v in row) + " |")


def main(argv=None) -> int:
    if WORKER:
        return sgmcmcjax_worker()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--what", choices=("peers", "floor"), default="peers")
    ap.add_argument("--rows", choices=("peers", "jax"), default="peers",
                    help="with --what peers: the peer rows (default), or 'jax': sgmc with backend='jax' "
                         "against blackjax and sgmc's NumPy path (docs/results/peer_jax_backend.json)")
    ap.add_argument("--quick", action="store_true",
                    help="short settings (1000 iterations, 3 rounds) unless --iters/--reps are given")
    ap.add_argument("--iters", type=int, default=None, help="iterations per run (default 2000; --quick 1000)")
    ap.add_argument("--reps", type=int, default=None, help="interleaved repetitions (default 5; --quick 3)")
    ap.add_argument("--dims", type=int, nargs="+", default=[10, 100])
    ap.add_argument("--chains", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--methods", nargs="+", choices=("sgld", "sgldcv"), default=["sgld", "sgldcv"])
    ap.add_argument("--peers", nargs="+", default=["blackjax", "posteriors"],
                    help="in-process peers (blackjax, posteriors); SGMCMCJax joins with --sgmcmcjax-python")
    ap.add_argument("--sgmcmcjax-python", default=os.environ.get("SGMCMCJAX_PYTHON"),
                    help="python of a venv with sgmcmcjax==0.2.13, jax==0.4.30 (or SGMCMCJAX_PYTHON)")
    ap.add_argument("--cores", default="1", help="the cores every contender runs on (default: core 1)")
    ap.add_argument("--compare-with", metavar="MODULE",
                    help="also time another importable copy of sgmc (e.g. an older commit's package "
                         "renamed to sgmc_old on PYTHONPATH)")
    ap.add_argument("--results", help="name of the results file docs/results/NAME.json "
                                      "(default peer_jax or peer_jax_floor; 'none' writes nothing)")
    args = ap.parse_args(argv)
    if args.iters is None:
        args.iters = 1000 if args.quick else 2000
    if args.reps is None:
        args.reps = 3 if args.quick else 5
    import sgmc

    print(f"# sgmc {sgmc.__version__}, numpy {np.__version__}, cores {sorted(CORES)} for every contender; "
          f"logistic regression N={N_DATA}, n={BATCH} drawn with replacement, h={STEP_SIZE}, float64, "
          f"{args.iters} iterations, {args.reps} interleaved rounds, medians")
    settings = {"iters": args.iters, "reps": args.reps, "N": N_DATA, "n": BATCH, "step_size": STEP_SIZE,
                "cores": sorted(CORES), "compare_with": args.compare_with}
    if args.what == "floor":
        rows = floor(args)
        tables, extra = floor_tables(rows), {"settings": settings, "rows": rows,
                                             "threads": verify(CORES)}
        name = args.results or "peer_jax_floor"
    elif args.rows == "jax":
        import _peer_jax_backend as jb

        rows = jb.jax_rows(args, sys.modules[__name__])
        tables, extra = jb.jax_tables(rows), {"settings": settings, "rows": rows}
        name = args.results or "peer_jax_backend"
    else:
        rows, checks = peers(args)
        tables, extra = peers_tables(rows), {"settings": settings, "rows": rows, "threads": checks}
        name = args.results or "peer_jax"
    print_table(next(iter(tables.values())))
    if name != "none":
        if args.sgmcmcjax_python:
            out = subprocess.run([args.sgmcmcjax_python, "-c", "import importlib.metadata as m; "
                                  "print(m.version('sgmcmcjax'), m.version('jax'))"],
                                 capture_output=True, text=True)
            extra["sgmcmcjax_env"] = out.stdout.strip()
        path = write_results(name, tables, extra=extra)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
