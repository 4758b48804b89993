"""The stationary sd inflation of SGLD and SGHMC on the local Gaussian approximation of a posterior.

On a Gaussian target with precision H, fed gradient estimates whose error has covariance V, one
iteration of SGLD or SGHMC is linear: z' = G z + w with w ~ N(0, Q), and its stationary covariance S
solves the discrete Lyapunov equation S = G S G^T + Q. For SGLD (theta' = theta + (h/2) g + N(0, h I),
the review's convention) G = I - (h/2) H and Q = h I + (h^2/4) V, which gives, per eigen-direction of
H with eigenvalue lambda and V = v I, the variance (1 + h v / 4) / (lambda (1 - h lambda / 4)): with
exact gradients the review's 1 / (lambda (1 - h lambda / 4)) (Nemeth and Fearnhead 2021, section 2.5),
and the minibatch noise term h v / 4 on top. For SGHMC the state is (theta, momentum) and G, Q are the
product of its kicks and drifts (:mod:`sgmc.samplers.hamiltonian`). The ratio of the marginal sds of S
to those of H^-1 is the sd inflation that ``step_size="auto"`` bounds (:mod:`sgmc.adapt`), with H the
negative Hessian of log pi at the chains and V measured from the run's own estimator.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from . import backends
from ._array_api import array_namespace
from .models.base import provides
from .optimize import negative_hessian
from .samplers import SGHMC
from .samplers.langevin import SGLD, ULA

__all__ = ["StepSizeBiasWarning", "supports", "local_gaussian", "inflation", "bound_step"]


class StepSizeBiasWarning(UserWarning):
    """``step_size="auto"`` could not keep the estimated posterior sd inflation of its step within
    bounds in the run's length; the message names the estimate."""

# models without Hessians get them by central differences of the full gradient (2 d passes): only
# for small d; the analytic Hessians (one pass for the GLMs) up to a dimension where d^3 stays cheap
_FD_MAX_DIM = 50
_MAX_DIM = 1000


def supports(sampler: Any) -> bool:
    """True for the samplers whose iteration map is written out here (SGLD, ULA, SGHMC)."""
    return type(sampler) in (SGLD, ULA, SGHMC)


def local_gaussian(model: Any, estimator: Any, position: Any, rng: Any, draws: int = 16) -> tuple | None:
    """``(H, V, passes)`` at the chains' ``position`` (chains, dim), or None where H is out of reach.

    H is the negative Hessian of log pi at the chains' mean; V the mean of (g_est - g)(g_est - g)^T
    over ``draws`` fresh gradient estimates per chain (a fresh estimator state at each chain's
    position), with g the exact gradient there. ``passes`` counts the data passes per chain: the
    estimates, the exact gradients and the Hessian.
    """
    d = int(model.dim)
    analytic = provides(model, "hess_log_lik_sum") or provides(model, "hess_log_lik")
    if d > _MAX_DIM or (not analytic and d > _FD_MAX_DIM):
        return None
    xp = model.xp
    n_data = max(int(model.n_data), 1)
    chains = int(position.shape[0])
    pos = xp.asarray(position, copy=True)
    centre = xp.mean(pos, axis=0)
    with backends.get_backend(xp).quiet_float():
        H = negative_hessian(model, centre)
        exact = model.grad_log_posterior(pos)
        est_state = estimator.init(rng, pos)
        V = xp.zeros((d, d), dtype=model.dtype, device=model.device)
        evals = 0.0
        for _ in range(draws):
            g, _, info = estimator.estimate(rng, est_state, pos)
            e = g - exact
            V = V + e.T @ e
            n = info.n_evals
            evals += float(xp.sum(n)) if hasattr(n, "shape") else float(n) * chains
    V = V / (draws * chains)
    passes = evals / chains / n_data + 1.0 + (1.0 if analytic else 2.0 * d)
    return H, 0.5 * (V + V.T), passes


def _diag(xp: Any, A: Any) -> Any:
    return xp.sum(A * xp.eye(int(A.shape[0]), dtype=A.dtype, device=getattr(A, "device", None)), axis=1)


def _block(xp: Any, a: Any, b: Any, c: Any, e: Any) -> Any:
    return xp.concat([xp.concat([a, b], axis=1), xp.concat([c, e], axis=1)], axis=0)


def iteration_map(sampler: Any, H: Any, V: Any, h: float) -> tuple:
    """``(G, Q)``: one iteration of ``sampler`` at step ``h`` on N(0, H^-1) with gradient noise V.

    The position is the first ``dim`` coordinates of the state (SGHMC: then the momentum).
    """
    xp = array_namespace(H)
    d = int(H.shape[0])
    eye = xp.eye(d, dtype=H.dtype, device=getattr(H, "device", None))
    if type(sampler) in (SGLD, ULA):
        return eye - (0.5 * h) * H, h * eye + (0.25 * h * h) * V
    zero = 0.0 * eye
    C = float(sampler.friction)
    v_hat = sampler.noise_estimate
    if v_hat is None:
        inject = (h * C) * eye
    elif isinstance(v_hat, str):      # "minibatch": the estimator's own noise, taken to be V
        inject = h * (C * eye - (0.25 * h) * V)
    else:
        inject = h * (C * eye - (0.25 * h) * (v_hat * eye if isinstance(v_hat, float) else xp.diag(v_hat)))

    def kick(M: Any, P: Any, s: float, extra: Any) -> tuple:
        K = _block(xp, eye, zero, -(0.5 * s) * H, (1.0 - 0.5 * s * C) * eye)
        return K @ M, K @ P @ K.T + _block(xp, zero, zero, zero, (0.25 * s * s) * V + extra)

    D = _block(xp, eye, (0.5 * h) * eye, zero, eye)
    if sampler.resample_momentum:
        M, P = _block(xp, eye, zero, zero, zero), _block(xp, zero, zero, zero, eye)
        M, P = kick(M, P, 0.5 * h, 0.5 * inject)
        M, P = D @ M, D @ P @ D.T
        rest = sampler.n_leapfrog - 1
    else:
        M, P = _block(xp, eye, zero, zero, eye), 0.0 * _block(xp, eye, zero, zero, eye)
        rest = sampler.n_leapfrog
    for _ in range(rest):
        M, P = kick(M, P, h, inject)
        M, P = D @ M, D @ P @ D.T
    return M, P


