"""k-DPP subsampling: the k-DPP sampler, its inclusion probabilities, and DPP-SGLD (thesis chapter 5).

A determinantal point process with L-ensemble kernel L (N x N, positive semi-definite) draws a subset Y
of {1..N} with P(Y) proportional to det(L_Y); a k-DPP conditions on |Y| = k. Subsets favour diverse
points (their feature vectors span a large volume), which the thesis (chapter 5; Zhang et al. 2017)
studied as a way to pick minibatches.

:class:`KDPP` samples with the spectral algorithm of Kulesza and Taskar (2012, Algorithm 8; thesis
Algorithm 6): from the eigendecomposition L = sum_m lambda_m v_m v_m^T,

1. the elementary symmetric polynomials e_l^m of lambda_1..lambda_m (e_0^m = 1, e_l^0 = 0 for l >= 1,
   e_l^m = e_l^{m-1} + lambda_m e_{l-1}^{m-1}; the thesis prints e_l^0 = 1 and lambda_j, both typos);
2. for m = N..1, keep eigenvector m with probability lambda_m e_{l-1}^{m-1} / e_l^m (l = slots left);
3. from the kept k eigenvectors V, draw i with probability (1/|V|) sum_{v in V} v_i^2, then replace V by
   an orthonormal basis of its part orthogonal to e_i, until V is empty.

The inclusion probabilities pi_i = P(i in Y) are sum_m v_m(i)^2 P(m kept), with
P(m kept) = lambda_m e_{k-1}^{-m} / e_k^N (e^{-m}: the polynomials without lambda_m); they sum to k
(:meth:`KDPP.inclusion_probabilities`). All of this runs in log space.

DPP-SGLD (thesis eq. 5.3.1) uses g = grad log p + (1/k) sum_{i in S} grad log f_i / p_i with
p_i = L_ii / tr(L). Those p_i are the inclusion probabilities of a 1-DPP, not of the k-DPP, so the
estimate is **biased** for k > 1 (the thesis's own finding was negative: its pseudo-variance was higher
than SGLD's, and grew with the label weight w of the kernel). :class:`DPPSubsampling` offers that
estimator as ``marginals="diagonal"`` (for reproduction) and, by default, the unbiased Horvitz-Thompson
estimator sum_{i in S} grad log f_i / pi_i with the exact inclusion probabilities.

Cost: the eigendecomposition is O(N^3) time and O(N^2) memory once; each draw is O(N k^2) per chain
for stage 3 plus an O(N) sequential pass for stage 2, on the host. Measured on a shared 2-core machine:
at N = 2000 the set-up took 4 s and a draw of k = 20 about 0.1 s per chain; by N of about 10^4 the
N x N kernel alone is 800 MB and the eigendecomposition takes minutes, so :class:`DPPSubsampling`
refuses N above ``max_n`` (default 5000). It is a feasibility tool, not a way to speed SGLD up.
"""

from __future__ import annotations

import math
from typing import Any

from .. import backends
from .._array_api import Array, at
from .._keys import refuse_tracing
from .._validation import check_choice, check_int, check_positive
from .base import EstimateInfo, Estimator, _check_subsampling

__all__ = ["KDPP", "DPPSubsampling", "linear_kernel", "DEFAULT_MAX_N"]

#: Largest N for which :class:`DPPSubsampling` builds its N x N kernel by default.
DEFAULT_MAX_N = 5000

_NEG_INF = -math.inf


def _hx():
    return backends.get_backend("numpy").xp


def _logcumsumexp(xp, a):
    """log(cumsum(exp(a))) along the last axis, scaled by the maximum (entries far below it become -inf)."""
    top = xp.max(a)
    if not bool(xp.isfinite(top)):
        return xp.full(a.shape, _NEG_INF)
    c = xp.cumulative_sum(xp.exp(a - top))
    pos = c > 0
    return xp.where(pos, xp.log(xp.where(pos, c, xp.ones_like(c))) + top, xp.full(c.shape, _NEG_INF))


