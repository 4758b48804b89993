"""Models: per-datum terms against scipy, derivatives against finite differences, closed forms.

Every model is built twice from the same numbers: on the backend under test (``xb``) and as a float64
NumPy reference. Finite differences and scipy oracles run on the reference; the backend's analytic
results are compared with them at the backend dtype's tolerance, which checks the formulas and the
backend port at once.
"""

from __future__ import annotations

import pickle
import textwrap

import numpy as np
import pytest
import scipy.linalg
from scipy import special, stats

from _helpers import fd_jacobian, tol_for, to_host
from sgmc import backends
from sgmc.models import Gaussian, GaussianTarget, LinearRegression, LogisticRegression, take_rows

N, D = 40, 3
MODELS = ["gaussian", "target", "linear", "logistic"]
DATA_MODELS = ["gaussian", "linear", "logistic"]


def _spd(rng, d, jitter=0.5):
    a = rng.normal(size=(d, d))
    return a @ a.T / d + jitter * np.eye(d)


def _data(name):
    """NumPy float64 ingredients of each test model (fixed seed)."""
    r = np.random.default_rng(0)
    if name == "gaussian":
        return dict(y=r.normal(1.0, 1.0, size=(N, D)), cov=_spd(r, D), prior_mean=r.normal(size=D), prior_cov=_spd(r, D, 2.0))
    if name == "target":
        return dict(mean=r.normal(size=D), cov=_spd(r, D))
    X = r.normal(size=(N, D))
    if name == "linear":
        return dict(X=X, y=X @ np.array([1.0, -0.5, 2.0]) + r.normal(size=N), noise_var=0.7, prior_var=5.0)
    eta = X @ np.array([1.0, -1.0, 0.5])
    return dict(X=X, y=(r.random(N) < special.expit(eta)).astype(float), prior_var=3.0)


def _build(name, data, conv):
    arrays = {k: (conv(v) if isinstance(v, np.ndarray) else v) for k, v in data.items()}
    cls = {"gaussian": Gaussian, "target": GaussianTarget, "linear": LinearRegression, "logistic": LogisticRegression}[name]
    return cls(**arrays)


def make(name, xb):
    """(model on the backend case, float64 NumPy reference built from the same rounded numbers)."""
    data = _data(name)
    rounded = {k: (v.astype(xb.float_dtype).astype(np.float64) if isinstance(v, np.ndarray) else v) for k, v in data.items()}
    return _build(name, data, xb.asarray), _build(name, rounded, np.asarray)


def thetas(xb, chains=2, seed=1, scale=0.7):
    t = np.random.default_rng(seed).normal(scale=scale, size=(chains, D)).astype(xb.float_dtype)
    return xb.asarray(t), t.astype(np.float64)


def indices(xb, chains=2, batch=7, seed=2):
    i = np.random.default_rng(seed).integers(0, N, size=(chains, batch))
    return xb.asarray(i), i


def assert_close(actual, expected, rtol):
    actual = to_host(actual)
    expected = np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape
    scale = 1.0 + np.max(np.abs(expected)) if expected.size else 1.0
    err = np.max(np.abs(actual - expected)) if expected.size else 0.0
    assert err <= rtol * scale, f"max abs error {err:.3g} > {rtol:.1g} * {scale:.3g}"


