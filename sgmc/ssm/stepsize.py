"""The step unit of a state space model: the SGLD step size its posterior curvature allows.

SGLD with exact gradients is stable for ``h < 2 / lambda_max``, with ``lambda_max`` the largest
eigenvalue of the negative Hessian of the log posterior (review paper, section 2.5). For a series of
length ``T`` that curvature is about ``T I_1``, with ``I_1`` the Fisher information per time step, so
the unit ``1 / lambda_max`` shrinks like ``1 / T``: a step that suits ``T = 10^3`` diverges at
``T = 10^5``. :func:`step_unit` estimates it at a position: from the exact Hessian (central
differences of the exact gradient) where the likelihood is tractable, else from the covariance of
buffered subsequence scores (the empirical Fisher information; particle noise makes it larger, so
the unit smaller). :func:`sgmc.tune_step_size`'s default grid for SGLD-type samplers on a state
space model is anchored there.
"""

from __future__ import annotations

from typing import Any

from .._array_api import Array
from ..models.base import provides
from .subsequence import sample_windows

__all__ = ["step_unit"]


def step_unit(model: Any, position: Any = None, rng: Any = None, *, n_windows: int = 64) -> float:
    """``1 / lambda_max`` of the log posterior's curvature at ``position`` (an estimate).

    Parameters
    ----------
    model : StateSpaceModel
    position : array (dim,), optional
        Where to measure (near the posterior is best; default a standard normal draw, like
        :func:`sgmc.sample`'s default start).
    rng : seed or sgmc Generator, optional
    n_windows : int
        Subsequences for the empirical Fisher information (models without an exact likelihood).

    Returns
    -------
    float

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc import backends
    >>> from sgmc.ssm import LGSSM
    >>> from sgmc.ssm.stepsize import step_unit
    >>> _, y = LGSSM.simulate_scalar(backends.default_rng(0), 1000, [0.9, 2.0, 2.0])
    >>> h = step_unit(LGSSM(y), np.array([0.9, 2.0, 2.0]))
    >>> 1e-6 < h < 1e-3
    True
    """
    from ..backends import default_rng, get_backend

    xp = model.xp
    rng = default_rng(rng, backend=xp) if not hasattr(rng, "normal") else rng
    if position is None:
        position = rng.normal((model.dim,), dtype=model.dtype)
    theta = xp.reshape(xp.asarray(position, dtype=model.dtype, device=model.device), (1, model.dim))
    with get_backend(xp).quiet_float():  # a bad position shows as a non-finite curvature, reported below
        lam = _largest_abs_eigenvalue(xp, _curvature(model, theta, rng, n_windows))
    if not (lam > 0.0 and lam < float("inf")):
        msg = (
            f"the curvature of {type(model).__name__}'s posterior at `position` is not finite and positive "
            f"(largest eigenvalue {lam}); give a position near the posterior"
        )
        raise ValueError(msg)
    return 1.0 / lam


def _curvature(model: Any, theta: Array, rng: Any, n_windows: int) -> Array:
    """Negative Hessian of the log posterior (exact) or the empirical Fisher information, (dim, dim)."""
    xp = model.xp
    d = model.dim
    if provides(model, "log_lik") and provides(model, "grad_log_lik"):
        eps = 1e-5 * (1.0 + xp.abs(theta[0]))
        E = xp.eye(d, dtype=model.dtype, device=model.device) * eps[None, :]
        g = model.grad_log_posterior(xp.concat([theta + E, theta - E], axis=0))
        H = (g[:d] - g[d:]) / (2.0 * eps[:, None])
        curv = 0.5 * (H + xp.matrix_transpose(H))
    else:
        T = model.T
        S = max(1, min(T // 4, 10))
        win = sample_windows(rng, T, S, min(S, max(0, (T - S) // 2)), n_windows, 1, xp=xp, dtype=model.dtype)
        th = xp.broadcast_to(theta, (n_windows, d))
        score, _ = model.window_score(rng, th, win, method=model.score_methods[0])
        c = score - xp.mean(score, axis=0, keepdims=True)
        C = xp.matrix_transpose(c) @ c / (n_windows - 1)
        # a window's score is about (T - S + 1) / S times the sum of S per-step scores
        curv = C * (T * S / float(T - S + 1) ** 2)
    return curv


def _largest_abs_eigenvalue(xp: Any, M: Array) -> float:
    if not bool(xp.all(xp.isfinite(M))):
        return float("nan")
    return float(xp.max(xp.abs(xp.linalg.eigvalsh(M))))
