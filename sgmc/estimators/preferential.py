"""Preferential subsampling: SGLD-PS and SGLD-CV-PS.

Putcha, Nemeth and Fearnhead (2023), "Preferential subsampling for stochastic gradient Langevin
dynamics" (AISTATS), and chapter 4 of Putcha's thesis (2024). Indices are drawn i.i.d. from weights
p_1..p_N (with replacement) and each term is reweighted by 1/(n p_i), so the estimate stays unbiased
(thesis eq. 4.3.3, 4.3.7):

    SGLD-PS:     g = grad log p(theta) + (1/n) sum_{j=1}^n (1/p_{i_j}) grad log f_{i_j}(theta)
    SGLD-CV-PS:  g = grad log p(theta) + sum_i grad log f_i(theta_hat)
                     + (1/n) sum_j (1/p_{i_j}) [grad log f_{i_j}(theta) - grad log f_{i_j}(theta_hat)]

Weights (the "pseudo-variance" E||g - grad log pi||^2 is minimised by Cauchy-Schwarz; :mod:`.weights`):

* SGLD-PS exact (Lemma 4.3.1): p_i proportional to ||grad log f_i(theta)|| at the current theta, an
  O(N) pass per step and chain (offered for studies; it costs as much as the full gradient).
* SGLD-PS approximate (eq. 4.3.6): the same at the mode theta_hat, computed once.
* SGLD-CV-PS exact (Lemma 4.3.2): p_i proportional to ||grad log f_i(theta) - grad log f_i(theta_hat)||.
* SGLD-CV-PS approximate (eq. 4.3.11, section 4.7.4, appendix B.3): with Sigma the Laplace covariance at
  the mode (the inverse of the negative Hessian of log pi, prior included) and H_i the per-datum
  Hessian there, p_i proportional to sqrt(tr(H_i Sigma H_i^T)); O(N d^3) once.
* ``"lipschitz"``: p_i proportional to the per-datum Lipschitz constant L_i, the minimiser of the
  bound of Lemma 4.3.3 (no Hessians needed).

Static weights are drawn from an alias table (:mod:`.alias`) built once: a minibatch of n indices
costs O(n) whatever N is. Each chain draws its own indices. The adaptive subsample size built on
SGLD-CV-PS (ASGLD-CV, ASGLD-CV-PS) is in :mod:`.adaptive`.
"""

from __future__ import annotations

from typing import Any

from .._array_api import Array, is_array
from .._sampling import categorical
from .._validation import check_batch_size, check_choice, check_int, check_positive
from ..models.base import check_compatible, require
from ..optimize import _can_polish, find_mode, mode_gap_cost, newton, warn_if_not_mode
from .alias import alias_draw, alias_table
from .base import EstimateInfo, Estimator, Prepared, _check_subsampling, diff_sum
from .control_variates import ControlVariateState
from .weights import WEIGHT_FLOOR, _grad_norms, _normalise, _static_weights

__all__ = ["PreferentialSubsampling", "ControlVariatePS"]


def _check_centre(model: Any, centre: Any) -> Array | None:
    if centre is None:
        return None
    xp = model.xp
    if not is_array(centre):
        centre = xp.asarray(centre, dtype=model.dtype, device=model.device)
    check_compatible(model, centre, "centre")
    centre = xp.reshape(centre, (-1,))
    if centre.shape[0] != model.dim or not bool(xp.all(xp.isfinite(centre))):
        msg = f"`centre` must be a finite array of shape ({model.dim},); got {tuple(centre.shape)}"
        raise ValueError(msg)
    return centre