# -- per-datum terms against scipy -----------------------------------------------------------------
@pytest.mark.parametrize("name", MODELS)
def test_log_terms_match_scipy(xb, name):
    model, _ = make(name, xb)
    d = _data(name)
    t, tn = thetas(xb)
    ll = to_host(model.log_lik(t))
    lp = to_host(model.log_prior(t))
    rt = tol_for(xb, 1e-12, 1e-5)
    if name == "gaussian":
        exp_ll = np.stack([stats.multivariate_normal.logpdf(d["y"], mean=th, cov=d["cov"]) for th in tn])
        exp_lp = stats.multivariate_normal.logpdf(tn, mean=d["prior_mean"], cov=d["prior_cov"])
    elif name == "target":
        exp_ll = np.zeros((2, 0))
        exp_lp = stats.multivariate_normal.logpdf(tn, mean=d["mean"], cov=d["cov"])
    elif name == "linear":
        exp_ll = stats.norm.logpdf(d["y"][None, :], loc=tn @ d["X"].T, scale=np.sqrt(d["noise_var"]))
        exp_lp = stats.multivariate_normal.logpdf(tn, mean=np.zeros(D), cov=d["prior_var"] * np.eye(D))
    else:
        exp_ll = stats.bernoulli.logpmf(d["y"][None, :], special.expit(tn @ d["X"].T))
        exp_lp = stats.multivariate_normal.logpdf(tn, mean=np.zeros(D), cov=d["prior_var"] * np.eye(D))
    assert_close(ll, exp_ll, rt * 10)
    assert_close(lp, exp_lp, rt * 10)
    lpost = model.log_posterior(t)
    assert_close(lpost, exp_lp + exp_ll.sum(axis=1), rt * 10)


# -- gradients and Hessians against finite differences ---------------------------------------------
@pytest.mark.parametrize("name", DATA_MODELS)
@pytest.mark.parametrize("use_idx", [False, True])
def test_grad_log_lik_matches_finite_differences(xb, name, use_idx):
    model, ref = make(name, xb)
    t, tn = thetas(xb)
    idx, idx_np = indices(xb) if use_idx else (None, None)
    g = model.grad_log_lik(t, idx)
    fd = fd_jacobian(lambda th: ref.log_lik(th, idx_np), tn)
    batch = N if idx is None else idx_np.shape[1]
    assert tuple(g.shape) == (2, batch, D)
    assert_close(g, fd, tol_for(xb, 1e-7, 1e-4))


@pytest.mark.parametrize("name", MODELS)
def test_grad_log_prior_and_posterior_match_finite_differences(xb, name):
    model, ref = make(name, xb)
    t, tn = thetas(xb)
    rt = tol_for(xb, 1e-7, 1e-4)
    assert_close(model.grad_log_prior(t), fd_jacobian(ref.log_prior, tn), rt)
    assert_close(model.grad_log_posterior(t), fd_jacobian(ref.log_posterior, tn), rt)


@pytest.mark.parametrize("name", DATA_MODELS)
def test_hess_log_lik_matches_finite_differences_of_gradients(xb, name):
    model, ref = make(name, xb)
    t, tn = thetas(xb)
    idx, idx_np = indices(xb)
    hess = model.hess_log_lik(t, idx)
    assert tuple(hess.shape) == (2, 7, D, D)
    fd = fd_jacobian(lambda th: ref.grad_log_lik(th, idx_np), tn)
    assert_close(hess, fd, tol_for(xb, 1e-7, 1e-4))
    h_np = to_host(hess)
    np.testing.assert_allclose(h_np, np.swapaxes(h_np, -1, -2), atol=1e-6)
    full = model.hess_log_lik(t)
    assert tuple(full.shape) == (2, N, D, D)


def test_hessian_is_not_provided_by_the_base_model():
    with pytest.raises(NotImplementedError, match="GaussianTarget does not provide per-datum Hessians"):
        GaussianTarget.review_example().hess_log_lik(np.zeros((1, 2)))


# -- sums with indices and weights ------------------------------------------------------------------
@pytest.mark.parametrize("name", MODELS)
def test_grad_log_lik_sum_is_the_weighted_sum_of_per_datum_gradients(xb, name):
    model, _ = make(name, xb)
    t, _ = thetas(xb)
    rt = tol_for(xb, 1e-12, 1e-5)
    idx, idx_np = indices(xb)
    w_np = np.random.default_rng(3).uniform(0.5, 2.0, size=idx_np.shape)
    w = xb.asarray(w_np)
    wfull_np = np.random.default_rng(4).uniform(0.5, 2.0, size=(2, model.n_data))
    wfull = xb.asarray(wfull_np)
    combos = [(None, None), (idx, None), (idx, w), (None, wfull)] if model.has_data else [(None, None)]
    for ix, ww in combos:
        per = to_host(model.grad_log_lik(t, ix))
        if ww is not None:
            per = per * to_host(ww)[..., None]
        got = model.grad_log_lik_sum(t, ix, ww)
        assert tuple(got.shape) == (2, D)
        assert got.dtype == model.dtype
        assert_close(got, per.sum(axis=1), rt)


