"""The static resource report of the CUDA kernels as a results file: ``docs/results/gpu_resources.json``.

Compiles every kernel with NVRTC and ptxas (no GPU needed: ``pip install "sgmc[cuda-compile]"``)
with exactly the options of the run-time compile (sgmc's own plus those CuPy adds, ``-ftz=true``
among them) and records, per kernel, registers, spills, stack frame, static shared memory and the
theoretical occupancy on an H100 at the block size the host code launches with
(:mod:`sgmc.backends.cupy.report`). Tables: ``kernels`` (every kernel at the defaults of
``KERNEL_FILES``, the Stein kernels at d = 10) and ``stein`` (each Stein kernel at d = 1, 16 and its
cap, where it still fits registers, and one dimension above it, where it does not and the twin runs
instead). Every Stein row at every supported dimension is stored under ``extra``.

Usage (from the repository root)::

    python asv_benchmarks/gpu_resources.py [sm_90]
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from docs._results import write_results  # noqa: E402

from sgmc.backends.cupy import _native  # noqa: E402
from sgmc.backends.cupy._compile import runtime_options  # noqa: E402
from sgmc.backends.cupy.report import _rows, resource_report, stein_report, table  # noqa: E402


def main(argv: list[str]) -> int:
    arch = argv[0] if argv else "sm_90"
    kernels = resource_report(arch)
    every = stein_report(arch)
    rows = []
    for (kind, dtype), cap in sorted(_native.STEIN_MAX_DIMS.items()):
        name = f"stein_{kind}_{'f64' if dtype == 'float64' else 'f32'}"
        for d in sorted({1, 16, cap, cap + 1}):
            if d <= cap:
                r = next(r for r in every if r.kernel == f"{name}@{d}")
                rows.append([name, d, "kernel", r.registers, r.spill_stores, r.stack, f"{r.occupancy:.0%}"])
            elif d <= 64:
                bs = _native.stein_block(d)
                r = next(r for r in _rows("stein.cu", arch, {"SGMC_DIM": d, "SGMC_BLOCK": bs}, bs) if r.kernel == name)
                rows.append([name, d, "twin (above the cap)", r.registers, r.spill_stores, r.stack,
                             f"{r.occupancy:.0%}"])
    bad = [r.kernel for r in kernels + every if r.stack or r.spill_stores or r.spill_loads]
    tables = {
        "kernels": {**table(kernels), "notes": f"{arch}, NVRTC options: {' '.join(runtime_options(None, arch))} "
                                             "(+ per-file defines; resample.cu adds --fmad=false)"},
        "stein": {"columns": ["kernel", "d", "runs", "registers", "spill stores (B)", "stack frame (B)",
                              "occupancy"], "rows": rows,
                  "notes": "the cap per kernel is the largest d without spills or stack frame on sm_80 and sm_90"},
    }
    path = write_results("gpu_resources", tables, extra={"arch": arch, "stein_every_dimension": table(every)["rows"],
                                                         "kernels_with_stack_or_spills": bad},
                         packages=("nvidia-cuda-nvrtc-cu12", "cupy-cuda12x"))
    print(f"wrote {path}")
    if bad:
        print(f"stack frames or spills: {bad}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
