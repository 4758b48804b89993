"""Exact state space recursions: sgmc against hmmlearn and statsmodels, side by side in one run.

Times, in interleaved rounds on one pinned core with one thread for BLAS and Numba:

1. **Gaussian HMM**, K = 3 states, m = 2 dimensions: ``GaussianHMM.log_lik_and_grad`` (the exact
   log-likelihood and its Fisher-identity gradient, by forward-backward) against hmmlearn's
   ``GaussianHMM.score_samples`` (log-likelihood and smoothed posteriors, by its compiled
   forward-backward), at T = 10^4 and 10^5. sgmc runs its compiled recursion (Numba), the
   parallel-in-time scan that backends without a compiled loop use, and (T = 10^4 only) the
   sequential array-API loop over time that defines the result (what ran before).
2. **Multivariate LGSSM**, n = 2 states, m = 3 observations: ``LGSSM.log_lik_and_grad`` (Kalman filter,
   RTS smoother and the gradient) against statsmodels' ``KalmanSmoother.smooth()`` restricted to what
   the gradient needs (smoothed states, covariances and lag-one autocovariances), at T = 3000 and 10^5;
   sgmc compiled, by the parallel-in-time scan, and (T = 3000 only) by the sequential loop.
3. **Scalar LGSSM** (``phi, sigma, tau``), two chains: the compiled loop against the previous fast path
   (steady-state covariances and doubling scans of the means, what runs with Numba off), T = 10^3, 10^5.

Each table reports medians over rounds of process CPU time (``time.process_time``) and wall time and
the ratio sgmc / peer (below 1: sgmc is faster), with the two libraries' log-likelihoods at the same
parameters (they must agree). The tables go to ``docs/results/ssm-recursions.json`` (docs/timeseries.md).

Usage (from the repository root)::

    taskset -c 1 python asv_benchmarks/peer_ssm.py
    taskset -c 1 python asv_benchmarks/peer_ssm.py --rounds 3 --results none
"""

from __future__ import annotations

import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pinning import Clock, pin, verify  # noqa: E402

if __name__ == "__main__":
    CORES = pin()  # before NumPy and Numba start their threads: one core, one thread, for every contender
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from docs._results import write_results  # noqa: F401  (imported first: it records the load at start)

import argparse  # noqa: E402

import numpy as np  # noqa: E402

from sgmc.backends import _numba  # noqa: E402
from sgmc.ssm import LGSSM, GaussianHMM, HMMParams, LGSSMParams  # noqa: E402
from sgmc.ssm import hmm as hmm_mod  # noqa: E402
from sgmc.ssm import kalman as kalman_mod  # noqa: E402


def _timed(fn):
    with Clock() as c:
        out = fn()
    return out, c.wall, c.cpu


def race(contenders: dict, rounds: int, loads: list) -> dict:
    """Median (wall, cpu) of each contender over ``rounds``, the order rotated each round; and its output."""
    names = list(contenders)
    times = {k: [] for k in names}
    outs = {}
    for k in names:  # warm-up: compilation, first-call costs
        outs[k] = contenders[k]()
    for r in range(rounds):
        loads.append(os.getloadavg()[0])
        order = names[r % len(names):] + names[: r % len(names)]
        for k in order:
            _, wall, cpu = _timed(contenders[k])
            times[k].append((wall, cpu))
    return {k: (statistics.median(t[0] for t in v), statistics.median(t[1] for t in v), outs[k])
            for k, v in times.items()}


def agree(res: dict, reference: str, rtol: float = 1e-8) -> None:
    """Stop unless every contender's log-likelihood equals the reference's (the same computation)."""
    want = res[reference][2]
    for k, (_, _, got) in res.items():
        if not abs(got - want) <= rtol * abs(want):
            msg = f"log-likelihood of {k!r} ({got!r}) differs from {reference!r} ({want!r})"
            raise RuntimeError(msg)


