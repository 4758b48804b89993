"""Checkpoint and trace files: data, not code; damage refused; the data set written once; I/O errors keep the draws."""

from __future__ import annotations

import errno
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import sgmc
from sgmc import _checkpoint, _safefile
from sgmc._atomic import STALE_AGE, atomic_write, remove_stale_parts
from sgmc.models import LinearRegression
from sgmc.samplers.langevin import SGLD

ROOT = Path(__file__).resolve().parent.parent
ARGS = dict(step_size=2e-3, batch_size=40, n_iter=120, chains=3, group_size=2, rng=11, progress=False)


def _data(n=400, d=3, seed=0):
    r = np.random.default_rng(seed)
    X = r.normal(size=(n, d))
    return X, X @ np.linspace(1.0, -1.0, d) + r.normal(size=n)


@pytest.fixture(scope="module")
def model():
    return LinearRegression(*_data())


@pytest.fixture(scope="module")
def full(model):
    return sgmc.sample(model, "sghmc", "svrg", **ARGS)


def _stop_at(iteration, chains_in_group):
    def callback(k, state):
        if k == iteration and state.position.shape[0] == chains_in_group:
            os.kill(os.getpid(), signal.SIGINT)

    return callback


def _interrupted(model, folder, name="run.ckpt", sampler="sghmc", estimator="svrg"):
    path = Path(folder) / name
    with pytest.warns(sgmc.SamplingInterruptedWarning):
        sgmc.sample(model, sampler, estimator, checkpoint=str(path), checkpoint_every=20,
                    callback=_stop_at(50, 1), **ARGS)
    return path


def _data_file(ckpt: Path) -> Path:
    found = [p for p in ckpt.parent.iterdir() if p.name.startswith(ckpt.name + ".") and p.name.endswith(".data")]
    assert len(found) == 1, found
    return found[0]


# -- 1. nothing in a file runs ------------------------------------------------------------------------


