"""Preferential subsampling and adaptive subsample sizes: SGLD-PS, SGLD-CV-PS, ASGLD-CV(-PS).

Putcha, Nemeth and Fearnhead (2023), "Preferential subsampling for stochastic gradient Langevin
dynamics" (AISTATS), and chapter 4 of Putcha's thesis (2024). Indices are drawn i.i.d. from weights
p_1..p_N (with replacement) and each term is reweighted by 1/(n p_i), so the estimate stays unbiased
(thesis eq. 4.3.3, 4.3.7):

    SGLD-PS:     g = grad log p(theta) + (1/n) sum_{j=1}^n (1/p_{i_j}) grad log f_{i_j}(theta)
    SGLD-CV-PS:  g = grad log p(theta) + sum_i grad log f_i(theta_hat)
                     + (1/n) sum_j (1/p_{i_j}) [grad log f_{i_j}(theta) - grad log f_{i_j}(theta_hat)]

Weights (the "pseudo-variance" E||g - grad log pi||^2 is minimised by Cauchy-Schwarz):

* SGLD-PS exact (Lemma 4.3.1): p_i proportional to ||grad log f_i(theta)|| at the current theta, an
  O(N) pass per step and chain (offered for studies; it costs as much as the full gradient).
* SGLD-PS approximate (eq. 4.3.6): the same at the mode theta_hat, computed once.
* SGLD-CV-PS exact (Lemma 4.3.2): p_i proportional to ||grad log f_i(theta) - grad log f_i(theta_hat)||.
* SGLD-CV-PS approximate (eq. 4.3.11, section 4.7.4, appendix B.3): with Sigma the Laplace covariance at
  the mode (the inverse of the negative Hessian of log pi, prior included) and H_i the per-datum
  Hessian there, p_i proportional to sqrt(tr(H_i Sigma H_i^T)); O(N d^3) once.
* ``"lipschitz"``: p_i proportional to the per-datum Lipschitz constant L_i, the minimiser of the
  bound of Lemma 4.3.3 (no Hessians needed).

Static weights are drawn from an alias table (Walker 1977; Vose 1991) built once in O(N): a draw is one
uniform number and one row of a (N, 4) table, so a minibatch of n indices costs O(n) whatever N is.
Each chain draws its own indices.

Adaptive subsample size (thesis section 4.3.3, Algorithm 5): by Lemma 4.3.3 the pseudo-variance of the
CV(-PS) estimator is at most (1/n) ||theta - theta_hat||^2 sum_i L_i^2 / p_i; asking for at most V_0
gives the smallest n_t > ||theta_t - theta_hat||^2 sum_i L_i^2 / (p_i V_0) (eq. 4.3.14), chosen afresh at
every iteration and for every chain. V_0 is calibrated by default as in section 4.5.3
(:mod:`.v0`): fixed-n pilot chains of SGLD-CV (or SGLD-CV-PS) at n, the 95th percentile q_95 of
||theta - theta_hat||^2 along each, and V_0 the largest (1/n) q_95 sum_i L_i^2 / p_i over the chains.
"""

from __future__ import annotations

from typing import Any

from .. import backends
from .._array_api import Array, device_of, is_array
from .._sampling import categorical
from .._validation import check_batch_size, check_choice, check_int, check_positive
from ..models.base import check_compatible, require, take_rows
from ..optimize import _can_polish, find_mode, mode_gap_cost, negative_hessian, newton, warn_if_not_mode
from .base import EstimateInfo, Estimator, Prepared, _check_subsampling, diff_sum
from .control_variates import ControlVariateState
from .v0 import bound_sum, calibrate_v0, default_pilot_step, laplace_v0

__all__ = [
    "alias_table",
    "alias_draw",
    "ps_weights",
    "cv_ps_weights",
    "PreferentialSubsampling",
    "ControlVariatePS",
    "AdaptiveControlVariate",
    "calibrate_v0",
]

#: Relative floor of the weights: p_i >= WEIGHT_FLOOR * max(p) (zero weights would break unbiasedness).
WEIGHT_FLOOR = 1e-12

#: Data rows per block when an O(N) pass materialises per-datum gradients or Hessians.
_BLOCK_ELEMENTS = 2**20


