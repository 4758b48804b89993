"""Numba-compiled sampler moves shared by the fused model blocks (imported when a block first runs).

The position and momentum updates of SGLD, SGHMC and SGNHT on ``(chains, d)`` arrays, in place, each
written in the order of the array-API expressions of :mod:`sgmc.samplers.integrators` and
:mod:`sgmc.samplers.langevin` (``theta + (h/2) g + sqrt(h) z``; the kick
``(1 - (h/2) F) rho + (h/2) g + s z`` and the drift ``theta + (h/2) rho``) and compiled without
fast-math, so that every element rounds as it does in the samplers' own ``step``. The thermostat's
sum over coordinates is the only sum, and it is accumulated in order. The model kernels
(:mod:`sgmc.backends._numba_fused_bnn`, :mod:`sgmc.backends._numba_fused_bpmf`) call these between
their gradient estimates; :func:`noise_sd` and :func:`leap` give SGHMC's noise and the first
leapfrog step's half step after a fresh momentum, as ``SGHMC.step`` sets them.
"""

from __future__ import annotations

import math

import numba as nb

_OPTS = {"nogil": True, "cache": True}

SGLD, SGHMC, SGNHT = 0, 1, 2
MINIBATCH, CV, SVRG = 0, 1, 2


@nb.njit(**_OPTS)
def sgld_move(x, g, z, h):
    """``x <- x + (h/2) g + sqrt(h) z`` for every chain."""
    s = math.sqrt(h)
    for c in range(x.shape[0]):
        for m in range(x.shape[1]):
            x[c, m] = x[c, m] + (0.5 * h) * g[c, m] + s * z[c, m]


@nb.njit(**_OPTS)
def sgnht_move(x, g, rho, xi, z, h, diffusion):
    """SGNHT's kick with the thermostat as friction, the drift, then the thermostat's update."""
    s = math.sqrt(h * diffusion)
    d = x.shape[1]
    for c in range(x.shape[0]):
        f = 1.0 - 0.5 * h * xi[c]
        ss = 0.0
        for m in range(d):
            r = f * rho[c, m] + (0.5 * h) * g[c, m] + s * z[c, m]
            rho[c, m] = r
            x[c, m] = x[c, m] + (0.5 * h) * r
            ss += r * r
        xi[c] = xi[c] + (0.5 * h) * (ss / d - 1.0)


@nb.njit(**_OPTS)
def noise_sd(h, friction, v_hat):
    """SGHMC's momentum noise ``sqrt(h C)``, or ``sqrt(h (C - (h/4) v_hat))`` with a noise estimate (v_hat >= 0)."""
    if v_hat < 0.0:
        return math.sqrt(h * friction)
    return math.sqrt(h * (friction - 0.25 * h * v_hat))


@nb.njit(**_OPTS)
def sghmc_move(x, g, rho, z, h, hk, s, friction):
    """One SGHMC kick of step ``hk`` with noise ``s``, then the drift of step ``h``."""
    f = 1.0 - 0.5 * hk * friction
    for c in range(x.shape[0]):
        for m in range(x.shape[1]):
            rho[c, m] = f * rho[c, m] + (0.5 * hk) * g[c, m] + s * z[c, m]
            x[c, m] = x[c, m] + (0.5 * h) * rho[c, m]


@nb.njit(**_OPTS)
def fresh_momentum(rho, z):
    """``rho <- z``: the momentum drawn afresh at the start of an SGHMC iteration."""
    for c in range(rho.shape[0]):
        for m in range(rho.shape[1]):
            rho[c, m] = z[c, m]


@nb.njit(**_OPTS)
def leap(h, sd, first, resample):
    """The kick's step and noise of a leapfrog step: a half step (noise times sqrt(1/2)) after a fresh momentum."""
    if first and resample:
        return 0.5 * h, sd * math.sqrt(0.5)
    return h, sd


@nb.njit(**_OPTS)
def move(sampler, e, x, g, rho, xi, zt, h, diffusion, resample, sd0, friction, j):
    """The sampler's move before its ``e``-th gradient estimate of an iteration, reading the normals ``zt``.

    ``j`` is the row of ``zt`` the next SGHMC kick reads; the new one is returned (a fresh momentum
    takes row 0, then each leapfrog step's kick one row), as ``SGHMC.step`` consumes its draws.
    """
    if sampler == SGLD:
        sgld_move(x, g, zt[0], h)
    elif sampler == SGNHT:
        sgnht_move(x, g, rho, xi, zt[0], h, diffusion)
    else:
        if e == 0 and resample:
            fresh_momentum(rho, zt[0])
            j = 1
        hk, s = leap(h, sd0, e == 0, resample)
        sghmc_move(x, g, rho, zt[j], h, hk, s, friction)
        j += 1
    return j


@nb.njit(**_OPTS)
def combine(g, c, prior, cg, shared, lik, scale, est):
    """Chain ``c``'s estimate: ``prior + scale lik`` (minibatch) or ``(prior + cg) + scale lik`` (CV, SVRG).

    The estimators' own expressions, in their order; ``lik`` is the minibatch sum (or difference of
    sums) and ``cg`` the full-data sum at the centre (row 0 when ``shared``).
    """
    r = 0 if shared else c
    for m in range(g.shape[1]):
        if est == MINIBATCH:
            g[c, m] = prior[m] + scale * lik[m]
        else:
            g[c, m] = (prior[m] + cg[r, m]) + scale * lik[m]


@nb.njit(**_OPTS)
def record(t, x, g, xi, pos_out, grad_out, xi_out, keep_grad, thermo):
    """The state after iteration ``t`` into the block's outputs."""
    pos_out[t] = x
    if keep_grad:
        grad_out[t] = g
    if thermo:
        xi_out[t] = xi
