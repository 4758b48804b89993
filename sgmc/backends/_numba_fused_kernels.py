"""Numba-compiled block loop behind :mod:`sgmc.backends._numba_fused` (imported when it first runs).

One call advances every chain of a generalised linear model through a block of sampler iterations
(SGLD, SGHMC or SGNHT) with minibatch, control-variate or SVRG gradient estimates, reading its random
numbers from the pre-drawn arrays it is given. The element-wise updates are written in the order of
the array-API twin's expressions and compiled without fast-math, so they round as the twin does; only
the sums over minibatch rows and coordinates are accumulated in another order.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from ._numba_kernels import _dot, _resid  # the GLM residual and row product, shared with the per-step loop
from ._numba_kernels import first_distinct  # noqa: F401  (the blocks' minibatches without replacement)

_OPTS = {"nogil": True, "cache": True}
# Sums over a row's coordinates may be reordered (vectorised); the updates below are not.
_FAST = dict(_OPTS, fastmath={"reassoc", "contract", "nsz"})

SGLD, SGHMC, SGNHT = 0, 1, 2
MINIBATCH, CV, SVRG = 0, 1, 2


@nb.njit(**_FAST)
def _dot2(X, row, th, ce):
    """Both points' products with one read of the row (a control variate's two linear predictors)."""
    acc = 0.0
    acc0 = 0.0
    for m in range(X.shape[1]):
        acc += X[row, m] * th[m]
        acc0 += X[row, m] * ce[m]
    return acc, acc0


@nb.njit(**_FAST)
def _axpy(acc, v, X, row):
    for m in range(X.shape[1]):
        acc[m] += v * X[row, m]


@nb.njit(**_FAST)
def _rows_dot(X, rows, th, out):
    """``out[b] = X[rows[b]] . th``, four rows at a time (independent sums, many loads in flight)."""
    # unrolled by four as _rows_sum, written out: four dot products here, one update of four rows there
    n = rows.shape[0]
    b = 0
    while b + 4 <= n:
        r0, r1, r2, r3 = rows[b], rows[b + 1], rows[b + 2], rows[b + 3]
        a0 = a1 = a2 = a3 = 0.0
        for m in range(X.shape[1]):
            t = th[m]
            a0 += X[r0, m] * t
            a1 += X[r1, m] * t
            a2 += X[r2, m] * t
            a3 += X[r3, m] * t
        out[b], out[b + 1], out[b + 2], out[b + 3] = a0, a1, a2, a3
        b += 4
    while b < n:
        out[b] = _dot(X, rows[b], th)
        b += 1


@nb.njit(**_FAST)
def _rows_sum(X, rows, v, acc):
    """``acc += sum_b v[b] X[rows[b]]``, four rows per update of ``acc``."""
    # unrolled by four as _rows_dot, written out: one update of four rows here, four dot products there
    n = rows.shape[0]
    b = 0
    while b + 4 <= n:
        r0, r1, r2, r3 = rows[b], rows[b + 1], rows[b + 2], rows[b + 3]
        v0, v1, v2, v3 = v[b], v[b + 1], v[b + 2], v[b + 3]
        for m in range(X.shape[1]):
            acc[m] += (v0 * X[r0, m] + v1 * X[r1, m]) + (v2 * X[r2, m] + v3 * X[r3, m])
        b += 4
    while b < n:
        _axpy(acc, v[b], X, rows[b])
        b += 1


@nb.njit(**_OPTS)
def _full_sum(kind, X, y, param, th, acc):
    """The full-data likelihood gradient sum at ``th`` (an SVRG snapshot refresh)."""
    acc[:] = 0.0
    for i in range(X.shape[0]):
        _axpy(acc, _resid(kind, _dot(X, i, th), y[i], param), X, i)


@nb.njit(**_OPTS)
def centre_resid(kind, X, param, ce, out):
    """``r(x_i . centre, 0)`` for every datum: a fixed control-variate centre's residuals, computed once."""
    for i in range(X.shape[0]):
        out[i] = _resid(kind, _dot(X, i, ce), 0.0, param)


#: Rows per block of :func:`centre_terms` (the block's rows stay in cache between its three loops).
TERMS_BLOCK = 128
#: From this dimension on, :func:`centre_terms` takes the rows one at a time (each row's products
#: vectorise across its coordinates); below it, four rows at a time (short rows: independent sums).
TERMS_ROW_DIM = 32


