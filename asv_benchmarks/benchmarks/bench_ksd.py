"""Kernel Stein discrepancy, cumulative KSD and Stein thinning on NumPy float64 arrays.

``KSD`` times and measures the peak memory of :func:`sgmc.diagnostics.ksd` for n in {1000, 5000, 20000}
points in d in {2, 10, 100} dimensions, for both kinds (the review's per-coordinate sum and the joint
KSD). The work is O(n^2 d): about n^2 / 2 evaluated pairs, each costing 8d + 13 flops (joint) or
14d + 12 flops (sum) with the default identity preconditioner and beta = -1/2. ``CumulativeKSD`` and
``SteinThin`` cover the other two entry points at one moderate size. The comparison with the
stein-thinning package and with the machine's matrix-product speed is ``asv_benchmarks/peer_ksd.py``.

This module depends on nothing but NumPy and sgmc.
"""

from __future__ import annotations

import numpy as np

try:
    from sgmc.diagnostics import cumulative_ksd, ksd, stein_thin
except ImportError:  # an older commit without the diagnostics package: asv skips on NotImplementedError
    ksd = cumulative_ksd = stein_thin = None


def _sample(n: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Correlated Gaussian points with noisy scores of N(0, I) (a stochastic-gradient sample)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)) @ (np.eye(d) + 0.3 * np.tri(d, d, -1)).T
    s = -x + 0.1 * rng.standard_normal((n, d))
    return x, s


def _require() -> None:
    if ksd is None:
        raise NotImplementedError("sgmc.diagnostics is not available in this commit")


class KSD:
    """``ksd(samples, scores, kind=kind)`` with the identity preconditioner."""

    params = ([1000, 5000, 20000], [2, 10, 100], ["sum", "joint"])
    param_names = ["n", "d", "kind"]
    timeout = 900
    number = 1
    repeat = (1, 3, 60.0)

    def setup(self, n, d, kind):
        _require()
        self.x, self.s = _sample(n, d)
        if n <= 1000:
            ksd(self.x, self.s, kind=kind)  # warm-up (imports, allocator)

    def time_ksd(self, n, d, kind):
        ksd(self.x, self.s, kind=kind)

    def peakmem_ksd(self, n, d, kind):
        ksd(self.x, self.s, kind=kind)


class KSDPreconditioned:
    """``ksd`` with the median heuristic and the sample-covariance preconditioner (n = 5000, d = 10)."""

    params = (["med", "smpcov"],)
    param_names = ["preconditioner"]
    timeout = 300

    def setup(self, preconditioner):
        _require()
        self.x, self.s = _sample(5000, 10)

    def time_ksd(self, preconditioner):
        ksd(self.x, self.s, kind="joint", preconditioner=preconditioner)


class CumulativeKSD:
    """``cumulative_ksd``: the KSD of every prefix in one O(n^2 d) pass (n = 5000)."""

    params = ([10, 100], ["sum", "joint"])
    param_names = ["d", "kind"]
    timeout = 300

    def setup(self, d, kind):
        _require()
        self.x, self.s = _sample(5000, d)

    def time_cumulative_ksd(self, d, kind):
        cumulative_ksd(self.x, self.s, kind=kind)

    def peakmem_cumulative_ksd(self, d, kind):
        cumulative_ksd(self.x, self.s, kind=kind)


class SteinThin:
    """``stein_thin``: m = 200 of n = 20000 points, O(n m d)."""

    params = ([2, 10, 100],)
    param_names = ["d"]
    timeout = 300

    def setup(self, d):
        _require()
        self.x, self.s = _sample(20000, d)

    def time_stein_thin(self, d):
        stein_thin(self.x, self.s, 200)

    def peakmem_stein_thin(self, d):
        stein_thin(self.x, self.s, 200)
