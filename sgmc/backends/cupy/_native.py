"""Host side of the native CUDA kernels: shapes, dtypes, launch sizes and the final reductions.

Each function here replaces an array-API twin elsewhere in sgmc (named in its docstring) and returns
the same values for the same inputs. They are written against a small runtime interface, ``rt.lib``
(an array module with NumPy's API: ``cupy`` on a GPU) and ``rt.kernel(file, name, defines)`` (a
launchable kernel), so that the tests can run this very code, with the very kernel source, on the
CPU. The backend binds them to a :class:`~sgmc.backends.cupy._compile.CupyRuntime`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = [
    "STEIN_MAX_DIM",
    "stein_block",
    "resample_systematic",
    "resample_stratified",
    "resample_multinomial",
    "resample_residual",
    "stein_row_sums",
    "glm_grad_log_lik_sum",
    "stochvol_propagate_weight",
]

_THREADS = 256  # one-thread-per-element kernels

#: Largest dimension the Stein pair kernel handles (a row's features live in registers); beyond it
#: the blocked array-API version runs, whose tiles are matrix products that suit a GPU at large d.
STEIN_MAX_DIM = 32

_SHARED_BUDGET = 40 * 1024  # bytes of static shared memory per block for the column tiles


def _suffix(dtype: Any) -> str:
    dt = np.dtype(str(dtype).rsplit(".", 1)[-1])
    if dt == np.float64:
        return "f64"
    if dt == np.float32:
        return "f32"
    msg = f"the CUDA kernels take float32 or float64 arrays; got {dt}"
    raise TypeError(msg)


def _grid(count: int, threads: int = _THREADS) -> tuple[int]:
    return (max(1, -(-count // threads)),)


# ------------------------------------------------------------------------------------------------
# resampling: twins in sgmc.ssm.resampling, names "resample_<scheme>"


def _cdf_and_last(rt: Any, weights: Any) -> tuple[Any, Any]:
    lib = rt.lib
    w = lib.ascontiguousarray(weights)
    n = w.shape[1]
    cdf = lib.ascontiguousarray(lib.cumsum(w, axis=1))
    # positions past the rounded total go to the row's last particle of positive weight
    last = (n - 1) - lib.argmax(w[:, ::-1] > 0, axis=1)
    return cdf, lib.ascontiguousarray(last.astype(lib.int64))


def _search_sorted(rt: Any, weights: Any, cdf: Any, last: Any, pos: Any) -> Any:
    lib = rt.lib
    batch, n = cdf.shape
    m = pos.shape[1]
    out = lib.empty((batch, m), dtype=lib.int64)
    k = rt.kernel("resample.cu", f"resample_sorted_{_suffix(cdf.dtype)}")
    k(_grid(batch * n), (_THREADS,), (cdf, lib.ascontiguousarray(pos, dtype=cdf.dtype), last, out,
                                      np.int64(batch), np.int64(n), np.int64(m)))
    return out


def resample_systematic(rt: Any, weights: Any, uniforms: Any) -> Any:
    """Systematic resampling, positions ``(k + u) / N``: one kernel pass, no positions array."""
    lib = rt.lib
    cdf, last = _cdf_and_last(rt, weights)
    batch, n = cdf.shape
    u = lib.ascontiguousarray(lib.reshape(uniforms, (batch,)), dtype=cdf.dtype)
    out = lib.empty((batch, n), dtype=lib.int64)
    k = rt.kernel("resample.cu", f"resample_systematic_{_suffix(cdf.dtype)}")
    k(_grid(batch * n), (_THREADS,), (cdf, u, last, out, np.int64(batch), np.int64(n)))
    return out


def resample_stratified(rt: Any, weights: Any, uniforms: Any) -> Any:
    """Stratified resampling, positions ``(k + u_k) / N`` (sorted by construction)."""
    lib = rt.lib
    cdf, last = _cdf_and_last(rt, weights)
    n = cdf.shape[1]
    pos = (lib.arange(n, dtype=cdf.dtype)[None, :] + uniforms.astype(cdf.dtype, copy=False)) / cdf.dtype.type(n)
    return _search_sorted(rt, weights, cdf, last, pos)


def resample_multinomial(rt: Any, weights: Any, uniforms: Any) -> Any:
    """Multinomial resampling: the row's uniforms are sorted, then searched like the other schemes."""
    lib = rt.lib
    cdf, last = _cdf_and_last(rt, weights)
    pos = lib.sort(uniforms.astype(cdf.dtype, copy=False), axis=1)
    return _search_sorted(rt, weights, cdf, last, pos)


