"""Buffered subsequences of a time series: where a stochastic gradient looks, and with what weight.

A buffered stochastic gradient (Aicher 2020, thesis section 3.2, Eq. 3.5; Aicher et al. 2019,
Algorithm 2) replaces the sum over all ``T`` times of Fisher's identity by a weighted sum over a
contiguous subsequence ``S = {s, ..., s + S - 1}``, and conditions the latent states on a longer,
*buffered* window ``S* = [s - B, s + S + B)`` (clipped at the ends of the series) so that the
smoothing distribution on ``S`` is close to the one given all data.

The start ``s`` is uniform over the ``T - S + 1`` possible starts, so time ``t`` (1-based) is in
``S`` with probability (thesis Eq. 3.10)

    Pr(t in S) = min{t, T - t + 1, S, T - S + 1} / (T - S + 1),

and each score term in ``S`` is weighted by ``1 / Pr(t in S)``, which makes the sum an unbiased
estimate of the full sum (up to the buffer's approximation of the smoother). ``M`` subsequences per
chain are averaged; their weights include the ``1 / M``.

Windows are *left-aligned* in a padded array of length ``L = min(S + 2B, T)``: position ``j`` of a
window is time ``start + j``; only trailing positions are padding (``mask`` False, weight 0).

>>> from sgmc import backends
>>> from sgmc.ssm import sample_windows
>>> w = sample_windows(backends.default_rng(0), T=100, S=10, B=5, chains=3, M=2)
>>> tuple(w.weight.shape), w.L
((3, 2, 20), 20)
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .._array_api import Array, Namespace, array_namespace, device_of
from .._validation import check_int
from .._blocks import take

__all__ = ["Windows", "sample_windows", "all_windows", "windows_at", "inclusion_prob", "gather_windows", "check_window_sizes"]


class Windows(NamedTuple):
    """Buffered subsequences, ``M`` per chain, left-aligned in arrays of length ``L``.

    Attributes
    ----------
    start : int64 array (chains, M)
        First time index (0-based) of each buffered window (already clipped at 0).
    length : int64 array (chains, M)
        Number of valid times in the buffered window (clipped at ``T``).
    weight : float array (chains, M, L)
        Weight ``c_t`` of the score term at position ``j`` (time ``start + j``):
        ``1 / (M Pr(t in S))`` on the core subsequence, 0 on the buffers and on padding.
    mask : bool array (chains, M, L)
        True at valid positions (``j < length``).
    L : int
        Padded window length ``min(S + 2B, T)``.
    """

    start: Array
    length: Array
    weight: Array
    mask: Array
    L: int


def check_window_sizes(T: Any, S: Any, B: Any) -> tuple[int, int, int]:
    """Validate the series length ``T``, subsequence length ``S`` and buffer ``B``; return them as ints."""
    T = check_int(T, "T")
    S = check_int(S, "subsequence_length")
    B = check_int(B, "buffer", minimum=0)
    if S > T:
        msg = f"`subsequence_length` must be at most the series length T={T}; got {S}"
        raise ValueError(msg)
    return T, S, B


def inclusion_prob(t: Any, T: int, S: int) -> Any:
    """Probability that time ``t`` (1-based) lies in a uniformly placed subsequence (thesis Eq. 3.10).

    Parameters
    ----------
    t : int array or int
        Times, 1-based (``1 <= t <= T``); any shape.
    T, S : int
        Series length and subsequence length.

    Returns
    -------
    float array (or float)
        ``min{t, T - t + 1, S, T - S + 1} / (T - S + 1)``, with the shape of ``t``.

    Examples
    --------
    >>> from sgmc.ssm import inclusion_prob
    >>> [inclusion_prob(t, 5, 2) for t in range(1, 6)]
    [0.25, 0.5, 0.5, 0.5, 0.25]
    """
    T, S, _ = check_window_sizes(T, S, 0)
    n_starts = T - S + 1
    cap = min(S, n_starts)
    if isinstance(t, int):
        return min(t, T - t + 1, cap) / n_starts
    xp = array_namespace(t, names=("t",))
    m = xp.minimum(t, T - t + 1)
    m = xp.minimum(m, xp.full_like(m, cap))
    dtype = xp.float64 if xp.isdtype(t.dtype, "integral") else t.dtype
    return xp.astype(m, dtype) / n_starts


def sample_windows(
    rng: Any,
    T: int,
    S: int,
    B: int,
    chains: int,
    M: int = 1,
    xp: Namespace | None = None,
    dtype: Any = None,
) -> Windows:
    """Draw ``M`` buffered subsequences per chain (uniform start, thesis Eq. 3.10) and their weights.

    Parameters
    ----------
    rng : sgmc Generator
        Draws the starts (one ``integers`` call).
    T : int
        Series length.
    S : int
        Subsequence length (``1 <= S <= T``).
    B : int
        Buffer on each side (``B >= 0``).
    chains, M : int
        Chains and subsequences per chain.
    xp : namespace, optional
        Namespace of the result; default the generator's.
    dtype : floating dtype, optional
        Dtype of ``weight``; default float64.

    Returns
    -------
    Windows

    Examples
    --------
    >>> from sgmc import backends
    >>> from sgmc.ssm import sample_windows
    >>> w = sample_windows(backends.default_rng(1), T=50, S=5, B=2, chains=2)
    >>> w.L, tuple(w.start.shape)
    (9, (2, 1))
    >>> bool(((w.weight > 0).sum(axis=-1) == 5).all())
    True
    """
    T, S, B = check_window_sizes(T, S, B)
    chains = check_int(chains, "chains")
    M = check_int(M, "M")
    s = rng.integers(T - S + 1, (chains, M))  # 0-based start of the core subsequence
    if xp is None:
        xp = array_namespace(s)
    dtype = xp.float64 if dtype is None else dtype
    return _windows_at(xp, xp.astype(s, xp.int64), T, S, B, M, dtype)


def _windows_at(xp, s, T, S, B, M, dtype):
    dev = device_of(s)
    L = min(S + 2 * B, T)
    start = xp.maximum(s - B, xp.zeros_like(s))
    end = xp.minimum(s + (S + B), xp.full_like(s, T))
    length = end - start
    j = xp.arange(L, dtype=xp.int64, device=dev)
    t0 = start[..., None] + j
    mask = j < length[..., None]
    core = (t0 >= s[..., None]) & (t0 < s[..., None] + S)
    prob = inclusion_prob(xp.where(mask, t0 + 1, xp.ones_like(t0)), T, S)
    w = xp.astype(1.0 / (M * prob), dtype)
    return Windows(start, length, xp.where(core & mask, w, xp.zeros_like(w)), mask, L)


def all_windows(T: int, S: int, B: int, xp: Namespace, dtype: Any = None, device: Any = None) -> Windows:
    """Every one of the ``T - S + 1`` buffered subsequences, as ``M = T - S + 1`` windows of one chain.

    Their weighted score is the *expectation* over the subsequence of the buffered gradient, which
    makes the bias of the estimator computable exactly (no Monte Carlo).

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.ssm.subsequence import all_windows
    >>> w = all_windows(6, 2, 1, np)
    >>> w.start.shape, float(w.weight.sum())
    ((1, 5), 6.0)
    """
    T, S, B = check_window_sizes(T, S, B)
    n = T - S + 1
    s = xp.reshape(xp.arange(n, dtype=xp.int64, device=device), (1, n))
    return _windows_at(xp, s, T, S, B, n, xp.float64 if dtype is None else dtype)


def windows_at(starts: Array, T: int, S: int, B: int, M: int = 1, dtype: Any = None) -> Windows:
    """The buffered windows of given subsequence starts (0-based), an int array of shape (chains, M).

    ``M`` only scales the weights (``1 / (M Pr(t in S))``); pass ``M=1`` for per-start scores.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.ssm.subsequence import windows_at
    >>> w = windows_at(np.array([[0], [5]]), T=10, S=3, B=2)
    >>> w.start.ravel().tolist(), w.length.ravel().tolist()
    ([0, 3], [5, 7])
    """
    T, S, B = check_window_sizes(T, S, B)
    xp = array_namespace(starts, names=("starts",))
    if starts.ndim != 2:
        msg = f"`starts` must have shape (chains, M); got {tuple(starts.shape)}"
        raise ValueError(msg)
    return _windows_at(xp, xp.astype(starts, xp.int64), T, S, B, check_int(M, "M"), xp.float64 if dtype is None else dtype)


def gather_windows(xp: Namespace, y: Array, windows: Windows) -> Array:
    """Observations of every window, ``y[start + j]``, zero on padding.

    Parameters
    ----------
    xp : namespace
    y : array (T, obs_dim) or (T,)
        Or a row reader of a series on disk (:mod:`sgmc._blocks`): only the windows' rows are read.
    windows : Windows

    Returns
    -------
    array (chains, M, L, obs_dim) (or (chains, M, L) for 1-D ``y``)

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc import backends
    >>> from sgmc.ssm import gather_windows, sample_windows
    >>> y = np.arange(10.0)[:, None]
    >>> w = sample_windows(backends.default_rng(0), T=10, S=3, B=1, chains=2, M=4)
    >>> yw = gather_windows(np, y, w)
    >>> yw.shape
    (2, 4, 5, 1)
    >>> t = w.start[..., None] + np.arange(w.L)
    >>> bool((yw[..., 0] == np.where(w.mask, t, 0)).all())
    True
    """
    L = windows.L
    dev = device_of(windows.start)
    j = xp.arange(L, dtype=xp.int64, device=dev)
    idx = windows.start[..., None] + j
    idx = xp.where(windows.mask, idx, xp.zeros_like(idx))
    out = take(xp, y, idx)
    mask = windows.mask
    if y.ndim > 1:
        mask = xp.reshape(mask, tuple(mask.shape) + (1,) * (y.ndim - 1))
    return xp.where(mask, out, xp.zeros_like(out))
