"""The KSD tables of docs/ssm_ksd_table.py say what ran: scored draws per chain, budget-bound rows.

The number of draws each chain contributes to the KSD is set by ``scored_per_chain`` (``--keep``,
bounded by the scoring cost and by half the iterations); every table carries it in a column and its
note is generated from the rows, so a note cannot state a number the runs did not use. The budget
control (docs/ssm_ksd_control.py) judges the thesis's comparisons by the standard error over chains.
"""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))
sys.path.insert(0, str(ROOT))

import ssm_ksd_control  # noqa: E402
import ssm_ksd_table  # noqa: E402
from ssm_ksd_table import SCORED, score_kind, scored_per_chain, table_notes  # noqa: E402

SETTINGS = {"keep": 50, "chains": 5, "score_particles": 1000, "budget": 4.0, "eps": [1.0, 0.1], "particles": 1000}


def test_scored_per_chain_follows_the_bounds():
    """--keep, at most max(10, 1e7 / T) for exact scores, max(10, 1e8 / (T x particles x chains))
    otherwise, at most half the iterations: the audit's cases (10 at T = 1e6, 2 for 4 iterations, 10 on
    the 1,866 exchange-rate returns, 50 at T = 1e4)."""
    assert scored_per_chain(3000, 10**6, "exact", SETTINGS) == 10
    assert scored_per_chain(4, 10**6, "exact", SETTINGS) == 2
    assert scored_per_chain(237, 1866, "particle", SETTINGS) == 10
    assert scored_per_chain(3000, 10**4, "exact", SETTINGS) == 50
    assert scored_per_chain(3000, 10**5, "exact", SETTINGS) == 50
    assert scored_per_chain(3000, 4 * 10**5, "exact", SETTINGS) == 25
    assert scored_per_chain(1, 10**3, "exact", SETTINGS) == 1
    assert score_kind("3.5") == "particle" and score_kind("slds") == "none" and score_kind("3.3") == "exact"


def test_a_run_reports_the_draws_it_scored_and_the_note_says_so(capsys):
    """A run capped at 12 iterations scores 6 draws per chain (half), not --keep's 10: the row, the
    column and the note say 6."""
    tables = ssm_ksd_table.main(["--table", "3.4", "--quick", "--max-iter", "12", "--methods", "Full, N = inf"])
    (t,) = tables.values()
    at = {c: i for i, c in enumerate(t["columns"])}
    (row,) = t["rows"]
    assert row[at["iterations"]] == 12 and row[at[SCORED]] == 6
    assert "scored: 6 in every row" in t["notes"] and "at most half the iterations" in t["notes"]
    assert "budget-bound rows" in t["notes"] and "Full, N = inf (LGSSM 1-d): 12 iterations, 6 draws" in t["notes"]
    assert "10 thinned draws" not in t["notes"]


def test_notes_name_the_range_and_the_budget_bound_rows():
    cols = ["problem", "T", "method", "eps", "iterations", SCORED, "log10 KSD"]
    rows = [["P", 10**6, "SGLD", 0.01, 3000, 10, "4.3 (0.1)"], ["P", 10**6, "LD", 1.0, 4, 2, "4.9 (0.0)"],
            ["P", 10**6, "RLD", None, None, None, None]]
    note = table_notes("3.3", cols, rows, SETTINGS)
    assert "2 to 10 by row" in note and "max(10, 1e7 / T) = 10 at T = 1e+06" in note
    assert "LD (P): 4 iterations, 2 draws" in note and "SGLD (P)" not in note


@pytest.mark.parametrize("path", sorted((ROOT / "docs" / "results").glob("ssm_ksd_3*.json"))
                         + sorted((ROOT / "docs" / "results").glob("ssm_ksd_slds*.json")), ids=lambda p: p.stem)
def test_results_files_carry_the_rule_and_a_generated_note(path):
    """Each KSD table's scored draws are the rule applied to its recorded settings and iterations, and
    its note is the one table_notes writes from its rows."""
    record = json.loads(path.read_text(encoding="utf-8"))
    settings = record["extra"]["settings"]
    if "base" in record["extra"]:        # a budget control's file: its notes come from its rows
        extra = record["extra"]
        base = json.loads((path.parent / f"{extra['base']}.json").read_text(encoding="utf-8"))["extra"]["settings"]
        tid = next(k for k in record["tables"] if k != "claims")
        want = ssm_ksd_control.control_notes(record["tables"][tid]["rows"], extra["budgets"], extra["stable"], base,
                                             extra["base"], settings["row_cap"])
        assert (record["tables"][tid]["notes"], record["tables"]["claims"]["notes"]) == want
        at = {c: i for i, c in enumerate(record["tables"][tid]["columns"])}
        for r in record["tables"][tid]["rows"]:
            if r[at["iterations"]] is not None:
                assert r[at[SCORED]] == scored_per_chain(int(r[at["iterations"]]), int(r[at["T"]]), "exact", base)
        return
    for t in record["tables"].values():
        at = {c: i for i, c in enumerate(t["columns"])}
        for r in t["rows"]:
            if r[at["iterations"]] is not None:
                want = scored_per_chain(int(r[at["iterations"]]), int(r[at["T"]]), score_kind(settings["table"]), settings)
                assert r[at[SCORED]] == want
        assert t["notes"] == table_notes(settings["table"], t["columns"], t["rows"], settings)


def test_verdicts_use_the_standard_error_over_chains():
    v = ssm_ksd_control.verdict
    assert v((4.0, 0.1, 5), (4.5, 0.1, 5)) == "lower"      # 0.5 apart, se 0.063
    assert v((4.5, 0.1, 5), (4.0, 0.1, 5)) == "higher"
    assert v((4.0, 0.3, 5), (4.3, 0.3, 5)) == "not resolved"  # se 0.19: 2 se = 0.38
    seen = {("A", 4.0): (4.0, 0.1, 5), ("B", 4.0): (4.5, 0.1, 5), ("A", 16.0): (4.0, 0.1, 5)}
    ssm_ksd_control.CLAIMS["test"] = [("A", "B")]
    try:
        assert ssm_ksd_control._claims("test", seen, [4.0, 16.0]) == [["A below B", "lower", "not run"]]
    finally:
        del ssm_ksd_control.CLAIMS["test"]
