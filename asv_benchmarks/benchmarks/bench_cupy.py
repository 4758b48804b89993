"""The CUDA paths (``backend="cupy"``) beside the same calls on NumPy, at the sizes of the GPU targets.

Every class is parametrised over ``["numpy", "cupy"]``: on a machine without a usable CUDA device the
CuPy cases are skipped (``NotImplementedError`` from :func:`common.load_backend`) and the NumPy cases
still run, so the two columns of one run on a GPU machine give the speed-ups directly. The kernels
are compiled and warmed up in ``setup``; timed calls end with a device synchronisation.

* ``KSDKernel``: ``ksd`` at n in {10^4, 10^5}, d = 10, float64 (target on an H100: within 2x of the
  pair-sum arithmetic bound at n = 10^5, about 30 ms for the joint kind; see docs/gpu.md).
* ``SystematicResampling``: ``ancestors(w, u, "systematic")`` for one row of N in {10^5, 10^7}
  particles (target: memory bandwidth at 10^7).
* ``SGLDManyChains``: one SGLD iteration of 1,024 chains on the review's logistic regression
  (N = 10^5, d = 10, n = 100); chain-iterations per second = 1024 / time (target: 20x NumPy).
* ``GLMGradient``: the minibatch gradient alone for 1,024 chains.
* ``StochVolStep``: the fused bootstrap step of the SV particle filter, 64 filters of 10^4 particles.

NumPy at n = 10^5 for KSD takes minutes and runs only with ``SGMC_BENCH_LARGE=1``.
"""

from __future__ import annotations

import numpy as np

from .common import XPBenchmark, logistic_data, safe_import, skip_unless_large

with safe_import():
    from sgmc.backends import default_rng
    from sgmc.diagnostics import ksd
    from sgmc.estimators import Minibatch
    from sgmc.models import LogisticRegression
    from sgmc.samplers import SGLD
with safe_import():
    from sgmc.ssm.fused import sv_bootstrap_step
    from sgmc.ssm.resampling import ancestors

GPU_BACKENDS = ["numpy", "cupy"]


def _require(*names):
    for name in names:
        if name not in globals():
            msg = f"{name} is not available in this commit"
            raise NotImplementedError(msg)


class KSDKernel(XPBenchmark):
    """``ksd(x, s, kind=kind)``, identity preconditioner, float64."""

    param_names = ("backend", "n", "kind")
    params = (GPU_BACKENDS, [10_000, 100_000], ["joint", "sum"])
    number = 1
    repeat = (1, 5, 120.0)
    timeout = 1800

    def prepare(self, n, kind):
        _require("ksd")
        if self.be.name == "numpy":
            skip_unless_large(n > 10_000)
        rng = np.random.default_rng(0)
        x = rng.standard_normal((n, 10))
        self.x = self.asarray(x)
        self.s = self.asarray(-x + 0.1 * rng.standard_normal((n, 10)))

    def warm_up(self, backend, n, kind):
        ksd(self.x[:256], self.s[:256], kind=kind)
        self.sync()

    def time_ksd(self, backend, n, kind):
        ksd(self.x, self.s, kind=kind)
        self.sync()


class SystematicResampling(XPBenchmark):
    """Ancestors of one row of N particles from pre-drawn uniforms."""

    param_names = ("backend", "n")
    params = (GPU_BACKENDS, [100_000, 10_000_000])

    def prepare(self, n):
        _require("ancestors")
        rng = np.random.default_rng(1)
        w = rng.random((1, n))
        self.w = self.asarray(w / w.sum())
        self.u = self.asarray(rng.random(1))

    def warm_up(self, backend, n):
        self.time_systematic(backend, n)

    def time_systematic(self, backend, n):
        ancestors(self.w, self.u, "systematic")
        self.sync()


class SGLDManyChains(XPBenchmark):
    """One SGLD iteration of 1,024 chains (draw minibatches, gradient, step)."""

    param_names = ("backend", "chains")
    params = (GPU_BACKENDS, [1024])

    def prepare(self, chains):
        _require("SGLD")
        X, y = logistic_data(100_000, 10)
        self.model = LogisticRegression(X, y, backend=self.be)
        self.estimator = Minibatch(self.model, 100)
        self.sampler = SGLD()
        self.rng = default_rng(0, backend=self.be)
        start = self.rng.normal((chains, 10), dtype=self.model.dtype)
        self.state = self.sampler.init(self.rng, start, self.estimator)

    def warm_up(self, backend, chains):
        self.time_sgld_step(backend, chains)

    def time_sgld_step(self, backend, chains):
        self.state, _ = self.sampler.step(self.rng, self.state, self.estimator, 1e-5)
        self.sync()


class GLMGradient(XPBenchmark):
    """``grad_log_lik_sum`` for 1,024 chains with minibatches of n = 1000 (gather and reduce)."""

    param_names = ("backend", "chains")
    params = (GPU_BACKENDS, [1024])

    def prepare(self, chains):
        _require("LogisticRegression")
        X, y = logistic_data(100_000, 10)
        self.model = LogisticRegression(X, y, backend=self.be)
        rng = np.random.default_rng(2)
        self.theta = self.asarray(rng.standard_normal((chains, 10)) * 0.1)
        self.idx = self.asarray(rng.integers(0, 100_000, (chains, 1000)))

    def warm_up(self, backend, chains):
        self.time_grad(backend, chains)

    def time_grad(self, backend, chains):
        self.model.grad_log_lik_sum(self.theta, self.idx)
        self.sync()


class StochVolStep(XPBenchmark):
    """The fused propagate-weight-normalise step of the SV bootstrap filter: 64 filters x 10^4 particles."""

    param_names = ("backend",)
    params = (GPU_BACKENDS,)

    def prepare(self):
        _require("sv_bootstrap_step")
        rng = np.random.default_rng(3)
        b, n = 64, 10_000
        self.args = [self.asarray(a) for a in (
            rng.standard_normal((b, n)), rng.standard_normal((b, n)), rng.standard_normal(b),
            np.full(b, 0.95), np.full(b, 0.3), np.full(b, 0.7))]

    def warm_up(self, backend):
        self.time_step(backend)

    def time_step(self, backend):
        sv_bootstrap_step(*self.args)
        self.sync()
