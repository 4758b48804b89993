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


# Sums over a row's coordinates may be reordered (vectorised); rounding differs from the twin's
# matrix products only in the last bits, as the twin's own blocked products do.
_FAST = dict(_OPTS, fastmath={"reassoc", "contract", "nsz"})


@nb.njit(**_FAST)
def _dot(X, row, th):
    acc = 0.0
    for m in range(X.shape[1]):
        acc += X[row, m] * th[m]
    return acc


@nb.njit(**_FAST)
def _axpy(out_c, v, X, row):
    for m in range(X.shape[1]):
        out_c[m] += v * X[row, m]


@nb.njit(**_FAST)
def glm_chains(kind, X, y, theta, idx, w, has_w, param, out):
    """Every chain's gradient sum, one chain after another on this thread.

    Per chain, three passes over its minibatch: the products (loads only, so the memory system
    fetches many rows at once), the residuals, then the sums from the rows, which are now in cache.
    One thread on purpose: the loop is bound by memory traffic, which a second thread on a 2-core
    machine barely raises, and threads that wait for each other lose badly when other processes
    compete for the cores. Run chain groups on several processes for parallelism (``executor=``).
    """
    n = idx.shape[1]
    r = np.empty(n, dtype=np.float64)
    for c in range(idx.shape[0]):
        th = theta[c]
        for b in range(n):
            r[b] = _dot(X, idx[c, b], th)
        for b in range(n):
            v = _resid(kind, r[b], y[idx[c, b]], param)
            r[b] = v * w[c, b] if has_w else v
        for b in range(n):
            _axpy(out[c], r[b], X, idx[c, b])


#: Minibatch rows per block of :func:`glm_chains_diff`: the block's copy of its rows stays in the
#: first-level cache (at d = 100, 64 rows are 50 KB) between the products and the sums.
DIFF_BLOCK = 64


@nb.njit(**_FAST)
def _gather_dot2(X, idx, c, start, stop, th, ce, buf, eta, eta0):
    """Copy the rows ``idx[c, start:stop]`` into ``buf`` and take both products, one read of each row of X."""
    for b in range(start, stop):
        row = idx[c, b]
        a = 0.0
        a0 = 0.0
        for m in range(X.shape[1]):
            v = X[row, m]
            buf[b - start, m] = v
            a += v * th[m]
            a0 += v * ce[m]
        eta[b - start] = a
        eta0[b - start] = a0


@nb.njit(**_FAST)
def glm_chains_diff(kind, X, y, theta, centre, idx, w, has_w, param, out):
    """The control-variate difference sum_b w (r(x . theta) - r(x . centre)) x, each row of X read once.

    Per chain, blocks of ``DIFF_BLOCK`` minibatch rows: the rows are copied into a small contiguous
    buffer while both products are taken (the only read of X), the residual differences (the exps)
    follow in a loop of their own over the block's contiguous products, and the sum is taken from the
    buffer. ``y`` cancels in the difference, as in the twin.
    """
    n = idx.shape[1]
    d = X.shape[1]
    buf = np.empty((DIFF_BLOCK, d), dtype=np.float64)
    eta = np.empty(DIFF_BLOCK, dtype=np.float64)
    eta0 = np.empty(DIFF_BLOCK, dtype=np.float64)
    for c in range(idx.shape[0]):
        th = theta[c]
        ce = centre[c]
        acc = out[c]
        for start in range(0, n, DIFF_BLOCK):
            stop = min(start + DIFF_BLOCK, n)
            _gather_dot2(X, idx, c, start, stop, th, ce, buf, eta, eta0)
            for b in range(stop - start):
                v = _resid(kind, eta[b], 0.0, param) - _resid(kind, eta0[b], 0.0, param)
                eta[b] = v * w[c, start + b] if has_w else v
            for b in range(stop - start):
                v = eta[b]
                for m in range(d):
                    acc[m] += v * buf[b, m]


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


