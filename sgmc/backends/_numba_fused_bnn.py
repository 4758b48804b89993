"""Numba-compiled block of sampler iterations for the Bayesian neural network (imported on first use).

One call advances every chain of :class:`sgmc.models.BayesianNeuralNetwork` through a block of SGLD,
SGHMC or SGNHT iterations with minibatch, control-variate or SVRG gradient estimates, reading its
random numbers from the pre-drawn arrays of :mod:`sgmc.samplers._fused`. Per estimate and chain the
minibatch rows are gathered once into a buffer (and serve both points of a control variate); the
four matrix products of back-propagation (``X_S B``, ``Z A``, ``G A^T``, and ``X_S^T dH``, ``Z^T G``)
go to BLAS through ``np.dot`` into buffers allocated once per block, and everything between them
(biases, the softmax at both layers, the output residuals, the hidden layer's derivative, the
column sums) is one compiled loop per row; the prior gradient and the estimate's combination are one
pass over ``theta``. The element-wise expressions are the twin's
(:meth:`sgmc.models.BayesianNeuralNetwork._backward`), in its order; sums (the matrix products'
included) are accumulated in another order, so the results equal the twin's up to rounding.
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
    combine,
    move,
    noise_sd,
    record,
)

_OPTS = {"nogil": True, "cache": True}
SOFTMAX, SIGMOID, TANH = 0, 1, 2


@nb.njit(**_OPTS)
def _buffers(n, D, H, K):
    """Work arrays for ``n`` rows: gathered inputs and labels, pre-activations, activations, output, dH."""
    return (np.empty((n, D)), np.empty(n, dtype=np.int64), np.empty((n, H)), np.empty((n, H)),
            np.empty((n, K)), np.empty((n, H)))


@nb.njit(**_OPTS)
def _shifted_logits(pre, out, i, th, off, width):
    """Row ``i``: ``pre += th[off:off + width]`` (the bias), ``out = pre - max``; returns log sum exp(out).

    ``out`` may be ``pre`` (the output layer shifts in place).
    """
    mx = -np.inf
    for k in range(width):
        v = pre[i, k] + th[off + k]
        pre[i, k] = v
        mx = max(mx, v)
    s = 0.0
    for k in range(width):
        v = pre[i, k] - mx
        out[i, k] = v
        s += math.exp(v)
    return math.log(s)


@nb.njit(**_OPTS)
def _backward(act, Xm, lab, th, D, H, K, Hb, Zb, Gb, dZ, out, add, dB, dA):
    """The likelihood gradient of the rows ``Xm`` (labels ``lab``) at ``th``: into ``out``, or added to it."""
    n = Xm.shape[0]
    o1 = D * H
    o2 = o1 + H
    o3 = o2 + H * K
    o4 = o3 + K
    B = th[0:o1].reshape((D, H))
    A = th[o2:o3].reshape((H, K))
    np.dot(Xm, B, Hb)
    for i in range(n):
        if act == SOFTMAX:
            lse = _shifted_logits(Hb, Zb, i, th, o1, H)
            for k in range(H):
                Zb[i, k] = math.exp(Zb[i, k] - lse)
        elif act == SIGMOID:
            for k in range(H):
                Zb[i, k] = 1.0 / (1.0 + math.exp(-(Hb[i, k] + th[o1 + k])))
        else:
            for k in range(H):
                Zb[i, k] = math.tanh(Hb[i, k] + th[o1 + k])
    np.dot(Zb, A, Gb)
    for i in range(n):  # the output layer's log-softmax, then G = Y - p
        lse = _shifted_logits(Gb, Gb, i, th, o3, K)
        for k in range(K):
            Gb[i, k] = (1.0 if k == lab[i] else 0.0) - math.exp(Gb[i, k] - lse)
    np.dot(Gb, A.T, dZ)
    for i in range(n):  # dH, in place of dZ
        if act == SOFTMAX:
            s = 0.0
            for k in range(H):
                s += dZ[i, k] * Zb[i, k]
            for k in range(H):
                dZ[i, k] = Zb[i, k] * (dZ[i, k] - s)
        elif act == SIGMOID:
            for k in range(H):
                dZ[i, k] = dZ[i, k] * Zb[i, k] * (1.0 - Zb[i, k])
        else:
            for k in range(H):
                dZ[i, k] = dZ[i, k] * (1.0 - Zb[i, k] * Zb[i, k])
    if add:
        np.dot(Xm.T, dZ, dB)
        np.dot(Zb.T, Gb, dA)
        flat_b = dB.reshape(o1)
        flat_a = dA.reshape(H * K)
        for m in range(o1):
            out[m] += flat_b[m]
        for m in range(H * K):
            out[o2 + m] += flat_a[m]
    else:
        np.dot(Xm.T, dZ, out[0:o1].reshape((D, H)))
        np.dot(Zb.T, Gb, out[o2:o3].reshape((H, K)))
        for m in range(o2 - o1):
            out[o1 + m] = 0.0
        for m in range(out.shape[0] - o3):
            out[o3 + m] = 0.0
    for i in range(n):
        for k in range(H):
            out[o1 + k] += dZ[i, k]
        for k in range(K):
            out[o3 + k] += Gb[i, k]


@nb.njit(**_OPTS)
def _prior(th, D, H, K, pr):
    """Gradient of the log prior at ``th``: ``-lambda w`` per weight, and each group's log precision."""
    dim = th.shape[0]
    lo = 0
    for grp in range(4):
        size = D * H if grp == 0 else (H if grp == 1 else (H * K if grp == 2 else K))
        hi = lo + size
        q = dim - 4 + grp
        lam = math.exp(th[q])
        ss = 0.0
        for m in range(lo, hi):
            w = th[m]
            pr[m] = -lam * w
            ss += w * w
        pr[q] = (0.5 * size + 1.0) - lam * (1.0 + 0.5 * ss)
        lo = hi


