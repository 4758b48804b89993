"""The JAX backend's rows of ``peer_jax.py --rows jax``: sgmc with ``backend="jax"`` against blackjax and
sgmc's own NumPy path, on the workload and in the interleaved rounds of :mod:`peer_jax` (which pins the
process before anything here is imported, and passes itself in as ``peer``).

sgmc on JAX arrays runs blocks of iterations as one compiled ``jax.jit(lax.scan)`` over the sampler's
``step`` (:mod:`sgmc.samplers._compiled`); the first ``sample`` call compiles its blocks and reports the
seconds in ``trace.info["compile_time"]``, and later calls with equal settings, estimator and model
find them compiled.
"""

from __future__ import annotations

import statistics
import time

from _pinning import Clock, verify
from peer_sgld import BATCH, N_DATA, PRIOR_VAR, STEP_SIZE, make_data


class CompileClock:
    """Wall and CPU seconds spent compiling sgmc's JAX blocks, summed while installed.

    Wraps :meth:`sgmc.backends._jax_blocks.BlockRunner._function` (the block look-up, which traces,
    lowers and compiles on a miss) and counts a call only when the plan's ``compile_seconds`` grew, so
    the per-iteration figures can leave out exactly the compile's CPU time; the wall seconds it counts
    are checked against ``trace.info["compile_time"]``.
    """

    def __init__(self, compiled_module):
        self.mod, self.orig = compiled_module, compiled_module.BlockRunner._function
        self.wall = self.cpu = 0.0
        clock, orig = self, self.orig

        def timed(plan, *args, **kwargs):
            before, w0, c0 = plan.compile_seconds, time.perf_counter(), time.process_time()
            out = orig(plan, *args, **kwargs)
            if plan.compile_seconds != before:
                clock.wall += time.perf_counter() - w0
                clock.cpu += time.process_time() - c0
            return out

        compiled_module.BlockRunner._function = timed

    def take(self) -> tuple[float, float]:
        out, self.wall, self.cpu = (self.wall, self.cpu), 0.0, 0.0
        return out


def sgmc_jax_runner(mod, X, y, centre, method, chains, clock):
    """sgmc on JAX arrays (64-bit): ``sample(..., backend="jax")`` runs compiled blocks of ``step``.

    The returned function gives the wall and CPU seconds of one whole ``sample`` call, and the compile
    seconds in it: ``trace.info["compile_time"]`` and the wall and CPU seconds of ``clock``.
    """
    import warnings

    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    model = mod.models.LogisticRegression(jnp.asarray(X), jnp.asarray(y), prior_var=PRIOR_VAR)
    if method == "sgld":
        est = mod.estimators.Minibatch(model, BATCH, replace=True)
    else:
        est = mod.estimators.ControlVariate(model, BATCH, centre=jnp.asarray(centre), replace=True)

    def run(n_iter, seed):
        clock.take()
        with warnings.catch_warnings():  # short runs at this step size do not mix; the time is the point
            warnings.simplefilter("ignore", mod.MixingWarning)
            with Clock() as c:
                tr = mod.sample(model, "sgld", est, step_size=STEP_SIZE, n_iter=n_iter, chains=chains,
                                group_size=chains, rng=seed, progress=False, backend="jax")
                tr.draws.block_until_ready()
        cw, cc = clock.take()
        return {"wall": c.wall, "cpu": c.cpu, "compile_time": float(tr.info.get("compile_time", 0.0)),
                "compile_wall": cw, "compile_cpu": cc}

    return run