def stationary(G: Any, Q: Any, max_doublings: int = 64) -> tuple | None:
    """``(S, rho)``: the solution of S = G S G^T + Q by doubling, and the contraction rate rho per
    iteration (``||G^(2^k)||^(1/2^k)`` once that norm is below 0.01); None when the map is unstable
    or has not contracted after 2^64 iterations."""
    xp = array_namespace(G)
    S, A = Q, G
    rho = None
    for k in range(1, max_doublings + 1):
        S = S + A @ S @ A.T
        A = A @ A
        size = float(xp.max(xp.abs(A)))
        if not (math.isfinite(size) and size < 1e8):
            return None
        if rho is None and size < 1e-2:
            rho = size ** (1.0 / 2.0 ** k)
        if size < 1e-14:
            return S, rho
    return None


def inflation(sampler: Any, H: Any, V: Any, h: float) -> dict | None:
    """The marginal sd ratios of ``sampler``'s stationary law at step ``h`` to those of H^-1.

    Returns ``{"low", "high", "worst", "tau"}`` (the smallest and largest ratio, the worst factor
    ``max(high, 1 / low)`` and the integrated autocorrelation time (1 + rho) / (1 - rho) of the
    slowest mode, in iterations), or None when the map is unstable at ``h`` or H is not positive
    definite.
    """
    xp = array_namespace(H)
    try:
        lam = xp.linalg.eigvalsh(H)
    except Exception:       # a backend without eigvalsh: no bound
        return None
    if not float(xp.min(lam)) > 0:
        return None
    target = _diag(xp, xp.linalg.inv(H))
    G, Q = iteration_map(sampler, H, V, h)
    out = stationary(G, Q)
    if out is None:
        return None
    S, rho = out
    d = int(H.shape[0])
    ratio = xp.sqrt(_diag(xp, S[:d, :d]) / target)
    low, high = float(xp.min(ratio)), float(xp.max(ratio))
    if not (math.isfinite(low) and math.isfinite(high) and low > 0):
        return None
    tau = (1.0 + rho) / max(1.0 - rho, 1e-300) if rho is not None else math.inf
    return {"low": low, "high": high, "worst": max(high, 1.0 / low), "tau": tau}


def bound_step(evaluate: Callable[[float], dict | None], h: float, tolerance: float, budget: float) -> tuple:
    """``(step, estimate)``: the step to run instead of the KSD choice ``h``.

    ``evaluate(step)`` is :func:`inflation` at ``step`` (None: unstable); a step *mixes* when its
    autocorrelation time is at most ``budget`` iterations. With h_tol the largest step whose worst sd
    factor is within ``tolerance`` (found by decades, then bisection in log h): ``h`` itself when it
    is within the tolerance and mixes; else h_tol when ``h`` is above it and h_tol mixes; else the
    smallest step between the two that mixes (a step above h_tol: its inflation is reported), or, when
    none does, ``h`` (above h_tol: the bias is not bounded) or h_tol (below it: the nearest to mixing).
    """
    def ok(e: dict | None) -> bool:
        return e is not None and e["worst"] <= tolerance

    def mixes(e: dict | None) -> bool:
        return e is not None and e["tau"] <= budget

    def boundary(good: float, bad: float, test: Callable[[float], bool]) -> float:
        """The step next to the change of ``test`` between ``good`` (True) and ``bad`` (False)."""
        for _ in range(14):
            mid = math.sqrt(good * bad)
            good, bad = (mid, bad) if test(mid) else (good, mid)
        return good

    est = evaluate(h)
    if est is None:
        return h, est
    within = ok(est)
    if within and mixes(est):
        return h, est
    h_tol = None
    factor = 10.0 if within else 0.1     # towards the boundary of the tolerance
    a = h
    for _ in range(12):
        b = a * factor
        if ok(evaluate(b)) != within:
            h_tol = boundary(a, b, lambda x: ok(evaluate(x)) == within) if within else \
                boundary(b, a, lambda x: ok(evaluate(x)))
            break
        a = b
    if h_tol is None:                    # no boundary within 12 decades
        return h, est
    est_tol = evaluate(h_tol)
    if mixes(est_tol):
        if within:                       # the smallest step from h up that mixes
            step = boundary(h_tol, h, lambda x: mixes(evaluate(x)))
            return step, evaluate(step)
        return h_tol, est_tol
    if not within and mixes(est):        # above the tolerance: the smallest step that mixes
        step = boundary(h, h_tol, lambda x: mixes(evaluate(x)))
        return step, evaluate(step)
    return (h_tol, est_tol) if within else (h, est)
