"""The truncation length K = kappa(delta) with estimated relative bias below delta (thesis 4.3.3).

Theorem 7 of the Aicher thesis bounds the bias of the K-truncated gradient, up to the constant M of
(A-2), by

    E(K) = sum_{k=K+1}^{tau-1} P_S[phi_k] + P_S[phi_tau] / (1 - beta)      (K < tau)
    E(K) = P_S[phi_tau] beta^(K - tau) / (1 - beta)                         (K >= tau)

(Eq. 4.18), and its relative bias by Delta(K) = E(K) / max_{k <= K} (||P_S[sum_{j<=k} dL_s/dh_{s-j}]||
- E(k)) (Eq. 4.19, with the thesis's approximation ||P_S[g_k / M]|| ~ the norm of the minibatch
mean of the cumulative hidden-state gradient, which removes M). The truncation is the smallest K in
[K_min, K_max] with Delta(K) < delta (Eq. 4.20); K_max when none is, or when log beta >= 0 (no
geometric decay, so the bound is infinite).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ._checks import check_fraction, check_int, check_truncation_range, torch
from .decay import fit_decay, gradient_norms, lag_gradients, sample_starts

__all__ = ["bias_bound", "relative_bias", "choose_truncation", "TruncationEstimate", "estimate_truncation"]


def bias_bound(mean_phi: Any, beta: float, tau: int, k_max: int) -> Any:
    """E(K) of Eq. 4.18 (without M) for K = 0..``k_max``; infinite where beta is not below 1 or NaN."""
    k_max = check_int(k_max, "k_max", minimum=0)
    r = mean_phi.shape[0] - 1
    if not 0 <= tau <= r:
        msg = f"`tau` must lie in [0, R] = [0, {r}]; got {tau}"
        raise ValueError(msg)
    phi = mean_phi.detach().to(torch.float64)
    if not (beta < 1.0):  # also NaN
        return torch.full((k_max + 1,), math.inf, dtype=torch.float64)
    tail = float(phi[tau]) / (1.0 - beta)
    out = torch.empty(k_max + 1, dtype=torch.float64)
    # suffix sums: sum_{k=K+1}^{tau-1} phi_k for K < tau
    for K in range(k_max + 1):
        if K < tau:
            out[K] = phi[K + 1:tau].sum() + tail
        else:
            out[K] = tail * beta ** (K - tau)
    return out


def relative_bias(bound: Any, cum_norm: Any) -> Any:
    """Delta(K) = E(K) / max_{k <= K} (cum_norm(k) - E(k)) of Eq. 4.19, infinite where that is not positive.

    ``cum_norm`` holds ``||P_S[sum_{j<=k} dL_s/dh_{s-j}]||`` for k = 0..R; beyond R it is held at its
    value at R (the window shows nothing further back).
    """
    n = bound.shape[0]
    c = cum_norm.detach().to(torch.float64)
    if c.shape[0] < n:
        c = torch.cat([c, c[-1].expand(n - c.shape[0])])
    denom = torch.cummax(c[:n] - bound, dim=0).values
    out = torch.full_like(bound, math.inf)
    pos = denom > 0
    out[pos] = bound[pos] / denom[pos]
    return out


def choose_truncation(delta_of_k: Any, delta: float, k_min: int, k_max: int, log_beta: float) -> int:
    """kappa(delta): the smallest K in [k_min, k_max] with Delta(K) < delta; k_max if none or log beta >= 0."""
    delta = check_fraction(delta, "delta")
    k_min, k_max = check_truncation_range(k_min, k_max)
    if not (log_beta < 0.0):
        return k_max
    ok = delta_of_k[k_min:k_max + 1] < delta
    hits = torch.nonzero(ok)
    return k_min + int(hits[0]) if hits.numel() else k_max


@dataclass(frozen=True)
class TruncationEstimate:
    """One estimate of the truncation (Algorithm 6, lines 3-7).

    Attributes
    ----------
    k : int
        The truncation chosen, kappa(delta) in [k_min, k_max].
    beta, log_beta : float
        The fitted decay rate and its log (the OLS slope).
    tau : int
        First lag of the fit.
    mean_phi : Tensor
        P_S[phi_k], k = 0..R.
    relative_bias : Tensor
        Delta(K) for K = 0..k_max; ``relative_bias[K]`` is the estimated relative bias at truncation K.
    """

    k: int
    beta: float
    log_beta: float
    tau: int
    mean_phi: Any
    relative_bias: Any

    def bias_at(self, k: int) -> float:
        """Estimated relative bias Delta(k) (k at most k_max)."""
        return float(self.relative_bias[min(int(k), self.relative_bias.shape[0] - 1)])


def estimate_truncation(model: Any, x: Any, y: Any, *, delta: float, window: int = 100, n_starts: int = 64,
                        k_min: int = 2, k_max: int = 100, burn_in: int | None = None, tau: int | None = None,
                        generator: Any = None) -> TruncationEstimate:
    """Estimate kappa(delta) on ``n_starts`` random start points of the sequence ``(x, y)``.

    Parameters
    ----------
    model : RecurrentModel
        The recurrent model at its current parameters.
    x, y : Tensor
        The training inputs and targets as one long sequence, time first.
    delta : float
        Relative-bias tolerance, in (0, 1).
    window : int
        R, the largest lag whose gradient is computed (BPTT(R, 1)).
    n_starts : int
        S, the number of start points.
    k_min, k_max : int
        Bounds of the truncation.
    burn_in : int, optional
        Steps run before each window (``window`` by default).
    tau : int, optional
        First lag of the decay fit (0.9 R by default).
    generator : torch.Generator, optional
        Source of the start points.

    Returns
    -------
    TruncationEstimate

    Examples
    --------
    >>> import torch
    >>> from sgmc.rnn import LinearRNN, estimate_truncation
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> f = torch.float64
    >>> m = LinearRNN(0.7 * torch.eye(1, dtype=f), torch.ones(1, 1, dtype=f), torch.ones(1, 1, dtype=f))
    >>> x = torch.randn(500, 1, dtype=f); y = torch.randn(500, 1, dtype=f)
    >>> est = estimate_truncation(m, x, y, delta=0.1, window=30, k_max=50)
    >>> round(est.beta, 6), est.k >= 2
    (0.7, True)
    """
    delta = check_fraction(delta, "delta")
    k_min, k_max = check_truncation_range(k_min, k_max)
    window = check_int(window, "window")
    burn_in = window if burn_in is None else check_int(burn_in, "burn_in", minimum=0)
    starts = sample_starts(x.shape[0], n_starts, window, generator)
    g = lag_gradients(model, x, y, starts, window, burn_in=burn_in)
    mean_phi = gradient_norms(g).mean(0)
    beta, log_beta, tau = fit_decay(mean_phi, tau)
    bound = bias_bound(mean_phi, beta, tau, k_max)
    cum_norm = torch.linalg.vector_norm(torch.cumsum(g.mean(0), dim=0), dim=-1)
    rel = relative_bias(bound, cum_norm)
    k = choose_truncation(rel, delta, k_min, k_max, log_beta)
    return TruncationEstimate(k=k, beta=beta, log_beta=log_beta, tau=tau, mean_phi=mean_phi, relative_bias=rel)
