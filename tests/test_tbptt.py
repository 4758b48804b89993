"""Truncated BPTT (sgmc.rnn): gradients against full backpropagation, per-lag norms against closed forms.

The references are independent of the code under test: torch autograd on the whole sequence (for
BPTT when K covers it), and the closed form of a linear RNN h_t = a Q h_{t-1} + U x_t with Q
orthogonal and squared-error loss, whose per-lag gradient dL_s/dh_{s-k} = (a Q^T)^k C^T r_s has norm
|a|^k ||C^T r_s|| exactly (so beta = |a|, and the relative-bias bound has a closed form too).
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from sgmc.rnn import (  # noqa: E402
    LinearRNN, LSTMLanguageModel, RecurrentModel, batchify, bptt_recursion, copy_task, estimate_truncation,
    fit_decay, gradient_norms, lag_gradients, stream_gradients, window_gradient,
)

F64 = torch.float64


@pytest.fixture(autouse=True)
def _one_thread():
    """One torch thread (the machine is shared); restored afterwards so no state leaks into other tests."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _lstm(seed=0, hidden=7, layers=2):
    torch.manual_seed(seed)
    return LSTMLanguageModel(8, embed_dim=5, hidden_dim=hidden, num_layers=layers, dtype=F64)


def _linear(a, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=F64))
    return LinearRNN(a * q, torch.randn(d, 2, generator=g, dtype=F64), torch.randn(1, d, generator=g, dtype=F64))


def _tokens(t, b, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 8, (t, b), generator=g), torch.randint(0, 8, (t, b), generator=g)


def _maxdiff(a, b):
    return max(float((u - v).abs().max()) for u, v in zip(a, b))


def _full_grad(model, x, y, last=None, state=None):
    """Autograd on the whole sequence: mean over the last `last` losses (all by default)."""
    if state is None:
        state = model.init_state(x.shape[1])
    outs, _, _ = model.run(x, state)
    n = x.shape[0] if last is None else last
    loss = model.loss(outs[-n:].flatten(0, 1), y[-n:].flatten(0, 1)).mean()
    return torch.autograd.grad(loss, list(model.parameters())), float(loss.detach())


@pytest.mark.parametrize("kind", ["lstm", "linear"])
@pytest.mark.parametrize("k2", [1, 4, 12])
def test_bptt_equals_full_backprop_when_k_covers_the_sequence(kind, k2):
    if kind == "lstm":
        model, (x, y) = _lstm(), _tokens(12, 3)
    else:
        model = _linear(0.8)
        g = torch.Generator().manual_seed(2)
        x, y = torch.randn(12, 3, 2, generator=g, dtype=F64), torch.randn(12, 3, 1, generator=g, dtype=F64)
    want, want_loss = _full_grad(model, x, y, last=k2)
    for k1 in (11, 20):  # the window holds K1 + 1 >= 12 transitions: the whole sequence
        g_rec, loss_rec, _ = bptt_recursion(model, x, y, k1=k1, k2=k2)
        g_win, loss_win, _ = window_gradient(model, x, y, k1=k1, k2=k2)
        assert _maxdiff(g_rec, want) < 1e-12
        assert _maxdiff(g_win, want) < 1e-12
        assert loss_rec == pytest.approx(want_loss, rel=1e-12)
        assert loss_win == pytest.approx(want_loss, rel=1e-12)


def test_truncated_gradient_holds_the_state_before_the_window_fixed():
    model, (x, y) = _lstm(3), _tokens(15, 4)
    k1, k2 = 6, 3
    w0 = x.shape[0] - (k1 + 1)
    with torch.no_grad():
        _, s_w0, _ = model.run(x[:w0], model.init_state(4))
    want, _ = _full_grad(model, x[w0:], y[w0:], last=k2, state=s_w0)
    g_rec, _, _ = bptt_recursion(model, x, y, k1=k1, k2=k2)
    g_win, _, _ = window_gradient(model, x, y, k1=k1, k2=k2)
    assert _maxdiff(g_rec, want) < 1e-12
    assert _maxdiff(g_win, want) < 1e-12
    full, _ = _full_grad(model, x, y, last=k2)
    assert _maxdiff(full, want) > 1e-6  # truncation changes the gradient: the comparison can fail


def test_fused_lstm_run_equals_the_step_loop():
    model, (x, _) = _lstm(4, layers=3), _tokens(9, 5)
    s0 = torch.randn(5, model.state_dim, dtype=F64)
    with torch.no_grad():
        o1, h1, k1 = model.run(x, s0, keep=(0, 4, 9))
        o2, h2, k2 = RecurrentModel.run(model, x, s0, keep=(0, 4, 9))
    assert float((o1 - o2).abs().max()) < 1e-12 and float((h1 - h2).abs().max()) < 1e-12
    assert sorted(k1) == sorted(k2) == [0, 4, 9]
    assert max(float((k1[i] - k2[i]).abs().max()) for i in k1) < 1e-12


