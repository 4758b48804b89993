"""The on/off switch of the compiled CPU paths, shared by every Numba module of the NumPy backend.

A leaf: it imports nothing of sgmc, so each compiled path (:mod:`sgmc.backends._numba`,
:mod:`~sgmc.backends._numba_stein`, :mod:`~sgmc.backends._numba_ssm`) reads the same switch
without importing the others. The environment variable ``SGMC_NATIVE=0`` (or ``false``, ``no``,
``off``) turns the paths off for the process; :func:`set_enabled` turns them off or on in code
(benchmarks and tests compare the two). Off, a compiled path returns ``NotImplemented`` and its
caller runs the array-API twin.
"""

from __future__ import annotations

import importlib.util
import os

__all__ = ["available", "enabled", "env_enabled", "set_enabled"]


def _numba_installed() -> bool:
    """Whether Numba can be found, without importing it (a finder that refuses it counts as absent)."""
    try:
        return importlib.util.find_spec("numba") is not None
    except (ImportError, ValueError):
        return False


#: Whether Numba is installed: without it the switch stays off whatever is asked (the core install).
INSTALLED = _numba_installed()
#: One item, the current setting; a list so that readers that hold it see changes.
ON = [INSTALLED and os.environ.get("SGMC_NATIVE", "1").strip().lower() not in ("0", "false", "no", "off")]


def env_enabled() -> bool:
    """Whether the environment leaves the compiled paths on (``SGMC_NATIVE`` is not ``0``)."""
    return os.environ.get("SGMC_NATIVE", "1").strip().lower() not in ("0", "false", "no", "off")


def enabled() -> bool:
    """The current setting (:func:`set_enabled`, initially from ``SGMC_NATIVE``)."""
    return ON[0]


def set_enabled(on: bool) -> bool:
    """Turn the compiled paths on or off in this process (on only where Numba is installed); returns the old setting."""
    old = ON[0]
    ON[0] = bool(on) and INSTALLED
    return old


def available() -> bool:
    """Whether Numba is installed and the environment leaves the compiled paths on.

    ``find_spec``, not an import: Numba loads (about half a second) only when a compiled path runs.
    """
    return env_enabled() and INSTALLED
