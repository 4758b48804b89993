"""Blocked evaluation of the inverse multiquadric (IMQ) Langevin Stein kernel.

The IMQ kernel is k(x, y) = (c^2 + (x-y)^T A (x-y))^beta with A = Lambda^{-1} the inverse
preconditioner. With scores s = grad log pi and B = c^2 + (x-y)^T A (x-y), the Langevin Stein kernel
of coordinate j is (Gorham and Mackey 2017; Nemeth and Fearnhead 2021, eq. 13 with grad U replaced by
-grad log pi)

    k0_j(x, y) = s_j s'_j B^beta + 2 beta B^(beta-1) [(s'_j - s_j) (A(x-y))_j - A_jj]
                 - 4 beta (beta-1) B^(beta-2) (A(x-y))_j^2,

and the joint kernel is k0 = sum_j k0_j. Every term is a power of B times a quantity that is
bilinear in features of x and of y, so a block of rows against a tile of columns needs one matrix
product for B, three elementwise passes for the powers (for beta = -1/2 one reciprocal, one square
root and one product) and one matrix product per power that contracts the kernel tile with the
column features. No n x n or n x n x d array is ever formed: the largest temporary is one
``block x chunk`` tile.

This module is private: :mod:`sgmc.diagnostics.ksd` and :mod:`sgmc.diagnostics.thinning` validate
their inputs and call it.
"""

from __future__ import annotations

import math
import numbers
import warnings
from typing import Any, NamedTuple

from .._array_api import (
    Array,
    Namespace,
    array_namespace,
    as_float_array,
    check_finite,
    check_real_dtype,
    device_of,
    is_array,
    is_floating,
)
from .._dispatch import dispatch

__all__ = [
    "MEDIAN_SUBSAMPLE",
    "prepare_inputs",
    "check_c_beta",
    "check_kind",
    "check_block",
    "resolve_preconditioner",
    "Stein",
    "make_stein",
    "row_sums",
    "row_sums_twin",
    "kernel_column",
    "kernel_diagonal",
    "accumulator_dtype",
]

#: Largest number of points the median heuristic looks at (an equispaced subsample, as in
#: Riabiz et al. 2022's reference implementation).
MEDIAN_SUBSAMPLE = 1000

_DEFAULT_BLOCK = 128
_TILE_ELEMENTS = 1 << 15  # columns per tile = max(block, _TILE_ELEMENTS // block): 256 KiB per float64 tile
_PRECONDITIONERS = ("id", "med", "sclmed", "smpcov")


# --------------------------------------------------------------------------------------------
# validation


def prepare_inputs(
    samples: Any, scores: Any, *, chains_first: bool = False
) -> tuple[Namespace, Array, Array, int]:
    """Check ``samples``/``scores`` and return ``(xp, x, s, chains)`` with ``x``, ``s`` of shape (N, d).

    A (chains, n, d) input is flattened chain by chain (``chains_first=True``) or iteration by
    iteration (rows ordered (iteration, chain)); ``chains`` is 1 for 2-d input.
    """
    for value, name in ((samples, "samples"), (scores, "scores")):
        if not is_array(value):
            msg = (
                f"`{name}` must be an array (NumPy, CuPy, torch or array-api-strict); "
                f"got {type(value).__name__}"
            )
            raise TypeError(msg)
    xp = array_namespace(samples, scores, names=("samples", "scores"))
    for value, name in ((samples, "samples"), (scores, "scores")):
        if value.ndim not in (2, 3):
            msg = f"`{name}` must have shape (n, d) or (chains, n, d); got shape {tuple(value.shape)}"
            raise ValueError(msg)
    if tuple(samples.shape) != tuple(scores.shape):
        msg = (
            f"`scores` must have the shape of `samples` (one gradient of log pi per sample); got "
            f"samples {tuple(samples.shape)} and scores {tuple(scores.shape)}"
        )
        raise ValueError(msg)
    if any(k == 0 for k in samples.shape):
        msg = f"`samples` must hold at least one point of dimension >= 1; got shape {tuple(samples.shape)}"
        raise ValueError(msg)
    for value, name in ((samples, "samples"), (scores, "scores")):
        if xp.isdtype(value.dtype, "complex floating") or not (
            xp.isdtype(value.dtype, "numeric") or value.dtype == xp.bool
        ):
            msg = f"`{name}` must be real-valued; got dtype {value.dtype}"
            raise TypeError(msg)
    for value, name in ((samples, "samples"), (scores, "scores")):
        check_real_dtype(xp, value.dtype, name)
    floats = [v.dtype for v in (samples, scores) if is_floating(xp, v.dtype)]
    dtype = xp.result_type(*floats) if floats else xp.float64
    x = as_float_array(xp, samples, dtype, "samples")
    s = as_float_array(xp, scores, dtype, "scores")
    check_finite(xp, x, "samples")
    check_finite(xp, s, "scores")
    chains = 1
    if x.ndim == 3:
        chains, n, d = (int(k) for k in x.shape)
        if not chains_first:
            x = xp.permute_dims(x, (1, 0, 2))
            s = xp.permute_dims(s, (1, 0, 2))
        x = xp.reshape(x, (chains * n, d))
        s = xp.reshape(s, (chains * n, d))
    return xp, x, s, chains


