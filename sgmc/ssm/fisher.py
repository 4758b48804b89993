"""Complete-data Fisher preconditioners for SGRLD on state space models (Aicher 2020, thesis 3.2.3).

The Fisher information of the marginal likelihood p(y | theta) of a state space model has no
tractable form, so the thesis (Eq. 3.8) preconditions with the *complete-data* Fisher information
I_{u,y} = T E[-grad^2 log p(y_t, u_t | u_{t-1}, theta)], which is block diagonal across the
parameter blocks. SGRLD then uses D(theta) = I_{u,y}^{-1} with the correction Gamma_i = sum_j
d D_ij / d theta_j (the sum runs over i's own block, since D is block diagonal). In the parameters of
:class:`~sgmc.ssm.LGSSM`, :class:`~sgmc.ssm.GaussianHMM`, :class:`~sgmc.ssm.ARHMM` and
:class:`~sgmc.ssm.SLDS` (the ARHMM rows for its switching dynamics, the LGSSM rows for its emission;
thesis 3.107-3.111):

* a regression block (HMM ``mu_k``; ARHMM ``A_k``; LGSSM and SLDS ``A`` (``A_k``) and the free entries
  of ``C``): G = w Lambda (x) M with Lambda the noise precision and M = E[x x^T] of the regressor
  (thesis Eqs. 3.53, 3.73, 3.75). By default (``moments="stationary"``) M is the second moment of the
  model's own stationary process at theta (:func:`regime_moments`): for the LGSSM Sigma = A Sigma A^T + Q
  (the thesis's sum_s A^s Q A^sT), for both the regressor x_{t-1} of ``A`` and x_t of ``C``; for the
  SLDS and ARHMM (in companion form, the regressor ybar_t of p lags) M_k = E[x_{t-1} x_{t-1}^T | z_t = k]
  from the coupled Lyapunov equations of the switching process, and E[x_t x_t^T] = sum_k pi_k M_k for
  the SLDS's ``C``; the HMM's regressor is 1. M then depends on A, so Gamma of the ``A`` block is
  -(1/w) Lambda^{-1} Z with Z_cb = sum_d (M^{-1} (dM / dA_cd) M^{-1})_bd, dM from the same equations.
  ``moments="identity"`` is the thesis's experimental choice M = I (Gamma zero): for the scalar
  model it understates the A-block by the factor (1 - A^2) / Q (0.19 at A = 0.9, Q = 1), a gap that
  grows without bound as A -> 1. Where theta has no stationary law (a spectral radius >= 1, or the switching
  process not mean-square stable) the stationary form falls back to M = I for that chain (its Gamma
  is then zero); near the boundary M grows without bound, so steps in ``A`` shrink there;
* a precision Cholesky factor ``psi`` (lower triangular, psi psi^T = Sigma^{-1}): entry (i, j) scores
  delta_ij / psi_ii - (r r^T psi)_ij, so F_{(ij),(kl)} = delta_jl Sigma_ik + delta_ij delta_kl delta_ik /
  psi_ii^2 (for m = 1, 2 Sigma, the thesis's Eq. 3.45). Its Gamma is computed in closed form,
  -sum_b [D (dF / d psi_b) D]_{ab} with d Sigma / d psi_kl = -Sigma (e_k psi_l^T + psi_l e_k^T) Sigma,
  and is exact for the triangular factor (the thesis's "Gamma = psi" holds for m = 1);
* the transition block, in the model's coordinates eta = log phi of the expanded means (Patterson
  and Teh 2013): the thesis's per-observation D_phi = diag(phi) with Gamma_phi = 1 (Eq. 3.43) is
  D_eta = 1 / phi in eta, weighted like the other blocks of row k: D_eta = 1 / (w_k (phi + nu_phi)).
  Gamma_eta differentiates both factors (w_k through the stationary law,
  d pi = pi dPi (I - Pi + 1 pi^T)^{-1}). The row sums of phi are not identified by the likelihood
  (their posterior is the prior's, O(1)), so phi_kj is about Pi_kj times a number of order K and
  w_k phi_kj about the count of k -> j transitions. nu_phi plays the thesis's part, keeping the
  sampler off phi = 0, but in eta it is added to phi in the metric, not to D_phi: added to D_phi it
  would make D_eta = (phi + nu_phi) / phi^2 grow without bound as phi -> 0, and the Euler steps in
  eta explode there (SGRLD diverged at nu_phi = 0 on the small HMM posterior of the tests); here
  D_eta <= 1 / (w_k nu_phi).
  nu_phi = 0 is the thesis's metric exactly.

Scale: w = T for the LGSSM (and the SLDS emission); for the switching models' per-state blocks,
w = T pi_k with pi the stationary law of Pi (the expected number of visits to state k;
``occupancy="none"`` takes w = T, as the thesis does). With these
weights G is about the posterior precision, so SGRLD's natural step is of order one
(:mod:`sgmc.samplers.riemannian`); the thesis's step size is h / (2 T) in these units. The prior is not
part of G. The metric costs O(d^3) per chain and step and reads no data (``n_evals = 0``).
"""

