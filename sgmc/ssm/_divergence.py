"""Numerical failures inside state space gradients, reported as divergences.

A step size too large for a state space model moves ``theta`` to where the smoothers cannot run: a
transition or noise covariance that is singular (a precision factor near zero), a state
recursion that overflows, a Cholesky factorisation that fails. These are not bugs of the caller's
input but the sampler leaving the region its step size can handle, so the gradient estimators of
:mod:`sgmc.ssm` turn them into :class:`sgmc.DivergenceError` (which :func:`sgmc.sample` completes with
the draws so far, the iteration and the step size, and :func:`sgmc.tune_step_size` records as a
diverged grid point) instead of a bare ``LinAlgError`` deep in the recursions.

Values are read only on the host (NumPy), where reading costs nothing. Off the host (PyTorch, CuPy,
array-api-strict, JAX) a per-call read would stall the device every iteration, so a non-finite
gradient reaches the position and the runner's divergence check (every ``check_every`` iterations of
:func:`sgmc.chains.run_chains`) reports it, with :data:`STEP_NOTE` (the models' ``step_note``)
appended to its message. Failures raised as exceptions are converted at once on every backend.
"""

from __future__ import annotations

from typing import Any, Callable

from .._flow import on_host
from ..chains import DivergenceError

__all__ = ["STEP_NOTE", "guarded", "is_numerical_failure"]

_HINT = (
    "the step size is too large for this state space model; choose h from its step unit "
    "(about 1 / (T * the largest eigenvalue of the Fisher information per time step), see "
    "docs/timeseries.md) or let sgmc.tune_step_size pick it"
)

#: what the runner appends to its divergence message for a state space model
STEP_NOTE = "; " + _HINT


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

    The call must not fail numerically (on every backend). On the host (NumPy) ``theta`` (chains, dim)
    must also be finite, and every real floating array it returns (each element of a returned tuple)
    too. Off the host these checks would read values back every call, so they are left to the
    runner's divergence check (see the module docstring); under JAX tracing they could not run at all.

    Parameters
    ----------
    xp : namespace
    what : str
        The quantity, for the message (``"buffered gradient of LGSSM"``).
    fn : callable
    theta : array (chains, dim)
    """
    checked = on_host(xp)  # elsewhere the runner's divergence check finds them, without a read per call
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
    for v in values if checked else ():
        if hasattr(v, "shape") and xp.isdtype(v.dtype, "real floating") and not _all_finite(xp, v):
            msg = f"the {what} is not finite (a singular covariance or an overflowing state); {_HINT}"
            raise DivergenceError(msg)
    return out