def _log_esp_table(xp, loglam, k):
    """log e_l^m, l = 0..k, m = 0..N, of the values exp(loglam): (k + 1, N + 1).

    Row by row: e_l^m = sum_{j <= m} lambda_j e_{l-1}^{j-1} (the recursion unrolled), so each row is a
    cumulative sum of the previous one, k vectorised passes instead of N sequential ones.
    """
    n = loglam.shape[0]
    rows = [xp.zeros((n + 1,))]
    for _ in range(k):
        prev = rows[-1]
        terms = loglam + prev[:-1]
        rows.append(xp.concat([xp.full((1,), _NEG_INF), _logcumsumexp(xp, terms)]))
    return xp.stack(rows, axis=0)


def _safe_log(xp, x):
    pos = x > 0
    return xp.where(pos, xp.log(xp.where(pos, x, xp.ones_like(x))), xp.full(x.shape, _NEG_INF))


def linear_kernel(X: Array, y: Array, w: float = 0.1, jitter: float = 1e-6) -> Array:
    """The thesis's kernel (Zhang et al. 2017): L = F F^T + jitter I with F = [(1 - w) X, w y] (N x N, host)."""
    hx = _hx()
    X = hx.asarray(backends.to_numpy(X), dtype=hx.float64)
    y = hx.asarray(backends.to_numpy(y), dtype=hx.float64)
    F = hx.concat([(1.0 - w) * X, w * y[:, None]], axis=1)
    return F @ F.T + jitter * hx.eye(X.shape[0], dtype=hx.float64)


