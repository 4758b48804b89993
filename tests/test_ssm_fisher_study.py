"""docs/ssm_precond.py --study fisher on the switching models: the quantities it scores and its tables.

A tiny run of the study (seconds): the ARHMM table has MALA's rows and SGRLD's with each form of the
metric, the SLDS table SGRLD's only; the two forms give different runs at the same step (the option
reaches the sampler), and ESS is taken on the identified quantities (Pi's first column, A, Q, R).
"""

import sys
from argparse import Namespace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))
sys.path.insert(0, str(ROOT))

import ssm_precond  # noqa: E402


def test_identified_quantities():
    model, theta, truth = ssm_precond.switching_problem("SLDS", 50, 0)
    draws = np.stack([theta, theta + 0.01 * np.arange(model.dim)])[None]          # (1 chain, 2 draws, d)
    feats = ssm_precond.identified(model, draws)
    assert feats.shape == (1, 2, 2 + 8 + 8 + 4)                                  # Pi[:, 0], A, Q, R
    par = model.constrain(draws[0])
    np.testing.assert_allclose(feats[0, :, :2], np.asarray(par.Pi)[:, :, 0])
    np.testing.assert_allclose(feats[0, :, 2:10], np.asarray(par.A).reshape(2, -1))
    np.testing.assert_allclose(feats[0, 0, 2:10], truth.A.reshape(-1), atol=1e-12)


def test_tiny_switching_study(monkeypatch):
    written = {}
    monkeypatch.setattr(ssm_precond, "write_results", lambda name, tables, **kw: written.update(name=name, tables=tables))
    args = Namespace(models=["ARHMM", "SLDS"], switch_T=120, switch_S=2, switch_B=2, switch_passes=3.0,
                     switch_h=[0.03], mala_h=[1e-3], mala_iter=60, chains=2, slds_chains=2, slds_passes=0.6,
                     seed=0, results=None)
    ssm_precond.switching_study(args)
    assert written["name"] == "ssm_fisher_switching"
    arhmm, slds = written["tables"]["ARHMM"], written["tables"]["SLDS"]
    for t in (arhmm, slds):
        assert all(len(r) == len(t["columns"]) for r in t["rows"])
    at = {c: i for i, c in enumerate(arhmm["columns"])}
    assert [r[at["sampler"]] for r in arhmm["rows"]] == ["MALA (exact gradient)"] + ["SGRLD (buffered)"] * 2
    assert [r[at["moments"]] for r in arhmm["rows"][1:]] == ["stationary", "identity"]
    assert all(r[at["sampler"]] != "MALA (exact gradient)" for r in slds["rows"])
    assert "no tractable likelihood" in slds["notes"]
    # the same step and seed with the two forms of the metric: different runs
    stat, ident = arhmm["rows"][1], arhmm["rows"][2]
    assert stat[at["MSE of A"]] != ident[at["MSE of A"]]
    assert stat[at["max |mean - MALA| (sd)"]] is not None and stat[at["kept data passes"]] > 0
