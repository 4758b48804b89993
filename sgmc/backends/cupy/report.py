"""Static resource report of the CUDA kernels and the occupancy it implies on an H100.

``python -m sgmc.backends.cupy.report`` compiles every kernel with NVRTC (no GPU needed; the
``cuda-compile`` extra) with exactly the options of the run-time compile
(:func:`~sgmc.backends.cupy._compile.runtime_options`: sgmc's own plus what CuPy adds, ``-ftz=true``
included), asks ptxas for registers, spills, stack frame and shared memory per kernel, and prints
Markdown tables with the theoretical occupancy on an H100 (compute capability 9.0) at the block size
the host code launches with: every kernel at the defaults of ``KERNEL_FILES``, and the Stein
kernels at every dimension they run at (1 to their cap). ``--json PATH`` also writes the rows as a
results file. docs/gpu.md shows its output.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

from ._compile import KERNEL_FILES, compile_source, kernel_names

__all__ = ["H100", "KernelResources", "occupancy", "resource_report", "stein_report", "launch_threads"]


class _SM(NamedTuple):
    name: str
    regs: int  # 32-bit registers per SM
    smem: int  # bytes of shared memory per SM usable by blocks
    smem_reserved: int  # bytes the driver reserves per resident block
    threads: int  # resident threads per SM
    blocks: int  # resident blocks per SM
    reg_unit: int  # registers are allocated per warp in units of this many


#: NVIDIA H100 (sm_90): 64 Ki registers, 228 KiB shared memory, 2048 threads and 32 blocks per SM.
H100 = _SM("H100 (sm_90)", 65536, 228 * 1024, 1024, 2048, 32, 256)


def occupancy(registers: int, shared: int, threads: int, sm: _SM = H100) -> tuple[float, int, str]:
    """Theoretical occupancy ``(fraction of resident warps, blocks per SM, limiting resource)``."""
    warps = math.ceil(threads / 32)
    per_warp = math.ceil(max(registers, 1) * 32 / sm.reg_unit) * sm.reg_unit
    limits = {
        "registers": sm.regs // (per_warp * warps),
        "shared memory": sm.smem // (shared + sm.smem_reserved),
        "threads": sm.threads // threads,
        "blocks": sm.blocks,
    }
    blocks = min(limits.values())
    limit = ", ".join(k for k, v in limits.items() if v == blocks)
    return blocks * warps / (sm.threads // 32), blocks, limit


class KernelResources(NamedTuple):
    kernel: str
    arch: str
    registers: int
    spill_stores: int
    spill_loads: int
    stack: int  # bytes of stack frame per thread (local memory): 0 when everything fits registers
    shared: int
    threads: int
    occupancy: float
    blocks_per_sm: int
    limit: str


def launch_threads(filename: str, kernel: str) -> int:
    """Threads per block the host code (:mod:`._native`) launches ``kernel`` with."""
    if filename in ("stein.cu", "glm.cu", "stochvol.cu", "subsample.cu"):
        return KERNEL_FILES[filename]["SGMC_BLOCK"]
    return 256


def _parse(log: str) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    current = None
    for line in log.splitlines():
        m = re.search(r"Function properties for (\w+)", line)
        if m:
            current = m.group(1)
            out.setdefault(current, {"spill_stores": 0, "spill_loads": 0, "registers": 0, "shared": 0, "stack": 0})
            continue
        if current is None:
            continue
        m = re.search(r"(\d+) bytes stack frame", line)
        if m:
            out[current]["stack"] = int(m.group(1))
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            out[current]["spill_stores"] = int(m.group(1))
            out[current]["spill_loads"] = int(m.group(2))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            out[current]["registers"] = int(m.group(1))
            m2 = re.search(r"(\d+) bytes smem", line)
            out[current]["shared"] = int(m2.group(1)) if m2 else 0
    return out


def _rows(filename: str, arch: str, defines: dict[str, int] | None, threads: int | None = None,
          label: str = "") -> list[KernelResources]:
    _, log = compile_source(filename, arch, defines, cubin=True, verbose=True)
    table = _parse(log)
    rows = []
    for name in kernel_names(filename):
        if name not in table:
            msg = f"ptxas reported nothing for {name} of {filename}; its log was:\n{log}"
            raise RuntimeError(msg)
        r = table[name]
        t = launch_threads(filename, name) if threads is None else threads
        occ, blocks, limit = occupancy(r["registers"], r["shared"], t)
        rows.append(KernelResources(name + label, arch, r["registers"], r["spill_stores"], r["spill_loads"],
                                    r["stack"], r["shared"], t, occ, blocks, limit))
    return rows


def resource_report(arch: str = "sm_90") -> list[KernelResources]:
    """Registers, spills, stack frame and static shared memory of every kernel, with its H100 occupancy."""
    rows = []
    for filename in KERNEL_FILES:
        rows += _rows(filename, arch, None)
    return rows


def stein_report(arch: str = "sm_90", dims: range | None = None) -> list[KernelResources]:
    """The Stein kernels at every dimension ``d`` they run at (``1..STEIN_MAX_DIM``), named ``kernel@d``.

    Each kernel at dimensions above its own cap (:data:`~sgmc.backends.cupy._native.STEIN_MAX_DIMS`)
    is left out: the twin runs there.
    """
    from ._native import STEIN_MAX_DIM, stein_block, stein_max_dim

    rows = []
    for d in dims or range(1, STEIN_MAX_DIM + 1):
        bs = stein_block(d)
        for r in _rows("stein.cu", arch, {"SGMC_DIM": d, "SGMC_BLOCK": bs}, bs, f"@{d}"):
            kind, sfx = r.kernel.split("@")[0].split("_")[1:]
            if d <= stein_max_dim(kind, "float64" if sfx == "f64" else "float32"):
                rows.append(r)
    return rows


def markdown(rows: list[KernelResources]) -> str:
    lines = [
        "| kernel | registers | spills (store/load bytes) | stack frame | static shared memory | threads/block "
        "| blocks/SM | occupancy | limited by |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| `{r.kernel}` | {r.registers} | {r.spill_stores}/{r.spill_loads} | {r.stack} B | {r.shared} B "
            f"| {r.threads} | {r.blocks_per_sm} | {r.occupancy:.0%} | {r.limit} |"
        )
    return "\n".join(lines)


COLUMNS = ["kernel", "registers", "spill stores (B)", "spill loads (B)", "stack frame (B)", "shared memory (B)",
           "threads/block", "blocks/SM", "occupancy", "limited by"]


def table(rows: list[KernelResources]) -> dict:
    """The rows as a results table (``columns`` and ``rows``) for :func:`docs._results.write_results`."""
    return {"columns": COLUMNS,
            "rows": [[r.kernel, r.registers, r.spill_stores, r.spill_loads, r.stack, r.shared, r.threads,
                      r.blocks_per_sm, f"{r.occupancy:.0%}", r.limit] for r in rows]}


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - a documentation helper
    import argparse

    p = argparse.ArgumentParser(prog="python -m sgmc.backends.cupy.report", description=__doc__.split("\n\n")[0])
    p.add_argument("arch", nargs="?", default="sm_90")
    p.add_argument("--stein", action="store_true", help="the Stein kernels at every dimension they run at")
    args = p.parse_args(argv)
    rows = stein_report(args.arch) if args.stein else resource_report(args.arch)
    print(markdown(rows))
    bad = [r.kernel for r in rows if r.stack or r.spill_stores or r.spill_loads]
    if bad:
        print(f"stack frames or spills in: {', '.join(bad)}")
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover - a documentation helper
    raise SystemExit(main())
