"""Priors, fixed emission covariances and the initial law of :class:`sgmc.ssm.GaussianHMM`.

The Gaussian HMM's ``theta`` stacks the log expanded means ``eta`` of the transition matrix, the
emission means ``mu`` and, unless the emission covariances are fixed, Cholesky factors ``psi`` of the
emission precisions (thesis section 3.4.1). Its priors, all conjugate in the natural parameters
(thesis appendix A.2.1), are set here:

* each row of ``Pi`` ~ Dirichlet(``transition_prior[k, :]``), as normalised independent
  Gamma(``a_kj``, 1) expanded means: in ``eta = log`` of them the log density is ``a eta - exp(eta)``;
* ``mu_k ~ N(mean_loc_k, diag(mean_var_k))``;
* ``Sigma_k^{-1} ~ Wishart(df_k, scale_k)`` (density ``|L|^{(df - m - 1)/2} exp(-tr(scale^{-1} L) / 2)``),
  carried to ``psi`` with the Jacobian ``prod_i psi_ii^{m - i}`` (0-based ``i``). For ``m = 1``,
  ``Wishart(2a, 1 / (2b))`` is the Gamma(a, b) prior of the precision ``1 / sigma^2``.

The initial law is that of ``z_0``, the state one step before the first observation (``"z0"``,
thesis Eq. 3.35), or of ``z_1``, the state of the first observation (``"z1"``, the textbook HMM).
:func:`first_state_smoother` runs the ``"z1"`` case through the ``z_0`` recursion by starting it at
the filtered law of ``z_1``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .._array_api import Array, device_of

__all__ = ["HMMPrior", "make_prior", "fixed_precision_factor", "first_state_smoother"]


class HMMPrior(NamedTuple):
    """Prior hyperparameters as arrays: ``a`` (K, K), ``loc`` and ``var`` (K, m), ``df`` (K,), ``scale_inv`` (K, m, m)."""

    a: Array
    loc: Array
    var: Array
    df: Array
    scale_inv: Array


def _as(xp, value, name, shapes, dtype, device):
    """``value`` as an array broadcast to the last of ``shapes`` (each allowed shape listed), finite."""
    arr = xp.asarray(value, dtype=dtype, device=device)
    target = shapes[-1]
    if tuple(arr.shape) not in shapes:
        msg = f"`{name}` must be a number or an array of shape {' or '.join(str(s) for s in shapes[1:])}; got shape {tuple(arr.shape)}"
        raise ValueError(msg)
    if not bool(xp.all(xp.isfinite(arr))):
        msg = f"`{name}` must be finite; got {value!r}"
        raise ValueError(msg)
    if arr.ndim == 1 and len(target) > 1:  # (K,) against (K, m): one value per state
        arr = xp.reshape(arr, tuple(arr.shape) + (1,) * (len(target) - 1))
    return xp.broadcast_to(arr, target)


def _pair(value, name):
    if not (isinstance(value, (tuple, list)) and len(value) == 2):
        msg = f"`{name}` must be a pair (location, variance) / (df, scale); got {value!r}"
        raise TypeError(msg)
    return value


def make_prior(xp, K, m, dtype, device, *, prior_var, mean_prior, precision_prior, transition_prior) -> HMMPrior:
    """Check the prior arguments of :class:`~sgmc.ssm.GaussianHMM` and return them as arrays."""
    a = _as(xp, 1.0 if transition_prior is None else transition_prior, "transition_prior", [(), (K, K)], dtype, device)
    if not bool(xp.all(a > 0)):
        msg = f"`transition_prior` (Dirichlet concentrations) must be positive; got {transition_prior!r}"
        raise ValueError(msg)
    loc, var = (0.0, prior_var) if mean_prior is None else _pair(mean_prior, "mean_prior")
    loc = _as(xp, loc, "mean_prior[0]", [(), (K,), (K, m)], dtype, device)
    var = _as(xp, var, "mean_prior[1]", [(), (K,), (K, m)], dtype, device)
    if not bool(xp.all(var > 0)):
        msg = f"`mean_prior` variances must be positive; got {mean_prior!r}"
        raise ValueError(msg)
    if precision_prior is None:
        df, scale = float(m + 1), 1.0 / (m + 1)
    else:
        df, scale = _pair(precision_prior, "precision_prior")
    df = _as(xp, df, "precision_prior[0]", [(), (K,)], dtype, device)
    if not bool(xp.all(df > m - 1)):
        msg = f"`precision_prior` degrees of freedom must exceed m - 1 = {m - 1}; got {df!r}"
        raise ValueError(msg)
    scale = xp.asarray(scale, dtype=dtype, device=device)
    if scale.ndim == 0:
        scale = scale * xp.eye(m, dtype=dtype, device=device)
    scale = _as(xp, scale, "precision_prior[1]", [(m, m), (K, m, m)], dtype, device)
    scale_inv = _spd_inverse(xp, scale, "precision_prior[1]")
    return HMMPrior(a, loc, var, df, scale_inv)


def _spd_inverse(xp, S, name):
    sym = bool(xp.all(xp.abs(S - xp.matrix_transpose(S)) <= 1e-10 * (1.0 + xp.abs(S))))
    ok = sym and bool(xp.all(xp.linalg.eigvalsh(S) > 0))
    if not ok:
        msg = f"`{name}` must be symmetric positive definite"
        raise ValueError(msg)
    return xp.linalg.inv(S)


def fixed_precision_factor(xp, cov, K, m, dtype, device) -> Array:
    """Cholesky factors ``psi_k`` (K, m, m) of the inverses of fixed covariances ``cov``.

    ``cov``: a number (``cov * I`` for every state), ``(K,)`` (per-state multiples of ``I``), ``(m, m)``
    or ``(K, m, m)``.
    """
    c = xp.asarray(cov, dtype=dtype, device=device)
    eye = xp.eye(m, dtype=dtype, device=device)
    if c.ndim == 0 or (c.ndim == 1 and c.shape[0] == K and not (m == K == 1)):
        c = xp.reshape(c, (-1, 1, 1)) * eye
    if tuple(c.shape) not in ((1, m, m), (m, m), (K, m, m)):
        msg = f"`emission_cov` must be a number, or of shape ({K},), ({m}, {m}) or ({K}, {m}, {m}); got shape {tuple(c.shape)}"
        raise ValueError(msg)
    c = xp.broadcast_to(c, (K, m, m))
    if not bool(xp.all(xp.isfinite(c))):
        msg = "`emission_cov` must be finite"
        raise ValueError(msg)
    return xp.linalg.cholesky(_spd_inverse(xp, c, "emission_cov"))


def prior_terms(xp, prior: HMMPrior, eta, mu, psi, jac) -> Array:
    """Log prior density (up to a constant) over the leading axes; ``psi`` None for fixed covariances."""
    d = mu - prior.loc
    lp = xp.sum(prior.a * eta - xp.exp(eta), axis=(-2, -1)) - 0.5 * xp.sum(d * d / prior.var, axis=(-2, -1))
    if psi is None:
        return lp
    m = psi.shape[-1]
    logdiag = xp.log(xp.abs(xp.linalg.diagonal(psi)))  # (..., K, m)
    quad = xp.sum(prior.scale_inv * (psi @ xp.matrix_transpose(psi)), axis=(-2, -1))  # tr(S^-1 L), (..., K)
    wish = (prior.df - m - 1.0)[:, None] + jac  # exponent of each |psi_ii|: (K, m)
    return lp + xp.sum(wish * logdiag, axis=(-2, -1)) - 0.5 * xp.sum(quad, axis=-1)


def prior_grads(xp, prior: HMMPrior, eta, mu, psi, jac) -> tuple[Array, Array, Any]:
    """Gradients of :func:`prior_terms` in ``eta``, ``mu`` and ``psi`` (None for fixed covariances)."""
    geta = prior.a - xp.exp(eta)
    gmu = -(mu - prior.loc) / prior.var
    if psi is None:
        return geta, gmu, None
    m = psi.shape[-1]
    eye = xp.eye(m, dtype=psi.dtype, device=device_of(psi))
    wish = (prior.df - m - 1.0)[:, None] + jac
    gpsi = -(prior.scale_inv @ psi) + eye * (wish / xp.linalg.diagonal(psi))[..., None, :]
    return geta, gmu, gpsi


class Smoothed(NamedTuple):
    """What :func:`first_state_smoother` returns, as :func:`sgmc.ssm.forward_backward` does."""

    loglik: Array
    gamma: Array
    N: Array
    G: Array


def first_state_smoother(xp, fb, Pi, logp, p1, mask, weight) -> Smoothed:
    """Forward-backward with ``p1`` the law of ``z_1`` (the state of the first observation).

    ``fb(Pi, logp, p0, mask, weight)`` is the ``z_0`` recursion (:func:`sgmc.ssm.forward_backward`).
    It runs on observations ``2..L`` from the filtered law ``f_1 ~ p1 * p(y_1 | z_1)``; the smoothed
    law of ``z_1`` is then ``f_1(k) sum_j Pi[k, j] gamma_2(j) / (f_1 Pi)(j)``, and there is no
    transition into ``z_1``.
    """
    b, L, K = logp.shape
    l1 = logp[:, 0, :]
    s1 = xp.max(l1, axis=-1, keepdims=True)
    e1 = p1 * xp.exp(l1 - s1)
    c1 = xp.sum(e1, axis=-1, keepdims=True)
    f1 = e1 / c1
    ll1 = s1[:, 0] + xp.log(c1[:, 0])
    w1 = xp.ones((b,), dtype=logp.dtype, device=device_of(logp)) if weight is None else weight[:, 0]
    if L == 1:
        return Smoothed(ll1, f1[:, None, :], xp.zeros_like(Pi), w1[:, None] * f1)
    ll, gam, N, G = fb(
        Pi, logp[:, 1:, :], f1, None if mask is None else mask[:, 1:], None if weight is None else weight[:, 1:]
    )
    pred = (f1[:, None, :] @ Pi)[:, 0, :]
    g1 = f1 * (Pi @ (gam[:, 0, :] / pred)[..., None])[..., 0]
    g1 = g1 / xp.sum(g1, axis=-1, keepdims=True)
    return Smoothed(ll1 + ll, xp.concat([g1[:, None, :], gam], axis=1), N, G + w1[:, None] * g1)
