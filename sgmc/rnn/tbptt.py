"""Truncated backpropagation through time, BPTT(K1, K2), and its streaming over contiguous chunks.

BPTT(K1, K2) (Aicher thesis, Eqs. 2.37-2.38) averages the gradients of the K2 most recent losses
L_{s-K2+1}, ..., L_s, each backpropagated through the hidden states h_s, ..., h_{s-K1}:

    b_0 = dL_s/dh_s,   b_k = b_{k-1} dh_{s-k+1}/dh_{s-k} + [k < K2] dL_{s-k}/dh_{s-k},
    BPTT(K1, K2) = (1/K2) (sum_{k<K2} dL_{s-k}/dtheta + sum_{k=0}^{K1} b_k dh_{s-k}/dtheta),

where dh_{s-k}/dtheta is the partial derivative of one transition (the earlier state held fixed), so
the window holds K1 + 1 transitions. :func:`bptt_recursion` runs this recursion literally, one
vector-Jacobian product per lag; :func:`window_gradient` gets the same numbers from one backward pass
over the window; :func:`stream_gradients` streams BPTT(K1, K2) over the chunks
S_m = [(m-1)K2 + 1, m K2] of a sequence (Eq. 4.12), carrying the hidden state from chunk to chunk.
Losses are averaged over the sequences of the minibatch, which are advanced together.
"""

from __future__ import annotations

from typing import Any, Iterator

from ._checks import check_chunking, check_int, check_sequence_pair, check_state, torch
from .models import RecurrentModel

__all__ = ["bptt_recursion", "window_gradient", "stream_gradients"]


def _check_model(model: Any) -> RecurrentModel:
    if not isinstance(model, RecurrentModel):
        msg = f"`model` must be an sgmc.rnn.RecurrentModel (LSTMLanguageModel, LinearRNN, ...); got {type(model).__name__}"
        raise TypeError(msg)
    return model


def _prepare(model, x, y, k1, k2, state):
    _check_model(model)
    x, y = check_sequence_pair(x, y, name="x")
    k1, k2 = check_chunking(k1, k2)
    if x.ndim < 2:
        msg = f"`x` must be time-major with a batch axis, (time, batch, ...); got shape {tuple(x.shape)}"
        raise ValueError(msg)
    if k2 > x.shape[0]:
        msg = f"`k2` must not exceed the length of `x` ({x.shape[0]}); got k2={k2}"
        raise ValueError(msg)
    state = check_state(state, x.shape[1], model.state_dim)
    if state is None:
        state = model.init_state(x.shape[1])
    return x, y, k1, k2, state.detach()


def _accumulate(total: list, parts: tuple) -> None:
    for i, g in enumerate(parts):
        if g is not None:
            total[i] = total[i] + g


def bptt_recursion(model: RecurrentModel, x: Any, y: Any, k1: int, k2: int, state: Any = None) -> tuple:
    """BPTT(K1, K2) at the last step of ``x`` by the recursion of Eq. 2.38, one lag at a time.

    Parameters
    ----------
    model : RecurrentModel
        The recurrent model.
    x, y : Tensor
        Inputs ``(time, batch, ...)`` and targets ``(time, batch, ...)``; s is the last step.
    k1 : int
        Lags backpropagated (the window holds K1 + 1 transitions); ``k1 >= k2 - 1``.
    k2 : int
        Number of most recent losses averaged.
    state : Tensor, optional
        The state before ``x[0]`` (zeros by default); the steps before the window run without
        gradients.

    Returns
    -------
    grads : list of Tensor
        The gradient of each of ``model.parameters()``.
    loss : float
        The mean of the K2 losses (averaged over the batch).
    b : list of Tensor
        ``b[k]``, ``(batch, state_dim)``: the backpropagated hidden-state gradient at lag k, for
        k = 0..K1 (for K2 = 1, b[k] = dL_s/dh_{s-k} per sequence, times 1/batch).

    Examples
    --------
    >>> import torch
    >>> from sgmc.rnn import LinearRNN, bptt_recursion
    >>> m = LinearRNN(0.5 * torch.eye(2, dtype=torch.float64), torch.ones(2, 1, dtype=torch.float64),
    ...               torch.ones(1, 2, dtype=torch.float64))
    >>> x = torch.ones(4, 3, 1, dtype=torch.float64); y = torch.zeros(4, 3, 1, dtype=torch.float64)
    >>> grads, loss, b = bptt_recursion(m, x, y, k1=3, k2=1)
    >>> len(b), round(loss, 4)
    (4, 7.0312)
    """
    x, y, k1, k2, state = _prepare(model, x, y, k1, k2, state)
    n = x.shape[0]
    w0 = max(0, n - (k1 + 1))
    if w0 > 0:
        with torch.no_grad():
            _, state, _ = model.run(x[:w0], state)
    leaves, states = [], []
    h = state
    for t in range(w0, n):
        leaf = h.detach().requires_grad_(True)
        h = model.step(x[t], leaf)
        leaves.append(leaf)
        states.append(h)
    params = [p for p in model.parameters() if p.requires_grad]
    grads = [torch.zeros_like(p) for p in params]
    b = torch.zeros_like(state)
    bs, loss = [], 0.0
    for k in range(n - w0):
        i = n - 1 - w0 - k
        if k < k2:
            h_req = states[i].detach().requires_grad_(True)
            lk = model.loss(model.readout(h_req), y[w0 + i]).mean() / k2
            parts = torch.autograd.grad(lk, [h_req, *params], allow_unused=True)
            b = b + parts[0]
            _accumulate(grads, parts[1:])
            loss += float(lk.detach()) * k2
        bs.append(b)
        parts = torch.autograd.grad(states[i], [leaves[i], *params], grad_outputs=b, allow_unused=True)
        _accumulate(grads, parts[1:])
        b = parts[0]
    return grads, loss / k2, bs


