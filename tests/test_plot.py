"""sgmc.plot: the figures' contents (lines per chain, data plotted, axis labels, titles by name), not just that they exist.

The figures are drawn on matplotlib's Agg canvas; nothing here opens a window or changes pyplot's state.
"""

from __future__ import annotations

import numpy as np
import pytest

import sgmc
from sgmc.diagnostics import ksd
from sgmc.models import LinearRegression

pytest.importorskip("matplotlib")
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402

from sgmc import plot  # noqa: E402

_r = np.random.default_rng(11)
X = _r.normal(size=(300, 3))
Y = X @ np.array([1.0, -1.0, 0.5]) + _r.normal(size=300)
NAMES = ("age", "dose", "weight")
MODEL = LinearRegression(X, Y, param_names=NAMES)
CHAINS = 3


@pytest.fixture(scope="module")
def trace():
    return sgmc.sample(MODEL, "sgld", step_size=2e-3, batch_size=30, n_iter=240, burn_in=40, chains=CHAINS,
                       rng=4, progress=False, store_grads=True)


@pytest.fixture(scope="module")
def cv_trace():
    return sgmc.sample(MODEL, "sgld", "cv", step_size=2e-3, batch_size=30, n_iter=240, burn_in=40, chains=2,
                       rng=4, progress=False)


def _chain_lines(ax):
    return [ln for ln in ax.get_lines() if str(ln.get_label()).startswith("chain ")]


def test_figures_are_drawn_on_agg_and_render(trace):
    for fig in (plot.plot_trace(trace), plot.plot_density(trace), plot.plot_autocorr(trace), plot.plot_pair(trace),
                plot.plot_convergence(trace, reference=MODEL.posterior()[0])):
        assert isinstance(fig.canvas, FigureCanvasAgg)
        fig.canvas.draw()  # lays out and rasterises without error


def test_trace_plot_has_every_chain_titled_by_name(trace):
    ref = MODEL.posterior()[0]
    fig = plot.plot_trace(trace, reference=ref)
    axes = fig.axes
    assert [ax.get_title() for ax in axes] == list(NAMES)
    assert axes[-1].get_xlabel() == "iteration"
    draws = np.asarray(trace.draws)
    for j, ax in enumerate(axes):
        lines = _chain_lines(ax)
        assert len(lines) == CHAINS
        for k, line in enumerate(lines):
            np.testing.assert_array_equal(line.get_xdata(), trace.iterations)
            np.testing.assert_array_equal(line.get_ydata(), draws[k, :, j])
        (refline,) = [ln for ln in ax.get_lines() if ln.get_label() == "reference"]
        assert refline.get_ydata()[0] == pytest.approx(float(ref[j]))
    # parameters by name, in the order asked; one chain when asked
    fig = plot.plot_trace(trace, ["weight", "age"], chains=1)
    assert [ax.get_title() for ax in fig.axes] == ["weight", "age"]
    assert [len(_chain_lines(ax)) for ax in fig.axes] == [1, 1]
    np.testing.assert_array_equal(_chain_lines(fig.axes[0])[0].get_ydata(), draws[1, :, 2])


def test_density_curves_are_kernel_density_estimates_per_chain(trace):
    from scipy.stats import gaussian_kde

    fig = plot.plot_density(trace, ["dose"])
    (ax,) = fig.axes
    assert ax.get_title() == "dose" and ax.get_xlabel() == "dose" and ax.get_ylabel() == "density"
    lines = _chain_lines(ax)
    assert len(lines) == CHAINS
    draws = np.asarray(trace.draws)
    for k, line in enumerate(lines):
        x, y = line.get_xdata(), line.get_ydata()
        np.testing.assert_allclose(y, gaussian_kde(draws[k, :, 1], bw_method="scott")(x), rtol=1e-10, atol=1e-12)
        assert np.trapezoid(y, x) == pytest.approx(1.0, abs=0.01)


def test_autocorrelation_lines_match_direct_sums(trace):
    fig = plot.plot_autocorr(trace, max_lag=15)
    assert [ax.get_title() for ax in fig.axes] == list(NAMES)
    assert {ax.get_xlabel() for ax in fig.axes} == {"lag (kept draws)"}
    assert fig.axes[0].get_ylabel() == "autocorrelation"
    draws = np.asarray(trace.draws)
    for j, ax in enumerate(fig.axes):
        lines = _chain_lines(ax)
        assert len(lines) == CHAINS
        for k, line in enumerate(lines):
            x = draws[k, :, j] - draws[k, :, j].mean()
            direct = [np.sum(x[: x.size - t] * x[t:]) / np.sum(x * x) for t in range(16)]
            np.testing.assert_array_equal(line.get_xdata(), np.arange(16))
            np.testing.assert_allclose(line.get_ydata(), direct, atol=1e-12)


def test_pair_plot_scatters_every_pair_and_labels_the_edges(trace):
    fig = plot.plot_pair(trace)
    axes = np.asarray(fig.axes).reshape(3, 3)
    assert [ax.get_visible() for ax in axes.ravel()] == [True, False, False, True, True, False, True, True, True]
    assert [ax.get_xlabel() for ax in axes[-1]] == list(NAMES)
    assert [ax.get_ylabel() for ax in axes[1:, 0]] == list(NAMES[1:])
    pooled = np.asarray(trace.draws).reshape(-1, 3)
    (points,) = axes[2, 0].collections
    np.testing.assert_array_equal(points.get_offsets(), pooled[:, [0, 2]])
    assert sum(p.get_height() for p in axes[1, 1].patches) == pooled.shape[0]  # the histogram counts every draw


