"""Figure 5 of Nemeth and Fearnhead (2021), section 6.2: a Bayesian neural network on MNIST.

The model is :class:`sgmc.models.BayesianNeuralNetwork` (784-100-10, softmax at both layers,
Gamma(1, 1) prior precisions sampled on the log scale). Six samplers run on it, SGLD, SGHMC and
SGNHT, each with the plain minibatch gradient and with control variates, with minibatches of 1% of
the training data, and the test log-loss (review eq. 15) is recorded every ``eval_every``
iterations, from the current draw (as the review's figure) and from the running posterior-predictive
average of the draws so far.

Settings (``../specs`` section 4.2): 10^4 iterations; the standard methods get 10^4 burn-in
iterations first, the control-variate methods the library's mode search instead
(:func:`sgmc.optimize.find_mode`, 10^4 Adam iterations then the L-BFGS polish on the full data, on the
weights with the precisions held at 1, checked by :func:`sgmc.optimize.mode_gap`; their centre and
the chains' start, see :func:`_library_centre`; the same search on all coordinates, the joint mode,
is the control ``joint_control``); SGHMC(-CV) makes L = 5 gradient estimates per iteration, so it runs 2,000
iterations (and 2,000 burn-in iterations) to match the compute. Iterations in the outputs are
counted in gradient estimates, so all six share one axis.

Step sizes are tuned by a pilot rule, never on the test set: the pilots fit the network to 80% of
the training images; for each method, ``pilot_iter`` iterations (in gradient estimates) at each h of
a grid; the h whose posterior-predictive average over the pilot's second half has the smallest
log-loss on the other 20% (validation) wins, the grid extended past an end where the best lies; a
pilot that diverges is out. The step carries over to the full N as 1 / N (SGLD) or 1 / sqrt(N).

Data: MNIST's IDX files when ``path=`` names their folder (nothing is downloaded); otherwise
scikit-learn's 1,797 8x8 digits (80% training, N = 1,438, so n = 14; 20% test), with the network's
input layer of 64. Several chains (``chains``, default 4) run side by side as independent replicates;
the tables give their mean and its standard error.

Options (``reproduce("bnn-mnist", out, **options)``): ``path``, ``n_train``, ``n_test`` (MNIST subsets),
``n_hidden`` (100), ``hidden`` ("softmax"), ``batch_fraction`` (0.01), ``n_iter`` (10^4, quick 400),
``burn_in`` (10^4, quick 1,000), ``sgd_iter`` (10^4, quick 1,000), ``sgd_step`` (Adam's rate; find_mode's
default), ``joint_control`` (True),
``n_leapfrog`` (5), ``chains`` (4, quick 2), ``eval_every`` (100, quick 20), ``pilot_iter`` (2,000,
quick 100), ``methods`` (all six), ``step_sizes`` (a dict method -> h that skips the pilot; quick:
:data:`QUICK_STEP_SIZES`).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from ._output import Context, Experiment

__all__ = ["EXPERIMENT", "METHODS", "QUICK_STEP_SIZES", "run"]

# method -> (sampler, estimator)
METHODS = {
    "SGLD": ("sgld", "minibatch"),
    "SGLD-CV": ("sgld", "cv"),
    "SGHMC": ("sghmc", "minibatch"),
    "SGHMC-CV": ("sghmc", "cv"),
    "SGNHT": ("sgnht", "minibatch"),
    "SGNHT-CV": ("sgnht", "cv"),
}

# Pilot grids of h (sgmc's units, docs/samplers.md), scaled by N_digits / N: the Langevin step scales
# like 1 / N and the momentum samplers' like 1 / sqrt(N).
_N_REF = 1438

# The quick size skips the pilots (too short to be reliable: a 100-iteration pilot chose an SGNHT step
# that later collapsed to uniform predictions) and uses the steps the full size's pilots chose on
# the digits (docs/reproduce-bnn.md).
QUICK_STEP_SIZES = {"SGLD": 3e-3, "SGLD-CV": 3e-3, "SGHMC": 3e-2, "SGHMC-CV": 3e-3, "SGNHT": 1e-2,
                    "SGNHT-CV": 3e-3}
_GRID_LANGEVIN = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2)
_GRID_MOMENTUM = (3e-3, 1e-2, 3e-2, 1e-1)


def _log_loss(probs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    p = np.take_along_axis(probs, labels[None, :, None], axis=-1)[..., 0]
    return -np.mean(np.log(np.maximum(p, np.finfo(probs.dtype).tiny)), axis=-1)


def _curves(model: Any, draws: np.ndarray, X: np.ndarray, y: np.ndarray) -> dict:
    """Log-loss and accuracy of each kept draw and of the running average of the predictive."""
    chains, n_draws, _ = draws.shape
    total = np.zeros((chains, X.shape[0], model.n_classes))
    cur, avg, acc_cur, acc_avg = (np.empty((chains, n_draws)) for _ in range(4))
    for j in range(n_draws):
        p = np.asarray(model.predict_proba(draws[:, j, :], X))
        total += p
        mean = total / (j + 1)
        cur[:, j] = _log_loss(p, y)
        avg[:, j] = _log_loss(mean, y)
        acc_cur[:, j] = np.mean(np.argmax(p, axis=-1) == y, axis=-1)
        acc_avg[:, j] = np.mean(np.argmax(mean, axis=-1) == y, axis=-1)
    return {"current": cur, "average": avg, "acc_current": acc_cur, "acc_average": acc_avg}


def _library_centre(model: Any, init: np.ndarray, n_steps: int, lr0: Any, batch: int, rng: Any) -> tuple:
    """The control variates' centre from :func:`sgmc.optimize.find_mode` (Adam, then the L-BFGS polish
    on the full posterior), on the weights' posterior given lambda = 1; then each log precision at
    its conditional mode given the weights, log((m / 2 + 1) / (1 + |w|^2 / 2)).

    The joint mode over weights and log precisions is degenerate for prediction (the hierarchical
    prior rewards shrinking a whole layer towards zero with its precision growing): the same search
    on all coordinates ends at uniform predictions, which :func:`_joint_control` measures. Returns the
    centre and the search's report (:func:`sgmc.experiments._centre.library_centre`).
    """
    from ._centre import Conditional, library_centre

    free = np.ones(model.dim, dtype=bool)
    free[-4:] = False
    cond = Conditional(model, free, np.zeros(model.dim))
    w, info = library_centre(cond, np.asarray(init, dtype=float)[free], rng, n_steps=n_steps, step_size=lr0,
                             batch_size=batch)
    return _precision_modes(model, cond.full(w), lr0, "the search"), info


def _joint_control(model: Any, init: np.ndarray, n_steps: int, lr0: Any, batch: int, rng: Any) -> tuple:
    """The same search (find_mode, L-BFGS polish, mode_gap) on all coordinates: the joint mode."""
    from ._centre import library_centre

    return library_centre(model, np.asarray(init, dtype=float), rng, n_steps=n_steps, step_size=lr0,
                          batch_size=batch)


def _sgd_centre(model: Any, init: np.ndarray, n_steps: int, lr0: float, batch: int, rng: Any) -> np.ndarray:
    """The control variates' centre: SGD on the weights with the precisions held at lambda = 1.

    The joint mode over weights and log precisions is degenerate for prediction: the hierarchical
    prior rewards shrinking a whole layer towards zero with its precision growing (the "funnel"),
    and plain SGD on all coordinates ends at weights near zero and a test log-loss of log 10
    (uniform predictions). So the weights are optimised with lambda fixed at 1, the Gamma(1, 1) prior's
    mean, by SGD with the learning rate ``lr0 / sqrt(1 + k / 100)`` and the average of the second
    half's iterates (as :func:`sgmc.optimize.find_mode`); then each log precision is set to its
    conditional mode given the weights, log((m / 2 + 1) / (1 + |w|^2 / 2)).
    """
    theta = np.array(init, dtype=float)
    theta[-4:] = 0.0
    avg, half = np.zeros_like(theta), n_steps // 2
    scale = model.n_data / batch
    for k in range(n_steps):
        idx = rng.integers(0, model.n_data, (1, batch))
        g = model.grad_log_prior(theta[None, :]) + scale * model.grad_log_lik_sum(theta[None, :], idx)
        g[:, -4:] = 0.0
        theta = theta + lr0 / math.sqrt(1.0 + k / 100.0) * g[0]
        if k >= half:
            avg += theta
    return _precision_modes(model, avg / max(1, n_steps - half), lr0, "the SGD search")


def _precision_modes(model: Any, out: np.ndarray, lr0: Any, search: str) -> np.ndarray:
    """``out`` with each log precision set to its mode given the weights, log((m / 2 + 1) / (1 + |w|^2 / 2)).

    Raises ``FloatingPointError`` naming ``search`` and ``sgd_step`` when the centre is not finite.
    """
    lo = 0
    for j, m in enumerate(model.sizes):
        with np.errstate(over="ignore", invalid="ignore"):  # diverged weights: reported below
            ratio = (0.5 * m + 1.0) / (1.0 + 0.5 * float(np.sum(out[lo:lo + m] ** 2)))
        out[model.dim - 4 + j] = math.log(ratio) if ratio > 0 else -math.inf
        lo += m
    if not np.all(np.isfinite(out)):
        msg = f"{search} for the control variates' centre diverged; give a smaller `sgd_step` (was {lr0})"
        raise FloatingPointError(msg)
    return out


def _sample(model, method, h, n_grad, burn_grad, init, centre, batch, n_leapfrog, thin_grad, rng):
    import sgmc

    sampler, estimator = METHODS[method]
    per = n_leapfrog if sampler == "sghmc" else 1
    n_iter, burn = max(1, n_grad // per), burn_grad // per
    thin = max(1, thin_grad // per)
    opts = {"n_leapfrog": n_leapfrog} if sampler == "sghmc" else {}
    est_opts = {"centre": centre} if estimator == "cv" else {}
    start = centre if estimator == "cv" else init
    t0 = time.perf_counter()
    # keep the last draw of every block of `thin` iterations, so the last kept draw is the last one
    trace = sgmc.sample(model, sampler, estimator, step_size=h, batch_size=batch, n_iter=burn + n_iter,
                        burn_in=burn + thin - 1, thin=thin, chains=init.shape[0], init=start, rng=rng,
                        progress=False, sampler_options=opts, estimator_options=est_opts)
    seconds = time.perf_counter() - t0
    iters = (np.asarray(trace.iterations) - burn + 1) * per
    return np.asarray(trace.draws), iters, seconds


def _pilot_score(model, method, h, pilot_grad, init, centre, batch, n_leapfrog, Xval, yval, rng):
    """Log-loss on held-out validation images of the predictive average over a pilot's second half."""
    try:
        draws, _, _ = _sample(model, method, h, pilot_grad, 0, init, centre, batch, n_leapfrog,
                              max(1, pilot_grad // 20), rng)
    except FloatingPointError:
        return math.inf
    half = draws[:, draws.shape[1] // 2:, :]
    loss = _curves(model, half, Xval, yval)["average"][:, -1]
    return float(np.mean(loss)) if np.all(np.isfinite(loss)) else math.inf


def _pilot(ctx, model, method, grid, pilot_grad, init, centre, batch, n_leapfrog, Xval, yval, rng, extend=2):
    """The grid step whose pilot predicts the validation images best; the grid is extended by up to
    ``extend`` steps (one grid ratio each) past an end where the best lies. Returns the step, the
    scores and whether the choice is still at an end of the steps tried."""
    ss = rng if isinstance(rng, np.random.SeedSequence) else np.random.SeedSequence(rng)
    scores = {}
    for h in grid:
        scores[h] = _pilot_score(model, method, h, pilot_grad, init, centre, batch, n_leapfrog, Xval, yval,
                                 ss.spawn(1)[0])
    for _ in range(extend):
        steps = sorted(scores)
        best = min(scores, key=lambda k: scores[k])
        if len(steps) < 2 or best not in (steps[0], steps[-1]):
            break
        new = steps[0] ** 2 / steps[1] if best == steps[0] else steps[-1] ** 2 / steps[-2]
        scores[new] = _pilot_score(model, method, new, pilot_grad, init, centre, batch, n_leapfrog, Xval, yval,
                                   ss.spawn(1)[0])
    scores = dict(sorted(scores.items()))
    best = min(scores, key=lambda k: scores[k])
    at_edge = best in (min(scores), max(scores))
    ctx.status(f"pilot {method}: " + ", ".join(f"h={h:.3g}: {s:.3f}" for h, s in scores.items())
               + f" -> h={best:.3g}" + (" (still at the edge)" if at_edge else ""))
    return best, scores, at_edge


def run(ctx: Context) -> dict:
    from sgmc.datasets import mnist
    from sgmc.models import BayesianNeuralNetwork

    q = ctx.quick
    path = ctx.option("path", None)
    data = mnist(path, n_train=ctx.option("n_train", None), n_test=ctx.option("n_test", None), seed=ctx.seed)
    n_hidden = int(ctx.option("n_hidden", 100))
    model = BayesianNeuralNetwork(data.X, data.y, n_hidden, 10, hidden=ctx.option("hidden", "softmax"))
    N = model.n_data
    batch = max(1, int(round(float(ctx.option("batch_fraction", 0.01)) * N)))
    n_grad = int(ctx.option("n_iter", 400 if q else 10_000))
    burn_grad = int(ctx.option("burn_in", 1000 if q else 10_000))
    sgd_iter = int(ctx.option("sgd_iter", 1000 if q else 10_000))
    sgd_step = ctx.option("sgd_step", None)  # Adam's rate in find_mode; None: find_mode's default
    sgd_step = None if sgd_step is None else float(sgd_step)
    n_leapfrog = int(ctx.option("n_leapfrog", 5))
    chains = int(ctx.option("chains", 2 if q else 4))
    every = int(ctx.option("eval_every", 20 if q else 100))
    pilot_grad = int(ctx.option("pilot_iter", 100 if q else 2000))
    methods = list(ctx.option("methods", list(METHODS)))
    given = dict(ctx.option("step_sizes", QUICK_STEP_SIZES if q else {}))
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        msg = f"`methods` must be among {', '.join(METHODS)}; got {unknown}"
        raise ValueError(msg)
    ctx.status(f"{data.source}: N = {N} training and {data.X_test.shape[0]} test images, "
               f"network {model.n_inputs}-{n_hidden}-10 (dim {model.dim}), n = {batch}, {chains} chains")
    ctx.notes.update(data=data.source, n_data=N, n_test=int(data.X_test.shape[0]), dim=model.dim,
                     batch_size=batch, chains=chains, n_iter=n_grad, burn_in=burn_grad, sgd_iter=sgd_iter,
                     sgd_step=sgd_step, eval_every=every, pilot_iter=pilot_grad, hidden=model.hidden)

    seeds = np.random.SeedSequence(ctx.seed).spawn(4 + 2 * len(METHODS))
    init = np.random.default_rng(seeds[0]).normal(size=(chains, model.dim))
    # The pilots fit a network to 80% of the training images and are scored on the other 20%: a
    # score on images the pilot was fitted to rewards chains that stay at the SGD optimum (the
    # smallest steps of every CV pilot did); the test images are never used for tuning.
    perm = np.random.default_rng(seeds[1]).permutation(N)
    n_val = max(1, N // 5)
    val, fit = perm[:n_val], perm[n_val:]
    pilot_model = BayesianNeuralNetwork(data.X[fit], data.y[fit], n_hidden, 10, hidden=model.hidden)
    pilot_batch = max(1, int(round(float(ctx.option("batch_fraction", 0.01)) * pilot_model.n_data)))
    Xval, yval = data.X[val], data.y[val]
    initial = _log_loss(np.asarray(model.predict_proba(init, data.X_test)), data.y_test)

    centre, sgd_seconds, pilot_centre = None, 0.0, None
    if any(METHODS[m][1] == "cv" for m in methods):
        t0 = time.perf_counter()
        centre, info = _library_centre(model, init[0], sgd_iter, sgd_step, batch, seeds[2])
        sgd_seconds = time.perf_counter() - t0
        sgd_loss = float(_log_loss(np.asarray(model.predict_proba(centre, data.X_test)), data.y_test)[0])
        ctx.status(f"centre: find_mode, {sgd_iter} Adam steps and the L-BFGS polish in {sgd_seconds:.1f} s, "
                   f"|grad| {info['grad_norm']:.3g}, test log-loss {sgd_loss:.3f}")
        ctx.notes["sgd_log_loss"] = sgd_loss
        ctx.notes["centre"] = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in info.items()}
        centre_rows = [["find_mode on the weights given lambda = 1, L-BFGS polish (the protocol)", info["grad_norm"],
                        info["grad_norm_rel"], info["gap_kind"], sgd_loss, info["cpu"]]]
        if bool(ctx.option("joint_control", True)):
            ctx.status("control: the same search on all coordinates (the joint mode) ...")
            joint, jinfo = _joint_control(model, init[0], sgd_iter, sgd_step, batch, seeds[2])
            jloss = float(_log_loss(np.asarray(model.predict_proba(joint, data.X_test)), data.y_test)[0])
            centre_rows.append(["find_mode on all coordinates, L-BFGS polish (control: the joint mode)",
                                jinfo["grad_norm"], jinfo["grad_norm_rel"], jinfo["gap_kind"], jloss, jinfo["cpu"]])
        ctx.write_table("centre", ["search", "|grad log pi| at the point", "|grad| / max(1, |log pi|)",
                                   "mode_gap measure", "test log-loss at the point", "CPU s"], centre_rows,
                        title=(f"The control variates' centre: sgmc.optimize.find_mode ({sgd_iter} Adam steps, "
                               "then the L-BFGS polish on the full posterior), checked by mode_gap (the "
                               "gradient norm; no gap in posterior sds: no Hessian above POLISH_MAX_DIM and no "
                               "curvature bound); for the weights' search the gradient is the conditional one."))
        if not given.keys() >= {m for m in methods if METHODS[m][1] == "cv"}:
            pilot_centre, _ = _library_centre(pilot_model, init[0], sgd_iter, sgd_step, pilot_batch, seeds[3])

    results, steps, pilots = {}, {}, {}
    bar = ctx.bar(len(methods), "bnn-mnist")
    for k, method in enumerate(methods):
        sampler = METHODS[method][0]
        c = centre if METHODS[method][1] == "cv" else None
        if method in given:
            h = float(given[method])
        else:
            # steps scale like 1 / N (Langevin) or 1 / sqrt(N) (momentum): the pilot network's N is 80%
            # of the training set's, and its step is carried over to the full N the same way
            base = _GRID_MOMENTUM if sampler in ("sghmc", "sgnht") else _GRID_LANGEVIN
            power = 1.0 if sampler == "sgld" else 0.5
            grid = [g * (_N_REF / pilot_model.n_data) ** power for g in base]
            pc = pilot_centre if METHODS[method][1] == "cv" else None
            h_pilot, scores, at_edge = _pilot(ctx, pilot_model, method, grid, pilot_grad, init, pc, pilot_batch,
                                              n_leapfrog, Xval, yval, seeds[4 + 2 * k])
            h = h_pilot * (pilot_model.n_data / N) ** power
            pilots[method] = {"h_pilot": h_pilot, "scores": scores, "at_edge": at_edge}
        steps[method] = h
        draws, iters, seconds = _sample(model, method, h, n_grad, burn_grad, init, c, batch, n_leapfrog,
                                        every, seeds[5 + 2 * k])
        curves = _curves(model, draws, data.X_test, data.y_test)
        setup = sgd_seconds if c is not None else 0.0
        results[method] = dict(iterations=iters, seconds=seconds + setup, **curves)
        ctx.status(f"{method}: h = {h:.3g}, {seconds:.1f} s, final log-loss "
                   f"{np.mean(curves['current'][:, -1]):.3f} (draw), {np.mean(curves['average'][:, -1]):.3f} (average)")
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()

    def mean_se(v):
        v = np.asarray(v, dtype=float)
        return float(np.mean(v)), float(np.std(v, ddof=1) / math.sqrt(v.size)) if v.size > 1 else math.nan

    columns = ["method", "h", "log-loss (draw)", "se", "log-loss (average)", "se", "accuracy (average)",
               "seconds"]
    rows, summary = [], {}
    for method, r in results.items():
        d_m, d_s = mean_se(r["current"][:, -1])
        a_m, a_s = mean_se(r["average"][:, -1])
        acc = float(np.mean(r["acc_average"][:, -1]))
        rows.append([method, steps[method], d_m, d_s, a_m, a_s, acc, round(r["seconds"], 1)])
        summary[method] = {"h": steps[method], "draw": d_m, "draw_se": d_s, "average": a_m, "average_se": a_s,
                           "accuracy": acc, "seconds": r["seconds"],
                           "per_chain_draw": r["current"][:, -1].tolist(),
                           "per_chain_average": r["average"][:, -1].tolist()}
    i_m, i_s = mean_se(initial)
    rows.append(["initial (N(0, 1) weights)", math.nan, i_m, i_s, math.nan, math.nan, math.nan, 0.0])
    title = (f"Test log-loss after {n_grad} iterations (gradient estimates), mean over {chains} chains "
             f"({data.source}, N = {N}, n = {batch}); seconds include burn-in or SGD")
    ctx.write_table("table_fig5", columns, rows, title=title)
    if pilots:
        ctx.write_table("pilots", ["method", "h (pilot N)", "h (full N)", "at edge after extension",
                                   "validation log-loss by h"],
                        [[m, p["h_pilot"], steps[m], "yes" if p["at_edge"] else "no",
                          " ".join(f"{h:.3g}:{v:.3g}" for h, v in p["scores"].items())] for m, p in pilots.items()],
                        title=(f"Pilots: {pilot_grad} iterations per step on 80% of the training images "
                               f"(N = {pilot_model.n_data}), scored by the validation log-loss of the "
                               "predictive average over the pilot's second half; grid extended past an edge."))
    fig = _figure(results, n_grad)
    ctx.save_figure(fig, "fig5.png")
    return {"summary": summary, "initial": {"mean": i_m, "se": i_s, "per_chain": initial.tolist()},
            "curves": {m: {"iterations": r["iterations"].tolist(), "current": r["current"].mean(0).tolist(),
                           "average": r["average"].mean(0).tolist()} for m, r in results.items()},
            "step_sizes": steps, "rows": rows, "pilots": pilots}


def _figure(results: dict, n_grad: int) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    colours = {"SGLD": "C0", "SGHMC": "C1", "SGNHT": "C2"}
    for method, r in results.items():
        base = method.removesuffix("-CV")
        style = "--" if method.endswith("-CV") else "-"
        for ax, key in zip(axes, ("current", "average")):
            ax.plot(r["iterations"], r[key].mean(0), style, color=colours[base], label=method, lw=1.3)
    axes[0].set_title("from the current draw")
    axes[1].set_title("from the posterior-predictive average")
    for ax in axes:
        ax.set_xlabel("iteration (gradient estimates)")
        ax.set_yscale("log")
        ax.set_xlim(0, n_grad)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test log-loss")
    axes[1].legend(ncol=2, fontsize=8)
    fig.tight_layout()
    return fig


EXPERIMENT = Experiment(
    name="bnn-mnist",
    title="Figure 5: a Bayesian neural network on MNIST (8x8 digits offline), six SGMCMC methods",
    run=run,
    paper="Nemeth & Fearnhead (2021), section 6.2, Figure 5",
)
