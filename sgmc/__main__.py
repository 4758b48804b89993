"""``python -m sgmc``: the same as the ``sgmc`` command (see :mod:`sgmc.cli`)."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
