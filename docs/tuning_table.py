"""The review's Figure 1 as a table: KSD and ESS of SGLD against the step size, 40 replicates.

The set-up of docs/tuning.md ("Figure 1 of the review"): SGLD on the bivariate Gaussian target
``GaussianTarget.review_example()`` with noisy exact gradients (noise sd 0.1), h in {1e-3, 1e-2, 1e-1, 1},
10^4 iterations from the origin thinned to 1000 draws, KSD of the review's eq. (13) with the exact
scores, ESS the minimum over the two coordinates; the 40 chains of one run are the replicates. The
computation is the page's own code block; this script runs it and writes the table to
``docs/results/tuning_figure1.json``, which docs/tuning.md renders.

Usage (from the repository root)::

    python docs/tuning_table.py
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from docs._results import write_results  # noqa: E402  (imported first: it records the load at start)

import numpy as np  # noqa: E402

import sgmc  # noqa: E402
from sgmc.diagnostics import ess, ksd  # noqa: E402
from sgmc.estimators import NoisyGradient  # noqa: E402
from sgmc.models import GaussianTarget  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--replicates", type=int, default=40)
    ap.add_argument("--results", default="tuning_figure1",
                    help="results file docs/results/NAME.json (default tuning_figure1; 'none' writes nothing)")
    args = ap.parse_args()
    target = GaussianTarget.review_example()
    noisy = NoisyGradient(target, noise_sd=0.1)
    rows = []
    for i, h in enumerate([1e-3, 1e-2, 1e-1, 1.0]):
        trace = sgmc.sample(target, "sgld", noisy, step_size=h, n_iter=10_000, thin=10,
                            chains=args.replicates, init=np.zeros(2), rng=i, store_grads="full",
                            progress=False)
        k = np.array([float(ksd(trace.draws[c], trace.grads[c], kind="sum")) for c in range(args.replicates)])
        e = np.asarray(ess(trace.draws, per_chain=True)).min(axis=1)
        se = lambda v: float(v.std(ddof=1) / np.sqrt(v.size))  # noqa: E731
        rows.append([h, float(k.mean()), se(k), float(e.mean()), se(e)])
        print(rows[-1])
    if args.results != "none":
        table = {"columns": ["h", "mean KSD", "(se)", "mean ESS", "(se)"], "rows": rows,
                 "formats": ["g", ".4f", ".4f", ".1f", ".1f"],
                 "notes": f"{args.replicates} replicates (chains of one run, seeds 0-3 by step size); mean and "
                          "standard error of the mean."}
        print("wrote", write_results(args.results, {"figure1": table}, extra={"settings": vars(args)}))


if __name__ == "__main__":
    main()