class _Payload:
    """Unpickling this runs code: it writes a marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (Path.write_text, (Path(self.marker), "code ran"))


def test_the_payload_really_runs_code_when_unpickled(tmp_path):
    marker = tmp_path / "marker"
    pickle.loads(pickle.dumps(_Payload(marker)))  # the control: plain pickle runs it
    assert marker.read_text() == "code ran"


@pytest.mark.parametrize("reader", ["resume", "trace"])
def test_a_file_built_to_run_code_on_unpickling_is_refused_and_runs_nothing(tmp_path, reader):
    marker = tmp_path / "marker"
    path = tmp_path / ("evil.ckpt" if reader == "resume" else "evil.npz")
    path.write_bytes(pickle.dumps({"magic": "sgmc checkpoint 1", "job": _Payload(marker)}))
    with pytest.raises(ValueError, match="evil") as info:
        sgmc.resume(str(path)) if reader == "resume" else sgmc.Trace.load(str(path))
    assert not marker.exists()
    assert "pickle" in str(info.value)


def test_an_object_array_with_a_pickle_inside_a_checkpoint_is_refused(tmp_path, model):
    ckpt = _interrupted(model, tmp_path)
    meta, members = _safefile.read_container(ckpt, "checkpoint", "x")
    marker = tmp_path / "marker"
    evil = np.empty(1, dtype=object)
    evil[0] = _Payload(marker)
    raw = tmp_path / "member.npy"
    np.save(raw, evil, allow_pickle=True)
    _write_raw(ckpt, meta, {**members, "s0": raw.read_bytes()}, forms={"s0": "npy"})
    with pytest.raises(ValueError, match="run.ckpt"):
        sgmc.resume(str(ckpt))
    assert not marker.exists()


@pytest.mark.parametrize("entry", [
    {"$t": "fn", "m": "os", "q": "system"},
    {"$t": "fn", "m": "sgmc.run", "q": "os.system"},
    {"$t": "fn", "m": "builtins", "q": "eval"},
    {"$t": "obj", "$id": 10**6, "c": ["subprocess", "Popen"], "s": {}},
    {"$t": "fn", "m": "sgmc.cli", "q": "main"},
    {"$t": "meth", "self": None, "name": "__class__"},
])
def test_a_checkpoint_naming_code_outside_sgmc_is_refused(tmp_path, model, entry):
    ckpt = _interrupted(model, tmp_path)
    meta, members = _safefile.read_container(ckpt, "checkpoint", "x")
    doc = json.loads(members["doc"])
    doc["v"][doc["k"].index("every")] = entry  # the run's state is a dict stored as keys and values
    _write_raw(ckpt, meta, {**members, "doc": json.dumps(doc).encode()})
    with pytest.raises(ValueError, match="not a valid sgmc checkpoint"):
        sgmc.resume(str(ckpt))


def _write_raw(path, meta, members, forms=None):
    """Rewrite a container with new member bytes and correct checksums (a well-formed forgery)."""
    forms = forms or {}
    out = []
    for name, value in members.items():
        if isinstance(value, np.ndarray):
            out.append((name, value))
        else:
            out.append((name, value if forms.get(name) != "npy" else _Raw(value)))
    entries = []
    with open(path, "wb") as fh:
        import hashlib
        import struct

        fh.write(_safefile.MAGIC)
        for name, value in out:
            if isinstance(value, np.ndarray):
                import io

                buf = io.BytesIO()
                np.lib.format.write_array(buf, value, allow_pickle=False)
                data, form = buf.getvalue(), "npy"
            elif isinstance(value, _Raw):
                data, form = value.data, "npy"
            else:
                data, form = value, "bytes"
            fh.write(data)
            entries.append([name, form, len(data), hashlib.sha256(data).hexdigest()])
        header = json.dumps({"kind": "checkpoint", "signed": False, "members": entries, "meta": meta}).encode()
        fh.write(header + hashlib.sha256(header).digest() + bytes(32) + struct.pack("<Q", len(header))
                 + _safefile._END)


class _Raw:
    def __init__(self, data):
        self.data = data


# -- 2. damage is refused -------------------------------------------------------------------------------


def _damage(data: bytes, kind: str, where: float) -> bytes:
    pos = min(len(data) - 1, int(where * len(data))) if where >= 0 else len(data) + int(where)
    if kind == "truncate":
        return data[:pos]
    if kind == "flip":
        return data[:pos] + bytes([data[pos] ^ 0x10]) + data[pos + 1:]
    if kind == "zero":
        block = data[pos:pos + 64]
        if block == bytes(len(block)):
            block = b"\x01" + block[1:]  # a block that was already zero: damage it anyway
            return data[:pos] + block + data[pos + len(block):]
        return data[:pos] + bytes(len(block)) + data[pos + len(block):]
    if kind == "append":
        return data + b"\x00" * 16
    raise AssertionError(kind)


DAMAGE = (
    [("truncate", w) for w in (0.0, 0.001, 0.1, 0.5, 0.9, 0.999, -1, -9, -41, -48)]
    + [("flip", w) for w in (0.0, 0.002, 0.05, 0.15, 0.3, 0.45, 0.6, 0.75, 0.9, 0.97, -1, -5, -12, -45, -52, -60)]
    + [("zero", w) for w in (0.0, 0.1, 0.33, 0.66, 0.95, -64)]
    + [("append", 0.0)]
)


@pytest.fixture(scope="module")
def good_checkpoint(tmp_path_factory, model):
    folder = tmp_path_factory.mktemp("good")
    ckpt = _interrupted(model, folder)
    return ckpt, _data_file(ckpt)


@pytest.mark.parametrize("which", ["checkpoint", "data"])
@pytest.mark.parametrize(("kind", "where"), DAMAGE)
def test_every_damaged_checkpoint_is_refused_naming_the_file(tmp_path, good_checkpoint, full, which, kind, where):
    ckpt, data = good_checkpoint
    ckpt2, data2 = tmp_path / ckpt.name, tmp_path / data.name
    shutil.copy(ckpt, ckpt2)
    shutil.copy(data, data2)
    target = ckpt2 if which == "checkpoint" else data2
    target.write_bytes(_damage(target.read_bytes(), kind, where))
    with pytest.raises(ValueError) as info:
        sgmc.resume(str(ckpt2), progress=False)
    assert str(target) in str(info.value)


def test_the_undamaged_copy_resumes_bit_identically(tmp_path, good_checkpoint, full):
    ckpt, data = good_checkpoint
    shutil.copy(ckpt, tmp_path / ckpt.name)
    shutil.copy(data, tmp_path / data.name)
    resumed = sgmc.resume(str(tmp_path / ckpt.name), progress=False)
    np.testing.assert_array_equal(resumed.draws, full.draws)


def test_a_missing_or_foreign_data_file_is_named(tmp_path, model, full):
    ckpt = _interrupted(model, tmp_path)
    data = _data_file(ckpt)
    other = _interrupted(LinearRegression(*_data(seed=1)), tmp_path / "..", name=f"{tmp_path.name}-other.ckpt")
    data.rename(tmp_path / "aside")
    with pytest.raises(ValueError, match="missing") as info:
        sgmc.resume(str(ckpt))
    assert data.name in str(info.value)
    shutil.copy(_data_file(other), data)  # another run's data under this run's name
    with pytest.raises(ValueError, match="does not belong"):
        sgmc.resume(str(ckpt))


@pytest.mark.parametrize(("kind", "where"), DAMAGE)
def test_a_damaged_trace_file_is_refused_or_loads_unchanged(tmp_path, kind, where):
    draws = np.random.default_rng(3).normal(size=(2, 300, 3))
    good = tmp_path / "good.npz"
    sgmc.Trace(draws=draws, iterations=list(range(300)), info={"sampler": "sgld"}).save(str(good))
    bad = tmp_path / "bad.npz"
    bad.write_bytes(_damage(good.read_bytes(), kind, where))
    try:
        loaded = sgmc.Trace.load(str(bad))
    except ValueError as err:
        assert str(bad) in str(err)
    else:  # only bytes that hold no data (zip time stamps, say) may change without an error
        np.testing.assert_array_equal(loaded.draws, draws)
        assert loaded.iterations == list(range(300)) and loaded.info == {"sampler": "sgld"}


def test_a_trace_whose_array_does_not_match_its_checksum_is_refused(tmp_path):
    good = tmp_path / "good.npz"
    sgmc.Trace(draws=np.zeros((1, 5, 2)), iterations=list(range(5))).save(str(good))
    with np.load(good) as f:
        arrays = {k: f[k] for k in f.files}
    arrays["draws"] = arrays["draws"] + 1.0  # a consistent archive, but not what was saved
    np.savez(tmp_path / "altered.npz", **arrays)
    with pytest.raises(ValueError, match="altered.npz.*checksum"):
        sgmc.Trace.load(str(tmp_path / "altered.npz"))


# -- 3. small and tidy ---------------------------------------------------------------------------------


def test_the_data_set_is_written_once_per_run(tmp_path, monkeypatch):
    writes = []
    real = _checkpoint.write_container

    def counting(path, kind, meta, members, **kw):
        size = real(path, kind, meta, members, **kw)
        writes.append((kind, size))
        return size

    monkeypatch.setattr(_checkpoint, "write_container", counting)
    big = LinearRegression(*_data(n=20_000, d=10))
    ckpt = tmp_path / "big.ckpt"
    sgmc.sample(big, "sgld", step_size=1e-5, batch_size=100, n_iter=100, chains=2, rng=1, progress=False,
                checkpoint=str(ckpt), checkpoint_every=10)
    kinds = [k for k, _ in writes]
    assert kinds.count("checkpoint data") == 1 and kinds.count("checkpoint") == 10
    data_bytes = next(s for k, s in writes if k == "checkpoint data")
    assert data_bytes > 20_000 * 11 * 8  # X and y
    assert max(s for k, s in writes if k == "checkpoint") < data_bytes / 20
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.ckpt", _data_file(ckpt).name]
    # a resumed run keeps the data file and does not write it again
    writes.clear()
    sgmc.resume(str(ckpt), progress=False)
    assert [k for k, _ in writes] == ["checkpoint"]


def test_a_new_run_on_the_same_path_removes_the_earlier_data_file(tmp_path):
    ckpt = tmp_path / "run.ckpt"
    for seed in (0, 1):
        sgmc.sample(LinearRegression(*_data(seed=seed)), step_size=1e-3, batch_size=40, n_iter=30, rng=1,
                    progress=False, checkpoint=str(ckpt), checkpoint_every=10)
    assert len([p for p in tmp_path.iterdir() if p.name.endswith(".data")]) == 1
    sgmc.resume(str(ckpt), progress=False)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_temporary_files_are_removed_and_live_writers_kept(tmp_path):
    from sgmc._atomic import _host

    host = _host()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        names = {
            "dead": f".run.ckpt.{host}.{_dead_pid()}.0123456789ab.sgmc-part",
            "live": f".run.ckpt.{host}.{live.pid}.0123456789ab.sgmc-part",
            "other_host_fresh": ".run.ckpt.elsewhere.123.0123456789ab.sgmc-part",
            "other_host_old": ".run.ckpt.elsewhere.124.0123456789ab.sgmc-part",
            # other programs' temporary files, however old, and files of the user's own are never touched
            "other_program_old": ".trace.npz.abcdefgh.part",
            "other_program_pid_like_old": f".run.ckpt.{host}.{_dead_pid()}.0123456789ab.part",
            "other_program_fresh": ".trace.npz.xyz_5678.part",
            "users_own": ".notes.part",
        }
        for name in names.values():
            (tmp_path / name).write_bytes(b"partial")
        old = time.time() - STALE_AGE - 10
        for key in ("other_host_old", "other_program_old", "other_program_pid_like_old"):
            os.utime(tmp_path / names[key], (old, old))
        with atomic_write(tmp_path / "new.bin") as fh:
            fh.write(b"x")
        left = {p.name for p in tmp_path.iterdir()}
        for key in ("dead", "other_host_old"):
            assert names[key] not in left, key
        for key in ("live", "other_host_fresh", "other_program_old", "other_program_pid_like_old",
                    "other_program_fresh", "users_own"):
            assert names[key] in left, key
        assert remove_stale_parts(str(tmp_path)) == []
    finally:
        live.kill()
        live.wait()


def test_a_killed_checkpoint_write_leaves_a_part_file_that_the_next_write_removes(tmp_path):
    script = textwrap.dedent(f"""
        import os, signal
        from sgmc._atomic import atomic_write
        with atomic_write({str(tmp_path / 'run.ckpt')!r}) as fh:
            fh.write(b"half")
            fh.flush()
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", script], env=env, timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert len([p for p in tmp_path.iterdir() if p.name.endswith(".sgmc-part")]) == 1
    sgmc.sample(LinearRegression(*_data()), step_size=1e-3, batch_size=40, n_iter=20, rng=1, progress=False,
                checkpoint=str(tmp_path / "run.ckpt"), checkpoint_every=10)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith("part")]


