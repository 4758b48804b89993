"""Wrong kinds of argument at the public entry points: every outcome is a result or an error naming the argument.

Where ``tests/test_fuzz.py`` draws arrays that are bad in their values (NaN, float16, the wrong rank),
this module draws arguments of the wrong kind altogether: an object that is not a model where a
model is expected, strings, ``None``, ragged nested lists, arrays of the wrong shape, NaN and inf
scalars, negative and absurdly large sizes. Each argument is drawn valid or bad from a per-argument
list of values with a label; the property is the one of ``test_fuzz.py``:

* all arguments valid: the call returns;
* some argument bad: the call raises ``TypeError`` or ``ValueError`` whose message names one of the
  bad arguments in backquotes (```model```), never an ``AttributeError`` or a NumPy error from
  inside the library, and never a hang (an absurd size is refused before anything is allocated).

The entry points: :mod:`sgmc.optimize` (``curvature_bound``, ``find_mode``, ``mode_gap``,
``mode_gap_cost``, ``warn_if_not_mode``, ``negative_hessian``, ``newton``, ``lbfgs``, ``laplace``),
the diagnostics (``ksd``, ``stein_thin``, ``ess``, ``rhat``, ``summary``, the metrics),
:class:`~sgmc.models.DirichletCategorical`, the AR model, :class:`~sgmc.ssm.GaussianHMM` and
:class:`~sgmc.Trace` (constructor, ``summary``, ``mean``, ``index``). Runs are deterministic
(``derandomize=True``, no example database) and small (``SGMC_FUZZ_EXAMPLES`` scales them).
"""

from __future__ import annotations

import math
import os
import warnings

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import sgmc  # noqa: E402
from sgmc import optimize  # noqa: E402
from sgmc.diagnostics import (  # noqa: E402
    convergence_path, cumulative_ksd, ess, gaussian_kl_from_samples, kl_gaussian, ksd, ksd_by_variable, log_loss, mse,
    predictive_log_lik, pseudo_variance, rhat, stein_thin, summary, zv_mean,
)
from sgmc.models import DirichletCategorical, GaussianTarget, LogisticRegression  # noqa: E402
from sgmc.ssm import GaussianHMM  # noqa: E402
from sgmc.ssm.ar import AR  # noqa: E402