@nb.njit(**_OPTS)
def _gather(X, labels, rows, Xb, lab):
    for b in range(rows.shape[0]):
        r = rows[b]
        lab[b] = labels[r]
        for m in range(X.shape[1]):
            Xb[b, m] = X[r, m]


@nb.njit(**_OPTS)
def _full_sum(act, X, labels, th, H, K, n, out, dB, dA):
    """The full-data likelihood gradient sum at ``th`` in blocks of ``n`` rows (an SVRG snapshot refresh)."""
    N, D = X.shape
    out[:] = 0.0
    for start in range(0, N, n):
        stop = min(N, start + n)
        Xb, lab, Hb, Zb, Gb, dZ = _buffers(stop - start, D, H, K)
        _gather(X, labels, np.arange(start, stop), Xb, lab)
        _backward(act, Xb, lab, th, D, H, K, Hb, Zb, Gb, dZ, out, True, dB, dA)


@nb.njit(**_OPTS)
def _estimate(act, X, labels, H, K, est, scale, update_every, x, g, centre, centre_grad, count, rows, bufs,
              acc, acc0, pr, dB, dA):
    """The gradient estimate at ``x`` for every chain from its minibatch ``rows[c]``, into ``g``."""
    chains = x.shape[0]
    D = X.shape[1]
    Xb, lab, Hb, Zb, Gb, dZ = bufs
    if est == SVRG and count == update_every:
        for c in range(chains):
            centre[c, :] = x[c, :]
            _full_sum(act, X, labels, x[c], H, K, rows.shape[1], centre_grad[c], dB, dA)
        count = 0
    shared = centre.shape[0] == 1
    for c in range(chains):
        _prior(x[c], D, H, K, pr)
        _gather(X, labels, rows[c], Xb, lab)
        _backward(act, Xb, lab, x[c], D, H, K, Hb, Zb, Gb, dZ, acc, False, dB, dA)
        if est != MINIBATCH:
            _backward(act, Xb, lab, centre[0 if shared else c], D, H, K, Hb, Zb, Gb, dZ, acc0, False, dB, dA)
            for m in range(acc.shape[0]):
                acc[m] = acc[m] - acc0[m]
        combine(g, c, pr, centre_grad, shared, acc, scale, est)
    if est == SVRG:
        count += 1
    return count


@nb.njit(**_OPTS)
def bnn_block(X, labels, H, K, act, sampler, friction, v_hat, n_leapfrog, resample, diffusion, est, scale,
              update_every, x, g, rho, xi, centre, centre_grad, count, hs, z, idx, pos_out, grad_out, xi_out,
              keep_grad):
    """Advance ``x`` (chains, dim) and its state in place through ``len(hs)`` iterations; return the SVRG count.

    ``z`` is (iterations, normals per iteration, chains, dim), ``idx`` (iterations, estimates per
    iteration, chains, n); ``pos_out``, ``grad_out`` and ``xi_out`` receive the state after each
    iteration.
    """
    dim = x.shape[1]
    D = X.shape[1]
    bufs = _buffers(idx.shape[3], D, H, K)
    acc = np.empty(dim)
    acc0 = np.empty(dim)
    pr = np.empty(dim)
    dB = np.empty((D, H))
    dA = np.empty((H, K))
    for t in range(hs.shape[0]):
        h = hs[t]
        n_est = n_leapfrog if sampler == SGHMC else 1
        sd0 = noise_sd(h, friction, v_hat) if sampler == SGHMC else 0.0
        j = 0
        for e in range(n_est):
            j = move(sampler, e, x, g, rho, xi, z[t], h, diffusion, resample, sd0, friction, j)
            count = _estimate(act, X, labels, H, K, est, scale, update_every, x, g, centre, centre_grad, count,
                              idx[t, e], bufs, acc, acc0, pr, dB, dA)
        record(t, x, g, xi, pos_out, grad_out, xi_out, keep_grad, sampler == SGNHT)
    return count
