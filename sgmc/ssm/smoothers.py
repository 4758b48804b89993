"""Backward-kernel updates of the particle score smoothers: PaRIS and the O(N^2) estimator.

Each step maps the statistics ``tau_{t-1}`` of the previous particles to those of the new ones through
the backward kernel ``p(x_{t-1} = j | x_t) ~ W_{t-1}^j p(x_t | x_{t-1}^j)``: PaRIS (Olsson and
Westerborn 2017) by ``n_backward`` draws per particle, the O(N^2) estimator (Poyiadjis, Doucet and
Singh 2011) by the exact sum. :func:`sgmc.ssm.particle.particle_filter` runs them.
"""

from __future__ import annotations

from typing import Any

from .._array_api import Array


def _gather(xp: Any, a: Array, flat_idx: Array, shape: tuple) -> Array:
    """Rows of ``a`` (Bt, N, ...) picked by flat indices ``b * N + j``; result ``shape + a.shape[2:]``."""
    bt, n = a.shape[0], a.shape[1]
    rest = tuple(a.shape[2:])
    if rest == (1,):  # a 1-D gather is cheaper than a gather of rows of length 1
        out = xp.take(xp.reshape(a, (bt * n,)), xp.reshape(flat_idx, (-1,)))
        return xp.reshape(out, tuple(shape) + rest)
    flat = xp.reshape(a, (bt * n,) + rest)
    out = xp.take(flat, xp.reshape(flat_idx, (-1,)), axis=0)
    return xp.reshape(out, tuple(shape) + rest)


def _paris_update(xp, rng, kernel, x_prev, w_prev, tau_prev, x_new, y_t, c_t, row, n_back, rounds):
    """One PaRIS step: ``n_back`` backward draws per new particle, by accept-reject with exact fallback.

    Proposal ``J ~ W_{t-1}`` (inverse CDF on fresh uniforms), accepted with probability
    ``p(x_t^i | x_{t-1}^J) / bound``; the accepted index is an exact draw from the backward kernel
    ``W_{t-1}^j p(x_t^i | x_{t-1}^j) / Z_i``. Each round redraws only the draws still pending. Draws
    pending after ``rounds`` rounds are made exactly from the ``N`` backward probabilities of their
    particle (cost ``O(N)`` each), so the result never depends on the bound being tight.
    """
    bt, n = w_prev.shape
    nt = n_back
    dev = w_prev.device
    sd = x_new.shape[-1]
    total = bt * n * nt
    # All rows' normalised CDFs in one sorted array, row b shifted into [b, b + 1].
    c64 = xp.cumulative_sum(xp.astype(w_prev, xp.float64), axis=1)
    offset = xp.arange(bt, dtype=xp.float64, device=dev)[:, None]
    flat_cdf = xp.reshape(c64 / c64[:, -1:] + offset, (-1,))
    bound = kernel.log_transition_bound()
    x_prev_flat = xp.reshape(x_prev, (bt * n, sd))
    x_new_flat = xp.reshape(x_new, (bt * n, sd))
    pos = xp.arange(total, dtype=xp.int64, device=dev)
    # Round r proposes for the draws still pending (positions pos_r, sorted); accepted values and
    # the pending masks are kept and put together backwards at the end, without a scatter.
    history = []
    for _ in range(rounds):
        b_of = pos // (n * nt)
        u = rng.uniform((int(pos.shape[0]),), dtype=xp.float64)
        prop = xp.searchsorted(flat_cdf, u + xp.astype(b_of, xp.float64), side="right") - b_of * n
        prop = xp.clip(prop, 0, n - 1)
        sub = kernel.take_rows(b_of)
        xs = xp.take(x_prev_flat, b_of * n + prop, axis=0)
        xi = xp.take(x_new_flat, pos // nt, axis=0)
        logp = sub.log_transition(xs, xi) - xp.take(bound, b_of, axis=0)
        acc = xp.log(rng.uniform((int(pos.shape[0]),), dtype=logp.dtype)) < logp
        history.append((prop, acc))
        pos = pos[~acc]
        if pos.shape[0] == 0:
            break
    if pos.shape[0] > 0:
        b_of = pos // (n * nt)
        x_rows = xp.take(x_prev, b_of, axis=0)  # (P, N, sd)
        xi = xp.take(x_new_flat, pos // nt, axis=0)  # (P, sd)
        logits = kernel.take_rows(b_of).log_transition(x_rows, xi[:, None, :])  # (P, N)
        logits = logits + xp.take(_safe_log(xp, w_prev), b_of, axis=0)
        pw = xp.exp(logits - xp.max(logits, axis=1, keepdims=True))
        # Inverse CDF by counting: the draw is the number of cumulative weights below u * total.
        cdf = xp.cumulative_sum(pw, axis=1)
        u = rng.uniform((int(pos.shape[0]), 1), dtype=pw.dtype) * cdf[:, -1:]
        vals = xp.clip(xp.sum(xp.astype(cdf <= u, xp.int64), axis=1), 0, n - 1)
    else:
        vals = xp.zeros((0,), dtype=xp.int64, device=dev)
    for prop, acc in reversed(history):
        # Rejected slots of this round take, in order, the values of the next round.
        nxt = xp.cumulative_sum(xp.astype(~acc, xp.int64)) - 1
        if vals.shape[0] == 0:
            vals = prop
        else:
            vals = xp.where(acc, prop, xp.take(vals, xp.clip(nxt, 0, vals.shape[0] - 1)))
    j = vals
    j = xp.reshape(j, (bt, n, nt))
    xs = _gather(xp, x_prev, j + row[:, :, None], (bt, n, nt))
    h = kernel.score_terms(xs, x_new[:, :, None, :], y_t)  # (Bt, N, nt, dim)
    taus = _gather(xp, tau_prev, j + row[:, :, None], (bt, n, nt))
    return xp.mean(taus + c_t[..., None] * h, axis=2)


def _safe_log(xp: Any, w: Array) -> Array:
    """``log w`` with zero weights (underflowed exponentials) at the log of the smallest normal number."""
    return xp.log(w + xp.finfo(w.dtype).smallest_normal)


def _n2_update(xp, kernel, x_prev, w_prev, tau_prev, x_new, y_t, c_t):
    """One O(N^2) step: ``tau_i = sum_j B_ij (tau_j + c_t h(x_j, x_i))`` with the exact backward kernel."""
    xj = x_prev[:, None, :, :]  # (Bt, 1, N, sd)
    xi = x_new[:, :, None, :]  # (Bt, N, 1, sd)
    logits = kernel.log_transition(xj, xi) + _safe_log(xp, w_prev)[:, None, :]  # (Bt, N, N)
    b = xp.exp(logits - xp.max(logits, axis=2, keepdims=True))
    b = b / xp.sum(b, axis=2, keepdims=True)
    h = kernel.score_terms(xj, xi, y_t)  # (Bt, N, N, dim)
    return xp.sum(b[..., None] * (tau_prev[:, None, :, :] + c_t[..., None] * h), axis=2)
