"""The README's main job, ``sgmc run``, whole and by phase.

``MainJob`` times the whole default job (the review's section 6.1 logistic regression, N = 10^5,
d = 10, SGLD and SGLD-CV, the exact MALA reference and the held-out log-loss) as the command runs it,
in this process. ``Reference`` times the exact reference alone (two pilot runs and two MALA chains of
300 iterations on the whitened posterior) and ``ZVMean`` the zero-variance estimate of the mean from
those draws, at d = 10 (degree 2) and d = 50 (degree 1, 1500 iterations).
"""

from __future__ import annotations

import contextlib
import io

import numpy as np

from .common import safe_import

with safe_import():
    from sgmc import backends
    from sgmc.cli import main
    from sgmc.cli.problem import _Problem
    from sgmc.cli.reference import _mala_reference, _reference_iters
    from sgmc.datasets import logistic_regression_data
    from sgmc.diagnostics import zv_mean
    from sgmc.models import LogisticRegression
    from sgmc.optimize import laplace


class MainJob:
    """``sgmc run --no-progress`` with no other option: the README's set-up command's job."""

    timeout = 300
    number = 1
    repeat = 3
    warmup_time = 0

    def time_sgmc_run(self):
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = main(["run", "--no-progress"])
        assert code == 0


class _Args:
    no_progress = True


class Reference:
    """The exact MALA reference with zero-variance control variates, N = 10^5."""

    params = [10, 50]
    param_names = ["dim"]
    timeout = 300
    number = 1
    repeat = 3

    def setup(self, dim):
        d = logistic_regression_data(n=100_000, dim=dim, n_test=1000, rng=0)
        model = LogisticRegression(d.X, d.y)
        fit = laplace(model, 0, progress=False)
        self.problem = _Problem(model, None, None, "logistic", "", mode=fit.mode)
        self.precision = fit.precision
        self.iters = _reference_iters(dim, 2)

    def time_reference(self, dim):
        _mala_reference(_Args(), self.problem, self.precision, 2, self.iters, np.random.SeedSequence(1))


class ZVMean:
    """``zv_mean`` on 2 chains of draws and scores: degree 2 at d = 10, degree 1 at d = 50."""

    params = [[(10, 2, 270), (50, 1, 1350)]]  # one axis whose values are (dim, order, draws) cases
    param_names = ["dim, order, draws per chain"]

    def setup(self, case):
        dim, order, n = case
        r = np.random.default_rng(0)
        self.x = r.gamma(5.0, size=(2, n, dim))
        self.g = 4.0 / self.x - 1.0
        self.order = order

    def time_zv_mean(self, case):
        zv_mean(self.x, self.g, order=self.order)
