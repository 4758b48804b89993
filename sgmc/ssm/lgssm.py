"""Linear Gaussian state space model (Aicher 2020, thesis section 3.4.2, Eqs. 3.55-3.72).

    x_0 ~ N(m0, P0),   x_t = A x_{t-1} + N(0, Q),   y_t = C x_t + N(0, R),

with ``x_t`` in R^n and ``y_t`` in R^m. The scalar model of the thesis's particle experiments
(``x_t = phi x_{t-1} + N(0, sigma^2)``, ``y_t = x_t + N(0, tau^2)``) is the case ``n = m = 1``.

Parameterisation (thesis section 3.4.2): ``theta`` stacks, in this order,

* ``A`` (n x n, row-major), unconstrained;
* the free entries of ``C`` (m x n, row-major): the leading ``k x k`` block, ``k = min(n, m)``,
  is fixed to the identity for identifiability (for ``n = m``, ``C = I`` and nothing is free);
* ``psi_Q``: the lower triangle (row-major) of a Cholesky factor of the precision,
  ``psi_Q psi_Q^T = Q^{-1}``;
* ``psi_R``: likewise for ``R^{-1}``.

For the scalar model ``theta = (phi, 1/sigma, 1/tau)``. The ``psi`` entries are unconstrained real
numbers (a factor and its sign-flipped columns give the same precision); the likelihood vanishes at
a singular ``psi``, so a chain does not cross from one sign to the other.

Priors (thesis appendix A.2.1, Eqs. A.60-A.61): ``A | Q`` matrix normal with mean 0, row covariance
``Q`` and column covariance ``v I`` (``v = 100``); ``Q^{-1}`` and ``R^{-1}`` Wishart with ``nu = n + 1``
(``m + 1``) degrees of freedom and mean ``I`` (density ``|L|^{(nu-n-1)/2} exp(-nu tr(L)/2)``),
carried to ``psi`` with the Cholesky Jacobian ``2^n prod_i psi_ii^{n-i+1}``; free entries of ``C``
N(0, v). Gradients by Fisher's identity from the Kalman smoother (:mod:`sgmc.ssm.kalman`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .. import backends
from .._array_api import Array, array_namespace, check_finite, is_array
from .._model_args import model_array
from .._validation import check_alloc, check_int, check_positive
from .base import StateSpaceModel, as_series, check_theta
from .fisher import SSMFisherMetric
from .kalman import kalman_loglik, kalman_stats, precision_grads, stationary_covariance
from .subsequence import Windows

__all__ = ["LGSSM", "LGSSMParams"]

#: Host memory per model parameter beyond its value: its name and its places in the index tables.
_BYTES_PER_PARAM = 160


class LGSSMParams(NamedTuple):
    """Natural parameters of the linear Gaussian model, with the leading axes of ``theta``."""

    A: Array  # (..., n, n)
    Q: Array  # (..., n, n)
    C: Array  # (..., m, n)
    R: Array  # (..., m, m)


def simulation_theta(model: Any, theta: Any) -> Array:
    """The one ``theta`` a simulator runs at, as a finite ``(1, dim)`` array; errors name ``theta``."""
    xp = model.xp
    theta = model_array(model, theta, "theta", f"an array of shape ({model.dim},)", refuse=(str, bytes, dict))
    if tuple(theta.shape) not in ((model.dim,), (1, model.dim)):
        msg = f"`theta` must have shape ({model.dim},); got {tuple(theta.shape)}"
        raise ValueError(msg)
    theta = xp.reshape(theta, (1, model.dim))
    check_finite(xp, theta, "theta")
    return theta


def _selector(xp, size: int, positions: list, dtype, device) -> Array:
    """0/1 matrix (size, len(positions)) that scatters a packed vector into a flat matrix."""
    eye = xp.eye(size, dtype=dtype, device=device)
    if not positions:
        return xp.zeros((size, 0), dtype=dtype, device=device)
    idx = xp.asarray(positions, dtype=xp.int64, device=device)
    return xp.take(eye, idx, axis=1)


class LGSSM(StateSpaceModel):
    """Linear Gaussian state space model over ``theta = (A, free C, psi_Q, psi_R)``.

    Parameters
    ----------
    y : array (T,) or (T, m)
        Observations.
    state_dim : int, optional
        ``n``; default ``m``.
    m0 : array (n,), optional
        Mean of ``x_0`` (default 0).
    P0 : array (n, n) or float, optional
        Covariance of ``x_0`` (default the identity). ``x_0``'s distribution does not depend on
        ``theta``. Buffered windows that start after the first observation start instead from the
        stationary distribution at ``theta`` (``P0`` where ``A`` is not stable).
    prior_var : float, default 100
        ``v``: column variance of the matrix-normal prior of ``A`` and variance of free ``C`` entries.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc import backends
    >>> from sgmc.ssm import LGSSM
    >>> theta = np.array([0.9, 2.0, 1.0])                # phi, 1/sigma, 1/tau
    >>> x, y = LGSSM.simulate_scalar(backends.default_rng(0), 200, theta)
    >>> model = LGSSM(y)
    >>> model.dim, model.param_names
    (3, ('A[0,0]', 'psi_Q[0,0]', 'psi_R[0,0]'))
    >>> model.grad_log_posterior(theta).shape
    (3,)
    """

    #: the exact gradient comes with the likelihood, from one pass of :meth:`log_lik_and_grad`
    grad_log_lik = StateSpaceModel._grad_from_pair

    def __init__(self, y: Any, state_dim: int | None = None, *, m0: Any = None, P0: Any = None, prior_var: float = 100.0):
        y_arr = as_series(y, "y")[1]  # (T, m), finite, real: checked before its shape is read
        m = int(y_arr.shape[-1])
        n = m if state_dim is None else check_int(state_dim, "state_dim")
        n_params = n * n + m * n + n * (n + 1) // 2 + m * (m + 1) // 2
        scatter = 8 * ((n * n) ** 2 + (m * n) ** 2 + (m * m) ** 2)  # the identities _selector cuts columns from
        check_alloc(n_params * _BYTES_PER_PARAM + scatter + 8 * int(y_arr.shape[0]) * n * (n + 1), "state_dim",
                    state_dim, "the parameter tables, the (n^2, n^2) scatter matrices and the (T, n, n) covariances")
        k = min(n, m)
        c_free = [i * n + j for i in range(m) for j in range(n) if not (i < k and j < k)]
        tq = [i * n + j for i in range(n) for j in range(i + 1)]
        tr = [i * m + j for i in range(m) for j in range(i + 1)]
        dim = n * n + len(c_free) + len(tq) + len(tr)
        super().__init__(y_arr, dim, n, m)
        xp, dt, dev = self.xp, self.dtype, self.device
        self.n, self.m = n, m
        self.prior_var = check_positive(prior_var, "prior_var")
        self._sizes = (n * n, len(c_free), len(tq), len(tr))
        self._E_C = _selector(xp, m * n, c_free, dt, dev)
        self._E_Q = _selector(xp, n * n, tq, dt, dev)
        self._E_R = _selector(xp, m * m, tr, dt, dev)
        C0 = [1.0 if (i < k and j < k and i == j) else 0.0 for i in range(m) for j in range(n)]
        self._C0 = xp.reshape(xp.asarray(C0, dtype=dt, device=dev), (m, n))
        self._diagQ = [i * (i + 1) // 2 + i for i in range(n)]  # positions of psi_Q diagonal in the packed vector
        self._diagR = [i * (i + 1) // 2 + i for i in range(m)]
        self.m0 = xp.zeros((n,), dtype=dt, device=dev) if m0 is None else self._as(m0, (n,), "m0")
        if P0 is None:
            self.P0 = xp.eye(n, dtype=dt, device=dev)
        elif not is_array(P0) and isinstance(P0, (int, float)):
            self.P0 = check_positive(P0, "P0") * xp.eye(n, dtype=dt, device=dev)
        else:
            self.P0 = self._as(P0, (n, n), "P0")
        names = [f"A[{i},{j}]" for i in range(n) for j in range(n)]
        names += [f"C[{p // n},{p % n}]" for p in c_free]
        names += [f"psi_Q[{p // n},{p % n}]" for p in tq]
        names += [f"psi_R[{p // m},{p % m}]" for p in tr]
        self.param_names = tuple(names)

    def _as(self, a, shape, name):
        a = a if is_array(a) else backends.asarray(a, backend=backends.get_backend(self.xp), dtype=self.dtype, device=self.device)
        a = self.xp.astype(a, self.dtype)
        if tuple(a.shape) != shape:
            msg = f"`{name}` must have shape {shape}; got {tuple(a.shape)}"
            raise ValueError(msg)
        return a

    # -- parameters -------------------------------------------------------------------------------
    def _split(self, theta: Array) -> tuple[Array, Array, Array, Array]:
        """(A, C, psi_Q, psi_R) matrices with the leading axes of ``theta``."""
        xp = self.xp
        n, m = self.n, self.m
        lead = tuple(theta.shape[:-1])
        a, c, q, r = self._sizes
        o = 0
        A = xp.reshape(theta[..., o : o + a], lead + (n, n))
        o += a
        C = self._C0 + xp.reshape(theta[..., o : o + c] @ xp.matrix_transpose(self._E_C), lead + (m, n))
        o += c
        psiQ = xp.reshape(theta[..., o : o + q] @ xp.matrix_transpose(self._E_Q), lead + (n, n))
        o += q
        psiR = xp.reshape(theta[..., o : o + r] @ xp.matrix_transpose(self._E_R), lead + (m, m))
        return A, C, psiQ, psiR

    def constrain(self, theta: Any) -> LGSSMParams:
        """Natural parameters ``(A, Q, C, R)`` of ``theta`` (..., dim)."""
        theta = theta if is_array(theta) else self.xp.asarray(theta, dtype=self.dtype, device=self.device)
        xp = self.xp
        A, C, psiQ, psiR = self._split(theta)
        Q = xp.linalg.inv(psiQ @ xp.matrix_transpose(psiQ))
        R = xp.linalg.inv(psiR @ xp.matrix_transpose(psiR))
        return LGSSMParams(A, 0.5 * (Q + xp.matrix_transpose(Q)), C, 0.5 * (R + xp.matrix_transpose(R)))

    def unconstrain(self, params: LGSSMParams) -> Array:
        """``theta`` of natural parameters (``psi`` with a positive diagonal)."""
        xp = self.xp
        A, Q, C, R = params
        lead = tuple(A.shape[:-2])
        psiQ = xp.linalg.cholesky(xp.linalg.inv(Q))
        psiR = xp.linalg.cholesky(xp.linalg.inv(R))
        parts = [
            xp.reshape(A, lead + (-1,)),
            xp.reshape(C, lead + (-1,)) @ self._E_C,
            xp.reshape(psiQ, lead + (-1,)) @ self._E_Q,
            xp.reshape(psiR, lead + (-1,)) @ self._E_R,
        ]
        return xp.concat(parts, axis=-1)

    def fisher_metric(self, **options: Any) -> SSMFisherMetric:
        """The block-diagonal complete-data Fisher metric for SGRLD (:class:`sgmc.ssm.fisher.SSMFisherMetric`).

        ``sgmc.sample(model, "sgrld", ...)`` uses it as the default metric; ``options`` go to
        :class:`~sgmc.ssm.fisher.SSMFisherMetric`.
        """
        return SSMFisherMetric(self, **options)

    def scalar_params(self, theta: Array) -> tuple[Array, Array, Array]:
        """``(phi, sigma, tau)`` of the scalar model, each with the leading axes of ``theta``."""
        if self.n != 1 or self.m != 1:
            msg = f"scalar_params needs state_dim = obs_dim = 1; this model has n={self.n}, m={self.m}"
            raise ValueError(msg)
        xp = self.xp
        return theta[..., 0], 1.0 / xp.abs(theta[..., 1]), 1.0 / xp.abs(theta[..., 2])

    def _pack(self, gA: Array, gC: Array, gpsiQ: Array, gpsiR: Array) -> Array:
        xp = self.xp
        lead = tuple(gA.shape[:-2])
        parts = [
            xp.reshape(gA, lead + (-1,)),
            xp.reshape(gC, lead + (-1,)) @ self._E_C,
            xp.reshape(gpsiQ, lead + (-1,)) @ self._E_Q,
            xp.reshape(gpsiR, lead + (-1,)) @ self._E_R,
        ]
        return xp.concat(parts, axis=-1)

    # -- prior --------------------------------------------------------------------------------------
    def _diag(self, psi: Array) -> Array:
        return self.xp.linalg.diagonal(psi)

    def log_prior(self, theta: Array) -> Array:
        xp = self.xp
        n, m, v = self.n, self.m, self.prior_var
        A, C, psiQ, psiR = self._split(theta)
        dq = xp.log(xp.abs(self._diag(psiQ)))  # (..., n)
        dr = xp.log(xp.abs(self._diag(psiR)))
        logdet_Lq = 2.0 * xp.sum(dq, axis=-1)
        Lq = psiQ @ xp.matrix_transpose(psiQ)
        Lr = psiR @ xp.matrix_transpose(psiR)
        jq = xp.asarray([float(n - i) for i in range(n)], dtype=self.dtype, device=self.device)
        jr = xp.asarray([float(m - i) for i in range(m)], dtype=self.dtype, device=self.device)
        # A | Q matrix normal, column covariance v I: (n/2) log|Lq| - tr(A^T Lq A) / (2 v)
        lp = 0.5 * n * logdet_Lq - xp.sum(A * (Lq @ A), axis=(-2, -1)) / (2.0 * v)
        # Wishart(nu = n + 1, mean I) on Lq: -(nu / 2) tr(Lq); Cholesky Jacobian
        lp = lp - 0.5 * (n + 1) * xp.linalg.trace(Lq) + xp.sum(jq * dq, axis=-1)
        lp = lp - 0.5 * (m + 1) * xp.linalg.trace(Lr) + xp.sum(jr * dr, axis=-1)
        lp = lp - xp.sum((C - self._C0) ** 2, axis=(-2, -1)) / (2.0 * v)
        return lp

    def grad_log_prior(self, theta: Array) -> Array:
        xp = self.xp
        mT = xp.matrix_transpose
        n, m, v = self.n, self.m, self.prior_var
        A, C, psiQ, psiR = self._split(theta)
        Lq = psiQ @ mT(psiQ)
        eye_n = xp.eye(n, dtype=self.dtype, device=self.device)
        eye_m = xp.eye(m, dtype=self.dtype, device=self.device)
        gA = -(Lq @ A) / v
        # d/dLq of (n/2) log|Lq| - tr(Lq A A^T)/(2v) - (nu/2) tr(Lq), as a symmetric matrix G; d/dpsi = 2 G psi
        Qm = xp.linalg.inv(Lq)
        GQ = 0.5 * n * Qm - (A @ mT(A)) / (2.0 * v) - 0.5 * (n + 1) * eye_n
        gpsiQ = 2.0 * GQ @ psiQ
        GR = -0.5 * (m + 1) * eye_m
        gpsiR = 2.0 * GR @ psiR
        # Cholesky Jacobian: (n - i) log|psi_ii| (0-based i)
        jq = xp.asarray([float(n - i) for i in range(n)], dtype=self.dtype, device=self.device)
        jr = xp.asarray([float(m - i) for i in range(m)], dtype=self.dtype, device=self.device)
        gpsiQ = gpsiQ + eye_n * (jq / self._diag(psiQ))[..., None, :]
        gpsiR = gpsiR + eye_m * (jr / self._diag(psiR))[..., None, :]
        gC = -(C - self._C0) / v
        return self._pack(gA, gC, gpsiQ, gpsiR)

    # -- likelihood ------------------------------------------------------------------------------------
    def _matrices(self, theta: Array):
        xp = self.xp
        A, C, psiQ, psiR = self._split(theta)
        mT = xp.matrix_transpose
        Q = xp.linalg.inv(psiQ @ mT(psiQ))
        R = xp.linalg.inv(psiR @ mT(psiR))
        return A, 0.5 * (Q + mT(Q)), C, 0.5 * (R + mT(R)), psiQ, psiR

    def _theta_grad(self, A, Q, C, R, psiQ, psiR, stats) -> Array:
        gA, gLq, gC, gLr = precision_grads(A, Q, C, R, stats)
        return self._pack(gA, gC, 2.0 * gLq @ psiQ, 2.0 * gLr @ psiR)

    def _full(self, theta: Array):
        xp = self.xp
        c = theta.shape[0]
        A, Q, C, R, psiQ, psiR = self._matrices(theta)
        m0 = xp.broadcast_to(self.m0[None, :], (c, self.n))
        P0 = xp.broadcast_to(self.P0[None, ...], (c, self.n, self.n))
        return A, Q, C, R, psiQ, psiR, m0, P0

    def _checked_theta(self, theta: Any) -> tuple[Array, bool]:
        """``theta`` as (chains, dim), checked: finite, with non-singular precision factors."""
        xp = self.xp
        theta, single = self._batched(theta)
        _, _, psiQ, psiR = self._split(theta)
        if not check_theta(xp, theta):
            return theta, single
        if not bool(xp.all(self._diag(psiQ) != 0)) or not bool(xp.all(self._diag(psiR) != 0)):
            msg = (
                "`theta` holds a singular precision factor (a zero diagonal entry of psi_Q or psi_R, "
                "e.g. 1/sigma or 1/tau = 0 in the scalar model): the likelihood is not defined there"
            )
            raise ValueError(msg)
        return theta, single

    def log_lik(self, theta: Array, idx: Array | None = None) -> Array:
        """Exact log-likelihood of the whole series by the Kalman filter.

        ``theta`` of shape ``(chains, dim)`` gives shape ``(chains,)``; a ``(dim,)`` vector gives a 0-d
        array. A ``theta`` of another shape, with non-finite entries or with a singular precision
        factor raises ``ValueError`` naming it.
        """
        if idx is not None:
            self._not_iid()
        theta, single = self._checked_theta(theta)
        A, Q, C, R, _, _, m0, P0 = self._full(theta)
        out = kalman_loglik(A, Q, C, R, self.y, m0, P0)
        return out[0] if single else out

    def log_lik_and_grad(self, theta: Array) -> tuple[Array, Array]:
        A, Q, C, R, psiQ, psiR, m0, P0 = self._full(theta)
        ll, stats = kalman_stats(A, Q, C, R, self.y, m0, P0)
        return ll, self._theta_grad(A, Q, C, R, psiQ, psiR, stats)

    def exact_window_score(self, theta: Array, windows: Windows, y_windows: Array) -> Array:
        """Weighted score over buffered windows by the Kalman smoother, batched over chains x M."""
        xp = self.xp
        c, M = windows.start.shape
        L = windows.L
        n, m = self.n, self.m
        b = c * M
        A, Q, C, R, psiQ, psiR = self._matrices(theta)

        def per_window(X):
            X = xp.broadcast_to(X[:, None, ...], (c, M) + tuple(X.shape[1:]))
            return xp.reshape(X, (b,) + tuple(X.shape[2:]))

        A, Q, C, R, psiQ, psiR = (per_window(X) for X in (A, Q, C, R, psiQ, psiR))
        first = xp.reshape(windows.start == 0, (b,))
        P0 = xp.broadcast_to(self.P0[None, ...], (b, n, n))
        Pstat = stationary_covariance(A, Q, fallback=P0)
        P0 = xp.where(first[:, None, None], P0, Pstat)
        m0 = xp.where(first[:, None], xp.broadcast_to(self.m0[None, :], (b, n)), xp.zeros((b, n), dtype=self.dtype, device=self.device))
        y = xp.reshape(y_windows, (b, L, m))
        mask = xp.reshape(windows.mask, (b, L))
        w = xp.reshape(windows.weight, (b, L))
        _, stats = kalman_stats(A, Q, C, R, y, m0, P0, mask, w)
        g = self._theta_grad(A, Q, C, R, psiQ, psiR, stats)
        return xp.sum(xp.reshape(g, (c, M, self.dim)), axis=1)

    # -- particles (scalar model) ----------------------------------------------------------------------
    def particle_kernel(self, theta_batch: Array) -> Any:
        """The scalar model's particle kernel (optimal proposal), from :mod:`sgmc.ssm.lgssm_kernel`."""
        if self.n != 1 or self.m != 1:
            msg = f"particle methods for the LGSSM need state_dim = obs_dim = 1; got n={self.n}, m={self.m}"
            raise ValueError(msg)
        from .lgssm_kernel import ScalarLGSSMKernel

        # the kernel squares sigma and tau for variances and reads 1/sigma, 1/tau as the signed psi, so the
        # signs of psi_sigma and psi_tau are kept (scalar_params returns the positive scales)
        return ScalarLGSSMKernel(theta_batch[..., 0], 1.0 / theta_batch[..., 1], 1.0 / theta_batch[..., 2],
                                 proposal="optimal")

    # -- simulation -----------------------------------------------------------------------------------
    def simulate(self, rng: Any, T: int, theta: Any) -> tuple[Array, Array]:
        """Draw ``(x, y)`` of shapes ``(T, n)``, ``(T, m)`` at ``theta`` (dim,), from ``x_0 ~ N(m0, P0)``."""
        T = check_int(T, "T")
        check_alloc(T * (160 + 8 * 4 * (self.n + self.m)), "T", T, "T steps of states and observations")
        theta = simulation_theta(self, theta)[0]
        A, Q, C, R, _, _ = self._matrices(theta[None, :])
        return _simulate(rng, T, A[0], Q[0], C[0], R[0], self.m0, self.P0)

    @staticmethod
    def simulate_scalar(rng: Any, T: int, theta: Any, m0: float = 0.0, P0: float = 1.0) -> tuple[Array, Array]:
        """Simulate the scalar model at ``theta = (phi, 1/sigma, 1/tau)``; returns ``x, y`` of shape ``(T,)``.

        Arrays come from ``rng``'s backend.
        """
        T = check_int(T, "T")
        check_alloc(T * 200, "T", T, "T steps of states and observations")
        xp = rng.backend.xp
        dt = xp.float64
        dev = rng.device
        th = theta if is_array(theta) else xp.asarray(list(map(float, theta)), dtype=dt, device=dev)
        phi, sig, tau = th[0], 1.0 / xp.abs(th[1]), 1.0 / xp.abs(th[2])
        one = xp.ones((1, 1), dtype=dt, device=dev)
        x, y = _simulate(
            rng, T, phi * one, sig**2 * one, one, tau**2 * one,
            xp.asarray([m0], dtype=dt, device=dev), P0 * one,
        )
        return x[:, 0], y[:, 0]


