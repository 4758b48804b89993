"""Every sampler runs on every backend and returns arrays of that backend and device."""

import numpy as np
import pytest

import sgmc
from sgmc.models import LogisticRegression


@pytest.mark.parametrize("sampler", ["sgld", "sghmc", "sgnht", "psgld", "ula", "mala"])
@pytest.mark.parametrize("estimator", ["minibatch", "cv", "svrg"])
def test_sampler_runs_on_backend(xb, sampler, estimator):
    if sampler in ("ula", "mala") and estimator != "minibatch":
        pytest.skip("exact samplers use the full gradient")
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
