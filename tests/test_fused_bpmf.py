"""The fused block of BPMF sampler iterations (native ``"bpmf_fused_block"``) against its twin and the step loop."""

from __future__ import annotations

import numpy as np
import pytest

from _fused_cases import (ESTIMATORS, SAMPLERS, declines_cleanly, native_equals_twin, resumes_bit_identically,
                          run_equals_loop)
from sgmc import backends
from sgmc._dispatch import native
from sgmc.backends import _numba
from sgmc.backends import _numba_fused_models
from sgmc.estimators import SVRG, ControlVariate, Minibatch
from sgmc.models import BPMF
from sgmc.samplers import SGLD, _fused

pytestmark = pytest.mark.skipif(not _numba.available(), reason="the fused native needs Numba (and SGMC_NATIVE not 0)")


def test_the_native_is_registered():
    assert native(backends.get_backend("numpy").xp, "bpmf_fused_block") is not None


def _model(**kw):
    r = np.random.default_rng(0)
    n = 300
    # a repeated user and item within most minibatches: the scatter-add's sums are exercised
    return BPMF(r.integers(0, 12, n), r.integers(0, 9, n), r.integers(1, 6, n).astype(float), 12, 9, d=3,
                centre=True, **kw)


MODEL = _model()


@pytest.mark.parametrize("smp", sorted(SAMPLERS))
@pytest.mark.parametrize("est", ESTIMATORS)
def test_the_native_block_equals_its_twin_on_the_same_numbers(smp, est):
    native_equals_twin(MODEL, smp, est)


def test_the_hyperparameters_reach_the_native():
    native_equals_twin(_model(alpha=2.0, mu0=0.3, a0=2.0, b0=1.5), "sgld", "cv")


@pytest.mark.parametrize(("smp", "est"), [("sgld", "minibatch"), ("sghmc", "cv"), ("sgnht", "svrg"),
                                          ("sghmc-plain", "minibatch-replace")])
def test_sample_draws_equal_the_unfused_loop(smp, est, monkeypatch):
    run_equals_loop(MODEL, smp, est, monkeypatch)


@pytest.mark.parametrize(("smp", "est", "every", "at"), [("sgld", "svrg", 20, 47), ("sgnht", "cv", 30, 60)])
def test_an_interrupted_fused_run_resumes_bit_identically(tmp_path, smp, est, every, at):
    resumes_bit_identically(MODEL, smp, est, every, at, tmp_path)


def test_cases_outside_the_native_decline_to_the_twin(monkeypatch):
    declines_cleanly(MODEL, "bpmf_fused_block")
    # minibatches touching more rows than the measured limit decline (the twin is as fast there); SVRG runs
    monkeypatch.setattr(_numba_fused_models, "BPMF_MAX_TOUCH", 0.5)
    rng = backends.default_rng(0)
    for est, ran in ((Minibatch(MODEL, 20), False), (ControlVariate(MODEL, 20, centre=np.zeros(MODEL.dim)), False),
                     (SVRG(MODEL, 20), True)):
        state = SGLD().init(rng, np.zeros((1, MODEL.dim)), est)
        plan = _fused.plan(SGLD(), est, state.position)
        z, idx = plan.draw(rng, 2, 1)
        spec = {"x": state.position, "g": state.grad, "rho": None, "xi": None}
        if est.name == "cv":
            spec.update(centre=state.est_state.centre, centre_grad=state.est_state.centre_grad)
        if est.name == "svrg":
            spec.update(centre=state.est_state.snapshot, centre_grad=state.est_state.snapshot_grad, count=0)
        out = plan.fast(plan._spec_model, plan._spec_smp, plan._spec_est, spec, [1e-3] * 2, z, idx, False)
        assert (out is not NotImplemented) == ran
