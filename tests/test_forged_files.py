"""Forged checkpoint and trace files: each is refused quickly, with an error naming the file, and runs nothing.

Every forgery is built as an attacker would: a real file written by sgmc's own writer
(:func:`sgmc._safefile.write_container`, :meth:`sgmc.Trace.save`), then edited (a document entry, a
declared size, a member of the archive) with checksums recomputed where the format lets anyone
recompute them. Each must be refused within a generous time bound (the point is that no huge
allocation or long loop starts); the forgeries that would allocate gigabytes are also read in a child
process whose address space is capped, where an allocation attempt would fail differently.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import resource
import struct
import subprocess
import sys
import textwrap
import time
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest

import sgmc
from sgmc import _checkpoint, _safefile
from sgmc.models import LinearRegression

ROOT = Path(__file__).resolve().parent.parent
ARGS = dict(step_size=2e-3, batch_size=40, n_iter=60, chains=2, group_size=1, rng=3, progress=False)
BOUND = 10.0  # seconds: generous, so the test is not flaky; a refusal takes milliseconds


def _data(n=300, d=3, seed=0):
    r = np.random.default_rng(seed)
    X = r.normal(size=(n, d))
    return X, X @ np.linspace(1.0, -1.0, d) + r.normal(size=n)


class MyRegression(LinearRegression):
    """A model class of the user's own: passed again to resume."""


class OtherRegression(LinearRegression):
    """Another user class with the same N and d."""


def _checkpointed(folder, model=None, key=None, name="run.ckpt"):
    path = Path(folder) / name
    sgmc.sample(model if model is not None else LinearRegression(*_data()), "sghmc", "svrg", checkpoint=str(path),
                checkpoint_every=20, checkpoint_key=key, **ARGS)
    data = [p for p in path.parent.iterdir() if p.name.startswith(name + ".") and p.name.endswith(".data")]
    assert len(data) == 1
    return path, data[0]


@pytest.fixture(scope="module")
def run_files(tmp_path_factory):
    return _checkpointed(tmp_path_factory.mktemp("run"))


def _copy(files, folder):
    out = []
    for p in files:
        q = Path(folder) / p.name
        q.write_bytes(p.read_bytes())
        out.append(q)
    return out


def _rewrite(path, kind, edit_doc=None, edit_meta=None, key=None):
    """Read a container, edit its document or meta, and write it again with sgmc's own writer."""
    meta, members = _safefile.read_container(path, kind, "x", key=key)
    doc = json.loads(members["doc"])
    if edit_doc is not None:
        doc = edit_doc(doc)
    if edit_meta is not None:
        meta = edit_meta(meta)
    rest = [(k, v) for k, v in members.items() if k != "doc"]
    _safefile.write_container(path, kind, meta, [("doc", json.dumps(doc).encode()), *rest])


def _find(doc, pred):
    """The first dict entry of ``doc`` (depth first) for which ``pred`` holds."""
    if isinstance(doc, dict):
        if pred(doc):
            return doc
        values = doc.values()
    elif isinstance(doc, list):
        values = doc
    else:
        return None
    for v in values:
        hit = _find(v, pred)
        if hit is not None:
            return hit
    return None


def _refused(path, match=None, **kwargs):
    """Resume ``path``: it must raise a ValueError naming a file of the run, within BOUND seconds."""
    start = time.perf_counter()
    with pytest.raises(ValueError) as info:
        sgmc.resume(str(path), progress=False, **kwargs)
    took = time.perf_counter() - start
    assert took < BOUND, took
    assert str(Path(path).parent) in str(info.value)
    if match is not None:
        assert match in str(info.value), str(info.value)
    return info.value


# -- 1. objects come only from registered constructors ----------------------------------------------------


def _sampler_entry(doc):
    return doc["roles"]["sampler"]


