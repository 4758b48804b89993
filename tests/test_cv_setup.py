"""SGLD-CV's set-up in one pass: the native ``"glm_centre_terms"`` and the table the fused blocks reuse.

References: the full-data gradient by a plain NumPy formula (sigmoid or linear residuals, ``X.T @ r``)
and the model's own array-API ``grad_log_lik_sum`` with the compiled paths off; the residual table by
the same NumPy formula; a run whose fused blocks find no table (they compute it themselves) for the
draws.
"""

from __future__ import annotations

import numpy as np
import pytest

import sgmc
from sgmc import backends
from sgmc._dispatch import native
from sgmc.backends import _numba, _numba_fused
from sgmc.estimators import ControlVariate
from sgmc.estimators import control_variates as cvmod
from sgmc.models import LinearRegression, LogisticRegression

pytestmark = pytest.mark.skipif(native(backends.get_backend("numpy").xp, "glm_centre_terms") is None,
                                reason="the one-pass set-up needs Numba (and SGMC_NATIVE not 0)")


def _problem(kind, n, d, seed=0):
    r = np.random.default_rng(seed)
    X = r.normal(size=(n, d))
    theta = r.normal(size=d) / np.sqrt(d)
    if kind == "logistic":
        y = (r.random(n) < 1.0 / (1.0 + np.exp(-X @ theta))).astype(float)
        return LogisticRegression(X, y), X, y
    y = X @ theta + r.normal(size=n)
    return LinearRegression(X, y, noise_var=0.7), X, y


def _numpy_terms(kind, X, y, centre):
    """Independent reference: residuals at the centre and the gradient sum, by NumPy formulas."""
    eta = X @ centre
    if kind == "logistic":
        s = 1.0 / (1.0 + np.exp(-eta))
        return X.T @ (y - s), -s
    return X.T @ ((y - eta) / 0.7), -eta / 0.7


