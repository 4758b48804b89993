"""The fused block of BPMF sampler iterations (native ``"bpmf_fused_block"``) against its twin and the step loop."""

from __future__ import annotations

import numpy as np
import pytest

from _fused_cases import (ESTIMATORS, SAMPLERS, declines_cleanly, native_equals_twin, resumes_bit_identically,
                          run_equals_loop)
from sgmc import backends
from sgmc._dispatch import native
from sgmc.models import BPMF

pytestmark = pytest.mark.skipif(native(backends.get_backend("numpy").xp, "bpmf_fused_block") is None,
                                reason="the fused native needs Numba (and SGMC_NATIVE not 0)")


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


def test_cases_outside_the_native_decline_to_the_twin():
    declines_cleanly(MODEL, "bpmf_fused_block")
