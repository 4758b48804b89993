"""Tests for sgmc.datasets: the review's simulated regression data and CSV loading."""

from __future__ import annotations

import numpy as np
import pytest

from sgmc.datasets import (
    EIGENVALUE_FLOOR,
    covariate_covariance,
    linear_regression_data,
    load_csv,
    logistic_regression_data,
)


def test_logistic_shapes_and_dtypes():
    data = logistic_regression_data(n=2000, dim=7, n_test=300, rng=3)
    assert data.X.shape == (2000, 7) and data.y.shape == (2000,)
    assert data.X_test.shape == (300, 7) and data.y_test.shape == (300,)
    assert data.theta_true.shape == (7,) and data.cov_x.shape == (7, 7)
    for a in data:
        assert a.dtype == np.float64
        assert np.all(np.isfinite(a))
    assert set(np.unique(data.y)) <= {0.0, 1.0}
    assert set(np.unique(data.y_test)) <= {0.0, 1.0}


def test_logistic_deterministic_by_seed():
    a = logistic_regression_data(n=500, dim=4, n_test=50, rng=11)
    b = logistic_regression_data(n=500, dim=4, n_test=50, rng=11)
    c = logistic_regression_data(n=500, dim=4, n_test=50, rng=12)
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
    assert not np.array_equal(a.X, c.X)
    # a numpy Generator is accepted as well
    d = logistic_regression_data(n=10, dim=2, n_test=5, rng=np.random.default_rng(0))
    assert d.X.shape == (10, 2)


def test_covariance_structure_and_spd():
    for seed in range(20):
        S = covariate_covariance(10, rho=0.4, rng=seed)
        np.testing.assert_allclose(S, S.T, atol=0)
        np.testing.assert_allclose(np.diag(S), 1.0)
        assert np.linalg.eigvalsh(S)[0] > 0
        # below the diagonal |S_ij| = |u|^|i-j| <= rho^|i-j| (no repair is needed at rho = 0.4)
        i, j = np.indices(S.shape)
        assert np.all(np.abs(S) <= 0.4 ** np.abs(i - j) + 1e-12)
        np.linalg.cholesky(S)


def test_covariance_repair_for_large_rho():
    # At rho = 0.9 the raw symmetric matrix is almost never positive definite (checked over seeds);
    # the repaired one is, and it keeps a unit diagonal.
    for seed in range(10):
        S = covariate_covariance(10, rho=0.9, rng=seed)
        np.testing.assert_allclose(np.diag(S), 1.0)
        np.testing.assert_allclose(S, S.T)
        assert np.linalg.eigvalsh(S)[0] > EIGENVALUE_FLOOR / 10
        np.linalg.cholesky(S)


def test_covariance_rejects_bad_rho():
    with pytest.raises(ValueError, match="rho"):
        covariate_covariance(3, rho=1.5)


def test_empirical_covariance_and_label_rate():
    data = logistic_regression_data(n=100_000, dim=10, n_test=10_000, rng=0)
    emp = np.cov(data.X, rowvar=False)
    # Monte Carlo error of a covariance entry with N = 1e5 is about sqrt(2 / N) ~ 0.0045
    np.testing.assert_allclose(emp, data.cov_x, atol=0.03)
    # coefficient scales are 0.1, 1 or 10, so |theta_j| < 50 with overwhelming probability
    assert np.all(np.abs(data.theta_true) < 50)
    # labels are neither degenerate nor far from the model's own mean probability
    eta = data.X @ data.theta_true
    p_mean = np.mean(0.5 * (1 + np.tanh(0.5 * eta)))
    assert 0.05 < data.y.mean() < 0.95
    assert abs(data.y.mean() - p_mean) < 0.01
    assert abs(data.y_test.mean() - p_mean) < 0.03


def test_scales_drawn_from_review_set():
    # with many coefficients the magnitudes span the three scales
    data = logistic_regression_data(n=10, dim=300, n_test=0, rng=1)
    mags = np.abs(data.theta_true)
    assert np.sum(mags > 3) > 30  # s = 10 contributes most of these
    assert np.sum(mags < 0.05) > 20  # s = 0.1 contributes most of these
    assert data.X_test.shape == (0, 300)


