"""Named parameters: models carry them, traces keep them, and every output (summary, ArviZ, files) uses them."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

import sgmc
from sgmc._param_names import block_names, check_param_names
from sgmc.models import (
    BPMF,
    BayesianNeuralNetwork,
    DirichletCategorical,
    Gaussian,
    GaussianTarget,
    LinearRegression,
    LogisticRegression,
    Model,
)

pd = pytest.importorskip("pandas")

_r = np.random.default_rng(3)
X = _r.normal(size=(400, 3))
Y = X @ np.array([1.0, -2.0, 0.5]) + _r.normal(size=400)
COLUMNS = ["age", "dose", "weight"]
RUN = {"step_size": 1e-3, "batch_size": 40, "n_iter": 200, "chains": 2, "rng": 5, "progress": False}


def _named_model():
    return LinearRegression(pd.DataFrame(X, columns=COLUMNS), Y)


# -- models ------------------------------------------------------------------------------------------
def test_glm_names_come_from_data_frame_columns_or_default_to_beta():
    assert _named_model().param_names == tuple(COLUMNS)
    assert LinearRegression(X, Y).param_names == ("beta[0]", "beta[1]", "beta[2]")
    assert LinearRegression(X, Y, param_names=["a", "b", "c"]).param_names == ("a", "b", "c")
    frame = pd.DataFrame(X, columns=COLUMNS)
    ones = (Y > 0).astype(float)
    assert LogisticRegression(frame, ones).param_names == tuple(COLUMNS)
    # explicit names win over the columns; the data are the same either way
    model = LogisticRegression(frame, ones, param_names=["x", "y", "z"])
    assert model.param_names == ("x", "y", "z")
    np.testing.assert_array_equal(model.X, X)


def test_csv_header_names_the_glm_coefficients(tmp_path):
    from sgmc.datasets import load_csv

    path = tmp_path / "mine.csv"
    with open(path, "w") as fh:
        fh.write("age,dose,outcome\n")
        for row in np.c_[X[:, :2], Y]:
            fh.write(",".join(f"{v:.6f}" for v in row) + "\n")
    table = load_csv(path, target="outcome", intercept=True)
    model = LinearRegression(table.X, table.y, param_names=table.feature_names)
    assert model.param_names == ("intercept", "age", "dose")


@pytest.mark.parametrize("names", [["a", "b"], ["a", "b", "c", "d"], []])
def test_a_wrong_number_of_names_is_an_error_naming_param_names_and_the_length(names):
    with pytest.raises(ValueError, match=r"`param_names` must have 3 entries.*got " + str(len(names))):
        LinearRegression(X, Y, param_names=names)
    with pytest.raises(ValueError, match=r"`param_names` must have 3 entries"):
        sgmc.Trace(draws=np.zeros((1, 5, 3)), param_names=names)


def test_bad_names_are_errors_naming_param_names():
    with pytest.raises(ValueError, match=r"`param_names` must hold distinct names; 'a'"):
        LinearRegression(X, Y, param_names=["a", "b", "a"])
    with pytest.raises(TypeError, match=r"`param_names` must be a sequence of 3 strings"):
        LinearRegression(X, Y, param_names="abc")
    with pytest.raises(TypeError, match=r"`param_names` must hold strings"):
        LinearRegression(X, Y, param_names=["a", 1.5, "c"])
    with pytest.raises(ValueError, match=r"`param_names` must not hold empty names"):
        check_param_names(["a", ""], 2)


def test_a_user_model_with_the_wrong_number_of_names_fails_before_sampling():
    class Mine(Model):
        param_names = ("only_one",)

        def __init__(self):
            super().__init__(0, 2, np, np.float64)

        def log_prior(self, theta):
            return -0.5 * np.sum(theta**2, axis=-1)

        def grad_log_prior(self, theta):
            return -theta

    with pytest.raises(ValueError, match=r"`model.param_names` must have 2 entries.*got 1"):
        sgmc.sample(Mine(), "sgld", "full", step_size=0.1, n_iter=10, progress=False)


def test_bnn_names_follow_the_parameter_layout():
    model = BayesianNeuralNetwork(_r.random((30, 3)), _r.integers(0, 4, 30), n_hidden=2)
    names = model.param_names
    assert len(names) == model.dim == len(set(names))
    theta = np.arange(model.dim, dtype=float)[None, :]
    B, b, A, a, s = (np.asarray(v)[0] for v in model.unpack(theta))
    # each name's coordinate is the block entry it names
    assert theta[0, names.index("B[2,1]")] == B[2, 1]
    assert theta[0, names.index("b[1]")] == b[1]
    assert theta[0, names.index("A[1,3]")] == A[1, 3]
    assert theta[0, names.index("a[2]")] == a[2]
    assert [theta[0, names.index(n)] for n in ("log_lambda_B", "log_lambda_b", "log_lambda_A", "log_lambda_a")] == list(s)


def test_bpmf_names_follow_the_parameter_layout():
    users, items = np.array([0, 1, 2, 2]), np.array([0, 1, 1, 0])
    model = BPMF(users, items, np.array([4.0, 3.0, 5.0, 1.0]), d=2)
    names = model.param_names
    assert len(names) == model.dim == len(set(names))
    theta = np.arange(model.dim, dtype=float)[None, :]
    blocks = {k: np.asarray(v)[0] for k, v in model.unpack(theta).items()}
    assert theta[0, names.index("U[2,1]")] == blocks["U"][2, 1]
    assert theta[0, names.index("V[1,0]")] == blocks["V"][1, 0]
    for key in ("mu_U", "mu_V", "log_lambda_U", "log_lambda_V"):
        assert theta[0, names.index(f"{key}[1]")] == blocks[key][1]


def test_other_models_have_one_distinct_name_per_coordinate():
    models = [Gaussian(X), GaussianTarget.review_example(), DirichletCategorical(np.eye(3)[[0, 1, 2, 0]]),
              GaussianTarget(np.zeros(2), np.eye(2), param_names=["mu", "tau"])]
    for model in models:
        assert len(model.param_names) == model.dim == len(set(model.param_names))
    assert models[2].param_names == ("omega[0]", "omega[1]", "omega[2]")
    assert models[3].param_names == ("mu", "tau")


def test_state_space_models_keep_their_names():
    from sgmc.ssm import AR, StochasticVolatility

    y = _r.normal(size=50)
    assert AR(y, order=2).param_names == ("c", "a[1]", "a[2]", "log_sigma")
    assert StochasticVolatility(y).param_names == ("atanh_phi", "psi_sigma", "psi_tau")
    trace = sgmc.Trace(draws=np.zeros((1, 4, 3)), param_names=StochasticVolatility(y).param_names)
    assert trace.param_names == ("atanh_phi", "psi_sigma", "psi_tau")


def test_block_names_are_row_major():
    assert block_names([("W", (2, 3))])[3] == "W[1,0]"
    assert block_names([("s", ()), ("v", (2,))]) == ("s", "v[0]", "v[1]")


# -- traces ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trace():
    return sgmc.sample(_named_model(), "sgld", **RUN)


def test_trace_keeps_the_model_names_and_summary_uses_them(trace):
    assert trace.param_names == tuple(COLUMNS)
    table = trace.summary()
    assert table.index == COLUMNS
    row = table.row("dose")
    np.testing.assert_allclose(row["mean"], np.mean(trace.draws[:, :, 1]))
    assert str(table).splitlines()[2].startswith("dose")
    assert trace.index("weight") == 2 and trace.index(1) == 1
    with pytest.raises(ValueError, match="`param` 'height' is not a parameter"):
        trace.index("height")
    # without names a trace calls its coordinates theta[j]
    assert sgmc.Trace(draws=np.zeros((1, 5, 2))).param_names == ("theta[0]", "theta[1]")


def test_to_arviz_uses_the_names_as_coordinates_or_variables(trace):
    pytest.importorskip("arviz")
    idata = trace.to_arviz()
    coord = idata.posterior["theta"].coords["theta_dim"].values.tolist()
    assert coord == COLUMNS
    np.testing.assert_array_equal(idata.posterior["theta"].sel(theta_dim="dose").values, trace.draws[:, :, 1])
    split = trace.to_arviz(split=True)
    assert sorted(split.posterior.data_vars) == sorted(COLUMNS)
    np.testing.assert_array_equal(split.posterior["weight"].values, trace.draws[:, :, 2])


def test_names_survive_save_and_load(tmp_path, trace):
    path = tmp_path / "t.npz"
    trace.save(str(path))
    again = sgmc.Trace.load(str(path))
    assert again.param_names == tuple(COLUMNS)
    assert again.summary().index == COLUMNS
    # the names are text in the archive, readable without pickle
    with np.load(path, allow_pickle=False) as data:
        assert data["param_names"].tolist() == COLUMNS


def test_a_trace_file_without_names_loads_with_default_names(tmp_path, trace):
    path = tmp_path / "old.npz"
    np.savez(path, draws=np.asarray(trace.draws), iterations=np.asarray(trace.iterations), __meta__=np.asarray("{}"))
    # a file without checksums (as written before they were kept) is read only when asked to
    assert sgmc.Trace.load(str(path), verify=False).param_names == ("theta[0]", "theta[1]", "theta[2]")


def test_a_trace_file_with_the_wrong_names_is_refused_naming_the_file(tmp_path, trace):
    path = tmp_path / "bad.npz"
    np.savez(path, draws=np.asarray(trace.draws), iterations=np.asarray(trace.iterations),
             param_names=np.asarray(["a", "b"]), __meta__=np.asarray("{}"))
    with pytest.raises(ValueError, match="bad.npz.*param_names must be 3 names"):
        sgmc.Trace.load(str(path), verify=False)


def _ctrl_c_at(iteration):
    def callback(k, state):
        if k == iteration:
            os.kill(os.getpid(), signal.SIGINT)

    return callback


def test_names_survive_checkpoint_and_resume(tmp_path):
    ckpt = tmp_path / "run.ckpt"
    with pytest.warns(sgmc.SamplingInterruptedWarning):
        # the exact estimator: what is checked here is the names, not how estimators are stored
        part = sgmc.sample(_named_model(), "sgld", "full", checkpoint=str(ckpt), callback=_ctrl_c_at(60), **RUN)
    assert part.param_names == tuple(COLUMNS)
    resumed = sgmc.resume(str(ckpt), progress=False)
    assert resumed.param_names == tuple(COLUMNS)
    assert resumed.info["iterations_done"] == RUN["n_iter"]


class _UserGaussian(Model):
    """A model sgmc cannot store in a checkpoint (a class outside the package), with its own names."""

    def __init__(self, names):
        super().__init__(0, 2, np, np.float64)
        self.param_names = tuple(names)

    def log_prior(self, theta):
        return -0.5 * np.sum(theta**2, axis=-1)

    def grad_log_prior(self, theta):
        return -theta


def test_a_checkpoint_records_the_names_of_a_model_it_cannot_store(tmp_path):
    ckpt = tmp_path / "user.ckpt"
    args = {"step_size": 0.1, "n_iter": 100, "chains": 2, "rng": 1, "progress": False}
    with pytest.warns(sgmc.SamplingInterruptedWarning):
        sgmc.sample(_UserGaussian(["mu", "tau"]), "sgld", "full", checkpoint=str(ckpt), callback=_ctrl_c_at(30),
                    **args)
    with pytest.raises(ValueError, match=r"`model` does not match the checkpoint.*param_names are \['x', 'y'\]"):
        sgmc.resume(str(ckpt), model=_UserGaussian(["x", "y"]), progress=False)
    resumed = sgmc.resume(str(ckpt), model=_UserGaussian(["mu", "tau"]), progress=False)
    assert resumed.param_names == ("mu", "tau")


# -- the command -------------------------------------------------------------------------------------
def _cli(argv):
    import contextlib
    import io

    from sgmc.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _coefficients(stdout: str, label: str) -> tuple:
    lines = stdout.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"posterior of the coefficients, {label} "))
    head = lines[start + 1].split()
    rows = {}
    for ln in lines[start + 2:]:
        if not ln.strip():
            break
        cells = ln.split()
        rows[cells[0]] = dict(zip(head[1:], (float(c) for c in cells[1:])))
    return head, rows


def test_sgmc_run_with_data_prints_the_coefficients_by_name(tmp_path):
    az = pytest.importorskip("arviz")
    from sgmc.diagnostics import ess, rhat

    path = tmp_path / "mine.csv"
    with open(path, "w") as fh:
        fh.write("age,dose,weight,outcome\n")
        for row in np.c_[X, Y]:
            fh.write(",".join(f"{v:.6f}" for v in row) + "\n")
    out_file = tmp_path / "fit.npz"
    code, out, _ = _cli(["run", "--quick", "--no-progress", "--data", str(path), "--model", "linear", "--intercept",
                         "--chains", "2", "--sampler", "sgld", "--estimator", "cv", "--output", str(out_file)])
    assert code == 0
    head, rows = _coefficients(out, "SGLD-CV")
    assert head == ["coefficient", "mean", "sd", "hdi89_lb", "hdi89_ub", "ess_bulk", "ess_tail", "r_hat"]
    assert list(rows) == ["intercept", "age", "dose", "weight"]
    trace = sgmc.Trace.load(str(out_file))
    assert trace.param_names == ("intercept", "age", "dose", "weight")
    draws = np.asarray(trace.draws)
    for j, name in enumerate(trace.param_names):
        row = rows[name]
        x = draws[:, :, j]
        lo, hi = az.hdi(x.reshape(-1), hdi_prob=0.89)  # arviz, an independent oracle, on the pooled draws
        assert row["mean"] == pytest.approx(x.mean(), rel=1e-3, abs=1e-4)
        assert row["sd"] == pytest.approx(x.std(ddof=1), rel=1e-3)
        assert row["hdi89_lb"] == pytest.approx(lo, rel=1e-3, abs=1e-4)
        assert row["hdi89_ub"] == pytest.approx(hi, rel=1e-3, abs=1e-4)
        assert row["ess_bulk"] == pytest.approx(float(ess(x[:, :, None], method="bulk")[0]), abs=0.51)
        assert row["r_hat"] == pytest.approx(float(rhat(x[:, :, None])[0]), abs=6e-4)
    # the fitted coefficients agree with the conjugate posterior of all the rows (the command holds out 20%)
    mean_exact = np.asarray(LinearRegression(np.c_[np.ones(len(X)), X], Y).posterior()[0])
    np.testing.assert_allclose([rows[n]["mean"] for n in rows], mean_exact, atol=0.1)


def test_sgmc_run_with_data_names_a_repeated_column(tmp_path):
    path = tmp_path / "twice.csv"
    with open(path, "w") as fh:
        fh.write("a,a,y\n" + "".join(f"{r[0]:.4f},{r[1]:.4f},{r[2]:.4f}\n" for r in np.c_[X[:40, :2], Y[:40]]))
    code, _, err = _cli(["run", "--quick", "--no-progress", "--data", str(path), "--model", "linear"])
    assert code == 2
    assert "has two columns named 'a'" in err
