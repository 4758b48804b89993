"""Control-variate gradient estimators: SGLD-CV and SVRG-style centring.

SGLD-CV (Baker et al. 2019; review section 2.3) centres the minibatch estimate at a point theta_hat
near the posterior mode:

    g_cv(theta) = grad log p(theta) + sum_i grad log f_i(theta_hat)
                  + (N/n) sum_{i in S} [grad log f_i(theta) - grad log f_i(theta_hat)],

whose variance is O(||theta - theta_hat||^2 N^2 / n) instead of O(N^2 / n). The centre is a setting
of the estimator: given by the user, or found by :meth:`ControlVariate.prepare` with
:func:`sgmc.optimize.find_mode` (SGD or Adam on the subsampled log posterior, with Polyak
averaging), which returns a new estimator with the centre fixed. The full gradient at the centre is
estimator state, computed by ``init``. The same minibatch is used for both terms. SVRG (Dubey et al.
2016) re-centres every ``update_every`` iterations at each chain's current position; its snapshot,
the full gradient there and the iteration count are estimator state.
"""

from __future__ import annotations

import math
import weakref
from typing import Any, NamedTuple

from .. import backends
from .._array_api import Array, check_finite, is_array
from .._dispatch import native
from .._flow import when
from .._keys import tracing
from .._validation import check_batch_size, check_choice, check_int
from ..models.base import ModelFacts, check_compatible, model_facts
from ..optimize import _find_mode, _gap_cost, _newton, _polishable, _start, _warn_if_not_mode
from .base import EstimateInfo, Estimator, Minibatch, Prepared, diff_sum

__all__ = ["ControlVariate", "ControlVariateState", "SVRG", "SVRGState", "centre_residuals"]

# The residual table at a centre, computed in the same pass over the data as the full gradient there:
# (a weak reference to that gradient array, the table). One entry, dropped with the array.
_TABLE: list = []
#: Per estimator, the centre and the full-data gradient there that ``init`` computed (kept while the
#: estimator lives, outside its attributes; a centre changed in value is computed afresh).
_CENTRE_GRAD: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _forget(ref: Any) -> None:
    if _TABLE and _TABLE[0][0] is ref:
        _TABLE.clear()


def centre_residuals(est_state: Any) -> Any:
    """The residual table a backend computed with ``est_state.centre_grad`` (one pass), or None.

    Where a generalised linear model's backend has the native ``"glm_centre_terms"``,
    :meth:`ControlVariate.init` gets the full gradient at the centre and every datum's residual
    there from one read of the data; the fused blocks of :mod:`sgmc.samplers._fused` take the table
    from here instead of a second pass. Kept for the most recent ``init`` only, while its gradient
    array lives; None when that is not ``est_state``'s.
    """
    if _TABLE and _TABLE[0][0]() is getattr(est_state, "centre_grad", None):
        return _TABLE[0][1]
    return None


def _centre_terms(model: Any, centre: Array) -> Any:
    """``(grad (1, dim), table (N,))`` from a backend's one-pass set-up, or None where it has none."""
    kind = getattr(model, "_native_kind", "")
    if not kind or getattr(model, "stream_rows", None) is not None:
        return None
    fast = native(model.xp, "glm_centre_terms")
    if fast is None:
        return None
    out = fast(kind, model.X, model.y, centre, model._native_param or 1.0)
    return None if out is NotImplemented else out


class ControlVariateState(NamedTuple):
    """SGLD-CV's state: the centre ``(dim,)`` and the full-data log-likelihood gradient there ``(1, dim)``."""

    centre: Array
    centre_grad: Array


