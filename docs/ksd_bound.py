"""The KSD's CPU time on one core against the arithmetic bound of its dominant work.

What is measured, on the machine the script runs on, pinned to one core (``--core``) with one BLAS
thread (threadpoolctl):

* the rate R of a large float64 matrix product (``--gemm`` square, best of 3, CPU time), the speed
  the core sustains on arithmetic that streams from cache;
* the CPU time of ``sgmc.diagnostics.ksd(x, s, kind=...)`` at n = 20,000 points, d = 10 and 100, with
  the default IMQ kernel (c = 1, beta = -1/2, identity preconditioner), for the default ``kind="sum"``
  and for ``kind="joint"``; best of ``--reps`` calls after a warm-up that compiles the kernels; and the
  same with the compiled paths off (``SGMC_NATIVE=0``'s switch), the NumPy path.

The flop count. The V-statistic sums the Stein kernel over the n (n + 1) / 2 pairs i <= j (the
kernel is symmetric; the diagonal once, the rest twice). For a pair, with u = A x (A the inverse
preconditioner), B = c^2 + (x_i - x_j)^T A (x_i - x_j) and W = B^beta, W1 = W / B, W2 = W1 / B:

* B itself is an inner product of length d + 2 of row features [x, x.u + c^2, 1] with column features
  [-2 u, 1, x.u]: 2 (d + 2) flops;
* the powers: 1 / B, its square root (beta = -1/2), W1 and, where needed, W2: one flop each, 3 for the
  joint kind and 4 for the sum kind (a division and a square root are counted as one flop, though
  they cost the core more than a multiply-add);
* the score terms, contractions of W, W1 and W2 with column features, written as products over the
  pairs: W with the scores s (d columns), 2 d flops; for the joint kind W1 with [s, u, -s.u, 1]
  (2 d + 2 columns) and the row sums of W2 (isotropic A: |A (x - y)|^2 = a (B - c^2)), 2 (2 d + 2) + 2
  flops; for the sum kind, which keeps every coordinate's term, W1 with [s, u, s u, 1] (3 d + 1
  columns) and W2 with [u, u^2, 1] (2 d + 1 columns), 2 (3 d + 1) + 2 (2 d + 1) flops.

Per pair that is 8 d + 13 flops for the joint kind and 14 d + 12 for the sum kind (d = 10: 93 and
152; d = 100: 813 and 1412). Writing the pair's terms out directly (differences, not products of
features) costs about as much: about 8 d for the joint kind and 14 d for the sum kind. The O(n d)
set-up and the final per-row combination are left out. The bound is flops / R: the time the core
would take if every one of these flops ran at the speed of a large matrix product. The ratio
time / bound is what the table reports.

The table goes to ``docs/results/ksd_bound.json``, which docs/performance.md renders.

Usage (from the repository root)::

    python docs/ksd_bound.py [--n 20000] [--dims 10,100] [--reps 2] [--core 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from docs._results import write_results  # noqa: E402  (records the load at start)


def flops_per_pair(kind: str, d: int) -> int:
    """The flop count of one pair of the KSD's dominant work (see the module docstring)."""
    if kind == "joint":
        return 2 * (d + 2) + 3 + 2 * d + 2 * (2 * d + 2) + 2
    return 2 * (d + 2) + 4 + 2 * d + 2 * (3 * d + 1) + 2 * (2 * d + 1)


def gemm_rate(size: int) -> float:
    """Flops per CPU second of a square float64 matrix product (best of 3, after one warm-up)."""
    import numpy as np

    a = np.random.default_rng(0).standard_normal((size, size))
    b = np.random.default_rng(1).standard_normal((size, size))
    out = np.empty((size, size))
    np.matmul(a, b, out=out)
    best = float("inf")
    for _ in range(3):
        t = time.process_time()
        np.matmul(a, b, out=out)
        best = min(best, time.process_time() - t)
    return 2.0 * size**3 / best