@nb.njit(**_FAST)
def _block_dot4(X, start, stop, th, out):
    """``out[i - start] = X[i] . th`` for the rows ``start:stop``, four (short) rows at a time."""
    # _rows_dot on consecutive rows, written out: no index array to read (and _block_sum4 its transpose)
    i = start
    while i + 4 <= stop:
        a0 = a1 = a2 = a3 = 0.0
        for m in range(X.shape[1]):
            t = th[m]
            a0 += X[i, m] * t
            a1 += X[i + 1, m] * t
            a2 += X[i + 2, m] * t
            a3 += X[i + 3, m] * t
        out[i - start], out[i - start + 1], out[i - start + 2], out[i - start + 3] = a0, a1, a2, a3
        i += 4
    for j in range(i, stop):
        out[j - start] = _dot(X, j, th)


@nb.njit(**_FAST)
def _block_sum4(X, start, stop, v, acc):
    """``acc += sum_i v[i - start] X[i]`` over the rows ``start:stop``, four (short) rows per update."""
    # _rows_sum on consecutive rows, written out: no index array to read (and _block_dot4 its transpose)
    i = start
    while i + 4 <= stop:
        b = i - start
        v0, v1, v2, v3 = v[b], v[b + 1], v[b + 2], v[b + 3]
        for m in range(X.shape[1]):
            acc[m] += (v0 * X[i, m] + v1 * X[i + 1, m]) + (v2 * X[i + 2, m] + v3 * X[i + 3, m])
        i += 4
    for j in range(i, stop):
        _axpy(acc, v[j - start], X, j)


@nb.njit(**_OPTS)
def _block_residuals(kind, y, param, r0, eta, start, stop):
    """Rows ``start:stop`` with ``eta`` their linear predictors: ``r0[i] = r(eta, 0)``, and ``eta`` becomes ``r(eta, y_i)``."""
    for i in range(start, stop):
        e = eta[i - start]
        r = _resid(kind, e, 0.0, param)
        r0[i] = r
        eta[i - start] = y[i] + r if kind == 0 else _resid(kind, e, y[i], param)


@nb.njit(**_OPTS)
def _terms_long(kind, X, y, param, ce, r0, grad, eta):
    """:func:`centre_terms` for long rows, one row at a time (its products vectorise across coordinates)."""
    n_data = X.shape[0]
    block = eta.shape[0]
    for start in range(0, n_data, block):
        stop = min(start + block, n_data)
        for i in range(start, stop):
            eta[i - start] = _dot(X, i, ce)
        _block_residuals(kind, y, param, r0, eta, start, stop)
        for i in range(start, stop):
            _axpy(grad, eta[i - start], X, i)


@nb.njit(**_OPTS)
def _terms_short(kind, X, y, param, ce, r0, grad, eta):
    """:func:`centre_terms` for short rows, four rows at a time (independent sums)."""
    n_data = X.shape[0]
    block = eta.shape[0]
    for start in range(0, n_data, block):
        stop = min(start + block, n_data)
        _block_dot4(X, start, stop, ce, eta)
        _block_residuals(kind, y, param, r0, eta, start, stop)
        _block_sum4(X, start, stop, eta, grad)


@nb.njit(**_OPTS)
def centre_terms(kind, X, y, param, ce, r0, grad):
    """A fixed centre's set-up from one read of each row of ``X``, in blocks of ``TERMS_BLOCK`` rows.

    ``r0[i] = r(x_i . centre, 0)`` (the residual table of the blocks' control variates) and
    ``grad = sum_i r(x_i . centre, y_i) x_i`` (the full-data likelihood gradient there). Per block:
    the products, then the residuals (the exps in a loop of their own), then the sum, while the
    block's rows are still in cache. Short rows (d < ``TERMS_ROW_DIM``) go four at a time, long ones
    singly. Logistic: ``r(eta, y) = y + r(eta, 0)`` exactly (``y - s`` and ``y + (-s)`` round
    alike), so one exp serves both.
    """
    eta = np.empty(TERMS_BLOCK, dtype=np.float64)
    grad[:] = 0.0
    if X.shape[1] < TERMS_ROW_DIM:
        _terms_short(kind, X, y, param, ce, r0, grad, eta)
    else:
        _terms_long(kind, X, y, param, ce, r0, grad, eta)


