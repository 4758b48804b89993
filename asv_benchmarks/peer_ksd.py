"""Kernel Stein discrepancy: sgmc against the matrix-product lower bound and the stein-thinning package.

In one run on the same inputs (n points in d = 10 dimensions, float64, identity preconditioner,
c = 1, beta = -1/2), this script

1. measures the machine's float64 matrix-product speed (NumPy/OpenBLAS, one thread on the pinned core,
   a large square product) and, to explain the result, the speed of the skinny products and the elementwise passes the
   KSD actually runs;
2. states the flops per evaluated pair of :func:`sgmc.diagnostics.ksd`, counted from its code, and the
   lower bound  pairs * flops_per_pair / (matmul flop/s);
3. times ``sgmc.diagnostics.ksd`` (both kinds) and stein-thinning's KSD (``stein_thinning.stein.ksd``
   with the IMQ kernel of ``stein_thinning.kernel``; it returns the whole cumulative sequence, looping
   over rows in Python with O(n d) memory, so it runs at n = 20000), together with sgmc's
   ``cumulative_ksd``, its exact counterpart, and checks that the values agree;
4. measures the peak memory of ``ksd`` at n = 100000 in a fresh subprocess.

Every contender runs on the cores of ``--cores`` (default: core 1) with one BLAS and one Numba thread
(checked before timing); times are CPU time (wall time beside it), best of ``--reps``. The tables go
to ``docs/results/peer_ksd.json``, which docs/diagnostics.md renders. With Numba installed, ``ksd`` is
timed with its natives on and with the NumPy path (``sgmc.backends._numba.set_enabled``); the compiled
pair loop declines at d = 10 (it runs at d <= 4 only), so both rows time the NumPy path there.

Flop count per evaluated pair (joint kind, isotropic preconditioner, beta = -1/2), from
``sgmc/diagnostics/_stein.py``: the product giving B = c^2 + |x - y|^2_A has inner dimension d + 2
(2(d + 2) flops); 1/B, its square root and W1 = W / B are 3 elementwise operations; the contraction
W @ S costs 2d, W1 @ G1 with G1 = [S, U, -s.u, 1] costs 2(2d + 2), and the constant term sum(W1 / B)
is one vecdot (2). Total 8d + 13. The sum kind adds the per-coordinate second-derivative term:
2(d + 2) + 2d + 2(3d + 1) + 2(2d + 1) + 4 elementwise = 14d + 12. Evaluated pairs: each block of b
rows meets the columns from its own first row on, sum_blocks b (n - i0) ~ n (n + b) / 2.

Usage (from the repository root)::

    python asv_benchmarks/peer_ksd.py                 # n = 20000, peer at n = 20000, memory at 100000
    python asv_benchmarks/peer_ksd.py --n 5000 --peer-n 5000 --mem-n 20000 --results none
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pinning import Clock, child_command, pin, verify  # noqa: E402

if __name__ == "__main__":
    CORES = pin()  # before NumPy and Numba start their threads: one core, one thread, for every contender

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from docs._results import write_results  # noqa: E402  (imported before measuring: it records the load at start)

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from sgmc.diagnostics import _stein, cumulative_ksd, ksd  # noqa: E402


def sample(n: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)) @ (np.eye(d) + 0.3 * np.tri(d, d, -1)).T
    s = -x + 0.1 * rng.standard_normal((n, d))
    return x, s


def best_time(fn, reps: int, both: bool = False):
    """Best CPU seconds of ``reps`` calls (with ``both``: and the best wall seconds)."""
    cpu = wall = float("inf")
    for _ in range(reps):
        with Clock() as c:
            fn()
        cpu, wall = min(cpu, c.cpu), min(wall, c.wall)
    return (cpu, wall) if both else cpu


def matmul_gflops(size: int = 3000, reps: int = 5) -> float:
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((size, size)), rng.standard_normal((size, size))
    a @ b
    return 2.0 * size**3 / best_time(lambda: a @ b, reps) / 1e9


def kernel_op_rates(d: int, block: int, chunk: int, reps: int = 20) -> dict:
    """ns per tile element of the operations one tile of the joint kernel runs."""
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
if sys.argv[4] == "0":
    from sgmc.backends import _numba
    _numba.set_enabled(False)
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


def memory_run(n: int, d: int, kind: str, native: bool) -> dict:
    cmd = child_command([sys.executable, "-c", _MEM_CHILD, str(n), str(d), kind, str(int(native))], CORES)
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _native(on: bool, fn):
    def run():
        from sgmc.backends import _numba

        old = _numba.set_enabled(on)
        try:
            return fn()
        finally:
            _numba.set_enabled(old)

    return run


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--d", type=int, default=10)
    ap.add_argument("--peer-n", type=int, default=20000, help="n for the stein-thinning comparison")
    ap.add_argument("--mem-n", type=int, default=100000, help="n for the peak-memory run (0 skips it)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cores", default="1", help="the cores every contender runs on (default: core 1)")
    ap.add_argument("--results", default="peer_ksd",
                    help="results file docs/results/NAME.json (default peer_ksd; 'none' writes nothing)")
    args = ap.parse_args(argv)
    from sgmc.backends import _numba

    paths = {"natives on": True, "NumPy": False} if _numba.available() else {"NumPy": False}
    n, d = args.n, args.d
    block = _stein.check_block(None, n)
    chunk = _stein._chunk(block)
    load = os.getloadavg()
    print(f"# cores {sorted(CORES)}, numpy {np.__version__}, paths {list(paths)}, load average {load[0]:.2f}")
    gf = matmul_gflops()
    print(f"float64 matmul (3000 x 3000 @ 3000 x 3000, one thread): {gf:.1f} GFLOP/s (CPU time)")
    rates = kernel_op_rates(d, block, chunk)
    x, s = sample(n, d)
    ksd(x[:1000], s[:1000])  # compile or load the compiled loop
    threads = verify(CORES)
    results = {"gflops": gf, "tile_rates_ns": rates, "n": n, "d": d, "block": block, "chunk": chunk,
               "threads": threads}
    rows = []
    for kind in ("joint", "sum"):
        pairs = evaluated_pairs(n, block)
        bound = pairs * flops_per_pair(d, kind) / (gf * 1e9)
        for path, on in paths.items():
            ksd(x[:1000], s[:1000], kind=kind)
            cpu, wall = best_time(_native(on, lambda kind=kind: ksd(x, s, kind=kind)), args.reps, both=True)
            rows.append([f"sgmc `ksd(kind={kind!r})`, {path} path", n, cpu, wall, cpu / bound])
            print(rows[-1])
        rows.append([f"matrix-product bound, {kind} ({flops_per_pair(d, kind)} flops per pair at {gf:.1f} GFLOP/s)",
                     n, bound, None, 1.0])

    pn = args.peer_n
    xp_, sp_ = x[:pn], s[:pn]
    v_sgmc = float(ksd(xp_, sp_, kind="joint"))
    for path, on in paths.items():
        cpu, wall = best_time(_native(on, lambda: cumulative_ksd(xp_, sp_, kind="joint")), args.reps, both=True)
        rows.append([f"sgmc `cumulative_ksd(kind='joint')`, {path} path", pn, cpu, wall, None])
    with Clock() as c:
        v_peer = peer_ksd(xp_, sp_)
    rel = abs(v_sgmc / v_peer - 1)
    rows.append([f"stein-thinning's KSD (same value to {rel:.0e})", pn, c.cpu, c.wall, None])
    print(rows[-1])
    results.update({"peer_rel_diff": rel})
    tables = {"ksd": {"columns": ["what", "n", "CPU s", "wall s", "CPU / bound"], "rows": rows,
                      "formats": [None, None, ".3g", ".3g", ".2f"],
                      "notes": f"d = {d}, float64, one core and one thread for every contender; best of "
                               f"{args.reps} runs (stein-thinning: one run)."}}
    if args.mem_n:
        mem = []
        for kind in ("joint", "sum"):
            for path, on in paths.items():
                m = memory_run(args.mem_n, d, kind, on)
                results[f"memory_{kind}_{path}"] = m
                mem.append([kind, path, m["n"], m["tracemalloc_peak_mb"], m["maxrss_mb"], m["maxrss_before_mb"]])
                print(mem[-1])
        tables["memory"] = {"columns": ["kind", "path", "n", "allocated by ksd, MiB (tracemalloc peak)",
                                        "process peak RSS, MiB", "RSS before the call, MiB"],
                            "rows": mem, "formats": [None, None, None, ".0f", ".0f", ".0f"]}
    print(f"\nload average after the run {os.getloadavg()[0]:.2f}")
    if args.results != "none":
        print("wrote", write_results(args.results, tables, extra=results, packages=["stein-thinning"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
