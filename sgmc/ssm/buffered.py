"""The buffered stochastic gradient estimator for state space models (thesis Alg. 3 / Eq. 3.5).

Each call draws, per chain, ``M`` subsequences of length ``S`` with a buffer of ``B`` times on each
side (:func:`sgmc.ssm.sample_windows`), smooths the latent states on each buffered window, and
returns

    grad log p(theta) + (1/M) sum_m sum_{t in S_m} E_{x | y_{S*_m}}[grad log p(y_t, x_t | x_{t-1})] / Pr(t in S),

the ascent direction. The smoothing is exact (Kalman smoother for :class:`sgmc.ssm.LGSSM`,
forward-backward for :class:`sgmc.ssm.GaussianHMM`) with ``method="exact"``, or by a particle
smoother with ``method="particle"`` (Aicher et al. 2019, Alg. 2; thesis Alg. 4). All chains and
all windows are one batch: the only Python loop is over the ``S + 2B`` positions of a window.
``B = 0`` is the biased "no buffer" estimator (thesis Eq. 3.4).
"""

from __future__ import annotations

from typing import Any

from .._validation import check_choice, check_int
from ..estimators.base import EstimateInfo, Estimator
from ..models.base import require
from ._divergence import guarded
from .subsequence import check_window_sizes, sample_windows

__all__ = ["Buffered"]


class Buffered(Estimator):
    """Buffered stochastic gradients over subsequences of a time series.

    Parameters
    ----------
    model : StateSpaceModel
        A model with ``window_score`` (:class:`sgmc.ssm.StateSpaceModel`).
    batch_size : int, optional
        Same as ``subsequence_length`` (what :func:`sgmc.sample`'s ``batch_size`` sets).
    subsequence_length : int, optional
        ``S``; default ``batch_size``, else ``max(1, T // 100)``.
    buffer : int, optional
        ``B``, times added on each side of the subsequence (default ``S``); 0 gives the biased
        "no buffer" estimator.
    subsequences : int, default 1
        ``M``, subsequences per chain and call (averaged).
    method : {"exact", "particle", "gibbs"}, optional
        How the latent states are smoothed on each window; default the model's first
        ``score_methods`` entry ("exact" where it has one, "gibbs" for :class:`sgmc.ssm.SLDS`).
    n_particles : int, default 1000
        Particles for ``method="particle"``.
    **particle_options
        Passed to the particle smoother (``smoother=``, ``resampling=``, ...).

    Raises
    ------
    sgmc.DivergenceError
        From :meth:`estimate`, when the position is not finite or the smoother fails numerically at
        it (a singular covariance, a failed factorisation, a non-finite score): the step size is too
        large. :func:`sgmc.sample` adds the draws so far, the iteration and the step size.

    Notes
    -----
    ``EstimateInfo.n_evals`` is the number of time steps processed per chain (the sum of the
    buffered window lengths), and ``batch_size`` is ``M S``, the times whose score enters.

    Examples
    --------
    >>> import numpy as np
    >>> import sgmc
    >>> from sgmc.ssm import LGSSM
    >>> x, y = LGSSM.simulate_scalar(sgmc.backends.default_rng(0), 1000, [0.9, 2.0, 2.0])
    >>> model = LGSSM(y)
    >>> trace = sgmc.sample(model, "sgld", "buffered", step_size=2e-4, batch_size=20, n_iter=300,
    ...                     chains=2, init=[0.5, 1.5, 1.5], rng=0, progress=False,
    ...                     estimator_options={"buffer": 10})
    >>> trace.draws.shape
    (2, 300, 3)
    """

    name = "buffered"

    def __init__(
        self,
        model: Any,
        batch_size: Any = None,
        *,
        subsequence_length: Any = None,
        buffer: Any = None,
        subsequences: Any = 1,
        method: str | None = None,
        n_particles: Any = 1000,
        **particle_options: Any,
    ):
        super().__init__(model)
        require(model, ("window_score",), "the buffered estimator")
        T = int(getattr(model, "T", model.n_data))
        if subsequence_length is not None and batch_size is not None and int(batch_size) != int(subsequence_length):
            msg = (
                f"`batch_size` ({batch_size}) and `subsequence_length` ({subsequence_length}) both set "
                "the subsequence length; give one"
            )
            raise ValueError(msg)
        S = subsequence_length if subsequence_length is not None else batch_size
        if S is None:
            S = max(1, T // 100)
        S = check_int(S, "subsequence_length")
        B = S if buffer is None else buffer
        self.T, self.S, self.B = check_window_sizes(T, S, B)
        self.M = check_int(subsequences, "subsequences")
        methods = tuple(getattr(model, "score_methods", ("exact", "particle")))
        self.method = check_choice(methods[0] if method is None else method, "method", methods)
        options = dict(particle_options)
        if self.method == "particle":
            options["n_particles"] = check_int(n_particles, "n_particles")
        elif particle_options:
            msg = f"particle options {sorted(particle_options)} need method='particle'"
            raise TypeError(msg)
        self.n_particles = int(n_particles)
        self.options = options

    def estimate(self, rng, est_state, position):
        m = self.model
        chains = position.shape[0]
        w_rng, s_rng = rng.spawn(2)  # the same windows for either method and seed
        windows = sample_windows(w_rng, self.T, self.S, self.B, chains, self.M, xp=m.xp, dtype=position.dtype)
        score, n_evals = guarded(
            m.xp, f"buffered gradient of {type(m).__name__}", self._score, position, s_rng, windows
        )
        g = m.grad_log_prior(position) + score
        return g, est_state, EstimateInfo(n_evals, self.M * self.S)

    def _score(self, position, rng, windows):
        return self.model.window_score(rng, position, windows, method=self.method, **self.options)

    def __repr__(self) -> str:
        return (
            f"Buffered(model={self.model!r}, subsequence_length={self.S}, buffer={self.B}, "
            f"subsequences={self.M}, method={self.method!r})"
        )
