"""Scatter-add (``sgmc._scatter.scatter_add``): the native path of each backend beside the array-API twin.

The size is the BPMF minibatch of the review's MovieLens experiment (section 6.3): k = 8,000 ratings
(10% of 80,000) scattered into the m = 2,625 rows of U and V (943 + 1,682), d = 20, float64.
``NumPyVariants`` compares NumPy's two ways: one flattened ``bincount`` (the native path) and
``np.add.at``.
"""

from __future__ import annotations

import numpy as np

from .common import XPBenchmark, safe_import

with safe_import():
    from sgmc._scatter import scatter_add, scatter_add_twin
    from sgmc.backends._scatter import scatter_add_numpy, scatter_add_numpy_addat

M, K, D = 2625, 8000, 20


def _inputs(chains):
    rng = np.random.default_rng(0)
    shape = (chains, K) if chains > 1 else (K,)
    return rng.integers(0, M, shape), rng.normal(size=shape + (D,))


class ScatterAdd(XPBenchmark):
    """Native ``scatter_add`` and the array-API twin for 1 and 8 chains."""

    param_names = ("backend", "path", "chains")
    params = (XPBenchmark.params[0], ["native", "twin"], [1, 8])

    def prepare(self, path, chains):
        idx, vals = _inputs(chains)
        self.idx, self.vals = self.asarray(idx), self.asarray(vals)
        if path == "native":
            self.fn = lambda: scatter_add(self.xp, M, self.idx, self.vals)
        elif chains == 1:
            self.fn = lambda: scatter_add_twin(self.xp, M, self.idx, self.vals)
        else:
            raise NotImplementedError("the twin is timed for one chain")

    def warm_up(self, backend, *args):
        self.fn()
        self.sync()

    def time_scatter_add(self, backend, path, chains):
        self.fn()
        self.sync()


class NumPyVariants:
    """NumPy's flattened ``bincount`` (native) against ``np.add.at`` (k = 8,000 rows, d = 20)."""

    params = (["bincount", "add.at"],)
    param_names = ("variant",)

    def setup(self, variant):
        self.idx, self.vals = _inputs(1)
        self.fn = scatter_add_numpy if variant == "bincount" else scatter_add_numpy_addat

    def time_numpy_scatter(self, variant):
        self.fn(M, self.idx, self.vals)
