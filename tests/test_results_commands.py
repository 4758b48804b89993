"""Every results file records a command that runs from a fresh clone: no absolute or scratch paths.

The recorded command of ``docs/results/*.json`` is shown under each table of the documentation
(the "Source:" lines of ``docs/render_tables.py``), so it must name paths relative to the repository
root. The writer (``docs/_results.py``) records its own command that way, and warns when a command it
is given still names an absolute path.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from docs import _results  # noqa: E402

RESULTS = sorted((ROOT / "docs" / "results").glob("*.json"))
# an absolute path as a shell word or an option's value: "/x", "~/x", "--out=/x", "out=/x", "'/x"
ABSOLUTE = re.compile(r"(?:^|[\s='\",(])(?:/|~/)[\w.~-]")


def test_there_are_results_files():
    assert len(RESULTS) > 10


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.name)
def test_recorded_command_has_no_absolute_path(path):
    command = json.loads(path.read_text(encoding="utf-8"))["command"]
    assert not ABSOLUTE.search(command), f"{path.name}: {command}"
    assert _results.absolute_paths(command) == [], f"{path.name}: {command}"


def test_rendered_source_lines_have_no_absolute_path():
    bad = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for line in page.read_text(encoding="utf-8").splitlines():
            m = re.match(r"Source: `[^`]*` \(table `[^`]*`\), written by `(.*)` on ", line)
            if m and ABSOLUTE.search(m.group(1)):
                bad.append(f"{page.relative_to(ROOT)}: {m.group(1)}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("command, found", [
    ("python docs/x.py --out build/a --option 'k=(1,2)'", []),
    ("python docs/x.py --out /tmp/a", ["/tmp/a"]),
    ("python docs/x.py --out=/work/runs/a", ["/work/runs/a"]),
    ("python docs/x.py --option resume=/tmp/r.jsonl", ["/tmp/r.jsonl"]),
    ("python docs/x.py --cache ~/data", ["~/data"]),
    ("python /home/me/sgmc/docs/x.py", ["/home/me/sgmc/docs/x.py"]),
])
def test_absolute_paths_finds_them(command, found):
    assert _results.absolute_paths(command) == found
    assert bool(ABSOLUTE.search(command)) == bool(found)


def test_the_writer_records_paths_inside_the_repository_relative_to_it(tmp_path, monkeypatch):
    script = ROOT / "docs" / "render_tables.py"
    monkeypatch.setattr(sys, "argv", [str(script), "--out", str(ROOT / "build" / "x"), f"--tree={ROOT / 'docs'}", "3"])
    out = _results.write_results("cmd", {"t": {"columns": ["a"], "rows": [[1]]}}, directory=tmp_path)
    command = json.loads(out.read_text())["command"]
    assert command == "python docs/render_tables.py --out build/x --tree=docs 3"
    assert shlex.split(command)[1] == "docs/render_tables.py"


def test_the_writer_records_relative_paths_from_another_folder_against_the_root(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT / "docs")
    monkeypatch.setattr(sys, "argv", ["render_tables.py", "--out", "results"])
    assert _results.default_command() == "python docs/render_tables.py --out docs/results"


def test_the_writer_warns_about_an_absolute_path_outside_the_repository(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(ROOT / "docs" / "render_tables.py"), "--out", "/nonexistent/scratch"])
    with pytest.warns(UserWarning, match="absolute paths.*'/nonexistent/scratch'"):
        out = _results.write_results("cmd", {"t": {"columns": ["a"], "rows": [[1]]}}, directory=tmp_path)
    assert json.loads(out.read_text())["command"].endswith("--out /nonexistent/scratch")


def test_render_check_refuses_a_command_with_an_absolute_path(tmp_path, capsys):
    from docs import render_tables

    (tmp_path / "docs" / "results").mkdir(parents=True)
    page = tmp_path / "docs" / "page.md"
    page.write_text("<!-- results: docs/results/bench.json#t -->\nstale\n<!-- end results -->\n", encoding="utf-8")
    with pytest.warns(UserWarning, match="absolute paths"):
        _results.write_results("bench", {"t": {"columns": ["a"], "rows": [[1]]}},
                               command="python bench.py --out /tmp/scratch", directory=tmp_path / "docs" / "results")
    assert render_tables.main(["--root", str(tmp_path), "--check"]) == 1
    assert "absolute path(s) ['/tmp/scratch']" in capsys.readouterr().err
    _results.write_results("bench", {"t": {"columns": ["a"], "rows": [[1]]}},
                           command="python bench.py --out build/scratch", directory=tmp_path / "docs" / "results")
    assert render_tables.main(["--root", str(tmp_path)]) == 0
    assert render_tables.main(["--root", str(tmp_path), "--check"]) == 0
