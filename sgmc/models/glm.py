"""Generalised linear models with Gaussian priors: linear and logistic regression.

Both have per-datum terms that depend on theta only through eta_i = x_i . theta, so a minibatch gradient
is one gather of the rows, one batched matrix-vector product and one reduction:
``sum_i w_i r(eta_i, y_i) x_i``, where ``r = d log f / d eta``. The review's section 6.1 logistic
regression (Nemeth and Fearnhead 2021) uses a N(0, 10 I) prior, the default here.

The prior is on the coefficients of the columns as given. Columns on very different scales (an
income in currency units beside a 0/1 flag) make the posterior's curvature span many orders of
magnitude; :func:`sgmc.conditioning.sample_conditioned` samples such a model in well-conditioned
coordinates (:mod:`sgmc.models.coordinates`) and returns the draws on the columns' scale, and
``sgmc run --data`` does so by default.
"""

from __future__ import annotations

import math
from typing import Any

from .. import backends
from .._array_api import Array, device_of
from .._dispatch import native
from .._flow import on_host, over_groups
from .._param_names import check_param_names, column_names
from .._validation import check_positive
from .._blocks import RowSource, is_out_of_core, out_of_core_design, row_blocks
from .base import Model, take_rows, validate_design

__all__ = ["LinearRegression", "LogisticRegression"]


