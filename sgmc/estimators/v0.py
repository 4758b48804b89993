"""V_0, the pseudo-variance threshold of the adaptive subsample size (ASGLD-CV, ASGLD-CV-PS).

Putcha's thesis (2024, section 4.5.3) calibrates V_0 with pilot chains: run 10 chains of SGLD-CV (or
SGLD-CV-PS) at the fixed subsample size n, take for each chain the 95th percentile q_95 of
||theta - theta_hat||^2 along it, propose V_0 = (1/n) q_95 sum_i L_i^2 / p_i (the bound of Lemma 4.3.3,
eq. 4.3.13, at the fixed n) and keep the largest proposal over the chains. That rule is
:func:`calibrate_v0` and the default of :class:`~sgmc.estimators.AdaptiveControlVariate`.

:func:`laplace_v0` is a cheaper stand-in that needs no pilot chains: the same bound with q_95 the 95th
percentile of ||theta - theta_hat||^2 over draws from the Laplace approximation N(theta_hat, Sigma),
pooled. The two differ: the pilot chains start at the mode and move for a limited number of
iterations, at a step size whose bias and gradient noise widen or narrow their spread, and the rule
keeps the largest of ten per-chain percentiles rather than one pooled one.
"""

from __future__ import annotations

from typing import Any

from .. import backends
from .._array_api import Array
from .._validation import check_int, check_positive
from ..models.base import provides, require
from ..optimize import negative_hessian
from ..samplers.langevin import SGLD

__all__ = ["calibrate_v0", "laplace_v0", "pilot_distances", "default_pilot_step", "bound_sum", "PILOT_STEP_FACTOR"]

#: The default pilot step is this over lambda_max (the negative Hessian's largest eigenvalue at the mode):
#: SGLD-CV's default step in ``sgmc run`` (docs/samplers.md), whose runs the pilots stand for.
PILOT_STEP_FACTOR = 0.5


def bound_sum(model: Any, probs: Array) -> float:
    """sum_i L_i^2 / p_i (thesis Lemma 4.3.3), from the model's per-datum Lipschitz constants."""
    xp = model.xp
    require(model, ("lipschitz",), "the adaptive subsample size (per-datum Lipschitz constants)")
    L = model.lipschitz()
    return float(xp.sum(L * L / probs))


def pilot_distances(estimator: Any, step_size: float, *, chains: int = 10, n_iter: int = 1000,
                    rng: Any = None) -> Any:
    """||theta_t - theta_hat||^2 along fixed-n SGLD pilot chains started at the centre.

    Runs ``chains`` SGLD chains of ``estimator`` (a configured fixed-n :class:`ControlVariatePS`) for
    ``n_iter`` iterations at ``step_size`` (the review's h) and returns a float64 NumPy array
    (chains, n_iter): the squared distance from the estimator's centre after each iteration.
    """
    m = estimator.model
    xp = m.xp
    step_size = check_positive(step_size, "step_size")
    chains = check_int(chains, "chains")
    n_iter = check_int(n_iter, "n_iter")
    rng = backends.default_rng(rng, backend=backends.get_backend(xp), device=m.device)
    centre = xp.reshape(estimator.centre, (1, -1))
    position = xp.broadcast_to(centre, (chains, m.dim))
    smp = SGLD()
    state = smp.init(rng, position, estimator)
    d2 = []
    for _ in range(n_iter):
        state, _ = smp.step(rng, state, estimator, step_size)
        diff = state.position - centre
        d2.append(xp.sum(diff * diff, axis=1))
    hx = backends.get_backend("numpy").xp
    return hx.asarray(backends.to_numpy(xp.stack(d2, axis=1)), dtype=hx.float64)


def calibrate_v0(estimator: Any, step_size: float, *, chains: int = 10, n_iter: int = 1000, quantile: float = 0.95,
                 rng: Any = None) -> float:
    """V_0 by the thesis's rule (section 4.5.3): the largest per-chain bound over fixed-n pilot chains.

    For each of ``chains`` SGLD chains of the fixed-n estimator (:func:`pilot_distances`), the
    ``quantile`` q of ||theta - theta_hat||^2 along it gives the proposal (1/n) q sum_i L_i^2 / p_i
    (eq. 4.3.13 at the fixed n); V_0 is the largest proposal.

    Parameters
    ----------
    estimator : ControlVariatePS
        With its centre and weights set (after :meth:`~ControlVariatePS.prepare`); ``weights="uniform"``
        for ASGLD-CV.
    step_size : float
        h of the pilot SGLD chains (the review's convention; thesis epsilon = h).
    chains, n_iter : int, default 10 and 1000
    quantile : float, default 0.95
    rng : seed or Generator
    """
    d2 = pilot_distances(estimator, step_size, chains=chains, n_iter=n_iter, rng=rng)
    hx = backends.get_backend("numpy").xp
    q = hx.quantile(d2, _check_quantile(quantile), axis=1)
    return float(hx.max(q)) * bound_sum(estimator.model, estimator.probs) / estimator.batch_size


def laplace_v0(estimator: Any, rng: Any, *, chains: int = 10, n_iter: int = 1000, quantile: float = 0.95) -> float:
    """V_0 with the pilot chains' positions replaced by ``chains * n_iter`` draws from N(theta_hat, Sigma).

    Sigma is the Laplace covariance at the estimator's centre (the inverse of
    :func:`sgmc.optimize.negative_hessian`); the ``quantile`` of ||theta - theta_hat||^2 over all the
    draws, pooled, gives V_0 = (1/n) q sum_i L_i^2 / p_i. No pilot chain is run.
    """
    m = estimator.model
    xp = m.xp
    cov = xp.linalg.inv(negative_hessian(m, xp.reshape(estimator.centre, (1, -1))))
    chol = xp.linalg.cholesky(0.5 * (cov + cov.T))
    z = rng.normal((check_int(chains, "chains") * check_int(n_iter, "n_iter"), m.dim), dtype=m.dtype)
    x = z @ chol.T
    hx = backends.get_backend("numpy").xp
    d2 = hx.asarray(backends.to_numpy(xp.sum(x * x, axis=1)), dtype=hx.float64)
    q = float(hx.quantile(d2, _check_quantile(quantile)))
    return q * bound_sum(m, estimator.probs) / estimator.batch_size


def default_pilot_step(model: Any, centre: Array) -> tuple[float, float]:
    """The default pilot step ``PILOT_STEP_FACTOR / lambda_max`` at ``centre``, and its cost in data passes.

    lambda_max is the largest eigenvalue of :func:`sgmc.optimize.negative_hessian` at the centre: one
    pass with per-datum Hessians, 2 d passes of central differences without.
    """
    xp = model.xp
    H = negative_hessian(model, xp.reshape(centre, (1, -1)))
    lam = float(xp.max(xp.linalg.eigvalsh(H)))
    if not lam > 0:
        msg = (
            f"the default pilot step needs a positive curvature at the centre; the negative Hessian's largest "
            f"eigenvalue is {lam}: pass `pilot_step_size=` or `v0=`"
        )
        raise ValueError(msg)
    exact = provides(model, "hess_log_lik_sum") or provides(model, "hess_log_lik")
    return PILOT_STEP_FACTOR / lam, 1.0 if exact else 2.0 * model.dim


def _check_quantile(quantile: Any) -> float:
    q = float(quantile)
    if not 0.0 < q < 1.0:
        msg = f"`quantile` must be in (0, 1); got {quantile!r}"
        raise ValueError(msg)
    return q
