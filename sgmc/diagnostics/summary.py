"""The summary table that ArviZ users know: mean, sd, HDI, MCSE, bulk and tail ESS, rank-normalised R-hat.

Every column is computed by :mod:`sgmc.diagnostics.ess` (Vehtari, Gelman, Simpson, Carpenter and
Buerkner 2021), on the backend of the draws; the table itself is a small host-side object that prints
as text and converts to a pandas ``DataFrame`` when pandas is installed.
"""

from __future__ import annotations

from typing import Any, Sequence

from .. import backends
from .._array_api import Array
from .._param_names import check_param_names
from ._draws import _as_draws, _check_prob
from .ess import ess, hdi, mcse, rhat

__all__ = ["Summary", "summary"]


class Summary:
    """A table of per-variable diagnostics: ``table[column]`` is a NumPy array over variables.

    Attributes
    ----------
    index : list of str
        Variable names (rows).
    columns : list of str
        ``mean, sd, hdi{p}_lb, hdi{p}_ub, mcse_mean, mcse_sd, ess_bulk, ess_tail`` and, for two or more
        chains, ``r_hat``.
    """

    def __init__(self, index: list, data: dict):
        self.index = list(index)
        self.columns = list(data)
        self._data = data

    def __getitem__(self, column: str):
        if column not in self._data:
            msg = f"no column {column!r}; columns are {self.columns}"
            raise KeyError(msg)
        return self._data[column]

    def row(self, name: str) -> dict:
        """The values of one variable, by column."""
        i = self.index.index(name)
        return {c: float(v[i]) for c, v in self._data.items()}

    def to_pandas(self):
        """The table as a ``pandas.DataFrame`` (pandas is optional)."""
        try:
            import pandas as pd
        except ImportError as exc:
            msg = "Summary.to_pandas() needs the optional package pandas"
            raise ImportError(msg) from exc
        return pd.DataFrame(self._data, index=self.index)

    def __str__(self) -> str:
        width = max([len(n) for n in self.index] + [4])
        head = " " * width + "".join(f"{c:>11}" for c in self.columns)
        lines = [head]
        for i, name in enumerate(self.index):
            cells = []
            for c in self.columns:
                v = float(self._data[c][i])
                cells.append(f"{v:>11.0f}" if c.startswith("ess") else f"{v:>11.3f}")
            lines.append(f"{name:<{width}}" + "".join(cells))
        return "\n".join(lines)

    __repr__ = __str__


def summary(draws: Array, *, prob: float = 0.89, names: Sequence[str] | None = None) -> Summary:
    """Posterior summary of draws shaped ``(chains, n, dim)`` (or ``(n, dim)``, ``(n,)``).

    Parameters
    ----------
    draws : array
    prob : float, default 0.89
        Mass of the highest density interval (ArviZ's default).
    names : sequence of str, optional
        Variable names (default ``theta[0]``, ``theta[1]``, ...).

    Returns
    -------
    Summary
        Columns ``mean``, ``sd`` (ddof 1), ``hdi89_lb``/``hdi89_ub`` (for ``prob=0.89``), ``mcse_mean``,
        ``mcse_sd``, ``ess_bulk``, ``ess_tail`` and, with two or more chains, ``r_hat`` (R-hat compares chains; a single chain's
        table has no such column, where ArviZ would show NaN).

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.diagnostics import summary
    >>> table = summary(np.random.default_rng(0).normal(size=(4, 500, 2)))
    >>> table.columns[:4]
    ['mean', 'sd', 'hdi89_lb', 'hdi89_ub']
    >>> bool(abs(table["r_hat"][0] - 1) < 0.01)
    True
    """
    prob = _check_prob(prob)
    xp, x, _ = _as_draws(draws, "draws", min_draws=4)
    dim = x.shape[2]
    names = list(check_param_names(names, dim, what="names"))
    flat = xp.reshape(x, (-1, dim))
    interval = hdi(x, prob)
    pct = int(prob * 100)
    cols: dict[str, Any] = {
        "mean": xp.mean(flat, axis=0),
        "sd": xp.std(flat, axis=0, correction=1),
        f"hdi{pct}_lb": interval[:, 0],
        f"hdi{pct}_ub": interval[:, 1],
        "mcse_mean": mcse(x, method="mean"),
        "mcse_sd": mcse(x, method="sd"),
        "ess_bulk": ess(x, method="bulk"),
        "ess_tail": ess(x, method="tail"),
    }
    if x.shape[0] > 1:  # R-hat compares chains: a single chain has none
        cols["r_hat"] = rhat(x, method="rank")
    data = {k: backends.to_numpy(v) for k, v in cols.items()}
    return Summary(names, data)
