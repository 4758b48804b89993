"""Per-lag gradient norms phi_k and their geometric decay rate beta (Aicher thesis, section 4.3.2).

For a random time step s, phi_k = ||dL_s/dh_{s-k}|| is the norm of the loss's gradient with
respect to the hidden state k lags back (Eq. 4.13). Assumption (A-1) says that its mean decays
geometrically beyond some lag tau: E[phi_{k+1}] <= beta E[phi_k] for k >= tau. :func:`lag_gradients`
computes dL_s/dh_{s-k} for k = 0..R at a minibatch of start points s in one backward pass (the
BPTT(R, 1) of Algorithm 6, line 4, vectorised over the start points), and :func:`fit_decay` estimates
beta as exp of the least-squares slope of log P_S[phi_k] against k over k in [tau, R] (Eq. 4.17,
with the exponential that the printed equation's "log" stands for), with tau = 0.9 R.
"""

from __future__ import annotations

import math
from typing import Any

from ._checks import check_int, check_sequence_pair, torch
from .models import RecurrentModel

__all__ = ["lag_gradients", "gradient_norms", "fit_decay", "sample_starts"]


def sample_starts(n_steps: int, n_starts: int, window: int, generator: Any = None) -> Any:
    """``n_starts`` start points s drawn uniformly from [window, n_steps) (with replacement)."""
    n_steps = check_int(n_steps, "n_steps")
    n_starts = check_int(n_starts, "n_starts")
    window = check_int(window, "window")
    if n_steps <= window:
        msg = f"the sequence must be longer than `window` ({window}) to place start points; got {n_steps} steps"
        raise ValueError(msg)
    return torch.randint(window, n_steps, (n_starts,), generator=generator)


def lag_gradients(model: RecurrentModel, x: Any, y: Any, starts: Any, window: int, burn_in: int = 0) -> Any:
    """dL_s/dh_{s-k} for k = 0..``window`` at each start point s, as one ``(S, window + 1, state_dim)`` tensor.

    Parameters
    ----------
    model : RecurrentModel
        The recurrent model.
    x, y : Tensor
        One long input and target sequence, time first (``(T,)`` or ``(T, features)``).
    starts : Tensor
        ``(S,)`` integer time steps s, each at least ``window``; the S windows run as one batch.
    window : int
        R, the largest lag.
    burn_in : int
        Steps run (without gradients) from the zero state before each window, so that h_{s-R-1} is a
        typical state (fewer where the sequence starts sooner).

    Returns
    -------
    Tensor
        ``g[i, k] = dL_{s_i}/dh_{s_i - k}``, the whole recurrent state's gradient.

    Examples
    --------
    >>> import torch
    >>> from sgmc.rnn import LinearRNN, lag_gradients, gradient_norms
    >>> m = LinearRNN(0.5 * torch.eye(1, dtype=torch.float64), torch.ones(1, 1, dtype=torch.float64),
    ...               torch.ones(1, 1, dtype=torch.float64))
    >>> x = torch.ones(20, 1, dtype=torch.float64); y = torch.zeros(20, 1, dtype=torch.float64)
    >>> phi = gradient_norms(lag_gradients(m, x, y, torch.tensor([10, 15]), window=3))
    >>> [round(float(v), 3) for v in phi[0] / phi[0, 0]]
    [1.0, 0.5, 0.25, 0.125]
    """
    if not isinstance(model, RecurrentModel):
        msg = f"`model` must be an sgmc.rnn.RecurrentModel; got {type(model).__name__}"
        raise TypeError(msg)
    x, y = check_sequence_pair(x, y, name="x")
    window = check_int(window, "window")
    burn_in = check_int(burn_in, "burn_in", minimum=0)
    if not isinstance(starts, torch.Tensor) or starts.ndim != 1 or starts.numel() == 0 or starts.is_floating_point():
        msg = f"`starts` must be a non-empty 1-D integer tensor; got {starts!r:.80}"
        raise ValueError(msg)
    lo, hi = int(starts.min()), int(starts.max())
    if lo < window or hi >= x.shape[0]:
        msg = (f"`starts` must lie in [window, len(x)) = [{window}, {x.shape[0]}); got values in "
               f"[{lo}, {hi}]")
        raise ValueError(msg)
    burn = min(burn_in, lo - window)
    offsets = torch.arange(-(window + burn), 1)
    idx = starts[None, :] + offsets[:, None]            # (window + burn + 1, S)
    xw, yw = x[idx], y[idx]
    state = model.init_state(starts.shape[0])
    if burn > 0:
        with torch.no_grad():
            _, state, _ = model.run(xw[:burn], state)
    states, h = [], state.detach()
    for t in range(burn, xw.shape[0]):
        h = model.step(xw[t], h)
        states.append(h)
    loss = model.loss(model.readout(h), yw[-1]).sum()   # sum: each sequence keeps its own gradient
    grads = torch.autograd.grad(loss, states)
    return torch.stack(grads[::-1], dim=1).detach()


def gradient_norms(g: Any) -> Any:
    """``phi_k = ||dL_s/dh_{s-k}||``: the norms over the state axis of :func:`lag_gradients`' output, ``(S, R + 1)``."""
    if not isinstance(g, torch.Tensor) or g.ndim != 3:
        msg = f"`g` must be the (S, R + 1, state_dim) tensor of lag_gradients; got {getattr(g, 'shape', g)!r:.80}"
        raise ValueError(msg)
    return torch.linalg.vector_norm(g, dim=-1)


def fit_decay(mean_phi: Any, tau: int | None = None) -> tuple:
    """beta from the least-squares slope of log P_S[phi_k] against k over k in [tau, R].

    Parameters
    ----------
    mean_phi : Tensor
        ``(R + 1,)``: the minibatch mean of phi_k for k = 0..R.
    tau : int, optional
        First lag of the fit; 0.9 R (rounded down) by default, as in the thesis.

    Returns
    -------
    beta : float
        exp(slope); NaN when fewer than two lags in [tau, R] have a positive finite mean norm.
    log_beta : float
        The slope itself (``>= 0`` means no geometric decay was seen).
    tau : int
        The first lag used.

    Examples
    --------
    >>> import torch
    >>> from sgmc.rnn import fit_decay
    >>> beta, log_beta, tau = fit_decay(0.8 ** torch.arange(11.0))
    >>> round(beta, 6), tau
    (0.8, 9)
    """
    if not isinstance(mean_phi, torch.Tensor) or mean_phi.ndim != 1 or mean_phi.shape[0] < 2:
        msg = f"`mean_phi` must be a 1-D tensor of at least 2 lags; got {getattr(mean_phi, 'shape', mean_phi)!r:.80}"
        raise ValueError(msg)
    r = mean_phi.shape[0] - 1
    tau = int(math.floor(0.9 * r)) if tau is None else check_int(tau, "tau", minimum=0)
    if tau > r - 1:
        msg = f"`tau` must be below the largest lag R = {r}; got {tau}"
        raise ValueError(msg)
    k = torch.arange(tau, r + 1, dtype=torch.float64)
    v = mean_phi[tau:].detach().to(torch.float64)
    ok = torch.isfinite(v) & (v > 0)
    if int(ok.sum()) < 2:
        return float("nan"), float("nan"), tau
    k, logv = k[ok], torch.log(v[ok])
    kc = k - k.mean()
    slope = float((kc * (logv - logv.mean())).sum() / (kc * kc).sum())
    return math.exp(slope), slope, tau
