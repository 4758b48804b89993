"""Blocks of iterations in one call: random numbers drawn ahead, a fused native step, its array-API twin.

On a CPU, a small-minibatch iteration of SGLD costs more in interpreted overhead (dozens of Python
calls, separate NumPy passes for the row gather, the residuals and the sums) than in arithmetic. For
the generalised linear models (:class:`~sgmc.models.LogisticRegression`,
:class:`~sgmc.models.LinearRegression`) with :class:`~sgmc.samplers.SGLD`,
:class:`~sgmc.samplers.SGHMC` or :class:`~sgmc.samplers.SGNHT` and a
:class:`~sgmc.estimators.Minibatch`, :class:`~sgmc.estimators.ControlVariate` or
:class:`~sgmc.estimators.SVRG` estimator, :func:`sgmc.chains.run_chains` instead draws the random
numbers of a block of iterations first and hands them, with the state, to the backend's native
``"glm_fused_block"`` (a compiled loop on NumPy with Numba), which runs the whole block. The twin that
defines the result, :func:`twin_block`, runs the samplers' own ``step`` on the same numbers. The
Bayesian neural network (:class:`~sgmc.models.BayesianNeuralNetwork`) and BPMF
(:class:`~sgmc.models.BPMF`) have natives of their own, ``"bnn_fused_block"`` and
``"bpmf_fused_block"`` (:mod:`sgmc.backends._numba_fused_models`), for the same samplers and
estimators; their blocks use the layout below unchanged (only the dimension ``d`` is the model's).

Stream layout
-------------
The numbers are drawn from the group's generator in exactly the order and shapes in which the
samplers' ``step`` draws them, iteration after iteration, so a block leaves the generator where the
same iterations of ``step`` would, the draws equal the unfused loop's (up to the rounding of the sums)
and a checkpoint taken at a block's end resumes as the unfused loop's does. Per iteration:

* SGLD, SGNHT: ``z`` = ``rng.normal((chains, d))``, then the estimator's minibatch indices
  ``(chains, n)``.
* SGHMC with L leapfrog steps: with ``resample_momentum``, the fresh momentum ``rng.normal((chains,
  d))`` first; then for each leapfrog step its noise ``rng.normal((chains, d))`` followed by the
  indices of that step's gradient estimate.

The block's arrays are ``z`` of shape (iterations, normals per iteration, chains, d), the normals in
draw order, and ``idx`` of shape (iterations, estimates per iteration, chains, n), the indices in draw
order. The minibatch indices come from the estimator's own draw (with or without replacement), so
they consume the generator as its ``estimate`` does; a backend may fill the block with the same calls
on its generator directly (the native ``"glm_fused_draws"``, NumPy's draws with replacement).
"""

from __future__ import annotations

import copy
from typing import Any, NamedTuple

from .._array_api import Array, array_namespace
from .._dispatch import native
from ..estimators.base import Minibatch
from ..estimators.control_variates import SVRG, ControlVariate, SVRGState, centre_residuals
from ..models.glm import LinearRegression, LogisticRegression
from ..models.bnn import BayesianNeuralNetwork
from ..models.bpmf import BPMF
from .base import StepInfo, add_costs
from .hamiltonian import SGHMC, SGNHT
from .langevin import SGLD

__all__ = ["FusedPlan", "plan", "twin_block"]

#: Most random numbers (normals plus indices) one block draws ahead.
BLOCK_ELEMENTS = 2**19
#: Most iterations in one block.
MAX_BLOCK = 256


class Block(NamedTuple):
    """What a block of iterations returns: the state after it, and per iteration what the loop records."""

    state: Any
    positions: Array  # (iterations, chains, d)
    grads: Array | None  # (iterations, chains, d) when asked for
    infos: list  # StepInfo per iteration
    at: Any = None  # at(w): the state where the block's window w ends (blocks spanning windows)
    stats: Any = None  # per window (abs_max, stein, stein_n), computed with the block (Watch.window)


def _minibatch(estimator: Any) -> Any:
    return estimator if type(estimator) is Minibatch else estimator._mb


#: The fused native of each model with one (the BNN's and BPMF's: see the module docstring).
_NATIVE_OF = {LogisticRegression: "glm_fused_block", LinearRegression: "glm_fused_block",
              BayesianNeuralNetwork: "bnn_fused_block", BPMF: "bpmf_fused_block"}


def _model_spec(model: Any) -> dict:
    """What the model's fused native needs to know of it: its data arrays and constants."""
    if type(model) is BayesianNeuralNetwork:
        return {"X": model.X, "labels": model.labels, "n_hidden": model.n_hidden, "n_classes": model.n_classes,
                "hidden": model.hidden}
    if type(model) is BPMF:
        return {"users": model.users, "items": model.items, "ratings": model.ratings, "n_users": model.n_users,
                "n_items": model.n_items, "d": model.d, "alpha": model.alpha, "mu0": model.mu0, "a0": model.a0,
                "b0": model.b0}
    return {"kind": model._native_kind, "X": model.X, "y": model.y,
            "param": float(model._native_param or 1.0), "prior_var": model.prior_var}


