"""Running a model in a child process whose address space is limited below the size of its data.

The child script starts with :data:`PROLOGUE`, which defines

* ``vm()``: the process's virtual size (``VmSize``), used only to set the limit;
* ``limit_below(data_bytes)``: an ``RLIMIT_AS`` that leaves room for half the data above the
  virtual size (as it was before any trim: the run reuses the heap it had);
* ``refused(paths)``: which of reading and mapping all of ``paths`` fails under that limit;
* ``held_base()`` and ``held(base, paths)``: what the process keeps of its data since ``base``.

What a model keeps of its data is measured by what could hold it, not by total virtual size, which
jumps by whole reservations unrelated to the data (a new thread's 8 MiB stack, a 64 MiB malloc
arena, a BLAS buffer): ``held`` returns the bytes of the data files still mapped (from
``/proc/self/maps``) and the growth of resident anonymous memory (``RssAnon`` in
``/proc/self/status``, after ``malloc_trim`` has handed freed heap pages back), where any copy of the data would live. A reserved but
untouched stack or arena adds nothing to either.

The child builds its model on data read from disk, measures ``held``, limits itself with
``limit_below(data)``, checks with ``refused(paths)`` that reading or mapping all of its files fails
there, runs, saves its draws with ``numpy.save`` and prints one JSON line. :func:`run_child` runs
it and returns that line.
"""

import json
import subprocess
import sys
import textwrap

PROLOGUE = textwrap.dedent("""
    import ctypes, gc, json, os, resource, sys, warnings
    import numpy as np

    def _status(key):
        for line in open("/proc/self/status"):
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
        raise RuntimeError(key + " is not in /proc/self/status")

    def vm():
        return _status("VmSize")

    _RESERVED = [0]

    def _trim():
        gc.collect()
        _RESERVED[0] = max(_RESERVED[0], vm())     # the heap as it was, for limit_below
        try:
            ctypes.CDLL(None).malloc_trim(0)
        except (OSError, AttributeError):
            pass

    def held_base():
        _trim()
        return _status("RssAnon")

    def _mapped(paths):
        want = {os.path.realpath(p) for p in paths}
        total = 0
        for line in open("/proc/self/maps"):
            parts = line.split(None, 5)
            if len(parts) == 6 and os.path.realpath(parts[5].strip()) in want:
                lo, hi = (int(a, 16) for a in parts[0].split("-"))
                total += hi - lo
        return total

    def held(base, paths):
        _trim()
        mapped = _mapped(paths)
        anon = max(0, _status("RssAnon") - base)
        return {"mapped": mapped, "anon": anon, "total": mapped + anon}

    def limit_below(data):
        gc.collect()
        limit = max(vm(), _RESERVED[0]) + data // 2
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


def check_held(res):
    """The child's model keeps neither a map of its data files nor a copy of the data."""
    held = res["held"]
    assert held["mapped"] == 0, held                            # no map of the data files is kept
    assert held["anon"] < res["data"] // 4, held                # and no copy of the data
