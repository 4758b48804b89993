"""The fused block of Bayesian neural network iterations (native ``"bnn_fused_block"``) against its twin and the loop."""

from __future__ import annotations

import numpy as np
import pytest

from _fused_cases import (ESTIMATORS, SAMPLERS, declines_cleanly, native_equals_twin, resumes_bit_identically,
                          run_equals_loop)
from sgmc import backends
from sgmc._dispatch import native
from sgmc.backends import _numba
from sgmc.backends import _numba_fused_models
from sgmc.estimators import Minibatch
from sgmc.models import BayesianNeuralNetwork
from sgmc.samplers import SGLD, _fused

pytestmark = pytest.mark.skipif(not _numba.available(), reason="the fused native needs Numba (and SGMC_NATIVE not 0)")


def test_the_native_is_registered():
    assert native(backends.get_backend("numpy").xp, "bnn_fused_block") is not None

_R = np.random.default_rng(0)
X, Y = _R.random((200, 6)), _R.integers(0, 3, 200)
MODEL = BayesianNeuralNetwork(X, Y, n_hidden=5)


@pytest.mark.parametrize("smp", sorted(SAMPLERS))
@pytest.mark.parametrize("est", ESTIMATORS)
def test_the_native_block_equals_its_twin_on_the_same_numbers(smp, est):
    native_equals_twin(MODEL, smp, est)


@pytest.mark.parametrize("hidden", ["sigmoid", "tanh"])
@pytest.mark.parametrize("est", ["minibatch", "svrg"])
def test_every_hidden_activation_equals_the_twin(hidden, est):
    native_equals_twin(BayesianNeuralNetwork(X, Y, n_hidden=4, n_classes=4, hidden=hidden), "sgld", est)


@pytest.mark.parametrize(("smp", "est"), [("sgld", "minibatch"), ("sghmc", "cv"), ("sgnht", "svrg"),
                                          ("sghmc-plain", "minibatch-replace")])
def test_sample_draws_equal_the_unfused_loop(smp, est, monkeypatch):
    run_equals_loop(MODEL, smp, est, monkeypatch)


@pytest.mark.parametrize(("smp", "est", "every", "at"), [("sgld", "svrg", 20, 47), ("sghmc", "cv", 30, 60)])
def test_an_interrupted_fused_run_resumes_bit_identically(tmp_path, smp, est, every, at):
    resumes_bit_identically(MODEL, smp, est, every, at, tmp_path)


def test_cases_outside_the_native_decline_to_the_twin(monkeypatch):
    declines_cleanly(MODEL, "bnn_fused_block")
    # above the measured size limit the compiled block declines (the twin is as fast there)
    monkeypatch.setattr(_numba_fused_models, "BNN_MAX_WORK", 6 * 5 * 19)
    sgld, est = SGLD(), Minibatch(MODEL, 20)
    rng = backends.default_rng(0)
    state = sgld.init(rng, np.zeros((1, MODEL.dim)), est)
    plan = _fused.plan(sgld, est, state.position)
    z, idx = plan.draw(rng, 2, 1)
    spec = {"x": state.position, "g": state.grad, "rho": None, "xi": None}
    assert plan.fast(plan._spec_model, plan._spec_smp, plan._spec_est, spec, [1e-3] * 2, z, idx, False) is NotImplemented


def test_a_model_read_from_disk_gets_no_plan(tmp_path):
    path = tmp_path / "X.f64"
    X.tofile(path)
    try:
        model = BayesianNeuralNetwork(np.memmap(path, dtype=np.float64, mode="r", shape=X.shape), Y, n_hidden=5)
    except (TypeError, ValueError) as err:  # pragma: no cover - data on disk not supported by this model
        pytest.skip(f"BayesianNeuralNetwork does not read X from disk here: {err}")
    if getattr(model, "stream_rows", None) is None:
        pytest.skip("the model holds X in memory")
    assert _fused.plan(SGLD(), Minibatch(model, 20), np.zeros((1, model.dim))) is None