class KDPP:
    """A k-DPP with L-ensemble kernel ``L``: exact draws and inclusion probabilities (host, float64).

    Parameters
    ----------
    L : array (N, N)
        Symmetric positive semi-definite kernel with rank at least k.
    k : int

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.estimators import KDPP
    >>> L = np.diag([1.0, 2.0, 3.0, 4.0])
    >>> dpp = KDPP(L, 2)
    >>> round(float(dpp.inclusion_probabilities().sum()), 12)
    2.0
    >>> dpp.sample(np.random.default_rng(0), 3).shape
    (3, 2)
    """

    def __init__(self, L: Any, k: int):
        hx = _hx()
        L = hx.asarray(backends.to_numpy(L), dtype=hx.float64)
        if L.ndim != 2 or L.shape[0] != L.shape[1]:
            msg = f"`L` must be a square (N, N) kernel; got shape {tuple(L.shape)}"
            raise ValueError(msg)
        self.n = int(L.shape[0])
        self.k = check_int(k, "k")
        if self.k > self.n:
            msg = f"`k`={self.k} exceeds N={self.n}"
            raise ValueError(msg)
        lam, vec = hx.linalg.eigh(0.5 * (L + L.T))
        lam = hx.maximum(lam, hx.zeros_like(lam))
        rank = int(hx.sum(lam > 1e-12 * float(hx.max(lam))))
        if rank < self.k:
            msg = (f"the kernel has rank {rank} < k={self.k}: a k-DPP needs rank >= k; add a multiple of the "
                   "identity (the `jitter` of linear_kernel)")
            raise ValueError(msg)
        self.eigenvalues = lam
        self.eigenvectors = vec
        self.diagonal = hx.linalg.diagonal(L)
        self._log_e = self._log_esp(lam)

    def _log_esp(self, lam):
        """log e_l^m for l = 0..k, m = 0..N: (k + 1, N + 1)."""
        return _log_esp_table(_hx(), _safe_log(_hx(), lam), self.k)

    def inclusion_probabilities(self) -> Any:
        """pi_i = P(i in Y), (N,) float64 NumPy; sums to k."""
        hx = _hx()
        k, n = self.k, self.n
        loglam = _safe_log(hx, self.eigenvalues)
        pre = self._log_e                                          # pre[:, m]: lambda_1..lambda_m
        suf = hx.flip(_log_esp_table(hx, hx.flip(loglam, axis=0), k), axis=1)   # suf[:, m]: lambda_{m+1}..lambda_N
        # log e_{k-1} without lambda_m: log sum_a pre[a, m - 1] suf[k - 1 - a, m] (m = 1..N)
        terms = hx.stack([pre[a, :n] + suf[k - 1 - a, 1:] for a in range(k)], axis=0)   # (k, N)
        top = hx.max(terms, axis=0)
        top = hx.where(hx.isfinite(top), top, hx.zeros_like(top))
        log_without = top + _safe_log(hx, hx.sum(hx.exp(terms - top), axis=0))
        kept = hx.exp(loglam + log_without - self._log_e[k, n])    # P(eigenvector m kept)
        return (self.eigenvectors**2) @ kept

    def sample(self, gen: Any, size: int) -> Any:
        """``size`` independent k-DPP draws: int64 NumPy (size, k), each row in draw order.

        ``gen`` is a ``numpy.random.Generator`` or an sgmc generator (its uniforms are used).
        """
        hx = _hx()
        k, n = self.k, self.n
        size = check_int(size, "size")
        u = _uniforms(gen, (size, n + k))
        logE = self._log_e
        # stage 2: which eigenvectors, all draws at once (a pass over m = N..1)
        left = hx.full((size,), k, dtype=hx.int64)
        chosen = hx.zeros((size, n), dtype=hx.bool)
        for m in range(n, 0, -1):
            active = left > 0
            if not bool(hx.any(active)):
                break
            lm = hx.where(active, left, hx.ones_like(left))
            # P(keep m) = lambda_m e_{l-1}^{m-1} / e_l^m = 1 - e_l^{m-1} / e_l^m (1 once e_l^{m-1} vanishes)
            a, b = logE[lm, m - 1], logE[lm, m]
            ratio = hx.where(hx.isfinite(b), hx.exp(hx.where(hx.isfinite(b), a - b, hx.zeros_like(b))), hx.zeros_like(b))
            take = active & (u[:, m - 1] >= ratio)
            chosen = at(chosen, (slice(None), m - 1)).set(take)
            left = left - hx.astype(take, hx.int64)
        out = hx.zeros((size, k), dtype=hx.int64)
        for s in range(size):
            V = self.eigenvectors[:, chosen[s, :]]
            for j in range(k):
                p = hx.sum(V * V, axis=1)
                cdf = hx.cumulative_sum(p)
                i = int(hx.searchsorted(cdf, u[s, n + j] * cdf[-1], side="right"))
                i = min(i, n - 1)
                out = at(out, (s, j)).set(i)
                if V.shape[1] == 1:
                    break
                c = int(hx.argmax(hx.abs(V[i, :])))
                col = V[:, c]
                V = V - col[:, None] * (V[i, :] / V[i, c])[None, :]
                V = hx.concat([V[:, :c], V[:, c + 1:]], axis=1)
                V, _ = hx.linalg.qr(V)
        return out


def _uniforms(gen: Any, shape) -> Any:
    hx = _hx()
    if hasattr(gen, "random") and not hasattr(gen, "backend"):
        return gen.random(shape)
    return hx.asarray(backends.to_numpy(gen.uniform(shape, dtype=gen.backend.xp.float64)), dtype=hx.float64)


