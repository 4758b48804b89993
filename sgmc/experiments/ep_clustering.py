"""``ep-clustering``: the synthetic experiments of Aicher's thesis, chapter 5.4 (``../specs`` section 4).

**Student-t mixtures** (Figure 5.2): nu = 5, K = 20, N = 600 points in d = 2 (the thesis does not
state d); ``Sigma_k ~ IW(d + 2, I)`` and ``mu_k ~ N(0, Sigma_k / kappa)`` with kappa = 0.1, 0.01,
0.001 for the hard, medium and easy signal-to-noise settings; equal cluster sizes. EP approximate
collapsed Gibbs, blocked Gibbs and naive Gibbs (:mod:`sgmc.clustering`) start from the same random
assignment and fit with nu = 5 known, prior NIW(0, 0.01, d + 2, I) and Dirichlet(1).

**Time series clustering** (Figure 5.4): T = 200, K = 20, sigma_x^2 = 0.01, sigma_y^2 = 1, a = 0.95,
lambda = 1, equal cluster sizes. The CPU time of one sweep against N (``sizes``), then NMI against
sweeps and CPU time at N = 300 for EP, naive and exact collapsed Gibbs, the last in two exact forms:
O(T) per cluster (spectral, these series share their parameters) and the joint Kalman filter (any
parameters; ``kalman_trials`` trials of ``kalman_sweeps`` sweeps, since it costs minutes per sweep).
The thesis also resamples ``a, lambda, sigma_x^2, sigma_y^2`` (Ren et al. 2017, not given in its
documents); here they are held at their true values, so only ``z`` (and ``eta`` for the naive sampler) are sampled.

NMI is ``I(z, z*) / sqrt(H(z) H(z*))`` (thesis Eq. 3.117); times are CPU seconds of this process
(``time.process_time``), which a loaded shared machine distorts less than wall-clock time. Options:
``parts`` ("mvt", "ts" or both), ``trials``, sweeps per part (``mvt_sweeps``, ``ts_sweeps``,
``collapsed_sweeps``, ``kalman_sweeps``), ``kalman_trials``, ``snr`` (which Student-t settings), ``n_mvt``,
``k_mvt``, ``n_ts``, ``k_ts``, ``t_ts``, ``sizes``, ``ts_samplers`` (which samplers the time series
mixing runs use).
"""

from __future__ import annotations

import time

import numpy as np

from ..backends import default_rng
from ..clustering import (StudentTMixtureModel, TimeSeriesClusterModel, blocked_t_init, blocked_t_sweep,
                          collapsed_init, collapsed_sweep, ep_gibbs_sweep, ep_init, naive_init, naive_sweep,
                          naive_t_init, naive_t_sweep, simulate_student_t, simulate_timeseries)
from ._output import Context, Experiment

__all__ = ["EXPERIMENT", "nmi", "run"]

FULL = dict(trials=3, mvt_sweeps=10, ts_sweeps=10, collapsed_sweeps=10, kalman_sweeps=2, kalman_trials=1, n_mvt=600,
            k_mvt=20, n_ts=300, k_ts=20, t_ts=200, sizes=(50, 100, 200, 300),
            ts_samplers=("EP", "naive", "collapsed", "kalman"), snr=("hard", "medium", "easy"))
QUICK = dict(trials=2, mvt_sweeps=2, ts_sweeps=2, collapsed_sweeps=2, kalman_sweeps=2, kalman_trials=1, n_mvt=40, k_mvt=4,
             n_ts=12, k_ts=3, t_ts=20, sizes=(6, 12), ts_samplers=("EP", "naive", "collapsed", "kalman"),
             snr=("hard", "medium", "easy"))
SNR = (("hard", 0.1), ("medium", 0.01), ("easy", 0.001))


def nmi(a, b) -> float:
    """Normalised mutual information ``I / sqrt(H_a H_b)`` of two labelings (1 when both are constant)."""
    a = np.asarray(a)
    b = np.asarray(b)
    _, ia = np.unique(a, return_inverse=True)
    _, ib = np.unique(b, return_inverse=True)
    joint = np.zeros((ia.max() + 1, ib.max() + 1))
    np.add.at(joint, (ia, ib), 1.0)
    joint /= joint.sum()
    pa, pb = joint.sum(1), joint.sum(0)
    nz = joint > 0
    mi = float(np.sum(joint[nz] * np.log(joint[nz] / np.outer(pa, pb)[nz])))
    ha = -float(np.sum(pa[pa > 0] * np.log(pa[pa > 0])))
    hb = -float(np.sum(pb[pb > 0] * np.log(pb[pb > 0])))
    if ha == 0.0 or hb == 0.0:
        return 1.0 if ha == hb else 0.0
    return mi / np.sqrt(ha * hb)


def _trace(init, sweep, sweeps, truth, z0):
    """NMI at the start and after every sweep, with the cumulative CPU seconds of this process
    (initialisation included; 0 at the start)."""
    t0 = time.process_time()
    state = init()
    nmis, times = [nmi(truth, z0)], [0.0]
    for _ in range(sweeps):
        state = sweep(state)
        times.append(time.process_time() - t0)
        nmis.append(nmi(truth, np.asarray(state.z)))
    return np.asarray(nmis), np.asarray(times)