from __future__ import annotations

from typing import Any

from .._array_api import Array, device_of
from ..samplers.metrics import Metric

__all__ = ["SSMFisherMetric", "cholesky_fisher", "regime_moments", "stationary_law"]


_KINDS = ("LGSSM", "GaussianHMM", "ARHMM", "SLDS")


def _tri(m: int) -> tuple[list, list]:
    """Row and column of each entry of a packed (row-major) lower triangle of an m x m matrix."""
    rows = [i for i in range(m) for _ in range(i + 1)]
    cols = [j for i in range(m) for j in range(i + 1)]
    return rows, cols


def cholesky_fisher(xp: Any, L: Array) -> tuple[Array, Array, Array]:
    """Per-observation Fisher information of a Gaussian precision factor, its inverse and Gamma.

    Parameters
    ----------
    xp : namespace
    L : array (..., m, m)
        Lower-triangular factors with L L^T = Sigma^{-1} (the residual is N(0, Sigma)).

    Returns
    -------
    F, D, gamma : arrays (..., p, p), (..., p, p), (..., p)
        With p = m (m + 1) / 2 over the packed row-major lower triangle: F the Fisher information of
        one observation, D = F^{-1}, and gamma_a = sum_b dD_ab / dL_b.
    """
    m = int(L.shape[-1])
    rows, cols = _tri(m)
    p = len(rows)
    dt, dev = L.dtype, device_of(L)
    I = xp.asarray(rows, dtype=xp.int64, device=dev)
    J = xp.asarray(cols, dtype=xp.int64, device=dev)
    same = xp.asarray([[1.0 if ca == cb else 0.0 for cb in cols] for ca in cols], dtype=dt, device=dev)
    isdiag = xp.asarray([1.0 if r == c else 0.0 for r, c in zip(rows, cols)], dtype=dt, device=dev)
    eye = xp.eye(p, dtype=dt, device=dev)
    sigma = xp.linalg.inv(L @ xp.matrix_transpose(L))
    sigma = 0.5 * (sigma + xp.matrix_transpose(sigma))
    lit = sigma @ L                                                   # L^{-T}
    dl = xp.take(xp.linalg.diagonal(L), I, axis=-1)                   # (..., p): L_ii at each entry
    sel = xp.take(xp.take(sigma, I, axis=-2), I, axis=-1)             # Sigma_{i_a i_b}
    F = sel * same + eye * (isdiag / (dl * dl))[..., None, :]
    D = xp.linalg.inv(F)
    # d Sigma / d L_b = -(s_b u_b^T + u_b s_b^T), s_b = Sigma[:, i_b], u_b = L^{-T}[:, j_b]
    s = xp.matrix_transpose(xp.take(sigma, I, axis=-1))               # (..., p, m)
    u = xp.matrix_transpose(xp.take(lit, J, axis=-1))                 # (..., p, m)
    outer = s[..., :, :, None] * u[..., :, None, :]
    dsig = -(outer + xp.matrix_transpose(outer))                      # (..., p_b, m, m)
    dF = xp.take(xp.take(dsig, I, axis=-2), I, axis=-1) * same
    ddiag = -2.0 * isdiag / (dl * dl * dl)                            # d(1 / L_ii^2) / dL_ii
    dF = dF + (ddiag[..., :, None, None] * eye[:, :, None]) * eye[:, None, :]
    X = D[..., None, :, :] @ dF @ D[..., None, :, :]                  # (..., b, a, e)
    gamma = -xp.sum(xp.sum(X * eye[:, None, :], axis=-1), axis=-2)
    return F, D, gamma


