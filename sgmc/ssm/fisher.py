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
  of ``C``): G = w Lambda (x) M with Lambda the noise precision and M = E[x x^T] of the regressor; the
  thesis (Eqs. 3.53, 3.73, 3.75) replaces M by the identity, and so does this module. These blocks do
  not depend on their own parameters, so their Gamma is zero;
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

from .._array_api import Array
from ..samplers.metrics import Metric

__all__ = ["SSMFisherMetric", "cholesky_fisher", "stationary_law"]


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
    dt, dev = L.dtype, L.device
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
    eye = xp.eye(K, dtype=Pi.dtype, device=Pi.device)
    ones = xp.ones((K, K), dtype=Pi.dtype, device=Pi.device)
    a = xp.matrix_transpose(eye - Pi) + ones
    b = xp.ones(tuple(Pi.shape[:-1]) + (1,), dtype=Pi.dtype, device=Pi.device)
    return xp.linalg.solve(a, b)[..., 0]


def _block_diag(xp: Any, blocks: list) -> Array:
    """Block-diagonal (..., d, d) from square blocks (..., k_i, k_i) with the same leading axes."""
    sizes = [int(b.shape[-1]) for b in blocks]
    lead = tuple(blocks[0].shape[:-2])
    dt, dev = blocks[0].dtype, blocks[0].device
    rows = []
    for i, b in enumerate(blocks):
        parts = [b if j == i else xp.zeros(lead + (sizes[i], sizes[j]), dtype=dt, device=dev) for j in range(len(blocks))]
        rows.append(xp.concat(parts, axis=-1))
    return xp.concat(rows, axis=-2)


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

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc import backends
    >>> from sgmc.ssm import LGSSM
    >>> theta = np.array([0.9, 2.0, 1.0])
    >>> _, y = LGSSM.simulate_scalar(backends.default_rng(0), 100, theta)
    >>> metric = LGSSM(y).fisher_metric()
    >>> D, gamma = metric.inverse_and_gamma(theta[None, :])
    >>> np.diag(D[0]) * 100                          # (Q, psi_Q^2 / 2, psi_R^2 / 2) / T, T = 100
    array([0.25, 2.  , 0.5 ])
    >>> gamma * 100                                  # (0, psi_Q, psi_R) / T
    array([[0., 2., 1.]])
    """

    def __init__(self, model: Any, *, nu_phi: float = 0.1, occupancy: str = "stationary"):
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
        self.model = model
        self.kind = kinds[0]
        self.hmm = self.kind != "LGSSM"
        self.nu_phi = float(nu_phi)
        self.occupancy = occupancy
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
        _, _, psiQ, psiR = mdl._split(theta)
        FQ, DQ, gQ = cholesky_fisher(xp, psiQ)
        FR, DR, gR = cholesky_fisher(xp, psiR)
        lamQ = psiQ @ xp.matrix_transpose(psiQ)
        lamR = psiR @ xp.matrix_transpose(psiR)
        eye_n = xp.eye(mdl.n, dtype=mdl.dtype, device=mdl.device)
        GA = T * _kron(xp, lamQ, eye_n)
        GC = T * (xp.matrix_transpose(mdl._E_C) @ _kron(xp, lamR, eye_n) @ mdl._E_C)
        G = [GA, GC, T * FQ, T * FR]
        D = [xp.linalg.inv(GA), xp.linalg.inv(GC) if GC.shape[-1] else GC, DQ / T, DR / T]
        zeros = xp.zeros(tuple(theta.shape[:-1]) + (GA.shape[-1] + GC.shape[-1],), dtype=mdl.dtype, device=mdl.device)
        return G, D, [zeros, gQ / T, gR / T]

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
        eye = xp.eye(cols, dtype=lam.dtype, device=lam.device)
        G = [w[..., k, None, None] * _kron(xp, lam[..., k, :, :], eye) for k in range(K)]
        sig = xp.linalg.inv(lam)
        D = [_kron(xp, sig[..., k, :, :], eye) / w[..., k, None, None] for k in range(K)]
        size = K * int(lam.shape[-1]) * cols
        zero = xp.zeros(tuple(lam.shape[:-3]) + (size,), dtype=lam.dtype, device=lam.device)
        return _block_diag(xp, G), _block_diag(xp, D), zero

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
            _, A, psi = parts
            blocks.append(self._per_state(w, psi @ xp.matrix_transpose(psi), mdl.m * mdl.p))
            blocks.append(self._per_state_factor(w, psi))
        else:  # SLDS: the ARHMM rows for the switching dynamics, the LGSSM rows for the emission
            _, A, C, psiQ, psiR = parts
            T = float(mdl.T)
            blocks.append(self._per_state(w, psiQ @ xp.matrix_transpose(psiQ), mdl.n))
            eye_n = xp.eye(mdl.n, dtype=mdl.dtype, device=mdl.device)
            GC = T * (xp.matrix_transpose(mdl._E_C) @ _kron(xp, psiR @ xp.matrix_transpose(psiR), eye_n) @ mdl._E_C)
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
        return f"SSMFisherMetric({type(self.model).__name__}, nu_phi={self.nu_phi}, occupancy={self.occupancy!r})"
