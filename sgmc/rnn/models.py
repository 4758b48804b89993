"""Recurrent models for truncated BPTT: the interface, an LSTM language model and a linear RNN.

A recurrent model maps a hidden state and an input to the next state, h_t = H(h_{t-1}, x_t; theta),
and reads a prediction off each state, with a loss L_t per time step (Aicher thesis, Eq. 2.34). The
truncated gradients of :mod:`sgmc.rnn.tbptt` and the per-lag gradient norms of
:mod:`sgmc.rnn.decay` need the state as one tensor per time step, so every model here exposes its
whole recurrent state (for an LSTM, the hidden and cell vectors of every layer) as a flat
``(batch, state_dim)`` tensor. Sequences are time-major: ``x`` has shape ``(time, batch, ...)``, and
every sequence of a minibatch is advanced by the same tensor operations.
"""

from __future__ import annotations


from typing import Any, Sequence

from .._array_api import device_of

from ._checks import check_int, torch

__all__ = ["RecurrentModel", "LSTMLanguageModel", "LinearRNN"]

nn = torch.nn


class RecurrentModel(nn.Module):
    """Base class: ``step``, ``readout`` and ``loss`` define the model; ``run`` loops over time.

    Subclasses set ``state_dim`` and implement :meth:`step`, :meth:`readout` and :meth:`loss`; they
    may override :meth:`run` with a faster fused pass (it must return the same numbers).
    """

    state_dim: int

    def init_state(self, batch: int) -> Any:
        """The zero state, ``(batch, state_dim)``, in the parameters' dtype and device."""
        p = next(self.parameters())
        return torch.zeros(batch, self.state_dim, dtype=p.dtype, device=device_of(p))

    def step(self, x_t: Any, state: Any) -> Any:  # pragma: no cover - abstract
        """The next state H(state, x_t), ``(batch, state_dim)``."""
        raise NotImplementedError

    def readout(self, state: Any) -> Any:  # pragma: no cover - abstract
        """The prediction read off a state (logits, or a mean)."""
        raise NotImplementedError

    def loss(self, output: Any, target: Any) -> Any:  # pragma: no cover - abstract
        """Per-sequence loss of one time step, shape ``(batch,)``."""
        raise NotImplementedError

    def run(self, x: Any, state: Any, keep: Sequence[int] = ()) -> tuple:
        """Advance over ``x`` (time first) from ``state``.

        Returns
        -------
        outputs : Tensor
            ``readout`` of every new state, stacked along time.
        state : Tensor
            The last state.
        kept : dict
            ``{i: state after the first i inputs}`` for every ``i`` in ``keep`` (0 is ``state``).
        """
        kept = {0: state} if 0 in keep else {}
        outs = []
        for t in range(x.shape[0]):
            state = self.step(x[t], state)
            outs.append(self.readout(state))
            if t + 1 in keep:
                kept[t + 1] = state
        return torch.stack(outs), state, kept

    def sequence_loss(self, x: Any, y: Any, state: Any = None) -> tuple:
        """Mean loss over every time step and sequence of ``(x, y)``, and the last state."""
        if state is None:
            state = self.init_state(x.shape[1])
        outs, state, _ = self.run(x, state)
        losses = self.loss(outs.flatten(0, 1), y.flatten(0, 1))
        return losses.mean(), state


