"""Pseudo-variance of subsampled gradient estimators (Putcha et al. 2023; thesis section 4.3, eq. 4.3.1).

The pseudo-variance of an unbiased estimator g of the full gradient is the expected squared error
E||g - grad log pi(theta)||^2, the trace of its covariance. For the with-replacement estimator
(1/n) sum_j a_{i_j} / p_{i_j} of A = sum_i a_i, with i_j drawn i.i.d. from p (proof of Lemma 4.3.1),

    V = (1/n) [ sum_i ||a_i||^2 / p_i - ||A||^2 ],

and for the uniform subset of n without replacement, (N/n) sum_{i in S} a_i,

    V = N^2 (1 - n/N) / n * s^2,   s^2 = sum_i ||a_i - A/N||^2 / (N - 1).

For SGLD(-PS) a_i = grad log f_i(theta); for the control-variate estimators (SGLD-CV(-PS))
a_i = grad log f_i(theta) - grad log f_i(theta_hat). Both are exact, computed from all N per-datum
gradients; the Monte Carlo check is one line with any estimator (mean of ||g - grad log pi||^2 over
draws), which the tests do.
"""

from __future__ import annotations

from typing import Any

from .._array_api import Array, is_array
from .._validation import check_batch_size, check_choice
from ..models.base import require

__all__ = ["pseudo_variance"]


def pseudo_variance(
    model: Any,
    theta: Any,
    batch_size: Any,
    weights: Any = "uniform",
    *,
    mode: Any = None,
    control_variate: bool = False,
    replace: bool = True,
) -> Array:
    """Exact pseudo-variance E||g - grad log pi||^2 of a subsampled estimator at each row of ``theta``.

    Parameters
    ----------
    model : Model
        An IID-data model with per-datum gradients ``grad_log_lik`` (and ``hess_log_lik`` for the
        CV-PS approximate weights, ``lipschitz`` for ``"lipschitz"``).
    theta : array (k, dim) or (dim,)
    batch_size : int or float
        n.
    weights : {"uniform", "exact", "approx", "lipschitz"} or array (N,), default "uniform"
        The sampling weights: uniform (SGLD / SGLD-CV), the optimal weights at theta (``"exact"``:
        Lemmas 4.3.1 and 4.3.2), the approximate weights at ``mode`` (``"approx"``: eq. 4.3.6 for
        SGLD-PS, eq. 4.3.11 for SGLD-CV-PS), Lipschitz weights, or given weights.
    mode : array (dim,), optional
        theta_hat: the control-variate centre and the point of the approximate weights.
    control_variate : bool, default False
        The CV estimators (differences from the gradients at ``mode``).
    replace : bool, default True
        With replacement (all weighted schemes); ``False`` is uniform sampling without replacement.

    Returns
    -------
    array (k,) (a scalar array for 1-D ``theta``)

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.models import LinearRegression
    >>> from sgmc.diagnostics import pseudo_variance
    >>> X = np.array([[1.0], [3.0]]); model = LinearRegression(X, np.zeros(2))
    >>> # a_i = -x_i^2 theta = -1, -9 at theta = 1: (1/1)(1/0.5 + 81/0.5 - 100) = 64
    >>> float(pseudo_variance(model, np.array([1.0]), 1))
    64.0
    >>> float(pseudo_variance(model, np.array([1.0]), 1, "exact"))    # (1 + 9)^2 - 10^2
    0.0
    """
    from ..estimators.preferential import _blocks, _normalise, cv_ps_weights, ps_weights, WEIGHT_FLOOR

    xp = model.xp
    require(model, ("grad_log_lik",), "pseudo_variance (per-datum gradients)")
    if not is_array(theta):
        theta = xp.asarray(theta, dtype=model.dtype, device=model.device)
    single = theta.ndim == 1
    theta = xp.reshape(theta, (-1, model.dim))
    n = check_batch_size(batch_size, model.n_data)
    big_n = model.n_data
    if isinstance(weights, str):
        weights = check_choice(weights, "weights", ("uniform", "exact", "approx", "lipschitz"))
    centre = None
    if mode is not None:
        if not is_array(mode):
            mode = xp.asarray(mode, dtype=model.dtype, device=model.device)
        centre = xp.reshape(mode, (1, model.dim))
    if (control_variate or weights == "approx") and centre is None:
        msg = "`mode` is needed for control_variate=True and for weights='approx'"
        raise ValueError(msg)
    if not replace and weights != "uniform":
        msg = f"`replace=False` is defined for uniform weights only; got weights={weights!r}"
        raise ValueError(msg)
    probs = None
    if weights == "uniform":
        probs = None
    elif weights == "lipschitz":
        require(model, ("lipschitz",), "weights='lipschitz'")
        probs = _normalise(xp, model.lipschitz(), WEIGHT_FLOOR)
    elif weights == "approx":
        probs = cv_ps_weights(model, centre[0, :]) if control_variate else ps_weights(model, centre)[0, :]
    elif not isinstance(weights, str):
        w = weights if is_array(weights) else xp.asarray(weights, dtype=model.dtype, device=model.device)
        probs = _normalise(xp, w, WEIGHT_FLOOR)
    k = theta.shape[0]
    cen = None if not control_variate else xp.broadcast_to(centre, (k, model.dim))
    total = xp.zeros((k, model.dim), dtype=model.dtype, device=model.device)
    sq_over_p = xp.zeros((k,), dtype=model.dtype, device=model.device)
    norm_sum = xp.zeros((k,), dtype=model.dtype, device=model.device)
    for ids in _blocks(model, k * model.dim):
        idx = xp.broadcast_to(ids[None, :], (k, ids.shape[0]))
        a = model.grad_log_lik(theta, idx)
        if cen is not None:
            a = a - model.grad_log_lik(cen, idx)
        sq = xp.sum(a * a, axis=-1)                                   # (k, b)
        total = total + xp.sum(a, axis=1)
        norm_sum = norm_sum + xp.sum(xp.sqrt(sq), axis=1)
        if probs is None:
            sq_over_p = sq_over_p + big_n * xp.sum(sq, axis=1)
        else:
            sq_over_p = sq_over_p + xp.sum(sq / xp.take(probs, ids, axis=0)[None, :], axis=1)
    tot2 = xp.sum(total * total, axis=1)
    if weights == "exact":
        out = (norm_sum * norm_sum - tot2) / n
    elif not replace:
        # sum_i ||a_i - A/N||^2 = sum_i ||a_i||^2 - ||A||^2 / N; sq_over_p holds N sum_i ||a_i||^2 here
        s2 = (sq_over_p / big_n - tot2 / big_n) / max(big_n - 1, 1)
        out = big_n * big_n * (1.0 - n / big_n) / n * s2
    else:
        out = (sq_over_p - tot2) / n
    out = xp.maximum(out, xp.zeros_like(out))
    return out[0] if single else out
