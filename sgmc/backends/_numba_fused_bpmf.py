"""Numba-compiled block of sampler iterations for BPMF (imported when the block first runs).

One call advances every chain of :class:`sgmc.models.BPMF` through a block of SGLD, SGHMC or SGNHT
iterations with minibatch, control-variate or SVRG gradient estimates, reading its random numbers
from the pre-drawn arrays of :mod:`sgmc.samplers._fused`. Per estimate and chain there are two
passes: one over the minibatch's ratings (the residual ``alpha (r - U_u . V_i)`` and the rows of U
and V it touches, added into a dense buffer that stays zero between estimates), and one dense pass
over the parameter vector that computes the prior gradient of every row, adds the scaled likelihood
sum, writes the estimate and zeroes the buffer again, accumulating the prior's per-column sums for
the means and log precisions on the way. The array-API path instead makes some fifteen passes over
``dim`` numbers (unpack, deviations, squares, products, concatenations, the scatter's copies).
The element-wise expressions are the twin's, in its order; only the sums are accumulated in another
order (the pass over the ratings is compiled with fast-math, as the per-step native's is).
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from ._numba_fused_moves import (
    MINIBATCH,
    SGHMC,
    SGLD,
    SGNHT,
    SVRG,
    move,
    noise_sd,
    record,
)

_OPTS = {"nogil": True, "cache": True}
_FAST = dict(_OPTS, fastmath={"reassoc", "contract", "nsz"})


@nb.njit(**_FAST)
def _resid(th, pu, pv, d, rating, alpha):
    """``alpha (r - U_u . V_i)`` with U_u at ``th[pu:pu + d]`` and V_i at ``th[pv:pv + d]``."""
    s = 0.0
    for m in range(d):
        s += th[pu + m] * th[pv + m]
    return alpha * (rating - s)


@nb.njit(**_FAST)
def lik_sum(users, items, ratings, alpha, n_users, d, th, ce, two, rows, acc):
    """``acc += sum_j g_j(th)`` (minus ``g_j(ce)`` with ``two``) over the ratings ``rows``; U, V rows only."""
    ov = n_users * d
    for b in range(rows.shape[0]):
        j = rows[b]
        pu = users[j] * d
        pv = ov + items[j] * d
        e = _resid(th, pu, pv, d, ratings[j], alpha)
        if two:
            e0 = _resid(ce, pu, pv, d, ratings[j], alpha)
            for m in range(d):
                acc[pu + m] += e * th[pv + m] - e0 * ce[pv + m]
                acc[pv + m] += e * th[pu + m] - e0 * ce[pu + m]
        else:
            for m in range(d):
                acc[pu + m] += e * th[pv + m]
                acc[pv + m] += e * th[pu + m]


@nb.njit(**_OPTS)
def _prior_block(th, g, c, start, rows, muo, ello, d, mu0, a0, b0, cg, r, est, scale, acc, lam, ss, sd):
    """One factor matrix W (``rows`` rows from ``start``) with its mean and log precisions: prior plus
    likelihood into ``g[c]``, the buffer ``acc`` zeroed behind."""
    for k in range(d):
        lam[k] = math.exp(th[ello + k])
        ss[k] = 0.0
        sd[k] = 0.0
    for i in range(rows):
        base = start + i * d
        for k in range(d):
            q = base + k
            dev = th[q] - th[muo + k]
            ss[k] += dev * dev
            sd[k] += dev
            p = -lam[k] * dev
            if est == MINIBATCH:
                g[c, q] = p + scale * acc[q]
            else:
                g[c, q] = (p + cg[r, q]) + scale * acc[q]
            acc[q] = 0.0
    for k in range(d):
        mu = th[muo + k]
        dmu = mu - mu0
        lk = lam[k]
        gmu = lk * sd[k] - lk * dmu
        gell = 0.5 * (rows + 1) - 0.5 * lk * (ss[k] + dmu * dmu) + a0 - b0 * lk
        if est == MINIBATCH:
            g[c, muo + k] = gmu + scale * acc[muo + k]
            g[c, ello + k] = gell + scale * acc[ello + k]
        else:
            g[c, muo + k] = (gmu + cg[r, muo + k]) + scale * acc[muo + k]
            g[c, ello + k] = (gell + cg[r, ello + k]) + scale * acc[ello + k]


@nb.njit(**_OPTS)
def _estimate(users, items, ratings, alpha, n_users, n_items, d, mu0, a0, b0, est, scale, update_every,
              x, g, centre, centre_grad, count, rows, acc, lam, ss, sd, everything):
    """The gradient estimate at ``x`` for every chain from its minibatch ``rows[c]``, into ``g``."""
    chains = x.shape[0]
    ou = n_users * d
    om = (n_users + n_items) * d
    if est == SVRG and count == update_every:
        for c in range(chains):
            centre[c, :] = x[c, :]
            centre_grad[c, :] = 0.0
            lik_sum(users, items, ratings, alpha, n_users, d, x[c], x[c], False, everything, centre_grad[c])
        count = 0
    shared = centre.shape[0] == 1
    for c in range(chains):
        r = 0 if shared else c
        lik_sum(users, items, ratings, alpha, n_users, d, x[c], centre[r], est != MINIBATCH, rows[c], acc)
        _prior_block(x[c], g, c, 0, n_users, om, om + 2 * d, d, mu0, a0, b0, centre_grad, r, est, scale, acc,
                     lam, ss, sd)
        _prior_block(x[c], g, c, ou, n_items, om + d, om + 3 * d, d, mu0, a0, b0, centre_grad, r, est, scale,
                     acc, lam, ss, sd)
    if est == SVRG:
        count += 1
    return count


@nb.njit(**_OPTS)
def bpmf_block(users, items, ratings, alpha, n_users, n_items, d, mu0, a0, b0, sampler, friction, v_hat,
               n_leapfrog, resample, diffusion, est, scale, update_every, x, g, rho, xi, centre, centre_grad,
               count, hs, z, idx, pos_out, grad_out, xi_out, keep_grad):
    """Advance ``x`` (chains, dim) and its state in place through ``len(hs)`` iterations; return the SVRG count.

    ``z`` is (iterations, normals per iteration, chains, dim), ``idx`` (iterations, estimates per
    iteration, chains, n); ``pos_out``, ``grad_out`` and ``xi_out`` receive the state after each
    iteration.
    """
    acc = np.zeros(x.shape[1], dtype=np.float64)
    lam = np.empty(d, dtype=np.float64)
    ss = np.empty(d, dtype=np.float64)
    sd = np.empty(d, dtype=np.float64)
    everything = np.arange(ratings.shape[0]) if est == SVRG else np.empty(0, dtype=np.int64)
    for t in range(hs.shape[0]):
        h = hs[t]
        n_est = 1
        if sampler == SGHMC:
            n_est = n_leapfrog
        sd0 = noise_sd(h, friction, v_hat) if sampler == SGHMC else 0.0
        j = 0
        for e in range(n_est):
            j = move(sampler, e, x, g, rho, xi, z[t], h, diffusion, resample, sd0, friction, j)
            count = _estimate(users, items, ratings, alpha, n_users, n_items, d, mu0, a0, b0, est, scale,
                              update_every, x, g, centre, centre_grad, count, idx[t, e], acc, lam, ss, sd,
                              everything)
        record(t, x, g, xi, pos_out, grad_out, xi_out, keep_grad, sampler == SGNHT)
    return count