def _at_budget(run, budget):
    """NMI of the last sweep finished within ``budget`` CPU seconds (the start's if none)."""
    nmis, times = run
    return float(nmis[np.nonzero(times <= budget)[0][-1]])


def _mean_se(v):
    v = np.asarray(v, dtype=float)
    return float(v.mean()), (float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else float("nan"))


def _summary(runs, budgets):
    """Mean and standard error of the final NMI and of the NMI after 5 sweeps, CPU s per sweep (the
    sweeps only), the mean NMI at each trial's budget and the mean total CPU s."""
    nm = np.stack([r[0] for r in runs])
    tm = np.stack([r[1] for r in runs])
    sweeps = nm.shape[1] - 1
    mid = min(5, sweeps)
    per_sweep = float(np.mean((tm[:, -1] - tm[:, 1]) / (sweeps - 1))) if sweeps > 1 else float(tm[:, -1].mean())
    return [*_mean_se(nm[:, -1]), *_mean_se(nm[:, mid]), per_sweep,
            float(np.mean([_at_budget(r, b) for r, b in zip(runs, budgets)])), float(tm[:, -1].mean())]


def _mvt_data(rng, n, K, d, kappa, nu):
    z = np.repeat(np.arange(K), -(-n // K))[:n]
    Sigma = np.stack([np.linalg.inv(_wishart(rng, d + 2, np.eye(d))) for _ in range(K)])
    mu = np.stack([rng.multivariate_normal(np.zeros(d), S / kappa) for S in Sigma])
    y = simulate_student_t(default_rng(int(rng.integers(2**31))), z, mu, Sigma, nu)
    return np.asarray(y), z


def _wishart(rng, df, scale):
    d = scale.shape[0]
    L = np.linalg.cholesky(scale)
    A = np.tril(rng.normal(size=(d, d)), -1) + np.diag(np.sqrt(rng.chisquare(df - np.arange(d))))
    LA = L @ A
    return LA @ LA.T


def _run_mvt(ctx, size, trials):
    sweeps, n, K, d, nu = size["mvt_sweeps"], size["n_mvt"], size["k_mvt"], 2, 5.0
    rows = []
    labels = size["snr"]
    for label, kappa in SNR:
        if label not in labels:
            continue
        runs = {"EP": [], "blocked": [], "naive": []}
        for trial in range(trials):
            rng = np.random.default_rng([ctx.seed, trial, int(1 / kappa)])
            y, truth = _mvt_data(rng, n, K, d, kappa, nu)
            model = StudentTMixtureModel(y, nu=nu, kappa0=0.01)
            z0 = rng.integers(0, K, n)
            gen = default_rng(np.random.SeedSequence([ctx.seed, trial, 7]))
            ctx.status(f"MVT {label} trial {trial + 1}/{trials}")
            runs["EP"].append(_trace(lambda: ep_init(model, z0, K), lambda s: ep_gibbs_sweep(gen, model, s), sweeps,
                                     truth, z0))
            runs["blocked"].append(_trace(lambda: blocked_t_init(gen, model, z0, K),
                                          lambda s: blocked_t_sweep(gen, model, s), sweeps, truth, z0))
            runs["naive"].append(_trace(lambda: naive_t_init(gen, model, z0, K),
                                        lambda s: naive_t_sweep(gen, model, s), sweeps, truth, z0))
        budgets = [min(r[t][1][-1] for r in runs.values()) for t in range(trials)]
        for name, r in runs.items():
            rows.append([label, name] + _summary(r, budgets))
    mid = min(5, sweeps)
    ctx.write_table("mvt", ["SNR", "sampler", f"NMI after {sweeps} sweeps", "s.e.", f"NMI after {mid} sweeps", "s.e.",
                            "CPU s per sweep", "NMI at equal CPU time", "total CPU s"], rows,
                    title=(f"Student-t mixtures (nu = 5, K = {K}, N = {n}, d = {d}), {trials} trial(s); mean and standard "
                           "error over trials; NMI at equal CPU time: at the CPU time of the fastest sampler's whole run "
                           "in the same trial (initialisation included)"))
    return rows


def _ts_model(ctx, n, K, T, trial):
    truth = np.repeat(np.arange(K), -(-n // K))[:n]
    y, _, _ = simulate_timeseries(default_rng(np.random.SeedSequence([ctx.seed, trial, n])), truth, T, K, a=0.95, lam=1.0, sigma_x2=0.01,
                                  sigma_y2=1.0)
    return TimeSeriesClusterModel(y, a=0.95, lam=1.0, sigma_x2=0.01, sigma_y2=1.0), truth


def _samplers(ctx, model, z0, K, trial):
    gen = default_rng(np.random.SeedSequence([ctx.seed, trial, 11]))
    return {
        "EP": (lambda: ep_init(model, z0, K), lambda s: ep_gibbs_sweep(gen, model, s)),
        "naive": (lambda: naive_init(gen, model, z0, K), lambda s: naive_sweep(gen, model, s)),
        "collapsed": (lambda: collapsed_init(model, z0, K), lambda s: collapsed_sweep(gen, model, s)),
        "collapsed (Kalman)": (lambda: collapsed_init(model, z0, K, method="kalman"),
                               lambda s: collapsed_sweep(gen, model, s)),
    }


def _run_ts(ctx, size, trials):
    K, T = size["k_ts"], size["t_ts"]
    timing = []
    for n in size["sizes"]:
        model, _ = _ts_model(ctx, n, K, T, 0)
        z0 = np.random.default_rng([ctx.seed, n]).integers(0, K, n)
        row = [n]
        for name, (init, sweep) in _samplers(ctx, model, z0, K, 0).items():
            ctx.status(f"time series: one {name} sweep at N = {n}")
            state = init()
            t0 = time.process_time()
            sweep(state)
            row.append(time.process_time() - t0)
        timing.append(row)
    ctx.write_table("ts_runtime", ["N", "EP CPU s/sweep", "naive CPU s/sweep", "collapsed CPU s/sweep",
                                   "collapsed (Kalman) CPU s/sweep"], timing,
                    title=(f"Time series clustering: CPU seconds of one sweep against N (T = {T}, K = {K}); collapsed: "
                           "the O(T)-per-cluster spectral form, collapsed (Kalman): the joint Kalman filter"))
    n = size["n_ts"]
    names = [m for m in ("EP", "naive", "collapsed", "kalman") if m in size["ts_samplers"]]
    runs = {name: [] for name in names}
    for trial in range(trials):
        model, truth = _ts_model(ctx, n, K, T, trial + 1)
        z0 = np.random.default_rng([ctx.seed, trial, 3]).integers(0, K, n)
        samplers = _samplers(ctx, model, z0, K, trial + 1)
        samplers["kalman"] = samplers.pop("collapsed (Kalman)")
        for name in names:
            init, sweep = samplers[name]
            if name == "kalman" and trial >= size["kalman_trials"]:
                continue
            sweeps = {"collapsed": size["collapsed_sweeps"], "kalman": size["kalman_sweeps"]}.get(name, size["ts_sweeps"])
            ctx.status(f"time series N = {n}, trial {trial + 1}/{trials}: {name}, {sweeps} sweeps")
            runs[name].append(_trace(init, sweep, sweeps, truth, z0))
    main = [m for m in names if m != "kalman"]
    budgets = [min(runs[m][t][1][-1] for m in main) for t in range(trials)] if main else [np.inf] * trials
    rows = []
    for name, r in runs.items():
        if r:
            label = "collapsed (Kalman)" if name == "kalman" else name
            rows.append([label, len(r[0][0]) - 1, len(r)] + _summary(r, budgets[:len(r)]))
    mid = min(5, size["ts_sweeps"])
    ctx.write_table("ts", ["sampler", "sweeps", "trials", "final NMI", "s.e.", f"NMI after {mid} sweeps", "s.e.",
                           "CPU s per sweep", "NMI at equal CPU time", "total CPU s"], rows,
                    title=(f"Time series clustering (N = {n}, T = {T}, K = {K}); mean and standard error over trials; "
                           "NMI at equal CPU time: at the CPU time of the fastest of EP, naive and collapsed in the "
                           "same trial"))
    return timing, rows


def run(ctx: Context) -> dict:
    size = dict(QUICK if ctx.quick else FULL)
    for key in size:
        size[key] = ctx.option(key, size[key])
    size["sizes"] = tuple(int(v) for v in size["sizes"])
    if isinstance(size["ts_samplers"], str):
        size["ts_samplers"] = (size["ts_samplers"],)
    if isinstance(size["snr"], str):
        size["snr"] = (size["snr"],)
    if set(size["snr"]) - {label for label, _ in SNR}:
        msg = f"`snr` must name hard, medium or easy; got {size['snr']}"
        raise ValueError(msg)
    unknown = set(size["ts_samplers"]) - {"EP", "naive", "collapsed", "kalman"}
    if unknown:
        msg = f"`ts_samplers` must name EP, naive, collapsed or kalman; got {sorted(unknown)}"
        raise ValueError(msg)
    trials = int(size["trials"])
    parts = ctx.option("parts", ("mvt", "ts"))
    parts = (parts,) if isinstance(parts, str) else tuple(parts)
    out = {}
    if "mvt" in parts:
        out["mvt"] = _run_mvt(ctx, size, trials)
    if "ts" in parts:
        out["ts_runtime"], out["ts"] = _run_ts(ctx, size, trials)
    ctx.notes.update({"size": {k: (list(v) if isinstance(v, tuple) else v) for k, v in size.items()},
                      "parts": list(parts)})
    return out


EXPERIMENT = Experiment(
    "ep-clustering",
    "Thesis ch. 5: EP approximate collapsed Gibbs against naive, blocked and collapsed Gibbs (NMI, runtime)",
    run,
    "Aicher (2020), PhD thesis, section 5.4, Figures 5.2 and 5.4",
)
