"""CPU-native fast paths compiled with Numba, for the hot loops that NumPy cannot fuse.

Each function here is the native twin of an array-API function elsewhere in the library, registered
in the NumPy backend's ``native`` table under that function's name (:func:`sgmc._dispatch.native`):

* ``"glm_grad_log_lik_sum"`` and ``"glm_grad_log_lik_diff_sum"``: the minibatch gradient sums of the
  GLMs (:class:`sgmc.models.LogisticRegression`, :class:`sgmc.models.LinearRegression`), used from
  d = ``GLM_MIN_DIM`` on. Per chain and minibatch row, the row of X is read from memory once: its
  product with theta (and with the control-variate centre), the residual, and the row times the
  residual added to the chain's sum while the row is in cache. NumPy instead copies the rows out
  (``X[idx]``), then reads the copy twice.
* ``"stein_row_sums"``: the pair sums of the IMQ Stein kernel (:mod:`sgmc.diagnostics._stein`), one
  fused loop over pairs instead of matrix products and elementwise passes over tiles; the loop body
  is generated for each dimension so that the compiler vectorises across columns. It runs only at
  the small dimensions where it wins (``_numba_stein.STEIN_MAX_DIMS``); above them the tiled path
  runs: the twin's matrix products called from a compiled loop over cache-sized tiles, the powers
  of the kernel's quadratic form in one pass per tile instead of NumPy's separate passes.
* ``"resample_systematic"``, ``"resample_stratified"``: the running sum and the counts in one pass,
  the ancestors in a second (marks and a running maximum, no data-dependent branch);
  ``"resample_multinomial"``: the sorted uniforms (the twin's O(N) order statistics, no sort) merged
  against the running sum in one linear pass; ``"resample_residual"``: the floors in one pass, the
  remaining draws' sorted uniforms merged against the running sum of the fractional parts in a second.
* ``"bpmf_grad_log_lik_sum"`` and ``"bpmf_grad_log_lik_diff_sum"``: the minibatch gradient sums of
  :class:`sgmc.models.BPMF`, the gather of the U and V rows, their products and the scatter-add of
  the rows' gradients in one pass over the ratings (the twin gathers, multiplies and scatters in
  separate passes over copies, and its scatter sorts or counts over every cell of U and V).
* ``"hmm_messages"`` and ``"kalman_stats"``: the exact forward-backward and Kalman/RTS recursions of
  :mod:`sgmc.ssm`, compiled time loops (:mod:`sgmc.backends._numba_ssm`).
* :func:`first_distinct`: the first distinct values of rows of integer draws, found with a bitmap
  instead of a sort; the NumPy backend's ``"subsample"`` uses it for sparse subsets.

Numba is optional (``pip install "sgmc[cpu]"``). Without it, or with the environment variable
``SGMC_NATIVE=0``, nothing here is registered and the array-API twins run. The results equal the
twins' up to floating-point rounding (the sums are accumulated in a different order, in float64);
the per-datum arithmetic (one ``exp`` per datum for the logistic model) is the twins'.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from . import _numba_fused, _numba_fused_models, _numba_ssm, _numba_stein
from ._native_switch import ON as _ON
from ._native_switch import available, set_enabled
from ._numba_stein import STEIN_MAX_DIM

__all__ = ["available", "loaded", "natives", "set_enabled", "first_distinct", "STEIN_MAX_DIM"]

_GLM_KINDS = {"logistic": 0, "linear": 1}
#: Smallest dimension for which the compiled GLM loop runs. Below it NumPy's own path is as fast or
#: faster: the loop's exp is the scalar libm one, NumPy's is vectorised, and at small d the exp is
#: most of the work (docs/performance.md). Tests set it to 0 to check the loop at every size.
GLM_MIN_DIM = 32

_KERNELS: list = []


def loaded() -> bool:
    """Whether the Numba runtime is already in this process (a compiled path, or the caller, imported it).

    Paths whose gain is small next to the cost of loading Numba (about half a second and, with one
    kernel, 110-130 MiB of resident memory: docs/performance.md) run compiled only when it is.
    """
    return sys.modules.get("numba") is not None


def _jit() -> Any:
    """The compiled kernels' module, imported on first use (Numba's cache keeps the machine code on disk)."""
    if not _KERNELS:
        from . import _numba_kernels

        _KERNELS.append(_numba_kernels)
    return _KERNELS[0]


# -- GLM gradient sums -----------------------------------------------------------------------------


def _glm(kind: str, X, y, theta, centre, idx, weights, param: float, two: bool):
    if X.shape[1] < GLM_MIN_DIM or not _ON[0]:  # first: the common small-d case returns at once
        return NotImplemented
    if (
        kind not in _GLM_KINDS
        or not isinstance(X, np.ndarray)
        or X.ndim != 2
        or not X.flags.c_contiguous
        or theta.ndim != 2
        or idx.ndim != 2
        or theta.shape[0] != idx.shape[0]
        or X.dtype not in (np.float32, np.float64)
        or theta.dtype != X.dtype
        or y.dtype != X.dtype
        or (two and (centre.shape != theta.shape or centre.dtype != X.dtype))
        or (weights is not None and (weights.shape != idx.shape or weights.dtype != X.dtype))
    ):
        return NotImplemented
    k = _jit()
    chains = idx.shape[0]
    out = np.zeros((chains, X.shape[1]), dtype=np.float64)
    has_w = weights is not None
    w = np.ascontiguousarray(weights) if has_w else np.empty((chains, 0), dtype=X.dtype)
    # contiguous small inputs (a broadcast centre has stride 0), so that one compiled version serves
    theta = np.ascontiguousarray(theta)
    idx = np.ascontiguousarray(idx, dtype=np.int64)
    if two:
        k.glm_chains_diff(_GLM_KINDS[kind], X, y, theta, np.ascontiguousarray(centre), idx, w, has_w,
                          float(param), out)
    else:
        k.glm_chains(_GLM_KINDS[kind], X, y, theta, idx, w, has_w, float(param), out)
    return out if X.dtype == np.float64 else out.astype(X.dtype)


def glm_grad_log_lik_sum(kind: str, X, y, theta, idx, weights, param: float):
    """Native twin of ``_GLM._grad_log_lik_sum``: ``sum_b w_cb r(x_{idx_cb} . theta_c, y) x_{idx_cb}``."""
    return _glm(kind, X, y, theta, None, idx, weights, param, False)


def glm_grad_log_lik_diff_sum(kind: str, X, y, theta, centre, idx, weights, param: float):
    """Native twin of ``_GLM._grad_diff_sum``: the control-variate difference from one read of each row."""
    return _glm(kind, X, y, theta, centre, idx, weights, param, True)


# -- BPMF gradient sums -----------------------------------------------------------------------------


def _bpmf(users, items, ratings, theta, centre, idx, weights, alpha: float, n_users: int, n_items: int,
          d: int):
    if (
        not _ON[0]
        or not isinstance(theta, np.ndarray)
        or theta.ndim != 2
        or theta.dtype not in (np.float32, np.float64)
        or idx.ndim != 2
        or idx.shape[0] != theta.shape[0]
        or ratings.dtype != theta.dtype
        or (centre is not None and (centre.shape != theta.shape or centre.dtype != theta.dtype))
        or (weights is not None and (weights.shape != idx.shape or weights.dtype != theta.dtype))
    ):
        return NotImplemented
    chains = theta.shape[0]
    ou, om = n_users * d, (n_users + n_items) * d

    def blocks(t):
        t = np.ascontiguousarray(t)
        return t[:, :ou].reshape(chains, n_users, d), t[:, ou:om].reshape(chains, n_items, d)

    out = np.zeros((chains, theta.shape[1]), dtype=theta.dtype)
    gU, gV = blocks(out)
    U, V = blocks(theta)
    two = centre is not None
    Uc, Vc = blocks(centre) if two else (U, V)
    has_w = weights is not None
    w = np.ascontiguousarray(weights) if has_w else np.empty((chains, 0), dtype=theta.dtype)
    _jit().bpmf_chains(users, items, ratings, U, V, Uc, Vc, two, np.ascontiguousarray(idx, dtype=np.int64), w,
                       has_w, float(alpha), gU, gV)
    return out


def bpmf_grad_log_lik_sum(users, items, ratings, theta, idx, weights, alpha, n_users, n_items, d):
    """Native twin of ``BPMF.grad_log_lik_sum``: the likelihood gradient of a minibatch in one pass."""
    return _bpmf(users, items, ratings, theta, None, idx, weights, alpha, n_users, n_items, d)


def bpmf_grad_log_lik_diff_sum(users, items, ratings, theta, centre, idx, weights, alpha, n_users, n_items, d):
    """Native twin of ``BPMF.grad_log_lik_diff_sum``: both points' gradients from one pass over the ratings."""
    return _bpmf(users, items, ratings, theta, centre, idx, weights, alpha, n_users, n_items, d)


