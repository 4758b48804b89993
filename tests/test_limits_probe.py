"""The address-space tests' probe (tests/_limits.py) sees what a process keeps of its data, and only that.

A kept map of the data file and a kept copy of the data must both show, at their size; a thread's
stack, a new malloc arena and a large reservation that is never touched must not, though each one
grows the virtual size by megabytes (the growth that made the old ``VmSize`` measure flaky).
"""

import sys

import numpy as np
import pytest

from _limits import run_child

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self is Linux's")

_KEEP = """
    path, how = sys.argv[1], sys.argv[2]
    base = held_base()
    v0 = vm()
    if how == "map":
        keep = np.memmap(path, dtype=np.uint8, mode="r")
        keep[::4096].sum()
    elif how == "copy":
        keep = np.fromfile(path, dtype=np.uint8)
    elif how == "reservations":
        import mmap, threading
        stop = threading.Event()
        threads = [threading.Thread(target=stop.wait) for _ in range(4)]   # 8 MiB stacks, arenas on use
        for t in threads:
            t.start()
        keep = mmap.mmap(-1, 64 << 20)                                     # reserved, never touched
    kept = held(base, [path])
    grew = vm() - v0
    if how == "reservations":
        stop.set()
        for t in threads:
            t.join()
    print(json.dumps({"held": kept, "grew": grew}))
"""


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("probe") / "data.bin"
    np.random.default_rng(0).integers(0, 255, 24 << 20, dtype=np.uint8).tofile(path)
    return str(path)


def test_a_kept_map_of_the_data_file_is_seen_at_its_size(data_file):
    res = run_child(_KEEP, data_file, "map")
    assert res["held"]["mapped"] == 24 << 20


def test_a_kept_copy_of_the_data_is_seen_at_its_size(data_file):
    res = run_child(_KEEP, data_file, "copy")
    assert res["held"]["mapped"] == 0
    assert res["held"]["anon"] >= 24 << 20


def test_thread_stacks_and_untouched_reservations_are_not_counted(data_file):
    res = run_child(_KEEP, data_file, "reservations")
    assert res["grew"] >= 64 << 20                       # the virtual size jumped by the reservations ...
    assert res["held"]["mapped"] == 0
    assert res["held"]["anon"] < 2 << 20                 # ... what the process keeps did not
