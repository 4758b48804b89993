"""The compiled CPU paths (Numba) against their array-API twins, and 32 SGLD chains against blackjax, in one run.

Every comparison alternates its contenders within each repetition (A, B, then B, A, ...) and reports
medians of CPU time and of wall time, so machine noise falls on both alike. Everything runs on the
cores of ``--cores`` (default: core 1, one thread for BLAS, Numba and XLA; checked before timing), and
the tables go to ``docs/results/native_cpu.json``, which docs/performance.md renders. The natives are switched in process with
``sgmc.backends._numba.set_enabled``; the twins are the library's own array-API code.

* ``glm``: the GLM minibatch gradient sum (logistic, N = 10^5, n = 1000 rows per chain, a fresh index
  set per call), 1 chain at d = 10, 32 chains at d = 10 and 100, and the two-point control-variate form
  (1 and 32 chains at d = 10 and 100, 1 chain at d = 32; the library runs the loop from d = 32 on).
* ``sgld32``: ``sgmc.sample`` SGLD, 32 chains with their own minibatches (n = 1000, with replacement,
  as blackjax draws them), d = 100, chain-iterations per second; natives on, off, and blackjax
  (JAX ``lax.scan`` over ``vmap``-ed chains, jit-compiled; compile time reported apart) when installed.
* ``ksd``: ``sgmc.diagnostics.ksd`` at n = 20,000, d = 10 (joint kind), against the arithmetic bound:
  the pair count n (n + 1) / 2 times the 8 d + 13 flops of a pair (plus one division and one square root
  counted as one flop each), at the GFLOP/s of a large float64 matrix product on the same threads.
* ``ksd``: also at d = 2 (n = 2,000 and 20,000). With natives on the tiled path runs (the NumPy path's
  matrix products called from a compiled tile loop, the elementwise steps in one pass per tile); the
  column "compiled loop" forces the pair loop, which the library runs only where it was measured faster.
* ``resample``: the four resampling schemes, 100 batches of 1,000 particles and one of 10^6.
* ``subsample``: minibatch indices without replacement (1,000 of 10^5, 1 and 32 rows), the compiled
  first-distinct pass against NumPy's packed sort.

Usage (from the repository root; ``pip install "sgmc[cpu]" blackjax``)::

    python asv_benchmarks/native_cpu.py
    python asv_benchmarks/native_cpu.py --what glm sgld32 --reps 5
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
    CORES = pin()  # before NumPy, Numba and JAX start their threads

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from docs._results import write_results  # noqa: E402  (imported before measuring: it records the load at start)

import numpy as np  # noqa: E402

import sgmc  # noqa: E402
from sgmc.backends import _numba  # noqa: E402
from sgmc.models import LogisticRegression  # noqa: E402

N_DATA = 100_000
BATCH = 1_000


def _data(dim: int, seed: int = 0):
    r = np.random.default_rng(seed)
    X = r.standard_normal((N_DATA, dim))
    theta = r.standard_normal(dim) / np.sqrt(dim)
    y = (r.random(N_DATA) < 1.0 / (1.0 + np.exp(-X @ theta))).astype(np.float64)
    return X, y


LOADS = []


def _alternate(contenders: dict, reps: int) -> dict:
    """Median CPU seconds of each callable (and wall seconds under ``"wall"``), alternating the order."""
    names = list(contenders)
    times = {k: {"cpu": [], "wall": []} for k in names}
    for rep in range(reps):
        LOADS.append(load())
        order = names if rep % 2 == 0 else names[::-1]
        for k in order:
            with Clock() as c:
                contenders[k]()
            times[k]["cpu"].append(c.cpu)
            times[k]["wall"].append(c.wall)
    out = {k: statistics.median(v["cpu"]) for k, v in times.items()}
    out["wall"] = {k: statistics.median(v["wall"]) for k, v in times.items()}
    return out


def _with_native(on: bool, fn):
    def run():
        old = _numba.set_enabled(on)
        try:
            fn()
        finally:
            _numba.set_enabled(old)

    return run


def bench_glm(reps: int) -> list:
    _numba.GLM_MIN_DIM = 0  # measure the loop at every size (the library uses it from d = 32)
    rows = []
    for dim, chains, two in [(10, 1, False), (10, 32, False), (100, 32, False), (10, 1, True), (10, 32, True),
                             (32, 1, True), (100, 1, True), (100, 32, True)]:
        X, y = _data(dim)
        model = LogisticRegression(X, y)
        r = np.random.default_rng(1)
        theta = r.standard_normal((chains, dim)) * 0.1
        centre = theta * 0.9
        pool = [r.integers(0, N_DATA, (chains, BATCH)) for _ in range(64)]
        calls = 200 if chains == 1 else 20

        def work():
            for k in range(calls):
                idx = pool[k % 64]
                if two:
                    model.grad_log_lik_diff_sum(theta, centre, idx)
                else:
                    model.grad_log_lik_sum(theta, idx)

        _with_native(True, work)()  # compile or load from the cache
        t = _alternate({"native": _with_native(True, work), "twin": _with_native(False, work)}, reps)
        us = {k: v / calls * 1e6 for k, v in t.items() if k != "wall"}
        rows.append({"case": f"{'CV two-point' if two else 'gradient sum'}, d = {dim}, {chains} chain(s)",
                     "native_us": us["native"], "twin_us": us["twin"], "twin/native": us["twin"] / us["native"],
                     "twin/native wall": t["wall"]["twin"] / t["wall"]["native"]})
    return rows


def _blackjax_runner(X, y, chains: int, n_iter: int, h: float):
    try:
        import jax
        import jax.numpy as jnp
        import blackjax
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)
    Xj, yj = jnp.asarray(X), jnp.asarray(y)
    n_data, dim = X.shape

    def logprior(theta):
        return -0.5 * jnp.sum(theta * theta) / 10.0

    def loglik(theta, batch):
        xb, yb = batch
        eta = xb @ theta
        return jnp.sum(yb * eta - jnp.logaddexp(0.0, eta))

    grad_fn = blackjax.sgmcmc.gradients.grad_estimator(logprior, loglik, n_data)
    sgld = blackjax.sgld(grad_fn)

    def one_chain(key, theta):
        def body(theta, k):
            k1, k2 = jax.random.split(k)
            idx = jax.random.randint(k1, (BATCH,), 0, n_data)
            out = sgld.step(k2, theta, (Xj[idx], yj[idx]), h / 2.0)  # blackjax's step is h / 2 here
            theta = out[0] if isinstance(out, tuple) else out
            return theta, theta[0]
        return jax.lax.scan(body, theta, jax.random.split(key, n_iter))

    run = jax.jit(jax.vmap(one_chain))
    keys = jax.random.split(jax.random.PRNGKey(0), chains)
    theta0 = jnp.zeros((chains, dim))
    t0 = time.perf_counter()
    jax.block_until_ready(run(keys, theta0))
    compile_s = time.perf_counter() - t0

    def go():
        jax.block_until_ready(run(keys, theta0))

    return go, compile_s


def bench_sgld32(reps: int, n_iter: int) -> dict:
    dim, chains, h = 100, 32, 1e-5
    X, y = _data(dim)
    model = LogisticRegression(X, y)

    def sgmc_run():
        sgmc.sample(model, "sgld", "minibatch", step_size=h, batch_size=BATCH, n_iter=n_iter, chains=chains,
                    rng=1, progress=False, estimator_options={"replace": True}, group_size=chains)

    _with_native(True, sgmc_run)()
    contenders = {"sgmc native": _with_native(True, sgmc_run), "sgmc twin": _with_native(False, sgmc_run)}
    bj = _blackjax_runner(X, y, chains, n_iter, h)
    compile_s = None
    if bj is not None:
        contenders["blackjax"], compile_s = bj
    t = _alternate(contenders, reps)
    t.pop("wall")
    rate = {k: chains * n_iter / v for k, v in t.items()}
    out = {"chain_iter_per_s": rate, "blackjax_compile_s": compile_s}
    if "blackjax" in rate:
        out["sgmc native / blackjax"] = rate["sgmc native"] / rate["blackjax"]
        out["sgmc twin / blackjax"] = rate["sgmc twin"] / rate["blackjax"]
    return out


def matmul_gflops() -> float:
    """Float64 matrix-product speed on this process's cores (best of 5, CPU time)."""
    a = np.random.default_rng(0).standard_normal((2000, 2000))
    a @ a
    best = float("inf")
    for _ in range(5):
        with Clock() as c:
            a @ a
        best = min(best, c.cpu)
    return 2 * 2000**3 / best / 1e9


