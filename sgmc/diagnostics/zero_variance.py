"""Posterior means with zero-variance control variates: the draws' scores cancel most Monte Carlo noise.

For a smooth density pi on R^d and a polynomial P, Stein's identity (integration by parts) gives
E_pi[Delta P + grad P . grad log pi] = 0. Each such term is a control variate that costs nothing but the
scores at the draws, which gradient-based samplers compute anyway. Mira, Solgi and Imparato (2013,
"Zero variance Markov chain Monte Carlo for Bayesian estimators", Statistics and Computing 23) estimate
E[x_j] by the mean of x_j - beta^T psi(x), with psi the control variates of the polynomials of degree 1
(psi = grad log pi) or 2 (adding x_k g_l + x_l g_k, and 1 + x_k g_k on the diagonal) and beta by least
squares. Degree 1 is exact for Gaussian targets; degree 2 also removes the leading skewness, so on a
near-Gaussian posterior (a GLM with much data) its error is orders of magnitude below the plain mean's.

Fitting beta on the same draws that are averaged biases the estimate by O(p / n) with p features.
:func:`zv_mean` therefore cross-fits: the coefficients used on each chain are fitted on the other
chains (a single chain is split in halves), so the estimate stays unbiased and its Monte Carlo standard
error, from the effective sample size of the corrected draws (:func:`sgmc.diagnostics.mcse`), is honest.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._array_api import Array, Namespace, array_namespace, as_float_array, check_finite, device_of, float_dtype
from .ess import mcse

__all__ = ["zv_mean", "ZVMean", "zv_features", "n_zv_features", "zv_order_for"]


@dataclass(frozen=True)
class ZVMean:
    """A zero-variance estimate of the posterior mean.

    Attributes
    ----------
    mean : array (dim,)
        The estimate.
    se : array (dim,)
        Its Monte Carlo standard error per coordinate.
    plain_se : array (dim,)
        The standard error of the plain mean of the same draws, for comparison.
    order : int
        The degree of the polynomials.
    n_features : int
        Control variates per coordinate: d for degree 1, d + d (d + 1) / 2 for degree 2.
    """

    mean: Array
    se: Array
    plain_se: Array
    order: int
    n_features: int


def n_zv_features(dim: int, order: int) -> int:
    """The number of control variates of :func:`zv_mean` for ``dim`` coordinates and ``order``."""
    return dim if order == 1 else dim + dim * (dim + 1) // 2


def zv_features(xp: Namespace, x: Array, g: Array, order: int, centre: Array, scale: Array) -> Array:
    """Control variates psi (n, p) at draws ``x`` (n, d) with scores ``g`` (n, d); mean zero under pi.

    Degree 2 uses the polynomials u_k u_l with u = (x - centre) / scale, whose control variates are
    Delta P + grad P . g = u_l g_k / s_k + u_k g_l / s_l + 2 delta_kl / s_k^2 (centring and scaling
    only condition the least-squares fit; they span the same polynomials).
    """
    if order == 1:
        return g
    d = x.shape[1]
    u = (x - centre) / scale
    gs = g / scale
    cols = [g]
    inv2 = 2.0 / (scale * scale)
    for k in range(d):
        # l >= k: u_l gs_k + u_k gs_l (+ 2 / s_k^2 on the diagonal)
        block = u[:, k:] * gs[:, k:k + 1] + u[:, k:k + 1] * gs[:, k:]
        block = block + xp.concat([inv2[k:k + 1], xp.zeros_like(inv2[k + 1:])])
        cols.append(block)
    return xp.concat(cols, axis=1)


def _cross_fit(xp, psi: Array, x: Array) -> Array:
    """Least-squares coefficients (with an intercept) of x on psi, one set per chain, each fitted on the
    other chains' draws: ``(chains, p, d)``.

    ``psi`` (chains, n, p) and ``x`` (chains, n, d) are centred on their overall means first; each
    fold's sums are then the totals less the held-out chain's, so every fold is fitted at once by a
    batched solve of its normal equations on standardised columns, with a ridge at the level of
    rounding.
    """
    chains, n, p = psi.shape
    psi = psi - xp.mean(psi, axis=(0, 1))
    x = x - xp.mean(x, axis=(0, 1))
    pt = xp.matrix_transpose(psi)
    gram_c, cross_c = pt @ psi, pt @ x  # per chain (chains, p, p) and (chains, p, d)
    sum_psi, sum_x = xp.sum(psi, axis=1), xp.sum(x, axis=1)  # (chains, p), (chains, d)
    rows = (chains - 1) * n
    f_psi = (xp.sum(sum_psi, axis=0) - sum_psi) / rows  # each fold's means
    f_x = (xp.sum(sum_x, axis=0) - sum_x) / rows
    gram = xp.sum(gram_c, axis=0) - gram_c - rows * (f_psi[:, :, None] * f_psi[:, None, :])
    cross = xp.sum(cross_c, axis=0) - cross_c - rows * (f_psi[:, :, None] * f_x[:, None, :])
    diag = xp.linalg.diagonal(gram)
    norm = xp.sqrt(xp.where(diag > 0, diag, xp.ones_like(diag)))  # (chains, p)
    gram = gram / (norm[:, :, None] * norm[:, None, :])
    eye = xp.eye(p, dtype=gram.dtype, device=device_of(gram))
    gram = gram + (1e-10 if gram.dtype == xp.float64 else 1e-5) * eye
    return xp.linalg.solve(gram, cross / norm[:, :, None]) / norm[:, :, None]


def zv_mean(draws: Array, grads: Array, *, order: int = 2) -> ZVMean:
    """Posterior mean from draws and their scores, with cross-fitted zero-variance control variates.

    Parameters
    ----------
    draws : array, shape (chains, n, dim) or (n, dim)
        Draws from the target (after burn-in), e.g. ``trace.draws``.
    grads : array, same shape
        grad log pi at each draw, exact (``sgmc.sample(..., store_grads="full")``): noisy
        minibatch gradients break the identity the control variates rest on.
    order : {1, 2}
        Degree of the polynomials. Degree 2 needs more than d + d (d + 1) / 2 + 1 draws in the draws
        each chain's coefficients are fitted on (the other chains, or the other half of one chain).

    Returns
    -------
    ZVMean
        ``mean`` and its standard error ``se``, with ``plain_se`` of the plain mean beside it.

    Raises
    ------
    ValueError
        For shapes that differ, non-finite values, an ``order`` other than 1 or 2, or too few draws
        for the least-squares fit (the message says how many are needed).

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.diagnostics import zv_mean
    >>> x = np.random.default_rng(0).gamma(5.0, size=(2, 500, 1))   # Gamma(5, 1): mean 5
    >>> g = 4.0 / x - 1.0                                           # its score
    >>> est = zv_mean(x, g)
    >>> bool(abs(float(est.mean[0]) - 5.0) < 4.5 * float(est.se[0]))
    True
    >>> bool(est.se[0] < est.plain_se[0] / 5)
    True
    """
    xp = array_namespace(draws, grads, names=("draws", "grads"))
    if not isinstance(order, int) or isinstance(order, bool) or order not in (1, 2):
        msg = f"`order` must be 1 or 2 (the degree of the polynomials); got {order!r}"
        raise ValueError(msg)
    dtype = float_dtype(xp, draws, grads, names=("draws", "grads"))
    x = as_float_array(xp, draws, dtype, "draws")
    g = as_float_array(xp, grads, dtype, "grads")
    if x.ndim not in (2, 3):
        msg = f"`draws` must have shape (chains, n, dim) or (n, dim); got shape {tuple(x.shape)}"
        raise ValueError(msg)
    if tuple(g.shape) != tuple(x.shape):
        msg = f"`grads` must have the shape of `draws`, {tuple(x.shape)}; got {tuple(g.shape)}"
        raise ValueError(msg)
    check_finite(xp, x, "draws")
    check_finite(xp, g, "grads")
    if x.ndim == 2:
        x, g = x[None, ...], g[None, ...]
    chains, n, d = x.shape
    if chains == 1:  # two halves stand in for two chains
        half = n // 2
        x = xp.stack([x[0, :half, :], x[0, half:2 * half, :]])
        g = xp.stack([g[0, :half, :], g[0, half:2 * half, :]])
        chains, n = 2, half
    p = n_zv_features(d, order)
    fit_rows = (chains - 1) * n
    if fit_rows < p + 2 or n < 4:
        msg = (
            f"zv_mean(order={order}) fits {p} coefficients per coordinate on the draws of the other "
            f"chains ({fit_rows} draws here); give at least {p + 2} draws per fold and 4 per chain "
            f"(more iterations or chains), or order=1"
        )
        raise ValueError(msg)
    # The centre and scale of the polynomials only condition the fit: polynomials of degree <= 2 in
    # (x - centre) / scale span the same space for any of them, and the fit has an intercept, so one
    # choice from all the draws serves every fold without coupling them.
    flat = xp.reshape(x, (chains * n, d))
    centre = xp.mean(flat, axis=0)
    scale = xp.std(flat, axis=0)
    scale = xp.where(scale > 0, scale, xp.ones_like(scale))
    psi = xp.reshape(
        zv_features(xp, flat, xp.reshape(g, (chains * n, d)), order, centre, scale), (chains, n, p)
    )
    terms = x - psi @ _cross_fit(xp, psi, x)
    mean = xp.mean(xp.reshape(terms, (chains * n, d)), axis=0)
    return ZVMean(mean, mcse(terms), mcse(x), order, p)


def zv_order_for(dim: int, draws_per_fold: int) -> int:
    """Degree 2 when the fit has at least three draws per coefficient, else degree 1."""
    return 2 if draws_per_fold >= 3 * n_zv_features(dim, 2) else 1

