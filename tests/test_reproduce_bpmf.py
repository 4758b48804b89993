"""BPMF on MovieLens (section 6.3 of the review, Figure 6): scatter-add, the model, the loader and the experiment.

Scatter-add natives are checked against the array-API twin and a brute-force loop; the model's
gradient against finite differences and torch autograd; the loader on small files the tests write.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from sgmc._scatter import scatter_add, scatter_add_twin
from sgmc.datasets import movielens100k
from sgmc.models import BPMF

from _helpers import Z_TOL, fd_jacobian


def _brute(m, index, values):
    out = np.zeros((m, values.shape[1]))
    for j in range(index.shape[0]):
        out[index[j]] += values[j]
    return out


def _cases():
    rng = np.random.default_rng(3)
    return [
        (7, rng.integers(0, 7, 40), rng.normal(size=(40, 3))),       # repeats
        (5, np.asarray([4, 4, 4, 4]), np.ones((4, 2))),                # one row only
        (6, np.zeros(0, dtype=np.int64), np.zeros((0, 3))),            # empty batch
        (9, rng.permutation(9)[:5], rng.normal(size=(5, 4))),          # distinct
    ]


@pytest.mark.parametrize("case", range(4))
def test_scatter_add_numpy_twin_and_brute_force_agree(case):
    m, idx, vals = _cases()[case]
    want = _brute(m, idx, vals)
    np.testing.assert_allclose(scatter_add(np, m, idx, vals), want, atol=1e-12)
    np.testing.assert_allclose(scatter_add_twin(np, m, idx, vals), want, atol=1e-12)
    from sgmc.backends._scatter import scatter_add_numpy_addat

    np.testing.assert_allclose(scatter_add_numpy_addat(m, idx, vals), want, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_scatter_add_array_api_strict(dtype):
    xs = pytest.importorskip("array_api_strict")
    tol = 1e-12 if dtype == "float64" else 1e-5
    for m, idx, vals in _cases():
        got = scatter_add(xs, m, xs.asarray(idx), xs.asarray(vals.astype(dtype)))
        assert got.dtype == getattr(xs, dtype)
        np.testing.assert_allclose(np.asarray(got), _brute(m, idx, vals), atol=tol)


def test_scatter_add_torch_native():
    torch = pytest.importorskip("torch")
    from sgmc._dispatch import native

    assert native(torch, "scatter_add") is not None
    for m, idx, vals in _cases():
        got = scatter_add(torch, m, torch.asarray(idx), torch.asarray(vals))
        np.testing.assert_allclose(got.numpy(), _brute(m, idx, vals), atol=1e-12)


def test_scatter_add_chains_axis():
    rng = np.random.default_rng(5)
    idx = rng.integers(0, 6, (3, 25))
    vals = rng.normal(size=(3, 25, 2))
    got = scatter_add(np, 6, idx, vals)
    want = np.stack([_brute(6, idx[c], vals[c]) for c in range(3)])
    np.testing.assert_allclose(got, want, atol=1e-12)
    xs = pytest.importorskip("array_api_strict")
    np.testing.assert_allclose(np.asarray(scatter_add(xs, 6, xs.asarray(idx), xs.asarray(vals))), want, atol=1e-12)
    with pytest.raises(ValueError, match="index"):
        scatter_add(np, 6, idx[0], vals)


def _cupy_ready():
    try:
        from sgmc.backends.cupy import device_status
    except Exception as exc:  # noqa: BLE001
        return False, f"the CuPy backend does not import ({exc})"
    return device_status()


@pytest.mark.gpu
def test_scatter_add_cupy():
    ok, why = _cupy_ready()
    if not ok:
        pytest.skip(f"no usable CUDA device: {why}")
    import cupy as cp
    from array_api_compat import cupy as xp_cp

    for m, idx, vals in _cases():
        got = scatter_add(xp_cp, m, cp.asarray(idx), cp.asarray(vals))
        np.testing.assert_allclose(cp.asnumpy(got), _brute(m, idx, vals), atol=1e-12)


# -- the model ------------------------------------------------------------------------------------
def _small(centre=True, **kw):
    rng = np.random.default_rng(11)
    u = rng.integers(0, 5, 40)
    i = rng.integers(0, 4, 40)
    r = rng.integers(1, 6, 40).astype(float)
    return BPMF(u, i, r, 5, 4, d=3, centre=centre, **kw), rng


def test_bpmf_gradient_matches_finite_differences():
    m, rng = _small()
    th = 0.5 * rng.normal(size=(2, m.dim))
    fd = fd_jacobian(m.log_posterior, th)  # (chains, dim): each chain's value depends on its own row only
    np.testing.assert_allclose(m.grad_log_posterior(th), fd, atol=1e-6)
    idx = rng.integers(0, m.n_data, (2, 9))
    w = rng.random((2, 9))
    per = m.grad_log_lik(th, idx)
    np.testing.assert_allclose(m.grad_log_lik_sum(th, idx, w), np.sum(per * w[..., None], axis=1), atol=1e-12)
    ll = lambda t: np.sum(m.log_lik(t, idx) * w, axis=-1)  # noqa: E731
    np.testing.assert_allclose(m.grad_log_lik_sum(th, idx, w), fd_jacobian(ll, th), atol=1e-6)


def test_bpmf_gradient_matches_torch_autograd_and_runs_on_torch():
    torch = pytest.importorskip("torch")
    m, rng = _small(a0=2.0, b0=3.0, mu0=0.5)
    th = 0.5 * rng.normal(size=(3, m.dim))
    tm = BPMF(torch.asarray(m.users), torch.asarray(m.items), torch.asarray(np.asarray(m.ratings) + m.offset),
              5, 4, d=3, centre=True, a0=2.0, b0=3.0, mu0=0.5)
    t = torch.asarray(th, requires_grad=True)
    tm.log_posterior(t).sum().backward()
    np.testing.assert_allclose(tm.grad_log_posterior(torch.asarray(th)).numpy(), t.grad.numpy(), atol=1e-10)
    np.testing.assert_allclose(m.grad_log_posterior(th), t.grad.numpy(), atol=1e-10)


def test_bpmf_on_array_api_strict_float32():
    xs = pytest.importorskip("array_api_strict")
    m, rng = _small()
    th = 0.5 * rng.normal(size=(2, m.dim))
    sm = BPMF(xs.asarray(m.users), xs.asarray(m.items), xs.asarray((np.asarray(m.ratings) + m.offset).astype("float32")),
              5, 4, d=3, centre=True)
    assert sm.dtype == xs.float32
    got = sm.grad_log_posterior(xs.asarray(th.astype("float32")))
    np.testing.assert_allclose(np.asarray(got), m.grad_log_posterior(th), rtol=1e-4, atol=1e-4)
    p = sm.predict(xs.asarray(th.astype("float32")), xs.asarray([0, 1]), xs.asarray([2, 3]), clip=(1.0, 5.0))
    assert p.shape == (2, 2)


def test_bpmf_layout_predict_and_errors():
    m, rng = _small()
    th = rng.normal(size=(2, m.dim))
    p = m.unpack(th)
    assert p["U"].shape == (2, 5, 3) and p["V"].shape == (2, 4, 3) and p["log_lambda_V"].shape == (2, 3)
    np.testing.assert_array_equal(m.pack(**p), th)
    pred = m.predict(th, np.asarray([1, 4]), np.asarray([0, 3]))
    np.testing.assert_allclose(pred[1, 1], th[1, 12:15] @ th[1, 15 + 9:15 + 12] + m.offset)
    assert m.predict(th, np.asarray([1]), np.asarray([0]), clip=(1.0, 5.0)).min() >= 1.0
    with pytest.raises(ValueError, match="users"):
        BPMF(np.asarray([0, 9]), np.asarray([0, 1]), np.asarray([1.0, 2.0]), n_users=3)
    with pytest.raises(TypeError, match="integer"):
        BPMF(np.asarray([0.0, 1.0]), np.asarray([0, 1]), np.asarray([1.0, 2.0]))
    with pytest.raises(ValueError, match="one entry per rating"):
        BPMF(np.asarray([0]), np.asarray([0, 1]), np.asarray([1.0, 2.0]))


def test_bpmf_monte_carlo_prediction_recovers_a_low_rank_matrix():
    """SGLD draws averaged over iterations predict held-out entries of a rank-2 matrix far better than the mean."""
    import sgmc

    rng = np.random.default_rng(2)
    U, V = rng.normal(size=(30, 2)), rng.normal(size=(25, 2))
    u, i = np.meshgrid(np.arange(30), np.arange(25), indexing="ij")
    u, i = u.ravel(), i.ravel()
    r = np.sum(U[u] * V[i], axis=1) + 0.3 * rng.normal(size=u.size)
    test = rng.random(u.size) < 0.2
    m = BPMF(u[~test], i[~test], r[~test], 30, 25, d=2, alpha=1 / 0.09, centre=True)
    preds = []
    init = 0.3 * rng.normal(size=(1, m.dim))
    tr = sgmc.sample(m, "sgld", "minibatch", step_size=2e-4, batch_size=0.2, n_iter=3000, init=init, thin=10,
                     burn_in=1500, rng=0, progress=False)
    for th in np.asarray(tr.draws)[:, 0]:
        preds.append(m.predict(th, u[test], i[test]))
    rmse = np.sqrt(np.mean((np.mean(preds, axis=0) - r[test]) ** 2))
    base = np.sqrt(np.mean((m.offset - r[test]) ** 2))
    assert rmse < 0.5 * base, (rmse, base)


# -- the loader -----------------------------------------------------------------------------------
def _write(path, rows):
    with open(path, "w") as fh:
        for u, i, r in rows:
            fh.write(f"{u}\t{i}\t{r}\t881250949\n")


def test_movielens_loader_predefined_split_and_u_data(tmp_path):
    _write(tmp_path / "u2.base", [(1, 10, 5), (2, 10, 3), (3, 30, 4)])
    _write(tmp_path / "u2.test", [(1, 30, 2), (7, 10, 1)])
    d = movielens100k(tmp_path, fold=2)
    assert d.n_users == 4 and d.n_items == 2 and d.fold == 2
    np.testing.assert_array_equal(d.train_users, [0, 1, 2])
    np.testing.assert_array_equal(d.test_users, [0, 3])
    np.testing.assert_array_equal(d.test_items, [1, 0])
    np.testing.assert_array_equal(d.test_ratings, [2.0, 1.0])
    with pytest.raises(FileNotFoundError, match="u1.base"):
        movielens100k(tmp_path, fold=1)
    rows = [(u, u % 7, 1 + u % 5) for u in range(1, 53)]
    (tmp_path / "raw").mkdir()
    _write(tmp_path / "raw" / "u.data", rows)
    folds = [movielens100k(tmp_path / "raw", fold=k, seed=4) for k in range(1, 6)]  # no uK.*: u.data is split
    tests = np.sort(np.concatenate([f.test_users for f in folds]))
    np.testing.assert_array_equal(tests, np.arange(52))  # the 5 test folds partition the ratings
    assert all(abs(f.test_users.size - 52 / 5) < 1 for f in folds)
    again = movielens100k(tmp_path / "raw" / "u.data", fold=3, seed=4)
    np.testing.assert_array_equal(again.test_users, folds[2].test_users)


def test_movielens_loader_errors(tmp_path):
    with pytest.raises(ValueError, match="fold"):
        movielens100k(tmp_path, fold=6)
    with pytest.raises(FileNotFoundError, match="no such file"):
        movielens100k(tmp_path / "nowhere")
    (tmp_path / "u.data").write_text("1\t2\tfive\t0\n")
    with pytest.raises(ValueError, match="line 1"):
        movielens100k(tmp_path)


# -- the experiment -------------------------------------------------------------------------------
def _synthetic_movielens(folder, seed=0, users=60, items=40):
    rng = np.random.default_rng(seed)
    U, V = 0.7 * rng.normal(size=(users, 3)), 0.7 * rng.normal(size=(items, 3))
    rows = []
    for u in range(users):
        for i in rng.choice(items, 15, replace=False):
            r = int(np.clip(np.rint(3.5 + U[u] @ V[i] + 0.5 * rng.normal()), 1, 5))
            rows.append((u + 1, i + 1, r))
    _write(os.path.join(folder, "u.data"), rows)


def test_reproduce_bpmf_tiny(tmp_path):
    from sgmc.experiments import reproduce

    _synthetic_movielens(tmp_path)
    out = tmp_path / "out"
    meta = reproduce("bpmf-movielens", out, quick=True, progress=False, path=str(tmp_path), folds=2, n_iter=40,
                     eval_every=10, sgd_iter=20, pilot_iter=10, d=3)
    for f in ("fig6.png", "table_rmse.md", "table_rmse.csv", "fig6_rmse.csv", "pilot.md", "centre.md", "meta.json"):
        assert (out / f).exists(), f
    notes = json.loads((out / "meta.json").read_text())["notes"]
    assert set(notes["step_sizes"]) == {"SGLD", "SGLD-CV", "SGHMC", "SGHMC-CV"}
    assert meta["meta"]["size"] == "quick"
    lines = (out / "fig6_rmse.csv").read_text().splitlines()
    assert lines[0] == "iteration,SGLD,SGLD-CV,SGHMC,SGHMC-CV" and len(lines) == 5
    with pytest.raises(ValueError, match="eval_every"):
        reproduce("bpmf-movielens", out, quick=True, progress=False, path=str(tmp_path), n_iter=5, eval_every=10)


@pytest.mark.slow
def test_reproduce_bpmf_quick_claims(tmp_path):
    """Figure 6's claims that hold at the quick size, over 3 seeds (margins beyond Z_TOL standard errors).

    The control-variate samplers start at theta_hat, so early on (first evaluation) and at the end of
    the short run they predict better than SGLD and SGHMC, and better than the training mean.
    """
    from sgmc.experiments import reproduce

    rows = []
    for seed in range(3):
        out = tmp_path / f"s{seed}"
        reproduce("bpmf-movielens", out, quick=True, seed=seed, progress=False)
        lines = (out / "table_rmse.csv").read_text().splitlines()[1:]
        rows.append({ln.split(",")[0]: [float(x) for x in ln.split(",")[2:5]] for ln in lines})
    def stat(method, col):
        v = np.asarray([r[method][col] for r in rows])
        return v.mean(), v.std(ddof=1) / np.sqrt(v.size)
    for plain in ("SGLD", "SGHMC"):
        for col in (0, 2):  # final RMSE, RMSE at the first evaluation
            a, sa = stat(plain, col)
            b, sb = stat(plain + "-CV", col)
            assert b + Z_TOL * np.hypot(sa, sb) < a, (plain, col, a, b)
        cv, s = stat(plain + "-CV", 0)
        base, sbase = stat("training mean", 0)
        assert cv + Z_TOL * np.hypot(s, sbase) < base
