"""``tbptt-copy``: fixed against adaptive truncated BPTT on the copy task (Aicher thesis 4.4.1, Table 4.1).

A 2-layer LSTM (embedding 6, hidden and cell size 50, linear output layer) learns the copy task with
I = 6 data symbols and copy length m = 10 (``m="variable"``: m uniform on [5, 10]) by SGD with
minibatches of 64 streams and learning rate 1.0 scaled by sqrt(K), on BPTT(2K, K) gradients: fixed
K in {5, 10, 15, 20, 30} against the adaptive K of Algorithm 6 (:mod:`sgmc.rnn`) with
delta in {0.9, 0.5, 0.1}, window R = 100, K0 = 15 and K in [2, 100]. As in the thesis's published
code, the gradient of each chunk's summed loss is clipped to norm 1 (``clip_sum``) and the weight
decay is 1e-5 (the thesis's text mentions neither). The thesis trains on T = 256,000 steps and
validates and tests on 64,000 each.

Every method is run from the same initial parameters for each seed (``seeds``; the data are drawn
once, from the first seed) and gets the same training-time budget (``max_time`` seconds on the
``clock``: ``"cpu"``, the run's process CPU time with one torch thread, by default; or ``"wall"``);
the adaptive methods' estimates of K count in it. Runs are spread over ``cores`` (one process per
core, pinned to it with ``os.sched_setaffinity``). After each epoch the validation and test
perplexities (exp of the mean cross-entropy) are recorded against the training CPU and wall time.
Each finished run is appended to ``runs.jsonl`` in the output folder; ``resume=PATH`` (such a file
from an interrupted command) reuses the runs it holds and trains only the others.

Tables: ``summary`` (per method, mean and standard deviation over seeds of the best validation
perplexity and the test perplexity at that epoch), ``vs_best_fixed`` (each adaptive method against
the fixed K with the lowest mean), ``ppl_vs_cpu`` and ``ppl_vs_wall`` (the best validation perplexity
reached by a few training times, mean (sd) over seeds), ``runs`` (one row per method and seed) and
``curve`` (every epoch of every run). Figure: validation perplexity against CPU and wall time, and K.

Options (``reproduce("tbptt-copy", out, **options)``): ``t_train``, ``t_eval``, ``m`` (an int or
``"variable"``), ``hidden``, ``layers``, ``embed``, ``batch``, ``lr``, ``ks``, ``deltas``, ``window``,
``n_starts``, ``k0``, ``k_min``, ``k_max``, ``epochs``, ``max_time`` (seconds per run), ``clock``,
``clip_sum``, ``weight_decay``, ``optimizer`` ("sgd" or "adam"), ``scale_lr`` (the sqrt(K) factor), ``seeds``, ``cores`` (CPU ids, one worker process each; ``()`` runs in
this process), ``threads`` (torch threads per run, 1 by default), ``full_epochs`` and ``full_inits``
(the training length, 210 epochs, and the 9 initialisations of the thesis's published scripts, for
the ``cost`` table's projection).
"""

from __future__ import annotations

import math
import os
import time

from ._output import Context, Experiment

FULL = {"t_train": 256_000, "t_eval": 64_000, "hidden": 50, "layers": 2, "embed": 6, "batch": 64, "m": 10,
        "ks": (5, 10, 15, 20, 30), "deltas": (0.9, 0.5, 0.1), "window": 100, "n_starts": 64, "k0": 15,
        "k_min": 2, "k_max": 100, "epochs": 210, "max_time": 80.0, "seeds": (0, 1, 2), "cores": ()}
QUICK = {"t_train": 4096, "t_eval": 1024, "hidden": 16, "layers": 1, "embed": 6, "batch": 16, "m": 4,
         "ks": (2, 8), "deltas": (0.5,), "window": 20, "n_starts": 16, "k0": 4, "k_min": 2, "k_max": 30,
         "epochs": 2, "max_time": 60.0, "seeds": (0,), "cores": ()}


def _ppl(loss: float) -> float:
    return math.exp(loss) if math.isfinite(loss) and loss < 700 else math.inf


