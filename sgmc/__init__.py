"""sgmc: scalable Bayesian inference with stochastic gradient Markov chain Monte Carlo.

Algorithms are written once against the Python array API standard and run on the arrays they are
given (NumPy, CuPy, PyTorch, array-api-strict). Start with :func:`sample`::

    import sgmc
    from sgmc.models import LogisticRegression
    trace = sgmc.sample(LogisticRegression(X, y), "sgld", "cv", step_size=1e-5, batch_size=1000,
                        n_iter=10_000, chains=4)

Researchers who want the pieces use the kernels directly: a sampler's ``init``/``step`` with an
estimator's ``init``/``estimate`` (:mod:`sgmc.samplers`, :mod:`sgmc.estimators`).
How the package is layered, and which layer may import which: ``docs/architecture.md``.
"""

from . import backends, diagnostics, estimators, models, optimize, samplers, ssm
from ._array_api import array_namespace
from .chains import DivergenceError
from .executors import WorkerLostError
from .optimize import ModeNotFoundWarning
from .run import CheckpointWriteError, MixingWarning, RunawayChainWarning, SamplingInterruptedWarning, resume, sample
from .trace import Trace
from .tuning import tune_step_size

__version__ = "0.1.0"

__all__ = [
    "sample",
    "resume",
    "DivergenceError",
    "WorkerLostError",
    "CheckpointWriteError",
    "SamplingInterruptedWarning",
    "RunawayChainWarning",
    "MixingWarning",
    "ModeNotFoundWarning",
    "tune_step_size",
    "Trace",
    "array_namespace",
    "backends",
    "models",
    "estimators",
    "samplers",
    "optimize",
    "diagnostics",
    "ssm",
    "__version__",
]
