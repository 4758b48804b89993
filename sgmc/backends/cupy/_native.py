"""Host side of the native CUDA kernels: shapes, dtypes, launch sizes and the final reductions.

Each function here replaces an array-API twin elsewhere in sgmc (named in its docstring) and returns
the same values for the same inputs. They are written against a small runtime interface, ``rt.lib``
(an array module with NumPy's API: ``cupy`` on a GPU) and ``rt.kernel(file, name, defines)`` (a
launchable kernel), so that the tests can run this very code, with the very kernel source, on the
CPU. The backend binds them to a :class:`~sgmc.backends.cupy._compile.CupyRuntime`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._distinct import oversample

#: The functions the backend's native table offers, by their dispatch names.
KERNELS = (
    "resample_systematic",
    "resample_stratified",
    "resample_multinomial",
    "resample_residual",
    "stein_row_sums",
    "glm_grad_log_lik_sum",
    "glm_grad_log_lik_diff_sum",
    "stochvol_step",
    "subsample",
)

__all__ = ["NULL", "STEIN_MAX_DIM", "STEIN_MAX_DIMS", "KERNELS", "stein_max_dim", "stein_block", *KERNELS]

_THREADS = 256  # one-thread-per-element kernels

#: A null pointer argument. CuPy 13.0 to 13.6 pass ``None`` to a kernel as an undefined non-null
#: pointer, so an absent array is always the integer 0, never ``None``.
NULL = np.uint64(0)

#: Blocks that keep a large GPU busy whatever the card (two per SM of an H100, 132 SMs): kernels that
#: would launch one block per row spread rows over several blocks, or leave few rows to the twin.
#: A constant, not the device's SM count, so that results do not depend on the card.
SPREAD_BLOCKS = 264

#: Fewer rows than this leave SMs of a large GPU idle with one block per row (an H100 has 132).
FEW_ROWS = 132

#: Largest dimension the Stein pair kernels handle, per (kind, dtype): a row's features (and for the
#: per-coordinate kind its accumulators) live in registers, and above these d ptxas spills them to a
#: stack frame (``python -m sgmc.backends.cupy.report --stein`` shows where). Beyond the cap the
#: blocked array-API version runs, whose tiles are matrix products that suit a GPU at large d.
STEIN_MAX_DIMS: dict[tuple[str, str], int] = {
    ("joint", "float64"): 25,  # sm_90 spills from d = 26, sm_80 from 27
    ("sum", "float64"): 18,  # both spill from d = 19
    ("joint", "float32"): 32,  # fits at every d up to 32 (165 registers at 32)
    ("sum", "float32"): 31,  # both spill at d = 32
}

#: The largest of :data:`STEIN_MAX_DIMS` (dimensions the kernels are compiled for).
STEIN_MAX_DIM = max(STEIN_MAX_DIMS.values())

#: Subsets larger than this run the twin: the first-distinct kernel scans a row's earlier draws
#: for each draw, which costs about size**2 / 2 loads per row.
SUBSAMPLE_MAX_SIZE = 512

_SHARED_BUDGET = 40 * 1024  # bytes of static shared memory per block for the column tiles


def _suffix(dtype: Any) -> str:
    try:
        dt = np.dtype(dtype)
    except TypeError:  # a namespace's own dtype object, e.g. array_api_strict.float64
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
# resampling: twins sgmc.ssm.resampling.<scheme>_ancestors, names "resample_<scheme>"
#
# The kernels compute the twins' cumulative offspring counts with the twins' own floating-point
# operations and write the ancestors directly; the inputs they need (running sums of the weights,
# and for multinomial and residual the sorted uniforms) are formed here with the same operations as
# in the twins, so the integers agree exactly.


def _cumulative(rt: Any, weights: Any) -> Any:
    lib = rt.lib
    w = lib.asarray(weights, dtype=lib.float64)
    return lib.ascontiguousarray(lib.cumsum(w, axis=-1))


def _launch_rows(rt: Any, name: str, batch: int, n: int, *arrays: Any) -> Any:
    lib = rt.lib
    out = lib.empty((batch, n), dtype=lib.int64)
    k = rt.kernel("resample.cu", name)
    k(_grid(batch * n), (_THREADS,), (*arrays, out, np.int64(batch), np.int64(n)))
    return out


def resample_systematic(rt: Any, weights: Any, uniforms: Any) -> Any:
    """Native ``resample_systematic``: one pass over the running sums, one write of the ancestors."""
    lib = rt.lib
    cum = _cumulative(rt, weights)
    batch, n = cum.shape
    u = lib.ascontiguousarray(lib.reshape(lib.asarray(uniforms, dtype=lib.float64), (batch,)))
    return _launch_rows(rt, "resample_systematic", batch, n, cum, u)


def resample_stratified(rt: Any, weights: Any, uniforms: Any) -> Any:
    """Native ``resample_stratified``: one uniform per stratum, one pass."""
    lib = rt.lib
    cum = _cumulative(rt, weights)
    batch, n = cum.shape
    u = lib.ascontiguousarray(lib.asarray(uniforms, dtype=lib.float64))
    return _launch_rows(rt, "resample_stratified", batch, n, cum, u)


def sorted_uniforms(lib: Any, u: Any, n_valid: Any = None) -> Any:
    """The twin's order statistics (``sgmc.ssm.resampling.sorted_uniforms``), the same operations in CuPy."""
    b, n = u.shape
    k = lib.arange(1, n + 1, dtype=lib.float64)[None, :]
    terms = lib.log(1.0 - lib.asarray(u, dtype=lib.float64)) / k
    if n_valid is not None:
        valid = k <= lib.asarray(n_valid, dtype=lib.float64)[:, None]
        terms = lib.where(valid, terms, 0.0)
    s = lib.exp(lib.flip(lib.cumsum(lib.flip(terms, axis=1), axis=1), axis=1))
    return s if n_valid is None else lib.where(valid, s, 2.0)


