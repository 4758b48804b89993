"""Riemannian metrics G(theta) for SGRLD and SGRHMC, with the divergence terms the samplers need.

SGRLD (Patterson and Teh 2013) takes D = G(theta)^{-1} in the general recipe (Ma et al. 2015; review
section 3, Table 1), so its drift carries Gamma_i(theta) = sum_j d/d theta_j (G^{-1})_{ij}. SGRHMC
takes Q_{rho theta} = G^{-1/2} and needs Gamma_rho,i = sum_j d/d theta_j (G^{-1/2})_{ij}. Both terms are
computed here from derivatives of G supplied by the user (or by a model), never by finite
differences:

* a diagonal metric g(theta) (chains, d) with ``grad`` giving dg_i / d theta_i (chains, d):
  Gamma_i = -g_i'/g_i^2 and, for SGRHMC, Gamma_rho,i = -(1/2) g_i' g_i^{-3/2};
* a dense metric G(theta) (chains, d, d) with ``grad`` giving dG[..., j, k, l] = dG_kl / d theta_j:
  Gamma_i = -sum_j [A (dG/d theta_j) A]_{ij} with A = G^{-1} (SGRHMC needs a diagonal or constant
  dense metric, since the derivative of G^{-1/2} has no closed form in general);
* a constant metric (an array): Gamma = 0.

:class:`GLMFisherMetric` is the expected Fisher information of a generalised linear model plus the
prior precision, G = sum_i w(eta_i) x_i x_i^T + I / prior_var, whose divergence term has the closed
form Gamma = -A sum_i w'(eta_i) (x_i^T A x_i) x_i (w' the derivative of the GLM weight in eta).
"""

from __future__ import annotations

from typing import Any

from .._array_api import Array, array_namespace, device_of, is_array

__all__ = ["Metric", "GLMFisherMetric", "sym_sqrt", "matvec"]


def matvec(m: Array, v: Array) -> Array:
    """Batched matrix-vector product (chains, d, d) x (chains, d) -> (chains, d)."""
    return (m @ v[..., None])[..., 0]


def sym_sqrt(xp: Any, m: Array) -> Array:
    """Symmetric square root of positive semi-definite matrices (..., d, d), negative eigenvalues clipped."""
    w, v = xp.linalg.eigh(m)
    w = xp.sqrt(xp.clip(w, min=0.0))
    return (v * w[..., None, :]) @ xp.matrix_transpose(v)