def ksd_seconds(x, s, kind: str, reps: int) -> tuple[float, float]:
    """Best CPU time of ``ksd(x, s, kind=kind)`` over ``reps`` calls, and its value."""
    from sgmc.diagnostics import ksd

    ksd(x[:300], s[:300], kind=kind)  # compiles (or loads) the kernels outside the timing
    best, value = float("inf"), float("nan")
    for _ in range(reps):
        t = time.process_time()
        value = float(ksd(x, s, kind=kind))
        best = min(best, time.process_time() - t)
    return best, value


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000, help="points")
    parser.add_argument("--dims", default="10,100", help="comma-separated dimensions")
    parser.add_argument("--reps", type=int, default=2, help="timed calls per case (the best is reported)")
    parser.add_argument("--gemm", type=int, default=3000, help="size of the square matrix product")
    parser.add_argument("--core", type=int, default=None, help="core to pin to (default: the last usable one)")
    parser.add_argument("--no-twin", action="store_true", help="skip the NumPy path (natives off)")
    args = parser.parse_args(argv)
    try:
        dims = [int(v) for v in args.dims.split(",")]
    except ValueError:
        msg = f"--dims must be comma-separated integers; got {args.dims!r}"
        raise SystemExit(msg) from None
    if args.n < 2 or args.reps < 1 or args.gemm < 100 or any(d < 1 for d in dims):
        msg = f"need --n >= 2, --reps >= 1, --gemm >= 100 and positive --dims; got {args.n}, {args.reps}, " \
              f"{args.gemm}, {dims}"
        raise SystemExit(msg)
    core = args.core
    if hasattr(os, "sched_setaffinity"):
        usable = sorted(os.sched_getaffinity(0))
        core = usable[-1] if core is None else core
        if core not in usable:
            msg = f"--core must be one of the usable cores {usable}; got {core}"
            raise SystemExit(msg)
        os.sched_setaffinity(0, {core})

    import numpy as np
    from threadpoolctl import threadpool_limits

    from sgmc.backends import _native_switch

    rows, raw = [], []
    with threadpool_limits(1):
        rate = gemm_rate(args.gemm)
        print(f"matrix product {args.gemm}^2: {rate / 1e9:.1f} GFLOP/s", flush=True)
        for d in dims:
            r = np.random.default_rng(d)
            x = r.standard_normal((args.n, d))
            s = -x + 0.1 * r.standard_normal((args.n, d))  # scores of N(0, I) with gradient noise
            for kind in ("sum", "joint"):
                secs, value = ksd_seconds(x, s, kind, args.reps)
                twin = twin_value = None
                if not args.no_twin:
                    old = _native_switch.set_enabled(False)
                    try:
                        twin, twin_value = ksd_seconds(x, s, kind, args.reps)
                    finally:
                        _native_switch.set_enabled(old)
                    if abs(twin_value - value) > 1e-12 * abs(twin_value):
                        msg = f"the compiled and NumPy paths disagree: {value!r} and {twin_value!r} (d = {d}, {kind})"
                        raise RuntimeError(msg)
                per = flops_per_pair(kind, d)
                flops = per * args.n * (args.n + 1) / 2
                bound = flops / rate
                label = f"{kind}{' (default)' if kind == 'sum' else ''}"
                rows.append([args.n, d, label, per, round(flops / 1e9, 2), round(rate / 1e9, 1), round(bound, 3),
                             round(secs, 3), round(secs / bound, 2),
                             "–" if twin is None else round(twin, 3),
                             "–" if twin is None else round(twin / bound, 2)])
                raw.append({"n": args.n, "d": d, "kind": kind, "seconds": secs, "value": value,
                            "numpy_seconds": twin, "numpy_value": twin_value, "flops": flops})
                print(f"n = {args.n}, d = {d}, {kind}: {secs:.3f} s, bound {bound:.3f} s, ratio {secs / bound:.2f}"
                      + ("" if twin is None else f"; NumPy path {twin:.3f} s ({twin / bound:.2f})"), flush=True)
    tables = {
        "bound": {
            "columns": ["n", "d", "kind", "flops per pair", "GFLOP", "matrix product, GFLOP/s", "bound, s",
                        "sgmc, CPU s", "sgmc / bound", "NumPy path, CPU s", "NumPy path / bound"],
            "rows": rows,
            "notes": (f"IMQ kernel, c = 1, beta = -1/2, identity preconditioner; one core (pinned), one BLAS "
                      f"thread; best of {args.reps} calls, CPU time; matrix product {args.gemm} x {args.gemm}, "
                      "best of 3. 'sgmc' runs with the compiled paths on (the default); 'NumPy path' with them "
                      "off."),
        }
    }
    write_results("ksd_bound", tables, extra={"core": core, "raw": raw, "gemm_size": args.gemm},
                  packages=("numba",))
    return tables


if __name__ == "__main__":
    main()
