"""Fused blocks of sampler iterations for the Bayesian neural network and BPMF, compiled with Numba.

The natives ``"bnn_fused_block"`` and ``"bpmf_fused_block"``: as ``"glm_fused_block"``
(:mod:`sgmc.backends._numba_fused`) does for the GLMs, each runs a whole block of SGLD, SGHMC or
SGNHT iterations with minibatch, control-variate or SVRG gradient estimates in one compiled call,
from the random numbers that :mod:`sgmc.samplers._fused` draws ahead in its documented stream
layout. Their twin is :func:`sgmc.samplers._fused.twin_block`, the samplers' own array-API ``step``
on the same numbers. The loops are :mod:`sgmc.backends._numba_fused_bnn` (the network's two matrix
products per layer through BLAS on the gathered rows, every element-wise pass in one loop) and
:mod:`sgmc.backends._numba_fused_bpmf` (one pass over the ratings, one dense pass for the prior and
the update of the estimate), with the sampler moves of :mod:`sgmc.backends._numba_fused_moves`.

This module is a leaf: it imports no algorithm module, takes arrays and plain numbers, and returns
``NotImplemented`` for a case it does not take (another array type, float32, a size where the
compiled block is not faster than the twin: see :data:`BNN_MAX_WORK`, :data:`BPMF_MAX_TOUCH`), so that
the caller runs the twin. The compiled loops are imported on first use, and the switch of the other
compiled paths (:func:`sgmc.backends._numba.set_enabled`, ``SGMC_NATIVE=0``) turns them off too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["bnn_fused_block", "bpmf_fused_block", "natives"]

_SAMPLERS = {"sgld": 0, "sghmc": 1, "sgnht": 2}
_ESTIMATORS = {"minibatch": 0, "cv": 1, "svrg": 2}
_HIDDEN = {"softmax": 0, "sigmoid": 1, "tanh": 2}
_LOADED: dict = {}
_SWITCH: list = [[True]]  # the compiled paths' on/off switch, handed over by natives()

#: Largest minibatch work ``n * n_inputs * n_hidden`` for which the BNN's compiled block runs. The block
#: saves the element-wise passes and Python calls around the network's matrix products, which cost the
#: same in both paths; it measured faster than the twin at every size measured (784-100-10 with n = 50
#: and 500, docs/results/fused_models.json), so there is no limit. A limit set here makes it decline.
BNN_MAX_WORK = float("inf")
#: Largest ratio of the numbers a BPMF minibatch touches (``n d``, its U and V rows) to ``dim`` for which the
#: compiled block runs with minibatch and control-variate estimates. The block saves the dense passes
#: over ``dim`` numbers; the pass over the ratings costs the same in both paths, and at n d = 3 dim
#: (n = 8,000 on MovieLens-100k) the compiled block measured no faster than the twin
#: (docs/results/fused_models.json), so it declines there. SVRG's full-data refresh is faster
#: compiled at every size measured, so SVRG blocks always run.
BPMF_MAX_TOUCH = 1.0


def _kernels(name: str) -> Any:
    """The compiled module ``name`` ("bnn" or "bpmf"), imported on first use."""
    if name not in _LOADED:
        if name == "bnn":
            from . import _numba_fused_bnn as mod
        else:
            from . import _numba_fused_bpmf as mod
        _LOADED[name] = mod
    return _LOADED[name]


def _f64(*arrays: Any) -> bool:
    return all(isinstance(a, np.ndarray) and a.dtype == np.float64 for a in arrays)


def _c64(a: Any, shape: tuple | None = None) -> np.ndarray:
    """A new C-ordered float64 copy (the block updates it in place; the caller's arrays stay as they were)."""
    a = np.array(a, dtype=np.float64, order="C")
    return a if shape is None else np.ascontiguousarray(np.reshape(a, shape))


def _state(sampler: dict, estimator: dict, state: dict, hs: Any, z: Any, idx: Any, keep_grad: bool) -> Any:
    """The block's arrays and settings in the compiled loops' argument order, or ``None`` when declined."""
    x, g = state["x"], state["g"]
    if not (_SWITCH[0][0] and _f64(x, g, z) and isinstance(idx, np.ndarray) and x.ndim == 2 and z.ndim == 4
            and idx.ndim == 4 and sampler["name"] in _SAMPLERS and estimator["name"] in _ESTIMATORS):
        return None
    chains, d = x.shape
    B = len(hs)
    rho, xi = state.get("rho"), state.get("xi")
    centre, cg = state.get("centre"), state.get("centre_grad")
    v_hat = sampler.get("v_hat")
    return {
        "head": (_SAMPLERS[sampler["name"]], float(sampler.get("friction", 0.0)),
                 -1.0 if v_hat is None else float(v_hat), int(sampler.get("n_leapfrog", 1)),
                 bool(sampler.get("resample", False)), float(sampler.get("diffusion", 0.0)),
                 _ESTIMATORS[estimator["name"]], float(estimator["scale"]), int(estimator.get("update_every", 0))),
        "x": _c64(x), "g": _c64(g),
        "rho": np.zeros((chains, d)) if rho is None else _c64(rho),
        "xi": np.zeros(chains) if xi is None else _c64(xi),
        "centre": np.zeros((1, d)) if centre is None else _c64(centre, (-1, d)),
        "centre_grad": np.zeros((1, d)) if cg is None else _c64(cg, (-1, d)),
        "count": int(state.get("count", 0)),
        "tail": (np.asarray(hs, dtype=np.float64), np.ascontiguousarray(z),
                 np.ascontiguousarray(idx, dtype=np.int64), np.empty((B, chains, d)),
                 np.empty((B, chains, d)) if keep_grad else np.empty((1, chains, d)), np.empty((B, chains)),
                 bool(keep_grad)),
    }


def _result(s: dict, count: int, keep_grad: bool) -> tuple:
    pos, grads, xis = s["tail"][3], s["tail"][4], s["tail"][5]
    out = {"x": s["x"], "g": s["g"], "rho": s["rho"], "xi": s["xi"], "centre": s["centre"],
           "centre_grad": s["centre_grad"], "count": int(count)}
    return out, pos, (grads if keep_grad else None), xis


def _arrays(s: dict) -> tuple:
    return (s["x"], s["g"], s["rho"], s["xi"], s["centre"], s["centre_grad"], s["count"])


def bpmf_fused_block(model: dict, sampler: dict, estimator: dict, state: dict, hs: Any, z: Any, idx: Any,
                     keep_grad: bool) -> Any:
    """Run a block of BPMF iterations; return ``(state, positions, grads, thermostats)`` or ``NotImplemented``.

    Parameters
    ----------
    model : dict
        ``users``, ``items`` (N,) int64, ``ratings`` (N,) float64 (less the model's offset),
        ``n_users``, ``n_items``, ``d``, ``alpha``, ``mu0``, ``a0``, ``b0``.
    sampler, estimator, state, hs, z, idx, keep_grad
        As for :func:`sgmc.backends._numba_fused.glm_fused_block`.
    """
    s = _state(sampler, estimator, state, hs, z, idx, keep_grad)
    users, items, ratings = model["users"], model["items"], model["ratings"]
    if (s is None or not _f64(ratings) or not all(isinstance(a, np.ndarray) and a.dtype == np.int64
                                                   for a in (users, items))):
        return NotImplemented
    if estimator["name"] != "svrg" and idx.shape[3] * int(model["d"]) > BPMF_MAX_TOUCH * s["x"].shape[1]:
        return NotImplemented
    count = _kernels("bpmf").bpmf_block(
        np.ascontiguousarray(users), np.ascontiguousarray(items), np.ascontiguousarray(ratings),
        float(model["alpha"]), int(model["n_users"]), int(model["n_items"]), int(model["d"]), float(model["mu0"]),
        float(model["a0"]), float(model["b0"]), *s["head"], *_arrays(s), *s["tail"])
    return _result(s, count, keep_grad)


def bnn_fused_block(model: dict, sampler: dict, estimator: dict, state: dict, hs: Any, z: Any, idx: Any,
                    keep_grad: bool) -> Any:
    """Run a block of BNN iterations; return ``(state, positions, grads, thermostats)`` or ``NotImplemented``.

    Parameters
    ----------
    model : dict
        ``X`` (N, n_inputs) float64, ``labels`` (N,) int64, ``n_hidden``, ``n_classes``, ``hidden``
        ("softmax", "sigmoid" or "tanh").
    sampler, estimator, state, hs, z, idx, keep_grad
        As for :func:`sgmc.backends._numba_fused.glm_fused_block`.
    """
    X, labels = model["X"], model["labels"]
    if not (_f64(X) and X.ndim == 2 and isinstance(labels, np.ndarray) and labels.dtype == np.int64
            and model["hidden"] in _HIDDEN):
        return NotImplemented
    if getattr(idx, "ndim", 0) == 4 and float(idx.shape[3]) * X.shape[1] * model["n_hidden"] > BNN_MAX_WORK:
        return NotImplemented
    s = _state(sampler, estimator, state, hs, z, idx, keep_grad)
    if s is None:
        return NotImplemented
    count = _kernels("bnn").bnn_block(
        np.ascontiguousarray(X), np.ascontiguousarray(labels), int(model["n_hidden"]), int(model["n_classes"]),
        _HIDDEN[model["hidden"]], *s["head"], *_arrays(s), *s["tail"])
    return _result(s, count, keep_grad)


def natives(switch: list) -> dict:
    """The native table entries of this module, reading the on/off ``switch`` (a one-item list) at each call.

    The caller (:func:`sgmc.backends._numba.natives`) has checked that Numba is installed and enabled.
    """
    _SWITCH[0] = switch
    return {"bnn_fused_block": bnn_fused_block, "bpmf_fused_block": bpmf_fused_block}
