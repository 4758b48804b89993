"""Accuracy metrics for samplers: Gaussian KL divergence, predictive log-loss, mean squared error.

* :func:`kl_gaussian` is the closed-form KL(N0 || N1) =
  1/2 [tr(S1^-1 S0) + (m1 - m0)^T S1^-1 (m1 - m0) - d + log det S1 - log det S0].
* :func:`gaussian_kl_from_samples` fits a Gaussian to draws and returns KL(reference || fit), the
  direction used for the bivariate Gaussian experiments of Putcha, Nemeth and Fearnhead (2023,
  section 5.2.1): the expectation is under the known target, so the metric asks how much of the
  target's mass the sampler's approximation misses, and it becomes infinite when the draws collapse.
* :func:`log_loss` is the binary log-loss of the review (Nemeth and Fearnhead 2021, eq. 14):
  -(1/|T*|) sum [y* log p + (1 - y*) log(1 - p)] on held-out data.
* :func:`predictive_log_lik` is the mean over test points of log (1/S) sum_s p(y* | theta_s), the
  log posterior-predictive density estimated from S draws, computed with a log-sum-exp over draws.
* :func:`mse` is the squared error of a posterior-mean estimate, averaged over coordinates.
"""

from __future__ import annotations

import math
from typing import Any

from .._array_api import Array, Namespace, array_namespace, as_float_array, check_finite, device_of, float_dtype

__all__ = ["kl_gaussian", "gaussian_kl_from_samples", "log_loss", "predictive_log_lik", "mse"]


def _float(xp: Namespace, x: Array, dtype: Any, name: str) -> Array:
    x = as_float_array(xp, x, dtype, name)
    check_finite(xp, x, name)
    return x


def _check_cov(xp: Namespace, cov: Array, d: int, name: str) -> None:
    if tuple(cov.shape[-2:]) != (d, d):
        msg = f"`{name}` must have shape (..., {d}, {d}) to match the mean; got {tuple(cov.shape)}"
        raise ValueError(msg)
    sym = xp.abs(cov - xp.matrix_transpose(cov)) <= 1e-8 * (1.0 + xp.max(xp.abs(cov)))
    if not bool(xp.all(sym)):
        msg = f"`{name}` must be symmetric"
        raise ValueError(msg)
    if not bool(xp.all(xp.linalg.eigvalsh(cov) > 0)):
        msg = f"`{name}` must be positive definite"
        raise ValueError(msg)


def _kl(xp: Namespace, m0: Array, c0: Array, m1: Array, c1: Array) -> Array:
    d = m0.shape[-1]
    diff = (m1 - m0)[..., None]                                   # (..., d, 1)
    sol = xp.linalg.solve(c1, xp.concat([c0, diff], axis=-1))     # S1^-1 [S0, m1 - m0]
    trace = xp.sum(xp.linalg.diagonal(sol[..., :d]), axis=-1)
    quad = xp.sum(diff[..., 0] * sol[..., d], axis=-1)
    _, logdet1 = xp.linalg.slogdet(c1)
    _, logdet0 = xp.linalg.slogdet(c0)
    return 0.5 * (trace + quad - d + logdet1 - logdet0)


def kl_gaussian(mean0: Array, cov0: Array, mean1: Array, cov1: Array) -> Array:
    """Kullback-Leibler divergence KL(N(mean0, cov0) || N(mean1, cov1)) in closed form.

    Parameters
    ----------
    mean0, mean1 : array, shape (..., d)
    cov0, cov1 : array, shape (..., d, d)
        Symmetric positive definite; leading axes broadcast (a batch of pairs).

    Returns
    -------
    array
        Shape of the broadcast leading axes (0-d for a single pair), in nats.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.diagnostics.metrics import kl_gaussian
    >>> float(kl_gaussian(np.zeros(1), np.eye(1), np.ones(1), np.eye(1)))   # (1 - 0)^2 / 2
    0.5
    """
    xp = array_namespace(mean0, cov0, mean1, cov1, names=("mean0", "cov0", "mean1", "cov1"))
    dtype = float_dtype(xp, mean0, cov0, mean1, cov1, names=("mean0", "cov0", "mean1", "cov1"))
    m0 = _float(xp, mean0, dtype, "mean0")
    m1 = _float(xp, mean1, dtype, "mean1")
    c0 = _float(xp, cov0, dtype, "cov0")
    c1 = _float(xp, cov1, dtype, "cov1")
    if m0.ndim < 1 or m1.ndim < 1 or m0.shape[-1] != m1.shape[-1]:
        msg = f"`mean0` and `mean1` must be (..., d) with the same d; got {tuple(m0.shape)} and {tuple(m1.shape)}"
        raise ValueError(msg)
    d = m0.shape[-1]
    _check_cov(xp, c0, d, "cov0")
    _check_cov(xp, c1, d, "cov1")
    return xp.asarray(_kl(xp, m0, c0, m1, c1))


