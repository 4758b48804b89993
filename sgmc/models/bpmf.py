"""Bayesian probabilistic matrix factorisation (Salakhutdinov and Mnih 2008), as in section 6.3 of
Nemeth and Fearnhead (2021), "Stochastic gradient Markov chain Monte Carlo".

Observed ratings ``R_ij`` of item ``j`` by user ``i`` are modelled as

    R_ij ~ N(U_i^T V_j, 1 / alpha),
    U_i ~ N(mu_U, Lambda_U^{-1}),  V_j ~ N(mu_V, Lambda_V^{-1}),
    mu_W ~ N(mu_0, Lambda_W^{-1}),  Lambda_W = diag(lambda_W),  lambda_Wk ~ Gamma(a_0, b_0)

for W = U, V (shape ``a_0``, rate ``b_0``; the review's "mu_W ~ N(mu_0, Lambda_W)" is read with
Lambda_W a precision). The precisions are sampled on the log scale, ``l = log lambda``, whose density
includes the Jacobian: ``a_0 l - b_0 e^l``. The defaults are the review's tau = (alpha, mu_0, a_0, b_0)
= (3, 0, 1, 5) and d = 20 latent dimensions.

The datum is one observed rating, so N is the number of training ratings and a minibatch is a set of
ratings. The parameter vector is flat, in this order (:meth:`BPMF.unpack` / :meth:`BPMF.pack`):

====================  ==================  =====================================
block                 length              meaning
====================  ==================  =====================================
``U``                 ``n_users * d``     user factors, row-major (user, k)
``V``                 ``n_items * d``     item factors, row-major (item, k)
``mu_U``, ``mu_V``    ``d`` each          prior means
``log_lambda_U``      ``d``               log prior precisions of U
``log_lambda_V``      ``d``               log prior precisions of V
====================  ==================  =====================================

A minibatch gradient touches only the rows of U and V that its ratings name; those rows are summed
with :func:`sgmc._scatter.scatter_add` (repeated users and items add up). The prior gradient is dense
over every row each step: O((n_users + n_items) d), about 52,000 numbers for MovieLens-100k, which
costs about as much as a 10% minibatch of its 80,000 training ratings (8,000 ratings x 2 rows x d).

The ratings may stay on disk: ``users``, ``items`` and ``ratings`` given as :class:`numpy.memmap`,
zarr or Dask arrays are read by rows (:mod:`sgmc._blocks`). A minibatch reads only its ratings and
runs the same code on them as in memory; full-data passes (the control-variate centre, SVRG's
snapshots) go over the ratings in blocks.
"""

from __future__ import annotations

import math
from typing import Any

from .. import backends
from .._array_api import Array, array_namespace, device_of
from .._blocks import DEFAULT_BLOCK_BYTES, RowSource, check_dtype, check_finite_blocks, is_out_of_core, row_blocks, take
from .._dispatch import native
from .._param_names import block_names, check_param_names
from .._scatter import scatter_add
from .._validation import check_positive
from .base import Model, as_data_array, take_rows

__all__ = ["BPMF"]


def _span(xp: Any, a: Any) -> tuple[int, int]:
    """Smallest and largest entry of an array, or of a row reader block by block."""
    if not isinstance(a, RowSource):
        return int(xp.min(a)), int(xp.max(a))
    lo = hi = None
    for _, _, b in a.blocks():
        b = xp.asarray(b)
        lo = int(xp.min(b)) if lo is None else min(lo, int(xp.min(b)))
        hi = int(xp.max(b)) if hi is None else max(hi, int(xp.max(b)))
    return lo, hi


