"""Stochastic gradient MCMC on Bayesian logistic regression (N = 10^5 data, minibatches of n = 1000).

``MinibatchDraw`` times the per-chain index draw alone; ``SGLDStep`` one SGLD iteration (a fresh
minibatch per chain, the gradient, the step) through the sampler kernel; ``SGLDSample`` the time and
peak memory of a whole ``sgmc.sample`` run of 10^4 iterations, which adds the runner's bookkeeping
and the preallocated trace; ``SGLDCVSample`` the same with the control-variate estimator at a fixed
centre (no mode search timed); ``SGLDCVStep`` one control-variate iteration beside ``SGLDStep``;
``SGLDFixedCost`` the one-chain floor with and without replacement; ``MomentumStep`` one iteration of
SGHMC (one kick per iteration), BAOAB and BADODAB, each one minibatch gradient per step. They run d in {10, 100} and 1 or 32 chains. Per chain-iteration
costs and the comparison with a hand-written NumPy loop are in ``asv_benchmarks/peer_sgld.py`` and
``docs/performance.md``.
"""

from __future__ import annotations

from .common import BACKENDS, XPBenchmark, logistic_data, safe_import

with safe_import():
    import sgmc
    from sgmc.backends import default_rng
    from sgmc.estimators import ControlVariate, Minibatch
    from sgmc.models import LogisticRegression
    from sgmc.samplers import BADODAB, BAOAB, SGHMC, SGLD
with safe_import():
    from sgmc._sampling import subsample

N_DATA = 100_000
BATCH = 1_000
STEP_SIZE = 1e-5
N_ITER = 10_000


class _LogisticSGLD(XPBenchmark):
    param_names = ("backend", "dim", "chains")
    params = (BACKENDS, [10, 100], [1, 32])

    def prepare(self, dim, chains):
        X, y = logistic_data(N_DATA, dim)
        self.model = LogisticRegression(self.asarray(X), self.asarray(y))


class SGLDStep(_LogisticSGLD):
    """One SGLD iteration for all chains: minibatch draw, gradient estimate, Langevin step."""

    def prepare(self, dim, chains):
        super().prepare(dim, chains)
        self.estimator = Minibatch(self.model, BATCH)
        self.sampler = SGLD()
        self.rng = default_rng(0, backend=self.be)
        start = self.rng.normal((chains, dim), dtype=self.model.dtype)
        self.state = self.sampler.init(self.rng, start, self.estimator)

    def warm_up(self, backend, dim, chains):
        self.time_sgld_step(backend, dim, chains)

    def time_sgld_step(self, backend, dim, chains):
        self.sampler.step(self.rng, self.state, self.estimator, STEP_SIZE)
        self.sync()


class SGLDCVStep(SGLDStep):
    """One SGLD-CV iteration at a fixed centre: one gather, one product against (theta, centre).

    Compare with ``SGLDStep``: the control variate should cost about as much as plain SGLD.
    """

    def prepare(self, dim, chains):
        super().prepare(dim, chains)
        centre = self.xp.zeros((dim,), dtype=self.model.dtype)
        self.estimator = ControlVariate(self.model, BATCH, centre=centre)
        start = self.rng.normal((chains, dim), dtype=self.model.dtype)
        self.state = self.sampler.init(self.rng, start, self.estimator)


class MomentumStep(_LogisticSGLD):
    """One iteration of a momentum sampler with one minibatch gradient: SGHMC (one kick, momentum kept
    between iterations), BAOAB and BADODAB (the splitting integrators of docs/samplers.md). The
    gradient dominates, so the three should cost about the same; BADODAB adds two thermostat sums."""

    param_names = ("backend", "sampler", "dim", "chains")
    params = (BACKENDS, ["sghmc", "baoab", "badodab"], [10, 100], [1, 32])

    def prepare(self, sampler, dim, chains):
        super().prepare(dim, chains)
        self.estimator = Minibatch(self.model, BATCH)
        self.sampler = {"sghmc": lambda: SGHMC(n_leapfrog=1, resample_momentum=False), "baoab": BAOAB,
                        "badodab": BADODAB}[sampler]()
        self.rng = default_rng(0, backend=self.be)
        start = self.rng.normal((chains, dim), dtype=self.model.dtype)
        self.state = self.sampler.init(self.rng, start, self.estimator)

    def warm_up(self, backend, sampler, dim, chains):
        self.time_momentum_step(backend, sampler, dim, chains)

    def time_momentum_step(self, backend, sampler, dim, chains):
        self.sampler.step(self.rng, self.state, self.estimator, STEP_SIZE)
        self.sync()


class SGLDFixedCost(XPBenchmark):
    """The per-iteration floor: ``sgmc.sample``, one chain, d = 10, 200 iterations, with and without
    replacement (the peers' comparison is ``asv_benchmarks/peer_jax.py``)."""

    param_names = ("backend", "replace")
    params = (BACKENDS, [True, False])

    def prepare(self, replace):
        X, y = logistic_data(N_DATA, 10)
        self.model = LogisticRegression(self.asarray(X), self.asarray(y))
        self.estimator = Minibatch(self.model, BATCH, replace=replace)

    def warm_up(self, backend, replace):
        self.time_sample_200(backend, replace)

    def time_sample_200(self, backend, replace):
        sgmc.sample(self.model, "sgld", self.estimator, step_size=STEP_SIZE, n_iter=200, chains=1,
                    rng=0, progress=False)
        self.sync()


class MinibatchDraw(XPBenchmark):
    """Per-chain minibatch indices, without (the default) or with replacement: n = 1000 of N = 10^5."""

    param_names = ("backend", "chains", "replace")
    params = (BACKENDS, [1, 32], [False, True])

    def prepare(self, chains, replace):
        self.rng = default_rng(0, backend=self.be)

    def warm_up(self, backend, chains, replace):
        self.time_subsample(backend, chains, replace)

    def time_subsample(self, backend, chains, replace):
        subsample(self.rng, N_DATA, BATCH, chains, replace=replace)
        self.sync()


class SGLDSample(_LogisticSGLD):
    """``sgmc.sample`` with SGLD: 10^4 iterations, every draw kept (slow: minutes per backend)."""

    # one run is the measurement; the largest case takes minutes on a 2-core CPU
    number = 1
    repeat = 1
    rounds = 2
    warmup_time = 0
    timeout = 3600

    def warm_up(self, backend, dim, chains):
        self._run(chains, 10)

    def _run(self, chains, n_iter):
        trace = sgmc.sample(self.model, "sgld", "minibatch", step_size=STEP_SIZE, batch_size=BATCH,
                            n_iter=n_iter, chains=chains, rng=0, progress=False)
        self.sync()
        return trace

    def time_sample(self, backend, dim, chains):
        self._run(chains, N_ITER)

    def peakmem_sample(self, backend, dim, chains):
        self._run(chains, N_ITER)


class SGLDCVSample(SGLDSample):
    """``sgmc.sample`` with SGLD-CV at a fixed centre: 10^4 iterations, two gathers per minibatch."""

    def prepare(self, dim, chains):
        super().prepare(dim, chains)
        self.centre = self.xp.zeros((dim,), dtype=self.model.dtype)

    def _run(self, chains, n_iter):
        trace = sgmc.sample(self.model, "sgld", "cv", step_size=STEP_SIZE, batch_size=BATCH,
                            n_iter=n_iter, chains=chains, rng=0, progress=False,
                            estimator_options={"centre": self.centre})
        self.sync()
        return trace
