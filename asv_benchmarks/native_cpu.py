"""The compiled CPU paths (Numba) against their array-API twins, and 32 SGLD chains against blackjax, in one run.

Every comparison alternates its contenders within each repetition (A, B, then B, A, ...) and reports
medians, so machine noise falls on both alike. The natives are switched in process with
``sgmc.backends._numba.set_enabled``; the twins are the library's own array-API code.

* ``glm``: the GLM minibatch gradient sum (logistic, N = 10^5, n = 1000 rows per chain, a fresh index
  set per call), 1 chain at d = 10, 32 chains at d = 10 and 100, and the two-point control-variate form.
* ``sgld32``: ``sgmc.sample`` SGLD, 32 chains with their own minibatches (n = 1000, with replacement,
  as blackjax draws them), d = 100, chain-iterations per second; natives on, off, and blackjax
  (JAX ``lax.scan`` over ``vmap``-ed chains, jit-compiled; compile time reported apart) when installed.
* ``ksd``: ``sgmc.diagnostics.ksd`` at n = 20,000, d = 10 (joint kind), against the arithmetic bound:
  the pair count n (n + 1) / 2 times the 8 d + 13 flops of a pair (plus one division and one square root
  counted as one flop each), at the GFLOP/s of a large float64 matrix product on the same threads.
* ``resample``: the four resampling schemes, 100 batches of 1,000 particles (only systematic has a
  compiled path; the other rows compare the NumPy path with itself, as a noise check).

Usage (from the repository root; ``pip install "sgmc[cpu]" blackjax``)::

    python asv_benchmarks/native_cpu.py
    python asv_benchmarks/native_cpu.py --what glm sgld32 --reps 5
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import numpy as np

import sgmc
from sgmc.backends import _numba
from sgmc.models import LogisticRegression

N_DATA = 100_000
BATCH = 1_000


def _data(dim: int, seed: int = 0):
    r = np.random.default_rng(seed)
    X = r.standard_normal((N_DATA, dim))
    theta = r.standard_normal(dim) / np.sqrt(dim)
    y = (r.random(N_DATA) < 1.0 / (1.0 + np.exp(-X @ theta))).astype(np.float64)
    return X, y


def _alternate(contenders: dict, reps: int) -> dict:
    """Median seconds of each callable, alternating the order every repetition."""
    names = list(contenders)
    times = {k: [] for k in names}
    for rep in range(reps):
        order = names if rep % 2 == 0 else names[::-1]
        for k in order:
            t0 = time.perf_counter()
            contenders[k]()
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


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
    for dim, chains, two in [(10, 1, False), (10, 32, False), (100, 32, False), (10, 1, True), (100, 32, True)]:
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
        us = {k: v / calls * 1e6 for k, v in t.items()}
        rows.append({"case": f"{'CV two-point' if two else 'gradient sum'}, d = {dim}, {chains} chain(s)",
                     "native_us": us["native"], "twin_us": us["twin"], "twin/native": us["twin"] / us["native"]})
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
    rate = {k: chains * n_iter / v for k, v in t.items()}
    out = {"chain_iter_per_s": rate, "blackjax_compile_s": compile_s}
    if "blackjax" in rate:
        out["sgmc native / blackjax"] = rate["sgmc native"] / rate["blackjax"]
        out["sgmc twin / blackjax"] = rate["sgmc twin"] / rate["blackjax"]
    return out


def _gflops(threads_note: str) -> float:
    a = np.random.default_rng(0).standard_normal((2000, 2000))
    a @ a
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        a @ a
        best = min(best, time.perf_counter() - t0)
    return 2 * 2000**3 / best / 1e9


def bench_ksd(reps: int, n: int = 20_000, dim: int = 10) -> dict:
    from sgmc.diagnostics import ksd

    r = np.random.default_rng(0)
    x = r.standard_normal((n, dim))
    s = -x
    ksd(x[:500], s[:500])  # compile
    t = _alternate({"native": _with_native(True, lambda: ksd(x, s)), "twin": _with_native(False, lambda: ksd(x, s))}, reps)
    pairs = n * (n + 1) / 2
    flops = pairs * (8 * dim + 13 + 2)
    peak = _gflops("")
    bound = flops / (peak * 1e9)
    return {"native_s": t["native"], "twin_s": t["twin"], "twin/native": t["twin"] / t["native"],
            "matmul_gflops": peak, "bound_s": bound, "native/bound": t["native"] / bound}


def bench_resample(reps: int) -> list:
    from sgmc.ssm import resampling

    r = np.random.default_rng(0)
    w = r.random((100, 1000))
    w /= w.sum(axis=1, keepdims=True)
    u = r.random(100)
    rows = []
    for scheme in ("systematic", "stratified", "multinomial", "residual"):
        def fn(w, uu, scheme=scheme):
            return resampling.ancestors(w, uu, scheme)

        uu = u if scheme == "systematic" else r.random((100, 1000))
        fn(w, uu)

        def work(fn=fn, uu=uu):
            for _ in range(20):
                fn(w, uu)

        t = _alternate({"native": _with_native(True, work), "twin": _with_native(False, work)}, reps)
        rows.append({"scheme": scheme, "native_us": t["native"] / 20 * 1e6, "twin_us": t["twin"] / 20 * 1e6,
                     "twin/native": t["twin"] / t["native"]})
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--what", nargs="+", default=["glm", "sgld32", "ksd", "resample"],
                        choices=["glm", "sgld32", "ksd", "resample"])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--iters", type=int, default=500, help="iterations of the sgld32 runs")
    args = parser.parse_args(argv)
    if not _numba.available():
        print("Numba is not installed (pip install 'sgmc[cpu]') or SGMC_NATIVE=0: nothing to compare")
        return 1
    out = {"machine": platform.platform(), "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d")}
    if "glm" in args.what:
        out["glm"] = bench_glm(args.reps)
        print("\n| GLM kernel | native us | twin us | twin / native |\n|---|---|---|---|")
        for r in out["glm"]:
            print(f"| {r['case']} | {r['native_us']:.1f} | {r['twin_us']:.1f} | {r['twin/native']:.2f} |")
    if "sgld32" in args.what:
        out["sgld32"] = res = bench_sgld32(args.reps, args.iters)
        print("\n| SGLD, 32 chains, d = 100 | chain-iterations / s |\n|---|---|")
        for k, v in res["chain_iter_per_s"].items():
            print(f"| {k} | {v:.0f} |")
        for k in ("sgmc native / blackjax", "sgmc twin / blackjax"):
            if k in res:
                print(f"{k}: {res[k]:.2f}")
        if res["blackjax_compile_s"] is not None:
            print(f"blackjax compile (apart): {res['blackjax_compile_s']:.1f} s")
    if "ksd" in args.what:
        out["ksd"] = k = bench_ksd(args.reps)
        print(f"\nKSD n = 20000, d = 10: native {k['native_s']:.3f} s, twin {k['twin_s']:.3f} s "
              f"(twin / native {k['twin/native']:.2f}); matrix product {k['matmul_gflops']:.0f} GFLOP/s, "
              f"bound {k['bound_s']:.3f} s, native / bound {k['native/bound']:.2f}")
    if "resample" in args.what:
        out["resample"] = bench_resample(args.reps)
        print("\n| resampling (100 x 1000) | native us | twin us | twin / native |\n|---|---|---|---|")
        for r in out["resample"]:
            print(f"| {r['scheme']} | {r['native_us']:.0f} | {r['twin_us']:.0f} | {r['twin/native']:.2f} |")
    print("\n" + json.dumps(out, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
