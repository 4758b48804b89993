"""Kernel Stein discrepancy: sgmc against the matrix-product lower bound and the stein-thinning package.

In one run on the same inputs (n points in d = 10 dimensions, float64, identity preconditioner,
c = 1, beta = -1/2), this script

1. measures the machine's float64 matrix-product speed (NumPy/OpenBLAS, 2 threads, a large square
   product) and, to explain the result, the speed of the skinny products and the elementwise passes the
   KSD actually runs;
2. states the flops per evaluated pair of :func:`sgmc.diagnostics.ksd`, counted from its code, and the
   lower bound  pairs * flops_per_pair / (matmul flop/s);
3. times ``sgmc.diagnostics.ksd`` (both kinds) and stein-thinning's KSD (``stein_thinning.stein.ksd``
   with the IMQ kernel of ``stein_thinning.kernel``; it returns the whole cumulative sequence, looping
   over rows in Python with O(n d) memory, so it runs at n = 20000), together with sgmc's
   ``cumulative_ksd``, its exact counterpart, and checks that the values agree;
4. measures the peak memory of ``ksd`` at n = 100000 in a fresh subprocess.

Flop count per evaluated pair (joint kind, isotropic preconditioner, beta = -1/2), from
``sgmc/diagnostics/_stein.py``: the product giving B = c^2 + |x - y|^2_A has inner dimension d + 2
(2(d + 2) flops); 1/B, its square root and W1 = W / B are 3 elementwise operations; the contraction
W @ S costs 2d, W1 @ G1 with G1 = [S, U, -s.u, 1] costs 2(2d + 2), and the constant term sum(W1 / B)
is one vecdot (2). Total 8d + 13. The sum kind adds the per-coordinate second-derivative term:
2(d + 2) + 2d + 2(3d + 1) + 2(2d + 1) + 4 elementwise = 14d + 12. Evaluated pairs: each block of b
rows meets the columns from its own first row on, sum_blocks b (n - i0) ~ n (n + b) / 2.

Usage (from the repository root)::

    python asv_benchmarks/peer_ksd.py                 # n = 20000, peer at n = 20000, memory at 100000
    python asv_benchmarks/peer_ksd.py --n 5000 --peer-n 5000 --mem-n 20000 --threads 1
"""

from __future__ import annotations

import os
import sys


def _threads_from_argv(argv: list[str]) -> str:
    """``--threads N`` must take effect before NumPy loads its BLAS, so it is read here."""
    for i, a in enumerate(argv):
        if a == "--threads" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--threads="):
            return a.split("=", 1)[1]
    return "2"


_THREADS = _threads_from_argv(sys.argv[1:])
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = _THREADS

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from sgmc.diagnostics import _stein, cumulative_ksd, ksd  # noqa: E402


def sample(n: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)) @ (np.eye(d) + 0.3 * np.tri(d, d, -1)).T
    s = -x + 0.1 * rng.standard_normal((n, d))
    return x, s


