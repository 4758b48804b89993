"""Adaptive subsample size: ASGLD-CV and ASGLD-CV-PS (Putcha's thesis, 2024, chapter 4).

Section 4.3.3 and Algorithm 5 of the thesis: by Lemma 4.3.3 the pseudo-variance of the
CV(-PS) estimator is at most (1/n) ||theta - theta_hat||^2 sum_i L_i^2 / p_i; asking for at most V_0
gives the smallest n_t > ||theta_t - theta_hat||^2 sum_i L_i^2 / (p_i V_0) (eq. 4.3.14), chosen afresh at
every iteration and for every chain. V_0 is calibrated by default as in section 4.5.3
(:mod:`.v0`): fixed-n pilot chains of SGLD-CV (or SGLD-CV-PS) at n, the 95th percentile q_95 of
||theta - theta_hat||^2 along each, and V_0 the largest (1/n) q_95 sum_i L_i^2 / p_i over the chains.
The estimate itself is SGLD-CV-PS's (:mod:`.preferential`), with n_t indices per chain.
"""

from __future__ import annotations

from typing import Any

from .._array_api import Array
from .._keys import refuse_tracing
from .._validation import check_batch_size, check_choice, check_int, check_positive
from ..models.base import require
from .base import EstimateInfo, Prepared, diff_sum
from .preferential import ControlVariatePS
from .v0 import bound_sum, calibrate_v0, default_pilot_step, laplace_v0

__all__ = ["AdaptiveControlVariate", "AdaptiveControlVariatePS", "V0_RULES"]

#: How :meth:`AdaptiveControlVariate.prepare` calibrates V_0 when no number is given.
V0_RULES = ("pilot", "laplace")


