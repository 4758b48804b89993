"""One naming rule for samplers and estimators, and options checked by name with a suggestion."""

from __future__ import annotations

import numpy as np
import pytest

import sgmc
from sgmc.estimators import ESTIMATORS, make_estimator
from sgmc.models import LinearRegression
from sgmc.samplers import SAMPLERS, make_sampler

_r = np.random.default_rng(0)
X = _r.normal(size=(300, 2))
MODEL = LinearRegression(X, X @ np.array([1.0, -1.0]) + _r.normal(size=300))


def _variants(name):
    return {name.upper(), name.replace("_", "-"), name.replace("-", "_"), name.replace("-", "_").upper()}


@pytest.mark.parametrize("name", ["sgld_corrected", "sghmc_corrected", "psgld", "sgrld"])
def test_sampler_names_take_hyphens_or_underscores(name):
    for variant in _variants(name):
        assert type(make_sampler(variant, MODEL)) is SAMPLERS[name]


@pytest.mark.parametrize("name", ["cv-ps", "adaptive-cv-ps", "minibatch-noise", "svrg"])
def test_estimator_names_take_hyphens_or_underscores(name):
    for variant in _variants(name):
        assert type(make_estimator(variant, MODEL, 10)) is ESTIMATORS[name]


def test_sample_takes_either_spelling():
    a = sgmc.sample(MODEL, "SGLD", "cv_ps", step_size=1e-3, n_iter=20, rng=0, progress=False,
                    estimator_options={"centre": np.zeros(2)})
    b = sgmc.sample(MODEL, "sgld", "cv-ps", step_size=1e-3, n_iter=20, rng=0, progress=False,
                    estimator_options={"centre": np.zeros(2)})
    assert np.array_equal(a.draws, b.draws)


@pytest.mark.parametrize(
    "sampler, estimator, sopts, eopts, match",
    [
        ("sgld", "minibatch", {"bogus": 1}, None, r"`sampler_options`: sampler 'sgld' has no option 'bogus'; it takes no options"),
        ("sghmc", "minibatch", {"frction": 0.5}, None, r"sampler 'sghmc' has no option 'frction'; did you mean 'friction'\?"),
        ("psgld", "minibatch", {"alhpa": 0.9}, None, r"did you mean 'alpha'\?"),
        ("sgld", "cv", None, {"opt_step": 10}, r"`estimator_options`: estimator 'cv' has no option 'opt_step'; did you mean 'opt_steps'\?"),
        ("sgld", "ps", None, {"flor": 0.1}, r"estimator 'ps' has no option 'flor'; did you mean 'floor'\?"),
        ("sgld", "adaptive_cv", None, {"quantil": 0.9}, r"estimator 'adaptive-cv' has no option 'quantil'; did you mean 'quantile'\?"),
        ("sgld", "minibatch", None, {"replac": True}, r"did you mean 'replace'\?"),
    ],
)
def test_misspelt_options_name_the_closest_option(sampler, estimator, sopts, eopts, match):
    with pytest.raises(TypeError, match=match):
        sgmc.sample(MODEL, sampler, estimator, step_size=1e-3, n_iter=5, progress=False,
                    sampler_options=sopts, estimator_options=eopts)


def test_options_the_library_sets_are_not_offered():
    with pytest.raises(TypeError) as err:
        make_sampler("psgld", MODEL, alpah=0.9)
    assert "'n_data'" not in str(err.value) and "'alpha', 'lam'" in str(err.value)


def test_valid_options_still_work():
    smp = make_sampler("sghmc", MODEL, friction=0.5, n_leapfrog=2)
    assert smp.friction == 0.5 and smp.n_leapfrog == 2
    est = make_estimator("adaptive-cv-ps", MODEL, 10, opt_steps=7)
    assert est.opt_steps == 7


def test_options_a_constructor_takes_through_its_own_keywords(monkeypatch):
    # **extra used by the class itself (not forwarded): any key is the constructor's to judge
    class Tolerant(sgmc.estimators.Minibatch):
        def __init__(self, model, batch_size, **extra):
            super().__init__(model, batch_size)
            self.extra = extra

    class Strict(sgmc.estimators.Minibatch):
        def __init__(self, model, batch_size, **extra):
            super().__init__(model, batch_size, **extra)  # only Minibatch's own: replace

    monkeypatch.setitem(ESTIMATORS, "tolerant", Tolerant)
    monkeypatch.setitem(ESTIMATORS, "strict", Strict)
    assert make_estimator("tolerant", MODEL, 10, anything=1).extra == {"anything": 1}
    assert make_estimator("strict", MODEL, 10, replace=True).replace
    with pytest.raises(TypeError, match=r"estimator 'strict' has no option 'replac'; did you mean 'replace'\?"):
        make_estimator("strict", MODEL, 10, replac=True)
