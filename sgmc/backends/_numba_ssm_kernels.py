"""Numba-compiled exact recursions behind :mod:`sgmc.backends._numba_ssm` (imported on first use).

Both loops run one batch entry after another on one thread, with the array-API twins' arithmetic
step by step: the normalised forward-backward messages of an HMM, and the Kalman filter (Joseph
form, symmetrised covariances) followed by the RTS smoother that adds up the weighted smoothed
statistics. The small matrices are held in preallocated scratch arrays and multiplied by explicit
loops; linear systems are solved by Cholesky factors (the twins call LU solvers: the results agree
to rounding).
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

_OPTS = {"nogil": True, "cache": True}
_LOG_2PI = math.log(2.0 * math.pi)


# -- HMM ---------------------------------------------------------------------------------------------


@nb.njit(**_OPTS)
def hmm_messages(Pi, p, p0, w, has_w, logc, gamma, N, G):
    """Normalised forward-backward for each batch entry (the twin: ``sgmc.ssm.hmm._messages_twin``).

    ``gamma`` holds the filtered ``alpha_t`` after the forward pass and is overwritten by the
    smoothed marginals going backwards (``alpha_{t-1}`` is still intact when step t reads it).
    """
    b, L, K = p.shape
    a = np.empty(K)
    beta = np.empty(K)
    pb = np.empty(K)
    xi = np.empty((K, K))
    for i in range(b):
        for k in range(K):
            a[k] = p0[i, k]
        acc = 0.0
        for t in range(L):
            c = 0.0
            for k in range(K):
                s = 0.0
                for j in range(K):
                    s += a[j] * Pi[i, j, k]
                gamma[i, t, k] = s * p[i, t, k]
                c += gamma[i, t, k]
            acc += math.log(c)
            for k in range(K):
                gamma[i, t, k] /= c
                a[k] = gamma[i, t, k]
        logc[i] = acc
        for k in range(K):
            beta[k] = 1.0 / K
        for t in range(L - 1, -1, -1):
            wt = w[i, t] if has_w else 1.0
            for k in range(K):
                pb[k] = p[i, t, k] * beta[k]
            tot = 0.0
            for j in range(K):
                aj = gamma[i, t - 1, j] if t > 0 else p0[i, j]
                for k in range(K):
                    xi[j, k] = aj * Pi[i, j, k] * pb[k]
                    tot += xi[j, k]
            for j in range(K):
                for k in range(K):
                    N[i, j, k] += wt * (xi[j, k] / tot)
            tot = 0.0
            for k in range(K):
                gamma[i, t, k] *= beta[k]
                tot += gamma[i, t, k]
            for k in range(K):
                gamma[i, t, k] /= tot
                G[i, k] += wt * gamma[i, t, k]
            tot = 0.0
            for j in range(K):
                s = 0.0
                for k in range(K):
                    s += Pi[i, j, k] * pb[k]
                beta[j] = s
                tot += s
            for j in range(K):
                beta[j] /= tot


# -- small dense linear algebra --------------------------------------------------------------------


@nb.njit(**_OPTS)
def _cholesky(S, Lc):
    """Lower Cholesky factor of the symmetric positive definite ``S`` into ``Lc``; False if it fails."""
    n = S.shape[0]
    for j in range(n):
        d = S[j, j]
        for k in range(j):
            d -= Lc[j, k] * Lc[j, k]
        if not d > 0.0:
            return False
        d = math.sqrt(d)
        Lc[j, j] = d
        for i in range(j + 1, n):
            s = S[i, j]
            for k in range(j):
                s -= Lc[i, k] * Lc[j, k]
            Lc[i, j] = s / d
        for i in range(j):
            Lc[i, j] = 0.0
    return True


@nb.njit(**_OPTS)
def _chol_solve(Lc, X):
    """Overwrite the columns of ``X`` with ``(Lc Lc^T)^{-1} X``."""
    n = Lc.shape[0]
    for c in range(X.shape[1]):
        for i in range(n):
            s = X[i, c]
            for k in range(i):
                s -= Lc[i, k] * X[k, c]
            X[i, c] = s / Lc[i, i]
        for i in range(n - 1, -1, -1):
            s = X[i, c]
            for k in range(i + 1, n):
                s -= Lc[k, i] * X[k, c]
            X[i, c] = s / Lc[i, i]


@nb.njit(**_OPTS)
def _sym(M):
    n = M.shape[0]
    for i in range(n):
        for j in range(i + 1, n):
            v = 0.5 * (M[i, j] + M[j, i])
            M[i, j] = v
            M[j, i] = v


@nb.njit(**_OPTS)
def _abat(A, B, tmp, out):
    """``out = A B A^T`` (A: r x n, B: n x n)."""
    r, n = A.shape
    # tmp = A B, then out = tmp A^T: two loops alike but for the index order of their right factor
    for i in range(r):
        for j in range(n):
            s = 0.0
            for k in range(n):
                s += A[i, k] * B[k, j]
            tmp[i, j] = s
    for i in range(r):  # reads A by rows (A^T) in place of a transposed copy
        for j in range(r):
            s = 0.0
            for k in range(n):
                s += tmp[i, k] * A[j, k]
            out[i, j] = s


# -- Kalman filter and RTS smoother ------------------------------------------------------------------


@nb.njit(**_OPTS)
def kalman_stats(A, Q, C, R, y, m0, P0, mask, has_mask, w, has_w, smooth, ll, S00, S10, S11, Syx, Syy):
    """Filter, smooth and add up the weighted statistics for each batch entry.

    The twin is ``sgmc.ssm.kalman._run`` with the accumulating visitor of ``kalman_stats``. Returns
    the index of the first batch entry whose innovation or predicted covariance is not positive
    definite, or -1. Without ``smooth`` only the log-likelihood is computed.
    """
    b, L, m = y.shape
    n = A.shape[1]
    mp = np.empty((L, n))
    Pp = np.empty((L, n, n))
    mf = np.empty((L, n))
    Pf = np.empty((L, n, n))
    tmp = np.empty((n, max(n, m)))
    S = np.empty((m, m))
    Ls = np.empty((m, m))
    Lp = np.empty((n, n))
    rhs = np.empty((m, n + 1))
    K = np.empty((n, m))
    IKC = np.empty((n, n))
    T1 = np.empty((n, n))
    T2 = np.empty((n, n))
    Jt = np.empty((n, n))
    v = np.empty(m)
    ms = np.empty(n)
    Ps = np.empty((n, n))
    ms_prev = np.empty(n)
    Ps_prev = np.empty((n, n))
    dm = np.empty(n)
    for i in range(b):
        Ai = A[i]
        Ci = C[i]
        acc = 0.0
        for t in range(L):
            # predict
            for r in range(n):
                s = 0.0
                for k in range(n):
                    s += Ai[r, k] * (mf[t - 1, k] if t > 0 else m0[i, k])
                mp[t, r] = s
            _abat(Ai, Pf[t - 1] if t > 0 else P0[i], tmp, Pp[t])
            for r in range(n):
                for c in range(n):
                    Pp[t, r, c] += Q[i, r, c]
            _sym(Pp[t])
            obs = mask[i, t] if has_mask else True
            if not obs:
                mf[t] = mp[t]
                Pf[t] = Pp[t]
                continue
            # update
            for r in range(m):
                s = y[i, t, r]
                for k in range(n):
                    s -= Ci[r, k] * mp[t, k]
                v[r] = s
                for c in range(n):
                    s = 0.0
                    for k in range(n):
                        s += Ci[r, k] * Pp[t, k, c]
                    rhs[r, c] = s  # C Pp
                rhs[r, n] = v[r]
            for r in range(m):
                for c in range(m):
                    s = R[i, r, c]
                    for k in range(n):
                        s += rhs[r, k] * Ci[c, k]
                    S[r, c] = s
            _sym(S)
            if not _cholesky(S, Ls):
                return i
            logdet = 0.0
            for r in range(m):
                logdet += 2.0 * math.log(Ls[r, r])
            _chol_solve(Ls, rhs)  # [K^T, S^{-1} v]
            quad = 0.0
            for r in range(m):
                quad += v[r] * rhs[r, n]
                for c in range(n):
                    K[c, r] = rhs[r, c]
            acc += -0.5 * (m * _LOG_2PI + logdet + quad)
            for r in range(n):
                s = mp[t, r]
                for k in range(m):
                    s += K[r, k] * v[k]
                mf[t, r] = s
                for c in range(n):
                    s = 1.0 if r == c else 0.0
                    for k in range(m):
                        s -= K[r, k] * Ci[k, c]
                    IKC[r, c] = s
            _abat(IKC, Pp[t], tmp, Pf[t])
            _abat(K, R[i], tmp, T1)
            for r in range(n):
                for c in range(n):
                    Pf[t, r, c] += T1[r, c]
            _sym(Pf[t])
        ll[i] = acc
        if not smooth:
            continue
        # smooth backwards from the last filtered moments
        for r in range(n):
            ms[r] = mf[L - 1, r]
            for c in range(n):
                Ps[r, c] = Pf[L - 1, r, c]
        for t in range(L - 1, -1, -1):
            mprev = mf[t - 1] if t > 0 else m0[i]
            Pprev = Pf[t - 1] if t > 0 else P0[i]
            if not _cholesky(Pp[t], Lp):
                return i
            for r in range(n):
                for c in range(n):
                    s = 0.0
                    for k in range(n):
                        s += Ai[r, k] * Pprev[k, c]
                    Jt[r, c] = s  # A P_{t-1}
            _chol_solve(Lp, Jt)  # J^T = Pp^{-1} A P_{t-1}
            for r in range(n):
                dm[r] = ms[r] - mp[t, r]
                for c in range(n):
                    T1[r, c] = Ps[r, c] - Pp[t, r, c]
            for r in range(n):
                s = mprev[r]
                for k in range(n):
                    s += Jt[k, r] * dm[k]
                ms_prev[r] = s
            # Ps_prev = Pprev + J (Ps - Pp) J^T, J = Jt^T
            for r in range(n):
                for c in range(n):
                    s = 0.0
                    for k in range(n):
                        s += T1[r, k] * Jt[k, c]
                    T2[r, c] = s  # (Ps - Pp) Jt
            for r in range(n):
                for c in range(n):
                    s = Pprev[r, c]
                    for k in range(n):
                        s += Jt[k, r] * T2[k, c]
                    Ps_prev[r, c] = s
            _sym(Ps_prev)
            wt = w[i, t] if has_w else 1.0
            for r in range(n):
                for c in range(n):
                    s = 0.0
                    for k in range(n):
                        s += Ps[r, k] * Jt[k, c]  # cross = Ps J^T
                    S10[i, r, c] += wt * (s + ms[r] * ms_prev[c])
                    S00[i, r, c] += wt * (Ps_prev[r, c] + ms_prev[r] * ms_prev[c])
                    S11[i, r, c] += wt * (Ps[r, c] + ms[r] * ms[c])
            for r in range(m):
                yr = y[i, t, r]
                for c in range(n):
                    Syx[i, r, c] += wt * (yr * ms[c])
                for c in range(m):
                    Syy[i, r, c] += wt * (yr * y[i, t, c])
            for r in range(n):
                ms[r] = ms_prev[r]
                for c in range(n):
                    Ps[r, c] = Ps_prev[r, c]
    return -1


@nb.njit(**_OPTS)
def kalman_stats_1(a, q, c, r, y, m0, P0, mask, has_mask, w, has_w, smooth, ll, acc):
    """The scalar model (n = m = 1): the twin's scalar steps (``_filter_step_1``, ``_smooth_step_1``).

    ``acc`` (b, 5) receives S00, S10, S11, Syx, Syy. Returns -1, or the first entry with a
    non-positive innovation or predicted variance.
    """
    b, L = y.shape
    mp = np.empty(L)
    Pp = np.empty(L)
    mf = np.empty(L)
    Pf = np.empty(L)
    for i in range(b):
        ai, qi, ci, ri = a[i], q[i], c[i], r[i]
        m = m0[i]
        P = P0[i]
        tot = 0.0
        for t in range(L):
            mpt = ai * m
            Ppt = ai * ai * P + qi
            mp[t] = mpt
            Pp[t] = Ppt
            if has_mask and not mask[i, t]:
                m, P = mpt, Ppt
            else:
                v = y[i, t] - ci * mpt
                S = ci * ci * Ppt + ri
                if not S > 0.0:
                    return i
                K = Ppt * ci / S
                m = mpt + K * v
                ikc = 1.0 - K * ci
                P = ikc * ikc * Ppt + K * K * ri
                tot += -0.5 * (_LOG_2PI + math.log(S) + v * v / S)
            mf[t] = m
            Pf[t] = P
        ll[i] = tot
        if not smooth:
            continue
        ms, Ps = mf[L - 1], Pf[L - 1]
        s00 = s10 = s11 = syx = syy = 0.0
        for t in range(L - 1, -1, -1):
            mprev = mf[t - 1] if t > 0 else m0[i]
            Pprev = Pf[t - 1] if t > 0 else P0[i]
            if not Pp[t] > 0.0:
                return i
            J = Pprev * ai / Pp[t]
            ms_prev = mprev + J * (ms - mp[t])
            Ps_prev = Pprev + J * J * (Ps - Pp[t])
            wt = w[i, t] if has_w else 1.0
            yt = y[i, t]
            s00 += wt * (Ps_prev + ms_prev * ms_prev)
            s10 += wt * (Ps * J + ms * ms_prev)
            s11 += wt * (Ps + ms * ms)
            syx += wt * yt * ms
            syy += wt * yt * yt
            ms, Ps = ms_prev, Ps_prev
        acc[i, 0] = s00
        acc[i, 1] = s10
        acc[i, 2] = s11
        acc[i, 3] = syx
        acc[i, 4] = syy
    return -1