def _linear_recursion(xp, A: Array, w: Array) -> Array:
    """``x_t = A x_{t-1} + w_t`` (``x_{-1} = 0``) for ``w`` (T, n), by a doubling scan (log2 T rounds)."""
    T = w.shape[0]
    x = w
    P = A
    d = 1
    while d < T:
        shifted = x[: T - d, :] @ xp.matrix_transpose(P)
        x = xp.concat([x[:d, :], x[d:, :] + shifted], axis=0)
        P = P @ P
        d *= 2
    return x


def _simulate(rng, T, A, Q, C, R, m0, P0):
    xp = array_namespace(A)
    n, m = A.shape[-1], C.shape[-2]
    dt = A.dtype
    LQ = xp.linalg.cholesky(Q)
    LR = xp.linalg.cholesky(R)
    L0 = xp.linalg.cholesky(P0)
    x0 = m0 + L0 @ rng.normal((n,), dtype=dt)
    w = rng.normal((T, n), dtype=dt) @ xp.matrix_transpose(LQ)
    first = w[:1, :] + (A @ x0[:, None])[:, 0][None, :]
    w = xp.concat([first, w[1:, :]], axis=0)
    x = _linear_recursion(xp, A, w)
    y = x @ xp.matrix_transpose(C) + rng.normal((T, m), dtype=dt) @ xp.matrix_transpose(LR)
    return x, y
