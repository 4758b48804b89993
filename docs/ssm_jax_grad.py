"""Exact log-likelihood gradients on JAX: sgmc's compiled recursions against dynamax and cuthbert.

For a Gaussian HMM (K = 3 states, m = 2 dimensions) and an LGSSM (n = 2 states, m = 3 observations)
on one simulated series of T positions, each contender computes the exact log-likelihood and its
gradient under ``jax.jit`` (64-bit), on one pinned core with one thread:

* **sgmc, Fisher identity**: the parallel-in-time smoother's statistics give the gradient
  (``sgmc.ssm.kalman_grad``; the HMM's forward-backward statistics, ``GaussianHMM._stats``);
* **sgmc, jax.grad**: reverse-mode autodiff through sgmc's parallel-in-time filter
  (``kalman_loglik``; ``sgmc.ssm.hmm.forward_backward``);
* **dynamax**: ``jax.grad`` through ``lgssm_filter`` / ``hmm_filter`` of its ``parallel_inference``;
* **cuthbert**: ``jax.grad`` through ``cuthbert.filter(..., parallel=True)`` with its square-root
  Kalman filter and its discrete filter.

The HMM contenders differentiate with respect to the same unconstrained ``theta`` (log expanded
means, means, precision Cholesky factors), mapped to ``(Pi, log p(y_t | z_t = k))`` by the same
code; the LGSSM contenders with respect to ``(A, Q, C, R)``, with the law of ``x_0`` fixed (dynamax's
initial law is that of ``x_1``, so it is given ``A m0`` and ``A P0 A^T + Q``). The data are an argument of
each compiled function (not a constant XLA could fold at compile time). Compilation is excluded
(timed apart); each call is timed in interleaved rounds, the medians of process CPU time and wall time
reported, with every contender's log-likelihood and the largest relative difference of its gradient
from sgmc's Fisher-identity gradient (they must agree). A peer that does not install or whose API
does not fit is reported as such.

Usage (from the repository root; it pins itself to core 1)::

    python docs/ssm_jax_grad.py                  # T = 10^5, writes docs/results/ssm_jax_grad.json
    python docs/ssm_jax_grad.py --T 2000 --rounds 1 --results none
"""

from __future__ import annotations

import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "asv_benchmarks"))
from _pinning import Clock, pin, verify  # noqa: E402

if __name__ == "__main__":
    CORES = pin()  # before NumPy and JAX start their threads
    sys.path.insert(0, ROOT)
    from docs._results import write_results  # noqa: F401  (imported first: it records the load at start)

import argparse  # noqa: E402

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from sgmc.ssm import GaussianHMM, HMMParams, kalman_grad, kalman_loglik  # noqa: E402
from sgmc.ssm import hmm as hmm_mod  # noqa: E402

from peer_ssm import hmm_series  # noqa: E402


def _peer(name):
    try:
        if name == "dynamax":
            from dynamax.hidden_markov_model.parallel_inference import hmm_filter
            from dynamax.linear_gaussian_ssm import ParamsLGSSM, ParamsLGSSMDynamics, ParamsLGSSMEmissions, ParamsLGSSMInitial
            from dynamax.linear_gaussian_ssm.parallel_inference import lgssm_filter

            return {"hmm_filter": hmm_filter, "lgssm_filter": lgssm_filter, "ParamsLGSSM": ParamsLGSSM,
                    "Initial": ParamsLGSSMInitial, "Dynamics": ParamsLGSSMDynamics, "Emissions": ParamsLGSSMEmissions}
        import cuthbert
        from cuthbert.discrete import filter as discrete_filter
        from cuthbert.gaussian import kalman as gaussian_kalman

        return {"filter": cuthbert.filter, "discrete": discrete_filter, "kalman": gaussian_kalman}
    except ImportError as exc:
        return f"not installed ({exc})"


# -- the LGSSM ---------------------------------------------------------------------------------------


