"""Figures of sgmc runs: traces, densities, autocorrelations, pair plots and convergence against cost.

Each ``plot_*`` function returns a :class:`matplotlib.figure.Figure` (shown by Jupyter when it is a
cell's value; ``fig.savefig(path)`` writes it), with panels titled by the trace's parameter names
(:attr:`sgmc.Trace.param_names`) and x-axes that say what they count: iterations, kept draws, seconds
of wall time or passes through the data. :func:`trace_plot` writes the trace plots of several runs side
by side to a file (``sgmc run --plot``): the display of Figure 2 of Nemeth and Fearnhead (2021),
section 6.1.

This module is an output edge: draws are copied to the host with :func:`sgmc.backends.to_numpy`, and
matplotlib is imported only when a plot is made. Figures are drawn on matplotlib's Agg canvas
directly, so no global matplotlib backend or state is changed.
"""

from __future__ import annotations

import operator
import os
from typing import Any, Mapping, Sequence

import numpy as np

from . import backends
from .diagnostics.cost_path import convergence_path
from .diagnostics._autocorr import _acov_fft

__all__ = ["plot_trace", "plot_density", "plot_autocorr", "plot_pair", "plot_convergence", "trace_plot",
           "forecast_plot"]

#: the x-axes of :func:`plot_convergence`, by name, with their labels
X_AXES = {"iterations": "iterations", "seconds": "wall time (seconds)", "data passes": "data passes"}


def _matplotlib():
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        msg = "plotting needs the optional package matplotlib: pip install 'sgmc[plot]'"
        raise ImportError(msg) from exc
    return Figure, FigureCanvasAgg