class ControlVariate(Estimator):
    """SGLD-CV's control-variate estimator.

    Parameters
    ----------
    model : Model
    batch_size : int or float
        n per iteration.
    centre : array (dim,), optional
        theta_hat. If omitted, :meth:`prepare` finds it with :func:`sgmc.optimize.find_mode`.
    optimizer : {"adam", "sgd"}, default "adam"
    opt_steps : int, default 2000
    opt_step_size : float, optional
    opt_batch_size : int, optional
        Settings of the mode search (default batch: ``batch_size``).
    polish : bool, optional
        Finish the search with Newton steps on the full posterior (default: when the model has exact
        Hessians and dim <= :data:`sgmc.optimize.POLISH_MAX_DIM`).
    replace : bool, default False

    Notes
    -----
    ``prepare`` suggests the centre as the chains' starting point, as the review recommends: the
    optimisation replaces burn-in. It checks the centre it found with :func:`sgmc.optimize.mode_gap`
    and warns (:class:`sgmc.ModeNotFoundWarning`) when the centre is more than one posterior standard
    deviation from the mode. Costs ``2 n`` per-datum gradient evaluations per call, plus one
    full pass at the centre in ``init``.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.backends import default_rng
    >>> from sgmc.models import LinearRegression
    >>> from sgmc.estimators import ControlVariate
    >>> r = np.random.default_rng(0)
    >>> X = r.normal(size=(1000, 2)); y = X @ np.array([1.0, -1.0]) + r.normal(size=1000)
    >>> model = LinearRegression(X, y)
    >>> est = ControlVariate(model, 50).prepare(default_rng(0), np.zeros((1, 2))).estimator
    >>> rng = default_rng(1)
    >>> x = np.zeros((4, 2))
    >>> state = est.init(rng, x)
    >>> grad, state, info = est.estimate(rng, state, x)
    >>> grad.shape, info.n_evals
    ((4, 2), 100)
    """

    name = "cv"

    def __init__(
        self,
        model: Any,
        batch_size: Any,
        centre: Array | None = None,
        *,
        optimizer: str = "adam",
        opt_steps: int = 2000,
        opt_step_size: float | None = None,
        opt_batch_size: Any = None,
        polish: bool | None = None,
        replace: bool = False,
        _checked: ModelFacts | None = None,
    ):
        super().__init__(model, _checked=_checked)
        self._mb = Minibatch(model, batch_size, replace=replace, _checked=self._facts)
        self.batch_size = self._mb.batch_size
        self.scale = self._mb.scale
        self.replace = bool(replace)
        self.optimizer = check_choice(optimizer, "optimizer", ("adam", "sgd"))
        self.opt_steps = check_int(opt_steps, "opt_steps")
        self.opt_step_size = opt_step_size
        self.opt_batch_size = check_batch_size(
            opt_batch_size if opt_batch_size is not None else self.batch_size, model.n_data, "opt_batch_size"
        )
        self.polish = polish
        self.centre = None if centre is None else self._check_centre(centre)
        self.init_cost = float(model.n_data)
        self._info = EstimateInfo(2 * self.batch_size, self.batch_size)
        self._terms = None  # (gradient, residual table) at the centre when prepare computed them

    def _check_centre(self, centre: Any) -> Array:
        m = self.model
        xp = m.xp
        if not is_array(centre):
            centre = xp.asarray(centre, dtype=m.dtype, device=m.device)
        check_compatible(m, centre, "centre")
        centre = xp.reshape(centre, (-1,))
        if centre.shape[0] != m.dim:
            msg = f"`centre` must have shape ({m.dim},); got {tuple(centre.shape)}"
            raise ValueError(msg)
        check_finite(xp, centre, "centre")
        return centre

    def with_centre(self, centre: Array) -> "ControlVariate":
        """A copy of this estimator centred at ``centre`` (dim,)."""
        return ControlVariate(
            self.model, self.batch_size, centre, optimizer=self.optimizer, opt_steps=self.opt_steps,
            opt_step_size=self.opt_step_size, opt_batch_size=self.opt_batch_size, polish=self.polish,
            replace=self.replace, _checked=self._checked_facts(),
        )

    def _checked_facts(self) -> ModelFacts | None:
        return getattr(self, "_facts", None)  # (absent from estimators stored by older versions)

    def prepare(self, rng: Any, position: Array) -> Prepared:
        """Find the centre from the first chain's position unless one was given; suggest it as the start.

        The search (``opt_steps`` optimiser steps, then Newton steps where the model has Hessians) is
        checked at its end; a centre more than one posterior standard deviation from the mode gets
        a :class:`sgmc.ModeNotFoundWarning`. The cost counts the optimiser's minibatches, the
        passes through the data of the Newton steps (gradients, Hessians, every log density of their
        line search) and the passes
        of the check (:func:`sgmc.optimize.mode_gap_cost`). Where the backend sets a centre up in one
        pass (``"glm_centre_terms"``), that pass gives the check its gradient and ``init`` its
        gradient and residual table: it is counted once, here, and ``init`` then makes no pass.
        """
        est, cost = self, 0.0
        if self.centre is None:
            m, facts = self.model, self._checked_facts() or model_facts(self.model, names=False)
            # the model was checked when this estimator was made: the search takes its facts
            start = _start(m, position[0, :])
            rng = backends.default_rng(rng, backend=backends.get_backend(m.xp), device=m.device)
            mode = _find_mode(
                m, facts, rng, start, method=self.optimizer,
                n_steps=self.opt_steps, step_size=self.opt_step_size, batch_size=self.opt_batch_size, polish=False,
                check=False,
            )
            cost = float(self.opt_steps * self.opt_batch_size)
            polish = _polishable(facts, m.dim) if self.polish is None else bool(self.polish)
            how = f"{self.optimizer}, {self.opt_steps} steps"
            if polish:
                passes: list = []
                polished, steps = _newton(m, facts, mode, passes=passes)
                if bool(m.xp.all(m.xp.isfinite(polished))):
                    mode = polished
                cost += float(passes[0]) * m.n_data
                how += f" and {steps} Newton steps"
            # the gradient at the centre once: for the check here and for init (with its residual table)
            gap_passes = _gap_cost(facts, m.dim)
            terms = _centre_terms(m, mode)
            if terms is None and gap_passes >= 1.0:  # no one-pass native: the gradient alone, kept for init
                terms = (m.grad_log_lik_sum(m.xp.reshape(mode, (1, -1))), None)
            grad = None
            if terms is not None:
                grad = m.grad_log_prior(m.xp.reshape(mode, (1, -1))) + terms[0]
                check_finite(m.xp, grad, "grad")
            _warn_if_not_mode(m, facts, mode, 1.0, how, grad=grad)
            est = self.with_centre(mode)
            if terms is not None and gap_passes >= 1.0:
                gap_passes -= 1.0  # the check took the gradient from the pass counted here
                cost += m.n_data  # that pass, which init then does not make
                est._terms = terms
                est.init_cost = max(0.0, est.init_cost - m.n_data)
            cost += gap_passes * m.n_data
        start = self.model.xp.broadcast_to(est.centre, tuple(position.shape))
        return Prepared(est, start, cost)

    def init(self, rng: Any, position: Array) -> ControlVariateState:
        """The full-data likelihood gradient at the centre (one O(N) pass)."""
        if self.centre is None:
            msg = (
                "ControlVariate has no centre: pass `centre=`, or call estimator.prepare(rng, position) "
                "(sgmc.sample does) or sgmc.optimize.find_mode first"
            )
            raise ValueError(msg)
        xp = self.model.xp
        terms = getattr(self, "_terms", None)  # (absent from estimators stored by older versions)
        if terms is None:
            terms = _centre_terms(self.model, self.centre)
        if terms is None:
            # the gradient at this centre, computed once per estimator and centre: a later run reuses it
            held = _CENTRE_GRAD.get(self)
            if held is not None and held[0].shape == self.centre.shape and bool(xp.all(held[0] == self.centre)):
                return ControlVariateState(self.centre, held[1])
            grad = self.model.grad_log_lik_sum(xp.reshape(self.centre, (1, -1)))
            if not tracing(grad):
                _CENTRE_GRAD[self] = (xp.asarray(self.centre, copy=True), grad)
            return ControlVariateState(self.centre, grad)
        grad, table = terms  # one pass: the gradient, and (from a native) the residuals the fused blocks read
        if table is not None:
            _TABLE[:] = [(weakref.ref(grad, _forget), table)]
        return ControlVariateState(self.centre, grad)

    def estimate(self, rng, est_state, position):
        m = self.model
        xp = m.xp
        idx = self._mb.indices(rng, position.shape[0])
        centre = xp.broadcast_to(est_state.centre, tuple(position.shape))
        diff = diff_sum(m, position, centre, idx)
        g = m.grad_log_prior(position) + est_state.centre_grad + self.scale * diff
        return g, est_state, self._info


