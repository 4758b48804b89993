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

from .._array_api import Array
from .._model_args import model_array, model_points
from .._validation import check_batch_size, check_choice, check_model

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
    from ..estimators.weights import _blocks, _normalise, cv_ps_weights, ps_weights, WEIGHT_FLOOR

    xp = check_model(model, methods=("grad_log_lik",), purpose="pseudo_variance (per-datum gradients)").xp
    if not isinstance(getattr(model, "n_data", None), int) or model.n_data < 1:
        msg = f"`model` must hold data (a positive int n_data) for pseudo_variance; {type(model).__name__} has none"
        raise TypeError(msg)
    theta, single = model_points(model, theta, "theta", with_rank=True)
    n = check_batch_size(batch_size, model.n_data)
    big_n = model.n_data
    if isinstance(weights, str):
        weights = check_choice(weights, "weights", ("uniform", "exact", "approx", "lipschitz"))
    else:
        weights = _weights(model, weights)
    kind = weights if isinstance(weights, str) else "given"
    centre = None
    if mode is not None:
        centre = model_points(model, mode, "mode", batched=False)
    if (control_variate or kind == "approx") and centre is None:
        msg = "`mode` is needed for control_variate=True and for weights='approx'"
        raise ValueError(msg)
    if not replace and kind != "uniform":
        msg = f"`replace=False` is defined for uniform weights only; got weights={kind!r}"
        raise ValueError(msg)
    probs = None
    if kind == "uniform":
        probs = None
    elif kind == "lipschitz":
        check_model(model, methods=("lipschitz",), purpose="weights='lipschitz'")
        probs = _normalise(xp, model.lipschitz(), WEIGHT_FLOOR)
    elif kind == "approx":
        probs = cv_ps_weights(model, centre[0, :]) if control_variate else ps_weights(model, centre)[0, :]
    elif not isinstance(weights, str):
        probs = _normalise(xp, weights, WEIGHT_FLOOR)
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
    if kind == "exact":
        out = (norm_sum * norm_sum - tot2) / n
    elif not replace:
        # sum_i ||a_i - A/N||^2 = sum_i ||a_i||^2 - ||A||^2 / N; sq_over_p holds N sum_i ||a_i||^2 here
        s2 = (sq_over_p / big_n - tot2 / big_n) / max(big_n - 1, 1)
        out = big_n * big_n * (1.0 - n / big_n) / n * s2
    else:
        out = (sq_over_p - tot2) / n
    out = xp.maximum(out, xp.zeros_like(out))
    return out[0] if single else out


def _weights(model: Any, weights: Any) -> Array:
    """Sampling weights given as numbers: a non-negative finite ``(n_data,)`` array, not all zero."""
    xp, n = model.xp, model.n_data
    expected = f"'uniform', 'exact', 'approx', 'lipschitz' or an array of {n} non-negative weights"
    weights = model_array(model, weights, "weights", expected, refuse=(bytes, dict, set))
    if tuple(weights.shape) != (n,) or not xp.isdtype(weights.dtype, ("real floating", "integral")):
        msg = f"`weights` must be {expected}; got an array of shape {tuple(weights.shape)} and dtype {weights.dtype}"
        raise ValueError(msg)
    w = xp.astype(weights, model.dtype)
    if not bool(xp.all(xp.isfinite(w) & (w >= 0))) or not bool(xp.any(w > 0)):
        msg = f"`weights` must be {expected} (finite, not all zero)"
        raise ValueError(msg)
    return w
