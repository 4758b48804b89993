"""Shared test utilities: reproducible cross-backend noise, finite differences and replicate-chain errors.

Statistical tests in this suite estimate moments from many independent chains run side by side (the
chains axis), so the Monte Carlo standard error of any per-chain statistic is its sample standard
deviation across chains divided by sqrt(chains): no autocorrelation model is needed, only independence
of the chains, which the generators guarantee.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sgmc import backends
from sgmc.backends._base import HostGenerator, numpy_dtype

# Two-sided normal quantile used for statistical tolerances. P(|Z| > 4.5) = 6.8e-6, so a suite of a
# few hundred comparisons at fixed seeds has a false-failure probability below 1e-3 when the code is
# right, while typical implementation errors (a missing square root on the noise, h instead of h/2 in
# the drift, a wrong friction sign) move the estimates by tens of standard errors.
Z_TOL = 4.5


class ReplayGenerator(HostGenerator):
    """A host generator whose normal and uniform draws are made in float64 and then cast.

    The backends' own generators draw float32 numbers with a float32 algorithm, so a float32 run and a
    float64 run with one seed see different noise. This generator feeds every backend and dtype the
    same float64 stream (rounded to the working dtype), which makes runs on different backends
    comparable number by number.
    """

    def normal(self, shape, dtype=None):
        a = self._np.standard_normal(shape)
        return self._cast(a, dtype)

    def uniform(self, shape, dtype=None):
        a = self._np.random(shape)
        return self._cast(a, dtype)

    def _cast(self, a: np.ndarray, dtype: Any) -> Any:
        if dtype is not None:
            a = a.astype(numpy_dtype(dtype))
        if self._identity:
            return a
        return self.backend.from_host(a, dtype, self.device)

    def spawn(self, n):
        return [ReplayGenerator(self.backend, s, self.device) for s in self._seed_seq.spawn(n)]


def replay_rng(case: Any, seed: int) -> ReplayGenerator:
    """A :class:`ReplayGenerator` for a backend case of ``tests/conftest.py``."""
    return ReplayGenerator(case.backend, np.random.SeedSequence(seed), case.device)


def tol_for(case: Any, float64: float = 1e-10, float32: float = 1e-4) -> float:
    """Relative tolerance for comparing a backend's result to a float64 NumPy reference."""
    return float32 if case.float_dtype == "float32" else float64


def fd_jacobian(f, theta: np.ndarray, step: float = 1e-5) -> np.ndarray:
    """Central finite differences of ``f(theta) -> (chains, ...)`` in each coordinate of ``theta``.

    ``theta`` is ``(chains, dim)``; the result has shape ``f(theta).shape + (dim,)``. The error is
    O(step^2) from truncation plus O(eps |f| / step) from rounding.
    """
    theta = np.asarray(theta, dtype=np.float64)
    cols = []
    for j in range(theta.shape[1]):
        e = np.zeros_like(theta)
        e[:, j] = step
        cols.append((np.asarray(f(theta + e)) - np.asarray(f(theta - e))) / (2.0 * step))
    return np.stack(cols, axis=-1)


def replicate_mean(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean over the first axis (independent replicates) and its standard error."""
    values = np.asarray(values, dtype=np.float64)
    n = values.shape[0]
    return values.mean(axis=0), values.std(axis=0, ddof=1) / np.sqrt(n)


def run_moments(sampler, estimator, rng, x0, step_size: float, n_burn: int, n_keep: int, *, state=None,
                on_step=None):
    """Run ``sampler`` from ``x0`` (chains, dim); return per-chain first and second moments of kept draws.

    Follows the sampler contract: ``state = sampler.init(rng, x0, estimator)`` and
    ``state, info = sampler.step(rng, state, estimator, step_size)``. ``state``, when given, continues
    a run from that state instead of calling ``init``; ``on_step(info)``, when given, sees the
    :class:`~sgmc.samplers.StepInfo` of every kept iteration (MALA's acceptances, for instance).

    Returns ``(m1, m2)`` with ``m1`` of shape (chains, dim) and ``m2`` (chains, dim, dim), each the
    time average over the ``n_keep`` iterations after ``n_burn`` discarded ones.
    """
    if state is None:
        state = sampler.init(rng, x0, estimator)
    for _ in range(n_burn):
        state, _ = sampler.step(rng, state, estimator, step_size)
    chains, dim = x0.shape
    s1 = np.zeros((chains, dim))
    s2 = np.zeros((chains, dim, dim))
    for _ in range(n_keep):
        state, info = sampler.step(rng, state, estimator, step_size)
        if on_step is not None:
            on_step(info)
        x = np.asarray(state.position, dtype=np.float64)
        s1 += x
        s2 += x[:, :, None] * x[:, None, :]
    return s1 / n_keep, s2 / n_keep


class TaggedGradient:
    """A fake gradient estimator following the contract, whose reported cost identifies each call.

    It returns the exact gradient of ``model`` (and, with ``log_density=True``, the exact log
    posterior). Its state is the number of ``estimate`` calls made since ``init`` (``init`` returns
    ``None``, which counts as 0), and call number ``k`` reports ``n_evals = 2**k``, so the
    ``n_evals`` a sampler reports for a step tells exactly which calls it added up (each call is a
    distinct bit). Nothing is kept on the object.
    """

    name = "tagged"
    init_cost = 0.0

    def __init__(self, model: Any, log_density: bool = False):
        self.model = model
        self.log_density = bool(log_density)

    def init(self, rng, position):
        return None

    def estimate(self, rng, est_state, position):
        from sgmc.estimators import EstimateInfo

        k = 0 if est_state is None else est_state
        logp = self.model.log_posterior(position) if self.log_density else None
        return self.model.grad_log_posterior(position), k + 1, EstimateInfo(2**k, 0, logp)


def pooled_moments(m1: np.ndarray, m2: np.ndarray):
    """Pooled mean and covariance from per-chain moments, with replicate-chain standard errors.

    The covariance is ``mean_c(m2_c) - mu mu^T`` with ``mu`` the pooled mean. Its standard error uses
    the linearisation ``m2_c - m1_c mu^T - mu m1_c^T``, whose chain average differs from the estimate
    by a constant, so its spread across chains is the spread of the estimate (delta method).
    """
    mu, mu_se = replicate_mean(m1)
    lin = m2 - m1[:, :, None] * mu[None, None, :] - mu[None, :, None] * m1[:, None, :]
    cov = m2.mean(axis=0) - np.outer(mu, mu)
    _, cov_se = replicate_mean(lin)
    return mu, mu_se, cov, cov_se


def to_host(x: Any) -> np.ndarray:
    """A float64 NumPy copy of any backend array."""
    return np.asarray(backends.to_numpy(x), dtype=np.float64)
