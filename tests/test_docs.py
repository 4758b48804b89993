"""The user documentation's examples run: doctests of docs/*.md and the README's quick start."""

from __future__ import annotations

import contextlib
import doctest
import io
import math
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCTEST_PAGES = [
    "docs/quickstart.md",
    "docs/models.md",
    "docs/samplers.md",
    "docs/diagnostics.md",
    "docs/contracts.md",
    "docs/timeseries.md",
    "docs/particles.md",
    "docs/backends.md",
]


@pytest.mark.parametrize("page", DOCTEST_PAGES)
def test_doc_page_examples(page):
    path = ROOT / page
    result = doctest.testfile(str(path), module_relative=False, optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.attempted > 0, f"{page} has no examples"
    assert result.failed == 0, f"{result.failed} example(s) in {page} failed"


def test_readme_quick_start_runs():
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "README.md has no python block"
    out = io.StringIO()
    namespace: dict = {}
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        exec(compile(blocks[0], "README.md", "exec"), namespace)
    lines = out.getvalue().strip().splitlines()
    # mean, ESS and log-loss were printed; the log-loss is better than chance
    assert namespace["trace"].draws.shape == (4, 5000, 10)
    log_loss = float(lines[-1])
    assert 0.0 < log_loss < math.log(2.0)


def test_readme_commands_are_the_documented_ones():
    text = (ROOT / "README.md").read_text()
    assert "python -m venv .venv && . .venv/bin/activate && pip install . && sgmc run" in text
    assert 'python -m venv .venv && . .venv/bin/activate && pip install ".[test]" && python -m pytest' in text
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        if link in ("docs/diagnostics.md", "docs/tuning.md"):
            continue  # written alongside; checked where they are built
        assert (ROOT / link).exists(), link
