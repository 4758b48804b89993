"""``bpmf-movielens``: Figure 6 of Nemeth and Fearnhead (2021), section 6.3 (``../specs`` section 4.3).

Bayesian probabilistic matrix factorisation (:class:`sgmc.models.BPMF`, d = 20, tau = (3, 0, 1, 5),
ratings centred at the training mean) on MovieLens ratings (:func:`sgmc.datasets.movielens100k`: the
user's MovieLens-100k files with ``path=``, else dslabs' ``movielens`` from the package index), with
each of 5 folds held out in turn. Four samplers: SGLD, SGLD-CV, SGHMC and SGHMC-CV, with minibatches
of n = 10% of the training ratings. The control-variate versions first search for the mode from the
common start with the library's :func:`sgmc.optimize.find_mode` (``sgd_iter`` Adam steps at rate
``sgd_step``, then the L-BFGS polish on the full posterior, continued for up to ``polish_steps`` more
steps) and then start at, and centre on, that theta_hat; the ``centre`` table reports the gradient
norm there (:func:`sgmc.optimize.mode_gap`) and its test RMSE.

Every ``eval_every`` iterations the current draw predicts the test ratings (clipped to the rating
range); the reported prediction averages the draws of the second half of the iterations so far (a
growing burn-in), and Figure 6 plots its RMSE, averaged over folds, against iterations.

Step sizes are tuned by a pilot run on fold 1 (``pilot_iter`` iterations for every value of a grid,
per method; :data:`GRIDS`): the pilot holds out 5% of the training ratings and keeps the step size
whose averaged prediction has the lowest RMSE on them (a diverged run is out); when that is an end
of the grid, the grid is extended that way, one grid ratio at a time, up to ``pilot_extend`` (3)
times. The test ratings are never used for tuning. SGHMC's friction follows the R package's ``alpha = 0.01``: C = 2 alpha / h.

Options (``reproduce("bpmf-movielens", out, **options)``): ``folds`` (number of folds, 1..5, or a
tuple of fold numbers), ``n_iter``, ``sgd_iter``, ``eval_every``, ``batch_frac``, ``d``,
``n_leapfrog`` (SGHMC's L), ``step_sizes`` (dict method -> h, skips the pilot), ``pilot_iter``,
``pilot_extend``, ``sgd_step``, ``polish_steps`` (1,500), ``path`` (MovieLens-100k files), ``max_users`` (keep the first users only), ``chains``.
"""

from __future__ import annotations

import math
import time

import numpy as np

from ._output import Context, Experiment

METHODS = ("SGLD", "SGLD-CV", "SGHMC", "SGHMC-CV")

#: Step-size grids of the pilot, in sgmc's h (docs/samplers.md).
GRIDS = {
    "SGLD": (1e-5, 2e-5, 4e-5, 8e-5),
    "SGHMC": (1e-3, 2e-3, 4e-3, 8e-3),
}

FULL = {"folds": 5, "n_iter": 100_000, "sgd_iter": 10_000, "eval_every": 1000, "pilot_iter": 10_000,
        "n_leapfrog": 5}
QUICK = {"folds": 1, "n_iter": 300, "sgd_iter": 150, "eval_every": 20, "pilot_iter": 100,
         "n_leapfrog": 1, "max_users": 150}


def _split(data, max_users):
    """Keep users < max_users (and re-index the items they rated)."""
    if max_users is None or max_users >= data.n_users:
        return data
    keep_tr = data.train_users < max_users
    keep_te = data.test_users < max_users
    items = np.unique(np.concatenate([data.train_items[keep_tr], data.test_items[keep_te]]))
    remap = np.full(data.n_items, -1, dtype=np.int64)
    remap[items] = np.arange(items.shape[0])
    return data._replace(
        train_users=data.train_users[keep_tr], train_items=remap[data.train_items[keep_tr]],
        train_ratings=data.train_ratings[keep_tr], test_users=data.test_users[keep_te],
        test_items=remap[data.test_items[keep_te]], test_ratings=data.test_ratings[keep_te],
        n_users=int(max_users), n_items=int(items.shape[0]))