class DPPSubsampling(Estimator):
    """DPP-SGLD's gradient estimator (thesis chapter 5): minibatches drawn from a k-DPP.

    Parameters
    ----------
    model : Model
    batch_size : int
        k, the subset size.
    kernel : array (N, N), optional
        The L-ensemble kernel. Default: :func:`linear_kernel` of the model's ``X`` and ``y`` (GLMs) with
        weight ``w``.
    w : float, default 0.1
        Label weight of the default kernel (the thesis tried 0.1, 0.4, 0.7 and 1).
    marginals : {"exact", "diagonal"}, default "exact"
        ``"exact"``: Horvitz-Thompson with the k-DPP inclusion probabilities (unbiased).
        ``"diagonal"``: the thesis's eq. 5.3.1 with p_i = L_ii / tr(L) (biased for k > 1).
    jitter : float, default 1e-6
        Multiple of the identity added to the default kernel (its rank is at most d + 1 < k otherwise).
    max_n : int, default ``DEFAULT_MAX_N``
        Largest N accepted (the N x N kernel and its O(N^3) eigendecomposition).

    Notes
    -----
    Draws happen on the host (float64) and the indices move to the model's device. Each chain draws its
    own subset. Costs k per-datum gradients per call, and O(N k^2) host work per chain for the draw.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.backends import default_rng
    >>> from sgmc.models import LogisticRegression
    >>> from sgmc.estimators import DPPSubsampling
    >>> r = np.random.default_rng(0)
    >>> X = r.normal(size=(200, 2)); y = (r.random(200) < 0.3).astype(float)
    >>> est = DPPSubsampling(LogisticRegression(X, y), 10)
    >>> grad, _, info = est.estimate(default_rng(1), None, np.zeros((2, 2)))
    >>> grad.shape, info.n_evals
    ((2, 2), 10)
    """

    name = "dpp"

    def __init__(self, model: Any, batch_size: int, kernel: Any = None, *, w: float = 0.1, marginals: str = "exact",
                 jitter: float = 1e-6, max_n: int = DEFAULT_MAX_N):
        super().__init__(model)
        _check_subsampling(model, "DPP subsampling")
        n = model.n_data
        self.max_n = check_int(max_n, "max_n")
        if n > self.max_n:
            msg = (f"DPP subsampling builds an N x N kernel and its eigendecomposition (O(N^2) memory, O(N^3) time); "
                   f"N={n} is above max_n={self.max_n}. Pass a larger `max_n` knowingly, or use estimator='ps'")
            raise ValueError(msg)
        k = check_int(batch_size if not isinstance(batch_size, float) else max(1, round(batch_size * n)), "batch_size")
        self.batch_size = k
        self.marginals = check_choice(marginals, "marginals", ("exact", "diagonal"))
        self.w = float(w)
        self.jitter = check_positive(jitter, "jitter")
        if kernel is None:
            if not (hasattr(model, "X") and hasattr(model, "y")):
                msg = (f"DPPSubsampling needs `kernel=` (an N x N L-ensemble) for {type(model).__name__}, which has no "
                       "X and y for the default linear kernel")
                raise TypeError(msg)
            kernel = linear_kernel(model.X, model.y, self.w, self.jitter)
        self.dpp = KDPP(kernel, k)
        hx = _hx()
        if self.marginals == "exact":
            weights = 1.0 / self.dpp.inclusion_probabilities()
        else:
            diag = self.dpp.diagonal
            weights = float(hx.sum(diag)) / (k * diag)
        be = backends.get_backend(model.xp)
        self.inverse_inclusion = backends.asarray(weights, backend=be, dtype=model.dtype, device=model.device)
        self._info = EstimateInfo(k, k)

    def estimate(self, rng, est_state, position):
        refuse_tracing("DPP subsampling", "its k-DPP draw is a sequence of rejection rounds whose number depends "
                       "on the values drawn", position)
        m = self.model
        xp = m.xp
        chains = position.shape[0]
        idx_host = self.dpp.sample(rng, chains)
        be = backends.get_backend(xp)
        idx = backends.asarray(idx_host, backend=be, dtype=xp.int64, device=m.device)
        w = xp.reshape(xp.take(self.inverse_inclusion, xp.reshape(idx, (-1,)), axis=0), idx.shape)
        g = m.grad_log_prior(position) + m.grad_log_lik_sum(position, idx, w)
        return g, est_state, self._info

    def __repr__(self) -> str:
        return f"DPPSubsampling(model={self.model!r}, batch_size={self.batch_size}, marginals={self.marginals!r})"
