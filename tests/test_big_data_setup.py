"""The control-variate set-up on data read from disk holds a block of rows, not N terms per chain.

SGLD-CV's set-up makes full passes over the data: the Newton steps that finish the mode search
(gradient, Hessian and the log densities of the line search), the check of the centre and the full
gradient there. On a memmap they go through the rows in blocks (``sgmc._blocks``), so the memory a
pass needs is bounded by a block whatever N is. The test runs the set-up and a short run in a child
process whose address space is limited to what it uses once the model is built plus 300 MiB, less
than the data file (one column of 24 million rows, 192 MB) plus 300 MiB. Summing the line search's
log density over a vector of the N per-datum terms (as the set-up did before it went by blocks)
needs more than that here; the blocked passes need a few blocks. A small data set checks that the
blocked set-up gives the draws of the same run in memory.
"""

import sys
import warnings

import numpy as np
import pytest

import sgmc
from _limits import check_held, run_child
from sgmc.models import LogisticRegression

HEADROOM = 300 * 2**20

_CHILD = """
    import sgmc
    from sgmc.models import LogisticRegression

    warnings.simplefilter("ignore")
    path, n, headroom = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    y = np.load(path + ".y.npy")
    kw = dict(step_size=1e-8, batch_size=500, n_iter=100, chains=2, rng=4, progress=False,
              estimator_options={"opt_steps": 300})
    small = LogisticRegression(np.random.default_rng(0).normal(size=(500, 1)), y[:500])
    sgmc.sample(small, "sgld", "cv", **kw)           # compiled code and caches made before the limit
    base = held_base()
    model = LogisticRegression(np.memmap(path, dtype=np.float64, mode="r", shape=(n, 1)), y)
    kept = held(base, [path])                        # neither a map nor a copy of X
    gc.collect()
    limit = max(vm(), _RESERVED[0]) + headroom
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    trace = sgmc.sample(model, "sgld", "cv", **kw)
    print(json.dumps({"held": kept, "limit": limit, "data": n * 8, "vm_end": vm(),
                      "draws": np.asarray(trace.draws).tolist(),
                      "setup_passes": trace.info["setup_data_passes"]}))
"""


def _data(n, rng, beta=0.5):
    X = np.empty((n, 1))
    y = np.empty(n)
    for a in range(0, n, 2_000_000):                         # made in blocks, as a real data set would be
        b = min(a + 2_000_000, n)
        X[a:b] = rng.normal(size=(b - a, 1))
        y[a:b] = rng.uniform(size=b - a) < 1 / (1 + np.exp(-beta * X[a:b, 0]))
    return X, y


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc/self/status are Linux's")
def test_sgld_cv_setup_on_a_memmap_runs_in_data_plus_300_mib(tmp_path):
    n = 24_000_000                                           # 192 MB of float64 in one column
    X, y = _data(n, np.random.default_rng(7))
    path = str(tmp_path / "X.f64")
    X.tofile(path)
    np.save(path + ".y.npy", y)
    del X, y
    res = run_child(_CHILD, path, n, HEADROOM)
    check_held(res)
    assert res["vm_end"] <= res["limit"]
    assert res["setup_passes"] > 5                           # the Newton steps and their line search ran
    draws = np.asarray(res["draws"])
    assert np.all(np.isfinite(draws))
    # the posterior sd of the slope is about 4e-4 here: the centre and the draws sit at beta = 0.5
    assert abs(draws.mean() - 0.5) < 5e-3


def test_blocked_setup_gives_the_in_memory_draws(tmp_path):
    X, y = _data(20_000, np.random.default_rng(8))
    path = str(tmp_path / "X.f64")
    X.tofile(path)
    disk = LogisticRegression(np.memmap(path, dtype=np.float64, mode="r", shape=X.shape), y)
    disk.X.block_rows = 3_000                                # several blocks, a ragged last one
    mem = LogisticRegression(X, y)
    theta = np.random.default_rng(9).normal(size=(3, 1))
    for a, b in zip(disk.log_posterior_and_grad(theta), mem.log_posterior_and_grad(theta)):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    np.testing.assert_allclose(disk.log_lik_total(theta), mem.log_lik_total(theta), rtol=1e-12)
    kw = dict(step_size=1e-5, batch_size=200, n_iter=100, chains=2, rng=4, progress=False,
              estimator_options={"opt_steps": 300})                # Newton steps finish the search (polish)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sgmc.ModeNotFoundWarning)
        got = sgmc.sample(disk, "sgld", "cv", **kw)
        ref = sgmc.sample(mem, "sgld", "cv", **kw)
    np.testing.assert_allclose(np.asarray(got.draws), np.asarray(ref.draws), rtol=1e-9, atol=1e-12)
    assert got.info["setup_data_passes"] == pytest.approx(ref.info["setup_data_passes"])
    assert got.info["setup_data_passes"] > 5