def lgssm_contenders(T, peers):
    rng = np.random.default_rng(1)
    n, m = 2, 3
    A = np.array([[0.9, 0.1], [-0.1, 0.8]])
    C = np.vstack([np.eye(2), [[0.5, -0.5]]])
    Q, R = 0.3 * np.eye(n), 0.5 * np.eye(m)
    x = np.zeros(n)
    y = np.empty((T, m))
    for t in range(T):  # simulated from the model
        x = A @ x + rng.multivariate_normal(np.zeros(n), Q)
        y[t] = C @ x + rng.multivariate_normal(np.zeros(m), R)
    m0, P0 = jnp.zeros(n), jnp.eye(n)
    args = tuple(jnp.asarray(a) for a in (A, Q, C, R, y))  # the data is an argument, not a constant to fold

    def sgmc_fisher(A, Q, C, R, yj):
        ll, g = kalman_grad(A[None], Q[None], C[None], R[None], yj[None], m0[None], P0[None])
        return ll[0], tuple(x[0] for x in g)

    def sgmc_ll(A, Q, C, R, yj):
        return kalman_loglik(A[None], Q[None], C[None], R[None], yj[None], m0[None], P0[None])[0]

    out = {"sgmc (Fisher identity)": sgmc_fisher, "sgmc (jax.grad)": jax.value_and_grad(sgmc_ll, argnums=(0, 1, 2, 3))}
    dyn, cut = peers["dynamax"], peers["cuthbert"]
    if isinstance(dyn, dict):

        def dyn_ll(A, Q, C, R, yj):
            params = dyn["ParamsLGSSM"](
                initial=dyn["Initial"](mean=A @ m0, cov=A @ P0 @ A.T + Q),
                dynamics=dyn["Dynamics"](weights=A, bias=jnp.zeros(n), input_weights=jnp.zeros((n, 0)), cov=Q),
                emissions=dyn["Emissions"](weights=C, bias=jnp.zeros(m), input_weights=jnp.zeros((m, 0)), cov=R),
            )
            return dyn["lgssm_filter"](params, yj).marginal_loglik

        out["dynamax (jax.grad)"] = jax.value_and_grad(dyn_ll, argnums=(0, 1, 2, 3))
    if isinstance(cut, dict):

        def cut_ll(A, Q, C, R, yj):
            cq, cr = jnp.linalg.cholesky(Q), jnp.linalg.cholesky(R)
            filt = cut["kalman"].build_filter(m0, jnp.linalg.cholesky(P0), lambda mi: (A, jnp.zeros(n), cq),
                                              lambda mi: (C, jnp.zeros(m), cr, mi))
            states = cut["filter"](filt, yj, filt.init_prepare(), parallel=True)
            return states.log_normalizing_constant[-1]

        out["cuthbert (jax.grad)"] = jax.value_and_grad(cut_ll, argnums=(0, 1, 2, 3))
    return out, args, (True, True, False, True)  # which gradients are symmetric matrices (compare symmetric parts)


# -- the Gaussian HMM ---------------------------------------------------------------------------------


def hmm_contenders(T, peers):
    Pi, mu, Sigma, y = hmm_series(T)  # the series of peer_ssm.py's HMM table
    K = Pi.shape[0]
    model = GaussianHMM(jnp.asarray(y), K)
    theta = jnp.asarray(GaussianHMM(y, K).unconstrain(HMMParams(Pi, mu, Sigma)))
    p0 = model._p0_uniform(1)

    def pieces(th, yj):
        eta, mu_, psi = model._split(th[None])
        return model._Pi(eta), hmm_mod._log_emission(jnp, yj[None], mu_, psi)  # (1, K, K), (1, T, K)

    def sgmc_fisher(th, yj):
        ll, g = model._stats(th[None], yj[None], p0, None, None)
        return ll[0], g[0]

    def sgmc_ll(th, yj):
        P, logp = pieces(th, yj)
        return hmm_mod.forward_backward(P, logp, p0)[0][0]

    out = {"sgmc (Fisher identity)": sgmc_fisher, "sgmc (jax.grad)": jax.value_and_grad(sgmc_ll)}
    dyn, cut = peers["dynamax"], peers["cuthbert"]
    if isinstance(dyn, dict):

        def dyn_ll(th, yj):
            P, logp = pieces(th, yj)
            return dyn["hmm_filter"](p0[0] @ P[0], P[0], logp[0]).marginal_loglik  # its initial law: of z_1

        out["dynamax (jax.grad)"] = jax.value_and_grad(dyn_ll)
    if isinstance(cut, dict):

        def cut_ll(th, yj):
            P, logp = pieces(th, yj)
            filt = cut["discrete"].build_filter(p0[0], lambda mi: P[0], lambda mi: mi)
            states = cut["filter"](filt, logp[0], filt.init_prepare(), parallel=True)
            return states.log_normalizing_constant[-1]

        out["cuthbert (jax.grad)"] = jax.value_and_grad(cut_ll)
    return out, (theta, jnp.asarray(y)), None  # the data is an argument, not a constant to fold


