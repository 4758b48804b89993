"""The fused blocks of sampler iterations (sgmc.samplers._fused) against their twin and the step loop.

``FusedBlock`` times one block of 100 iterations on pre-drawn numbers: the compiled native
(``glm_fused_block``) against its twin (the samplers' own steps fed the same numbers), for SGLD, SGHMC
(L = 5) and SGNHT with minibatch, control-variate and SVRG estimates, logistic regression with
N = 10^5, n = 1000, d = 10 and 100, 1 and 32 chains. ``FusedSample`` times ``sgmc.sample`` end to end
(200 SGLD or SGLD-CV iterations, draws with replacement as in asv_benchmarks/peer_jax.py) with the
compiled paths on and switched off in process (the blocks then run on the twin); without Numba the
native halves are skipped. ``FusedModelBlock`` does as ``FusedBlock`` for the BNN and BPMF.
"""

from __future__ import annotations

import numpy as np

from .common import logistic_data, safe_import

with safe_import():
    import sgmc
    from sgmc.backends import _numba, default_rng
    from sgmc.estimators import SVRG, ControlVariate, Minibatch
    from sgmc.models import BPMF, BayesianNeuralNetwork, LogisticRegression
    from sgmc.samplers import SGHMC, SGLD, SGNHT
    from sgmc.samplers import _fused

_SAMPLERS = {"sgld": SGLD, "sghmc": lambda: SGHMC(n_leapfrog=5), "sgnht": SGNHT}


def _estimator(name, model, centre):
    if name == "minibatch":
        return Minibatch(model, 1000, replace=True)
    if name == "cv":
        return ControlVariate(model, 1000, centre=centre, replace=True)
    return SVRG(model, 1000, replace=True)


class FusedBlock:
    params = (["native", "twin"], ["sgld", "sghmc", "sgnht"], ["minibatch", "cv", "svrg"], [10, 100], [1, 32])
    param_names = ["path", "sampler", "estimator", "dim", "chains"]
    timeout = 300

    def setup(self, path, sampler, estimator, dim, chains):
        if path == "native" and not _numba.available():
            raise NotImplementedError("Numba is not installed")
        if sampler != "sgld" and (dim, chains) != (10, 1):
            raise NotImplementedError("the momentum samplers at the small size only")
        X, y = logistic_data(100_000, dim)
        model = LogisticRegression(X, y)
        rng = default_rng(0)
        self.sampler = _SAMPLERS[sampler]()
        self.estimator = _estimator(estimator, model, np.zeros(dim))
        self.state = self.sampler.init(rng, np.zeros((chains, dim)), self.estimator)
        self.plan = _fused.plan(self.sampler, self.estimator, self.state.position)
        if self.plan is None:
            raise NotImplementedError("no fused native on this backend")
        self.hs = [1e-5] * 100
        self.z, self.idx = self.plan.draw(rng, 100, chains)
        self.path = path
        self.time_block(path, sampler, estimator, dim, chains)

    def time_block(self, path, sampler, estimator, dim, chains):
        if self.path == "native":
            self.plan.run(self.state, self.hs, self.z, self.idx)
        else:
            _fused.twin_block(self.sampler, self.estimator, self.state, self.hs, self.z, self.idx)


class FusedSample:
    params = ([True, False], ["sgld", "sgldcv"], [10, 100], [1, 32])
    param_names = ["fused", "method", "dim", "chains"]
    timeout = 300

    def setup(self, fused, method, dim, chains):
        if fused and not _numba.available():
            raise NotImplementedError("Numba is not installed")
        self._old = _numba.set_enabled(fused)
        X, y = logistic_data(100_000, dim)
        self.model = LogisticRegression(X, y)
        self.est = Minibatch(self.model, 1000, replace=True)
        if method == "sgldcv":  # the centre found once, here: the timed runs sample only
            cv = ControlVariate(self.model, 1000, replace=True)
            self.est = cv.prepare(default_rng(0), np.zeros((1, dim))).estimator
        self.chains = chains
        self.time_sample(fused, method, dim, chains)

    def teardown(self, *args):
        _numba.set_enabled(self._old)

    def time_sample(self, fused, method, dim, chains):
        sgmc.sample(self.model, "sgld", self.est, step_size=1e-5, n_iter=200, chains=self.chains,
                    rng=0, progress=False)


class FusedModelBlock:
    """The BNN's and BPMF's fused blocks (``bnn_fused_block``, ``bpmf_fused_block``) against their twin.

    One block of 20 SGLD iterations on pre-drawn numbers, at a small and a large minibatch: the BNN
    784-100-10 (N = 10^4) at n = 50 and 500, BPMF at MovieLens-100k's size (943 x 1682, d = 20, 8 x 10^4
    ratings) at n = 800 and 8000, where the BPMF block declines (``BPMF_MAX_TOUCH``) and ``native`` then
    times the twin behind the decline.
    """

    params = (["native", "twin"], ["bnn", "bpmf"], ["minibatch", "cv", "svrg"], ["small", "large"])
    param_names = ["path", "model", "estimator", "size"]
    timeout = 300

    def setup(self, path, model, estimator, size):
        if path == "native" and not _numba.available():
            raise NotImplementedError("Numba is not installed")
        r = np.random.default_rng(0)
        if model == "bnn":
            m = BayesianNeuralNetwork(r.random((10_000, 784)), r.integers(0, 10, 10_000), n_hidden=100,
                                      n_classes=10)
            n = 50 if size == "small" else 500
        else:
            k = 80_000
            m = BPMF(r.integers(0, 943, k), r.integers(0, 1682, k), r.integers(1, 6, k).astype(float), 943, 1682,
                     d=20, centre=True)
            n = 800 if size == "small" else 8000
        est = {"minibatch": Minibatch, "cv": ControlVariate, "svrg": SVRG}[estimator]
        kw = {"centre": np.zeros(m.dim)} if estimator == "cv" else {}
        self.estimator = est(m, n, replace=True, **kw)
        self.sampler = SGLD()
        rng = default_rng(0)
        self.state = self.sampler.init(rng, np.zeros((1, m.dim)), self.estimator)
        self.plan = _fused.plan(self.sampler, self.estimator, self.state.position)
        if self.plan is None:
            raise NotImplementedError("no fused native on this backend")
        self.hs = [1e-6] * 20
        self.z, self.idx = self.plan.draw(rng, 20, 1)
        self.path = path
        self.time_block(path, model, estimator, size)

    def time_block(self, path, model, estimator, size):
        if self.path == "native":
            self.plan.run(self.state, self.hs, self.z, self.idx)
        else:
            _fused.twin_block(self.sampler, self.estimator, self.state, self.hs, self.z, self.idx)