def stationary_law(xp: Any, Pi: Array) -> Array:
    """Stationary distribution of transition matrices Pi (..., K, K), solving pi (Pi - I) = 0, sum pi = 1."""
    K = int(Pi.shape[-1])
    eye = xp.eye(K, dtype=Pi.dtype, device=device_of(Pi))
    ones = xp.ones((K, K), dtype=Pi.dtype, device=device_of(Pi))
    a = xp.matrix_transpose(eye - Pi) + ones
    b = xp.ones(tuple(Pi.shape[:-1]) + (1,), dtype=Pi.dtype, device=device_of(Pi))
    return xp.linalg.solve(a, b)[..., 0]


def _batched_kron(xp: Any, a: Array, b: Array) -> Array:
    """Kronecker products (..., p q, p q) of batches (..., p, p) and (..., q, q), row-major."""
    p, q = int(a.shape[-1]), int(b.shape[-1])
    k = a[..., :, None, :, None] * b[..., None, :, None, :]
    return xp.reshape(k, tuple(k.shape[:-4]) + (p * q, p * q))


def regime_moments(xp: Any, Pi: Array, F: Array, Qn: Array, rows: int, iters: int = 24) -> tuple[Array, Array, Array]:
    """Stationary second moments of a Markov-switching linear process and their derivatives.

    For ``s_t = F_{z_t} s_{t-1} + e_t`` with ``e_t ~ N(0, Qn_{z_t})`` and ``z`` a Markov chain with
    transition matrix ``Pi`` in its stationary law ``pi``, the moments ``Xi_j = E[s_t s_t^T 1{z_t = j}]``
    solve the coupled Lyapunov equations ``Xi_j = sum_i Pi_ij F_j Xi_i F_j^T + pi_j Qn_j`` (one regime:
    ``Sigma = F Sigma F^T + Q``). In row-major ``vec`` form this is ``(I - L) xi = q`` with the blocks
    ``L_ji = Pi_ij F_j (x) F_j``; ``S = sum_k L^k`` is summed by doubling (``S <- S + P S``, ``P <- P P``,
    ``2^iters`` terms: the default 24 covers a spectral radius of ``L`` up to about ``1 - 1e-6``), which
    needs no solve and stays finite where the process has no stationary law.

    Parameters
    ----------
    xp : namespace
    Pi : array (..., K, K)
    F, Qn : arrays (..., K, n, n)
    rows : int
        Only the first ``rows`` rows of each ``F_k`` are parameters (the others are a companion
        form's shift): the derivatives are taken with respect to ``F_k[c, d]``, ``c < rows``.

    Returns
    -------
    M : array (..., K, n, n)
        ``M_k = E[s_{t-1} s_{t-1}^T | z_t = k] = sum_i Pi_ik Xi_i / pi_k``, the regressor's second moment
        in regime k (the identity where ``ok`` is false).
    dM : array (..., K, rows, n, n, n)
        ``dM[k, c, d] = d M_k / d F_k[c, d]`` (zero where ``ok`` is false); derivatives with respect to
        the other regimes' parameters are not needed, as the metric is block diagonal.
    ok : array (...,) of bool
        Where the process is mean-square stable: the doubling converged (``L^(2^iters)`` below 1e-8,
        no overflow) to finite, positive definite moments.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.ssm.fisher import regime_moments
    >>> M, dM, ok = regime_moments(np, np.ones((1, 1, 1)), np.full((1, 1, 1, 1), 0.5), np.ones((1, 1, 1, 1)), 1)
    >>> float(M[0, 0, 0, 0]), float(dM[0, 0, 0, 0, 0, 0]), bool(ok[0])    # 1 / (1 - a^2), 2 a / (1 - a^2)^2
    (1.3333333333333333, 1.7777777777777777, True)
    """
    K, n = int(F.shape[-3]), int(F.shape[-1])
    lead = tuple(F.shape[:-3])
    nb = len(lead)
    dt, dev = F.dtype, device_of(F)
    n2, size = n * n, K * n * n
    kf = _batched_kron(xp, F, F)                                                   # (..., K, n2, n2)
    blocks = xp.matrix_transpose(Pi)[..., :, :, None, None] * kf[..., :, None, :, :]  # (..., j, i, n2, n2)
    L = xp.reshape(xp.permute_dims(blocks, tuple(range(nb)) + (nb, nb + 2, nb + 1, nb + 3)), lead + (size, size))
    eye = xp.eye(size, dtype=dt, device=dev)
    S, P = eye, L
    # a power past big marks a divergent sum and is zeroed, so nothing overflows (big^2 * size is finite)
    big = xp.finfo(dt).max ** 0.25 / size
    blown = xp.zeros(lead, dtype=xp.bool, device=dev)
    for _ in range(iters):
        S = S + P @ S
        P = P @ P
        blown = blown | (xp.max(xp.abs(P), axis=(-2, -1)) > big)
        P = xp.where(blown[..., None, None], xp.zeros_like(P), P)
    conv = (xp.max(xp.abs(P), axis=(-2, -1)) < 1e-8) & ~blown
    pi = stationary_law(xp, Pi)
    q = xp.reshape(pi[..., :, None, None] * Qn, lead + (size, 1))
    Xi = xp.reshape(S @ q, lead + (K, n, n))
    N = xp.sum(Pi[..., :, :, None, None] * Xi[..., :, None, :, :], axis=-4)         # sum over i
    N = 0.5 * (N + xp.matrix_transpose(N))
    finite = xp.all(xp.isfinite(xp.reshape(N, lead + (-1,))), axis=-1)
    eye_n = xp.eye(n, dtype=dt, device=dev)
    Nc = xp.where(finite[..., None, None, None], N, eye_n)
    pd = xp.all(xp.linalg.eigvalsh(Nc) > 0, axis=(-2, -1))
    ok = conv & finite & pd
    pic = xp.where(pi > 0, pi, xp.ones_like(pi))[..., :, None, None]
    M = xp.where(ok[..., None, None, None], N / pic, eye_n)
    # d Xi_j / d F_k[c, d] solves the same equations with the source delta_jk (E N_k F_k^T + F_k N_k E^T)
    Pm = N @ xp.matrix_transpose(F)                                                # (..., K, n, n): [k, d, b]
    sel = eye_n[:rows, :]                                                          # [c, a]
    src = sel[:, None, :, None] * Pm[..., :, None, :, None, :] + sel[:, None, None, :] * Pm[..., :, None, :, :, None]
    # src (..., k, c, d, a, b) -> columns (k, c, d) of a (size,) source placed in block j = k
    eye_k = xp.eye(K, dtype=dt, device=dev)
    src = eye_k[:, None, None, :, None, None] * xp.permute_dims(
        src, tuple(range(nb)) + (nb + 3, nb + 4, nb, nb + 1, nb + 2))[..., None, :, :, :, :, :]  # (..., j, a, b, k, c, d)
    S = xp.where(ok[..., None, None], S, eye)
    dXi = xp.reshape(S @ xp.reshape(src, lead + (size, K * rows * n)), lead + (K, n, n, K, rows, n))
    # dN_k = sum_i Pi_ik dXi_i for the directions of regime k
    dXi = xp.permute_dims(dXi, tuple(range(nb)) + (nb + 3, nb + 4, nb + 5, nb + 1, nb + 2, nb))   # (..., kd, c, d, a, b, i)
    dN = dXi @ Pi[..., None, None, None, None, :, :]                               # (..., kd, c, d, a, b, k)
    dN = xp.sum(dN * eye_k[:, None, None, None, None, :], axis=-1)
    dM = xp.where(ok[..., None, None, None, None, None], dN / pic[..., None, None], xp.zeros_like(dN))
    return M, dM, ok


