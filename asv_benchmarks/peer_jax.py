"""SGLD and SGLD-CV against the JAX and PyTorch SGMCMC libraries, in one run.

Contenders (each where installed): sgmc (NumPy, with and without the compiled CPU paths; draws with
replacement like the peers, and its default draw without replacement), blackjax (``sgld`` with its
``grad_estimator`` or ``control_variates``, ``lax.scan`` over iterations and ``vmap`` over chains,
jit-compiled), posteriors (``posteriors.sgmcmc.sgld`` on PyTorch with autograd, one chain) and
SGMCMCJax (``build_sgld_sampler`` / ``build_sgldCV_sampler``, one chain), which needs ``jax==0.4.30``
and so runs in a virtual environment of its own, given by ``--sgmcmcjax-python``::

    python -m venv /tmp/venv-sgmcmcjax
    /tmp/venv-sgmcmcjax/bin/pip install "sgmcmcjax==0.2.13" "jax==0.4.30" "jaxlib==0.4.30" "numpy<2"

The workload is the review's logistic regression: N = 10^5 simulated data, d = 10 or 100, float64, a
N(0, 10 I) prior, minibatches of n = 1000 drawn with replacement by every chain, a fixed step. Every
contender reads the same data (SGMCMCJax from a ``.npy`` file) and does the same work per iteration:
one minibatch per chain, the gradient estimate (for CV: at the position and the centre, the mode), one
Langevin step. JAX compile time is reported apart (first call) and not counted. Within every
repetition the contenders alternate their order; the medians of the per-iteration times are reported,
with each peer's time divided by sgmc's.

Usage (from the repository root; ``pip install ".[bench]"``)::

    python asv_benchmarks/peer_jax.py --sgmcmcjax-python /tmp/venv-sgmcmcjax/bin/python
    python asv_benchmarks/peer_jax.py --iters 1000 --reps 3 --cases sgld-1-10 sgld-32-100
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import sgmc
from sgmc.backends import _numba
from sgmc.models import LogisticRegression
from sgmc.optimize import newton

N_DATA = 100_000
BATCH = 1_000
PRIOR_VAR = 10.0
CASES = ["sgld-1-10", "sgld-1-100", "sgld-32-10", "sgld-32-100", "cv-1-10", "cv-1-100"]


def make_data(dim: int, seed: int = 0):
    r = np.random.default_rng(seed)
    X = r.standard_normal((N_DATA, dim)) / np.sqrt(dim)
    theta = r.standard_normal(dim)
    y = (r.random(N_DATA) < 1.0 / (1.0 + np.exp(-X @ theta))).astype(np.float64)
    return X, y


def step_for(dim: int) -> float:
    return 1e-5 if dim == 10 else 5e-6


# -- sgmc ------------------------------------------------------------------------------------------


def sgmc_runner(model, method, chains, iters, h, centre, replace, native):
    opts = {"replace": replace}
    if method == "cv":
        opts["centre"] = centre
    init = np.broadcast_to(centre, (chains, centre.shape[0])).copy()

    def run():
        old = _numba.set_enabled(native)
        try:
            sgmc.sample(model, "sgld", "cv" if method == "cv" else "minibatch", step_size=h, batch_size=BATCH,
                        n_iter=iters, chains=chains, init=init, rng=1, progress=False, estimator_options=opts,
                        group_size=chains)
        finally:
            _numba.set_enabled(old)

    run()
    return run


# -- blackjax --------------------------------------------------------------------------------------


def blackjax_runner(X, y, method, chains, iters, h, centre):
    try:
        import jax
        import jax.numpy as jnp
        import blackjax
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)
    Xj, yj = jnp.asarray(X), jnp.asarray(y)
    n_data, dim = X.shape

    def logprior(theta):
        return -0.5 * jnp.sum(theta * theta) / PRIOR_VAR

    def loglik(theta, batch):
        xb, yb = batch
        eta = xb @ theta
        return jnp.sum(yb * eta - jnp.logaddexp(0.0, eta))

    grad_fn = blackjax.sgmcmc.gradients.grad_estimator(logprior, loglik, n_data)
    if method == "cv":
        grad_fn = blackjax.sgmcmc.gradients.control_variates(grad_fn, jnp.asarray(centre), (Xj, yj))
    sgld = blackjax.sgld(grad_fn)

    def one_chain(key, theta):
        def body(theta, k):
            k1, k2 = jax.random.split(k)
            idx = jax.random.randint(k1, (BATCH,), 0, n_data)
            out = sgld.step(k2, theta, (Xj[idx], yj[idx]), h / 2.0)  # blackjax's step size is h / 2
            theta = out[0] if isinstance(out, tuple) else out
            return theta, theta[0]

        return jax.lax.scan(body, theta, jax.random.split(key, iters))

    run_all = jax.jit(jax.vmap(one_chain))
    keys = jax.random.split(jax.random.PRNGKey(0), chains)
    theta0 = jnp.tile(jnp.asarray(centre)[None, :], (chains, 1))
    t0 = time.perf_counter()
    jax.block_until_ready(run_all(keys, theta0))
    compile_s = time.perf_counter() - t0

    def run():
        jax.block_until_ready(run_all(keys, theta0))

    return run, compile_s


# -- posteriors (PyTorch) --------------------------------------------------------------------------


def posteriors_runner(X, y, method, chains, iters, h, centre):
    if chains != 1 or method != "sgld":
        return None
    try:
        import posteriors
        import torch
    except ImportError:
        return None
    torch.set_default_dtype(torch.float64)
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    n_data = X.shape[0]
    gen = torch.Generator().manual_seed(0)

    def log_post(theta, batch):
        xb, yb = batch
        eta = xb @ theta
        ll = torch.sum(yb * eta - torch.nn.functional.softplus(eta))
        lp = -0.5 * torch.sum(theta * theta) / PRIOR_VAR
        return (lp + n_data / BATCH * ll) / n_data, eta  # posteriors works with the per-datum average

    # lr is posteriors' step for the averaged log posterior: theta += lr * grad + sqrt(2 lr T / N) z
    transform = posteriors.sgmcmc.sgld.build(log_post, lr=h / 2.0 * n_data, temperature=1.0 / n_data)

    def run():
        state = transform.init(torch.from_numpy(centre.copy()))
        for _ in range(iters):
            idx = torch.randint(0, n_data, (BATCH,), generator=gen)
            state, _ = transform.update(state, (Xt[idx], yt[idx]), inplace=True)

    run()
    return run


# -- SGMCMCJax in its own interpreter --------------------------------------------------------------

_SGMCMCJAX = r"""
import json, sys, time
import numpy as np
import jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
from sgmcmcjax.samplers import build_sgld_sampler, build_sgldCV_sampler
X = jnp.asarray(np.load(sys.argv[1])); y = jnp.asarray(np.load(sys.argv[2])); centre = jnp.asarray(np.load(sys.argv[3]))
method, iters, h, batch, reps, prior_var = sys.argv[4], int(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8]), float(sys.argv[9])
def loglik(theta, x, yy):
    eta = jnp.dot(x, theta)
    return yy * eta - jnp.logaddexp(0.0, eta)
