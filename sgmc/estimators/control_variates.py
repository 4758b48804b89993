"""Control-variate gradient estimators: SGLD-CV and SVRG-style centring.

SGLD-CV (Baker et al. 2019; review section 2.3) centres the minibatch estimate at a point theta_hat
near the posterior mode:

    g_cv(theta) = grad log p(theta) + sum_i grad log f_i(theta_hat)
                  + (N/n) sum_{i in S} [grad log f_i(theta) - grad log f_i(theta_hat)],

whose variance is O(||theta - theta_hat||^2 N^2 / n) instead of O(N^2 / n). The centre is found by
:func:`find_mode` (SGD or Adam on the subsampled log posterior, with Polyak averaging) unless the user
supplies it; the same minibatch is used for both terms. SVRG (Dubey et al. 2016) re-centres every
``update_every`` iterations at the chain's current position, per chain.
"""

from __future__ import annotations

import math
from typing import Any

from .._array_api import Array, check_finite, is_array
from ..models.base import Model, check_compatible
from .base import EstimateInfo, GradientEstimator, Minibatch, check_batch_size

__all__ = ["ControlVariate", "SVRG", "find_mode"]


def find_mode(
    model: Model,
    rng: Any,
    init: Array,
    *,
    method: str = "adam",
    n_steps: int = 2000,
    step_size: float | None = None,
    batch_size: Any = None,
) -> Array:
    """Approximate the posterior mode by stochastic optimisation of the subsampled log posterior.

    Parameters
    ----------
    model : Model
    rng : sgmc Generator
    init : array (dim,) or (1, dim)
        Starting point.
    method : {"adam", "sgd"}
        Adam (scale-free; the default) or plain SGD as in the sgmcmc R package.
    n_steps : int
    step_size : float, optional
        Initial learning rate; defaults 0.05 for Adam and ``1 / (M_hat)`` for SGD, where ``M_hat`` is a
        curvature bound from the model's Lipschitz constants when it has them. The rate decays as
        ``lr / sqrt(1 + k / 100)``, and the returned point averages the iterates of the second half
        (Polyak-Ruppert averaging), which removes most of the minibatch noise.
    batch_size : int, optional
        Minibatch size for the optimiser (default: ``min(N, max(100, N // 100))``).

    Returns
    -------
    array (dim,)
    """
    from .. import backends

    xp = model.xp
    if not is_array(init):
        init = backends.asarray(init, backend=backends.get_backend(xp), dtype=model.dtype, device=model.device)
    check_compatible(model, init, "init")
    if tuple(init.shape) not in ((model.dim,), (1, model.dim)):
        msg = f"`init` must have shape ({model.dim},) or (1, {model.dim}); got {tuple(init.shape)}"
        raise ValueError(msg)
    rng = backends.default_rng(rng, backend=backends.get_backend(xp), device=model.device)
    theta = xp.reshape(init, (1, -1))
    theta = xp.astype(theta, model.dtype) if theta.dtype != model.dtype else theta
    if n_steps < 1:
        msg = f"`n_steps` must be at least 1; got {n_steps}"
        raise ValueError(msg)
    if method not in ("adam", "sgd"):
        msg = f"`method` must be 'adam' or 'sgd'; got {method!r}"
        raise ValueError(msg)
    if getattr(model, "has_data", True):
        n = batch_size if batch_size is not None else min(model.n_data, max(100, model.n_data // 100))
        grad = Minibatch(model, n)
    else:
        from .base import FullGradient

        grad = FullGradient(model)
    if step_size is None:
        if method == "adam":
            step_size = 0.05
        else:
            step_size = 1.0 / _curvature_bound(model)
    lr0 = float(step_size)
    if not (math.isfinite(lr0) and lr0 > 0):
        msg = f"`step_size` for the mode finder must be positive; got {step_size!r}"
        raise ValueError(msg)
    m = xp.zeros_like(theta)
    v = xp.zeros_like(theta)
    b1, b2, eps = 0.9, 0.999, 1e-8
    avg = xp.zeros_like(theta)
    n_avg = 0
    half = n_steps // 2
    for k in range(n_steps):
        g, _ = grad(rng, theta)
        lr = lr0 / math.sqrt(1.0 + k / 100.0)
        if method == "adam":
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            mhat = m / (1 - b1 ** (k + 1))
            vhat = v / (1 - b2 ** (k + 1))
            theta = theta + lr * mhat / (xp.sqrt(vhat) + eps)
        else:
            theta = theta + lr * g
        if k >= half:
            avg = avg + theta
            n_avg += 1
    out = avg / n_avg
    if not bool(xp.all(xp.isfinite(out))):
        msg = f"the mode finder ({method}) diverged; lower its `step_size` (was {lr0})"
        raise FloatingPointError(msg)
    return out[0, ...]


def _curvature_bound(model: Model) -> float:
    xp = model.xp
    try:
        lip = float(xp.sum(model.lipschitz()))
    except NotImplementedError:
        lip = float(model.n_data)
    prior = getattr(model, "prior_lipschitz", lambda: 0.0)()
    return max(lip + prior, 1e-12)


class ControlVariate(GradientEstimator):
    """SGLD-CV's control-variate estimator.

    Parameters
    ----------
    model : Model
    batch_size : int or float
        n per iteration.
    centre : array (dim,), optional
        theta_hat. If omitted, :meth:`prepare` finds it with :func:`find_mode`.
    optimizer : {"adam", "sgd"}, default "adam"
    opt_steps : int, default 2000
    opt_step_size : float, optional
    opt_batch_size : int, optional
    replace : bool, default False

    Notes
    -----
    ``prepare`` returns the centre as the chains' starting point, as the review recommends: the
    optimisation replaces burn-in. Costs ``2 n`` per-datum gradient evaluations per call, plus one full
    pass at the centre.
    """

    name = "cv"

    def __init__(
        self,
        model: Model,
        batch_size: Any,
        centre: Array | None = None,
        *,
        optimizer: str = "adam",
        opt_steps: int = 2000,
        opt_step_size: float | None = None,
        opt_batch_size: Any = None,
        replace: bool = False,
    ):
        super().__init__(model)
        self._mb = Minibatch(model, batch_size, replace=replace)
        self.batch_size = self._mb.batch_size
        self.scale = self._mb.scale
        if optimizer not in ("adam", "sgd"):
            msg = f"`optimizer` must be 'adam' or 'sgd'; got {optimizer!r}"
            raise ValueError(msg)
        if int(opt_steps) < 1:
            msg = f"`opt_steps` must be at least 1; got {opt_steps}"
            raise ValueError(msg)
        self.optimizer = optimizer
        self.opt_steps = int(opt_steps)
        self.opt_step_size = opt_step_size
        self.opt_batch_size = opt_batch_size
        self.evals_per_call = 2 * self.batch_size
        self._info = EstimateInfo(2 * self.batch_size)
        self.centre = None
        self.centre_grad = None
        self.setup_evals = 0
        if centre is not None:
            self.set_centre(centre)

    def set_centre(self, centre: Array) -> None:
        """Fix theta_hat and compute the full-data likelihood gradient there (one O(N) pass)."""
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
        self.centre = centre
        self.centre_grad = m.grad_log_lik_sum(xp.reshape(centre, (1, -1)))
        self.setup_evals += m.n_data

    def prepare(self, rng, position):
        if self.centre is None:
            start = position[0, :]
            nb = self.opt_batch_size if self.opt_batch_size is not None else self.batch_size
            mode = find_mode(
                self.model, rng, start, method=self.optimizer, n_steps=self.opt_steps,
                step_size=self.opt_step_size, batch_size=nb,
            )
            self.setup_evals += self.opt_steps * check_batch_size(nb, self.model.n_data)
            self.set_centre(mode)
        xp = self.model.xp
        return xp.broadcast_to(self.centre, tuple(position.shape))

    def __call__(self, rng, position):
        if self.centre is None:
            msg = "ControlVariate has no centre yet: pass `centre=` or call prepare(rng, position) first"
            raise RuntimeError(msg)
        m = self.model
        xp = m.xp
        idx = self._mb.indices(rng, position.shape[0])
        centre = xp.broadcast_to(self.centre, tuple(position.shape))
        diff = m.grad_log_lik_sum(position, idx) - m.grad_log_lik_sum(centre, idx)
        g = m.grad_log_prior(position) + self.centre_grad + self.scale * diff
        return g, self._info


class SVRG(GradientEstimator):
    """Stochastic variance-reduced gradient (Dubey et al. 2016): per-chain centres refreshed periodically.

    Every ``update_every`` calls each chain's snapshot moves to its current position and the full
    gradient there is recomputed (an O(N) pass); in between, the estimate is
    ``grad log p(theta) + G(snap) + (N/n) sum_S [grad log f_i(theta) - grad log f_i(snap)]``.

    Parameters
    ----------
    model : Model
    batch_size : int or float
    update_every : int, optional
        Iterations between snapshot updates (default ``ceil(N / n)``, one epoch).
    replace : bool, default False
    """

    name = "svrg"

    def __init__(self, model: Model, batch_size: Any, update_every: int | None = None, replace: bool = False):
        super().__init__(model)
        self._mb = Minibatch(model, batch_size, replace=replace)
        self.batch_size = self._mb.batch_size
        self.scale = self._mb.scale
        if update_every is None:
            update_every = math.ceil(model.n_data / self.batch_size)
        if int(update_every) < 1:
            msg = f"`update_every` must be at least 1; got {update_every}"
            raise ValueError(msg)
        self.update_every = int(update_every)
        self.evals_per_call = 2 * self.batch_size + model.n_data / self.update_every
        self._count = 0
        self._snap = None
        self._snap_grad = None

    def prepare(self, rng, position):
        self._count = 0
        self._snap = None
        return None

    def __call__(self, rng, position):
        m = self.model
        n_evals = 2 * self.batch_size
        if self._snap is None or self._count % self.update_every == 0 or self._snap.shape != position.shape:
            self._snap = position
            self._snap_grad = m.grad_log_lik_sum(position)
            n_evals += m.n_data
        self._count += 1
        idx = self._mb.indices(rng, position.shape[0])
        diff = m.grad_log_lik_sum(position, idx) - m.grad_log_lik_sum(self._snap, idx)
        g = m.grad_log_prior(position) + self._snap_grad + self.scale * diff
        return g, EstimateInfo(n_evals)
