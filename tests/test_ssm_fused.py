"""The fused stochastic volatility filter step: its twin against the SV model's own kernel and scipy."""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

from sgmc.ssm.fused import sv_bootstrap_step, sv_bootstrap_step_twin
from sgmc.ssm.stochvol import SVKernel


def test_fused_step_is_the_sv_kernels_propagate_and_weight(xb):
    rng = np.random.default_rng(0)
    b, n = 3, 200
    phi = np.array([0.9, 0.5, -0.3])
    sigma = np.array([0.5, -0.8, 1.2])  # a signed 1/psi, as the model's parameterisation allows
    tau = np.array([0.7, 1.5, -0.4])
    x_prev, eps, y = rng.normal(size=(b, n)), rng.normal(size=(b, n)), rng.normal(size=b)
    w_prev = rng.random((b, n))
    w_prev[:, :5] = 0.0
    w_prev /= w_prev.sum(axis=1, keepdims=True)
    a = [xb.asarray(v) for v in (x_prev, eps, y, phi, sigma, tau, w_prev)]
    for weights in (None, a[6]):
        step = sv_bootstrap_step(*a[:6], weights)
        x = xb.to_numpy(step.x)
        scale = np.abs(phi[:, None] * x_prev) + np.abs(sigma[:, None] * eps)  # rounding of the two terms
        assert np.all(np.abs(x - (phi[:, None] * x_prev + np.abs(sigma)[:, None] * eps)) <= 10 * xb.eps * scale)
        kernel = SVKernel(*(xb.asarray(v) for v in (phi, sigma, tau)))
        lw = xb.to_numpy(kernel.log_weight(None, step.x[..., None], a[2][:, None]))
        np.testing.assert_allclose(xb.to_numpy(step.log_weight), lw, rtol=100 * xb.eps, atol=100 * xb.eps)
        logw = lw.astype(np.float64)
        a_log = logw - np.log(n) if weights is None else np.log(np.where(w_prev > 0, w_prev, 1)) + logw
        if weights is not None:
            a_log = np.where(w_prev > 0, a_log, -np.inf)
        want_ll = logsumexp(a_log, axis=1)
        tol = 1e-12 if xb.eps < 1e-10 else 1e-5
        np.testing.assert_allclose(xb.to_numpy(step.loglik), want_ll, rtol=tol, atol=tol)
        np.testing.assert_allclose(xb.to_numpy(step.weights), np.exp(a_log - want_ll[:, None]), rtol=tol, atol=tol)
        if weights is not None:
            assert np.all(xb.to_numpy(step.weights)[:, :5] == 0.0)


def test_dispatch_on_numpy_returns_the_twin():
    rng = np.random.default_rng(1)
    args = (rng.normal(size=(2, 10)), rng.normal(size=(2, 10)), rng.normal(size=2), np.full(2, 0.9),
            np.full(2, 0.3), np.full(2, 0.5))
    for got, want in zip(sv_bootstrap_step(*args), sv_bootstrap_step_twin(*args)):
        np.testing.assert_array_equal(got, want)
