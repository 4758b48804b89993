"""The ``sgmc`` command: run stochastic gradient MCMC from the shell.

``sgmc run`` with no flags reproduces the setting of section 6.1 of Nemeth and Fearnhead (2021),
"Stochastic gradient Markov chain Monte Carlo": Bayesian logistic regression with a N(0, 10 I) prior
on N = 10^5 simulated data in d = 10 dimensions, fitted by SGLD and by SGLD with control variates
(SGLD-CV) with subsample size n = 0.01 N. It prints, per method, the wall time, the number of passes
through the data (every per-datum evaluation: the estimator's, the sampler's own such as a Fisher
metric, and the set-up's), the held-out log-loss of the posterior predictive distribution and the
distance of the posterior-mean estimate from that of a long exact MCMC (MALA) reference run. A method
that diverged, ran away (finite draws that grow without bound or lie far outside the Laplace
approximation at the mode) or was interrupted is a marked row, not a result.

The command is an input/output edge: it reads and simulates data with NumPy, moves them to the chosen
backend with :func:`sgmc.backends.asarray`, and everything else runs through :func:`sgmc.sample` on
that backend. Errors in the arguments or the data are reported on one line, ``sgmc: error: ...``, with
exit status 2.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import re
import sys
import tempfile
import time
import warnings
import zlib
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from . import __version__, backends
from ._names import canonical
from ._progress import progress_scope
from ._validation import check_file, did_you_mean
from .datasets import linear_regression_data, load_csv, logistic_regression_data
from .chains import DivergenceError
from .diagnostics import log_loss, predictive_log_lik
from .diagnostics.mixing import MixingWarning
from .diagnostics.runaway import Runaway, RunawayChainWarning, find_runaway
from .diagnostics.zero_variance import n_zv_features, zv_mean, zv_order_for
from .estimators import ESTIMATORS, make_estimator
from ._sd_step import gradient_noise, predicted_sd_error, sd_error_step
from .conditioning import user_trace
from .models import Affine, LinearRegression, LogisticRegression, Model, conditioned, laplace_factor
from .optimize import _can_polish, laplace
from .plot import _matplotlib, trace_plot
from .run import SamplingInterruptedWarning, sample
from .samplers import SAMPLERS

__all__ = ["main", "build_parser"]

PROG = "sgmc"

# The embedded default job (the review's section 6.1 with d = 10) and the --quick smoke-test job.
# Four chains by default, so that R-hat can compare chains (sgmc.diagnostics.mixing marks a row whose
# chains have not mixed); one for the smoke test.
FULL = {"n": 100_000, "dim": 10, "n_test": 10_000, "iters": 20_000, "ref_chains": 2, "chains": 4}
QUICK = {"n": 5_000, "dim": 10, "n_test": 2_000, "iters": 2_000, "ref_chains": 2, "chains": 1}
# The MALA reference (see _mala_reference): iterations per chain between these bounds, and its pilots.
REF_ITERS_MIN, REF_ITERS_MAX = 300, 1_500
REF_PILOTS, REF_PILOT_ITERS = 2, 50

# Default step sizes, as multiples of a curvature scale of the posterior: h = factor / lambda_max for
# the Langevin samplers and h = factor / sqrt(lambda_max) for the momentum samplers, where lambda_max
# is the largest eigenvalue of the negative Hessian of log pi at the mode. The factors come from
# pilot runs on the default job (see docs/samplers.md); --step-size overrides them.
# Samplers whose step is on their own scale (pSGLD, SGRLD with the Fisher metric, SGRHMC) take the
# factor of their family times their ``step_unit`` at the mode instead of 1 / lambda_max.
STEP_FACTORS = {
    ("sgld", "minibatch"): 0.1,
    ("sgld", "cv"): 0.5,
    ("sgld", "svrg"): 0.5,
    ("sgld", "full"): 0.5,
    ("ula", "full"): 0.5,
    ("mala", "full"): 1.0,
}
MOMENTUM_FACTORS = {"minibatch": 0.3, "cv": 1.0, "svrg": 0.3, "full": 0.3}
# Samplers on their own scale whose factor for an estimator differs from SGLD's (as multiples of their
# step_unit): SGRLD with SVRG or SAGA at SGLD's 0.5 runs away (draws at |theta| in the thousands); the
# pilots of asv_benchmarks/cli_step_pilots.py (docs/results/cli_step_pilots.json) chose 0.1.
UNIT_FACTORS = {("sgrld", "svrg"): 0.1, ("sgrld", "saga"): 0.1}
# The preferential, adaptive, SAGA and DPP estimators take the factors of their plain counterparts.
_LIKE = {"ps": "minibatch", "dpp": "minibatch", "saga": "svrg", "cv-ps": "cv", "adaptive-cv": "cv",
         "adaptive-cv-ps": "cv"}
for _new, _old in _LIKE.items():
    STEP_FACTORS[("sgld", _new)] = STEP_FACTORS[("sgld", _old)]
    MOMENTUM_FACTORS[_new] = MOMENTUM_FACTORS[_old]
# Estimators that find the posterior mode first (their chains start there, so no burn-in).
_CENTRED = ("cv", "ps", "cv-ps", "adaptive-cv", "adaptive-cv-ps")
# Their optimiser steps without --burn-in where Newton steps with exact Hessians finish the search (the
# GLMs up to sgmc.optimize.POLISH_MAX_DIM): a warm start for Newton, whose result does not depend on it.
WARM_START_STEPS = 1_000
MOMENTUM_SAMPLERS = ("sghmc", "sgnht", "sgrhmc", "baoab", "badodab")
# What the command line runs: the GLM samplers (the recipe sampler needs D, SCIR a simplex model, SGRHMC
# a constant or diagonal metric, the noise-corrected samplers the minibatch-noise estimator: use them
# from Python).
CLI_SAMPLERS = [s for s in SAMPLERS if s not in ("recipe", "scir", "sgrhmc", "sgld_corrected", "sghmc_corrected")]
CLI_ESTIMATORS = [e for e in ESTIMATORS if e not in ("noisy", "minibatch-noise", "cv-switch", "buffered")]
MALA_TARGET_ACCEPTANCE = 0.574
# --data: the Langevin steps in z keep about this many effective draws per run (see _sd_step)
MIX_ESS = 400
LOG_LOSS_DRAWS = 1000


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr, exit status 2."""

    def error(self, message: str):
        # "argument --model: invalid choice: 'logisitc' (choose from ...)": name the closest choice
        m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if m:
            choices = re.findall(r"'([^']*)'", m.group(2)) or [c.strip() for c in m.group(2).split(",")]
            hint = did_you_mean(m.group(1), choices)
            if hint:
                message = f"{message};{hint}"
        _fail(message)


