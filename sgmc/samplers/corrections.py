"""SGLD with Vollmer et al.'s (2016) gradient-noise correction.

SGLD's step theta' = theta + (h/2) g_hat + xi carries, besides the injected xi, the gradient error:
(h/2)(g_hat - g) has covariance (h^2/4) V with V = Var(g_hat). Injecting xi ~ N(0, h I - (h^2/4) V_hat)
instead of N(0, h I) restores the intended covariance h I (review section 2.5; Vollmer, Zygalakis and
Teh 2016; the general rule D - h B_hat of section 3). V_hat comes from the estimator
(:class:`~sgmc.estimators.MinibatchNoise` estimates it from the minibatch). The corrected covariance must
be positive semi-definite: when it is not, the sampler raises (a smaller step or a larger minibatch
fixes it) or, with ``clip=True``, clips the negative eigenvalues to zero (a partial correction).

SGHMC's counterpart is :class:`~sgmc.samplers.SGHMC` with ``noise_estimate="minibatch"``
(``"sghmc_corrected"``).
"""

from __future__ import annotations

from .._array_api import array_namespace, device_of
from .._flow import on_host
from .base import SamplerBase, StepInfo, noise_estimate_of
from .hamiltonian import SGHMC, NoiseCorrectionError
from .langevin import LangevinState
from .metrics import matvec, sym_sqrt

__all__ = ["VollmerSGLD", "SGHMCCorrected", "NoiseCorrectionError", "noise_estimate_of"]


# Its docstring example repeats MinibatchNoise's set-up: each class's help runs on its own.
class VollmerSGLD(SamplerBase):
    """SGLD whose injected noise is N(0, h I - (h^2/4) V_hat), V_hat the estimated gradient-noise covariance.

    Parameters
    ----------
    clip : bool, default False
        Clip negative eigenvalues (diagonal entries, for a diagonal V_hat) of h I - (h^2/4) V_hat to zero
        instead of raising ``ValueError``.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc import backends
    >>> from sgmc.models import LinearRegression
    >>> from sgmc.estimators import MinibatchNoise
    >>> from sgmc.samplers import VollmerSGLD
    >>> r = np.random.default_rng(0)
    >>> X = r.normal(size=(500, 2)); y = X @ np.array([1.0, -1.0]) + r.normal(size=500)
    >>> est = MinibatchNoise(LinearRegression(X, y), 50)
    >>> rng = backends.default_rng(0)
    >>> state = VollmerSGLD().init(rng, np.zeros((4, 2)), est)
    >>> state, info = VollmerSGLD().step(rng, state, est, 1e-4)
    >>> state.position.shape
    (4, 2)
    """

    name = "sgld_corrected"
    step_note = (
        "; on arrays other than NumPy's, a chain whose corrected noise covariance h I - (h^2/4) V_hat is not "
        "positive semi-definite stops there (its position becomes NaN) and is reported at the next check: lower "
        "the step size, raise the batch size, or pass clip=True"
    )

    def __init__(self, clip: bool = False):
        self.clip = bool(clip)

    def init(self, rng, position, estimator, est_state=None):
        g, est_state, _ = self.start(rng, position, estimator, est_state)
        noise_estimate_of(est_state, "VollmerSGLD")
        return LangevinState(position, g, est_state)

    def step(self, rng, state, estimator, step_size):
        x = state.position
        xp = array_namespace(x)
        h = step_size
        v = noise_estimate_of(state.est_state, "VollmerSGLD")
        z = rng.normal(tuple(x.shape), dtype=x.dtype)
        host = on_host(xp)
        bad = None
        if v.ndim == 2:
            var = h - 0.25 * h * h * v
            if not self.clip and host and not bool(xp.all(var >= 0)):
                raise NoiseCorrectionError(self._message(h, float(xp.min(var))))
            if not self.clip and not host:  # no question to the device per step: see step_note
                bad = xp.any(var < 0, axis=-1)
            noise = xp.sqrt(xp.clip(var, min=0.0)) * z
        else:
            eye = xp.eye(x.shape[-1], dtype=x.dtype, device=device_of(x))
            cov = h * eye[None, :, :] - 0.25 * h * h * v
            if not self.clip:
                low = xp.min(xp.linalg.eigvalsh(cov), axis=-1)
                if not host:
                    bad = low < -1e-12 * h
                elif float(xp.min(low)) < -1e-12 * h:
                    raise NoiseCorrectionError(self._message(h, float(xp.min(low))))
            noise = matvec(sym_sqrt(xp, cov), z)
        x = x + (0.5 * h) * state.grad + noise
        if bad is not None:  # off NumPy a failed correction stops the chain; the runner's next check reports it
            x = xp.where(bad[:, None], xp.nan, x)
        g, es, info = estimator.estimate(rng, state.est_state, x)
        return LangevinState(x, g, es), StepInfo(info)

    @staticmethod
    def _message(h: float, low: float) -> str:
        return (
            f"the corrected noise covariance h I - (h^2/4) V_hat is not positive semi-definite at "
            f"step_size={h} (smallest eigenvalue {low:.3g}): the gradient noise exceeds the injected noise; "
            "lower the step size, raise the batch size, or pass clip=True"
        )




class SGHMCCorrected(SGHMC):
    """SGHMC whose friction noise is h (C - (h/4) V_hat), V_hat read from the estimator at every kick.

    The same as ``SGHMC(noise_estimate="minibatch")``; use it with
    :class:`~sgmc.estimators.MinibatchNoise`. Raises when C < (h/4) V_hat (the review's C >= h V).
    """

    name = "sghmc_corrected"

    def __init__(self, friction: float = 1.0, n_leapfrog: int = 5, resample_momentum: bool = True):
        super().__init__(friction, n_leapfrog, noise_estimate="minibatch", resample_momentum=resample_momentum)
