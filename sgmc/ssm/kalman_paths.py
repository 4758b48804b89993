"""Which exact recursion runs where a backend has no compiled one: the scan or the loop, by their work.

The Kalman filter and smoother (:mod:`sgmc.ssm.kalman`) and the HMM forward-backward recursion
(:mod:`sgmc.ssm.hmm`) each have a sequential loop over time (the twin that defines the result) and a
parallel-in-time scan (:mod:`sgmc.ssm.kalman_scan`, :mod:`sgmc.ssm.hmm_scan`). Batched over ``b``
series (chains, or chains times buffered windows) of ``L`` positions, their costs are

    loop = L (step + loop_elem b),        scan = 2 ceil(log2 L) scan_round + scan_elem b L:

the loop pays a fixed Python and dispatch overhead ``step`` at every position whatever the batch,
the work-efficient scan pays its overhead ``2 ceil(log2 L)`` times and about twice the loop's
arithmetic per position. The constants (:data:`KALMAN_COSTS`, :data:`HMM_COSTS`, in microseconds)
were measured on one CPU core with NumPy (no Numba) and PyTorch for ``n = 2``, ``m = 3`` and
``K = 3``, and lie between the two; so the scan runs for few or long series and the loop only for
many short windows (buffered windows of tens of positions across hundreds of chains), and neither
choice changes abruptly with the number of chains. Past :data:`LOOP_MAX_LENGTH` positions the scan
always runs: there the loop's gain is at most the constant ratio ``scan_elem / loop_elem`` (about
2.5), while a Python loop over every position of a long series is what the scan exists to avoid
(and under ``jax.jit`` it would be unrolled).

>>> from sgmc.ssm.kalman_paths import KALMAN_COSTS, prefer_scan
>>> prefer_scan(KALMAN_COSTS, 16, 1_000_000), prefer_scan(KALMAN_COSTS, 1024, 32)
(True, False)
"""

from __future__ import annotations

import math
from typing import NamedTuple

__all__ = ["PathCosts", "KALMAN_COSTS", "HMM_COSTS", "LOOP_MAX_LENGTH", "SCAN_MAX_ELEMENTS", "loop_cost", "scan_cost",
           "prefer_scan", "chain_groups"]


class PathCosts(NamedTuple):
    """Cost constants of one recursion (microseconds on one CPU core)."""

    step: float  #: fixed cost of one loop step (its array calls' overhead)
    loop_elem: float  #: cost per batch entry of one loop step
    scan_round: float  #: fixed cost of one round of the scan
    scan_elem: float  #: cost per position and batch entry of the whole scan


#: Kalman filter and RTS smoother with sufficient statistics, ``n = 2``, ``m = 3``: NumPy 65 us and
#: PyTorch 320 us per loop step; 1.5 and 1.0 us per series and step; 210 and 450 us per scan round;
#: 3.4 and 2.4 us per series and position of the scan.
KALMAN_COSTS = PathCosts(step=150.0, loop_elem=1.2, scan_round=300.0, scan_elem=2.8)
#: Normalised forward-backward, ``K = 3``: NumPy 25 us and PyTorch 70 us per loop step; 0.25 and
#: 0.2 us per series and step; 55 and 130 us per round; 0.9 and 0.7 us per series and position.
HMM_COSTS = PathCosts(step=45.0, loop_elem=0.22, scan_round=90.0, scan_elem=0.8)
#: Series longer than this always take the scan.
LOOP_MAX_LENGTH = 4096
#: The scans hold O(b L) small matrices (about 800 bytes per position and series for the Kalman
#: statistics, 500 for the HMM messages, temporaries included): batches of more than this many
#: positions times series are scanned in groups of series, so memory stays near 1 GB however many
#: chains run on a long series.
SCAN_MAX_ELEMENTS = 2**20


def loop_cost(costs: PathCosts, b: int, L: int) -> float:
    """Modelled cost of the sequential loop over ``L`` positions for a batch of ``b``."""
    return L * (costs.step + costs.loop_elem * b)


def scan_cost(costs: PathCosts, b: int, L: int) -> float:
    """Modelled cost of the work-efficient scan over ``L`` positions for a batch of ``b``."""
    return 2 * math.ceil(math.log2(max(L, 2))) * costs.scan_round + costs.scan_elem * b * L


def prefer_scan(costs: PathCosts, b: int, L: int, min_length: int = 16, loop_max_length: int = LOOP_MAX_LENGTH) -> bool:
    """Whether the scan should replace the loop for ``b`` series of ``L`` positions.

    Series shorter than ``min_length`` keep the loop; longer than ``loop_max_length`` take the scan;
    in between, the cheaper of :func:`scan_cost` and :func:`loop_cost`.
    """
    if L < min_length:
        return False
    if L > loop_max_length:
        return True
    return scan_cost(costs, b, L) <= loop_cost(costs, b, L)


def chain_groups(b: int, L: int, max_elements: int = SCAN_MAX_ELEMENTS) -> list[slice]:
    """Slices of the batch axis scanned together: at most ``max_elements // L`` series each (at least one).

    >>> chain_groups(16, 10**6)[:2], len(chain_groups(16, 20_000))
    ([slice(0, 1, None), slice(1, 2, None)], 1)
    """
    size = max(1, max_elements // max(L, 1))
    return [slice(i, min(i + size, b)) for i in range(0, b, size)]