def _real_number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        msg = f"`{name}` must be a real number; got {type(value).__name__}"
        raise TypeError(msg)
    value = float(value)
    if not math.isfinite(value):
        msg = f"`{name}` must be finite; got {value}"
        raise ValueError(msg)
    return value


def check_c_beta(c: Any, beta: Any) -> tuple[float, float]:
    """Validate the IMQ parameters: c > 0 and beta < 0 (a warning unless -1 < beta < 0)."""
    c = _real_number(c, "c")
    beta = _real_number(beta, "beta")
    if c <= 0:
        msg = f"`c` must be positive (the kernel is (c^2 + r^2)^beta); got {c}"
        raise ValueError(msg)
    if beta >= 0:
        msg = f"`beta` must be negative (beta in (-1, 0) detects non-convergence); got {beta}"
        raise ValueError(msg)
    if beta <= -1:
        msg = (
            f"`beta` = {beta} <= -1: the KSD is still a valid discrepancy, but it is only known to "
            "detect non-convergence for beta in (-1, 0) (Gorham and Mackey 2017, Theorem 8)"
        )
        warnings.warn(msg, UserWarning, stacklevel=3)
    return c, beta


def check_kind(kind: Any) -> str:
    if not isinstance(kind, str) or kind not in ("sum", "joint"):
        msg = f"`kind` must be 'sum' (review eq. 13) or 'joint'; got {kind!r}"
        raise ValueError(msg)
    return kind


def check_block(block: Any, n: int) -> int:
    """Rows per block: ``None`` picks a default; otherwise a positive int (capped at ``n``)."""
    if block is None:
        return max(1, min(n, _DEFAULT_BLOCK))
    if isinstance(block, bool) or not isinstance(block, numbers.Integral):
        msg = f"`block` must be None or a positive integer; got {type(block).__name__}"
        raise TypeError(msg)
    if block < 1:
        msg = f"`block` must be a positive integer; got {block}"
        raise ValueError(msg)
    return max(1, min(n, int(block)))


def accumulator_dtype(xp: Namespace, dtype: Any, device: Any) -> Any:
    """float64 where the namespace offers it on ``device``, else ``dtype``."""
    if dtype == xp.float64:
        return dtype
    try:
        offered = xp.__array_namespace_info__().dtypes(device=device, kind="real floating")
    except (AttributeError, TypeError):
        return dtype
    return xp.float64 if "float64" in offered else dtype


# --------------------------------------------------------------------------------------------
# preconditioners


def _subsample(xp: Namespace, x: Array, m: int) -> Array:
    """Rows floor(i (n-1)/(m-1)), i = 0..m-1, when n > m (equispaced, deterministic); else all rows."""
    n = int(x.shape[0])
    if n <= m:
        return x
    step = (n - 1) / (m - 1)
    rows = [int(i * step) for i in range(m - 1)] + [n - 1]
    idx = xp.asarray(rows, dtype=xp.int64, device=device_of(x))
    return xp.take(x, idx, axis=0)


