"""``sgmc run``: the set-up, the reference, each method's run, the files and the printed report, in order.

Seeds: the data, the mode search and the reference come from ``--seed``; each method's from ``--seed``
and its label, so a method's row is the same whichever other methods are listed. The run holds its
BLAS pools to one thread (``SGMC_BLAS_THREADS`` chooses another count).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import numpy as np

from .. import backends
from ..optimize import laplace
from ..plot import _matplotlib, trace_plot
from .fit import LOG_LOSS_DRAWS, _run_method
from .methods import (CLI_ESTIMATORS, CLI_SAMPLERS, WARM_START_STEPS, _default_step, _method_seed, _methods,
                      _opt_steps, _step_unit)
from .output import _check_writable, _output_paths, _save_traces
from .parsing import _split_names
from .problem import FULL, QUICK, _condition, _conditioning_note, _load_problem, _sd_step, _status
from .reference import _mala_reference, _reference_iters
from .report import _coefficient_table, _format_table

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
