"""Clustering by EP approximate collapsed Gibbs sampling, with the exact samplers it is compared with.

Aicher's thesis, chapter 5: a collapsed Gibbs sampler of cluster assignments whose intractable
collapsed likelihood is replaced by an integral against an expectation-propagation approximation of
each cluster's parameters (:mod:`sgmc.clustering.ep_gibbs`), for two models: correlated time series
clustering (:mod:`sgmc.clustering.timeseries`; naive and exact collapsed baselines in
:mod:`sgmc.clustering.timeseries_gibbs`) and mixtures of multivariate Student-t distributions with
known degrees of freedom (:mod:`sgmc.clustering.student_t`; naive and blocked data-augmentation
baselines in :mod:`sgmc.clustering.student_t_gibbs`).
"""

from .ep_gibbs import EPGibbsState, ep_gibbs_sweep, ep_init, ep_step, ep_sweep, refresh_cavity
from .student_t import StudentTMixtureModel, simulate_student_t
from .student_t_gibbs import (BlockedTState, NaiveTState, blocked_t_init, blocked_t_sweep, naive_t_init,
                              naive_t_sweep)
from .timeseries import TimeSeriesClusterModel, simulate_timeseries
from .timeseries_gibbs import (CollapsedTSState, NaiveTSState, cluster_log_marginal, collapsed_init,
                               collapsed_sweep, naive_init, naive_sweep)
from .timeseries_marginal import SpectralMarginal

__all__ = ["EPGibbsState", "ep_init", "ep_step", "ep_sweep", "ep_gibbs_sweep", "refresh_cavity",
           "StudentTMixtureModel", "simulate_student_t", "NaiveTState", "BlockedTState", "naive_t_init",
           "naive_t_sweep", "blocked_t_init", "blocked_t_sweep", "TimeSeriesClusterModel", "simulate_timeseries", "cluster_log_marginal",
           "NaiveTSState", "CollapsedTSState", "naive_init", "naive_sweep", "collapsed_init", "collapsed_sweep",
           "SpectralMarginal"]