def _inv_sym(xp: Any, a: Array) -> Array:
    """Inverse of symmetric positive definite matrices, symmetrised."""
    b = xp.linalg.inv(a)
    return 0.5 * (b + xp.matrix_transpose(b))


def _regression(xp: Any, w: Array, lam: Array, M: Array, dM: Array) -> tuple[Array, Array, Array]:
    """(G, D, Gamma) of a regression block B (r x n, row-major) with y = B s + N(0, lam^{-1}).

    G = w lam (x) M with M = E[s s^T]; D = G^{-1}; Gamma_ab = sum_cd dD_(ab),(cd) / dB_cd
    = -(1 / w) (lam^{-1} Z)_ab with Z_cb = sum_d (M^{-1} (dM / dB_cd) M^{-1})_bd. Shapes: w (...,),
    lam (..., r, r), M (..., n, n), dM (..., r, n, n, n) indexed [c, d, a, b].
    """
    r, n = int(lam.shape[-1]), int(M.shape[-1])
    lead = tuple(M.shape[:-2])
    cov = _inv_sym(xp, lam)
    Minv = _inv_sym(xp, M)
    G = w[..., None, None] * _batched_kron(xp, lam, M)
    D = _batched_kron(xp, cov, Minv) / w[..., None, None]
    Y = Minv[..., None, None, :, :] @ dM @ Minv[..., None, None, :, :]           # (..., c, d, b, e)
    eye_n = xp.eye(n, dtype=M.dtype, device=device_of(M))
    Z = xp.sum(xp.sum(Y * eye_n[:, None, :], axis=-1), axis=-2)                  # (..., c, b): e = d
    gam = -(cov @ Z) / w[..., None, None]
    return G, D, xp.reshape(gam, lead + (r * n,))