def test_streamed_chunks_carry_the_hidden_state():
    model, (x, y) = _lstm(5), _tokens(23, 3)
    k = 4
    chunks = list(stream_gradients(model, x, y, k))  # parameters unchanged between chunks
    assert [n for _, _, n in chunks] == [4, 4, 4, 4, 4, 3]
    for m, (grads, loss, n) in enumerate(chunks):
        end = min((m + 1) * k, x.shape[0])
        # the same window computed from the zero state at time 0: equal only if the state was carried
        want, want_loss, _ = window_gradient(model, x[:end], y[:end], k1=2 * k, k2=n)
        assert _maxdiff(grads, want) < 1e-12
        assert loss == pytest.approx(want_loss, rel=1e-12)


@pytest.mark.parametrize("a", [0.5, -0.8, 0.95])
def test_lag_gradients_match_the_linear_closed_form(a):
    model = _linear(a)
    g = torch.Generator().manual_seed(7)
    x, y = torch.randn(300, 2, generator=g, dtype=F64), torch.randn(300, 1, generator=g, dtype=F64)
    starts = torch.tensor([40, 77, 150, 299])
    grads = lag_gradients(model, x, y, starts, window=30, burn_in=10)
    phi = gradient_norms(grads)
    ratio = (phi / phi[:, :1]).numpy()
    np.testing.assert_allclose(ratio, np.abs(a) ** np.arange(31)[None, :].repeat(4, 0), rtol=1e-10)
    # the per-sequence gradients equal the recursion's b_k for one loss (BPTT(R, 1)), summed over the batch
    W, C = model.W.detach().numpy(), model.C.detach().numpy()
    with torch.no_grad():
        idx = starts[None, :] + torch.arange(-40, 1)[:, None]
        _, h, _ = model.run(x[idx], model.init_state(4))
    r = (h @ model.C.T - y[starts]).detach().numpy()  # (4, 1)
    want = np.stack([(np.linalg.matrix_power(W.T, k) @ C.T @ r.T).T for k in range(31)], axis=1)
    np.testing.assert_allclose(grads.numpy(), want, rtol=1e-9, atol=1e-12)


def test_lag_gradients_equal_the_bptt_recursion_on_an_lstm():
    model, (x, y) = _lstm(6), _tokens(60, 1)
    starts = torch.tensor([20, 33, 59])
    grads = lag_gradients(model, x[:, 0], y[:, 0], starts, window=12, burn_in=5)
    idx = starts[None, :] + torch.arange(-17, 1)[:, None]
    _, _, b = bptt_recursion(model, x[idx, 0], y[idx, 0], k1=12, k2=1, state=None)
    rec = torch.stack(b, dim=1) * starts.shape[0]  # the recursion's loss is a batch mean
    # bptt_recursion runs the 5 burn-in steps without gradients too, from the zero state
    assert float((rec - grads).abs().max()) < 1e-12


@pytest.mark.parametrize("a", [0.3, 0.7, 0.9])
def test_fit_decay_recovers_beta(a):
    model = _linear(a, d=4, seed=3)
    g = torch.Generator().manual_seed(8)
    x, y = torch.randn(2000, 2, generator=g, dtype=F64), torch.randn(2000, 1, generator=g, dtype=F64)
    est = estimate_truncation(model, x, y, delta=0.1, window=40, n_starts=32, k_max=80,
                              generator=torch.Generator().manual_seed(9))
    assert est.beta == pytest.approx(a, rel=1e-9)
    assert est.tau == 36
    beta, log_beta, tau = fit_decay(torch.tensor([5.0, 1.0, 0.3, 0.3 * 0.6, 0.3 * 0.36]), tau=2)
    assert (beta, tau) == (pytest.approx(0.6), 2) and log_beta == pytest.approx(math.log(0.6))