class SVRGState(NamedTuple):
    """SVRG's state: per-chain snapshots ``(chains, dim)``, the full gradients there, and calls since the refresh."""

    snapshot: Array
    snapshot_grad: Array
    count: int


class SVRG(Estimator):
    """Stochastic variance-reduced gradient (Dubey et al. 2016): per-chain centres refreshed periodically.

    ``init`` takes a snapshot at each chain's position (an O(N) pass); every ``update_every`` calls
    the snapshot moves to the chain's current position and the full gradient there is recomputed. In
    between, the estimate is
    ``grad log p(theta) + G(snap) + (N/n) sum_S [grad log f_i(theta) - grad log f_i(snap)]``.

    Parameters
    ----------
    model : Model
    batch_size : int or float
    update_every : int, optional
        Calls between snapshot updates (default ``ceil(N / n)``, one epoch).
    replace : bool, default False
    """

    name = "svrg"

    def __init__(self, model: Any, batch_size: Any, update_every: int | None = None, replace: bool = False, *,
                 _checked: ModelFacts | None = None):
        super().__init__(model, _checked=_checked)
        self._mb = Minibatch(model, batch_size, replace=replace, _checked=self._facts)
        self.batch_size = self._mb.batch_size
        self.scale = self._mb.scale
        if update_every is None:
            update_every = math.ceil(model.n_data / self.batch_size)
        self.update_every = check_int(update_every, "update_every")
        self.init_cost = float(model.n_data)
        self._info = EstimateInfo(2 * self.batch_size, self.batch_size)
        self._refresh_info = EstimateInfo(2 * self.batch_size + model.n_data, self.batch_size)

    def init(self, rng: Any, position: Array) -> SVRGState:
        return SVRGState(position, self.model.grad_log_lik_sum(position), 0)

    def estimate(self, rng, est_state, position):
        m = self.model
        refresh = est_state.count == self.update_every
        if tracing(refresh):
            # Under JAX tracing the snapshot moves on the device (jax.lax.cond), with its cost counted.
            snap, snap_grad = when(refresh, lambda: (position, m.grad_log_lik_sum(position)),
                                   lambda: (est_state.snapshot, est_state.snapshot_grad))
            count = (1 - refresh) * est_state.count
            est_state = SVRGState(snap, snap_grad, count)
            info = self._info._replace(n_evals=self._info.n_evals + refresh * m.n_data)
        elif refresh:
            est_state = SVRGState(position, m.grad_log_lik_sum(position), 0)
            info = self._refresh_info
        else:
            info = self._info
        idx = self._mb.indices(rng, position.shape[0])
        diff = diff_sum(m, position, est_state.snapshot, idx)
        g = m.grad_log_prior(position) + est_state.snapshot_grad + self.scale * diff
        return g, SVRGState(est_state.snapshot, est_state.snapshot_grad, est_state.count + 1), info
