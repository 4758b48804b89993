"""The GPU benchmarks of docs/gpu.md in one process: CuPy against NumPy on the same machine's CPU.

Measures, with ``backend="cupy"`` and every timed call ended by a device synchronisation (kernels
compiled and warmed up before timing):

* ``ksd``: ``ksd(x, s, kind)`` at n = 10^5, d = 10, float64 (target: 60 ms for the joint kind, 82 ms
  for the per-coordinate kind on an H100).
* ``resampling``: systematic resampling of one row of 10^7 particles, with the device's own
  copy bandwidth measured in the same run; the bound is 32 bytes per particle at that bandwidth
  (the running sum of the weights, then one read of it and one write of the ancestors).
* ``sgld``: one SGLD iteration of 1,024 chains on the logistic regression (N = 10^5, d = 10,
  minibatches of 100; target at most 0.9 ms per iteration).
* ``sgld_scaling``: the same iteration for 1 to 4,096 chains, CuPy and NumPy.
* ``ssm``: a bootstrap particle filter (scalar LGSSM, 256 series, 1,024 particles, T = 100) and the
  exact recursions (Kalman filter of the scalar LGSSM and forward filtering of a 2-state Gaussian
  HMM, 64 parameter sets, T = 2,000), CuPy against NumPy.

``--dry-run`` runs every step on NumPy only, at small sizes (no GPU needed): it checks the script,
the results file and the NumPy column. The results file follows the project's convention
(``docs/_results.py``): ``docs/results/gpu_check.json`` for a device run, or, for a dry run,
``gpu_check_dry_run.json`` in ``--out`` (default: a temporary directory), so a dry run never replaces
measured figures.

Usage (from the repository root)::

    python asv_benchmarks/gpu_bench.py [--dry-run] [--out DIR] [--budget SECONDS]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from docs._results import write_results  # noqa: E402  (the load at start is read at this import)

import numpy as np  # noqa: E402

from sgmc import backends  # noqa: E402


class Timer:
    """Median wall time of ``fn`` over ``repeat`` calls after ``warm`` calls, each ended by ``sync``."""

    def __init__(self, sync, budget_s: float):
        self.sync = sync
        self.budget_s = budget_s

    def __call__(self, fn, repeat: int = 5, warm: int = 1) -> float:
        for _ in range(warm):
            fn()
        self.sync()
        times = []
        start = time.perf_counter()
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            self.sync()
            times.append(time.perf_counter() - t0)
            if time.perf_counter() - start > self.budget_s:
                break
        return statistics.median(times)


def _sync_for(name: str):
    return lambda: backends.synchronize(name)


def _device_name() -> str:
    try:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())
        name = props["name"]
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception as exc:  # noqa: BLE001 - reported, not fatal
        return f"unknown ({type(exc).__name__}: {exc})"


def copy_bandwidth() -> float:
    """Bytes per second read plus written by a device-to-device copy of 1 GB (CuPy)."""
    import cupy

    a = cupy.ones(2**27, dtype=cupy.float64)
    b = cupy.empty_like(a)
    t = Timer(_sync_for("cupy"), 5.0)(lambda: cupy.copyto(b, a), repeat=10, warm=2)
    return 2 * a.nbytes / t


# ------------------------------------------------------------------------------------------------


def bench_ksd(be_names, n, timer_for):
    from sgmc.diagnostics import ksd

    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 10))
    s = -x + 0.1 * rng.standard_normal((n, 10))
    rows = []
    for name in be_names:
        xd, sd = backends.asarray(x, backend=name), backends.asarray(s, backend=name)
        for kind, target in (("joint", 60.0), ("sum", 82.0)):
            t = timer_for(name)(lambda: ksd(xd, sd, kind=kind), repeat=5)
            rows.append([name, n, kind, t * 1e3, target if name == "cupy" else None])
    return {"columns": ["backend", "n", "kind", "time (ms)", "target (ms)"], "rows": rows,
            "notes": "ksd(x, s, kind), d = 10, float64, identity preconditioner; median of up to 5 calls"}


def bench_resampling(be_names, n, timer_for, bandwidth):
    from sgmc.ssm.resampling import ancestors

    rng = np.random.default_rng(1)
    w = rng.random((1, n))
    w /= w.sum()
    u = rng.random(1)
    spike = np.zeros((1, n))
    spike[0, n // 2] = 1.0
    rows = []
    for name in be_names:
        for label, weights in (("random", w), ("one particle", spike)):
            wd, ud = backends.asarray(weights, backend=name), backends.asarray(u, backend=name)
            t = timer_for(name)(lambda: ancestors(wd, ud, "systematic"), repeat=10)
            bound = 32.0 * n / bandwidth * 1e6 if (name == "cupy" and bandwidth) else None
            achieved = 32.0 * n / t / 1e9
            rows.append([name, n, label, t * 1e6, bound, achieved])
    return {"columns": ["backend", "particles", "weights", "time (us)", "bandwidth bound (us)",
                        "achieved (GB/s at 32 B/particle)"],
            "rows": rows,
            "notes": "ancestors(w, u, 'systematic') for one row; the bound is 32 bytes per particle at the "
                     "device-to-device copy bandwidth measured in the same run"}


def _sgld_state(name, chains, n_data=100_000, batch=100):
    from sgmc.estimators import Minibatch
    from sgmc.models import LogisticRegression
    from sgmc.samplers import SGLD

    r = np.random.default_rng(0)
    X = r.standard_normal((n_data, 10))
    theta = r.standard_normal(10) / math.sqrt(10)
    y = (r.random(n_data) < 1.0 / (1.0 + np.exp(-X @ theta))).astype(np.float64)
    model = LogisticRegression(X, y, backend=name)
    est = Minibatch(model, batch)
    sampler = SGLD()
    rng = backends.default_rng(0, backend=name)
    state = sampler.init(rng, rng.normal((chains, 10), dtype=model.dtype), est)
    box = [state]

    def step():
        box[0], _ = sampler.step(rng, box[0], est, 1e-5)

    return step


def bench_sgld(be_names, chains_list, timer_for, iters):
    rows = []
    for name in be_names:
        for chains in chains_list:
            step = _sgld_state(name, chains)
            timer = timer_for(name)

            def run():
                for _ in range(iters):
                    step()

            t = timer(run, repeat=3) / iters
            rows.append([name, chains, t * 1e3, chains / t])
    return rows


def bench_ssm(be_names, timer_for, sizes):
    from sgmc.ssm import LGSSM, GaussianHMM, HMMParams
    from sgmc.ssm.particle import ScalarLGSSMKernel, particle_filter

    B, N, T_pf, C, T_exact = sizes
    rng = np.random.default_rng(5)
    y = rng.standard_normal(T_pf)
    rows = []
    for name in be_names:
        kernel = ScalarLGSSMKernel(*(backends.asarray(np.full(B, v), backend=name) for v in (0.9, 0.7, 1.0)),
                                   proposal="bootstrap")
        Y = backends.asarray(np.broadcast_to(y[None, :, None], (B, T_pf, 1)).copy(), backend=name)
        gen = backends.default_rng(7, backend=name)
        t = timer_for(name)(lambda: particle_filter(gen, kernel, Y, N, resampling="systematic"), repeat=3)
        rows.append([name, f"particle filter (LGSSM, {B} series x {N} particles, T = {T_pf})", t * 1e3])

        yl = rng.standard_normal(T_exact)
        lg = backends.move(LGSSM(yl), name)
        th = backends.asarray(np.tile([0.9, 2.0, 2.0], (C, 1)), backend=name)
        t = timer_for(name)(lambda: lg.log_lik(th), repeat=3)
        rows.append([name, f"Kalman filter log-likelihood (scalar LGSSM, {C} parameter sets, T = {T_exact})", t * 1e3])

        hm = GaussianHMM(yl, 2)
        theta = hm.unconstrain(HMMParams(np.array([[0.9, 0.1], [0.2, 0.8]]), np.array([[-1.0], [1.0]]),
                                         np.array([[[0.5]], [[0.5]]])))
        hm = backends.move(hm, name)
        thh = backends.asarray(np.tile(np.asarray(theta), (C, 1)), backend=name)
        t = timer_for(name)(lambda: hm.log_lik(thh), repeat=3)
        rows.append([name, f"HMM forward log-likelihood (2 states, {C} parameter sets, T = {T_exact})", t * 1e3])
    return {"columns": ["backend", "computation", "time (ms)"], "rows": rows,
            "notes": "median of up to 3 calls after one warm-up call"}


# ------------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dry-run", action="store_true", help="NumPy only, small sizes, no GPU needed")
    p.add_argument("--out", default=None, help="also write the results file here (a dry run writes only here)")
    p.add_argument("--budget", type=float, default=20.0, help="seconds of repeats per timing at most")
    args = p.parse_args(argv)

    dry = args.dry_run
    if not dry:
        from sgmc.backends.cupy import device_status

        ok, why = device_status()
        if not ok:
            print(f"gpu_bench: no usable CUDA device ({why}); use --dry-run on a machine without one",
                  file=sys.stderr)
            return 2
    names = ["numpy"] if dry else ["cupy", "numpy"]

    def timer_for(name):
        return Timer(_sync_for(name), args.budget)

    tables, failures = {}, []

    def step(label, fn):
        t0 = time.perf_counter()
        try:
            fn()
            print(f"gpu_bench: {label} done in {time.perf_counter() - t0:.1f} s", flush=True)
        except Exception as exc:  # noqa: BLE001 - reported in the results file and the exit status
            failures.append(f"{label}: {type(exc).__name__}: {exc}")
            print(f"gpu_bench: {label} FAILED: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)

    bandwidth = [None]
    if not dry:
        step("copy bandwidth", lambda: bandwidth.__setitem__(0, copy_bandwidth()))

    # NumPy at n = 10^5 takes minutes: NumPy's KSD column is measured at n = 10^4 (and 2,000 dry)
    def ksd_step():
        t = bench_ksd(names[:1], 2_000 if dry else 100_000, timer_for)
        if not dry:
            t["rows"] += bench_ksd(["numpy"], 10_000, timer_for)["rows"]
        tables["ksd"] = t

    step("ksd", ksd_step)
    step("resampling", lambda: tables.__setitem__(
        "resampling", bench_resampling(names, 100_000 if dry else 10_000_000, timer_for, bandwidth[0])))

    def sgld_step():
        rows = bench_sgld(names, [1024], timer_for, 5 if dry else 50)
        for r in rows:
            r.append(0.9 if r[0] == "cupy" else None)
        tables["sgld"] = {"columns": ["backend", "chains", "time per iteration (ms)", "chain-iterations per second",
                                      "target (ms)"], "rows": rows,
                          "notes": "logistic regression, N = 10^5, d = 10, minibatches of 100, float64"}

    step("sgld", sgld_step)

    def scaling_step():
        chains = [1, 16, 256] if dry else [1, 4, 16, 64, 256, 1024, 4096]
        tables["sgld_scaling"] = {
            "columns": ["backend", "chains", "time per iteration (ms)", "chain-iterations per second"],
            "rows": bench_sgld(names, chains, timer_for, 3 if dry else 20),
            "notes": "as the sgld table, one iteration of all chains"}

    step("sgld scaling", scaling_step)
    step("ssm", lambda: tables.__setitem__(
        "ssm", bench_ssm(names, timer_for, (16, 128, 20, 8, 200) if dry else (256, 1024, 100, 64, 2000))))

    extra = {"dry_run": dry, "device": None if dry else _device_name(), "failures": failures,
             "copy_bandwidth_gb_s": None if bandwidth[0] is None else bandwidth[0] / 1e9}
    if not tables:
        tables["none"] = {"columns": ["failure"], "rows": [[f] for f in failures]}
    name = "gpu_check_dry_run" if dry else "gpu_check"
    out_dirs = []
    if args.out:
        out_dirs.append(Path(args.out))
    if dry and not args.out:
        out_dirs.append(Path(tempfile.mkdtemp(prefix="sgmc-gpu-check-")))
    if not dry:
        out_dirs.append(None)  # docs/results
    packages = () if dry else ("cupy-cuda12x", "cupy-cuda13x")
    for d in out_dirs:
        path = write_results(name, tables, extra=extra, packages=packages, directory=d)
        print(f"gpu_bench: wrote {path}")
    if failures:
        print("gpu_bench: FAILED steps:\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
