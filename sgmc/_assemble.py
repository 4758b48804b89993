"""The last step of :func:`sgmc.sample`: one :class:`~sgmc.Trace` from the groups' results.

The groups' draws are joined where they live (the plan's namespace), the per-iteration statistics on
the host (the plan's host namespace), cut to the shortest group when the run stopped early, and the
run's settings, timings and set-up costs go to ``trace.info``.
"""

from __future__ import annotations

import os
from typing import Any

from ._param_names import model_param_names
from ._plan import HOST, RunPlan
from .chains import ChainsResult, step_stats
from .trace import Trace

__all__ = ["assemble", "progress_result"]


def progress_result(progress: Any, chains: int, backend: Any = None) -> ChainsResult:
    """The result of a group stopped at a checkpoint: its draws and statistics so far."""
    hx = HOST.xp
    stats = step_stats(progress.infos, chains, backend=backend)
    stats["wall_time"] = hx.broadcast_to(hx.asarray(progress.wall, dtype=hx.float64)[None, :], (chains, progress.k))
    grads = None if progress.grads is None else progress.grads[:, :progress.j, :]
    return ChainsResult(progress.draws[:, :progress.j, :], grads, stats, progress.state, progress.k)


def _truncate(res: Any, n_done: int, kept: list) -> Any:
    n_keep = sum(1 for i in kept if i < n_done)
    stats = {k: v[:, :n_done] for k, v in res.stats.items()}
    grads = None if res.grads is None else res.grads[:, :n_keep, :]
    return res._replace(draws=res.draws[:, :n_keep, :], grads=grads, stats=stats, n_done=n_done)


def assemble(plan: RunPlan, results: list, interrupted: bool = False) -> Trace:
    """The trace of ``results`` (one per group that ran, in group order)."""
    model, spec = plan.model, plan.spec
    smp, est = spec.sampler, spec.estimator
    xp, hx = plan.xp, plan.hx
    n_iter = plan.n_iter
    if len(results) > 1 and results[-1].n_done == 0:
        results = results[:-1]
    n_done = min([r.n_done if r.n_done >= 0 else n_iter for r in results], default=0)
    kept = list(spec.kept)
    if n_done < n_iter:
        kept = [i for i in kept if i < n_done]
        results = [_truncate(r, n_done, spec.kept) for r in results]
    bounds = plan.bounds[:len(results)]
    hs = list(spec.step_sizes)[:n_done]
    one = len(results) == 1
    draws = results[0].draws if one else xp.concat([r.draws for r in results], axis=0)
    grads = None
    if spec.store_grads:
        grads = results[0].grads if one else xp.concat([r.grads for r in results], axis=0)
    stats = {"step_size": hx.asarray(hs, dtype=hx.float64)}
    for key in results[0].stats:
        stats[key] = hx.concat([hx.asarray(r.stats[key]) for r in results], axis=0)
    n_chains = int(draws.shape[0])
    for key in ("n_evals", "batch_size"):
        stats.setdefault(key, hx.zeros((n_chains, n_done), dtype=hx.float64))
    n_data = max(int(model.n_data), 1)
    stats["data_passes"] = hx.cumulative_sum(stats["n_evals"], axis=1) / n_data
    stats["data_passes"] += plan.settings.get("step_size_auto", {}).get("data_passes", 0.0)
    info = {
        "sampler": smp.name,
        "estimator": est.name,
        **plan.settings,
        "n_data": model.n_data,
        "dim": model.dim,
        "backend": plan.backend.name,
        "dtype": str(plan.dtype),
        "grads": (("full" if spec.store_grads == "full" else "estimate") if spec.store_grads else None),
        "groups": [list(b) for b in bounds],
        "setup_time": plan.setup_time,
        "setup_data_passes": plan.setup_evals / n_data,
        "sampling_time": float(hx.max(stats["wall_time"][:, -1])) if n_done else 0.0,
        "interrupted": bool(interrupted),
        "iterations_done": n_done,
    }
    if plan.path is not None:
        info["checkpoint"] = os.fspath(plan.path)
    compile_s = sum(float(getattr(r, "compile_time", 0.0)) for r in results)
    if compile_s:  # JAX: seconds compiling blocks of iterations (sgmc.samplers._compiled)
        info["compile_time"] = compile_s
    if "accepted" in stats:
        info["n_accepted"] = hx.astype(hx.sum(stats["accepted"], axis=1), hx.int64).tolist()
        info["acceptance_rate"] = (hx.mean(stats["accepted"], axis=1) if n_done else hx.zeros(n_chains)).tolist()
    for key in stats:
        if key not in ("step_size", "n_evals", "batch_size", "data_passes", "wall_time", "accepted", "accept_prob",
                       "abs_max", "stein", "stein_n"):
            info[key] = stats[key][:, -1].tolist() if n_done else [float("nan")] * n_chains
    return Trace(draws=draws, grads=grads, iterations=kept, stats=stats, info=info,
                 param_names=model_param_names(model))
