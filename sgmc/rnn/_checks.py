"""Access to PyTorch and the argument checks shared by the truncated-BPTT modules.

Recurrent models need automatic differentiation, which the array API does not have, so
:mod:`sgmc.rnn` is written against PyTorch. PyTorch is reached through :mod:`sgmc.backends._torch`
(the one module of sgmc that imports it), only when a model, a data set or a gradient is first
made: ``import sgmc`` and ``import sgmc.rnn`` never need it. ``pip install "sgmc[rnn]"`` installs it.

The checks raise ``TypeError`` (wrong kind of value) or ``ValueError`` (right kind, out of range)
with a message naming the argument, what was expected and what was given.
"""

from __future__ import annotations

from typing import Any

from .._validation import check_int, check_positive

__all__ = ["torch", "check_int", "check_positive", "check_fraction", "check_truncation_range",
           "check_sequence_pair", "check_chunking"]


def _load_torch() -> Any:
    try:
        from ..backends import _torch as torch_backend  # the one module that imports torch
    except ImportError as exc:
        msg = 'sgmc.rnn needs PyTorch: pip install "sgmc[rnn]" (torch==2.13.0)'
        raise ImportError(msg) from exc
    return torch_backend.torch


torch = _load_torch()


def check_fraction(value: Any, name: str) -> float:
    """A number strictly between 0 and 1 (a relative-bias tolerance, a quantile)."""
    v = check_positive(value, name)
    if not v < 1.0:
        msg = f"`{name}` must lie strictly between 0 and 1; got {value!r}"
        raise ValueError(msg)
    return v


def check_truncation_range(k_min: Any, k_max: Any, *, k0: Any = None) -> tuple:
    """``(k_min, k_max[, k0])`` as ints with ``1 <= k_min <= k_max`` (and ``k_min <= k0 <= k_max``)."""
    k_min = check_int(k_min, "k_min", minimum=1)
    k_max = check_int(k_max, "k_max", minimum=1)
    if k_min > k_max:
        msg = f"`k_min` must not exceed `k_max`; got k_min={k_min} > k_max={k_max}"
        raise ValueError(msg)
    if k0 is None:
        return k_min, k_max
    k0 = check_int(k0, "k0", minimum=1)
    if not k_min <= k0 <= k_max:
        msg = f"`k0` must lie in [k_min, k_max] = [{k_min}, {k_max}]; got k0={k0}"
        raise ValueError(msg)
    return k_min, k_max, k0


def check_sequence_pair(inputs: Any, targets: Any, *, name: str = "inputs", min_len: int = 1) -> tuple:
    """Input and target tensors with the same leading (time) length, at least ``min_len`` long."""
    for arg, label in ((inputs, name), (targets, "targets")):
        if not isinstance(arg, torch.Tensor):
            msg = f"`{label}` must be a torch.Tensor; got {type(arg).__name__}"
            raise TypeError(msg)
        if arg.ndim < 1:
            msg = f"`{label}` must have a time axis first; got a tensor of shape {tuple(arg.shape)}"
            raise ValueError(msg)
    if inputs.shape[0] != targets.shape[0]:
        msg = (f"`{name}` and `targets` must have the same length along the time axis; got "
               f"{inputs.shape[0]} and {targets.shape[0]}")
        raise ValueError(msg)
    if inputs.shape[0] < min_len:
        msg = f"`{name}` must have at least {min_len} time steps; got {inputs.shape[0]}"
        raise ValueError(msg)
    if inputs.is_floating_point() and not bool(torch.isfinite(inputs).all()):
        msg = f"`{name}` must be finite; it holds NaN or infinity"
        raise ValueError(msg)
    if targets.is_floating_point() and not bool(torch.isfinite(targets).all()):
        msg = "`targets` must be finite; it holds NaN or infinity"
        raise ValueError(msg)
    return inputs, targets


def check_chunking(k1: Any, k2: Any) -> tuple:
    """BPTT(K1, K2)'s lengths: ``K2 >= 1`` losses, backpropagated over ``K1 >= K2 - 1`` steps."""
    k1 = check_int(k1, "k1", minimum=0)
    k2 = check_int(k2, "k2", minimum=1)
    if k1 < k2 - 1:
        msg = (f"`k1` must be at least `k2` - 1 (every one of the k2 losses is backpropagated to its own "
               f"step at least); got k1={k1}, k2={k2}")
        raise ValueError(msg)
    return k1, k2


def check_state(state: Any, batch: int, dim: int, name: str = "state") -> Any:
    """A hidden state of shape ``(batch, dim)``, or None."""
    if state is None:
        return None
    if not isinstance(state, torch.Tensor) or tuple(state.shape) != (batch, dim):
        shape = tuple(state.shape) if isinstance(state, torch.Tensor) else type(state).__name__
        msg = f"`{name}` must be a torch.Tensor of shape ({batch}, {dim}) or None; got {shape}"
        raise ValueError(msg)
    return state
