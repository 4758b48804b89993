"""Mixture of multivariate Student-t distributions with known nu under EP (Aicher thesis 5.3.1, App. C.1).

``y_i | z_i = k ~ t_nu(mu_k, Sigma_k) = int N(y_i | mu_k, Sigma_k / u) Gamma(u | nu/2, nu/2) du``
(Eq. 5.4) with a normal-inverse-Wishart prior on ``(mu_k, Sigma_k)``. EP approximates each cluster's
posterior by a NIW (:mod:`sgmc.clustering.niw`), so that

* the approximate collapsed term (Eq. 5.6) is the 1-D integral over ``u`` of the NIW predictive
  (a multivariate t, Eq. C.4), computed by generalised Gauss-Laguerre quadrature in ``u`` for the
  Gamma(nu/2, nu/2) weight (the thesis uses a Riemann sum; the Gauss rule needs fewer nodes);
* the tilted distribution is a mixture over the nodes of NIWs, each the cavity updated by
  ``(u_j, u_j y, u_j y y^T, 1)`` (a rank-one change of ``Psi``, inverted by Sherman-Morrison), whose
  expected sufficient statistics ``E[Sigma^-1] = nu Psi^-1``, ``E[Sigma^-1 mu] = nu Psi^-1 m``,
  ``E[mu^T Sigma^-1 mu] = nu m^T Psi^-1 m + d / kappa``, ``E[log|Sigma^-1|] = psi_d(nu/2) + d log 2 - log|Psi|``
  (App. C.1.4) are averaged with the nodes' posterior weights;
* moment matching gives ``m = A^-1 b``, ``kappa = d / (c - b^T A^-1 b)``, ``Psi = nu A^-1`` and ``nu`` from
  the 1-D root of ``psi_d(nu/2) - d log(nu/2) = E[log|Sigma^-1|] - log|A|`` (increasing in ``nu``;
  safeguarded Newton).

A matched site must keep every cavity proper: its ``Psi`` part is floored (see ``_safe``), and a site
with ``kappa <= 0`` or ``nu <= 0`` is replaced by the Gaussian site at the tilted mean of ``u``,
``(u_bar, u_bar y, u_bar y y^T, 1)``.
With ``nu=None`` the emissions are Gaussian, the sites are exact and EP is exact collapsed Gibbs.

>>> import numpy as np
>>> from sgmc.clustering import StudentTMixtureModel
>>> model = StudentTMixtureModel(np.zeros((4, 2)), nu=5.0)
>>> model.log_predictive(model.prior(3), 0).shape
(3,)
"""

from __future__ import annotations

import math
from typing import Any

from .._array_api import Array, array_namespace, as_float_array, check_finite, device_of, float_dtype
from ..samplers.scir import gamma_draws
from ._special import multidigamma, multitrigamma
from .niw import from_params, log_t_nodes, to_params

__all__ = ["StudentTMixtureModel", "gamma_nodes", "match_niw", "simulate_student_t"]

_LOG2 = math.log(2.0)


def gamma_nodes(xp: Any, nu: float, n_nodes: int, dtype: Any, device: Any = None) -> tuple[Array, Array]:
    """Nodes ``u_j`` and log-weights of the ``n_nodes``-point Gauss rule for ``Gamma(u | nu/2, nu/2)``.

    Golub-Welsch on the generalised Laguerre recurrence with ``alpha = nu/2 - 1``; ``u = 2 x / nu``.
    The weights sum to one.
    """
    al = 0.5 * nu - 1.0
    J = n_nodes
    rows = []
    for i in range(J):
        row = [0.0] * J
        row[i] = 2.0 * i + al + 1.0
        if i > 0:
            row[i - 1] = math.sqrt(i * (i + al))
        if i + 1 < J:
            row[i + 1] = math.sqrt((i + 1) * (i + 1 + al))
        rows.append(row)
    x, V = xp.linalg.eigh(xp.asarray(rows, dtype=xp.float64, device=device))
    w = V[0, :] * V[0, :]
    w = w / xp.sum(w)
    keep = w > 0
    u = xp.astype(2.0 * x[keep] / nu, dtype)
    return u, xp.astype(xp.log(w[keep]), dtype)


