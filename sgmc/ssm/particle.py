"""Particle filters and particle score estimators for state space models.

A particle filter approximates the filtering distributions p(x_t | y_{1:t}) of a state space model by
``N`` weighted samples and gives an unbiased estimate of the likelihood p(y_{1:T}) as the product of
the mean incremental weights. Smoothed additive functionals such as the score (Fisher's identity,
Aicher thesis Eq. 2.24) are accumulated forward in time without storing the particle history:

* **path** (Poyiadjis, Doucet and Singh 2011, the O(N) "path space" estimator; thesis Alg. 2, paper
  Alg. 1): every particle carries the running sum of the statistic along its ancestral line. Cheap, but
  its variance grows like T^2 / N because the ancestral lines coalesce.
* **paris** (Olsson and Westerborn 2017, PaRIS): every particle carries an estimate of the smoothed
  statistic given its own value, refreshed with ``n_backward`` draws from the backward kernel
  ``p(x_{t-1} = j | x_t) ~ W_{t-1}^j p(x_t | x_{t-1}^j)``. The variance grows like T / N.
* **poyiadjis_n2** (Poyiadjis et al. 2011, O(N^2)): the backward kernel is integrated exactly.

Models describe themselves to these algorithms through a :class:`ParticleKernel`: a batch of ``Bt``
independent filtering problems (one per chain and subsequence), each with its own parameter, run side
by side with particles stored as arrays of shape ``(Bt, N, state_dim)``. Python loops run over time
only.

Conventions. The state before the first observation, ``x_0``, is drawn from the model's initial
(stationary) distribution and carries no observation; observation ``y[t]`` (0-based) is emitted by
``x_{t+1}`` (1-based), which moves from ``x_t``. So every observation contributes one complete term
``grad log p(y_t, x_t | x_{t-1})`` and there is no separate initial term (thesis Alg. 2: ``u_0 ~ nu``,
then ``t = 1..T``).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from .._array_api import Array, array_namespace, check_real_dtype, is_array
from .._validation import check_alloc, check_choice, check_int
from .._dispatch import dispatch
from .lgssm_kernel import ScalarLGSSMKernel
from .particle_kernel import AdaptedKernel, ParticleKernel
from .resampling import _TWINS, SCHEMES
from .smoothers import _gather, _n2_update, _paris_update

__all__ = [
    "ParticleKernel",
    "AdaptedKernel",
    "FilterResult",
    "particle_filter",
    "particle_window_score",
    "SMOOTHERS",
    "ScalarLGSSMKernel",
]

SMOOTHERS = ("path", "paris", "poyiadjis_n2", "none")


class FilterResult(NamedTuple):
    """What :func:`particle_filter` returns.

    Attributes
    ----------
    log_lik : (Bt,) estimate of ``log p(y_{1:T})`` (its exponential is unbiased).
    particles : (Bt, N, state_dim) final particles.
    weights : (Bt, N) final normalised weights.
    score : (Bt, dim) or None
        The smoothed additive statistic ``sum_t c_t E[score_terms]`` when a statistic was asked for.
    n_resampled : (Bt,) int64, how many steps resampled in each row.
    """

    log_lik: Array
    particles: Array
    weights: Array
    score: Array | None
    n_resampled: Array


def _bcast(p: Array, ndim: int) -> Array:
    """A per-row parameter ``(Bt,)`` shaped to broadcast against an array with ``ndim`` axes."""
    xp = array_namespace(p)
    return xp.reshape(p, (p.shape[0],) + (1,) * (ndim - 1))


def _resampler(xp: Any, rng: Any, scheme: str, threshold: float | None, bt: int, n: int, dev: Any):
    """``pick(w) -> (ancestors, resampled)`` for the filter loop, with the dispatch looked up once."""
    fn = dispatch(xp, "resample_" + scheme, _TWINS[scheme])
    u_shape = (bt,) if scheme == "systematic" else (bt, n)
    ones = xp.ones((bt,), dtype=xp.bool, device=dev)
    if threshold is None:
        return lambda w: (fn(w, rng.uniform(u_shape, dtype=xp.float64)), ones)
    if not (0.0 < float(threshold) <= 1.0):
        msg = f"`ess_threshold` must be in (0, 1] or None; got {threshold!r}"
        raise ValueError(msg)
    ident = xp.arange(n, dtype=xp.int64, device=dev)[None, :]
    level = float(threshold) * n

    def pick(w: Array) -> tuple[Array, Array]:
        anc = fn(w, rng.uniform(u_shape, dtype=xp.float64))
        low = 1.0 < level * xp.sum(w * w, axis=1)  # ESS = 1 / sum W^2 < threshold * N
        return xp.where(low[:, None], anc, ident), low

    return pick


class _Increment(NamedTuple):
    """A likelihood increment ``mx + log(tot) + shift`` kept in parts: the logarithms of a whole run
    are taken at once at the end instead of one small call per step."""

    mx: Array  # (Bt,)
    tot: Array  # (Bt,)
    shift: float


def _normalise_exp(
    xp: Any, base: Array, logw: Array, uniform: bool = False, n: int = 1, scaled_only: bool = False
) -> tuple[Array, _Increment]:
    """``W ~ base * exp(logw)`` normalised per row, and ``log sum(base * exp(logw))`` in parts.

    One exponential per particle: the log-weights are shifted by their row maximum once, and the
    normalised weights are the shifted exponentials divided by their sum (no second pass through
    ``exp`` or ``log``).
    """
    mx = xp.max(logw, axis=1, keepdims=True)
    if uniform:  # base = 1/N everywhere: fold it into the constant
        e = xp.exp(logw - mx)
        tot = xp.sum(e, axis=1)
        inc = _Increment(mx[:, 0], tot, -math.log(n))
        # With scaled_only the weights stay unnormalised (largest 1): resampling and the
        # smoothers normalise per row themselves, which saves a pass over the particles.
        return (e if scaled_only else e / tot[:, None]), inc
    e = base * xp.exp(logw - mx)
    tot = xp.sum(e, axis=1)
    return e / tot[:, None], _Increment(mx[:, 0], tot, 0.0)


def _value(xp: Any, inc: _Increment) -> Array:
    return inc.mx + (xp.log(inc.tot) + inc.shift)


# Its docstring's Returns and example repeat kalman_filter's layout: each function's help runs on its own.
def particle_filter(
    rng: Any,
    kernel: Any,
    y: Array,
    n_particles: int,
    *,
    mask: Array | None = None,
    resampling: str = "systematic",
    ess_threshold: float | None = None,
    stat_weight: Array | None = None,
    smoother: str = "path",
    n_backward: int = 2,
    max_rejection_rounds: int = 16,
) -> FilterResult:
    """Run a particle filter on ``Bt`` independent series at once, optionally with a score smoother.

    Each step resamples (every step, or where the effective sample size fell below
    ``ess_threshold * N``), moves the particles with the kernel's proposal and reweights them; the
    likelihood increment is ``log sum_i W_{t-1}^i w_t^i``. A fully adapted kernel (``adapted``)
    selects ancestors with the predictive weights ``W_{t-1}^i p(y_t | x_{t-1}^i)`` first and then
    moves them with ``p(x_t | x_{t-1}, y_t)`` (Pitt and Shephard 1999); the new particles carry equal
    weights. Python loops run over time; particles and rows are array axes.

    Parameters
    ----------
    rng : sgmc Generator
    kernel : ParticleKernel
        Built for ``Bt`` rows (``kernel.batch``).
    y : array (Bt, T, obs_dim)
    n_particles : int
    mask : bool array (Bt, T), optional
        False marks padding; a masked step leaves particles, weights, statistics and the likelihood
        unchanged (padding is trailing, so a row stops where its mask does).
    resampling : {"systematic", "stratified", "residual", "multinomial"}
    ess_threshold : float in (0, 1] or None
        None resamples at every step (the papers' choice).
    stat_weight : array (Bt, T), optional
        Weights ``c_t`` of the score terms; with them the result carries the smoothed statistic
        ``sum_t c_t E[score_terms(x_{t-1}, x_t, y_t) | y]``.
    smoother : {"path", "paris", "poyiadjis_n2", "none"}
        How the statistic is smoothed (see the module docstring). ``"none"`` skips it.
    n_backward : int
        Backward draws per particle for PaRIS (2 in Olsson and Westerborn's experiments).
    max_rejection_rounds : int
        PaRIS draws the backward indices by accept-reject (proposal ``W_{t-1}``, acceptance
        ``p(x_t | x_{t-1}^j) / bound``); draws still pending after this many rounds are made exactly
        from the categorical distribution over all ``N`` ancestors.

    Returns
    -------
    FilterResult

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.ssm.particle import ScalarLGSSMKernel, particle_filter
    >>> k = ScalarLGSSMKernel(np.array([0.9]), np.array([0.5]), np.array([1.0]))
    >>> y = np.zeros((1, 50, 1))
    >>> res = particle_filter(0, k, y, 200)
    >>> res.log_lik.shape, res.particles.shape
    ((1,), (1, 200, 1))
    """
    from ..backends import default_rng

    check_choice(resampling, "resampling", SCHEMES)
    check_choice(smoother, "smoother", SMOOTHERS)
    n = check_int(n_particles, "n_particles")
    if not is_array(y):
        msg = f"`y` must be an array of shape (Bt, T, obs_dim); got {type(y).__name__}"
        raise TypeError(msg)
    xp = array_namespace(y, names=("y",))
    if y.ndim != 3 or y.shape[0] != kernel.batch:
        msg = f"`y` must have shape (Bt, T, obs_dim) with Bt = kernel.batch = {kernel.batch}; got {tuple(y.shape)}"
        raise ValueError(msg)
    check_real_dtype(xp, y.dtype, "y")
    # particles, their proposals and weights: at least three (Bt, N, state_dim) arrays at once
    check_alloc(24 * int(kernel.batch) * n * max(int(getattr(kernel, "state_dim", 1)), 1), "n_particles", n,
                "the (Bt, n_particles, state_dim) particle arrays")
    if mask is not None and tuple(mask.shape) != tuple(y.shape[:2]):
        msg = f"`mask` must have shape (Bt, T) = {tuple(y.shape[:2])}, the leading axes of `y`; got {tuple(mask.shape)}"
        raise ValueError(msg)
    if xp.isdtype(y.dtype, "real floating"):
        finite = xp.all(xp.isfinite(y), axis=2)
        if mask is not None:  # padding (mask False) is never read
            finite = finite | ~mask
        if not bool(xp.all(finite)):
            bad = int(xp.sum(xp.astype(~finite, xp.int64)))
            msg = (
                f"`y` has {bad} time step(s) with non-finite observations (NaN or inf); the filter needs "
                "finite observations (mark padding with `mask` instead)"
            )
            raise ValueError(msg)
    rng = default_rng(rng, backend=xp) if not hasattr(rng, "uniform") else rng
    bt, T = y.shape[0], y.shape[1]
    dev = y.device
    dtype = kernel.dtype
    with_stat = stat_weight is not None and smoother != "none"
    if with_stat and smoother != "path" and not hasattr(kernel, "log_transition"):
        msg = f"smoother={smoother!r} needs the transition density (kernel.log_transition), which {type(kernel).__name__} lacks; use smoother='path'"
        raise ValueError(msg)
    row = xp.arange(bt, dtype=xp.int64, device=dev)[:, None] * n
    x = kernel.sample_initial(rng, n)
    w = xp.full((bt, n), 1.0 / n, dtype=dtype, device=dev)
    log_lik = xp.zeros((bt,), dtype=dtype, device=dev)
    n_res = xp.zeros((bt,), dtype=xp.int64, device=dev)
    parts: list = []  # likelihood increments of unmasked runs, summed after the loop
    n_every = 0
    tau = xp.zeros((bt, n, kernel.dim), dtype=dtype, device=dev) if with_stat else None
    uniform_w = xp.full((bt, n), 1.0 / n, dtype=dtype, device=dev)
    adapted = bool(getattr(kernel, "adapted", False))
    pick = _resampler(xp, rng, resampling, ess_threshold, bt, n, dev)
    for t in range(T):
        y_t = y[:, t, :]
        if adapted:
            w_sel, inc = _normalise_exp(xp, w, kernel.ancestor_log_weight(x, y_t))
            anc, did = pick(w_sel)
            w_new = uniform_w if ess_threshold is None else xp.where(did[:, None], uniform_w, w_sel)
            flat = anc + row if bt > 1 else anc
            x_anc = _gather(xp, x, flat, (bt, n))
            x_new = kernel.propagate(rng, x_anc, y_t)
        else:
            if t == 0:
                # Equal initial weights: resampling them would only add noise.
                flat = xp.broadcast_to(xp.arange(n, dtype=xp.int64, device=dev)[None, :], (bt, n)) + row
                did = xp.zeros((bt,), dtype=xp.bool, device=dev)
                x_anc, w_keep = x, w
            else:
                anc, did = pick(w)
                flat = anc + row if bt > 1 else anc
                x_anc = _gather(xp, x, flat, (bt, n))
                w_keep = uniform_w if ess_threshold is None else xp.where(did[:, None], uniform_w, w)
            x_new = kernel.propagate(rng, x_anc, y_t)
            w_new, inc = _normalise_exp(
                xp, w_keep, kernel.log_weight(x_anc, x_new, y_t), w_keep is uniform_w, n, ess_threshold is None
            )
        if with_stat:
            c_t = _bcast(stat_weight[:, t], 3)
            if smoother == "path":
                tau_new = _gather(xp, tau, flat, (bt, n)) + c_t * kernel.score_terms(x_anc, x_new, y_t)
            elif smoother == "paris":
                tau_new = _paris_update(
                    xp, rng, kernel, x, w, tau, x_new, y_t, c_t, row, n_backward, max_rejection_rounds
                )
            else:
                tau_new = _n2_update(xp, kernel, x, w, tau, x_new, y_t, c_t)
        if mask is None:
            x, w = x_new, w_new
            parts.append(inc)
            if ess_threshold is None:
                n_every += 1 if (adapted or t > 0) else 0
            else:
                n_res = n_res + xp.astype(did, xp.int64)
            if with_stat:
                tau = tau_new
        else:
            m = mask[:, t]
            m3 = m[:, None, None]
            x = xp.where(m3, x_new, x)
            w = xp.where(m[:, None], w_new, w)
            log_lik = xp.where(m, log_lik + _value(xp, inc), log_lik)
            n_res = n_res + xp.astype(did & m, xp.int64)
            if with_stat:
                tau = xp.where(m3, tau_new, tau)
    if parts:
        mxs = xp.stack([p.mx for p in parts], axis=0)
        tots = xp.stack([p.tot for p in parts], axis=0)
        log_lik = log_lik + (xp.sum(mxs, axis=0) + xp.sum(xp.log(tots), axis=0) + sum(p.shift for p in parts))
    if n_every:
        n_res = n_res + n_every
    w = w / xp.sum(w, axis=1, keepdims=True)
    score = xp.sum(w[:, :, None] * tau, axis=1) if with_stat else None
    return FilterResult(log_lik, x, w, score, n_res)


def particle_window_score(
    rng: Any,
    model: Any,
    theta: Array,
    windows: Any,
    y_windows: Array,
    n_particles: int = 1000,
    *,
    smoother: str = "path",
    resampling: str = "systematic",
    ess_threshold: float | None = None,
    n_backward: int = 2,
) -> tuple[Array, Array]:
    """Particle estimate of the buffered subsequence score for a batch of chains and windows.

    All ``chains * M`` windows are filtered at once as rows of one batch (thesis Alg. 4 / paper
    Alg. 2, with the window weights of Eq. 3.10 as the statistic's weights: zero on the buffers,
    which are still filtered through).

    Parameters
    ----------
    rng : sgmc Generator
    model : StateSpaceModel with ``particle_kernel(theta_batch)``
    theta : (chains, dim)
    windows : sgmc.ssm.Windows
        ``weight`` (chains, M, L), ``mask`` (chains, M, L), ``length`` (chains, M).
    y_windows : (chains, M, L, obs_dim)
        Observations of each window (left-aligned, trailing padding masked).
    n_particles : int
    smoother : {"path", "paris", "poyiadjis_n2"}
    resampling : {"systematic", "stratified", "residual", "multinomial"}
    ess_threshold : float in (0, 1] or None
        None resamples at every step; otherwise a row resamples when its ESS < threshold * N.
    n_backward : int
        Backward draws per particle for PaRIS.

    Returns
    -------
    score : (chains, dim)
        ``sum_m sum_t weight[c, m, t] E[grad log p(y_t, x_t | x_{t-1})]`` over each window, the
        state before each window drawn from the kernel's initial distribution.
    n_evals : (chains,) int64
        Time steps processed (sum of the window lengths).

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc import backends
    >>> from sgmc.ssm import LGSSM, sample_windows
    >>> rng = backends.default_rng(0)
    >>> model = LGSSM(np.zeros(100))
    >>> w = sample_windows(rng, T=100, S=10, B=5, chains=2)
    >>> theta = np.array([[0.9, 2.0, 1.0], [0.5, 1.0, 1.0]])
    >>> score, n_evals = model.window_score(rng, theta, w, method="particle", n_particles=100)
    >>> score.shape, n_evals.shape
    ((2, 3), (2,))
    """
    check_choice(smoother, "smoother", ("path", "paris", "poyiadjis_n2"))
    xp = array_namespace(theta, y_windows)
    chains, dim = theta.shape
    _, M, L = windows.weight.shape
    bt = chains * M
    theta_b = xp.reshape(xp.broadcast_to(theta[:, None, :], (chains, M, dim)), (bt, dim))
    kernel = model.particle_kernel(theta_b)
    y = xp.reshape(y_windows, (bt, L, y_windows.shape[-1]))
    res = particle_filter(
        rng,
        kernel,
        y,
        n_particles,
        mask=xp.reshape(windows.mask, (bt, L)),
        resampling=resampling,
        ess_threshold=ess_threshold,
        stat_weight=xp.astype(xp.reshape(windows.weight, (bt, L)), kernel.dtype),
        smoother=smoother,
        n_backward=n_backward,
    )
    score = xp.sum(xp.reshape(res.score, (chains, M, dim)), axis=1)
    n_evals = xp.sum(xp.astype(windows.length, xp.int64), axis=1)
    return score, n_evals
