"""V_0 of the adaptive subsample size: the thesis's pilot-chain rule is the default, the Laplace form an option.

The rule (Putcha thesis, section 4.5.3): 10 fixed-n SGLD-CV chains from the mode, the 95th percentile
q_95 of ||theta - theta_hat||^2 along each, V_0 = max over chains of (1/n) q_95 sum_i L_i^2 / p_i. The
tests recompute it by brute force on the thesis's worked setting (synthetic balanced logistic
regression, N = 10^4, 4 covariates and an intercept, n = 0.1% of N): per-datum gradients, Lipschitz
constants and the Hessian written out from the logistic model's formulas, the SGLD-CV chains stepped
in plain NumPy on the same random stream as the library's pilot chains (a PCG64 generator seeded from
the second child of the seed, as ``prepare`` spawns it), and compare V_0 to rounding.
"""

from __future__ import annotations

import numpy as np
import pytest

from sgmc.backends import default_rng
from sgmc.datasets import classification_data
from sgmc.estimators import AdaptiveControlVariate, AdaptiveControlVariatePS, make_estimator
from sgmc.models import LogisticRegression

N, N_COV, BATCH, PRIOR_VAR = 10_000, 4, 10, 10.0
CHAINS, PILOT_ITER, Q = 10, 1000, 0.95


@pytest.fixture(scope="module")
def setting():
    """The thesis's synthetic balanced logistic regression, its mode by Newton's method in NumPy, and
    the brute-force pieces of the rule: the centre's gradient sum, sum_i L_i^2 / p_i and lambda_max."""
    s = classification_data(N, dim=N_COV, positive_fraction=0.5, rng=105)
    X, y = np.asarray(s.X, dtype=float), np.asarray(s.y, dtype=float)
    theta = np.zeros(X.shape[1])
    for _ in range(30):
        p = 1.0 / (1.0 + np.exp(-X @ theta))
        grad = X.T @ (y - p) - theta / PRIOR_VAR
        hess = (X * (p * (1 - p))[:, None]).T @ X + np.eye(X.shape[1]) / PRIOR_VAR
        theta = theta + np.linalg.solve(hess, grad)
    mode = theta
    centre_grad = np.zeros(X.shape[1])
    neg_hess = np.eye(X.shape[1]) / PRIOR_VAR
    bound = 0.0
    for i in range(N):  # one datum at a time: grad log f_i = (y_i - sigma(x_i . theta)) x_i, L_i = |x_i|^2 / 4
        x_i = X[i]
        s_i = 1.0 / (1.0 + np.exp(-x_i @ mode))
        centre_grad += (y[i] - s_i) * x_i
        neg_hess += s_i * (1 - s_i) * np.outer(x_i, x_i)
        L_i = 0.25 * float(x_i @ x_i)
        bound += L_i * L_i * N          # p_i = 1/N (ASGLD-CV)
    return {"X": X, "y": y, "mode": mode, "centre_grad": centre_grad, "neg_hess": neg_hess, "bound": bound,
            "model": LogisticRegression(X, y, prior_var=PRIOR_VAR)}