def resample_multinomial(rt: Any, weights: Any, uniforms: Any) -> Any:
    """Native ``resample_multinomial``: order statistics by the twin's O(N) recursion, then one pass."""
    lib = rt.lib
    cum = _cumulative(rt, weights)
    batch, n = cum.shape
    last = lib.full((batch, 1), float(n), dtype=lib.float64)
    v = lib.concatenate([cum[:, :-1] * (float(n) / cum[:, -1:]), last], axis=1)
    s = lib.ascontiguousarray(sorted_uniforms(lib, uniforms))
    return _launch_rows(rt, "resample_multinomial", batch, n, lib.ascontiguousarray(v / float(n)), s)


def resample_residual(rt: Any, weights: Any, uniforms: Any) -> Any:
    """Native ``resample_residual``: deterministic copies plus multinomial on the fractional parts."""
    lib = rt.lib
    w = lib.asarray(weights, dtype=lib.float64)
    n = w.shape[-1]
    nw = w * (float(n) / lib.sum(w, axis=-1, keepdims=True))
    fl = lib.floor(nw)
    det = lib.clip(lib.cumsum(fl, axis=-1).astype(lib.int64), 0, n)
    r_count = n - det[:, -1]
    cf = lib.cumsum(nw - fl, axis=-1)
    tot = cf[:, -1:]
    cf01 = lib.where(tot > 0.0, cf / lib.where(tot > 0.0, tot, 1.0), 1.0)
    s = sorted_uniforms(lib, uniforms, r_count)
    batch = w.shape[0]
    return _launch_rows(rt, "resample_residual", batch, n, lib.ascontiguousarray(cf01), lib.ascontiguousarray(s),
                        lib.ascontiguousarray(det))


# ------------------------------------------------------------------------------------------------
# KSD: twin sgmc.diagnostics._stein.row_sums_twin, name "stein_row_sums"


def stein_max_dim(kind: str, dtype: Any) -> int:
    """Largest dimension the Stein kernel of ``kind`` ("joint" or "sum") runs in ``dtype``."""
    return STEIN_MAX_DIMS[(kind, "float64" if _suffix(dtype) == "f64" else "float32")]