# -- minibatch indices -----------------------------------------------------------------------------


def first_distinct(draws: np.ndarray, size: int, n_data: int) -> Any:
    """The first ``size`` distinct values of each row of int64 ``draws`` in draw order, compiled.

    Returns ``(rows, ok)``: ``rows`` (batch, size) int64, filled where ``ok`` (batch,) is true (rows
    short of ``size`` distinct values are left for the caller to complete); or ``NotImplemented``
    when the compiled paths are off. One pass per row with a bitmap of the values seen (the twin
    :func:`sgmc._distinct.first_distinct` sorts). The NumPy backend's ``subsample`` calls it.
    """
    if not _ON[0]:
        return NotImplemented
    batch = draws.shape[0]
    rows = np.empty((batch, size), dtype=np.int64)
    ok = np.empty(batch, dtype=np.bool_)
    _jit().first_distinct(np.ascontiguousarray(draws, dtype=np.int64), size, n_data, rows, ok)
    return rows, ok


# -- resampling --------------------------------------------------------------------------------


def resample_systematic(weights: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Native twin of :func:`sgmc.ssm.resampling.systematic_ancestors`: one compiled pass per row."""
    if not _ON[0] or not isinstance(weights, np.ndarray) or weights.ndim != 2:
        return NotImplemented
    w = np.ascontiguousarray(weights, dtype=np.float64)
    uu = np.ascontiguousarray(np.broadcast_to(np.asarray(u, dtype=np.float64), (w.shape[0],)))
    out = np.empty(w.shape, dtype=np.int64)
    _jit().systematic(w, uu, out, np.empty(w.shape[1] + 1, dtype=np.int64))
    return out


def _rows(weights, u, full: bool):
    """Contiguous float64 weights (batch, N) and uniforms, or ``None`` for inputs the loops do not take."""
    if not _ON[0] or not isinstance(weights, np.ndarray) or weights.ndim != 2 or not isinstance(u, np.ndarray):
        return None
    if full and u.shape != weights.shape:
        return None
    return np.ascontiguousarray(weights, dtype=np.float64), np.ascontiguousarray(u, dtype=np.float64)


def resample_stratified(weights: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Native twin of :func:`sgmc.ssm.resampling.stratified_ancestors`: counts and ancestors in one pass."""
    got = _rows(weights, u, True)
    if got is None:
        return NotImplemented
    w, uu = got
    out = np.empty(w.shape, dtype=np.int64)
    _jit().stratified(w, uu, out, np.empty(w.shape[1] + 1, dtype=np.int64))
    return out


_RANKS: list = []


def _ranks(n: int) -> np.ndarray:
    """``1.0, 2.0, ..., n`` (float64, read-only), kept for the last ``n`` asked for."""
    got = _RANKS[0] if _RANKS else None
    if got is None or got.shape[0] != n:
        got = np.arange(1, n + 1, dtype=np.float64)
        got.flags.writeable = False
        _RANKS[:] = [got]
    return got


def sorted_uniforms(u: np.ndarray, r_count: np.ndarray | None = None, extra: int = 0) -> np.ndarray:
    """The twin's order statistics (:func:`sgmc.ssm.resampling.sorted_uniforms`), NumPy's same operations.

    ``exp`` of the reversed running sum of ``log(1 - u_k) / k``: the same ufuncs in the same order as
    the twin, so the same values to the last bit; no sort. With ``r_count`` (batch,) only the first
    ``max(r_count)`` columns are computed, and entries past ``r_count[b]`` of row ``b`` are left
    undefined (the twin sets them to 2; the merge never reads them). ``extra`` columns are appended,
    uninitialised (C-contiguous result).
    """
    if r_count is not None:
        top = int(r_count.max()) if r_count.size else 0
        u = u[:, :top]
    n = u.shape[1]
    k = _ranks(n)
    terms = np.subtract(1.0, u)
    np.log(terms, out=terms)  # in place: the twin's values, one array fewer to allocate
    terms /= k
    if r_count is not None and r_count.size > 1:
        terms[k[None, :] > r_count[:, None]] = 0.0  # the twin's zero terms: the valid sums are unchanged
    rev = np.cumsum(terms[:, ::-1], axis=1)[:, ::-1]
    if not extra:
        return np.exp(rev, out=rev)
    out = np.empty((u.shape[0], n + extra))
    np.exp(rev, out=out[:, :n])
    return out


def resample_multinomial(weights: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Native twin of :func:`sgmc.ssm.resampling.multinomial_ancestors`: one merge per row.

    The uniforms become order statistics without a sort (:func:`sorted_uniforms`), then one compiled
    pass merges them against the running sum of the weights and writes the ancestors (the twin
    searches the sorted uniforms for every particle and turns the counts into ancestors).
    """
    got = _rows(weights, u, True)
    if got is None:
        return NotImplemented
    w, uu = got
    out = np.empty(w.shape, dtype=np.int64)
    _jit().multinomial(w, np.ascontiguousarray(sorted_uniforms(uu)), out, np.empty(w.shape[1] + 1))
    return out


def resample_residual(weights: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Native twin of :func:`sgmc.ssm.resampling.residual_ancestors`: two compiled passes per row.

    The first pass counts the random offspring ``R`` (N minus the sum of the floors of ``N W_i``);
    the order statistics of the first ``R`` uniforms come from :func:`sorted_uniforms` (the twin's
    operations, on ``R`` columns instead of N); the second pass adds up the floors and merges the
    sorted uniforms against the running sum of the fractional parts, writing the ancestors. The
    scale ``N / sum w`` is NumPy's sum, as in the twin, so the floors are the same integers.
    """
    got = _rows(weights, u, True)
    if got is None:
        return NotImplemented
    w, uu = got
    batch, n = w.shape
    k = _jit()
    scale = float(n) / w.sum(axis=1)
    r_count = np.empty(batch, dtype=np.int64)
    frac_sum = np.empty(batch)
    k.residual_sizes(w, scale, r_count, frac_sum)
    s = sorted_uniforms(uu, r_count, extra=1)  # one column more, for the merge's sentinel
    out = np.empty(w.shape, dtype=np.int64)
    k.residual(w, scale, s, r_count, frac_sum, out, np.empty(n + 1), np.empty(n + 1, dtype=np.int64))
    return out


def natives() -> dict:
    """The native table entries this module provides (empty when Numba is missing or disabled).

    Every entry returns ``NotImplemented`` for a case it does not take (or while
    :func:`set_enabled` has turned the compiled paths off); the caller then runs the next path.
    """
    if not available():
        return {}
    return {
        **_numba_ssm.natives(),  # "hmm_messages", "kalman_stats": the exact recursions of sgmc.ssm
        **_numba_fused.natives(_ON),  # "glm_fused_block": blocks of GLM sampler iterations (sgmc.samplers._fused)
        **_numba_fused_models.natives(_ON),  # "bnn_fused_block", "bpmf_fused_block": the same for the BNN and BPMF
        "glm_grad_log_lik_sum": glm_grad_log_lik_sum,
        "glm_grad_log_lik_diff_sum": glm_grad_log_lik_diff_sum,
        "stein_row_sums": _numba_stein.stein_row_sums,
        "bpmf_grad_log_lik_sum": bpmf_grad_log_lik_sum,
        "bpmf_grad_log_lik_diff_sum": bpmf_grad_log_lik_diff_sum,
        "resample_systematic": resample_systematic,
        "resample_stratified": resample_stratified,
        "resample_multinomial": resample_multinomial,
        "resample_residual": resample_residual,
    }
