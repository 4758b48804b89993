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

The differences to ``numpy`` are what Numba adds. A second table, ``floor``, measures what Numba costs
without sgmc, in bare processes that import only NumPy and then, step by step, ``llvmlite.binding``
(the LLVM library), ``numba``, Numba's runtime (the reference counting that any kernel taking arrays
needs, compiled by LLVM when it starts), and the smallest kernels loaded from the cache: one on
scalars, one on arrays, and the array one with the cache loader's registry refresh skipped (what
loading machine code "without the typing machinery" could save at most). Both tables go to
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


KERNELS = """
import numba
import numpy as np


@numba.njit(cache=True)
def scalar(x):
    return x + 1


@numba.njit(cache=True)
def array(x, out):
    for i in range(x.shape[0]):
        out[i] = 2.0 * x[i]
    return out[: x.shape[0]].sum()
"""

FLOOR = [
    ("python + numpy", "import numpy"),
    ("+ import llvmlite.binding", "import numpy, llvmlite.binding"),
    ("+ import numba", "import numpy, numba"),
    ("+ Numba's runtime started (NRT)", "import numpy, numba\nfrom numba.core.registry import cpu_target\n"
     "from numba.core.runtime import nrt\nnrt.rtsys.initialize(cpu_target.target_context)"),
    ("+ one cached kernel on scalars", "import numpy, _nrk\n_nrk.scalar(1)"),
    ("+ one cached kernel on arrays", "import numpy as np, _nrk\n_nrk.array(np.ones(8), np.empty(8))"),
    ("+ one cached kernel on arrays, registry refresh skipped",
     "import numpy as np, _nrk\nfrom numba.core.runtime import nrt\nc = _nrk.array._cache\n"
     "def load(sig, ctx):\n    nrt.rtsys.initialize(ctx)\n    return c._load_overload(sig, ctx)\n"
     "c.load_overload = load\n_nrk.array(np.ones(8), np.empty(8))"),
]


def _bare_peak(code: str, path: str) -> float:
    env = dict(os.environ, NUMBA_CACHE_DIR=os.path.join(path, "cache"), PYTHONPATH=path, OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    code += "\nimport resource\nprint(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True, cwd=path)
    return float(out.stdout.split()[-1])


def floor(reps: int) -> tuple[list, dict]:
    """Peak RSS of bare processes: NumPy, then LLVM, Numba, its runtime, and the smallest cached kernels."""
    path = tempfile.mkdtemp(prefix="sgmc-numba-floor-")
    with open(os.path.join(path, "_nrk.py"), "w") as f:
        f.write(KERNELS)
    _bare_peak(FLOOR[4][1] + "\n" + FLOOR[5][1].replace("import numpy as np, _nrk", "import numpy as np"), path)
    rows, raw = [], {}
    base = None
    for name, code in FLOOR:
        vals = [_bare_peak(code, path) for _ in range(reps)]
        med = statistics.median(vals)
        base = med if base is None else base
        raw[name] = vals
        rows.append([name, med, med - base])
        print(f"{name:58s} {med:7.1f} MiB  (+{med - base:.1f})")
    return rows, raw


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
    frows, fraw = floor(reps)
    tables["floor"] = {"columns": ["bare process", "peak RSS, MiB", "over NumPy only, MiB"], "rows": frows,
                       "formats": [None, ".1f", ".1f"],
                       "notes": f"Median of {reps} fresh processes each, without sgmc; the kernels' machine "
                                "code comes from Numba's on-disk cache (warmed first)."}
    print("wrote", write_results("native_memory", tables, extra={"raw_mib": raw, "floor_raw_mib": fraw},
                                 packages=["numba", "llvmlite"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
