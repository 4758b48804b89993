"""The GLMs' gradient sums over groups of chains (``block_elements``) against a brute-force sum.

``grad_log_lik_sum`` and ``grad_log_lik_diff_sum`` split the chains into groups that gather at most
``block_elements`` entries each (one group per chain, uneven groups, or all chains at once); every
split must give ``sum_i w_i r_i x_i`` per chain, computed here row by row in NumPy. The models run on
array_api_strict, which has no native fast path, so the blocked array-API code is what is tested.
"""

from __future__ import annotations

import numpy as np
import pytest

from sgmc.models import LinearRegression, LogisticRegression

strict = pytest.importorskip("array_api_strict")

CHAINS, BATCH, DIM, N = 5, 7, 3, 60


def _residual(kind: str, eta: float, y: float, noise_var: float) -> float:
    if kind == "logistic":
        return y - 1.0 / (1.0 + np.exp(-eta))
    return (y - eta) / noise_var


def _brute(kind, X, y, theta, idx, w, centre=None, noise_var=2.0):
    out = np.zeros((theta.shape[0], X.shape[1]))
    for c in range(theta.shape[0]):
        for b in range(idx.shape[1]):
            x = X[idx[c, b]]
            r = _residual(kind, float(x @ theta[c]), y[idx[c, b]], noise_var)
            if centre is not None:
                r -= _residual(kind, float(x @ centre[c]), y[idx[c, b]], noise_var)
            out[c] += (1.0 if w is None else w[c, b]) * r * x
    return out


def _model(kind, X, y):
    Xs, ys = strict.asarray(X), strict.asarray(y)
    return LogisticRegression(Xs, ys) if kind == "logistic" else LinearRegression(Xs, ys, noise_var=2.0)


@pytest.mark.parametrize("kind", ["logistic", "linear"])
@pytest.mark.parametrize("per_group", [1, 2, CHAINS])  # chains per group: one each, uneven (2, 2, 1), all
@pytest.mark.parametrize("weighted", [False, True])
def test_blocked_sums_match_the_row_by_row_sum(kind, per_group, weighted):
    rng = np.random.default_rng(11)
    X = rng.normal(size=(N, DIM))
    y = (rng.random(N) < 0.5) * 1.0 if kind == "logistic" else rng.normal(size=N)
    theta, centre = rng.normal(size=(CHAINS, DIM)), rng.normal(size=(CHAINS, DIM))
    idx = rng.integers(0, N, size=(CHAINS, BATCH))
    w = rng.random((CHAINS, BATCH)) if weighted else None
    model = _model(kind, X, y)
    model.block_elements = per_group * BATCH * DIM
    args = (strict.asarray(idx), None if w is None else strict.asarray(w))
    got = np.asarray(model.grad_log_lik_sum(strict.asarray(theta), *args))
    np.testing.assert_allclose(got, _brute(kind, X, y, theta, idx, w), rtol=1e-12, atol=1e-12)
    got = np.asarray(model.grad_log_lik_diff_sum(strict.asarray(theta), strict.asarray(centre), *args))
    np.testing.assert_allclose(got, _brute(kind, X, y, theta, idx, w, centre), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("per_group", [1, 2])  # whole groups only, and whole groups with a shorter last one
def test_under_jit_the_groups_are_one_device_loop_with_the_eager_values(per_group):
    jax = pytest.importorskip("jax")
    if not jax.config.jax_enable_x64:
        pytest.skip("the suite runs JAX in 64-bit mode")
    rng = np.random.default_rng(12)
    X, y = rng.normal(size=(N, DIM)), (rng.random(N) < 0.5) * 1.0
    theta, centre = rng.normal(size=(CHAINS, DIM)), rng.normal(size=(CHAINS, DIM))
    idx, w = rng.integers(0, N, size=(CHAINS, BATCH)), rng.random((CHAINS, BATCH))
    model = LogisticRegression(jax.numpy.asarray(X), jax.numpy.asarray(y))
    model.block_elements = per_group * BATCH * DIM
    jt, jc, ji, jw = (jax.numpy.asarray(a) for a in (theta, centre, idx, w))
    jaxpr = str(jax.make_jaxpr(model.grad_log_lik_sum)(jt, ji, jw))
    assert jaxpr.count("scan[") == 1     # a loop on the device, not one gather per group unrolled
    jitted = jax.jit(model.grad_log_lik_sum)(jt, ji, jw)
    np.testing.assert_allclose(np.asarray(jitted), _brute("logistic", X, y, theta, idx, w), rtol=1e-12, atol=1e-12)
    jitted = jax.jit(model.grad_log_lik_diff_sum)(jt, jc, ji, jw)
    np.testing.assert_allclose(np.asarray(jitted), _brute("logistic", X, y, theta, idx, w, centre), rtol=1e-12,
                               atol=1e-12)