def _best_by(times: list, valid: list, t: float) -> float:
    seen = [v for w, v in zip(times, valid) if w <= t and math.isfinite(v)]
    return _ppl(min(seen)) if seen else math.nan


def _mean_sd(values: list) -> tuple:
    vals = [v for v in values if math.isfinite(v)]
    if not vals:
        return math.nan, math.nan
    mean = sum(vals) / len(vals)
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else math.nan
    return mean, sd


def _fmt(mean: float, sd: float) -> str:
    if not math.isfinite(mean):
        return "-"
    return f"{mean:.3f}" if not math.isfinite(sd) else f"{mean:.3f} ({sd:.3f})"


def _pin(cores, counter) -> None:  # pragma: no cover - runs in the worker processes
    with counter.get_lock():
        core = cores[counter.value % len(cores)]
        counter.value += 1
    os.sched_setaffinity(0, {core})


def _train_one(job: dict) -> dict:
    """One (method, seed) run; a top-level function so that worker processes can run it."""
    from ..rnn._checks import torch  # the experiment needs PyTorch (pip install "sgmc[rnn]")
    from ..rnn import LSTMLanguageModel, copy_task, train_tbptt

    opt = job["opt"]
    c0 = time.process_time()
    old = torch.get_num_threads()
    torch.set_num_threads(int(job["threads"]))
    try:
        gen = torch.Generator().manual_seed(job["data_seed"])
        m_arg = (5, 10) if opt["m"] == "variable" else int(opt["m"])
        data = {name: copy_task(n, m=m_arg, generator=gen) for name, n in
                (("train", int(opt["t_train"])), ("valid", int(opt["t_eval"])), ("test", int(opt["t_eval"])))}
        torch.manual_seed(job["seed"])  # the same initial parameters for every method of this seed
        model = LSTMLanguageModel(data["train"].n_symbols, embed_dim=int(opt["embed"]),
                                  hidden_dim=int(opt["hidden"]), num_layers=int(opt["layers"]))
        setting = job["setting"]
        adaptive = isinstance(setting, float)
        res = train_tbptt(
            model, (data["train"].inputs, data["train"].targets), (data["valid"].inputs, data["valid"].targets),
            (data["test"].inputs, data["test"].targets), k="adaptive" if adaptive else setting,
            delta=setting if adaptive else 0.5, k0=int(opt["k0"]), k_min=int(opt["k_min"]), k_max=int(opt["k_max"]),
            window=int(opt["window"]), n_starts=int(opt["n_starts"]), batch_size=int(opt["batch"]), lr=job["lr"],
            epochs=int(opt["epochs"]), clip_sum=job["clip_sum"], weight_decay=job["weight_decay"],
            optimizer=job["optimizer"], scale_lr=job["scale_lr"],
            max_time=float(opt["max_time"]), clock=job["clock"],
            generator=torch.Generator().manual_seed(job["seed"] + 1000))
    finally:
        torch.set_num_threads(old)
    names = ("epoch", "wall_s", "cpu_s", "k", "train_loss", "valid_loss", "test_loss", "beta", "relative_bias")
    return {"label": job["label"], "seed": job["seed"], "job_cpu_s": time.process_time() - c0,
            **{n: list(getattr(res, n)) for n in names}}


def _run_all(ctx: Context, jobs: list, cores: tuple, resume: str | None) -> list:
    import json

    out = []
    if resume:  # runs finished by an earlier, interrupted command (its runs.jsonl)
        with open(resume, encoding="utf-8") as fh:
            out = [json.loads(line) for line in fh if line.strip()]
        wanted = {(j["label"], j["seed"]) for j in jobs}
        out = [r for r in out if (r["label"], r["seed"]) in wanted]
        done = {(r["label"], r["seed"]) for r in out}
        jobs_left = [j for j in jobs if (j["label"], j["seed"]) not in done]
    else:
        jobs_left = list(jobs)
    log = ctx.path("runs.jsonl")
    with open(log, "w", encoding="utf-8") as fh:
        for r in out:
            fh.write(json.dumps(r) + "\n")

    def keep(res):
        out.append(res)
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(res) + "\n")
        ctx.status(f"{res['label']}, seed {res['seed']}: done, {res['cpu_s'][-1]:.0f} CPU s")

    if not cores:
        for job in jobs_left:
            keep(_train_one(job))
    else:
        import multiprocessing as mp

        spawn = mp.get_context("spawn")
        counter = spawn.Value("i", 0)
        with spawn.Pool(len(cores), initializer=_pin, initargs=(tuple(cores), counter)) as pool:
            for res in pool.imap_unordered(_train_one, jobs_left):
                keep(res)
    order = {(j["label"], j["seed"]): i for i, j in enumerate(jobs)}
    return sorted(out, key=lambda r: order[(r["label"], r["seed"])])


