"""What Table 2 and Figures 2-3 of Nemeth and Fearnhead (2021, section 6.1) share.

The simulated logistic regression (:func:`sgmc.datasets.logistic_regression_data`, prior N(0, 10 I)),
the starting point theta_0 ~ N(0, I) shared by every sampler, the step sizes chosen by the kernel
Stein discrepancy of pilot runs over a grid (:func:`sgmc.tuning.tune_step_size`; the grid is extended
past an edge choice, and each pilot is scored after its burn-in on draws pooled over chains and
thinned, as the long run's draws are used), the control-variate runs (SGD to theta_hat polished by
Newton steps, :func:`sgmc.optimize.find_mode`, its distance from the mode measured at the mode's
curvature by :func:`mode_distance`; then sampling from there), the review's metrics (log-loss on held-out
data and KSD, eq. 13, on the last draws; and the KSD of draws thinned over the run's second half),
and the NUTS and ADVI references, run by NumPyro on JAX when it is installed
(``pip install "sgmc[reproduce]"``).

This module is an input/output edge (it may use NumPy); the samplers run through :func:`sgmc.sample`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import backends
from ..datasets import logistic_regression_data
from ..diagnostics import ksd, log_loss
from ..models import LogisticRegression
from ..optimize import find_mode, laplace, mode_gap, newton
from ..run import sample
from ..tuning import tune_step_size

# The review's methods: (column label, sampler, estimator).
METHODS = [
    ("SGLD", "sgld", "minibatch"),
    ("SGLD-CV", "sgld", "cv"),
    ("SGHMC", "sghmc", "minibatch"),
    ("SGHMC-CV", "sghmc", "cv"),
    ("SGNHT", "sgnht", "minibatch"),
    ("SGNHT-CV", "sgnht", "cv"),
    ("ULA", "ula", "full"),
]
# Centres of the step-size grids, as multiples of 1 / lambda_max (Langevin) or 1 / sqrt(lambda_max)
# (momentum samplers), lambda_max the largest eigenvalue of the posterior precision at the mode; the
# same factors as the defaults of ``sgmc run``. The grid multiplies them by GRID_FACTORS.
LANGEVIN = {"minibatch": 0.1, "cv": 0.5, "full": 0.5}
MOMENTUM = {"minibatch": 0.3, "cv": 1.0}
GRID_FACTORS = (0.1, 0.3, 1.0, 3.0)
EXTRA = 'pip install "sgmc[reproduce]"'


@dataclass
class Problem:
    """One simulated data set with its model, test set, theta_0 and Laplace approximation."""

    dim: int
    model: Any
    X_test: Any
    y_test: Any
    X: np.ndarray
    y: np.ndarray
    theta0: Any
    mode: Any
    lambda_max: float
    precision: Any = None


def make_problem(n: int, dim: int, seed: int, backend: str = "numpy", n_test: int = 10_000) -> Problem:
    """The review's section 6.1 data (seeded by ``seed`` and ``dim``), theta_0 ~ N(0, I) and the mode."""
    ss = np.random.SeedSequence([seed, dim])
    data_seed, init_seed, mode_seed = ss.spawn(3)
    data = logistic_regression_data(n=n, dim=dim, n_test=n_test, rng=data_seed)
    be = backends.require(backend)
    to = lambda a: backends.asarray(a, backend=be)  # noqa: E731
    model = LogisticRegression(to(data.X), to(data.y))
    theta0 = to(np.random.default_rng(init_seed).standard_normal((1, dim)))
    rng = backends.default_rng(mode_seed, backend=be, device=model.device)
    fit = laplace(model, rng, progress=False)
    lam = float(backends.to_numpy(model.xp.linalg.eigvalsh(fit.precision))[-1])
    return Problem(dim, model, to(data.X_test), to(data.y_test), data.X, data.y, theta0, fit.mode, lam,
                   fit.precision)


def base_step(sampler: str, estimator: str, lambda_max: float) -> float:
    if sampler in ("sghmc", "sgnht"):
        return MOMENTUM[estimator] / math.sqrt(lambda_max)
    return LANGEVIN[estimator] / lambda_max


def mode_distance(problem: Problem, theta: Any) -> float:
    """Distance of ``theta`` (dim,) from the posterior mode in posterior standard deviations at the
    mode's curvature: ``sqrt((theta - m)^T P (theta - m))``, m the mode and P the negative Hessian there
    (the Laplace approximation's precision), the Mahalanobis distance under that approximation.

    :func:`sgmc.optimize.mode_gap` is another number: the Newton decrement at ``theta``, which uses the
    curvature at ``theta``; the two agree only where the curvature is the same at both points."""
    xp = problem.model.xp
    diff = xp.reshape(theta, (-1,)) - xp.reshape(problem.mode, (-1,))
    return float(math.sqrt(max(float(xp.sum(diff * (problem.precision @ diff))), 0.0)))