@pytest.mark.parametrize("option", [
    {"$t": "fn", "m": "numpy", "q": "load"},  # a function entry (no longer part of the schema)
    {"$t": "obj", "$id": 10**6, "c": "numpy:load", "o": {}},
    {"$t": "obj", "$id": 10**6, "c": "sgmc.run:resume", "o": {}},
    {"$t": "obj", "$id": 10**6, "c": "sgmc._checkpoint:read", "o": {}},
    {"$t": "meth", "self": {"$r": 0}, "name": "__reduce__"},
])
def test_a_sampler_given_an_attribute_naming_code_is_refused_and_nothing_is_called(tmp_path, run_files, monkeypatch,
                                                                                 option):
    ckpt, data = _copy(run_files, tmp_path)
    calls = []
    monkeypatch.setattr(np, "load", lambda *a, **k: calls.append(a))

    def edit(doc):
        _sampler_entry(doc)["o"]["init"] = option  # an option the constructor does not take
        return doc

    _rewrite(data, "checkpoint data", edit)
    # the forged data file still carries the digest the checkpoint names (the forger copies it), so
    # it is the document, not the file's identity, that is refused
    new_digest = _safefile.read_container(data, "checkpoint data", "x")[0]["sha256"]
    assert new_digest == _checkpoint.read(run_files[0], {})[2].digest
    _refused(ckpt, "not a valid sgmc checkpoint")
    assert calls == []


def test_an_object_stored_as_attributes_is_refused(tmp_path, run_files):
    ckpt, data = _copy(run_files, tmp_path)

    def edit(doc):
        entry = _sampler_entry(doc)
        entry["s"] = {"$t": "dict", "$id": 10**6, "k": ["init"], "v": [1]}  # the old form: __dict__ entries
        del entry["o"]
        return doc

    _rewrite(data, "checkpoint data", edit)
    _refused(ckpt, "not a valid sgmc checkpoint")


def test_an_option_of_the_wrong_type_is_refused(tmp_path, run_files):
    ckpt, data = _copy(run_files, tmp_path)

    def edit(doc):
        _sampler_entry(doc)["o"]["n_leapfrog"] = "many"
        return doc

    _rewrite(data, "checkpoint data", edit)
    _refused(ckpt, "n_leapfrog")


# -- 2. checksums detect damage; only a key detects tampering ---------------------------------------------


def test_a_forgery_by_sgmcs_own_writer_passes_checksums_but_not_the_key(tmp_path):
    key = b"a secret the user keeps"
    ckpt, data = _checkpointed(tmp_path, key=key)
    full = sgmc.resume(str(ckpt), key=key, progress=False)
    # the forger has no key: rewriting with sgmc's own writer makes consistent checksums, unsigned
    meta, members = _safefile.read_container(ckpt, "checkpoint", "x", key=key)
    doc = json.loads(members["doc"])
    _safefile.write_container(ckpt, "checkpoint", meta, [("doc", json.dumps(doc).encode()),
                                                          *[(k, v) for k, v in members.items() if k != "doc"]])
    err = _refused(ckpt, key=key)
    assert "not signed" in str(err)
    # signed with another key
    _safefile.write_container(ckpt, "checkpoint", meta, [("doc", json.dumps(doc).encode()),
                                                          *[(k, v) for k, v in members.items() if k != "doc"]],
                              key=b"the forger's key")
    assert "does not match its signature" in str(_refused(ckpt, key=key))
    # the genuine file again: no key given for a signed file, a wrong key, a flipped byte
    _safefile.write_container(ckpt, "checkpoint", meta, [("doc", json.dumps(doc).encode()),
                                                          *[(k, v) for k, v in members.items() if k != "doc"]],
                              key=key)
    assert "is signed" in str(_refused(ckpt))
    assert "does not match its signature" in str(_refused(ckpt, key=b"a wrong key"))
    np.testing.assert_array_equal(sgmc.resume(str(ckpt), key=key, progress=False).draws, full.draws)
    raw = bytearray(data.read_bytes())
    raw[-60] ^= 0x01  # inside the signature of the data file
    data.write_bytes(bytes(raw))
    _refused(ckpt, key=key)


