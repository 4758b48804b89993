"""The set-up of ``sgmc run``: the data (simulated or a CSV file), the model, and the coordinates it samples in.

With ``--data`` the columns keep their own units, so the samplers run on the same posterior in
z with theta = L z, L L^T the Laplace covariance at the mode (:func:`_condition`), where SGLD's step
(and its subsample size) is chosen for the sds of the run's length (:func:`_sd_step`).
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import backends
from .._sd_step import gradient_noise, predicted_sd_error, sd_error_step
from .._validation import check_file
from ..datasets import linear_regression_data, load_csv, logistic_regression_data
from ..estimators import make_estimator
from ..models import LinearRegression, LogisticRegression, Model, conditioned, laplace_factor
from .methods import _CENTRED, _Method

# The embedded default job (the review's section 6.1 with d = 10) and the --quick smoke-test job.
# Four chains by default, so that R-hat can compare chains (sgmc.diagnostics.mixing marks a row whose
# chains have not mixed); one for the smoke test.
FULL = {"n": 100_000, "dim": 10, "n_test": 10_000, "iters": 20_000, "ref_chains": 2, "chains": 4}
QUICK = {"n": 5_000, "dim": 10, "n_test": 2_000, "iters": 2_000, "ref_chains": 2, "chains": 1}

# --data: the Langevin steps in z keep about this many effective draws per run (see _sd_step)
MIX_ESS = 400


@dataclass
class _Problem:
    model: Model
    X_test: Any
    y_test: Any
    kind: str
    description: str
    mode: Any = None
    precision: Any = None
    lambda_max: float = float("nan")
    reference_mean: np.ndarray | None = None
    reference_note: str = ""
    # --data: the samplers run on the same posterior in z with theta = L z, L L^T the Laplace covariance
    sampling: Any = None
    z_mode: Any = None
    z_precision: Any = None
    noise_passes: dict = field(default_factory=dict)


def _status(args, text: str) -> None:
    if not args.no_progress:
        print(text, file=sys.stderr, flush=True)


def _load_problem(args, cfg: dict) -> _Problem:
    be = backends.require(args.backend)  # a missing library or GPU fails here, with what to install
    if args.data is not None:
        if args.test_fraction is None:
            args.test_fraction = 0.2
        if not 0.0 < args.test_fraction < 1.0:
            msg = f"--test-fraction must be in (0, 1); got {args.test_fraction}"
            raise ValueError(msg)
        table = load_csv(check_file(args.data, "--data", "CSV file"), target=args.target, intercept=args.intercept)
        n_all = table.X.shape[0]
        n_test = int(round(args.test_fraction * n_all))
        if n_test < 1 or n_all - n_test < 2:
            msg = f"--data {args.data!r} has {n_all} rows: too few to hold out a test set"
            raise ValueError(msg)
        perm = np.random.default_rng(args.seed).permutation(n_all)
        test, train = perm[:n_test], perm[n_test:]
        X, y, X_test, y_test = table.X[train], table.y[train], table.X[test], table.y[test]
        if args.model == "logistic" and not np.all((table.y == 0) | (table.y == 1)):
            msg = (
                f"--target column {table.target_name!r} of {args.data!r} must hold only 0 and 1 for "
                "--model logistic (use --model linear for a continuous target)"
            )
            raise ValueError(msg)
        names = table.feature_names  # the coefficients are reported by these names
        twice = next((n for k, n in enumerate(names) if n in names[:k]), None)
        if twice is not None:
            also = " (or one named like the added intercept)" if twice == "intercept" else ""
            msg = (f"--data {args.data!r} has two columns named {twice!r}{also}; coefficients are reported by "
                   "column name, so rename one")
            raise ValueError(msg)
        description = (
            f"{args.model} regression on {os.path.basename(args.data)} (target {table.target_name!r}; "
            f"{X.shape[1]} features{' incl. intercept' if args.intercept else ''}); "
            f"N = {X.shape[0]} training rows, {n_test} held out"
        )
    else:
        n = args.n_data if args.n_data is not None else cfg["n"]
        dim = args.dim if args.dim is not None else cfg["dim"]
        n_test = max(1000, min(cfg["n_test"], n // 5)) if args.n_data is not None else cfg["n_test"]
        simulate = logistic_regression_data if args.model == "logistic" else linear_regression_data
        data = simulate(n=n, dim=dim, n_test=n_test, rng=args.seed)
        X, y, X_test, y_test = data.X, data.y, data.X_test, data.y_test
        names = None
        description = (
            f"{args.model} regression, simulated as in the review's section 6.1 (rho = 0.4, seed "
            f"{args.seed}): N = {n}, d = {dim}, {n_test} held-out points"
        )
    to = lambda a: backends.asarray(a, backend=be)  # noqa: E731
    X, y, X_test, y_test = to(X), to(y), to(X_test), to(y_test)
    glm = LogisticRegression if args.model == "logistic" else LinearRegression
    model = glm(X, y, param_names=names)
    return _Problem(model, X_test, y_test, args.model, description)


def _condition(problem: _Problem) -> None:
    """The posterior in z with theta = L z, L = R^{-T} for the Cholesky factor R of the precision at the mode.

    In z the negative Hessian at the mode is the identity, so the step sizes from its curvature
    suit every coordinate whatever the units of the columns; the prior N(0, 10 I) stays on theta,
    so the posterior is the same (:func:`sgmc.models.conditioned`).
    """
    model = problem.model
    L = laplace_factor(problem.precision)
    problem.sampling = conditioned(model, L)
    problem.z_precision = model.xp.matrix_transpose(L) @ problem.precision @ L
    problem.z_mode = problem.sampling.from_theta(problem.mode)


def _sd_step(args, problem: _Problem, method: _Method, batch: int, iters: int, burn: int, rng: Any,
             batch_given: bool) -> float:
    """SGLD's and ULA's step in z (and SGLD's subsample size): chosen so that the run's sds come out right.

    In z the Laplace covariance is the identity, and SGLD's stationary variance is
    (1 + h v / 4) / (1 - h / 4) with v the variance of the gradient estimate (measured with the
    estimator at draws of the Laplace approximation, :func:`sgmc._sd_step.gradient_noise`). The step
    is the one that minimises that bias and the Monte Carlo error of the run's kept draws together
    (:func:`sgmc._sd_step.sd_error_step`), but no smaller than the step at which the kept draws would
    hold about ``MIX_ESS`` effective draws; where the gradient noise then still inflates the sds by
    more than their Monte Carlo error, the subsample is enlarged (unless --batch-size was given)
    until it does not: the review's rule that the gradient noise be dominated by the injected noise
    (Nemeth and Fearnhead 2021, section 2.3). The momentum samplers, those on their own scale and
    SVRG/SAGA (whose noise depends on the snapshot's age) keep the curvature rule.
    """
    name = method.estimator.replace("adaptive-", "")
    if method.sampler not in ("sgld", "ula") or name in ("svrg", "saga"):
        return method.step_size
    kept = args.chains * (iters - burn)
    noise = 0.0
    if name != "full":
        options = {"centre": problem.z_mode} if name in _CENTRED else {}
        est = make_estimator(name, problem.sampling, batch, **options)
        noise, evals = gradient_noise(est, rng, problem.z_mode)
        problem.noise_passes[method.label] = evals / problem.model.n_data
    h_cap = method.step_size
    h_mix = min(h_cap, 4.0 * MIX_ESS / kept)  # IAT of SGLD on a unit Gaussian: about 4 / h
    h = max(sd_error_step(noise, kept, h_cap), h_mix)
    bias, mc = predicted_sd_error(h, noise, kept)
    n_all = problem.model.n_data
    if bias > mc and noise > 0.0 and not batch_given and name not in ("full",):
        # the noise v that keeps the bias within mc at h; v scales as (N - n) / n (subsampling without replacement)
        allowed = max(((1.0 + mc) ** 2 * (1.0 - h / 4.0) - 1.0) * 4.0 / h, 1e-12)
        need = n_all * batch * noise / (allowed * (n_all - batch) + batch * noise)
        method.batch_size = int(min(n_all, max(batch, math.ceil(need))))
    return h


def _conditioning_note(problem: _Problem, methods: list) -> str:
    """What the report says about the coordinates the samplers ran in, and the steps chosen there."""
    lam = float(backends.to_numpy(problem.model.xp.linalg.eigvalsh(problem.z_precision))[-1])
    chosen = [f"{m.label} n = {m.batch_size}" for m in methods if m.batch_size is not None]
    probes = ", ".join(f"{k} {v:.1f}" for k, v in problem.noise_passes.items())
    return ("conditioning: the samplers ran on theta = L z with L L^T the inverse Hessian at the mode (the prior "
            f"kept on theta; lambda_max in z = {lam:.3g}); draws, means and sds are on the columns' scale; SGLD's "
            "step (and, unless --batch-size is given, its subsample) is chosen for the sds of this run's length "
            f"(docs/models.md){'; ' + ', '.join(chosen) if chosen else ''}"
            f"{'; data passes measuring the gradient noise: ' + probes if probes else ''}")