def gaussian_kl_from_samples(draws: Array, ref_mean: Array, ref_cov: Array) -> Array:
    """KL(N(ref_mean, ref_cov) || N(sample mean, sample covariance)) from MCMC draws.

    The draws of all chains are pooled; the fitted covariance uses ``n - 1`` in the denominator.
    The direction is reference-to-fit (see the module notes): it is finite only when the draws span
    every direction, and it grows fast when the draws are under-dispersed.

    Parameters
    ----------
    draws : array, shape (chains, n, d) or (n, d)
    ref_mean : array, shape (d,)
    ref_cov : array, shape (d, d)

    Returns
    -------
    array
        0-d, in nats; ``inf`` when the sample covariance is singular.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.diagnostics.metrics import gaussian_kl_from_samples
    >>> x = np.random.default_rng(0).normal(size=(20000, 2))
    >>> float(gaussian_kl_from_samples(x, np.zeros(2), np.eye(2))) < 1e-3
    True
    """
    xp = array_namespace(draws, ref_mean, ref_cov, names=("draws", "ref_mean", "ref_cov"))
    dtype = float_dtype(xp, draws, ref_mean, ref_cov, names=("draws", "ref_mean", "ref_cov"))
    x = _float(xp, draws, dtype, "draws")
    if x.ndim == 3:
        x = xp.reshape(x, (-1, x.shape[-1]))
    if x.ndim != 2:
        msg = f"`draws` must have shape (chains, n, d) or (n, d); got {tuple(draws.shape)}"
        raise ValueError(msg)
    n, d = x.shape
    if n < 2:
        msg = f"`draws` must contain at least 2 draws; got {n}"
        raise ValueError(msg)
    m_ref = _float(xp, ref_mean, dtype, "ref_mean")
    c_ref = _float(xp, ref_cov, dtype, "ref_cov")
    if tuple(m_ref.shape) != (d,):
        msg = f"`ref_mean` must have shape ({d},) to match the draws; got {tuple(m_ref.shape)}"
        raise ValueError(msg)
    _check_cov(xp, c_ref, d, "ref_cov")
    mean = xp.mean(x, axis=0)
    xc = x - mean
    cov = xp.matrix_transpose(xc) @ xc / (n - 1)
    cov = 0.5 * (cov + xp.matrix_transpose(cov))
    if not bool(xp.all(xp.linalg.eigvalsh(cov) > 0)):
        return xp.asarray(math.inf, dtype=dtype, device=device_of(x))
    return xp.asarray(_kl(xp, m_ref, c_ref, mean, cov))


def log_loss(prob: Array, y: Array, *, eps: float | None = None) -> Array:
    """Binary log-loss (review eq. 14): -mean[y log p + (1 - y) log(1 - p)] over test points.

    Parameters
    ----------
    prob : array, shape (..., n_test)
        Predicted P(y = 1) for each test point; leading axes (e.g. one row per draw) are kept. For the
        Bayesian posterior-predictive log-loss, average the per-draw probabilities over draws first.
    y : array, shape (n_test,)
        Labels in {0, 1}.
    eps : float, optional
        Probabilities are clipped to ``[eps, 1 - eps]`` so that a confident mistake costs a large but
        finite amount; default the machine epsilon of the working dtype.

    Returns
    -------
    array
        Shape ``prob.shape[:-1]`` (0-d for 1-D ``prob``).

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.diagnostics.metrics import log_loss
    >>> round(float(log_loss(np.array([0.9, 0.2]), np.array([1, 0]))), 4)   # -(log .9 + log .8) / 2
    0.1643
    """
    xp = array_namespace(prob, y, names=("prob", "y"))
    dtype = float_dtype(xp, prob, names=("prob",))
    float_dtype(xp, y, names=("y",))  # an array of real numbers, or an error naming `y`
    p = _float(xp, prob, dtype, "prob")
    t = _float(xp, y, dtype, "y")
    if p.ndim < 1 or t.ndim != 1 or p.shape[-1] != t.shape[0]:
        msg = f"`prob` must be (..., n_test) and `y` (n_test,); got {tuple(p.shape)} and {tuple(t.shape)}"
        raise ValueError(msg)
    if not bool(xp.all((p >= 0) & (p <= 1))):
        msg = "`prob` must hold probabilities in [0, 1]"
        raise ValueError(msg)
    if not bool(xp.all((t == 0) | (t == 1))):
        msg = "`y` must contain only 0 and 1"
        raise ValueError(msg)
    if eps is None:
        eps = float(xp.finfo(dtype).eps)
    elif isinstance(eps, (bool, str, bytes)) or not isinstance(eps, (int, float)) or not (0.0 < float(eps) < 0.5):
        msg = f"`eps` must be a number in (0, 0.5); got {eps!r}"
        raise (ValueError if isinstance(eps, (int, float)) and not isinstance(eps, bool) else TypeError)(msg)
    p = xp.clip(p, float(eps), 1.0 - float(eps))
    ll = t * xp.log(p) + (1.0 - t) * xp.log1p(-p)
    return xp.asarray(-xp.mean(ll, axis=-1))