def test_a_key_of_the_wrong_kind_is_named():
    with pytest.raises(TypeError, match="`checkpoint_key` must be bytes or a str"):
        sgmc.sample(LinearRegression(*_data()), checkpoint="x.ckpt", checkpoint_key=12, **ARGS)
    with pytest.raises(ValueError, match="`checkpoint_key` needs `checkpoint=PATH`"):
        sgmc.sample(LinearRegression(*_data()), checkpoint_key=b"k", **ARGS)
    with pytest.raises(ValueError, match="`key` must not be empty"):
        sgmc.resume("x.ckpt", key=b"")


# -- 3. declared sizes, counts and nesting are bounded before anything is built -------------------------------


def _edit_header(path, edit):
    """Byte edits of a container's header (sizes, say), with the header checksum recomputed as anyone can."""
    raw = path.read_bytes()
    tail = 32 + 32 + 8 + len(_safefile._END)
    (length,) = struct.unpack("<Q", raw[-tail + 64:-tail + 72])
    start = len(raw) - tail - length
    header = json.loads(raw[start:start + length])
    header = edit(header)
    new = json.dumps(header).encode()
    path.write_bytes(raw[:start] + new + hashlib.sha256(new).digest() + bytes(32) + struct.pack("<Q", len(new))
                     + _safefile._END)


def _sixty_gigabytes(header):
    members = header["members"]
    members[0][2] += 60 * 10**9
    members[1][2] -= 60 * 10**9  # the sizes still add up to the bytes present
    return header


@pytest.mark.parametrize("which", ["checkpoint", "data"])
def test_member_sizes_of_plus_and_minus_sixty_gigabytes_are_refused(tmp_path, run_files, which):
    ckpt, data = _copy(run_files, tmp_path)
    _edit_header(ckpt if which == "checkpoint" else data, _sixty_gigabytes)
    _refused(ckpt, "declares")


def _state_value(doc, name, value):
    """Put ``value`` in place of the run state's entry ``name`` (the state is a dict of keys and values)."""
    doc["v"][doc["k"].index(name)] = value
    return doc


def test_a_hundred_million_rows_are_refused(tmp_path, run_files):
    ckpt, _ = _copy(run_files, tmp_path)
    from sgmc.samplers.base import StepInfo

    rows = {"$t": "rows", "c": "sgmc.samplers.base:StepInfo", "n": 10**8,
            "cols": [{"$t": "none"}] * len(StepInfo._fields)}
    _rewrite(ckpt, "checkpoint", lambda doc: _state_value(doc, "every", rows))
    _refused(ckpt, "more values than its size allows")


def test_a_seed_sequence_with_a_pool_of_a_million_words_is_refused(tmp_path, run_files):
    ckpt, _ = _copy(run_files, tmp_path)

    def edit(doc):
        _find(doc, lambda d: d.get("$t") == "seedseq")["pool"] = 10**6
        return doc

    _rewrite(ckpt, "checkpoint", edit)
    _refused(ckpt, "pool size")


@pytest.mark.parametrize("depth", [300, 20_000, 200_000])
@pytest.mark.parametrize("form", ["list", "tuple"])
def test_deep_nesting_is_refused(tmp_path, run_files, depth, form):
    ckpt, _ = _copy(run_files, tmp_path)
    text = ("[" * depth + "]" * depth) if form == "list" else (
        '{"$t":"tuple","v":[' * depth + "]}" * depth)
    meta, members = _safefile.read_container(ckpt, "checkpoint", "x")
    doc = members["doc"].decode()
    doc = doc.replace('"every"', '"every"', 1)
    state = json.loads(doc)
    i = state["k"].index("every")
    state["v"][i] = "@@"
    body = json.dumps(state).replace('"@@"', text).encode()
    rest = [(k, v) for k, v in members.items() if k != "doc"]
    _safefile.write_container(ckpt, "checkpoint", meta, [("doc", body), *rest])
    _refused(ckpt, "nested")