def bench_ksd(reps: int, n: int = 20_000, dim: int = 10) -> dict:
    from sgmc.diagnostics import ksd

    LOADS.append(load())
    r = np.random.default_rng(0)
    x = r.standard_normal((n, dim))
    s = -x
    from sgmc.backends import _numba_stein

    def forced():  # the compiled loop itself, also at the dimensions where the library declines it
        old = _numba_stein.STEIN_MAX_DIMS
        _numba_stein.STEIN_MAX_DIMS = {"joint": _numba_stein.STEIN_MAX_DIM, "sum": _numba_stein.STEIN_MAX_DIM}
        try:
            ksd(x, s, kind="joint")
        finally:
            _numba_stein.STEIN_MAX_DIMS = old

    contenders = {"native": _with_native(True, lambda: ksd(x, s, kind="joint")),
                  "twin": _with_native(False, lambda: ksd(x, s, kind="joint"))}
    if dim <= _numba_stein.STEIN_MAX_DIM:
        contenders["loop"] = _with_native(True, forced)
        ksd(x[:500], s[:500], kind="joint")
        _with_native(True, forced)  # compile
    t = _alternate(contenders, reps if n * dim < 10**6 else min(reps, 3))
    pairs = n * (n + 1) / 2
    flops = pairs * (8 * dim + 13 + 2)
    peak = matmul_gflops()
    bound = flops / (peak * 1e9)
    return {"native_s": t["native"], "twin_s": t["twin"], "twin/native": t["twin"] / t["native"], "loop_s": t.get("loop"),
            "twin/native wall": t["wall"]["twin"] / t["wall"]["native"], "n": n, "d": dim,
            "matmul_gflops": peak, "bound_s": bound, "native/bound": t["native"] / bound}


