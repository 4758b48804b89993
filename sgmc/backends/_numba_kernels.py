"""Numba-compiled loops behind :mod:`sgmc.backends._numba` (imported only when a native first runs)."""

from __future__ import annotations

import math

import numba as nb
import numpy as np

_OPTS = {"nogil": True, "cache": True}


@nb.njit(**_OPTS)
def _resid(kind, eta, y, param):
    """d log f / d eta: the twins' arithmetic (logistic: one exp of -|eta|)."""
    if kind == 0:
        e = math.exp(-abs(eta))
        inv = 1.0 / (1.0 + e)
        sig = inv if eta >= 0 else e * inv
        return y - sig
    return (y - eta) / param


@nb.njit(**_OPTS)
def _glm_chain(kind, X, y, th, idx_c, w_c, has_w, param, out_c, two, ce):
    # Three passes over the chain's minibatch: the products (loads only, so the memory system fetches
    # many rows at once), the residuals, then the sums from the rows, which are now in cache.
    d = X.shape[1]
    n = idx_c.shape[0]
    r = np.empty(n, dtype=np.float64)
    r0 = np.empty(n if two else 0, dtype=np.float64)
    for b in range(n):
        row = idx_c[b]
        eta = 0.0
        eta0 = 0.0
        for m in range(d):
            xv = X[row, m]
            eta += xv * th[m]
            if two:
                eta0 += xv * ce[m]
        r[b] = eta
        if two:
            r0[b] = eta0
    for b in range(n):
        yb = y[idx_c[b]]
        v = _resid(kind, r[b], yb, param)
        if two:
            v = v - _resid(kind, r0[b], yb, param)
        if has_w:
            v = v * w_c[b]
        r[b] = v
    for b in range(n):
        row = idx_c[b]
        v = r[b]
        for m in range(d):
            out_c[m] += v * X[row, m]


@nb.njit(**_OPTS)
def glm_chains(kind, X, y, theta, centre, idx, w, has_w, two, param, out):
    """Every chain's gradient sum, one chain after another on this thread.

    One thread on purpose: the loop is bound by memory traffic, which a second thread on a 2-core
    machine barely raises, and threads that wait for each other lose badly when other processes
    compete for the cores. Run chain groups on several processes for parallelism (``executor=``).
    """
    for c in range(idx.shape[0]):
        _glm_chain(kind, X, y, theta[c], idx[c], w[c], has_w, param, out[c], two, centre[c])


@nb.njit(**_OPTS)
def ancestors_from_counts(counts, out):
    """Ancestor indices from cumulative offspring counts (batch, n) ending at n."""
    batch, n = counts.shape
    for b in range(batch):
        k = 0
        prev = 0
        for i in range(n):
            c = counts[b, i]
            for _ in range(c - prev):
                out[b, k] = i
                k += 1
            prev = c
        while k < n:  # counts that stop short of n: the twin's n (no particle i has counts[i] > k)
            out[b, k] = n
            k += 1


@nb.njit(**_OPTS)
def first_distinct(draws, size, n_data, out, ok):
    """The first ``size`` distinct values of each row of ``draws``, in draw order (``ok``: found them).

    A bitmap of ``n_data`` bits marks the values seen; it is cleared after each row by walking the
    row's kept values, so a row costs O(m) whatever ``n_data``.
    """
    seen = np.zeros((n_data + 7) // 8, dtype=np.uint8)
    batch, m = draws.shape
    for b in range(batch):
        k = 0
        for j in range(m):
            v = draws[b, j]
            byte = v >> 3
            bit = np.uint8(1 << (v & 7))
            if seen[byte] & bit:
                continue
            seen[byte] |= bit
            out[b, k] = v
            k += 1
            if k == size:
                break
        ok[b] = k == size
        for j in range(k):
            v = out[b, j]
            seen[v >> 3] = 0
