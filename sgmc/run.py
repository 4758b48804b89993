"""``sgmc.sample``: run stochastic gradient MCMC chains in one call.

The runner wires a model, a gradient estimator and a sampler, draws the starting points, lets the
estimator prepare (control variates find their centre and the chains start there), then advances all
chains together for ``n_iter`` iterations. Everything that can be checked is checked once before the
loop; inside it the only work besides the sampler's step is writing kept draws into preallocated
arrays and, every ``check_every`` iterations, one finiteness check that turns a diverging step size
into a clear error instead of a trace of NaNs.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from . import backends
from ._array_api import as_float_array, check_finite, check_int, is_array
from .estimators import FullGradient, make_estimator
from .estimators.base import check_model
from .models.base import check_compatible
from .samplers import make_sampler, step_sizes
from .trace import Trace

__all__ = ["sample"]


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
) -> Trace:
    """Run stochastic gradient MCMC on ``model`` and return a :class:`~sgmc.Trace`.

    Parameters
    ----------
    model : Model
        A posterior following the :mod:`sgmc.models` protocol; its arrays decide the backend.
    sampler : str or Sampler, default "sgld"
        ``"sgld"``, ``"sghmc"``, ``"sgnht"``, ``"psgld"``, ``"ula"``, ``"mala"`` or a configured
        sampler object (see :mod:`sgmc.samplers`).
    estimator : str or callable, default "minibatch"
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
        Independent chains, advanced together as one array axis.
    burn_in, thin : int
        Iterations discarded at the start, and the interval between kept draws.
    init : array (dim,) or (chains, dim), optional
        Starting positions; default N(0, I) draws, or the control-variate centre for ``"cv"``.
    rng : None, int, SeedSequence or Generator
        Seed (SPEC 7). Independent streams are spawned for initialisation, estimator setup and the chains.
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
        ``callback(k, state)`` after every iteration (it runs inside the loop: keep it cheap).

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
    model = check_model(model)
    xp = model.xp
    n_iter = check_int(n_iter, "n_iter")
    chains = check_int(chains, "chains")
    thin = check_int(thin, "thin")
    check_every = check_int(check_every, "check_every")
    burn_in = check_int(burn_in, "burn_in", minimum=0)
    if burn_in >= n_iter:
        msg = f"`burn_in`={burn_in} must be smaller than `n_iter`={n_iter}"
        raise ValueError(msg)
    if store_grads not in (False, True, "estimate", "full"):
        msg = f"`store_grads` must be False, True, 'estimate' or 'full'; got {store_grads!r}"
        raise ValueError(msg)
    hs = step_sizes(step_size, n_iter)

    smp = make_sampler(sampler, model, **(sampler_options or {}))
    if getattr(smp, "requires_exact_gradient", False):
        if isinstance(estimator, str) and estimator not in ("minibatch", "full"):
            msg = f"sampler {smp.name!r} uses the exact gradient; got estimator={estimator!r} (use 'full')"
            raise ValueError(msg)
        if not isinstance(estimator, str) and not isinstance(estimator, FullGradient):
            msg = f"sampler {smp.name!r} uses the exact gradient; pass estimator='full'"
            raise ValueError(msg)
        estimator = "full" if isinstance(estimator, str) else estimator
    est = make_estimator(estimator, model, batch_size, **(estimator_options or {}))

    backend = backends.get_backend(xp)
    rng = backends.default_rng(rng, backend=backend, device=model.device)
    init_rng, prep_rng, run_rng = rng.spawn(3)

    position = _initial_position(model, init, chains, init_rng)
    t_setup = time.perf_counter()
    start = est.prepare(prep_rng, position) if hasattr(est, "prepare") else None
    if start is not None and init is None:
        position = start
    setup_time = time.perf_counter() - t_setup

    n_data = max(int(model.n_data), 1)
    evals = [0]

    def grad_fn(r, x):
        g, info = est(r, x)
        evals[0] += info.n_evals
        return g, info

    state = smp.init(run_rng, position, grad_fn)

    kept = list(range(burn_in, n_iter, thin))
    n_keep = len(kept)
    dim = model.dim
    draws = xp.empty((chains, n_keep, dim), dtype=model.dtype, device=model.device)
    grads = xp.empty((chains, n_keep, dim), dtype=model.dtype, device=model.device) if store_grads else None
    batch = getattr(est, "batch_size", model.n_data)
    wall = [0.0] * n_iter
    passes = [0.0] * n_iter

    bar = _progress_bar(progress, n_iter, f"{smp.name}/{getattr(est, 'name', 'estimator')}")
    bar_every = max(1, n_iter // 200)
    j = 0
    next_keep = kept[0] if kept else n_iter
    t0 = time.perf_counter()
    # Overflow inside a diverging chain is reported by the finiteness check below as a
    # FloatingPointError naming the step size, not as a backend warning.
    with backend.quiet_float():
        for k in range(n_iter):
            state = smp.step(run_rng, state, grad_fn, hs[k])
            if k == next_keep:
                draws[:, j, :] = state.position
                if store_grads == "full":
                    grads[:, j, :] = model.grad_log_posterior(state.position)
                elif store_grads:
                    grads[:, j, :] = state.grad
                j += 1
                next_keep = kept[j] if j < n_keep else n_iter
            if callback is not None:
                callback(k, state)
            passes[k] = evals[0] / n_data
            wall[k] = time.perf_counter() - t0
            if (k + 1) % check_every == 0 or k + 1 == n_iter:
                _check_diverged(xp, state.position, k, hs[k], smp.name)
            if bar is not None and ((k + 1) % bar_every == 0 or k + 1 == n_iter):
                bar.update((k + 1) - bar.n)
    backend.synchronize()
    if bar is not None:
        bar.close()

    info = {
        "sampler": smp.name,
        "estimator": getattr(est, "name", type(est).__name__),
        "n_iter": n_iter,
        "burn_in": burn_in,
        "thin": thin,
        "chains": chains,
        "n_data": model.n_data,
        "dim": dim,
        "backend": backend.name,
        "dtype": str(model.dtype),
        "grads": (("full" if store_grads == "full" else "estimate") if store_grads else None),
        "setup_time": setup_time,
        "setup_data_passes": getattr(est, "setup_evals", 0) / n_data,
        "sampling_time": wall[-1],
    }
    for key, value in smp.state_stats(state).items():
        info[key] = backends.to_numpy(value).tolist()
    if "n_accepted" in info:
        info["acceptance_rate"] = [a / n_iter for a in info["n_accepted"]]
    stats = {
        "step_size": backends.asarray(hs, backend="numpy"),
        "batch_size": backends.asarray([batch] * n_iter, backend="numpy"),
        "data_passes": backends.asarray(passes, backend="numpy"),
        "wall_time": backends.asarray(wall, backend="numpy"),
    }
    return Trace(draws=draws, grads=grads, iterations=kept, stats=stats, info=info)


def _check_diverged(xp, position, k, h, name):
    if not bool(xp.all(xp.isfinite(position))):
        msg = (
            f"{name} chain diverged by iteration {k + 1}: positions are no longer finite with "
            f"step_size={h:g}; decrease the step size (SGLD on a target whose log density has a "
            "gradient with Lipschitz constant M is stable only for h < 4/M)"
        )
        raise FloatingPointError(msg)


def _progress_bar(progress, total, desc):
    if not progress:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc, leave=False, mininterval=0.5)