def median_distance(xp: Namespace, x: Array) -> Array:
    """Median Euclidean distance over the distinct pairs of (a subsample of) the rows of ``x``.

    Uses at most :data:`MEDIAN_SUBSAMPLE` equispaced rows; exact for smaller inputs. Returns a 0-d
    array; the median of an even number of distances is the mean of the two middle ones.
    """
    sub = _subsample(xp, x, MEDIAN_SUBSAMPLE)
    m = int(sub.shape[0])
    if m < 2:
        msg = f"the median heuristic needs at least 2 samples; got {m}"
        raise ValueError(msg)
    dev = device_of(sub)
    sub = sub - xp.mean(sub, axis=0)
    sq = xp.sum(sub * sub, axis=1)
    d2 = sq[:, None] + sq[None, :] - 2.0 * (sub @ xp.matrix_transpose(sub))
    dist = xp.sqrt(xp.clip(d2, min=0.0))
    ar = xp.arange(m, device=dev)
    upper = ar[:, None] < ar[None, :]
    values = xp.sort(dist[upper])
    p = m * (m - 1) // 2
    if p % 2 == 1:
        return values[p // 2]
    return 0.5 * (values[p // 2 - 1] + values[p // 2])


class Preconditioner(NamedTuple):
    """A = Lambda^{-1}: either ``scalar`` (A = scalar I) or ``matrix`` (d, d)."""

    scalar: float | None
    matrix: Array | None

    def trace(self, d: int, xp: Namespace) -> float:
        if self.scalar is not None:
            return self.scalar * d
        return float(xp.sum(xp.linalg.diagonal(self.matrix)))


def resolve_preconditioner(xp: Namespace, x: Array, spec: Any) -> Preconditioner:
    """Turn ``preconditioner`` into A = Lambda^{-1} for samples ``x`` (N, d)."""
    n, d = (int(k) for k in x.shape)
    dtype, dev = x.dtype, device_of(x)
    if spec is None or (isinstance(spec, str) and spec == "id"):
        return Preconditioner(1.0, None)
    if isinstance(spec, str):
        if spec not in _PRECONDITIONERS:
            msg = (
                f"`preconditioner` must be None, one of {list(_PRECONDITIONERS)} or a (d, d) array; "
                f"got {spec!r}"
            )
            raise ValueError(msg)
        if spec in ("med", "sclmed"):
            med = float(median_distance(xp, x))
            if not med > 0:
                msg = f"`preconditioner={spec!r}` needs distinct samples; the median pairwise distance is 0"
                raise ValueError(msg)
            a = 1.0 / (med * med)
            if spec == "sclmed":
                a *= math.log(min(MEDIAN_SUBSAMPLE, n))
                if not a > 0:
                    msg = "`preconditioner='sclmed'` needs at least 2 samples"
                    raise ValueError(msg)
            return Preconditioner(a, None)
        # smpcov: Lambda = sample covariance (ddof = 1)
        if n < 2:
            msg = f"`preconditioner='smpcov'` needs at least 2 samples; got {n}"
            raise ValueError(msg)
        xc = x - xp.mean(x, axis=0)
        cov = (xp.matrix_transpose(xc) @ xc) / (n - 1)
        return Preconditioner(None, _spd_inverse(xp, cov, "the sample covariance (preconditioner='smpcov')"))
    if not is_array(spec):
        msg = (
            f"`preconditioner` must be None, one of {list(_PRECONDITIONERS)} or an array; "
            f"got {type(spec).__name__}"
        )
        raise TypeError(msg)
    array_namespace(x, spec, names=("samples", "preconditioner"))
    lam = as_float_array(xp, spec, dtype, "preconditioner")
    check_finite(xp, lam, "preconditioner")
    if tuple(lam.shape) == (d,):
        if not bool(xp.all(lam > 0)):
            msg = "`preconditioner` given as a vector is the diagonal of Lambda and must be positive"
            raise ValueError(msg)
        eye = xp.eye(d, dtype=dtype, device=dev)
        return Preconditioner(None, eye / lam[None, :])
    if tuple(lam.shape) != (d, d):
        msg = f"`preconditioner` must have shape ({d}, {d}) or ({d},); got {tuple(lam.shape)}"
        raise ValueError(msg)
    scale = float(xp.max(xp.abs(lam)))
    eye = xp.eye(d, dtype=dtype, device=dev)
    if bool(xp.all(lam == lam[0, 0] * eye)) and float(lam[0, 0]) > 0:
        return Preconditioner(1.0 / float(lam[0, 0]), None)
    if not bool(xp.all(xp.abs(lam - xp.matrix_transpose(lam)) <= 1e-8 * scale)):
        msg = "`preconditioner` must be a symmetric positive definite (d, d) matrix; it is not symmetric"
        raise ValueError(msg)
    return Preconditioner(None, _spd_inverse(xp, lam, "`preconditioner`"))


def _spd_inverse(xp: Namespace, m: Array, what: str) -> Array:
    m = 0.5 * (m + xp.matrix_transpose(m))
    ev = xp.linalg.eigvalsh(m)
    if not bool(ev[0] > 0) or not bool(ev[-1] < ev[0] * 1e15):
        msg = (
            f"{what} must be positive definite and well conditioned; its eigenvalues span "
            f"[{float(ev[0])}, {float(ev[-1])}]"
        )
        raise ValueError(msg)
    inv = xp.linalg.inv(m)
    return 0.5 * (inv + xp.matrix_transpose(inv))


# --------------------------------------------------------------------------------------------
# the blocked engine


class Stein(NamedTuple):
    """Features of one problem, built once by :func:`make_stein` (all arrays have N rows)."""

    kind: str
    beta: float
    half: bool  # beta == -1/2: powers from one reciprocal and one square root
    fb: Array  # (N, d+2) row features of B
    gbt: Array  # (d+2, N) column features of B
    s: Array  # (N, d) scores
    f1: Array  # row features contracted with W1 @ g1
    g1: Array
    f2: Array | None  # general preconditioner: row features contracted with W2 @ g2
    g2: Array | None
    k2: float  # isotropic joint: coefficient of sum W2
    u: Array | None  # sum kind: A x
    su: Array | None  # sum kind: s * A x + diag(A)
    uu: Array | None  # sum kind: (A x)^2
    # (x, A x, c^2, tr A, diag A) for pair kernels that form differences directly (native paths)
    pair: tuple | None = None


def make_stein(
    xp: Namespace, x: Array, s: Array, pre: Preconditioner, c: float, beta: float, kind: str
) -> Stein:
    """Precompute the O(N d) features used by every tile."""
    n, d = (int(k) for k in x.shape)
    dtype, dev = x.dtype, device_of(x)
    one = xp.ones((n, 1), dtype=dtype, device=dev)
    # the kernel depends on x - y only, and centring keeps |x|^2 + |y|^2 - 2 x.y accurate
    x = x - xp.mean(x, axis=0)
    u = pre.scalar * x if pre.scalar is not None else x @ pre.matrix
    xu = xp.sum(x * u, axis=1)[:, None]
    fb = xp.concat([x, xu + c * c, one], axis=1)
    # (d+2, N) with contiguous rows, so that a column tile is a plain strided block; the product with
    # -2 I is the portable way to get a row-major transpose
    ut = (-2.0 * xp.eye(d, dtype=dtype, device=dev)) @ xp.matrix_transpose(u)
    gbt = xp.concat([ut, xp.matrix_transpose(one), xp.matrix_transpose(xu)], axis=0)
    tr = pre.trace(d, xp)
    b2 = 2.0 * beta
    b4 = -4.0 * beta * (beta - 1.0)
    f2 = g2 = None
    k2 = 0.0
    if kind == "joint":
        su = xp.sum(s * u, axis=1)[:, None]
        const = -tr
        if pre.scalar is not None:
            # |A(x-y)|^2 = a^2 |x-y|^2 = a (B - c^2): the W2 term splits into a W1 term and a constant
            const = const + b4 * pre.scalar / b2
            k2 = -b4 * pre.scalar * c * c
        else:
            uu = xp.sum(u * u, axis=1)[:, None]
            f2 = b4 * xp.concat([-2.0 * u, one, uu], axis=1)
            g2 = xp.concat([u, uu, one], axis=1)
        f1 = b2 * xp.concat([u, s, one, const - su], axis=1)
        g1 = xp.concat([s, u, -su, one], axis=1)
        pair = (x, u, c * c, tr, _diagonal(xp, pre, d, dtype, dev))
        return Stein(kind, beta, beta == -0.5, fb, gbt, s, f1, g1, f2, g2, k2, None, None, None, pair)
    diag = _diagonal(xp, pre, d, dtype, dev)[None, :]
    g1 = xp.concat([s, u, s * u, one], axis=1)
    g2 = xp.concat([u, u * u, one], axis=1)
    pair = (x, u, c * c, tr, diag[0, :])
    return Stein(kind, beta, beta == -0.5, fb, gbt, s, None, g1, None, g2, 0.0, u, s * u + diag, u * u, pair)


def _diagonal(xp: Namespace, pre: Preconditioner, d: int, dtype: Any, dev: Any) -> Array:
    if pre.scalar is not None:
        return xp.full((d,), pre.scalar, dtype=dtype, device=dev)
    return xp.linalg.diagonal(pre.matrix)


def _contract(
    xp: Namespace, st: Stein, fb_rows: Array, ranges: list, weight: Array | None, acc: Any
) -> tuple:
    """Sum over column ranges of the tile contractions (W @ G0, W1 @ G1, W2 term), in dtype ``acc``.

    For each tile: B from one product, 1/B, W = B^beta, W1 = W / B, then W @ s, W1 @ g1 and either
    the row sums of W2 = W1 / B (isotropic joint kind) or W2 @ g2.
    """
    h0 = h1 = h2 = None
    cast = st.s.dtype != acc
    for cols in ranges:
        # two live tiles: 1/B, and W updated in place to W1 (and W2); B^beta = (1/B)^(-beta)
        inv = 1.0 / (fb_rows @ st.gbt[:, cols])
        w = xp.sqrt(inv) if st.half else inv ** (-st.beta)
        if weight is not None:
            w *= weight
        t0 = w @ st.s[cols, :]
        w *= inv
        t1 = w @ st.g1[cols, :]
        if st.g2 is None:
            t2 = xp.vecdot(w, inv, axis=-1)
        else:
            w *= inv
            t2 = w @ st.g2[cols, :]
        if cast:
            t0, t1, t2 = xp.astype(t0, acc), xp.astype(t1, acc), xp.astype(t2, acc)
        if h0 is None:
            h0, h1, h2 = t0, t1, t2
        else:
            h0, h1, h2 = h0 + t0, h1 + t1, h2 + t2
    return h0, h1, h2


def _finish(xp: Namespace, st: Stein, rows: slice, h: tuple, acc: Any) -> Array:
    """Per-row sums of k0 (kind 'joint', shape (b,)) or k0_j (kind 'sum', shape (b, d)) from contractions."""
    h0, h1, h2 = h

    def row(a: Array) -> Array:
        a = a[rows, :]
        return a if a.dtype == acc else xp.astype(a, acc)

    s = row(st.s)
    if st.kind == "joint":
        out = xp.vecdot(s, h0, axis=-1) + xp.vecdot(row(st.f1), h1, axis=-1)
        if st.f2 is None:
            return out + st.k2 * h2
        return out + xp.vecdot(row(st.f2), h2, axis=-1)
    d = int(s.shape[1])
    u, su, uu = row(st.u), row(st.su), row(st.uu)
    b2 = 2.0 * st.beta
    b4 = -4.0 * st.beta * (st.beta - 1.0)
    t1 = u * h1[:, :d] + s * h1[:, d : 2 * d] - h1[:, 2 * d : 3 * d] - su * h1[:, 3 * d :]
    t2 = uu * h2[:, 2 * d :] - 2.0 * u * h2[:, :d] + h2[:, d : 2 * d]
    return s * h0 + b2 * t1 + b4 * t2


def _chunk(block: int) -> int:
    return max(block, _TILE_ELEMENTS // block)


def row_sums(xp: Namespace, st: Stein, block: int, triangle: str) -> Any:
    """Blocked pair sums of the Stein kernel.

    ``triangle="upper"`` returns the V-statistic sum over all ordered pairs (a 0-d array for kind
    'joint', a (d,) array for kind 'sum'), in the accumulator dtype, evaluating only j >= i.
    ``triangle="lower"`` returns per-row sums r_i = k0(i, i) + 2 sum_{j < i} k0(i, j) with shape
    (N,) or (N, d), whose cumulative sums are the prefix V-statistics.

    A backend may replace this function with a native kernel registered as ``"stein_row_sums"``
    (:func:`sgmc._dispatch.native`), called with the same arguments; :func:`row_sums_twin` is its
    twin.
    """
    return dispatch(xp, "stein_row_sums", row_sums_twin)(xp, st, block, triangle)


def row_sums_twin(xp: Namespace, st: Stein, block: int, triangle: str) -> Any:
    """The array-API evaluation of :func:`row_sums`, which defines its result."""
    n = int(st.s.shape[0])
    dtype, dev = st.s.dtype, device_of(st.s)
    acc = accumulator_dtype(xp, dtype, dev)
    chunk = _chunk(block)
    total = None
    parts = []
    for i0 in range(0, n, block):
        i1 = min(n, i0 + block)
        rows = slice(i0, i1)
        fb_rows = st.fb[rows, :]
        if triangle == "upper":
            # the square [i0, i1)^2 holds both triangles of a symmetric kernel: weight 1; the rest twice
            h = _contract(xp, st, fb_rows, [rows], None, acc)
            tail = [slice(j0, min(n, j0 + chunk)) for j0 in range(i1, n, chunk)]
        else:
            ar = xp.arange(i1 - i0, device=dev)
            diff = ar[:, None] - ar[None, :]
            weight = 2.0 * xp.astype(diff > 0, dtype) + xp.astype(diff == 0, dtype)
            h = _contract(xp, st, fb_rows, [rows], weight, acc)
            tail = [slice(j0, min(i0, j0 + chunk)) for j0 in range(0, i0, chunk)]
        if tail:
            ht = _contract(xp, st, fb_rows, tail, None, acc)
            h = tuple(a + 2.0 * b for a, b in zip(h, ht))
        part = _finish(xp, st, rows, h, acc)
        if triangle == "upper":
            part = xp.sum(part, axis=0)
            total = part if total is None else total + part
        else:
            parts.append(part)
    if triangle == "upper":
        return total
    return xp.concat(parts, axis=0)


# --------------------------------------------------------------------------------------------
# single kernel columns (Stein thinning)


def kernel_diagonal(xp: Namespace, st_s: Array, pre: Preconditioner, c: float, beta: float) -> Array:
    """k0(x_i, x_i) = |s_i|^2 c^(2 beta) - 2 beta tr(A) c^(2 beta - 2) for every row."""
    d = int(st_s.shape[1])
    tr = pre.trace(d, xp)
    c2 = c * c
    return xp.sum(st_s * st_s, axis=1) * c2**beta - 2.0 * beta * tr * c2 ** (beta - 1.0)


def kernel_column(
    xp: Namespace,
    x: Array,
    u: Array,
    s: Array,
    xj: Array,
    uj: Array,
    sj: Array,
    tr: float,
    c: float,
    beta: float,
) -> Array:
    """Joint Stein kernel k0(x_i, y) of every row i against one point y (``xj``, ``uj``, ``sj``: shape (1, d)).

    ``u`` = x A, computed once; differences are taken directly, so no cancellation occurs.
    """
    r = x - xj
    ur = u - uj
    b = c * c + xp.vecdot(r, ur, axis=-1)
    inv = 1.0 / b
    w = xp.sqrt(inv) if beta == -0.5 else b**beta
    w1 = w * inv
    t1 = xp.vecdot(s, sj, axis=-1)
    e = 2.0 * beta * (xp.vecdot(sj - s, ur, axis=-1) - tr)
    t4 = -4.0 * beta * (beta - 1.0) * xp.vecdot(ur, ur, axis=-1)
    return w * t1 + w1 * (e + t4 * inv)