@pytest.mark.parametrize("name", DATA_MODELS)
def test_full_index_set_equals_idx_none(xb, name):
    model, _ = make(name, xb)
    t, _ = thetas(xb)
    everything = xb.asarray(np.tile(np.arange(N), (2, 1)))
    assert_close(model.grad_log_lik_sum(t, everything), to_host(model.grad_log_lik_sum(t)), tol_for(xb, 1e-12, 1e-5))


def test_take_rows_gathers_any_index_shape(xb):
    a = xb.asarray(np.arange(12.0).reshape(6, 2))
    idx = xb.asarray(np.array([[0, 5, 5], [2, 1, 0]]))
    out = take_rows(xb.xp, a, idx)
    assert tuple(out.shape) == (2, 3, 2)
    np.testing.assert_array_equal(xb.to_numpy(out), np.arange(12.0).reshape(6, 2)[[[0, 5, 5], [2, 1, 0]]])


# -- Lipschitz constants ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", DATA_MODELS)
def test_lipschitz_constants_bound_the_per_datum_gradients(name):
    """||grad f_i(a) - grad f_i(b)|| <= L_i ||a - b|| on random pairs, and the bound is attained."""
    class F64:
        float_dtype = "float64"

        @staticmethod
        def asarray(a):
            return np.asarray(a)

    model, _ = make(name, F64)
    r = np.random.default_rng(5)
    a = r.normal(scale=2.0, size=(500, D))
    b = a + r.normal(scale=r.uniform(0.01, 3.0, size=(500, 1)), size=(500, D))
    lip = np.asarray(model.lipschitz())
    assert lip.shape == (N,)
    diff = np.linalg.norm(model.grad_log_lik(a) - model.grad_log_lik(b), axis=-1)  # (500, N)
    ratio = diff / (np.linalg.norm(a - b, axis=-1)[:, None] * lip[None, :])
    assert ratio.max() <= 1.0 + 1e-10
    # tightness: a tiny step at eta = 0 along the worst direction attains the constant
    if name == "gaussian":
        w, v = np.linalg.eigh(np.linalg.inv(_data(name)["cov"]))
        direction = np.broadcast_to(v[:, -1], (N, D))
    else:
        direction = _data(name)["X"] / np.linalg.norm(_data(name)["X"], axis=1, keepdims=True)
    step = 1e-4
    g0 = model.grad_log_lik(np.zeros((1, D)))[0]                     # (N, D)
    per = []
    for i in range(N):
        gi = model.grad_log_lik(step * direction[i][None, :])[0, i]
        per.append(np.linalg.norm(gi - g0[i]) / step)
    np.testing.assert_allclose(np.array(per) / lip, 1.0, atol=1e-3)
    idx = np.array([[0, 3], [3, 39]])
    np.testing.assert_array_equal(np.asarray(model.lipschitz(idx)), lip[idx])


def test_lipschitz_on_backends(xb):
    for name in DATA_MODELS:
        model, ref = make(name, xb)
        idx, idx_np = indices(xb)
        out = model.lipschitz(idx)
        assert tuple(out.shape) == idx_np.shape
        assert_close(out, np.asarray(ref.lipschitz(idx_np)), tol_for(xb, 1e-12, 1e-5))


def test_target_lipschitz_constant_is_the_largest_precision_eigenvalue():
    target = GaussianTarget.review_example()
    assert target.lipschitz_constant() == pytest.approx(1.0)  # Sigma has eigenvalues 2 and 1
    r = np.random.default_rng(6)
    cov = _spd(r, 4)
    t = GaussianTarget(np.zeros(4), cov)
    assert t.lipschitz_constant() == pytest.approx(1.0 / np.linalg.eigvalsh(cov).min())