# sizes: rows not a multiple of the block (128) or of 4; dimensions either side of TERMS_ROW_DIM
@pytest.mark.parametrize("kind", ["logistic", "linear"])
@pytest.mark.parametrize("n,d", [(1, 3), (131, 1), (1001, 7), (777, 40)])
def test_terms_match_numpy_and_the_twin(kind, n, d):
    model, X, y = _problem(kind, n, d)
    centre = np.random.default_rng(1).normal(size=d) * 0.3
    grad, table = _numba_fused.glm_centre_terms(kind, X, y, centre, model._native_param or 1.0)
    ref_grad, ref_table = _numpy_terms(kind, X, y, centre)
    scale = np.max(np.abs(ref_grad)) + 1.0
    assert grad.shape == (1, d) and table.shape == (n,)
    np.testing.assert_allclose(grad[0], ref_grad, rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(table, ref_table, rtol=1e-13, atol=1e-15)
    old = _numba.set_enabled(False)
    try:
        twin = model.grad_log_lik_sum(centre[None, :])
    finally:
        _numba.set_enabled(old)
    np.testing.assert_allclose(grad, twin, rtol=0, atol=1e-12 * scale)


def test_declines_what_it_does_not_take():
    model, X, y = _problem("logistic", 50, 3)
    c = np.zeros(3)
    assert _numba_fused.glm_centre_terms("logistic", X.astype(np.float32), y, c, 1.0) is NotImplemented
    assert _numba_fused.glm_centre_terms("poisson", X, y, c, 1.0) is NotImplemented
    assert _numba_fused.glm_centre_terms("logistic", np.asfortranarray(X), y, c, 1.0) is NotImplemented
    old = _numba.set_enabled(False)
    try:
        assert _numba_fused.glm_centre_terms("logistic", X, y, c, 1.0) is NotImplemented
    finally:
        _numba.set_enabled(old)


def test_init_keeps_the_table_for_its_own_gradient_only():
    model, X, y = _problem("logistic", 300, 4)
    a, b = np.full(4, 0.1), np.full(4, -0.2)
    st_a = ControlVariate(model, 20, centre=a).init(None, np.zeros((1, 4)))
    table = cvmod.centre_residuals(st_a)
    np.testing.assert_allclose(table, _numpy_terms("logistic", X, y, a)[1], rtol=1e-13)
    st_b = ControlVariate(model, 20, centre=b).init(None, np.zeros((1, 4)))
    assert cvmod.centre_residuals(st_a) is None  # replaced by the later init's table
    np.testing.assert_allclose(cvmod.centre_residuals(st_b), _numpy_terms("logistic", X, y, b)[1], rtol=1e-13)
    del st_b
    assert not cvmod._TABLE  # dropped with its gradient array
    # a float32 model has no one-pass set-up: the model's own gradient, and no table
    m32 = LogisticRegression(X.astype(np.float32), y.astype(np.float32))
    st = ControlVariate(m32, 20, centre=np.zeros(4, dtype=np.float32)).init(None, np.zeros((1, 4), np.float32))
    assert st.centre_grad.dtype == np.float32 and cvmod.centre_residuals(st) is None


@pytest.mark.parametrize("kind", ["logistic", "linear"])
def test_fused_run_reads_the_init_table_not_a_second_pass(kind, monkeypatch):
    model, X, y = _problem(kind, 2000, 5)
    centre = np.full(5, 0.05)

    def run():
        est = ControlVariate(model, 50, centre=centre)
        return sgmc.sample(model, "sgld", est, step_size=1e-4, n_iter=60, chains=2, rng=3, progress=False).draws

    # the reference: the blocks compute the table themselves (no table from init)
    monkeypatch.setattr(cvmod, "_centre_terms", lambda m, c: None)
    ref = run()
    monkeypatch.undo()
    from sgmc.backends import _numba_fused_kernels as kern

    def second_pass(*args):
        raise AssertionError("the fused block made a second pass over the data for the centre's residuals")

    monkeypatch.setattr(kern, "centre_resid", second_pass)
    np.testing.assert_allclose(run(), ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ["logistic", "linear"])
@pytest.mark.parametrize("batch", [1, 63, 64, 65, 200])
@pytest.mark.parametrize("d", [3, 40])
def test_compiled_difference_loop_equals_the_twin_across_blocks(kind, batch, d, monkeypatch):
    # the loop takes DIFF_BLOCK rows at a time: batches below, at and across a block boundary
    monkeypatch.setattr(_numba, "GLM_MIN_DIM", 0)
    model, X, y = _problem(kind, 500, d)
    r = np.random.default_rng(4)
    theta = 2.0 * r.normal(size=(3, d)) / np.sqrt(d)
    centre = theta + 0.2 * r.normal(size=theta.shape)
    idx = r.integers(0, 500, (3, batch))
    for w in (None, r.random((3, batch))):
        fast = _numba.glm_grad_log_lik_diff_sum(kind, X, y, theta, centre, idx, w, model._native_param)
        assert fast is not NotImplemented
        twin = model._grad_diff_sum(theta, centre, idx, w)
        np.testing.assert_allclose(fast, twin, rtol=1e-12, atol=1e-12 * (np.abs(twin).max() + 1.0))


def test_prepare_takes_the_centre_gradient_once_and_counts_it_once(monkeypatch):
    model, X, y = _problem("logistic", 3000, 4)
    calls = []
    real = cvmod._centre_terms

    def counting(m, c):
        calls.append(1)
        return real(m, c)

    def run():
        est = ControlVariate(model, 60, opt_steps=200)
        return sgmc.sample(model, "sgld", est, step_size=1e-4, n_iter=30, chains=2, group_size=1, rng=5,
                           progress=False)

    monkeypatch.setattr(cvmod, "_centre_terms", counting)
    tr = run()
    assert len(calls) == 1  # the check's gradient, both chain groups' init and the blocks' table: one pass
    monkeypatch.setattr(cvmod, "_centre_terms", lambda m, c: None)  # no one-pass native: the model's gradient
    at_centre = []
    real_sum = type(model).grad_log_lik_sum

    def counted_sum(self, theta, idx=None, weights=None):
        if idx is None:  # a full-data gradient (minibatches pass their indices): the search's, then the centre's
            at_centre.append(np.array(theta, copy=True))
        return real_sum(self, theta, idx, weights)

    monkeypatch.setattr(type(model), "grad_log_lik_sum", counted_sum)
    ref = run()
    # the same centre and draws; the check's gradient serves init too, so the same count of passes
    np.testing.assert_allclose(tr.draws, ref.draws, rtol=0, atol=1e-9)
    assert sum(np.array_equal(t, at_centre[-1]) for t in at_centre) == 1  # the centre's gradient: once
    assert float(tr.info["setup_data_passes"]) == pytest.approx(float(ref.info["setup_data_passes"]), abs=1e-12)


def test_init_computes_the_centre_gradient_once_per_centre_value():
    strict = pytest.importorskip("array_api_strict")   # no native centre terms: the model's own pass
    r = np.random.default_rng(4)
    X, y = r.normal(size=(300, 3)), (r.random(300) < 0.5) * 1.0
    model = LogisticRegression(strict.asarray(X), strict.asarray(y))
    calls = []
    real = model.grad_log_lik_sum
    model.grad_log_lik_sum = lambda *a, **k: calls.append(1) or real(*a, **k)
    est = ControlVariate(model, 20, centre=strict.asarray([0.1, -0.2, 0.3]))
    rng = backends.default_rng(0, backend=strict)
    first = est.init(rng, strict.zeros((2, 3)))
    again = est.init(rng, strict.zeros((2, 3)))
    assert len(calls) == 1 and again.centre_grad is first.centre_grad
    want = np.asarray(real(strict.reshape(strict.asarray([0.1, -0.2, 0.3]), (1, 3))))
    np.testing.assert_allclose(np.asarray(again.centre_grad), want, rtol=1e-13)
    moved = ControlVariate(model, 20, centre=strict.asarray([0.0, 0.0, 0.0]))   # another estimator
    moved.init(rng, strict.zeros((2, 3)))
    est.centre = strict.asarray([0.0, 0.5, 0.0])                                   # a new centre value
    fresh = est.init(rng, strict.zeros((2, 3)))
    assert len(calls) == 3
    np.testing.assert_allclose(np.asarray(fresh.centre_grad),
                               np.asarray(real(strict.reshape(est.centre, (1, 3)))), rtol=1e-13)