class BPMF(Model):
    """Posterior of Bayesian probabilistic matrix factorisation given observed ratings.

    Parameters
    ----------
    users, items : array of int, shape (N,)
        0-based user and item of each observed rating.
    ratings : array of float, shape (N,)
        The ratings. Any of ``users``, ``items`` and ``ratings`` may be a :class:`numpy.memmap`, zarr
        or Dask array, read by rows when needed (``docs/big-data.md``).
    n_users, n_items : int, optional
        Numbers of users and items (default: one more than the largest index).
    d : int, default 20
        Latent dimensions.
    alpha : float, default 3
        Precision of a rating about ``U_i^T V_j``.
    mu0, a0, b0 : float, default 0, 1, 5
        Hyperprior: ``mu_W ~ N(mu0, Lambda_W^{-1})``, ``lambda_Wk ~ Gamma(a0, rate=b0)``.
    centre : bool or float, default False
        ``True`` models ``R_ij - mean(R)`` (the training mean, kept in :attr:`offset`), a float
        subtracts that value; :meth:`predict` adds it back.
    dtype : dtype, optional
        Floating dtype (default: that of ``ratings`` if floating, else float64).
    param_names : sequence of str, optional
        Names of the ``dim`` coordinates (:attr:`param_names`); by default by block and index:
        ``U[i,k]``, ``V[j,k]``, ``mu_U[k]``, ``mu_V[k]``, ``log_lambda_U[k]``, ``log_lambda_V[k]``.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.models import BPMF
    >>> m = BPMF(np.asarray([0, 1, 1]), np.asarray([0, 0, 1]), np.asarray([4.0, 3.0, 5.0]), d=2)
    >>> m.dim, m.n_data          # (2 users + 2 items) * 2 + 4 * 2
    (16, 3)
    >>> m.grad_log_posterior(np.zeros(m.dim)).shape
    (16,)
    """

    def __init__(self, users: Any, items: Any, ratings: Any, n_users: int | None = None,
                 n_items: int | None = None, *, d: int = 20, alpha: float = 3.0, mu0: float = 0.0,
                 a0: float = 1.0, b0: float = 5.0, centre: bool | float = False, dtype: Any = None,
                 param_names: Any = None):
        if any(is_out_of_core(a) for a in (users, items, ratings)):
            self._init_on_disk(users, items, ratings, n_users, n_items, d=d, alpha=alpha, mu0=mu0, a0=a0, b0=b0,
                               centre=centre, dtype=dtype, param_names=param_names)
            return
        ratings = as_data_array(ratings, "ratings")
        xp = array_namespace(ratings)
        users = as_data_array(users, "users")
        items = as_data_array(items, "items")
        for name, a in (("users", users), ("items", items), ("ratings", ratings)):
            if a.ndim != 1 or a.shape[0] != ratings.shape[0]:
                msg = f"`{name}` must be 1-d with one entry per rating ({ratings.shape[0]}); got shape {tuple(a.shape)}"
                raise ValueError(msg)
        for name, a in (("users", users), ("items", items)):
            if not xp.isdtype(a.dtype, "integral"):
                msg = f"`{name}` must hold integer indices; got dtype {a.dtype}"
                raise TypeError(msg)
        n = int(ratings.shape[0])
        if n == 0:
            msg = "`ratings` must hold at least one rating; got none"
            raise ValueError(msg)
        if dtype is None:
            dtype = ratings.dtype if xp.isdtype(ratings.dtype, "real floating") else xp.float64
        dev = device_of(ratings)
        self.n_users = int(n_users) if n_users is not None else int(xp.max(users)) + 1
        self.n_items = int(n_items) if n_items is not None else int(xp.max(items)) + 1
        for name, a, m in (("users", users, self.n_users), ("items", items, self.n_items)):
            lo, hi = int(xp.min(a)), int(xp.max(a))
            if lo < 0 or hi >= m:
                msg = f"`{name}` must lie in [0, {m}); got values in [{lo}, {hi}]"
                raise ValueError(msg)
        self._settings(d, alpha, mu0, a0, b0)
        r = xp.astype(ratings, dtype)
        if centre is True:
            self.offset = float(xp.mean(r))
        elif centre is False:
            self.offset = 0.0
        else:
            self.offset = float(centre)
        self.users = xp.astype(users, xp.int64)
        self.items = xp.astype(items, xp.int64)
        self.ratings = r - self.offset
        self._finish(n, xp, dtype, dev, param_names)

    def _settings(self, d, alpha, mu0, a0, b0):
        self.d = int(d)
        if self.d < 1:
            msg = f"`d` must be a positive integer; got {d!r}"
            raise ValueError(msg)
        self.alpha = check_positive(alpha, "alpha")
        self.mu0 = float(mu0)
        self.a0 = check_positive(a0, "a0")
        self.b0 = check_positive(b0, "b0")

    def _finish(self, n, xp, dtype, dev, param_names):
        nu, ni, k = self.n_users, self.n_items, self.d
        super().__init__(n, (nu + ni) * k + 4 * k, xp, dtype, dev)
        if param_names is None:
            param_names = block_names([("U", (nu, k)), ("V", (ni, k)), ("mu_U", (k,)), ("mu_V", (k,)),
                                       ("log_lambda_U", (k,)), ("log_lambda_V", (k,))])
        self.param_names = check_param_names(param_names, self.dim)
        self._o_v = nu * k
        self._o_mu = (nu + ni) * k

    def _init_on_disk(self, users, items, ratings, n_users, n_items, *, d, alpha, mu0, a0, b0, centre, dtype,
                      param_names):
        """Ratings read by rows from disk: the checks of ``__init__``, each in one pass over blocks."""
        xp = backends.get_backend("numpy").xp
        src = {}
        for name, a, kinds, what in (("users", users, "iu", "integer indices"), ("items", items, "iu", "integer indices"),
                                     ("ratings", ratings, "iuf", "integer or floating-point numbers")):
            if is_out_of_core(a):
                a = a if isinstance(a, RowSource) else RowSource(a, name, layout="vector")
                check_dtype(a, kinds, what)
            else:
                a = as_data_array(a, name)
                if array_namespace(a) is not xp:
                    msg = (f"`{name}` must be a NumPy array (or a memmap, zarr or Dask array) when the other ratings "
                           f"arrays are read from disk; got a {type(a).__name__}")
                    raise TypeError(msg)
                if name != "ratings" and not xp.isdtype(a.dtype, "integral"):
                    msg = f"`{name}` must hold integer indices; got dtype {a.dtype}"
                    raise TypeError(msg)
            src[name] = a
        n = int(src["ratings"].shape[0])
        for name, a in src.items():
            if len(a.shape) != 1 or a.shape[0] != n:
                msg = f"`{name}` must be 1-d with one entry per rating ({n}); got shape {tuple(a.shape)}"
                raise ValueError(msg)
        if n == 0:
            msg = "`ratings` must hold at least one rating; got none"
            raise ValueError(msg)
        r = src["ratings"]
        if dtype is None:
            dtype = xp.float64 if r.dtype.kind != "f" or r.dtype.itemsize == 8 else xp.float32
        span = {name: _span(xp, src[name]) for name in ("users", "items")}
        self.n_users = int(n_users) if n_users is not None else span["users"][1] + 1
        self.n_items = int(n_items) if n_items is not None else span["items"][1] + 1
        for name, m in (("users", self.n_users), ("items", self.n_items)):
            lo, hi = span[name]
            if lo < 0 or hi >= m:
                msg = f"`{name}` must lie in [0, {m}); got values in [{lo}, {hi}]"
                raise ValueError(msg)
        if isinstance(r, RowSource):
            check_finite_blocks(r)
        self._settings(d, alpha, mu0, a0, b0)
        if centre is True:  # the training mean, summed block by block
            blocks = r.blocks() if isinstance(r, RowSource) else [(0, n, r)]
            self.offset = sum(float(xp.sum(xp.astype(xp.asarray(b), dtype))) for _, _, b in blocks) / n
        else:
            self.offset = 0.0 if centre is False else float(centre)
        # kept as given (the offset is subtracted from the ratings a minibatch reads)
        self.users, self.items, self.ratings = src["users"], src["items"], r
        self._finish(n, xp, dtype, None, param_names)

    # -- layout -----------------------------------------------------------------------------------
    def unpack(self, theta: Array) -> dict:
        """Split ``theta`` (chains, dim) into named blocks: U (chains, n_users, d), V, mu_U, mu_V, log_lambda_U, log_lambda_V."""
        xp, k = self.xp, self.d
        c = theta.shape[0]
        o, m = self._o_v, self._o_mu
        return {
            "U": xp.reshape(theta[:, :o], (c, self.n_users, k)),
            "V": xp.reshape(theta[:, o:m], (c, self.n_items, k)),
            "mu_U": theta[:, m:m + k],
            "mu_V": theta[:, m + k:m + 2 * k],
            "log_lambda_U": theta[:, m + 2 * k:m + 3 * k],
            "log_lambda_V": theta[:, m + 3 * k:m + 4 * k],
        }

    def pack(self, U: Array, V: Array, mu_U: Array, mu_V: Array, log_lambda_U: Array, log_lambda_V: Array) -> Array:
        """The flat ``(chains, dim)`` vector of the blocks that :meth:`unpack` returns."""
        xp = self.xp
        c = U.shape[0]
        return xp.concat([xp.reshape(U, (c, -1)), xp.reshape(V, (c, -1)), mu_U, mu_V, log_lambda_U, log_lambda_V], axis=1)

    # -- prior ------------------------------------------------------------------------------------
    def _prior_block(self, W, mu, ell, m):
        xp = self.xp
        lam = xp.exp(ell)
        dev = W - mu[:, None, :]
        dmu = mu - self.mu0
        ss = xp.sum(dev * dev, axis=1)  # (c, d)
        logp = xp.sum(0.5 * (m + 1) * ell - 0.5 * lam * (ss + dmu * dmu) + self.a0 * ell - self.b0 * lam, axis=-1)
        gW = -lam[:, None, :] * dev
        gmu = lam * xp.sum(dev, axis=1) - lam * dmu
        gell = 0.5 * (m + 1) - 0.5 * lam * (ss + dmu * dmu) + self.a0 - self.b0 * lam
        return logp, gW, gmu, gell

    def log_prior(self, theta: Array) -> Array:
        """Log prior (up to a constant) of U, V, the means and the log precisions; shape (chains,)."""
        p = self.unpack(theta)
        lu = self._prior_block(p["U"], p["mu_U"], p["log_lambda_U"], self.n_users)[0]
        lv = self._prior_block(p["V"], p["mu_V"], p["log_lambda_V"], self.n_items)[0]
        return lu + lv

    def grad_log_prior(self, theta: Array) -> Array:
        """Gradient of :meth:`log_prior`, dense over every row of U and V; shape (chains, dim)."""
        p = self.unpack(theta)
        _, gU, gmuU, glU = self._prior_block(p["U"], p["mu_U"], p["log_lambda_U"], self.n_users)
        _, gV, gmuV, glV = self._prior_block(p["V"], p["mu_V"], p["log_lambda_V"], self.n_items)
        return self.pack(gU, gV, gmuU, gmuV, glU, glV)

    # -- likelihood -------------------------------------------------------------------------------
    @property
    def stream_rows(self) -> int | None:
        """Ratings per block of a full pass over ratings read from disk (``None`` for data in memory)."""
        if not any(isinstance(a, RowSource) for a in (self.users, self.items, self.ratings)):
            return None
        return max(1, DEFAULT_BLOCK_BYTES // (8 * (2 * self.d + 3)))  # the U_i, V_j rows and the triple

    def _local(self, idx: Array) -> tuple[tuple, Array]:
        """The ratings ``idx`` read from disk as arrays ``(users, items, ratings)``, and ``idx`` into them."""
        xp = self.xp
        u = xp.astype(xp.reshape(take(xp, self.users, idx), (-1,)), xp.int64)
        it = xp.astype(xp.reshape(take(xp, self.items, idx), (-1,)), xp.int64)
        r = xp.reshape(take(xp, self.ratings, idx, self.dtype), (-1,)) - self.offset
        return (u, it, r), xp.reshape(xp.arange(u.shape[0], dtype=xp.int64), idx.shape)

    def _on_disk(self, fn: Any, theta: Array, idx: Array | None, weights: Array | None, combine: str) -> Array:
        """``fn(theta, data, idx, weights)`` on ratings from disk: the minibatch ``idx``, or all of them in blocks."""
        if idx is not None:
            data, local = self._local(idx)
            return fn(theta, data, local, weights)
        xp, parts = self.xp, []
        for start, stop in row_blocks(self.n_data, max(1, self.stream_rows // theta.shape[0])):
            data, local = self._local(xp.arange(start, stop, dtype=xp.int64))
            parts.append(fn(theta, data, local, None if weights is None else weights[..., start:stop]))
        if combine == "concat":
            return xp.concat(parts, axis=1)
        out = parts[0]
        for p in parts[1:]:
            out = out + p
        return out

    def _gather(self, theta: Array, idx: Array | None, data: tuple | None = None):
        """Per chain: users, items (c, b), ratings (c, b), U_i and V_j rows (c, b, d)."""
        xp = self.xp
        users, items, ratings = (self.users, self.items, self.ratings) if data is None else data
        c = theta.shape[0]
        if idx is None:
            idx = xp.arange(self.n_data, device=self.device)
        if idx.ndim == 1:
            idx = xp.broadcast_to(idx[None, :], (c, idx.shape[0]))
        u = take_rows(xp, users, idx)
        it = take_rows(xp, items, idx)
        r = take_rows(xp, ratings, idx)
        p = self.unpack(theta)
        off = xp.reshape(xp.arange(c, dtype=xp.int64, device=self.device), (c, 1))
        Ui = take_rows(xp, xp.reshape(p["U"], (c * self.n_users, self.d)), u + off * self.n_users)
        Vj = take_rows(xp, xp.reshape(p["V"], (c * self.n_items, self.d)), it + off * self.n_items)
        return u, it, r, Ui, Vj

    def log_lik(self, theta: Array, idx: Array | None = None) -> Array:
        """Per-rating log density ``log N(R_ij | U_i^T V_j, 1/alpha)``; shape (chains, batch)."""
        if self.stream_rows is not None:
            return self._on_disk(lambda t, data, i, w: self._log_lik(t, i, data), theta, idx, None, "concat")
        return self._log_lik(theta, idx)

    def _log_lik(self, theta: Array, idx: Array | None, data: tuple | None = None) -> Array:
        _, _, r, Ui, Vj = self._gather(theta, idx, data)
        e = r - self.xp.sum(Ui * Vj, axis=-1)
        return 0.5 * math.log(self.alpha / (2 * math.pi)) - 0.5 * self.alpha * e * e

    def grad_log_lik_sum(self, theta: Array, idx: Array | None = None, weights: Array | None = None) -> Array:
        """``sum_i w_i grad log N(R_i | U^T V, 1/alpha)``: rows of U and V summed by scatter-add; (chains, dim)."""
        if self.stream_rows is not None:
            return self._on_disk(self._grad_sum, theta, idx, weights, "sum")
        return self._grad_sum(theta, None, idx, weights)

    def _grad_sum(self, theta: Array, data: tuple | None, idx: Array | None, weights: Array | None) -> Array:
        xp = self.xp
        out = self._native("bpmf_grad_log_lik_sum", theta, None, idx, weights, data)
        if out is not NotImplemented:
            return out
        u, it, r, Ui, Vj = self._gather(theta, idx, data)
        e = self.alpha * (r - xp.sum(Ui * Vj, axis=-1))
        if weights is not None:
            e = e * weights
        gU = scatter_add(xp, self.n_users, u, e[..., None] * Vj)
        gV = scatter_add(xp, self.n_items, it, e[..., None] * Ui)
        c = theta.shape[0]
        rest = xp.zeros((c, 4 * self.d), dtype=self.dtype, device=self.device)
        return xp.concat([xp.reshape(gU, (c, -1)), xp.reshape(gV, (c, -1)), rest], axis=1)

    def grad_log_lik_diff_sum(self, theta: Array, centre: Array, idx: Array, weights: Array | None = None) -> Array:
        """The control-variate difference ``sum_i w_i [g_i(theta) - g_i(centre)]``, shape (chains, dim).

        A backend's fused loop evaluates both points in one pass over the ratings; the twin is the
        model protocol's difference of two :meth:`grad_log_lik_sum` calls.
        """
        if self.stream_rows is not None:  # the ratings read once, both points computed from them
            def diff(t, data, i, w):
                out = self._native("bpmf_grad_log_lik_diff_sum", t, centre, i, w, data)
                if out is not NotImplemented:
                    return out
                return self._grad_sum(t, data, i, w) - self._grad_sum(centre, data, i, w)
            return self._on_disk(diff, theta, idx, weights, "sum")
        out = self._native("bpmf_grad_log_lik_diff_sum", theta, centre, idx, weights)
        if out is not NotImplemented:
            return out
        return super().grad_log_lik_diff_sum(theta, centre, idx, weights)

    def _native(self, name: str, theta: Array, centre: Array | None, idx: Array | None, weights: Array | None,
                data: tuple | None = None):
        """A backend's fused gather, product and scatter-add (compiled loops on NumPy with Numba), or
        ``NotImplemented``; the array-API code of the callers is its twin."""
        fast = native(self.xp, name) if idx is not None else None
        if fast is None:
            return NotImplemented
        xp = self.xp
        if idx.ndim == 1:
            idx = xp.broadcast_to(idx[None, :], (theta.shape[0], idx.shape[0]))
        data = (self.users, self.items, self.ratings) if data is None else data
        args = data + (theta,) + (() if centre is None else (centre,))
        return fast(*args, idx, weights, self.alpha, self.n_users, self.n_items, self.d)

    def grad_log_lik(self, theta: Array, idx: Array | None = None) -> Array:
        """Per-rating gradients, shape (chains, batch, dim): dense, so only for small models and tests."""
        xp = self.xp
        c = theta.shape[0]
        idx = xp.arange(self.n_data, device=self.device) if idx is None else idx
        if idx.ndim == 1:
            idx = xp.broadcast_to(idx[None, :], (c, idx.shape[0]))
        b = idx.shape[1]
        rows = []
        for j in range(b):  # one column per datum; the per-datum form is a test aid, not a hot path
            rows.append(self.grad_log_lik_sum(theta, idx[:, j:j + 1]))
        if not rows:
            return xp.zeros((c, 0, self.dim), dtype=self.dtype, device=self.device)
        return xp.stack(rows, axis=1)

    def predict(self, theta: Array, users: Array, items: Array, clip: tuple[float, float] | None = None) -> Array:
        """Predicted ratings ``U_i^T V_j`` (+ :attr:`offset`) per chain, shape (chains, len(users)), optionally clipped."""
        xp = self.xp
        theta, single = self._batched(theta)
        c = theta.shape[0]
        p = self.unpack(theta)
        off = xp.reshape(xp.arange(c, dtype=xp.int64, device=self.device), (c, 1))
        u = xp.broadcast_to(xp.astype(users, xp.int64)[None, :], (c, users.shape[0]))
        it = xp.broadcast_to(xp.astype(items, xp.int64)[None, :], (c, items.shape[0]))
        Ui = take_rows(xp, xp.reshape(p["U"], (c * self.n_users, self.d)), u + off * self.n_users)
        Vj = take_rows(xp, xp.reshape(p["V"], (c * self.n_items, self.d)), it + off * self.n_items)
        out = xp.sum(Ui * Vj, axis=-1) + self.offset
        if clip is not None:
            out = xp.clip(out, clip[0], clip[1])
        return out[0, ...] if single else out