class _Preferential(Estimator):
    """Shared set-up: batch size, the weights, the alias table, the mode search."""

    _weight_kinds: tuple = ("approx", "exact", "uniform", "lipschitz")
    _for_cv = False

    def __init__(self, model, batch_size, weights="approx", centre=None, *, optimizer="adam", opt_steps=2000,
                 opt_step_size=None, opt_batch_size=None, floor=WEIGHT_FLOOR):
        super().__init__(model)
        _check_subsampling(model, f"the {self.name} estimator")
        self.batch_size = check_batch_size(batch_size, model.n_data)
        if isinstance(weights, str):
            weights = check_choice(weights, "weights", self._weight_kinds)
        self.weights = weights
        self.floor = check_positive(floor, "floor")
        self.optimizer = check_choice(optimizer, "optimizer", ("adam", "sgd"))
        self.opt_steps = check_int(opt_steps, "opt_steps")
        self.opt_step_size = opt_step_size
        self.opt_batch_size = check_batch_size(
            opt_batch_size if opt_batch_size is not None else self.batch_size, model.n_data, "opt_batch_size")
        self.centre = _check_centre(model, centre)
        if self._for_cv and weights == "approx" and self.centre is None:
            require(model, ("hess_log_lik",), "SGLD-CV-PS approximate weights (weights='approx')")
        if not self._for_cv and weights in ("approx", "exact"):
            require(model, ("grad_log_lik",), f"SGLD-PS weights={weights!r} (per-datum gradient norms)")
        if self._for_cv and weights == "exact":
            require(model, ("grad_log_lik",), "SGLD-CV-PS weights='exact' (per-datum gradient norms)")
        self.probs = _static_weights(model, weights, self.centre, self.floor, self._for_cv)
        self.table = None if self.probs is None else alias_table(self.probs)
        self.exact = weights == "exact"

    def _options(self) -> dict:
        return dict(optimizer=self.optimizer, opt_steps=self.opt_steps, opt_step_size=self.opt_step_size,
                    opt_batch_size=self.opt_batch_size, floor=self.floor)

    def with_centre(self, centre: Array):
        """A copy of this estimator at ``centre`` (dim,), its weights computed there."""
        return type(self)(self.model, self.batch_size, self.weights, centre, **self._options())

    def prepare(self, rng: Any, position: Array) -> Prepared:
        """Find the mode from the first chain's position (unless a centre was given); weights there; start there."""
        est, cost = self, 0.0
        if self.centre is None:
            m = self.model
            mode = find_mode(m, rng, position[0, :], method=self.optimizer, n_steps=self.opt_steps,
                             step_size=self.opt_step_size, batch_size=self.opt_batch_size, polish=False, check=False)
            cost = float(self.opt_steps * self.opt_batch_size)
            how = f"{self.optimizer}, {self.opt_steps} steps"
            if _can_polish(m):  # Newton steps and the mode check, as find_mode does, with their passes counted
                passes: list = []
                polished, steps = newton(m, mode, passes=passes)
                if bool(m.xp.all(m.xp.isfinite(polished))):
                    mode = polished
                cost += float(passes[0]) * m.n_data
                how += " and Newton"
            warn_if_not_mode(m, mode, 1.0, how)
            cost += mode_gap_cost(m) * m.n_data
            est = self.with_centre(mode)
            if self.weights == "approx":
                cost += float(self.model.n_data)
        start = self.model.xp.broadcast_to(est.centre, tuple(position.shape))
        return Prepared(est, start, cost)

    def _draw(self, rng: Any, chains: int, n: int) -> tuple[Array, Array]:
        """Static weights: (chains, n) indices and 1/p_i in the model dtype."""
        idx, inv_p = alias_draw(rng, self.table, (chains, n))
        return idx, self.model.xp.astype(inv_p, self.model.dtype)

    def _draw_rows(self, rng: Any, norms: Array, n: int) -> tuple[Array, Array]:
        """Per-chain weights from norms (chains, N): inverse-CDF draws and 1/p_i."""
        xp = self.model.xp
        p = _normalise(xp, norms, self.floor)
        cdf = xp.cumulative_sum(p, axis=1)
        u = rng.uniform((p.shape[0], n), dtype=p.dtype)
        idx = categorical(u, cdf)
        return idx, 1.0 / xp.take_along_axis(p, idx, axis=1)

    def __repr__(self) -> str:
        w = self.weights if isinstance(self.weights, str) else "array"
        return f"{type(self).__name__}(model={self.model!r}, batch_size={self.batch_size}, weights={w!r})"


class PreferentialSubsampling(_Preferential):
    """SGLD-PS's gradient estimator (thesis Algorithm 8, eq. 4.3.3): preferential, reweighted minibatches.

    Parameters
    ----------
    model : Model
    batch_size : int or float
        n draws per iteration, i.i.d. from the weights (with replacement, duplicates counted).
    weights : {"approx", "exact", "uniform", "lipschitz"} or array (N,), default "approx"
        ``"approx"``: p_i proportional to ||grad log f_i(theta_hat)|| at the mode, computed once
        (eq. 4.3.6). ``"exact"``: the same at each chain's current theta, an O(N) pass per call (as
        costly as the full gradient; for studies). ``"uniform"``: SGLD with replacement. An array:
        user weights (normalised).
    centre : array (dim,), optional
        theta_hat; found by :meth:`prepare` with :func:`sgmc.optimize.find_mode` when omitted.
    optimizer, opt_steps, opt_step_size, opt_batch_size
        Settings of the mode search (as for :class:`ControlVariate`).
    floor : float, default 1e-12
        Weights are at least ``floor`` times the largest.

    Notes
    -----
    Costs n per-datum gradients per call (N + n with exact weights), plus O(N) once for the weights and
    an alias table; each chain draws its own indices in O(n). Chains start at the mode.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.backends import default_rng
    >>> from sgmc.models import LogisticRegression
    >>> from sgmc.estimators import PreferentialSubsampling
    >>> r = np.random.default_rng(0)
    >>> X = r.normal(size=(2000, 3)); y = (r.random(2000) < 0.05).astype(float)
    >>> est = PreferentialSubsampling(LogisticRegression(X, y), 20).prepare(default_rng(0), np.zeros((1, 3))).estimator
    >>> grad, _, info = est.estimate(default_rng(1), est.init(None, None), np.zeros((4, 3)))
    >>> grad.shape, info.n_evals
    ((4, 3), 20)
    """

    name = "ps"

    def __init__(self, model: Any, batch_size: Any, weights: Any = "approx", centre: Array | None = None, **options):
        super().__init__(model, batch_size, weights, centre, **options)
        self._info = EstimateInfo(self.batch_size, self.batch_size)
        self._exact_info = EstimateInfo(model.n_data + self.batch_size, self.batch_size)

    def estimate(self, rng, est_state, position):
        m = self.model
        n = self.batch_size
        if self.exact:
            idx, inv_p = self._draw_rows(rng, _grad_norms(m, position), n)
            info = self._exact_info
        else:
            if self.table is None:
                msg = ("PreferentialSubsampling(weights='approx') has no weights yet: pass `centre=`, or call "
                       "estimator.prepare(rng, position) (sgmc.sample does)")
                raise ValueError(msg)
            idx, inv_p = self._draw(rng, position.shape[0], n)
            info = self._info
        g = m.grad_log_prior(position) + m.grad_log_lik_sum(position, idx, inv_p / n)
        return g, est_state, info


