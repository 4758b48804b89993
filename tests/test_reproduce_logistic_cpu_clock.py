"""logistic-figures with clock="cpu": Figure 3's budget in process CPU time, and Figure 2's table."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from sgmc import experiments  # noqa: E402

TINY = {"n": 2000, "iters": 200, "sgd_steps": 100, "pilot_iters": 60, "grid": (1.0,), "budget": 1.2,
        "truth_draws": 200, "nuts": False, "clock": "cpu", "chunk_seconds": 0.1}


# the tiny budget's chains are far too short to mix (MixingWarning); the test is about the clock and the table
@pytest.mark.filterwarnings("ignore::sgmc.diagnostics.mixing.MixingWarning")
def test_cpu_budget_is_spent_in_chunks_and_figure2_table_is_written(tmp_path):
    res = experiments.reproduce("logistic-figures", tmp_path, quick=True, seed=2, progress=False, **TINY)
    meta = json.loads((tmp_path / "meta.json").read_text())
    for label in ("SGLD", "SGLD-CV", "ULA"):
        info = meta["notes"][f"fig3_{label}"]
        assert info["stopped"] == "cpu_budget"
        # the budget is spent, and overrun by at most about one chunk
        assert TINY["budget"] <= info["cpu_seconds"] < TINY["budget"] + 1.0
        assert info["chunks"] >= 2 and info["iterations"] >= info["chunks"] * info["chunk"]
    assert meta["notes"]["fig3_SGLD"]["mode_search_cpu_seconds"] == 0.0
    assert meta["notes"]["fig3_SGLD-CV"]["mode_search_cpu_seconds"] > 0.0
    rows = {r[0]: r for r in res["tables"]["fig2_convergence"]["rows"]}
    assert len(rows) == 7
    for label, row in rows.items():
        assert row[3] == (TINY["sgd_steps"] if label.endswith("-CV") else 0)
        assert 0.0 <= row[6] <= 1.0 and row[5] > 0
        if np.isfinite(row[2]):
            assert row[2] >= row[3]
    # the curves' seconds are CPU seconds within the budget, after the burn-in
    curves = res["tables"]["curves"]["rows"]
    assert curves and all(0.0 < r[1] <= TINY["budget"] + 1.0 for r in curves)
    assert "CPU seconds" in res["tables"]["fig3_final"]["title"]


def test_bad_clock_and_budget_are_named(tmp_path):
    with pytest.raises(ValueError, match="option `clock` must be 'wall' or 'cpu'"):
        experiments.reproduce("logistic-figures", tmp_path, quick=True, progress=False, **{**TINY, "clock": "gpu"})
    with pytest.raises(ValueError, match="option `budget` must be a positive number"):
        experiments.reproduce("logistic-figures", tmp_path, quick=True, progress=False, **{**TINY, "budget": -1})


def test_process_time_counts_this_process_only():
    """The CPU clock the budget uses does not advance while the process sleeps (the wall clock does)."""
    c0, w0 = time.process_time(), time.perf_counter()
    time.sleep(0.2)
    assert time.process_time() - c0 < 0.1 and time.perf_counter() - w0 >= 0.2
