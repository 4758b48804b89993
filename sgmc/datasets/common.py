"""What the loaders of :mod:`sgmc.datasets` share: the ``backend=`` switch."""

from __future__ import annotations

from typing import Any


def _on_backend(data: Any, backend: Any) -> Any:
    """The loaders' ``backend=`` switch: one explicit copy of every array of ``data``."""
    if backend is None:
        return data
    from .. import backends

    return backends.move(data, backend)
