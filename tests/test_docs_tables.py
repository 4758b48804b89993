"""The documentation's figures come from results files: docs/render_tables.py and docs/_results.py.

The first test runs ``python docs/render_tables.py --check`` on the repository, so a stale table, a
missing results file or a table of numbers with no results file fails the suite. The others check the
renderer and the writer on a scratch tree: what they write, and that each kind of problem is caught.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from docs import render_tables  # noqa: E402
from docs._results import write_results  # noqa: E402

TABLE = {"columns": ["d", "sgmc us", "ratio"], "rows": [[10, 72.4, 1.1734], [100, 247.6, "failed"]]}


def test_repository_tables_are_generated_and_current():
    proc = subprocess.run(
        [sys.executable, "docs/render_tables.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr


def _tree(tmp_path, page_text, tables=None, name="bench"):
    (tmp_path / "docs" / "results").mkdir(parents=True)
    if tables is not None:
        write_results(name, tables, command="python bench.py --fast", directory=tmp_path / "docs" / "results")
    (tmp_path / "docs" / "page.md").write_text(page_text, encoding="utf-8")
    return tmp_path


def _block(src="docs/results/bench.json", tid="t", body="stale\n"):
    return f"Measured by `python bench.py --fast`:\n\n<!-- results: {src}#{tid} -->\n{body}<!-- end results -->\n"


def test_write_results_records_provenance(tmp_path):
    path = write_results("bench", {"t": TABLE}, command="python bench.py", extra={"reps": 5},
                         directory=tmp_path)
    rec = json.loads(path.read_text())
    assert rec["command"] == "python bench.py"
    assert set(rec["machine"]) >= {"platform", "cpu", "cores", "memory_gib"}
    assert len(rec["load"]["start"]) == 3 and len(rec["load"]["end"]) == 3
    assert {"python", "numpy", "sgmc"} <= set(rec["versions"])
    assert rec["tables"]["t"]["rows"] == TABLE["rows"]
    assert rec["extra"] == {"reps": 5}
    assert rec["created"].endswith("+00:00")


def test_write_results_rejects_bad_tables(tmp_path):
    # the command is given: the default (this process's argv) names the interpreter's pytest, an
    # absolute path wherever the environment lives outside the repository
    with pytest.raises(ValueError, match="row 0 has 2 cells"):
        write_results("x", {"t": {"columns": ["a", "b", "c"], "rows": [[1, 2]]}}, command="python x.py", directory=tmp_path)
    with pytest.raises(ValueError, match="'failed'"):
        write_results("x", {"t": {"columns": ["a"], "rows": [[float("nan")]]}}, command="python x.py", directory=tmp_path)
    with pytest.raises(ValueError, match="name"):
        write_results("../x", {"t": TABLE}, command="python x.py", directory=tmp_path)
    with pytest.raises(TypeError, match="non-empty dict"):
        write_results("x", {}, command="python x.py", directory=tmp_path)
    assert not list(tmp_path.iterdir())


def test_render_writes_the_table_and_its_source(tmp_path):
    root = _tree(tmp_path, "# Page\n\n" + _block(), {"t": TABLE})
    assert render_tables.main(["--root", str(root), "--check"]) == 1
    assert render_tables.main(["--root", str(root)]) == 0
    text = (root / "docs" / "page.md").read_text()
    assert "| d | sgmc us | ratio |\n|---|---|---|\n| 10 | 72.4 | 1.17 |\n| 100 | 248 | failed |\n" in text
    assert "Source: `docs/results/bench.json` (table `t`), written by `python bench.py --fast`" in text
    assert "stale" not in text
    assert render_tables.main(["--root", str(root), "--check"]) == 0
    # a second render changes nothing
    render_tables.main(["--root", str(root)])
    assert (root / "docs" / "page.md").read_text() == text


def test_check_finds_a_changed_results_file(tmp_path):
    root = _tree(tmp_path, _block(), {"t": TABLE})
    render_tables.main(["--root", str(root)])
    table = dict(TABLE, rows=[[10, 80.0, 1.2], [100, 250.0, 1.0]])
    write_results("bench", {"t": table}, command="python bench.py --fast", directory=root / "docs" / "results")
    problems = render_tables.process(root)
    assert len(problems) == 1 and "stale" in problems[0]


@pytest.mark.parametrize(
    ("block", "tables", "expected"),
    [
        (_block(src="docs/results/none.json"), {"t": TABLE}, "does not exist"),
        (_block(tid="u"), {"t": TABLE}, "has no table 'u'"),
        (_block(src="elsewhere/bench.json"), {"t": TABLE}, "is not a docs/results"),
        ("<!-- results: docs/results/bench.json#t -->\n| a |\n", {"t": TABLE}, "complete blocks"),
    ],
)
def test_check_finds_missing_sources(tmp_path, block, tables, expected):
    root = _tree(tmp_path, block, tables)
    problems = render_tables.process(root, write=True)
    assert any(expected in p for p in problems), problems


def test_results_file_without_provenance(tmp_path):
    root = _tree(tmp_path, _block())
    (root / "docs" / "results" / "bench.json").write_text(json.dumps({"tables": {"t": TABLE}}))
    problems = render_tables.process(root)
    assert any("lacks command, created, machine, load, versions" in p for p in problems), problems


def test_loose_numeric_tables(tmp_path):
    numeric = "| d | time |\n|---|---|\n| 10 | 0.86 s |\n"
    words = "| name | what | example |\n|---|---|---|\n| `sgld` | Langevin, eq. 4 | `h=1e-3` |\n"
    quoted = "<!-- quoted: the paper's Table 2 -->\n\n" + numeric
    fenced = "```text\n" + numeric + "```\n"
    root = _tree(tmp_path, "\n".join([numeric, words, quoted, fenced]))
    problems = render_tables.process(root)
    assert len(problems) == 1 and "page.md:1:" in problems[0] and "outside any results block" in problems[0]


@pytest.mark.parametrize(
    ("cell", "numeric"),
    [("72.4", True), ("1.5-1.65x", True), ("0.86 to 0.90 s", False), ("18.5 us", True), ("**1.2x**", True),
     ("SGLD 1 chain, d = 10", False), ("`1e-3`", False), ("Table 2", False), ("3.1e-05", True),
     ("1.58 / 1.84", True), ("(vectorised)", False), ("", False)],
)
def test_numeric_cell(cell, numeric):
    assert render_tables.numeric_cell(cell) is numeric


def test_format_cell():
    assert [render_tables.format_cell(v) for v in (None, 3, 0.0, 0.012345, 12.345, 1234.5, 1.5e-5, "x")] == [
        "–", "3", "0", "0.0123", "12.3", "1234", "1.50e-05", "x"]
    assert render_tables.format_cell(1.0, ".2f") == "1.00"
