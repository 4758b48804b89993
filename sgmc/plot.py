"""Trace plots of sgmc runs, written to image files with matplotlib.

Trace plots show each method's draws of a few coordinates against the iteration, with an optional
reference value (for example a long exact MCMC run's posterior mean) as a horizontal line; this is
the display of Figure 2 of Nemeth and Fearnhead (2021), section 6.1.

This module is an output edge: draws are copied to the host with :func:`sgmc.backends.to_numpy`, and
matplotlib is imported only when a plot is made. Figures are drawn on matplotlib's Agg canvas
directly, so no global matplotlib backend is changed.
"""

from __future__ import annotations

import operator
import os
from typing import Any, Mapping, Sequence

import numpy as np

from . import backends

__all__ = ["trace_plot", "forecast_plot"]


def _matplotlib():
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        msg = "plotting needs the optional package matplotlib: pip install 'sgmc[plot]'"
        raise ImportError(msg) from exc
    return Figure, FigureCanvasAgg


def trace_plot(
    traces: Mapping[str, Any],
    path: str | os.PathLike,
    coords: Sequence[int] = (0, 1, 2),
    reference: Any = None,
    *,
    chain: int | None = 0,
    dpi: int = 100,
) -> str:
    """Write trace plots of ``coords`` for every run in ``traces`` to an image file.

    One row of panels per coordinate, one column per method; each panel plots the kept draws against
    their iteration numbers.

    Parameters
    ----------
    traces : mapping of str to Trace
        Runs by display name (for example ``{"SGLD": trace1, "SGLD-CV": trace2}``).
    path : str or path-like
        Output file; the format follows the extension (``.png``, ``.pdf``, ``.svg`` ...).
    coords : sequence of int, default (0, 1, 2)
        Coordinates of theta to show; those beyond a trace's dimension are dropped.
    reference : array-like of shape (dim,), optional
        Values drawn as a dashed horizontal line in each coordinate's panels.
    chain : int or None, default 0
        The chain to draw; ``None`` overlays all chains.
    dpi : int, default 100

    Returns
    -------
    str
        The path written.

    Raises
    ------
    ImportError
        If matplotlib is not installed.
    ValueError
        If ``traces`` is empty, a coordinate or chain is out of range, or ``reference`` has the wrong
        length.

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> import sgmc
    >>> from sgmc.models import LinearRegression
    >>> from sgmc.plot import trace_plot
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(500, 2)); y = X @ np.array([1.0, -1.0]) + rng.normal(size=500)
    >>> model = LinearRegression(X, y)
    >>> trace = sgmc.sample(model, "sgld", step_size=1e-3, batch_size=50, n_iter=300, rng=0,
    ...                     progress=False)
    >>> out = trace_plot({"SGLD": trace}, os.path.join(tempfile.mkdtemp(), "trace.png"),
    ...                  coords=(0, 1), reference=model.posterior()[0])
    >>> os.path.getsize(out) > 0
    True
    """
    if not traces:
        msg = "`traces` must hold at least one trace; got an empty mapping"
        raise ValueError(msg)
    names = list(traces)
    dims = {name: int(traces[name].dim) for name in names}
    dim = min(dims.values())
    try:
        coords = [operator.index(c) for c in coords]
    except TypeError:
        msg = f"`coords` must be a sequence of ints; got {coords!r}"
        raise TypeError(msg) from None
    bad = [c for c in coords if not 0 <= c < dim]
    if bad:
        msg = f"`coords` must lie in [0, {dim - 1}] for traces of dimension {dim}; got {bad}"
        raise ValueError(msg)
    if not coords:
        msg = "`coords` must name at least one coordinate"
        raise ValueError(msg)
    ref = None
    if reference is not None:
        ref = np.asarray(backends.to_numpy(reference), dtype=float).reshape(-1)
        if ref.shape[0] < dim:
            msg = f"`reference` must have at least {dim} entries (one per coordinate); got {ref.shape[0]}"
            raise ValueError(msg)
    Figure, FigureCanvasAgg = _matplotlib()

    nrow, ncol = len(coords), len(names)
    fig = Figure(figsize=(3.2 * ncol + 0.6, 1.9 * nrow + 0.6), dpi=int(dpi))
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrow, ncol, squeeze=False, sharex="col", sharey="row")
    for j, name in enumerate(names):
        tr = traces[name]
        draws = backends.to_numpy(tr.draws)
        if chain is None:
            chosen = range(draws.shape[0])
        else:
            if not 0 <= int(chain) < draws.shape[0]:
                msg = f"`chain`={chain} is out of range for trace {name!r} with {draws.shape[0]} chains"
                raise ValueError(msg)
            chosen = [int(chain)]
        its = np.asarray(tr.iterations if len(tr.iterations) == draws.shape[1] else range(draws.shape[1]))
        for i, c in enumerate(coords):
            ax = axes[i][j]
            for k in chosen:
                ax.plot(its, draws[k, :, c], lw=0.6, alpha=0.9 if len(chosen) == 1 else 0.6)
            if ref is not None:
                ax.axhline(ref[c], color="black", ls="--", lw=1.0)
            if i == 0:
                ax.set_title(name, fontsize=10)
            if j == 0:
                ax.set_ylabel(f"theta[{c}]")
            if i == nrow - 1:
                ax.set_xlabel("iteration")
            ax.tick_params(labelsize=8)
    fig.tight_layout()
    path = os.fspath(path)
    fig.savefig(path)
    return path


def forecast_plot(
    y: Any,
    path: str | os.PathLike,
    *,
    predictions: Any = None,
    forecast: Any = None,
    coord: int = 0,
    title: str | None = None,
) -> str:
    """Plot a series with one-step predictions and a forecast (mean and 95% bands) to an image file.

    Parameters
    ----------
    y : array (T,) or (T, m)
    path : str or PathLike
        Output file; the format comes from the extension.
    predictions : sgmc.ssm.Prediction, optional
        In-sample one-step predictions (:func:`sgmc.ssm.one_step_predictions`).
    forecast : sgmc.ssm.Prediction, optional
        Forecast beyond ``T`` (:func:`sgmc.ssm.forecast`).
    coord : int
        Observation coordinate to plot.

    Returns
    -------
    str
        The path written.
    """
    Figure, Canvas = _matplotlib()
    yy = backends.to_numpy(y)
    yy = yy.reshape(yy.shape[0], -1)[:, coord]
    T = yy.shape[0]
    fig = Figure(figsize=(8, 3.5))
    Canvas(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(np.arange(T), yy, ".", ms=2, color="0.4", label="y")
    for pred, t0, label, color in ((predictions, 0, "one-step prediction", "C0"), (forecast, T, "forecast", "C3")):
        if pred is None:
            continue
        mu = backends.to_numpy(pred.mean)[:, coord]
        sd = np.sqrt(backends.to_numpy(pred.cov)[:, coord, coord])
        t = np.arange(t0, t0 + mu.shape[0])
        ax.plot(t, mu, color=color, lw=1, label=label)
        ax.fill_between(t, mu - 1.96 * sd, mu + 1.96 * sd, color=color, alpha=0.2, lw=0)
    ax.set_xlabel("t")
    ax.legend(loc="best", fontsize=8)
    if title:
        ax.set_title(title)
    fig.tight_layout()
    fig.savefig(os.fspath(path))
    return os.fspath(path)