class ControlVariatePS(_Preferential):
    """SGLD-CV-PS's estimator (thesis Algorithm 9, eq. 4.3.7): control variates with preferential weights.

    Parameters
    ----------
    model : Model
    batch_size : int or float
    weights : {"approx", "exact", "uniform", "lipschitz"} or array (N,), default "approx"
        ``"approx"`` (eq. 4.3.11): p_i proportional to sqrt(tr(H_i Sigma H_i^T)) with per-datum
        Hessians H_i (``model.hess_log_lik``) and the Laplace covariance Sigma at the mode, O(N d^3)
        once. ``"exact"`` (Lemma 4.3.2): p_i proportional to ||grad log f_i(theta) - grad log f_i(theta_hat)||,
        O(N) per call (uniform where that vanishes). ``"lipschitz"``: p_i proportional to
        ``model.lipschitz()``. ``"uniform"``: SGLD-CV with replacement.
    centre, optimizer, opt_steps, opt_step_size, opt_batch_size, floor
        As for :class:`PreferentialSubsampling`.

    Notes
    -----
    The minibatch rows are gathered once for both points (``model.grad_log_lik_diff_sum``). Costs 2n
    per-datum gradients per call (plus 2N with exact weights) and one full pass at the centre in
    ``init``.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.backends import default_rng
    >>> from sgmc.models import LogisticRegression
    >>> from sgmc.estimators import ControlVariatePS
    >>> r = np.random.default_rng(0)
    >>> X = r.normal(size=(2000, 3)); y = (r.random(2000) < 0.05).astype(float)
    >>> est = ControlVariatePS(LogisticRegression(X, y), 20).prepare(default_rng(0), np.zeros((1, 3))).estimator
    >>> x = np.zeros((4, 3)); state = est.init(None, x)
    >>> grad, state, info = est.estimate(default_rng(1), state, x)
    >>> grad.shape, info.n_evals
    ((4, 3), 40)
    """

    name = "cv-ps"
    _for_cv = True

    def __init__(self, model: Any, batch_size: Any, weights: Any = "approx", centre: Array | None = None, **options):
        super().__init__(model, batch_size, weights, centre, **options)
        self.init_cost = float(model.n_data)
        self._info = EstimateInfo(2 * self.batch_size, self.batch_size)
        self._exact_info = EstimateInfo(2 * model.n_data + 2 * self.batch_size, self.batch_size)

    def init(self, rng: Any, position: Array) -> ControlVariateState:
        """The full-data likelihood gradient at the centre (one O(N) pass)."""
        if self.centre is None or (self.table is None and not self.exact):
            msg = (f"{type(self).__name__} has no centre: pass `centre=`, or call estimator.prepare(rng, position) "
                   "(sgmc.sample does) or sgmc.optimize.find_mode first")
            raise ValueError(msg)
        xp = self.model.xp
        return ControlVariateState(self.centre, self.model.grad_log_lik_sum(xp.reshape(self.centre, (1, -1))))

    def estimate(self, rng, est_state, position):
        m = self.model
        xp = m.xp
        n = self.batch_size
        centre = xp.broadcast_to(est_state.centre, tuple(position.shape))
        if self.exact:
            idx, inv_p = self._draw_rows(rng, _grad_norms(m, position, centre), n)
            info = self._exact_info
        else:
            idx, inv_p = self._draw(rng, position.shape[0], n)
            info = self._info
        diff = diff_sum(m, position, centre, idx, inv_p / n)
        g = m.grad_log_prior(position) + est_state.centre_grad + diff
        return g, est_state, info
