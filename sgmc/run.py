"""``sgmc.sample``: run stochastic gradient MCMC chains in one call.

The runner validates everything once, wires a model, a gradient estimator and a sampler, draws the
starting points, lets the estimator prepare (control variates find their centre and the chains start
there), splits the chains into groups with a stream each, runs the groups in this process or on an
executor (:mod:`sgmc.executors`, each group through the loop of :mod:`sgmc.chains`), and assembles a
:class:`~sgmc.Trace` from what every step reported.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from . import backends
from ._array_api import as_float_array, check_finite, is_array
from ._validation import check_choice, check_int
from .estimators import FullGradient, SupportsPrepare, make_estimator
from .executors import GroupTask, RunSpec, check_executor, run_groups
from .models.base import check_compatible, check_target, require
from .samplers import make_sampler, step_sizes
from .trace import Trace

__all__ = ["sample", "DEFAULT_GROUP_SIZE"]

#: Chains per group when ``group_size`` is not given: large enough that the chains of a group share
#: the per-iteration Python overhead, small enough that 32 chains make 2 groups for 2 processes.
DEFAULT_GROUP_SIZE = 16


def _initial_position(model, init, chains, rng):
    xp = model.xp
    if init is None:
        return rng.normal((chains, model.dim), dtype=model.dtype)
    if not is_array(init):
        init = backends.asarray(init, backend=backends.get_backend(xp), dtype=model.dtype, device=model.device)
    check_compatible(model, init, "init")
    init = as_float_array(xp, init, model.dtype, "init")
    if init.ndim == 1 and init.shape[0] == model.dim:
        init = xp.broadcast_to(init, (chains, model.dim))
    if tuple(init.shape) != (chains, model.dim):
        msg = f"`init` must have shape ({model.dim},) or ({chains}, {model.dim}); got {tuple(init.shape)}"
        raise ValueError(msg)
    check_finite(xp, init, "init")
    return init


def _estimator_for(smp: Any, estimator: Any, model: Any, batch_size: Any, options: dict) -> Any:
    """The estimator a sampler runs with: exact samplers get the full gradient."""
    if smp.exact:
        if isinstance(estimator, str):
            if estimator not in ("minibatch", "full"):
                msg = f"sampler {smp.name!r} uses the exact gradient; got estimator={estimator!r} (use 'full')"
                raise ValueError(msg)
            return FullGradient(model, log_density=smp.needs_log_density, **options)
        if not isinstance(estimator, FullGradient):
            msg = f"sampler {smp.name!r} uses the exact gradient; pass estimator='full'"
            raise ValueError(msg)
        return estimator
    return make_estimator(estimator, model, batch_size, **options)


def _groups(chains: int, group_size: int) -> list:
    return [(start, min(start + group_size, chains)) for start in range(0, chains, group_size)]


def sample(
    model: Any,
    sampler: Any = "sgld",
    estimator: Any = "minibatch",
    *,
    step_size: Any,
    batch_size: Any = None,
    n_iter: int = 1000,
    chains: int = 1,
    burn_in: int = 0,
    thin: int = 1,
    init: Any = None,
    rng: Any = None,
    store_grads: bool | str = False,
    progress: bool = True,
    check_every: int = 100,
    sampler_options: dict | None = None,
    estimator_options: dict | None = None,
    callback: Callable | None = None,
    executor: Any = None,
    group_size: int | None = None,
    backend: Any = None,
) -> Trace:
    """Run stochastic gradient MCMC on ``model`` and return a :class:`~sgmc.Trace`.

    Parameters
    ----------
    model : Model
        A posterior following the :mod:`sgmc.models` protocol; its arrays decide the backend.
    sampler : str or Sampler, default "sgld"
        ``"sgld"``, ``"sghmc"``, ``"sgnht"``, ``"psgld"``, ``"ula"``, ``"mala"`` or a configured
        sampler object (see :mod:`sgmc.samplers`).
    estimator : str or GradientEstimator, default "minibatch"
        ``"full"``, ``"minibatch"``, ``"cv"``, ``"svrg"`` or a configured estimator. ULA and MALA
        always use the exact gradient.
    step_size : float, schedule or sequence
        h in the review's convention (SGLD: theta' = theta + (h/2) g + N(0, h I)); a callable
        ``k -> h_k`` such as :class:`sgmc.samplers.polynomial`, or ``n_iter`` values.
    batch_size : int or float, optional
        n for subsampling estimators (a float in (0, 1) is a fraction of N); default N / 100.
    n_iter : int
        Iterations after setup (burn-in included).
    chains : int
        Independent chains, advanced together as one array axis within each group.
    burn_in, thin : int
        Iterations discarded at the start, and the interval between kept draws.
    init : array (dim,) or (chains, dim), optional
        Starting positions; default N(0, I) draws, or the control-variate centre for ``"cv"``.
    rng : None, int, SeedSequence or Generator
        Seed (SPEC 7). Independent streams are spawned for initialisation, estimator set-up and each
        group of chains.
    store_grads : bool or {"estimate", "full"}
        Keep the gradient paired with each kept draw: the estimate the sampler used (``True`` or
        ``"estimate"``, free) or the exact full-data gradient (``"full"``, one O(N) pass per kept draw).
    progress : bool
        Show a tqdm progress bar when tqdm is installed.
    check_every : int
        Interval of the divergence check.
    sampler_options, estimator_options : dict, optional
        Keyword arguments for samplers and estimators given by name.
    callback : callable, optional
        ``callback(k, state)`` after every iteration of every group (in process only; keep it cheap).
    executor : None, "processes", "dask", concurrent.futures.Executor or distributed.Client, optional
        Where the groups run: ``None`` runs them in this process one after another; a
        ``ProcessPoolExecutor`` (or ``"processes"``, a pool of one process per core made for this
        run) in local processes; a Dask ``distributed.Client`` (or its ``get_executor()``, or
        ``"dask"`` for the client of this process) on a cluster (``pip install 'sgmc[dask]'``). The
        draws are the same wherever the groups run (bit for bit on NumPy). See
        ``docs/chains.md``.
    group_size : int, optional
        Chains per group (default :data:`DEFAULT_GROUP_SIZE`). Each group has its own random
        stream, so the draws depend on the group size but never on the executor.
    backend : str or Backend, optional
        Run on this backend: the model's data (and an array ``init``) are copied there once, before
        anything else (:func:`sgmc.backends.move`); ``"cupy"`` runs everything on the current GPU,
        with the CUDA kernels of the hot loops. A missing library or GPU raises with what to
        install (``pip install "sgmc[gpu]"``). By default the model's arrays decide.

    Returns
    -------
    Trace

    Raises
    ------
    FloatingPointError
        When a chain's position stops being finite (the step size is too large).

    Examples
    --------
    >>> import numpy as np
    >>> import sgmc
    >>> from sgmc.models import LinearRegression
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(1000, 2)); y = X @ np.array([1.0, -1.0]) + rng.normal(size=1000)
    >>> trace = sgmc.sample(LinearRegression(X, y), "sgld", step_size=1e-4, batch_size=100,
    ...                     n_iter=2000, burn_in=500, chains=4, rng=1, progress=False)
    >>> trace.draws.shape
    (4, 1500, 2)
    >>> np.round(trace.mean(), 1)
    array([ 1., -1.])
    """
    if backend is not None:
        model = backends.move(model, backend)
    model = check_target(model)
    if backend is not None and is_array(init):
        init = backends.move(init, backend, device=model.device)
    xp = model.xp
    n_iter = check_int(n_iter, "n_iter")
    chains = check_int(chains, "chains")
    thin = check_int(thin, "thin")
    check_every = check_int(check_every, "check_every")
    burn_in = check_int(burn_in, "burn_in", minimum=0)
    group_size = check_int(group_size if group_size is not None else DEFAULT_GROUP_SIZE, "group_size")
    if burn_in >= n_iter:
        msg = f"`burn_in`={burn_in} must be smaller than `n_iter`={n_iter}"
        raise ValueError(msg)
    check_choice(store_grads, "store_grads", (False, True, "estimate", "full"))
    if store_grads == "full":
        require(model, ("grad_log_posterior",), "store_grads='full'")
    check_executor(executor)
    hs = step_sizes(step_size, n_iter)

    smp = make_sampler(sampler, model, **(sampler_options or {}))
    est = _estimator_for(smp, estimator, model, batch_size, dict(estimator_options or {}))

    backend = backends.get_backend(xp)
    rng = backends.default_rng(rng, backend=backend, device=model.device)
    init_rng, prep_rng, run_rng = rng.spawn(3)

    position = _initial_position(model, init, chains, init_rng)
    t_setup = time.perf_counter()
    setup_evals = 0.0
    if isinstance(est, SupportsPrepare):
        prepared = est.prepare(prep_rng, position)
        est = prepared.estimator
        setup_evals += prepared.n_evals
        if prepared.start is not None and init is None:
            position = prepared.start
    setup_evals += float(est.init_cost)
    setup_time = time.perf_counter() - t_setup

    bounds = _groups(chains, group_size)
    streams = run_rng.spawn(len(bounds))
    tasks = [GroupTask(g, streams[g], position[a:b, :]) for g, (a, b) in enumerate(bounds)]
    kept = list(range(burn_in, n_iter, thin))
    score = model.grad_log_posterior if store_grads == "full" else None
    spec = RunSpec(smp, est, hs, kept, store_grads, score, check_every, backend)

    bar = _progress_bar(progress, n_iter * len(tasks), f"{smp.name}/{est.name}")
    try:
        results = run_groups(spec, tasks, executor, bar=bar, progress_every=max(1, n_iter // 200),
                             callback=callback)
    finally:
        if bar is not None:
            bar.close()
    backend.synchronize()
    return _assemble(model, smp, est, spec, results, bounds, hs, setup_time, setup_evals,
                     n_iter=n_iter, burn_in=burn_in, thin=thin, chains=chains)


def _assemble(model, smp, est, spec, results, bounds, hs, setup_time, setup_evals, **settings) -> Trace:
    xp = model.xp
    hx = backends.get_backend("numpy").xp
    one = len(results) == 1
    draws = results[0].draws if one else xp.concat([r.draws for r in results], axis=0)
    grads = None
    if spec.store_grads:
        grads = results[0].grads if one else xp.concat([r.grads for r in results], axis=0)
    stats = {"step_size": hx.asarray(hs, dtype=hx.float64)}
    for key in results[0].stats:
        stats[key] = hx.concat([hx.asarray(r.stats[key]) for r in results], axis=0)
    n_data = max(int(model.n_data), 1)
    stats["data_passes"] = hx.cumulative_sum(stats["n_evals"], axis=1) / n_data
    info = {
        "sampler": smp.name,
        "estimator": est.name,
        **settings,
        "n_data": model.n_data,
        "dim": model.dim,
        "backend": backends.get_backend(xp).name,
        "dtype": str(model.dtype),
        "grads": (("full" if spec.store_grads == "full" else "estimate") if spec.store_grads else None),
        "groups": [list(b) for b in bounds],
        "setup_time": setup_time,
        "setup_data_passes": setup_evals / n_data,
        "sampling_time": float(hx.max(stats["wall_time"][:, -1])),
    }
    if "accepted" in stats:
        info["n_accepted"] = hx.astype(hx.sum(stats["accepted"], axis=1), hx.int64).tolist()
        info["acceptance_rate"] = hx.mean(stats["accepted"], axis=1).tolist()
    for key in stats:
        if key not in ("step_size", "n_evals", "batch_size", "data_passes", "wall_time", "accepted", "accept_prob"):
            info[key] = stats[key][:, -1].tolist()
    return Trace(draws=draws, grads=grads, iterations=spec.kept, stats=stats, info=info)


def _progress_bar(progress, total, desc):
    if not progress:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc, leave=False, mininterval=0.5)
