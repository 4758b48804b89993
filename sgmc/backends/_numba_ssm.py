"""Compiled exact recursions of the state space models, the Numba twins of two array-API loops.

Registered in the NumPy backend's ``native`` table (through :func:`sgmc.backends._numba.natives`)
under the names of the functions they replace:

* ``"hmm_messages"``: the normalised forward-backward messages of a batch of HMMs
  (:func:`sgmc.ssm.hmm._messages_twin`): the sum of the log normalisers, the smoothed marginals and
  the weighted expected transition counts and occupancies;
* ``"kalman_stats"``: the Kalman filter and RTS smoother of a batch of linear Gaussian models with
  the weighted smoothed sufficient statistics (:func:`sgmc.ssm.kalman.kalman_stats`'s recursion).

The array-API versions loop over time in Python with one batched array operation per step, which
costs microseconds of interpreter and dispatch overhead per step whatever the batch; here each
batch entry runs its time loop compiled, so a long series costs what its arithmetic costs. Every
entry returns ``NotImplemented`` for inputs it does not take (not NumPy, not float64, Numba off,
or a covariance that is not positive definite, where the twin's own behaviour is the result), and
the caller then runs the twin. Memory: the Kalman loop keeps one entry's ``L`` filtered moments
(``O(L n^2)``), not the twin's checkpointed segments.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._native_switch import ON as _ON

__all__ = ["hmm_messages", "kalman_stats", "natives"]

_KERNELS: list = []


def _jit() -> Any:
    if not _KERNELS:
        from . import _numba_ssm_kernels

        _KERNELS.append(_numba_ssm_kernels)
    return _KERNELS[0]


def _f64(*arrays) -> bool:
    return all(isinstance(a, np.ndarray) and a.dtype == np.float64 for a in arrays)


def _enabled() -> bool:
    return _ON[0]


def hmm_messages(Pi, p, p0, weight):
    """Native twin of ``sgmc.ssm.hmm._messages_twin``: ``(logc, gamma, N, G)`` or ``NotImplemented``.

    Parameters
    ----------
    Pi : array (b, K, K)
    p : array (b, L, K)
        Emission densities scaled by their maximum over states (positive).
    p0 : array (b, K)
    weight : array (b, L) or None
    """
    if not _enabled() or not _f64(Pi, p, p0) or (weight is not None and not _f64(weight)):
        return NotImplemented
    b, L, K = p.shape
    if Pi.shape != (b, K, K) or p0.shape != (b, K) or (weight is not None and weight.shape != (b, L)) or L == 0:
        return NotImplemented
    has_w = weight is not None
    w = weight if has_w else np.empty((b, 0))
    logc = np.empty(b)
    gamma = np.empty((b, L, K))
    N = np.zeros((b, K, K))
    G = np.zeros((b, K))
    _jit().hmm_messages(np.ascontiguousarray(Pi), p, np.ascontiguousarray(p0), w, has_w, logc, gamma, N, G)
    return logc, gamma, N, G


def kalman_stats(A, Q, C, R, y, m0, P0, mask, weight, smooth=True):
    """Native twin of the smoothing recursion of ``sgmc.ssm.kalman.kalman_stats``.

    Arguments are those of the twin after its input checks (``y`` (b, L, m), ``m0`` and ``P0``
    given, ``mask`` and ``weight`` (b, L) or None). Returns ``(loglik, S00, S10, S11, Syx, Syy)``
    or ``NotImplemented``; with ``smooth=False`` the filter only (the statistics are zeros).
    """
    if not _enabled() or not _f64(A, Q, C, R, y, m0, P0) or (weight is not None and not _f64(weight)):
        return NotImplemented
    if mask is not None and not (isinstance(mask, np.ndarray) and mask.dtype == np.bool_):
        return NotImplemented
    b, L, m = y.shape
    n = A.shape[-1]
    if L == 0:
        return NotImplemented
    has_mask, has_w = mask is not None, weight is not None
    mk = mask if has_mask else np.empty((b, 0), dtype=np.bool_)
    w = weight if has_w else np.empty((b, 0))
    c = np.ascontiguousarray
    ll = np.empty(b)
    if n == 1 and m == 1:  # the scalar model: its own loop, without matrix scratch
        acc = np.zeros((b, 5))
        bad = _jit().kalman_stats_1(c(A[:, 0, 0]), c(Q[:, 0, 0]), c(C[:, 0, 0]), c(R[:, 0, 0]), y[..., 0], c(m0[:, 0]),
                                    c(P0[:, 0, 0]), mk, has_mask, w, has_w, bool(smooth), ll, acc)
        if bad >= 0:
            return NotImplemented
        return (ll,) + tuple(np.reshape(acc[:, k], (b, 1, 1)) for k in range(5))
    S00, S10, S11 = np.zeros((b, n, n)), np.zeros((b, n, n)), np.zeros((b, n, n))
    Syx, Syy = np.zeros((b, m, n)), np.zeros((b, m, m))
    bad = _jit().kalman_stats(c(A), c(Q), c(C), c(R), y, c(m0), c(P0), mk, has_mask, w, has_w, bool(smooth), ll, S00, S10,
                              S11, Syx, Syy)
    if bad >= 0:
        return NotImplemented
    return ll, S00, S10, S11, Syx, Syy


def natives() -> dict:
    """The table entries (:mod:`sgmc.backends._native_switch` turns them off with the others)."""
    return {"hmm_messages": hmm_messages, "kalman_stats": kalman_stats}
