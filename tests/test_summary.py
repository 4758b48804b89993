"""Trace.summary() and Trace.to_arviz(): the table ArviZ users know, checked against arviz-stats."""

import warnings

import numpy as np
import pytest

from sgmc.diagnostics import summary
from sgmc.trace import Trace


def _trace(x):
    n = x.shape[1]
    return Trace(draws=x, iterations=list(range(n)), stats={"step_size": np.full(n, 0.1)})


def test_summary_columns_equal_arviz_stats():
    array_stats = pytest.importorskip("arviz_stats.base").array_stats
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 301, 3)) * np.array([1.0, 2.0, 0.5]) + np.array([0.0, 1.0, -1.0])
    x[1, :, 2] += 0.5                                   # one chain off: R-hat well above 1
    table = _trace(x).summary(prob=0.9, names=["a", "b", "c"])
    a = np.moveaxis(x, -1, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = {
            "mean": a.reshape(3, -1).mean(axis=1),
            "sd": a.reshape(3, -1).std(axis=1, ddof=1),
            "hdi90_lb": array_stats.hdi(a, 0.9, axis=(-2, -1))[:, 0],
            "hdi90_ub": array_stats.hdi(a, 0.9, axis=(-2, -1))[:, 1],
            "mcse_mean": array_stats.mcse(a, method="mean"),
            "mcse_sd": array_stats.mcse(a, method="sd"),
            "ess_bulk": array_stats.ess(a, method="bulk"),
            "ess_tail": array_stats.ess(a, method="tail", prob=0.05),
            "r_hat": array_stats.rhat(a, method="rank"),
        }
    assert table.columns == list(ref)
    assert table.index == ["a", "b", "c"]
    for col, want in ref.items():
        np.testing.assert_allclose(table[col], want, rtol=1e-8)
    assert table.row("c")["r_hat"] > 1.05
    text = str(table)
    assert "ess_bulk" in text and text.count("\n") == 3
    with pytest.raises(KeyError, match="columns"):
        table["nope"]
    with pytest.raises(ValueError, match="names"):
        summary(x, names=["a"])


def test_to_arviz_hands_over_the_draws():
    az = pytest.importorskip("arviz")
    x = np.random.default_rng(1).normal(size=(2, 200, 2))
    tr = _trace(x)
    idata = tr.to_arviz()
    np.testing.assert_array_equal(idata.posterior["theta"].values, x)
    np.testing.assert_allclose(az.ess(idata, method="bulk")["theta"].values, tr.summary()["ess_bulk"], rtol=1e-8)
    np.testing.assert_allclose(az.rhat(idata)["theta"].values, tr.summary()["r_hat"], rtol=1e-8)


def test_summary_on_every_backend(xb):
    x = np.random.default_rng(2).normal(size=(3, 120, 2))
    got = summary(xb.asarray(x))
    want = summary(x)
    rtol = 1e-9 if xb.float_dtype == "float64" else 2e-3
    for col in want.columns:
        np.testing.assert_allclose(got[col], want[col], rtol=rtol, atol=rtol)