# -- closed-form posteriors -------------------------------------------------------------------------
def test_linear_regression_posterior_matches_direct_linear_algebra(xb):
    model, _ = make("linear", xb)
    d = _data("linear")
    X = d["X"].astype(xb.float_dtype).astype(np.float64)
    y = d["y"].astype(xb.float_dtype).astype(np.float64)
    prec = X.T @ X / d["noise_var"] + np.eye(D) / d["prior_var"]
    cf = scipy.linalg.cho_factor(prec)
    exp_mean = scipy.linalg.cho_solve(cf, X.T @ y / d["noise_var"])
    exp_cov = scipy.linalg.cho_solve(cf, np.eye(D))
    mean, cov = model.posterior()
    rt = tol_for(xb, 1e-10, 1e-4)
    assert_close(mean, exp_mean, rt)
    assert_close(cov, exp_cov, rt)


def test_gaussian_posterior_matches_direct_linear_algebra(xb):
    model, _ = make("gaussian", xb)
    d = {k: (v.astype(xb.float_dtype).astype(np.float64) if isinstance(v, np.ndarray) else v) for k, v in _data("gaussian").items()}
    lam = np.linalg.inv(d["cov"])
    lam0 = np.linalg.inv(d["prior_cov"])
    prec = lam0 + N * lam
    exp_cov = scipy.linalg.inv(prec)
    exp_mean = scipy.linalg.solve(prec, lam0 @ d["prior_mean"] + lam @ d["y"].sum(axis=0), assume_a="pos")
    mean, cov = model.posterior()
    rt = tol_for(xb, 1e-10, 1e-4)
    assert_close(mean, exp_mean, rt)
    assert_close(cov, exp_cov, rt)


@pytest.mark.parametrize("name", ["gaussian", "linear"])
def test_log_posterior_is_the_closed_form_gaussian(name):
    """Differences of log_posterior equal differences of the closed-form posterior density."""
    model = _build(name, _data(name), np.asarray)
    mean, cov = model.posterior()
    pts = np.random.default_rng(7).multivariate_normal(mean, cov, size=6)
    lp = model.log_posterior(pts)
    exp = stats.multivariate_normal.logpdf(pts, mean=mean, cov=cov)
    np.testing.assert_allclose(lp - lp[0], exp - exp[0], atol=1e-9)
    np.testing.assert_allclose(model.grad_log_posterior(mean), 0.0, atol=1e-9)
    # Hessian of the log posterior (prior plus data) is minus the posterior precision
    hess = model.hess_log_lik(mean[None, :])[0].sum(axis=0) + fd_jacobian(model.grad_log_prior, mean[None, :])[0]
    np.testing.assert_allclose(hess, -np.linalg.inv(cov), rtol=1e-7, atol=1e-7)


def test_single_theta_and_batched_theta_agree():
    model = _build("logistic", _data("logistic"), np.asarray)
    t = np.array([0.3, -0.2, 0.1])
    assert model.log_posterior(t).shape == ()
    assert model.grad_log_posterior(t).shape == (D,)
    np.testing.assert_allclose(model.grad_log_posterior(t), model.grad_log_posterior(t[None, :])[0])
    np.testing.assert_allclose(model.log_posterior([0.3, -0.2, 0.1]), model.log_posterior(t))
    z = model.zeros(4)
    assert z.shape == (4, D) and z.dtype == np.float64


def test_logistic_regression_is_stable_at_extreme_linear_predictors():
    X = np.array([[1000.0], [-1000.0], [1000.0], [-1000.0], [0.0]])
    y = np.array([1.0, 0.0, 0.0, 1.0, 1.0])
    model = LogisticRegression(X, y)
    ll = model.log_lik(np.ones((1, 1)))[0]
    np.testing.assert_allclose(ll, [0.0, 0.0, -1000.0, -1000.0, -np.log(2.0)], atol=1e-12)
    g = model.grad_log_lik(np.ones((1, 1)))[0, :, 0]
    np.testing.assert_allclose(g, [0.0, 0.0, -1000.0, -1000.0, 0.0], atol=1e-12)
    p = model.predict_proba(np.ones(1), X)
    np.testing.assert_allclose(p[0], [1.0, 0.0, 1.0, 0.0, 0.5], atol=1e-12)