def _block_diag(xp: Any, blocks: list) -> Array:
    """Block-diagonal (..., d, d) from square blocks (..., k_i, k_i) with the same leading axes."""
    sizes = [int(b.shape[-1]) for b in blocks]
    lead = tuple(blocks[0].shape[:-2])
    dt, dev = blocks[0].dtype, device_of(blocks[0])
    rows = []
    for i, b in enumerate(blocks):
        parts = [b if j == i else xp.zeros(lead + (sizes[i], sizes[j]), dtype=dt, device=dev) for j in range(len(blocks))]
        rows.append(xp.concat(parts, axis=-1))
    return xp.concat(rows, axis=-2)


def _pad(xp: Any, a: Array, size: int) -> Array:
    """(..., q, q) placed in the leading corner of (..., size, size) zeros."""
    q = int(a.shape[-1])
    if q == size:
        return a
    lead = tuple(a.shape[:-2])
    z = xp.zeros(lead + (q, size - q), dtype=a.dtype, device=device_of(a))
    top = xp.concat([a, z], axis=-1)
    return xp.concat([top, xp.zeros(lead + (size - q, size), dtype=a.dtype, device=device_of(a))], axis=-2)


def _kron(xp: Any, a: Array, b: Array) -> Array:
    """Batched Kronecker product (..., p, p) x (q, q) -> (..., p q, p q), row-major."""
    p, q = int(a.shape[-1]), int(b.shape[-1])
    k = a[..., :, None, :, None] * b[:, None, :]
    return xp.reshape(k, tuple(a.shape[:-2]) + (p * q, p * q))