class LSTMLanguageModel(RecurrentModel):
    """Embedding, a stacked LSTM and a linear output layer, trained by cross-entropy (thesis 4.4.1-2).

    Parameters
    ----------
    vocab_size : int
        Number of input symbols (and of output classes unless ``n_outputs`` is given).
    embed_dim, hidden_dim, num_layers : int
        Embedding size, LSTM hidden (and cell) size and number of LSTM layers; the copy task of the
        thesis uses 6, 50 and 2.
    n_outputs : int, optional
        Number of output classes.
    dtype : torch.dtype
        Parameter dtype (float32 by default; float64 for exact comparisons).

    Examples
    --------
    >>> import torch
    >>> from sgmc.rnn import LSTMLanguageModel
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> model = LSTMLanguageModel(8, embed_dim=6, hidden_dim=50, num_layers=2)
    >>> model.state_dim
    200
    >>> x = torch.zeros(5, 3, dtype=torch.long)
    >>> out, h, _ = model.run(x, model.init_state(3))
    >>> tuple(out.shape), tuple(h.shape)
    ((5, 3, 8), (3, 200))
    """

    def __init__(self, vocab_size: int, embed_dim: int = 6, hidden_dim: int = 50, num_layers: int = 2,
                 n_outputs: int | None = None, dtype: Any = None) -> None:
        super().__init__()
        vocab_size = check_int(vocab_size, "vocab_size", minimum=2)
        embed_dim = check_int(embed_dim, "embed_dim")
        hidden_dim = check_int(hidden_dim, "hidden_dim")
        num_layers = check_int(num_layers, "num_layers")
        n_outputs = vocab_size if n_outputs is None else check_int(n_outputs, "n_outputs", minimum=2)
        dtype = torch.float32 if dtype is None else dtype
        self.vocab_size, self.n_outputs = vocab_size, n_outputs
        self.hidden_dim, self.num_layers = hidden_dim, num_layers
        self.state_dim = 2 * num_layers * hidden_dim
        self.embed = nn.Embedding(vocab_size, embed_dim, dtype=dtype)
        self.lstm = nn.LSTM(embed_dim, hidden_dim, num_layers=num_layers, dtype=dtype)
        self.head = nn.Linear(hidden_dim, n_outputs, dtype=dtype)

    def _unpack(self, state: Any) -> tuple:
        b = state.shape[0]
        h, c = state.view(b, 2, self.num_layers, self.hidden_dim).unbind(1)
        return h.transpose(0, 1).contiguous(), c.transpose(0, 1).contiguous()

    @staticmethod
    def _pack(h: Any, c: Any) -> Any:
        b = h.shape[1]
        return torch.cat([h.transpose(0, 1).reshape(b, -1), c.transpose(0, 1).reshape(b, -1)], dim=1)

    def step(self, x_t: Any, state: Any) -> Any:
        # one step written out (gates i, f, g, o as torch.nn.LSTM orders them): cheaper than a
        # length-1 call of the fused LSTM, and the same numbers
        b, H, L = state.shape[0], self.hidden_dim, self.num_layers
        hs, cs = state.view(b, 2, L, H).unbind(1)
        inp, new_h, new_c = self.embed(x_t), [], []
        for layer in range(L):
            gates = (nn.functional.linear(inp, getattr(self.lstm, f"weight_ih_l{layer}"),
                                          getattr(self.lstm, f"bias_ih_l{layer}"))
                     + nn.functional.linear(hs[:, layer], getattr(self.lstm, f"weight_hh_l{layer}"),
                                            getattr(self.lstm, f"bias_hh_l{layer}")))
            i, f, g, o = gates.chunk(4, dim=1)
            c = torch.sigmoid(f) * cs[:, layer] + torch.sigmoid(i) * torch.tanh(g)
            inp = torch.sigmoid(o) * torch.tanh(c)
            new_h.append(inp)
            new_c.append(c)
        return torch.cat(new_h + new_c, dim=1)

    def readout(self, state: Any) -> Any:
        top = state[:, (self.num_layers - 1) * self.hidden_dim:self.num_layers * self.hidden_dim]
        return self.head(top)

    def loss(self, output: Any, target: Any) -> Any:
        return nn.functional.cross_entropy(output, target, reduction="none")

    def run(self, x: Any, state: Any, keep: Sequence[int] = ()) -> tuple:
        # the fused multi-step LSTM, cut at the kept steps so their full states can be returned
        cuts = sorted({int(i) for i in keep if 0 < int(i) < x.shape[0]})
        kept = {0: state} if 0 in keep else {}
        hc = self._unpack(state)
        emb = self.embed(x)
        tops, start = [], 0
        for stop in [*cuts, x.shape[0]]:
            if stop > start:
                out, hc = self.lstm(emb[start:stop], hc)
                tops.append(out)
            if stop in keep:
                kept[stop] = self._pack(*hc)
            start = stop
        last = self._pack(*hc)
        if x.shape[0] in keep:
            kept[x.shape[0]] = last
        return self.head(torch.cat(tops)), last, kept


class LinearRNN(RecurrentModel):
    """h_t = W h_{t-1} + U x_t, prediction C h_t, squared-error loss: the closed-form test case.

    With the loss ``L_s = ||y_s - C h_s||^2 / 2``, ``dL_s/dh_{s-k} = (W^T)^k C^T (C h_s - y_s)``, so
    when ``W = a Q`` with Q orthogonal the per-lag gradient norm is ``phi_k = abs(a)^k phi_0`` exactly:
    the geometric decay of assumption (A-1) with ``beta = abs(a)`` and tau = 0.

    Parameters
    ----------
    W : Tensor
        ``(state_dim, state_dim)`` transition.
    U : Tensor
        ``(state_dim, in_dim)`` input weights.
    C : Tensor
        ``(out_dim, state_dim)`` output weights.
    """

    def __init__(self, W: Any, U: Any, C: Any) -> None:
        super().__init__()
        for arg, name in ((W, "W"), (U, "U"), (C, "C")):
            if not isinstance(arg, torch.Tensor) or arg.ndim != 2:
                msg = f"`{name}` must be a 2-D torch.Tensor; got {getattr(arg, 'shape', type(arg).__name__)}"
                raise ValueError(msg)
        d = W.shape[0]
        if W.shape != (d, d) or U.shape[0] != d or C.shape[1] != d:
            msg = (f"`W` must be square (d, d) with `U` (d, in_dim) and `C` (out_dim, d); got shapes "
                   f"{tuple(W.shape)}, {tuple(U.shape)}, {tuple(C.shape)}")
            raise ValueError(msg)
        self.W = nn.Parameter(W.clone())
        self.U = nn.Parameter(U.clone())
        self.C = nn.Parameter(C.clone())
        self.state_dim = d

    def step(self, x_t: Any, state: Any) -> Any:
        return state @ self.W.T + x_t @ self.U.T

    def readout(self, state: Any) -> Any:
        return state @ self.C.T

    def loss(self, output: Any, target: Any) -> Any:
        return 0.5 * ((output - target) ** 2).sum(-1)
