"""Exact SSM recursions without compiled natives, as the number of chains grows: no cliff.

Where a backend has no compiled recursion (torch here; NumPy with Numba switched off), the Kalman
smoother statistics (LGSSM n = 2, m = 3) and the HMM forward-backward messages (K = 3) run the
parallel-in-time scan or the sequential loop, whichever ``sgmc.ssm.kalman_paths`` models as cheaper.
``KalmanChains`` and ``HMMChains`` time one exact pass over T = 2 * 10^4 positions for 4, 5 and 16
chains, in process CPU time: the time per chain should stay flat from 4 to 16 chains (before the cost
model, 5 chains of the LGSSM fell from the scan to the Python loop over time and cost 10x 4 chains).

Run ``cd asv_benchmarks && python -m benchmarks.bench_ssm_no_cliff`` (pin it with ``taskset -c 1``) for the
CPU seconds per chain and the ratio 16 chains / 4 chains without asv.
"""

from __future__ import annotations

import time

import numpy as np

from .common import XPBenchmark, safe_import

with safe_import():
    from sgmc.backends import _numba
    from sgmc.ssm import hmm as hmm_mod
    from sgmc.ssm import kalman_stats

T = 20_000


def _lgssm(chains: int):
    rng = np.random.default_rng(1)
    A = np.broadcast_to(np.array([[0.9, 0.1], [-0.1, 0.8]]), (chains, 2, 2)).copy()
    C = np.broadcast_to(np.vstack([np.eye(2), [[0.5, -0.5]]]), (chains, 3, 2)).copy()
    Q = np.broadcast_to(0.3 * np.eye(2), (chains, 2, 2)).copy()
    R = np.broadcast_to(0.5 * np.eye(3), (chains, 3, 3)).copy()
    m0, P0 = np.zeros((chains, 2)), np.broadcast_to(np.eye(2), (chains, 2, 2)).copy()
    return A, Q, C, R, rng.standard_normal((chains, T, 3)), m0, P0


def _hmm(chains: int):
    rng = np.random.default_rng(2)
    K = 3
    Pi = np.broadcast_to(np.full((K, K), 0.1) + 0.7 * np.eye(K), (chains, K, K)).copy()
    logp = rng.standard_normal((chains, T, K))
    p = np.exp(logp - logp.max(axis=-1, keepdims=True))
    return Pi, p, np.full((chains, K), 1.0 / K)


class _NoNatives(XPBenchmark):
    params = (["numpy", "torch"], [4, 5, 16])
    param_names = ["backend", "chains"]
    timer = time.process_time
    number = 1
    repeat = (1, 3, 60.0)
    timeout = 300

    def setup(self, backend, chains):
        self._old = _numba.set_enabled(False)  # NumPy: the array-API paths, as without Numba
        super().setup(backend, chains)

    def teardown(self, *args):
        _numba.set_enabled(self._old)


class KalmanChains(_NoNatives):
    """``kalman_stats`` (log-likelihood and smoothed statistics: the exact gradient's pass), T = 2e4."""

    def prepare(self, chains):
        self.args = [self.asarray(a) for a in _lgssm(chains)]

    def warm_up(self, backend, chains):
        pass  # one pass is the whole timed work; nothing is cached between calls

    def time_stats(self, backend, chains):
        kalman_stats(*self.args)
        self.sync()


class HMMChains(_NoNatives):
    """``hmm.messages`` (normalised forward-backward: log-likelihood, marginals, transition counts)."""

    def prepare(self, chains):
        self.args = [self.asarray(a) for a in _hmm(chains)]

    def time_messages(self, backend, chains):
        hmm_mod.messages(self.xp, *self.args, None)
        self.sync()


if __name__ == "__main__":
    for cls in (KalmanChains, HMMChains):
        per_chain = {}
        for chains in (4, 5, 16):
            bench = cls()
            bench.setup("torch", chains)
            timed = getattr(bench, "time_stats", None) or bench.time_messages
            t0 = time.process_time()
            timed("torch", chains)
            per_chain[chains] = (time.process_time() - t0) / chains
            bench.teardown()
        cells = ", ".join(f"{c} chains {s:.3f} s" for c, s in per_chain.items())
        print(f"{cls.__name__} (torch, T = {T}): CPU per chain: {cells}; 16 / 4 chains {per_chain[16] / per_chain[4]:.2f}")
