"""Time series: state space models and buffered stochastic gradients.

Stochastic gradient MCMC for state space models (Aicher 2020, thesis chapter 3; Aicher et al. 2019,
"Stochastic Gradient MCMC for Nonlinear State Space Models"): the gradient of the log-likelihood of
a long series is estimated from short *buffered subsequences* (:mod:`sgmc.ssm.subsequence`) on
which the latent states are smoothed exactly (Kalman smoother, forward-backward) or by particles.
"""

from ..estimators import ESTIMATORS as _ESTIMATORS
from .ar import AR, ARParams
from .arhmm import ARHMM, ARHMMParams
from .base import StateSpaceModel, as_series
from .buffered import Buffered
from ..plot import forecast_plot
from .forecast import Prediction, filtered_states, forecast, one_step_predictions, smoothed_states
from .garch import GARCH
from .hmm import GaussianHMM, HMMParams, forward_backward
from .kalman import (
    KalmanGrad,
    KalmanStats,
    kalman_filter,
    kalman_grad,
    kalman_loglik,
    kalman_smoother,
    kalman_stats,
)
from .lgssm import LGSSM, LGSSMParams
from .particle import ScalarLGSSMKernel, particle_filter, particle_window_score
from .slds import SLDS, SLDSParams
from .resampling import ess, resample, resample_if_low_ess
from .stochvol import StochasticVolatility
from .subsequence import Windows, all_windows, gather_windows, inclusion_prob, sample_windows, windows_at

__all__ = [
    "Buffered",
    "StateSpaceModel",
    "as_series",
    "Windows",
    "sample_windows",
    "all_windows",
    "windows_at",
    "inclusion_prob",
    "gather_windows",
    "KalmanGrad",
    "KalmanStats",
    "kalman_filter",
    "kalman_grad",
    "kalman_loglik",
    "kalman_smoother",
    "kalman_stats",
    "LGSSM",
    "Prediction",
    "filtered_states",
    "smoothed_states",
    "one_step_predictions",
    "forecast",
    "forecast_plot",
    "GaussianHMM",
    "StochasticVolatility",
    "GARCH",
    "AR",
    "ARParams",
    "ARHMM",
    "ARHMMParams",
    "SLDS",
    "SLDSParams",
    "ScalarLGSSMKernel",
    "particle_filter",
    "particle_window_score",
    "resample",
    "ess",
    "resample_if_low_ess",
    "HMMParams",
    "forward_backward",
    "LGSSMParams",
]

_ESTIMATORS.setdefault("buffered", Buffered)
