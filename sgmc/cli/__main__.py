"""``python -m sgmc.cli``: the same as the ``sgmc`` command (see :mod:`sgmc.cli`)."""

from .entry import main

if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
