"""A Bayesian neural network classifier with one hidden layer, with analytic per-datum gradients.

The model of section 6.2 of Nemeth and Fearnhead (2021), "Stochastic gradient Markov chain Monte
Carlo": for an input x_i (a row vector of ``n_inputs`` values) and K classes,

    p(y_i = k | theta, x_i) = beta_k(theta, x_i),   beta = sigma(sigma(x_i B + b) A + a),

with sigma the softmax at both layers as the review writes it (``hidden="softmax"``, the default;
``"sigmoid"`` as in Chen et al. 2014, or ``"tanh"``, are options). The weights have Gaussian priors
A_kl ~ N(0, 1/lambda_A), B_jk ~ N(0, 1/lambda_B), a_l ~ N(0, 1/lambda_a), b_k ~ N(0, 1/lambda_b), and
the precisions lambda ~ Gamma(1, 1) (rate 1) are sampled too, on the log scale: with s = log lambda
the prior density of s is exp(s - e^s) (the Jacobian e^s included), so the log prior of one group of
m weights w and its s is, up to a constant,

    (m / 2 + 1) s - e^s (1 + |w|^2 / 2).

Layout of the flat parameter vector ``theta`` (:meth:`BayesianNeuralNetwork.unpack` and
:meth:`~BayesianNeuralNetwork.pack` convert), with D = ``n_inputs``, H = ``n_hidden``, K = ``n_classes``:

==========================  ===========  =================================
slice                       block        shape
==========================  ===========  =================================
``[0, D H)``                B            (D, H), row-major
``[D H, D H + H)``          b            (H,)
next H K                    A            (H, K), row-major
next K                      a            (K,)
last 4                      s            log(lambda_B, lambda_b, lambda_A, lambda_a)
==========================  ===========  =================================

so ``dim = D H + H + H K + K + 4`` (79,514 for 784-100-10). Gradients are analytic and batched over
chains (back-propagation written with array-API matrix products): a minibatch gradient gathers the
rows once and never forms the per-datum gradients.

``X`` may stay on disk (a :class:`numpy.memmap`, zarr or Dask array, :mod:`sgmc._blocks`): a minibatch
reads only its rows, and the full-data passes (the control-variate centre, SVRG's snapshots) go
through the rows in blocks; the labels are read into memory.
"""

from __future__ import annotations

import math
from typing import Any

from .._array_api import Array, array_namespace, as_float_array, check_finite, device_of
from .._blocks import (RowSource, check_dtype, check_finite_blocks, is_out_of_core, refuse_backend, row_blocks, take,
                       to_memory)
from .._param_names import block_names, check_param_names
from .._validation import check_choice, check_int
from .base import Model, as_data_array, on_backend, take_rows

__all__ = ["BayesianNeuralNetwork", "log_loss"]

_HIDDEN = ("softmax", "sigmoid", "tanh")


def _log_softmax(xp: Any, z: Array) -> Array:
    z = z - xp.max(z, axis=-1, keepdims=True)
    return z - xp.log(xp.sum(xp.exp(z), axis=-1, keepdims=True))


