"""A fused block of sampler iterations for the generalised linear models, compiled with Numba.

The native ``"glm_fused_block"``: the twin is :func:`sgmc.samplers._fused.twin_block`, which runs the
samplers' own array-API steps on the same pre-drawn random numbers. Per call, every chain goes through
a block of iterations of SGLD, SGHMC or SGNHT, each gradient estimate (minibatch, control variate or
SVRG) a pass over the minibatch rows that reads each row of ``X`` once for both its product and its
contribution to the sum, in one compiled loop: no Python call per iteration and no temporary arrays.
The stream layout of the random numbers (what ``z`` and ``idx`` hold) is documented in
:mod:`sgmc.samplers._fused`. Two more natives serve the blocks: ``"glm_fused_draws"`` fills a
block's random numbers straight from NumPy's generator (the same values as the estimators' draws),
and ``"glm_centre_terms"`` sets a fixed control-variate centre up in one pass over the data (the
full-data gradient there and the residual table the blocks read).

This module is a leaf: it imports no algorithm module, takes arrays and plain numbers, and returns
``NotImplemented`` for a case it does not take (another array type, float32), so that the caller runs
the twin. The compiled loop is imported on first use; Numba's cache keeps its machine code on disk.
Like the other compiled paths it is off without Numba or with ``SGMC_NATIVE=0``, and it reads the
same switch (:func:`sgmc.backends._numba.set_enabled` turns it off in a process).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._distinct import complete_rows, oversample

__all__ = ["fused_draws", "glm_centre_terms", "glm_fused_block", "natives"]

_KINDS = {"logistic": 0, "linear": 1}
_SAMPLERS = {"sgld": 0, "sghmc": 1, "sgnht": 2}
_ESTIMATORS = {"minibatch": 0, "cv": 1, "svrg": 2}
_KERNELS: list = []
_SWITCH: list = [[True]]  # the compiled paths' on/off switch, handed over by natives()


def _jit() -> Any:
    if not _KERNELS:
        from . import _numba_fused_kernels

        _KERNELS.append(_numba_fused_kernels)
    return _KERNELS[0]


def _f64(a: Any) -> bool:
    return isinstance(a, np.ndarray) and a.dtype == np.float64


def glm_fused_block(model: dict, sampler: dict, estimator: dict, state: dict, hs: Any, z: Any, idx: Any,
                    keep_grad: bool) -> Any:
    """Run a block of iterations; return ``(state, positions, grads, thermostats)`` or ``NotImplemented``.

    Parameters
    ----------
    model : dict
        ``kind`` ("logistic" or "linear"), ``X`` (N, d), ``y`` (N,), ``param`` (the linear model's noise
        variance), ``prior_var``.
    sampler : dict
        ``name`` ("sgld", "sghmc", "sgnht"); SGHMC: ``friction``, ``v_hat`` (a float, or None),
        ``n_leapfrog``, ``resample``; SGNHT: ``diffusion``.
    estimator : dict
        ``name`` ("minibatch", "cv", "svrg"), ``scale`` (N / n); SVRG: ``update_every``.
    state : dict
        ``x``, ``g`` (chains, d); ``rho`` (SGHMC, SGNHT), ``xi`` (chains,) (SGNHT); ``centre`` and
        ``centre_grad`` (CV: (1, d) or (chains, d); SVRG: the snapshots and their full gradients) and
        ``count`` (SVRG: calls since the refresh); CV: ``centre_resid``, the centre's residuals for every
        datum as an earlier call returned them (computed here when absent). Not modified: the result
        holds new arrays.
    hs : sequence of float
        The block's step sizes.
    z : array (iterations, normals per iteration, chains, d)
    idx : array (iterations, estimates per iteration, chains, n) of int64
    keep_grad : bool
        Return the gradient estimate after every iteration too.
    """
    if not _SWITCH[0][0]:
        return NotImplemented
    X, y, x, g = model["X"], model["y"], state["x"], state["g"]
    if not (_f64(X) and _f64(y) and _f64(x) and _f64(g) and _f64(z) and isinstance(idx, np.ndarray)
            and X.ndim == 2 and x.ndim == 2 and z.ndim == 4 and idx.ndim == 4 and X.flags.c_contiguous
            and model["kind"] in _KINDS and sampler["name"] in _SAMPLERS and estimator["name"] in _ESTIMATORS):
        return NotImplemented
    chains, d = x.shape
    B = len(hs)
    k = _jit()
    x = np.array(x, dtype=np.float64, order="C")
    g = np.array(g, dtype=np.float64, order="C")
    rho = state.get("rho")
    rho = np.zeros((chains, d)) if rho is None else np.array(rho, dtype=np.float64, order="C")
    xi = state.get("xi")
    xi = np.zeros(chains) if xi is None else np.array(xi, dtype=np.float64, order="C")
    centre = state.get("centre")
    centre = np.zeros((1, d)) if centre is None else np.array(np.reshape(centre, (-1, d)), dtype=np.float64, order="C")
    centre_grad = state.get("centre_grad")
    centre_grad = (np.zeros((1, d)) if centre_grad is None
                   else np.array(np.reshape(centre_grad, (-1, d)), dtype=np.float64, order="C"))
    r0 = state.get("centre_resid")
    if estimator["name"] == "cv" and centre.shape[0] == 1 and r0 is None:
        # a fixed centre: its residuals for all N data once (an O(N d) pass), then one load per row
        r0 = np.empty(X.shape[0])
        k.centre_resid(_KINDS[model["kind"]], X, float(model.get("param", 1.0)), centre[0], r0)
    use_r0 = estimator["name"] == "cv" and r0 is not None
    if not use_r0:
        r0 = np.empty(0)
    if estimator["name"] == "cv" and centre.shape[0] != chains:
        centre = np.ascontiguousarray(np.broadcast_to(centre, (chains, d)))
    pos = np.empty((B, chains, d))
    grads = np.empty((B, chains, d)) if keep_grad else np.empty((1, chains, d))
    xis = np.empty((B, chains))
    v_hat = sampler.get("v_hat")
    count = k.glm_block(
        _KINDS[model["kind"]], X, y, float(model.get("param", 1.0)), float(model["prior_var"]),
        _SAMPLERS[sampler["name"]], float(sampler.get("friction", 0.0)), -1.0 if v_hat is None else float(v_hat),
        int(sampler.get("n_leapfrog", 1)), bool(sampler.get("resample", False)), float(sampler.get("diffusion", 0.0)),
        _ESTIMATORS[estimator["name"]], float(estimator["scale"]), int(estimator.get("update_every", 0)),
        x, g, rho, xi, centre, centre_grad, int(state.get("count", 0)),
        np.asarray(hs, dtype=np.float64), np.ascontiguousarray(z), np.ascontiguousarray(idx, dtype=np.int64),
        pos, grads, xis, bool(keep_grad), r0, use_r0,
    )
    out = {"x": x, "g": g, "rho": rho, "xi": xi, "centre": centre, "centre_grad": centre_grad, "count": int(count),
           "centre_resid": r0 if use_r0 else None}
    return out, pos, (grads if keep_grad else None), xis


def glm_centre_terms(kind: str, X: Any, y: Any, centre: Any, param: float) -> Any:
    """A control variate's fixed centre, set up from one read of each row of ``X``.

    Returns ``(grad, table)``: ``grad`` (1, d), the full-data likelihood gradient at ``centre`` (the
    twin is the model's ``grad_log_lik_sum`` without indices), and ``table`` (N,), the residuals
    ``r(x_i . centre, 0)`` that :func:`glm_fused_block` takes as ``centre_resid``; or
    ``NotImplemented`` for inputs the loop does not take (another array type, float32, a kind
    other than the GLMs').
    """
    if not _SWITCH[0][0]:
        return NotImplemented
    if not (_f64(X) and _f64(y) and _f64(centre) and X.ndim == 2 and y.ndim == 1 and X.flags.c_contiguous
            and y.shape[0] == X.shape[0] and kind in _KINDS and centre.size == X.shape[1]):
        return NotImplemented
    d = X.shape[1]
    grad = np.empty((1, d))
    table = np.empty(X.shape[0])
    _jit().centre_terms(_KINDS[kind], X, np.ascontiguousarray(y), float(param),
                        np.ascontiguousarray(np.reshape(centre, (d,))), table, grad[0])
    return grad, table


def fused_draws(rng: Any, iterations: int, n_normal: int, n_est: int, fresh: bool, chains: int, dim: int,
                n_data: int, size: int, replace: bool) -> Any:
    """The block's ``z`` and ``idx``, straight from NumPy's generator, for sparse minibatches.

    The same calls in the same order as :meth:`sgmc.samplers._fused.FusedPlan.draw` (the normals of
    ``rng.normal`` and the integers of the NumPy backend's ``subsample``), written into the block's
    arrays without the per-draw wrappers. With replacement the integers are the minibatch; without,
    each row's ``oversample(size, n_data)`` integers are drawn as ``subsample`` draws them and, after
    the block's draws, one compiled pass over all of its rows keeps the first ``size`` distinct values
    of each (rows short of them continue their own draws, as in ``subsample``), so the indices are
    ``subsample``'s. ``NotImplemented`` for dense subsets (``size > n_data / 4``: the estimator's own
    draw runs) and for other generators.
    """
    gen = getattr(rng, "numpy_generator", None)
    if not isinstance(gen, np.random.Generator) or not _SWITCH[0][0]:
        return NotImplemented
    if not replace and (size == n_data or size * 4 > n_data):
        return NotImplemented
    m = size if replace else oversample(size, n_data)
    z = np.empty((iterations, n_normal, chains, dim))
    raw = np.empty((iterations, n_est, chains, m), dtype=np.int64)
    normal, integers = gen.standard_normal, gen.integers
    count = chains * m
    for t in range(iterations):
        j = 0
        if fresh:
            normal(out=z[t, 0])
            j = 1
        for e in range(n_est):
            normal(out=z[t, j + e])
            raw[t, e] = integers(0, n_data, size=count, dtype=np.int64).reshape(chains, m)
    if replace:
        return z, raw
    flat = raw.reshape(-1, m)
    rows = np.empty((flat.shape[0], size), dtype=np.int64)
    ok = np.empty(flat.shape[0], dtype=np.bool_)
    _jit().first_distinct(flat, size, n_data, rows, ok)
    if not ok.all():
        rows[~ok] = complete_rows(flat[~ok], size, n_data)
    return z, rows.reshape(iterations, n_est, chains, size)


def natives(switch: list) -> dict:
    """The native table entry of this module, reading the on/off ``switch`` (a one-item list) at each call.

    The caller (:func:`sgmc.backends._numba.natives`) has checked that Numba is installed and enabled.
    """
    _SWITCH[0] = switch
    return {"glm_fused_block": glm_fused_block, "glm_fused_draws": fused_draws,
            "glm_centre_terms": glm_centre_terms}
