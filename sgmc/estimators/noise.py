"""Gradient-noise estimates and a control variate that switches on near its centre.

:class:`MinibatchNoise` is the simple minibatch estimator (review eq. 4) that also estimates the
covariance of its own error from the same minibatch: with S^2 the sample covariance of the n per-datum
gradients, Var(g_hat) = N^2 (1 - n/N) S^2 / n for n draws without replacement (N^2 S^2 / n with
replacement). The estimate travels in the estimator state (``est_state.v_hat``), where the
noise-corrected samplers read it: SGLD with Vollmer et al.'s (2016) correction (review section 2.5,
noise N(0, h I - (h^2/4) V_hat)) and SGHMC with friction noise h (C - (h/4) V_hat) (review section 3,
Table 1 caption C >= h V with V the variance of half the gradient error).

:class:`SwitchingControlVariate` is SGLD-CV's estimator used only where it helps: the control variate's
variance grows with ||theta - theta_hat||^2, so far from the centre it can be worse than the plain
minibatch estimate (review section 2.3, remedy (a), Fearnhead et al. 2018). Each chain uses the
control variate when it is within ``radius`` of the centre, and the plain estimate otherwise.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .._array_api import Array
from .._flow import on_host, when
from .._keys import tracing
from .._validation import check_positive
from .base import EstimateInfo, Estimator, Minibatch
from .control_variates import ControlVariate, ControlVariateState

__all__ = ["MinibatchNoise", "NoiseState", "SwitchingControlVariate"]


class NoiseState(NamedTuple):
    """The last estimate of the gradient estimator's error covariance: (chains, d) or (chains, d, d)."""

    v_hat: Array | None


# Its docstring example repeats VollmerSGLD's and SAGA's set-up: each class's help runs on its own.
class MinibatchNoise(Estimator):
    """Minibatch gradient plus an estimate V_hat of its error covariance from the same minibatch.

    Parameters
    ----------
    model : Model
        Needs per-datum gradients ``grad_log_lik(theta, idx)``.
    batch_size : int or float
        n (at least 2).
    diagonal : bool, default True
        Estimate the per-coordinate variances only (``v_hat`` (chains, d)); False gives full
        covariances (chains, d, d).
    replace : bool, default False

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.backends import default_rng
    >>> from sgmc.models import LinearRegression
    >>> from sgmc.estimators import MinibatchNoise
    >>> r = np.random.default_rng(0)
    >>> X = r.normal(size=(500, 2)); y = X @ np.array([1.0, -1.0]) + r.normal(size=500)
    >>> est = MinibatchNoise(LinearRegression(X, y), 50)
    >>> g, state, info = est.estimate(default_rng(0), est.init(None, np.zeros((3, 2))), np.zeros((3, 2)))
    >>> state.v_hat.shape
    (3, 2)
    """

    name = "minibatch-noise"

    def __init__(self, model: Any, batch_size: Any, diagonal: bool = True, replace: bool = False):
        super().__init__(model)
        self._mb = Minibatch(model, batch_size, replace=replace)
        self.batch_size = self._mb.batch_size
        if self.batch_size < 2:
            msg = f"`batch_size` must be at least 2 to estimate the gradient noise; got {self.batch_size}"
            raise ValueError(msg)
        self.scale = self._mb.scale
        self.diagonal = bool(diagonal)
        self.replace = bool(replace)
        n, big_n = self.batch_size, model.n_data
        fpc = 1.0 if replace else 1.0 - n / big_n
        self._factor = big_n * big_n * fpc / n
        self._info = EstimateInfo(self.batch_size, self.batch_size)

    def init(self, rng: Any, position: Array) -> NoiseState:
        return NoiseState(None)

    def estimate(self, rng, est_state, position):
        m = self.model
        xp = m.xp
        idx = self._mb.indices(rng, position.shape[0])
        per = m.grad_log_lik(position, idx)                     # (chains, n, d)
        total = xp.sum(per, axis=1)
        g = m.grad_log_prior(position) + self.scale * total
        c = per - xp.mean(per, axis=1, keepdims=True)
        n = self.batch_size
        if self.diagonal:
            s2 = xp.sum(c * c, axis=1) / (n - 1)
        else:
            s2 = xp.matrix_transpose(c) @ c / (n - 1)
        return g, NoiseState(self._factor * s2), self._info


class SwitchingState(NamedTuple):
    """The control variate's centre and full gradient there, and which chains used it last."""

    centre: Array
    centre_grad: Array
    active: Array | None


class SwitchingControlVariate(ControlVariate):
    """SGLD-CV's estimator switched on per chain within ``radius`` of its centre.

    Parameters
    ----------
    model, batch_size, centre, optimizer, opt_steps, opt_step_size, opt_batch_size, replace
        As for :class:`~sgmc.estimators.ControlVariate`.
    radius : float
        Euclidean distance to the centre below which a chain uses the control variate (the user's
        choice, as in the review; a few posterior standard deviations times sqrt(d) is a natural scale).

    Notes
    -----
    A chain inside the radius costs 2n per-datum gradients per call, outside n; ``EstimateInfo.n_evals``
    is per chain, and ``est_state.active`` says which chains used the control variate.
    """

    name = "cv-switch"

    def __init__(self, model: Any, batch_size: Any, centre: Array | None = None, *, radius: float,
                 **options: Any):
        super().__init__(model, batch_size, centre, **options)
        self.radius = check_positive(radius, "radius")
        self._options = dict(options)

    def with_centre(self, centre: Array) -> "SwitchingControlVariate":
        return SwitchingControlVariate(self.model, self.batch_size, centre, radius=self.radius, **self._options)

    def init(self, rng: Any, position: Array) -> SwitchingState:
        st: ControlVariateState = super().init(rng, position)
        return SwitchingState(st.centre, st.centre_grad, None)

    def estimate(self, rng, est_state, position):
        m = self.model
        xp = m.xp
        idx = self._mb.indices(rng, position.shape[0])
        centre = xp.broadcast_to(est_state.centre, tuple(position.shape))
        here = m.grad_log_lik_sum(position, idx)
        d = position - centre
        active = xp.sum(d * d, axis=-1) <= self.radius * self.radius
        prior = m.grad_log_prior(position)
        plain = prior + self.scale * here
        def switched():
            cv = prior + est_state.centre_grad + self.scale * (here - m.grad_log_lik_sum(centre, idx))
            return xp.where(active[:, None], cv, plain)

        if on_host(xp) or tracing(active):  # skip the centre's terms when no chain is inside the radius
            g = when(xp.any(active), switched, lambda: plain)
        else:  # on a device, asking whether any chain is inside would synchronise every step
            g = switched()
        n = self.batch_size
        info = EstimateInfo(n + n * xp.astype(active, position.dtype), n)
        return g, SwitchingState(est_state.centre, est_state.centre_grad, active), info
