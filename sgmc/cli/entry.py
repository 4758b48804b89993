"""The entry point of the ``sgmc`` command (:func:`main`): parse, run the command, map the outcome to an exit status."""

from __future__ import annotations

import os
import sys
from typing import Sequence

from .._progress import progress_scope
from .parsing import PROG, _Failure, build_parser
from .reproduce import _command_reproduce
from .run_command import _command_run

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sgmc`` command; returns the exit status.

    Parameters
    ----------
    argv : sequence of str, optional
        Arguments without the program name; ``sys.argv[1:]`` by default.

    Returns
    -------
    int
        0 on success, 2 for a usage or data error (reported on one line on stderr), 130 when
        interrupted by Ctrl-C (one line on stderr, no traceback; ``sgmc run`` first prints the table
        of the methods that finished, the interrupted one marked, and runs no further method), 141
        when standard output was closed by its reader (``sgmc run ... | head``), the files of
        ``--output`` and ``--plot`` having been written before anything was printed.

    Examples
    --------
    >>> from sgmc.cli import main
    >>> main(["run", "--quick", "--no-progress", "--model", "linear", "--iters", "200"])  # doctest: +SKIP
    0
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help(sys.stderr)
            return 2
        args.argv = list(sys.argv[1:] if argv is None else argv)
        command = _command_reproduce if args.command == "reproduce" else _command_run
        with progress_scope(False if args.no_progress else True):
            code = command(args)
        sys.stdout.flush()  # a reader that closed the pipe is found here, not in the interpreter's last flush
        return code
    except SystemExit as exc:  # --help and --version
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    except KeyboardInterrupt:
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            _silence_stdout()
        print(f"\n{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        _silence_stdout()
        return 141
    except _Failure as exc:
        message = str(exc)
    except (ValueError, TypeError, FloatingPointError, ImportError, OSError, RuntimeError) as exc:
        message = str(exc)
    message = " ".join(message.split())
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def _silence_stdout() -> None:
    """Point standard output at the null device, so that the interpreter's final flush stays quiet."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (captured output)
        pass