def sgd_mode(problem: Problem, steps: int, rng: Any, *, polish: bool = True) -> tuple[Any, float, dict]:
    """theta_hat by ``steps`` SGD steps from theta_0 (the review's set-up of the CV methods), polished
    by Newton steps on the full posterior unless ``polish=False``; the seconds, and for the SGD
    estimate and the point returned, their :func:`mode_distance` (``dist_sgd``, ``dist``: posterior
    standard deviations from the mode at the mode's curvature) and :func:`sgmc.optimize.mode_gap`
    (``gap_sgd``, ``gap``: the Newton decrement at the point); measured outside the timing."""
    t0 = time.perf_counter()
    raw = find_mode(problem.model, rng, problem.theta0[0, :], method="sgd", n_steps=steps, polish=False,
                    check=False, progress=False)
    mode = raw
    if polish:
        mode, _ = newton(problem.model, raw)
    seconds = time.perf_counter() - t0
    gap_sgd = float(mode_gap(problem.model, raw))
    gap = gap_sgd if not polish else float(mode_gap(problem.model, mode))
    dist_sgd = mode_distance(problem, raw)
    dist = dist_sgd if not polish else mode_distance(problem, mode)
    return mode, seconds, {"gap_sgd": gap_sgd, "gap": gap, "dist_sgd": dist_sgd, "dist": dist}


#: How a pilot run is scored: chains pooled, the first half of every pilot dropped as burn-in, at most
#: this many draws thinned from the rest (the long runs are scored on thinned draws after burn-in too).
PILOT_CHAINS = 2
PILOT_KSD_DRAWS = 500
#: Pilot runs added beyond an edge of the grid before an edge choice is reported.
EXTEND = 4


def tune(problem: Problem, sampler: str, estimator: str, pilot_iters: int, factors: Any, rng: Any) -> Any:
    """Step size by the KSD of pilot runs over a grid (from theta_0, or from the exact mode for CV):
    ``PILOT_CHAINS`` chains, the first half of each dropped, ``PILOT_KSD_DRAWS`` draws thinned from the
    rest, the kernel preconditioned by the Laplace covariance; the grid is extended by up to
    ``EXTEND`` runs past an edge choice."""
    grid = [f * base_step(sampler, estimator, problem.lambda_max) for f in factors]
    cv = estimator == "cv"
    start = problem.mode[None, :] if cv else problem.theta0
    xp = problem.model.xp
    init = xp.concat([start] * PILOT_CHAINS, axis=0)
    return tune_step_size(
        problem.model, sampler, estimator, grid=grid, pilot_iters=pilot_iters, chains=PILOT_CHAINS,
        burn_in=pilot_iters // 2, init=init, rng=rng, n_ksd=min(PILOT_KSD_DRAWS, pilot_iters // 2),
        progress=False, estimator_options={"centre": problem.mode} if cv else None, extend=EXTEND,
        ksd_options={"preconditioner": laplace_covariance(problem)},
    )


def laplace_covariance(problem: Problem) -> Any:
    """P^-1, the Laplace approximation's covariance, on the model's backend: the pilots' KSD kernel
    works on the posterior's scale with it (one kernel for every step), so that a sample collapsed on
    the mode scores badly, which the unit kernel of eq. (13) cannot see when posterior sds are << 1."""
    xp = problem.model.xp
    return xp.linalg.inv(problem.precision)


