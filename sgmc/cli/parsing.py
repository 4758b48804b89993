"""Parsing the ``sgmc`` command line: the parser, its argument types and its one-line errors.

Errors in the arguments are raised as :class:`_Failure` (``_fail``) and reported by
:func:`sgmc.cli.main` on one line, ``sgmc: error: ...``, with exit status 2; an unknown choice names
the closest one.
"""

from __future__ import annotations

import argparse
import difflib
import math
import re
from typing import Sequence

from .. import __version__, backends
from .._names import canonical
from .._validation import did_you_mean
from .methods import CLI_SAMPLERS

__all__ = ["build_parser"]

PROG = "sgmc"


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
