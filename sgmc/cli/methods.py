"""The methods of ``sgmc run``: which samplers and estimators it runs, their labels, seeds and default steps.

A method is a sampler with an estimator (:class:`_Method`). Its default step size is a multiple of a
curvature scale of the posterior at the mode (``STEP_FACTORS``, ``MOMENTUM_FACTORS``), or of the
sampler's own ``step_unit`` for samplers on their own scale (``UNIT_FACTORS``).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..estimators import ESTIMATORS, make_estimator
from ..optimize import _can_polish
from ..samplers import SAMPLERS, SamplerBase, make_sampler

# Default step sizes, as multiples of a curvature scale of the posterior: h = factor / lambda_max for
# the Langevin samplers and h = factor / sqrt(lambda_max) for the momentum samplers, where lambda_max
# is the largest eigenvalue of the negative Hessian of log pi at the mode. The factors come from
# pilot runs on the default job (see docs/samplers.md); --step-size overrides them.
# Samplers whose step is on their own scale (pSGLD, SGRLD with the Fisher metric, SGRHMC) take the
# factor of their family times their ``step_unit`` at the mode instead of 1 / lambda_max.
STEP_FACTORS = {
    ("sgld", "minibatch"): 0.1,
    ("sgld", "cv"): 0.5,
    ("sgld", "svrg"): 0.5,
    ("sgld", "full"): 0.5,
    ("ula", "full"): 0.5,
    ("mala", "full"): 1.0,
}
MOMENTUM_FACTORS = {"minibatch": 0.3, "cv": 1.0, "svrg": 0.3, "full": 0.3}
# Samplers on their own scale whose factor for an estimator differs from SGLD's (as multiples of their
# step_unit): SGRLD with SVRG or SAGA at SGLD's 0.5 runs away (draws at |theta| in the thousands); the
# pilots of asv_benchmarks/cli_step_pilots.py (docs/results/cli_step_pilots.json) chose 0.1.
UNIT_FACTORS = {("sgrld", "svrg"): 0.1, ("sgrld", "saga"): 0.1}
# The preferential, adaptive, SAGA and DPP estimators take the factors of their plain counterparts.
_LIKE = {"ps": "minibatch", "dpp": "minibatch", "saga": "svrg", "cv-ps": "cv", "adaptive-cv": "cv",
         "adaptive-cv-ps": "cv"}
for _new, _old in _LIKE.items():
    STEP_FACTORS[("sgld", _new)] = STEP_FACTORS[("sgld", _old)]
    MOMENTUM_FACTORS[_new] = MOMENTUM_FACTORS[_old]
# Estimators that find the posterior mode first (their chains start there, so no burn-in).
_CENTRED = ("cv", "ps", "cv-ps", "adaptive-cv", "adaptive-cv-ps")
# Their optimiser steps without --burn-in where Newton steps with exact Hessians finish the search (the
# GLMs up to sgmc.optimize.POLISH_MAX_DIM): a warm start for Newton, whose result does not depend on it.
WARM_START_STEPS = 1_000
MOMENTUM_SAMPLERS = ("sghmc", "sgnht", "sgrhmc", "baoab", "badodab")
# What the command line runs: the GLM samplers (the recipe sampler needs D, SCIR a simplex model, SGRHMC
# a constant or diagonal metric, the noise-corrected samplers the minibatch-noise estimator: use them
# from Python).
CLI_SAMPLERS = [s for s in SAMPLERS if s not in ("recipe", "scir", "sgrhmc", "sgld_corrected", "sghmc_corrected")]
CLI_ESTIMATORS = [e for e in ESTIMATORS if e not in ("noisy", "minibatch-noise", "cv-switch", "buffered")]


@dataclass
class _Method:
    label: str
    sampler: str
    estimator: str
    step_size: float = float("nan")
    batch_size: Any = None  # the method's own subsample size where the command chose one (--data, SGLD)


def _methods(samplers: list, estimators: list) -> list:
    out, seen = [], set()
    for s in samplers:
        for e in estimators:
            if SAMPLERS[s].exact:
                e = "full"
            if (s, e) in seen:
                continue
            seen.add((s, e))
            if SAMPLERS[s].exact or e == "minibatch":
                label = s.upper()
            else:
                label = f"{s.upper()}-{e.upper()}"
            out.append(_Method(label, s, e))
    return out


def _default_step(method: _Method, lambda_max: float, unit: float | None = None) -> float:
    """factor / lambda_max (momentum: factor / sqrt(lambda_max)), or factor * the sampler's own unit."""
    if method.sampler in MOMENTUM_SAMPLERS:
        scale = 1.0 / math.sqrt(lambda_max) if unit is None else unit
        return MOMENTUM_FACTORS[method.estimator] * scale
    if unit is not None and (method.sampler, method.estimator) in UNIT_FACTORS:
        return UNIT_FACTORS[(method.sampler, method.estimator)] * unit
    key = (method.sampler, method.estimator) if unit is None else ("sgld", method.estimator)
    return STEP_FACTORS[key] * (1.0 / lambda_max if unit is None else unit)


def _step_unit(method: _Method, model: Any, precision: Any, mode: Any, batch: int, rng: Any) -> float | None:
    """The sampler's ``step_unit`` at the mode for samplers on their own scale; None for the others."""
    smp = make_sampler(method.sampler, model)
    if type(smp).step_unit is SamplerBase.step_unit or method.sampler in ("sghmc", "sgnht"):
        return None
    # the estimators that find the mode take it here (their weights or control variates are built there)
    # (an adaptive estimator's subsample size comes from its own pilot runs: its plain counterpart's
    # noise stands in for it here)
    name = method.estimator.replace("adaptive-", "")
    options = {"centre": mode} if name in _CENTRED else {}
    est = make_estimator(name, model, batch, **options)
    return float(smp.step_unit(model, precision, mode, est, rng))


def _method_seed(seed: int, label: str) -> np.random.SeedSequence:
    """The seed of a method: from --seed and the method's label, so its row does not depend on the others."""
    return np.random.SeedSequence(seed, spawn_key=(zlib.crc32(label.encode("utf-8")),))


def _opt_steps(args, model: Any, burn: int) -> int:
    """Optimiser steps of the estimators that find the mode: ``burn``, or a warm start where Newton finishes."""
    steps = burn
    if args.burn_in is None and _can_polish(model):  # Newton steps finish the search: a short warm start
        steps = min(burn, WARM_START_STEPS)
    return max(steps, 100)