def with_native(on: bool, fn, sequential: bool = False):
    """``fn`` with the compiled paths on or off; ``sequential``: the scans off too (the loop over time)."""
    def run():
        old = _numba.set_enabled(on)
        saved = (hmm_mod.SCAN_MIN_LENGTH, kalman_mod.SCAN_MIN_LENGTH)
        if sequential:
            hmm_mod.SCAN_MIN_LENGTH = kalman_mod.SCAN_MIN_LENGTH = 10**9
        try:
            return fn()
        finally:
            _numba.set_enabled(old)
            hmm_mod.SCAN_MIN_LENGTH, kalman_mod.SCAN_MIN_LENGTH = saved
    return run


def hmm_series(T: int):
    """The Gaussian HMM of the tables (K = 3 states, m = 2 dimensions), ``(Pi, mu, Sigma, y)`` with ``y`` (T, 2).

    docs/ssm_jax_grad.py times its JAX contenders on the same series.
    """
    rng = np.random.default_rng(0)
    K, m = 3, 2
    Pi = np.full((K, K), 0.1) + 0.7 * np.eye(K)
    mu = np.array([[-2.0, 0.0], [0.0, 2.0], [2.0, -1.0]])
    Sigma = np.stack([np.eye(m), 0.5 * np.eye(m) + 0.2, np.diag([1.5, 0.7])])
    z = np.zeros(T, dtype=int)
    for t in range(1, T):
        z[t] = rng.choice(K, p=Pi[z[t - 1]])
    y = mu[z] + np.einsum("tij,tj->ti", np.linalg.cholesky(Sigma)[z], rng.standard_normal((T, m)))
    return Pi, mu, Sigma, y


def hmm_rows(T: int, rounds: int, loads: list, sequential: bool) -> list:
    from hmmlearn import hmm

    Pi, mu, Sigma, y = hmm_series(T)
    K = Pi.shape[0]
    model = GaussianHMM(y, K)
    theta = model.unconstrain(HMMParams(Pi, mu, Sigma))[None]
    peer = hmm.GaussianHMM(K, covariance_type="full")
    peer.startprob_ = np.full(K, 1.0 / K) @ Pi  # sgmc's initial law is on z_0, one step before y_1
    peer.transmat_, peer.means_, peer.covars_ = Pi, mu, Sigma
    def ours():
        return float(model.log_lik_and_grad(theta)[0][0])

    contenders = {"sgmc (compiled)": with_native(True, ours), "sgmc (scan, no Numba)": with_native(False, ours)}
    if sequential:
        contenders["sgmc (sequential loop, no Numba)"] = with_native(False, ours, sequential=True)
    contenders["hmmlearn"] = lambda: float(peer.score_samples(y)[0])
    res = race(contenders, rounds, loads)
    agree(res, "hmmlearn")
    peer_cpu = res["hmmlearn"][1]
    return [[T, k, cpu * 1e3, wall * 1e3, cpu / peer_cpu, ll] for k, (wall, cpu, ll) in res.items()]


def lgssm_rows(T: int, rounds: int, loads: list, sequential: bool) -> list:
    from statsmodels.tsa.statespace.kalman_smoother import KalmanSmoother

    rng = np.random.default_rng(1)
    n, m = 2, 3
    A = np.array([[0.9, 0.1], [-0.1, 0.8]])
    Q, R = 0.3 * np.eye(n), 0.5 * np.eye(m)
    C = np.vstack([np.eye(n), [[0.5, -0.5]]])
    x = np.zeros(n)
    y = np.empty((T, m))
    for t in range(T):
        x = A @ x + np.sqrt(0.3) * rng.standard_normal(n)
        y[t] = C @ x + np.sqrt(0.5) * rng.standard_normal(m)
    model = LGSSM(y, state_dim=n)
    theta = model.unconstrain(LGSSMParams(A, Q, C, R))[None]
    m0, P0 = np.asarray(model.m0), np.asarray(model.P0)
    ks = KalmanSmoother(k_endog=m, k_states=n)
    ks.bind(np.asfortranarray(y.T))
    ks["design"], ks["obs_cov"], ks["transition"], ks["selection"], ks["state_cov"] = C, R, A, np.eye(n), Q
    ks.initialize_known(A @ m0, A @ P0 @ A.T + Q)  # statsmodels starts from the predicted x_1
    ks.set_smoother_output(0, smoother_state=True, smoother_state_cov=True, smoother_state_autocov=True)
    def ours():
        return float(model.log_lik_and_grad(theta)[0][0])

    contenders = {"sgmc (compiled)": with_native(True, ours), "sgmc (scan, no Numba)": with_native(False, ours)}
    if sequential:
        contenders["sgmc (sequential loop, no Numba)"] = with_native(False, ours, sequential=True)
    contenders["statsmodels"] = lambda: float(ks.smooth().llf_obs.sum())
    res = race(contenders, rounds, loads)
    agree(res, "statsmodels")
    peer_cpu = res["statsmodels"][1]
    return [[T, k, cpu * 1e3, wall * 1e3, cpu / peer_cpu, ll] for k, (wall, cpu, ll) in res.items()]


