"""The IMQ Stein kernel's pair sums as one compiled loop (the Numba twin of ``_stein.row_sums_twin``).

For rows x_i (centred), u_i = A x_i and scores s_i, with v = u_i - u_j and B = c^2 + (x_i - x_j) . v,

    k0(i, j) = B^beta s_i . s_j + 2 beta B^(beta-1) [(s_j - s_i) . v - tr A] - 4 beta (beta - 1) B^(beta-2) |v|^2

(kind "joint"; kind "sum" keeps the terms per coordinate). Row i returns
r_i = k0(i, i) + 2 sum_{j<i} k0(i, j), accumulated in float64. The loop body is generated for each
dimension d, with the d coordinates unrolled, so that the loop over columns j is innermost and the
compiler vectorises it (the column data are stored transposed, coordinate by coordinate; NumPy's
error model, so that the division carries no zero check and vectorises too). Blocks of rows walk
the earlier columns in cache-sized tiles, and the blocks are handed to the threads from both ends
so that the triangle's work is balanced. Each pair costs one square root and one division
(beta = -1/2) and 8d + 13 further flops for the joint kind: the loop wins over the twin's matrix
products only at small d. Above ``STEIN_MAX_DIMS`` the tiled path (:func:`stein_tiles`) runs instead:
the twin's matrix products called from a compiled loop over tiles, with the powers of B in one
pass per tile (for beta = -1/2, 1/sqrt(B) from the single-precision estimate and two Newton steps,
no division and no square root) that also adds up the row sums the features' column of ones needs,
so that the products run on column counts the BLAS handles at full speed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._native_switch import ON as _ON

__all__ = ["stein_row_sums", "STEIN_MAX_DIM"]

#: Largest dimension the loop is generated for (a row lives in registers).
STEIN_MAX_DIM = 32
#: Largest dimension, per kind, at which the pair loop runs; above it the tiled path runs (the twin's
#: matrix products by the BLAS, the elementwise steps in one compiled pass per tile). The loop pays
#: every one of the 8 d + 13 flops of a pair, the products run near the core's peak: measured on one
#: pinned core (CPU time, n = 2000 and 20000, d = 1..6), the loop is 1.5-3x slower than the tiled
#: path from d = 2 on, equal at d = 1 for the joint kind and 3-10 % faster at d = 1 for the sum kind.
STEIN_MAX_DIMS = {"joint": 0, "sum": 1}
#: For problems the tiled path declines (float32), the loop still runs up to these dimensions, where
#: it was measured faster than the twin.
STEIN_LOOP_DIMS_NO_TILES = {"joint": 4, "sum": 2}

_KERNELS: dict = {}
_FASTMATH = {"reassoc", "contract", "nsz"}  # reorders the sums over columns (rounding only)


def _pair(kind: str, d: int, half: bool, ind: str, j: str, weight: str) -> list:
    """Statements that add ``weight * k0(i, j)`` to the accumulators."""
    ms = range(d)
    out = [f"{ind}v{m} = u{m} - uT[{m}, {j}]" for m in ms]
    out.append(f"{ind}b = c2 + " + " + ".join(f"(x{m} - xT[{m}, {j}]) * v{m}" for m in ms))
    out.append(f"{ind}inv = 1.0 / b")
    out.append(f"{ind}w = math.sqrt(inv)" if half else f"{ind}w = b ** beta")
    out.append(f"{ind}w1 = w * inv")
    out.append(f"{ind}w2 = w1 * inv")
    if kind == "joint":
        out.append(f"{ind}ss = " + " + ".join(f"s{m} * sT[{m}, {j}]" for m in ms))
        out.append(f"{ind}e = " + " + ".join(f"(sT[{m}, {j}] - s{m}) * v{m}" for m in ms))
        out.append(f"{ind}vv = " + " + ".join(f"v{m} * v{m}" for m in ms))
        out.append(f"{ind}a0 += {weight} * (w * ss + b2 * w1 * (e - tr) + b4 * w2 * vv)")
    else:
        for m in ms:
            out.append(
                f"{ind}a{m} += {weight} * (w * s{m} * sT[{m}, {j}] + b2 * w1 * ((sT[{m}, {j}] - s{m}) * v{m}"
                f" - g{m}) + b4 * w2 * v{m} * v{m})"
            )
    return out


def _source(kind: str, d: int, half: bool) -> str:
    """The loop over row blocks and column tiles, with the pair body for dimension ``d`` unrolled.

    Rows come in blocks of ``rb`` (handed to the threads from both ends, 0, last, 1, last - 1, ...,
    so that the triangle's work is balanced); a block walks the columns below it in tiles of ``tile``
    columns, and every row of the block reads the tile while it is in cache (``3 d tile`` doubles),
    instead of streaming all earlier columns from memory for each row.
    """
    ms = range(d)
    accs = ["a0"] if kind == "joint" else [f"a{m}" for m in ms]
    lines = [
        "def kern(xT, uT, sT, diag, c2, beta, tr, rows, rb, tile):",
        "    n = xT.shape[1]",
        "    b2 = 2.0 * beta",
        "    b4 = -4.0 * beta * (beta - 1.0)",
        "    nblk = (n + rb - 1) // rb",
        "    for q in nb.prange(nblk):",
        "        h = int(q) // 2",
        "        blk = h if int(q) % 2 == 0 else nblk - 1 - h",
        "        i0 = blk * rb",
        "        i1 = min(n, i0 + rb)",
        "        for i in range(i0, i1):",
    ]
    lines += [f"            rows[i, {k}] = 0.0" for k in range(len(accs))]
    lines += [
        "        for j0 in range(0, i1 - 1, tile):",
        "            for i in range(max(i0, j0 + 1), i1):",
        "                j1 = min(j0 + tile, i)",
    ]
    ind = " " * 16
    for m in ms:
        lines.append(f"{ind}x{m} = xT[{m}, i]; u{m} = uT[{m}, i]; s{m} = sT[{m}, i]; g{m} = diag[{m}]")
    lines += [f"{ind}{a} = 0.0" for a in accs]
    # the columns j0 <= j < min(j0 + tile, i): a loop without branches, which the compiler vectorises
    lines.append(f"{ind}for j in range(j0, j1):")
    lines += _pair(kind, d, half, " " * 20, "j", "2.0")
    lines += [f"{ind}rows[i, {k}] += {a}" for k, a in enumerate(accs)]
    # the diagonal j = i once per row
    lines.append("        for i in range(i0, i1):")
    ind = " " * 12
    for m in ms:
        lines.append(f"{ind}x{m} = xT[{m}, i]; u{m} = uT[{m}, i]; s{m} = sT[{m}, i]; g{m} = diag[{m}]")
    lines += [f"{ind}{a} = 0.0" for a in accs]
    lines += _pair(kind, d, half, ind, "i", "1.0")
    lines += [f"{ind}rows[i, {k}] += {a}" for k, a in enumerate(accs)]
    return "\n".join(lines) + "\n"


#: Rows per block of the pair loop.
ROW_BLOCK = 64
#: Bytes of one column tile (3 d doubles per column), sized to stay in the core's level-2 cache.
TILE_BYTES = 192 * 1024


def _tile(d: int) -> int:
    return max(64, TILE_BYTES // (24 * d))


def _kernel(kind: str, d: int, half: bool) -> Any:
    key = (kind, d, half)
    k = _KERNELS.get(key)
    if k is None:
        import math

        import numba as nb

        scope: dict = {"nb": nb, "math": math}
        exec(compile(_source(kind, d, half), f"<sgmc stein {kind} d={d}>", "exec"), scope)  # noqa: S102
        k = nb.njit(parallel=True, fastmath=_FASTMATH, nogil=True, error_model="numpy")(scope["kern"])
        _KERNELS[key] = k
    return k


# -- the tiled path: the twin's matrix products, one compiled pass over each tile ---------------------

#: Rows per block and columns per tile of the tiled path: two float64 tiles of 128 x 256 (512 KiB)
#: stay in the core's level-2 cache between the products that read and write them.
TILE_ROWS = 128
TILE_COLS = 256


#: Fast reciprocal square root (beta = -1/2): where every B of the problem lies in [RSQRT_RANGE[0],
#: RSQRT_RANGE[1]], 1/sqrt(B) starts from the single-precision estimate and two Newton steps in double
#: precision bring it to rounding (relative error below 1e-15), replacing a division and a square root.
RSQRT_RANGE = (1e-30, 1e30)


def _power_lines(mode: str, ind: str) -> list:
    """Statements that turn ``b`` into ``w`` = B^beta and ``inv`` = 1/B."""
    if mode == "rsqrt":
        return [
            f"{ind}y = np.float64(np.float32(1.0) / math.sqrt(np.float32(b)))",
            f"{ind}hb = 0.5 * b",
            f"{ind}y = y * (1.5 - hb * y * y)",
            f"{ind}w = y * (1.5 - hb * y * y)",
            f"{ind}inv = w * w",
        ]
    if mode == "half":
        return [f"{ind}inv = 1.0 / b", f"{ind}w = math.sqrt(inv)"]
    return [f"{ind}inv = 1.0 / b", f"{ind}w = inv ** nb_"]


def _pass_lines(mode: str, full2: bool, weighted: bool) -> list:
    """One pass over a tile: W = B^beta in place of B, W1 = W / B, W2 = W1 / B (or only its row sums),
    and the row sums of W1 and W2 (the contractions with the features' column of ones)."""
    ind = " " * 20
    out = ["            for p in range(r):", "                a1 = 0.0", "                a2 = 0.0",
           "                for q in range(m):", f"{ind}b = B[p, q]"]
    out += _power_lines(mode, ind)
    if weighted:  # the diagonal square of the lower triangle: weight 2 below the diagonal, 1 on it, 0 above
        out.append(f"{ind}w *= 2.0 if q < p else (1.0 if q == p else 0.0)")
    out += [f"{ind}w1 = w * inv", f"{ind}w2 = w1 * inv", f"{ind}B[p, q] = w", f"{ind}W1[p, q] = w1"]
    if full2:
        out.append(f"{ind}W2[p, q] = w2")
    out += [f"{ind}a1 += w1", f"{ind}a2 += w2",
            "                h1[i0 + p, d1] += wgt * a1",
            "                h2[i0 + p, d2] += wgt * a2"]
    return out


def _tiled_source(mode: str, full2: bool) -> str:
    """The tile loop: B by one product, the powers of B in one pass, the contractions by products.

    Per tile of rows [i0, i1) and columns [j0, j1): ``B = fb[rows] @ gb[cols].T`` (BLAS), then one
    pass turns B into W = B^beta in place and writes W1 = W / B (and W2 = W1 / B where ``full2``),
    adding the row sums of W1 and W2 to the last column of ``h1`` and ``h2``; ``W @ S``, ``W1 @ G1``
    (and ``W2 @ G2``) are BLAS products, with ``G1``, ``G2`` the column features without their last
    column of ones, added to the rows' contractions with the tile's weight. The twin
    (:func:`sgmc.diagnostics._stein._contract`) runs the same products with the ones column, and the
    elementwise steps in separate NumPy passes over the tile. ``lower`` selects the per-row sums
    (columns below the block, twice, and the diagonal square with weights 2 below the diagonal, 1 on
    it, 0 above); otherwise the upper triangle (the square once, the columns after it twice).
    ``mode``: ``"rsqrt"`` or ``"half"`` (beta = -1/2, with or without the fast reciprocal square
    root), ``"pow"`` (any beta).
    """
    lines = [
        "def tiles(fb, gb, S, G1, G2, beta, lower, block, chunk, h0, h1, h2, buf0, buf1, buf2, t0, t1, t2):",
        "    n = fb.shape[0]",
        "    d0 = S.shape[1]",
        "    d1 = G1.shape[1]",
        "    d2 = G2.shape[1]",
        "    nb_ = -beta",
        "    for i0 in range(0, n, block):",
        "        i1 = min(n, i0 + block)",
        "        r = i1 - i0",
        "        fbr = fb[i0:i1]",
        "        j0 = 0 if lower else i0",
        "        while j0 < n:",
        "            diag = j0 == i0",
        "            if lower:",
        "                j1 = i1 if diag else min(i0, j0 + chunk)",
        "            else:",
        "                j1 = i1 if diag else min(n, j0 + chunk)",
        "            m = j1 - j0",
        "            wgt = 1.0 if diag else 2.0",
        "            B = buf0[: r * m].reshape((r, m))",
        "            W1 = buf1[: r * m].reshape((r, m))",
        "            W2 = buf2[: r * m].reshape((r, m))" if full2 else "            W2 = buf2[:0].reshape((0, 0))",
        "            np.dot(fbr, gb[j0:j1].T, B)",
        "            if lower and diag:",
    ]
    lines += ["    " + ln for ln in _pass_lines(mode, full2, True)]
    lines.append("            else:")
    lines += ["    " + ln for ln in _pass_lines(mode, full2, False)]
    lines += [
        "            T0 = t0[: r * d0].reshape((r, d0))",
        "            np.dot(B, S[j0:j1], T0)",
        "            T1 = t1[: r * d1].reshape((r, d1))",
        "            np.dot(W1, G1[j0:j1], T1)",
        "            if d2 > 0:",
        "                T2 = t2[: r * d2].reshape((r, d2))",
        "                np.dot(W2, G2[j0:j1], T2)",
        "            for p in range(r):",
        "                for k in range(d0):",
        "                    h0[i0 + p, k] += wgt * T0[p, k]",
        "                for k in range(d1):",
        "                    h1[i0 + p, k] += wgt * T1[p, k]",
        "                for k in range(d2):",
        "                    h2[i0 + p, k] += wgt * T2[p, k]",
        "            if lower and diag:",
        "                break",
        "            j0 = j1",
        "            if lower and j0 >= i0:",
        "                j0 = i0",
    ]
    return "\n".join(lines) + "\n"


def _tiled_kernel(mode: str, full2: bool) -> Any:
    key = ("tiled", mode, full2)
    k = _KERNELS.get(key)
    if k is None:
        import math

        import numba as nb

        scope: dict = {"np": np, "math": math}
        exec(compile(_tiled_source(mode, full2), f"<sgmc stein tiles {mode}>", "exec"), scope)  # noqa: S102
        # reassoc: the row sums and the tile's elementwise loop vectorise (rounding only); arcp and afn
        # (fast mode only) let the single-precision 1/sqrt be the processor's estimate instruction
        flags = _FASTMATH | {"arcp", "afn"} if mode == "rsqrt" else _FASTMATH
        k = nb.njit(fastmath=flags, nogil=True, error_model="numpy")(scope["tiles"])
        _KERNELS[key] = k
    return k


def _c64(a: Any) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float64)


def _mode(st: Any) -> str:
    """``"rsqrt"`` where beta = -1/2 and every B lies in :data:`RSQRT_RANGE`, else ``"half"`` or ``"pow"``.

    B = c^2 + (x - y)^T A (x - y) lies between c^2 and c^2 + 4 max_i x_i^T A x_i, as
    q(x - y) <= 2 q(x) + 2 q(y) for a positive semi-definite quadratic form q.
    """
    if not st.half:
        return "pow"
    c2 = float(st.pair[2])
    xu_max = float(np.max(st.gbt[-1])) if st.gbt.shape[1] else 0.0  # the last row of gbt is x_i^T A x_i
    top = c2 + 4.0 * max(xu_max, 0.0)
    return "rsqrt" if RSQRT_RANGE[0] <= c2 and top <= RSQRT_RANGE[1] else "half"


def stein_tiles(st: Any, triangle: str) -> Any:
    """The pair sums by the tiled path (float64 problems on NumPy arrays), or ``NotImplemented``."""
    if not isinstance(st.s, np.ndarray) or st.s.dtype != np.float64:
        return NotImplemented
    s = _c64(st.s)
    n, d = s.shape
    full2 = st.g2 is not None
    g1 = _c64(st.g1)
    k0, k1 = d, g1.shape[1]
    k2 = st.g2.shape[1] if full2 else 1
    # the features' last column is ones (make_stein's layout): its contractions are the row sums the pass adds up
    if not (np.all(g1[:, -1] == 1.0) and (not full2 or np.all(st.g2[:, -1] == 1.0))):
        return NotImplemented
    G1 = _c64(g1[:, :-1])
    G2 = _c64(st.g2[:, :-1]) if full2 else np.empty((n, 0))
    h0, h1, h2 = np.zeros((n, k0)), np.zeros((n, k1)), np.zeros((n, k2))
    rb, cb = TILE_ROWS, max(TILE_ROWS, TILE_COLS)
    _tiled_kernel(_mode(st), full2)(
        _c64(st.fb), _c64(st.gbt.T), s, G1, G2, float(st.beta), triangle == "lower", rb, TILE_COLS, h0, h1, h2,
        np.empty(rb * cb), np.empty(rb * cb), np.empty(rb * cb if full2 else 0), np.empty(rb * k0),
        np.empty(rb * k1), np.empty(rb * k2))
    # the twin's _finish, for all rows at once
    if st.kind == "joint":
        rows = np.vecdot(s, h0) + np.vecdot(_c64(st.f1), h1)
        rows += st.k2 * h2[:, 0] if st.f2 is None else np.vecdot(_c64(st.f2), h2)
    else:
        u, su, uu = st.u, st.su, st.uu
        b2 = 2.0 * st.beta
        b4 = -4.0 * st.beta * (st.beta - 1.0)
        t1 = u * h1[:, :d] + s * h1[:, d: 2 * d] - h1[:, 2 * d: 3 * d] - su * h1[:, 3 * d:]
        t2 = uu * h2[:, 2 * d:] - 2.0 * u * h2[:, :d] + h2[:, d: 2 * d]
        rows = s * h0 + b2 * t1 + b4 * t2
    return rows.sum(axis=0) if triangle == "upper" else rows


def stein_row_sums(xp: Any, st: Any, block: int, triangle: str) -> Any:
    """Native twin of :func:`sgmc.diagnostics._stein.row_sums` on NumPy arrays (float64 sums).

    ``block`` sizes the twin's tiles only. Up to ``STEIN_MAX_DIMS[kind]`` the pair loop runs; above
    it the tiled path (float64 problems; others return ``NotImplemented``, and the caller runs the
    twin).
    """
    if not _ON[0] or st.pair is None or not isinstance(st.pair[0], np.ndarray):
        return NotImplemented
    d = st.pair[0].shape[1]
    if d > min(STEIN_MAX_DIM, STEIN_MAX_DIMS.get(st.kind, 0)):
        got = stein_tiles(st, triangle)
        if got is not NotImplemented or d > min(STEIN_MAX_DIM, STEIN_LOOP_DIMS_NO_TILES.get(st.kind, 0)):
            return got
    x, u, c2, tr, diag = st.pair
    n, d = x.shape
    width = 1 if st.kind == "joint" else d

    def t(a):
        return np.ascontiguousarray(np.asarray(a, dtype=np.float64).T)

    rows = np.empty((n, width), dtype=np.float64)
    _kernel(st.kind, d, bool(st.half))(t(x), t(u), t(st.s), np.asarray(diag, dtype=np.float64), float(c2),
                                       float(st.beta), float(tr), rows, ROW_BLOCK, _tile(d))
    if triangle == "upper":
        total = rows.sum(axis=0)
        return total[0] if st.kind == "joint" else total
    return rows[:, 0] if st.kind == "joint" else rows
