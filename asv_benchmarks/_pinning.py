"""Give every contender of a benchmark the same cores, check it, and time wall and CPU clocks.

Import this module and call :func:`pin` FIRST, before NumPy, JAX, torch or Numba are imported: it
sets the one-thread switches of every library in the environment (inherited by child processes) and
restricts the process to the chosen cores with ``os.sched_setaffinity``. Threads created later (the
BLAS pool, XLA's and Numba's workers) inherit the restriction, so even a library that ignores its
thread switches (JAX starts its pools regardless) runs on those cores only. Child processes are
started under ``taskset -c CORES`` (:func:`child_command`) and pin themselves again.

:func:`verify` reads ``/proc/self/task/*/status`` and checks that no thread of the process may run
outside the cores, and asks threadpoolctl how many threads each BLAS/OpenMP pool has; a benchmark
records its report beside the timings and stops if the check fails.

:class:`Clock` measures wall time and CPU time (``time.process_time``: every thread of this process,
plus ``resource.getrusage(RUSAGE_CHILDREN)`` for children that ended); a child that stays alive reports
its own CPU time.
"""

from __future__ import annotations

import os
import resource
import shutil
import sys
import time

ONE_THREAD_ENV = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
    "NUMBA_NUM_THREADS": "1",
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
    "JAX_PLATFORMS": "cpu",
}


def parse_cores(text: str) -> set[int]:
    """``"1"``, ``"0,1"`` or ``"0-3"`` as a set of core ids."""
    out = set()
    for part in str(text).split(","):
        lo, _, hi = part.strip().partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            msg = f"cores must look like '1', '0,1' or '0-3', got {text!r}"
            raise ValueError(msg)
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def cores_arg(argv=None, default: str = "1") -> str:
    """``--cores`` of ``argv`` (``sys.argv``), read before argparse runs; else ``SGMC_BENCH_CORES``, else 1."""
    argv = sys.argv if argv is None else argv
    default = os.environ.get("SGMC_BENCH_CORES", default)
    for i, a in enumerate(argv):
        if a == "--cores" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--cores="):
            return a.split("=", 1)[1]
    return default


def pin(cores: str | None = None) -> set[int]:
    """Restrict this process to ``cores`` (default: ``--cores`` of the command line, else core 1)."""
    wanted = parse_cores(cores if cores is not None else cores_arg())
    late = [m for m in ("numpy", "jax", "torch", "numba") if m in sys.modules]
    if late:
        msg = f"pin() must run before {', '.join(late)} is imported (its threads would not be pinned)"
        raise RuntimeError(msg)
    available = os.sched_getaffinity(0)
    if not wanted <= available | set(range(os.cpu_count() or 1)):
        msg = f"cores {sorted(wanted)} are not on this machine (it has {sorted(available)})"
        raise ValueError(msg)
    os.environ.update(ONE_THREAD_ENV)
    os.environ["SGMC_BENCH_CORES"] = ",".join(str(c) for c in sorted(wanted))
    os.sched_setaffinity(0, wanted)
    return wanted


def child_command(cmd: list[str], cores: set[int]) -> list[str]:
    """``cmd`` under ``taskset -c CORES`` (where taskset exists; the child also inherits the mask)."""
    taskset = shutil.which("taskset")
    if taskset is None:
        return list(cmd)
    return [taskset, "-c", ",".join(str(c) for c in sorted(cores)), *cmd]


def thread_affinities(pid: str = "self") -> dict[int, set[int]]:
    """Each thread of process ``pid`` and the cores it may run on."""
    out = {}
    base = f"/proc/{pid}/task"
    for tid in os.listdir(base):
        try:
            with open(f"{base}/{tid}/status", encoding="ascii") as fh:
                for line in fh:
                    if line.startswith("Cpus_allowed_list:"):
                        out[int(tid)] = parse_cores(line.split(":", 1)[1].strip())
        except (OSError, ValueError):
            continue  # the thread ended meanwhile
    return out


def verify(cores: set[int], pid: str = "self") -> dict:
    """Check that every thread of ``pid`` is confined to ``cores``; report threads and BLAS pools."""
    aff = thread_affinities(pid)
    outside = {tid: sorted(c) for tid, c in aff.items() if not c <= cores}
    report = {"pid": os.getpid() if pid == "self" else int(pid), "threads": len(aff),
              "cores": sorted(cores), "threads_outside": outside}
    if pid == "self":
        try:
            from threadpoolctl import threadpool_info
        except ImportError:
            report["pools"] = "threadpoolctl not installed"
        else:
            report["pools"] = [{"api": p.get("internal_api"), "threads": p.get("num_threads"),
                                "library": os.path.basename(p.get("filepath", ""))}
                               for p in threadpool_info()]
            big = [p for p in report["pools"] if (p["threads"] or 0) > len(cores)]
            if big:
                outside["pools"] = big
    if outside:
        msg = f"threads outside cores {sorted(cores)}: {outside}"
        raise RuntimeError(msg)
    return report


class Clock:
    """Wall and CPU seconds of a block: ``with Clock() as c: ...``, then ``c.wall``, ``c.cpu``."""

    def __enter__(self):
        self._w = time.perf_counter()
        self._c = time.process_time()
        self._k = _children_cpu()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self._w
        self.cpu = time.process_time() - self._c + _children_cpu() - self._k
        return False


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def load() -> float:
    """The one-minute load average."""
    return os.getloadavg()[0]
