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
  is generated for each dimension so that the compiler vectorises across columns.
* ``"resample_systematic"``: systematic resampling, the running sum, counts and ancestors in one pass.
* ``"bpmf_grad_log_lik_sum"`` and ``"bpmf_grad_log_lik_diff_sum"``: the minibatch gradient sums of
  :class:`sgmc.models.BPMF`, the gather of the U and V rows, their products and the scatter-add of
  the rows' gradients in one pass over the ratings (the twin gathers, multiplies and scatters in
  separate passes over copies, and its scatter sorts or counts over every cell of U and V).
* ``"hmm_messages"`` and ``"kalman_stats"``: the exact forward-backward and Kalman/RTS recursions of
  :mod:`sgmc.ssm`, compiled time loops (:mod:`sgmc.backends._numba_ssm`).
* ``"subsample"``: minibatch indices without replacement, the first distinct values of the integer
  draws found with a bitmap instead of a sort.

Numba is optional (``pip install "sgmc[cpu]"``). Without it, or with the environment variable
``SGMC_NATIVE=0``, nothing here is registered and the array-API twins run. The results equal the
twins' up to floating-point rounding (the sums are accumulated in a different order, in float64);
the per-datum arithmetic (one ``exp`` per datum for the logistic model) is the twins'.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import numpy as np

from . import _numba_fused

__all__ = ["available", "natives", "set_enabled"]

_GLM_KINDS = {"logistic": 0, "linear": 1}
#: Smallest dimension for which the compiled GLM loop runs. Below it NumPy's own path is as fast or
#: faster: the loop's exp is the scalar libm one, NumPy's is vectorised, and at small d the exp is
#: most of the work (docs/performance.md). Tests set it to 0 to check the loop at every size.
GLM_MIN_DIM = 32
#: Largest dimension of the fused Stein loop (its row lives in registers); beyond it the twin runs.
STEIN_MAX_DIM = 32


def _env_enabled() -> bool:
    return os.environ.get("SGMC_NATIVE", "1").strip().lower() not in ("0", "false", "no", "off")


_ON = [_env_enabled()]


def set_enabled(on: bool) -> bool:
    """Turn the compiled paths on or off in this process (benchmarks, tests); returns the old setting.

    Off, every entry returns what its array-API twin returns, by running the twin (the GLM entries
    return ``NotImplemented``, which makes the model run its own code).
    """
    old = _ON[0]
    _ON[0] = bool(on)
    return old


def available() -> bool:
    """Whether Numba is installed and the natives are enabled (``SGMC_NATIVE`` is not ``0``)."""
    if not _env_enabled():
        return False
    # find_spec, not import: Numba loads (about half a second) only when a native first runs
    return importlib.util.find_spec("numba") is not None


_KERNELS: list = []



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


def subsample(rng: Any, n_data: int, size: int, batch: int, replace: bool = False) -> np.ndarray:
    """Native twin of :func:`sgmc._sampling.subsample_twin`: the same draws, the same subsets.

    Sparse subsets without replacement keep the first ``size`` distinct values of each row of
    integer draws with one compiled pass and a bitmap (the twin sorts); rows short of ``size``
    distinct values continue their own draws as in the twin, so the generator is consumed identically.
    Draws with replacement and dense subsets run the NumPy backend's own path.
    """
    if replace or size * 4 > n_data or not _ON[0]:
        from . import _numpy  # imported here: _numpy imports this module

        return _numpy.subsample(rng, n_data, size, batch, replace)
    from .._sampling import complete_rows, oversample

    gen = rng.numpy_generator
    m = oversample(size, n_data)
    k = _jit()
    rows = np.empty((batch, size), dtype=np.int64)
    ok = np.empty(batch, dtype=np.bool_)
    draws = gen.integers(0, n_data, size=batch * m, dtype=np.int64).reshape(batch, m)
    k.first_distinct(draws, size, n_data, rows, ok)
    if not ok.all():  # rows short of `size` distinct values continue their own draws, as in the twin
        rows[~ok] = complete_rows(draws[~ok], size, n_data)
    return rows


# -- resampling --------------------------------------------------------------------------------


def resample_systematic(weights: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Native twin of :func:`sgmc.ssm.resampling.systematic_ancestors`: one compiled pass per row."""
    w = np.ascontiguousarray(weights, dtype=np.float64)
    uu = np.ascontiguousarray(np.broadcast_to(np.asarray(u, dtype=np.float64), (w.shape[0],)))
    if not _ON[0]:
        from ._numpy import resample_systematic as numpy_systematic

        return numpy_systematic(weights, u)
    out = np.empty(w.shape, dtype=np.int64)
    _jit().systematic(w, uu, out)
    return out


def natives() -> dict:
    """The native table entries this module provides (empty when Numba is missing or disabled)."""
    if not available():
        return {}
    from ._numba_ssm import natives as ssm_natives
    from ._numba_stein import stein_row_sums

    return {
        **ssm_natives(_ON),  # "hmm_messages", "kalman_stats": the exact recursions of sgmc.ssm
        **_numba_fused.natives(_ON),  # "glm_fused_block": blocks of GLM sampler iterations (sgmc.samplers._fused)
        "subsample": subsample,
        "glm_grad_log_lik_sum": glm_grad_log_lik_sum,
        "glm_grad_log_lik_diff_sum": glm_grad_log_lik_diff_sum,
        "stein_row_sums": stein_row_sums,
        "bpmf_grad_log_lik_sum": bpmf_grad_log_lik_sum,
        "bpmf_grad_log_lik_diff_sum": bpmf_grad_log_lik_diff_sum,
        # the other schemes' NumPy paths (counts by the twin, ancestors by a histogram) are as fast as
        # a compiled pass here, so they stay
        "resample_systematic": resample_systematic,
    }
