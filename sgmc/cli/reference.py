"""The exact reference of ``sgmc run``: the posterior mean by MALA with zero-variance control variates.

The methods' posterior means are compared with it (the table's "mean error"); the conjugate linear
model has its mean in closed form instead.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from .. import backends
from ..diagnostics.zero_variance import n_zv_features, zv_mean, zv_order_for
from ..models import Affine
from ..run import sample
from .problem import _Problem

# The MALA reference (see _mala_reference): iterations per chain between these bounds, and its pilots.
REF_ITERS_MIN, REF_ITERS_MAX = 300, 1_500
REF_PILOTS, REF_PILOT_ITERS = 2, 50
MALA_TARGET_ACCEPTANCE = 0.574


def _uninterrupted(trace: Any) -> Any:
    """The trace of a run that finished; Ctrl-C during it ends the command (no reference from part of a run)."""
    if trace.info["interrupted"]:
        raise KeyboardInterrupt
    return trace


def _reference_iters(dim: int, chains: int) -> int:
    """Iterations per chain of the MALA reference: enough for degree-2 control variates when that is cheap.

    The degree-2 fit wants three draws per coefficient in each fold (the other chains' draws after the
    tenth discarded as burn-in); when that needs more than ``REF_ITERS_MAX`` iterations (d above about
    20 with two chains), the reference runs ``REF_ITERS_MAX`` iterations with degree-1 control variates.
    """
    need = 3 * n_zv_features(dim, 2)
    iters = max(REF_ITERS_MIN, math.ceil(need / max(chains - 1, 1) / 0.9) + 1)
    return iters if iters <= REF_ITERS_MAX else REF_ITERS_MAX


def _mala_reference(args, problem: _Problem, precision: Any, chains: int, iters: int, seed) -> tuple:
    """Posterior mean from MALA on the whitened posterior, with zero-variance control variates.

    MALA runs on z, where theta = mode + L z and L L^T is the inverse Hessian at the mode, so the
    target of z is close to N(0, I) and a fixed step near the optimal acceptance rate mixes fast; the
    step starts at the optimal scaling of MALA for a standard normal target in d dimensions,
    h = 1.65^2 d^(-1/3) (Roberts and Rosenthal 1998), and two short pilot runs correct it towards the
    acceptance rate 0.574. The mean is estimated by :func:`sgmc.diagnostics.zv_mean` from the draws
    and their exact scores: cross-fitted control variates of degree 2 (degree 1 when there are too
    few draws for the degree-2 fit), which on this near-Gaussian posterior remove all but a tiny part
    of the Monte Carlo noise (Mira, Solgi and Imparato 2013).
    """
    model = problem.model
    xp = model.xp
    cov = xp.linalg.inv(precision)
    L = xp.linalg.cholesky(0.5 * (cov + cov.T))
    white = Affine(model, problem.mode, L)
    zero = xp.zeros((chains, model.dim), dtype=model.dtype, device=model.device)
    pilot_seed, run_seed = seed.spawn(2)
    h = 1.65**2 * model.dim ** (-1.0 / 3.0)
    for s in pilot_seed.spawn(REF_PILOTS):
        tr = _uninterrupted(sample(white, "mala", "full", step_size=h, n_iter=REF_PILOT_ITERS, chains=chains,
                                   init=zero, rng=s, progress=False))
        acc = float(np.mean(tr.info["acceptance_rate"]))
        h *= math.exp(2.0 * (acc - MALA_TARGET_ACCEPTANCE))
    burn = max(1, iters // 10)
    t0 = time.perf_counter()
    tr = _uninterrupted(sample(white, "mala", "full", step_size=h, n_iter=iters, burn_in=burn, chains=chains,
                               init=zero, rng=run_seed, progress=not args.no_progress, store_grads=True))
    acc = float(np.mean(tr.info["acceptance_rate"]))
    # theta = mode + L z and grad_theta log pi = L^{-T} grad_z log pi, row by row
    flat_z = xp.reshape(tr.draws, (-1, model.dim))
    flat_g = xp.reshape(tr.grads, (-1, model.dim))
    theta = white.to_theta(flat_z)
    g_theta = xp.linalg.solve(L.T, flat_g.T).T
    shape = (chains, tr.n_draws, model.dim)
    fold = (chains - 1 if chains > 1 else 0.5) * tr.n_draws
    order = zv_order_for(model.dim, int(fold))
    est = zv_mean(xp.reshape(theta, shape), xp.reshape(g_theta, shape), order=order)
    elapsed = time.perf_counter() - t0
    se = float(xp.linalg.vector_norm(est.se))
    plain = float(xp.linalg.vector_norm(est.plain_se))
    mean = backends.to_numpy(est.mean)
    note = (
        f"MALA with h = {h:.3g} on theta = mode + L z (L L^T = inverse Hessian at the mode), started at "
        f"the mode; {chains} chains x {iters} iterations, first {burn} discarded; acceptance {acc:.2f}; "
        f"posterior mean with cross-fitted zero-variance control variates of degree {order} "
        f"(sgmc.diagnostics.zv_mean), standard error about {se:.1g} (plain mean of the draws: {plain:.1g}); "
        f"{elapsed:.1f} s"
    )
    return mean, note
