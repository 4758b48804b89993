"""Particle filters and resampling on NumPy float64 arrays.

``ParticleFilterSV`` times the bootstrap particle filter of :mod:`sgmc.ssm.particle` on the
stochastic volatility model (phi = 0.9, sigma = 0.5, tau = 0.5), T = 10^4 observations, N in
{10^3, 10^4} particles, systematic resampling at every step: per step one Gaussian draw, two
exponentials (the emission density's exp(-x) and the weights) per particle, and one O(N)
resampling pass. ``ParticleScore`` adds the score smoothers (path and PaRIS) on a batch of 64
buffered windows of length 50. ``Resample`` times each scheme on N = 10^6 weights. The comparison
with the ``particles`` package on the same model and data is ``asv_benchmarks/peer_particles.py``.

This module depends on nothing but NumPy and sgmc.
"""

from __future__ import annotations

import numpy as np

try:
    from sgmc import backends
    from sgmc.ssm.particle import particle_filter
    from sgmc.ssm.resampling import resample
    from sgmc.ssm.stochvol import StochasticVolatility, SVKernel
except ImportError:  # an older commit without sgmc.ssm: asv skips on NotImplementedError
    particle_filter = None


def _require() -> None:
    if particle_filter is None:
        raise NotImplementedError("sgmc.ssm particle filters are not available in this commit")


def _sv_data(T: int, seed: int = 0) -> np.ndarray:
    theta = StochasticVolatility.theta_from(0.9, 0.5, 0.5)
    _, y = StochasticVolatility.simulate_data(backends.default_rng(seed), T, theta)
    return np.asarray(y)


class _Long:
    """asv settings of a call that takes seconds: one call a sample, 1 to 3 samples within 60 s, 600 s at most."""

    timeout = 600
    number = 1
    repeat = (1, 3, 60.0)


class ParticleFilterSV(_Long):
    """Bootstrap filter on SV data, T = 10^4, systematic resampling at every step."""

    params = ([1000, 10000],)
    param_names = ["n_particles"]

    def setup(self, n):
        _require()
        y = _sv_data(10_000)
        self.Y = y[None, :, None]
        self.kernel = SVKernel(np.array([0.9]), np.array([0.5]), np.array([0.5]))
        particle_filter(backends.default_rng(0), self.kernel, self.Y[:, :20], n)

    def time_filter(self, n):
        particle_filter(backends.default_rng(1), self.kernel, self.Y, n)


class ParticleScore(_Long):
    """Score smoothers on a batch of 64 windows of length 50 (N = 256 particles each)."""

    params = (["path", "paris"],)
    param_names = ["smoother"]

    def setup(self, smoother):
        _require()
        y = _sv_data(50, seed=1)
        b = 64
        self.Y = np.ascontiguousarray(np.broadcast_to(y[None, :, None], (b, 50, 1)))
        self.w = np.ones((b, 50))
        self.kernel = SVKernel(np.full(b, 0.9), np.full(b, 0.5), np.full(b, 0.5))

    def time_score(self, smoother):
        particle_filter(backends.default_rng(2), self.kernel, self.Y, 256, stat_weight=self.w, smoother=smoother)


class Resample:
    """``resample(rng, w, scheme)`` of N = 10^6 normalised weights."""

    params = (["systematic", "stratified", "residual", "multinomial"],)
    param_names = ["scheme"]
    number = 5
    repeat = (1, 5, 30.0)

    def setup(self, scheme):
        _require()
        rng = np.random.default_rng(0)
        w = rng.random(1_000_000)
        self.w = w / w.sum()
        self.gen = backends.default_rng(1)
        resample(self.gen, self.w, scheme)

    def time_resample(self, scheme):
        resample(self.gen, self.w, scheme)
