"""Adaptive truncated backpropagation through time for recurrent models (Aicher thesis, chapter 4).

Training a recurrent network on a long sequence by SGD needs gradients of losses at random time
steps; backpropagating each only K steps (truncated BPTT) biases them. Assuming the mean norm of the
backpropagated gradient decays geometrically with the lag (assumption (A-1)), Aicher's Algorithm 6
estimates the decay rate once per epoch and picks the smallest K whose estimated relative bias is
below a tolerance delta, so SGD keeps its convergence guarantee (Theorem 8) at the least cost.

- :mod:`~sgmc.rnn.models`: the recurrent-model interface, an LSTM language model, a linear RNN.
- :mod:`~sgmc.rnn.tbptt`: BPTT(K1, K2), by its recursion and by one backward pass; streaming.
- :mod:`~sgmc.rnn.decay`: per-lag gradient norms phi_k (BPTT(R, 1)) and the decay rate beta.
- :mod:`~sgmc.rnn.truncation`: the bias bound, the relative bias and K = kappa(delta).
- :mod:`~sgmc.rnn.train`: SGD with fixed or adaptive K, loss against wall time.
- :mod:`~sgmc.rnn.data`: the copy task and a character corpus.

Recurrent models need automatic differentiation, so this package is written in PyTorch
(``pip install "sgmc[rnn]"``). ``import sgmc.rnn`` itself does not import torch; the first use of
one of its names does (and says what to install when torch is missing).

Examples
--------
>>> import torch
>>> from sgmc.rnn import LSTMLanguageModel, copy_task, train_tbptt
>>> g = torch.Generator().manual_seed(0)
>>> task = copy_task(4096, m=3, generator=g)
>>> torch.manual_seed(0)  # doctest: +ELLIPSIS
<torch._C.Generator object at ...>
>>> model = LSTMLanguageModel(task.n_symbols, embed_dim=6, hidden_dim=16, num_layers=1)
>>> res = train_tbptt(model, (task.inputs, task.targets), k="adaptive", delta=0.5, k0=5,
...                   window=20, n_starts=16, batch_size=16, lr=0.5, epochs=2, generator=g)
>>> len(res.k)
2
"""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {
    "RecurrentModel": "models", "LSTMLanguageModel": "models", "LinearRNN": "models",
    "bptt_recursion": "tbptt", "window_gradient": "tbptt", "stream_gradients": "tbptt",
    "lag_gradients": "decay", "gradient_norms": "decay", "fit_decay": "decay", "sample_starts": "decay",
    "bias_bound": "truncation", "relative_bias": "truncation", "choose_truncation": "truncation",
    "TruncationEstimate": "truncation", "estimate_truncation": "truncation",
    "TrainResult": "train", "evaluate": "train", "train_tbptt": "train",
    "CopyTask": "data", "copy_task": "data", "batchify": "data", "CharCorpus": "data", "tate_titles": "data",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        value = getattr(importlib.import_module(f".{_NAMES[name]}", __name__), name)
        globals()[name] = value
        return value
    msg = f"module 'sgmc.rnn' has no attribute {name!r}"
    raise AttributeError(msg)


def __dir__() -> list:
    return sorted(set(globals()) | set(_NAMES))
