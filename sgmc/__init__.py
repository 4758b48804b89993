"""sgmc: scalable Bayesian inference with stochastic gradient Markov chain Monte Carlo.

Algorithms are written once against the Python array API standard and run on the arrays they are
given (NumPy, CuPy, PyTorch, array-api-strict). Start with :func:`sample`::

    import sgmc
    from sgmc.models import LogisticRegression
    trace = sgmc.sample(LogisticRegression(X, y), "sgld", "cv", step_size=1e-5, batch_size=1000,
                        n_iter=10_000, chains=4)
"""

from . import backends, estimators, models, samplers
from .run import sample
from .trace import Trace

__version__ = "0.1.0"

__all__ = [
    "sample",
    "tune_step_size",
    "Trace",
    "backends",
    "models",
    "estimators",
    "samplers",
    "diagnostics",
    "__version__",
]


def __getattr__(name: str):
    # Diagnostics and tuning load on first use, keeping `import sgmc` light.
    if name == "diagnostics":
        from . import diagnostics

        return diagnostics
    if name == "tune_step_size":
        from .tuning import tune_step_size

        return tune_step_size
    msg = f"module 'sgmc' has no attribute {name!r}"
    raise AttributeError(msg)
