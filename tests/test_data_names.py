"""Data file names that are no file (``..``, ``''``, a folder, a missing file) give an error naming the argument.

Every loader of :mod:`sgmc.datasets`, the data cache and ``sgmc run --data`` are given such names;
each must refuse with ``TypeError``/``ValueError``/``FileNotFoundError`` whose message names the
argument (or the flag), says what was expected and repeats what was given -- never a bare
``IsADirectoryError`` from ``open``.
"""

from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest

from sgmc import cli
from sgmc.datasets import cache as _datacache
from sgmc.datasets import load_csv, mnist, movielens100k, read_idx


def _bad_names(tmp_path):
    folder = tmp_path / "folder.csv"
    folder.mkdir()
    return [
        ("..", "folder"), (".", "folder"), ("", "empty"), ("   ", "empty"), (str(folder), "folder"),
        (pathlib.Path(folder), "folder"), (str(tmp_path / "missing.csv"), "no such file"),
    ]


LOADERS = [
    ("load_csv", lambda p: load_csv(p), "`path`", "CSV file"),
    ("read_idx", lambda p: read_idx(p, 1), "`path`", "IDX file"),
]


@pytest.mark.parametrize("loader, call, named, what", LOADERS, ids=[x[0] for x in LOADERS])
def test_file_loaders_name_the_argument(tmp_path, loader, call, named, what):
    for name, why in _bad_names(tmp_path):
        with pytest.raises(ValueError) as info:
            call(name)
        text = str(info.value)
        assert named in text and what in text and repr(os.fspath(name)) in text, text
        assert why in text, text


@pytest.mark.parametrize("bad", [None, 3, 2.5, ["a.csv"], b"\xff\xfe"])
def test_a_value_that_is_not_a_path_is_named(bad):
    for call in (lambda p: load_csv(p), lambda p: read_idx(p, 1)):
        with pytest.raises((TypeError, ValueError), match="`path`"):
            call(bad)


def test_movielens_and_mnist_name_the_path(tmp_path):
    (tmp_path / "u.data").mkdir()  # a folder where the ratings file should be
    for call in (movielens100k, mnist):
        for name in ("", "..", str(tmp_path), str(tmp_path / "nothing"), str(tmp_path / "u.data")):
            with pytest.raises((FileNotFoundError, ValueError), match="`path`"):
                call(name)
        with pytest.raises(TypeError, match="`path`"):
            call(3)


def test_the_run_command_names_the_data_flag(tmp_path, capsys):
    folder = tmp_path / "d"
    folder.mkdir()
    for name, why in (("..", "folder"), ("", "empty"), (str(folder), "folder"), (str(tmp_path / "no.csv"), "no such file")):
        assert cli.main(["run", "--quick", "--no-progress", "--data", name]) == 2
        err = capsys.readouterr().err
        assert "--data must be the path of an existing CSV file" in err and why in err and repr(name) in err, err
        assert "Traceback" not in err and "IsADirectoryError" not in err


def test_the_cache_folder_must_be_a_folder(tmp_path, monkeypatch):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    monkeypatch.setenv("SGMC_DATA", str(a_file))
    with pytest.raises(ValueError, match="SGMC_DATA must name a folder.*is a file"):
        _datacache.cache_dir()


def test_a_cache_entry_that_is_a_folder_or_a_bad_key_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("SGMC_DATA", str(tmp_path))
    (tmp_path / "entry.npz").mkdir()
    build = lambda: {"x": np.zeros(2)}  # noqa: E731
    with pytest.raises(ValueError, match="is a folder, not a file"):
        _datacache.cached_arrays("entry", build)
    for key in ("..", "", "a/b", None):
        with pytest.raises(ValueError, match="`key` must be a plain file name"):
            _datacache.cached_arrays(key, build)