# -- pickling: models travel to worker processes -----------------------------------------------------
def _can_pickle_arrays(xb) -> bool:
    try:
        back = pickle.loads(pickle.dumps(xb.asarray(np.arange(3.0))))
    except Exception:  # noqa: BLE001 - any failure means the library cannot pickle its arrays
        return False
    return bool(np.array_equal(xb.to_numpy(back), np.arange(3.0)))


@pytest.mark.parametrize("name", MODELS)
def test_models_pickle_and_compute_the_same_after_unpickling(xb, name):
    if not _can_pickle_arrays(xb):
        pytest.skip(f"{xb.name} arrays on {xb.device!r} cannot be pickled by the array library itself")
    model, _ = make(name, xb)
    copy = pickle.loads(pickle.dumps(model))
    assert type(copy) is type(model) and copy is not model
    assert copy.xp is xb.backend.xp
    assert copy.xp is model.xp
    assert (copy.n_data, copy.dim, copy.dtype, copy.device) == (model.n_data, model.dim, model.dtype, model.device)
    t, _ = thetas(xb, chains=3)
    np.testing.assert_array_equal(xb.to_numpy(copy.grad_log_posterior(t)), xb.to_numpy(model.grad_log_posterior(t)))
    np.testing.assert_array_equal(xb.to_numpy(copy.log_posterior(t)), xb.to_numpy(model.log_posterior(t)))
    if model.has_data:
        idx, _ = indices(xb, chains=3)
        np.testing.assert_array_equal(xb.to_numpy(copy.grad_log_lik_sum(t, idx)), xb.to_numpy(model.grad_log_lik_sum(t, idx)))
    # the unpickled model accepts arrays made afresh in the backend's namespace
    fresh = xb.asarray(np.zeros((1, D)))
    assert tuple(copy.grad_log_posterior(fresh).shape) == (1, D)


# -- the fused log posterior and gradient of the GLMs ---------------------------------------------------
@pytest.mark.parametrize("name", ["linear", "logistic"])
def test_log_posterior_and_grad_equals_its_two_parts(name):
    model = _build(name, _data(name), np.asarray)
    theta = np.random.default_rng(11).normal(scale=1.5, size=(5, D))
    logp, grad = model.log_posterior_and_grad(theta)
    assert logp.shape == (5,) and grad.shape == (5, D)
    np.testing.assert_allclose(logp, model.log_posterior(theta), rtol=1e-12, atol=0)
    np.testing.assert_allclose(grad, model.grad_log_posterior(theta), rtol=1e-12, atol=0)


# -- the review's Gaussian example: SGLD's exact stationary covariance --------------------------------
def test_review_example_target():
    t = GaussianTarget.review_example()
    np.testing.assert_allclose(t.cov, [[1.5, 0.5], [0.5, 1.5]], atol=1e-15)
    np.testing.assert_array_equal(t.mean, [0.0, 0.0])
    assert t.n_data == 0 and t.dim == 2 and not t.has_data


@pytest.mark.parametrize(
    ("h", "s2", "c11", "c12"),
    [
        # seed-review.md section 2, table for the review's Sigma with s^2 = 0.01, and ULA (s^2 = 0)
        (1.0, 0.01, 1.814048, 0.477381),
        (0.1, 0.01, 1.525860, 0.499963),
        (0.01, 0.01, 1.502542, 0.500011),
        (1.0, 0.0, 1.809524, 0.476190),
        (0.1, 0.0, 1.525479, 0.499838),
        (0.01, 0.0, 1.502505, 0.499998),
    ],
)
def test_sgld_stationary_cov_reproduces_the_review_table(xb, h, s2, c11, c12):
    t = GaussianTarget.review_example(backend=xb.name, dtype=xb.float_dtype)
    if xb.name == "array_api_strict" and xb.device != t.device:
        t = GaussianTarget(xb.asarray(np.zeros(2)), xb.asarray(np.array([[1.5, 0.5], [0.5, 1.5]])))
    cov = to_host(t.sgld_stationary_cov(h, s2))
    atol = 6e-7 if xb.float_dtype == "float64" else 1e-5   # the table has six decimals
    np.testing.assert_allclose(cov, [[c11, c12], [c12, c11]], atol=atol)


