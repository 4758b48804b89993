"""``sgmc run`` runs on one BLAS thread (threadpoolctl) unless the environment chooses a count."""

from __future__ import annotations

import pytest

from sgmc import cli
from sgmc.cli import run_command

threadpoolctl = pytest.importorskip("threadpoolctl")


def _blas_threads():
    return sorted({p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"})


@pytest.fixture
def clean_env(monkeypatch):
    for var in cli.BLAS_THREAD_VARS:
        monkeypatch.delenv(var, raising=False)
    if not _blas_threads():
        pytest.skip("no BLAS pool that threadpoolctl can see")
    return monkeypatch


def test_the_run_gets_one_blas_thread_and_gives_the_pools_back(clean_env):
    with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
        before = _blas_threads()
        with run_command._blas_threads():
            assert _blas_threads() == [1]
        assert _blas_threads() == before


def test_sgmc_blas_threads_sets_the_count(clean_env):
    clean_env.setenv("SGMC_BLAS_THREADS", "2")
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
        with run_command._blas_threads():
            assert _blas_threads() == [2]


def test_a_blas_variable_of_the_user_is_respected(clean_env):
    clean_env.setenv("OPENBLAS_NUM_THREADS", "2")
    with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
        with run_command._blas_threads():
            assert _blas_threads() == [2]


def test_a_bad_thread_count_is_named(clean_env, capsys):
    clean_env.setenv("SGMC_BLAS_THREADS", "many")
    with pytest.raises(ValueError, match="SGMC_BLAS_THREADS must be a positive integer; got 'many'"):
        run_command._blas_threads()
    assert cli.main(["run", "--quick", "--no-progress"]) == 2
    assert "SGMC_BLAS_THREADS" in capsys.readouterr().err


def test_the_run_command_itself_runs_on_one_blas_thread(clean_env, monkeypatch):
    # the command as typed (main -> the run command): the body sees one BLAS thread, the caller's pools come back
    seen = []
    monkeypatch.setattr(run_command, "_run_command", lambda args: seen.append(_blas_threads()) or 0)
    with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
        before = _blas_threads()
        assert cli.main(["run", "--quick", "--no-progress"]) == 0
        assert _blas_threads() == before
    assert seen == [[1]]


def test_threadpoolctl_is_a_core_dependency():
    # the README's plain `pip install .` must bring the thread limit with it
    import pathlib
    import tomllib

    pyproject = pathlib.Path(__file__).resolve().parents[1] / "pyproject.toml"
    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    assert any(d.replace(" ", "").startswith("threadpoolctl") for d in deps), deps
