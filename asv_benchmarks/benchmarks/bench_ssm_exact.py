"""One buffered stochastic gradient step (exact smoothing) for state space models, NumPy float64.

``BufferedStep`` times ``Buffered.estimate`` for the scalar LGSSM and a 2-state Gaussian HMM with
S = 20, B = 10 for 16 chains, at series lengths T = 10^3 and T = 10^6: the estimator touches only
the buffered windows, so the two times should agree (the ratio T = 10^6 / T = 10^3 is the check).
``WindowBatch`` compares 64 subsequences of one chain done as one batch (``subsequences=64``) with
64 separate calls of one subsequence each, which is what batching over windows saves.

Run ``python asv_benchmarks/benchmarks/bench_ssm_exact.py`` for the ratios without asv.
"""

from __future__ import annotations

import time

import numpy as np

try:
    from sgmc import backends
    from sgmc.ssm import LGSSM, Buffered, GaussianHMM, HMMParams
except ImportError:  # a commit without sgmc.ssm: asv skips on NotImplementedError
    LGSSM = None


def _require() -> None:
    if LGSSM is None:
        raise NotImplementedError("sgmc.ssm is not available in this commit")


def _model(kind: str, T: int):
    rng = np.random.default_rng(0)
    if kind == "lgssm":
        y = rng.standard_normal(T)  # the cost does not depend on the values
        return LGSSM(y), np.array([0.9, 2.0, 2.0])
    model = GaussianHMM(rng.standard_normal(T), 2)
    theta = model.unconstrain(HMMParams(np.array([[0.9, 0.1], [0.2, 0.8]]), np.array([[-1.0], [1.0]]), np.array([[[0.5]], [[0.5]]])))
    return model, theta


class BufferedStep:
    """``Buffered(model, S=20, B=10).estimate`` for 16 chains."""

    params = (["lgssm", "hmm"], [1000, 1000000])
    param_names = ["model", "T"]
    number = 5
    repeat = (3, 10, 30.0)

    def setup(self, kind, T):
        _require()
        self.model, theta = _model(kind, T)
        self.est = Buffered(self.model, subsequence_length=20, buffer=10)
        self.pos = np.broadcast_to(theta, (16, self.model.dim)).copy()
        self.rng = backends.default_rng(0)
        self.est.estimate(self.rng, None, self.pos)

    def time_estimate(self, kind, T):
        self.est.estimate(self.rng, None, self.pos)


class WindowBatch:
    """64 subsequences in one batched call versus 64 calls of one subsequence (one chain)."""

    params = (["lgssm", "hmm"], ["batched", "separate"])
    param_names = ["model", "mode"]
    number = 1
    repeat = (3, 10, 30.0)

    def setup(self, kind, mode):
        _require()
        self.model, theta = _model(kind, 10000)
        self.pos = theta[None, :].copy()
        self.batched = Buffered(self.model, subsequence_length=20, buffer=10, subsequences=64)
        self.single = Buffered(self.model, subsequence_length=20, buffer=10)
        self.rng = backends.default_rng(0)

    def time_gradient(self, kind, mode):
        if mode == "batched":
            self.batched.estimate(self.rng, None, self.pos)
        else:
            for _ in range(64):
                self.single.estimate(self.rng, None, self.pos)


def _best(fn, repeat=7):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


if __name__ == "__main__":
    _require()
    for kind in ("lgssm", "hmm"):
        t = {}
        for T in (1000, 1000000):
            b = BufferedStep()
            b.setup(kind, T)
            t[T] = _best(lambda: b.time_estimate(kind, T))
        print(f"{kind}: one buffered step (16 chains, S=20, B=10): T=1e3 {t[1000] * 1e3:.2f} ms, "
              f"T=1e6 {t[1000000] * 1e3:.2f} ms, ratio {t[1000000] / t[1000]:.2f}")
        w = {}
        for mode in ("batched", "separate"):
            b = WindowBatch()
            b.setup(kind, mode)
            w[mode] = _best(lambda: b.time_gradient(kind, mode), repeat=3)
        print(f"{kind}: 64 subsequences batched {w['batched'] * 1e3:.1f} ms, 64 separate calls "
              f"{w['separate'] * 1e3:.1f} ms, ratio separate/batched {w['separate'] / w['batched']:.1f}")
