"""Diagnostics for stochastic gradient MCMC output.

Kernel Stein discrepancy (:func:`ksd`, :func:`cumulative_ksd`) and Stein thinning (:func:`stein_thin`)
measure and improve a sample's fit to the target using only the scores grad log pi at the sample
(Nemeth and Fearnhead 2021, section 4; Riabiz et al. 2022). Effective sample size and R-hat
(:func:`ess`, :func:`rhat`) measure mixing, and :func:`kl_gaussian`, :func:`gaussian_kl_from_samples`,
:func:`log_loss`, :func:`predictive_log_lik` and :func:`mse` measure accuracy against a reference;
:func:`zv_mean` estimates posterior means with zero-variance control variates.
:func:`convergence_path` follows the error or KSD of a run against its cost (iterations, seconds, data passes).
:func:`pseudo_variance` gives the exact expected squared error of a subsampled gradient estimator
(Putcha et al. 2023).

The submodules are imported here, before their functions are bound, so ``sgmc.diagnostics.ess`` and
``sgmc.diagnostics.ksd`` stay the functions even after ``import sgmc.diagnostics.ess``.
"""

from .cost_path import convergence_path
from .ess import ess, hdi, mcse, rhat
from .ksd import KSDByVariable, cumulative_ksd, ksd, ksd_by_variable, ksd_preconditioner
from .metrics import gaussian_kl_from_samples, kl_gaussian, log_loss, mse, predictive_log_lik
from .pseudo_variance import pseudo_variance
from .summary import Summary, summary
from .thinning import stein_thin
from .zero_variance import ZVMean, zv_mean

__all__ = [
    "ksd",
    "cumulative_ksd",
    "ksd_preconditioner",
    "ksd_by_variable",
    "KSDByVariable",
    "stein_thin",
    "ess",
    "mcse",
    "hdi",
    "rhat",
    "summary",
    "Summary",
    "kl_gaussian",
    "gaussian_kl_from_samples",
    "log_loss",
    "predictive_log_lik",
    "mse",
    "pseudo_variance",
    "zv_mean",
    "ZVMean",
    "convergence_path",
]