@pytest.mark.parametrize("h", [0.01, 0.3, 1.0, 1.9])
@pytest.mark.parametrize("s2", [0.0, 0.01, 2.0])
def test_sgld_stationary_cov_solves_the_discrete_lyapunov_equation(h, s2):
    """SGLD on N(m, S) with gradient noise N(0, s2 I) is the AR(1) recursion
    x' - m = (I - (h/2) S^-1)(x - m) + (h/2) e + sqrt(h) Z, whose stationary covariance P solves
    P = A P A^T + Q with A = I - (h/2) S^-1 and Q = (h^2 s2 / 4 + h) I."""
    r = np.random.default_rng(8)
    cov = _spd(r, 3)
    t = GaussianTarget(r.normal(size=3), cov)
    if h >= 4 * np.linalg.eigvalsh(cov).min():
        pytest.skip("no stationary law")
    A = np.eye(3) - 0.5 * h * np.linalg.inv(cov)
    Q = (h * h * s2 / 4.0 + h) * np.eye(3)
    expected = scipy.linalg.solve_discrete_lyapunov(A, Q)
    np.testing.assert_allclose(t.sgld_stationary_cov(h, s2), expected, rtol=1e-10, atol=1e-12)
    # and it tends to the true covariance as h -> 0
    np.testing.assert_allclose(t.sgld_stationary_cov(1e-9, s2), cov, rtol=1e-8)


def test_sgld_stationary_cov_validates_its_arguments():
    t = GaussianTarget.review_example()
    with pytest.raises(ValueError, match="`step_size`=4.0 is not below 4 \\* smallest variance"):
        t.sgld_stationary_cov(4.0)
    with pytest.raises(ValueError, match="`step_size`"):
        t.sgld_stationary_cov(-0.5)
    with pytest.raises(ValueError, match="`step_size`"):
        t.sgld_stationary_cov(float("nan"))
    with pytest.raises(ValueError, match="`grad_noise_var`"):
        t.sgld_stationary_cov(0.1, -1.0)


# -- a user-defined model: the worked example in sgmc.models.base's docstring, run as written ---------
def _documented_example_model():
    """Execute the code block of the module docstring's "Writing your own model" section."""
    import sgmc.models.base as base

    lines = base.__doc__.split("Writing your own model", 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.rstrip().endswith("::")) + 1
    block = []
    for line in lines[start:]:
        if line.strip() and not line.startswith("    "):
            break
        block.append(line)
    namespace = {}
    exec(textwrap.dedent("\n".join(block)), namespace)  # noqa: S102 - our own documentation
    return namespace["PoissonRegression"]


PoissonRegression = _documented_example_model()


def test_user_model_gets_posterior_helpers_from_the_base_class():
    r = np.random.default_rng(9)
    X = r.normal(scale=0.5, size=(30, 2))
    y = r.poisson(np.exp(X @ np.array([0.5, -0.3]))).astype(float)
    model = PoissonRegression(X, y)
    th = r.normal(size=(3, 2))
    np.testing.assert_allclose(model.grad_log_posterior(th), fd_jacobian(model.log_posterior, th), rtol=1e-7)
    idx = np.array([[1, 2], [3, 3], [0, 29]])
    np.testing.assert_allclose(model.grad_log_lik_sum(th, idx), model.grad_log_lik(th, idx).sum(axis=1))
    assert "n_data=30" in repr(model)
    with pytest.raises(NotImplementedError, match="Lipschitz"):
        model.lipschitz()
    assert backends.get_backend(model.X).name == "numpy"
