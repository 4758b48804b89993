"""Sampling in well-conditioned coordinates, with the draws reported on the user's scale.

Columns on their natural scales make the posterior's curvature span many orders of magnitude (an
income in currency units against a 0/1 flag), and a step size that suits one direction is useless
in another. :func:`sample_conditioned` runs :func:`sgmc.sample` on the same posterior in the
coordinates z with theta = L z (:mod:`sgmc.models.coordinates`): by default L comes from the
Laplace approximation at the mode (L^T H L = I, H the negative Hessian there), so z is close to
standard normal and one step size on the unit scale suits every direction. The prior is carried
through exactly, so the target posterior is unchanged; the returned trace holds theta, by the
model's own parameter names. :func:`user_trace` maps any trace of a model in z back.
"""

from __future__ import annotations

from typing import Any

from . import backends
from ._array_api import is_array
from ._validation import check_choice
from .models.base import check_compatible
from .models.coordinates import conditioned, laplace_factor, standardising_factor
from .optimize import laplace
from .run import sample
from .trace import Trace

__all__ = ["condition", "sample_conditioned", "user_trace"]

#: Ways :func:`condition` chooses L.
CONDITIONINGS = ("laplace", "standardise")
#: Optimiser steps of the mode search before Newton's (see :func:`sgmc.optimize.laplace`).
MODE_STEPS = 500


def condition(model: Any, how: Any = "laplace", *, rng: Any = None, batch_size: Any = None,
              progress: Any = False) -> tuple:
    """The posterior of ``model`` in well-conditioned coordinates z (theta = L z), and how L was found.

    Parameters
    ----------
    model : Model
    how : {"laplace", "standardise"} or array (dim, dim)
        ``"laplace"``: L from the negative Hessian H at the mode (:func:`sgmc.optimize.laplace`: Adam
        steps, then Newton steps where the model has Hessians), with L^T H L = I. ``"standardise"``
        (GLMs): L from the columns' mean and standard deviation, no mode search. An array is L itself.
    rng : seed or generator, optional
        For the mode search of ``"laplace"``.
    batch_size : int or float, optional
        Subsample size of the mode search (default: that of :func:`sgmc.optimize.find_mode`).
    progress : bool
        Progress bar of the mode search.

    Returns
    -------
    (model_z, info) : the model in z (:func:`sgmc.models.conditioned`), and a dict of plain values
        saying how L was found (and, for ``"laplace"``, ``mode``: the mode on the user's scale).

    Raises
    ------
    ValueError
        Naming ``how`` when it is none of the choices, or (``"standardise"``) the model has no design.
    """
    xp = model.xp
    if is_array(how):
        check_compatible(model, how, "how")
        return conditioned(model, how), {"how": "given L"}
    check_choice(how, "how", CONDITIONINGS)
    if how == "standardise":
        X = getattr(model, "X", None)
        if X is None or not is_array(X):
            msg = (f"`how`='standardise' needs a model with a design matrix X in memory (a GLM); "
                   f"got {type(model).__name__}; use how='laplace'")
            raise ValueError(msg)
        return conditioned(model, standardising_factor(X)), {"how": "standardise"}
    # the mode search itself runs on standardised columns where the model has them (raw scales slow
    # the optimiser down as much as the sampler), and L composes: theta = S (L' z)
    X = getattr(model, "X", None)
    S = standardising_factor(X) if is_array(X) and tuple(X.shape)[-1:] == (model.dim,) else None
    search = model if S is None else conditioned(model, S)
    fit = laplace(search, rng, batch_size=batch_size, n_steps=MODE_STEPS, progress=progress)
    if not bool(xp.all(xp.isfinite(fit.precision))):
        msg = "the negative Hessian at the mode is not finite; condition with how='standardise' or a given L"
        raise ValueError(msg)
    L = laplace_factor(fit.precision)
    mode = fit.mode
    if S is not None:
        L, mode = S @ L, search.to_theta(fit.mode)
    info = {"how": "laplace", "newton_steps": int(fit.newton_steps),
            "mode": [float(v) for v in backends.to_numpy(mode)]}
    return conditioned(model, L), info