def test_convergence_axes_say_their_unit_and_plot_the_running_error(trace, cv_trace):
    ref = np.asarray(MODEL.posterior()[0])
    runs = {"SGLD": trace, "SGLD-CV": cv_trace}
    fig = plot.plot_convergence(runs, reference=ref, x=("iterations", "seconds", "data passes"), n_points=8)
    assert [ax.get_xlabel() for ax in fig.axes] == ["iterations", "wall time (seconds)", "data passes"]
    assert fig.axes[0].get_ylabel() == "||mean of the draws - reference||"
    for ax in fig.axes:
        assert [ln.get_label() for ln in ax.get_lines()] == ["SGLD", "SGLD-CV"]
        assert ax.get_xscale() == "log"
    for unit_ax, unit in zip(fig.axes, ("iterations", "seconds", "data passes")):
        for line, tr in zip(unit_ax.get_lines(), runs.values()):
            draws = np.asarray(tr.draws)
            ks = np.asarray([int(k) for k in _draw_counts(line, tr, unit)])
            errors = [np.linalg.norm(draws[:, :k, :].mean(axis=(0, 1)) - ref) for k in ks]
            np.testing.assert_allclose(line.get_ydata(), errors, rtol=1e-10)
    # the set-up's passes and time (the mode search of control variates) count on the cost axes
    cv_line = fig.axes[2].get_lines()[1]
    assert cv_line.get_xdata()[0] > cv_trace.info["setup_data_passes"] > 0
    assert fig.axes[1].get_lines()[1].get_xdata()[0] > cv_trace.info["setup_time"] > 0


def _draw_counts(line, tr, unit):
    """Invert the x-values of a convergence line to the draw counts they were computed at."""
    its = np.asarray(tr.iterations)
    if unit == "iterations":
        x_of = its + 1
    elif unit == "seconds":
        x_of = tr.stats["wall_time"][:, its].mean(axis=0) + tr.info["setup_time"]
    else:
        x_of = tr.stats["data_passes"][:, its].mean(axis=0) + tr.info["setup_data_passes"]
    out = []
    for x in line.get_xdata():
        (hit,) = np.flatnonzero(np.isclose(x_of, x, rtol=0, atol=0)) if unit != "seconds" else [
            int(np.argmin(np.abs(x_of - x)))]
        out.append(hit + 1)
    return out


def test_convergence_by_ksd_matches_the_ksd_of_each_prefix(trace):
    fig = plot.plot_convergence({"SGLD": trace}, metric="ksd", x="iterations", n_points=5)
    (ax,) = fig.axes
    assert ax.get_ylabel() == "KSD" and ax.get_xlabel() == "iterations"
    (line,) = ax.get_lines()
    its = np.asarray(trace.iterations)
    draws, grads = np.asarray(trace.draws), np.asarray(trace.grads)
    for x, value in zip(line.get_xdata(), line.get_ydata()):
        k = int(np.flatnonzero(its + 1 == x)[0]) + 1
        assert value == pytest.approx(float(ksd(draws[:, :k], grads[:, :k])), rel=1e-8)


def test_file_trace_plot_shows_every_chain_by_default(trace, tmp_path, monkeypatch):
    made = []
    real = plot._figure

    def spy(*args, **kw):
        fig, axes = real(*args, **kw)
        made.append(fig)
        return fig, axes

    monkeypatch.setattr(plot, "_figure", spy)
    out = plot.trace_plot({"SGLD": trace}, tmp_path / "t.png", coords=(0, 2))
    assert (tmp_path / "t.png").stat().st_size > 0 and out.endswith("t.png")
    (fig,) = made
    assert [len(ax.get_lines()) for ax in fig.axes] == [CHAINS, CHAINS]
    assert [ax.get_ylabel() for ax in fig.axes] == ["age", "weight"]


def test_bad_arguments_are_errors_naming_them(trace):
    with pytest.raises(ValueError, match=r"`params`: entry 'height' is not a parameter.*'age'"):
        plot.plot_trace(trace, ["age", "height"])
    with pytest.raises(ValueError, match=r"`params`: entry must be a name of param_names or an index in \[0, 2\]"):
        plot.plot_density(trace, [5])
    with pytest.raises(ValueError, match=r"`chains` must be chain numbers in \[0, 2\]"):
        plot.plot_autocorr(trace, chains=[0, 3])
    with pytest.raises(ValueError, match=r"`max_lag` must be in \[1, 199\]"):
        plot.plot_autocorr(trace, max_lag=200)
    with pytest.raises(ValueError, match=r"`x` must list cost units among 'iterations', 'seconds', 'data passes'"):
        plot.plot_convergence(trace, reference=np.zeros(3), x=("time",))
    with pytest.raises(ValueError, match=r"`reference` \(the posterior mean"):
        plot.plot_convergence(trace)
    with pytest.raises(TypeError, match=r"`trace` must be an sgmc.Trace"):
        plot.plot_pair(np.zeros((2, 10, 3)))
    no_grads = sgmc.Trace(draws=trace.draws, iterations=trace.iterations, stats=trace.stats, info=trace.info)
    with pytest.raises(ValueError, match=r"metric='ksd' needs the gradients"):
        plot.plot_convergence(no_grads, metric="ksd")