class SSMFisherMetric(Metric):
    """The block-diagonal complete-data Fisher metric of a state space model (see the module).

    Parameters
    ----------
    model : LGSSM, GaussianHMM, ARHMM or SLDS
    nu_phi : float, default 0.1
        Switching models: added to the expanded means in the transition block's metric,
        D_eta = 1 / (w_k (phi + nu_phi)) (0: the thesis's D_phi = diag(phi) exactly).
    occupancy : {"stationary", "none"}, default "stationary"
        Switching models: weight of state k's blocks, T pi_k (the complete-data Fisher information) or T
        (the thesis's Eqs. 3.44-3.45).
    moments : {"stationary", "identity"}, default "stationary"
        E[x x^T] of the regressors in the ``A``/``C`` blocks: the model's stationary second moment at
        theta (the complete-data Fisher information; M = I where theta has no stationary law) or the
        identity (the thesis's simplification in its experiments, Eqs. 3.53 and 3.73).

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc import backends
    >>> from sgmc.ssm import LGSSM
    >>> theta = np.array([0.9, 2.0, 1.0])
    >>> _, y = LGSSM.simulate_scalar(backends.default_rng(0), 100, theta)
    >>> metric = LGSSM(y).fisher_metric()
    >>> D, gamma = metric.inverse_and_gamma(theta[None, :])
    >>> np.diag(D[0]) * 100                          # (1 - A^2, psi_Q^2 / 2, psi_R^2 / 2) / T, T = 100
    array([0.19, 2.  , 0.5 ])
    >>> gamma * 100                                  # (-2 A, psi_Q, psi_R) / T
    array([[-1.8,  2. ,  1. ]])
    >>> np.diag(LGSSM(y).fisher_metric(moments="identity").inverse(theta[None, :])[0]) * 100   # E[x^2] -> 1
    array([0.25, 2.  , 0.5 ])
    """

    def __init__(self, model: Any, *, nu_phi: float = 0.1, occupancy: str = "stationary", moments: str = "stationary"):
        kinds = [c.__name__ for c in type(model).__mro__ if c.__name__ in _KINDS]
        if not kinds:
            msg = f"`model` must be an LGSSM, a GaussianHMM, an ARHMM or an SLDS for SSMFisherMetric; got {type(model).__name__}"
            raise TypeError(msg)
        if isinstance(nu_phi, bool) or not isinstance(nu_phi, (int, float)) or not nu_phi >= 0:
            msg = f"`nu_phi` must be a non-negative number; got {nu_phi!r}"
            raise ValueError(msg)
        if occupancy not in ("stationary", "none"):
            msg = f"`occupancy` must be 'stationary' or 'none'; got {occupancy!r}"
            raise ValueError(msg)
        if moments not in ("stationary", "identity"):
            msg = f"`moments` must be 'stationary' or 'identity'; got {moments!r}"
            raise ValueError(msg)
        self.model = model
        self.kind = kinds[0]
        self.hmm = self.kind != "LGSSM"
        self.nu_phi = float(nu_phi)
        self.occupancy = occupancy
        self.moments = moments
        self.diagonal = False
        self.constant = False
        self.G = self.value
        self.grad = None
        self.n_evals = 0.0

    # -- blocks -------------------------------------------------------------------------------------
    def _blocks(self, theta: Array) -> tuple[list, list, list]:
        """Per-block (G, D, Gamma) lists in the order of ``theta``."""
        return self._hmm_blocks(theta) if self.hmm else self._lgssm_blocks(theta)

    def _lgssm_blocks(self, theta):
        mdl = self.model
        xp = mdl.xp
        T = float(mdl.T)
        A, _, psiQ, psiR = mdl._split(theta)
        FQ, DQ, gQ = cholesky_fisher(xp, psiQ)
        FR, DR, gR = cholesky_fisher(xp, psiR)
        lamQ = psiQ @ xp.matrix_transpose(psiQ)
        lamR = psiR @ xp.matrix_transpose(psiR)
        lead = tuple(theta.shape[:-1])
        if self.moments == "identity":
            eye_n = xp.eye(mdl.n, dtype=mdl.dtype, device=mdl.device)
            GA = T * _kron(xp, lamQ, eye_n)
            GC = T * (xp.matrix_transpose(mdl._E_C) @ _kron(xp, lamR, eye_n) @ mdl._E_C)
            DA = xp.linalg.inv(GA)
            gA = xp.zeros(lead + (int(GA.shape[-1]),), dtype=mdl.dtype, device=mdl.device)
        else:  # E[x x^T] = Sigma = A Sigma A^T + Q, the same for the regressor x_{t-1} of A and x_t of C
            one = xp.ones(lead + (1, 1), dtype=mdl.dtype, device=mdl.device)
            M, dM, _ = regime_moments(xp, one, A[..., None, :, :], _inv_sym(xp, lamQ)[..., None, :, :], mdl.n)
            w = T * xp.ones(lead, dtype=mdl.dtype, device=mdl.device)
            GA, DA, gA = _regression(xp, w, lamQ, M[..., 0, :, :], dM[..., 0, :, :, :, :])
            GC = T * (xp.matrix_transpose(mdl._E_C) @ _batched_kron(xp, lamR, M[..., 0, :, :]) @ mdl._E_C)
        G = [GA, GC, T * FQ, T * FR]
        D = [DA, xp.linalg.inv(GC) if GC.shape[-1] else GC, DQ / T, DR / T]
        zc = xp.zeros(lead + (int(GC.shape[-1]),), dtype=mdl.dtype, device=mdl.device)
        return G, D, [gA, zc, gQ / T, gR / T]

    def _switching(self, eta):
        """Occupancy weights w (..., K) and the expanded-mean block (G, D, Gamma) of ``eta`` (..., K, K)."""
        mdl = self.model
        xp = mdl.xp
        K = mdl.K
        lead = tuple(eta.shape[:-2])
        T = float(mdl.T)
        eye_k = xp.eye(K, dtype=mdl.dtype, device=mdl.device)
        if self.occupancy == "stationary":
            e = xp.exp(eta - xp.max(eta, axis=-1, keepdims=True))
            Pi = e / xp.sum(e, axis=-1, keepdims=True)
            pi = stationary_law(xp, Pi)
            w = T * pi                                                           # (..., K)
            # d log w_k / d eta_kl = Pi_kl (Z_lk - (Pi Z)_kk), Z = (I - Pi + 1 pi^T)^{-1}
            Z = xp.linalg.inv(eye_k - Pi + xp.ones((K, 1), dtype=mdl.dtype, device=mdl.device) * pi[..., None, :])
            v = xp.sum((Pi @ Z) * eye_k, axis=-1)                                 # (..., K)
            dlogw = xp.reshape(Pi * (xp.matrix_transpose(Z) - v[..., :, None]), lead + (K * K,))
        else:
            w = T * xp.ones(lead + (K,), dtype=mdl.dtype, device=mdl.device)
            dlogw = xp.zeros(lead + (K * K,), dtype=mdl.dtype, device=mdl.device)
        phi = xp.reshape(xp.exp(eta), lead + (K * K,))
        wr = xp.reshape(w[..., :, None] * xp.ones((K,), dtype=mdl.dtype, device=mdl.device), lead + (K * K,))
        nu = self.nu_phi
        c = 1.0 / (phi + nu)                                                      # D_eta w_k
        eye_kk = xp.eye(K * K, dtype=mdl.dtype, device=mdl.device)
        G = eye_kk * (wr / c)[..., None, :]
        D = eye_kk * (c / wr)[..., None, :]
        dc = -phi * c * c
        return w, (G, D, (dc - c * dlogw) / wr)

    def _per_state(self, w, lam, cols):
        """Blocks w_k Lambda_k (x) I_cols of the regression coefficients of each state (Gamma = 0)."""
        xp = self.model.xp
        K = int(lam.shape[-3])
        eye = xp.eye(cols, dtype=lam.dtype, device=device_of(lam))
        G = [w[..., k, None, None] * _kron(xp, lam[..., k, :, :], eye) for k in range(K)]
        sig = xp.linalg.inv(lam)
        D = [_kron(xp, sig[..., k, :, :], eye) / w[..., k, None, None] for k in range(K)]
        size = K * int(lam.shape[-1]) * cols
        zero = xp.zeros(tuple(lam.shape[:-3]) + (size,), dtype=lam.dtype, device=device_of(lam))
        return _block_diag(xp, G), _block_diag(xp, D), zero

    def _per_state_moments(self, w, lam, M, dM):
        """Blocks w_k Lambda_k (x) M_k of each state's regression coefficients, with their Gamma."""
        xp = self.model.xp
        K = int(lam.shape[-3])
        blocks = [_regression(xp, w[..., k], lam[..., k, :, :], M[..., k, :, :], dM[..., k, :, :, :, :]) for k in range(K)]
        G, D, gam = zip(*blocks)
        return _block_diag(xp, list(G)), _block_diag(xp, list(D)), xp.concat(list(gam), axis=-1)

    def _regime_moments(self, eta, A, Q, rows):
        """Regressor moments M_k = E[s_{t-1} s_{t-1}^T | z_t = k] of a switching model and dM_k / dA_k."""
        xp = self.model.xp
        e = xp.exp(eta - xp.max(eta, axis=-1, keepdims=True))
        Pi = e / xp.sum(e, axis=-1, keepdims=True)
        return regime_moments(xp, Pi, A, Q, rows)

    def _per_state_factor(self, w, psi):
        """Blocks w_k F(psi_k) of each state's precision factor, with their Gamma."""
        xp = self.model.xp
        K = int(psi.shape[-3])
        F, Dp, gp = cholesky_fisher(xp, psi)
        G = _block_diag(xp, [w[..., k, None, None] * F[..., k, :, :] for k in range(K)])
        D = _block_diag(xp, [Dp[..., k, :, :] / w[..., k, None, None] for k in range(K)])
        return G, D, xp.reshape(gp / w[..., :, None], tuple(psi.shape[:-3]) + (-1,))

    def _hmm_blocks(self, theta):
        mdl = self.model
        xp = mdl.xp
        kind = self.kind
        parts = mdl._split(theta)
        w, eta_block = self._switching(parts[0])
        blocks = [eta_block]
        if kind == "GaussianHMM":
            _, mu, psi = parts
            blocks.append(self._per_state(w, psi @ xp.matrix_transpose(psi), 1))
            if mdl._fixed_psi is None:
                blocks.append(self._per_state_factor(w, psi))
        elif kind == "ARHMM":
            eta, A, psi = parts
            lam = psi @ xp.matrix_transpose(psi)
            if self.moments == "identity":
                blocks.append(self._per_state(w, lam, mdl.m * mdl.p))
            else:  # companion form: s_t = (y_t, ..., y_{t-p+1}) = F_k s_{t-1} + (e_t, 0), s_{t-1} = ybar_t
                m, mp = mdl.m, mdl.m * mdl.p
                lead = tuple(A.shape[:-3])
                Qn = xp.zeros(lead + (mdl.K, mp, mp), dtype=mdl.dtype, device=mdl.device)
                Qn = Qn + _pad(xp, _inv_sym(xp, lam), mp)
                shift = xp.eye(mp - m, mp, dtype=mdl.dtype, device=mdl.device)
                F = xp.concat([A, xp.broadcast_to(shift, lead + (mdl.K, mp - m, mp))], axis=-2) if mp > m else A
                M, dM, _ = self._regime_moments(eta, F, Qn, m)
                blocks.append(self._per_state_moments(w, lam, M, dM))
            blocks.append(self._per_state_factor(w, psi))
        else:  # SLDS: the ARHMM rows for the switching dynamics, the LGSSM rows for the emission
            eta, A, C, psiQ, psiR = parts
            T = float(mdl.T)
            lamQ = psiQ @ xp.matrix_transpose(psiQ)
            lamR = psiR @ xp.matrix_transpose(psiR)
            if self.moments == "identity":
                blocks.append(self._per_state(w, lamQ, mdl.n))
                eye_n = xp.eye(mdl.n, dtype=mdl.dtype, device=mdl.device)
                GC = T * (xp.matrix_transpose(mdl._E_C) @ _kron(xp, lamR, eye_n) @ mdl._E_C)
            else:  # A_k: E[x_{t-1} x_{t-1}^T | z_t = k]; C: E[x_t x_t^T] = sum_k pi_k M_k
                M, dM, _ = self._regime_moments(eta, A, _inv_sym(xp, lamQ), mdl.n)
                blocks.append(self._per_state_moments(w, lamQ, M, dM))
                e = xp.exp(eta - xp.max(eta, axis=-1, keepdims=True))
                pi = stationary_law(xp, e / xp.sum(e, axis=-1, keepdims=True))
                Mx = xp.sum(pi[..., :, None, None] * M, axis=-3)
                GC = T * (xp.matrix_transpose(mdl._E_C) @ _batched_kron(xp, lamR, Mx) @ mdl._E_C)
            zc = xp.zeros(tuple(theta.shape[:-1]) + (int(GC.shape[-1]),), dtype=mdl.dtype, device=mdl.device)
            blocks.append((GC, xp.linalg.inv(GC) if GC.shape[-1] else GC, zc))
            blocks.append(self._per_state_factor(w, psiQ))
            FR, DR, gR = cholesky_fisher(xp, psiR)
            blocks.append((T * FR, DR / T, gR / T))
        G, D, gam = zip(*blocks)
        return list(G), list(D), list(gam)

    # -- Metric ---------------------------------------------------------------------------------------
    def value(self, theta: Array) -> Array:
        """G(theta) (chains, d, d): the complete-data Fisher information, block diagonal."""
        G, _, _ = self._blocks(theta)
        return _block_diag(self.model.xp, [g for g in G if g.shape[-1]])

    def inverse(self, theta: Array) -> Array:
        """D(theta) = G(theta)^{-1}, assembled from the inverses of the blocks."""
        _, D, _ = self._blocks(theta)
        return _block_diag(self.model.xp, [d for d in D if d.shape[-1]])

    def gamma(self, theta: Array, inverse: Array | None = None) -> Array:
        """Gamma_i = sum_j dD_ij / d theta_j (chains, d), in closed form."""
        _, _, gam = self._blocks(theta)
        return self.model.xp.concat(gam, axis=-1)

    def inverse_and_gamma(self, theta: Array) -> tuple[Array, Array]:
        xp = self.model.xp
        _, D, gam = self._blocks(theta)
        return _block_diag(xp, [d for d in D if d.shape[-1]]), xp.concat(gam, axis=-1)

    def gamma_sqrt(self, theta: Array) -> Array:
        msg = "SSMFisherMetric is dense and depends on theta, so SGRHMC cannot use it (no closed form for d G^{-1/2}); use SGRLD"
        raise NotImplementedError(msg)

    def __repr__(self) -> str:
        return (f"SSMFisherMetric({type(self.model).__name__}, nu_phi={self.nu_phi}, occupancy={self.occupancy!r}, "
                f"moments={self.moments!r})")
