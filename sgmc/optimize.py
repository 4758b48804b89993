"""Posterior modes, curvature and Laplace approximations.

Control-variate estimators centre their estimates at a point near the posterior mode (Baker et al.
2019; the review's section 2.3), step-size grids and pSGLD-style scalings need a bound on the
curvature of -log pi, and exact reference runs whiten the posterior with the Hessian at the mode.
:func:`find_mode` runs Adam or SGD on the subsampled log posterior with Polyak-Ruppert averaging (the
cheap, O(n) per step search that SGLD-CV's set-up cost counts), :func:`newton` polishes a point with
damped Newton steps on the full posterior, :func:`negative_hessian` gives the precision at a point,
:func:`laplace` chains the three, and :func:`curvature_bound` bounds the largest eigenvalue of the
negative Hessian from per-datum Lipschitz constants.

A mode search says when it failed. :func:`mode_gap` measures how far a point is from a stationary
point of log pi in posterior standard deviations: the Newton decrement sqrt(g^T P^-1 g), with g the
full gradient and P the negative Hessian (or, without Hessians, the lower bound ||g|| / sqrt(M) from
the curvature bound M). :func:`find_mode` polishes its stochastic estimate with Newton steps where the
model has exact Hessians, and issues a :class:`ModeNotFoundWarning` when the point it returns is
more than ``gap_tol`` standard deviations from the mode.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any, NamedTuple

from . import backends
from ._array_api import Array, is_array
from ._progress import progress_bar, wants_progress
from ._sampling import subsample
from ._lbfgs import lbfgs_steps
from ._model_args import model_points
from ._validation import check_batch_size, check_choice, check_int, check_model, check_nonnegative, check_positive, describe
from .models.base import ModelFacts, check_compatible, model_facts, provides

__all__ = [
    "find_mode", "newton", "negative_hessian", "laplace", "curvature_bound", "mode_gap", "Laplace",
    "ModeNotFoundWarning", "POLISH_MAX_DIM", "GAP_FD_MAX_DIM", "warn_if_not_mode", "mode_gap_cost", "lbfgs",
]

#: Largest dimension for which :func:`find_mode` polishes with Newton steps by default (each step
#: builds and solves a dim x dim system).
POLISH_MAX_DIM = 500


class ModeNotFoundWarning(RuntimeWarning):
    """The mode search stopped away from a stationary point of the log posterior.

    Chains started there drift before they sample the posterior: run a longer search
    (``opt_steps=``), a larger learning rate (``opt_step_size=``), give the centre yourself, or
    discard a burn-in.
    """


def _start(model: Any, init: Any, name: str = "init") -> Array:
    xp = model.xp
    if not is_array(init):
        if init is None or isinstance(init, (str, bytes, dict)):
            msg = f"`{name}` must be an array of shape ({model.dim},) or (1, {model.dim}); got {describe(init)}"
            raise TypeError(msg)
        try:
            init = backends.asarray(init, backend=backends.get_backend(xp), dtype=model.dtype, device=model.device)
        except (TypeError, ValueError) as exc:
            msg = f"`{name}` must be an array of numbers of shape ({model.dim},) or (1, {model.dim}); got {describe(init)} ({exc})"
            raise TypeError(msg) from None
    check_compatible(model, init, name)
    if tuple(init.shape) not in ((model.dim,), (1, model.dim)):
        msg = f"`{name}` must have shape ({model.dim},) or (1, {model.dim}); got {tuple(init.shape)}"
        raise ValueError(msg)
    if not xp.isdtype(init.dtype, ("real floating", "integral")):
        msg = f"`{name}` must hold real numbers; got dtype {init.dtype}"
        raise TypeError(msg)
    theta = xp.reshape(init, (1, model.dim))
    theta = xp.astype(theta, model.dtype) if theta.dtype != model.dtype else theta
    if not bool(xp.all(xp.isfinite(theta))):
        msg = f"`{name}` must be finite; got {describe(init)}"
        raise ValueError(msg)
    return theta


def _tol(value: Any, name: str) -> float:
    """A positive tolerance (``inf`` allowed: never warn)."""
    if isinstance(value, float) and value == math.inf:
        return value
    return check_positive(value, name)


def curvature_bound(model: Any) -> float:
    """An upper bound M on the largest eigenvalue of the negative Hessian of log pi.

    ``model.lipschitz_constant()`` when the model knows it exactly (Gaussian targets); otherwise the
    sum of the per-datum Lipschitz constants ``model.lipschitz()`` plus ``model.prior_lipschitz()``
    (which overestimates the largest eigenvalue by up to a factor of the dimension).

    Raises
    ------
    TypeError
        When the model offers neither.
    """
    check_model(model)
    if provides(model, "lipschitz_constant"):
        return float(model.lipschitz_constant())
    check_model(model, methods=("lipschitz",), purpose="a curvature bound")
    total = float(model.xp.sum(model.lipschitz()))
    if provides(model, "prior_lipschitz"):
        total += float(model.prior_lipschitz())
    return max(total, 1e-12)


def find_mode(
    model: Any,
    rng: Any,
    init: Any,
    *,
    method: str = "adam",
    n_steps: int = 2000,
    step_size: float | None = None,
    batch_size: Any = None,
    polish: bool | None = None,
    check: bool = True,
    gap_tol: float = 1.0,
    progress: Any = True,
) -> Array:
    """Approximate the posterior mode by stochastic optimisation of the subsampled log posterior.

    Parameters
    ----------
    model : Model
        An :class:`~sgmc.models.IIDData` posterior (or a data-free target, optimised exactly).
    rng : None, int, SeedSequence or Generator
    init : array (dim,) or (1, dim)
        Starting point.
    method : {"adam", "sgd"}
        Adam (scale-free; the default) or plain SGD as in the sgmcmc R package.
    n_steps : int
    step_size : float, optional
        Initial learning rate; defaults 0.05 for Adam and ``1 / M`` for SGD, where M is
        :func:`curvature_bound`. The rate decays as ``lr / sqrt(1 + k / 100)``, and the returned
        point averages the iterates of the second half (Polyak-Ruppert averaging), which removes most
        of the minibatch noise.
    batch_size : int or float, optional
        Minibatch size (default: ``min(N, max(100, N // 100))``).
    polish : bool, "newton" or "lbfgs", optional
        Finish with damped :func:`newton` steps on the full posterior (True or "newton"), or with
        :func:`lbfgs` steps ("lbfgs": one full gradient a step, no Hessian, for any dim). Default:
        Newton when the model has exact per-datum Hessians (``hess_log_lik``) and
        ``dim <= POLISH_MAX_DIM``, otherwise none.
    check : bool, default True
        Measure the result with :func:`mode_gap` (one full-data gradient) and warn when it is more
        than ``gap_tol`` posterior standard deviations from a stationary point.
    gap_tol : float, default 1.0
    progress : bool or "always"
        Progress bar over the optimiser's steps (on a terminal; see :func:`sgmc.sample`).

    Returns
    -------
    array (dim,)

    Raises
    ------
    FloatingPointError
        When the iterates stop being finite.

    Warns
    -----
    ModeNotFoundWarning
        When ``check`` finds the result away from the mode (the message gives the distance).

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.datasets import linear_regression_data
    >>> from sgmc.models import LinearRegression
    >>> from sgmc.optimize import find_mode
    >>> data = linear_regression_data(n=2000, dim=2, n_test=1, rng=0)
    >>> model = LinearRegression(data.X, data.y)
    >>> bool(np.allclose(find_mode(model, 0, np.zeros(2), n_steps=1000), model.posterior()[0], atol=0.02))
    True
    """
    check_choice(method, "method", ("adam", "sgd"))
    if not isinstance(progress, (bool, str)):
        msg = f"`progress` must be True, False, 'auto' or 'always'; got {describe(progress)}"
        raise ValueError(msg)
    wants_progress(progress)
    if not isinstance(polish, (bool, str, type(None))) or polish not in (None, True, False, "newton", "lbfgs"):
        msg = f"`polish` must be None, True, False, 'newton' or 'lbfgs'; got {polish!r}"
        raise ValueError(msg)
    n_steps = check_int(n_steps, "n_steps")
    gap_tol = _tol(gap_tol, "gap_tol")
    xp = check_model(model).xp
    theta = _start(model, init)
    rng = backends.default_rng(rng, backend=backends.get_backend(xp), device=model.device)
    if int(getattr(model, "n_data", 0) or 0) > 0:
        check_model(model, methods=("grad_log_prior", "grad_log_lik_sum"), purpose="find_mode")
    else:
        check_model(model, methods=("grad_log_posterior",), purpose="find_mode on a data-free target")
    return _find_mode(model, model_facts(model, names=False), rng, theta, method=method, n_steps=n_steps,
                      step_size=step_size, batch_size=batch_size, polish=polish, check=check, gap_tol=gap_tol,
                      progress=progress, stacklevel=4)


def _find_mode(model: Any, facts: ModelFacts, rng: Any, theta: Array, *, method: str, n_steps: int,
               step_size: Any, batch_size: Any, polish: Any, check: bool, gap_tol: float = 1.0, progress: Any = True,
               stacklevel: int = 3) -> Array:
    """:func:`find_mode` for a checked model (``facts``), a backend generator and a ``(1, dim)`` start."""
    xp = model.xp
    n_data = int(facts.n_data or 0)
    if n_data > 0:
        n = check_batch_size(batch_size, n_data) if batch_size is not None else min(n_data, max(100, n_data // 100))
        scale = n_data / n
    lr0 = check_positive(
        step_size if step_size is not None else (0.05 if method == "adam" else 1.0 / curvature_bound(model)),
        "step_size",
    )
    m = xp.zeros_like(theta)
    v = xp.zeros_like(theta)
    b1, b2, eps = 0.9, 0.999, 1e-8
    avg = xp.zeros_like(theta)
    half = n_steps // 2
    bar = progress_bar(progress, n_steps, "mode search") if n_steps >= 1000 else None
    for k in range(n_steps):
        if n_data > 0:
            idx = subsample(rng, n_data, n, 1)
            g = model.grad_log_prior(theta) + scale * model.grad_log_lik_sum(theta, idx)
        else:
            g = model.grad_log_posterior(theta)
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
        if bar is not None and (k + 1) % 100 == 0:
            bar.update(100)
    if bar is not None:
        bar.close()
    out = avg / (n_steps - half)
    if not bool(xp.all(xp.isfinite(out))):
        msg = f"the mode finder ({method}) diverged; lower its `step_size` (was {lr0})"
        raise FloatingPointError(msg)
    out = out[0, ...]
    if polish is None:
        polish = _polishable(facts, model.dim)
    if polish:
        polished = lbfgs(model, out)[0] if polish == "lbfgs" else _newton(model, facts, out)[0]
        if bool(xp.all(xp.isfinite(polished))):
            out = polished
    if check:
        how = {"lbfgs": " and L-BFGS"}.get(polish, " and Newton") if polish else ""
        _warn_if_not_mode(model, facts, out, gap_tol, f"{method}, {n_steps} steps" + how, stacklevel=stacklevel)
    return out


def _can_polish(model: Any) -> bool:
    return int(model.n_data) > 0 and _polishes(model.n_data, model.dim, functools.partial(provides, model))


def _polishable(facts: ModelFacts, dim: int) -> bool:
    """:func:`_can_polish` for a checked model of dimension ``dim``."""
    return _polishes(facts.n_data, dim, facts.provides)


def _polishes(n_data: Any, dim: int, has: Any) -> bool:
    """Whether Newton steps polish a mode search by default: data, ``dim <= POLISH_MAX_DIM``, exact Hessians."""
    return (
        int(n_data) > 0
        and dim <= POLISH_MAX_DIM
        and all(has(n) for n in ("hess_log_lik", "log_posterior", "grad_log_posterior", "grad_log_prior"))
    )


def mode_gap(model: Any, theta: Any, grad: Any = None, *, details: bool = False) -> Any:
    """The Newton decrement of log pi at ``theta``: how far a Newton step from ``theta`` would move it.

    ``sqrt(g^T P^-1 g)``, with g the full gradient of log pi at ``theta`` and P the negative Hessian
    *at theta* (:func:`negative_hessian`; exact with ``hess_log_lik``, by finite differences for
    ``dim <= GAP_FD_MAX_DIM`` otherwise). For a Gaussian posterior it equals the Mahalanobis distance
    from ``theta`` to the mode in posterior standard deviations; elsewhere it measures the distance
    with the curvature at ``theta``, not at the mode, and can differ from that distance several-fold
    far from the mode (``sgmc.experiments._logistic.mode_distance`` measures with the mode's
    curvature). It is a test of stationarity: 0 exactly at a mode. Where P is not positive definite or is too
    large to form, the lower bound ``||g|| / sqrt(M)`` with M from :func:`curvature_bound`; NaN when
    neither can be computed.

    Parameters
    ----------
    model : Model
    theta : array (dim,)
    grad : array (dim,) or (1, dim), optional
        The full gradient of log pi at ``theta`` when already known.
    details : bool, default False
        Return a dict instead of the number: ``gap``, ``kind`` (``"newton"`` for the decrement,
        ``"bound"`` for ``||g|| / sqrt(M)``, ``"none"`` when neither could be computed) and
        ``grad_norm`` (``||g||``, reported whatever the kind, so that a mode search above
        :data:`POLISH_MAX_DIM` without a curvature bound still says how stationary its point is).

    Examples
    --------
    >>> from sgmc.datasets import linear_regression_data
    >>> from sgmc.models import LinearRegression
    >>> from sgmc.optimize import mode_gap
    >>> data = linear_regression_data(n=500, dim=2, n_test=1, rng=0)
    >>> model = LinearRegression(data.X, data.y)
    >>> mode = model.posterior()[0]
    >>> mode_gap(model, mode) < 1e-6, mode_gap(model, mode + 1.0) > 10
    (True, True)
    """
    check_model(model)
    t = _start(model, theta, "theta")[0, ...]
    if grad is not None:
        grad = model_points(model, grad, "grad", batched=False)
    return _mode_gap(model, model_facts(model, names=False), t, grad, details)


def _mode_gap(model: Any, facts: ModelFacts, t: Array, grad: Any, details: bool = False) -> Any:
    """:func:`mode_gap` for a checked model at a checked ``(dim,)`` point (``grad`` checked, or None)."""
    xp = model.xp

    def out(gap: float, kind: str, norm: float) -> Any:
        return {"gap": gap, "kind": kind, "grad_norm": norm} if details else gap

    if grad is None:
        if not facts.provides("grad_log_posterior"):
            return out(float("nan"), "none", float("nan"))
        grad = model.grad_log_posterior(t)
    g = xp.reshape(grad, (-1,))
    norm = float(xp.linalg.vector_norm(g))
    if _gap_uses_hessian(facts, model.dim):
        P = _negative_hessian(model, facts, xp.reshape(t, (1, -1)))
        try:
            L = xp.linalg.cholesky(P)
        except Exception:  # noqa: BLE001 - not positive definite: fall back to the bound
            L = None
        if L is not None and bool(xp.all(xp.isfinite(L))):
            z = xp.linalg.solve(L, g[:, None])[:, 0]
            return out(float(xp.linalg.vector_norm(z)), "newton", norm)
    try:
        M = curvature_bound(model)
    except TypeError:
        return out(float("nan"), "none", norm)
    return out(norm / math.sqrt(M), "bound", norm)


#: Largest dimension for which :func:`mode_gap` forms the negative Hessian by finite differences of
#: the full gradient (2 * dim passes through the data) when the model has no exact Hessians.
GAP_FD_MAX_DIM = 20


def _gap_uses_hessian(facts: ModelFacts, dim: int) -> bool:
    if facts.provides("hess_log_lik"):
        return dim <= POLISH_MAX_DIM
    return dim <= GAP_FD_MAX_DIM and facts.provides("grad_log_posterior")


def mode_gap_cost(model: Any) -> float:
    """Passes through the data that :func:`mode_gap` makes (for set-up costs)."""
    check_model(model)
    return _gap_cost(model_facts(model, names=False), model.dim)


def _gap_cost(facts: ModelFacts, dim: int) -> float:
    """:func:`mode_gap_cost` for a checked model of dimension ``dim``."""
    if not facts.provides("grad_log_posterior"):
        return 0.0
    if _gap_uses_hessian(facts, dim):
        return 2.0 if facts.provides("hess_log_lik") else 1.0 + 2.0 * dim
    return 1.0


def warn_if_not_mode(model: Any, theta: Any, gap_tol: float = 1.0, how: str = "", grad: Any = None) -> float:
    """Issue a :class:`ModeNotFoundWarning` when :func:`mode_gap` exceeds ``gap_tol``; return the gap."""
    gap_tol = _tol(gap_tol, "gap_tol")
    check_model(model)
    t = _start(model, theta, "theta")[0, ...]
    if grad is not None:
        grad = model_points(model, grad, "grad", batched=False)
    return _warn_if_not_mode(model, model_facts(model, names=False), t, gap_tol, how, grad, stacklevel=4)


def _warn_if_not_mode(model: Any, facts: ModelFacts, t: Array, gap_tol: float, how: str = "", grad: Any = None,
                      *, stacklevel: int = 3) -> float:
    """:func:`warn_if_not_mode` for a checked model and point; the warning points ``stacklevel`` frames up."""
    gap = _mode_gap(model, facts, t, grad)
    if gap > gap_tol:
        msg = (
            f"the mode search{f' ({how})' if how else ''} stopped about {gap:.3g} posterior standard "
            f"deviations from a stationary point of the log posterior (the full gradient there is large "
            "for the curvature); chains started there drift before they sample the posterior: run more "
            "optimiser steps (opt_steps=), a larger opt_step_size=, pass a centre, or discard a burn-in"
        )
        warnings.warn(msg, ModeNotFoundWarning, stacklevel=stacklevel)
    return gap


def negative_hessian(model: Any, theta: Any, *, chunk_elements: int = 4_000_000) -> Array:
    """The precision -Hessian of log pi at ``theta`` (dim,), symmetrised: shape (dim, dim).

    The model's summed likelihood Hessian (``hess_log_lik_sum``, the GLMs' one product with the data)
    or its exact per-datum Hessians (``hess_log_lik``, summed in chunks of at most
    ``chunk_elements`` numbers) plus the prior's by central differences of its gradient; models
    without Hessians get central differences of the full gradient.
    """
    check_model(model)
    chunk_elements = check_int(chunk_elements, "chunk_elements")
    t = _start(model, theta, "theta")
    return _negative_hessian(model, model_facts(model, names=False), t, chunk_elements)


def _negative_hessian(model: Any, facts: ModelFacts, t: Array, chunk_elements: int = 4_000_000) -> Array:
    """:func:`negative_hessian` for a checked model at a checked ``(1, dim)`` point."""
    xp, d = model.xp, model.dim
    eye = xp.eye(d, dtype=model.dtype, device=model.device)
    summed, per_datum = facts.provides("hess_log_lik_sum"), facts.provides("hess_log_lik")
    if summed:  # the sum without the per-datum matrices (the GLMs)
        H = model.hess_log_lik_sum(t)[0, ...]
    elif per_datum:
        rows = getattr(model, "stream_rows", None)  # data read from disk: a chunk no larger than a block
        if rows:
            chunk_elements = min(chunk_elements, rows * d)
        chunk = max(1, min(model.n_data, chunk_elements // max(d * d, 1)))
        H = xp.zeros((d, d), dtype=model.dtype, device=model.device)
        for start in range(0, model.n_data, chunk):
            stop = min(start + chunk, model.n_data)
            idx = xp.reshape(xp.arange(start, stop, dtype=xp.int64, device=model.device), (1, -1))
            H = H + xp.sum(model.hess_log_lik(t, idx)[0, ...], axis=0)
    if summed or per_datum:
        eps = 1e-3
        gp = model.grad_log_prior(xp.concat([t + eps * eye, t - eps * eye], axis=0))
        H = H + (gp[:d, :] - gp[d:, :]).T / (2 * eps)
    else:
        if not facts.provides("grad_log_posterior"):
            check_model(model, methods=("grad_log_posterior",), purpose="negative_hessian")  # says what is missing
        eps = 1e-5
        g = model.grad_log_posterior(xp.concat([t + eps * eye, t - eps * eye], axis=0))
        H = (g[:d, :] - g[d:, :]).T / (2 * eps)
    P = -H
    return 0.5 * (P + P.T)


def newton(model: Any, theta: Any, *, max_steps: int = 25, tol: float = 1e-10,
           passes: list | None = None) -> tuple[Array, int]:
    """Damped Newton steps on the full log posterior from ``theta`` (dim,).

    Each step solves ``P step = grad log pi`` with P = :func:`negative_hessian` and halves the step
    until the log posterior does not decrease. Stops when a step is shorter than
    ``tol * (1 + |theta|)``.

    ``passes``, a list, receives the number of full-data evaluations made (log densities of the
    line search, gradients and Hessians), for set-up costs.

    Returns
    -------
    theta : array (dim,)
    steps : int
        Newton steps taken.
    """
    check_model(model, methods=("log_posterior", "grad_log_posterior"), purpose="newton")
    tol = check_nonnegative(tol, "tol")
    max_steps = check_int(max_steps, "max_steps")
    theta = _start(model, theta, "theta")[0, ...]
    return _newton(model, model_facts(model, names=False), theta, max_steps=max_steps, tol=tol, passes=passes)


def _newton(model: Any, facts: ModelFacts, theta: Array, *, max_steps: int = 25, tol: float = 1e-10,
            passes: list | None = None) -> tuple[Array, int]:
    """:func:`newton` from a checked ``(dim,)`` point of a checked model with the methods it calls."""
    count = 1  # the log density at the start
    xp = model.xp
    logp = float(model.log_posterior(theta))
    steps = 0
    for _ in range(max_steps):
        P = _negative_hessian(model, facts, xp.reshape(theta, (1, -1)))
        g = model.grad_log_posterior(theta)
        count += 2
        step = xp.linalg.solve(P, g[:, None])[:, 0]
        t = 1.0
        while t > 1e-6:
            cand = theta + t * step
            lc = float(model.log_posterior(cand))
            count += 1
            if math.isfinite(lc) and lc >= logp - 1e-9 * abs(logp):
                break
            t *= 0.5
        theta, logp = cand, lc
        steps += 1
        size = float(xp.linalg.vector_norm(t * step))
        if size <= tol * (1.0 + float(xp.linalg.vector_norm(theta))):
            break
    if passes is not None:
        passes.append(count)
    return theta, steps


def lbfgs(model: Any, theta: Any, *, max_steps: int = 500, memory: int = 10, gtol: float = 1e-6,
          passes: list | None = None) -> tuple[Array, int, float]:
    """Limited-memory BFGS steps on the full log posterior from ``theta`` (dim,): the polish for
    models without exact Hessians or above :data:`POLISH_MAX_DIM`, where :func:`newton`'s dim x dim
    systems are too dear. Each step costs one full gradient and the log densities of its
    backtracking line search, and O(memory * dim) memory.

    The search direction is the two-loop recursion over the last ``memory`` pairs of steps and
    gradient changes (a pair whose curvature s^T y is not positive is skipped, so the direction stays
    an ascent direction on non-concave targets); the step is halved until the log posterior rises by
    at least 1e-4 of the directional derivative (Armijo). Stops when the gradient's norm is at most
    ``gtol * max(1, |log pi|)`` (relative to the scale of the log density), when no step raises
    log pi, or after ``max_steps``; the norm at the returned point is returned, so that the caller
    sees how far from stationary it is.

    ``passes``, a list, receives the number of full-data evaluations made.

    Returns
    -------
    theta : array (dim,)
    steps : int
        Steps taken.
    grad_norm : float
        The Euclidean norm of the full gradient of log pi at the returned point.
    """
    check_model(model, methods=("log_posterior", "grad_log_posterior"), purpose="lbfgs")
    max_steps = check_int(max_steps, "max_steps")
    memory = check_int(memory, "memory")
    gtol = check_positive(gtol, "gtol")
    x = _start(model, theta, "theta")[0, ...]
    return lbfgs_steps(model, x, max_steps, memory, gtol, passes)


class Laplace(NamedTuple):
    """A Laplace approximation N(mode, precision^-1)."""

    mode: Array
    precision: Array
    newton_steps: int


def laplace(model: Any, rng: Any, *, init: Any = None, batch_size: Any = None, n_steps: int = 2000,
            progress: Any = True) -> Laplace:
    """Mode by :func:`find_mode` (Adam) polished by :func:`newton`, and the precision there.

    ``progress`` shows a bar over the optimiser's steps (on a terminal; see :func:`sgmc.sample`).

    Examples
    --------
    >>> from sgmc.datasets import linear_regression_data
    >>> from sgmc.models import LinearRegression
    >>> from sgmc.optimize import laplace
    >>> data = linear_regression_data(n=500, dim=2, n_test=1, rng=1)
    >>> fit = laplace(LinearRegression(data.X, data.y), 0)
    >>> mean, cov = LinearRegression(data.X, data.y).posterior()
    >>> bool(abs(fit.mode - mean).max() < 1e-6), fit.precision.shape
    (True, (2, 2))
    """
    xp = check_model(model).xp
    start = xp.zeros((model.dim,), dtype=model.dtype, device=model.device) if init is None else init
    theta = find_mode(model, rng, start, n_steps=n_steps, batch_size=batch_size, polish=False, check=False,
                      progress=progress)
    theta, steps = newton(model, theta)
    return Laplace(theta, negative_hessian(model, theta), steps)