class Metric:
    """A metric G(theta): a function of the position, or a constant array.

    Parameters
    ----------
    G : callable or array
        ``G(theta)`` with ``theta`` (chains, d) returns (chains, d) for a diagonal metric
        (``diagonal=True``) or (chains, d, d); an array of shape (d,) (diagonal) or (d, d) is a
        constant metric, for which Gamma = 0.
    grad : callable, optional
        Derivatives of a position-dependent G: ``grad(theta)`` returns dG_ii / d theta_i (chains, d)
        for a diagonal metric, or an array (chains, d, d, d) with entry ``[c, j, k, l]`` = dG_kl / d theta_j
        for a dense one. Required when ``G`` is callable, unless ``constant=True``.
    diagonal : bool, default False
        ``G(theta)`` returns the diagonal only (ignored for constant arrays, whose shape says).
    constant : bool, default False
        Declare a callable G independent of theta (Gamma = 0).
    n_evals : float, default 0
        Per-datum evaluations per chain that one evaluation of G and its derivative term at a position
        makes (N for a metric computed from every datum, such as a Fisher information); SGRLD and
        SGRHMC report them in their :class:`~sgmc.samplers.StepInfo` so that the trace's data passes
        are true.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.samplers import Metric
    >>> m = Metric(lambda th: 1.0 + th**2, grad=lambda th: 2.0 * th, diagonal=True)
    >>> m.gamma(np.array([[1.0]]))                      # d/dtheta 1/(1 + theta^2) at 1
    array([[-0.5]])
    """

    def __init__(self, G: Any, grad: Any = None, *, diagonal: bool = False, constant: bool = False,
                 n_evals: float = 0.0):
        self.G = G
        self.grad = grad
        if isinstance(n_evals, bool) or not isinstance(n_evals, (int, float)) or not n_evals >= 0:
            msg = f"`n_evals` must be a non-negative number of per-datum evaluations; got {n_evals!r}"
            raise ValueError(msg)
        self.n_evals = float(n_evals)
        if is_array(G):
            if G.ndim not in (1, 2) or (G.ndim == 2 and G.shape[0] != G.shape[1]):
                msg = f"`G` as an array must have shape (d,) or (d, d); got {tuple(G.shape)}"
                raise ValueError(msg)
            self.diagonal = G.ndim == 1
            self.constant = True
        elif callable(G):
            self.diagonal = bool(diagonal)
            self.constant = bool(constant)
            if grad is None and not self.constant:
                msg = (
                    "`grad` is required for a metric G(theta) that depends on theta: pass the derivatives "
                    "of G (see sgmc.samplers.Metric), or constant=True for a constant metric"
                )
                raise ValueError(msg)
            if grad is not None and not callable(grad):
                msg = f"`grad` must be a callable of theta; got {type(grad).__name__}"
                raise TypeError(msg)
        else:
            msg = f"`G` must be a callable of theta or an array; got {type(G).__name__}"
            raise TypeError(msg)

    def value(self, theta: Array) -> Array:
        """G at every chain: (chains, d) for a diagonal metric, else (chains, d, d)."""
        if callable(self.G) and not is_array(self.G):
            return self.G(theta)
        xp = array_namespace(theta)
        return xp.broadcast_to(self.G[None, ...], (theta.shape[0], *self.G.shape))

    def _once(self, fn: Any, theta: Array) -> Array:
        """``fn(theta)``, computed on one chain and broadcast when the metric is constant."""
        if not self.constant or theta.shape[0] == 1:
            return fn(theta)
        xp = array_namespace(theta)
        one = fn(theta[:1, ...])
        return xp.broadcast_to(one, (theta.shape[0], *one.shape[1:]))

    def inverse(self, theta: Array) -> Array:
        """D = G^{-1}: (chains, d) for a diagonal metric, else (chains, d, d)."""
        if self.diagonal:
            return self._once(lambda t: 1.0 / self.value(t), theta)
        return self._once(lambda t: array_namespace(t).linalg.inv(self.value(t)), theta)

    def inverse_sqrt(self, theta: Array) -> Array:
        """G^{-1/2} (the symmetric root): (chains, d) or (chains, d, d)."""
        xp = array_namespace(theta)
        if self.diagonal:
            return self._once(lambda t: 1.0 / xp.sqrt(self.value(t)), theta)
        return self._once(lambda t: sym_sqrt(xp, self.inverse(t)), theta)

    def inverse_and_gamma(self, theta: Array) -> tuple[Array, Array]:
        """``(inverse(theta), gamma(theta))``: what one SGRLD step needs, with :attr:`n_evals` its cost."""
        inv = self.inverse(theta)
        return inv, self.gamma(theta, inv)

    def gamma(self, theta: Array, inverse: Array | None = None) -> Array:
        """Gamma_i = sum_j d/d theta_j (G^{-1})_{ij}, shape (chains, d); zero for a constant metric."""
        xp = array_namespace(theta)
        if self.constant:
            return xp.zeros_like(theta)
        if self.diagonal:
            g = self.value(theta)
            return -self.grad(theta) / (g * g)
        a = self.inverse(theta) if inverse is None else inverse
        dg = self.grad(theta)                                   # (chains, j, k, l)
        # sum_j [A dG_j A]_{ij} = sum_j sum_{k,l} A_ik dG_jkl A_lj
        t = a[:, None, :, :] @ dg @ a[:, None, :, :]            # (chains, j, i, l): [A dG_j A]_{il}
        eye = xp.eye(theta.shape[-1], dtype=theta.dtype, device=device_of(theta))
        # pick l = j and sum over j
        return -xp.sum(xp.sum(t * eye[None, :, None, :], axis=-1), axis=1)

    def gamma_sqrt(self, theta: Array) -> Array:
        """Gamma_rho,i = sum_j d/d theta_j (G^{-1/2})_{ij}, shape (chains, d) (SGRHMC)."""
        xp = array_namespace(theta)
        if self.constant:
            return xp.zeros_like(theta)
        if self.diagonal:
            g = self.value(theta)
            return -0.5 * self.grad(theta) / (g * xp.sqrt(g))
        msg = (
            "SGRHMC needs d/dtheta G^{-1/2}, which has no closed form for a dense position-dependent metric; "
            "use a diagonal metric (diagonal=True) or a constant one"
        )
        raise NotImplementedError(msg)

    def __repr__(self) -> str:
        kind = "constant" if self.constant else "position-dependent"
        shape = "diagonal" if self.diagonal else "dense"
        return f"Metric({kind}, {shape})"


