"""Size arguments whose allocation cannot fit in memory are refused at once, with an error naming them.

``LGSSM(state_dim=10**12)`` and ``stein_thin(m=10**12)`` used to hang (Python tables of n^2 entries,
a loop of m steps). Every size argument that decides an allocation is now checked against this
machine's memory (``sgmc._validation.check_alloc``; ``SGMC_MAX_BYTES`` sets another limit) before
anything is allocated. Each refusal must come within a deadline, and a size that fits must still work.
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import pytest

import sgmc
from sgmc import _validation
from sgmc.datasets import classification_data, covariate_covariance, linear_regression_data, logistic_regression_data
from sgmc.diagnostics import stein_thin
from sgmc.models import LogisticRegression
from sgmc.ssm import LGSSM, GaussianHMM
from sgmc.ssm.ar import AR
from sgmc.ssm.particle import ScalarLGSSMKernel, particle_filter

from _deadline import deadline

HUGE = 10**12
Y = np.random.default_rng(0).standard_normal((40, 1))
_KERNEL = ScalarLGSSMKernel(np.array([0.9]), np.array([0.5]), np.array([1.0]))


def _rng():
    return sgmc.backends.default_rng(0)


CASES = {
    "LGSSM state_dim": (lambda v: LGSSM(Y, state_dim=v), "state_dim"),
    "GaussianHMM n_states": (lambda v: GaussianHMM(Y, n_states=v), "n_states"),
    "stein_thin m": (lambda v: stein_thin(Y, -Y, v), "m"),
    "AR.simulate T": (lambda v: AR(Y[:, 0], 2).simulate(_rng(), v, np.zeros(4)), "T"),
    "AR.simulate burn_in": (lambda v: AR(Y[:, 0], 2).simulate(_rng(), 10, np.zeros(4), burn_in=v), "burn_in"),
    "GaussianHMM.simulate T": (lambda v: GaussianHMM(Y, 2).simulate(_rng(), v, np.ones(GaussianHMM(Y, 2).dim)), "T"),
    "LGSSM.simulate T": (lambda v: LGSSM(Y).simulate(_rng(), v, np.full(LGSSM(Y).dim, 0.5)), "T"),
    "LGSSM.simulate_scalar T": (lambda v: LGSSM.simulate_scalar(_rng(), v, [0.5, 1.0, 1.0]), "T"),
    "logistic_regression_data n": (lambda v: logistic_regression_data(n=v, dim=2), "n"),
    "linear_regression_data dim": (lambda v: linear_regression_data(n=20, dim=v), "dim"),
    "classification_data n_test": (lambda v: classification_data(n=20, dim=2, n_test=v), "n_test"),
    "covariate_covariance dim": (lambda v: covariate_covariance(v), "dim"),
    "sample n_iter": (lambda v: _sample(n_iter=v), "n_iter"),
    "sample chains": (lambda v: _sample(n_iter=10, chains=v), "chains"),
    "particle_filter n_particles": (lambda v: particle_filter(0, _KERNEL, Y[None, :, :], v), "n_particles"),
}


def _sample(**kw):
    model = LogisticRegression(Y @ np.ones((1, 2)), (Y[:, 0] > 0).astype(np.int64))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a 3-iteration run is not expected to mix
        return sgmc.sample(model, "sgld", step_size=1e-3, burn_in=0, rng=0, progress=False, **kw)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_huge_size_is_refused_at_once_naming_the_argument(case, monkeypatch):
    monkeypatch.delenv("SGMC_MAX_BYTES", raising=False)
    call, name = CASES[case]
    start = time.perf_counter()
    with deadline(20, case), pytest.raises(ValueError, match=rf"`{name}`={HUGE} is too large: .* more than this machine's memory"):
        call(HUGE)
    assert time.perf_counter() - start < 5.0


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_size_that_fits_still_works(case):
    call, _ = CASES[case]
    call(3)


def test_the_limit_follows_sgmc_max_bytes(monkeypatch):
    monkeypatch.setenv("SGMC_MAX_BYTES", str(10**6))
    assert _validation.memory_bytes() == 10**6
    with pytest.raises(ValueError, match=r"`state_dim`=30 is too large: .*MiB, more than the limit SGMC_MAX_BYTES \(1000000 bytes\)"):
        LGSSM(Y, state_dim=30)  # 30^4 * 8 bytes of scatter matrices alone
    monkeypatch.setenv("SGMC_MAX_BYTES", str(10**9))
    assert LGSSM(Y, state_dim=30).n == 30
    monkeypatch.setenv("SGMC_MAX_BYTES", "lots")
    with pytest.raises(ValueError, match="SGMC_MAX_BYTES must be a positive integer"):
        _validation.memory_bytes()


def test_the_machine_limit_is_its_physical_memory(monkeypatch):
    monkeypatch.delenv("SGMC_MAX_BYTES", raising=False)
    with open("/proc/meminfo") as fh:
        total_kib = int(next(line for line in fh if line.startswith("MemTotal:")).split()[1])
    assert abs(_validation.memory_bytes() - total_kib * 1024) < 0.05 * total_kib * 1024
