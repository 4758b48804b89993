"""The ``ep-clustering`` reproduction at its quick size, and its NMI against scikit-learn's."""

from __future__ import annotations

import json

import numpy as np

from sgmc.experiments import EXPERIMENTS, reproduce
from sgmc.experiments.ep_clustering import nmi


def test_nmi_matches_scikit_learn_geometric():
    from sklearn.metrics import normalized_mutual_info_score

    rng = np.random.default_rng(0)
    for _ in range(5):
        a, b = rng.integers(0, 4, 50), rng.integers(0, 3, 50)
        assert np.isclose(nmi(a, b), normalized_mutual_info_score(a, b, average_method="geometric"), rtol=1e-12)
    assert nmi([0, 0, 1, 1], [1, 1, 0, 0]) == 1.0


def test_reproduce_quick_writes_tables(tmp_path):
    assert "ep-clustering" in EXPERIMENTS
    out = tmp_path / "ep"
    result = reproduce("ep-clustering", out, quick=True, progress=False)
    for stem in ("mvt", "ts", "ts_runtime"):
        assert (out / f"{stem}.md").exists() and (out / f"{stem}.csv").exists()
    rows = result["tables"]["mvt"]["rows"]
    assert {r[1] for r in rows} == {"EP", "blocked", "naive"} and {r[0] for r in rows} == {"hard", "medium", "easy"}
    assert all(0.0 <= r[2] <= 1.0 and r[6] > 0 and 0.0 <= r[7] <= 1.0 for r in rows)
    ts = result["tables"]["ts"]["rows"]
    assert [r[0] for r in ts] == ["EP", "naive", "collapsed", "collapsed (Kalman)"]
    assert all(0.0 <= r[3] <= 1.0 and r[7] > 0 for r in ts)
    assert [r[2] for r in ts] == [2, 2, 2, 1]  # trials; the Kalman form runs kalman_trials
    assert [len(r) for r in result["tables"]["ts_runtime"]["rows"]] == [5, 5]
    meta = json.loads((out / "meta.json").read_text())
    assert meta["size"] == "quick" and meta["experiment"] == "ep-clustering"
