"""The papers' experiments, reproduced by one call each: ``sgmc reproduce NAME`` or :func:`reproduce`.

Each experiment writes, under the folder the user names, its table(s) as Markdown and CSV, its
figure(s) as PNG, and ``meta.json`` with the seed, the size (``quick`` or full), the wall time and the
versions of Python, sgmc and the numerical packages it used. ``quick=True`` runs a reduced size
meant for smoke tests and CI; the full size is what ``docs/reproductions.md`` shows.

The experiments of Nemeth and Fearnhead (2021), "Stochastic gradient Markov chain Monte Carlo",
section 6 (``../specs`` section 4 gives every setting):

- ``logistic-table2``: Table 2, Bayesian logistic regression with N = 10^5 at d = 10, 50 and 100.
- ``logistic-figures``: Figures 2 and 3, trace plots and fixed wall-clock budgets at d = 10.
- ``bnn-mnist``: Figure 5, a Bayesian neural network on MNIST (8x8 digits offline).
- ``bpmf-movielens``: Figure 6, Bayesian probabilistic matrix factorisation on MovieLens-100k.

Like the command line, this package is an input/output edge: it may use NumPy to write files.

Examples
--------
>>> import sgmc.experiments as ex
>>> sorted(ex.EXPERIMENTS)  # doctest: +SKIP
['bnn-mnist', 'bpmf-movielens', 'logistic-figures', 'logistic-table2']
"""

from __future__ import annotations

import importlib
import os
import time
from typing import Any

from ._output import Context, Experiment, versions

__all__ = ["EXPERIMENTS", "Context", "Experiment", "reproduce", "list_experiments", "versions"]

# name -> module that defines ``EXPERIMENT`` (an :class:`Experiment`); imported only when run, so
# listing the experiments costs nothing and an experiment's optional dependencies stay optional.
EXPERIMENTS: dict[str, str] = {
    "logistic-table2": "sgmc.experiments.logistic",
    "logistic-figures": "sgmc.experiments.logistic_figures",
    "bnn-mnist": "sgmc.experiments.bnn",
    "bpmf-movielens": "sgmc.experiments.bpmf",
    "ep-clustering": "sgmc.experiments.ep_clustering",
    "tbptt-copy": "sgmc.experiments.tbptt",
}


def _load(name: str) -> Experiment:
    if not isinstance(name, str) or name not in EXPERIMENTS:
        from .._validation import did_you_mean

        msg = f"`name` must be one of {', '.join(sorted(EXPERIMENTS))}; got {name!r}.{did_you_mean(str(name), list(EXPERIMENTS))}"
        raise ValueError(msg)
    return importlib.import_module(EXPERIMENTS[name]).EXPERIMENT


def list_experiments() -> list[tuple[str, str]]:
    """``(name, one-line description)`` of every experiment, sorted by name."""
    out = []
    for name in sorted(EXPERIMENTS):
        try:
            title = _load(name).title
        except ImportError as err:  # an experiment whose module or optional dependency is missing
            title = f"(not available here: {err})"
        out.append((name, title))
    return out


def reproduce(name: str, out: Any, *, quick: bool = False, seed: int = 0, progress: Any = True,
              backend: str = "numpy", **options: Any) -> dict:
    """Run the experiment ``name`` and write its tables, figures and ``meta.json`` under ``out``.

    Parameters
    ----------
    name : str
        One of :data:`EXPERIMENTS` (``sgmc reproduce --list``).
    out : str or path-like
        Folder for the outputs; created if missing.
    quick : bool
        The reduced size for smoke tests (minutes on a laptop) instead of the paper's.
    seed : int
        Seed of the data and of every sampler.
    progress : bool or "always"
        Progress bars and status lines on standard error.
    backend : str
        Array backend the samplers run on (``"numpy"``, ``"cupy"``, ...).
    **options
        Experiment-specific settings (see each experiment's module), for example ``dims=(10,)``.

    Returns
    -------
    dict
        What the experiment reports (its tables as lists of rows, the paths written), plus
        ``"meta"``, the content of ``meta.json``, and ``"tables"``, every table it wrote
        (``{stem: {"columns", "rows", "title"}}``).
    """
    exp = _load(name)
    from .._validation import check_int

    seed = check_int(seed, "seed", minimum=0)
    ctx = Context(os.fspath(out), name=name, quick=bool(quick), seed=seed, progress=progress,
                  backend=backend, options=dict(options))
    t0 = time.perf_counter()
    result = exp.run(ctx)
    meta = ctx.finish(time.perf_counter() - t0, exp)
    result = dict(result or {})
    result["meta"] = meta
    result["tables"] = ctx.tables
    return result
