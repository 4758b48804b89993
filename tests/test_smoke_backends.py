"""Every sampler runs on every backend and returns arrays of that backend and device."""

import numpy as np
import pytest

import sgmc
from sgmc.models import LogisticRegression


# ULA and MALA always use the exact gradient, so they pair with the default estimator only.
PAIRS = [(s, e) for s in ("sgld", "sghmc", "sgnht", "psgld") for e in ("minibatch", "cv", "svrg")]
PAIRS += [("ula", "minibatch"), ("mala", "minibatch")]


@pytest.mark.parametrize(("sampler", "estimator"), PAIRS)
def test_sampler_runs_on_backend(xb, sampler, estimator):
    r = np.random.default_rng(0)
    X = r.normal(size=(200, 3))
    y = (r.random(200) < 1 / (1 + np.exp(-X @ np.array([1.0, -1.0, 0.5])))).astype(float)
    model = LogisticRegression(xb.asarray(X), xb.asarray(y))
    trace = sgmc.sample(model, sampler, estimator, step_size=1e-3, batch_size=20, n_iter=30, chains=3,
                        rng=xb.rng(1), progress=False, store_grads=True,
                        estimator_options={"opt_steps": 50} if estimator == "cv" else None)
    assert trace.draws.shape == (3, 30, 3)
    assert type(trace.draws) is type(model.X)
    assert trace.draws.dtype == model.dtype
    from sgmc._array_api import device_of
    assert device_of(trace.draws) == device_of(model.X)
    assert np.all(np.isfinite(xb.to_numpy(trace.draws)))
    assert trace.grads.shape == trace.draws.shape
