"""Progress where people wait: sampling, the mode search, the MALA reference and tuning grids."""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest

import sgmc
from sgmc.models import LinearRegression


class Terminal(io.StringIO):
    """Standard error as if it were a terminal."""

    def isatty(self):
        return True


@pytest.fixture
def no_tqdm(monkeypatch):
    """The core install: tqdm cannot be imported."""
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)


@pytest.fixture(scope="module")
def model():
    r = np.random.default_rng(0)
    X = r.normal(size=(2000, 2))
    y = X @ np.array([1.0, -1.0]) + r.normal(size=2000)
    return LinearRegression(X, y)


CV = {"opt_steps": 1000}  # the shortest mode search that shows a bar


def test_bars_are_quiet_when_stderr_is_not_a_terminal(model, capsys):
    sgmc.sample(model, "sgld", "cv", step_size=1e-4, n_iter=300, rng=0, progress=True, estimator_options=CV)
    assert capsys.readouterr().err == ""


def test_the_core_install_shows_sampling_and_mode_search(model, monkeypatch, no_tqdm):
    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    sgmc.sample(model, "sgld", "cv", step_size=1e-4, n_iter=300, rng=0, estimator_options=CV)  # progress=True
    text = err.getvalue()
    assert "mode search: 100%" in text and "1000/1000" in text
    assert "sgld/cv: 100%" in text and "300/300" in text


def test_always_shows_bars_anywhere_and_false_never(model, capsys, no_tqdm):
    sgmc.sample(model, "sgld", "cv", step_size=1e-4, n_iter=100, rng=0, progress="always", estimator_options=CV)
    err = capsys.readouterr().err
    assert "mode search: 100%" in err and "sgld/cv: 100%" in err
    sgmc.sample(model, "sgld", "cv", step_size=1e-4, n_iter=100, rng=0, progress=False, estimator_options=CV)
    assert capsys.readouterr().err == ""
    with pytest.raises(ValueError, match="`progress` must be True, False, 'auto' or 'always'; got 'yes'"):
        sgmc.sample(model, step_size=1e-4, n_iter=10, progress="yes")


def test_tuning_grid_shows_progress(model, capsys, no_tqdm):
    sgmc.tune_step_size(model, "sgld", "minibatch", grid=[1e-5, 1e-4], pilot_iters=100, rng=0, progress="always")
    assert "tuning sgld: 100%" in capsys.readouterr().err


def test_cli_shows_every_long_phase_on_a_terminal(monkeypatch, no_tqdm, capsys):
    from sgmc.cli import main

    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    assert main(["run", "--quick", "--n-data", "1000", "--iters", "400", "--reference-iters", "100"]) == 0
    text = err.getvalue()
    for phase in ("mode search: 100%", "mala/full: 100%", "sgld/minibatch: 100%", "sgld/cv: 100%"):
        assert phase in text, phase
    err2 = Terminal()
    monkeypatch.setattr(sys, "stderr", err2)
    assert main(["run", "--quick", "--n-data", "1000", "--iters", "400", "--reference-iters", "100", "--no-progress"]) == 0
    assert err2.getvalue() == ""
