"""Training a recurrent model by SGD with fixed or adaptive truncated BPTT (Aicher thesis, Algorithm 6).

Each epoch streams BPTT(2K, K) over contiguous chunks of the training sequence, cut into
``batch_size`` parallel streams, and takes one optimiser step per chunk with the learning rate
scaled by sqrt(K) (thesis 4.3.1). With ``k="adaptive"`` the first epoch uses K0 and every later
epoch starts by re-estimating K = kappa(delta) on ``n_starts`` random start points
(:func:`~sgmc.rnn.estimate_truncation`); that estimate counts in the wall time. After each epoch the
mean loss on the validation and test sequences is recorded (not timed), with the wall and CPU time so far.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .._validation import check_choice
from ._checks import check_fraction, check_int, check_positive, check_sequence_pair, check_truncation_range, torch
from .data import batchify
from .models import RecurrentModel
from .tbptt import stream_gradients
from .truncation import estimate_truncation

__all__ = ["TrainResult", "evaluate", "train_tbptt"]


@dataclass
class TrainResult:
    """What :func:`train_tbptt` records, one entry per epoch.

    Attributes
    ----------
    epoch, wall_s, cpu_s, k, train_loss, valid_loss, test_loss, beta, relative_bias : list
        Epoch number (1-based), training wall time and process CPU time so far (s), the truncation used, the mean training
        loss of the chunks, the validation and test mean losses (NaN without data), and, where K was
        estimated (or ``monitor_bias``), the fitted beta and the estimated relative bias at the K used.
    """

    epoch: list = field(default_factory=list)
    wall_s: list = field(default_factory=list)
    cpu_s: list = field(default_factory=list)
    k: list = field(default_factory=list)
    train_loss: list = field(default_factory=list)
    valid_loss: list = field(default_factory=list)
    test_loss: list = field(default_factory=list)
    beta: list = field(default_factory=list)
    relative_bias: list = field(default_factory=list)

    def best(self) -> dict:
        """The epoch of the lowest validation loss: its row as a dict."""
        if not self.epoch:
            msg = "no epoch was recorded"
            raise ValueError(msg)
        scores = [v if math.isfinite(v) else math.inf for v in self.valid_loss]
        i = min(range(len(scores)), key=scores.__getitem__)
        return {name: getattr(self, name)[i] for name in ("epoch", "wall_s", "cpu_s", "k", "train_loss", "valid_loss",
                                                            "test_loss", "beta", "relative_bias")}


def evaluate(model: RecurrentModel, x: Any, y: Any, batch_size: int = 64) -> float:
    """Mean per-step loss of ``model`` on one sequence, run as ``batch_size`` streams from zero states."""
    x, y = check_sequence_pair(x, y, name="x")
    with torch.no_grad():
        loss, _ = model.sequence_loss(batchify(x, batch_size), batchify(y, batch_size))
    return float(loss)


def train_tbptt(model: RecurrentModel, train: tuple, valid: tuple | None = None, test: tuple | None = None, *,
                k: int | str = "adaptive", delta: float = 0.5, k0: int = 15, k_min: int = 2, k_max: int = 100,
                window: int = 100, n_starts: int = 64, batch_size: int = 64, lr: float = 1.0,
                optimizer: str = "sgd", epochs: int = 10, clip: float | None = None, clip_sum: float | None = None,
                weight_decay: float = 0.0, scale_lr: bool = True,
                max_time: float | None = None, clock: str = "wall", monitor_bias: bool = False, generator: Any = None,
                callback: Callable | None = None) -> TrainResult:
    """Train ``model`` by SGD (or Adam) on truncated BPTT gradients, with fixed K or adaptive K.

    Parameters
    ----------
    model : RecurrentModel
        Trained in place.
    train, valid, test : (Tensor, Tensor)
        ``(inputs, targets)``, each one long sequence, time first.
    k : int or "adaptive"
        A fixed truncation K, or ``"adaptive"`` for Algorithm 6.
    delta : float
        Relative-bias tolerance of the adaptive K, in (0, 1).
    k0, k_min, k_max : int
        First-epoch K and the bounds of the adaptive K (15, 2 and 100 in the thesis's copy task).
    window, n_starts : int
        R (lags of BPTT(R, 1)) and S (start points) of each estimate of K.
    batch_size : int
        Number of parallel streams.
    lr : float
        Learning rate gamma (before the sqrt(K) scaling).
    optimizer : {"sgd", "adam"}
        The update rule.
    epochs : int
        Number of passes over the training sequence.
    clip : float, optional
        Clip each chunk's gradient (of the mean of its losses) to this norm.
    clip_sum : float, optional
        Clip the gradient of the *sum* of each chunk's losses to this norm: the gradient of the mean of
        the chunk's K2 losses is clipped to ``clip_sum / K2``, so the bound on a step, ``lr sqrt(K)
        clip_sum / K``, shrinks as K grows. The published code of the thesis's experiments clips this
        way with ``clip_sum = 1`` (the thesis's text does not mention clipping).
    weight_decay : float
        L2 penalty added to the gradient by the optimiser (1e-5 in the thesis's published code).
    scale_lr : bool
        Multiply the learning rate by sqrt(K) (thesis 4.3.1).
    max_time : float, optional
        Stop after the epoch during which the training time passes this many seconds.
    clock : {"wall", "cpu"}
        The clock of ``max_time``: wall time, or this process's CPU time (steadier than wall time on a
        machine shared with other work; with one torch thread it is the computation's own cost).
    monitor_bias : bool
        Also estimate beta and the relative bias for fixed K, after each epoch and outside the timing.
    generator : torch.Generator, optional
        Random source of the estimates' start points.
    callback : callable, optional
        ``callback(result)`` after each epoch.

    Returns
    -------
    TrainResult
    """
    if not isinstance(model, RecurrentModel):
        msg = f"`model` must be an sgmc.rnn.RecurrentModel; got {type(model).__name__}"
        raise TypeError(msg)
    if not (isinstance(train, tuple) and len(train) == 2):
        msg = f"`train` must be an (inputs, targets) pair of tensors; got {type(train).__name__}"
        raise TypeError(msg)
    batch_size = check_int(batch_size, "batch_size")
    x, y = check_sequence_pair(*train, name="train inputs", min_len=2 * batch_size)
    adaptive = isinstance(k, str)
    delta = check_fraction(delta, "delta")
    k_min, k_max, k0 = check_truncation_range(k_min, k_max, k0=k0)
    window = check_int(window, "window")
    n_starts = check_int(n_starts, "n_starts")
    if adaptive:
        check_choice(k, "k", ("adaptive",))
        k_now = k0
    else:
        k_now = check_int(k, "k")
    lr = check_positive(lr, "lr")
    optimizer = check_choice(optimizer, "optimizer", ("sgd", "adam"))
    epochs = check_int(epochs, "epochs")
    clip = None if clip is None else check_positive(clip, "clip")
    clip_sum = None if clip_sum is None else check_positive(clip_sum, "clip_sum")
    weight_decay = float(weight_decay)
    if not (math.isfinite(weight_decay) and weight_decay >= 0):
        msg = f"`weight_decay` must be a finite number >= 0; got {weight_decay!r}"
        raise ValueError(msg)
    max_time = None if max_time is None else check_positive(max_time, "max_time")
    clock = check_choice(clock, "clock", ("wall", "cpu"))
    xb, yb = batchify(x, batch_size), batchify(y, batch_size)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = (torch.optim.SGD(params, lr=lr, weight_decay=weight_decay) if optimizer == "sgd"
           else torch.optim.Adam(params, lr=lr, weight_decay=weight_decay))
    result = TrainResult()
    wall = cpu = 0.0
    for epoch in range(1, epochs + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        beta, rel = math.nan, math.nan
        if adaptive and epoch > 1:
            est = estimate_truncation(model, x, y, delta=delta, window=window, n_starts=n_starts,
                                      k_min=k_min, k_max=k_max, generator=generator)
            k_now, beta, rel = est.k, est.beta, est.bias_at(est.k)
        for group in opt.param_groups:
            group["lr"] = lr * math.sqrt(k_now) if scale_lr else lr
        total, count = 0.0, 0
        for grads, loss, n in stream_gradients(model, xb, yb, k_now):
            for p, g in zip(params, grads):
                p.grad = g
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(params, clip)
            if clip_sum is not None:
                torch.nn.utils.clip_grad_norm_(params, clip_sum / n)
            opt.step()
            total += loss * n
            count += n
        wall += time.perf_counter() - t0
        cpu += time.process_time() - c0
        if monitor_bias and (not adaptive or epoch == 1):
            est = estimate_truncation(model, x, y, delta=delta, window=window, n_starts=n_starts,
                                      k_min=1, k_max=max(k_now, k_max), generator=generator)
            beta, rel = est.beta, est.bias_at(k_now)
        result.epoch.append(epoch)
        result.wall_s.append(wall)
        result.cpu_s.append(cpu)
        result.k.append(k_now)
        result.train_loss.append(total / max(count, 1))
        result.valid_loss.append(evaluate(model, *valid, batch_size) if valid is not None else math.nan)
        result.test_loss.append(evaluate(model, *test, batch_size) if test is not None else math.nan)
        result.beta.append(beta)
        result.relative_bias.append(rel)
        if callback is not None:
            callback(result)
        if not math.isfinite(result.train_loss[-1]):
            msg = f"training diverged in epoch {epoch} (mean training loss {result.train_loss[-1]}); lower `lr` or set `clip`"
            raise FloatingPointError(msg)
        if max_time is not None and (wall if clock == "wall" else cpu) >= max_time:
            break
    return result
