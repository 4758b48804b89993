"""Chunk-aware minibatches: a two-stage (cluster) sample for data stored in chunks.

A zarr or Dask array is stored in chunks of rows that are read and decompressed whole, so a
uniform minibatch of ``n`` rows out of ``K`` chunks touches about ``min(n, K)`` chunks per chain and
reads nearly all the data at every iteration. :class:`ChunkedMinibatch` draws ``m`` chunks per chain
first and then ``r = n / m`` rows within each, and weights every row so that the estimate of the
full-data gradient stays unbiased (a two-stage sample, the chunks its clusters; Cochran, *Sampling
Techniques*, 3rd ed., 1977, sections 11.2 and 11.4-11.9). With ``N_k`` rows in chunk ``k``,

    g(theta) = grad log p(theta) + sum_{j=1}^m w_{k_j} (N_{k_j} / r) sum_{l=1}^r grad log f_{i_jl}(theta),

where the rows ``i_j1, ..., i_jr`` of the j-th drawn chunk ``k_j`` are uniform on its rows, drawn
with replacement, and the chunk weight ``w_k`` undoes the chunk draw: ``K / m`` for ``m`` distinct
chunks drawn uniformly, ``1 / (m p_k)`` for ``m`` chunks drawn independently with probabilities
``p_k`` (Hansen and Hurwitz 1943).
"""

from __future__ import annotations

import math
from typing import Any

from .._sampling import categorical, subsample
from .._validation import check_batch_size, check_int
from .base import EstimateInfo, Estimator, _check_subsampling

__all__ = ["ChunkedMinibatch", "chunk_bounds"]


def chunk_bounds(chunks: Any, n_data: int, name: str = "chunks") -> list[int]:
    """Row boundaries ``[0, b_1, ..., N]`` of the chunks: from rows per chunk (int) or the boundaries.

    Raises ``TypeError`` or ``ValueError`` naming ``name`` for anything else.

    Examples
    --------
    >>> from sgmc.estimators.chunked import chunk_bounds
    >>> chunk_bounds(4, 10)
    [0, 4, 8, 10]
    """
    if isinstance(chunks, bool):
        msg = f"`{name}` must be rows per chunk (a positive int) or the chunks' row boundaries; got {chunks!r}"
        raise TypeError(msg)
    if isinstance(chunks, int) or (hasattr(chunks, "__index__") and getattr(chunks, "ndim", 0) == 0):
        step = check_int(chunks, name, minimum=1)
        return list(range(0, n_data, step)) + [n_data]
    try:
        bounds = [int(b) for b in chunks]
        exact = all(float(b) == int(b) for b in chunks)
    except (TypeError, ValueError):
        msg = f"`{name}` must be rows per chunk (a positive int) or the chunks' row boundaries; got {chunks!r}"
        raise TypeError(msg) from None
    ok = exact and len(bounds) >= 2 and bounds[0] == 0 and bounds[-1] == n_data
    if not ok or any(b <= a for a, b in zip(bounds[:-1], bounds[1:])):
        msg = (f"`{name}` must be increasing row boundaries from 0 to n_data={n_data}, every chunk non-empty; "
               f"got {list(chunks)!r}")
        raise ValueError(msg)
    return bounds


