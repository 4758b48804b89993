"""``sgmc run --data`` on columns in their natural units: every default method's means and sds are right.

Three simulated CSV files: patients (age in years, income in currency units, a 0/1 flag; logistic),
clinic visits (a count target for the linear model, covariates in raw units) and a wide table of 12
columns from 1e-3 to thousands (logistic). The command runs with no option but the target, the
intercept and four chains; each method's posterior means and sds are compared with an exact
reference computed here without sgmc: the conjugate closed form for the linear model, and for the
logistic ones self-normalised importance sampling from a multivariate t around the mode found by
Newton's method (exact as the draws grow, with its own Monte Carlo error from the weights' ESS),
checked against statsmodels' fit. Tolerances are Z_TOL standard errors: the chains' Monte Carlo
errors (ArviZ's ESS-based mcse of the mean and of the sd) and the reference's, combined.
"""

from __future__ import annotations

import numpy as np
import pytest

from sgmc import Trace
from sgmc.cli import main
from sgmc.models import LogisticRegression, conditioned, laplace_factor, standardising_factor

from _helpers import Z_TOL

arviz = pytest.importorskip("arviz")
sm = pytest.importorskip("statsmodels.api")

N_ROWS = 3000
PRIOR_VAR = 10.0  # sgmc run's prior N(0, 10 I) on the coefficients


# -- the data sets ----------------------------------------------------------------------------------


def patients(seed: int = 0, n: int = N_ROWS):
    """Age 20-90 years, income 1e4-2e5 (log-uniform), a 0/1 flag; logistic outcome."""
    rng = np.random.default_rng(seed)
    age = rng.uniform(20.0, 90.0, n)
    income = np.exp(rng.uniform(np.log(1e4), np.log(2e5), n))
    flag = (rng.random(n) < 0.3).astype(float)
    eta = -3.0 + 0.04 * age - 8e-6 * income + 0.8 * flag
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-eta))).astype(float)
    return np.column_stack([age, income, flag]), y, ["age", "income", "flag"]


def visits(seed: int = 1, n: int = N_ROWS):
    """Clinic visits per year (a count) against age, income, distance in metres and a chronic flag."""
    rng = np.random.default_rng(seed)
    age = rng.uniform(18.0, 95.0, n)
    income = np.exp(rng.uniform(np.log(8e3), np.log(3e5), n))
    distance = rng.uniform(200.0, 60_000.0, n)
    chronic = (rng.random(n) < 0.25).astype(float)
    rate = np.exp(0.2 + 0.015 * age - 2e-6 * income - 1e-5 * distance + 0.9 * chronic)
    y = rng.poisson(rate).astype(float)
    return np.column_stack([age, income, distance, chronic]), y, ["age", "income", "distance", "chronic"]


WIDE_SCALES = np.array([1e-3, 5e-3, 0.02, 0.5, 1.0, 3.0, 40.0, 250.0, 1e3, 4e3, 2e4, 1.0])


def wide(seed: int = 2, n: int = N_ROWS):
    """12 columns from 1e-3 to 2e4 in scale (one a 0/1 flag, some offset from zero); logistic outcome."""
    rng = np.random.default_rng(seed)
    d = len(WIDE_SCALES)
    Z = rng.standard_normal((n, d))
    Z[:, 1:] = 0.6 * Z[:, 1:] + 0.4 * Z[:, :-1]  # correlated neighbours
    offsets = np.array([0.0, 2.0, 0.0, 1.0, 0.0, 5.0, 3.0, 0.0, 10.0, 0.0, 4.0, 0.0])
    X = (Z + offsets) * WIDE_SCALES
    X[:, -1] = (Z[:, -1] > 0.5).astype(float)
    beta_std = rng.normal(0.0, 0.5, d)  # effects per standard deviation of each column
    eta = -0.5 + (Z - Z.mean(axis=0)) @ beta_std
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-eta))).astype(float)
    return X, y, [f"x{j}" for j in range(d)]


def write_csv(path, X, y, names) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(",".join([*names, "y"]) + "\n")
        for row, t in zip(X, y):
            fh.write(",".join(repr(float(v)) for v in row) + f",{t:g}\n")


def training_rows(n_all: int, seed: int = 0, test_fraction: float = 0.2) -> np.ndarray:
    """The rows ``sgmc run --data`` fits: it holds out the first round(0.2 N) of a permutation seeded by --seed."""
    perm = np.random.default_rng(seed).permutation(n_all)
    return perm[int(round(test_fraction * n_all)):]


# -- exact references -------------------------------------------------------------------------------