# -- alias tables ---------------------------------------------------------------------------------
def alias_table(weights: Array) -> Array:
    """Walker's alias table for drawing index i with probability ``weights[i] / sum(weights)``.

    Built in the weights' namespace and on their device, in float64, by a vectorised form of the
    sweeping construction (Vose 1991; Huebschle-Schneider and Sanders 2019): with q_i = N p_i, the
    "small" entries (q_i < 1) in index order need deficits 1 - q_i and the "large" ones surpluses
    q_j - 1. Lay both out as cumulative sums; small i takes its deficit from the large j whose surplus
    interval contains the start of its deficit interval, and a large that gives more than its surplus
    becomes small itself, its remainder topped up by the next large. Cumulative sums and sorted
    searches do it in O(N log N) without a Python loop. Row i holds
    ``(threshold_i, alias_i, 1/p_i, 1/p_{alias_i})``, so one gathered row gives both the draw and its
    reweighting factor.

    Parameters
    ----------
    weights : array (N,)
        Non-negative, finite, not all zero.

    Returns
    -------
    float64 array (N, 4)

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.estimators import alias_table, alias_draw
    >>> from sgmc.backends import default_rng
    >>> table = alias_table(np.array([1.0, 2.0, 7.0]))
    >>> idx, inv_p = alias_draw(default_rng(0), table, (1, 100_000))
    >>> np.round(np.bincount(idx[0], minlength=3) / 100_000, 2)
    array([0.1, 0.2, 0.7])
    """
    if not is_array(weights):
        weights = backends.asarray(weights, backend="numpy")
    xp = backends.get_backend(weights).xp
    dev = device_of(weights)
    w = xp.astype(weights, xp.float64)
    n = int(w.shape[0]) if w.ndim == 1 else 0
    if n == 0 or not bool(xp.all(xp.isfinite(w))) or bool(xp.any(w < 0)) or not bool(xp.any(w > 0)):
        msg = "`weights` must be a non-empty 1-D array of finite, non-negative numbers with a positive sum"
        raise ValueError(msg)
    p = w / xp.sum(w)
    q = p * n
    # the largest entry is always "large" (rounding can push every q_i just below 1)
    top = xp.argmax(q)
    small = (q < 1.0) & (xp.arange(n, dtype=xp.int64, device=dev) != xp.astype(top, xp.int64))
    n_small = int(xp.sum(xp.astype(small, xp.int64)))
    order = xp.argsort(xp.astype(~small, xp.int8), stable=True)      # smalls, then larges, in index order
    S, L = order[:n_small], order[n_small:]
    n_large = n - n_small
    zero = xp.zeros((1,), dtype=xp.float64, device=dev)
    D = xp.concat([zero, xp.cumulative_sum(1.0 - xp.take(q, S))])   # deficit boundaries (n_small + 1,)
    E = xp.concat([zero, xp.cumulative_sum(xp.take(q, L) - 1.0)])   # surplus boundaries (n_large + 1,)
    last = xp.asarray(n_large - 1, dtype=xp.int64, device=dev)
    # smalls: the large whose surplus interval holds the start of the deficit interval
    j = xp.astype(xp.searchsorted(E, D[:-1], side="right"), xp.int64) - 1
    j = xp.minimum(xp.maximum(j, xp.zeros_like(j)), last)
    thr_s = xp.take(q, S)
    alias_s = xp.take(L, j)
    # larges: what is left after the smalls that start in its interval (and the previous large's overflow)
    nxt = E[1:]
    pos = xp.astype(xp.searchsorted(D, nxt, side="left"), xp.int64)
    pos = xp.minimum(pos, xp.asarray(n_small, dtype=xp.int64, device=dev))
    covered = xp.take(D, pos)
    thr_l = xp.minimum(1.0 + nxt - covered, xp.ones_like(nxt))
    k = xp.arange(n_large, dtype=xp.int64, device=dev)
    alias_l = xp.take(L, xp.minimum(k + 1, last))
    is_last = k == last
    thr_l = xp.where(is_last, xp.ones_like(thr_l), thr_l)
    # back to index order through the inverse permutation
    inv = xp.argsort(order)
    thresh = xp.take(xp.concat([thr_s, thr_l]), inv)
    alias = xp.take(xp.concat([alias_s, alias_l]), inv)
    pos_p = p > 0
    smallest = xp.min(xp.where(pos_p, p, xp.ones_like(p)))
    inv_p = 1.0 / xp.where(pos_p, p, smallest)
    return xp.stack([thresh, xp.astype(alias, xp.float64), inv_p, xp.take(inv_p, alias)], axis=1)