def run(ctx: Context) -> dict:
    size = dict(QUICK if ctx.quick else FULL)
    opt = {key: ctx.option(key, default) for key, default in size.items()}
    lr = float(ctx.option("lr", 1.0))
    clip_sum = ctx.option("clip_sum", 1.0)
    clip_sum = None if clip_sum is None else float(clip_sum)
    weight_decay = float(ctx.option("weight_decay", 1e-5))
    threads = int(ctx.option("threads", 1))
    clock = str(ctx.option("clock", "cpu"))
    seeds = [int(s) for s in opt["seeds"]]
    cores = tuple(int(c) for c in opt["cores"])
    methods = [(f"K = {int(k)}", int(k)) for k in opt["ks"]] + [(f"delta = {float(d)}", float(d)) for d in opt["deltas"]]
    jobs = [{"label": label, "setting": setting, "seed": ctx.seed + s, "data_seed": ctx.seed, "opt": opt, "lr": lr,
             "clip_sum": clip_sum, "weight_decay": weight_decay, "threads": threads, "clock": clock,
             "optimizer": str(ctx.option("optimizer", "sgd")), "scale_lr": bool(ctx.option("scale_lr", True))}
            for s in seeds for label, setting in methods]
    resume = ctx.option("resume", None)
    results = _run_all(ctx, jobs, cores, None if resume is None else str(resume))
    by_method: dict = {label: [r for r in results if r["label"] == label] for label, _ in methods}

    def best(r):
        i = min(range(len(r["epoch"])), key=lambda j: r["valid_loss"][j] if math.isfinite(r["valid_loss"][j]) else math.inf)
        return i

    runs, curve = [], []
    for label, rs in by_method.items():
        for r in rs:
            i = best(r)
            ks = sorted(set(r["k"]))
            k_text = str(ks[0]) if len(ks) == 1 else f"{r['k'][0]} -> {r['k'][-1]} (range {ks[0]}-{ks[-1]})"
            runs.append([label, r["seed"], len(r["epoch"]), round(r["cpu_s"][-1], 1), round(r["wall_s"][-1], 1), k_text,
                         _ppl(r["valid_loss"][i]), _ppl(r["test_loss"][i]), r["epoch"][i], round(r["cpu_s"][i], 1)])
            for j in range(len(r["epoch"])):
                curve.append([label, r["seed"], r["epoch"][j], round(r["cpu_s"][j], 2), round(r["wall_s"][j], 2), r["k"][j],
                              r["train_loss"][j], _ppl(r["valid_loss"][j]), _ppl(r["test_loss"][j]), r["beta"][j],
                              r["relative_bias"][j]])
    summary, stats = [], {}
    for label, rs in by_method.items():
        if not rs:
            continue
        bv = [_ppl(r["valid_loss"][best(r)]) for r in rs]
        bt = [_ppl(r["test_loss"][best(r)]) for r in rs]
        stats[label] = (bv, bt)
        all_k = sorted(k for r in rs for k in r["k"])
        last_k = sorted(r["k"][-1] for r in rs)
        k_text = (str(all_k[0]) if all_k[0] == all_k[-1]
                  else f"range {all_k[0]}-{all_k[-1]}, median {all_k[len(all_k) // 2]}, last {'/'.join(map(str, last_k))}")
        summary.append([label, len(rs), round(_mean_sd([len(r["epoch"]) for r in rs])[0], 1),
                        round(_mean_sd([r["cpu_s"][-1] for r in rs])[0], 1), round(_mean_sd([r["wall_s"][-1] for r in rs])[0], 1),
                        k_text, _fmt(*_mean_sd(bv)), _fmt(*_mean_sd(bt)), round(min(bv), 4), round(max(bv), 4)])
    fixed = {label: s for label, s in stats.items() if label.startswith("K =")}
    versus = []
    if fixed:
        best_fixed = min(fixed, key=lambda lab: _mean_sd(fixed[lab][0])[0])
        fm, fs = _mean_sd(fixed[best_fixed][0])
        nf = len(fixed[best_fixed][0])
        for label, (bv, _) in stats.items():
            if label.startswith("delta"):
                am, asd = _mean_sd(bv)
                se = math.sqrt((asd ** 2 if math.isfinite(asd) else 0.0) / len(bv) + (fs ** 2 if math.isfinite(fs) else 0.0) / nf)
                diff = am - fm
                verdict = ("within 2 se" if abs(diff) <= 2 * se else ("better" if diff < 0 else "worse"))
                versus.append([label, _fmt(am, asd), best_fixed, _fmt(fm, fs), round(diff, 4), round(se, 4), verdict])
    full_epochs = int(ctx.option("full_epochs", 210))
    steps = int(opt["t_train"]) // int(opt["batch"])
    cost, grid_cpu = [], 0.0
    for label, rs in by_method.items():
        if not rs:
            continue
        per_epoch = _mean_sd([r["cpu_s"][-1] / len(r["epoch"]) for r in rs])[0]
        extra = _mean_sd([(r["job_cpu_s"] - r["cpu_s"][-1]) / len(r["epoch"]) for r in rs])[0]
        updates = sum(math.ceil(steps / k) for k in [k for r in rs for k in r["k"]]) / sum(len(r["k"]) for r in rs)
        grid_cpu += (per_epoch + extra) * full_epochs
        cost.append([label, round(per_epoch, 3), round(1e3 * per_epoch / updates, 2), round(1e6 * per_epoch / (steps * int(opt["batch"])), 3),
                     round(extra, 3), round(_mean_sd([r["job_cpu_s"] for r in rs])[0], 1),
                     round((per_epoch + extra) * full_epochs / 3600, 2)])
    n_init = int(ctx.option("full_inits", 9))
    cost.append(["all methods, one seed", "", "", "", "", "", round(grid_cpu / 3600, 2)])
    cost.append([f"all methods, {n_init} seeds", "", "", "", "", "", round(n_init * grid_cpu / 3600, 2)])
    budget = float(opt["max_time"])
    cpu_marks = [round(budget * f, 1) for f in (0.25, 0.5, 0.75, 1.0)]
    wall_end = min((r["wall_s"][-1] for r in results), default=0.0)
    wall_marks = [round(wall_end * f, 1) for f in (0.25, 0.5, 0.75, 1.0)]
    by_cpu, by_wall = [], []
    for label, rs in by_method.items():
        by_cpu.append([label] + [_fmt(*_mean_sd([_best_by(r["cpu_s"], r["valid_loss"], t) for r in rs])) for t in cpu_marks])
        by_wall.append([label] + [_fmt(*_mean_sd([_best_by(r["wall_s"], r["valid_loss"], t) for r in rs])) for t in wall_marks])
    setting = (f"copy task m = {opt['m']}, I = 6; T = {opt['t_train']} train, {opt['t_eval']} valid/test; LSTM {opt['layers']} x "
               f"{opt['hidden']}, embedding {opt['embed']}; batch {opt['batch']}, {ctx.option('optimizer', 'sgd')} lr {lr:g}"
               f"{' x sqrt(K)' if ctx.option('scale_lr', True) else ''}, summed-loss gradient "
               f"clipped to {clip_sum}, weight decay {weight_decay:g}; BPTT(2K, K); adaptive: R = {opt['window']}, "
               f"S = {opt['n_starts']}, K0 = {opt['k0']}, K in [{opt['k_min']}, {opt['k_max']}]; budget {budget:g} s of "
               f"training ({clock} time) per run, at most {opt['epochs']} epochs; seeds {len(seeds)}; {threads} torch "
               f"thread(s), one core per run")
    ctx.notes.update({"setting": setting, "lr": lr, "optimizer": str(ctx.option("optimizer", "sgd")),
                      "scale_lr": bool(ctx.option("scale_lr", True)), "clip_sum": clip_sum, "weight_decay": weight_decay, "threads": threads,
                      "clock": clock, **{k: (list(v) if isinstance(v, tuple) else v) for k, v in opt.items()}})
    ctx.write_table("summary", ["method", "seeds", "epochs", "train CPU s", "train wall s", "K used",
                                "best valid PPL mean (sd)", "test PPL at best valid mean (sd)", "min best valid",
                                "max best valid"], summary, title=setting, digits=4)
    ctx.write_table("vs_best_fixed", ["adaptive", "best valid PPL mean (sd)", "best fixed K", "its mean (sd)",
                                      "difference", "se of difference", "verdict"], versus,
                    title="each adaptive method against the fixed K with the lowest mean best validation PPL", digits=4)
    ctx.write_table("ppl_vs_cpu", ["method"] + [f"best valid PPL by {t:g} CPU s" for t in cpu_marks], by_cpu,
                    title="best validation perplexity reached within each training CPU time, mean (sd) over seeds")
    ctx.write_table("ppl_vs_wall", ["method"] + [f"best valid PPL by {t:g} wall s" for t in wall_marks], by_wall,
                    title="best validation perplexity reached within each training wall time, mean (sd) over seeds")
    ctx.write_table("cost", ["method", "training CPU s per epoch", "CPU ms per SGD update", "CPU us per step and stream",
                             "evaluation CPU s per epoch", "job CPU s (this run)", f"projected CPU h for {full_epochs} epochs"],
                    cost, title=(f"measured cost per epoch of T = {opt['t_train']} (training, K estimates included; "
                                 f"evaluation of valid and test, data generation and start-up in the evaluation column), "
                                 f"mean over seeds, and the projection to {full_epochs} epochs per run"), digits=4)
    ctx.write_table("runs", ["method", "seed", "epochs", "train CPU s", "train wall s", "K used", "best valid PPL",
                             "test PPL at best valid", "best epoch", "CPU s at best"], runs, digits=4)
    ctx.write_table("curve", ["method", "seed", "epoch", "CPU s", "wall s", "K", "train loss", "valid PPL", "test PPL",
                              "beta", "relative bias"], curve, digits=5)
    _figure(ctx, by_method, opt["m"])
    return {"summary": summary, "vs_best_fixed": versus}