def linear_reference(X, y):
    """Posterior of y ~ N(X b, 1), b ~ N(0, 10 I): mean and sds in closed form, no Monte Carlo error."""
    prec = X.T @ X + np.eye(X.shape[1]) / PRIOR_VAR
    cov = np.linalg.inv(prec)
    mean = np.linalg.solve(prec, X.T @ y)
    sd = np.sqrt(np.diag(cov))
    return mean, sd, np.zeros_like(mean), np.zeros_like(sd)


def logistic_reference(X, y, draws: int = 100_000, df: float = 8.0, seed: int = 7):
    """Posterior mean and sds by importance sampling from a t_df(mode, H^-1), with their standard errors."""
    theta = np.zeros(X.shape[1])
    for _ in range(100):  # Newton's method on the log posterior
        p = 1.0 / (1.0 + np.exp(-(X @ theta)))
        grad = X.T @ (y - p) - theta / PRIOR_VAR
        hess = (X.T * (p * (1.0 - p))) @ X + np.eye(X.shape[1]) / PRIOR_VAR
        step = np.linalg.solve(hess, grad)
        theta = theta + step
        if np.max(np.abs(step) * np.sqrt(np.diag(hess))) < 1e-10:
            break
    L = np.linalg.cholesky(np.linalg.inv(hess))
    rng = np.random.default_rng(seed)
    d = X.shape[1]
    t_all, logw = [], []
    for _ in range(draws // 10_000):
        z = rng.standard_normal((10_000, d)) / np.sqrt(rng.chisquare(df, 10_000) / df)[:, None]
        t = theta + z @ L.T
        eta = t @ X.T
        log_post = (y * eta - np.logaddexp(0.0, eta)).sum(axis=1) - 0.5 * (t * t).sum(axis=1) / PRIOR_VAR
        log_q = -0.5 * (df + d) * np.log1p((z * z).sum(axis=1) / df)  # up to a constant
        t_all.append(t)
        logw.append(log_post - log_q)
    t = np.concatenate(t_all)
    w = np.exp(np.concatenate(logw) - np.max(np.concatenate(logw)))
    w /= w.sum()
    mean = w @ t
    sd = np.sqrt(w @ (t - mean) ** 2)
    ess = 1.0 / np.sum(w * w)
    # statsmodels' MLE and standard errors: where the likelihood dominates the prior for every
    # coefficient (standard errors under a tenth of the prior's sd), the posterior is close to their
    # normal approximation. (Where it does not, as for the columns in 1e-3 of the wide table, the
    # prior N(0, 10 I) on the user's scale shrinks those coefficients, and through the correlated
    # columns the others, away from the MLE.)
    fit = sm.GLM(y, X, family=sm.families.Binomial()).fit()
    if np.all(fit.bse < 0.1 * np.sqrt(PRIOR_VAR)):
        assert np.all(np.abs(fit.params - mean) < 0.5 * sd), (fit.params, mean, sd)
        assert np.all(np.abs(fit.bse / sd - 1.0) < 0.1), (fit.bse, sd)
    return mean, sd, sd / np.sqrt(ess), sd / np.sqrt(2.0 * ess)


# -- the command ------------------------------------------------------------------------------------


def run_command(tmp_path, capsys, name, X, y, names, model):
    csv = tmp_path / f"{name}.csv"
    write_csv(csv, X, y, names)
    out = tmp_path / "trace.npz"
    argv = ["run", "--data", str(csv), "--target", "y", "--intercept", "--chains", "4", "--no-progress",
            "--output", str(out)]
    if model == "linear":
        argv += ["--model", "linear"]
    code = main(argv)
    printed = capsys.readouterr()
    assert code == 0, printed.err
    traces = {}
    for label in ("SGLD", "SGLD-CV"):
        path = tmp_path / f"trace-{label}.npz"
        assert path.exists(), f"{label}: no trace written\n{printed.out}"
        trace = Trace.load(path)
        row = trace.info["command"]["row"]
        assert "mean_error" in row, f"{label} gave no result: {row}\n{printed.out}"
        traces[label] = trace
    return traces, printed.out


def mcse_mean_sd(draws):
    """Monte Carlo standard errors of each coordinate's mean and sd from ArviZ's ESS (chains, draws, dim).

    The mean's is ArviZ's ``mcse(method="mean")``; the sd's follows its ``mcse(method="sd")`` (the
    delta method on the variance, with the ESS of the squared deviations), written out here.
    """
    mean_se, sd_se = [], []
    for j in range(draws.shape[-1]):
        x = draws[..., j]
        mean_se.append(float(np.ravel(arviz.mcse(x, method="mean"))[0]))
        sq = (x - x.mean()) ** 2
        ess = float(np.ravel(arviz.ess(sq, method="mean"))[0])
        var = sq.mean()
        sd_se.append(float(np.sqrt(((sq**2).mean() - var**2) / ess / var / 4.0)))
    return np.array(mean_se), np.array(sd_se)


def check_against(traces, ref, names, out):
    mean_ref, sd_ref, mean_se_ref, sd_se_ref = ref
    for label, trace in traces.items():
        draws = np.asarray(trace.draws, dtype=np.float64)
        assert tuple(trace.param_names) == ("intercept", *names)
        mcse_mean, mcse_sd = mcse_mean_sd(draws)
        flat = draws.reshape(-1, draws.shape[-1])
        mean, sd = flat.mean(axis=0), flat.std(axis=0, ddof=1)
        tol_mean = Z_TOL * np.sqrt(mcse_mean**2 + mean_se_ref**2)
        tol_sd = Z_TOL * np.sqrt(mcse_sd**2 + sd_se_ref**2)
        assert np.all(np.abs(mean - mean_ref) <= tol_mean), (
            f"{label} means {mean} against {mean_ref}: off by {np.abs(mean - mean_ref) / tol_mean} tolerances\n{out}")
        assert np.all(np.abs(sd - sd_ref) <= tol_sd), (
            f"{label} sds {sd} against {sd_ref} (ratio {sd / sd_ref}): off by {np.abs(sd - sd_ref) / tol_sd} "
            f"tolerances\n{out}")
        # the check has teeth: the chains' sds are resolved to a few per cent of the posterior's
        assert np.all(tol_sd < 0.25 * sd_ref), (label, tol_sd / sd_ref)


CASES = {
    "patients": (patients, "logistic"),
    "visits": (visits, "linear"),
    "wide": (wide, "logistic"),
}


@pytest.mark.parametrize("name", ["patients", pytest.param("visits", marks=pytest.mark.slow),
                                  pytest.param("wide", marks=pytest.mark.slow)])
def test_run_data_raw_columns_right_means_and_sds(tmp_path, capsys, name):
    simulate, model = CASES[name]
    X, y, names = simulate()
    traces, out = run_command(tmp_path, capsys, name, X, y, names, model)
    rows = training_rows(len(y))
    Xi = np.column_stack([np.ones(len(rows)), X[rows]])
    ref = linear_reference(Xi, y[rows]) if model == "linear" else logistic_reference(Xi, y[rows])
    check_against(traces, ref, names, out)


def test_conditioned_glm_is_the_same_posterior():
    """The GLM in z (theta = L z) has log density log pi(L z) + log |det L| and gradient L^T grad pi(L z)."""
    X, y, _ = patients(n=300)
    Xi = np.column_stack([np.ones(len(y)), X])
    model = LogisticRegression(Xi, y)
    rng = np.random.default_rng(3)
    theta = np.array([-3.0, 0.04, -8e-6, 0.8]) + rng.normal(size=(5, 4)) * np.array([0.2, 3e-3, 1e-6, 0.1])
    p = 1.0 / (1.0 + np.exp(-(Xi @ theta[0])))
    precision = (Xi.T * (p * (1.0 - p))) @ Xi + np.eye(4) / PRIOR_VAR
    for L in (standardising_factor(Xi), laplace_factor(precision)):
        zmodel = conditioned(model, L)
        z = zmodel.from_theta(theta)
        assert np.allclose(zmodel.to_theta(z), theta, rtol=1e-10, atol=0.0)
        logdet = np.linalg.slogdet(L)[1]
        assert np.allclose(zmodel.log_posterior(z), model.log_posterior(theta) + logdet, rtol=1e-12)
        assert np.allclose(zmodel.grad_log_posterior(z), model.grad_log_posterior(theta) @ L, rtol=1e-9)
        idx = np.tile(np.arange(0, 300, 7), (5, 1))
        assert np.allclose(zmodel.grad_log_lik_sum(z, idx), model.grad_log_lik_sum(theta, idx) @ L, rtol=1e-9)


# -- the Python one-call way ------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["laplace", "standardise"])
def test_sample_conditioned_gives_the_posterior_on_the_users_scale(how):
    """Linear regression on raw columns: sample_conditioned's means and sds against the closed form."""
    from sgmc.conditioning import sample_conditioned
    from sgmc.models import LinearRegression

    X, y, names = visits(n=1500)
    Xi = np.column_stack([np.ones(len(y)), X])
    model = LinearRegression(Xi, y, param_names=["intercept", *names])
    # in z the curvature is about 1 (Laplace) or about N, the data's information per standardised column
    h = 0.1 if how == "laplace" else 0.1 / len(y)
    trace = sample_conditioned(model, "sgld", "cv", how=how, step_size=h, batch_size=150, n_iter=4000,
                               chains=4, rng=3, progress=False)
    assert trace.param_names == ("intercept", *names)
    assert trace.info["conditioning"]["how"] == how
    mean_ref, cov_ref = (np.asarray(a) for a in model.posterior())
    sd_ref = np.sqrt(np.diag(cov_ref))
    draws = np.asarray(trace.draws, dtype=np.float64)
    mcse_mean, mcse_sd = mcse_mean_sd(draws)
    flat = draws.reshape(-1, draws.shape[-1])
    # SGLD-CV at h = 0.1 in z inflates the variance by about 1 / (1 - h / 4) (Euler) when z is close to
    # N(0, I) (Laplace); standardised columns leave z correlated, so only the means are compared there
    assert np.all(np.abs(flat.mean(axis=0) - mean_ref) <= Z_TOL * mcse_mean), (flat.mean(axis=0), mean_ref)
    if how == "laplace":
        expected = sd_ref / np.sqrt(1.0 - 0.1 / 4.0)
        assert np.all(np.abs(flat.std(axis=0, ddof=1) - expected) <= Z_TOL * mcse_sd + 0.01 * expected)


def test_conditioning_errors_name_the_argument():
    from sgmc.conditioning import condition
    from sgmc.models import GaussianTarget

    X, y, _ = patients(n=200)
    Xi = np.column_stack([np.ones(len(y)), X])
    model = LogisticRegression(Xi, y)
    with pytest.raises(ValueError, match="`how` must be one of"):
        condition(model, "whiten")
    with pytest.raises(ValueError, match=r"`L` must have shape \(4, 4\)"):
        conditioned(model, np.eye(3))
    with pytest.raises(ValueError, match="`L` must be invertible"):
        conditioned(model, np.zeros((4, 4)))
    with pytest.raises(ValueError, match="`precision` must be a square matrix"):
        laplace_factor(np.ones((2, 3)))
    with pytest.raises(ValueError, match="`precision` must be positive definite"):
        laplace_factor(-np.eye(2))
    target = GaussianTarget(np.array([1.0, -1.0]), np.diag([4.0, 0.25]))
    with pytest.raises(ValueError, match="`how`='standardise' needs a model with a design matrix"):
        condition(target, "standardise")
    # a model that is not a GLM gets Affine with no shift: the same maps
    z_model = conditioned(target, np.diag([2.0, 0.5]))
    theta = np.array([[3.0, -0.5]])
    assert np.allclose(z_model.to_theta(z_model.from_theta(theta)), theta)
    assert np.allclose(z_model.from_theta(theta), [[1.5, -1.0]])


def test_command_reports_the_conditioning_only_for_data(tmp_path, capsys):
    X, y, names = patients(n=400)
    csv = tmp_path / "p.csv"
    write_csv(csv, X, y, names)
    assert main(["run", "--data", str(csv), "--target", "y", "--intercept", "--iters", "400", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "conditioning: the samplers ran on theta = L z" in out
    assert "income" in out  # coefficients by the columns' names
    assert main(["run", "--quick", "--iters", "200", "--no-progress", "--model", "linear"]) == 0
    assert "conditioning:" not in capsys.readouterr().out


def test_conditioned_glm_on_every_backend(xb):
    """The model in z gives NumPy's values on every backend (same namespace and device as its data)."""
    X, y, _ = patients(n=300)
    Xi = np.column_stack([np.ones(len(y)), X])
    host = LogisticRegression(Xi, y)
    S = standardising_factor(Xi)
    z_host = conditioned(host, S)
    model = LogisticRegression(xb.asarray(Xi), xb.asarray(y))
    z_model = conditioned(model, standardising_factor(model.X))
    z = np.random.default_rng(4).normal(size=(3, 4))
    tol = 1e-4 if xb.float_dtype == "float32" else 1e-10
    got = xb.to_numpy(z_model.grad_log_posterior(xb.asarray(z)))
    assert np.allclose(got, z_host.grad_log_posterior(z), rtol=tol, atol=tol * np.abs(got).max())
    got = xb.to_numpy(z_model.log_posterior(xb.asarray(z)))
    assert np.allclose(got, z_host.log_posterior(z), rtol=tol)
    theta = z_model.to_theta(xb.asarray(z))
    assert np.allclose(xb.to_numpy(theta), z_host.to_theta(z), rtol=tol)
    assert np.allclose(xb.to_numpy(z_model.from_theta(theta)), z, rtol=100 * tol, atol=100 * tol)
    assert np.allclose(xb.to_numpy(standardising_factor(model.X)), S, rtol=tol)