class ChunkedMinibatch(Estimator):
    """Minibatches that touch few storage chunks: ``n_chunks`` chunks per chain, rows within them.

    Parameters
    ----------
    model : Model
        An :class:`~sgmc.models.IIDData` model.
    batch_size : int or float
        n, the rows per chain and iteration; a float in (0, 1) is a fraction of N. It must be a
        multiple of ``n_chunks``: ``r = batch_size / n_chunks`` rows come from each drawn chunk.
    n_chunks : int, default 2
        m, the chunks drawn per chain and iteration.
    chunks : None, int or sequence of int
        The chunks: rows per chunk, or the row boundaries ``[0, ..., N]``. By default the storage
        chunks of the model's data (``model.data_chunks``: the GLMs on a zarr or Dask ``X``).
    chunk_probs : None, "size" or array (K,)
        None (default): ``m`` distinct chunks, uniformly (chunk weight ``K / m``). ``"size"``:
        ``m`` independent draws with probability proportional to the chunk's rows,
        ``p_k = N_k / N`` (weight ``1 / (m p_k)``; with equal chunks every row then weighs
        ``N / n``). An array: ``m`` independent draws with probabilities proportional to it; every
        entry must be positive, since a chunk that is never drawn would leave its rows out of the
        expectation.

    Notes
    -----
    The estimate is unbiased for the full-data gradient: a row ``i`` of chunk ``k`` enters with
    expected weight ``E[number of draws of k] w_k (N_k / r) r / N_k = 1``. Per coordinate, with chunk
    totals ``T_k = sum_{i in k} g_i``, ``T = sum_k T_k`` and within-chunk variances
    ``s_k^2 = (1 / N_k) sum_{i in k} (g_i - T_k / N_k)^2`` of the per-datum gradients ``g_i``, the
    variance of the likelihood part is (Cochran 1977, eqs. 11.24 and 11.48, with rows drawn with
    replacement)

    * uniform chunks: ``K^2 (1 - m / K) S_b^2 / m + (K / m) sum_k N_k^2 s_k^2 / r``, where
      ``S_b^2 = sum_k (T_k - T / K)^2 / (K - 1)``;
    * probabilities ``p_k``: ``(sum_k T_k^2 / p_k - T^2) / m + sum_k N_k^2 s_k^2 / (p_k r) / m``.

    The first term is the price of clustering: it vanishes when every chunk's total is the same
    (uniform chunks) or proportional to ``p_k``, as for data stored in random order, and it is large
    when the data are sorted (by time, by label) so that chunks differ. Compared with a uniform
    minibatch of the same ``n`` the estimate is noisier by that term; what it saves is the reading of
    ``min(n, K)`` chunks per chain, which on compressed chunked storage is most of an iteration.
    Each chain draws its own chunks, so chains stay independent.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.backends import default_rng
    >>> from sgmc.models import LinearRegression
    >>> from sgmc.estimators import ChunkedMinibatch
    >>> r = np.random.default_rng(0)
    >>> X = r.normal(size=(1000, 2)); y = X @ np.array([1.0, -1.0]) + r.normal(size=1000)
    >>> est = ChunkedMinibatch(LinearRegression(X, y), 40, n_chunks=2, chunks=100)
    >>> idx, w = est.draw(default_rng(1), chains=3)
    >>> idx.shape, float(w[0, 0])        # 20 rows from each of 2 of the 10 chunks: (10 / 2) (100 / 20)
    ((3, 40), 25.0)
    """

    name = "chunked"

    def __init__(self, model: Any, batch_size: Any, n_chunks: int = 2, chunks: Any = None, chunk_probs: Any = None):
        super().__init__(model)
        _check_subsampling(model, "the chunked minibatch estimator")
        xp, n_data = model.xp, int(model.n_data)
        self.batch_size = check_batch_size(batch_size, n_data)
        self.n_chunks = check_int(n_chunks, "n_chunks", minimum=1)
        if self.batch_size % self.n_chunks:
            msg = (f"`batch_size` must be a multiple of `n_chunks`={self.n_chunks} (rows per drawn chunk); "
                   f"got {self.batch_size}")
            raise ValueError(msg)
        self.rows_per_chunk = self.batch_size // self.n_chunks
        if chunks is None:
            chunks = getattr(model, "data_chunks", None)
            if chunks is None:
                msg = (f"`chunks`: {type(model).__name__}'s data are not stored in chunks (no `data_chunks`); give "
                       "`chunks=` as rows per chunk or the chunks' row boundaries")
                raise ValueError(msg)
        bounds = chunk_bounds(chunks, n_data)
        self.bounds = tuple(bounds)
        self.n_groups = len(bounds) - 1
        sizes = [b - a for a, b in zip(bounds[:-1], bounds[1:])]
        self.chunk_probs = self._probs(chunk_probs, sizes)
        m, K = self.n_chunks, self.n_groups
        if self.chunk_probs is None:
            if m > K:
                msg = f"`n_chunks`={m} is more than the {K} chunks of the data (drawn without replacement)"
                raise ValueError(msg)
            weight = [K / m] * K
            cdf = None
        else:
            total = math.fsum(self.chunk_probs)
            p = [q / total for q in self.chunk_probs]
            weight = [1.0 / (m * q) for q in p]
            cdf = [math.fsum(p[:k + 1]) for k in range(K)]
        dev = model.device
        self._starts = xp.asarray(bounds[:-1], dtype=xp.int64, device=dev)
        self._sizes = xp.asarray(sizes, dtype=xp.int64, device=dev)
        self._sizes_f = xp.asarray([float(s) for s in sizes], dtype=xp.float64, device=dev)
        # per-row weight of a row drawn from chunk k: w_k N_k / r
        self._row_weight = xp.asarray([w * s / self.rows_per_chunk for w, s in zip(weight, sizes)],
                                      dtype=model.dtype, device=dev)
        self._cdf = None if cdf is None else xp.asarray(cdf, dtype=xp.float64, device=dev)
        self._info = EstimateInfo(self.batch_size, self.batch_size)

    def _probs(self, chunk_probs: Any, sizes: list[int]) -> tuple | None:
        if chunk_probs is None:
            return None
        if isinstance(chunk_probs, str):
            if chunk_probs != "size":
                msg = f"`chunk_probs` must be None, 'size' or an array of {len(sizes)} positive numbers; got {chunk_probs!r}"
                raise ValueError(msg)
            return tuple(float(s) for s in sizes)
        try:
            probs = tuple(float(q) for q in chunk_probs)
        except (TypeError, ValueError):
            msg = f"`chunk_probs` must be None, 'size' or an array of {len(sizes)} positive numbers; got {chunk_probs!r}"
            raise TypeError(msg) from None
        if len(probs) != len(sizes) or not all(math.isfinite(q) and q > 0 for q in probs):
            msg = (f"`chunk_probs` must hold {len(sizes)} finite positive numbers, one per chunk (a chunk never "
                   f"drawn would bias the estimate); got {len(probs)} value(s), smallest {min(probs, default=None)}")
            raise ValueError(msg)
        return probs

    def draw(self, rng: Any, chains: int) -> tuple[Any, Any]:
        """Rows and their weights for ``chains`` chains: int64 ``(chains, batch_size)`` and ``(chains, batch_size)``.

        The rows of each drawn chunk are consecutive in the result (``rows_per_chunk`` of them).
        """
        xp = self.model.xp
        m, r = self.n_chunks, self.rows_per_chunk
        if self._cdf is None:
            which = subsample(rng, self.n_groups, m, chains)                    # (chains, m) distinct chunks
        else:
            which = categorical(rng.uniform((chains, m), dtype=xp.float64), self._cdf)
        which = xp.reshape(which, (chains * m,))
        size = xp.take(self._sizes, which, axis=0)
        u = rng.uniform((chains * m, r), dtype=xp.float64)
        off = xp.astype(xp.floor(u * xp.take(self._sizes_f, which, axis=0)[:, None]), xp.int64)
        off = xp.minimum(off, size[:, None] - 1)                               # u * N_k rounded up to N_k
        idx = xp.take(self._starts, which, axis=0)[:, None] + off
        w = xp.broadcast_to(xp.take(self._row_weight, which, axis=0)[:, None], (chains * m, r))
        return xp.reshape(idx, (chains, m * r)), xp.reshape(w, (chains, m * r))

    def estimate(self, rng, est_state, position):
        m = self.model
        idx, w = self.draw(rng, position.shape[0])
        g = m.grad_log_prior(position) + m.grad_log_lik_sum(position, idx, w)
        return g, est_state, self._info

    def __repr__(self) -> str:
        how = "uniform" if self.chunk_probs is None else "by probability"
        return (f"ChunkedMinibatch(model={self.model!r}, batch_size={self.batch_size}, n_chunks={self.n_chunks}, "
                f"chunks={self.n_groups} ({how}))")
