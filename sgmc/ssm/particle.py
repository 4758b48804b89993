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
from typing import Any, NamedTuple, Protocol, runtime_checkable

from .._array_api import Array, array_namespace, check_real_dtype, is_array
from .._validation import check_alloc, check_choice, check_int
from .._dispatch import dispatch
from .resampling import _TWINS, SCHEMES

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


@runtime_checkable
class ParticleKernel(Protocol):
    """What a model provides to run particle filters and smoothers on a batch of problems.

    A kernel is built by ``model.particle_kernel(theta_batch)`` for parameters ``theta_batch`` of shape
    ``(Bt, dim)``; row ``b`` of every particle array belongs to problem ``b``. Particles ``x`` have
    shape ``(Bt, N, state_dim)``, observations at one time ``y_t`` shape ``(Bt, obs_dim)``.

    Attributes
    ----------
    xp : namespace
    dtype : floating dtype of the particles
    batch : int
        ``Bt``.
    state_dim : int
    dim : int
        Dimension of ``theta`` (the length of a score term).
    adapted : bool
        False for a bootstrap-type proposal (``log_weight`` carries the whole incremental weight).
        True for a fully adapted proposal: ``propagate`` draws from ``p(x_t | x_{t-1}, y_t)`` and the
        kernel also has ``ancestor_log_weight(x_prev, y_t) = log p(y_t | x_{t-1})``; the filter then
        selects ancestors with those weights and the new particles carry equal weights.

    Methods
    -------
    sample_initial(rng, n) -> (Bt, n, state_dim)
        Draws from the initial (stationary) distribution p0.
    propagate(rng, x_prev, y_t) -> (Bt, N, state_dim)
        Draws from the proposal (the transition for a bootstrap kernel).
    log_weight(x_prev, x, y_t) -> (Bt, N)
        Incremental log-weight ``log p(y_t, x | x_prev) - log q(x | x_prev, y_t)`` up to a constant
        that is the same for every particle of a row *only if* the kernel is adapted; bootstrap
        kernels return the full ``log p(y_t | x)`` (the likelihood estimate uses it).
    log_transition(x_prev, x) -> broadcast shape
        ``log p(x | x_prev)`` over the broadcast of the leading axes of both arguments (for example
        ``x_prev[:, None, :, :]`` against ``x[:, :, None, :]`` gives ``(Bt, N, N)``). Needed by the
        PaRIS and O(N^2) smoothers; a kernel whose transition has no density (GARCH's deterministic
        variance) leaves it out.
    log_transition_bound() -> (Bt,)
        An upper bound on ``log_transition`` for each row (accept-reject backward draws in PaRIS).
    score_terms(x_prev, x, y_t) -> (..., dim)
        ``grad_theta log p(y_t, x | x_prev, theta)`` over the broadcast leading axes of the inputs;
        ``y_t`` is ``(Bt, obs_dim)`` and is broadcast against the particle axes.
    take_rows(idx) -> kernel
        The kernel of the rows ``idx`` (PaRIS's exact fallback draws use it).
    log_joint(x_prev, x, y_t) -> broadcast shape
        Optional: ``log p(y_t, x | x_prev)``, whose gradient ``score_terms`` is (tests check one
        against the other by finite differences).
    """

    xp: Any
    dtype: Any
    batch: int
    state_dim: int
    dim: int
    adapted: bool

    def sample_initial(self, rng: Any, n: int) -> Array: ...

    def propagate(self, rng: Any, x_prev: Array, y_t: Array) -> Array: ...

    def log_weight(self, x_prev: Array, x: Array, y_t: Array) -> Array: ...

    def score_terms(self, x_prev: Array, x: Array, y_t: Array) -> Array: ...


@runtime_checkable
class AdaptedKernel(ParticleKernel, Protocol):
    """A fully adapted kernel: also gives the predictive weight of each ancestor."""

    def ancestor_log_weight(self, x_prev: Array, y_t: Array) -> Array: ...


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


def _y_like(y_t: Array, ndim: int) -> Array:
    """Observations ``(Bt, obs_dim)`` shaped to broadcast against particles ``(Bt, ..., state_dim)``."""
    if ndim == 3:
        return y_t[:, None, :]
    xp = array_namespace(y_t)
    return xp.reshape(y_t, (y_t.shape[0],) + (1,) * (ndim - 2) + (y_t.shape[-1],))


def _stack_terms(xp: Any, parts: tuple) -> Array:
    """Concatenate per-coordinate score terms ``(..., 1)`` along the last axis after broadcasting."""
    nd = max(len(g.shape) for g in parts)
    shapes = [(1,) * (nd - len(g.shape)) + tuple(g.shape) for g in parts]
    shape = tuple(max(dims) for dims in zip(*shapes))
    return xp.concat([xp.broadcast_to(g, shape) for g in parts], axis=-1)


