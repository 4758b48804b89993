"""``tbptt-copy``: fixed against adaptive truncated BPTT on the copy task (Aicher thesis 4.4.1, Table 4.1).

A 2-layer LSTM (embedding 6, hidden and cell size 50, linear output layer) learns the copy task with
I = 6 data symbols and copy length m = 10 (``m="variable"``: m uniform on [5, 10]) by SGD with
minibatches of 64 streams and learning rate 1.0 scaled by sqrt(K), on BPTT(2K, K) gradients: fixed
K in {5, 10, 15, 20, 30} against the adaptive K of Algorithm 6 (:mod:`sgmc.rnn`) with
delta in {0.9, 0.5, 0.1}, window R = 100, K0 = 15 and K in [2, 100]. The thesis trains on
T = 256,000 steps and validates and tests on 64,000 each. Every method starts from the same
initial parameters and gets the same training-time budget (``max_time`` seconds on the ``clock``:
``"cpu"``, this process's CPU time with one torch thread, by default, which a machine shared with
other work does not inflate; or ``"wall"``); the adaptive methods' estimates of K count in it. After
each epoch the validation and test perplexities (exp of the mean cross-entropy) are recorded against
the training time so far.

Tables: ``summary`` (per method: epochs, training CPU and wall time, the K used, the best
validation perplexity, the test perplexity at that epoch, and when it was reached), ``ppl_vs_time``
(the best validation perplexity reached by each of a few training times) and ``curve`` (every
epoch). Figure: validation perplexity and K against training time.

Options (``reproduce("tbptt-copy", out, **options)``): ``t_train``, ``t_eval`` (length of the
validation and of the test sequence), ``m`` (an int or ``"variable"``), ``hidden``, ``layers``,
``embed``, ``batch``, ``lr``, ``ks`` (fixed truncations), ``deltas``, ``window``, ``n_starts``, ``k0``,
``k_min``, ``k_max``, ``epochs``, ``max_time`` (seconds per method), ``clock``, ``clip``, ``threads`` (torch
threads, 1 by default so that every method sees one core).
"""

from __future__ import annotations

import math

from ._output import Context, Experiment

FULL = {"t_train": 256_000, "t_eval": 64_000, "hidden": 50, "layers": 2, "embed": 6, "batch": 64, "m": 10,
        "ks": (5, 10, 15, 20, 30), "deltas": (0.9, 0.5, 0.1), "window": 100, "n_starts": 64, "k0": 15,
        "k_min": 2, "k_max": 100, "epochs": 100, "max_time": 600.0}
QUICK = {"t_train": 4096, "t_eval": 1024, "hidden": 16, "layers": 1, "embed": 6, "batch": 16, "m": 4,
         "ks": (2, 8), "deltas": (0.5,), "window": 20, "n_starts": 16, "k0": 4, "k_min": 2, "k_max": 30,
         "epochs": 2, "max_time": 60.0}


def _ppl(loss: float) -> float:
    return math.exp(loss) if math.isfinite(loss) and loss < 700 else math.inf


def _best_by(wall: list, valid: list, t: float) -> float:
    seen = [v for w, v in zip(wall, valid) if w <= t and math.isfinite(v)]
    return _ppl(min(seen)) if seen else math.nan