def test_linear_regression_data_shares_covariates():
    lin = linear_regression_data(n=3000, dim=3, n_test=100, rng=5)
    log = logistic_regression_data(n=3000, dim=3, n_test=100, rng=5)
    np.testing.assert_array_equal(lin.X, log.X)
    np.testing.assert_array_equal(lin.theta_true, log.theta_true)
    resid = lin.y - lin.X @ lin.theta_true
    assert abs(resid.std() - 1.0) < 0.05
    with pytest.raises(ValueError, match="noise_sd"):
        linear_regression_data(n=10, noise_sd=0.0)


@pytest.mark.parametrize("bad", [{"n": 0}, {"dim": 0}, {"n_test": -1}])
def test_size_validation(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        logistic_regression_data(**{"n": 10, "dim": 2, "n_test": 2, **bad})


# -- CSV --------------------------------------------------------------------------------------------


def _write(tmp_path, text, name="data.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_csv_header_target_by_name_and_intercept(tmp_path):
    path = _write(tmp_path, "a,b,label,c\n1,2,0,3\n4,5,1,6\n\n7,8,1,9\n")
    data = load_csv(path, target="label", intercept=True)
    assert data.feature_names == ["intercept", "a", "b", "c"]
    assert data.target_name == "label"
    np.testing.assert_array_equal(data.y, [0.0, 1.0, 1.0])
    np.testing.assert_array_equal(data.X, [[1, 1, 2, 3], [1, 4, 5, 6], [1, 7, 8, 9]])


def test_csv_without_header_target_by_index(tmp_path):
    path = _write(tmp_path, "1.5,2,0\n-3e-1,4,1\n")
    data = load_csv(path, target=0)
    assert data.feature_names == ["x1", "x2"]
    np.testing.assert_allclose(data.y, [1.5, -0.3])
    np.testing.assert_array_equal(data.X, [[2, 0], [4, 1]])
    last = load_csv(path)  # default target: the last column
    np.testing.assert_array_equal(last.y, [0, 1])
    assert load_csv(path, target="1").target_name == "x1"


def test_csv_explicit_header_flag(tmp_path):
    path = _write(tmp_path, "1,2,3\n4,5,6\n")
    data = load_csv(path, header=True)
    assert data.feature_names == ["1", "2"] and data.X.shape == (1, 2)


def test_csv_semicolon_delimiter(tmp_path):
    path = _write(tmp_path, "x;y\n1;0\n2;1\n")
    data = load_csv(path, target="y", delimiter=";")
    np.testing.assert_array_equal(data.X[:, 0], [1, 2])


@pytest.mark.parametrize(
    ("text", "kwargs", "pattern"),
    [
        ("a,b\n1,2\n3,oops\n", {}, r"line 3, column 'b' is not a number: 'oops'"),
        ("a,b\n1,\n", {}, r"line 2, column 'b' is empty"),
        ("a,b\n1,2\n3,4,5\n", {}, r"line 3 has 3 fields; expected 2"),
        ("a,b\n1,inf\n", {}, r"line 2, column 'b' is not finite"),
        ("a,b\n1,2\n", {"target": "z"}, r"`target`='z' is not a column .*\['a', 'b'\]"),
        ("1,2\n3,4\n", {"target": "z"}, r"no header row"),
        ("a,b\n1,2\n", {"target": 5}, r"`target` index must be in \[-2, 1\]"),
        ("a,b\n", {}, r"has a header but no data rows"),
        ("", {}, r"is empty"),
        ("a\n1\n", {}, r"at least 2 columns"),
    ],
)
def test_csv_errors_name_line_and_column(tmp_path, text, kwargs, pattern):
    path = _write(tmp_path, text)
    with pytest.raises(ValueError, match=pattern):
        load_csv(path, **kwargs)


def test_csv_missing_file(tmp_path):
    with pytest.raises(ValueError, match="cannot read CSV file"):
        load_csv(tmp_path / "nope.csv")


def test_csv_bad_target_type(tmp_path):
    path = _write(tmp_path, "a,b\n1,2\n")
    with pytest.raises(TypeError, match="`target`"):
        load_csv(path, target=1.5)
