"""Parallel-in-time forward-backward for HMMs: prefix and suffix products of normalised messages.

With the one-step matrices ``E_t = Pi diag(p_t)`` (``p_t`` the emission densities at time t), the
unnormalised forward message is ``p0^T E_1 ... E_t`` and the backward message ``E_{t+1} ... E_L 1``.
Matrix products are associative, so all prefix products and all suffix products come from two
work-efficient scans (``sgmc.ssm.kalman_scan.associative_scan``: about ``2 L`` batched ``K x K``
products in ``2 ceil(log2 L)`` rounds; the same
construction as the parallel Kalman filter of Sarkka and Garcia-Fernandez 2021, IEEE TAC 66(1),
with products of messages in place of Gaussian conditionals). Each partial product is kept scaled
to sum one with its log scale beside it, so nothing under- or overflows however long the series.
The smoothed marginals and the expected transitions then follow elementwise, exactly as in the
sequential recursion (``sgmc.ssm.hmm._messages_twin``, which defines the result; the two agree to
rounding). No Python loop runs over time: the work is ``O(L K^3)`` in ``O(log L)`` array
operations, which suits GPUs, JAX (it traces under ``jax.jit``) and long series on backends without
a compiled loop.

>>> import numpy as np
>>> from sgmc.ssm.hmm_scan import messages_scan
>>> Pi = np.array([[[0.9, 0.1], [0.2, 0.8]]]); p = np.ones((1, 5, 2)); p0 = np.full((1, 2), 0.5)
>>> logc, gamma, N, G = messages_scan(Pi, p, p0)
>>> float(logc[0]), gamma.shape, float(N.sum())
(0.0, (1, 5, 2), 5.0)
"""

from __future__ import annotations

from .._array_api import Array, array_namespace, device_of
from .kalman_scan import associative_scan

__all__ = ["messages_scan", "prefix_products"]


def _normalise(xp, M, s):
    tot = xp.sum(M, axis=(-2, -1))
    return M / tot[..., None, None], s + xp.log(tot)


def prefix_products(M: Array, reverse: bool = False) -> tuple[Array, Array]:
    """Scaled running products along axis 1 of positive matrices ``M`` (b, L, K, K).

    Returns ``(P, s)`` with ``P[:, t] * exp(s[:, t]) = M[:, 0] @ ... @ M[:, t]`` (or, with
    ``reverse``, ``M[:, t] @ ... @ M[:, L-1]``) and each ``P[:, t]`` summing to one.
    """
    xp = array_namespace(M)
    P, s = _normalise(xp, M, xp.zeros(tuple(M.shape[:2]), dtype=M.dtype, device=device_of(M)))

    def combine(i, j):  # earlier i, later j: the scaled product i @ j
        return _normalise(xp, i[0] @ j[0], i[1] + j[1])

    return associative_scan(xp, combine, (P, s), reverse=reverse)


def messages_scan(Pi: Array, p: Array, p0: Array, weight: Array | None = None) -> tuple[Array, Array, Array, Array]:
    """Forward-backward by two associative scans; the outputs of ``sgmc.ssm.hmm._messages_twin``.

    Parameters
    ----------
    Pi : array (b, K, K)
    p : array (b, L, K)
        Positive emission densities (scaled by any per-time constant).
    p0 : array (b, K)
        Distribution of the state before the first observation.
    weight : array (b, L), optional

    Returns
    -------
    logc : array (b,)
        ``log(p0^T E_1 ... E_L 1)``, the sum of the sequential recursion's log normalisers.
    gamma : array (b, L, K)
    N : array (b, K, K)
    G : array (b, K)
    """
    xp = array_namespace(Pi, p, p0)
    b, L, K = p.shape
    E = Pi[:, None, :, :] * p[:, :, None, :]  # (b, L, K, K)
    F, fs = prefix_products(E)
    fwd = (p0[:, None, None, :] @ F)[..., 0, :]  # p0^T E_1..E_t, scaled: (b, L, K)
    c = xp.sum(fwd, axis=-1)
    logc = xp.log(c[:, -1]) + fs[:, -1]
    alpha = fwd / c[..., None]  # filtered
    Bk, _ = prefix_products(E, reverse=True)
    back = xp.sum(Bk[:, 1:, ...], axis=-1)  # E_{t+1}..E_L 1 for t < L-1, scaled: (b, L-1, K)
    back = back / xp.sum(back, axis=-1, keepdims=True)
    beta = xp.concat([back, xp.ones((b, 1, K), dtype=p.dtype, device=device_of(p)) / K], axis=1)
    g = alpha * beta
    gamma = g / xp.sum(g, axis=-1, keepdims=True)
    a_prev = xp.concat([p0[:, None, :], alpha[:, :-1, :]], axis=1)
    xi = a_prev[..., :, None] * Pi[:, None, ...] * (p * beta)[..., None, :]  # (b, L, K, K)
    xi = xi / xp.sum(xi, axis=(-2, -1), keepdims=True)
    if weight is None:
        return logc, gamma, xp.sum(xi, axis=1), xp.sum(gamma, axis=1)
    return logc, gamma, xp.sum(weight[..., None, None] * xi, axis=1), xp.sum(weight[..., None] * gamma, axis=1)
