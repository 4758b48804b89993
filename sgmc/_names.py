"""Registry names and constructor options of samplers and estimators, checked one way everywhere.

One naming rule: a name matches its registry entry whatever its case, and ``-`` and ``_`` are the
same character (``"sgld-corrected"`` is ``"sgld_corrected"``, ``"cv_ps"`` is ``"cv-ps"``). Options given
by name (``sampler_options``, ``estimator_options``) are checked against what the class's constructor
takes, so a misspelt key is reported with the closest one it does take.
"""

from __future__ import annotations

import inspect
import re
from typing import Any, Iterable

from ._validation import did_you_mean

__all__ = ["canonical", "build", "registry_key"]


def _fold(name: str) -> str:
    return name.strip().lower().replace("-", "_")


def canonical(name: str, registry: Iterable[str]) -> str | None:
    """The registry key that ``name`` means (case, ``-`` and ``_`` ignored), or None."""
    want = _fold(name)
    for key in registry:
        if _fold(key) == want:
            return key
    return None


def registry_key(name: Any, registry: Iterable[str], protocol: type, kind: str, contract: str) -> str | None:
    """The registry key that ``name`` means, or None when ``name`` is an object following ``protocol``.

    ``kind`` is the argument (``"sampler"``) and ``contract`` what such an object has, for the
    ``TypeError`` raised for anything else; an unknown name raises ``ValueError`` with the closest one.
    """
    if not isinstance(name, str):
        if not isinstance(name, protocol):
            msg = f"`{kind}` must be a name in {sorted(registry)} or an object with {contract}; got {name!r}"
            raise TypeError(msg)
        return None
    key = canonical(name, registry)
    if key is None:
        msg = f"unknown {kind} {name!r};{did_you_mean(name, registry)} choose one of {sorted(registry)}"
        raise ValueError(msg)
    return key


def _named_parameters(cls: type) -> tuple[list, bool]:
    """Keyword names the constructor of ``cls`` takes (its bases' where it forwards ``**options``).

    Returns ``(names, open_ended)``; ``open_ended`` is True when a constructor takes ``**options``, so
    that unknown names cannot be refused from the signatures alone.
    """
    names: list = []
    open_ended = False
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        if klass is object:
            break
        params = list(inspect.signature(init).parameters.values())[1:]
        var_kw = False
        for p in params:
            if p.kind is p.VAR_KEYWORD:
                var_kw = True
            elif p.kind is not p.VAR_POSITIONAL and p.name not in names:
                names.append(p.name)
        if not var_kw:
            break
        # ``**options`` may go to the base class (whose names follow) or be used here: either way the
        # names gathered cannot refuse a key; the constructor's own TypeError decides
        open_ended = True
    return names, open_ended


def build(cls: type, args: tuple, options: dict, what: str, argument: str, fixed: Iterable[str] = ()) -> Any:
    """``cls(*args, **options)``, with a key of ``options`` that it does not take reported by name.

    Parameters
    ----------
    cls : type
        The sampler or estimator class.
    args : tuple
        Positional arguments the library passes itself (the model, the batch size).
    options : dict
        The keyword options given by the user (and the library's defaults).
    what : str
        How to name the class in the message (``"sampler 'sgld'"``).
    argument : str
        The user's argument that held the options (``"sampler_options"``).
    fixed : iterable of str
        Constructor parameters that the library passes itself, left out of the suggestions.

    Raises
    ------
    TypeError
        Naming ``argument``, the unknown key, the closest key the class takes and all it takes.
    """
    names, open_ended = _named_parameters(cls)
    takes = [n for n in names if n not in set(fixed)]
    for key in options:
        if not isinstance(key, str):
            msg = f"`{argument}` keys must be option names (str); got {key!r}"
            raise TypeError(msg)
        if key not in names and not open_ended:
            raise TypeError(_unknown(key, takes, what, argument))
    try:
        return cls(*args, **options)
    except TypeError as err:
        m = re.search(r"unexpected keyword argument '([^']+)'", str(err))
        if m is None or m.group(1) not in options:
            raise
        raise TypeError(_unknown(m.group(1), takes, what, argument)) from None


def _unknown(key: str, takes: list, what: str, argument: str) -> str:
    hint = did_you_mean(key, takes)
    offer = f" it takes {', '.join(repr(t) for t in takes)}" if takes else " it takes no options"
    return f"`{argument}`: {what} has no option {key!r};{hint}{offer}"