def run_method(problem: Problem, sampler: str, estimator: str, h: float, iters: int, sgd_steps: int, rng: Any,
               *, max_time: float | None = None, thin: int = 1, progress: Any = False, polish: bool = True) -> dict:
    """One run as in the review: ``iters`` iterations from theta_0, or for CV ``sgd_steps`` SGD steps
    to theta_hat (polished by Newton steps unless ``polish=False``) and ``iters - sgd_steps`` sampling
    iterations from there. Returns the trace, the seconds (mode search included; ``time`` on the wall
    clock, ``cpu`` the process's CPU time), the search's seconds (``sgd_time``, ``sgd_cpu``) and, for
    CV, the centre (``centre``; None otherwise), its :func:`mode_distance` (``dist``; ``dist_sgd``
    before polishing) and its ``mode_gap`` (``gap``; ``gap_sgd`` before polishing)."""
    ss = rng if isinstance(rng, np.random.SeedSequence) else np.random.SeedSequence(rng)
    opt_seed, run_seed = ss.spawn(2)
    model = problem.model
    sgd_time, sgd_cpu, options, start, n, gaps = 0.0, 0.0, None, problem.theta0, iters, {}
    if estimator == "cv":
        be = backends.get_backend(model.xp)
        c_sgd = time.process_time()
        mode, sgd_time, gaps = sgd_mode(problem, sgd_steps, backends.default_rng(opt_seed, backend=be, device=model.device),
                                        polish=polish)
        sgd_cpu = time.process_time() - c_sgd
        options, start, n = {"centre": mode}, mode[None, :], iters - sgd_steps
        if max_time is not None:
            max_time = max(max_time - sgd_time, 1e-3)
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        trace = sample(model, sampler, estimator, step_size=h, n_iter=n, init=start, rng=run_seed, thin=thin,
                       estimator_options=options, progress=progress, max_time=max_time)
    except FloatingPointError as err:
        err.gap = gaps.get("gap")   # the centre's Newton decrement and distance from the mode, for the caller's report
        err.dist = gaps.get("dist")
        raise
    backends.get_backend(model.xp).synchronize()
    return {"trace": trace, "time": sgd_time + time.perf_counter() - t0, "sgd_time": sgd_time,
            "cpu": sgd_cpu + time.process_time() - c0, "sgd_cpu": sgd_cpu,
            "centre": options["centre"] if options else None, **gaps}


def scores(model: Any, draws: Any, chunk: int = 50) -> Any:
    """The exact gradients of log pi at ``draws`` (k, dim), in chunks (each an O(N) pass)."""
    xp = model.xp
    parts = [model.grad_log_posterior(draws[i:i + chunk, :]) for i in range(0, int(draws.shape[0]), chunk)]
    return xp.concat(parts, axis=0)


def metrics(problem: Problem, draws: Any, thinned: Any = None) -> tuple[float, float] | tuple[float, float, float]:
    """(log-loss on the held-out set, KSD of eq. 13) of ``draws`` (k, dim) on the model's backend, and
    the KSD of ``thinned`` (a second sample) when it is given."""
    model = problem.model
    xp = model.xp
    draws = backends.asarray(draws, backend=backends.get_backend(xp), dtype=model.dtype)
    prob = xp.mean(model.predict_proba(draws, problem.X_test), axis=0)
    loss = float(log_loss(prob, problem.y_test))
    k = float(ksd(draws, scores(model, draws)))
    if thinned is None:
        return loss, k
    thinned = backends.asarray(thinned, backend=backends.get_backend(xp), dtype=model.dtype)
    return loss, k, float(ksd(thinned, scores(model, thinned)))


def laplace_ksd(problem: Problem, n: int, seed: Any) -> float:
    """KSD (eq. 13) of ``n`` independent draws from the Laplace approximation N(mode, P^-1): the
    value an independent sample of that size from (nearly) the posterior gets, the floor of the
    column for ``n`` draws."""
    model = problem.model
    P = np.linalg.inv(np.asarray(backends.to_numpy(problem.precision), dtype=float))
    mode = np.asarray(backends.to_numpy(problem.mode))
    x = np.random.default_rng(seed).multivariate_normal(mode, P, size=n)
    x = backends.asarray(x, backend=backends.get_backend(model.xp), dtype=model.dtype)
    return float(ksd(x, scores(model, x)))


def meanfield_ksd(problem: Problem, n: int, seed: Any) -> float:
    """KSD (eq. 13) of ``n`` independent draws from N(mode, diag(1 / P_ii)), P the Laplace precision:
    the mean-field Gaussian closest to the Laplace approximation in KL(q || p) (what ADVI's mean-field
    family converges to on a Gaussian target), the control that separates the mean-field family's
    error from an unconverged ADVI optimisation."""
    model = problem.model
    P = np.asarray(backends.to_numpy(problem.precision), dtype=float)
    mode = np.asarray(backends.to_numpy(problem.mode))
    x = mode + np.random.default_rng(seed).standard_normal((n, mode.shape[0])) / np.sqrt(np.diag(P))
    x = backends.asarray(x, backend=backends.get_backend(model.xp), dtype=model.dtype)
    return float(ksd(x, scores(model, x)))


def numpyro_or_note() -> tuple[Any, str]:
    """NumPyro (with JAX in float64 on the CPU), or None and why not."""
    try:
        import jax
        import numpyro  # noqa: F401
    except ImportError as err:
        return None, f"NUTS and ADVI columns skipped: NumPyro/JAX not installed ({err.name}); {EXTRA}"
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_platform_name", "cpu")
    return numpyro, ""