# -- timing ---------------------------------------------------------------------------------------------


def _flat(g, sym):
    parts = g if isinstance(g, (tuple, list)) else (g,)
    out = []
    for i, p in enumerate(parts):
        p = np.asarray(p)
        if sym is not None and sym[i]:
            p = 0.5 * (p + np.swapaxes(p, -1, -2))
        out.append(p.ravel())
    return np.concatenate(out)


def race(contenders, args, sym, rounds):
    jitted, compile_s, values = {}, {}, {}
    for name, fn in contenders.items():
        jitted[name] = jax.jit(fn)
        with Clock() as c:
            ll, g = jax.block_until_ready(jitted[name](*args))
        compile_s[name] = c.cpu
        values[name] = (float(ll), _flat(g, sym))
        print(f"  {name}: compiled in {c.cpu:.1f} CPU s, log-likelihood {float(ll):.4f}", flush=True)
    times = {name: ([], []) for name in contenders}
    names = list(contenders)
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            with Clock() as c:
                jax.block_until_ready(jitted[name](*args))
            times[name][0].append(c.cpu)
            times[name][1].append(c.wall)
    ref_ll, ref_g = values["sgmc (Fisher identity)"]
    result = {}
    for name in names:
        ll, g = values[name]
        rel = float(np.max(np.abs(g - ref_g)) / np.max(np.abs(ref_g)))
        if abs(ll - ref_ll) > 1e-8 * abs(ref_ll) or rel > 1e-6:
            msg = f"{name} disagrees with sgmc: log-likelihood {ll} vs {ref_ll}, gradient relative difference {rel:.2e}"
            raise RuntimeError(msg)
        result[name] = {"cpu": statistics.median(times[name][0]), "wall": statistics.median(times[name][1]),
                        "compile_cpu": compile_s[name], "loglik": ll, "grad_rel_diff": rel}
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--T", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--results", default="ssm_jax_grad", help="results file stem, or 'none'")
    parser.add_argument("--cores", default="1")
    opts = parser.parse_args(argv)
    pinning = verify(CORES)
    peers = {name: _peer(name) for name in ("dynamax", "cuthbert")}
    tables, raw = {}, {}
    for key, build, title in (("hmm", hmm_contenders, f"Gaussian HMM, K = 3, m = 2, T = {opts.T}"),
                              ("lgssm", lgssm_contenders, f"LGSSM, n = 2, m = 3, T = {opts.T}")):
        print(title, flush=True)
        contenders, args, sym = build(opts.T, peers)
        res = race(contenders, args, sym, opts.rounds)
        raw[key] = res
        peer_cpu = [v["cpu"] for k, v in res.items() if not k.startswith("sgmc")]
        best_peer = min(peer_cpu) if peer_cpu else None
        rows = [[opts.T, name, 1e3 * v["cpu"], 1e3 * v["wall"], None if best_peer is None else v["cpu"] / best_peer,
                 v["compile_cpu"], v["loglik"], v["grad_rel_diff"]] for name, v in res.items()]
        missing = "; ".join(f"{k}: {v}" for k, v in peers.items() if not isinstance(v, dict))
        tables[key] = {
            "columns": ["T", "contender", "CPU ms", "wall ms", "CPU ratio to the faster peer", "compile CPU s",
                        "log-likelihood", "gradient rel. difference"],
            "rows": rows,
            "formats": ["d", "s", ".1f", ".1f", ".2f", ".1f", ".3f", ".1e"],
            "notes": f"{title}: log-likelihood and gradient under jax.jit (float64), one pinned core; medians of "
                     f"{opts.rounds} interleaved rounds, compilation excluded." + (f" Missing: {missing}." if missing else ""),
        }
        for row in rows:
            print("  " + " | ".join(str(round(c, 4)) if isinstance(c, float) else str(c) for c in row), flush=True)
    if opts.results != "none":
        extra = {"pinning": pinning, "raw": raw, "peers": {k: ("installed" if isinstance(v, dict) else v) for k, v in peers.items()}}
        path = write_results(opts.results, tables, extra=extra, packages=("dynamax", "cuthbert", "cuthbertlib"))
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
