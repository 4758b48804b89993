"""One method of ``sgmc run``: its run through :func:`sgmc.sample` and the numbers of its row.

A row holds the wall time, the data passes, the held-out log-loss of the posterior predictive
(:func:`_log_loss`) and the distance of the posterior mean from the reference; a method that
diverged, ran away, did not mix or was interrupted gets a row that says so instead.
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Any

import numpy as np

from .. import backends
from ..chains import DivergenceError
from ..conditioning import user_trace
from ..diagnostics import log_loss, predictive_log_lik
from ..diagnostics.mixing import MixingWarning
from ..diagnostics.runaway import Runaway, RunawayChainWarning, find_runaway
from ..run import SamplingInterruptedWarning, sample
from .methods import _CENTRED, _Method, _opt_steps
from .problem import _Problem

LOG_LOSS_DRAWS = 1000


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