def test_a_deeply_nested_header_is_refused(tmp_path, run_files):
    ckpt, _ = _copy(run_files, tmp_path)

    def edit(header):
        header["meta"]["x"] = "@@"
        return header

    raw = ckpt.read_bytes()
    _edit_header(ckpt, edit)
    raw = ckpt.read_bytes()
    tail = 32 + 32 + 8 + len(_safefile._END)
    (length,) = struct.unpack("<Q", raw[-tail + 64:-tail + 72])
    start = len(raw) - tail - length
    header = raw[start:start + length].replace(b'"@@"', b"[" * 100_000 + b"]" * 100_000)
    ckpt.write_bytes(raw[:start] + header + hashlib.sha256(header).digest() + bytes(32)
                     + struct.pack("<Q", len(header)) + _safefile._END)
    _refused(ckpt, "nested")


def test_a_file_of_the_earlier_formats_is_refused_naming_the_version(tmp_path, run_files):
    ckpt, data = _copy(run_files, tmp_path)
    raw = bytearray(ckpt.read_bytes())
    raw[len(_safefile.MAGIC) - 1] = 1  # container version 1
    ckpt.write_bytes(bytes(raw))
    _refused(ckpt, "container version 1")
    ckpt, data = _copy(run_files, tmp_path)
    _rewrite(ckpt, "checkpoint", edit_meta=lambda m: {**m, "version": 2})
    _refused(ckpt, "format version 2, expected 3")


# -- 4. the right model or none -------------------------------------------------------------------------------


def test_resume_refuses_another_class_or_other_data_of_the_same_size(tmp_path):
    X, y = _data()
    ckpt, _ = _checkpointed(tmp_path, model=MyRegression(X, y))
    with pytest.raises(ValueError, match=r"`model` does not match.*class is .*OtherRegression"):
        sgmc.resume(str(ckpt), model=OtherRegression(X, y), progress=False)
    X2, y2 = _data(seed=5)  # the same N and d, other data
    with pytest.raises(ValueError, match=r"`model` does not match.*data \(SHA-256 of its data arrays\)"):
        sgmc.resume(str(ckpt), model=MyRegression(X2, y2), progress=False)
    sgmc.resume(str(ckpt), model=MyRegression(X.copy(), y.copy()), progress=False)  # equal data: accepted


def test_a_stored_model_whose_data_were_swapped_is_refused(tmp_path):
    """A data file whose model arrays were replaced (its own digest recomputed) no longer matches the fingerprint."""
    ckpt, data = _checkpointed(tmp_path)
    meta, members = _safefile.read_container(data, "checkpoint data", "x")
    name = next(k for k, v in members.items() if k != "doc" and getattr(v, "shape", ())[:1] == (300,))
    members = {**members, name: np.asarray(members[name]) + 1.0}
    _safefile.write_container(data, "checkpoint data", meta, list(members.items()))
    _refused(ckpt, "the model rebuilt from the file does not match")


def test_the_fingerprint_hashes_data_in_blocks(monkeypatch):
    X, y = _data(n=3000)
    whole = _checkpoint.fingerprint(LinearRegression(X, y))
    monkeypatch.setattr(_checkpoint, "_BLOCK_BYTES", 64)  # a few rows at a time
    assert _checkpoint.fingerprint(LinearRegression(X, y)) == whole
    X[1234, 2] += 1e-12
    assert _checkpoint.fingerprint(LinearRegression(X, y))["data_sha256"] != whole["data_sha256"]


# -- 5. traces ---------------------------------------------------------------------------------------------------


