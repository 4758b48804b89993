"""The ``sgmc`` command run in this process, for the documentation scripts that show or use what it prints."""

from __future__ import annotations

import contextlib
import io

from sgmc.cli import main

__all__ = ["run_cli"]


def run_cli(argv: list[str]) -> str:
    """What ``sgmc argv...`` prints; a ``RuntimeError`` naming the command, its exit status and its output if it fails."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    if code != 0:
        msg = f"sgmc {' '.join(argv)} exited with {code}:\n{out.getvalue()}"
        raise RuntimeError(msg)
    return out.getvalue()