@nb.njit(**_OPTS)
def _fill(out, b, mark, n):
    """Ancestors from the marks: slot k gets the largest particle marked at or before k (a running max)."""
    top = 0
    for k in range(n):
        m = mark[k]
        top = m if m > top else top
        out[b, k] = top


@nb.njit(**_OPTS)
def _row_scale(weights, b, n):
    """``N / sum_i w_i`` of row ``b``, summed in order as the twin's running sum."""
    total = 0.0
    for i in range(n):
        total += weights[b, i]
    return n / total


@nb.njit(**_OPTS)
def systematic(weights, u, out, mark):
    """Systematic resampling in two passes per row, with the twin's arithmetic (so the same integers).

    The twin forms c = cumsum(w) * (N / sum w), sets the last entry to N, adds u, floors to the
    cumulative offspring counts and turns them into ancestors. Here the first pass computes each
    count and marks the first slot of each particle (``mark[C_{i-1}] = i``; a particle without
    offspring is overwritten by the next one), and the second fills every slot with the last mark at
    or before it. Neither pass has a data-dependent branch. ``mark`` is scratch of N + 1 entries.
    """
    batch, n = weights.shape
    for b in range(batch):
        scale = _row_scale(weights, b, n)
        ub = u[b]
        mark[: n + 1] = 0
        prev = 0
        acc = 0.0
        for i in range(n):
            acc += weights[b, i]
            c = int(_scaled(acc, scale, i, n) + ub)
            c = c if c < n else n
            c = c if c > 0 else 0  # never write outside mark: NaN or infinite weights give int() = INT_MIN
            mark[prev] = i
            prev = c
        _fill(out, b, mark, n)


@nb.njit(**_FAST)
def _bpmf_resid(U, V, c, u, i, rating, alpha, w, has_w, b):
    """alpha (r - U_u . V_i) for chain c, times the rating's weight."""
    s = 0.0
    for m in range(U.shape[2]):
        s += U[c, u, m] * V[c, i, m]
    e = alpha * (rating - s)
    return e * w[c, b] if has_w else e


@nb.njit(**_FAST)
def bpmf_chains(users, items, ratings, U, V, Uc, Vc, two, idx, w, has_w, alpha, gU, gV):
    """BPMF minibatch gradient sums, one pass over each chain's ratings.

    Per rating j = idx[c, b] of user u and item i: e = alpha (r_j - U_u . V_i) (times the weight),
    ``gU[c, u] += e V_i`` and ``gV[c, i] += e U_u``; with ``two`` the same at the centre (Uc, Vc) is
    subtracted (the control-variate difference). Repeated users and items add up in place, which is
    the scatter-add that the array-API twin does with a sort and running sums.
    """
    d = U.shape[2]
    for c in range(idx.shape[0]):
        for b in range(idx.shape[1]):
            j = idx[c, b]
            u = users[j]
            i = items[j]
            e = _bpmf_resid(U, V, c, u, i, ratings[j], alpha, w, has_w, b)
            if two:
                e0 = _bpmf_resid(Uc, Vc, c, u, i, ratings[j], alpha, w, has_w, b)
                for m in range(d):
                    gU[c, u, m] += e * V[c, i, m] - e0 * Vc[c, i, m]
                    gV[c, i, m] += e * U[c, u, m] - e0 * Uc[c, u, m]
            else:
                for m in range(d):
                    gU[c, u, m] += e * V[c, i, m]
                    gV[c, i, m] += e * U[c, u, m]


@nb.njit(**_OPTS)
def _scaled(acc, scale, i, n):
    """Entry i of the twin's scaled running sum: ``acc * (N / total)``, and exactly N for the last."""
    return acc * scale if i < n - 1 else float(n)