@pytest.fixture
def trace():
    draws = np.random.default_rng(1).normal(size=(2, 50, 3))
    return sgmc.Trace(draws=draws, iterations=list(range(50)), info={"sampler": "sgld"})


def _members(path):
    with zipfile.ZipFile(path) as zf:
        return {i.filename: zf.read(i) for i in zf.infolist()}


def _write_zip(path, members, raw=None):
    """A zip of ``members`` (deflated), plus ``raw``: (name, deflate stream, crc, size) members as given."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    if raw is not None:
        _append_raw(path, *raw)


def _append_raw(path, name, stream, crc, size):
    """Rewrite ``path`` with one more member whose compressed bytes are ``stream`` (a deflate bomb, say)."""
    with zipfile.ZipFile(path) as zf:
        old = [(i, zf.read(i)) for i in zf.infolist()]
    out = io.BytesIO()
    central = []
    for info, data in old + [(None, None)]:
        if info is None:
            fname, comp, csize, usize, c = name.encode(), stream, len(stream), size, crc
        else:
            comp = zlib.compressobj(6, zlib.DEFLATED, -15).compress(data)
            co = zlib.compressobj(6, zlib.DEFLATED, -15)
            comp = co.compress(data) + co.flush()
            fname, csize, usize, c = info.filename.encode(), len(comp), len(data), zlib.crc32(data)
        offset = out.tell()
        out.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0, c, csize, usize, len(fname), 0))
        out.write(fname)
        out.write(comp)
        central.append(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0, c, csize, usize,
                                   len(fname), 0, 0, 0, 0, 0, offset) + fname)
    cd_start = out.tell()
    for entry in central:
        out.write(entry)
    cd_size = out.tell() - cd_start
    out.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(central), len(central), cd_size, cd_start, 0))
    Path(path).write_bytes(out.getvalue())


def _bomb(n_bytes):
    """A deflate stream of ``n_bytes`` zeros (an .npy header first) made of one repeated block: (stream, crc, size)."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False,
                                                  "shape": (n_bytes // 8,)})
    head = header.getvalue()
    chunk = bytes(1 << 20)
    co = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = co.compress(head) + co.flush(zlib.Z_FULL_FLUSH)
    block = co.compress(chunk) + co.flush(zlib.Z_FULL_FLUSH)
    n_chunks = n_bytes // len(chunk)
    stream = first + block * n_chunks + co.flush(zlib.Z_FINISH)
    crc = zlib.crc32(head)
    for _ in range(n_chunks):
        crc = zlib.crc32(chunk, crc)
    return stream, crc, len(head) + n_chunks * len(chunk)


def test_the_bomb_is_real():
    stream, crc, size = _bomb(64 << 20)
    out = zlib.decompressobj(-15).decompress(stream)
    assert len(out) == size and zlib.crc32(out) == crc and len(stream) < size / 500


def _loaded_within_bound(path, **kwargs):
    start = time.perf_counter()
    with pytest.raises(ValueError) as info:
        sgmc.Trace.load(str(path), **kwargs)
    assert time.perf_counter() - start < BOUND
    assert str(path) in str(info.value)
    return info.value


GIB4 = 4000 << 20  # 4000 MiB: a 32-bit zip size, of zeros in a few megabytes


def test_a_four_gigabyte_deflate_bomb_is_refused_before_decompressing(tmp_path, trace):
    good = tmp_path / "good.npz"
    trace.save(str(good))
    members = _members(good)
    del members["draws.npy"]
    bomb = tmp_path / "bomb.npz"
    _write_zip(bomb, members, ("draws.npy", *_bomb(GIB4)))
    assert bomb.stat().st_size < 8 << 20
    assert "declare" in str(_loaded_within_bound(bomb))


def test_a_trace_without_checksums_needs_verify_false(tmp_path, trace):
    good = tmp_path / "good.npz"
    trace.save(str(good))
    members = _members(good)
    del members["__sha256__.npy"]
    bare = tmp_path / "bare.npz"
    _write_zip(bare, members)
    assert "no checksums" in str(_loaded_within_bound(bare))
    np.testing.assert_array_equal(sgmc.Trace.load(str(bare), verify=False).draws, trace.draws)


def test_a_signed_trace_is_checked_with_its_key(tmp_path, trace):
    key = "the user's secret"
    path = tmp_path / "signed.npz"
    trace.save(str(path), key=key)
    np.testing.assert_array_equal(sgmc.Trace.load(str(path), key=key).draws, trace.draws)
    assert "is signed" in str(_loaded_within_bound(path))
    assert "does not match its signature" in str(_loaded_within_bound(path, key="another"))
    # the forger changes the draws and recomputes every checksum, as sgmc's own writer would
    members = _members(path)
    altered = trace.draws.copy()
    altered[0, 0, 0] += 1.0
    redone = tmp_path / "redone.npz"
    sgmc.Trace(draws=altered, iterations=trace.iterations, info=trace.info).save(str(redone))
    forged = {**_members(redone), "__hmac__.npy": members["__hmac__.npy"]}
    _write_zip(tmp_path / "forged.npz", forged)
    assert "does not match its signature" in str(_loaded_within_bound(tmp_path / "forged.npz", key=key))
    unsigned = tmp_path / "unsigned.npz"
    _write_zip(unsigned, {k: v for k, v in forged.items() if k != "__hmac__.npy"})
    assert "not signed" in str(_loaded_within_bound(unsigned, key=key))


@pytest.mark.parametrize("bad", [True, 1, 2.5, b"bytes", None])
def test_load_takes_paths_or_files_and_never_closes_one_it_did_not_open(bad):
    with pytest.raises(TypeError, match="`path` must be a file path"):
        sgmc.Trace.load(bad)
    os.fstat(1)  # stdout is still open
    os.fstat(0)


def test_an_open_file_is_read_and_left_open(tmp_path, trace):
    path = tmp_path / "t.npz"
    trace.save(str(path))
    with open(path, "rb") as fh:
        again = sgmc.Trace.load(fh)
        assert not fh.closed
    np.testing.assert_array_equal(again.draws, trace.draws)


# -- 6. under a cap on the address space ----------------------------------------------------------------------


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="address-space limits as Linux sets them")
def test_the_gigabyte_forgeries_are_refused_with_the_address_space_capped(tmp_path, run_files, trace):
    ckpt, data = _copy(run_files, tmp_path)
    _edit_header(data, _sixty_gigabytes)
    good = tmp_path / "good.npz"
    trace.save(str(good))
    members = _members(good)
    del members["draws.npy"]
    bomb = tmp_path / "bomb.npz"
    _write_zip(bomb, members, ("draws.npy", *_bomb(GIB4)))
    script = textwrap.dedent(f"""
        import resource, sgmc
        def used():
            for line in open("/proc/self/status"):
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
        # 1 GiB more than what the interpreter holds now: a 4 GiB or 60 GB allocation cannot succeed
        cap = used() + (1 << 30)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        for call in (lambda: sgmc.resume({str(ckpt)!r}, progress=False), lambda: sgmc.Trace.load({str(bomb)!r})):
            try:
                call()
            except ValueError as err:
                print("refused:", err)
            except MemoryError:
                print("memory error")
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("refused:") for line in lines), out.stdout
    assert str(data) in lines[0] and str(bomb) in lines[1]
    assert resource.getrlimit(resource.RLIMIT_AS)  # the parent's limits are untouched


def test_a_size_option_larger_than_the_file_could_describe_is_refused(tmp_path, run_files):
    ckpt, data = _copy(run_files, tmp_path)

    def edit(doc):
        _sampler_entry(doc)["o"]["n_leapfrog"] = 10**15  # an int of the right type, absurdly large
        return doc

    _rewrite(data, "checkpoint data", edit)
    _refused(ckpt, "more than the file's size allows")
