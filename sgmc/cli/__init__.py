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

Layout, one concept per module (each imports only those above it in this list):

- ``methods``: the samplers and estimators the command runs, a method's label, seed and default step
- ``parsing``: the argument parser, its argument types and its one-line errors
- ``problem``: the run's set-up: the data (simulated or ``--data``), the model, the coordinates sampled
- ``reference``: the exact reference mean (MALA with zero-variance control variates)
- ``fit``: one method's run through :func:`sgmc.sample` and the numbers of its row
- ``report``: the printed table, the marks of rows without a result, the coefficients by name
- ``output``: ``--output`` and ``--plot`` checked before anything runs; the traces saved
- ``run_command``: ``sgmc run`` from the parsed arguments to the printed report, on one BLAS thread
- ``reproduce``: ``sgmc reproduce NAME`` (:mod:`sgmc.experiments`)
- ``entry``: :func:`main`, the exit status of every outcome

``sgmc = "sgmc.cli:main"`` is the console script; ``python -m sgmc`` and ``python -m sgmc.cli`` run the
same :func:`main`.
"""

from __future__ import annotations

from .entry import main
from .parsing import build_parser

# The command's settings, importable from sgmc.cli as before (the functions behind them live in the
# modules above).
from .fit import LOG_LOSS_DRAWS  # noqa: F401
from .methods import (CLI_ESTIMATORS, CLI_SAMPLERS, MOMENTUM_FACTORS, MOMENTUM_SAMPLERS, STEP_FACTORS,  # noqa: F401
                      UNIT_FACTORS, WARM_START_STEPS)
from .parsing import PROG  # noqa: F401
from .problem import FULL, MIX_ESS, QUICK  # noqa: F401
from .reference import MALA_TARGET_ACCEPTANCE, REF_ITERS_MAX, REF_ITERS_MIN, REF_PILOT_ITERS, REF_PILOTS  # noqa: F401
from .run_command import BLAS_THREAD_VARS  # noqa: F401

__all__ = ["main", "build_parser"]