def jax_rows(args, peer) -> list[dict]:
    """sgmc with ``backend="jax"`` against blackjax and sgmc's NumPy path, interleaved rounds.

    The first ``sample`` call compiles the blocks, and later calls with the same settings, estimator and
    model find them compiled (:mod:`sgmc.backends._jax_blocks` keeps them across calls, as blackjax's
    ``jax.jit`` keeps its function), so the rounds time whole calls, set-up and the end-of-run
    diagnostics included as in sgmc's NumPy row; any compile inside a round (none is expected) is left
    out by :class:`CompileClock`. The first call's compile seconds are reported apart, and its whole
    cost as "with compile".
    """
    import sgmc
    from sgmc.backends import _jax_blocks

    _rounds, _timed, _per, blackjax_runner, sgmc_runner = (peer._rounds, peer._timed, peer._per,
                                                             peer.blackjax_runner, peer.sgmc_runner)
    clock = CompileClock(_jax_blocks)
    rows = []
    n_iter = args.iters
    for dim in args.dims:
        X, y = make_data(N_DATA, dim)
        centre = peer.mode(X, y)
        for method in args.methods:
            for chains in args.chains:
                impls, compile_s, calls = {}, {}, []
                run = sgmc_runner(sgmc, X, y, centre, method, chains)
                run(20, 0)
                impls["sgmc"] = _timed(lambda s, run=run: run(n_iter, s))
                jx = sgmc_jax_runner(sgmc, X, y, centre, method, chains, clock)
                # imports, JAX's pools, the eager kernels of this draw shape and the compiled blocks (kept
                # for the later calls), outside the rounds
                first = jx(n_iter, 0)

                def jax_steady(seed, jx=jx, calls=calls):
                    r = jx(n_iter, seed)
                    calls.append(r)
                    return r["wall"] - r["compile_wall"], r["cpu"] - r["compile_cpu"]

                impls["sgmc-jax"] = jax_steady
                if "blackjax" in args.peers:
                    bj = blackjax_runner(X, y, centre, method, chains, n_iter)
                    impls["blackjax"], compile_s["blackjax"] = peer._timed_after_compile(bj)
                threads = verify(peer.CORES)
                times, loads = _rounds(impls, args.reps)
                per = _per(times, n_iter * chains)
                med = {k: statistics.median(c[k] for c in calls) for k in calls[0]}
                row = {"method": method, "dim": dim, "chains": chains, "us_per_chain_iter": per,
                       "compile_s": compile_s, "all_s": times, "load": loads, "threads": threads,
                       "jax_calls_s": calls, "jax_first_call_s": first,
                       "jax_whole_call_cpu_us": first["cpu"] / (n_iter * chains) * 1e6,
                       "jax_compile_cpu_s": first["compile_cpu"], "jax_compile_wall_s": first["compile_wall"],
                       "jax_compile_time_s": first["compile_time"], "jax_rounds_compile_cpu_s": med["compile_cpu"]}
                rows.append(row)
                print(f"{method:7s} d={dim:<4d} chains={chains:<3d} "
                      + "  ".join(f"{k} {v['cpu']:7.2f}" for k, v in per.items())
                      + f"  (CPU us/chain-iter; sgmc-jax first call's compile {first['compile_cpu']:.2f} s CPU, "
                        f"{first['compile_wall']:.2f} s wall, compile_time {first['compile_time']:.2f} s; "
                        f"in the rounds {med['compile_cpu']:.2f} s; "
                        f"load {statistics.median(loads):.1f})", flush=True)
    return rows


def jax_tables(rows) -> dict:
    cols = ["method", "d", "chains", "sgmc-jax CPU us", "sgmc NumPy CPU us", "blackjax CPU us",
            "sgmc-jax / blackjax (CPU)", "sgmc-jax / NumPy (CPU)", "sgmc-jax / blackjax (wall)",
            "sgmc-jax / NumPy (wall)", "sgmc-jax with compile, CPU us", "compile CPU s",
            "compile wall s", "compile_time s", "blackjax compile s", "load"]
    out = []
    for r in rows:
        per = r["us_per_chain_iter"]
        jx, npy, bj = per["sgmc-jax"], per["sgmc"], per.get("blackjax")
        out.append([{"sgld": "SGLD", "sgldcv": "SGLD-CV"}[r["method"]], r["dim"], r["chains"],
                    jx["cpu"], npy["cpu"], bj["cpu"] if bj else None,
                    jx["cpu"] / bj["cpu"] if bj else None, jx["cpu"] / npy["cpu"],
                    jx["wall"] / bj["wall"] if bj else None, jx["wall"] / npy["wall"],
                    r["jax_whole_call_cpu_us"], r["jax_compile_cpu_s"], r["jax_compile_wall_s"],
                    r["jax_compile_time_s"], r["compile_s"].get("blackjax"),
                    f"{min(r['load']):.1f}-{max(r['load']):.1f}"])
    formats = [None] * 3 + [".1f"] * 3 + [".2f"] * 4 + [".1f", ".2f", ".2f", ".2f", ".1f", None]
    return {"jax": {"columns": cols, "rows": out, "formats": formats}}