@nb.njit(**_OPTS)
def multinomial(weights, s, out, cdf):
    """Multinomial ancestors from sorted uniforms ``s``: one merge of ``s`` against the running sum.

    Slot k descends from the first particle i with ``s[k] < cdf_i`` (``cdf`` the twin's scaled running
    sum over N), the twin's counts read the other way round; both sequences only increase, so one
    pass over each suffices (``particles`` merges likewise). A slot past every cdf gets N, as in the twin.
    The merge has no data-dependent branch: each step either moves to the next particle or writes the
    slot and moves to the next slot (``cdf`` is scratch of N + 1 entries, the last a sentinel). The
    two halves of the slots are merged in one loop, the second from its binary-searched particle.
    """
    batch, n = weights.shape
    cdf[n] = np.inf
    for b in range(batch):
        scale = _row_scale(weights, b, n)
        acc = 0.0
        for i in range(n):
            acc += weights[b, i]
            cdf[i] = _scaled(acc, scale, i, n) / n
        # Two merges run interleaved (independent chains, so the core overlaps their latencies): the
        # slots below h from the first particle, those from h on from i0 = #{i : cdf_i <= s_h}.
        h = n // 2 if n >= 64 else 0
        i0 = 0
        if h > 0:
            lo, hi, x = 0, n, s[b, h]
            while lo < hi:
                mid = (lo + hi) // 2
                if cdf[mid] <= x:
                    lo = mid + 1
                else:
                    hi = mid
            i0 = lo
        i1, k1 = 0, 0
        i2, k2 = i0, h
        while k1 < h and k2 < n:
            t1 = cdf[i1] <= s[b, k1]  # i1 stops at i0: cdf[i0] > s[h] >= s[k1]
            out[b, k1] = i1
            i1 += t1
            k1 += 1 - t1
            t2 = cdf[i2] <= s[b, k2]
            out[b, k2] = i2
            i2 += t2
            k2 += 1 - t2
        # the tails: each merge's step again, alone, once the other merge has finished
        while k1 < h:
            t1 = cdf[i1] <= s[b, k1]
            out[b, k1] = i1
            i1 += t1
            k1 += 1 - t1
        while k2 < n:
            t2 = cdf[i2] <= s[b, k2]
            out[b, k2] = i2
            i2 += t2
            k2 += 1 - t2


@nb.njit(**_OPTS)
def stratified(weights, u, out, mark):
    """Stratified ancestors in two passes per row, with the twin's arithmetic for the counts.

    With ``v`` the scaled running sum and ``m = floor(v)``: ``C_i = m + [u_m < v - m]`` (m < N);
    the slots are filled from the marks as in :func:`systematic`.
    """
    batch, n = weights.shape
    for b in range(batch):
        scale = _row_scale(weights, b, n)
        mark[: n + 1] = 0
        prev = 0
        acc = 0.0
        for i in range(n):
            acc += weights[b, i]
            v = _scaled(acc, scale, i, n)
            mi = int(v)  # floor: v >= 0
            mi = mi if mi < n else n
            mi = mi if mi > 0 else 0  # never index outside u or mark: NaN or infinite weights give int() = INT_MIN
            j = mi if mi < n else n - 1
            c = mi + ((mi < n) & (u[b, j] < v - mi))
            mark[prev] = i
            prev = c
        _fill(out, b, mark, n)


@nb.njit(**_OPTS)
def residual_sizes(weights, scale, r_count, frac_sum):
    """Residual resampling, first pass: the number ``R`` of random offspring of each row.

    ``N W_i = weights[b, i] * scale[b]`` (``scale`` the twin's ``N / sum w``, summed by NumPy); the
    floors add up in float64 as the twin's running sum does, clipped to [0, N]: ``R = N - sum floor``.
    ``frac_sum[b]`` is the running sum of the fractional parts, the twin's ``cf[:, -1]``.
    """
    batch, n = weights.shape
    for b in range(batch):
        sb = scale[b]
        det = 0.0
        tot = 0.0
        # the floors' loop of residual() again: this pass needs only the sums, that one also writes per row
        for i in range(n):
            v = weights[b, i] * sb
            fl = math.floor(v)
            det += fl
            tot += v - fl
        d = int(det) if det < n else n
        d = d if d > 0 else 0  # NaN or infinite weights: never more than N random offspring
        r_count[b] = n - d
        frac_sum[b] = tot


