"""Exact log-likelihood + gradient over a whole series: compiled recursions, scans and the peers.

* ``HMMExact``: Gaussian HMM (K = 3, m = 2) ``log_lik_and_grad`` with the compiled forward-backward
  (``native=True``) and without it (``False``: the parallel-in-time scan), T = 10^4 and 10^5.
* ``HMMScan``: the scan on each array backend (NumPy with Numba off, array-api-strict, torch), T = 10^4.
* ``LGSSMExact``: LGSSM n = 2, m = 3 ``log_lik_and_grad``, compiled and (T = 3000 only) the sequential
  twin, T = 3000 and 10^5; ``ScalarLGSSM``: the scalar model, 2 chains, compiled and the previous
  fast path.
* ``PeerHMM`` and ``PeerKalman``: hmmlearn's ``score_samples`` and statsmodels' ``KalmanSmoother.smooth``
  on the same data (skipped where the package is missing).

``asv_benchmarks/peer_ssm.py`` runs the same comparisons side by side in one process on one core and
writes ``docs/results/ssm-recursions.json``.
"""

from __future__ import annotations

import numpy as np

from .common import XPBenchmark, safe_import

with safe_import():
    from sgmc.backends import _numba
    from sgmc.ssm import LGSSM, GaussianHMM, HMMParams, LGSSMParams


def hmm_case(T: int):
    rng = np.random.default_rng(0)
    K, m = 3, 2
    Pi = np.full((K, K), 0.1) + 0.7 * np.eye(K)
    mu = np.array([[-2.0, 0.0], [0.0, 2.0], [2.0, -1.0]])
    Sigma = np.stack([np.eye(m), 0.5 * np.eye(m) + 0.2, np.diag([1.5, 0.7])])
    y = mu[rng.integers(0, K, T)] + rng.standard_normal((T, m))  # the cost does not depend on the values
    return y, Pi, mu, Sigma


def lgssm_case(T: int):
    rng = np.random.default_rng(1)
    A = np.array([[0.9, 0.1], [-0.1, 0.8]])
    C = np.vstack([np.eye(2), [[0.5, -0.5]]])
    return rng.standard_normal((T, 3)), A, 0.3 * np.eye(2), C, 0.5 * np.eye(3)


class _Switch:
    def _switch(self, native):
        if native and not _numba.available():
            raise NotImplementedError("Numba is not installed")
        self._old = _numba.set_enabled(native)

    def teardown(self, *args):
        _numba.set_enabled(self._old)


class HMMExact(_Switch):
    params = ([True, False], [10_000, 100_000])
    param_names = ["native", "T"]
    timeout = 120

    def setup(self, native, T):
        self._switch(native)
        y, Pi, mu, Sigma = hmm_case(T)
        self.model = GaussianHMM(y, 3)
        self.theta = self.model.unconstrain(HMMParams(Pi, mu, Sigma))[None]
        self.model.log_lik_and_grad(self.theta)

    def time_log_lik_and_grad(self, native, T):
        self.model.log_lik_and_grad(self.theta)


class HMMScan(XPBenchmark):
    params = (["numpy", "array_api_strict", "torch"],)
    param_names = ["backend"]

    def prepare(self):
        from sgmc.ssm.hmm_scan import messages_scan

        self.scan = messages_scan
        r = np.random.default_rng(2)
        K, T = 3, 10_000
        self.Pi = self.asarray(r.dirichlet(np.ones(K), size=(1, K)))
        self.p = self.asarray(r.random((1, T, K)) + 0.01)
        self.p0 = self.asarray(np.full((1, K), 1.0 / K))

    def warm_up(self, backend):
        self.time_scan(backend)

    def time_scan(self, backend):
        self.scan(self.Pi, self.p, self.p0)
        self.sync()


class LGSSMExact(_Switch):
    params = ([True, False], [3000, 100_000])
    param_names = ["native", "T"]
    timeout = 120

    def setup(self, native, T):
        if not native and T > 3000:
            raise NotImplementedError("the sequential twin is timed at T = 3000 only (about 0.1 ms a step)")
        self._switch(native)
        y, A, Q, C, R = lgssm_case(T)
        self.model = LGSSM(y, state_dim=2)
        self.theta = self.model.unconstrain(LGSSMParams(A, Q, C, R))[None]
        self.model.log_lik_and_grad(self.theta)

    def time_log_lik_and_grad(self, native, T):
        self.model.log_lik_and_grad(self.theta)


class ScalarLGSSM(_Switch):
    params = ([True, False], [1000, 100_000])
    param_names = ["native", "T"]

    def setup(self, native, T):
        self._switch(native)
        self.model = LGSSM(np.random.default_rng(2).standard_normal(T))
        self.theta = np.array([[0.9, 2.0, 2.0], [0.5, 1.0, 1.5]])
        self.model.log_lik_and_grad(self.theta)

    def time_log_lik_and_grad(self, native, T):
        self.model.log_lik_and_grad(self.theta)


class PeerHMM:
    params = ([10_000, 100_000],)
    param_names = ["T"]

    def setup(self, T):
        try:
            from hmmlearn import hmm
        except ImportError:
            raise NotImplementedError("hmmlearn is not installed") from None
        self.y, Pi, mu, Sigma = hmm_case(T)
        self.peer = hmm.GaussianHMM(3, covariance_type="full")
        self.peer.startprob_ = np.full(3, 1.0 / 3) @ Pi
        self.peer.transmat_, self.peer.means_, self.peer.covars_ = Pi, mu, Sigma
        self.peer.score_samples(self.y)

    def time_score_samples(self, T):
        self.peer.score_samples(self.y)


class PeerKalman:
    params = ([3000, 100_000],)
    param_names = ["T"]

    def setup(self, T):
        try:
            from statsmodels.tsa.statespace.kalman_smoother import KalmanSmoother
        except ImportError:
            raise NotImplementedError("statsmodels is not installed") from None
        y, A, Q, C, R = lgssm_case(T)
        ks = KalmanSmoother(k_endog=3, k_states=2)
        ks.bind(np.asfortranarray(y.T))
        ks["design"], ks["obs_cov"], ks["transition"], ks["selection"], ks["state_cov"] = C, R, A, np.eye(2), Q
        ks.initialize_known(np.zeros(2), A @ A.T + Q)
        ks.set_smoother_output(0, smoother_state=True, smoother_state_cov=True, smoother_state_autocov=True)
        self.ks = ks
        ks.smooth()

    def time_smooth(self, T):
        self.ks.smooth()
