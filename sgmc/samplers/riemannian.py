"""Riemannian samplers: SGRLD (Patterson and Teh 2013) and SGRHMC (Ma et al. 2015).

Both are rows of the review's Table 1 (Nemeth and Fearnhead 2021, section 3), Euler steps of
d zeta = (1/2) b(zeta) dt + sqrt(D) dW with b = -(D + Q) grad H + Gamma (eq. 10, Gamma with a plus
sign), for a metric G(theta) (:class:`~sgmc.samplers.Metric`). With g the estimate of grad log pi:

* SGRLD, D = G^{-1}, Q = 0:
  theta' = theta + (h/2)[G^{-1} g + Gamma] + sqrt(h) N(0, G^{-1}), Gamma_i = sum_j d_j (G^{-1})_{ij};
* SGRHMC, D = diag(0, G^{-1}), Q = [[0, -G^{-1/2}], [G^{-1/2}, 0]], momentum first:
  rho' = rho + (h/2)[G^{-1/2} g - G^{-1} rho + Gamma_rho] + sqrt(h) N(0, G^{-1});
  theta' = theta + (h/2) G^{-1/2} rho', Gamma_rho,i = sum_j d_j (G^{-1/2})_{ij}.

Cost: a metric computed from the data (the Fisher metric of a GLM) is evaluated at every step, one
pass through the data besides the gradient estimate's; both samplers report it in
``StepInfo.own_evals`` (``Metric.n_evals``), so the trace's ``data_passes`` count it.

Step size: h multiplies G^{-1}, so it is measured in the metric's units. With G the Fisher
information plus prior precision (:class:`~sgmc.samplers.GLMFisherMetric`) G^{-1} is about the
posterior covariance and steps of order 0.1-1 are right, where SGLD on the same posterior needs steps
of the order of the smallest posterior variance.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from .._array_api import Array, array_namespace
from .base import SamplerBase, StepInfo, _preconditioned_lambda_max
from .integrators import root as root_
from .metrics import GLMFisherMetric, Metric, matvec, sym_sqrt

__all__ = ["SGRLD", "SGRHMC", "SGRHMCState", "as_metric"]

_STEP_SCALE = (
    "{name}'s step size is on the metric's scale: h multiplies G(theta)^{{-1}}, so with a Fisher metric "
    "(about the posterior precision) steps of order 0.1-1 are typical and SGLD-sized steps are far too "
    "small; sgmc.tune_step_size(..., sampler={name!r}) picks one"
)


def as_metric(metric: Any, model: Any = None, name: str = "metric") -> Metric:
    """A :class:`Metric` from a Metric, ``"fisher"`` (the model's ``fisher_metric()`` where it offers one,
    else a GLM's Fisher information), or a constant array."""
    if isinstance(metric, Metric):
        return metric
    if metric is None or (isinstance(metric, str) and metric == "fisher"):
        if model is None:
            msg = f"`{name}` is required: a sgmc.samplers.Metric, a constant array, or 'fisher' with a GLM model"
            raise ValueError(msg)
        if callable(getattr(model, "fisher_metric", None)):  # a model that offers its own metric
            return model.fisher_metric()
        return GLMFisherMetric(model)
    if isinstance(metric, str):
        msg = f"`{name}` must be a sgmc.samplers.Metric, an array or 'fisher'; got {metric!r}"
        raise ValueError(msg)
    return Metric(metric)


def _metric_unit(metric: Metric, model: Any, curvature: Any, position: Any) -> float:
    """1 / lambda_max(G^{-1/2} H G^{-1/2}) at ``position`` (default: zeros)."""
    if position is None:
        position = model.zeros(1)[0, ...]
    xp = array_namespace(position)
    inv = metric.inverse(xp.reshape(position, (1, -1)))[0, ...]
    return 1.0 / _preconditioned_lambda_max(curvature, inv)


class _LangevinState(NamedTuple):
    position: Array
    grad: Array
    est_state: Any


# Its docstring example repeats the other samplers' set-up: each class's help runs on its own.
class SGRLD(SamplerBase):
    """Stochastic gradient Riemannian Langevin dynamics with a metric G(theta).

    Parameters
    ----------
    metric : Metric, array or "fisher"
        G(theta) and its derivatives (:class:`~sgmc.samplers.Metric`), a constant array ((d,) diagonal
        or (d, d)), or ``"fisher"`` for :class:`~sgmc.samplers.GLMFisherMetric` of the model
        (:func:`sgmc.sample` passes the model).
    model : Model, optional
        Needed for ``metric="fisher"``.
    mirror : bool, default False
        Replace the position by its absolute value after every step: the reflection at zero of
        Patterson and Teh's (2013) expanded-mean parametrisation of the simplex
        (:meth:`sgmc.models.DirichletCategorical.metric`). Near the boundary its Euler steps are biased;
        :class:`~sgmc.samplers.SCIR` is not.

    Notes
    -----
    The step size is on the metric's scale (see the module docstring): with G the Fisher information
    plus prior precision, h ~ 0.1-1.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc import backends
    >>> from sgmc.models import GaussianTarget
    >>> from sgmc.estimators import FullGradient
    >>> from sgmc.samplers import SGRLD
    >>> target = GaussianTarget(np.zeros(2), np.diag([1.0, 0.01]))
    >>> sampler = SGRLD(metric=np.array([1.0, 100.0]))         # G = the target's precision
    >>> grad = FullGradient(target)
    >>> rng = backends.default_rng(0)
    >>> state = sampler.init(rng, np.zeros((500, 2)), grad)
    >>> for _ in range(100):
    ...     state, _ = sampler.step(rng, state, grad, 0.2)
    >>> ratio = state.position.std(axis=0) / np.array([1.0, 0.1])   # sd / target sd
    >>> bool(np.all(np.abs(ratio - 1) < 0.15))
    True
    """

    name = "sgrld"
    step_note = "; " + _STEP_SCALE.format(name="sgrld")

    def step_unit(self, model, curvature, position=None, estimator=None, rng=None):
        """1 / lambda_max(G^{-1/2} H G^{-1/2}): about 1 for a Fisher metric."""
        return _metric_unit(self.metric, model, curvature, position)

    def __init__(self, metric: Any = "fisher", model: Any = None, mirror: bool = False):
        self.metric = as_metric(metric, model)
        self.mirror = bool(mirror)

    def init(self, rng, position, estimator, est_state=None):
        g, est_state, _ = self.start(rng, position, estimator, est_state)
        return _LangevinState(position, g, est_state)

    def step(self, rng, state, estimator, step_size):
        x, g = state.position, state.grad
        xp = array_namespace(x)
        h = step_size
        m = self.metric
        inv, gam = m.inverse_and_gamma(x)
        z = rng.normal(tuple(x.shape), dtype=x.dtype)
        if m.diagonal:
            x = x + (0.5 * h) * (inv * g + gam) + xp.sqrt(h * inv) * z
        else:
            # the root of the inverse already computed (for a metric that depends on theta, computing
            # it again would be a second pass through the data)
            root = m.inverse_sqrt(x) if m.constant else sym_sqrt(xp, inv)
            x = x + (0.5 * h) * (matvec(inv, g) + gam) + root_(h) * matvec(root, z)
        if self.mirror:
            x = xp.abs(x)
        g, es, info = estimator.estimate(rng, state.est_state, x)
        return _LangevinState(x, g, es), StepInfo(info, own_evals=m.n_evals)


class SGRHMCState(NamedTuple):
    position: Array
    momentum: Array
    grad: Array
    est_state: Any


# Its docstring example repeats the other samplers' set-up: each class's help runs on its own.
class SGRHMC(SamplerBase):
    """Stochastic gradient Riemannian HMC (Ma et al. 2015; review Table 1), one step per iteration.

    Parameters
    ----------
    metric : Metric, array or "fisher"
        As for :class:`SGRLD`. A position-dependent metric must be diagonal (the divergence of
        G^{-1/2} is then closed form); a dense metric must be constant.
    model : Model, optional

    Notes
    -----
    The momentum persists across iterations (the friction G^{-1} keeps it at its N(0, I) law); the
    step size is on the metric's scale, as for SGRLD.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc import backends
    >>> from sgmc.models import GaussianTarget
    >>> from sgmc.estimators import FullGradient
    >>> from sgmc.samplers import SGRHMC
    >>> target = GaussianTarget(np.zeros(2), np.diag([1.0, 0.01]))
    >>> sampler = SGRHMC(metric=np.array([1.0, 100.0]))
    >>> grad = FullGradient(target)
    >>> rng = backends.default_rng(1)
    >>> state = sampler.init(rng, np.zeros((500, 2)), grad)
    >>> for _ in range(200):
    ...     state, _ = sampler.step(rng, state, grad, 0.2)
    >>> ratio = state.position.std(axis=0) / np.array([1.0, 0.1])
    >>> bool(np.all(np.abs(ratio - 1) < 0.15))
    True
    """

    name = "sgrhmc"
    step_note = "; " + _STEP_SCALE.format(name="sgrhmc")

    def step_unit(self, model, curvature, position=None, estimator=None, rng=None):
        """1 / sqrt(lambda_max(G^{-1/2} H G^{-1/2})) (momentum steps scale with the square root)."""
        return math.sqrt(_metric_unit(self.metric, model, curvature, position))

    def __init__(self, metric: Any = "fisher", model: Any = None):
        self.metric = as_metric(metric, model)
        if not (self.metric.constant or self.metric.diagonal):
            msg = (
                "SGRHMC needs d/dtheta G^{-1/2}, which has no closed form for a dense position-dependent metric "
                f"({self.metric!r}); use a diagonal metric (sgmc.samplers.Metric(..., diagonal=True)) or a "
                "constant one (for a GLM, the Fisher metric at the mode: GLMFisherMetric(model).value(mode))"
            )
            raise ValueError(msg)

    def init(self, rng, position, estimator, est_state=None):
        g, est_state, _ = self.start(rng, position, estimator, est_state)
        rho = rng.normal(tuple(position.shape), dtype=position.dtype)
        return SGRHMCState(position, rho, g, est_state)

    def step(self, rng, state, estimator, step_size):
        x, rho, g = state.position, state.momentum, state.grad
        h = step_size
        m = self.metric
        inv = m.inverse(x)
        root = m.inverse_sqrt(x)
        gam = m.gamma_sqrt(x)
        z = rng.normal(tuple(x.shape), dtype=x.dtype)
        if m.diagonal:
            rho = rho + (0.5 * h) * (root * g - inv * rho + gam) + root_(h) * root * z
            x = x + (0.5 * h) * root * rho
        else:
            rho = rho + (0.5 * h) * (matvec(root, g) - matvec(inv, rho) + gam) + root_(h) * matvec(root, z)
            x = x + (0.5 * h) * matvec(root, rho)
        g, es, info = estimator.estimate(rng, state.est_state, x)
        return SGRHMCState(x, rho, g, es), StepInfo(info, own_evals=m.n_evals)
