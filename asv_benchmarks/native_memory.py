"""What the compiled CPU paths cost in memory: peak resident set of processes with and without them.

Each case runs in a fresh process (so that nothing is loaded before it) and reports the peak resident
set size (``ru_maxrss``) at its end:

* ``numpy``: ``import sgmc`` and systematic resampling of 4 x 1000 weights with ``SGMC_NATIVE=0``
  (the array-API twin on NumPy; Numba is never imported);
* ``import numba``: the same, plus ``import numba`` and nothing compiled;
* ``compiled, cached``: the same resampling through its compiled path (``SGMC_NATIVE=1``), with the
  machine code loaded from Numba's on-disk cache (``cache=True``; the script warms it first);
* ``compiled, empty cache``: the same with an empty cache directory, so that LLVM compiles the kernel
  in the process.

The differences to ``numpy`` are what Numba adds. The table goes to
``docs/results/native_memory.json``, which docs/performance.md renders.

Usage (from the repository root)::

    python asv_benchmarks/native_memory.py
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from docs._results import write_results  # noqa: E402  (records the load at start)

CHILD = """
import resource, sys
import numpy as np
import sgmc
from sgmc.ssm import resampling
if {numba}:
    import numba
w = np.random.default_rng(0).random((4, 1000))
w /= w.sum(axis=1, keepdims=True)
resampling.ancestors(w, np.random.default_rng(1).random(4), "systematic")
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, "numba" in sys.modules)
"""


def _peak(native: bool, import_numba: bool, cache_dir: str | None) -> tuple[float, bool]:
    env = dict(os.environ, SGMC_NATIVE="1" if native else "0", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               NUMBA_NUM_THREADS="1")
    if cache_dir is not None:
        env["NUMBA_CACHE_DIR"] = cache_dir
    code = CHILD.format(numba=bool(import_numba))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    mib, loaded = out.stdout.split()
    return float(mib), loaded == "True"


def main() -> int:
    reps = 3
    warm = tempfile.mkdtemp(prefix="sgmc-numba-cache-")
    _peak(True, False, warm)  # fill the cache
    cases = [("numpy (SGMC_NATIVE=0)", False, False, None), ("import numba, nothing compiled", False, True, None),
             ("compiled path, machine code from the cache", True, False, warm),
             ("compiled path, empty cache (LLVM compiles)", True, False, "fresh")]
    rows, raw = [], {}
    base = None
    for name, native, imp, cache in cases:
        vals = []
        for _ in range(reps):
            vals.append(_peak(native, imp, tempfile.mkdtemp(prefix="sgmc-numba-cache-") if cache == "fresh" else cache)[0])
        med = statistics.median(vals)
        base = med if base is None else base
        raw[name] = vals
        rows.append([name, med, med - base])
        print(f"{name:48s} {med:7.1f} MiB  (+{med - base:.1f})")
    tables = {"peak_rss": {"columns": ["process", "peak RSS, MiB", "over NumPy only, MiB"], "rows": rows,
                           "formats": [None, ".1f", ".1f"],
                           "notes": f"Median of {reps} fresh processes each; systematic resampling of 4 x 1000 "
                                    "weights, one thread."}}
    print("wrote", write_results("native_memory", tables, extra={"raw_mib": raw}, packages=["numba", "llvmlite"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
