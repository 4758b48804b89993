"""Models written in torch: per-datum gradients by torch.func equal the analytic logistic model's."""

import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from sgmc import sample  # noqa: E402
from sgmc.backends import default_rng  # noqa: E402
from sgmc.estimators import ESTIMATORS, make_estimator  # noqa: E402
from sgmc.models import LogisticRegression, from_torch  # noqa: E402

r = np.random.default_rng(0)
X_NP = r.normal(size=(300, 3))
Y_NP = (r.random(300) < 1 / (1 + np.exp(-X_NP @ np.array([1.0, -2.0, 0.5])))).astype(float)
X, Y = torch.as_tensor(X_NP), torch.as_tensor(Y_NP)
PRIOR_VAR = 10.0


def log_lik(theta, x, y):
    eta = x @ theta
    return y * eta - torch.nn.functional.softplus(eta)


def log_prior(theta):
    return -0.5 * theta @ theta / PRIOR_VAR


AUTO = from_torch(log_lik, log_prior, (X, Y), dim=3)
EXACT = LogisticRegression(X, Y, prior_var=PRIOR_VAR)


def test_gradients_hessians_and_hvps_equal_the_analytic_model():
    theta = torch.as_tensor(r.normal(size=(4, 3)))
    idx = torch.as_tensor(r.integers(0, 300, size=(4, 25)))
    for args in ((theta,), (theta, idx)):
        np.testing.assert_allclose(AUTO.grad_log_lik(*args), EXACT.grad_log_lik(*args), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(AUTO.log_lik(*args), EXACT.log_lik(*args), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(AUTO.grad_log_lik_sum(*args), EXACT.grad_log_lik_sum(*args), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(AUTO.hess_log_lik(*args), EXACT.hess_log_lik(*args), rtol=1e-10, atol=1e-12)
        v = torch.as_tensor(r.normal(size=(4, 3)))
        hv = torch.einsum("cnij,cj->cni", EXACT.hess_log_lik(*args), v)
        np.testing.assert_allclose(AUTO.hvp_log_lik(args[0], v, *args[1:]), hv, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(AUTO.grad_log_posterior(theta), EXACT.grad_log_posterior(theta), rtol=1e-10)
    # log prior up to the constant the analytic model includes
    diff = AUTO.log_posterior(theta) - EXACT.log_posterior(theta)
    np.testing.assert_allclose(diff - diff[0], 0.0, atol=1e-9)


@pytest.mark.parametrize("estimator", ["full", "minibatch", "cv", "svrg", "minibatch_noise"])
def test_every_estimator_gives_the_analytic_models_values(estimator):
    opts = {"centre": torch.zeros(3, dtype=torch.float64)} if estimator == "cv" else {}
    a = make_estimator(estimator, AUTO, 20, **opts)
    b = make_estimator(estimator, EXACT, 20, **opts)
    x = torch.as_tensor(r.normal(size=(5, 3)))
    sa, sb = a.init(default_rng(1, backend="torch"), x), b.init(default_rng(1, backend="torch"), x)
    ga, _, _ = a.estimate(default_rng(2, backend="torch"), sa, x)
    gb, _, _ = b.estimate(default_rng(2, backend="torch"), sb, x)
    np.testing.assert_allclose(ga, gb, rtol=1e-10, atol=1e-12)
    assert set(ESTIMATORS) >= {"full", "minibatch", "cv", "svrg", "minibatch-noise"}


@pytest.mark.parametrize("sampler", ["sgld", "sghmc", "sgnht", "psgld", "ula", "mala", "sgrhmc", "recipe",
                                     "sgld_corrected", "sghmc_corrected"])
def test_every_sampler_draws_what_it_draws_with_the_analytic_model(sampler):
    x0 = torch.zeros((2, 3), dtype=torch.float64)
    est = {"sgld_corrected": "minibatch_noise", "sghmc_corrected": "minibatch_noise"}.get(sampler, "minibatch")
    opts = {"recipe": {"D": np.eye(3)}, "sgrhmc": {"metric": np.ones(3)}}.get(sampler, {})
    if sampler == "recipe":
        opts = {"D": torch.eye(3, dtype=torch.float64)}
    if sampler == "sgrhmc":
        opts = {"metric": torch.full((3,), 50.0, dtype=torch.float64)}
    h = 1e-4 if sampler != "sgrhmc" else 0.01
    runs = [sample(m, sampler, est, n_iter=15, step_size=h, batch_size=30, chains=2, init=x0, rng=3,
                   sampler_options=opts) for m in (AUTO, EXACT)]
    np.testing.assert_allclose(runs[0].draws, runs[1].draws, rtol=1e-9, atol=1e-12)


def test_sgrld_with_the_autodiff_model():
    # the Fisher metric needs a GLM; a constant metric works with any model
    from sgmc.samplers import SGRLD

    t = [sample(m, SGRLD(metric=torch.full((3,), 50.0, dtype=torch.float64)), "minibatch", n_iter=10,
                step_size=0.05, batch_size=30, chains=2, init=torch.zeros((2, 3), dtype=torch.float64), rng=4)
         for m in (AUTO, EXACT)]
    np.testing.assert_allclose(t[0].draws, t[1].draws, rtol=1e-9, atol=1e-12)


def test_numpy_data_is_refused_with_a_clear_message():
    with pytest.raises(TypeError, match=r"torch tensors.*torch.as_tensor.*analytic gradients"):
        from_torch(log_lik, log_prior, (X_NP, Y_NP), dim=3)
    with pytest.raises(ValueError, match="first dimension"):
        from_torch(log_lik, log_prior, (X, Y[:10]), dim=3)


def test_flat_prior():
    m = from_torch(log_lik, None, (X, Y), dim=3)
    theta = torch.zeros((2, 3), dtype=torch.float64)
    assert torch.all(m.grad_log_prior(theta) == 0) and torch.all(m.log_prior(theta) == 0)


def test_library_imports_without_torch():
    # sgmc.models.autodiff imports torch only inside functions
    code = "import sys; sys.modules['torch'] = None; import sgmc, sgmc.models; print(sgmc.models.from_torch.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "from_torch"
