"""Running a model in a child process whose address space is limited below the size of its data.

The child script starts with :data:`PROLOGUE` (``vm()``, ``limit_below(data_bytes)`` and
``refused(paths)``), builds its model on data read from disk, limits itself with
``limit_below(data)``, which leaves room for half the data, checks with ``refused(paths)`` that
reading or mapping all of its files fails there, runs, saves its draws with ``numpy.save`` and prints
one JSON line. :func:`run_child` runs it and returns that line.
"""

import json
import subprocess
import sys
import textwrap

PROLOGUE = textwrap.dedent("""
    import gc, json, resource, sys, warnings
    import numpy as np

    def vm():
        for line in open("/proc/self/status"):
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024

    def limit_below(data):
        gc.collect()
        limit = vm() + data // 2
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        return limit

    def refused(paths):
        out = []
        held = []
        try:
            for p in paths:
                held.append(np.fromfile(p, dtype=np.uint8))
        except MemoryError:
            out.append("read")
        held.clear()
        try:
            for p in paths:
                held.append(np.memmap(p, dtype=np.uint8, mode="r"))
        except (OSError, ValueError, MemoryError):
            out.append("map")
        held.clear()
        gc.collect()
        return out
""")


def run_child(body, *args, timeout=300):
    """Run ``PROLOGUE + body`` with ``args`` in a fresh interpreter; its last stdout line, parsed."""
    out = subprocess.run([sys.executable, "-c", PROLOGUE + textwrap.dedent(body), *map(str, args)],
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])