class _GLM(Model):
    """Shared machinery; subclasses define ``_terms(eta, y) -> (log f, r, -d r/d eta)``.

    Attributes
    ----------
    block_elements : int or None
        Most elements of gathered minibatch rows ``(chains, batch, dim)`` that
        :meth:`grad_log_lik_sum` holds at once. On CPUs (default ``2**17``, 1 MiB of float64) chains
        are processed in blocks of that size, so the rows gathered for a block are still in cache
        for the second matrix product, and memory stays bounded for many chains or large batches.
        ``None`` (the default on GPUs) processes all chains in one batch. Chains are independent, so
        blocking changes nothing beyond how the library rounds batched matrix products (on NumPy,
        nothing at all).
    """

    _eta_curvature: float = 1.0  # sup over eta of -d^2 log f / d eta^2
    _native_kind: str = ""  # name of the model in native kernels ("logistic", "linear")
    _native_param: float = 0.0
    block_elements: int | None = 2**17

    def __init__(self, X: Any, y: Any, prior_var: float = 10.0, *, backend: Any = None, param_names: Any = None):
        names = column_names(X) if param_names is None else param_names
        if is_out_of_core(X):  # memmap, zarr or Dask: rows read when needed, full passes in blocks
            xp, X, y, dtype = out_of_core_design(X, y, backend=backend)
        else:
            xp, X, y, dtype = validate_design(X, y, backend=backend)
        super().__init__(X.shape[0], X.shape[1], xp, dtype, device=device_of(y))
        self.param_names = check_param_names(names, self.dim, prefix="beta")
        self.X = X
        self.y = y
        self.prior_var = check_positive(prior_var, "prior_var")
        self._moved(backends.get_backend(xp if backend is None else backend))

    def _moved(self, backend: Any) -> None:
        # called by sgmc.backends.move as well: chain blocking pays on CPUs only
        contiguous = native(self.xp, "contiguous")  # a backend's C-order copy, made once, not per call
        if contiguous is not None and not isinstance(self.X, RowSource):
            self.X, self.y = contiguous(self.X), contiguous(self.y)
        if not backend.on_cpu(self.device):
            self.block_elements = None
        else:
            self.__dict__.pop("block_elements", None)

    # prior N(0, prior_var I)
    def log_prior(self, theta: Array) -> Array:
        xp = self.xp
        c = -0.5 * self.dim * math.log(2.0 * math.pi * self.prior_var)
        return c - 0.5 * xp.sum(theta * theta, axis=-1) / self.prior_var

    def grad_log_prior(self, theta: Array) -> Array:
        return -theta / self.prior_var

    @property
    def stream_rows(self) -> int | None:
        """Rows per block of a full pass over data read from disk (``None`` for data in memory)."""
        return self.X.block_rows if isinstance(self.X, RowSource) else None

    @property
    def data_chunks(self) -> Any:
        """Row boundaries ``(K + 1,)`` of the storage chunks of a zarr or Dask ``X`` (None otherwise).

        :class:`sgmc.estimators.ChunkedMinibatch` draws its chunks from these by default.
        """
        return self.X.chunk_bounds if isinstance(self.X, RowSource) else None

    def _block_sums(self, theta: Array, want_logf: bool, want_grad: bool) -> tuple[Array | None, Array | None]:
        """Full-data ``sum_i log f_i`` (chains,) and ``sum_i r_i x_i`` (chains, dim) for ``X`` on disk.

        One read of each block of rows serves every chain; a block is cut into pieces of
        ``block_rows // chains`` rows, so the linear predictors held at once number about a block.
        """
        xp, chains = self.xp, theta.shape[0]
        logp = xp.zeros((chains,), dtype=self.dtype) if want_logf else None
        grad = xp.zeros((chains, self.dim), dtype=self.dtype) if want_grad else None
        piece = max(1, self.X.block_rows // chains)
        for start, stop, rows in self.X.blocks():
            block = xp.asarray(rows, dtype=self.dtype)
            for a in range(0, stop - start, piece):
                b = block[a:a + piece, ...]
                logf, r, _ = self._terms(theta @ b.T, self.y[None, start + a:start + a + b.shape[0]],
                                         want=(want_logf, want_grad, False))
                if want_logf:
                    logp = logp + xp.sum(logf, axis=-1)
                if want_grad:
                    grad = grad + r @ b
        return logp, grad

    def _rows(self, flat: Array) -> Array:
        """Rows ``X[flat]``: a gather, or for data on disk a read of those rows only (sgmc._blocks)."""
        if isinstance(self.X, RowSource):
            return self.xp.asarray(self.X.take(backends.to_numpy(flat)), dtype=self.dtype)
        return self.xp.take(self.X, flat, axis=0)

    def _streamed(self, theta: Array, fn: Any, combine: str) -> Array:
        """A full-data ``fn(theta, idx)`` over blocks of rows of data on disk: summed, or concatenated."""
        xp, chains = self.xp, theta.shape[0]
        parts = []
        for start, stop in row_blocks(self.n_data, max(1, self.X.block_rows // chains)):
            idx = xp.broadcast_to(xp.arange(start, stop, dtype=xp.int64)[None, :], (chains, stop - start))
            parts.append(fn(theta, idx))
        if combine == "sum":
            out = parts[0]
            for p in parts[1:]:
                out = out + p
            return out
        return xp.concat(parts, axis=1)

    def _full_eta(self, theta: Array) -> Array:
        """``theta @ X.T`` (chains, N). Off the host as ``(X @ theta.T).T``: JAX's eager ``X.T`` copies all
        of ``X`` first (about 8x the product's time at N = 1e5, d = 100); NumPy's is a view, and its
        product stays as it was."""
        if on_host(self.xp):
            return theta @ self.X.T
        xp = self.xp
        return xp.matrix_transpose(self.X @ xp.matrix_transpose(theta))

    def _linear(self, theta: Array, idx: Array | None):
        if idx is None:
            return self._full_eta(theta), self.y[None, :], None
        xp = self.xp
        # One flat index serves both gathers; the rows are gathered once and reused for the gradient.
        flat = xp.reshape(idx, (-1,))
        Xb = xp.reshape(self._rows(flat), (*idx.shape, self.dim))
        y = xp.reshape(xp.take(self.y, flat, axis=0), idx.shape)
        return (Xb @ theta[..., None])[..., 0], y, Xb

    def log_lik(self, theta: Array, idx: Array | None = None) -> Array:
        if idx is None and isinstance(self.X, RowSource):
            return self._streamed(theta, self.log_lik, "concat")
        eta, y, _ = self._linear(theta, idx)
        return self._terms(eta, y, want=(True, False, False))[0]

    def grad_log_lik(self, theta: Array, idx: Array | None = None) -> Array:
        if idx is None and isinstance(self.X, RowSource):
            return self._streamed(theta, self.grad_log_lik, "concat")
        eta, y, Xb = self._linear(theta, idx)
        r = self._terms(eta, y, want=(False, True, False))[1]
        Xb = self.X[None, ...] if Xb is None else Xb
        return r[..., None] * Xb

    def grad_log_lik_sum(self, theta: Array, idx: Array | None = None, weights: Array | None = None) -> Array:
        if isinstance(self.X, RowSource):
            if idx is None:
                return self._block_sums(theta, False, True)[1]
            return self._grad_log_lik_sum(theta, idx, weights)
        if idx is not None and self._native_kind:
            # a backend's fused gather-and-reduce (a CUDA kernel on CuPy, compiled loops on NumPy with
            # Numba), on all chains at once; the blocked array-API code below is its twin
            fast = native(self.xp, "glm_grad_log_lik_sum")
            if fast is not None:
                out = fast(self._native_kind, self.X, self.y, theta, idx, weights, self._native_param)
                if out is not NotImplemented:
                    return out
        block = self.block_elements  # groups of chains whose rows stay in cache (a device loop under JAX tracing)
        if idx is not None and block is not None and theta.shape[0] == idx.shape[0]:
            return self._over_chain_blocks(block, self._grad_log_lik_sum, idx, weights, theta)
        return self._grad_log_lik_sum(theta, idx, weights)

    def _over_chain_blocks(self, block: int, fn: Any, idx: Array, weights: Array | None, *per_chain: Array) -> Array:
        """``fn(*per_chain, idx, weights)`` on groups of chains that gather at most ``block`` entries each, concatenated."""
        chains, batch = idx.shape
        step = max(1, block // (batch * self.dim))
        if step >= chains:
            return fn(*per_chain, idx, weights)
        return over_groups(self.xp, fn, step, *per_chain, idx, weights)

    def _grad_log_lik_sum(self, theta: Array, idx: Array | None, weights: Array | None) -> Array:
        eta, y, Xb = self._linear(theta, idx)
        r = self._terms(eta, y, want=(False, True, False))[1]
        if weights is not None:
            r = r * weights
        if Xb is None:
            return r @ self.X
        return (r[:, None, :] @ Xb)[:, 0, :]

    def grad_log_lik_diff_sum(
        self, theta: Array, centre: Array, idx: Array, weights: Array | None = None
    ) -> Array:
        """Control-variate differences from ONE gather of the rows: ``sum_i w_i (r_i(theta) - r_i(centre)) x_i``.

        Blocked over chains like :meth:`grad_log_lik_sum`.
        """
        if self._native_kind and not isinstance(self.X, RowSource):
            # a backend's fused two-point gather-and-reduce (compiled CPU loops); the code below is its twin
            fast = native(self.xp, "glm_grad_log_lik_diff_sum")
            if fast is not None:
                out = fast(self._native_kind, self.X, self.y, theta, centre, idx, weights, self._native_param)
                if out is not NotImplemented:
                    return out
        block = self.block_elements  # groups of chains whose rows stay in cache (a device loop under JAX tracing)
        # rows read from disk are gathered once for all chains (each storage chunk read once)
        if block is not None and theta.shape[0] == idx.shape[0] and not isinstance(self.X, RowSource):
            return self._over_chain_blocks(block, self._grad_diff_sum, idx, weights, theta, centre)
        return self._grad_diff_sum(theta, centre, idx, weights)

    def _grad_diff_sum(self, theta: Array, centre: Array, idx: Array, weights: Array | None) -> Array:
        xp = self.xp
        flat = xp.reshape(idx, (-1,))
        Xb = xp.reshape(self._rows(flat), (*idx.shape, self.dim))
        # Both points' linear predictors from the same gathered rows (two matrix-vector products: on
        # OpenBLAS they beat one product against (theta, centre) stacked, whose second dimension is 2).
        eta = (Xb @ theta[..., None])[..., 0]
        eta0 = (Xb @ centre[..., None])[..., 0]
        # A GLM's residual is (y - mean(eta)) / dispersion, so y cancels in r(theta) - r(centre): the
        # responses are not gathered.
        want = (False, True, False)
        r = self._terms(eta, 0.0, want)[1] - self._terms(eta0, 0.0, want)[1]
        if weights is not None:
            r = r * weights
        return (r[:, None, :] @ Xb)[:, 0, :]

    def log_lik_total(self, theta: Array) -> Array:
        if isinstance(self.X, RowSource):  # data on disk: summed block by block, never N terms per chain
            return self._block_sums(theta, True, False)[0]
        return super().log_lik_total(theta)

    def log_posterior_and_grad(self, theta: Array) -> tuple[Array, Array]:
        # One pass over the data for both: eta = X theta feeds log f and its derivative.
        if isinstance(self.X, RowSource):  # one read of each block for both sums
            logf, g = self._block_sums(theta, True, True)
            return self.log_prior(theta) + logf, self.grad_log_prior(theta) + g
        xp = self.xp
        eta = self._full_eta(theta)
        logf, r, _ = self._terms(eta, self.y[None, :], want=(True, True, False))
        logp = self.log_prior(theta) + xp.sum(logf, axis=-1)
        return logp, self.grad_log_prior(theta) + r @ self.X

    def hess_log_lik(self, theta: Array, idx: Array | None = None) -> Array:
        if idx is None and isinstance(self.X, RowSource):
            return self._streamed(theta, self.hess_log_lik, "concat")
        eta, y, Xb = self._linear(theta, idx)
        w = self._terms(eta, y, want=(False, False, True))[2]
        Xb = self.X[None, ...] if Xb is None else Xb
        outer = Xb[..., :, None] * Xb[..., None, :]
        return -w[..., None, None] * outer

    def hess_log_lik_sum(self, theta: Array) -> Array:
        """The likelihood's Hessian summed over all data, ``-X^T diag(w) X`` per row of ``theta``: (chains, dim, dim).

        What :meth:`hess_log_lik` gives summed over the data, from one product with ``X`` instead of
        N outer products (:func:`sgmc.optimize.negative_hessian` uses it; data on disk go block by block).
        """
        xp = self.xp
        theta = xp.reshape(theta, (-1, self.dim))
        blocks = self.X.blocks() if isinstance(self.X, RowSource) else [(0, self.n_data, self.X)]
        out = xp.zeros((theta.shape[0], self.dim, self.dim), dtype=self.dtype, device=self.device)
        for start, stop, rows in blocks:
            b = xp.asarray(rows, dtype=self.dtype)
            w = self._terms(theta @ b.T, self.y[None, start:stop], want=(False, False, True))[2]
            out = out - xp.stack([(b * w[c, :][:, None]).T @ b for c in range(theta.shape[0])])
        return out

    def lipschitz(self, idx: Array | None = None) -> Array:
        xp = self.xp
        if isinstance(self.X, RowSource):  # data on disk: the rows asked for, or all of them in blocks
            if idx is not None:
                rows = self._rows(xp.reshape(idx, (-1,)))
                return xp.reshape(xp.sum(rows * rows, axis=-1), idx.shape) * self._eta_curvature
            parts = [xp.sum(xp.asarray(b) ** 2, axis=-1) for _, _, b in self.X.blocks()]
            return xp.concat(parts, axis=0) * self._eta_curvature
        sq = xp.sum(self.X * self.X, axis=-1) * self._eta_curvature
        return sq if idx is None else take_rows(xp, sq, idx)

    def prior_lipschitz(self) -> float:
        """Lipschitz constant of the prior gradient (1 / prior_var)."""
        return 1.0 / self.prior_var


# The parameters it shares with LogisticRegression are documented again: each class's help stands alone.
class LinearRegression(_GLM):
    """Bayesian linear regression with known noise variance and a conjugate Gaussian prior.

    y_i ~ N(x_i . theta, noise_var), theta ~ N(0, prior_var I). The posterior is Gaussian with
    precision ``X^T X / noise_var + I / prior_var`` (see :meth:`posterior`).

    Parameters
    ----------
    X : array, shape (n_data, dim)
    y : array, shape (n_data,)
    noise_var : float, default 1.0
    prior_var : float, default 10.0
    backend : str or Backend, optional
        Move ``X`` and ``y`` to this backend first (e.g. ``"cupy"``); by default the arrays decide.
    param_names : sequence of str, optional
        Names of the ``dim`` coefficients (:attr:`param_names`); by default the columns of ``X`` when
        it is a data frame, else ``beta[0]``, ``beta[1]``, ...

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.models import LinearRegression
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 3)); y = X @ np.array([1.0, -2.0, 0.5]) + rng.normal(size=200)
    >>> mean, cov = LinearRegression(X, y).posterior()
    >>> np.round(mean, 1)
    array([ 1. , -2. ,  0.5])
    """

    _native_kind = "linear"

    def __init__(self, X: Any, y: Any, noise_var: float = 1.0, prior_var: float = 10.0, *, backend: Any = None,
                 param_names: Any = None):
        super().__init__(X, y, prior_var=prior_var, backend=backend, param_names=param_names)
        self.noise_var = check_positive(noise_var, "noise_var")
        self._eta_curvature = 1.0 / self.noise_var
        self._native_param = self.noise_var

    def _terms(self, eta, y, want):
        resid = y - eta
        logf = None
        if want[0]:
            logf = -0.5 * resid * resid / self.noise_var - 0.5 * math.log(2.0 * math.pi * self.noise_var)
        r = resid / self.noise_var if want[1] else None
        w = self.xp.ones_like(eta) / self.noise_var if want[2] else None
        return logf, r, w

    def posterior(self) -> tuple[Array, Array]:
        """Closed-form posterior mean ``(dim,)`` and covariance ``(dim, dim)``."""
        xp = self.xp
        eye = xp.eye(self.dim, dtype=self.dtype, device=self.device)
        if isinstance(self.X, RowSource):  # X^T X and X^T y over blocks of rows read from disk
            xtx, xty = xp.zeros((self.dim, self.dim), dtype=self.dtype), xp.zeros((self.dim,), dtype=self.dtype)
            for start, stop, rows in self.X.blocks():
                b = xp.asarray(rows, dtype=self.dtype)
                xtx, xty = xtx + b.T @ b, xty + b.T @ self.y[start:stop]
        else:
            xtx, xty = self.X.T @ self.X, self.X.T @ self.y
        prec = xtx / self.noise_var + eye / self.prior_var
        cov = xp.linalg.inv(prec)
        cov = 0.5 * (cov + cov.T)
        mean = cov @ xty / self.noise_var
        return mean, cov


# The parameters it shares with LinearRegression are documented again: each class's help stands alone.
class LogisticRegression(_GLM):
    """Bayesian logistic regression with a Gaussian prior (the review's section 6.1 model).

    P(y_i = 1 | theta) = sigmoid(x_i . theta), theta ~ N(0, prior_var I), y_i in {0, 1}.

    Parameters
    ----------
    X : array, shape (n_data, dim)
    y : array, shape (n_data,), values 0 or 1
    prior_var : float, default 10.0
    backend : str or Backend, optional
        Move ``X`` and ``y`` to this backend first (e.g. ``"cupy"``); by default the arrays decide.
    param_names : sequence of str, optional
        Names of the ``dim`` coefficients (:attr:`param_names`); by default the columns of ``X`` when
        it is a data frame, else ``beta[0]``, ``beta[1]``, ...

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.models import LogisticRegression
    >>> X = np.array([[1.0, 0.5], [1.0, -1.0], [1.0, 2.0]]); y = np.array([1.0, 0.0, 1.0])
    >>> model = LogisticRegression(X, y)
    >>> model.grad_log_posterior(np.zeros(2)).shape
    (2,)
    """

    _eta_curvature = 0.25
    _native_kind = "logistic"

    def __init__(self, X: Any, y: Any, prior_var: float = 10.0, *, backend: Any = None, param_names: Any = None):
        super().__init__(X, y, prior_var=prior_var, backend=backend, param_names=param_names)
        xp = self.xp
        if not bool(xp.all((self.y == 0) | (self.y == 1))):
            msg = "`y` must contain only 0 and 1 for logistic regression"
            raise ValueError(msg)

    def _terms(self, eta, y, want):
        xp = self.xp
        # One exp per datum: e = exp(-|eta|) gives both the stable softplus and the sigmoid.
        e = xp.exp(-xp.abs(eta))
        logf = r = w = None
        if want[0]:
            # max(eta, 0) written as (eta + |eta|) / 2: the same values, and a derivative that autodiff
            # (jax.grad) gets right at eta = 0, where the kinks of max and |.| cancel.
            softplus = (0.5 * eta + 0.5 * xp.abs(eta)) + xp.log1p(e)
            logf = y * eta - softplus
        if want[1] or want[2]:
            inv = 1.0 / (1.0 + e)
            sig = xp.where(eta >= 0, inv, e * inv)
            if want[1]:
                r = y - sig
            if want[2]:
                w = sig * (1.0 - sig)
        return logf, r, w

    def predict_proba(self, theta: Array, X: Array) -> Array:
        """P(y = 1 | x, theta) for each row of ``X`` and each ``theta`` row: shape ``(chains, n)``."""
        xp = self.xp
        theta, _ = self._batched(theta)
        eta = theta @ X.T
        e = xp.exp(-xp.abs(eta))
        inv = 1.0 / (1.0 + e)
        return xp.where(eta >= 0, inv, e * inv)