def predictive_log_lik(log_lik: Array) -> Array:
    """Mean over test points of the log posterior-predictive density, from per-draw log-likelihoods.

    Computes (1/n) sum_i log[(1/S) sum_s exp(log_lik[s, i])] with a log-sum-exp over draws, so it
    stays finite when every single-draw likelihood underflows.

    Parameters
    ----------
    log_lik : array, shape (S, n_test) or (chains, S, n_test)
        log p(y*_i | theta_s) for each draw s and test point i; chains are pooled with the draws.

    Returns
    -------
    array
        0-d. Its negative is the posterior-predictive log-loss.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.diagnostics.metrics import predictive_log_lik
    >>> ll = np.log(np.array([[0.2, 0.5], [0.6, 0.5]]))            # 2 draws, 2 test points
    >>> round(float(predictive_log_lik(ll)), 6)                       # (log 0.4 + log 0.5) / 2
    -0.804719
    """
    xp = array_namespace(log_lik, names=("log_lik",))
    ll = as_float_array(xp, log_lik, float_dtype(xp, log_lik, names=("log_lik",)), "log_lik")
    if ll.ndim == 3:
        ll = xp.reshape(ll, (-1, ll.shape[-1]))
    if ll.ndim != 2 or ll.shape[0] < 1 or ll.shape[1] < 1:
        msg = f"`log_lik` must have shape (draws, n_test) or (chains, draws, n_test); got {tuple(log_lik.shape)}"
        raise ValueError(msg)
    if bool(xp.any(xp.isnan(ll) | (ll == math.inf))):
        msg = "`log_lik` must not contain NaN or +inf (-inf, a zero likelihood, is allowed)"
        raise ValueError(msg)
    s = ll.shape[0]
    top = xp.max(ll, axis=0)
    # a test point with zero likelihood under every draw has log predictive -inf
    shift = xp.where(top == -math.inf, xp.zeros_like(top), top)
    total = xp.sum(xp.exp(ll - shift), axis=0)
    pos = total > 0
    lse = shift + xp.log(xp.where(pos, total, xp.ones_like(total)))
    lse = xp.where(pos, lse, xp.full_like(lse, -math.inf))
    return xp.asarray(xp.mean(lse, axis=0) - math.log(s))


def mse(draws_or_mean: Array, reference_mean: Array) -> Array:
    """Squared error of a posterior-mean estimate, averaged over coordinates.

    Parameters
    ----------
    draws_or_mean : array, shape (chains, n, d), (n, d) or (d,)
        Draws (their mean over chains and draws is the estimate) or the estimate itself.
    reference_mean : array, shape (d,)
        The true posterior mean.

    Returns
    -------
    array
        0-d: (1/d) sum_j (estimate_j - reference_j)^2.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.diagnostics.metrics import mse
    >>> float(mse(np.array([1.0, 3.0]), np.array([0.0, 0.0])))
    5.0
    """
    xp = array_namespace(draws_or_mean, reference_mean, names=("draws_or_mean", "reference_mean"))
    dtype = float_dtype(xp, draws_or_mean, reference_mean, names=("draws_or_mean", "reference_mean"))
    x = _float(xp, draws_or_mean, dtype, "draws_or_mean")
    ref = _float(xp, reference_mean, dtype, "reference_mean")
    if ref.ndim != 1:
        msg = f"`reference_mean` must be 1-D (d,); got shape {tuple(ref.shape)}"
        raise ValueError(msg)
    if x.ndim == 3:
        x = xp.reshape(x, (-1, x.shape[-1]))
    if x.ndim == 2:
        if x.shape[0] < 1:
            msg = "`draws_or_mean` has no draws"
            raise ValueError(msg)
        x = xp.mean(x, axis=0)
    if x.ndim != 1 or x.shape[0] != ref.shape[0]:
        msg = (
            f"`draws_or_mean` must be (chains, n, {ref.shape[0]}), (n, {ref.shape[0]}) or "
            f"({ref.shape[0]},) to match `reference_mean`; got {tuple(draws_or_mean.shape)}"
        )
        raise ValueError(msg)
    return xp.asarray(xp.mean((x - ref) ** 2))
