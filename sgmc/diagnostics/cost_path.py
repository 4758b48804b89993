"""Accuracy along a run against its cost: the error of the running mean, or the KSD, after k kept draws.

Comparing samplers fairly means plotting accuracy against what each one spent, not against the
iteration (Nemeth and Fearnhead 2021, section 6: control-variate methods pay a mode search, and
estimators differ in gradient evaluations per step). :func:`convergence_path` evaluates, at a few
points along a :class:`sgmc.Trace`, either the distance of the posterior-mean estimate from a
reference, ``|| mean of the first k draws of every chain - reference ||_2``, or the kernel Stein
discrepancy of those draws (:func:`sgmc.diagnostics.cumulative_ksd`, needing stored gradients), with
the cost spent so far in three units: iterations, seconds of wall time and passes through the data
(the set-up's time and passes, a mode search for example, included).
"""

from __future__ import annotations

from typing import Any

from .. import backends
from .._validation import check_choice, check_int, describe
from .ksd import cumulative_ksd

__all__ = ["convergence_path"]

METRICS = ("error", "ksd")


def _points(n: int, n_points: int) -> list:
    """About ``n_points`` draw counts from 1 to ``n``, geometrically spaced (early changes are fast)."""
    if n_points >= n:
        return list(range(1, n + 1))
    ks = {1, n}
    ratio = n ** (1.0 / (n_points - 1))
    for i in range(1, n_points - 1):
        ks.add(max(1, min(n, int(round(ratio**i)))))
    return sorted(ks)


def convergence_path(trace: Any, *, metric: str = "error", reference: Any = None, n_points: int = 20,
                     ksd_options: dict | None = None) -> dict:
    """Accuracy of a run's first k kept draws (every chain) against its cost, at about ``n_points`` k.

    Parameters
    ----------
    trace : Trace
        A run of :func:`sgmc.sample` (its ``stats`` give the cost).
    metric : {"error", "ksd"}, default "error"
        ``"error"``: ``|| mean of the draws - reference ||_2``; ``"ksd"``: kernel Stein discrepancy of
        the draws with their stored gradients (``sgmc.sample(..., store_grads=True)``).
    reference : array-like (dim,), optional
        The reference posterior mean, needed for ``"error"``.
    n_points : int, default 20
        Number of draw counts k, geometrically spaced from 1 to the number of kept draws.
    ksd_options : dict, optional
        Keywords of :func:`sgmc.diagnostics.cumulative_ksd` (``kind``, ``c``, ``beta`` ...).

    Returns
    -------
    dict of numpy arrays
        ``"draws"`` (k, per chain), ``"iterations"`` (iterations done when the k-th draw was kept),
        ``"seconds"`` (wall time then, averaged over chains), ``"data passes"`` (passes through the
        data then, averaged over chains), both with the set-up's (``info["setup_time"]``,
        ``info["setup_data_passes"]``), and ``"value"`` (the metric).

    Examples
    --------
    >>> import numpy as np
    >>> import sgmc
    >>> from sgmc.models import GaussianTarget
    >>> from sgmc.diagnostics.cost_path import convergence_path
    >>> target = GaussianTarget(np.zeros(2), np.eye(2))
    >>> trace = sgmc.sample(target, "sgld", "full", step_size=0.2, n_iter=400, chains=4, rng=0,
    ...                     progress=False)
    >>> path = convergence_path(trace, reference=np.zeros(2), n_points=5)
    >>> path["draws"].tolist()
    [1, 4, 20, 89, 400]
    >>> bool(path["value"][-1] < path["value"][0])
    True
    """
    if not all(hasattr(trace, a) for a in ("draws", "stats", "iterations", "xp")):
        msg = f"`trace` must be an sgmc.Trace (the result of sgmc.sample or Trace.load); got {describe(trace)}"
        raise TypeError(msg)
    metric = check_choice(metric, "metric", METRICS)
    n_points = check_int(n_points, "n_points", minimum=2)
    hx = backends.get_backend("numpy").xp
    draws = trace.draws
    xp = trace.xp
    chains, n, dim = (int(s) for s in draws.shape)
    if n < 1:
        msg = "`trace` has no kept draws; a convergence path needs at least one"
        raise ValueError(msg)
    missing = [k for k in ("wall_time", "data_passes") if k not in trace.stats]
    if missing:
        msg = f"`trace` has no {missing[0]!r} statistics (a trace of sgmc.sample has them); its cost is unknown"
        raise ValueError(msg)
    ks = _points(n, n_points)
    at = hx.asarray([k - 1 for k in ks], dtype=hx.int64)
    its = hx.asarray(list(trace.iterations), dtype=hx.int64)
    if its.shape != (n,):
        msg = f"`trace` must list the iteration of each of its {n} kept draws in `iterations`; got {its.shape[0]}"
        raise ValueError(msg)
    done = hx.take(its, at)
    wall = hx.asarray(trace.stats["wall_time"], dtype=hx.float64)
    passes = hx.asarray(trace.stats["data_passes"], dtype=hx.float64)
    setup_time, setup_passes = (float(trace.info.get(k, 0.0) or 0.0) for k in ("setup_time", "setup_data_passes"))
    out = {
        "draws": hx.asarray(ks, dtype=hx.int64),
        "iterations": done + 1,
        "seconds": hx.mean(hx.take(wall, done, axis=1), axis=0) + setup_time,
        "data passes": hx.mean(hx.take(passes, done, axis=1), axis=0) + setup_passes,
    }
    idx = xp.asarray(backends.to_numpy(at), device=getattr(draws, "device", None))
    if metric == "error":
        if reference is None:
            msg = "`reference` (the posterior mean, shape (dim,)) is needed for metric='error'"
            raise ValueError(msg)
        try:
            if isinstance(reference, (str, bytes, dict)):
                raise TypeError
            ref = xp.asarray(backends.to_numpy(reference), dtype=draws.dtype, device=getattr(draws, "device", None))
        except (TypeError, ValueError):
            msg = f"`reference` must be an array of {dim} numbers (the posterior mean); got {describe(reference)}"
            raise TypeError(msg) from None
        if tuple(ref.shape) != (dim,):
            msg = f"`reference` must have shape ({dim},), one value per coordinate; got {tuple(ref.shape)}"
            raise ValueError(msg)
        if not bool(xp.all(xp.isfinite(ref))):
            msg = f"`reference` must be finite; got {describe(reference)}"
            raise ValueError(msg)
        sums = xp.sum(xp.take(xp.cumulative_sum(draws, axis=1), idx, axis=1), axis=0)  # (points, dim)
        counts = xp.astype(xp.take(xp.arange(1, n + 1, device=getattr(draws, "device", None)), idx), draws.dtype)
        means = sums / (chains * counts)[:, None]
        value = xp.linalg.vector_norm(means - ref[None, :], axis=-1)
    else:
        if trace.grads is None:
            msg = "metric='ksd' needs the gradients at the draws: run sgmc.sample(..., store_grads=True)"
            raise ValueError(msg)
        value = xp.take(cumulative_ksd(draws, trace.grads, **dict(ksd_options or {})), idx)
    out["value"] = hx.asarray(backends.to_numpy(value), dtype=hx.float64)
    return {k: backends.to_numpy(v) for k, v in out.items()}
