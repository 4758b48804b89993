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
products only at small d, and declines above ``STEIN_MAX_DIMS``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._native_switch import ON as _ON

__all__ = ["stein_row_sums", "STEIN_MAX_DIM"]

#: Largest dimension the loop is generated for (a row lives in registers).
STEIN_MAX_DIM = 32
#: Largest dimension, per kind, at which the loop runs; above it the array-API twin is faster and the
#: loop declines. The twin's pair terms are matrix products (the BLAS runs them near the core's peak)
#: plus a few elementwise passes, while the loop pays every one of the 8 d + 13 flops of a pair, so
#: it wins only where d is small (asv_benchmarks/native_cpu.py measures both; docs/performance.md).
STEIN_MAX_DIMS = {"joint": 4, "sum": 2}

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


def stein_row_sums(xp: Any, st: Any, block: int, triangle: str) -> Any:
    """Native twin of :func:`sgmc.diagnostics._stein.row_sums` on NumPy arrays (float64 sums).

    ``block`` sizes the twin's tiles only. Dimensions above ``STEIN_MAX_DIMS[kind]`` (and problems
    without the pair features) return ``NotImplemented``, and the caller runs the twin.
    """
    if (not _ON[0] or st.pair is None or not isinstance(st.pair[0], np.ndarray)
            or st.pair[0].shape[1] > min(STEIN_MAX_DIM, STEIN_MAX_DIMS.get(st.kind, 0))):
        return NotImplemented
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