def test_truncation_matches_the_closed_form_relative_bias():
    a, R, delta, k_max = 0.8, 40, 0.05, 100
    model = _linear(a, d=1, seed=4)
    model.W.data.fill_(a)
    g = torch.Generator().manual_seed(10)
    x, y = torch.randn(3000, 2, generator=g, dtype=F64), torch.randn(3000, 1, generator=g, dtype=F64)
    est = estimate_truncation(model, x, y, delta=delta, window=R, n_starts=50, k_min=1, k_max=k_max,
                              generator=torch.Generator().manual_seed(11))
    # closed form: g[s, k] = a^k c r_s, so P_S[phi_k] = a^k c P_S|r|, the cumulative mean gradient has norm
    # c |P_S r| (1 - a^(K+1)) / (1 - a), and tau = 36
    phi0 = float(est.mean_phi[0])
    tau = 36
    k = np.arange(k_max + 1)
    phi = phi0 * a ** np.arange(R + 1)
    bound = np.where(k < tau, [phi[K + 1:tau].sum() for K in k] + phi[tau] / (1 - a),
                     phi[tau] * a ** (k - tau) / (1 - a))
    lags = torch.arange(R + 1)
    starts_g = torch.Generator().manual_seed(11)
    starts = torch.randint(R, 3000, (50,), generator=starts_g)
    grads = lag_gradients(model, x, y, starts, window=R, burn_in=R)
    mean_r = float(grads[:, 0, 0].mean())  # c P_S r
    cum = abs(mean_r) * (1 - a ** (np.minimum(k, R) + 1)) / (1 - a)
    denom = np.maximum.accumulate(cum - bound)
    rel = np.where(denom > 0, bound / np.where(denom > 0, denom, 1), np.inf)
    np.testing.assert_allclose(est.relative_bias.numpy(), rel, rtol=1e-8)
    want_k = int(np.nonzero(rel[1:] < delta)[0][0]) + 1
    assert est.k == want_k
    assert lags.shape[0] == R + 1


def test_k_grows_with_the_length_of_the_dependence():
    g = torch.Generator().manual_seed(12)
    x, y = torch.randn(3000, 2, generator=g, dtype=F64), torch.randn(3000, 1, generator=g, dtype=F64)
    ks = []
    for a in (0.3, 0.6, 0.85, 0.95):
        est = estimate_truncation(_linear(a, seed=5), x, y, delta=0.1, window=60, n_starts=32, k_max=200,
                                  generator=torch.Generator().manual_seed(13))
        ks.append(est.k)
    assert ks == sorted(ks) and ks[0] < ks[-1], ks
    # a tighter tolerance asks for a longer truncation
    tight = [estimate_truncation(_linear(0.85, seed=5), x, y, delta=d, window=60, n_starts=32, k_max=200,
                                 generator=torch.Generator().manual_seed(13)).k for d in (0.5, 0.1, 0.01)]
    assert tight == sorted(tight) and tight[0] < tight[-1], tight


def test_no_geometric_decay_gives_k_max():
    g = torch.Generator().manual_seed(14)
    x, y = torch.randn(500, 2, generator=g, dtype=F64), torch.randn(500, 1, generator=g, dtype=F64)
    est = estimate_truncation(_linear(1.05, seed=6), x, y, delta=0.5, window=30, n_starts=16, k_min=3,
                              k_max=77, generator=torch.Generator().manual_seed(15))
    assert est.log_beta > 0 and est.k == 77


def test_copy_task_output_repeats_the_input_m_steps_later():
    task = copy_task(400, m=(5, 10), generator=torch.Generator().manual_seed(16))
    x, y = task.inputs.tolist(), task.targets.tolist()
    t, blocks = 0, 0
    while t < len(x):
        m = x[t:].index(task.recall)  # the block's m data symbols come before start-recall
        assert 5 <= m <= 10 and all(v < 6 for v in x[t:t + m])
        assert x[t + m + 1:t + 2 * m] == [task.blank] * len(x[t + m + 1:t + 2 * m])
        assert y[t:t + m] == [task.blank] * len(y[t:t + m])
        assert y[t + m:t + 2 * m] == x[t:t + m][:len(y[t + m:t + 2 * m])]
        t += 2 * m
        blocks += 1
    assert blocks > 20 and task.n_symbols == 8
    xb = batchify(task.inputs, 7)
    assert tuple(xb.shape) == (57, 7) and xb[:, 2].tolist() == x[114:171]


def test_import_sgmc_rnn_needs_no_torch_until_used():
    code = "import sys, sgmc, sgmc.rnn; assert 'torch' not in sys.modules; sgmc.rnn.copy_task; assert 'torch' in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_relative_bias_takes_the_running_max_of_the_denominator():
    from sgmc.rnn import relative_bias

    # Eq. 4.19 by hand: cum - E = [0.5, 0.1, 0.6], running max [0.5, 0.5, 0.6]; beyond R (two lags)
    # the cumulative norm stays at its last value, 0.9
    bound = torch.tensor([0.5, 0.4, 0.3, 0.2], dtype=F64)
    cum = torch.tensor([1.0, 0.5, 0.9], dtype=F64)
    got = relative_bias(bound, cum)
    np.testing.assert_allclose(got.numpy(), [0.5 / 0.5, 0.4 / 0.5, 0.3 / 0.6, 0.2 / 0.7], rtol=1e-14)
    assert math.isinf(float(relative_bias(torch.tensor([2.0], dtype=F64), torch.tensor([1.0], dtype=F64))[0]))
