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

__all__ = ["sample", "Trace", "backends", "models", "estimators", "samplers", "__version__"]
