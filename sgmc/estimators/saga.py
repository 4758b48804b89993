"""SAGA gradient estimator for SGLD (Dubey et al. 2016, "Variance reduction in stochastic gradient
Langevin dynamics", section 3; Defazio et al. 2014).

Each chain keeps a table alpha of the last gradient seen for every datum, and the sum of its rows:

    g(theta) = grad log p(theta) + sum_i alpha_i + (N/n) sum_{i in S} [grad log f_i(theta) - alpha_i],

then alpha_i <- grad log f_i(theta) for the n indices i in S (drawn without replacement). The estimate is
unbiased for any table, and its variance falls as the table catches up with the chain. The table is
N x d numbers per chain, built by one full pass in ``init``; each call reads and writes n of its rows,
O(n d).

Memory is the limit: ``chains * N * d`` numbers (8 bytes each in float64). The estimator refuses a
table above ``max_table_bytes`` (default :data:`MAX_TABLE_BYTES`, 1 GiB) with an error that gives the
size; raise the limit explicitly, or use :class:`~sgmc.estimators.SVRG` or
:class:`~sgmc.estimators.ControlVariate`, whose state is O(d) per chain.

The table is updated in place on NumPy, PyTorch and CuPy (writing n rows; copying the table every
call would cost O(N d)), so an ``est_state`` is consumed by the call it is given to: pass on the
returned state and do not reuse the old one. On other array libraries the array-API version builds a
new table (O(N log n) per call; it defines the result).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .._array_api import Array, device_of
from .._dispatch import native
from .._validation import check_positive
from ..models.base import require, take_rows
from .base import EstimateInfo, Estimator, Minibatch, _check_subsampling

__all__ = ["SAGA", "SAGAState", "MAX_TABLE_BYTES", "set_rows"]

#: Default largest gradient table (all chains together) that :class:`SAGA` builds: 1 GiB.
MAX_TABLE_BYTES = 2**30


class SAGAState(NamedTuple):
    """SAGA's state: the per-datum gradient table ``(chains * N, dim)`` (chain-major) and its row sums ``(chains, dim)``."""

    table: Array
    table_sum: Array


def set_rows_twin(table: Array, rows_idx: Array, rows: Array) -> Array:
    """``table`` with ``table[rows_idx[j]] = rows[j]`` (distinct ``rows_idx``): the array-API definition.

    Builds a new table: each table row looks its index up among the sorted ``rows_idx``
    (O(m log k) for m table rows and k new ones).
    """
    from .._array_api import array_namespace

    xp = array_namespace(table, rows)
    m, k = table.shape[0], rows_idx.shape[0]
    perm = xp.argsort(rows_idx)
    srt = xp.take(rows_idx, perm)
    r = xp.arange(m, dtype=rows_idx.dtype, device=device_of(rows_idx))
    pos = xp.clip(xp.searchsorted(srt, r), 0, k - 1)
    member = xp.take(srt, pos) == r
    new = xp.take(rows, xp.take(perm, pos), axis=0)
    return xp.where(member[:, None], new, table)


def set_rows(table: Array, rows_idx: Array, rows: Array) -> Array:
    """Write ``rows`` (k, d) into rows ``rows_idx`` (k,) of ``table`` (m, d); in place where the library allows."""
    from .._array_api import array_namespace

    fast = native(array_namespace(table), "set_rows")
    if fast is not None:
        return fast(table, rows_idx, rows)
    return set_rows_twin(table, rows_idx, rows)


# Its docstring example repeats MinibatchNoise's set-up: each class's help runs on its own.
class SAGA(Estimator):
    """SAGA: per-chain tables of per-datum gradients (Dubey et al. 2016).

    Parameters
    ----------
    model : Model
        Needs per-datum gradients ``grad_log_lik(theta, idx)``.
    batch_size : int or float
        n per iteration (drawn without replacement).
    max_table_bytes : int, default ``MAX_TABLE_BYTES`` (1 GiB)
        Largest table (chains x N x d numbers) that ``init`` builds; above it, ``init`` raises.

    Notes
    -----
    ``init`` costs one full pass (N per-datum gradients per chain) and ``chains * N * d`` numbers of
    memory; each call costs n per-datum gradients and reads and writes n rows.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.backends import default_rng
    >>> from sgmc.models import LinearRegression
    >>> from sgmc.estimators import SAGA
    >>> r = np.random.default_rng(0)
    >>> X = r.normal(size=(1000, 2)); y = X @ np.array([1.0, -1.0]) + r.normal(size=1000)
    >>> est = SAGA(LinearRegression(X, y), 50)
    >>> x = np.zeros((4, 2)); state = est.init(default_rng(0), x)
    >>> state.table.shape
    (4000, 2)
    >>> grad, state, info = est.estimate(default_rng(1), state, x)
    >>> bool(np.allclose(grad, est.model.grad_log_posterior(x)))    # the table is exact at x
    True
    """

    name = "saga"

    def __init__(self, model: Any, batch_size: Any, max_table_bytes: int = MAX_TABLE_BYTES):
        super().__init__(model)
        _check_subsampling(model, "SAGA")
        require(model, ("grad_log_lik",), "SAGA (its table of per-datum gradients)")
        self._mb = Minibatch(model, batch_size, replace=False)
        self.batch_size = self._mb.batch_size
        self.scale = self._mb.scale
        self.max_table_bytes = int(check_positive(max_table_bytes, "max_table_bytes"))
        self.init_cost = float(model.n_data)
        self._info = EstimateInfo(self.batch_size, self.batch_size)

    def table_bytes(self, chains: int) -> int:
        """Bytes of the gradient tables of ``chains`` chains."""
        itemsize = 4 if "32" in str(self.model.dtype) else 8
        return int(chains) * self.model.n_data * self.model.dim * itemsize

    def init(self, rng: Any, position: Array) -> SAGAState:
        """Every chain's table at its position (one full pass), after checking its size."""
        m = self.model
        xp = m.xp
        chains = position.shape[0]
        size = self.table_bytes(chains)
        if size > self.max_table_bytes:
            msg = (
                f"SAGA needs a table of chains x N x d = {chains} x {m.n_data} x {m.dim} numbers "
                f"({size / 2**20:.1f} MiB), above max_table_bytes={self.max_table_bytes} "
                f"({self.max_table_bytes / 2**20:.1f} MiB); pass a larger `max_table_bytes`, use fewer chains, "
                "or use estimator='svrg' or 'cv' (O(d) state per chain)"
            )
            raise MemoryError(msg)
        table = m.grad_log_lik(position)                   # (chains, N, d)
        total = xp.sum(table, axis=1)
        return SAGAState(xp.reshape(table, (chains * m.n_data, m.dim)), total)

    def estimate(self, rng, est_state, position):
        m = self.model
        xp = m.xp
        chains = position.shape[0]
        idx = self._mb.indices(rng, chains)                                       # (chains, n)
        offset = xp.arange(chains, dtype=xp.int64, device=m.device)[:, None] * m.n_data
        rows_idx = xp.reshape(idx + offset, (-1,))
        new = m.grad_log_lik(position, idx)                                      # (chains, n, d)
        old = take_rows(xp, est_state.table, idx + offset)                       # (chains, n, d)
        delta = xp.sum(new - old, axis=1)
        g = m.grad_log_prior(position) + est_state.table_sum + self.scale * delta
        table = set_rows(est_state.table, rows_idx, xp.reshape(new, (-1, m.dim)))
        return g, SAGAState(table, est_state.table_sum + delta), self._info

    def __repr__(self) -> str:
        return f"SAGA(model={self.model!r}, batch_size={self.batch_size})"
