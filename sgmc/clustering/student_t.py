"""Mixture of multivariate Student-t distributions with known nu under EP (Aicher thesis 5.3.1, App. C.1).

``y_i | z_i = k ~ t_nu(mu_k, Sigma_k) = int N(y_i | mu_k, Sigma_k / u) Gamma(u | nu/2, nu/2) du``
(Eq. 5.4) with a normal-inverse-Wishart prior on ``(mu_k, Sigma_k)``. EP approximates each cluster's
posterior by a NIW (:mod:`sgmc.clustering.niw`), so that

* the approximate collapsed term (Eq. 5.6) is the 1-D integral over ``u`` of the NIW predictive
  (a multivariate t, Eq. C.4), computed by a Riemann sum on an equally spaced grid in ``log u``
  (:func:`gamma_nodes`);
* the tilted distribution is a mixture over the nodes of NIWs, each the cavity updated by
  ``(u_j, u_j y, u_j y y^T, 1)`` (a rank-one change of ``Psi``, inverted by Sherman-Morrison), whose
  expected sufficient statistics ``E[Sigma^-1] = nu Psi^-1``, ``E[Sigma^-1 mu] = nu Psi^-1 m``,
  ``E[mu^T Sigma^-1 mu] = nu m^T Psi^-1 m + d / kappa``, ``E[log|Sigma^-1|] = psi_d(nu/2) + d log 2 - log|Psi|``
  (App. C.1.4) are averaged with the nodes' posterior weights;
* moment matching gives ``m = A^-1 b``, ``kappa = d / (c - b^T A^-1 b)``, ``Psi = nu A^-1`` and ``nu`` from
  the 1-D root of ``psi_d(nu/2) - d log(nu/2) = E[log|Sigma^-1|] - log|A|`` (increasing in ``nu``;
  safeguarded Newton).

A matched site with ``kappa <= 0`` or ``nu <= 0`` is replaced by the Gaussian site at the tilted mean
of ``u``, ``(u_bar, u_bar y, u_bar y y^T, 1)``. Sites can lower ``Psi`` (an outlier widens the
tilted distribution), so a cavity built from stale sites need not be a proper NIW; the sampler then
rebuilds it from the prior (see :func:`~sgmc.clustering.ep_gibbs.ep_step`).
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

from .._array_api import Array, array_namespace, device_of
from ..samplers.scir import gamma_draws
from ._data import data_matrix
from ._special import multi_psi_pair, multidigamma
from .niw import from_params, log_t_nodes, to_params

__all__ = ["StudentTMixtureModel", "gamma_nodes", "match_niw", "simulate_student_t"]

_LOG2 = math.log(2.0)


def gamma_nodes(xp: Any, nu: float, dtype: Any, device: Any = None, resolution: float = 1.0) -> tuple[Array, Array]:
    """Nodes ``u_j`` and log-weights of a Riemann (trapezoid) sum for ``Gamma(u | nu/2, nu/2)`` in ``log u``.

    In ``s = log u`` the integrand ``Gamma(e^s) e^s f(e^s)`` is smooth and decays exponentially at both
    ends, so an equally spaced sum converges fast. With ``a = nu / 2`` and ``sd = sqrt(2 / nu)`` the
    grid spans ``s`` from ``min(-40 / a, log(1 - 12 sd))`` (the Gamma density there is below ``e^-40``
    of its peak, room for outliers that favour small ``u``) to ``log(1 + 12 sd + 80 / nu)``, with
    spacing ``0.25 / sqrt(a)`` (``0.5`` for ``a < 1``) divided by ``resolution``: a fraction of the
    width of the peak in ``s``.
    """
    a = 0.5 * nu
    sd = math.sqrt(2.0 / nu)
    s_lo = -40.0 / a if 12.0 * sd >= 1.0 else min(-40.0 / a, math.log(1.0 - 12.0 * sd))
    s_hi = math.log(1.0 + 12.0 * sd + 80.0 / nu)
    h = (0.25 / math.sqrt(a) if a >= 1.0 else 0.5) / resolution
    J = int(math.ceil((s_hi - s_lo) / h)) + 1
    h = (s_hi - s_lo) / (J - 1)
    s_grid = [s_lo + j * h for j in range(J)]
    # log of h * Gamma(u | a, rate a) * u (the Jacobian of s = log u); trapezoid ends are negligible
    logw = [math.log(h) + a * math.log(a) - math.lgamma(a) + a * s - a * math.exp(s) for s in s_grid]
    u = xp.asarray([math.exp(s) for s in s_grid], dtype=dtype, device=device)
    return u, xp.asarray(logw, dtype=dtype, device=device)


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
        psi, psi1 = multi_psi_pair(0.5 * nu, d, xp)
        f = psi - d * xp.log(0.5 * nu) - target
        fp = 0.5 * psi1 - d / nu
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
    resolution : float
        Density of the grid in ``log u`` for the integral over ``u``, relative to the default (> 0).
    """

    def __init__(self, y: Array, nu: Any = 5.0, *, mu0: Any = None, kappa0: float = 0.1, nu0: Any = None,
                 Psi0: Any = None, resolution: float = 1.0):
        xp, y, dtype = data_matrix(y, "N points, d dimensions")
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
        if isinstance(resolution, bool) or not (isinstance(resolution, (int, float)) and math.isfinite(resolution)
                                                and resolution > 0):
            msg = f"`resolution` must be a positive number (grid points per unit of the default spacing); got {resolution!r}"
            raise ValueError(msg)
        self.xp, self.device, self.dtype = xp, dev, dtype
        self.y, self.n_data, self.d, self.nu = y, N, d, nu
        self.mu0, self.kappa0, self.nu0, self.Psi0 = mu0, float(kappa0), nu0, Psi0
        if nu is None:
            self.u_nodes = xp.ones((1,), dtype=dtype, device=dev)
            self.log_w = xp.zeros((1,), dtype=dtype, device=dev)
        else:
            self.u_nodes, self.log_w = gamma_nodes(xp, nu, dtype, dev, resolution)

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

    def predict_and_match(self, cav: tuple, i: int):
        """``log F~_k`` (K,) of datum ``i`` and a function of the drawn cluster (a (1,) int array) giving
        its new site; the node weights over ``u`` are computed once for both. Equals
        :meth:`log_predictive` then :meth:`tilted_site`."""
        xp = self.xp
        lw = self._node_weights(cav, self.y[i, :])
        mx = xp.max(lw, axis=1)
        log_f = mx + xp.log(xp.sum(xp.exp(lw - mx[:, None]), axis=1))
        idx = xp.asarray([i], device=self.device)

        def match(k: Array) -> tuple:
            return self.tilted_site(tuple(xp.take(c, k, axis=0) for c in cav), idx, lw=xp.take(lw, k, axis=0))

        return log_f, match

    def tilted_site(self, cav: tuple, idx: Array, lw: Array | None = None) -> tuple:
        """New sites (additive NIW coordinates, leading axis B) of data ``idx`` (B,) by moment matching
        (``lw``: the node log-weights (B, J) of :meth:`tilted_moments`, if already computed)."""
        xp = self.xp
        A, b, c, ev, nuj, ubar = self.tilted_moments(cav, idx, lw=lw)
        matched = match_niw(A, b, c, ev, nuj, xp=xp)
        site = tuple(mt - cv for mt, cv in zip(matched, cav))
        return self._safe(site, ubar, xp.take(self.y, idx, axis=0))

    def tilted_moments(self, cav: tuple, idx: Array, lw: Array | None = None) -> tuple:
        """Expected NIW statistics under the tilted distributions of data ``idx`` (B,) (App. C.1.4).

        Returns ``E[Sigma^-1]`` (B, d, d), ``E[Sigma^-1 mu]`` (B, d), ``E[mu^T Sigma^-1 mu]`` (B,),
        ``E[log|Sigma^-1|]`` (B,), the nodes' common ``nu`` (B,) and the tilted mean of ``u`` (B,).
        """
        xp = self.xp
        d = self.d
        y = xp.take(self.y, idx, axis=0)  # (B, d)
        if lw is None:
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
        return A, b, c, ev, nuj, xp.sum(pi * u, axis=1)

    def proper(self, q: tuple) -> Array:
        """Whether each NIW (leading axis) is proper: ``kappa > 0``, ``nu > d - 1``, ``Psi`` positive definite."""
        xp = self.xp
        kappa, _, Psi, nu = to_params(q)
        lam = xp.linalg.eigvalsh(0.5 * (Psi + xp.matrix_transpose(Psi)))[:, 0]
        return (kappa > 0) & (nu > self.d - 1) & (lam > 0) & xp.isfinite(lam)

    def _safe(self, site: tuple, ubar: Array, y: Array) -> tuple:
        """A site with ``kappa <= 0``, ``nu <= 0`` or non-finite entries becomes the Gaussian site at ``u_bar``."""
        xp = self.xp
        ks, hs, Ss, ns = site
        finite = (xp.isfinite(ks) & xp.isfinite(ns) & xp.all(xp.isfinite(hs), axis=1)
                  & xp.all(xp.isfinite(xp.reshape(Ss, (Ss.shape[0], -1))), axis=1))
        ok = finite & (ks > 0) & (ns > 0)
        fb = (ubar, ubar[:, None] * y, ubar[:, None, None] * (y[:, :, None] * y[:, None, :]), xp.ones_like(ubar))
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