def alias_draw(rng: Any, table: Array, shape: tuple[int, int]) -> tuple[Array, Array]:
    """Draw indices from an :func:`alias_table`: int64 ``shape`` and their ``1/p_i`` (float64).

    One uniform number per draw: ``u * N`` gives the column ``k`` (integer part) and the coin (the
    fractional part); the draw is ``k`` if the coin falls below ``threshold_k``, else ``alias_k``.
    """
    xp = rng.backend.xp
    n = table.shape[0]
    u = rng.uniform(shape, dtype=xp.float64) * n
    # u >= 0, so the cast truncates to the integer part; the minimum guards u * n rounding up to n
    k = xp.minimum(xp.astype(u, xp.int64), xp.asarray(n - 1, dtype=xp.int64, device=table.device))
    rows = take_rows(xp, table, k)
    keep = (u - xp.astype(k, xp.float64)) < rows[..., 0]
    idx = xp.where(keep, k, xp.astype(rows[..., 1], xp.int64))
    inv_p = xp.where(keep, rows[..., 2], rows[..., 3])
    return idx, inv_p


def _normalise(xp: Any, w: Array, floor: float) -> Array:
    """Weights to probabilities, each at least ``floor`` times the largest; uniform if all vanish."""
    top = xp.max(w, axis=-1, keepdims=True)
    w = xp.where(top > 0, xp.maximum(w, floor * top), xp.ones_like(w))
    return w / xp.sum(w, axis=-1, keepdims=True)


