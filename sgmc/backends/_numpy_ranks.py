"""The host's native rank normalisation: NumPy's sort and scipy's normal quantile.

:func:`sgmc.diagnostics.ranks._z_scale` (the rank-normalised ESS and R-hat) replaces each column of
pooled draws by ``Phi^{-1}((r - 3/8) / (K + 1/4))``, ``r`` the average ranks. Its array-API twin
(:func:`sgmc.diagnostics.ranks._rank_normal_twin`) must build ties and the quantile from generic
operations; on the host one sort per column along contiguous memory and ``scipy.special.ndtri`` give
the same values several times faster. scipy is imported on first use, so ``import sgmc`` does not load
it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["rank_normal"]


def rank_normal(v: np.ndarray) -> np.ndarray:
    """``Phi^{-1}((r - 3/8) / (K + 1/4))`` of the average ranks ``r`` along axis 0 of ``v`` (K, S).

    Declines (``NotImplemented``) what the twin defines differently or this path does not take: a
    non-NumPy array, another number of dimensions, a non-floating dtype, a value that is not finite.
    """
    if not isinstance(v, np.ndarray) or v.ndim != 2 or v.dtype.kind != "f" or not np.isfinite(v).all():
        return NotImplemented
    from scipy.special import ndtri

    k = v.shape[0]
    rows = np.ascontiguousarray(v.T)                       # one column of draws per contiguous row
    order = np.argsort(rows, axis=1)
    ranked = np.take_along_axis(rows, order, axis=1)
    if (ranked[:, 1:] == ranked[:, :-1]).any():            # ties: their average rank
        from scipy.stats import rankdata

        r = rankdata(rows, method="average", axis=1).astype(v.dtype, copy=False)
    else:                                                  # the inverse permutation of the sort
        r = np.empty_like(rows)
        np.put_along_axis(r, order, np.arange(1, k + 1, dtype=v.dtype)[None, :], axis=1)
    p = (r - 0.375) / (k + 0.25)
    return np.ascontiguousarray(ndtri(p).astype(v.dtype, copy=False).T)
