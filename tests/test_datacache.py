"""The data cache rebuilds every entry it cannot read or whose checksums do not match."""

from __future__ import annotations

import os

import numpy as np
import pytest

from sgmc.datasets import cache as _datacache

ARRAYS = {"X": np.arange(600.0).reshape(200, 3), "y": np.arange(200) % 2}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SGMC_DATA", str(tmp_path))
    calls = []

    def build():
        calls.append(1)
        return {k: v.copy() for k, v in ARRAYS.items()}

    return tmp_path / "entry.npz", build, calls


def _same(arrays):
    assert sorted(arrays) == sorted(ARRAYS)
    for k, v in ARRAYS.items():
        np.testing.assert_array_equal(arrays[k], v)
        assert arrays[k].dtype == v.dtype


def test_an_entry_is_built_once_and_then_read(cache):
    path, build, calls = cache
    _same(_datacache.cached_arrays("entry", build))
    _same(_datacache.cached_arrays("entry", build))
    assert len(calls) == 1 and path.exists()


def _flip(data: bytes, pos: int) -> bytes:
    return data[:pos] + bytes([data[pos] ^ 0x04]) + data[pos + 1:]


DAMAGE = ["empty", "truncated_half", "truncated_end", "garbage", "zeroed_middle", "pickle", "single_array",
          "no_checksums", "altered_array", "foreign_archive"] + [f"flip_{f}" for f in (0.0, 0.05, 0.2, 0.4, 0.6, 0.8, 0.97)]


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_entry_is_rebuilt(cache, damage):
    path, build, calls = cache
    _datacache.cached_arrays("entry", build)
    data = path.read_bytes()
    if damage == "empty":
        path.write_bytes(b"")
    elif damage == "truncated_half":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "truncated_end":
        path.write_bytes(data[:-3])
    elif damage == "garbage":
        path.write_bytes(os.urandom(len(data)))
    elif damage == "zeroed_middle":
        mid = len(data) // 2
        path.write_bytes(data[:mid] + bytes(256) + data[mid + 256:])
    elif damage == "pickle":
        import pickle

        path.write_bytes(pickle.dumps({"X": 1}))
    elif damage == "single_array":
        with open(path, "wb") as fh:
            np.save(fh, np.zeros(3))
    elif damage == "no_checksums":  # an entry of an earlier version: rebuilt, since it cannot be checked
        np.savez(path, **ARRAYS)
    elif damage == "altered_array":  # a readable archive whose array no longer matches its checksum
        with np.load(path) as f:
            arrays = {k: f[k] for k in f.files}
        arrays["X"] = arrays["X"] * 2
        np.savez(path, **arrays)
    elif damage == "foreign_archive":
        np.savez(path, other=np.ones(2))
    else:
        path.write_bytes(_flip(data, min(len(data) - 1, int(float(damage[5:]) * len(data)))))
    _same(_datacache.cached_arrays("entry", build))
    assert len(calls) == 2  # rebuilt ...
    _same(_datacache.cached_arrays("entry", build))
    assert len(calls) == 2  # ... and written again, readable afterwards