class _Failure(Exception):
    """A user error already phrased for the command line."""


def _fail(message: str):
    raise _Failure(message)


def _split_names(values: Sequence[str] | None, known: Sequence[str], flag: str, default: list) -> list:
    if not values:
        return list(default)
    out = []
    for v in values:
        for given in v.split(","):
            name = canonical(given, known) if given.strip() else ""
            if not given.strip():
                continue
            if name is None:
                given = given.strip()
                close = difflib.get_close_matches(given.lower().replace("_", "-"), list(known), n=1) or \
                    difflib.get_close_matches(given.lower().replace("-", "_"), list(known), n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                msg = f"{flag}: unknown name {given!r}; {hint}choose from {', '.join(sorted(known))}"
                raise ValueError(msg)
            if name not in out:
                out.append(name)
    if not out:
        msg = f"{flag}: no names given"
        raise ValueError(msg)
    return out


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return v


def _int_at_least(minimum: int):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {v}")
        return v

    return parse


def _batch_size(text: str) -> float | int:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or a fraction in (0, 1), got {text!r}") from None
    if 0 < v < 1:
        return v
    if v >= 1 and v == int(v):
        return int(v)
    raise argparse.ArgumentTypeError(f"expected an integer >= 1 or a fraction in (0, 1), got {text!r}")


def _step_sizes(text: str) -> list:
    out = []
    for part in text.split(","):
        out.append(_positive_float(part.strip()))
    return out


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``sgmc`` command."""
    parser = _Parser(
        prog=PROG,
        description="Stochastic gradient MCMC from the command line.",
        epilog="Run 'sgmc run --help' for the options of the run command.",
    )
    parser.add_argument("--version", action="version", version=f"sgmc {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    run = sub.add_parser(
        "run",
        help="fit a regression with SGMCMC methods and compare them with an exact reference",
        description=(
            "Fit Bayesian logistic (or linear) regression with stochastic gradient MCMC and print, per "
            "method: wall time, data passes, held-out log-loss of the posterior predictive and the "
            "distance of the posterior mean from an exact reference. With no options: the review's "
            "section 6.1 logistic regression (N = 100000, d = 10) fitted by SGLD and SGLD-CV with "
            "n = 0.01 N."
        ),
    )
    run.add_argument("--model", choices=("logistic", "linear"), default="logistic",
                     help="regression model, prior N(0, 10 I); linear: unit noise variance (default: logistic)")
    run.add_argument("--sampler", action="append", metavar="NAME",
                     help=f"sampler(s), repeatable or comma separated: {', '.join(sorted(CLI_SAMPLERS))} "
                     "(default: sgld)")
    run.add_argument("--estimator", action="append", metavar="NAME",
                     help="gradient estimator(s), repeatable or comma separated: minibatch, cv, svrg, full, "
                     "ps, cv-ps, adaptive-cv, adaptive-cv-ps, saga, dpp (docs/subsampling.md); every sampler "
                     "runs with every estimator (default: minibatch,cv)")
    run.add_argument("--backend", choices=tuple(backends.registered()), default="numpy",
                     help="array library the computation runs on (default: numpy)")
    run.add_argument("--data", metavar="CSV", help="fit this CSV file instead of simulated data")
    run.add_argument("--target", default="-1", metavar="COL",
                     help="target column of --data, by header name or index (default: the last column)")
    run.add_argument("--intercept", action="store_true", help="add an intercept column to --data")
    run.add_argument("--test-fraction", type=float, default=None, metavar="F",
                     help="fraction of --data rows held out for the log-loss (default: 0.2)")
    run.add_argument("--n-data", type=_int_at_least(10), metavar="N",
                     help="size of the simulated training set (default: 100000; 5000 with --quick)")
    run.add_argument("--dim", type=_int_at_least(1), metavar="D", help="dimension of the simulated data (default: 10)")
    run.add_argument("--step-size", type=_step_sizes, metavar="H",
                     help="step size h (review convention), one for all methods or a comma list with one "
                     "per method (default: from the posterior curvature, see docs/samplers.md)")
    run.add_argument("--batch-size", type=_batch_size, default=None, metavar="n",
                     help="subsample size: an integer, or a fraction of N (default: 0.01; with --data, SGLD's "
                     "is raised where its gradient noise would inflate the posterior sds, see docs/models.md)")
    run.add_argument("--iters", type=_int_at_least(2), metavar="K",
                     help="iterations per method, burn-in (or, for the mode-finding estimators, mode-search steps) included "
                     "(default: 20000; 2000 with --quick)")
    run.add_argument("--burn-in", type=_int_at_least(0), metavar="B",
                     help="iterations discarded; for the estimators that find the mode first (cv, ps, "
                     "cv-ps, adaptive-cv, adaptive-cv-ps), optimiser steps instead (default: half of --iters; "
                     "for those estimators at most 1000 Adam steps where Newton steps finish the search)")
    run.add_argument("--chains", type=_int_at_least(1), default=None, metavar="C",
                     help="chains per method (default: 4; 1 with --quick)")
    run.add_argument("--seed", type=_int_at_least(0), default=0, metavar="S", help="seed for data and samplers (default: 0)")
    run.add_argument("--reference-iters", type=_int_at_least(10), metavar="R",
                     help="iterations per chain of the MALA reference (default: enough for degree-2 control "
                     "variates, 300 for d = 10, at most 1500)")
    run.add_argument("--plot", metavar="FILE", help="write trace plots of the first coordinates (PNG, PDF, SVG)")
    run.add_argument("--output", metavar="FILE.npz",
                     help="save each method's trace (sgmc.Trace.load opens it) with the command's settings, its "
                     "row and the reference mean; with several methods, FILE-METHOD.npz for each; checked "
                     "writable before anything runs")
    run.add_argument("--no-progress", action="store_true", help="no progress bars or status lines")
    run.add_argument("--quick", action="store_true",
                     help="a small configuration for smoke tests (N = 5000, 2000 iterations)")
    rep = sub.add_parser(
        "reproduce",
        help="run one of the papers' experiments and write its tables and figures",
        description=(
            "Reproduce an experiment of the papers (the review's Table 2 and Figures 2, 3, 5 and 6): "
            "tables as Markdown and CSV, figures as PNG and meta.json (seed, versions, wall time) "
            "under --out. 'sgmc reproduce --list' names them."
        ),
    )
    rep.add_argument("name", nargs="?", metavar="NAME", help="the experiment (see --list)")
    rep.add_argument("--list", action="store_true", help="list the experiments and exit")
    rep.add_argument("--out", metavar="DIR", help="folder for the outputs (default: ./sgmc-NAME)")
    rep.add_argument("--quick", action="store_true", help="the reduced size for smoke tests")
    rep.add_argument("--seed", type=_int_at_least(0), default=0, metavar="S", help="seed (default: 0)")
    rep.add_argument("--backend", choices=tuple(backends.registered()), default="numpy",
                     help="array library the samplers run on (default: numpy)")
    rep.add_argument("--no-progress", action="store_true", help="no progress bars or status lines")
    rep.add_argument("--option", action="append", type=_experiment_option, default=[], metavar="KEY=VALUE",
                     help="an experiment-specific setting, repeatable (for example --option dims=10,50); "
                     "VALUE is read as a Python literal when it is one")
    return parser


def _experiment_option(text: str) -> tuple:
    import ast

    key, sep, value = text.partition("=")
    if not sep or not key.strip().isidentifier():
        msg = f"expected KEY=VALUE with KEY a name; got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    try:
        parsed = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        parsed = value
    return key.strip(), parsed


def _command_reproduce(args) -> int:
    from . import experiments

    if args.list:
        for name, title in experiments.list_experiments():
            print(f"{name:20s} {title}")
        return 0
    if args.name is None:
        _fail("reproduce needs an experiment NAME; 'sgmc reproduce --list' names them")
    if args.name not in experiments.EXPERIMENTS:
        _fail(f"unknown experiment {args.name!r};{did_you_mean(args.name, list(experiments.EXPERIMENTS))} "
              "'sgmc reproduce --list' names them")
    out = args.out if args.out is not None else f"sgmc-{args.name}"
    backends.require(args.backend)
    result = experiments.reproduce(args.name, out, quick=args.quick, seed=args.seed,
                                   progress=False if args.no_progress else True, backend=args.backend,
                                   **dict(args.option))
    for path in result["meta"]["files"]:
        if path.endswith(".md"):
            with open(os.path.join(out, path), encoding="utf-8") as fh:
                print(fh.read())
    print(f"outputs written to {out}/ ({', '.join(result['meta']['files'])}); "
          f"{result['meta']['wall_time_s']:.1f} s")
    return 0


# -- problem set-up -------------------------------------------------------------------------------


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


def _uninterrupted(trace: Any) -> Any:
    """The trace of a run that finished; Ctrl-C during it ends the command (no reference from part of a run)."""
    if trace.info["interrupted"]:
        raise KeyboardInterrupt
    return trace


def _reference_iters(dim: int, chains: int) -> int:
    """Iterations per chain of the MALA reference: enough for degree-2 control variates when that is cheap.

    The degree-2 fit wants three draws per coefficient in each fold (the other chains' draws after the
    tenth discarded as burn-in); when that needs more than ``REF_ITERS_MAX`` iterations (d above about
    20 with two chains), the reference runs ``REF_ITERS_MAX`` iterations with degree-1 control variates.
    """
    need = 3 * n_zv_features(dim, 2)
    iters = max(REF_ITERS_MIN, math.ceil(need / max(chains - 1, 1) / 0.9) + 1)
    return iters if iters <= REF_ITERS_MAX else REF_ITERS_MAX


def _mala_reference(args, problem: _Problem, precision: Any, chains: int, iters: int, seed) -> tuple:
    """Posterior mean from MALA on the whitened posterior, with zero-variance control variates.

    MALA runs on z, where theta = mode + L z and L L^T is the inverse Hessian at the mode, so the
    target of z is close to N(0, I) and a fixed step near the optimal acceptance rate mixes fast; the
    step starts at the optimal scaling of MALA for a standard normal target in d dimensions,
    h = 1.65^2 d^(-1/3) (Roberts and Rosenthal 1998), and two short pilot runs correct it towards the
    acceptance rate 0.574. The mean is estimated by :func:`sgmc.diagnostics.zv_mean` from the draws
    and their exact scores: cross-fitted control variates of degree 2 (degree 1 when there are too
    few draws for the degree-2 fit), which on this near-Gaussian posterior remove all but a tiny part
    of the Monte Carlo noise (Mira, Solgi and Imparato 2013).
    """
    model = problem.model
    xp = model.xp
    cov = xp.linalg.inv(precision)
    L = xp.linalg.cholesky(0.5 * (cov + cov.T))
    white = Affine(model, problem.mode, L)
    zero = xp.zeros((chains, model.dim), dtype=model.dtype, device=model.device)
    pilot_seed, run_seed = seed.spawn(2)
    h = 1.65**2 * model.dim ** (-1.0 / 3.0)
    for s in pilot_seed.spawn(REF_PILOTS):
        tr = _uninterrupted(sample(white, "mala", "full", step_size=h, n_iter=REF_PILOT_ITERS, chains=chains,
                                   init=zero, rng=s, progress=False))
        acc = float(np.mean(tr.info["acceptance_rate"]))
        h *= math.exp(2.0 * (acc - MALA_TARGET_ACCEPTANCE))
    burn = max(1, iters // 10)
    t0 = time.perf_counter()
    tr = _uninterrupted(sample(white, "mala", "full", step_size=h, n_iter=iters, burn_in=burn, chains=chains,
                               init=zero, rng=run_seed, progress=not args.no_progress, store_grads=True))
    acc = float(np.mean(tr.info["acceptance_rate"]))
    # theta = mode + L z and grad_theta log pi = L^{-T} grad_z log pi, row by row
    flat_z = xp.reshape(tr.draws, (-1, model.dim))
    flat_g = xp.reshape(tr.grads, (-1, model.dim))
    theta = white.to_theta(flat_z)
    g_theta = xp.linalg.solve(L.T, flat_g.T).T
    shape = (chains, tr.n_draws, model.dim)
    fold = (chains - 1 if chains > 1 else 0.5) * tr.n_draws
    order = zv_order_for(model.dim, int(fold))
    est = zv_mean(xp.reshape(theta, shape), xp.reshape(g_theta, shape), order=order)
    elapsed = time.perf_counter() - t0
    se = float(xp.linalg.vector_norm(est.se))
    plain = float(xp.linalg.vector_norm(est.plain_se))
    mean = backends.to_numpy(est.mean)
    note = (
        f"MALA with h = {h:.3g} on theta = mode + L z (L L^T = inverse Hessian at the mode), started at "
        f"the mode; {chains} chains x {iters} iterations, first {burn} discarded; acceptance {acc:.2f}; "
        f"posterior mean with cross-fitted zero-variance control variates of degree {order} "
        f"(sgmc.diagnostics.zv_mean), standard error about {se:.1g} (plain mean of the draws: {plain:.1g}); "
        f"{elapsed:.1f} s"
    )
    return mean, note


# -- methods ----------------------------------------------------------------------------------------


@dataclass
class _Method:
    label: str
    sampler: str
    estimator: str
    step_size: float = float("nan")
    batch_size: Any = None  # the method's own subsample size where the command chose one (--data, SGLD)


def _methods(samplers: list, estimators: list) -> list:
    out, seen = [], set()
    for s in samplers:
        for e in estimators:
            if SAMPLERS[s].exact:
                e = "full"
            if (s, e) in seen:
                continue
            seen.add((s, e))
            if SAMPLERS[s].exact or e == "minibatch":
                label = s.upper()
            else:
                label = f"{s.upper()}-{e.upper()}"
            out.append(_Method(label, s, e))
    return out


def _default_step(method: _Method, lambda_max: float, unit: float | None = None) -> float:
    """factor / lambda_max (momentum: factor / sqrt(lambda_max)), or factor * the sampler's own unit."""
    if method.sampler in MOMENTUM_SAMPLERS:
        scale = 1.0 / math.sqrt(lambda_max) if unit is None else unit
        return MOMENTUM_FACTORS[method.estimator] * scale
    if unit is not None and (method.sampler, method.estimator) in UNIT_FACTORS:
        return UNIT_FACTORS[(method.sampler, method.estimator)] * unit
    key = (method.sampler, method.estimator) if unit is None else ("sgld", method.estimator)
    return STEP_FACTORS[key] * (1.0 / lambda_max if unit is None else unit)


def _step_unit(method: _Method, model: Any, precision: Any, mode: Any, batch: int, rng: Any) -> float | None:
    """The sampler's ``step_unit`` at the mode for samplers on their own scale; None for the others."""
    from .estimators import make_estimator
    from .samplers import SamplerBase, make_sampler

    smp = make_sampler(method.sampler, model)
    if type(smp).step_unit is SamplerBase.step_unit or method.sampler in ("sghmc", "sgnht"):
        return None
    # the estimators that find the mode take it here (their weights or control variates are built there)
    # (an adaptive estimator's subsample size comes from its own pilot runs: its plain counterpart's
    # noise stands in for it here)
    name = method.estimator.replace("adaptive-", "")
    options = {"centre": mode} if name in _CENTRED else {}
    est = make_estimator(name, model, batch, **options)
    return float(smp.step_unit(model, precision, mode, est, rng))


def _log_loss(problem: _Problem, draws: Any) -> float:
    """Held-out negative log posterior-predictive density, averaged over the test points.

    Logistic: the review's log-loss with p(x) the posterior predictive probability, the average of
    sigmoid(x . theta) over the draws. Linear: -log of the average over draws of N(y; x . theta, s^2).
    At most ``LOG_LOSS_DRAWS`` draws, evenly spaced, are used.
    """
    model = problem.model
    xp = model.xp
    X, y = problem.X_test, problem.y_test
    k = draws.shape[0]
    if k > LOG_LOSS_DRAWS:
        pick = [int(i * k / LOG_LOSS_DRAWS) for i in range(LOG_LOSS_DRAWS)]
        draws = xp.take(draws, xp.asarray(pick, dtype=xp.int64, device=model.device), axis=0)
        k = LOG_LOSS_DRAWS
    if problem.kind == "logistic":
        chunk = max(1, 250_000 // max(int(X.shape[0]), 1))  # a block of probabilities that stays in cache
        total = xp.zeros((X.shape[0],), dtype=model.dtype, device=model.device)
        for s in range(0, k, chunk):
            total = total + xp.sum(model.predict_proba(draws[s:min(s + chunk, k), :], X), axis=0)
        return float(log_loss(total / k, y))
    var = model.noise_var
    resid = y[None, :] - draws @ X.T
    log_lik = -0.5 * resid * resid / var - 0.5 * math.log(2.0 * math.pi * var)
    return -float(predictive_log_lik(log_lik))


def _method_seed(seed: int, label: str) -> np.random.SeedSequence:
    """The seed of a method: from --seed and the method's label, so its row does not depend on the others."""
    return np.random.SeedSequence(seed, spawn_key=(zlib.crc32(label.encode("utf-8")),))


def _opt_steps(args, model: Any, burn: int) -> int:
    """Optimiser steps of the estimators that find the mode: ``burn``, or a warm start where Newton finishes."""
    steps = burn
    if args.burn_in is None and _can_polish(model):  # Newton steps finish the search: a short warm start
        steps = min(burn, WARM_START_STEPS)
    return max(steps, 100)


def _run_method(args, problem: _Problem, method: _Method, iters: int, burn: int, init: Any, seed) -> dict:
    """Run one method; its row, and its trace when it produced draws to report.

    A row is marked instead of filled when the method diverged, ran away (see
    :mod:`sgmc.diagnostics.runaway`: growth through the run, or draws far outside the Laplace
    approximation at the mode), did not mix (:mod:`sgmc.diagnostics.mixing`: its numbers are kept in
    the row for ``--output``'s file, not printed) or was interrupted by Ctrl-C.
    """
    model = problem.model if problem.sampling is None else problem.sampling
    options = {}
    if method.estimator in _CENTRED:
        n_iter, burn_in, start = iters - burn, 0, None
        options = {"opt_steps": _opt_steps(args, model, burn)}
    else:
        n_iter, burn_in, start = iters, burn, init
    row = {"method": method.label, "h": method.step_size}
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            # reported in the table instead
            warnings.simplefilter("ignore", SamplingInterruptedWarning)
            warnings.simplefilter("ignore", RunawayChainWarning)
            warnings.simplefilter("ignore", MixingWarning)
            trace = sample(
                model, method.sampler, method.estimator, step_size=method.step_size,
                batch_size=args.batch_size if method.batch_size is None else method.batch_size, n_iter=n_iter, burn_in=burn_in, chains=args.chains, init=start,
                rng=seed, progress=not args.no_progress, estimator_options=options or None,
            )
    except DivergenceError as exc:
        row.update(time=time.perf_counter() - t0, diverged=exc.iteration)
        return {"row": row, "trace": None}
    except KeyboardInterrupt:  # during the set-up (the mode search), before the iterations
        row.update(time=time.perf_counter() - t0, interrupted=0, of=n_iter)
        return {"row": row, "trace": None}
    elapsed = time.perf_counter() - t0
    row["time"] = elapsed
    if problem.sampling is not None:  # the draws of z as draws of theta, by the columns' names
        trace = user_trace(trace, problem.sampling)
    if trace.info["interrupted"]:
        row.update(interrupted=int(trace.info["iterations_done"]), of=n_iter)
        return {"row": row, "trace": None}
    found = [Runaway(**r) for r in trace.info.get("runaway", [])]
    found += find_runaway(trace.draws, trace.iterations, centre=problem.mode, precision=problem.precision)
    if found:
        first = min(found, key=lambda r: (r.kind != "scale", r.chain))
        row["runaway"] = first._asdict()
        trace.info["runaway"] = [r._asdict() for r in found]
        return {"row": row, "trace": trace, "report": False}
    passes = float(trace.info["setup_data_passes"]) + float(np.mean(trace.stats["data_passes"][:, -1]))
    mean = backends.to_numpy(trace.mean())
    row.update(
        passes=passes,
        log_loss=_log_loss(problem, trace.flat_draws()),
        mean_error=float(np.linalg.norm(mean - problem.reference_mean)),
        kept=trace.n_draws * trace.n_chains,
    )
    mixing = trace.info.get("mixing") or {}
    if mixing.get("mixed") is False:  # sgmc.diagnostics.mixing: a marked row (its numbers only in --output's file)
        row["unmixed"] = {"reasons": [r["text"] for r in mixing["reasons"]],
                          "fixes": list(dict.fromkeys(r["fix"] for r in mixing["reasons"]))}
        return {"row": row, "trace": trace, "report": False}
    return {"row": row, "trace": trace, "report": True}


#: How _mark writes a runaway finding's factor, by kind (sgmc.diagnostics.runaway).
_RUNAWAY_UNITS = {"scale": " x sqrt(d) sd", "spread": " x the posterior's sd"}


def _mark(r: dict) -> str | None:
    """What a row that holds no result says instead, or None for a result."""
    if "diverged" in r:
        return f"diverged at iteration {r['diverged']}, h = {r['h']:.3g}"
    if "interrupted" in r:
        where = "in its set-up" if r["interrupted"] == 0 else f"at iteration {r['interrupted']} of {r['of']}"
        return f"interrupted {where} (Ctrl-C); no result"
    if "runaway" in r:
        w = r["runaway"]
        what = {"scale": "far outside the Laplace scale", "spread": "spread far wider than the posterior"}.get(
            w["kind"], "growing without bound")
        return (f"ran away: chain {w['chain']} {what} from iteration {w['iteration']} "
                f"({w['factor']:.3g}{_RUNAWAY_UNITS.get(w['kind'], '-fold')}), h = {r['h']:.3g}; no result")
    if "unmixed" in r:
        return f"NOT MIXED (*): {r['unmixed']['reasons'][0]}, h = {r['h']:.3g}; no result"
    return None


def _coefficient_table(label: str, trace: Any) -> str:
    """The posterior of the coefficients by name: mean, sd, 89% HDI, bulk and tail ESS and R-hat (sgmc.diagnostics)."""
    table = trace.summary()
    cols = [c for c in table.columns if c in ("mean", "sd", "ess_bulk", "ess_tail", "r_hat") or c.startswith("hdi")]
    width = max(len("coefficient"), *(len(n) for n in table.index))
    rhat = "" if "r_hat" in cols else "; R-hat needs --chains 2 or more"
    lines = [f"posterior of the coefficients, {label} ({trace.n_chains} chain(s) x {trace.n_draws} kept draws{rhat}):",
             f"{'coefficient':<{width}}" + "".join(f"{c:>11}" for c in cols)]
    for i, name in enumerate(table.index):
        cells = [f"{float(table[c][i]):>11.0f}" if c.startswith("ess") else f"{float(table[c][i]):>11.4g}" for c in cols]
        lines.append(f"{name:<{width}}" + "".join(cells))
    return "\n".join(lines)


def _format_table(rows: list, metric: str) -> str:
    head = ("method", "h", "time (s)", "data passes", metric, "mean error")
    body = [
        (r["method"], f"{r['h']:.3g}", f"{r['time']:.2f}", f"{r['passes']:.1f}", f"{r['log_loss']:.4f}",
         f"{r['mean_error']:.3g}")
        for r in rows if _mark(r) is None
    ]
    widths = [max([len(head[i])] + [len(b[i]) for b in body]) for i in range(len(head))]
    widths[0] = max([widths[0]] + [len(r["method"]) for r in rows])
    line = lambda cells: "  ".join(  # noqa: E731
        c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
    )
    lines, ok = [], iter(body)
    for r in rows:
        mark = _mark(r)
        lines.append(line(next(ok)) if mark is None else f"{r['method'].ljust(widths[0])}  {mark}")
    return "\n".join([line(head), line(["-" * w for w in widths]), *lines])


def _check_output_path(path: str, flag: str) -> None:
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        msg = f"{flag}: directory {parent!r} does not exist"
        raise ValueError(msg)


def _check_writable(path: str, flag: str) -> None:
    """Fail before any sampling when ``path`` cannot be written (a file is made and removed beside it)."""
    _check_output_path(path, flag)
    if os.path.isdir(path):
        msg = f"{flag}: {path!r} is a directory; give a file name"
        raise ValueError(msg)
    parent = os.path.dirname(os.path.abspath(path))
    try:
        fd, probe = tempfile.mkstemp(prefix=".sgmc-probe-", dir=parent)
        os.close(fd)
        os.remove(probe)
        if os.path.exists(path) and not os.access(path, os.W_OK):
            raise PermissionError(f"{path} is read-only")
    except OSError as err:
        msg = f"{flag}: cannot write {path!r}: {err.strerror or err}"
        raise ValueError(msg) from None


def _output_paths(path: str, methods: list) -> dict:
    """The file of each method: ``path`` itself for one method, ``STEM-LABEL.EXT`` for several."""
    if len(methods) == 1:
        return {methods[0].label: path}
    stem, ext = os.path.splitext(path)
    return {m.label: f"{stem}-{m.label}{ext or '.npz'}" for m in methods}


def _save_traces(args, problem: _Problem, results: dict, paths: dict, settings: dict) -> list:
    """Each method's trace by :meth:`sgmc.Trace.save`, with the command's settings and its row in ``info``."""
    written = []
    for label, res in results.items():
        if res["trace"] is None:
            continue
        trace = res["trace"]
        trace.info["command"] = {
            **settings,
            "method": label,
            "step_size": res["row"]["h"],
            "row": res["row"],
            "reference_mean": [float(v) for v in problem.reference_mean],
            "reference": problem.reference_note,
            "problem": problem.description,
        }
        trace.save(paths[label])
        written.append(paths[label])
    return written


#: Environment variables that set a BLAS pool's size; where one is set, ``sgmc run`` leaves the pools alone.
BLAS_THREAD_VARS = ("SGMC_BLAS_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _blas_threads() -> Any:
    """A context that runs ``sgmc run`` with one BLAS thread, or ``SGMC_BLAS_THREADS`` threads.

    The run's matrix products are small (a minibatch, or N x d with d around 10): a second thread
    costs more in hand-offs than it saves, and on a loaded machine threads that wait for each other
    lose badly (asv_benchmarks/cli_time.py times both). Needs threadpoolctl; without it, or with one of
    the thread variables of the BLAS libraries set, nothing changes.
    """
    import contextlib

    want = os.environ.get("SGMC_BLAS_THREADS")
    if want is None and any(v in os.environ for v in BLAS_THREAD_VARS):
        return contextlib.nullcontext()
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    try:
        n = max(1, int(want)) if want is not None else 1
    except ValueError:
        msg = f"SGMC_BLAS_THREADS must be a positive integer; got {want!r}"
        raise ValueError(msg) from None
    return threadpool_limits(limits=n, user_api="blas")


def _command_run(args) -> int:
    with _blas_threads():
        return _run_command(args)


def _run_command(args) -> int:
    cfg = QUICK if args.quick else FULL
    if args.chains is None:
        args.chains = cfg["chains"]
    batch_given = args.batch_size is not None
    if not batch_given:
        args.batch_size = 0.01
    samplers = _split_names(args.sampler, CLI_SAMPLERS, "--sampler", ["sgld"])
    estimators = _split_names(args.estimator, CLI_ESTIMATORS, "--estimator",
                              ["minibatch", "cv"])
    methods = _methods(samplers, estimators)
    iters = args.iters if args.iters is not None else cfg["iters"]
    burn = args.burn_in if args.burn_in is not None else iters // 2
    if burn >= iters:
        msg = f"--burn-in must be smaller than --iters; got --burn-in {burn} with --iters {iters}"
        raise ValueError(msg)
    if args.step_size is not None and len(args.step_size) not in (1, len(methods)):
        msg = (
            f"--step-size takes one value or one per method ({len(methods)}: "
            f"{', '.join(m.label for m in methods)}); got {len(args.step_size)}"
        )
        raise ValueError(msg)
    if args.data is None and (args.target != "-1" or args.intercept or args.test_fraction is not None):
        flag = "--target" if args.target != "-1" else "--intercept" if args.intercept else "--test-fraction"
        msg = f"{flag} applies to --data; no --data file was given"
        raise ValueError(msg)
    if args.data is not None and (args.n_data is not None or args.dim is not None):
        flag = "--n-data" if args.n_data is not None else "--dim"
        msg = f"{flag} sets the size of simulated data; it cannot be combined with --data"
        raise ValueError(msg)
    if args.plot is not None:
        _check_writable(args.plot, "--plot")
        Figure, _ = _matplotlib()
        formats = Figure().canvas.get_supported_filetypes()
        ext = os.path.splitext(args.plot)[1].lower().lstrip(".")
        if ext not in formats:
            msg = f"--plot: cannot write {ext or 'a file without extension'!r}; use one of {', '.join(sorted(formats))}"
            raise ValueError(msg)
    out_paths = {}
    if args.output is not None:
        out_paths = _output_paths(args.output, methods)
        for path in out_paths.values():
            _check_writable(path, "--output")

    # Seeds: the data, the mode search and the reference from --seed; each method's from --seed and its
    # label (so a method's row is the same whichever other methods are listed).
    seeds = np.random.SeedSequence(args.seed).spawn(3)
    problem = _load_problem(args, cfg)
    model = problem.model
    be = backends.get_backend(model.xp)
    _status(args, f"sgmc run: {problem.description}")

    mode_rng = backends.default_rng(seeds[0], backend=be, device=model.device)
    t0 = time.perf_counter()
    nb = args.batch_size
    nb = max(1, min(model.n_data, int(nb * model.n_data) if isinstance(nb, float) else int(nb)))
    problem.mode, problem.precision, n_newton = laplace(model, mode_rng, batch_size=nb, n_steps=WARM_START_STEPS,
                                                        progress=not args.no_progress)
    eig = backends.to_numpy(model.xp.linalg.eigvalsh(problem.precision))
    problem.lambda_max = float(eig[-1])
    step_lambda, step_precision, step_mode, step_model = problem.lambda_max, problem.precision, problem.mode, model
    if args.data is not None:  # columns on their own scales: sample in z, report theta (see _condition)
        _condition(problem)
        step_precision, step_mode, step_model = problem.z_precision, problem.z_mode, problem.sampling
        step_lambda = float(backends.to_numpy(model.xp.linalg.eigvalsh(step_precision))[-1])
    mode_note = (f"mode by Adam ({WARM_START_STEPS} steps) and {n_newton} Newton steps with exact Hessians, "
                 f"{time.perf_counter() - t0:.1f} s")
    if problem.kind == "linear":
        mean, _ = model.posterior()
        problem.reference_mean = backends.to_numpy(mean)
        problem.reference_note = "closed-form posterior mean of the conjugate linear model"
    else:
        _status(args, "computing the MALA reference ...")
        ref_iters = args.reference_iters
        if ref_iters is None:
            ref_iters = _reference_iters(model.dim, cfg["ref_chains"])
        problem.reference_mean, problem.reference_note = _mala_reference(
            args, problem, problem.precision, cfg["ref_chains"], ref_iters, seeds[1]
        )
    for k, m in enumerate(methods):
        if args.step_size is not None:
            m.step_size = args.step_size[0] if len(args.step_size) == 1 else args.step_size[k]
        else:
            unit_rng = backends.default_rng(_method_seed(args.seed, "unit " + m.label), backend=be,
                                            device=model.device)
            unit = _step_unit(m, step_model, step_precision, step_mode, nb, unit_rng)
            m.step_size = _default_step(m, step_lambda, unit)
            if problem.sampling is not None:  # SGLD and ULA in z: the h whose sds are closest for this run
                m.step_size = _sd_step(args, problem, m, nb, iters, burn, unit_rng, batch_given)

    init_gen = np.random.default_rng(seeds[2])
    init = backends.asarray(init_gen.standard_normal((args.chains, model.dim)), backend=be,
                            dtype=model.dtype, device=model.device)
    results = {}
    stopped = None
    for m in methods:
        _status(args, f"running {m.label} (h = {m.step_size:.3g}) ...")
        results[m.label] = _run_method(args, problem, m, iters, burn, init, _method_seed(args.seed, m.label))
        if "interrupted" in results[m.label]["row"]:
            stopped = m.label
            break
    rows = [r["row"] for r in results.values()]
    ran = {k: v for k, v in results.items() if v["trace"] is not None and v.get("report")}

    # Files first: a closed standard output (``sgmc run ... | head``) must not lose them.
    notes = []
    if stopped is None:
        # unmixed chains are plotted too: the plot is where they show
        shown = {k: v for k, v in results.items() if v["trace"] is not None and (v.get("report") or "unmixed" in v["row"])}
        if args.plot is not None and shown:
            path = trace_plot({k: v["trace"] for k, v in shown.items()}, args.plot,
                              coords=tuple(range(min(3, model.dim))), reference=problem.reference_mean)
            notes.append(f"trace plot written to {path}")
        if args.output is not None:
            settings = {"argv": list(getattr(args, "argv", []) or []), "seed": args.seed, "iters": iters,
                        "burn_in": burn, "chains": args.chains, "batch_size": args.batch_size,
                        "backend": be.name, "model": problem.kind}
            written = _save_traces(args, problem, results, out_paths, settings)
            if written:
                notes.append(f"traces written to {', '.join(written)} (sgmc.Trace.load opens them)")
    elif args.plot is not None or args.output is not None:
        notes.append("no files written: the command was interrupted")

    metric = "log-loss"
    sub = [v["trace"] for k, v in ran.items() if v["trace"].info["estimator"] != "full"]
    nb = args.batch_size
    n_batch = (sub[0].stats["batch_size"][0, 0] if sub else
               max(1, min(model.n_data, int(round(nb * model.n_data)) if isinstance(nb, float) else int(nb))))
    print(f"sgmc run: {problem.description}")
    print(
        f"backend {be.name}; {args.chains} chain(s) per method; {iters} iterations "
        f"per method ({burn} burn-in; cv: {_opt_steps(args, model, burn)} mode-search steps, Newton steps where "
        f"the model has Hessians, then {iters - burn} iterations); subsample n = {int(n_batch)}"
    )
    print()
    print(_format_table(rows, metric))
    print()
    if args.data is not None:  # the fitted coefficients by column name
        for label, res in ran.items():
            print(_coefficient_table(label, res["trace"]))
            print()
        if ran:
            print("coefficients: hdi89 the 89% highest density interval; ess_bulk/ess_tail and r_hat rank-normalised "
                  "(Vehtari et al. 2021), from sgmc.diagnostics.summary")
    if problem.kind == "logistic":
        print(
            f"log-loss: held-out log-loss (review, section 6.1) of the posterior predictive probability, "
            f"the average of sigmoid(x . theta) over up to {LOG_LOSS_DRAWS} kept draws"
        )
    else:
        print(
            f"log-loss: held-out negative log posterior-predictive density, averaged over up to "
            f"{LOG_LOSS_DRAWS} kept draws"
        )
    print("data passes: per-datum evaluations per chain / N, those of the sampler (a Fisher metric) and of the "
          "set-up (mode search) included; time: wall seconds of sgmc.sample")
    ref_norm = float(np.linalg.norm(problem.reference_mean))
    print(f"mean error: ||posterior mean - reference mean||_2, with ||reference mean||_2 = {ref_norm:.4f}")
    print(f"reference: {problem.reference_note}; {mode_note}")
    print(f"step sizes: {'given by --step-size' if args.step_size else 'from the curvature at the mode'}; "
          f"lambda_max = {problem.lambda_max:.4g}")
    if problem.sampling is not None:
        print(_conditioning_note(problem, methods))
    if any("diverged" in r for r in rows):
        print("diverged: positions stopped being finite at that iteration; use a smaller --step-size")
    if any("runaway" in r for r in rows):
        print("ran away: the draws stayed finite but grew without bound or lie far outside the Laplace "
              "approximation at the mode (sgmc.diagnostics.runaway); use a smaller --step-size")
    for r in rows:
        if "unmixed" in r:
            print(f"(*) {r['method']} not mixed: {'; '.join(r['unmixed']['reasons'])}. Fix: "
                  f"{'; or '.join(r['unmixed']['fixes'])} (sgmc.diagnostics.mixing)")
    for note in notes:
        print(note)
    if stopped is not None:
        left = [m.label for m in methods][len(results):]
        print(f"interrupted during {stopped}{'; not run: ' + ', '.join(left) if left else ''}")
        sys.stdout.flush()
        raise KeyboardInterrupt
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sgmc`` command; returns the exit status.

    Parameters
    ----------
    argv : sequence of str, optional
        Arguments without the program name; ``sys.argv[1:]`` by default.

    Returns
    -------
    int
        0 on success, 2 for a usage or data error (reported on one line on stderr), 130 when
        interrupted by Ctrl-C (one line on stderr, no traceback; ``sgmc run`` first prints the table
        of the methods that finished, the interrupted one marked, and runs no further method), 141
        when standard output was closed by its reader (``sgmc run ... | head``), the files of
        ``--output`` and ``--plot`` having been written before anything was printed.

    Examples
    --------
    >>> from sgmc.cli import main
    >>> main(["run", "--quick", "--no-progress", "--model", "linear", "--iters", "200"])  # doctest: +SKIP
    0
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help(sys.stderr)
            return 2
        args.argv = list(sys.argv[1:] if argv is None else argv)
        command = _command_reproduce if args.command == "reproduce" else _command_run
        with progress_scope(False if args.no_progress else True):
            code = command(args)
        sys.stdout.flush()  # a reader that closed the pipe is found here, not in the interpreter's last flush
        return code
    except SystemExit as exc:  # --help and --version
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    except KeyboardInterrupt:
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            _silence_stdout()
        print(f"\n{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        _silence_stdout()
        return 141
    except _Failure as exc:
        message = str(exc)
    except (ValueError, TypeError, FloatingPointError, ImportError, OSError, RuntimeError) as exc:
        message = str(exc)
    message = " ".join(message.split())
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def _silence_stdout() -> None:
    """Point standard output at the null device, so that the interpreter's final flush stays quiet."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (captured output)
        pass


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