def stein_block(dim: int) -> int:
    """Threads (rows and columns per tile) for dimension ``dim``: the three column tiles fit in shared memory.

    One module holds the float32 and the float64 kernels, so the float64 tiles decide.
    """
    bs = 128
    while bs > 32 and 3 * bs * dim * 8 > _SHARED_BUDGET:
        bs //= 2
    return bs


def stein_row_sums(rt: Any, xp: Any, st: Any, block: int, triangle: str) -> Any:
    """Native twin of :func:`sgmc.diagnostics._stein.row_sums`: the same sums, from one pair kernel.

    ``block`` sizes the twin's tiles (its memory); the kernel tiles by its own block of threads, so
    here it only matters for dimensions above :func:`stein_max_dim`, which return ``NotImplemented``
    (the caller runs the twin).
    """
    lib = rt.lib
    if st.pair is None or st.pair[0].shape[1] > stein_max_dim(st.kind, st.pair[0].dtype):
        return NotImplemented
    x, u, c2, tr, diag = st.pair
    n, d = x.shape
    dtype = x.dtype
    sfx = _suffix(dtype)
    bs = stein_block(d)
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
_GLM_BLOCK = 128


def glm_splits(chains: int, batch: int) -> int:
    """Blocks per chain: enough for :data:`SPREAD_BLOCKS` in all, at least one tile of data each."""
    want = max(1, -(-SPREAD_BLOCKS // max(chains, 1)))
    return max(1, min(want, -(-batch // _GLM_BLOCK)))


def _glm_launch(rt: Any, kind: str, X: Any, y: Any, theta: Any, centre: Any, idx: Any, weights: Any,
                param: float) -> Any:
    lib = rt.lib
    if (
        kind not in _GLM_KINDS
        or theta.ndim != 2
        or idx.ndim != 2
        or X.ndim != 2
        or theta.shape[0] != idx.shape[0]
        or theta.shape[1] != X.shape[1]
        or theta.dtype != X.dtype
        or y.dtype != X.dtype
        or (centre is not None and (centre.shape != theta.shape or centre.dtype != X.dtype))
        or (weights is not None and (weights.dtype != X.dtype or weights.shape != idx.shape))
        or X.dtype not in (lib.float32, lib.float64)
    ):
        return NotImplemented
    chains, batch = idx.shape
    dim = X.shape[1]
    if chains * dim == 0:
        return lib.zeros((chains, dim), dtype=X.dtype)
    splits = glm_splits(chains, batch)
    part = lib.empty((chains * splits, dim), dtype=lib.float64)
    k = rt.kernel("glm.cu", f"glm_grad_{_suffix(X.dtype)}", {"SGMC_BLOCK": _GLM_BLOCK})

    def c(a):
        # the model's data are contiguous from the start (made so when it is built or moved); this
        # copies only per-call arrays that arrive strided
        return a if a.flags.c_contiguous else lib.ascontiguousarray(a)

    k(
        (chains * splits,),
        (_GLM_BLOCK,),
        (
            c(X),
            c(y),
            c(theta),
            NULL if centre is None else c(centre),
            c(idx if idx.dtype == lib.int64 else idx.astype(lib.int64)),
            NULL if weights is None else c(weights),  # no per-call array of ones
            part,
            np.int64(batch),
            np.int64(dim),
            np.int64(splits),
            np.int32(_GLM_KINDS[kind]),
            X.dtype.type(param),
        ),
    )
    out = part if splits == 1 else lib.sum(lib.reshape(part, (chains, splits, dim)), axis=1)
    return out.astype(X.dtype, copy=False)


def glm_grad_log_lik_sum(
    rt: Any, kind: str, X: Any, y: Any, theta: Any, idx: Any, weights: Any, param: float
) -> Any:
    """``sum_b w_cb r(x_{idx_cb} . theta_c, y) x_{idx_cb}`` per chain: ``(chains, dim)`` in X's dtype.

    Returns ``NotImplemented`` for inputs the kernel does not take (mixed dtypes, other shapes), so
    that the caller runs its twin.
    """
    return _glm_launch(rt, kind, X, y, theta, None, idx, weights, param)


def glm_grad_log_lik_diff_sum(
    rt: Any, kind: str, X: Any, y: Any, theta: Any, centre: Any, idx: Any, weights: Any, param: float
) -> Any:
    """The control-variate difference ``sum_b w_cb (r(x . theta_c) - r(x . centre_c)) x``: one launch,
    one gather of each row, the two residuals subtracted in the model's dtype before the sum (as the
    twin ``_GLM._grad_diff_sum`` does), never two rounded sums subtracted.
    """
    return _glm_launch(rt, kind, X, y, theta, centre, idx, weights, param)


# ------------------------------------------------------------------------------------------------
# stochastic volatility bootstrap step: twin sgmc.ssm.fused.sv_bootstrap_step_twin, name "stochvol_step"


def stochvol_step(
    rt: Any, x_prev: Any, eps: Any, y: Any, phi: Any, sigma: Any, tau: Any, w_prev: Any = None
) -> tuple:
    """Native twin of :func:`sgmc.ssm.fused.sv_bootstrap_step`: ``(x, log_weight, weights, loglik)``.

    One block per filter: with fewer filters than :data:`FEW_ROWS` and many particles each, the
    twin's device-wide array operations keep the GPU busier, so ``NotImplemented`` sends the caller
    there.
    """
    lib = rt.lib
    dtype = x_prev.dtype
    batch, n = x_prev.shape
    if batch < FEW_ROWS and n > 64 * 256:
        return NotImplemented

    def c(a):
        return lib.ascontiguousarray(lib.asarray(a, dtype=dtype))

    x = lib.empty((batch, n), dtype=dtype)
    logw = lib.empty((batch, n), dtype=dtype)
    w = lib.empty((batch, n), dtype=dtype)
    loglik = lib.empty((batch,), dtype=lib.float64)
    bs = 256
    k = rt.kernel("stochvol.cu", f"stochvol_step_{_suffix(dtype)}", {"SGMC_BLOCK": bs})
    k(
        (max(1, batch),),
        (bs,),
        (c(x_prev), c(eps), NULL if w_prev is None else c(w_prev), c(y), c(phi), c(sigma), c(tau),
         x, logw, w, loglik, np.int64(n)),
    )
    return x, logw, w, loglik


# ------------------------------------------------------------------------------------------------
# minibatch indices: twin sgmc._sampling.subsample_twin, name "subsample"


def _first_distinct(rt: Any, draws: Any, size: int, n_data: int) -> Any:
    lib = rt.lib
    b, m = draws.shape
    out = lib.empty((b, size), dtype=lib.int64)
    bs = 128
    k = rt.kernel("subsample.cu", "subsample_first_distinct", {"SGMC_BLOCK": bs})
    k((max(1, b),), (bs,), (lib.ascontiguousarray(draws, dtype=lib.int64), out, np.int64(m), np.int64(size),
                            np.int64(n_data)))
    return out


def subsample(rt: Any, rng: Any, n_data: int, size: int, batch: int, replace: bool = False) -> Any:
    """Native twin of :func:`sgmc._sampling.subsample_twin`: the same draws, the same subsets.

    Sparse subsets without replacement run one kernel over the integer draws (the twin sorts
    twice); rows short of ``size`` distinct values continue their own draws in the kernel, as the
    twin's :func:`~sgmc._sampling.complete_rows` does, so the generator is consumed identically and
    nothing is read back to the host (no synchronisation). Dense subsets, draws with replacement,
    subsets larger than :data:`SUBSAMPLE_MAX_SIZE` (the kernel's scan is quadratic in the size) and
    rows too few to fill a large GPU with one block each return ``NotImplemented`` before drawing
    (the caller runs the twin).
    """
    if (replace or size == n_data or size * 4 > n_data or size > SUBSAMPLE_MAX_SIZE
            or (batch < FEW_ROWS and size > 128)):
        return NotImplemented
    m = oversample(size, n_data)
    return _first_distinct(rt, rng.integers(n_data, (batch, m)), size, n_data)