def _figure(ctx: Context, by_method: dict, m) -> None:
    try:
        import matplotlib
    except ImportError:
        ctx.notes["figure"] = "not drawn: matplotlib is not installed"
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for n, (label, rs) in enumerate(by_method.items()):
        style, color = ("-" if label.startswith("delta") else "--"), f"C{n % 10}"
        for j, r in enumerate(rs):
            kw = {"color": color, "linestyle": style, "linewidth": 1, "label": label if j == 0 else None}
            axes[0].plot(r["cpu_s"], [_ppl(v) for v in r["valid_loss"]], **kw)
            axes[1].plot(r["wall_s"], [_ppl(v) for v in r["valid_loss"]], **kw)
            axes[2].plot(r["cpu_s"], r["k"], **kw)
    for ax, xl in zip(axes, ("training CPU time (s)", "training wall time (s)", "training CPU time (s)")):
        ax.set_xlabel(xl)
    axes[0].set_ylabel("validation perplexity")
    axes[1].set_ylabel("validation perplexity")
    axes[0].set_yscale("log")
    axes[1].set_yscale("log")
    axes[2].set_ylabel("truncation K")
    axes[0].legend(fontsize=7)
    fig.suptitle(f"copy task m = {m}: fixed against adaptive truncated BPTT (one line per seed)")
    ctx.save_figure(fig, "tbptt_copy.png")


EXPERIMENT = Experiment(
    "tbptt-copy",
    "Aicher thesis Table 4.1 / Figure 4.1: fixed against adaptive truncated BPTT on the copy task",
    run,
    "Aicher (2020), thesis section 4.4.1, Table 4.1 and Figure 4.1",
)
