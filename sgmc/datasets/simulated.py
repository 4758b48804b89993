"""Simulated regression data: the review's section 6.1 design, and the preferential-subsampling studies' classification.

:func:`logistic_regression_data` simulates the data set of section 6.1 of Nemeth and Fearnhead
(2021), "Stochastic gradient Markov chain Monte Carlo": covariates x_i ~ N(0, Sigma_x) with
Sigma_x[i, j] = u_ij^|i - j|, u_ij ~ Unif[-rho, rho] and a unit diagonal, coefficients
theta_j ~ N(0, s_j^2) with scales s_j drawn from {0.1, 1, 10}, and labels
y_i ~ Bernoulli(sigmoid(x_i . theta)); :func:`linear_regression_data` the same design with Gaussian
responses. :func:`classification_data` simulates the synthetic logistic regression of Putcha et al.
(2023): an intercept and ``dim`` standard normal covariates, with the share of positive labels chosen.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from .._validation import check_alloc, check_int
from .common import _on_backend

#: Eigenvalue floor used when a simulated covariate covariance must be repaired (see
#: :func:`covariate_covariance`).
EIGENVALUE_FLOOR = 1e-3
#: The coefficient scales s_j of the review's simulation (the supporting code's choice).
COEF_SCALES = (0.1, 1.0, 10.0)


class SimulatedData(NamedTuple):
    """A simulated regression data set (NumPy arrays).

    Attributes
    ----------
    X : ndarray, shape (n, dim)
        Training covariates.
    y : ndarray, shape (n,)
        Training responses (labels in {0.0, 1.0} for logistic regression).
    X_test : ndarray, shape (n_test, dim)
        Held-out covariates from the same distribution.
    y_test : ndarray, shape (n_test,)
        Held-out responses.
    theta_true : ndarray, shape (dim,)
        The coefficients the labels were simulated with.
    cov_x : ndarray, shape (dim, dim)
        The covariate covariance Sigma_x (symmetric positive definite, unit diagonal).
    """

    X: np.ndarray
    y: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    theta_true: np.ndarray
    cov_x: np.ndarray


def covariate_covariance(dim: int, rho: float = 0.4, rng: Any = 0) -> np.ndarray:
    """Random covariance with Sigma[i, j] = u_ij^|i - j|, u_ij ~ Unif[-rho, rho], unit diagonal.

    One u_ij is drawn per pair i > j and used for both (i, j) and (j, i), so the matrix is symmetric.
    At the review's rho = 0.4 it was positive definite in each of 2,000 draws for d = 10, 50 and 100;
    for rho above 0.5 it often is not (at d = 10: 7% of draws at rho = 0.6, half at 0.7), and it is
    then repaired: eigenvalues below ``EIGENVALUE_FLOOR`` (1e-3) are raised to
    it (the nearest matrix in Frobenius norm with that floor), and the result is rescaled to a unit
    diagonal, which keeps it positive definite.

    Parameters
    ----------
    dim : int
    rho : float in [0, 1)
    rng : int, numpy.random.SeedSequence or numpy.random.Generator

    Returns
    -------
    ndarray, shape (dim, dim)

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.datasets import covariate_covariance
    >>> S = covariate_covariance(5, rho=0.4, rng=1)
    >>> bool(np.allclose(np.diag(S), 1.0)), bool(np.linalg.eigvalsh(S)[0] > 0)
    (True, True)
    """
    dim = check_int(dim, "dim", 1)
    check_alloc(3 * 8 * dim * dim, "dim", dim, "the (dim, dim) covariance and its factor")
    rho = float(rho)
    if not (math.isfinite(rho) and 0.0 <= rho < 1.0):
        msg = f"`rho` must be in [0, 1); got {rho!r}"
        raise ValueError(msg)
    gen = np.random.default_rng(rng)
    u = gen.uniform(-rho, rho, size=(dim, dim))
    i, j = np.indices((dim, dim))
    lower = np.where(i > j, u ** np.abs(i - j), 0.0)
    cov = lower + lower.T + np.eye(dim)
    vals, vecs = np.linalg.eigh(cov)
    if vals[0] < EIGENVALUE_FLOOR:
        cov = (vecs * np.maximum(vals, EIGENVALUE_FLOOR)) @ vecs.T
        s = 1.0 / np.sqrt(np.diag(cov))
        cov = cov * s[:, None] * s[None, :]
        cov = 0.5 * (cov + cov.T)
        np.fill_diagonal(cov, 1.0)
    return cov


# The simulators repeat one keyword signature (sizes, rng, backend): each public function stands alone.
def logistic_regression_data(
    n: int = 100_000,
    dim: int = 10,
    rho: float = 0.4,
    n_test: int = 10_000,
    rng: Any = 0,
    *,
    backend: Any = None,
) -> SimulatedData:
    """Simulate the review's section 6.1 logistic regression data.

    Parameters
    ----------
    n : int, default 100_000
        Training size N (the review uses 10^5).
    dim : int, default 10
        Number of covariates d (the review uses 10, 50 and 100); there is no intercept column.
    rho : float, default 0.4
        Correlation range of :func:`covariate_covariance`.
    n_test : int, default 10_000
        Size of the held-out set, drawn from the same distribution with the same theta.
    rng : int, numpy.random.SeedSequence or numpy.random.Generator, default 0
        Seed; equal seeds give identical data.
    backend : str or Backend, optional
        Return the arrays on this backend (e.g. ``"cupy"``: simulated on the host, copied to the
        GPU once); NumPy by default.

    Returns
    -------
    SimulatedData
        ``(X, y, X_test, y_test, theta_true, cov_x)`` as float64 arrays.

    Notes
    -----
    theta_j ~ N(0, s_j^2) with s_j drawn uniformly from {0.1, 1, 10} (the review's supporting code; the
    paper does not state theta). Large s_j make many labels nearly deterministic, so held-out
    log-losses are far below log 2 (the review's Table 2 reports about 0.1 for d = 10).

    Examples
    --------
    >>> from sgmc.datasets import logistic_regression_data
    >>> data = logistic_regression_data(n=1000, dim=3, n_test=200, rng=0)
    >>> data.X.shape, data.y.shape, data.X_test.shape, data.theta_true.shape
    ((1000, 3), (1000,), (200, 3), (3,))
    """
    cov, theta, (X, eta), (X_test, eta_test), gen = _simulate_linear_predictor(n, dim, rho, n_test, rng)
    y = (gen.random(n) < _sigmoid(eta)).astype(np.float64)
    y_test = (gen.random(n_test) < _sigmoid(eta_test)).astype(np.float64)
    return _on_backend(SimulatedData(X, y, X_test, y_test, theta, cov), backend)


# The simulators repeat one keyword signature (sizes, rng, backend): each public function stands alone.
def linear_regression_data(
    n: int = 100_000,
    dim: int = 10,
    rho: float = 0.4,
    n_test: int = 10_000,
    noise_sd: float = 1.0,
    rng: Any = 0,
    *,
    backend: Any = None,
) -> SimulatedData:
    """Simulate linear regression data with the covariates and coefficients of the review's section 6.1.

    x_i and theta are drawn exactly as in :func:`logistic_regression_data` (the same seed gives the
    same ``X``, ``X_test`` and ``theta_true``); the responses are y_i = x_i . theta + noise_sd * e_i
    with e_i ~ N(0, 1), matching :class:`sgmc.models.LinearRegression` with ``noise_var=noise_sd**2``.

    Parameters
    ----------
    n, dim, rho, n_test, rng, backend
        As for :func:`logistic_regression_data`.
    noise_sd : float, default 1.0

    Returns
    -------
    SimulatedData

    Examples
    --------
    >>> from sgmc.datasets import linear_regression_data
    >>> data = linear_regression_data(n=500, dim=2, n_test=100, rng=0)
    >>> data.X.shape, data.y_test.shape
    ((500, 2), (100,))
    """
    noise_sd = float(noise_sd)
    if not (math.isfinite(noise_sd) and noise_sd > 0):
        msg = f"`noise_sd` must be positive and finite; got {noise_sd!r}"
        raise ValueError(msg)
    cov, theta, (X, eta), (X_test, eta_test), gen = _simulate_linear_predictor(n, dim, rho, n_test, rng)
    y = eta + noise_sd * gen.standard_normal(n)
    y_test = eta_test + noise_sd * gen.standard_normal(n_test)
    return _on_backend(SimulatedData(X, y, X_test, y_test, theta, cov), backend)


def _sigmoid(eta: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * eta))  # no overflow for large |eta|


def _check_design_size(n: int, dim: int, n_test: int) -> None:
    """Refuse sizes whose design matrices (with the copies made while simulating) would not fit in memory."""
    name, value = ("dim", dim) if dim + 1 >= n + n_test else (("n", n) if n >= n_test else ("n_test", n_test))
    check_alloc(3 * 8 * (n + n_test) * (dim + 1), name, value, "the simulated (n + n_test, dim) design matrices")


def _simulate_linear_predictor(n, dim, rho, n_test, rng):
    """Sigma_x, theta, (X, X theta) for training and test, and a generator for the responses."""
    n = check_int(n, "n", 1)
    dim = check_int(dim, "dim", 1)
    n_test = check_int(n_test, "n_test", 0)
    _check_design_size(n, dim, n_test)
    cov_gen, theta_gen, x_gen, y_gen = np.random.default_rng(rng).spawn(4)
    cov = covariate_covariance(dim, rho, cov_gen)
    scales = theta_gen.choice(np.asarray(COEF_SCALES), size=dim, replace=True)
    theta = theta_gen.standard_normal(dim) * scales
    chol = np.linalg.cholesky(cov)
    X = x_gen.standard_normal((n, dim)) @ chol.T
    X_test = x_gen.standard_normal((n_test, dim)) @ chol.T
    return cov, theta, (X, X @ theta), (X_test, X_test @ theta), y_gen


def classification_data(
    n: int = 10_000, dim: int = 4, positive_fraction: float = 0.5, n_test: int = 0, rng: Any = 0
) -> SimulatedData:
    """Synthetic logistic regression with an intercept and a chosen share of positive labels.

    x_i = (1, z_i) with z_i ~ N(0, I_dim), slopes theta_j ~ N(0, 1), and the intercept set (by
    bisection) so that the mean of sigmoid(x_i . theta) over the population is ``positive_fraction``;
    y_i ~ Bernoulli(sigmoid(x_i . theta)). Putcha et al. (2023) use 4 covariates (d = 5) with balanced
    (50%) and imbalanced (95%) labels.

    Parameters
    ----------
    n : int
    dim : int
        Covariates besides the intercept.
    positive_fraction : float in (0, 1)
    n_test : int
    rng : seed

    Returns
    -------
    SimulatedData
        ``X`` has ``dim + 1`` columns, the first all ones; ``cov_x`` is the identity of the covariates.

    Examples
    --------
    >>> from sgmc.datasets import classification_data
    >>> data = classification_data(20_000, positive_fraction=0.95, rng=0)
    >>> data.X.shape, round(float(data.y.mean()), 2)
    ((20000, 5), 0.95)
    """
    n = check_int(n, "n", 1)
    dim = check_int(dim, "dim", 1)
    n_test = check_int(n_test, "n_test", 0)
    _check_design_size(n, dim, n_test)
    frac = float(positive_fraction)
    if not (0.0 < frac < 1.0):
        msg = f"`positive_fraction` must be in (0, 1); got {positive_fraction!r}"
        raise ValueError(msg)
    gen = np.random.default_rng(rng)
    slopes = gen.standard_normal(dim)
    Z = gen.standard_normal((n + n_test, dim))
    ref = gen.standard_normal((100_000, dim)) @ slopes
    lo, hi = -50.0, 50.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if _sigmoid(ref + mid).mean() < frac:
            lo = mid
        else:
            hi = mid
    theta = np.concatenate([[0.5 * (lo + hi)], slopes])
    X = np.concatenate([np.ones((n + n_test, 1)), Z], axis=1)
    y = (gen.random(n + n_test) < _sigmoid(X @ theta)).astype(np.float64)
    return SimulatedData(X[:n], y[:n], X[n:], y[n:], theta, np.eye(dim))