def user_trace(trace: Trace, model_z: Any) -> Trace:
    """``trace`` of a model in z (theta = L z) as a trace of theta, named by the base model's parameters.

    Draws become theta = L z; stored gradients become grad_theta = L^{-T} grad_z; the statistics and
    settings are kept.
    """
    xp = trace.xp
    L = model_z.L
    draws = model_z.to_theta(trace.draws)
    grads = None
    if trace.grads is not None:
        flat = xp.reshape(trace.grads, (-1, trace.dim))
        g = xp.matrix_transpose(xp.linalg.solve(xp.matrix_transpose(L), xp.matrix_transpose(flat)))
        grads = xp.reshape(g, trace.grads.shape)
    names = tuple(getattr(model_z.base, "param_names", ()) or ()) or None
    return Trace(draws=draws, grads=grads, iterations=list(trace.iterations), stats=trace.stats,
                 info=dict(trace.info), param_names=names)


def sample_conditioned(model: Any, sampler: Any = "sgld", estimator: Any = "minibatch", *, how: Any = "laplace",
                       init: Any = None, rng: Any = None, progress: Any = True, **options: Any) -> Trace:
    """:func:`sgmc.sample` in well-conditioned coordinates; the trace is on the user's scale.

    The posterior is sampled in z with theta = L z (:func:`condition`), where ``step_size`` is on
    the unit scale: with ``how="laplace"`` the posterior of z is close to N(z_mode, I), so
    ``step_size`` between about 0.001 and 0.5 suits SGLD whatever the units of the data (smaller
    with noisier gradients). With ``how="standardise"`` the curvature in z is about N times the
    information one datum carries per standardised column (N / noise_var for linear regression, up
    to N / 4 for logistic), so the step is about 0.1 over that. The returned trace holds theta = L z, named by the model's
    ``param_names``; ``trace.info["conditioning"]`` records how L was found.

    Parameters
    ----------
    model, sampler, estimator
        As for :func:`sgmc.sample`.
    how : {"laplace", "standardise"} or array
        See :func:`condition`.
    init : array (dim,) or (chains, dim), optional
        Starting positions on the user's scale (mapped to z).
    rng : seed or generator, optional
        One stream for the mode search, another for :func:`sgmc.sample`.
    progress : bool
    **options
        Everything else :func:`sgmc.sample` takes (``step_size`` is required).

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.conditioning import sample_conditioned
    >>> from sgmc.models import LinearRegression
    >>> rng = np.random.default_rng(0)
    >>> age = rng.uniform(20, 90, 500); income = rng.uniform(1e4, 2e5, 500)
    >>> X = np.column_stack([np.ones(500), age, income])
    >>> y = 1.0 + 0.05 * age + 2e-5 * income + rng.normal(size=500)
    >>> trace = sample_conditioned(LinearRegression(X, y), "sgld", "cv", step_size=0.2, batch_size=50,
    ...                            n_iter=3000, chains=4, rng=1, progress=False)
    >>> trace.param_names
    ('beta[0]', 'beta[1]', 'beta[2]')
    >>> bool(np.allclose(trace.mean(), LinearRegression(X, y).posterior()[0], rtol=0.05))
    True
    """
    gen = backends.default_rng(rng, backend=backends.get_backend(model.xp), device=model.device)
    cond_rng, run_rng = gen.spawn(2)
    model_z, info = condition(model, how, rng=cond_rng, progress=progress)
    if init is not None and is_array(init):
        init = model_z.from_theta(init)
    trace = sample(model_z, sampler, estimator, init=init, rng=run_rng, progress=progress, **options)
    out = user_trace(trace, model_z)
    out.info["conditioning"] = info
    return out