def _start(model, rng, chains, scale=0.3):
    """U, V entries N(0, scale^2), means 0, each log precision at its conditional mode given U and V.

    Starting the precisions at their mode avoids a stiff transient: the prior means have curvature
    lambda (rows + 1), so a precision far above its mode forces a tiny step size.
    """
    th = np.zeros((chains, model.dim))
    k = model.dim - 4 * model.d
    th[:, :k] = scale * rng.standard_normal((chains, k))
    p = model.unpack(th)
    for w, rows in (("U", model.n_users), ("V", model.n_items)):
        ss = np.sum(p[w] ** 2, axis=1)
        p["log_lambda_" + w][...] = np.log((0.5 * (rows + 1) + model.a0) / (0.5 * ss + model.b0))
    return model.pack(p["U"], p["V"], p["mu_U"], p["mu_V"], p["log_lambda_U"], p["log_lambda_V"])


def _library_centre(model, init, n_iter, batch, step, rng, polish_steps=0):
    """theta_hat from :func:`sgmc.optimize.find_mode` (Adam at rate ``step``, then the L-BFGS polish on
    the full posterior, ``polish_steps`` more L-BFGS steps where it stops short), from the first
    chain's start; one copy per chain, and the search's report."""
    from ._centre import library_centre

    theta, info = library_centre(model, init[0], np.random.SeedSequence(int(rng.integers(2**32))), n_steps=n_iter,
                                 step_size=step, batch_size=batch, polish_steps=polish_steps)
    return np.tile(theta, (init.shape[0], 1)), info


