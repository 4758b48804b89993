"""Where the KSD's time goes: the cost per pair of each step of one tile, against the arithmetic bound.

The NumPy path (:func:`sgmc.diagnostics._stein.row_sums_twin`) evaluates the IMQ Stein kernel of a
block of 128 rows against 256 columns (one tile, which stays in the level-2 cache) by these steps:
the product ``B = fb @ gb`` (K = d + 2), ``1 / B``, its square root (beta = -1/2), ``W1 = W / B`` in
place, the products ``W @ s`` (d columns) and ``W1 @ g1`` (2 d + 2 columns), and the row sums of
``W1 / B``. This script times each step alone on one tile (best of 5 repetitions of 200 calls, CPU
time, one pinned core, one BLAS thread), divides by the tile's pairs, and sets the sum beside the
whole NumPy path, the tiled compiled path (natives on) and the bound: ``8 d + 15`` operations per pair
(the division and the square root counted as one each) at the speed of a large float64 matrix
product, as in ``native_cpu.py``. A third table, ``loop_vs_tiled``, times the two compiled paths,
the pair loop and the tiled path, at d = 1 to 6 for both kinds (n = 2,000 and 20,000): where the loop
is faster is where the library runs it (``_numba_stein.STEIN_MAX_DIMS``). The tables go to
``docs/results/ksd_parts.json``, which docs/performance.md renders.

Usage (from the repository root)::

    python asv_benchmarks/ksd_parts.py            # d = 10, n = 6000 for the whole paths
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import timeit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pinning import Clock, pin, verify  # noqa: E402

if __name__ == "__main__":
    CORES = pin()

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from docs._results import write_results  # noqa: E402  (records the load at start)
from native_cpu import matmul_gflops  # noqa: E402  (the same bound as native_cpu.py's)

import numpy as np  # noqa: E402
from array_api_compat import numpy as npx  # noqa: E402

from sgmc.backends import _numba, _numba_stein  # noqa: E402
from sgmc.diagnostics import _stein  # noqa: E402

ROWS, COLS = 128, 256


def _per_call(stmt: str, env: dict) -> float:
    t = timeit.Timer(stmt, globals=env, timer=time.process_time)
    return min(t.repeat(5, 200)) / 200


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--d", type=int, default=10)
    parser.add_argument("--n", type=int, default=6000, help="points for the whole paths")
    args = parser.parse_args(argv)
    threads = verify(CORES)
    d = args.d
    r = np.random.default_rng(0)
    x = r.standard_normal((args.n, d))
    st = _stein.make_stein(npx, x, -x, _stein.resolve_preconditioner(npx, x, "med"), 1.0, -0.5, "joint")
    fb = np.ascontiguousarray(st.fb[:ROWS])
    cols = slice(1000, 1000 + COLS)
    gb, S, G1 = st.gbt[:, cols], st.s[cols], st.g1[cols]
    B = fb @ gb
    inv = 1.0 / B
    w = np.sqrt(inv)
    env = {"np": np, "npx": npx, "fb": fb, "gb": gb, "S": S, "G1": G1, "B": B, "inv": inv, "w": w,
           "out": np.empty_like(B)}
    steps = [
        ("B = fb @ gb (product, K = d + 2)", "np.matmul(fb, gb, out=out)", 2 * (d + 2)),
        ("1 / B", "np.divide(1.0, B, out=out)", 1),
        ("square root", "np.sqrt(inv, out=out)", 1),
        ("W1 = W / B (in place)", "np.multiply(w, inv, out=out)", 1),
        ("W @ s (product, d columns)", "w @ S", 2 * d),
        ("W1 @ g1 (product, 2 d + 2 columns)", "w @ G1", 2 * (2 * d + 2)),
        ("row sums of W1 / B", "npx.vecdot(w, inv, axis=-1)", 2),
    ]
    pairs = ROWS * COLS
    peak = matmul_gflops()
    rows = []
    total = 0.0
    for name, stmt, flops in steps:
        ns = _per_call(stmt, env) / pairs * 1e9
        total += ns
        rows.append([name, ns, flops, flops / (ns * 1e-9) / 1e9])
    rows.append(["sum of the steps", total, 8 * d + 15, (8 * d + 15) / (total * 1e-9) / 1e9])

    npairs = args.n * (args.n + 1) / 2

    def whole(on: bool) -> float:
        old = _numba.set_enabled(on)
        try:
            _stein.row_sums(npx, st, 128, "upper")
            best = float("inf")
            for _ in range(3):
                with Clock() as c:
                    _stein.row_sums(npx, st, 128, "upper")
                best = min(best, c.cpu)
        finally:
            _numba.set_enabled(old)
        return best / npairs * 1e9

    bound = (8 * d + 15) / peak
    paths = [["NumPy path (natives off)", whole(False)], ["tiled path (natives on)", whole(True)],
             ["arithmetic bound", bound]]
    for p in paths:
        p.append(p[1] / bound)
    dims = []
    for n, reps in [(2000, 5), (20_000, 2)]:
        for kind in ("joint", "sum"):
            for dd in (1, 2, 3, 4, 6):
                xs = np.random.default_rng(1).standard_normal((n, dd))
                sd = _stein.make_stein(npx, xs, -xs, _stein.resolve_preconditioner(npx, xs, "med"), 1.0, -0.5, kind)

                def best(fn, reps=reps):
                    fn()
                    out = float("inf")
                    for _ in range(reps):
                        with Clock() as c:
                            fn()
                        out = min(out, c.cpu)
                    return out

                old = _numba_stein.STEIN_MAX_DIMS
                _numba_stein.STEIN_MAX_DIMS = {"joint": _numba_stein.STEIN_MAX_DIM, "sum": _numba_stein.STEIN_MAX_DIM}
                try:
                    loop = best(lambda: _numba_stein.stein_row_sums(npx, sd, 128, "upper"))
                finally:
                    _numba_stein.STEIN_MAX_DIMS = old
                tiled = best(lambda: _numba_stein.stein_tiles(sd, "upper"))
                dims.append([n, kind, dd, loop * 1e3, tiled * 1e3, loop / tiled])
    tables = {
        "loop_vs_tiled": {"columns": ["n", "kind", "d", "pair loop, CPU ms", "tiled path, CPU ms", "loop / tiled"],
                          "rows": dims, "formats": [None, None, None, ".1f", ".1f", ".2f"],
                          "notes": "beta = -1/2, scalar preconditioner, upper triangle; best of 5 (n = 2000) or "
                                   "2 (n = 20000) runs, CPU time, one thread."},
        "steps": {"columns": ["step of one 128 x 256 tile", "ns per pair", "flops per pair", "GFLOP/s"],
                  "rows": rows, "formats": [None, ".3f", None, ".1f"],
                  "notes": f"d = {d}, beta = -1/2, joint kind, scalar preconditioner; best of 5 x 200 calls, "
                           f"CPU time; large float64 matrix product: {peak:.1f} GFLOP/s."},
        "paths": {"columns": ["whole pair sum", "ns per pair", "over the bound"], "rows": paths,
                  "formats": [None, ".2f", ".2f"],
                  "notes": f"n = {args.n}, d = {d}, upper triangle; best of 3, CPU time."},
    }
    for name, t in tables.items():
        print(f"\n{name}")
        for row in t["rows"]:
            print("  " + " | ".join(f"{v:.3g}" if isinstance(v, float) else str(v) for v in row))
    print("wrote", write_results("ksd_parts", tables, extra={"threads": threads, "tile": [ROWS, COLS],
                                                             "tiled_path_tile": [_numba_stein.TILE_ROWS,
                                                                                 _numba_stein.TILE_COLS]},
                                 packages=["numba", "array-api-compat"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