def scalar_rows(T: int, rounds: int, loads: list) -> list:
    rng = np.random.default_rng(2)
    model = LGSSM(rng.standard_normal(T))
    theta = np.array([[0.9, 2.0, 2.0], [0.5, 1.0, 1.5]])
    res = race({
        "sgmc (compiled)": with_native(True, lambda: float(model.log_lik_and_grad(theta)[0][0])),
        "sgmc (previous fast path, no Numba)": with_native(False, lambda: float(model.log_lik_and_grad(theta)[0][0])),
    }, rounds, loads)
    agree(res, "sgmc (previous fast path, no Numba)")
    base = res["sgmc (previous fast path, no Numba)"][1]
    return [[T, k, cpu * 1e3, wall * 1e3, cpu / base, ll] for k, (wall, cpu, ll) in res.items()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--cores", default="1", help="the core every contender runs on (default: core 1)")
    ap.add_argument("--results", default="ssm-recursions",
                    help="results file docs/results/NAME.json (default ssm-recursions; 'none' writes nothing)")
    args = ap.parse_args()
    loads = [os.getloadavg()[0]]
    threads = verify(CORES)
    cols = ["T", "contender", "CPU ms", "wall ms", "CPU ratio to the reference", "log-likelihood"]
    fmt = [None, None, ".2f", ".2f", ".2f", ".3f"]
    tables = {}
    rows = []
    for T in (10_000, 100_000):
        rows += hmm_rows(T, args.rounds, loads, sequential=T <= 10_000)
    tables["hmm"] = {"columns": cols, "rows": rows, "formats": fmt,
                     "notes": "Gaussian HMM, K = 3, m = 2: sgmc log-likelihood + gradient against hmmlearn "
                              "score_samples (the reference); medians of interleaved rounds."}
    rows = []
    for T in (3000, 100_000):
        rows += lgssm_rows(T, args.rounds, loads, sequential=T <= 3000)
    tables["lgssm"] = {"columns": cols, "rows": rows, "formats": fmt,
                       "notes": "LGSSM n = 2, m = 3: sgmc log-likelihood + gradient against statsmodels' "
                                "KalmanSmoother.smooth() (the reference; state, covariance and autocovariance "
                                "output only); medians of interleaved rounds."}
    rows = []
    for T in (1000, 100_000):
        rows += scalar_rows(T, args.rounds, loads)
    tables["scalar"] = {"columns": cols, "rows": rows, "formats": fmt,
                        "notes": "Scalar LGSSM, 2 chains, log-likelihood + gradient: the compiled loop against "
                                 "the previous fast path (the reference); medians of interleaved rounds."}
    for name, tab in tables.items():
        print(f"\n{name}")
        print("  ".join(cols))
        for r in tab["rows"]:
            print("  ".join(f"{v:{f}}" if f else str(v) for v, f in zip(r, fmt)))
    print(f"\nload (1 min) during the run: min {min(loads):.2f}, max {max(loads):.2f}")
    if args.results != "none":
        from docs._results import write_results

        extra = {"settings": vars(args), "threads": threads, "loads": loads}
        print("wrote", write_results(args.results, tables, extra=extra, packages=["hmmlearn", "statsmodels"]))


if __name__ == "__main__":
    main()