EXAMPLES = int(os.environ.get("SGMC_FUZZ_EXAMPLES", "30"))
FUZZ = settings(
    derandomize=True, database=None, deadline=None, max_examples=EXAMPLES,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
HUGE = 10**12

_rng = np.random.default_rng(0)
_X = _rng.standard_normal((40, 2))
_Y01 = (_X[:, 0] > 0).astype(np.int64)
MODEL = LogisticRegression(_X, _Y01)
GAUSS = GaussianTarget(np.zeros(2), np.eye(2))
SERIES = _rng.standard_normal(30)
DRAWS = _rng.standard_normal((2, 12, 2))


class _NotAModel:
    """Has none of a model's attributes."""


class _HalfModel:
    """Looks like a model from afar (xp, dim, dtype) but has no density or gradient."""

    xp = np
    dim = 2
    dtype = np.float64
    device = None


class _BadDim:
    xp = np
    dim = "two"
    dtype = np.float64
    device = None


#: Values that are never a model.
NOT_MODELS = [None, "model", 3, np.ones(3), [[1.0, 2.0]], _NotAModel(), _HalfModel(), _BadDim(), {"dim": 2}]
#: Values that are never an array of numbers.
NOT_ARRAYS = [None, "theta", [[1.0, [2.0]], [3.0]], object(), {"a": 1}, [1.0, "x"]]


def arg(valid, bad):
    """``(value, is_bad)``: one of ``valid`` (False) or one of ``bad`` (True), about a third of the time."""
    good = st.sampled_from(valid).map(lambda v: (v, False))
    if not bad:
        return good
    return st.one_of(good, good, st.sampled_from(bad).map(lambda v: (v, True)))


def draw_args(data, spec: dict) -> tuple[dict, list]:
    """Draw every argument of ``spec`` (name -> (valid values, bad values)); return them and the bad names."""
    values, bad = {}, []
    for name, (valid, wrong) in spec.items():
        value, is_bad = data.draw(arg(valid, wrong), label=name)
        values[name] = value
        if is_bad:
            bad.append(name)
    return values, bad


def check(call, bad: list, also_ok: tuple = ()):
    """Run ``call``; with bad arguments it must raise TypeError/ValueError naming one of them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the library's own warnings (mode not found, ...) are not errors here
        try:
            out = call()
        except (TypeError, ValueError) as err:
            text = str(err)
            assert bad, f"valid input raised {type(err).__name__}: {text}"
            assert any(f"`{name}`" in text for name in bad), (
                f"the error does not name any of {bad}: {type(err).__name__}: {text}")
            return None
        except also_ok:
            return None
    assert not bad, f"bad argument(s) {bad} were accepted"
    return out


def _copy(a):
    return a.copy() if isinstance(a, np.ndarray) else a


# -- sgmc.optimize ---------------------------------------------------------------------------------

THETAS = ([np.zeros(2), np.zeros((1, 2)), [0.1, -0.2]],
          NOT_ARRAYS + [np.zeros(3), np.zeros((2, 2)), np.array([np.nan, 0.0]), np.array([np.inf, 0.0]), np.zeros(0)])
MODELS = ([MODEL], NOT_MODELS)
STEPS = ([1, 3, 10], [None, "10", 2.5, -1, 0, float("nan")])


@FUZZ
@given(data=st.data())
def test_curvature_bound_and_mode_gap_cost(data):
    args, bad = draw_args(data, {"model": MODELS})
    out = check(lambda: optimize.curvature_bound(args["model"]), bad)
    if out is not None:
        assert math.isfinite(out) and out > 0
    if isinstance(args["model"], _HalfModel):  # a target without gradients: mode_gap makes no pass, costs 0
        bad = []
    out = check(lambda: optimize.mode_gap_cost(args["model"]), bad)
    if out is not None:
        assert math.isfinite(out) and out >= 0


@FUZZ
@given(data=st.data())
def test_find_mode(data):
    args, bad = draw_args(data, {
        "model": MODELS, "init": THETAS, "n_steps": STEPS,
        "method": (["adam", "sgd"], ["bogus", None, 3]),
        "step_size": ([None, 0.05], [-1.0, 0.0, float("nan"), float("inf"), "0.1", [0.1]]),
        "batch_size": ([None, 10, 0.5], [0, -3, 10**6, "10", float("nan"), 1.5]),
        "gap_tol": ([1.0], [-1.0, float("nan"), "1", None]),
        "polish": ([None, False, "lbfgs"], ["bfgs", np.zeros(2), 1.5]),
        "progress": ([False], [None, "x", np.zeros(2), 2]),
    })
    out = check(lambda: optimize.find_mode(args["model"], 0, _copy(args["init"]), method=args["method"],
                                           n_steps=args["n_steps"], step_size=args["step_size"],
                                           batch_size=args["batch_size"], gap_tol=args["gap_tol"],
                                           polish=args["polish"], progress=args["progress"]), bad)
    if out is not None:
        assert np.all(np.isfinite(out))


@pytest.mark.parametrize("which", ["mode_gap", "warn_if_not_mode", "negative_hessian"])
@FUZZ
@given(data=st.data())
def test_mode_gap_and_hessian(data, which):
    spec = {"model": MODELS, "theta": THETAS}
    if which == "negative_hessian":
        spec["chunk_elements"] = ([1, 10**6], [0, -1, "big", None, 2.5])
    if which == "warn_if_not_mode":
        spec["gap_tol"] = ([1.0, 1e6], [-1.0, float("nan"), "1", None])
    if which == "mode_gap":
        spec["grad"] = ([None, np.ones(2)], ["g", np.ones(3), [[1.0, [2.0]]], np.array([np.nan, 1.0]), object()])
    args, bad = draw_args(data, spec)
    fn = getattr(optimize, which)
    extra = {k: v for k, v in args.items() if k not in ("model", "theta")}
    no_gradient = isinstance(args["model"], _HalfModel) and which != "negative_hessian"
    if no_gradient:  # documented: the gap of a target without gradients is NaN ("none")
        bad = [b for b in bad if b != "model"]
    out = check(lambda: fn(args["model"], _copy(args["theta"]), **extra), bad)
    if out is not None and not no_gradient:
        assert np.all(np.isfinite(np.asarray(out)))


@pytest.mark.parametrize("which", ["newton", "lbfgs"])
@FUZZ
@given(data=st.data())
def test_newton_and_lbfgs(data, which):
    spec = {"model": ([MODEL, GAUSS], NOT_MODELS), "theta": THETAS, "max_steps": STEPS}
    if which == "newton":
        spec["tol"] = ([1e-8], [-1.0, float("nan"), "small", None])
    else:
        spec["memory"] = ([1, 5], [0, -2, "5", None, 2.5])
        spec["gtol"] = ([1e-6], [0.0, -1.0, float("inf"), "x"])
    args, bad = draw_args(data, spec)
    fn = getattr(optimize, which)
    extra = {k: v for k, v in args.items() if k not in ("model", "theta")}
    out = check(lambda: fn(args["model"], _copy(args["theta"]), **extra), bad)
    if out is not None:
        theta = out[0] if isinstance(out, tuple) else out
        assert np.all(np.isfinite(np.asarray(theta)))


@FUZZ
@given(data=st.data())
def test_laplace(data):
    args, bad = draw_args(data, {
        "model": MODELS, "init": ([None] + THETAS[0], THETAS[1][1:]), "n_steps": STEPS,
        "batch_size": ([None, 10], [0, -3, 10**6, "10"]),
    })
    out = check(lambda: optimize.laplace(args["model"], 0, init=_copy(args["init"]), batch_size=args["batch_size"],
                                         n_steps=args["n_steps"], progress=False), bad)
    if out is not None:
        assert np.all(np.isfinite(out.mode)) and np.all(np.isfinite(out.precision))


# -- diagnostics -----------------------------------------------------------------------------------

SAMPLES = ([DRAWS[0], DRAWS], NOT_ARRAYS + [np.zeros((2, 2, 12, 2)), np.zeros(5), np.full((12, 2), np.nan), "x"])


@FUZZ
@given(data=st.data())
def test_ksd_and_stein_thin(data):
    args, bad = draw_args(data, {
        "samples": SAMPLES, "scores": SAMPLES,
        "preconditioner": (["med", "id", None], ["bogus", -1.0, [[1.0, 2.0]], object()]),
        "c": ([1.0, 0.5], [0.0, -1.0, float("nan"), "1", None]),
        "beta": ([-0.5], [0.5, float("nan"), "x", None]),
    })
    if "samples" not in bad and "scores" not in bad and np.shape(args["samples"]) != np.shape(args["scores"]):
        bad = bad + ["samples", "scores"]  # two valid arrays of different shapes: either may be named
    common = {k: args[k] for k in ("preconditioner", "c", "beta")}
    out = check(lambda: ksd(args["samples"], args["scores"], **common), bad)
    if out is not None:
        assert math.isfinite(float(out)) and float(out) >= 0
    m, m_bad = data.draw(arg([1, 5, 30], [0, -1, HUGE, "5", 2.5, None]), label="m")
    out = check(lambda: stein_thin(args["samples"], args["scores"], m, **common), bad + (["m"] if m_bad else []))
    if out is not None:
        assert out.shape == (m,)


DRAW_ARGS = ([DRAWS, DRAWS[0], DRAWS[0, :, 0]],
             NOT_ARRAYS + [np.zeros((2, 12, 2, 2, 2)), np.zeros((2, 2, 2)), np.ones((2, 12, 2)) * np.nan, 3.0])


@pytest.mark.parametrize("which", ["ess", "rhat", "summary"])
@FUZZ
@given(data=st.data())
def test_ess_rhat_summary(data, which):
    spec = {"draws": DRAW_ARGS}
    if which == "ess":
        spec["method"] = (["bulk", "tail"], ["bogus", None, 1])
    if which == "rhat":
        spec["method"] = (["rank", "split"], ["bogus", None, 1])
    if which == "summary":
        spec["prob"] = ([0.89, 0.5], [0.0, 1.0, -0.1, float("nan"), "0.9", None])
        spec["names"] = ([None], [3, "ab", [1, 2, 3, 4, 5]])
    args, bad = draw_args(data, spec)
    if which == "rhat" and not bad and args["method"] == "rank" and np.ndim(args["draws"]) < 3:
        bad = ["draws"]  # rank R-hat needs several chains
    fn = {"ess": ess, "rhat": rhat, "summary": summary}[which]
    draws = args.pop("draws")
    check(lambda: fn(draws, **args), bad)


@pytest.mark.parametrize("which", ["log_loss", "predictive_log_lik", "mse", "kl_gaussian", "gaussian_kl"])
@FUZZ
@given(data=st.data())
def test_metrics(data, which):
    vec = ([np.array([0.2, 0.9, 0.5])], NOT_ARRAYS + [np.array([0.2, np.nan, 0.5]), np.zeros((2, 4)), "p"])
    if which == "log_loss":
        args, bad = draw_args(data, {"prob": vec, "y": ([np.array([0, 1, 1])], NOT_ARRAYS + [np.array([0, 1])]),
                                     "eps": ([None, 1e-12], [-1.0, float("nan"), "x", 0.7])})
        call = lambda: log_loss(args["prob"], args["y"], eps=args["eps"])  # noqa: E731
    elif which == "predictive_log_lik":
        args, bad = draw_args(data, {"log_lik": ([np.log(np.full((4, 3), 0.5))], NOT_ARRAYS + [np.full((4, 3), np.nan)])})
        call = lambda: predictive_log_lik(args["log_lik"])  # noqa: E731
    elif which == "mse":
        args, bad = draw_args(data, {"draws_or_mean": ([DRAWS, np.zeros(2)], NOT_ARRAYS + [np.full(2, np.inf)]),
                                     "reference_mean": ([np.ones(2)], NOT_ARRAYS + [np.ones(3), np.full(2, np.nan)])})
        call = lambda: mse(args["draws_or_mean"], args["reference_mean"])  # noqa: E731
    elif which == "kl_gaussian":
        mean = ([np.zeros(2)], NOT_ARRAYS + [np.full(2, np.inf)])
        cov = ([np.eye(2)], NOT_ARRAYS + [-np.eye(2), np.full((2, 2), np.nan), np.array([[1.0, 2.0], [0.0, 1.0]])])
        args, bad = draw_args(data, {"mean0": mean, "cov0": cov, "mean1": mean, "cov1": cov})
        call = lambda: kl_gaussian(args["mean0"], args["cov0"], args["mean1"], args["cov1"])  # noqa: E731
    else:
        args, bad = draw_args(data, {"draws": ([DRAWS, DRAWS[0]], NOT_ARRAYS + [np.zeros((2, 2, 12, 2)), DRAWS * np.nan]),
                                     "ref_mean": ([np.zeros(2)], NOT_ARRAYS + [np.full(2, np.nan)]),
                                     "ref_cov": ([np.eye(2)], NOT_ARRAYS + [-np.eye(2), np.full((2, 2), np.inf)])})
        call = lambda: gaussian_kl_from_samples(args["draws"], args["ref_mean"], args["ref_cov"])  # noqa: E731
    out = check(call, bad)
    if out is not None:
        assert np.all(np.isfinite(np.asarray(out)))


@pytest.mark.parametrize("which", ["cumulative_ksd", "ksd_by_variable", "ksd kind"])
@FUZZ
@given(data=st.data())
def test_ksd_variants(data, which):
    spec = {"samples": SAMPLES}
    if which == "cumulative_ksd":
        spec["kind"] = (["sum", "joint"], ["bogus", None, np.zeros(3), 1])
    if which == "ksd_by_variable":
        spec["groups"] = ([None, [[0], [1]], {"a": [0, 1]}], ["ab", 3, [[0], [5]], [["x"]], [[0.5]], [[]]])
    if which == "ksd kind":
        spec["kind"] = (["sum", "joint", "per_coordinate"], ["bogus", None, np.zeros(3), 1])
    args, bad = draw_args(data, spec)
    x = args.pop("samples")
    scores = x if "samples" in bad else -np.asarray(x)
    fn = {"cumulative_ksd": cumulative_ksd, "ksd_by_variable": ksd_by_variable, "ksd kind": ksd}[which]
    if which == "ksd_by_variable":
        check(lambda: fn(x, scores, args["groups"]), bad)
    else:
        check(lambda: fn(x, scores, kind=args["kind"]), bad)


@FUZZ
@given(data=st.data())
def test_zv_mean(data):
    args, bad = draw_args(data, {
        "draws": ([DRAWS], NOT_ARRAYS + [DRAWS * np.nan, DRAWS.astype(complex)]),
        "order": ([1, 2], [0, 3, "2", None, 1.5, np.zeros(3), True]),
    })
    grads = -DRAWS
    out = check(lambda: zv_mean(args["draws"], grads, order=args["order"]), bad)
    if out is not None:
        assert np.all(np.isfinite(out.mean))


@FUZZ
@given(data=st.data())
def test_pseudo_variance(data):
    args, bad = draw_args(data, {
        "model": MODELS, "theta": ([np.zeros(2), np.zeros((3, 2)), [0.1, 0.2]], [t for t in THETAS[1] if not (isinstance(t, np.ndarray) and t.shape == (2, 2))]),
        "batch_size": ([1, 5, 0.5], [0, -1, 10**6, "5", None, float("nan")]),
        "weights": (["uniform", "exact", np.ones(40)], ["bogus", None, np.ones(3), -np.ones(40), np.zeros(40), [[1.0]]]),
    })
    out = check(lambda: pseudo_variance(args["model"], _copy(args["theta"]), args["batch_size"], args["weights"]), bad)
    if out is not None:
        assert np.all(np.isfinite(np.asarray(out))) and np.all(np.asarray(out) >= 0)


_RUN = {}


def _run_trace():
    if "trace" not in _RUN:  # one short run, made on first use; whether it mixed does not matter here
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _RUN["trace"] = sgmc.sample(MODEL, "sgld", step_size=1e-3, n_iter=40, chains=2, rng=0, progress=False)
    return _RUN["trace"]


@FUZZ
@given(data=st.data())
def test_convergence_path(data):
    args, bad = draw_args(data, {
        "trace": ([None], NOT_ARRAYS[1:] + [DRAWS, MODEL]),
        "metric": (["error"], ["bogus", None, 3]),
        "n_points": ([2, 5], [1, 0, -1, "5", None, 2.5]),
        "reference": ([np.zeros(2)], ["x", np.zeros(3), np.full(2, np.nan)]),
    })
    trace = _run_trace() if args["trace"] is None else args["trace"]
    out = check(lambda: convergence_path(trace, metric=args["metric"], reference=args["reference"],
                                         n_points=args["n_points"]), bad)
    if out is not None:
        assert np.all(np.isfinite(np.asarray(out["value"], dtype=float)))


# -- models ----------------------------------------------------------------------------------------

COUNTS = np.array([[3.0, 1.0, 0.0], [0.0, 2.0, 5.0]])


@FUZZ
@given(data=st.data())
def test_dirichlet_categorical(data):
    args, bad = draw_args(data, {
        "z": ([COUNTS, COUNTS.astype(np.int64), COUNTS[:1]],
              NOT_ARRAYS + [np.zeros((2, 3, 1)), np.zeros((0, 3)), -COUNTS, COUNTS * np.nan, np.zeros(3)]),
        "alpha": ([1.0, 0.5, np.array([1.0, 2.0, 3.0])],
                  [0.0, -1.0, float("nan"), float("inf"), "1", None, np.ones(4), [[1.0]]]),
        "param_names": ([None, ["a", "b", "c"]], [["a"], 3, ["a", "a", "b"], "abc"]),
    })
    model = check(lambda: DirichletCategorical(_copy(args["z"]), args["alpha"], param_names=args["param_names"]), bad)
    if model is not None:
        assert np.all(np.isfinite(model.grad_log_posterior(np.full((1, model.dim), 0.5))))


@FUZZ
@given(data=st.data())
def test_ar(data):
    args, bad = draw_args(data, {
        "y": ([SERIES, SERIES[:, None], list(SERIES[:8])], NOT_ARRAYS + [np.zeros((3, 4, 2)), SERIES * np.inf]),
        "order": ([1, 2], [0, -1, HUGE, "2", 1.5, None]),
        "prior_var": ([100.0], [0.0, -1.0, float("nan"), "1", None]),
        "prior_shape": ([1.0], [0.0, float("inf"), "a"]),
        "prior_rate": ([1.0], [-2.0, None]),
    })
    model = check(lambda: AR(_copy(args["y"]), args["order"], prior_var=args["prior_var"],
                             prior_shape=args["prior_shape"], prior_rate=args["prior_rate"]), bad)
    if model is None:
        return
    T, T_bad = data.draw(arg([1, 5], [0, -1, HUGE, "5", None]), label="T")
    theta, th_bad = data.draw(arg([np.zeros(model.dim)], NOT_ARRAYS + [np.zeros(model.dim + 1)]), label="theta")
    check(lambda: model.simulate(sgmc.backends.default_rng(0), T, theta),
          (["T"] if T_bad else []) + (["theta"] if th_bad else []))


@FUZZ
@given(data=st.data())
def test_gaussian_hmm(data):
    args, bad = draw_args(data, {
        "y": ([SERIES, SERIES[:, None]], NOT_ARRAYS + [np.zeros((3, 4, 2)), SERIES * np.nan, np.zeros(0)]),
        "n_states": ([2, 3], [1, 0, -1, HUGE, "2", 2.5, None]),
        "prior_var": ([100.0], [0.0, float("nan"), "1"]),
        "initial": (["z0", "z1"], ["z2", None, 0]),
        "initial_probs": ([None], [np.ones(7), "uniform", np.array([np.nan, 1.0]), [[0.5, 0.5]]]),
        "mean_prior": ([None, (0.0, 1.0)], ["x", (0.0,), ("a", 1.0), [[1.0, [2.0]], 1.0], 3.0]),
        "transition_prior": ([None, 1.0], ["x", object(), [[1.0, [2.0]]]]),
        "emission_cov": ([None, 1.0], ["x", object(), [[1.0, [2.0]]]]),
    })
    model = check(lambda: GaussianHMM(_copy(args["y"]), args["n_states"], prior_var=args["prior_var"],
                                      initial=args["initial"], initial_probs=args["initial_probs"],
                                      mean_prior=args["mean_prior"], transition_prior=args["transition_prior"],
                                      emission_cov=args["emission_cov"]), bad)
    if model is None:
        return
    T, T_bad = data.draw(arg([1, 5], [0, -1, HUGE, "5", None]), label="T")
    theta, th_bad = data.draw(arg([np.ones(model.dim)], NOT_ARRAYS + [np.ones(model.dim + 1)]), label="theta")
    check(lambda: model.simulate(sgmc.backends.default_rng(0), T, theta),
          (["T"] if T_bad else []) + (["theta"] if th_bad else []))


# -- Trace -----------------------------------------------------------------------------------------


@FUZZ
@given(data=st.data())
def test_trace(data):
    args, bad = draw_args(data, {
        "draws": ([DRAWS, DRAWS.astype(np.float32)],
                  NOT_ARRAYS + [DRAWS[0], DRAWS[0, :, 0], np.zeros((0, 12, 2)), np.zeros((2, 12, 0)),
                                np.zeros((2, 12, 2), dtype=complex)]),
        "grads": ([None, DRAWS * 0.5], NOT_ARRAYS[1:] + [DRAWS[0], np.zeros((2, 12, 3))]),
        "iterations": ([list(range(12)), None], ["abc", 5, [1, 2], [0.5] * 12]),
        "stats": ([{}, None], ["stats", [1, 2], 3]),
        "info": ([{}, {"sampler": "sgld"}, None], ["info", [1], 3]),
        "param_names": ([None, ["a", "b"]], [["a"], ["a", "a"], 3, "ab"]),
    })
    kwargs = {k: v for k, v in args.items() if v is not None or k in ("draws", "grads", "param_names")}
    trace = check(lambda: sgmc.Trace(**kwargs), bad)
    if trace is None:
        return
    assert np.all(np.isfinite(trace.mean()))
    prob, prob_bad = data.draw(arg([0.89, 0.5], [1.5, 0.0, float("nan"), "0.9", None]), label="prob")
    names, names_bad = data.draw(arg([None, ["x", "y"]], [["x"], 3, ["x", "x"]]), label="names")
    check(lambda: trace.summary(prob=prob, names=names), (["prob"] if prob_bad else []) + (["names"] if names_bad else []))
    param, param_bad = data.draw(arg([0, 1, "a" if trace.param_names[0] == "a" else "theta[0]"],
                                     [2, -1, "nope", None, 1.5, [0]]), label="param")
    check(lambda: trace.index(param), ["param"] if param_bad else [])


def test_a_trace_without_draws_yet_is_a_trace():
    # an interrupted run may stop before its first kept draw: its partial trace still builds
    trace = sgmc.Trace(draws=np.zeros((2, 0, 3)), iterations=[])
    assert (trace.n_chains, trace.n_draws, trace.dim) == (2, 0, 3)
    with pytest.raises(ValueError, match="`iterations` must hold one iteration per draw"):
        sgmc.Trace(draws=np.zeros((2, 4, 3)), iterations=[0, 1])