def _pilot_generator(seed: int) -> np.random.Generator:
    """The stream of ``prepare(default_rng(seed), ...)``'s pilot chains: the second spawned child."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed).spawn(2)[1]))


def _brute_force_pilot_v0(st: dict, h: float, gen: np.random.Generator) -> float:
    """The thesis's rule with SGLD-CV pilot chains stepped here (theta' = theta + (h/2) g + sqrt(h) z)."""
    X, y, mode = st["X"], st["y"], st["mode"]

    def estimate(theta):
        idx = np.minimum((gen.random((CHAINS, BATCH)) * N).astype(np.int64), N - 1)   # uniform, with replacement
        xs, ys = X[idx], y[idx]                                                      # (chains, n, d)
        s_now = 1.0 / (1.0 + np.exp(-np.einsum("cnd,cd->cn", xs, theta)))
        s_hat = 1.0 / (1.0 + np.exp(-xs @ mode))
        diff = ((ys - s_now)[..., None] * xs - (ys - s_hat)[..., None] * xs).sum(axis=1)
        return -theta / PRIOR_VAR + st["centre_grad"] + (N / BATCH) * diff

    theta = np.tile(mode, (CHAINS, 1))
    g = estimate(theta)
    d2 = np.empty((CHAINS, PILOT_ITER))
    for t in range(PILOT_ITER):
        theta = theta + 0.5 * h * g + np.sqrt(h) * gen.standard_normal(theta.shape)
        g = estimate(theta)
        d2[:, t] = np.sum((theta - mode) ** 2, axis=1)
    q95 = np.quantile(d2, Q, axis=1)
    return float(q95.max()) * st["bound"] / BATCH


def _brute_force_laplace_v0(st: dict, gen: np.random.Generator) -> float:
    """The Laplace form: one pooled quantile over CHAINS * PILOT_ITER draws of N(0, Sigma)."""
    chol = np.linalg.cholesky(np.linalg.inv(st["neg_hess"]))
    x = gen.standard_normal((CHAINS * PILOT_ITER, len(st["mode"]))) @ chol.T
    return float(np.quantile(np.sum(x * x, axis=1), Q)) * st["bound"] / BATCH


def test_default_v0_is_the_thesis_rule(setting):
    """With no V_0 options, ASGLD-CV's V_0 is the thesis's pilot-chain rule at the default pilot step
    0.5 / lambda_max, recomputed by brute force. On this setting the Laplace form (``v0_rule="laplace"``,
    also recomputed) gives a V_0 more than 10% away, so the comparison tells the two apart."""
    st = setting
    est = AdaptiveControlVariate(st["model"], BATCH, centre=st["mode"])
    assert est.v0 is None and est.v0_rule == "pilot"
    got = est.prepare(default_rng(3), st["mode"][None, :]).estimator.v0
    h = 0.5 / np.linalg.eigvalsh(st["neg_hess"]).max()
    want = _brute_force_pilot_v0(st, h, _pilot_generator(3))
    assert got == pytest.approx(want, rel=1e-9)
    laplace = AdaptiveControlVariate(st["model"], BATCH, centre=st["mode"], v0_rule="laplace")
    got_laplace = laplace.prepare(default_rng(3), st["mode"][None, :]).estimator.v0
    assert got_laplace == pytest.approx(_brute_force_laplace_v0(st, _pilot_generator(3)), rel=1e-9)
    assert abs(got_laplace - got) > 0.1 * got, (got, got_laplace)


def test_thesis_step_size(setting):
    """At the thesis's own step for this setting (h = 1e-4, ``pilot_step_size=``) the rule is the same
    brute-force computation."""
    st = setting
    est = AdaptiveControlVariate(st["model"], BATCH, centre=st["mode"], pilot_step_size=1e-4)
    got = est.prepare(default_rng(4), st["mode"][None, :]).estimator.v0
    assert got == pytest.approx(_brute_force_pilot_v0(st, 1e-4, _pilot_generator(4)), rel=1e-9)


def test_rule_options_and_costs(setting):
    """``v0_rule`` is checked by name; a given ``v0`` is kept; the default pilot step's Hessian pass is
    counted in the set-up cost (one pass, N, beyond a run with ``pilot_step_size`` given); the
    estimator's options rebuild it, the rule included."""
    st = setting
    m = st["model"]
    with pytest.raises(ValueError, match=r"`v0_rule` must be one of 'pilot', 'laplace'; got 'pilots'"):
        AdaptiveControlVariate(m, BATCH, v0_rule="pilots")
    assert AdaptiveControlVariate(m, BATCH, centre=st["mode"], v0=7.0).prepare(
        default_rng(0), st["mode"][None, :]).estimator.v0 == 7.0
    small = dict(centre=st["mode"], pilot_iter=50)
    default = AdaptiveControlVariate(m, BATCH, **small).prepare(default_rng(0), st["mode"][None, :])
    given = AdaptiveControlVariate(m, BATCH, pilot_step_size=1e-4, **small).prepare(default_rng(0), st["mode"][None, :])
    assert default.n_evals - given.n_evals == N
    est = make_estimator("adaptive-cv-ps", m, BATCH, centre=st["mode"], v0_rule="laplace")
    assert isinstance(est, AdaptiveControlVariatePS) and est.v0_rule == "laplace"
    again = type(est)(m, BATCH, est.weights, est.centre, **est._options())
    assert again.v0_rule == "laplace" and again.v0 is None
