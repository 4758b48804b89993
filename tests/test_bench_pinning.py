"""asv_benchmarks/_pinning.py: the peer benchmarks' pinning is checked for real, thread by thread."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "asv_benchmarks"))

import _pinning  # noqa: E402

CHILD = r"""
import os, sys, threading, time
sys.path.insert(0, {bench!r})
import _pinning
cores = _pinning.pin({cores!r})
import numpy as np  # its BLAS threads start after the pinning
ev = threading.Event()
t = threading.Thread(target=ev.wait)
t.start()
rep = _pinning.verify(cores)
print(rep["threads"], sorted(cores), os.environ["OPENBLAS_NUM_THREADS"], os.environ["XLA_FLAGS"])
ev.set()
"""


def test_parse_cores():
    assert _pinning.parse_cores("1") == {1}
    assert _pinning.parse_cores("0,2-3") == {0, 2, 3}
    with pytest.raises(ValueError, match="cores must look like"):
        _pinning.parse_cores("one")


def test_cores_arg():
    assert _pinning.cores_arg(["x.py", "--cores", "0,1"]) == "0,1"
    assert _pinning.cores_arg(["x.py", "--cores=0"]) == "0"


def test_pinned_child_passes_its_own_check():
    core = min(os.sched_getaffinity(0))
    code = CHILD.format(bench=str(ROOT / "asv_benchmarks"), cores=str(core))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    threads, cores, blas, xla = out.stdout.split(" ", 3)
    assert int(threads) >= 2 and cores == f"[{core}]" and blas == "1"
    assert "intra_op_parallelism_threads=1" in xla


def test_verify_finds_threads_outside_the_cores():
    # this process may run on its current cores, none of which is among 4096-4159 (64 cores: more
    # than any BLAS pool here has threads, so only the threads' affinity can fail the check)
    with pytest.raises(RuntimeError, match=r"threads outside cores \[4096.*\{\d+: \["):
        _pinning.verify(set(range(4096, 4160)))
    assert _pinning.verify(os.sched_getaffinity(0))["threads_outside"] == {}


def test_pin_refuses_after_numpy():
    import numpy  # noqa: F401  (already imported by the test suite)

    with pytest.raises(RuntimeError, match="before numpy"):
        _pinning.pin("0")


def test_clock_counts_cpu_time_of_children():
    with _pinning.Clock() as c:
        subprocess.run([sys.executable, "-c", "s = 0\nfor i in range(3_000_000): s += i"], check=True)
    assert c.cpu >= 0.05 and c.wall >= 0.05
