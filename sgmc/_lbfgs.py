"""The L-BFGS iteration of :func:`sgmc.optimize.lbfgs` (which checks its arguments and the start).

The search direction is the two-loop recursion over the last ``memory`` pairs of steps and gradient
changes (a pair whose curvature ``s^T y`` is not positive is skipped, so the direction stays an
ascent direction on non-concave targets); the step is halved until the log posterior rises by at
least 1e-4 of the directional derivative (Armijo).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["lbfgs_steps"]


def lbfgs_steps(model: Any, x: Any, max_steps: int, memory: int, gtol: float, passes: list | None) -> tuple:
    """L-BFGS ascent steps on ``model.log_posterior`` from the checked start ``x`` (dim,).

    Returns ``(theta, steps, grad_norm)`` as :func:`sgmc.optimize.lbfgs` documents; ``passes``, a
    list, receives the number of full-data evaluations made.
    """
    xp = model.xp
    f = float(model.log_posterior(x))
    g = xp.reshape(model.grad_log_posterior(x), (-1,))
    count, steps = 2, 0
    pairs: list = []
    for _ in range(max_steps):
        if not math.isfinite(f) or float(xp.linalg.vector_norm(g)) <= gtol * max(1.0, abs(f)):
            break
        # two-loop recursion for an ascent direction: H g with H the inverse of -Hessian's estimate
        q = g
        alphas = []
        for s_k, y_k, rho in reversed(pairs):
            a = rho * float(xp.sum(s_k * q))
            alphas.append(a)
            q = q - a * y_k
        if pairs:
            s_k, y_k, _ = pairs[-1]
            q = q * (float(xp.sum(s_k * y_k)) / float(xp.sum(y_k * y_k)))
        else:
            q = q / max(float(xp.linalg.vector_norm(g)), 1e-300)  # a first step of unit length
        for (s_k, y_k, rho), a in zip(pairs, reversed(alphas)):
            b = rho * float(xp.sum(y_k * q))
            q = q + (a - b) * s_k
        slope = float(xp.sum(g * q))
        if not slope > 0.0:  # not an ascent direction: restart from the gradient
            pairs.clear()
            q = g / max(float(xp.linalg.vector_norm(g)), 1e-300)
            slope = float(xp.sum(g * q))
        t, accepted = 1.0, False
        while t > 1e-12:
            cand = x + t * q
            fc = float(model.log_posterior(cand))
            count += 1
            if math.isfinite(fc) and fc >= f + 1e-4 * t * slope:
                accepted = True
                break
            t *= 0.5
        if not accepted:
            break
        gc = xp.reshape(model.grad_log_posterior(cand), (-1,))
        count += 1
        s_k = cand - x
        y_k = g - gc  # the change of -grad log pi, so that s^T y > 0 where -log pi is convex
        sy = float(xp.sum(s_k * y_k))
        if sy > 1e-12 * float(xp.linalg.vector_norm(s_k)) * float(xp.linalg.vector_norm(y_k)):
            pairs.append((s_k, y_k, 1.0 / sy))
            if len(pairs) > memory:
                pairs.pop(0)
        x, f, g = cand, fc, gc
        steps += 1
    if passes is not None:
        passes.append(count)
    return x, steps, float(xp.linalg.vector_norm(g))
