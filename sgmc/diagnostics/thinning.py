"""Stein thinning: pick m of n points that greedily minimise the kernel Stein discrepancy.

Riabiz et al. (2022, "Optimal thinning of MCMC output", Algorithm 1) select, at step t, the point
that minimises the joint KSD of the points chosen so far plus that point:

    pi_t = argmin_i  k0(x_i, x_i) + 2 sum_{s < t} k0(x_i, x_{pi_s}),

with repeats allowed. Keeping the running sum costs one kernel column per step: O(n m d) time and
O(n d) memory. The kernel is the IMQ Langevin Stein kernel of :func:`sgmc.diagnostics.ksd`.
"""

from __future__ import annotations

from typing import Any

from .._array_api import Array
from .._validation import check_alloc, check_int
from . import _stein

__all__ = ["stein_thin"]

#: Memory per selected point: the index array held in the Python list of picks, and the int64 result.
_BYTES_PER_PICK = 120


def stein_thin(
    samples: Array,
    scores: Array,
    m: int,
    *,
    preconditioner: Any = "med",
    c: float = 1.0,
    beta: float = -0.5,
    standardize: bool = False,
) -> Array:
    """Greedy Stein thinning: indices of ``m`` points (repeats allowed) that minimise the joint KSD.

    Parameters
    ----------
    samples : array, shape (n, d) or (chains, n, d)
        Candidate points; (chains, n, d) input is flattened chain by chain and the indices refer to
        ``reshape(samples, (chains * n, d))``.
    scores : array, same shape
        grad log pi at each point.
    m : int
        Number of points to select (may exceed n, since points can repeat).
    preconditioner : None, str or array, default "med"
        As in :func:`sgmc.diagnostics.ksd`; computed on the (standardised) sample.
    c, beta : float
        IMQ kernel parameters, as in :func:`sgmc.diagnostics.ksd`.
    standardize : bool, default False
        Divide each coordinate of the sample by its mean absolute deviation (and multiply the scores
        by it) first, as the stein-thinning package does by default.

    Returns
    -------
    array of int64, shape (m,)
        Row indices in selection order, in the input's namespace and device.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.diagnostics import ksd, stein_thin
    >>> x = np.random.default_rng(0).standard_normal((1000, 2)) * 1.5   # over-dispersed for N(0, I)
    >>> idx = stein_thin(x, -x, 50, preconditioner="id")
    >>> x_thin = x[idx]
    >>> bool(ksd(x_thin, -x_thin, kind="joint") < ksd(x[:50], -x[:50], kind="joint"))
    True
    """
    c, beta = _stein.check_c_beta(c, beta)
    m = check_int(m, "m")
    check_alloc(m * _BYTES_PER_PICK, "m", m, "the list of m selected indices")
    if not isinstance(standardize, bool):
        msg = f"`standardize` must be a bool; got {type(standardize).__name__}"
        raise TypeError(msg)
    xp, x, s, _ = _stein.prepare_inputs(samples, scores, chains_first=True)
    if standardize:
        loc = xp.mean(x, axis=0)
        scale = xp.mean(xp.abs(x - loc), axis=0)
        if not bool(xp.all(scale > 0)):
            msg = "`standardize=True` needs every coordinate of `samples` to vary; some are constant"
            raise ValueError(msg)
        x = x / scale
        s = s * scale
    d = int(x.shape[1])
    pre = _stein.resolve_preconditioner(xp, x, preconditioner)
    u = pre.scalar * x if pre.scalar is not None else x @ pre.matrix
    tr = pre.trace(d, xp)
    running = _stein.kernel_diagonal(xp, s, pre, c, beta)
    chosen = []
    for _ in range(m):
        j = xp.argmin(running)
        chosen.append(j)
        pick = xp.reshape(j, (1,))
        xj, uj, sj = (xp.take(a, pick, axis=0) for a in (x, u, s))
        col = _stein.kernel_column(xp, x, u, s, xj, uj, sj, tr, c, beta)
        running = running + 2.0 * col
    return xp.astype(xp.stack(chosen), xp.int64)
