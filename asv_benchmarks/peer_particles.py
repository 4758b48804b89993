"""Particle filtering: sgmc against the ``particles`` package on the same stochastic volatility data.

In one run, on one simulated series (phi = 0.9, sigma = 0.5, tau = 0.5, T = 10^4 by default), this
script times in interleaved rounds

1. the bootstrap particle filter with systematic resampling at every step, N in {10^3, 10^4}:
   ``sgmc.ssm.particle_filter`` with :class:`sgmc.ssm.stochvol.SVKernel` against
   ``particles.SMC(fk=Bootstrap(StochVol(mu=2 log tau, rho=phi, sigma=sigma)), ESSrmin=1)``
   (``particles``' parameterisation ``Y_t ~ N(0, exp(X_t))`` with ``X`` an AR(1) around ``mu``
   is the same model, ``X_t = x_t + 2 log tau``); both log-likelihood estimates are printed, and
   they must agree within the Monte Carlo error;
2. the four resampling schemes on N = 10^6 normalised weights: ``sgmc.ssm.resample(rng, w, scheme)``
   against ``particles.resampling.<scheme>(w)`` (systematic, multinomial, stratified, residual).

Each round runs both libraries back to back in alternating order; the script prints the median
over rounds of wall-clock time and of process CPU time (the fairer figure on a shared machine)
and their ratios (``particles`` / sgmc: above 1 means sgmc is faster). Both run in this process on
the cores of ``--cores`` (default: core 1) with one thread for BLAS and Numba, checked before timing;
the tables go to ``docs/results/peer_particles.json``, which docs/particles.md renders.

Usage (from the repository root)::

    python asv_benchmarks/peer_particles.py                     # T = 10^4, 3 rounds
    python asv_benchmarks/peer_particles.py --T 2000 --rounds 5 --n 1000
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pinning import pin, verify  # noqa: E402

if __name__ == "__main__":
    CORES = pin()  # before NumPy and Numba start their threads: the same core for both libraries

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from docs._results import write_results  # noqa: E402  (imported before measuring: it records the load at start)

import numpy as np  # noqa: E402

from sgmc import backends  # noqa: E402
from sgmc.ssm.particle import particle_filter  # noqa: E402
from sgmc.ssm.resampling import resample  # noqa: E402
from sgmc.ssm.stochvol import StochasticVolatility, SVKernel  # noqa: E402


def _timed(fn):
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--T", type=int, default=10_000)
    ap.add_argument("--n", type=int, nargs="+", default=[1000, 10_000])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--resample-n", type=int, default=1_000_000)
    ap.add_argument("--resample-rounds", type=int, default=15)
    ap.add_argument("--cores", default="1", help="the cores both libraries run on (default: core 1)")
    ap.add_argument("--results", default="peer_particles",
                    help="results file docs/results/NAME.json (default peer_particles; 'none' writes nothing)")
    args = ap.parse_args()
    loads = [os.getloadavg()[0]]

    import particles
    from particles import resampling as prs
    from particles import state_space_models as pssm

    phi, sigma, tau = 0.9, 0.5, 0.5
    theta = StochasticVolatility.theta_from(phi, sigma, tau)
    _, y = StochasticVolatility.simulate_data(backends.default_rng(0), args.T, theta)
    y = np.asarray(y)
    kernel = SVKernel(np.array([phi]), np.array([sigma]), np.array([tau]))
    Y = y[None, :, None]
    peer_model = pssm.StochVol(mu=2.0 * math.log(tau), rho=phi, sigma=sigma)
    data = list(y)

    # warm-up: numba compilation in particles, first-call costs in both
    particle_filter(backends.default_rng(0), kernel, Y[:, :50], 100)
    particles.SMC(fk=pssm.Bootstrap(ssm=peer_model, data=data[:50]), N=100, resampling="systematic", ESSrmin=1.0, collect=None, store_history=False).run()

    threads = verify(CORES)
    filt = []
    print(f"SV bootstrap particle filter, T = {args.T}, systematic resampling every step, {args.rounds} interleaved rounds")
    print(f"{'N':>7} {'sgmc wall s':>12} {'peer wall s':>12} {'ratio':>6} {'sgmc cpu s':>11} {'peer cpu s':>11} {'ratio':>6}   loglik sgmc / particles")
    for n in args.n:
        rows = []
        lls = []
        for r in range(args.rounds):
            loads.append(os.getloadavg()[0])

            def ours():
                return particle_filter(backends.default_rng(r), kernel, Y, n).log_lik[0]

            def peer():
                pf = particles.SMC(
                    fk=pssm.Bootstrap(ssm=peer_model, data=data), N=n, resampling="systematic",
                    ESSrmin=1.0, collect=None, store_history=False,
                )
                pf.run()
                return pf.logLt

            if r % 2 == 0:
                a = _timed(ours)
                b = _timed(peer)
            else:
                b = _timed(peer)
                a = _timed(ours)
            rows.append((a[1], b[1], a[2], b[2]))
            lls.append((float(a[0]), float(b[0])))
        med = [statistics.median(c) for c in zip(*rows)]
        ll_a = statistics.mean(v[0] for v in lls)
        ll_b = statistics.mean(v[1] for v in lls)
        print(
            f"{n:>7} {med[0]:>12.3f} {med[1]:>12.3f} {med[1] / med[0]:>6.2f} {med[2]:>11.3f} {med[3]:>11.3f} "
            f"{med[3] / med[2]:>6.2f}   {ll_a:.2f} / {ll_b:.2f}"
        )
        filt.append([n, med[2], med[3], med[3] / med[2], med[1] / med[0], ll_a, ll_b])

    n = args.resample_n
    rng_np = np.random.default_rng(1)
    w = rng_np.random(n)
    w /= w.sum()
    gen = backends.default_rng(2)
    res = []
    for scheme, peer_fn in (("systematic", prs.systematic), ("multinomial", prs.multinomial),
                            ("stratified", prs.stratified), ("residual", prs.residual)):
        resample(gen, w, scheme)
        peer_fn(w)
        rows = []
        for r in range(args.resample_rounds):
            loads.append(os.getloadavg()[0])
            if r % 2 == 0:
                a = _timed(lambda: resample(gen, w, scheme))
                b = _timed(lambda: peer_fn(w))
            else:
                b = _timed(lambda: peer_fn(w))
                a = _timed(lambda: resample(gen, w, scheme))
            rows.append((a[1], b[1], a[2], b[2]))
        med = [statistics.median(c) for c in zip(*rows)]
        print(f"\n{scheme} resampling, N = {n}, {args.resample_rounds} interleaved rounds (medians)")
        print(f"  sgmc {med[0] * 1e3:.2f} ms wall / {med[2] * 1e3:.2f} ms cpu;  particles {med[1] * 1e3:.2f} ms wall / {med[3] * 1e3:.2f} ms cpu")
        print(f"  ratio particles / sgmc: wall {med[1] / med[0]:.2f}, cpu {med[3] / med[2]:.2f}")
        res.append([scheme, n, med[2] * 1e3, med[3] * 1e3, med[3] / med[2], med[1] / med[0]])
    if args.results != "none":
        tables = {
            "filter": {"columns": ["N", "sgmc CPU s", "particles CPU s", "particles / sgmc (CPU)",
                                   "particles / sgmc (wall)", "log-likelihood, sgmc", "log-likelihood, particles"],
                       "rows": filt, "formats": [None, ".2f", ".2f", ".2f", ".2f", ".1f", ".1f"],
                       "notes": f"Bootstrap filter, stochastic volatility, T = {args.T}, systematic resampling "
                                f"at every step; medians of {args.rounds} interleaved rounds; log-likelihoods "
                                "are means over the rounds."},
            "resampling": {"columns": ["scheme", "N", "sgmc CPU ms", "particles CPU ms", "particles / sgmc (CPU)",
                                       "particles / sgmc (wall)"],
                           "rows": res, "formats": [None, None, ".2f", ".2f", ".2f", ".2f"],
                           "notes": f"Medians of {args.resample_rounds} interleaved rounds."},
        }
        extra = {"settings": vars(args), "threads": threads, "loads": loads}
        print("wrote", write_results(args.results, tables, extra=extra, packages=["particles"]))


if __name__ == "__main__":
    main()
