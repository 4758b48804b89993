"""``sgmc run`` runs on one BLAS thread (threadpoolctl) unless the environment chooses a count."""

from __future__ import annotations

import pytest

from sgmc import cli

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
        with cli._blas_threads():
            assert _blas_threads() == [1]
        assert _blas_threads() == before


def test_sgmc_blas_threads_sets_the_count(clean_env):
    clean_env.setenv("SGMC_BLAS_THREADS", "2")
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
        with cli._blas_threads():
            assert _blas_threads() == [2]


def test_a_blas_variable_of_the_user_is_respected(clean_env):
    clean_env.setenv("OPENBLAS_NUM_THREADS", "2")
    with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
        with cli._blas_threads():
            assert _blas_threads() == [2]


def test_a_bad_thread_count_is_named(clean_env, capsys):
    clean_env.setenv("SGMC_BLAS_THREADS", "many")
    with pytest.raises(ValueError, match="SGMC_BLAS_THREADS must be a positive integer; got 'many'"):
        cli._blas_threads()
    assert cli.main(["run", "--quick", "--no-progress"]) == 2
    assert "SGMC_BLAS_THREADS" in capsys.readouterr().err