def references(ctx: Any, wanted: bool, what: str) -> Any:
    """NumPyro for the reference columns when ``wanted`` and installed, else None; the reason is
    recorded in ``meta.json`` and reported (``what`` names the columns left out)."""
    reference, note = (None, f"{what} not run (option nuts=False)")
    if wanted:
        reference, note = numpyro_or_note()
    if note:
        ctx.notes["references"] = note
        ctx.status(note)
    return reference


def _numpyro_model(X, y, dim: int, prior_var: float = 10.0):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    def model():
        theta = numpyro.sample("theta", dist.Normal(0.0, math.sqrt(prior_var)).expand([dim]).to_event(1))
        numpyro.sample("y", dist.Bernoulli(logits=jnp.asarray(X) @ theta), obs=jnp.asarray(y))

    return model


def nuts(problem: Problem, warmup: int, draws: int, seed: int) -> dict:
    """One NUTS chain (NumPyro) from theta_0: ``warmup`` adaptation iterations, then ``draws``."""
    import jax
    from numpyro.infer import MCMC, NUTS, init_to_value

    init = {"theta": np.asarray(backends.to_numpy(problem.theta0[0]))}
    kernel = NUTS(_numpyro_model(problem.X, problem.y, problem.dim), init_strategy=init_to_value(values=init))
    mcmc = MCMC(kernel, num_warmup=warmup, num_samples=draws, progress_bar=False)
    t0, c0 = time.perf_counter(), time.process_time()
    mcmc.run(jax.random.PRNGKey(seed))
    theta = np.asarray(mcmc.get_samples()["theta"])
    return {"draws": theta, "time": time.perf_counter() - t0, "cpu": time.process_time() - c0}


def nuts_for(problem: Problem, seconds: float, seed: int, warmup: int = 500, chunk: int = 25,
             clock: Any = time.perf_counter) -> dict:
    """NUTS (NumPyro) from theta_0 for a budget of ``seconds`` on ``clock`` (wall clock by default;
    ``time.process_time`` for CPU time): adaptation, then chunks of draws until the budget is spent.
    Returns the draws and the second at which each was made (from the start, on ``clock``; the
    draws of a chunk are spread evenly over its seconds)."""
    import jax
    from numpyro.infer import MCMC, NUTS, init_to_value

    init = {"theta": np.asarray(backends.to_numpy(problem.theta0[0]))}
    kernel = NUTS(_numpyro_model(problem.X, problem.y, problem.dim), init_strategy=init_to_value(values=init))
    mcmc = MCMC(kernel, num_warmup=warmup, num_samples=chunk, progress_bar=False)
    t0 = clock()
    mcmc.run(jax.random.PRNGKey(seed))
    out, times = [np.asarray(mcmc.get_samples()["theta"])], []
    times.append(np.linspace(t0, clock(), chunk + 1)[1:] - t0)
    while clock() - t0 < seconds:
        mcmc.post_warmup_state = mcmc.last_state
        a = clock()
        mcmc.run(mcmc.post_warmup_state.rng_key)
        out.append(np.asarray(mcmc.get_samples()["theta"]))
        times.append(np.linspace(a, clock(), chunk + 1)[1:] - t0)
    return {"draws": np.concatenate(out, axis=0), "seconds": np.concatenate(times)}


def advi(problem: Problem, steps: int, draws: int, seed: int, lr: float = 0.02) -> dict:
    """Mean-field Gaussian ADVI (NumPyro's SVI with AutoNormal and Adam) from theta_0, then ``draws`` draws."""
    import jax
    from numpyro.infer import SVI, Trace_ELBO, init_to_value
    from numpyro.infer.autoguide import AutoNormal
    from numpyro.optim import Adam

    init = {"theta": np.asarray(backends.to_numpy(problem.theta0[0]))}
    model = _numpyro_model(problem.X, problem.y, problem.dim)
    guide = AutoNormal(model, init_loc_fn=init_to_value(values=init))
    svi = SVI(model, guide, Adam(lr), Trace_ELBO())
    key, key_draw = jax.random.split(jax.random.PRNGKey(seed))
    t0, c0 = time.perf_counter(), time.process_time()
    res = svi.run(key, steps, progress_bar=False)
    theta = guide.sample_posterior(key_draw, res.params, sample_shape=(draws,))["theta"]
    theta = np.asarray(theta)
    return {"draws": theta, "time": time.perf_counter() - t0, "cpu": time.process_time() - c0}