def match_niw(A: Array, b: Array, c: Array, e: Array, nu_guess: Array, tol: float = 1e-13, max_iter: int = 100,
              xp: Any = None) -> tuple:
    """NIW additive coordinates whose expected statistics are ``E[Sigma^-1] = A`` (B, d, d),
    ``E[Sigma^-1 mu] = b`` (B, d), ``E[mu^T Sigma^-1 mu] = c`` (B,), ``E[log|Sigma^-1|] = e`` (B,).

    ``nu`` solves ``psi_d(nu/2) - d log(nu/2) = e - log|A|`` by Newton's method started at
    ``nu_guess`` and kept inside the bracket of signs seen so far (bisection when Newton leaves it).
    """
    xp = array_namespace(A) if xp is None else xp
    d = A.shape[-1]
    Ainv = xp.linalg.inv(A)
    Ainv = 0.5 * (Ainv + xp.matrix_transpose(Ainv))
    m = (Ainv @ b[..., None])[..., 0]
    kappa = d / (c - xp.sum(b * m, axis=-1))
    _, logdetA = xp.linalg.slogdet(A)
    target = e - logdetA
    nu = nu_guess
    lo = xp.full_like(nu, d - 1.0)
    hi = xp.full_like(nu, math.inf)
    for _ in range(max_iter):
        f = multidigamma(0.5 * nu, d, xp) - d * xp.log(0.5 * nu) - target
        fp = 0.5 * multitrigamma(0.5 * nu, d, xp) - d / nu
        lo = xp.where(f < 0, nu, lo)
        hi = xp.where(f > 0, nu, hi)
        step = nu - f / fp
        inside = (step > lo) & (step < hi)
        mid = xp.where(xp.isfinite(hi), 0.5 * (lo + hi), 2.0 * nu)
        new = xp.where(inside, step, mid)
        done = bool(xp.all(xp.abs(new - nu) <= tol * nu))
        nu = new
        if done:
            break
    return from_params(kappa, m, nu[:, None, None] * Ainv, nu)