class BayesianNeuralNetwork(Model):
    """Posterior of a one-hidden-layer softmax classifier with Gamma(1, 1) prior precisions.

    Parameters
    ----------
    X : array (N, n_inputs)
        Inputs (for images, pixels scaled to [0, 1]); a :class:`numpy.memmap`, zarr or Dask array of
        float32 or float64 stays on disk and is read by rows (``docs/big-data.md``).
    y : array (N,)
        Integer class labels in ``0, ..., n_classes - 1``.
    n_hidden : int, default 100
    n_classes : int, optional
        Default: ``max(y) + 1``.
    hidden : {"softmax", "sigmoid", "tanh"}, default "softmax"
        Hidden-layer activation; the review uses the softmax.
    backend : str, optional
        Move the data to this backend first.
    param_names : sequence of str, optional
        Names of the ``dim`` coordinates (:attr:`param_names`); by default by block and index:
        ``B[j,k]``, ``b[k]``, ``A[k,l]``, ``a[l]``, then ``log_lambda_B``, ``log_lambda_b``,
        ``log_lambda_A``, ``log_lambda_a``.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.models import BayesianNeuralNetwork
    >>> r = np.random.default_rng(0)
    >>> model = BayesianNeuralNetwork(r.random((50, 4)), r.integers(0, 3, 50), n_hidden=5)
    >>> model.dim                      # 4*5 + 5 + 5*3 + 3 + 4
    47
    >>> theta = r.normal(size=(2, model.dim))
    >>> model.grad_log_lik_sum(theta, np.zeros((2, 10), dtype=np.int64)).shape
    (2, 47)
    >>> model.predict_proba(theta, r.random((7, 4))).shape
    (2, 7, 3)
    """

    def __init__(self, X: Any, y: Any, n_hidden: int = 100, n_classes: int | None = None, *,
                 hidden: str = "softmax", backend: Any = None, param_names: Any = None):
        on_disk = is_out_of_core(X)
        if on_disk:  # rows read when needed (sgmc._blocks); the labels come into memory
            refuse_backend(backend, f"`X` a {type(X).__name__}")
            X = X if isinstance(X, RowSource) else RowSource(X, "X")
            check_dtype(X, "f", "float32 or float64 values")
            y = as_data_array(to_memory(y), "y")
            xp = array_namespace(y, names=("y",))
        else:
            X = as_data_array(X, "X")
            y = as_data_array(y, "y")
            X, y = on_backend(backend, X, y)
            xp = array_namespace(X, y, names=("X", "y"))
        if X.ndim != 2 or X.shape[0] == 0:
            msg = f"`X` must be 2-D (n_data, n_inputs) with at least one row; got shape {tuple(X.shape)}"
            raise ValueError(msg)
        if y.ndim != 1 or y.shape[0] != X.shape[0]:
            msg = f"`y` must be 1-D with {X.shape[0]} labels to match `X`; got shape {tuple(y.shape)}"
            raise ValueError(msg)
        if on_disk:
            dtype = xp.float64 if X.dtype.itemsize == 8 else xp.float32
            check_finite_blocks(X)
        else:
            dtype = X.dtype if xp.isdtype(X.dtype, "real floating") else xp.float64
            X = as_float_array(xp, X, dtype, "X")
            check_finite(xp, X, "X")
        labels = xp.astype(y, xp.int64) if not xp.isdtype(y.dtype, "real floating") else None
        if labels is None or not bool(xp.all(xp.astype(labels, y.dtype) == y)):
            msg = f"`y` must hold integer class labels; got dtype {y.dtype}"
            raise ValueError(msg)
        top = int(xp.max(labels)) + 1
        n_classes = top if n_classes is None else check_int(n_classes, "n_classes", minimum=2)
        if int(xp.min(labels)) < 0 or top > n_classes:
            msg = f"`y` must hold labels in 0..{n_classes - 1}; got labels from {int(xp.min(labels))} to {top - 1}"
            raise ValueError(msg)
        self.n_inputs = int(X.shape[1])
        self.n_hidden = check_int(n_hidden, "n_hidden", minimum=1)
        self.n_classes = int(n_classes)
        self.hidden = check_choice(hidden, "hidden", _HIDDEN)
        D, H, K = self.n_inputs, self.n_hidden, self.n_classes
        self.sizes = (D * H, H, H * K, K)
        super().__init__(X.shape[0], sum(self.sizes) + 4, xp, dtype, device=device_of(labels))
        if param_names is None:
            param_names = block_names([("B", (D, H)), ("b", (H,)), ("A", (H, K)), ("a", (K,)), ("log_lambda_B", ()),
                                       ("log_lambda_b", ()), ("log_lambda_A", ()), ("log_lambda_a", ())])
        self.param_names = check_param_names(param_names, self.dim)
        self.X = X
        self.labels = labels
        # one-hot labels: N x K numbers in memory, or made per minibatch for data on disk
        self.Y = None if on_disk else self._one_hot(labels)

    @property
    def stream_rows(self) -> int | None:
        """Rows per block of a full pass over ``X`` read from disk (``None`` for data in memory)."""
        return self.X.block_rows if isinstance(self.X, RowSource) else None

    # -- layout ---------------------------------------------------------------------------------
    def _one_hot(self, labels: Array) -> Array:
        xp = self.xp
        k = xp.arange(self.n_classes, device=self.device)
        return xp.astype(labels[..., None] == k, self.dtype)

    def unpack(self, theta: Array) -> tuple[Array, Array, Array, Array, Array]:
        """``(B, b, A, a, s)`` from ``theta`` (..., dim): shapes (..., D, H), (..., H), (..., H, K), (..., K), (..., 4).

        ``s`` is ``log(lambda_B, lambda_b, lambda_A, lambda_a)``.
        """
        xp = self.xp
        D, H, K = self.n_inputs, self.n_hidden, self.n_classes
        lead = tuple(theta.shape[:-1])
        o = [0]
        for m in self.sizes:
            o.append(o[-1] + m)
        B = xp.reshape(theta[..., o[0]:o[1]], (*lead, D, H))
        b = theta[..., o[1]:o[2]]
        A = xp.reshape(theta[..., o[2]:o[3]], (*lead, H, K))
        a = theta[..., o[3]:o[4]]
        s = theta[..., o[4]:]
        return B, b, A, a, s

    def pack(self, B: Array, b: Array, A: Array, a: Array, s: Array) -> Array:
        """The flat ``theta`` (..., dim) from the blocks of :meth:`unpack` (the inverse)."""
        xp = self.xp
        lead = tuple(b.shape[:-1])
        parts = [xp.reshape(B, (*lead, -1)), b, xp.reshape(A, (*lead, -1)), a, s]
        return xp.concat(parts, axis=-1)

    # -- prior ------------------------------------------------------------------------------------
    def _groups(self, theta: Array) -> list[tuple[int, int]]:
        o, out = 0, []
        for m in self.sizes:
            out.append((o, o + m))
            o += m
        return out

    def log_prior(self, theta: Array) -> Array:
        """Gaussian weights given log precisions s, and s from the log of a Gamma(1, 1); up to a constant."""
        xp = self.xp
        out = xp.zeros(theta.shape[:-1], dtype=theta.dtype, device=device_of(theta))
        for g, (lo, hi) in enumerate(self._groups(theta)):
            w = theta[..., lo:hi]
            s = theta[..., self.dim - 4 + g]
            m = hi - lo
            out = out + (0.5 * m + 1.0) * s - xp.exp(s) * (1.0 + 0.5 * xp.sum(w * w, axis=-1))
        return out - 0.5 * (self.dim - 4) * math.log(2.0 * math.pi)

    def grad_log_prior(self, theta: Array) -> Array:
        xp = self.xp
        parts, ds = [], []
        for g, (lo, hi) in enumerate(self._groups(theta)):
            w = theta[..., lo:hi]
            lam = xp.exp(theta[..., self.dim - 4 + g: self.dim - 3 + g])
            parts.append(-lam * w)
            ds.append((0.5 * (hi - lo) + 1.0) - lam * (1.0 + 0.5 * xp.sum(w * w, axis=-1, keepdims=True)))
        return xp.concat(parts + ds, axis=-1)

    # -- network ----------------------------------------------------------------------------------
    def _activate(self, h: Array) -> Array:
        xp = self.xp
        if self.hidden == "softmax":
            return xp.exp(_log_softmax(xp, h))
        if self.hidden == "sigmoid":
            return 1.0 / (1.0 + xp.exp(-h))
        return xp.tanh(h)

    def _forward(self, theta: Array, Xb: Array) -> tuple[Array, Array, tuple]:
        """Hidden activations z (chains, n, H) and output log-probabilities (chains, n, K)."""
        B, b, A, a, _ = self.unpack(theta)
        z = self._activate(Xb @ B + b[..., None, :])
        return z, _log_softmax(self.xp, z @ A + a[..., None, :]), (A,)

    def _rows(self, idx: Array | None) -> tuple[Array, Array]:
        if isinstance(self.X, RowSource):  # data on disk: read the rows idx only
            return take(self.xp, self.X, idx, self.dtype), self._one_hot(take_rows(self.xp, self.labels, idx))
        if idx is None:
            return self.X, self.Y[None, ...]
        return take_rows(self.xp, self.X, idx), take_rows(self.xp, self.Y, idx)

    def _streamed(self, theta: Array, fn: Any, weights: Array | None = None) -> list:
        """``fn(theta, idx, w)`` over blocks of the rows of ``X`` on disk (a full-data pass), as a list."""
        xp, chains = self.xp, theta.shape[0]
        parts = []
        for start, stop in row_blocks(self.n_data, max(1, self.X.block_rows // chains)):
            idx = xp.broadcast_to(xp.arange(start, stop, dtype=xp.int64)[None, :], (chains, stop - start))
            parts.append(fn(theta, idx, None if weights is None else weights[..., start:stop]))
        return parts

    def predict_proba(self, theta: Array, X: Array) -> Array:
        """Class probabilities beta(theta, x) for the rows of ``X`` (n, n_inputs): shape (chains, n, K)."""
        theta, _ = self._batched(theta)
        return self.xp.exp(self._forward(theta, X)[1])

    def log_lik(self, theta: Array, idx: Array | None = None) -> Array:
        if idx is None and isinstance(self.X, RowSource):
            return self.xp.concat(self._streamed(theta, lambda t, i, w: self.log_lik(t, i)), axis=1)
        Xb, Yb = self._rows(idx)
        return self.xp.sum(Yb * self._forward(theta, Xb)[1], axis=-1)

    def _backward(self, theta: Array, Xb: Array, Yb: Array, weights: Array | None, per_datum: bool):
        xp = self.xp
        z, logp, (A,) = self._forward(theta, Xb)
        G = Yb - xp.exp(logp)  # d log f / d logits, (chains, n, K)
        if weights is not None:
            G = G * weights[..., None]
        dz = G @ xp.matrix_transpose(A)  # (chains, n, H)
        if self.hidden == "softmax":
            dh = z * (dz - xp.sum(dz * z, axis=-1, keepdims=True))
        elif self.hidden == "sigmoid":
            dh = dz * z * (1.0 - z)
        else:
            dh = dz * (1.0 - z * z)
        if per_datum:
            n = dh.shape[-2]
            Xf = Xb if Xb.ndim == 3 else xp.broadcast_to(Xb, (dh.shape[0], *Xb.shape))
            dB = xp.reshape(Xf[..., :, None] * dh[..., None, :], (*dh.shape[:-2], n, -1))
            dA = xp.reshape(z[..., :, None] * G[..., None, :], (*dh.shape[:-2], n, -1))
            zeros = xp.zeros((*dh.shape[:-1], 4), dtype=dh.dtype, device=device_of(dh))
            return xp.concat([dB, dh, dA, G, zeros], axis=-1)
        dB = xp.matrix_transpose(Xb) @ dh  # (chains, D, H)
        dA = xp.matrix_transpose(z) @ G  # (chains, H, K)
        chains = dh.shape[0]
        zeros = xp.zeros((chains, 4), dtype=dh.dtype, device=device_of(dh))
        return xp.concat([xp.reshape(dB, (chains, -1)), xp.sum(dh, axis=-2),
                          xp.reshape(dA, (chains, -1)), xp.sum(G, axis=-2), zeros], axis=-1)

    def grad_log_lik(self, theta: Array, idx: Array | None = None) -> Array:
        """Per-datum gradients (chains, batch, dim); memory ``batch * dim`` per chain (small problems, tests)."""
        if idx is None and isinstance(self.X, RowSource):
            return self.xp.concat(self._streamed(theta, lambda t, i, w: self.grad_log_lik(t, i)), axis=1)
        Xb, Yb = self._rows(idx)
        return self._backward(theta, Xb, Yb, None, True)

    def grad_log_lik_sum(self, theta: Array, idx: Array | None = None, weights: Array | None = None) -> Array:
        if weights is not None and idx is None:
            weights = weights[None, ...] if weights.ndim == 1 else weights
        if idx is None and isinstance(self.X, RowSource):  # a full pass over X on disk, block by block
            parts = self._streamed(theta, self.grad_log_lik_sum, weights)
            out = parts[0]
            for p in parts[1:]:
                out = out + p
            return out
        Xb, Yb = self._rows(idx)
        return self._backward(theta, Xb, Yb, weights, False)

    def grad_log_lik_diff_sum(self, theta: Array, centre: Array, idx: Array, weights: Array | None = None) -> Array:
        """The control-variate difference at ``theta`` and ``centre`` from one gather of the rows."""
        Xb, Yb = self._rows(idx)
        return (self._backward(theta, Xb, Yb, weights, False)
                - self._backward(centre, Xb, Yb, weights, False))

    def _moved(self, backend: Any) -> None:
        return None

    def __repr__(self) -> str:
        return (f"BayesianNeuralNetwork(n_data={self.n_data}, sizes={self.n_inputs}-{self.n_hidden}-"
                f"{self.n_classes}, hidden={self.hidden!r}, dim={self.dim})")


def log_loss(probs: Array, labels: Array) -> Array:
    """Multiclass log-loss (review eq. 15): ``-mean_i log probs[..., i, y_i]``, over the last two axes but one."""
    xp = array_namespace(probs)
    k = xp.arange(probs.shape[-1], device=device_of(probs))
    onehot = xp.astype(labels[..., None] == k, probs.dtype)
    p = xp.sum(onehot * probs, axis=-1)
    # a probability that underflowed to 0 counts as the smallest positive number, not as infinity
    return -xp.mean(xp.log(xp.maximum(p, xp.finfo(probs.dtype).tiny)), axis=-1)