def logprior(theta):
    return -0.5 * jnp.sum(theta * theta) / prior_var
if method == "cv":
    sampler = build_sgldCV_sampler(h, loglik, logprior, (X, y), batch, centre)
else:
    sampler = build_sgld_sampler(h, loglik, logprior, (X, y), batch)
key = jax.random.PRNGKey(0)
t0 = time.perf_counter(); jax.block_until_ready(sampler(key, iters, centre)); first = time.perf_counter() - t0
times = []
for r in range(reps):
    t0 = time.perf_counter(); jax.block_until_ready(sampler(jax.random.PRNGKey(r + 1), iters, centre)); times.append(time.perf_counter() - t0)
print(json.dumps({"first": first, "times": times}))
"""


def sgmcmcjax_times(python, X, y, centre, method, iters, h, reps):
    with tempfile.TemporaryDirectory() as tmp:
        paths = [os.path.join(tmp, f) for f in ("X.npy", "y.npy", "c.npy")]
        for p, a in zip(paths, (X, y, centre)):
            np.save(p, a)
        proc = subprocess.run([python, "-c", _SGMCMCJAX, *paths, method, str(iters), repr(h), str(BATCH), str(reps),
                               repr(PRIOR_VAR)], capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"SGMCMCJax failed: {proc.stderr[-500:]}", file=sys.stderr)
        return None
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


# -- driver ----------------------------------------------------------------------------------------


def run_case(case, iters, reps, sgmcmcjax_python):
    method, chains, dim = case.split("-")
    chains, dim = int(chains), int(dim)
    X, y = make_data(dim)
    model = LogisticRegression(X, y, prior_var=PRIOR_VAR)
    centre, _ = newton(model, np.zeros(dim))
    centre = np.asarray(centre)
    h = step_for(dim)
    contenders = {
        "sgmc": sgmc_runner(model, method, chains, iters, h, centre, True, True),
        "sgmc (no compiled paths)": sgmc_runner(model, method, chains, iters, h, centre, True, False),
    }
    if chains == 1:
        contenders["sgmc, without replacement"] = sgmc_runner(model, method, chains, iters, h, centre, False, True)
    compile_s = {}
    bj = blackjax_runner(X, y, method, chains, iters, h, centre)
    if bj is not None:
        contenders["blackjax"], compile_s["blackjax"] = bj
    po = posteriors_runner(X, y, method, chains, iters, h, centre)
    if po is not None:
        contenders["posteriors"] = po
    names = list(contenders)
    times = {k: [] for k in names}
    for rep in range(reps):
        order = names[rep % len(names):] + names[:rep % len(names)]
        for k in order:
            t0 = time.perf_counter()
            contenders[k]()
            times[k].append((time.perf_counter() - t0) / iters)
    # SGMCMCJax runs in its own process after the others (same data, same sizes)
    if sgmcmcjax_python and chains == 1:
        out = sgmcmcjax_times(sgmcmcjax_python, X, y, centre, method, iters, h, reps)
        if out is not None:
            times["SGMCMCJax"] = [t / iters for t in out["times"]]
            compile_s["SGMCMCJax"] = out["first"] - statistics.median(out["times"])
    us = {k: statistics.median(v) * 1e6 for k, v in times.items()}
    return {"case": case, "method": method, "chains": chains, "dim": dim, "us_per_iter": us, "compile_s": compile_s}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", default=CASES, choices=CASES)
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--sgmcmcjax-python", default=os.environ.get("SGMCMCJAX_PYTHON"),
                        help="python of a venv with sgmcmcjax==0.2.13 and jax==0.4.30 (or $SGMCMCJAX_PYTHON)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    results = [run_case(c, args.iters, args.reps, args.sgmcmcjax_python) for c in args.cases]
    cols = ["sgmc", "sgmc (no compiled paths)", "sgmc, without replacement", "blackjax", "SGMCMCJax", "posteriors"]
    print(f"\n{time.strftime('%Y-%m-%d')}, {platform.platform()}, {os.cpu_count()} CPUs; "
          f"{args.iters} iterations x {args.reps} alternating repetitions; microseconds per iteration (all chains)")
    print("\n| case | " + " | ".join(cols) + " | peer / sgmc |")
    print("|" + "---|" * (len(cols) + 2))
    for r in results:
        us = r["us_per_iter"]
        cells = [f"{us[c]:.0f}" if c in us else "–" for c in cols]
        ratios = ", ".join(f"{c} {us[c] / us['sgmc']:.2f}" for c in ("blackjax", "SGMCMCJax", "posteriors") if c in us)
        print(f"| {r['method']}, {r['chains']} chain(s), d = {r['dim']} | " + " | ".join(cells) + f" | {ratios} |")
    for r in results:
        if r["compile_s"]:
            print(f"compile, {r['case']}: " + ", ".join(f"{k} {v:.1f} s" for k, v in r["compile_s"].items()))
    floor = {r["case"]: r["us_per_iter"] for r in results}
    if "sgld-1-10" in floor and "cv-1-10" in floor:
        a, b = floor["sgld-1-10"], floor["cv-1-10"]
        print(f"\nwithout / with replacement (SGLD, 1 chain, d = 10): "
              f"{a['sgmc, without replacement'] / a['sgmc']:.2f}; SGLD-CV / SGLD: {b['sgmc'] / a['sgmc']:.2f}")
    if "sgld-1-100" in floor and "cv-1-100" in floor:
        print(f"SGLD-CV / SGLD, d = 100: {floor['cv-1-100']['sgmc'] / floor['sgld-1-100']['sgmc']:.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