def _figure(nrow: int, ncol: int, width: float, height: float, **kw):
    Figure, FigureCanvasAgg = _matplotlib()
    fig = Figure(figsize=(width * ncol + 0.6, height * nrow + 0.6), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots(nrow, ncol, squeeze=False, **kw)


def _check_trace(trace: Any, name: str = "trace") -> None:
    if not all(hasattr(trace, a) for a in ("draws", "param_names", "index")):
        msg = f"`{name}` must be an sgmc.Trace (the result of sgmc.sample); got {type(trace).__name__}"
        raise TypeError(msg)


def _params(trace: Any, params: Any, most: int = 4) -> list:
    """Coordinates of ``params`` (names or indices); by default the first ``most``."""
    _check_trace(trace)
    if params is None:
        return list(range(min(trace.dim, most)))
    params = [params] if isinstance(params, (str, int, np.integer)) else list(params)
    if not params:
        msg = "`params` must name at least one parameter"
        raise ValueError(msg)
    try:
        return [trace.index(p) for p in params]
    except ValueError as err:
        raise ValueError(str(err).replace("`param`", "`params`: entry", 1)) from None


def _chains(draws: np.ndarray, chains: Any) -> list:
    n = draws.shape[0]
    if chains is None:
        return list(range(n))
    chosen = [chains] if isinstance(chains, (int, np.integer)) else list(chains)
    bad = [c for c in chosen if not (isinstance(c, (int, np.integer)) and 0 <= int(c) < n)]
    if bad or not chosen:
        msg = f"`chains` must be chain numbers in [0, {n - 1}] (None for all {n}); got {chains!r}"
        raise ValueError(msg)
    return [int(c) for c in chosen]


def _iterations(trace: Any) -> np.ndarray:
    its = np.asarray(trace.iterations, dtype=np.int64)
    return its if its.shape == (int(trace.draws.shape[1]),) else np.arange(int(trace.draws.shape[1]))


# The plots document trace, params and chains again, each: every function's help stands alone.
def plot_trace(trace: Any, params: Any = None, *, chains: Any = None, reference: Any = None):
    """Trace plot: each parameter's draws against the iteration, one line per chain.

    Parameters
    ----------
    trace : Trace
    params : sequence of str or int, optional
        Parameters by name (:attr:`sgmc.Trace.param_names`) or index; default: the first four.
    chains : int or sequence of int, optional
        Chains to draw; default: all of them.
    reference : array-like of shape (dim,), optional
        Values drawn as a dashed black line (for example the exact posterior mean).

    Returns
    -------
    matplotlib.figure.Figure
        One panel per parameter, titled by its name; x-axis ``iteration`` (the run's iteration
        number of each kept draw), one line per chain labelled ``chain k``.

    Examples
    --------
    >>> import numpy as np
    >>> import sgmc
    >>> from sgmc.plot import plot_trace
    >>> trace = sgmc.Trace(draws=np.random.default_rng(0).normal(size=(4, 100, 2)), param_names=["mu", "tau"])
    >>> fig = plot_trace(trace)
    >>> [ax.get_title() for ax in fig.axes], len(fig.axes[0].get_lines())
    (['mu', 'tau'], 4)
    """
    coords = _params(trace, params)
    draws = backends.to_numpy(trace.draws)
    chosen = _chains(draws, chains)
    ref = _reference(reference, trace.dim)
    its = _iterations(trace)
    fig, axes = _figure(len(coords), 1, 6.0, 1.8, sharex=True)
    for i, c in enumerate(coords):
        ax = axes[i][0]
        for k in chosen:
            ax.plot(its, draws[k, :, c], lw=0.6, alpha=0.8, label=f"chain {k}")
        if ref is not None:
            ax.axhline(ref[c], color="black", ls="--", lw=1.0, label="reference")
        ax.set_title(trace.param_names[c], fontsize=10)
        ax.set_ylabel("value")
    axes[-1][0].set_xlabel("iteration")
    return fig


def _reference(reference: Any, dim: int) -> np.ndarray | None:
    ref = None if reference is None else np.asarray(backends.to_numpy(reference), dtype=float).reshape(-1)
    if ref is not None and ref.shape[0] < dim:
        msg = f"`reference` must have at least {dim} entries (one per coordinate); got {ref.shape[0]}"
        raise ValueError(msg)
    return ref


def kde(x: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Gaussian kernel density estimate of the sample ``x`` on ``grid``, with Scott's bandwidth.

    SciPy's ``gaussian_kde`` (bandwidth ``sd(x) * n ** (-1/5)``); a constant chain, which it cannot
    take, gets a narrow spike.
    """
    x = np.asarray(x, dtype=float).reshape(-1)
    grid = np.asarray(grid, dtype=float)
    n, sd = x.shape[0], float(np.std(x, ddof=1)) if x.shape[0] > 1 else 0.0
    if sd > 0:
        from scipy.stats import gaussian_kde   # here: ``import sgmc`` need not load scipy.stats

        return gaussian_kde(x, bw_method="scott")(grid)
    bw = 1e-12 + 1e-3 * max(abs(float(np.mean(x))), 1.0)
    z = (grid - float(np.mean(x))) / bw
    return np.exp(-0.5 * z * z) / (bw * np.sqrt(2.0 * np.pi))


# The plots document trace, params and chains again, each: every function's help stands alone.
def plot_density(trace: Any, params: Any = None, *, chains: Any = None, points: int = 200):
    """Marginal posterior densities: a Gaussian kernel density estimate per chain and parameter.

    Parameters
    ----------
    trace : Trace
    params : sequence of str or int, optional
        Parameters by name or index; default: the first four.
    chains : int or sequence of int, optional
        Chains to draw; default: all of them (chains that agree overlap).
    points : int, default 200
        Grid points of each curve, spanning the pooled draws plus three bandwidths either side.

    Returns
    -------
    matplotlib.figure.Figure
        One panel per parameter, titled by its name; x-axis the parameter's value, y-axis
        ``density``; one line per chain labelled ``chain k``.
    """
    coords = _params(trace, params)
    draws = backends.to_numpy(trace.draws)
    chosen = _chains(draws, chains)
    fig, axes = _figure(1, len(coords), 3.0, 2.4)
    for j, c in enumerate(coords):
        ax = axes[0][j]
        pooled = draws[chosen, :, c].reshape(-1)
        pad = 3.0 * float(np.std(pooled)) * max(draws.shape[1], 1) ** (-0.2) + 1e-9
        grid = np.linspace(pooled.min() - pad, pooled.max() + pad, int(points))
        for k in chosen:
            ax.plot(grid, kde(draws[k, :, c], grid), lw=1.0, label=f"chain {k}")
        name = trace.param_names[c]
        ax.set_title(name, fontsize=10)
        ax.set_xlabel(name)
        ax.set_ylabel("density")
    return fig


def autocorrelation(x: np.ndarray, max_lag: int) -> np.ndarray:
    """Autocorrelations of the series ``x`` (chains, n) at lags ``0..max_lag``, from the biased
    autocovariance that :func:`sgmc.diagnostics.ess` uses (a constant series gives zeros)."""
    xc = np.asarray(x, dtype=float) - np.mean(x, axis=1, keepdims=True)
    acov = np.asarray(_acov_fft(backends.get_backend("numpy").xp, xc[:, :, None]))[:, : max_lag + 1, 0]
    return acov / np.where(acov[:, :1] > 0, acov[:, :1], 1.0)


# The plots document trace, params and chains again, each: every function's help stands alone.
def plot_autocorr(trace: Any, params: Any = None, *, chains: Any = None, max_lag: int | None = None):
    """Autocorrelation of each chain's draws against the lag, one line per chain.

    Parameters
    ----------
    trace : Trace
    params : sequence of str or int, optional
        Parameters by name or index; default: the first four.
    chains : int or sequence of int, optional
        Chains to draw; default: all of them.
    max_lag : int, optional
        Largest lag shown, in kept draws; default ``min(100, n_draws - 1)``.

    Returns
    -------
    matplotlib.figure.Figure
        One panel per parameter, titled by its name; x-axis ``lag (kept draws)`` (a lag of one is
        the thinning interval in iterations), y-axis ``autocorrelation``.
    """
    coords = _params(trace, params)
    draws = backends.to_numpy(trace.draws)
    chosen = _chains(draws, chains)
    n = draws.shape[1]
    if n < 2:
        msg = f"`trace` needs at least 2 draws per chain for an autocorrelation; it has {n}"
        raise ValueError(msg)
    lag = min(100, n - 1) if max_lag is None else operator.index(max_lag)
    if not 1 <= lag < n:
        msg = f"`max_lag` must be in [1, {n - 1}] (below the {n} draws per chain); got {max_lag!r}"
        raise ValueError(msg)
    lags = np.arange(lag + 1)
    fig, axes = _figure(1, len(coords), 3.0, 2.4, sharey=True)
    for j, c in enumerate(coords):
        ax = axes[0][j]
        for k, rho in zip(chosen, autocorrelation(draws[chosen, :, c], lag)):
            ax.plot(lags, rho, lw=1.0, label=f"chain {k}")
        ax.axhline(0.0, color="0.5", lw=0.5)
        ax.set_title(trace.param_names[c], fontsize=10)
        ax.set_xlabel("lag (kept draws)")
    axes[0][0].set_ylabel("autocorrelation")
    return fig


# The plots document trace, params and chains again, each: every function's help stands alone.
def plot_pair(trace: Any, params: Any = None, *, chains: Any = None, max_points: int = 2000):
    """Pair plot: scatter plots of every pair of parameters below the diagonal, histograms on it.

    Parameters
    ----------
    trace : Trace
    params : sequence of str or int, optional
        Parameters by name or index; default: the first three.
    chains : int or sequence of int, optional
        Chains whose draws are pooled; default: all of them.
    max_points : int, default 2000
        At most this many draws per panel, evenly spaced through the pooled draws.

    Returns
    -------
    matplotlib.figure.Figure
        A k x k grid for k parameters; panel (i, j), i > j, plots parameter j (x-axis, labelled by
        its name on the bottom row) against parameter i (y-axis, labelled on the left column);
        panels above the diagonal are hidden.
    """
    coords = _params(trace, params, most=3)
    draws = backends.to_numpy(trace.draws)
    chosen = _chains(draws, chains)
    pooled = draws[chosen].reshape(-1, draws.shape[2])[:, coords]
    step = max(1, -(-pooled.shape[0] // int(max_points)))
    pooled = pooled[::step]
    k = len(coords)
    names = [trace.param_names[c] for c in coords]
    fig, axes = _figure(k, k, 2.2, 2.2)
    for i in range(k):
        for j in range(k):
            ax = axes[i][j]
            if j > i:
                ax.set_visible(False)
                continue
            if i == j:
                ax.hist(pooled[:, i], bins=30, color="C0", alpha=0.8)
            else:
                ax.scatter(pooled[:, j], pooled[:, i], s=2, alpha=0.4, color="C0", linewidths=0)
            if i == k - 1:
                ax.set_xlabel(names[j])
            if j == 0:
                ax.set_ylabel(names[i] if i > 0 else "count")
    return fig


def plot_convergence(traces: Any, *, metric: str = "error", reference: Any = None,
                     x: Sequence[str] = ("seconds", "data passes"), n_points: int = 20,
                     ksd_options: dict | None = None):
    """Accuracy against cost for one or several runs: the error of the running mean, or the KSD.

    Parameters
    ----------
    traces : Trace or mapping of str to Trace
        Runs by display name (a single trace is named by its sampler and estimator).
    metric : {"error", "ksd"}, default "error"
        As in :func:`sgmc.diagnostics.cost_path.convergence_path`: ``|| running mean - reference ||_2``
        (needs ``reference``) or the KSD of the draws so far (needs stored gradients).
    reference : array-like (dim,), optional
        Reference posterior mean for ``"error"``.
    x : sequence of {"iterations", "seconds", "data passes"}, default ("seconds", "data passes")
        One panel per cost unit, in this order.
    n_points, ksd_options
        As in :func:`~sgmc.diagnostics.cost_path.convergence_path`.

    Returns
    -------
    matplotlib.figure.Figure
        One panel per entry of ``x``, whose x-axis says the unit (``iterations``, ``wall time
        (seconds)``, ``data passes``, all on log scales), one line per run labelled by its name.
    """
    if hasattr(traces, "draws"):
        traces = {f"{traces.info.get('sampler', 'run')} / {traces.info.get('estimator', '?')}": traces}
    if not isinstance(traces, Mapping) or not traces:
        msg = "`traces` must be a Trace or a non-empty mapping of names to Traces"
        raise ValueError(msg)
    x = [x] if isinstance(x, str) else list(x)
    bad = [u for u in x if u not in X_AXES]
    if bad or not x:
        msg = f"`x` must list cost units among {', '.join(map(repr, X_AXES))}; got {bad or x!r}"
        raise ValueError(msg)
    paths = {}
    for name, trace in traces.items():
        _check_trace(trace, f"traces[{name!r}]")
        paths[name] = convergence_path(trace, metric=metric, reference=reference, n_points=n_points,
                                       ksd_options=ksd_options)
    fig, axes = _figure(1, len(x), 3.6, 2.8, sharey=True)
    for j, unit in enumerate(x):
        ax = axes[0][j]
        for name, path in paths.items():
            ax.plot(path[unit], path["value"], marker=".", lw=1.0, label=name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_minor_formatter("")  # labels at powers of ten only: minor labels overlap
        ax.set_xlabel(X_AXES[unit])
    axes[0][0].set_ylabel("KSD" if metric == "ksd" else "||mean of the draws - reference||")
    axes[0][0].legend(fontsize=8)
    return fig


# Its docstring example repeats sgmc.resume's set-up: each function's help runs on its own.
def trace_plot(
    traces: Mapping[str, Any],
    path: str | os.PathLike,
    coords: Sequence[int] = (0, 1, 2),
    reference: Any = None,
    *,
    chain: int | None = None,
    dpi: int = 100,
) -> str:
    """Write trace plots of ``coords`` for every run in ``traces`` to an image file.

    One row of panels per coordinate, one column per method; each panel plots the kept draws of every
    chain against their iteration numbers, and the rows are labelled by the parameters' names.
    :func:`plot_trace` returns the figure of one run instead.

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
    chain : int or None, default None
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
        If ``traces`` is empty, a coordinate or chain is out of range, or ``reference`` is too short.

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
    ref = _reference(reference, dim)
    nrow, ncol = len(coords), len(names)
    fig, axes = _figure(nrow, ncol, 3.2, 1.9, sharex="col", sharey="row")
    fig.set_dpi(int(dpi))
    for j, name in enumerate(names):
        tr = traces[name]
        draws = backends.to_numpy(tr.draws)
        if chain is not None and not 0 <= int(chain) < draws.shape[0]:
            msg = f"`chain`={chain} is out of range for trace {name!r} with {draws.shape[0]} chains"
            raise ValueError(msg)
        chosen = range(draws.shape[0]) if chain is None else [int(chain)]
        its = _iterations(tr)
        for i, c in enumerate(coords):
            ax = axes[i][j]
            for k in chosen:
                ax.plot(its, draws[k, :, c], lw=0.6, alpha=0.9 if len(chosen) == 1 else 0.6)
            if ref is not None:
                ax.axhline(ref[c], color="black", ls="--", lw=1.0)
            if i == 0:
                ax.set_title(name, fontsize=10)
            if j == 0:
                ax.set_ylabel(tr.param_names[c])
            if i == nrow - 1:
                ax.set_xlabel("iteration")
            ax.tick_params(labelsize=8)
    path = os.fspath(path)
    fig.savefig(path)
    return path


def forecast_plot(y: Any, path: str | os.PathLike, *, predictions: Any = None, forecast: Any = None,
                  coord: int = 0, title: str | None = None) -> str:
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
