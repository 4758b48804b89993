"""Property-based tests over the public entry points: every outcome is a result or an error naming the argument.

Each argument is drawn from a strategy that labels what it draws: a valid value (finite float64,
float32 or integer arrays of the right shape, numbers in range) or one bad in a known way (float16,
complex, NaN or inf entries, the wrong rank or shape, ``None``, a string, a number out of range).
The properties:

* all arguments valid: the call returns, and its result holds no NaN (the only documented NaN is
  R-hat's for a coordinate that is constant within every half chain, which is checked as such);
* some argument bad: the call raises ``TypeError`` or ``ValueError`` whose message names one of the
  bad arguments in backquotes (```draws```), never an error from deep inside NumPy.

Runs are deterministic (``derandomize=True``, no example database) and small (a few dozen examples
per entry point, the whole module in well under a minute).
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
from hypothesis.extra import numpy as hnp  # noqa: E402

import sgmc  # noqa: E402
from sgmc.diagnostics import ess, hdi, ksd, mcse, rhat, summary  # noqa: E402
from sgmc.diagnostics.metrics import kl_gaussian  # noqa: E402
from sgmc.models import GaussianTarget, LinearRegression, LogisticRegression  # noqa: E402
from sgmc.ssm import LGSSM  # noqa: E402
from sgmc.ssm.particle import ScalarLGSSMKernel, particle_filter  # noqa: E402

# SGMC_FUZZ_EXAMPLES=500 python -m pytest tests/test_fuzz.py searches deeper (still deterministic)
EXAMPLES = int(os.environ.get("SGMC_FUZZ_EXAMPLES", "40"))
FUZZ = settings(
    derandomize=True, database=None, deadline=None, max_examples=EXAMPLES,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
FEW = settings(FUZZ, max_examples=max(1, EXAMPLES * 3 // 8))

BAD_KINDS = ("float16", "complex", "nan", "inf", "rank", "none", "string")
VALUE = st.floats(-100.0, 100.0, allow_nan=False, allow_infinity=False, width=32)


def _good_array(shape, dtype: str, draw) -> np.ndarray:
    a = draw(hnp.arrays(np.float64, shape, elements=VALUE))
    if dtype == "int":
        return np.round(a).astype(np.int64)
    return a.astype(dtype)


@st.composite
def labelled(draw, shape, bad_rate: float = 0.4, kinds=BAD_KINDS):
    """``(value, bad_kind)``: a finite array of ``shape`` (bad_kind None) or one bad in a known way."""
    if draw(st.floats(0, 1)) >= bad_rate:
        return _good_array(shape, draw(st.sampled_from(("float64", "float32", "int"))), draw), None
    kind = draw(st.sampled_from(kinds))
    if kind == "none":
        return None, kind
    if kind == "string":
        return "draws", kind
    if kind == "rank":
        return _good_array(shape + (2,), "float64", draw), kind
    a = _good_array(shape, "float64", draw)
    if kind == "float16":
        return a.astype(np.float16), kind
    if kind == "complex":
        return a + 1j, kind
    flat = a.reshape(-1)
    if flat.size:
        flat[draw(st.integers(0, flat.size - 1))] = np.nan if kind == "nan" else np.inf
        return a, kind
    return a, None


def _check(call, bad: dict):
    """Run ``call``; ``bad`` maps argument names to their bad kinds (None when valid)."""
    named = [name for name, kind in bad.items() if kind is not None]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sgmc's own warnings (e.g. at-the-edge) are not errors here
        try:
            out = call()
        except (TypeError, ValueError) as err:
            assert named, f"valid input raised {type(err).__name__}: {err}"
            assert any(f"`{name}`" in str(err) for name in named), (
                f"the error does not name any of {named}: {type(err).__name__}: {err}")
            return None
    assert not named, f"bad input {named} ({[bad[n] for n in named]}) was accepted"
    return out


def _finite(x) -> bool:
    return bool(np.all(np.isfinite(np.asarray(sgmc.backends.to_numpy(x)))))


# -- diagnostics ----------------------------------------------------------------------------------


def _draws_shape():
    return st.sampled_from([(2, 8, 2), (3, 6, 1), (1, 10, 3), (10, 2), (12,), (2, 3, 2), (4, 5, 2, 1)])


def _draws_problem(shape, kind, min_draws: int = 4):
    """What is wrong with a draws array of ``shape`` (None if nothing) for ess / summary."""
    if kind == "rank":  # one more axis: (n,) -> (n, 2) is one chain of 2-vectors, valid
        return _draws_problem(tuple(shape) + (2,), None, min_draws)
    if kind is not None:
        return kind
    if len(shape) > 3:
        return "rank"
    full = {1: (1, shape[0], 1), 2: (1,) + tuple(shape), 3: tuple(shape)}[len(shape)]
    return "too few draws" if full[1] < min_draws else None


def _as3d(draws) -> np.ndarray:
    x = np.asarray(draws, dtype=np.float64)
    return {1: lambda: x.reshape(1, -1, 1), 2: lambda: x[None], 3: lambda: x}[x.ndim]()


def _rhat_nan_allowed(x: np.ndarray) -> np.ndarray:
    """Coordinates constant within every half chain: the documented NaN of R-hat."""
    n = x.shape[1]
    halves = np.concatenate([x[:, : n // 2], x[:, n - n // 2:]], axis=0)
    return np.all(np.ptp(halves, axis=1) == 0, axis=0)


@FUZZ
@given(data=st.data(), shape=_draws_shape(), method=st.sampled_from(["bulk", "tail", "mean", "sd", "bogus"]))
def test_ess(data, shape, method):
    draws, kind = data.draw(labelled(shape))
    problem = _draws_problem(shape, kind)
    out = _check(lambda: ess(draws, method=method), {"draws": problem, "method": "unknown" if method == "bogus" else None})
    if out is not None:
        assert _finite(out), f"ess gave {out} for finite draws"
        assert np.all(np.asarray(out) > 0)


@FUZZ
@given(data=st.data(), shape=_draws_shape(), method=st.sampled_from(["rank", "split"]))
def test_rhat(data, shape, method):
    draws, kind = data.draw(labelled(shape))
    problem = _draws_problem(shape, kind)
    eff = tuple(shape) + (2,) if kind == "rank" else tuple(shape)
    if problem is None and method == "rank" and (len(eff) < 3 or eff[0] < 2):
        problem = "one chain"
    out = _check(lambda: rhat(draws, method=method), {"draws": problem})
    if out is not None:
        x = _as3d(draws)
        nan = np.isnan(np.atleast_1d(np.asarray(out)))
        assert np.all(~nan | _rhat_nan_allowed(x)), f"rhat gave NaN for a varying coordinate: {out}"


@FEW
@given(data=st.data(), shape=_draws_shape(), prob=st.sampled_from([0.5, 0.89, 1.5, -0.1]))
def test_summary(data, shape, prob):
    draws, kind = data.draw(labelled(shape))
    problem = _draws_problem(shape, kind)
    table = _check(lambda: summary(draws, prob=prob), {"draws": problem, "prob": None if 0 < prob < 1 else "range"})
    if table is not None:
        x = _as3d(draws)
        for column in table.columns:
            values = np.asarray(table[column])
            if column == "r_hat":
                assert np.all(~np.isnan(values) | _rhat_nan_allowed(x))
            else:
                assert np.all(np.isfinite(values)), (column, values)


@FUZZ
@given(data=st.data(), shape=_draws_shape(), method=st.sampled_from(["mean", "sd", "quantile", "hdi"]))
def test_mcse_and_hdi(data, shape, method):
    draws, kind = data.draw(labelled(shape))
    problem = _draws_problem(shape, kind, min_draws=1 if method == "hdi" else 4)
    if method == "hdi":
        out = _check(lambda: hdi(draws, 0.8), {"draws": problem})
    else:
        out = _check(lambda: mcse(draws, method=method, prob=0.3 if method == "quantile" else None),
                     {"draws": problem})
    if out is not None:
        assert _finite(out), f"{method} gave {out} for finite draws"


@FUZZ
@given(data=st.data(), d=st.integers(1, 3))
def test_kl_gaussian(data, d):
    kinds = tuple(k for k in BAD_KINDS if k != "rank")
    m0, k0 = data.draw(labelled((d,), kinds=kinds))
    m1, k1 = data.draw(labelled((d,), kinds=kinds))
    a = data.draw(hnp.arrays(np.float64, (d, d), elements=st.floats(-2, 2)))
    cov = a @ a.T + np.eye(d)
    out = _check(lambda: kl_gaussian(m0, cov, m1, np.eye(d)), {"mean0": k0, "mean1": k1})
    if out is not None:
        assert _finite(out) and float(out) >= 0


@FUZZ
@given(data=st.data(), n=st.integers(2, 12), d=st.integers(1, 3), mismatch=st.booleans())
def test_ksd(data, n, d, mismatch):
    kinds = tuple(k for k in BAD_KINDS if k != "rank")  # a 3-d array is (chains, n, d): valid by itself
    samples, k1 = data.draw(labelled((n, d), kinds=kinds))
    scores, k2 = data.draw(labelled((n, d + 1) if mismatch else (n, d), kinds=kinds))
    bad = {"samples": k1, "scores": k2 or ("shape" if mismatch else None)}
    out = _check(lambda: ksd(samples, scores), bad)
    if out is not None:
        assert _finite(out) and float(out) >= 0


# -- models and state space models ----------------------------------------------------------------


@FUZZ
@given(data=st.data(), n=st.integers(1, 20), d=st.integers(1, 3), logistic=st.booleans(), extra=st.booleans())
def test_regression_constructors(data, n, d, logistic, extra):
    X, kx = data.draw(labelled((n, d)))
    if logistic:
        y = data.draw(hnp.arrays(np.int64, (n + extra,), elements=st.integers(0, 1)))
        ky = "length" if extra else None
        if data.draw(st.booleans()) and n:
            y = y.astype(float)
            y[0] = 0.5
            ky = ky or "not 0/1"
    else:
        y, ky = data.draw(labelled((n + extra,)))
        ky = ky or ("length" if extra else None)
    cls = LogisticRegression if logistic else LinearRegression
    model = _check(lambda: cls(X, y), {"X": kx, "y": ky})
    if model is not None:
        theta = np.zeros((2, d))
        assert _finite(model.log_posterior(theta)) and _finite(model.grad_log_posterior(theta))


@FEW
@given(data=st.data(), d=st.integers(1, 3), asym=st.booleans())
def test_gaussian_target(data, d, asym):
    mean, km = data.draw(labelled((d,)))
    a = data.draw(hnp.arrays(np.float64, (d, d), elements=st.floats(-2, 2)))
    cov = a @ a.T + np.eye(d)
    kc = None
    if asym and d > 1:
        cov[0, 1] += 1.0
        kc = "not symmetric"
    model = _check(lambda: GaussianTarget(mean, cov), {"mean": km, "cov": kc})
    if model is not None:
        assert _finite(model.grad_log_posterior(np.zeros((1, d))))


@FUZZ
@given(data=st.data(), T=st.integers(1, 15))
def test_lgssm_log_lik(data, T):
    y, ky = data.draw(labelled((T,)))
    if ky == "rank":
        ky = None  # (T, 2) is a series of 2-vectors: valid for a model with obs_dim 2
    model = _check(lambda: LGSSM(y), {"y": ky})
    if model is None:
        return
    dim = model.dim
    chains = data.draw(st.integers(1, 3))
    theta = data.draw(hnp.arrays(np.float64, (chains, dim), elements=st.floats(-1.5, 1.5)))
    # the precision factors' diagonals away from 0 (the likelihood vanishes at a singular factor)
    kt = data.draw(st.sampled_from([None, None, "zero", "nan", "shape", "none"]))
    n, m = model.n, model.m
    a, c = n * n, m * n - min(n, m) ** 2
    diag = [a + c + i * (i + 3) // 2 for i in range(n)] + [a + c + n * (n + 1) // 2 + i * (i + 3) // 2 for i in range(m)]
    theta[:, diag] = np.where(np.abs(theta[:, diag]) < 0.2, 0.5, theta[:, diag])
    if kt == "zero":
        theta[0, diag[0]] = 0.0
    elif kt == "nan":
        theta[0, 0] = np.nan
    elif kt == "shape":
        theta = theta[:, :-1]
    elif kt == "none":
        theta = None
    out = _check(lambda: model.log_lik(theta), {"theta": kt})
    if out is not None:
        assert _finite(out), f"log_lik gave {out} at finite theta"


@FUZZ
@given(data=st.data(), T=st.integers(1, 12), n_particles=st.sampled_from([1, 7, 50, 0, -3, 2.5, "10", None]))
def test_particle_filter(data, T, n_particles):
    y, ky = data.draw(labelled((1, T, 1)))
    kernel = ScalarLGSSMKernel(np.array([0.8]), np.array([0.7]), np.array([1.3]))
    good_n = isinstance(n_particles, int) and n_particles >= 1
    res = _check(lambda: particle_filter(0, kernel, y, n_particles),
                 {"y": ky if ky != "rank" else "shape", "n_particles": None if good_n else "bad"})
    if res is not None:
        assert _finite(res.log_lik), f"particle filter gave {res.log_lik} for finite y"


# -- the runner and the tuner ---------------------------------------------------------------------


def _small_model():
    r = np.random.default_rng(1)
    X = r.normal(size=(40, 2))
    return LinearRegression(X, X @ np.array([0.5, -0.5]) + r.normal(size=40))


MODEL = _small_model()


@st.composite
def labelled_number(draw, good, bad):
    if draw(st.floats(0, 1)) < 0.3:
        return draw(st.sampled_from(bad)), "bad"
    return draw(good), None


@FUZZ
@given(
    data=st.data(),
    step=labelled_number(st.floats(1e-6, 1e-3), [0.0, -1e-3, math.nan, math.inf, "big", None]),
    n_iter=labelled_number(st.integers(2, 12), [0, -4, 2.5, "10"]),
    chains=labelled_number(st.integers(1, 3), [0, 1.5]),
    batch=labelled_number(st.sampled_from([None, 1, 10, 40, 0.25]), [0, 41, -1, True]),
)
def test_sample(data, step, n_iter, chains, batch):
    (h, kh), (n, kn), (c, kc), (b, kb) = step, n_iter, chains, batch
    init, ki = data.draw(st.one_of(
        st.just((None, None)),
        labelled((2,), kinds=("float16", "complex", "nan", "inf", "rank")),
    ))
    if ki == "rank":
        c_ok = isinstance(c, int) and c >= 1
        ki = None if (c_ok and c == 2) else "shape"  # a (2, 2) init is (chains, dim) for chains=2
    trace = _check(
        lambda: sgmc.sample(MODEL, "sgld", step_size=h, n_iter=n, chains=c, batch_size=b, init=init,
                            rng=3, progress=False),
        {"step_size": kh, "n_iter": kn, "chains": kc, "batch_size": kb, "init": ki},
    )
    if trace is not None:
        assert trace.draws.shape == (c, n, 2)
        assert _finite(trace.draws)


@FEW
@given(
    grid=labelled_number(st.lists(st.floats(1e-5, 1e-3), min_size=1, max_size=3), [[], [-1e-3], [math.nan], "0.1"]),
    pilot=labelled_number(st.integers(20, 40), [0, -5, 3.5]),
)
def test_tune_step_size(grid, pilot):
    (g, kg), (p, kp) = grid, pilot
    res = _check(
        lambda: sgmc.tune_step_size(MODEL, grid=g, pilot_iters=p, chains=2, n_ksd=20, rng=0, progress=False),
        {"grid": kg, "pilot_iters": kp},
    )
    if res is not None:
        assert math.isfinite(res.best) and res.best > 0
        for row in res.table:
            assert row["diverged"] or (math.isfinite(row["ksd"]) and math.isfinite(row["ess"])), row