def test_importing_sgmc_leaves_the_umask_alone_and_new_files_follow_it(tmp_path):
    script = textwrap.dedent(f"""
        import os
        def refuse(mask):
            raise AssertionError("umask changed")
        os.umask(0o027)
        real, os.umask = os.umask, refuse
        import sgmc, sgmc._atomic, sgmc.run, sgmc.cli
        from sgmc._atomic import atomic_write
        with atomic_write({str(tmp_path / 'new.bin')!r}) as fh:
            fh.write(b"x")
        print(oct(os.stat({str(tmp_path / 'new.bin')!r}).st_mode & 0o777))
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0o640"


# -- 4. objects that are not sgmc's are passed again ------------------------------------------------------


class MyRegression(LinearRegression):
    """A model class of the user's own: not stored in a checkpoint."""


def test_a_user_model_is_passed_again_to_resume(tmp_path):
    X, y = _data()
    # the reference runs the same class: the library's own LinearRegression takes the fused compiled
    # blocks, whose sums may differ from the one-step loop in the last bit
    full = sgmc.sample(MyRegression(X, y), "sghmc", "svrg", **ARGS)
    ckpt = _interrupted(MyRegression(X, y), tmp_path)
    with pytest.raises(ValueError, match=r"does not store its model.*MyRegression.*model=\.\.\.") as info:
        sgmc.resume(str(ckpt), progress=False)
    assert str(ckpt) in str(info.value)
    with pytest.raises(ValueError, match="`model` does not match.*n_data"):
        sgmc.resume(str(ckpt), model=MyRegression(X[:300], y[:300]), progress=False)
    resumed = sgmc.resume(str(ckpt), model=MyRegression(X, y), progress=False)
    np.testing.assert_array_equal(resumed.draws, full.draws)


class MySGLD(SGLD):
    """A sampler class of the user's own."""


def test_a_user_sampler_is_passed_again_to_resume(tmp_path, model):
    args = dict(ARGS, n_iter=60)
    full = sgmc.sample(model, MySGLD(), **args)
    ckpt = tmp_path / "run.ckpt"
    with pytest.warns(sgmc.SamplingInterruptedWarning):
        sgmc.sample(model, MySGLD(), checkpoint=str(ckpt), checkpoint_every=10, callback=_stop_at(30, 2), **args)
    with pytest.raises(ValueError, match=r"does not store its sampler.*MySGLD.*sampler=\.\.\."):
        sgmc.resume(str(ckpt), progress=False)
    resumed = sgmc.resume(str(ckpt), sampler=MySGLD(), progress=False)
    np.testing.assert_array_equal(resumed.draws, full.draws)


def test_an_sgmc_model_holding_user_functions_is_passed_again(tmp_path):
    torch = pytest.importorskip("torch")
    from sgmc.models import from_torch

    X, y = (torch.asarray(a) for a in _data())

    def log_lik(theta, x, y):
        return -0.5 * (y - x @ theta) ** 2

    def log_prior(theta):
        return -0.5 * theta @ theta / 10.0

    m = from_torch(log_lik, log_prior, (X, y), dim=3)
    args = dict(ARGS, n_iter=60, chains=2, group_size=2)
    full = sgmc.sample(m, "sgld", **args)
    ckpt = tmp_path / "run.ckpt"
    with pytest.warns(sgmc.SamplingInterruptedWarning):
        sgmc.sample(m, "sgld", checkpoint=str(ckpt), checkpoint_every=10, callback=_stop_at(30, 2), **args)
    with pytest.raises(ValueError, match=r"does not store its model.*TorchModel.*model=\.\.\."):
        sgmc.resume(str(ckpt), progress=False)
    resumed = sgmc.resume(str(ckpt), model=m, progress=False)
    np.testing.assert_array_equal(resumed.draws.numpy(), full.draws.numpy())


def test_an_object_the_checkpoint_stores_is_not_taken_again(tmp_path, model):
    ckpt = _interrupted(model, tmp_path)
    with pytest.raises(ValueError, match="stores its model"):
        sgmc.resume(str(ckpt), model=model)


# -- 6. I/O errors during a run keep the draws -------------------------------------------------------------


def test_a_full_disk_during_a_run_names_the_file_and_keeps_the_draws(tmp_path, monkeypatch, model, full):
    real = _checkpoint.write_container
    count = {"checkpoint": 0}

    def failing(path, kind, meta, members, **kw):
        if kind == "checkpoint":
            count["checkpoint"] += 1
            if count["checkpoint"] == 4:  # iteration 80 of the first group
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real(path, kind, meta, members, **kw)

    monkeypatch.setattr(_checkpoint, "write_container", failing)
    ckpt = tmp_path / "run.ckpt"
    with pytest.raises(OSError) as info:
        sgmc.sample(model, "sghmc", "svrg", checkpoint=str(ckpt), checkpoint_every=20, **ARGS)
    err = info.value
    assert isinstance(err, sgmc.run.CheckpointWriteError) and err.errno == errno.ENOSPC
    assert str(ckpt) in str(err) and "err.trace" in str(err)
    assert err.trace.info["iterations_done"] == 80 and err.trace.draws.shape == (2, 80, 3)
    np.testing.assert_array_equal(err.trace.draws, full.draws[:2, :80])
    monkeypatch.setattr(_checkpoint, "write_container", real)
    resumed = sgmc.resume(str(ckpt), progress=False)  # from the last checkpoint written (iteration 60)
    np.testing.assert_array_equal(resumed.draws, full.draws)


# -- the codec on its own ------------------------------------------------------------------------------


def _round_trip(obj, supplied=None):
    from sgmc._codec import Encoder
    from sgmc._decode import Decoder

    enc = Encoder("a")
    doc = json.loads(json.dumps(enc.encode(obj), allow_nan=False))  # what a file holds: JSON
    return Decoder(dict(enc.arrays), supplied).decode(doc)


def test_plain_values_numpy_values_and_generators_round_trip():
    from sgmc.estimators.base import EstimateInfo
    from sgmc.samplers.base import StepInfo

    seq = np.random.SeedSequence(12345, spawn_key=(3,))
    gen = np.random.Generator(np.random.PCG64(seq))
    gen.standard_normal(7)
    shared = np.arange(6.0).reshape(2, 3)
    rows = [StepInfo(EstimateInfo(np.full(2, float(k)), 10 + k, None), None, None, {"t": np.ones(2) * k})
            for k in range(20)]
    obj = {"a": [1, 2.5, float("nan"), -float("inf"), True, None, "s", 3 + 4j], 7: (shared, shared),
           "f": [0.1 * k for k in range(40)], "i": list(range(40)), "sc": np.float32(1.5), "dt": np.dtype("<i4"),
           "ty": np.float64, "gen": gen, "seq": seq, "rows": rows, "be": sgmc.backends.get_backend("numpy")}
    out = _round_trip(obj)
    assert out["a"][:2] == [1, 2.5] and np.isnan(out["a"][2]) and out["a"][3] == -np.inf
    assert out["a"][4:] == [True, None, "s", 3 + 4j]
    assert out[7][0] is out[7][1]  # identity kept
    np.testing.assert_array_equal(out[7][0], shared)
    assert out["f"] == obj["f"] and out["i"] == obj["i"]
    assert type(out["sc"]) is np.float32 and out["sc"] == 1.5 and out["dt"] == np.dtype("<i4") and out["ty"] is np.float64
    np.testing.assert_array_equal(out["gen"].standard_normal(5), gen.standard_normal(5))
    assert out["seq"].spawn_key == (3,) and out["seq"].entropy == 12345
    assert [type(r) for r in out["rows"]] == [StepInfo] * 20
    for a, b in zip(out["rows"], rows):
        np.testing.assert_array_equal(a.estimate.n_evals, b.estimate.n_evals)
        assert a.estimate.batch_size == b.estimate.batch_size and a.estimate.log_density is None
        np.testing.assert_array_equal(a.extras["t"], b.extras["t"])
    assert out["be"] is sgmc.backends.get_backend("numpy")


def test_arrays_of_every_backend_round_trip_on_their_device(xb):
    a = xb.asarray(np.arange(12.0).reshape(3, 4))
    rng = sgmc.backends.default_rng(3, backend=xb.backend, device=xb.device)
    out = _round_trip({"a": a, "rng": rng, "xp": xb.xp})
    assert type(out["a"]) is type(a) and str(out["a"].device) == str(a.device) and out["a"].dtype == a.dtype
    np.testing.assert_array_equal(xb.to_numpy(out["a"]), xb.to_numpy(a))
    np.testing.assert_array_equal(xb.to_numpy(out["rng"].normal((4,))), xb.to_numpy(rng.normal((4,))))
    assert out["xp"] is xb.xp


@pytest.mark.parametrize("obj", [lambda x: x, Path("/tmp"), _Payload("m"), os.system, np.empty(2, dtype=object)])
def test_what_is_not_sgmc_or_plain_data_is_not_stored(obj):
    from sgmc._codec import NotStorable

    with pytest.raises(NotStorable):
        _round_trip({"x": obj})
