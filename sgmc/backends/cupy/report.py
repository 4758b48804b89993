"""Static resource report of the CUDA kernels and the occupancy it implies on an H100.

``python -m sgmc.backends.cupy.report`` compiles every kernel with NVRTC (no GPU needed; the
``cuda-compile`` extra), asks ptxas for registers, spills and shared memory per kernel, and prints a
Markdown table with the theoretical occupancy on an H100 (compute capability 9.0) at the block size
the host code launches with. docs/gpu.md shows its output.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

from ._compile import KERNEL_FILES, compile_source, kernel_names

__all__ = ["H100", "KernelResources", "occupancy", "resource_report", "launch_threads"]


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
            out.setdefault(current, {"spill_stores": 0, "spill_loads": 0, "registers": 0, "shared": 0})
            continue
        if current is None:
            continue
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


def resource_report(arch: str = "sm_90") -> list[KernelResources]:
    """Registers, spills and static shared memory of every kernel, with its H100 occupancy."""
    rows = []
    for filename in KERNEL_FILES:
        _, log = compile_source(filename, arch, cubin=True, verbose=True)
        table = _parse(log)
        for name in kernel_names(filename):
            r = table[name]
            threads = launch_threads(filename, name)
            occ, blocks, limit = occupancy(r["registers"], r["shared"], threads)
            rows.append(KernelResources(name, arch, r["registers"], r["spill_stores"], r["spill_loads"],
                                        r["shared"], threads, occ, blocks, limit))
    return rows


def markdown(rows: list[KernelResources]) -> str:
    lines = [
        "| kernel | registers | spills (store/load bytes) | static shared memory | threads/block "
        "| blocks/SM | occupancy | limited by |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| `{r.kernel}` | {r.registers} | {r.spill_stores}/{r.spill_loads} | {r.shared} B | {r.threads} "
            f"| {r.blocks_per_sm} | {r.occupancy:.0%} | {r.limit} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - a documentation helper
    import sys

    arch = sys.argv[1] if len(sys.argv) > 1 else "sm_90"
    print(markdown(resource_report(arch)))
