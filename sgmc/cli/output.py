"""The files of ``sgmc run``: ``--output`` and ``--plot`` checked writable before anything runs, the traces saved."""

from __future__ import annotations

import os
import tempfile

from .problem import _Problem


def _check_output_path(path: str, flag: str) -> None:
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        msg = f"{flag}: directory {parent!r} does not exist"
        raise ValueError(msg)


def _check_writable(path: str, flag: str) -> None:
    """Fail before any sampling when ``path`` cannot be written (a file is made and removed beside it)."""
    _check_output_path(path, flag)
    if os.path.isdir(path):
        msg = f"{flag}: {path!r} is a directory; give a file name"
        raise ValueError(msg)
    parent = os.path.dirname(os.path.abspath(path))
    try:
        fd, probe = tempfile.mkstemp(prefix=".sgmc-probe-", dir=parent)
        os.close(fd)
        os.remove(probe)
        if os.path.exists(path) and not os.access(path, os.W_OK):
            raise PermissionError(f"{path} is read-only")
    except OSError as err:
        msg = f"{flag}: cannot write {path!r}: {err.strerror or err}"
        raise ValueError(msg) from None


def _output_paths(path: str, methods: list) -> dict:
    """The file of each method: ``path`` itself for one method, ``STEM-LABEL.EXT`` for several."""
    if len(methods) == 1:
        return {methods[0].label: path}
    stem, ext = os.path.splitext(path)
    return {m.label: f"{stem}-{m.label}{ext or '.npz'}" for m in methods}


def _save_traces(args, problem: _Problem, results: dict, paths: dict, settings: dict) -> list:
    """Each method's trace by :meth:`sgmc.Trace.save`, with the command's settings and its row in ``info``."""
    written = []
    for label, res in results.items():
        if res["trace"] is None:
            continue
        trace = res["trace"]
        trace.info["command"] = {
            **settings,
            "method": label,
            "step_size": res["row"]["h"],
            "row": res["row"],
            "reference_mean": [float(v) for v in problem.reference_mean],
            "reference": problem.reference_note,
            "problem": problem.description,
        }
        trace.save(paths[label])
        written.append(paths[label])
    return written