def window_gradient(model: RecurrentModel, x: Any, y: Any, k1: int, k2: int, state: Any = None,
                    keep: tuple = ()) -> tuple:
    """BPTT(K1, K2) at the last step of ``x`` by one backward pass over the window of K1 + 1 steps.

    Same arguments and gradient as :func:`bptt_recursion`, computed by automatic differentiation of
    the mean of the last K2 losses with the state before the window held fixed.

    Returns
    -------
    grads : list of Tensor
        The gradient of each of ``model.parameters()`` that requires one.
    loss : float
        The mean of the K2 losses.
    kept : dict
        ``{i: state after the first i inputs of x}`` (detached) for every ``i`` in ``keep``, and the
        last state under ``len(x)``.
    """
    x, y, k1, k2, state = _prepare(model, x, y, k1, k2, state)
    n = x.shape[0]
    w0 = max(0, n - (k1 + 1))
    kept: dict = {0: state} if 0 in keep else {}
    if w0 > 0:
        with torch.no_grad():
            _, state, pre = model.run(x[:w0], state, keep=tuple(i for i in keep if 0 < i <= w0))
        kept.update(pre)
    inner = tuple(i - w0 for i in keep if w0 < i <= n)
    outs, last, win = model.run(x[w0:], state, keep=inner)
    kept.update({i + w0: s for i, s in win.items()})
    losses = model.loss(outs[-k2:].flatten(0, 1), y[n - k2:].flatten(0, 1))
    loss = losses.mean()
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    grads = [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]
    kept[n] = last
    return grads, float(loss.detach()), {i: s.detach() for i, s in kept.items()}


def stream_gradients(model: RecurrentModel, x: Any, y: Any, k: int, k1: int | None = None,
                     state: Any = None) -> Iterator[tuple]:
    """Stream BPTT(K1, K) over the contiguous chunks of length K of ``(x, y)``, carrying the state.

    Chunk m ends at step s = m K; its gradient is BPTT(K1, K) at s (the last chunk may be shorter).
    The window of chunk m starts from the state that the previous window computed (held fixed), so
    the hidden state runs on through the whole sequence, and the parameters may change between
    chunks: the generator reads them afresh for each chunk. ``k1`` defaults to 2K (the thesis's
    BPTT(2K, K), so every loss is backpropagated at least K steps).

    Yields
    ------
    grads : list of Tensor
        The chunk's gradient of each parameter that requires one.
    loss : float
        The chunk's mean loss.
    n_steps : int
        Number of losses in the chunk.
    """
    k = check_int(k, "k")
    k1 = 2 * k if k1 is None else k1
    x, y, k1, k, state = _prepare(model, x, y, k1, k, state)
    n = x.shape[0]
    starts = {0: state}
    for end in range(k, n + k, k):
        end = min(end, n)
        k2 = end - (end - 1) // k * k
        w0 = max(0, end - (k1 + 1))
        nxt = max(0, min(end + k, n) - (k1 + 1))
        grads, loss, kept = window_gradient(model, x[w0:end], y[w0:end], k1, k2, starts[w0],
                                            keep=(nxt - w0,))
        starts = {nxt: kept[nxt - w0]}
        yield grads, loss, k2