class StudentTMixtureModel:
    """A mixture of multivariate t (known ``nu``) with a normal-inverse-Wishart prior, for the samplers.

    Parameters
    ----------
    y : array (N, d)
    nu : float or None
        Degrees of freedom (> 0); ``None`` for Gaussian emissions.
    mu0 : array (d,), optional
        Prior mean (default zeros).
    kappa0 : float
        Prior pseudo-count of the mean (> 0).
    nu0 : float, optional
        Prior degrees of freedom of the inverse-Wishart (> d - 1; default d + 2).
    Psi0 : array (d, d), optional
        Prior scale matrix (positive definite; default identity).
    n_nodes : int
        Quadrature nodes for the integral over ``u`` (at least 1).
    """

    def __init__(self, y: Array, nu: Any = 5.0, *, mu0: Any = None, kappa0: float = 0.1, nu0: Any = None,
                 Psi0: Any = None, n_nodes: int = 32):
        xp = array_namespace(y)
        if getattr(y, "ndim", None) != 2 or y.shape[0] < 1 or y.shape[1] < 1:
            msg = f"`y` must be a 2-D array (N points, d dimensions) with N, d >= 1; got shape {tuple(getattr(y, 'shape', ()))}"
            raise ValueError(msg)
        dtype = float_dtype(xp, y, names=("y",))
        y = as_float_array(xp, y, dtype, "y")
        check_finite(xp, y, "y")
        N, d = y.shape
        dev = device_of(y)
        if nu is not None:
            nu = float(nu)
            if not (nu > 0) or math.isnan(nu):
                msg = f"`nu` must be positive (or None for Gaussian emissions); got {nu}"
                raise ValueError(msg)
            if math.isinf(nu):
                nu = None
        if not (float(kappa0) > 0 and math.isfinite(float(kappa0))):
            msg = f"`kappa0` must be positive and finite; got {kappa0}"
            raise ValueError(msg)
        nu0 = float(d + 2) if nu0 is None else float(nu0)
        if not nu0 > d - 1:
            msg = f"`nu0` must exceed d - 1 = {d - 1}; got {nu0}"
            raise ValueError(msg)
        mu0 = xp.zeros((d,), dtype=dtype, device=dev) if mu0 is None else xp.asarray(mu0, dtype=dtype, device=dev)
        Psi0 = xp.eye(d, dtype=dtype, device=dev) if Psi0 is None else xp.asarray(Psi0, dtype=dtype, device=dev)
        if tuple(mu0.shape) != (d,):
            msg = f"`mu0` must have shape ({d},); got {tuple(mu0.shape)}"
            raise ValueError(msg)
        if tuple(Psi0.shape) != (d, d) or not bool(xp.all(xp.linalg.eigvalsh(0.5 * (Psi0 + Psi0.T)) > 0)):
            msg = f"`Psi0` must be a positive definite ({d}, {d}) matrix"
            raise ValueError(msg)
        if isinstance(n_nodes, bool) or not isinstance(n_nodes, int) or n_nodes < 1:
            msg = f"`n_nodes` must be an int >= 1; got {n_nodes!r}"
            raise ValueError(msg)
        self.xp, self.device, self.dtype = xp, dev, dtype
        self.y, self.n_data, self.d, self.nu = y, N, d, nu
        self.mu0, self.kappa0, self.nu0, self.Psi0 = mu0, float(kappa0), nu0, Psi0
        self._psi_floor = float(xp.linalg.eigvalsh(0.5 * (Psi0 + Psi0.T))[0]) / (N + 1.0)
        if nu is None:
            self.u_nodes = xp.ones((1,), dtype=dtype, device=dev)
            self.log_w = xp.zeros((1,), dtype=dtype, device=dev)
        else:
            self.u_nodes, self.log_w = gamma_nodes(xp, nu, n_nodes, dtype, dev)

    def prior(self, K: int) -> tuple:
        """Additive NIW coordinates of the prior for ``K`` clusters."""
        xp = self.xp
        one = xp.ones((K,), dtype=self.dtype, device=self.device)
        return from_params(self.kappa0 * one, xp.broadcast_to(self.mu0, (K, self.d)),
                           xp.broadcast_to(self.Psi0, (K, self.d, self.d)), self.nu0 * one)

    def _node_weights(self, cav: tuple, y: Array) -> Array:
        B = cav[0].shape[0]
        u = self.xp.broadcast_to(self.u_nodes[None, :], (B, self.u_nodes.shape[0]))
        return self.log_w[None, :] + log_t_nodes(cav, y, u, self.xp)

    def log_predictive(self, cav: tuple, i: int) -> Array:
        """``log F~_k`` (K,): the quadrature over ``u`` of the NIW predictive of ``y_i`` (Eq. 5.6)."""
        xp = self.xp
        lw = self._node_weights(cav, self.y[i, :])
        mx = xp.max(lw, axis=1)
        return mx + xp.log(xp.sum(xp.exp(lw - mx[:, None]), axis=1))

    def tilted_site(self, cav: tuple, idx: Array) -> tuple:
        """New sites (additive NIW coordinates, leading axis B) of data ``idx`` (B,) by moment matching."""
        xp = self.xp
        d = self.d
        y = xp.take(self.y, idx, axis=0)  # (B, d)
        lw = self._node_weights(cav, y)  # (B, J)
        pi = xp.exp(lw - xp.max(lw, axis=1, keepdims=True))
        pi = pi / xp.sum(pi, axis=1, keepdims=True)
        u = self.u_nodes[None, :]
        kappa, m, Psi, nu = to_params(cav)
        Pinv = xp.linalg.inv(0.5 * (Psi + xp.matrix_transpose(Psi)))
        e = y - m
        g = (Pinv @ e[..., None])[..., 0]  # (B, d)
        r = xp.sum(e * g, axis=-1)  # (B,)
        beta = kappa[:, None] * u / (kappa[:, None] + u)  # (B, J)
        gam = beta / (1.0 + beta * r[:, None])
        kj = kappa[:, None] + u
        mj = m[:, None, :] + (u / kj)[:, :, None] * e[:, None, :]  # (B, J, d)
        Pm = (mj @ Pinv)  # (B, J, d): Psi^-1 m_j (Psi^-1 symmetric)
        gm = xp.sum(mj * g[:, None, :], axis=-1)  # (B, J)
        Pjm = Pm - (gam * gm)[:, :, None] * g[:, None, :]  # Psi_j^-1 m_j
        nuj = nu + 1.0
        s1 = xp.sum(pi * gam, axis=1)
        A = nuj[:, None, None] * (Pinv - s1[:, None, None] * (g[:, :, None] * g[:, None, :]))
        b = nuj[:, None] * xp.sum(pi[:, :, None] * Pjm, axis=1)
        c = xp.sum(pi * (nuj[:, None] * xp.sum(mj * Pjm, axis=-1) + d / kj), axis=1)
        _, logdet = xp.linalg.slogdet(Psi)
        ldj = logdet[:, None] + xp.log1p(beta * r[:, None])
        ev = multidigamma(0.5 * nuj, d, xp) + d * _LOG2 - xp.sum(pi * ldj, axis=1)
        matched = match_niw(A, b, c, ev, nuj, xp=xp)
        site = tuple(mt - cv for mt, cv in zip(matched, cav))
        ubar = xp.sum(pi * u, axis=1)
        return self._safe(site, ubar, y)

    def _safe(self, site: tuple, ubar: Array, y: Array) -> tuple:
        """Sites that keep every cavity proper.

        Every cavity is the prior plus a subset of at most ``N`` sites, and its ``Psi`` is at least
        the sum of the prior's and the sites' ``Psi`` parts (``S - h h^T / kappa``, by Cauchy-Schwarz).
        So a site's ``Psi`` part is floored at ``-lambda_min(Psi_0) / (N + 1)`` (eigenvalues clipped),
        which keeps every cavity's ``Psi`` positive definite; a site with ``kappa <= 0`` or ``nu <= 0``
        becomes the Gaussian site at the tilted mean of ``u``.
        """
        xp = self.xp
        ks, hs, Ss, ns = site
        kpos = xp.where(ks > 0, ks, xp.ones_like(ks))
        hh = (hs[:, :, None] * hs[:, None, :]) / kpos[:, None, None]
        Psi_s = Ss - hh
        Psi_s = 0.5 * (Psi_s + xp.matrix_transpose(Psi_s))
        finite = (xp.isfinite(ks) & xp.isfinite(ns) & xp.all(xp.isfinite(hs), axis=1)
                  & xp.all(xp.isfinite(xp.reshape(Psi_s, (Psi_s.shape[0], -1))), axis=1))
        ok = finite & (ks > 0) & (ns > 0)
        Psi_s = xp.where(ok[:, None, None], Psi_s, xp.zeros_like(Psi_s))
        w, V = xp.linalg.eigh(Psi_s)
        w = xp.clip(w, min=-self._psi_floor)
        Ss = (V * w[:, None, :]) @ xp.matrix_transpose(V) + hh
        fb = (ubar, ubar[:, None] * y, ubar[:, None, None] * (y[:, :, None] * y[:, None, :]), xp.ones_like(ubar))
        site = (ks, hs, Ss, ns)
        return tuple(xp.where(xp.reshape(ok, (-1,) + (1,) * (s.ndim - 1)), s, f) for s, f in zip(site, fb))


def simulate_student_t(rng: Any, z: Array, mu: Array, Sigma: Array, nu: float) -> Array:
    """Draws ``y_i ~ t_nu(mu_{z_i}, Sigma_{z_i})`` (N, d) as Gaussian scale mixtures."""
    xp = array_namespace(mu)
    N = z.shape[0]
    d = mu.shape[1]
    L = xp.linalg.cholesky(xp.take(Sigma, z, axis=0))
    eps = (L @ rng.normal((N, d, 1), dtype=mu.dtype))[..., 0]
    u = gamma_draws(rng, xp.full((N,), 0.5 * nu, dtype=mu.dtype, device=device_of(mu))) / (0.5 * nu)
    return xp.take(mu, z, axis=0) + eps / xp.sqrt(u)[:, None]

