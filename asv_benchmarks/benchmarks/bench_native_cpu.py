"""The compiled CPU paths (Numba) and their array-API twins, side by side.

Each benchmark runs with ``native`` True (the compiled loop) and False (the twin, switched in process
with ``sgmc.backends._numba.set_enabled``); without Numba the ``True`` half is skipped. Cases: the GLM
minibatch gradient sum (logistic, N = 10^5, n = 1000 per chain, 1 and 32 chains, d = 10 and 100) and its
two-point control-variate form, the BPMF minibatch gradient (the review's MovieLens-100k size, 8,000
ratings of 943 users and 1,682 items, d = 20, one and two points), the minibatch draw without replacement, the KSD pair sums (n = 20,000,
d = 10), and the resampling schemes (100 x 1000 particles).
"""

from __future__ import annotations

import numpy as np

from .common import logistic_data, safe_import

with safe_import():
    from sgmc.backends import _numba, default_rng
    from sgmc._sampling import subsample
    from sgmc.diagnostics import ksd
    from sgmc.models import BPMF, LogisticRegression
    from sgmc.ssm import resampling


class _Switch:
    def _switch(self, native):
        if native and not _numba.available():
            raise NotImplementedError("Numba is not installed")
        if native:
            import numba  # noqa: F401  (the subset draw runs its compiled pass only once Numba is loaded)
        self._old = _numba.set_enabled(native)

    def teardown(self, *args):
        _numba.set_enabled(self._old)


class GLMGradient(_Switch):
    params = ([True, False], [10, 100], [1, 32], [False, True])
    param_names = ["native", "dim", "chains", "two_point"]

    def setup(self, native, dim, chains, two_point):
        self._switch(native)
        X, y = logistic_data(100_000, dim)
        self.model = LogisticRegression(X, y)
        r = np.random.default_rng(1)
        self.theta = 0.1 * r.standard_normal((chains, dim))
        self.centre = 0.9 * self.theta
        self.idx = r.integers(0, 100_000, (chains, 1000))
        self.time_gradient(native, dim, chains, two_point)

    def time_gradient(self, native, dim, chains, two_point):
        if two_point:
            self.model.grad_log_lik_diff_sum(self.theta, self.centre, self.idx)
        else:
            self.model.grad_log_lik_sum(self.theta, self.idx)


class BPMFGradient(_Switch):
    params = ([True, False], [False, True])
    param_names = ["native", "two_point"]

    def setup(self, native, two_point):
        self._switch(native)
        r = np.random.default_rng(0)
        n, users, items, d = 80_000, 943, 1682, 20
        self.model = BPMF(r.integers(0, users, n), r.integers(0, items, n), r.integers(1, 6, n).astype(float),
                          users, items, d=d, centre=True)
        self.theta = 0.3 * r.standard_normal((1, self.model.dim))
        self.centre = 0.9 * self.theta
        self.idx = r.choice(n, size=(1, 8000), replace=False)
        self.time_gradient(native, two_point)

    def time_gradient(self, native, two_point):
        if two_point:
            self.model.grad_log_lik_diff_sum(self.theta, self.centre, self.idx)
        else:
            self.model.grad_log_lik_sum(self.theta, self.idx)


class MinibatchDraw(_Switch):
    params = ([True, False], [1, 32])
    param_names = ["native", "chains"]

    def setup(self, native, chains):
        self._switch(native)
        self.rng = default_rng(0)
        subsample(self.rng, 100_000, 1000, chains)

    def time_without_replacement(self, native, chains):
        subsample(self.rng, 100_000, 1000, chains)


class KSDPairSums(_Switch):
    params = ([True, False],)
    param_names = ["native"]
    timeout = 300

    def setup(self, native):
        self._switch(native)
        r = np.random.default_rng(0)
        self.x = r.standard_normal((20_000, 10))
        ksd(self.x[:200], -self.x[:200])

    def time_ksd(self, native):
        ksd(self.x, -self.x)


class Resampling(_Switch):
    params = ([True, False], ["systematic", "stratified", "multinomial", "residual"])
    param_names = ["native", "scheme"]

    def setup(self, native, scheme):
        self._switch(native)
        r = np.random.default_rng(0)
        w = r.random((100, 1000))
        self.w = w / w.sum(axis=1, keepdims=True)
        self.u = r.random(100) if scheme == "systematic" else r.random((100, 1000))
        resampling.ancestors(self.w, self.u, scheme)

    def time_ancestors(self, native, scheme):
        resampling.ancestors(self.w, self.u, scheme)
