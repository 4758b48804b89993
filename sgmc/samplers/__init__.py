"""One-step dynamics for stochastic gradient MCMC, vectorised over chains.

Names accepted by :func:`sgmc.sample`: ``"sgld"``, ``"sghmc"``, ``"sgnht"``, ``"psgld"``, ``"ula"``,
``"mala"``. Step sizes use the review's convention: SGLD is theta' = theta + (h/2) g + N(0, h I).
"""

from typing import Any

from .base import Sampler, Schedule, constant, from_learning_rate, polynomial, step_sizes, to_epsilon
from .hamiltonian import SGHMC, SGNHT, SGHMCState, SGNHTState
from .langevin import MALA, PSGLD, SGLD, ULA, LangevinState, MALAState, PSGLDState

__all__ = [
    "Sampler", "Schedule", "constant", "polynomial", "step_sizes", "to_epsilon", "from_learning_rate",
    "SGLD", "ULA", "PSGLD", "MALA", "SGHMC", "SGNHT",
    "LangevinState", "PSGLDState", "MALAState", "SGHMCState", "SGNHTState",
    "make_sampler", "SAMPLERS",
]

SAMPLERS = {"sgld": SGLD, "ula": ULA, "psgld": PSGLD, "mala": MALA, "sghmc": SGHMC, "sgnht": SGNHT}


def make_sampler(name: Any, model: Any = None, **options: Any) -> Sampler:
    """Build a sampler from its registry name (or return a configured sampler unchanged)."""
    if not isinstance(name, str):
        if not (hasattr(name, "init") and hasattr(name, "step")):
            msg = f"`sampler` must be a name in {sorted(SAMPLERS)} or an object with init/step; got {name!r}"
            raise TypeError(msg)
        return name
    key = name.lower()
    if key not in SAMPLERS:
        msg = f"unknown sampler {name!r}; choose one of {sorted(SAMPLERS)}"
        raise ValueError(msg)
    if key == "mala":
        return MALA(model, **options)
    if key == "psgld":
        options.setdefault("n_data", getattr(model, "n_data", None))
    return SAMPLERS[key](**options)