class AdaptiveControlVariate(ControlVariatePS):
    """ASGLD-CV and ASGLD-CV-PS (thesis Algorithm 5): control variates with a subsample size per iteration.

    At each call and for each chain, n_t is the smallest integer above
    ``||theta_t - theta_hat||^2 sum_i L_i^2 / (p_i V_0)`` (eq. 4.3.14), clipped to
    ``[1, max_batch_size]``; the n_t indices are drawn from the weights and the estimate is the CV(-PS)
    one (eq. 4.3.7).

    Parameters
    ----------
    model : Model
        Needs per-datum Lipschitz constants ``model.lipschitz()`` (and ``hess_log_lik`` for
        ``weights="approx"``).
    batch_size : int or float
        The fixed n of the calibration (the thesis: 0.1% of N).
    weights : {"uniform", "approx", "lipschitz"} or array (N,), default "uniform"
        ``"uniform"`` is ASGLD-CV, ``"approx"`` ASGLD-CV-PS (the CV-PS approximate weights).
    v0 : float, optional
        The pseudo-variance bound V_0; when omitted, :meth:`prepare` calibrates it by ``v0_rule``.
    v0_rule : {"pilot", "laplace"}, default "pilot"
        How :meth:`prepare` calibrates V_0 (:mod:`sgmc.estimators.v0`). ``"pilot"``, the thesis's rule
        (section 4.5.3, :func:`calibrate_v0`): ``pilot_chains`` fixed-n SGLD-CV(-PS) chains of ``pilot_iter`` iterations from the mode, the ``quantile`` of
        ||theta - theta_hat||^2 along each, V_0 the largest (1/n) q sum_i L_i^2 / p_i.
        ``"laplace"`` (:func:`laplace_v0`): the same bound with one quantile over
        ``pilot_chains * pilot_iter`` draws of the Laplace approximation N(theta_hat, Sigma), no chains run.
    pilot_step_size : float, optional
        h of the pilot chains. Default: 0.5 / lambda_max, with lambda_max the largest eigenvalue of the
        negative Hessian of log pi at the mode (SGLD-CV's default step in ``sgmc run``); the thesis runs
        its pilots at the sampling run's own step, so pass that step to follow it exactly.
    pilot_chains, pilot_iter : int, default 10 and 1000
    quantile : float, default 0.95
    max_batch_size : int, optional
        Upper limit of n_t (default N).
    centre, optimizer, opt_steps, opt_step_size, opt_batch_size, floor
        As for :class:`ControlVariatePS`.

    Notes
    -----
    ``EstimateInfo.batch_size`` is the per-chain n_t and ``n_evals`` is 2 n_t, so the trace's
    ``batch_size`` and ``data_passes`` record what each chain used. The chains of a group are one array:
    every chain draws max_c n_t indices and the draws past its own n_t get weight zero, so the
    arithmetic per call follows the largest n_t of the group (the reported counts are each chain's own).

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.backends import default_rng
    >>> from sgmc.models import LogisticRegression
    >>> from sgmc.estimators import AdaptiveControlVariate
    >>> r = np.random.default_rng(0)
    >>> X = r.normal(size=(2000, 3)); y = (r.random(2000) < 0.5).astype(float)
    >>> est = AdaptiveControlVariate(LogisticRegression(X, y), 10).prepare(default_rng(0), np.zeros((1, 3))).estimator
    >>> far = est.centre + np.array([[0.0, 0.0, 0.0], [0.5, 0.0, 0.0]])
    >>> _, _, info = est.estimate(default_rng(1), est.init(None, far), far)
    >>> info.batch_size.tolist()
    [1, 121]
    """

    name = "adaptive-cv"

    def __init__(self, model: Any, batch_size: Any, weights: Any = "uniform", centre: Array | None = None, *,
                 v0: float | None = None, v0_rule: str = "pilot", pilot_step_size: float | None = None,
                 pilot_chains: int = 10, pilot_iter: int = 1000, quantile: float = 0.95,
                 max_batch_size: int | None = None, **options):
        if isinstance(weights, str) and weights == "exact":
            msg = "AdaptiveControlVariate needs static weights: 'uniform', 'approx', 'lipschitz' or an array; got 'exact'"
            raise ValueError(msg)
        require(model, ("lipschitz",), "the adaptive subsample size (per-datum Lipschitz constants)")
        super().__init__(model, batch_size, weights, centre, **options)
        self.v0 = None if v0 is None else check_positive(v0, "v0")
        self.v0_rule = check_choice(v0_rule, "v0_rule", V0_RULES)
        self.pilot_step_size = None if pilot_step_size is None else check_positive(pilot_step_size, "pilot_step_size")
        self.pilot_chains = check_int(pilot_chains, "pilot_chains")
        self.pilot_iter = check_int(pilot_iter, "pilot_iter")
        self.quantile = float(quantile)
        if not 0.0 < self.quantile < 1.0:
            msg = f"`quantile` must be in (0, 1); got {quantile!r}"
            raise ValueError(msg)
        self.max_batch_size = model.n_data if max_batch_size is None else check_batch_size(
            max_batch_size, model.n_data, "max_batch_size")
        # c = sum_i L_i^2 / p_i / V_0: n_t = floor(c ||theta - theta_hat||^2) + 1
        self.coef = None if (self.v0 is None or self.probs is None) else bound_sum(model, self.probs) / self.v0

    def _options(self) -> dict:
        return dict(super()._options(), v0=self.v0, v0_rule=self.v0_rule, pilot_step_size=self.pilot_step_size,
                    pilot_chains=self.pilot_chains, pilot_iter=self.pilot_iter, quantile=self.quantile,
                    max_batch_size=self.max_batch_size)

    def with_v0(self, v0: float) -> "AdaptiveControlVariate":
        """A copy with V_0 set."""
        return type(self)(self.model, self.batch_size, self.weights, self.centre, **dict(self._options(), v0=v0))

    def fixed(self) -> ControlVariatePS:
        """The fixed-n estimator with the same centre and weights (the pilot chains' estimator)."""
        o = super()._options()
        w = self.weights if isinstance(self.weights, str) else self.probs
        return ControlVariatePS(self.model, self.batch_size, w, self.centre, **o)

    def prepare(self, rng: Any, position: Array) -> Prepared:
        """Mode and weights (as :class:`ControlVariatePS`), then V_0 unless given."""
        prep_rng, pilot_rng = rng.spawn(2)
        prepared = super().prepare(prep_rng, position)
        est, cost = prepared.estimator, prepared.n_evals
        if est.v0 is None:
            m = self.model
            if est.v0_rule == "pilot":
                h = est.pilot_step_size
                if h is None:
                    h, passes = default_pilot_step(m, est.centre)
                    cost += passes * m.n_data
                v0 = calibrate_v0(est.fixed(), h, chains=est.pilot_chains, n_iter=est.pilot_iter,
                                  quantile=est.quantile, rng=pilot_rng)
                cost += float(m.n_data + est.pilot_iter * 2 * est.batch_size)
            else:
                v0 = laplace_v0(est, pilot_rng, chains=est.pilot_chains, n_iter=est.pilot_iter, quantile=est.quantile)
            est = est.with_v0(v0)
        return Prepared(est, prepared.start, cost)

    def batch_sizes(self, position: Array, centre: Array) -> Array:
        """n_t for each chain: int64 (chains,)."""
        xp = self.model.xp
        diff = position - centre
        d2 = xp.astype(xp.sum(diff * diff, axis=1), xp.float64)
        n_t = xp.floor(self.coef * d2) + 1.0
        return xp.astype(xp.clip(n_t, 1.0, float(self.max_batch_size)), xp.int64)

    def estimate(self, rng, est_state, position):
        refuse_tracing("The adaptive subsample size", "the minibatch size it draws depends on the position",
                       position)
        if self.coef is None:
            msg = "AdaptiveControlVariate has no V_0 yet: pass `v0=`, or call estimator.prepare(rng, position)"
            raise ValueError(msg)
        m = self.model
        xp = m.xp
        chains = position.shape[0]
        centre = xp.broadcast_to(est_state.centre, tuple(position.shape))
        n_t = self.batch_sizes(position, centre)
        n_max = int(xp.max(n_t))
        idx, inv_p = self._draw(rng, chains, n_max)
        cols = xp.arange(n_max, dtype=xp.int64, device=m.device)
        n_col = xp.astype(n_t, m.dtype)[:, None]
        w = xp.where(cols[None, :] < n_t[:, None], inv_p / n_col, xp.zeros_like(inv_p))
        diff = diff_sum(m, position, centre, idx, w)
        g = m.grad_log_prior(position) + est_state.centre_grad + diff
        return g, est_state, EstimateInfo(2 * n_t, n_t)

    def __repr__(self) -> str:
        w = self.weights if isinstance(self.weights, str) else "array"
        return f"{type(self).__name__}(model={self.model!r}, batch_size={self.batch_size}, weights={w!r}, v0={self.v0!r})"


class AdaptiveControlVariatePS(AdaptiveControlVariate):
    """ASGLD-CV-PS: :class:`AdaptiveControlVariate` with the CV-PS approximate weights (``weights="approx"``)."""

    name = "adaptive-cv-ps"

    def __init__(self, model: Any, batch_size: Any, weights: Any = "approx", centre: Array | None = None, **options):
        super().__init__(model, batch_size, weights, centre, **options)