def resample_residual(rt: Any, weights: Any, uniforms: Any) -> Any:
    """Residual resampling: ``floor(N w_j)`` copies of each particle, then multinomial on the rest."""
    lib = rt.lib
    w = lib.ascontiguousarray(weights)
    batch, n = w.shape
    scaled = w * w.dtype.type(n)
    counts = lib.floor(scaled)
    rest = scaled - counts
    counts = lib.ascontiguousarray(counts.astype(lib.int64))
    start = lib.ascontiguousarray(lib.cumsum(counts, axis=1) - counts)
    out = lib.empty((batch, n), dtype=lib.int64)
    k = rt.kernel("resample.cu", "resample_expand")
    k(_grid(batch * n), (_THREADS,), (counts, start, out, np.int64(batch), np.int64(n), np.int64(n)))
    kept = counts.sum(axis=1)
    left = n - kept  # draws left for the multinomial part of each row
    # multinomial part on the residual weights, from the row's first `left` uniforms, sorted
    cdf, last = _cdf_and_last(rt, rest)
    big = lib.asarray(2.0, dtype=cdf.dtype)  # sorts after every uniform
    cols = lib.arange(n)[None, :]
    u = lib.where(cols < left[:, None], uniforms.astype(cdf.dtype, copy=False), big)
    pos = lib.sort(u, axis=1)
    extra = _search_sorted(rt, rest, cdf, last, pos)
    # row b: out[b, kept_b:] = extra[b, :left_b]
    src = lib.clip(cols - kept[:, None], 0, n - 1)
    tail = lib.take_along_axis(extra, src, axis=1)
    return lib.where(cols >= kept[:, None], tail, out)


# ------------------------------------------------------------------------------------------------
# KSD: twin sgmc.diagnostics._stein.row_sums_twin, name "stein_row_sums"


def stein_block(dim: int, itemsize: int) -> int:
    """Threads (rows and columns per tile) for dimension ``dim``: the three column tiles fit in shared memory."""
    bs = 128
    while bs > 32 and 3 * bs * dim * itemsize > _SHARED_BUDGET:
        bs //= 2
    return bs


def stein_row_sums(rt: Any, xp: Any, st: Any, block: int, triangle: str) -> Any:
    """Native twin of :func:`sgmc.diagnostics._stein.row_sums`: the same sums, from one pair kernel."""
    from ...diagnostics import _stein

    lib = rt.lib
    if st.pair is None or st.pair[0].shape[1] > STEIN_MAX_DIM:
        return _stein.row_sums_twin(xp, st, block, triangle)
    x, u, c2, tr, diag = st.pair
    n, d = x.shape
    dtype = x.dtype
    sfx = _suffix(dtype)
    bs = stein_block(d, dtype.itemsize)
    tiles = -(-n // bs)
    width = 1 if st.kind == "joint" else d
    rows = lib.empty((n, width), dtype=lib.float64)
    partial = lib.empty((tiles, width), dtype=lib.float64)
    scalar = dtype.type
    k = rt.kernel("stein.cu", f"stein_{st.kind}_{sfx}", {"SGMC_DIM": d, "SGMC_BLOCK": bs})
    args = (
        lib.ascontiguousarray(x),
        lib.ascontiguousarray(u),
        lib.ascontiguousarray(st.s),
        lib.ascontiguousarray(diag.astype(dtype, copy=False)),
        rows,
        partial,
        np.int64(n),
        scalar(c2),
        scalar(st.beta),
        scalar(tr),
        np.int32(1 if st.half else 0),
    )
    k((tiles,), (bs,), args)
    if triangle == "upper":
        total = partial.sum(axis=0)
        return total[0] if st.kind == "joint" else total
    return rows[:, 0] if st.kind == "joint" else rows


# ------------------------------------------------------------------------------------------------
# GLM minibatch gradient: twin sgmc.models.glm._GLM._grad_log_lik_sum, name "glm_grad_log_lik_sum"

_GLM_KINDS = {"logistic": 0, "linear": 1}


def glm_grad_log_lik_sum(
    rt: Any, kind: str, X: Any, y: Any, theta: Any, idx: Any, weights: Any, param: float
) -> Any:
    """``sum_b w_cb r(x_{idx_cb} . theta_c, y) x_{idx_cb}`` per chain: ``(chains, dim)`` in X's dtype.

    Returns ``NotImplemented`` for inputs the kernel does not take (mixed dtypes, other shapes), so
    that the caller runs its twin.
    """
    lib = rt.lib
    if (
        theta.ndim != 2
        or idx.ndim != 2
        or theta.shape[0] != idx.shape[0]
        or theta.dtype != X.dtype
        or y.dtype != X.dtype
        or (weights is not None and (weights.dtype != X.dtype or weights.shape != idx.shape))
        or X.dtype not in (lib.float32, lib.float64)
    ):
        return NotImplemented
    chains, batch = idx.shape
    dim = X.shape[1]
    if weights is None:
        weights = lib.ones(idx.shape, dtype=X.dtype)  # r * 1 == r exactly
    out = lib.empty((chains, dim), dtype=lib.float64)
    bs = 128
    k = rt.kernel("glm.cu", f"glm_grad_{_suffix(X.dtype)}", {"SGMC_BLOCK": bs})
    k(
        (max(1, chains),),
        (bs,),
        (
            lib.ascontiguousarray(X),
            lib.ascontiguousarray(y),
            lib.ascontiguousarray(theta),
            lib.ascontiguousarray(idx.astype(lib.int64, copy=False)),
            lib.ascontiguousarray(weights),
            out,
            np.int64(batch),
            np.int64(dim),
            np.int32(_GLM_KINDS[kind]),
            X.dtype.type(param),
        ),
    )
    return out.astype(X.dtype, copy=False)


def stochvol_propagate_weight(*args: Any, **kwargs: Any) -> Any:  # filled in below
    raise NotImplementedError