# -- weights --------------------------------------------------------------------------------------
def _blocks(model: Any, rows_per: int):
    xp = model.xp
    step = max(1, _BLOCK_ELEMENTS // max(rows_per, 1))
    for start in range(0, model.n_data, step):
        stop = min(start + step, model.n_data)
        yield xp.arange(start, stop, dtype=xp.int64, device=model.device)


def _grad_norms(model: Any, theta: Array, centre: Array | None = None) -> Array:
    """``||grad log f_i(theta) - grad log f_i(centre)||`` (centre optional) for all i: (chains, N)."""
    xp = model.xp
    require(model, ("grad_log_lik",), "per-datum gradient norms (preferential weights)")
    chains = theta.shape[0]
    parts = []
    for ids in _blocks(model, chains * model.dim):
        idx = xp.broadcast_to(ids[None, :], (chains, ids.shape[0]))
        g = model.grad_log_lik(theta, idx)
        if centre is not None:
            g = g - model.grad_log_lik(centre, idx)
        parts.append(xp.sqrt(xp.sum(g * g, axis=-1)))
    return xp.concat(parts, axis=-1)


def ps_weights(model: Any, theta: Array, *, floor: float = WEIGHT_FLOOR) -> Array:
    """SGLD-PS optimal weights at ``theta`` (chains, dim): p_i proportional to ||grad log f_i(theta)||.

    Thesis Lemma 4.3.1; at the mode these are the approximate weights of eq. 4.3.6. Shape (chains, N).

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.models import LinearRegression
    >>> from sgmc.estimators import ps_weights
    >>> X = np.array([[1.0], [2.0]]); model = LinearRegression(X, np.array([0.0, 0.0]))
    >>> ps_weights(model, np.array([[1.0]]))      # |r_i| |x_i| = 1 and 4
    array([[0.2, 0.8]])
    """
    return _normalise(model.xp, _grad_norms(model, theta), floor)


def cv_ps_weights(model: Any, centre: Array, *, covariance: Array | None = None, floor: float = WEIGHT_FLOOR) -> Array:
    """SGLD-CV-PS approximate weights (thesis eq. 4.3.11): p_i proportional to sqrt(tr(H_i Sigma H_i^T)).

    H_i is the per-datum Hessian of the log-likelihood at ``centre`` (dim,) (``model.hess_log_lik``)
    and Sigma the Laplace covariance there (the inverse of :func:`sgmc.optimize.negative_hessian`, or
    ``covariance``). O(N d^3) once; the thesis advises against d above about 60. Shape (N,).
    """
    xp = model.xp
    require(model, ("hess_log_lik",), "SGLD-CV-PS approximate weights (weights='approx')")
    c = xp.reshape(centre, (1, -1))
    if covariance is None:
        covariance = xp.linalg.inv(negative_hessian(model, c))
    d = model.dim
    parts = []
    for ids in _blocks(model, d * d):
        H = model.hess_log_lik(c, ids[None, :])[0, ...]            # (b, d, d)
        HS = H @ covariance
        t = xp.sum(HS * H, axis=(-2, -1))
        parts.append(xp.sqrt(xp.maximum(t, xp.zeros_like(t))))
    return _normalise(xp, xp.concat(parts, axis=0), floor)


def _static_weights(model: Any, kind: Any, centre: Array | None, floor: float, for_cv: bool) -> Array | None:
    """(N,) probabilities for ``kind`` in {"uniform", "approx", "lipschitz", array}; None for "exact"."""
    xp = model.xp
    if not isinstance(kind, str):
        w = kind if is_array(kind) else xp.asarray(kind, dtype=model.dtype, device=model.device)
        check_compatible(model, w, "weights")
        if tuple(w.shape) != (model.n_data,) or not bool(xp.all(xp.isfinite(w))) or not bool(xp.all(w >= 0)) \
                or not bool(xp.any(w > 0)):
            msg = (f"`weights` as an array must have shape ({model.n_data},) with finite, non-negative entries "
                   f"and a positive sum; got shape {tuple(w.shape)}")
            raise ValueError(msg)
        return _normalise(xp, xp.astype(w, model.dtype), floor)
    if kind == "uniform":
        return xp.full((model.n_data,), 1.0 / model.n_data, dtype=model.dtype, device=model.device)
    if kind == "lipschitz":
        require(model, ("lipschitz",), "weights='lipschitz'")
        return _normalise(xp, model.lipschitz(), floor)
    if kind == "approx":
        if centre is None:
            return None
        if for_cv:
            return cv_ps_weights(model, centre, floor=floor)
        return ps_weights(model, xp.reshape(centre, (1, -1)), floor=floor)[0, :]
    return None  # exact: per step


def _check_centre(model: Any, centre: Any) -> Array | None:
    if centre is None:
        return None
    xp = model.xp
    if not is_array(centre):
        centre = xp.asarray(centre, dtype=model.dtype, device=model.device)
    check_compatible(model, centre, "centre")
    centre = xp.reshape(centre, (-1,))
    if centre.shape[0] != model.dim or not bool(xp.all(xp.isfinite(centre))):
        msg = f"`centre` must be a finite array of shape ({model.dim},); got {tuple(centre.shape)}"
        raise ValueError(msg)
    return centre


class _Preferential(Estimator):
    """Shared set-up: batch size, the weights, the alias table, the mode search."""

    _weight_kinds: tuple = ("approx", "exact", "uniform", "lipschitz")
    _for_cv = False

    def __init__(self, model, batch_size, weights="approx", centre=None, *, optimizer="adam", opt_steps=2000,
                 opt_step_size=None, opt_batch_size=None, floor=WEIGHT_FLOOR):
        super().__init__(model)
        _check_subsampling(model, f"the {self.name} estimator")
        self.batch_size = check_batch_size(batch_size, model.n_data)
        if isinstance(weights, str):
            weights = check_choice(weights, "weights", self._weight_kinds)
        self.weights = weights
        self.floor = check_positive(floor, "floor")
        self.optimizer = check_choice(optimizer, "optimizer", ("adam", "sgd"))
        self.opt_steps = check_int(opt_steps, "opt_steps")
        self.opt_step_size = opt_step_size
        self.opt_batch_size = check_batch_size(
            opt_batch_size if opt_batch_size is not None else self.batch_size, model.n_data, "opt_batch_size")
        self.centre = _check_centre(model, centre)
        if self._for_cv and weights == "approx" and self.centre is None:
            require(model, ("hess_log_lik",), "SGLD-CV-PS approximate weights (weights='approx')")
        if not self._for_cv and weights in ("approx", "exact"):
            require(model, ("grad_log_lik",), f"SGLD-PS weights={weights!r} (per-datum gradient norms)")
        if self._for_cv and weights == "exact":
            require(model, ("grad_log_lik",), "SGLD-CV-PS weights='exact' (per-datum gradient norms)")
        self.probs = _static_weights(model, weights, self.centre, self.floor, self._for_cv)
        self.table = None if self.probs is None else alias_table(self.probs)
        self.exact = weights == "exact"

    def _options(self) -> dict:
        return dict(optimizer=self.optimizer, opt_steps=self.opt_steps, opt_step_size=self.opt_step_size,
                    opt_batch_size=self.opt_batch_size, floor=self.floor)

    def with_centre(self, centre: Array):
        """A copy of this estimator at ``centre`` (dim,), its weights computed there."""
        return type(self)(self.model, self.batch_size, self.weights, centre, **self._options())

    def prepare(self, rng: Any, position: Array) -> Prepared:
        """Find the mode from the first chain's position (unless a centre was given); weights there; start there."""
        est, cost = self, 0.0
        if self.centre is None:
            m = self.model
            mode = find_mode(m, rng, position[0, :], method=self.optimizer, n_steps=self.opt_steps,
                             step_size=self.opt_step_size, batch_size=self.opt_batch_size, polish=False, check=False)
            cost = float(self.opt_steps * self.opt_batch_size)
            how = f"{self.optimizer}, {self.opt_steps} steps"
            if _can_polish(m):  # Newton steps and the mode check, as find_mode does, with their passes counted
                passes: list = []
                polished, steps = newton(m, mode, passes=passes)
                if bool(m.xp.all(m.xp.isfinite(polished))):
                    mode = polished
                cost += float(passes[0]) * m.n_data
                how += " and Newton"
            warn_if_not_mode(m, mode, 1.0, how)
            cost += mode_gap_cost(m) * m.n_data
            est = self.with_centre(mode)
            if self.weights == "approx":
                cost += float(self.model.n_data)
        start = self.model.xp.broadcast_to(est.centre, tuple(position.shape))
        return Prepared(est, start, cost)

    def _draw(self, rng: Any, chains: int, n: int) -> tuple[Array, Array]:
        """Static weights: (chains, n) indices and 1/p_i in the model dtype."""
        idx, inv_p = alias_draw(rng, self.table, (chains, n))
        return idx, self.model.xp.astype(inv_p, self.model.dtype)

    def _draw_rows(self, rng: Any, norms: Array, n: int) -> tuple[Array, Array]:
        """Per-chain weights from norms (chains, N): inverse-CDF draws and 1/p_i."""
        xp = self.model.xp
        p = _normalise(xp, norms, self.floor)
        cdf = xp.cumulative_sum(p, axis=1)
        u = rng.uniform((p.shape[0], n), dtype=p.dtype)
        idx = categorical(u, cdf)
        return idx, 1.0 / xp.take_along_axis(p, idx, axis=1)

    def __repr__(self) -> str:
        w = self.weights if isinstance(self.weights, str) else "array"
        return f"{type(self).__name__}(model={self.model!r}, batch_size={self.batch_size}, weights={w!r})"


class PreferentialSubsampling(_Preferential):
    """SGLD-PS's gradient estimator (thesis Algorithm 8, eq. 4.3.3): preferential, reweighted minibatches.

    Parameters
    ----------
    model : Model
    batch_size : int or float
        n draws per iteration, i.i.d. from the weights (with replacement, duplicates counted).
    weights : {"approx", "exact", "uniform", "lipschitz"} or array (N,), default "approx"
        ``"approx"``: p_i proportional to ||grad log f_i(theta_hat)|| at the mode, computed once
        (eq. 4.3.6). ``"exact"``: the same at each chain's current theta, an O(N) pass per call (as
        costly as the full gradient; for studies). ``"uniform"``: SGLD with replacement. An array:
        user weights (normalised).
    centre : array (dim,), optional
        theta_hat; found by :meth:`prepare` with :func:`sgmc.optimize.find_mode` when omitted.
    optimizer, opt_steps, opt_step_size, opt_batch_size
        Settings of the mode search (as for :class:`ControlVariate`).
    floor : float, default 1e-12
        Weights are at least ``floor`` times the largest.

    Notes
    -----
    Costs n per-datum gradients per call (N + n with exact weights), plus O(N) once for the weights and
    an alias table; each chain draws its own indices in O(n). Chains start at the mode.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.backends import default_rng
    >>> from sgmc.models import LogisticRegression
    >>> from sgmc.estimators import PreferentialSubsampling
    >>> r = np.random.default_rng(0)
    >>> X = r.normal(size=(2000, 3)); y = (r.random(2000) < 0.05).astype(float)
    >>> est = PreferentialSubsampling(LogisticRegression(X, y), 20).prepare(default_rng(0), np.zeros((1, 3))).estimator
    >>> grad, _, info = est.estimate(default_rng(1), est.init(None, None), np.zeros((4, 3)))
    >>> grad.shape, info.n_evals
    ((4, 3), 20)
    """

    name = "ps"

    def __init__(self, model: Any, batch_size: Any, weights: Any = "approx", centre: Array | None = None, **options):
        super().__init__(model, batch_size, weights, centre, **options)
        self._info = EstimateInfo(self.batch_size, self.batch_size)
        self._exact_info = EstimateInfo(model.n_data + self.batch_size, self.batch_size)

    def estimate(self, rng, est_state, position):
        m = self.model
        n = self.batch_size
        if self.exact:
            idx, inv_p = self._draw_rows(rng, _grad_norms(m, position), n)
            info = self._exact_info
        else:
            if self.table is None:
                msg = ("PreferentialSubsampling(weights='approx') has no weights yet: pass `centre=`, or call "
                       "estimator.prepare(rng, position) (sgmc.sample does)")
                raise ValueError(msg)
            idx, inv_p = self._draw(rng, position.shape[0], n)
            info = self._info
        g = m.grad_log_prior(position) + m.grad_log_lik_sum(position, idx, inv_p / n)
        return g, est_state, info


class ControlVariatePS(_Preferential):
    """SGLD-CV-PS's estimator (thesis Algorithm 9, eq. 4.3.7): control variates with preferential weights.

    Parameters
    ----------
    model : Model
    batch_size : int or float
    weights : {"approx", "exact", "uniform", "lipschitz"} or array (N,), default "approx"
        ``"approx"`` (eq. 4.3.11): p_i proportional to sqrt(tr(H_i Sigma H_i^T)) with per-datum
        Hessians H_i (``model.hess_log_lik``) and the Laplace covariance Sigma at the mode, O(N d^3)
        once. ``"exact"`` (Lemma 4.3.2): p_i proportional to ||grad log f_i(theta) - grad log f_i(theta_hat)||,
        O(N) per call (uniform where that vanishes). ``"lipschitz"``: p_i proportional to
        ``model.lipschitz()``. ``"uniform"``: SGLD-CV with replacement.
    centre, optimizer, opt_steps, opt_step_size, opt_batch_size, floor
        As for :class:`PreferentialSubsampling`.

    Notes
    -----
    The minibatch rows are gathered once for both points (``model.grad_log_lik_diff_sum``). Costs 2n
    per-datum gradients per call (plus 2N with exact weights) and one full pass at the centre in
    ``init``.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.backends import default_rng
    >>> from sgmc.models import LogisticRegression
    >>> from sgmc.estimators import ControlVariatePS
    >>> r = np.random.default_rng(0)
    >>> X = r.normal(size=(2000, 3)); y = (r.random(2000) < 0.05).astype(float)
    >>> est = ControlVariatePS(LogisticRegression(X, y), 20).prepare(default_rng(0), np.zeros((1, 3))).estimator
    >>> x = np.zeros((4, 3)); state = est.init(None, x)
    >>> grad, state, info = est.estimate(default_rng(1), state, x)
    >>> grad.shape, info.n_evals
    ((4, 3), 40)
    """

    name = "cv-ps"
    _for_cv = True

    def __init__(self, model: Any, batch_size: Any, weights: Any = "approx", centre: Array | None = None, **options):
        super().__init__(model, batch_size, weights, centre, **options)
        self.init_cost = float(model.n_data)
        self._info = EstimateInfo(2 * self.batch_size, self.batch_size)
        self._exact_info = EstimateInfo(2 * model.n_data + 2 * self.batch_size, self.batch_size)

    def init(self, rng: Any, position: Array) -> ControlVariateState:
        """The full-data likelihood gradient at the centre (one O(N) pass)."""
        if self.centre is None or (self.table is None and not self.exact):
            msg = (f"{type(self).__name__} has no centre: pass `centre=`, or call estimator.prepare(rng, position) "
                   "(sgmc.sample does) or sgmc.optimize.find_mode first")
            raise ValueError(msg)
        xp = self.model.xp
        return ControlVariateState(self.centre, self.model.grad_log_lik_sum(xp.reshape(self.centre, (1, -1))))

    def estimate(self, rng, est_state, position):
        m = self.model
        xp = m.xp
        n = self.batch_size
        centre = xp.broadcast_to(est_state.centre, tuple(position.shape))
        if self.exact:
            idx, inv_p = self._draw_rows(rng, _grad_norms(m, position, centre), n)
            info = self._exact_info
        else:
            idx, inv_p = self._draw(rng, position.shape[0], n)
            info = self._info
        diff = diff_sum(m, position, centre, idx, inv_p / n)
        g = m.grad_log_prior(position) + est_state.centre_grad + diff
        return g, est_state, info


# -- adaptive subsample size ----------------------------------------------------------------------
#: How :meth:`AdaptiveControlVariate.prepare` calibrates V_0 when no number is given.
V0_RULES = ("pilot", "laplace")


class AdaptiveControlVariate(ControlVariatePS):
    """ASGLD-CV and ASGLD-CV-PS (thesis Algorithm 5): control variates with a subsample size per iteration.

    At each call and for each chain, n_t is the smallest integer above
    ``||theta_t - theta_hat||^2 sum_i L_i^2 / (p_i V_0)`` (eq. 4.3.14), clipped to
    ``[1, max_batch_size]``; the n_t indices are drawn from the weights and the estimate is the CV(-PS)
    one (eq. 4.3.7).

    Parameters
    ----------
    model : Model
        Needs per-datum Lipschitz constants ``model.lipschitz()`` (and ``hess_log_lik`` for
        ``weights="approx"``).
    batch_size : int or float
        The fixed n of the calibration (the thesis: 0.1% of N).
    weights : {"uniform", "approx", "lipschitz"} or array (N,), default "uniform"
        ``"uniform"`` is ASGLD-CV, ``"approx"`` ASGLD-CV-PS (the CV-PS approximate weights).
    v0 : float, optional
        The pseudo-variance bound V_0; when omitted, :meth:`prepare` calibrates it by ``v0_rule``.
    v0_rule : {"pilot", "laplace"}, default "pilot"
        How :meth:`prepare` calibrates V_0 (:mod:`sgmc.estimators.v0`). ``"pilot"``, the thesis's rule
        (section 4.5.3, :func:`calibrate_v0`): ``pilot_chains`` fixed-n SGLD-CV(-PS) chains of ``pilot_iter`` iterations from the mode, the ``quantile`` of
        ||theta - theta_hat||^2 along each, V_0 the largest (1/n) q sum_i L_i^2 / p_i.
        ``"laplace"`` (:func:`laplace_v0`): the same bound with one quantile over
        ``pilot_chains * pilot_iter`` draws of the Laplace approximation N(theta_hat, Sigma), no chains run.
    pilot_step_size : float, optional
        h of the pilot chains. Default: 0.5 / lambda_max, with lambda_max the largest eigenvalue of the
        negative Hessian of log pi at the mode (SGLD-CV's default step in ``sgmc run``); the thesis runs
        its pilots at the sampling run's own step, so pass that step to follow it exactly.
    pilot_chains, pilot_iter : int, default 10 and 1000
    quantile : float, default 0.95
    max_batch_size : int, optional
        Upper limit of n_t (default N).
    centre, optimizer, opt_steps, opt_step_size, opt_batch_size, floor
        As for :class:`ControlVariatePS`.

    Notes
    -----
    ``EstimateInfo.batch_size`` is the per-chain n_t and ``n_evals`` is 2 n_t, so the trace's
    ``batch_size`` and ``data_passes`` record what each chain used. The chains of a group are one array:
    every chain draws max_c n_t indices and the draws past its own n_t get weight zero, so the
    arithmetic per call follows the largest n_t of the group (the reported counts are each chain's own).

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.backends import default_rng
    >>> from sgmc.models import LogisticRegression
    >>> from sgmc.estimators import AdaptiveControlVariate
    >>> r = np.random.default_rng(0)
    >>> X = r.normal(size=(2000, 3)); y = (r.random(2000) < 0.5).astype(float)
    >>> est = AdaptiveControlVariate(LogisticRegression(X, y), 10).prepare(default_rng(0), np.zeros((1, 3))).estimator
    >>> far = est.centre + np.array([[0.0, 0.0, 0.0], [0.5, 0.0, 0.0]])
    >>> _, _, info = est.estimate(default_rng(1), est.init(None, far), far)
    >>> info.batch_size.tolist()
    [1, 121]
    """

    name = "adaptive-cv"

    def __init__(self, model: Any, batch_size: Any, weights: Any = "uniform", centre: Array | None = None, *,
                 v0: float | None = None, v0_rule: str = "pilot", pilot_step_size: float | None = None,
                 pilot_chains: int = 10, pilot_iter: int = 1000, quantile: float = 0.95,
                 max_batch_size: int | None = None, **options):
        if isinstance(weights, str) and weights == "exact":
            msg = "AdaptiveControlVariate needs static weights: 'uniform', 'approx', 'lipschitz' or an array; got 'exact'"
            raise ValueError(msg)
        require(model, ("lipschitz",), "the adaptive subsample size (per-datum Lipschitz constants)")
        super().__init__(model, batch_size, weights, centre, **options)
        self.v0 = None if v0 is None else check_positive(v0, "v0")
        self.v0_rule = check_choice(v0_rule, "v0_rule", V0_RULES)
        self.pilot_step_size = None if pilot_step_size is None else check_positive(pilot_step_size, "pilot_step_size")
        self.pilot_chains = check_int(pilot_chains, "pilot_chains")
        self.pilot_iter = check_int(pilot_iter, "pilot_iter")
        self.quantile = float(quantile)
        if not 0.0 < self.quantile < 1.0:
            msg = f"`quantile` must be in (0, 1); got {quantile!r}"
            raise ValueError(msg)
        self.max_batch_size = model.n_data if max_batch_size is None else check_batch_size(
            max_batch_size, model.n_data, "max_batch_size")
        # c = sum_i L_i^2 / p_i / V_0: n_t = floor(c ||theta - theta_hat||^2) + 1
        self.coef = None if (self.v0 is None or self.probs is None) else bound_sum(model, self.probs) / self.v0

    def _options(self) -> dict:
        return dict(super()._options(), v0=self.v0, v0_rule=self.v0_rule, pilot_step_size=self.pilot_step_size,
                    pilot_chains=self.pilot_chains, pilot_iter=self.pilot_iter, quantile=self.quantile,
                    max_batch_size=self.max_batch_size)

    def with_v0(self, v0: float) -> "AdaptiveControlVariate":
        """A copy with V_0 set."""
        return type(self)(self.model, self.batch_size, self.weights, self.centre, **dict(self._options(), v0=v0))

    def fixed(self) -> ControlVariatePS:
        """The fixed-n estimator with the same centre and weights (the pilot chains' estimator)."""
        o = super()._options()
        w = self.weights if isinstance(self.weights, str) else self.probs
        return ControlVariatePS(self.model, self.batch_size, w, self.centre, **o)

    def prepare(self, rng: Any, position: Array) -> Prepared:
        """Mode and weights (as :class:`ControlVariatePS`), then V_0 unless given."""
        prep_rng, pilot_rng = rng.spawn(2)
        prepared = super().prepare(prep_rng, position)
        est, cost = prepared.estimator, prepared.n_evals
        if est.v0 is None:
            m = self.model
            if est.v0_rule == "pilot":
                h = est.pilot_step_size
                if h is None:
                    h, passes = default_pilot_step(m, est.centre)
                    cost += passes * m.n_data
                v0 = calibrate_v0(est.fixed(), h, chains=est.pilot_chains, n_iter=est.pilot_iter,
                                  quantile=est.quantile, rng=pilot_rng)
                cost += float(m.n_data + est.pilot_iter * 2 * est.batch_size)
            else:
                v0 = laplace_v0(est, pilot_rng, chains=est.pilot_chains, n_iter=est.pilot_iter, quantile=est.quantile)
            est = est.with_v0(v0)
        return Prepared(est, prepared.start, cost)

    def batch_sizes(self, position: Array, centre: Array) -> Array:
        """n_t for each chain: int64 (chains,)."""
        xp = self.model.xp
        diff = position - centre
        d2 = xp.astype(xp.sum(diff * diff, axis=1), xp.float64)
        n_t = xp.floor(self.coef * d2) + 1.0
        return xp.astype(xp.clip(n_t, 1.0, float(self.max_batch_size)), xp.int64)

    def estimate(self, rng, est_state, position):
        if self.coef is None:
            msg = "AdaptiveControlVariate has no V_0 yet: pass `v0=`, or call estimator.prepare(rng, position)"
            raise ValueError(msg)
        m = self.model
        xp = m.xp
        chains = position.shape[0]
        centre = xp.broadcast_to(est_state.centre, tuple(position.shape))
        n_t = self.batch_sizes(position, centre)
        n_max = int(xp.max(n_t))
        idx, inv_p = self._draw(rng, chains, n_max)
        cols = xp.arange(n_max, dtype=xp.int64, device=m.device)
        n_col = xp.astype(n_t, m.dtype)[:, None]
        w = xp.where(cols[None, :] < n_t[:, None], inv_p / n_col, xp.zeros_like(inv_p))
        diff = diff_sum(m, position, centre, idx, w)
        g = m.grad_log_prior(position) + est_state.centre_grad + diff
        return g, est_state, EstimateInfo(2 * n_t, n_t)

    def __repr__(self) -> str:
        w = self.weights if isinstance(self.weights, str) else "array"
        return f"{type(self).__name__}(model={self.model!r}, batch_size={self.batch_size}, weights={w!r}, v0={self.v0!r})"


class AdaptiveControlVariatePS(AdaptiveControlVariate):
    """ASGLD-CV-PS: :class:`AdaptiveControlVariate` with the CV-PS approximate weights (``weights="approx"``)."""

    name = "adaptive-cv-ps"

    def __init__(self, model: Any, batch_size: Any, weights: Any = "approx", centre: Array | None = None, **options):
        super().__init__(model, batch_size, weights, centre, **options)