def run(ctx: Context) -> dict:
    from ..rnn._checks import torch  # the experiment needs PyTorch (pip install "sgmc[rnn]")
    from ..rnn import LSTMLanguageModel, copy_task, train_tbptt

    size = dict(QUICK if ctx.quick else FULL)
    opt = {key: ctx.option(key, default) for key, default in size.items()}
    lr = float(ctx.option("lr", 1.0))
    clip = ctx.option("clip", None)
    threads = int(ctx.option("threads", 1))
    clock = str(ctx.option("clock", "cpu"))
    m = opt["m"]
    m_arg = (5, 10) if m == "variable" else int(m)
    gen = torch.Generator().manual_seed(ctx.seed)
    data = {name: copy_task(n, m=m_arg, generator=gen)
            for name, n in (("train", int(opt["t_train"])), ("valid", int(opt["t_eval"])), ("test", int(opt["t_eval"])))}
    methods = [(f"K = {int(k)}", int(k)) for k in opt["ks"]] + [(f"delta = {float(d)}", float(d)) for d in opt["deltas"]]
    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    histories = {}
    try:
        for label, setting in methods:
            torch.manual_seed(ctx.seed)  # the same initial parameters for every method
            model = LSTMLanguageModel(data["train"].n_symbols, embed_dim=int(opt["embed"]), hidden_dim=int(opt["hidden"]),
                                      num_layers=int(opt["layers"]))
            adaptive = isinstance(setting, float)
            ctx.status(f"{label}: training for up to {opt['epochs']} epochs or {opt['max_time']} s")
            res = train_tbptt(
                model, (data["train"].inputs, data["train"].targets), (data["valid"].inputs, data["valid"].targets),
                (data["test"].inputs, data["test"].targets), k="adaptive" if adaptive else setting,
                delta=setting if adaptive else 0.5, k0=int(opt["k0"]), k_min=int(opt["k_min"]), k_max=int(opt["k_max"]),
                window=int(opt["window"]), n_starts=int(opt["n_starts"]), batch_size=int(opt["batch"]), lr=lr,
                epochs=int(opt["epochs"]), clip=clip, max_time=float(opt["max_time"]), clock=clock,
                generator=torch.Generator().manual_seed(ctx.seed + 1))
            histories[label] = res
            best = res.best()
            ctx.status(f"{label}: best validation PPL {_ppl(best['valid_loss']):.4f} at epoch {best['epoch']}, "
                       f"{res.cpu_s[-1]:.0f} CPU s, {res.wall_s[-1]:.0f} wall s, K {min(res.k)}..{max(res.k)}")
    finally:
        torch.set_num_threads(old_threads)
    summary, curve = [], []
    for label, res in histories.items():
        best = res.best()
        ks = sorted(set(res.k))
        k_text = str(ks[0]) if len(ks) == 1 else f"{res.k[0]} -> {res.k[-1]} (range {ks[0]}-{ks[-1]})"
        summary.append([label, len(res.epoch), round(res.cpu_s[-1], 1), round(res.wall_s[-1], 1), k_text,
                        _ppl(best["valid_loss"]), _ppl(best["test_loss"]), best["epoch"], round(best["cpu_s"], 1)])
        for i in range(len(res.epoch)):
            curve.append([label, res.epoch[i], round(res.cpu_s[i], 2), round(res.wall_s[i], 2), res.k[i], res.train_loss[i],
                          _ppl(res.valid_loss[i]), _ppl(res.test_loss[i]), res.beta[i], res.relative_bias[i]])
    budget = float(opt["max_time"])
    marks = [round(budget * f, 1) for f in (0.25, 0.5, 0.75, 1.0)]
    times = {label: (res.cpu_s if clock == "cpu" else res.wall_s) for label, res in histories.items()}
    by_time = [[label] + [_best_by(times[label], res.valid_loss, t) for t in marks] for label, res in histories.items()]
    setting = (f"copy task m = {m}, I = 6; T = {opt['t_train']} train, {opt['t_eval']} valid/test; LSTM {opt['layers']} x "
               f"{opt['hidden']}, embedding {opt['embed']}; batch {opt['batch']}, SGD lr {lr} x sqrt(K); BPTT(2K, K); "
               f"adaptive: R = {opt['window']}, S = {opt['n_starts']}, K0 = {opt['k0']}, K in [{opt['k_min']}, {opt['k_max']}]; "
               f"budget {budget:g} s of training ({clock} time) per method, {threads} torch thread(s)")
    ctx.notes.update({"setting": setting, "lr": lr, "clip": clip, "threads": threads, "clock": clock,
                      **{k: (list(v) if isinstance(v, tuple) else v) for k, v in opt.items()}})
    ctx.write_table("summary", ["method", "epochs", "train CPU s", "train wall s", "K used", "best valid PPL",
                                "test PPL at best valid", "best epoch", "CPU s at best"], summary, title=setting, digits=4)
    ctx.write_table("ppl_vs_time", ["method"] + [f"best valid PPL by {t:g} {clock} s" for t in marks], by_time,
                    title=f"best validation perplexity reached within each training time ({clock} time)", digits=4)
    ctx.write_table("curve", ["method", "epoch", "CPU s", "wall s", "K", "train loss", "valid PPL", "test PPL", "beta",
                              "relative bias"], curve, digits=5)
    try:
        import matplotlib
    except ImportError:
        ctx.notes["figure"] = "not drawn: matplotlib is not installed"
    else:
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 4))
        for label, res in histories.items():
            style = "-" if label.startswith("delta") else "--"
            ax.plot(times[label], [_ppl(v) for v in res.valid_loss], style, label=label)
            bx.plot(times[label], res.k, style, label=label)
        ax.set_xlabel(f"training {clock} time (s)")
        ax.set_ylabel("validation perplexity")
        ax.set_yscale("log")
        bx.set_xlabel(f"training {clock} time (s)")
        bx.set_ylabel("truncation K")
        ax.legend(fontsize=7)
        fig.suptitle(f"copy task m = {m}: fixed against adaptive truncated BPTT")
        ctx.save_figure(fig, "tbptt_copy.png")
    return {"summary": summary, "ppl_vs_time": by_time}


EXPERIMENT = Experiment(
    "tbptt-copy",
    "Aicher thesis Table 4.1 / Figure 4.1: fixed against adaptive truncated BPTT on the copy task",
    run,
    "Aicher (2020), thesis section 4.4.1, Table 4.1 and Figure 4.1",
)
