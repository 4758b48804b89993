"""Control-variate centres for the experiments from the library's own mode search.

:func:`library_centre` runs :func:`sgmc.optimize.find_mode` (Adam on minibatches, then the L-BFGS
polish on the full posterior, which works at any dimension) and measures the result with
:func:`sgmc.optimize.mode_gap` (the gradient norm always; the gap in posterior standard deviations
where it can be computed). Where the joint mode of a hierarchical model is degenerate (the prior
precisions of a layer grow while its weights shrink to zero), the search runs on the conditional
posterior of the other coordinates with the precisions held fixed, :class:`Conditional`; the caller
then sets the precisions it held fixed (for example to their conditional mode given the rest).

This module is an input/output edge of the experiments (NumPy arrays only).
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np

from ..optimize import ModeNotFoundWarning, find_mode, lbfgs, mode_gap

__all__ = ["Conditional", "library_centre"]


class Conditional:
    """The posterior of the coordinates ``free`` of ``model`` with the others held at ``values``.

    Exposes what :func:`sgmc.optimize.find_mode`, :func:`sgmc.optimize.lbfgs` and
    :func:`sgmc.optimize.mode_gap` use: ``dim``, ``n_data``, ``xp``, ``dtype``, ``device``,
    ``grad_log_prior``, ``grad_log_lik_sum``, ``log_posterior`` and ``grad_log_posterior`` (each
    the model's, restricted to the free coordinates; up to a constant, the conditional posterior's).
    """

    def __init__(self, model: Any, free: Any, values: Any):
        self.model = model
        self.free = np.asarray(free, dtype=bool)
        if self.free.shape != (model.dim,):
            msg = f"`free` must be a boolean mask of shape ({model.dim},); got shape {self.free.shape}"
            raise ValueError(msg)
        self.values = np.asarray(values, dtype=float).reshape(model.dim)
        self.dim = int(self.free.sum())
        self.n_data = model.n_data
        self.xp, self.dtype = model.xp, model.dtype
        self.device = getattr(model, "device", None)

    def full(self, theta: Any) -> np.ndarray:
        """The model's parameter(s) with ``theta`` (dim,) or (k, dim) in the free coordinates."""
        theta = np.asarray(theta)
        out = np.broadcast_to(self.values, theta.shape[:-1] + (self.model.dim,)).copy()
        out[..., self.free] = theta
        return out

    def _on_free(self, fn: Any, theta: Any, *args: Any) -> np.ndarray:
        theta = np.asarray(theta)
        return np.asarray(fn(self.full(theta), *args))[..., self.free]

    def grad_log_prior(self, theta: Any) -> np.ndarray:
        return self._on_free(self.model.grad_log_prior, theta)

    def grad_log_lik_sum(self, theta: Any, idx: Any = None) -> np.ndarray:
        return self._on_free(self.model.grad_log_lik_sum, theta, idx)

    def grad_log_posterior(self, theta: Any) -> np.ndarray:
        return self._on_free(self.model.grad_log_posterior, theta)

    def log_posterior(self, theta: Any) -> Any:
        return self.model.log_posterior(self.full(np.asarray(theta)))


def library_centre(model: Any, init: Any, rng: Any, *, n_steps: int, step_size: float | None = None,
                   batch_size: Any = None, polish_steps: int = 0) -> tuple[np.ndarray, dict]:
    """``find_mode(model, rng, init, n_steps=..., polish="lbfgs")`` and its check.

    ``polish_steps`` more :func:`sgmc.optimize.lbfgs` steps continue the polish when find_mode's own
    (at most 500) stop short of the tolerance (``lbfgs_steps`` in the report counts them).

    Returns the point and a dict: ``gap``, ``gap_kind``, ``grad_norm`` (from
    :func:`sgmc.optimize.mode_gap` with ``details=True``), ``grad_norm_rel`` (the norm over
    max(1, |log pi|), the polish's stopping measure), ``warned`` (whether find_mode's check warned)
    and the ``cpu`` and ``wall`` seconds of the search and polish.
    """
    c0, w0 = time.process_time(), time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ModeNotFoundWarning)
        theta = find_mode(model, rng, init, n_steps=n_steps, step_size=step_size, batch_size=batch_size,
                          polish="lbfgs", progress=False)
        extra = 0
        if polish_steps > 0:
            theta, extra, _ = lbfgs(model, theta, max_steps=polish_steps)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    theta = np.asarray(theta)
    info = mode_gap(model, theta, details=True)
    logp = abs(float(np.asarray(model.log_posterior(theta)).reshape(-1)[0]))
    return theta, {"gap": info["gap"], "gap_kind": info["kind"], "grad_norm": info["grad_norm"],
                   "grad_norm_rel": info["grad_norm"] / max(1.0, logp),
                   "warned": any(issubclass(w.category, ModeNotFoundWarning) for w in caught),
                   "lbfgs_steps": extra, "cpu": cpu, "wall": wall}
