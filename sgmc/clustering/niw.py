"""Normal-inverse-Wishart (NIW) algebra for the Student-t mixture samplers, on arrays of any namespace.

``NIW(mu, Sigma | m, kappa, nu, Psi) = N(mu | m, Sigma / kappa) IW(Sigma | nu, Psi)`` (thesis Eq. C.2)
is stored by the additive coordinates ``(kappa, kappa m, Psi + kappa m m^T, nu)``: multiplying by a
Gaussian likelihood ``N(y | mu, Sigma / u)`` adds ``(u, u y, u y y^T, 1)``, so EP's sites and cavities
are sums and differences of these four arrays (leading batch axis). The predictive density of ``y``
under ``N(y | mu, Sigma / u)`` and a NIW is a multivariate t with ``nu - d + 1`` degrees of freedom,
centre ``m`` and scale ``Psi (kappa + u) / (kappa u (nu - d + 1))`` (Eq. C.4).

>>> import numpy as np
>>> from sgmc.clustering.niw import from_params, to_params
>>> nat = from_params(np.ones(1), np.zeros((1, 2)), np.eye(2)[None], np.full(1, 4.0))
>>> [a.shape for a in to_params(nat)]
[(1,), (1, 2), (1, 2, 2), (1,)]
"""

from __future__ import annotations

import math
from typing import Any

from .._array_api import Array, array_namespace
from ._special import lgamma
from ..samplers.scir import gamma_draws

__all__ = ["from_params", "to_params", "log_t_nodes", "sample_niw", "posterior_stats"]

_LOG_PI = math.log(math.pi)


def from_params(kappa: Array, m: Array, Psi: Array, nu: Array) -> tuple:
    """Additive coordinates ``(kappa, kappa m, Psi + kappa m m^T, nu)`` of NIW parameters (batched)."""
    h = kappa[:, None] * m
    return kappa, h, Psi + kappa[:, None, None] * (m[:, :, None] * m[:, None, :]), nu


def to_params(nat: tuple) -> tuple:
    """``(kappa, m, Psi, nu)`` from additive coordinates."""
    kappa, h, S, nu = nat
    m = h / kappa[:, None]
    return kappa, m, S - kappa[:, None, None] * (m[:, :, None] * m[:, None, :]), nu


def _sym(xp, M):
    return 0.5 * (M + xp.matrix_transpose(M))


def log_t_nodes(nat: tuple, y: Array, u: Array, xp: Any = None) -> Array:
    """``log p(y | NIW, u)`` for scale factors ``u`` (B, J): the multivariate t of Eq. C.4, array (B, J).

    ``nat`` has a leading axis B; ``y`` is (B, d) or (d,).
    """
    xp = array_namespace(u) if xp is None else xp
    kappa, m, Psi, nu = to_params(nat)
    d = m.shape[-1]
    L = xp.linalg.cholesky(_sym(xp, Psi))
    e = y - m
    sol = xp.linalg.solve(L, e[..., None])[..., 0]
    r = xp.sum(sol * sol, axis=-1)  # (B,) (y - m)^T Psi^{-1} (y - m)
    logdet = 2.0 * xp.sum(xp.log(xp.linalg.diagonal(L)), axis=-1)
    df = nu - d + 1.0
    c = (kappa[:, None] + u) / (kappa[:, None] * u * df[:, None])  # scale factor over Psi
    const = lgamma(0.5 * (df + d), xp) - lgamma(0.5 * df, xp) - 0.5 * d * (xp.log(df) + _LOG_PI) - 0.5 * logdet
    return (const[:, None] - 0.5 * d * xp.log(c)
            - 0.5 * (df[:, None] + d) * xp.log1p(r[:, None] / (c * df[:, None])))


def posterior_stats(prior: tuple, y: Array, z_onehot: Array, w: Array) -> tuple:
    """Additive NIW coordinates per cluster after data ``y`` (N, d) with weights ``w`` (N,).

    ``z_onehot`` (N, K) selects the cluster of each datum; the result has a leading axis K.
    """
    xp = array_namespace(y)
    W = z_onehot * w[:, None]  # (N, K)
    Wt = xp.matrix_transpose(W)
    kappa = prior[0] + xp.sum(W, axis=0)
    h = prior[1] + Wt @ y
    N, d = y.shape
    outer = xp.reshape(y[:, :, None] * y[:, None, :], (N, d * d))
    S = prior[2] + xp.reshape(Wt @ outer, (-1, d, d))
    nu = prior[3] + xp.sum(z_onehot, axis=0)
    return kappa, h, S, nu


def sample_niw(rng: Any, nat: tuple) -> tuple:
    """``(mu, Sigma)`` draws (K, d), (K, d, d) from NIWs given by additive coordinates (K leading).

    ``Sigma^{-1}`` is Wishart(nu, Psi^{-1}) by Bartlett's decomposition (chi-square diagonal from
    gamma draws, standard normals below it); ``mu | Sigma ~ N(m, Sigma / kappa)``.
    """
    kappa, m, Psi, nu = to_params(nat)
    xp = array_namespace(m)
    K, d = m.shape
    dtype = m.dtype
    Lw = xp.linalg.cholesky(_sym(xp, xp.linalg.inv(_sym(xp, Psi))))
    shapes = 0.5 * (nu[:, None] - xp.arange(d, device=m.device, dtype=dtype)[None, :])
    diag = xp.sqrt(2.0 * gamma_draws(rng, shapes))  # (K, d)
    eye = xp.eye(d, dtype=dtype, device=m.device)
    lower = xp.tril(rng.normal((K, d, d), dtype=dtype), k=-1)
    A = lower + diag[:, :, None] * eye
    LA = Lw @ A
    Sigma = xp.linalg.inv(_sym(xp, LA @ xp.matrix_transpose(LA)))
    Sigma = _sym(xp, Sigma)
    Lc = xp.linalg.cholesky(Sigma / kappa[:, None, None])
    mu = m + (Lc @ rng.normal((K, d, 1), dtype=dtype))[..., 0]
    return mu, Sigma