def plan(sampler: Any, estimator: Any, position: Array, backend: Any = None) -> "FusedPlan | None":
    """A :class:`FusedPlan` when the backend has the fused native and the combination is one it covers.

    ``backend``: the run's (its plan's), whose native table is read; found from the model if omitted.
    ``None`` otherwise: the caller steps one iteration at a time.
    """
    model = getattr(estimator, "model", None)
    if (type(sampler) not in (SGLD, SGHMC, SGNHT) or type(estimator) not in (Minibatch, ControlVariate, SVRG)
            or type(model) not in _NATIVE_OF):
        return None
    if getattr(model, "stream_rows", None) is not None:   # X read from disk by rows (sgmc._blocks): no array to hand over
        return None
    name = _NATIVE_OF[type(model)]
    fast = native(model.xp, name) if backend is None else backend.native.get(name)
    if fast is None or getattr(position, "ndim", 0) != 2 or position.dtype != model.xp.float64:
        return None
    if type(sampler) is SGHMC and not (sampler.noise_estimate is None or isinstance(sampler.noise_estimate, float)):
        return None
    if type(estimator) is ControlVariate and estimator.centre is None:
        return None
    return FusedPlan(sampler, estimator, fast)


class FusedPlan:
    """Draws and runs blocks of iterations for one sampler, estimator and GLM (see the module docstring)."""

    def __init__(self, sampler: Any, estimator: Any, fast: Any):
        self.sampler, self.estimator, self.fast = sampler, estimator, fast
        #: Set when the native declined a block (a type or size it does not take, the same for every block of
        #: the run): the caller then steps one iteration at a time, cheaper than blocks on the twin.
        self.declined = False
        model = estimator.model
        self.model = model
        hmc = type(sampler) is SGHMC
        self.n_est = sampler.n_leapfrog if hmc else 1
        self.n_normal = self.n_est + (1 if hmc and sampler.resample_momentum else 0)
        self._draw = _minibatch(estimator)._draw
        self._fast_draws = native(model.xp, "glm_fused_draws")
        self._resid = (None, None)  # a native's table for the control variate's centre, kept between blocks
        self._spec_model = _model_spec(model)
        name = {Minibatch: "minibatch", ControlVariate: "cv", SVRG: "svrg"}[type(estimator)]
        self._spec_est = {"name": name, "scale": estimator.scale, "update_every": getattr(estimator, "update_every", 0)}
        self._spec_smp = {"name": sampler.name}
        if hmc:
            self._spec_smp = {"name": "sghmc", "friction": sampler.friction, "v_hat": sampler.noise_estimate,
                              "n_leapfrog": sampler.n_leapfrog, "resample": sampler.resample_momentum}
        elif type(sampler) is SGNHT:
            self._spec_smp["diffusion"] = sampler.diffusion

    def block_size(self, chains: int) -> int:
        """Iterations per block for ``chains`` chains: the pre-drawn numbers stay under ``BLOCK_ELEMENTS``."""
        per = chains * (self.n_est * self.estimator.batch_size + self.n_normal * self.model.dim)
        return max(1, min(MAX_BLOCK, BLOCK_ELEMENTS // max(per, 1)))

    def draw(self, rng: Any, iterations: int, chains: int) -> tuple[Array, Array]:
        """The block's ``z`` and ``idx``, drawn in the stream layout of the module docstring."""
        xp, m = self.model.xp, self.model
        shape, dt, mb = (chains, m.dim), m.dtype, _minibatch(self.estimator)
        n_data, n, replace, draw = m.n_data, mb.batch_size, mb.replace, self._draw
        fresh = self.n_normal > self.n_est
        if self._fast_draws is not None:  # a backend's straight path for the same calls
            out = self._fast_draws(rng, iterations, self.n_normal, self.n_est, fresh, chains, m.dim, n_data, n,
                                   replace)
            if out is not NotImplemented:
                return out
        zs, ids = [], []
        for _ in range(iterations):
            if fresh:
                zs.append(rng.normal(shape, dtype=dt))
            for _ in range(self.n_est):
                zs.append(rng.normal(shape, dtype=dt))
                ids.append(draw(rng, n_data, n, chains, replace))
        z = xp.reshape(xp.stack(zs), (iterations, self.n_normal, chains, m.dim))
        idx = xp.reshape(xp.stack(ids), (iterations, self.n_est, chains, n))
        return z, idx

    def run(self, state: Any, hs: list, z: Array, idx: Array, keep_grads: bool = False) -> Block:
        """Run the block on the native, or on :func:`twin_block` where the native declines."""
        if self._spec_smp["name"] == "sghmc" and self._spec_smp["v_hat"] is not None:
            for h in set(hs):  # the step's own check of the noise correction, raised as the step raises it
                self.sampler._noise_sd(self.model.xp, h)
        est_state = state.est_state
        spec = {"x": state.position, "g": state.grad, "rho": getattr(state, "momentum", None),
                "xi": getattr(state, "thermostat", None)}
        svrg = type(self.estimator) is SVRG
        if svrg:
            spec.update(centre=est_state.snapshot, centre_grad=est_state.snapshot_grad, count=est_state.count)
        elif type(self.estimator) is ControlVariate:
            spec.update(centre=est_state.centre, centre_grad=est_state.centre_grad)
            if self._resid[0] is est_state.centre:  # the fixed centre's residuals, from the first block
                spec["centre_resid"] = self._resid[1]
            else:  # or from the estimator's init, which made them in its pass for the full gradient
                table = centre_residuals(est_state)
                if table is not None:
                    spec["centre_resid"] = table
        res = self.fast(self._spec_model, self._spec_smp, self._spec_est, spec, hs, z, idx, keep_grads)
        if res is NotImplemented:
            self.declined = True
            return twin_block(self.sampler, self.estimator, state, hs, z, idx, keep_grads)
        out, pos, grads, xis = res
        if out.get("centre_resid") is not None:
            self._resid = (est_state.centre, out["centre_resid"])
        new = {"position": out["x"], "grad": out["g"]}
        if hasattr(state, "momentum"):
            new["momentum"] = out["rho"]
        if hasattr(state, "thermostat"):
            new["thermostat"] = out["xi"]
        if svrg:
            new["est_state"] = SVRGState(out["centre"], out["centre_grad"], out["count"])
        infos = self._infos(len(hs), est_state.count if svrg else 0, xis)
        return Block(state._replace(**new), pos, grads, infos)

    def _infos(self, iterations: int, count: int, xis: Array) -> list:
        """Each iteration's StepInfo, as the samplers' ``step`` reports it."""
        est = self.estimator
        svrg = type(est) is SVRG
        out = []
        thermo = type(self.sampler) is SGNHT
        for t in range(iterations):
            cost = None
            for _ in range(self.n_est):
                info = est._info
                if svrg:
                    if count == est.update_every:
                        info, count = est._refresh_info, 0
                    count += 1
                cost = info if cost is None else add_costs(cost, info)
            out.append(StepInfo(cost, extras={"thermostat": xis[t]}) if thermo else StepInfo(cost))
        return out


class _Replay:
    """Stands in for the generator and the estimator's index draw, handing out a block's numbers in order."""

    def __init__(self, z: Array, idx: Array):
        self.z, self.idx, self.t, self.i, self.j = z, idx, 0, 0, 0

    def at(self, t: int) -> None:
        if t and (self.i != self.z.shape[1] or self.j != self.idx.shape[1]):
            msg = f"iteration {t - 1} used {self.i} normals and {self.j} index draws, not the layout's"
            raise RuntimeError(msg)
        self.t, self.i, self.j = t, 0, 0

    def normal(self, shape: tuple, dtype: Any = None) -> Array:
        z = self.z[self.t, self.i, ...]
        self.i += 1
        if tuple(z.shape) != tuple(shape):
            msg = f"the step drew normals of shape {shape}; the block holds {tuple(z.shape)}"
            raise RuntimeError(msg)
        return z

    def indices(self, rng: Any, n_data: int, size: int, batch: int, replace: bool = False) -> Array:
        out = self.idx[self.t, self.j, ...]
        self.j += 1
        return out


def _replaying(estimator: Any, feed: _Replay) -> Any:
    """A copy of ``estimator`` whose minibatch indices come from ``feed``."""
    est = copy.copy(estimator)
    if type(est) is Minibatch:
        est._draw = feed.indices
    else:
        est._mb = copy.copy(est._mb)
        est._mb._draw = feed.indices
    return est


def twin_block(sampler: Any, estimator: Any, state: Any, hs: list, z: Array, idx: Array,
               keep_grads: bool = False) -> Block:
    """The array-API twin of ``"glm_fused_block"``: the samplers' ``step``, fed the block's numbers.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc import backends
    >>> from sgmc.models import LogisticRegression
    >>> from sgmc.estimators import Minibatch
    >>> from sgmc.samplers import SGLD
    >>> from sgmc.samplers._fused import FusedPlan, twin_block
    >>> X = np.random.default_rng(0).normal(size=(50, 3)); y = (X[:, 0] > 0).astype(float)
    >>> est, sgld, rng = Minibatch(LogisticRegression(X, y), 10), SGLD(), backends.default_rng(1)
    >>> state = sgld.init(rng, np.zeros((2, 3)), est)
    >>> z, idx = FusedPlan(sgld, est, None).draw(rng, 4, 2)
    >>> twin_block(sgld, est, state, [1e-3] * 4, z, idx).positions.shape
    (4, 2, 3)
    """
    xp = array_namespace(z)
    feed = _Replay(z, idx)
    est = _replaying(estimator, feed)
    pos, grads, infos = [], [], []
    for t, h in enumerate(hs):
        feed.at(t)
        state, info = sampler.step(feed, state, est, h)
        pos.append(state.position)
        if keep_grads:
            grads.append(state.grad)
        infos.append(info)
    feed.at(len(hs))
    return Block(state, xp.stack(pos), xp.stack(grads) if keep_grads else None, infos)