class GLMFisherMetric(Metric):
    """Expected Fisher information of a GLM plus the prior precision (full data, O(N d^2) per call).

    G(theta) = sum_i w(eta_i) x_i x_i^T + I / prior_var with eta_i = x_i . theta and w = -d^2 log f / d eta^2
    (logistic: sigma (1 - sigma); linear: 1 / noise_var, a constant metric equal to the posterior
    precision). The divergence term is Gamma = -A sum_i w'(eta_i) (x_i^T A x_i) x_i with A = G^{-1}.

    Cost: G and Gamma at a position take one pass through the data (the weights, outer products and
    quadratic forms of every datum), reported as ``n_evals = N`` per chain and step. The linear
    model's metric is constant: it is computed once, when the metric is made, and costs nothing per step.

    Parameters
    ----------
    model : LogisticRegression or LinearRegression

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.models import LogisticRegression
    >>> from sgmc.samplers import GLMFisherMetric
    >>> X = np.random.default_rng(0).normal(size=(50, 2)); y = (X[:, 0] > 0).astype(float)
    >>> GLMFisherMetric(LogisticRegression(X, y)).value(np.zeros((3, 2))).shape
    (3, 2, 2)
    """

    def __init__(self, model: Any):
        if not (hasattr(model, "X") and hasattr(model, "_terms") and hasattr(model, "prior_var")):
            msg = (
                f"GLMFisherMetric needs a generalised linear model (LogisticRegression, LinearRegression); "
                f"got {type(model).__name__}"
            )
            raise TypeError(msg)
        self.model = model
        self.diagonal = False
        self.constant = type(model).__name__ == "LinearRegression"
        self.G = self.value
        self.grad = None
        self.n_evals = 0.0 if self.constant else float(model.n_data)
        self._fixed = None
        if self.constant:  # the metric and its inverse, computed once here (set-up, not per step)
            theta = model.zeros(1)
            w, _ = self._weights(theta)
            g = self._assemble(theta, w)[0, ...]
            self._fixed = (g, model.xp.linalg.inv(g))

    def _constant(self) -> tuple[Array, Array]:
        return self._fixed

    def _weights(self, theta: Array) -> tuple[Array, Array]:
        """w(eta) and w'(eta), each (chains, N)."""
        m = self.model
        xp = m.xp
        eta = theta @ m.X.T
        w = m._terms(eta, m.y[None, :], want=(False, False, True))[2]
        if self.constant:
            return w, xp.zeros_like(w)
        # logistic: w = s (1 - s), w' = w (1 - 2 s); s from w and the sign of eta
        e = xp.exp(-xp.abs(eta))
        inv = 1.0 / (1.0 + e)
        s = xp.where(eta >= 0, inv, e * inv)
        return w, w * (1.0 - 2.0 * s)

    def _assemble(self, theta: Array, w: Array) -> Array:
        m = self.model
        xp = m.xp
        g = (xp.matrix_transpose(m.X)[None, :, :] * w[:, None, :]) @ m.X
        eye = xp.eye(m.dim, dtype=m.dtype, device=m.device)
        return g + eye[None, :, :] / m.prior_var

    def value(self, theta: Array) -> Array:
        if self.constant:
            return self.model.xp.broadcast_to(self._constant()[0][None, ...], (theta.shape[0], self.model.dim,
                                                                           self.model.dim))
        w, _ = self._weights(theta)
        return self._assemble(theta, w)

    def inverse(self, theta: Array) -> Array:
        if self.constant:
            return self.model.xp.broadcast_to(self._constant()[1][None, ...], (theta.shape[0], self.model.dim,
                                                                           self.model.dim))
        return self.model.xp.linalg.inv(self.value(theta))

    def _gamma(self, a: Array, dw: Array) -> Array:
        xp = self.model.xp
        X = self.model.X
        q = xp.sum((X[None, :, :] @ a) * X[None, :, :], axis=-1)       # (chains, N): x_i^T A x_i
        v = (dw * q) @ X                                                # (chains, d)
        return -matvec(a, v)

    def gamma(self, theta: Array, inverse: Array | None = None) -> Array:
        xp = self.model.xp
        if self.constant:
            return xp.zeros_like(theta)
        a = self.inverse(theta) if inverse is None else inverse
        _, dw = self._weights(theta)
        return self._gamma(a, dw)

    def inverse_and_gamma(self, theta: Array) -> tuple[Array, Array]:
        """G^{-1} and Gamma at ``theta`` from one evaluation of the weights (one pass, ``n_evals``)."""
        xp = self.model.xp
        if self.constant:
            return self.inverse(theta), xp.zeros_like(theta)
        w, dw = self._weights(theta)
        a = xp.linalg.inv(self._assemble(theta, w))
        return a, self._gamma(a, dw)