@nb.njit(**_OPTS)
def residual(weights, scale, s, r_count, frac_sum, out, c01, mark):
    """Residual resampling, second pass: the floors and the merge of the sorted uniforms, per row.

    With ``v_i = N W_i``, the cumulative counts are ``C_i = sum_{j<=i} floor(v_j) + #{k < R : s_k <
    cf_i / cf_{N-1}}``, ``cf`` the running sum of the fractional parts (the twin's
    :func:`sgmc.ssm.resampling.residual_counts`, in the same order of operations; ``frac_sum`` from
    :func:`residual_sizes`). A first loop
    writes the floors' running sum (into the row of ``out``, which the ancestors overwrite only after
    the merge) and ``c01 = cf / cf_{N-1}``; the merge then walks the
    particles and the sorted uniforms ``s[b, :R]`` (both only increase) with no data-dependent
    branch: each step either takes a uniform or closes a particle's count and marks its first slot
    (``s[b, R]`` is set to infinity as a sentinel, so ``s`` has at least ``R + 1`` columns); the
    two halves of the particles are merged in one loop, the second from its binary-searched start. The
    slots are filled from the marks as in :func:`systematic`; slots past ``C_{N-1}`` get N, as in the
    twin. ``c01`` and ``mark`` are scratch of N + 1 entries.
    """
    batch, n = weights.shape
    for b in range(batch):
        sb = scale[b]
        tot = frac_sum[b]
        det = 0.0
        cf = 0.0
        # the floors' loop of residual_sizes() again, fused here with the writes of counts and c01
        for i in range(n):
            v = weights[b, i] * sb
            fl = math.floor(v)
            det += fl
            cf += v - fl
            c01[i] = cf / tot if tot > 0.0 else 1.0
            d = int(det) if det < n else n
            out[b, i] = d if d > 0 else 0  # NaN or infinite weights: counts stay in [0, N]
        rb = r_count[b]
        s[b, rb] = np.inf
        mark[: n + 1] = 0
        # Two merges run interleaved (independent chains, so the core overlaps their latencies): the
        # particles below h from the first uniform, those from h on from j0 = #{k : s_k < c01[h-1]}.
        h = n // 2 if n >= 64 else 0
        j0 = 0
        if h > 0:
            lo, hi, x = 0, rb, c01[h - 1]
            while lo < hi:
                mid = (lo + hi) // 2
                if s[b, mid] < x:
                    lo = mid + 1
                else:
                    hi = mid
            j0 = lo
        cut = out[b, h - 1] + j0 if h > 0 else 0
        cut = cut if cut < n else n  # C_{h-1}: the first merge marks only slots below it
        p1, i1, j1 = 0, 0, 0
        p2, i2, j2 = cut, h, j0
        # both merges' steps written out in one loop (not a helper) so the core overlaps their latencies
        while i1 < h and i2 < n:
            t1 = s[b, j1] < c01[i1]  # j1 stops at j0: s[j0] >= c01[h-1] >= c01[i1]
            c1 = out[b, i1] + j1
            mark[p1 if p1 < cut else n] = i1  # rewritten with the same value until particle i1 closes
            p1 = p1 if t1 else c1
            j1 += t1
            i1 += 1 - t1
            t2 = s[b, j2] < c01[i2]
            c2 = out[b, i2] + j2
            c2 = c2 if c2 < n else n
            mark[p2] = i2
            p2 = p2 if t2 else c2
            j2 += t2
            i2 += 1 - t2
        # the tails: each merge's step again, alone, once the other merge has finished
        while i1 < h:
            t1 = s[b, j1] < c01[i1]
            c1 = out[b, i1] + j1
            mark[p1 if p1 < cut else n] = i1
            p1 = p1 if t1 else c1
            j1 += t1
            i1 += 1 - t1
        while i2 < n:
            t2 = s[b, j2] < c01[i2]
            c2 = out[b, i2] + j2
            c2 = c2 if c2 < n else n
            mark[p2] = i2
            p2 = p2 if t2 else c2
            j2 += t2
            i2 += 1 - t2
        prev = p2
        _fill(out, b, mark, n)
        for k in range(prev, n):
            out[b, k] = n