@nb.njit(**_OPTS)
def _estimate(kind, X, y, param, prior_var, est, scale, update_every, x, g, centre, centre_grad, count,
              rows, eta, eta0, acc, r0, use_r0):
    """The gradient estimate at ``x`` for every chain from the minibatch ``rows`` (chains, n), into ``g``."""
    chains, d = x.shape
    n = rows.shape[1]
    if est == SVRG and count == update_every:
        for c in range(chains):
            centre[c, :] = x[c, :]
            _full_sum(kind, X, y, param, x[c], acc)
            centre_grad[c, :] = acc
        count = 0
    shared = centre_grad.shape[0] == 1
    for c in range(chains):
        th = x[c]
        acc[:] = 0.0
        if est == MINIBATCH:
            _rows_dot(X, rows[c], th, eta)  # loads first (the responses too), so that many are in flight
            for b in range(n):
                eta0[b] = y[rows[c, b]]
            for b in range(n):
                eta[b] = _resid(kind, eta[b], eta0[b], param)
        elif use_r0:  # a fixed centre: its residuals come from the table, one load per row
            _rows_dot(X, rows[c], th, eta)
            for b in range(n):
                eta0[b] = r0[rows[c, b]]
            for b in range(n):
                eta[b] = _resid(kind, eta[b], 0.0, param) - eta0[b]
        else:
            ce = centre[c]
            for b in range(n):
                eta[b], eta0[b] = _dot2(X, rows[c, b], th, ce)
            for b in range(n):  # y cancels in the difference, as in the twin
                eta[b] = _resid(kind, eta[b], 0.0, param) - _resid(kind, eta0[b], 0.0, param)
        _rows_sum(X, rows[c], eta, acc)
        cg = centre_grad[0] if shared else centre_grad[c]
        for m in range(d):
            if est == MINIBATCH:
                g[c, m] = -x[c, m] / prior_var + scale * acc[m]
            else:
                g[c, m] = -x[c, m] / prior_var + cg[m] + scale * acc[m]
    if est == SVRG:
        count += 1
    return count


@nb.njit(**_OPTS)
def glm_block(kind, X, y, param, prior_var, sampler, friction, v_hat, n_leapfrog, resample, diffusion,
              est, scale, update_every, x, g, rho, xi, centre, centre_grad, count, hs, z, idx,
              pos_out, grad_out, xi_out, keep_grad, r0, use_r0):
    """Advance ``x`` (chains, d) and its state in place through ``len(hs)`` iterations; return the SVRG count.

    ``z`` is (iterations, normals per iteration, chains, d), ``idx`` (iterations, estimates per
    iteration, chains, n); ``pos_out``, ``grad_out`` and ``xi_out`` receive the state after each
    iteration.
    """
    chains, d = x.shape
    n = idx.shape[3]
    eta = np.empty(n, dtype=np.float64)
    eta0 = np.empty(n, dtype=np.float64)
    acc = np.empty(d, dtype=np.float64)
    for t in range(hs.shape[0]):
        h = hs[t]
        if sampler == SGLD:
            s = math.sqrt(h)
            for c in range(chains):
                for m in range(d):
                    x[c, m] = x[c, m] + (0.5 * h) * g[c, m] + s * z[t, 0, c, m]
            count = _estimate(kind, X, y, param, prior_var, est, scale, update_every, x, g, centre,
                              centre_grad, count, idx[t, 0], eta, eta0, acc, r0, use_r0)
        elif sampler == SGNHT:
            s = math.sqrt(h * diffusion)
            for c in range(chains):
                f = 1.0 - 0.5 * h * xi[c]
                ss = 0.0
                for m in range(d):
                    r = f * rho[c, m] + (0.5 * h) * g[c, m] + s * z[t, 0, c, m]
                    rho[c, m] = r
                    x[c, m] = x[c, m] + (0.5 * h) * r
                    ss += r * r
                xi[c] = xi[c] + (0.5 * h) * (ss / d - 1.0)
            count = _estimate(kind, X, y, param, prior_var, est, scale, update_every, x, g, centre,
                              centre_grad, count, idx[t, 0], eta, eta0, acc, r0, use_r0)
        else:
            sd = math.sqrt(h * friction) if v_hat < 0.0 else math.sqrt(h * (friction - 0.25 * h * v_hat))
            j = 0
            for leap in range(n_leapfrog):
                hk = h
                s = sd
                if leap == 0 and resample:
                    rho[:, :] = z[t, 0]
                    j = 1
                    hk = 0.5 * h
                    s = sd * math.sqrt(0.5)
                f = 1.0 - 0.5 * hk * friction
                for c in range(chains):
                    for m in range(d):
                        rho[c, m] = f * rho[c, m] + (0.5 * hk) * g[c, m] + s * z[t, j, c, m]
                        x[c, m] = x[c, m] + (0.5 * h) * rho[c, m]
                j += 1
                count = _estimate(kind, X, y, param, prior_var, est, scale, update_every, x, g, centre,
                                  centre_grad, count, idx[t, leap], eta, eta0, acc, r0, use_r0)
        pos_out[t] = x
        if keep_grad:
            grad_out[t] = g
        if sampler == SGNHT:
            xi_out[t] = xi
    return count
