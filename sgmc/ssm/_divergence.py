"""Numerical failures inside state space gradients, reported as divergences.

A step size too large for a state space model moves ``theta`` to where the smoothers cannot run: a
transition or noise covariance that is singular (a precision factor near zero), a state
recursion that overflows, a Cholesky factorisation that fails. These are not bugs of the caller's
input but the sampler leaving the region its step size can handle, so the gradient estimators of
:mod:`sgmc.ssm` turn them into :class:`sgmc.DivergenceError` (which :func:`sgmc.sample` completes with
the draws so far, the iteration and the step size, and :func:`sgmc.tune_step_size` records as a
diverged grid point) instead of a bare ``LinAlgError`` deep in the recursions.
"""

from __future__ import annotations

from typing import Any, Callable

from .._keys import tracing
from ..chains import DivergenceError

__all__ = ["guarded", "is_numerical_failure"]

_HINT = (
    "the step size is too large for this state space model; choose h from its step unit "
    "(about 1 / (T * the largest eigenvalue of the Fisher information per time step), see "
    "docs/timeseries.md) or let sgmc.tune_step_size pick it"
)


def is_numerical_failure(err: BaseException) -> bool:
    """True for the errors a linear algebra or floating point failure raises on any backend.

    NumPy's and CuPy's ``LinAlgError``, PyTorch's ``torch.linalg.LinAlgError`` (all named so, found
    by name so that no array library is imported here) and ``FloatingPointError`` (NumPy with
    ``errstate(all="raise")``).
    """
    if isinstance(err, (FloatingPointError, ZeroDivisionError, OverflowError)):
        return True
    return any(cls.__name__.lstrip("_") == "LinAlgError" for cls in type(err).__mro__)


def _all_finite(xp: Any, a: Any) -> bool:
    return bool(xp.all(xp.isfinite(a)))


def guarded(xp: Any, what: str, fn: Callable, theta: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(theta, *args, **kwargs)``, with numerical failures raised as :class:`DivergenceError`.

    ``theta`` (chains, dim) must be finite, the call must not fail numerically, and every array it
    returns (or the first element of a returned tuple) must be finite. Under JAX tracing the checks
    cannot run (they read values); a non-finite result then reaches the position, and a compiled
    block that ends non-finite is run again step by step (:mod:`sgmc.samplers._compiled`), where
    these checks name the iteration.

    Parameters
    ----------
    xp : namespace
    what : str
        The quantity, for the message (``"buffered gradient of LGSSM"``).
    fn : callable
    theta : array (chains, dim)
    """
    checked = not tracing(theta)  # under JAX tracing the compiled block's own check finds them
    if checked and not _all_finite(xp, theta):
        msg = f"the position is no longer finite before the {what}; {_HINT}"
        raise DivergenceError(msg)
    try:
        out = fn(theta, *args, **kwargs)
    except DivergenceError:
        raise
    except Exception as err:
        if not is_numerical_failure(err):
            raise
        msg = f"the {what} failed numerically ({type(err).__name__}: {err}); {_HINT}"
        raise DivergenceError(msg) from err
    values = out if isinstance(out, tuple) else (out,)
    for v in values if checked else ():  # off NumPy the runner's divergence check finds them
        if hasattr(v, "shape") and xp.isdtype(v.dtype, "real floating") and not _all_finite(xp, v):
            msg = f"the {what} is not finite (a singular covariance or an overflowing state); {_HINT}"
            raise DivergenceError(msg)
    return out
