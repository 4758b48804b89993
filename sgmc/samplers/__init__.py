"""One-step dynamics for stochastic gradient MCMC, vectorised over chains.

Every sampler follows one contract (:class:`Sampler`): ``init(rng, position, estimator) -> state``
and ``step(rng, state, estimator, step_size) -> (state, StepInfo)``. Names accepted by
:func:`sgmc.sample`: ``"sgld"``, ``"sghmc"``, ``"sgnht"``, ``"psgld"``, ``"ula"``, ``"mala"``, ``"sgrld"``, ``"sgrhmc"``
(Riemannian, with a :class:`Metric`; GLMs default to their Fisher metric), ``"recipe"`` (the general
D, Q sampler), ``"baoab"`` and ``"badodab"`` (splitting integrators; BADODAB's thermostat absorbs
gradient noise), ``"scir"`` (the simplex), ``"sgld_corrected"`` and ``"sghmc_corrected"`` (gradient-noise
corrections). Step
sizes use the review's convention: SGLD is theta' = theta + (h/2) g + N(0, h I).
"""

from typing import Any

from .._names import build, registry_key
from .base import (
    Sampler,
    SamplerBase,
    Schedule,
    StepInfo,
    add_costs,
    constant,
    from_learning_rate,
    polynomial,
    step_sizes,
    to_epsilon,
)
from .corrections import NoiseCorrectionError, SGHMCCorrected, VollmerSGLD
from .hamiltonian import SGHMC, SGNHT, SGHMCState, SGNHTState
from .langevin import MALA, PSGLD, SGLD, ULA, LangevinState, MALAState, PSGLDState
from .metrics import GLMFisherMetric, Metric
from .recipe import Recipe, RecipeState
from .riemannian import SGRLD, SGRHMC, SGRHMCState
from .scir import SCIR, SCIRState
from .splitting import BADODAB, BAOAB, BADODABState, BAOABState

__all__ = [
    "Sampler", "SamplerBase", "StepInfo", "add_costs",
    "Schedule", "constant", "polynomial", "step_sizes", "to_epsilon", "from_learning_rate",
    "SGLD", "ULA", "PSGLD", "MALA", "SGHMC", "SGNHT", "SGRLD", "SGRHMC", "Recipe", "SCIR", "BAOAB", "BADODAB", "VollmerSGLD", "SGHMCCorrected", "NoiseCorrectionError",
    "Metric", "GLMFisherMetric",
    "LangevinState", "PSGLDState", "MALAState", "SGHMCState", "SGNHTState", "SGRHMCState", "RecipeState", "SCIRState",
    "BAOABState", "BADODABState",
    "make_sampler", "SAMPLERS",
]

SAMPLERS = {
    "sgld": SGLD, "ula": ULA, "psgld": PSGLD, "mala": MALA, "sghmc": SGHMC, "sgnht": SGNHT,
    "sgrld": SGRLD, "sgrhmc": SGRHMC, "recipe": Recipe, "scir": SCIR,
    "sgld_corrected": VollmerSGLD, "sghmc_corrected": SGHMCCorrected, "baoab": BAOAB, "badodab": BADODAB,
}


def make_sampler(name: Any, model: Any = None, **options: Any) -> Sampler:
    """Build a sampler from its registry name (or return a configured sampler unchanged).

    Names ignore case, and ``-`` and ``_`` are the same (``"sgld-corrected"``). An option the sampler
    does not take raises ``TypeError`` naming it and the closest option the sampler takes.
    """
    key = registry_key(name, SAMPLERS, Sampler, "sampler",
                       "init, step, name, exact and needs_log_density (sgmc.samplers.Sampler)")
    if key is None:
        return name
    options = dict(options)
    fixed = ()
    if key == "psgld" and model is not None:
        options.setdefault("n_data", model.n_data)
        fixed = ("n_data",)
    if key in ("sgrld", "sgrhmc") and model is not None:
        options.setdefault("model", model)
        fixed = ("model",)
    return build(SAMPLERS[key], (), options, f"sampler {key!r}", "sampler_options", fixed)