def _gather(xp: Any, a: Array, flat_idx: Array, shape: tuple) -> Array:
    """Rows of ``a`` (Bt, N, ...) picked by flat indices ``b * N + j``; result ``shape + a.shape[2:]``."""
    bt, n = a.shape[0], a.shape[1]
    rest = tuple(a.shape[2:])
    if rest == (1,):  # a 1-D gather is cheaper than a gather of rows of length 1
        out = xp.take(xp.reshape(a, (bt * n,)), xp.reshape(flat_idx, (-1,)))
        return xp.reshape(out, tuple(shape) + rest)
    flat = xp.reshape(a, (bt * n,) + rest)
    out = xp.take(flat, xp.reshape(flat_idx, (-1,)), axis=0)
    return xp.reshape(out, tuple(shape) + rest)


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


def _paris_update(xp, rng, kernel, x_prev, w_prev, tau_prev, x_new, y_t, c_t, row, n_back, rounds):
    """One PaRIS step: ``n_back`` backward draws per new particle, by accept-reject with exact fallback.

    Proposal ``J ~ W_{t-1}`` (inverse CDF on fresh uniforms), accepted with probability
    ``p(x_t^i | x_{t-1}^J) / bound``; the accepted index is an exact draw from the backward kernel
    ``W_{t-1}^j p(x_t^i | x_{t-1}^j) / Z_i``. Each round redraws only the draws still pending. Draws
    pending after ``rounds`` rounds are made exactly from the ``N`` backward probabilities of their
    particle (cost ``O(N)`` each), so the result never depends on the bound being tight.
    """
    bt, n = w_prev.shape
    nt = n_back
    dev = w_prev.device
    sd = x_new.shape[-1]
    total = bt * n * nt
    # All rows' normalised CDFs in one sorted array, row b shifted into [b, b + 1].
    c64 = xp.cumulative_sum(xp.astype(w_prev, xp.float64), axis=1)
    offset = xp.arange(bt, dtype=xp.float64, device=dev)[:, None]
    flat_cdf = xp.reshape(c64 / c64[:, -1:] + offset, (-1,))
    bound = kernel.log_transition_bound()
    x_prev_flat = xp.reshape(x_prev, (bt * n, sd))
    x_new_flat = xp.reshape(x_new, (bt * n, sd))
    pos = xp.arange(total, dtype=xp.int64, device=dev)
    # Round r proposes for the draws still pending (positions pos_r, sorted); accepted values and
    # the pending masks are kept and put together backwards at the end, without a scatter.
    history = []
    for _ in range(rounds):
        b_of = pos // (n * nt)
        u = rng.uniform((int(pos.shape[0]),), dtype=xp.float64)
        prop = xp.searchsorted(flat_cdf, u + xp.astype(b_of, xp.float64), side="right") - b_of * n
        prop = xp.clip(prop, 0, n - 1)
        sub = kernel.take_rows(b_of)
        xs = xp.take(x_prev_flat, b_of * n + prop, axis=0)
        xi = xp.take(x_new_flat, pos // nt, axis=0)
        logp = sub.log_transition(xs, xi) - xp.take(bound, b_of, axis=0)
        acc = xp.log(rng.uniform((int(pos.shape[0]),), dtype=logp.dtype)) < logp
        history.append((prop, acc))
        pos = pos[~acc]
        if pos.shape[0] == 0:
            break
    if pos.shape[0] > 0:
        b_of = pos // (n * nt)
        x_rows = xp.take(x_prev, b_of, axis=0)  # (P, N, sd)
        xi = xp.take(x_new_flat, pos // nt, axis=0)  # (P, sd)
        logits = kernel.take_rows(b_of).log_transition(x_rows, xi[:, None, :])  # (P, N)
        logits = logits + xp.take(_safe_log(xp, w_prev), b_of, axis=0)
        pw = xp.exp(logits - xp.max(logits, axis=1, keepdims=True))
        # Inverse CDF by counting: the draw is the number of cumulative weights below u * total.
        cdf = xp.cumulative_sum(pw, axis=1)
        u = rng.uniform((int(pos.shape[0]), 1), dtype=pw.dtype) * cdf[:, -1:]
        vals = xp.clip(xp.sum(xp.astype(cdf <= u, xp.int64), axis=1), 0, n - 1)
    else:
        vals = xp.zeros((0,), dtype=xp.int64, device=dev)
    for prop, acc in reversed(history):
        # Rejected slots of this round take, in order, the values of the next round.
        nxt = xp.cumulative_sum(xp.astype(~acc, xp.int64)) - 1
        if vals.shape[0] == 0:
            vals = prop
        else:
            vals = xp.where(acc, prop, xp.take(vals, xp.clip(nxt, 0, vals.shape[0] - 1)))
    j = vals
    j = xp.reshape(j, (bt, n, nt))
    xs = _gather(xp, x_prev, j + row[:, :, None], (bt, n, nt))
    h = kernel.score_terms(xs, x_new[:, :, None, :], y_t)  # (Bt, N, nt, dim)
    taus = _gather(xp, tau_prev, j + row[:, :, None], (bt, n, nt))
    return xp.mean(taus + c_t[..., None] * h, axis=2)


def _safe_log(xp: Any, w: Array) -> Array:
    """``log w`` with zero weights (underflowed exponentials) at the log of the smallest normal number."""
    return xp.log(w + xp.finfo(w.dtype).smallest_normal)


def _n2_update(xp, kernel, x_prev, w_prev, tau_prev, x_new, y_t, c_t):
    """One O(N^2) step: ``tau_i = sum_j B_ij (tau_j + c_t h(x_j, x_i))`` with the exact backward kernel."""
    xj = x_prev[:, None, :, :]  # (Bt, 1, N, sd)
    xi = x_new[:, :, None, :]  # (Bt, N, 1, sd)
    logits = kernel.log_transition(xj, xi) + _safe_log(xp, w_prev)[:, None, :]  # (Bt, N, N)
    b = xp.exp(logits - xp.max(logits, axis=2, keepdims=True))
    b = b / xp.sum(b, axis=2, keepdims=True)
    h = kernel.score_terms(xj, xi, y_t)  # (Bt, N, N, dim)
    return xp.sum(b[..., None] * (tau_prev[:, None, :, :] + c_t[..., None] * h), axis=2)


class KernelBase:
    """Shared plumbing of the kernels in :mod:`sgmc.ssm`: per-row parameters of shape ``(Bt,)``.

    Subclasses list their parameter names in ``_names`` and keep extra constructor options in
    ``_options``; :meth:`take_rows` gives the kernel of a subset of rows (used by PaRIS's exact
    fallback draws).
    """

    _names: tuple = ()
    adapted: bool = False
    state_dim: int = 1

    def _setup(self, params: dict, options: dict) -> None:
        first = next(iter(params.values()))
        xp = array_namespace(*params.values())
        self.xp = xp
        self.dtype = first.dtype
        self.device = first.device
        self._params = {k: xp.reshape(v, (-1,)) for k, v in params.items()}
        self._options = options
        self.batch = int(self._params[self._names[0]].shape[0])
        for k, v in self._params.items():
            if int(v.shape[0]) != self.batch:
                msg = f"kernel parameter `{k}` must have shape ({self.batch},) like `{self._names[0]}`; got {tuple(v.shape)}"
                raise ValueError(msg)

    def take_rows(self, idx: Array) -> "KernelBase":
        """The kernel of rows ``idx`` (an int64 array; rows may repeat)."""
        xp = self.xp
        params = {k: xp.take(v, idx, axis=0) for k, v in self._params.items()}
        return type(self)(**params, **self._options)

    def p(self, name: str, ndim: int) -> Array:
        """Parameter ``name`` shaped to broadcast against an array with ``ndim`` axes (cached)."""
        key = (name, ndim)
        cache = self.__dict__.setdefault("_shaped", {})
        hit = cache.get(key)
        if hit is None:
            v = self._params[name]
            hit = cache[key] = self.xp.reshape(v, (v.shape[0],) + (1,) * (ndim - 1))
        return hit

    def _normal(self, rng: Any, shape: tuple) -> Array:
        return rng.normal(shape, dtype=self.dtype)


_LOG_2PI = math.log(2.0 * math.pi)


class ScalarLGSSMKernel(KernelBase):
    """Particle kernel of the scalar linear Gaussian model ``x_t = phi x_{t-1} + sigma e_t``, ``y_t = x_t + tau d_t``.

    Score terms are in the coordinates of :class:`sgmc.ssm.LGSSM` for ``n = m = 1``:
    ``theta = (phi, psi_sigma, psi_tau)`` with ``psi_sigma = 1 / sigma`` and ``psi_tau = 1 / tau``
    (thesis Eq. 3.90). ``sigma`` and ``tau`` may be negative: they carry the sign of ``psi``, which
    the likelihood ignores but the score in ``psi`` does not.

    Parameters
    ----------
    phi, sigma, tau : arrays (Bt,)
    proposal : {"bootstrap", "optimal"}
        ``"bootstrap"`` moves particles with the transition and weights them by ``p(y_t | x_t)``;
        ``"optimal"`` is the fully adapted kernel of thesis Eqs. 3.83-3.84: ancestors weighted by
        ``N(y_t | phi x_{t-1}, sigma^2 + tau^2)``, moves from ``p(x_t | x_{t-1}, y_t)``.
    init_var : array (Bt,), optional
        Variance of ``x_0`` (mean 0); default the stationary ``sigma^2 / (1 - phi^2)``.

    Examples
    --------
    >>> import numpy as np
    >>> k = ScalarLGSSMKernel(np.array([0.9, 0.5]), np.array([0.5, 1.0]), np.array([1.0, 1.0]))
    >>> k.batch, k.dim, k.adapted
    (2, 3, False)
    """

    _names = ("phi", "sigma", "tau")
    dim = 3

    def __init__(self, phi: Array, sigma: Array, tau: Array, proposal: str = "bootstrap", init_var: Array | None = None):
        check_choice(proposal, "proposal", ("bootstrap", "optimal"))
        params = {"phi": phi, "sigma": sigma, "tau": tau}
        if init_var is not None:
            params["init_var"] = init_var
        self._setup(params, {"proposal": proposal})
        self.adapted = proposal == "optimal"
        xp = self.xp
        s2 = self._params["sigma"] ** 2
        self._params["q"] = s2
        self._params["r"] = self._params["tau"] ** 2
        if init_var is None:
            self._params["v0"] = s2 / (1.0 - self._params["phi"] ** 2)
        else:
            self._params["v0"] = self._params.pop("init_var")
        del xp

    def take_rows(self, idx: Array) -> "ScalarLGSSMKernel":
        xp = self.xp
        take = lambda k: xp.take(self._params[k], idx, axis=0)  # noqa: E731
        return ScalarLGSSMKernel(take("phi"), take("sigma"), take("tau"), init_var=take("v0"), **self._options)

    def sample_initial(self, rng: Any, n: int) -> Array:
        xp = self.xp
        return self._normal(rng, (self.batch, n, 1)) * xp.sqrt(self.p("v0", 3))

    def propagate(self, rng: Any, x_prev: Array, y_t: Array) -> Array:
        nd = x_prev.ndim
        phi, q, r = self.p("phi", nd), self.p("q", nd), self.p("r", nd)
        eps = self._normal(rng, tuple(x_prev.shape))
        if not self.adapted:
            return phi * x_prev + self.xp.sqrt(q) * eps
        y = _y_like(y_t, nd)
        mean = (r * phi * x_prev + q * y) / (q + r)
        return mean + self.xp.sqrt(q * r / (q + r)) * eps

    def ancestor_log_weight(self, x_prev: Array, y_t: Array) -> Array:
        nd = x_prev.ndim
        phi, v = self.p("phi", nd), self.p("q", nd) + self.p("r", nd)
        d = _y_like(y_t, nd) - phi * x_prev
        return (-0.5 * (_LOG_2PI + self.xp.log(v)) - 0.5 * d * d / v)[..., 0]

    def log_weight(self, x_prev: Array, x: Array, y_t: Array) -> Array:
        nd = x.ndim
        if self.adapted:
            return self.xp.zeros(tuple(x.shape[:-1]), dtype=x.dtype, device=x.device)
        r = self.p("r", nd)
        d = _y_like(y_t, nd) - x
        return (-0.5 * (_LOG_2PI + self.xp.log(r)) - 0.5 * d * d / r)[..., 0]

    def log_transition(self, x_prev: Array, x: Array) -> Array:
        nd = max(x_prev.ndim, x.ndim)
        phi, q = self.p("phi", nd), self.p("q", nd)
        d = x - phi * x_prev
        return (-0.5 * (_LOG_2PI + self.xp.log(q)) - 0.5 * d * d / q)[..., 0]

    def log_transition_bound(self) -> Array:
        return -0.5 * (_LOG_2PI + self.xp.log(self._params["q"]))

    def log_joint(self, x_prev: Array, x: Array, y_t: Array) -> Array:
        """``log p(y_t, x_t | x_{t-1})``."""
        nd = max(x_prev.ndim, x.ndim)
        r = self.p("r", nd)
        e = _y_like(y_t, nd) - x
        return self.log_transition(x_prev, x) + (-0.5 * (_LOG_2PI + self.xp.log(r)) - 0.5 * e * e / r)[..., 0]

    def score_terms(self, x_prev: Array, x: Array, y_t: Array) -> Array:
        xp = self.xp
        nd = max(x_prev.ndim, x.ndim)
        phi, s, tau = self.p("phi", nd), self.p("sigma", nd), self.p("tau", nd)
        q, r = self.p("q", nd), self.p("r", nd)
        d = x - phi * x_prev
        e = _y_like(y_t, nd) - x
        g_phi = d * x_prev / q
        g_ps = (q - d * d) / s
        g_pt = (r - e * e) / tau
        return _stack_terms(xp, (g_phi, g_ps, g_pt))


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