def _run(model, method, h, n_iter, batch, init, centre, eval_every, test, clip, n_leapfrog, seed):
    """One sampler run; returns (iterations, RMSE of the averaged prediction) at every evaluation."""
    import sgmc

    users, items, ratings = test
    preds, iters, rmse = [], [], []

    def callback(k, state):
        if (k + 1) % eval_every:
            return
        p = np.clip(model.predict(state.position, users, items), *clip).mean(axis=0)
        preds.append(p)
        iters.append(k + 1)
        keep = [q for q, it in zip(preds, iters) if it > (k + 1) / 2]
        avg = np.mean(keep, axis=0)
        rmse.append(float(np.sqrt(np.mean((avg - ratings) ** 2))))

    sampler = "sgld" if method.startswith("SGLD") else "sghmc"
    opts = {} if sampler == "sgld" else {"friction": 2 * 0.01 / h, "n_leapfrog": n_leapfrog}
    est = "cv" if method.endswith("CV") else "minibatch"
    est_opts = {"centre": centre[0]} if est == "cv" else {}
    sgmc.sample(model, sampler, est, step_size=h, batch_size=batch, n_iter=n_iter, chains=init.shape[0],
                init=init, thin=max(1, n_iter // 2), rng=seed, progress=False, sampler_options=opts,
                estimator_options=est_opts, callback=callback, check_every=max(1, min(100, n_iter)))
    return np.asarray(iters), np.asarray(rmse)


def run(ctx: Context) -> None:
    import sgmc.datasets as ds
    from sgmc.models import BPMF

    size = dict(QUICK if ctx.quick else FULL)
    folds = ctx.option("folds", size["folds"])
    folds = tuple(range(1, int(folds) + 1)) if isinstance(folds, int) else tuple(folds)
    n_iter = int(ctx.option("n_iter", size["n_iter"]))
    sgd_iter = int(ctx.option("sgd_iter", size["sgd_iter"]))
    eval_every = int(ctx.option("eval_every", size["eval_every"]))
    pilot_iter = int(ctx.option("pilot_iter", size["pilot_iter"]))
    n_leapfrog = int(ctx.option("n_leapfrog", size["n_leapfrog"]))
    batch_frac = float(ctx.option("batch_frac", 0.1))
    d = int(ctx.option("d", 20))
    chains = int(ctx.option("chains", 1))
    sgd_step = float(ctx.option("sgd_step", 0.01))
    polish_steps = int(ctx.option("polish_steps", 1500))
    max_users = ctx.option("max_users", size.get("max_users"))
    path = ctx.option("path", None)
    methods = tuple(ctx.option("methods", METHODS))
    given = dict(ctx.option("step_sizes", {}))
    if eval_every > n_iter:
        msg = f"`eval_every`={eval_every} must not exceed `n_iter`={n_iter}"
        raise ValueError(msg)

    def load(fold):
        return _split(ds.movielens100k(path, fold=fold, seed=ctx.seed), max_users)

    def model_of(u, i, r, data):
        return BPMF(u, i, r, data.n_users, data.n_items, d=d, centre=True)

    # -- pilot: step sizes by the RMSE of held-out training ratings on fold 1 -----------------------
    first = load(folds[0])
    clip = (float(min(first.train_ratings.min(), 1.0)), float(max(first.train_ratings.max(), 5.0)))
    steps = {}
    pilot_rows = []
    todo = [m for m in methods if m not in given]
    if todo:
        rng = np.random.default_rng(ctx.seed + 1000)
        n = first.train_ratings.shape[0]
        val = rng.random(n) < 0.05
        pm = model_of(first.train_users[~val], first.train_items[~val], first.train_ratings[~val], first)
        pbatch = max(1, round(batch_frac * pm.n_data))
        init = _start(pm, rng, chains)
        centre = _library_centre(pm, init, min(sgd_iter, pilot_iter), pbatch, sgd_step, rng, polish_steps)[0] \
            if any(m.endswith("CV") for m in todo) else None
        vtest = (first.train_users[val], first.train_items[val], first.train_ratings[val])
        pev = max(1, pilot_iter // 10)
        extend = int(ctx.option("pilot_extend", 3))

        def score_of(m, h):
            ctx.status(f"pilot {m} h={h:g}")
            start = centre if m.endswith("CV") else init
            try:
                _, r = _run(pm, m, h, pilot_iter, pbatch, start, start, pev, vtest, clip, n_leapfrog, ctx.seed)
                return float(r[-1]) if r.size and np.isfinite(r[-1]) else math.inf
            except Exception as exc:  # a diverged pilot run is out of the race  # noqa: BLE001
                if "diverg" not in str(exc).lower() and "finite" not in str(exc).lower():
                    raise
                return math.inf

        for m in todo:
            scores = {h: score_of(m, h) for h in GRIDS[m.split("-")[0]]}
            # an end of the grid is not a choice: extend it that way (one grid ratio a step) until a
            # worse step brackets the best, at most `pilot_extend` times
            for _ in range(extend):
                grid = sorted(scores)
                best_h = min(scores, key=lambda k: scores[k])
                if not math.isfinite(scores[best_h]) or best_h not in (grid[0], grid[-1]) or len(grid) < 2:
                    break
                new = grid[0] ** 2 / grid[1] if best_h == grid[0] else grid[-1] ** 2 / grid[-2]
                scores[new] = score_of(m, new)
            best_h = min(scores, key=lambda k: scores[k])
            if not math.isfinite(scores[best_h]):
                msg = f"every pilot step size of {m} diverged ({sorted(scores)}); give `step_sizes`"
                raise FloatingPointError(msg)
            edge = best_h in (min(scores), max(scores))
            for h in sorted(scores):
                pilot_rows.append([m, h, scores[h], "chosen" + (", at the edge" if edge else "") if h == best_h else ""])
            steps[m] = best_h
    steps.update(given)
    ctx.notes["step_sizes"] = steps
    if pilot_rows:
        ctx.write_table("pilot", ["method", "h", "validation RMSE", "note"], pilot_rows,
                        title=f"Pilot runs ({pilot_iter} iterations, fold {folds[0]}, 5% of training ratings held out)")

    # -- the runs ---------------------------------------------------------------------------------
    curves = {m: [] for m in methods}
    centre_rows = []
    finals = {m: [] for m in methods}
    seconds = {m: 0.0 for m in methods}
    cpu_run = {m: 0.0 for m in methods}
    cpu_setup = {m: 0.0 for m in methods}
    baseline = []
    bar = ctx.bar(len(folds) * len(methods), "bpmf runs")
    for fold in folds:
        data = first if fold == folds[0] else load(fold)
        model = model_of(data.train_users, data.train_items, data.train_ratings, data)
        batch = max(1, round(batch_frac * model.n_data))
        test = (data.test_users, data.test_items, data.test_ratings)
        baseline.append(float(np.sqrt(np.mean((model.offset - data.test_ratings) ** 2))))
        rng = np.random.default_rng(ctx.seed + fold)
        init = _start(model, rng, chains)
        centre = None
        t_sgd = c_sgd = 0.0
        if any(m.endswith("CV") for m in methods):
            ctx.status(f"fold {fold}: find_mode ({sgd_iter} Adam iterations, L-BFGS polish) for theta_hat")
            t0 = time.perf_counter()
            centre, info = _library_centre(model, init, sgd_iter, batch, sgd_step, rng, polish_steps)
            t_sgd = time.perf_counter() - t0
            c_sgd = info["cpu"]
            p = np.clip(model.predict(centre[:1], data.test_users, data.test_items), *clip).mean(axis=0)
            info["test_rmse"] = float(np.sqrt(np.mean((p - data.test_ratings) ** 2)))
            ctx.status(f"fold {fold}: centre |grad| {info['grad_norm']:.3g} "
                       f"({info['grad_norm_rel']:.2g} of |log pi|), test RMSE {info['test_rmse']:.4f}")
            centre_rows.append([fold, sgd_iter, 500 + polish_steps, info["grad_norm"], info["grad_norm_rel"],
                                info["gap_kind"], info["test_rmse"], info["cpu"]])
        for j, m in enumerate(methods):
            ctx.status(f"fold {fold}: {m} h={steps[m]:g}, {n_iter} iterations")
            start = centre if m.endswith("CV") else init
            t0, c0 = time.perf_counter(), time.process_time()
            it, r = _run(model, m, steps[m], n_iter, batch, start, start, eval_every, test, clip, n_leapfrog,
                         ctx.seed + 100 * fold + j)
            seconds[m] += time.perf_counter() - t0 + (t_sgd if m.endswith("CV") else 0.0)
            cpu_run[m] += time.process_time() - c0
            cpu_setup[m] += c_sgd if m.endswith("CV") else 0.0
            curves[m].append(r)
            finals[m].append(float(r[-1]))
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()

    if centre_rows:
        ctx.write_table("centre", ["fold", "Adam steps", "L-BFGS steps at most", "|grad log pi| at theta_hat",
                                   "|grad| / max(1, |log pi|)", "mode_gap measure", "test RMSE at theta_hat",
                                   "CPU s"], centre_rows,
                        title=("theta_hat from sgmc.optimize.find_mode (Adam, then the L-BFGS polish on the full "
                               "posterior), checked by mode_gap: the gradient norm (no gap in posterior sds: no "
                               "Hessian above POLISH_MAX_DIM and no curvature bound)."))
    base = float(np.mean(baseline))
    rows = []
    for m in methods:
        f = np.asarray(finals[m])
        sd = float(f.std(ddof=1)) if f.size > 1 else float("nan")
        rows.append([m, steps[m], float(f.mean()), sd, float(np.mean(np.stack(curves[m])[:, 0])), seconds[m] / len(folds),
                     cpu_setup[m] / len(folds), 1e3 * cpu_run[m] / (len(folds) * n_iter)])
    rows.append(["training mean", float("nan"), base, float(np.std(baseline, ddof=1)) if len(baseline) > 1 else float("nan"),
                 base, 0.0, float("nan"), float("nan")])
    ctx.write_table(
        "table_rmse", ["method", "h", "final RMSE (mean)", "RMSE sd over folds", f"RMSE at iteration {eval_every}",
                       "seconds per fold", "set-up CPU s per fold", "CPU ms per iteration"], rows,
        title=(f"BPMF on MovieLens: test RMSE of the averaged prediction after {n_iter} iterations, "
               f"{len(folds)} fold(s), n = {batch_frac:g} N, d = {d}, SGHMC L = {n_leapfrog}; seconds on the wall "
               "clock (the CV set-up included); CPU: the search for theta_hat, and the sampling run (its test "
               "predictions included) per iteration"), digits=4)
    ctx.notes.update({"folds": list(folds), "n_iter": n_iter, "sgd_iter": sgd_iter, "eval_every": eval_every,
                      "n_leapfrog": n_leapfrog, "source": first.source, "n_users": first.n_users,
                      "n_items": first.n_items, "training_mean_rmse": base})
    cols = ["iteration"] + list(methods)
    series = [np.mean(np.stack(curves[m]), axis=0) for m in methods]
    ctx.write_table("fig6_rmse", cols, [[int(i)] + [float(s[k]) for s in series] for k, i in enumerate(it)],
                    title="Figure 6 data: test RMSE averaged over folds", digits=4)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for m, s in zip(methods, series):
        ax.plot(it, s, label=m, ls="--" if m.endswith("CV") else "-")
    ax.axhline(base, color="grey", lw=0.8, ls=":", label="training mean")
    lo = min(float(np.min(s)) for s in series)
    ax.set_ylim(lo - 0.02, min(base + 0.1, max(float(np.max(s)) for s in series)) + 0.02)
    ax.set_xlabel("iteration")
    ax.set_ylabel("test RMSE")
    ax.set_title(f"BPMF, MovieLens ({len(folds)} fold(s))")
    ax.legend()
    ctx.save_figure(fig, "fig6.png")
    ctx.status(" | ".join(f"{r[0]}: {r[2]:.4f}" for r in rows))


EXPERIMENT = Experiment(
    "bpmf-movielens",
    "Figure 6: BPMF on MovieLens, test RMSE of SGLD, SGLD-CV, SGHMC, SGHMC-CV against iterations",
    run,
    "Nemeth and Fearnhead (2021), section 6.3, Figure 6",
)