def bench_resample(reps: int) -> list:
    from sgmc.ssm import resampling

    r = np.random.default_rng(0)
    rows = []
    for batch, n, calls in [(100, 1000, 20), (1, 10**6, 2)]:  # small and large
        w = r.random((batch, n))
        w /= w.sum(axis=1, keepdims=True)
        u = r.random(batch)
        for scheme in ("systematic", "stratified", "multinomial", "residual"):
            def fn(w, uu, scheme=scheme):
                return resampling.ancestors(w, uu, scheme)

            uu = u if scheme == "systematic" else r.random((batch, n))
            fn(w, uu)

            def work(fn=fn, uu=uu, w=w, calls=calls):
                for _ in range(calls):
                    fn(w, uu)

            t = _alternate({"native": _with_native(True, work), "twin": _with_native(False, work)}, reps)
            rows.append({"scheme": f"{scheme} resampling, {batch} x {n}", "native_us": t["native"] / calls * 1e6,
                         "twin_us": t["twin"] / calls * 1e6, "twin/native": t["twin"] / t["native"],
                         "twin/native wall": t["wall"]["twin"] / t["wall"]["native"]})
    return rows


def bench_subsample(reps: int) -> list:
    """Minibatch indices without replacement: the compiled first-distinct pass against the packed sort."""
    from sgmc.backends import _numba, default_rng
    from sgmc.backends._numpy import subsample

    if _numba.available():
        import numba  # noqa: F401  (the subset draw runs its compiled pass only once Numba is loaded)
    rows = []
    for n_data, size, batch, calls in [(N_DATA, BATCH, 1, 200), (N_DATA, BATCH, 32, 20)]:
        def work(n_data=n_data, size=size, batch=batch, calls=calls):
            rng = default_rng(0)
            for _ in range(calls):
                subsample(rng, n_data, size, batch)

        work()
        t = _alternate({"native": _with_native(True, work), "twin": _with_native(False, work)}, reps)
        rows.append({"case": f"subset draw, {size} of {n_data}, {batch} row(s)", "native_us": t["native"] / calls * 1e6,
                     "twin_us": t["twin"] / calls * 1e6, "twin/native": t["twin"] / t["native"],
                     "twin/native wall": t["wall"]["twin"] / t["wall"]["native"]})
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--what", nargs="+", default=["glm", "sgld32", "ksd", "resample", "subsample"],
                        choices=["glm", "sgld32", "ksd", "resample", "subsample"])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--iters", type=int, default=500, help="iterations of the sgld32 runs")
    parser.add_argument("--cores", default="1", help="the cores every contender runs on (default: core 1)")
    parser.add_argument("--results", default="native_cpu",
                        help="results file docs/results/NAME.json (default native_cpu; 'none' writes nothing)")
    args = parser.parse_args(argv)
    if not _numba.available():
        print("Numba is not installed (pip install 'sgmc[cpu]') or SGMC_NATIVE=0: nothing to compare")
        return 1
    out = {"threads": verify(CORES)}
    rows = []  # path, native CPU, twin CPU, unit, twin / native CPU, twin / native wall
    if "glm" in args.what:
        out["glm"] = bench_glm(args.reps)
        rows += [[f"GLM {r['case']}", r["native_us"], r["twin_us"], "us", r["twin/native"], r["twin/native wall"]]
                 for r in out["glm"]]
    tables = {}
    if "sgld32" in args.what:
        out["sgld32"] = res = bench_sgld32(args.reps, args.iters)
        tables["sgld32"] = {"columns": ["SGLD, 32 chains, d = 100", "chain-iterations per CPU second"],
                            "rows": [[k, v] for k, v in res["chain_iter_per_s"].items()],
                            "formats": [None, ".0f"]}
        if res["blackjax_compile_s"] is not None:
            tables["sgld32"]["notes"] = f"blackjax's compile time ({res['blackjax_compile_s']:.1f} s) is left out."
    if "ksd" in args.what:
        out["ksd"] = ks = [bench_ksd(args.reps, n, d) for n, d in [(2000, 2), (20_000, 2), (20_000, 10), (20_000, 100)]]
        rows += [[f"KSD, n = {k['n']}, d = {k['d']}, joint", k["native_s"], k["twin_s"], "s", k["twin/native"],
                  k["twin/native wall"]] for k in ks]
        tables["ksd_bound"] = {
            "columns": ["n", "d", "with natives on, CPU s", "NumPy path, CPU s", "compiled loop, CPU s",
                        "matrix product, GFLOP/s", "arithmetic bound, s", "natives on / bound"],
            "rows": [[k["n"], k["d"], k["native_s"], k["twin_s"], k["loop_s"], k["matmul_gflops"], k["bound_s"],
                      k["native/bound"]] for k in ks],
            "formats": [None, None, ".3f", ".3f", ".3f", ".1f", ".3f", ".2f"],
            "notes": "With natives on, the tiled path runs at every d here (joint kind); 'compiled loop' forces the "
                     "pair loop at every d <= 32; 'NumPy path' is the array-API twin with natives off."}
    if "resample" in args.what:
        out["resample"] = bench_resample(args.reps)
        rows += [[r["scheme"], r["native_us"], r["twin_us"], "us",
                  r["twin/native"], r["twin/native wall"]] for r in out["resample"]]
    if "subsample" in args.what:
        out["subsample"] = bench_subsample(args.reps)
        rows += [[r["case"], r["native_us"], r["twin_us"], "us", r["twin/native"], r["twin/native wall"]]
                 for r in out["subsample"]]
    if rows:
        tables["natives"] = {"columns": ["path", "compiled (CPU)", "twin (CPU)", "unit", "twin / compiled (CPU)",
                                         "twin / compiled (wall)"],
                             "rows": rows, "formats": [None, ".3g", ".3g", None, ".2f", ".2f"]}
    out["threads_after"] = verify(CORES)  # again, now that Numba's and JAX's threads exist
    for name, t in tables.items():
        print(f"\n{name}\n| " + " | ".join(t["columns"]) + " |")
        for r in t["rows"]:
            print("| " + " | ".join(f"{v:.3g}" if isinstance(v, float) else str(v) for v in r) + " |")
    print(f"load average during the rounds: {min(LOADS):.1f}-{max(LOADS):.1f}")
    if args.results != "none":
        out["settings"] = {"reps": args.reps, "iters": args.iters, "cores": sorted(CORES), "loads": LOADS}
        print("wrote", write_results(args.results, tables, extra=out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