def best_time(fn, reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def matmul_gflops(size: int = 3000, reps: int = 5) -> float:
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((size, size)), rng.standard_normal((size, size))
    a @ b
    return 2.0 * size**3 / best_time(lambda: a @ b, reps) / 1e9


def kernel_op_rates(d: int, block: int, chunk: int, reps: int = 20) -> dict:
    """ns per tile element of the operations one tile of the joint kernel runs (2 BLAS threads)."""
    rng = np.random.default_rng(2)
    fb = rng.standard_normal((block, d + 2))
    gb = rng.standard_normal((chunk, d + 2))
    s = rng.standard_normal((chunk, d))
    g1 = rng.standard_normal((chunk, 2 * d + 2))
    b = np.abs(fb @ gb.T) + 1.0
    inv = 1.0 / b
    w = np.sqrt(inv)
    e = block * chunk
    ops = {
        "B = F G^T (k = d+2)": lambda: fb @ gb.T,
        "1 / B": lambda: 1.0 / b,
        "sqrt": lambda: np.sqrt(inv),
        "multiply": lambda: w * inv,
        "W @ S (k = d)": lambda: w @ s,
        "W1 @ G1 (k = 2d+2)": lambda: w @ g1,
        "vecdot rows": lambda: np.vecdot(w, inv),
    }
    return {name: best_time(fn, reps) / e * 1e9 for name, fn in ops.items()}


def evaluated_pairs(n: int, block: int) -> int:
    return sum(min(block, n - i0) * (n - i0) for i0 in range(0, n, block))


def flops_per_pair(d: int, kind: str) -> int:
    if kind == "joint":
        return 2 * (d + 2) + 3 + 2 * d + 2 * (2 * d + 2) + 2
    return 2 * (d + 2) + 2 * d + 2 * (3 * d + 1) + 2 * (2 * d + 1) + 4


def peer_ksd(x: np.ndarray, s: np.ndarray) -> float:
    from stein_thinning.kernel import vfk0_imq
    from stein_thinning.stein import ksd as st_ksd

    linv = np.eye(x.shape[1])
    path = st_ksd(lambda i, j: vfk0_imq(x[i], x[j], s[i], s[j], linv), x.shape[0])
    return float(path[-1])


_MEM_CHILD = r"""
import sys, time, tracemalloc, json
import numpy as np
from sgmc.diagnostics import ksd


def hwm_mib():
    # peak resident set of this process (VmHWM; unlike ru_maxrss it starts afresh at exec)
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


n, d, kind = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rng = np.random.default_rng(0)
x = rng.standard_normal((n, d))
s = -x
s += 0.1 * rng.standard_normal((n, d))
ksd(x[:500], s[:500], kind=kind)
base = hwm_mib()
tracemalloc.start()
t0 = time.perf_counter()
v = float(ksd(x, s, kind=kind))
t = time.perf_counter() - t0
_, peak = tracemalloc.get_traced_memory()
print(json.dumps({"n": n, "d": d, "kind": kind, "value": v, "seconds": t,
                  "tracemalloc_peak_mb": peak / 2**20, "maxrss_mb": hwm_mib(),
                  "maxrss_before_mb": base, "inputs_mb": 2 * x.nbytes / 2**20}))
"""


def memory_run(n: int, d: int, kind: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _MEM_CHILD, str(n), str(d), kind], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--d", type=int, default=10)
    ap.add_argument("--peer-n", type=int, default=20000, help="n for the stein-thinning comparison")
    ap.add_argument("--mem-n", type=int, default=100000, help="n for the peak-memory run (0 skips it)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", default="2", help="BLAS threads (NumPy's elementwise passes use one)")
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    args = ap.parse_args(argv)

    n, d = args.n, args.d
    block = _stein.check_block(None, n)
    chunk = _stein._chunk(block)
    load = os.getloadavg()
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, numpy {np.__version__}, "
          f"BLAS threads {_THREADS}, load average before the run {load[0]:.2f}")
    gf = matmul_gflops()
    print(f"float64 matmul (3000 x 3000 @ 3000 x 3000, {_THREADS} BLAS threads): {gf:.1f} GFLOP/s")
    rates = kernel_op_rates(d, block, chunk)
    print(f"one {block} x {chunk} tile of the joint kernel, ns per pair (each operation alone, repeated):")
    for name, v in rates.items():
        print(f"    {name:<22} {v:7.3f}")
    gemm_ns = sum(v for k, v in rates.items() if "@" in k or "G^T" in k)
    elem_ns = sum(v for k, v in rates.items() if not ("@" in k or "G^T" in k))
    print(f"    {'products / elementwise':<22} {gemm_ns:7.3f} / {elem_ns:.3f}  (sum {gemm_ns + elem_ns:.3f})")

    x, s = sample(n, d)
    results = {"gflops": gf, "tile_rates_ns": rates, "n": n, "d": d, "block": block, "chunk": chunk,
               "load_average": load}
    print()
    head = ("n", "d", "kind", "pairs", "flops/pair", "bound s", "sgmc s", "x bound", "ns/pair")
    print("{:>7} {:>4} {:>6} {:>12} {:>10} {:>9} {:>9} {:>8} {:>8}".format(*head))
    for kind in ("joint", "sum"):
        ksd(x[:1000], s[:1000], kind=kind)
        t = best_time(lambda: ksd(x, s, kind=kind), args.reps)
        pairs = evaluated_pairs(n, block)
        fpp = flops_per_pair(d, kind)
        bound = pairs * fpp / (gf * 1e9)
        results[f"sgmc_{kind}_s"] = t
        results[f"bound_{kind}_s"] = bound
        print(f"{n:>7} {d:>4} {kind:>6} {pairs:>12.4g} {fpp:>10} {bound:>9.3f} {t:>9.3f} {t / bound:>8.2f}"
              f" {t / pairs * 1e9:>8.2f}")
    print("    bound = evaluated pairs * flops per pair / matmul flop/s (n^2 times the flops per ordered")
    print("    pair gives the same, up to the diagonal blocks: pairs = n (n + b) / 2). The joint tile's")
    print(f"    operations, each timed alone, predict {pairs * (gemm_ns + elem_ns) / 1e9:.3f} s.")

    pn = args.peer_n
    xp_, sp_ = x[:pn], s[:pn]
    t_sgmc = best_time(lambda: ksd(xp_, sp_, kind="joint"), args.reps)
    t_cum = best_time(lambda: cumulative_ksd(xp_, sp_, kind="joint"), args.reps)
    v_sgmc = float(ksd(xp_, sp_, kind="joint"))
    t0 = time.perf_counter()
    v_peer = peer_ksd(xp_, sp_)
    t_peer = time.perf_counter() - t0
    results.update({"peer_n": pn, "peer_s": t_peer, "sgmc_peer_n_s": t_sgmc,
                    "sgmc_cumulative_peer_n_s": t_cum, "peer_rel_diff": abs(v_sgmc / v_peer - 1)})
    print()
    print(f"stein-thinning's ksd (the whole cumulative sequence) at n = {pn}, d = {d}: {t_peer:.3f} s")
    print(f"    sgmc ksd(kind='joint')            {t_sgmc:7.3f} s   speed-up {t_peer / t_sgmc:6.1f}x")
    print(f"    sgmc cumulative_ksd(kind='joint') {t_cum:7.3f} s   speed-up {t_peer / t_cum:6.1f}x")
    print(f"    relative difference of the final values {abs(v_sgmc / v_peer - 1):.1e}")

    if args.mem_n:
        print()
        for kind in ("joint", "sum"):
            m = memory_run(args.mem_n, d, kind)
            results[f"memory_{kind}"] = m
            print(f"peak memory, ksd(kind={kind!r}) at n = {m['n']}, d = {d}: tracemalloc peak "
                  f"{m['tracemalloc_peak_mb']:.1f} MiB (inputs {m['inputs_mb']:.1f} MiB, not included); "
                  f"process peak RSS {m['maxrss_mb']:.0f} MiB"
                  f" ({m['maxrss_before_mb']:.0f} MiB before the call); {m['seconds']:.1f} s")
    print(f"\nload average after the run {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
