"""The user documentation's examples run: every code block of every docs/*.md page, and the README's.

Every fenced code block of a page under docs/ is executed, in order, in one namespace per page and
in a fresh temporary folder:

* ```` ```pycon ```` blocks, and any block whose lines start with ``>>>``, are doctests (the output
  shown must match; ``...`` matches anything);
* ```` ```python ```` blocks are executed; a block with an ``if __name__ == "__main__":`` guard runs
  as a script in a fresh Python process (it starts processes of its own);
* ```` ```bash ```` (``sh``, ``shell``, ``console``) blocks run in a shell from the repository root;
* other blocks (```` ```text ````, no language) show output and are not run.

A block that cannot run in the test suite carries a marker on the line before its opening fence:
``<!-- docs-test: skip REASON -->`` (never run: it needs a GPU, a cluster, the network, or another
checkout) or ``<!-- docs-test: slow -->`` (run only with the slow tests: ``python -m pytest -m slow
tests/test_docs.py``). Any other ``docs-test`` marker is an error. New pages are picked up
automatically.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import math
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCTEST_PAGES = [
    "docs/quickstart.md", "docs/models.md", "docs/samplers.md", "docs/diagnostics.md", "docs/contracts.md",
    "docs/subsampling.md", "docs/riemannian.md", "docs/simplex.md", "docs/noise-corrections.md",
    "docs/autodiff.md", "docs/convergence.md", "docs/timeseries.md", "docs/particles.md",
    "docs/backends.md",
]
PAGES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<lang>[\w+-]*)[^\n]*$")
_MARKER = re.compile(r"<!--\s*docs-test:\s*(?P<what>\S+)(?P<reason>.*?)-->")
SHELL = {"bash", "sh", "shell", "console"}
PYTHON = {"python", "py", "python3"}
DOCTEST = {"pycon", "doctest"}


def code_blocks(text: str) -> list[dict]:
    """The fenced blocks of a markdown text: language, first line number, source, marker."""
    lines = text.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang, start = m.group("fence"), m.group("lang").lower(), i
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        prev = next((lines[k] for k in range(start - 1, -1, -1) if lines[k].strip()), "")
        marker = _MARKER.search(prev)
        blocks.append({
            "lang": lang, "line": start + 2, "source": "\n".join(body) + "\n",
            "marker": (marker.group("what"), marker.group("reason").strip()) if marker else None,
        })
        i += 1
    return blocks


def _kind(block: dict) -> str | None:
    lang = block["lang"]
    if lang in DOCTEST or (lang in PYTHON | {""} and re.search(r"^\s*>>> ", block["source"], re.M)):
        return "doctest"
    if lang in PYTHON:
        return "script" if re.search(r"^if __name__ == .__main__.:", block["source"], re.M) else "python"
    if lang in SHELL:
        return "shell"
    return None


def suite_env() -> dict:
    """The environment of a block's process: the suite's own interpreter first on PATH.

    A shell block's ``python`` and ``sgmc`` are then the interpreter (and its scripts) that runs the
    tests, whether or not its virtual environment was activated (``.venv/bin/python -m pytest``).
    """
    bindir = str(Path(sys.executable).parent)
    path = os.pathsep.join([bindir, os.environ.get("PATH", "")])
    return dict(os.environ, PATH=path, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _run_block(page: str, block: dict, kind: str, globs: dict, tmp: Path) -> None:
    where = f"{page}:{block['line']}"
    src = block["source"]
    env = suite_env()
    if kind == "doctest":
        test = doctest.DocTestParser().get_doctest(src, globs, where, str(ROOT / page), block["line"] - 1)
        out = io.StringIO()
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        runner.run(test, out=out.write, clear_globs=False)
        globs.update(test.globs)  # the page's later blocks see what the doctest defined
        assert runner.failures == 0, f"{where}: doctest failed\n{out.getvalue()}"
    elif kind == "python":
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(src, where, "exec"), globs)
    elif kind == "script":
        script = tmp / f"block_{block['line']}.py"
        script.write_text(src)
        code, err = _run([sys.executable, str(script)], tmp, env)
        assert code == 0, f"{where}: the script failed\n{err[-3000:]}"
    else:
        code, err = _run(["bash", "-euo", "pipefail", "-c", src], ROOT, env)
        assert code == 0, f"{where}: the command failed\n{err[-3000:]}"


def _run(cmd: list, cwd: Path, env: dict, timeout: float = 1800) -> tuple[int, str]:
    """Run a command in its own process group; on timeout end the whole group (workers included)."""
    with subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
    return proc.returncode, err


def run_page(page: str, tmp: Path, slow: bool) -> int:
    """Run every block of ``page``; return how many ran."""
    globs: dict = {"__name__": "__docs__"}
    ran = 0
    cwd, environ = os.getcwd(), dict(os.environ)
    os.chdir(tmp)
    try:
        for block in code_blocks((ROOT / page).read_text()):
            kind = _kind(block)
            if block["marker"] is not None:
                what, reason = block["marker"]
                assert what in ("skip", "slow"), f"{page}:{block['line']}: unknown docs-test marker {what!r}"
                assert kind is not None, f"{page}:{block['line']}: a docs-test marker on a block that is not code"
                if what == "skip":
                    assert reason, f"{page}:{block['line']}: `docs-test: skip` needs a reason"
                    continue
                if not slow:
                    continue
            if kind is None:
                continue
            _run_block(page, block, kind, globs, tmp)
            ran += 1
    finally:
        os.chdir(cwd)
        # libraries a page imports may set variables (threadpoolctl: KMP_DUPLICATE_LIB_OK, torch's
        # compiler: TORCHINDUCTOR_CACHE_DIR) that later tests and the processes they start would see
        for key in set(os.environ) - set(environ):
            del os.environ[key]
        os.environ.update(environ)
    return ran


@pytest.mark.parametrize("page", PAGES)
def test_doc_page_runs(page, tmp_path):
    run_page(page, tmp_path, slow=False)


def _has_slow_blocks(page: str) -> bool:
    return any(b["marker"] and b["marker"][0] == "slow" for b in code_blocks((ROOT / page).read_text()))


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if _has_slow_blocks(p)])
def test_doc_page_runs_with_its_slow_blocks(page, tmp_path):
    run_page(page, tmp_path, slow=True)


def test_every_listed_doctest_page_exists_and_has_examples():
    for page in DOCTEST_PAGES:
        assert page in PAGES, page
        assert any(_kind(b) == "doctest" for b in code_blocks((ROOT / page).read_text())), page


def test_the_runner_runs_every_kind_and_honours_markers(tmp_path, monkeypatch):
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    page.write_text(
        "```pycon\n>>> x = 2\n>>> x + 1\n3\n\n```\n\n"
        "```python\ny = x * 10\nwith open('made.txt', 'w') as fh:\n    fh.write(str(y))\n```\n\n"
        "```bash\ntest -d docs\n```\n\n"
        "<!-- docs-test: skip needs a GPU -->\n```python\nraise RuntimeError('must not run')\n```\n\n"
        "<!-- docs-test: slow -->\n```python\nraise RuntimeError('only with -m slow')\n```\n\n"
        "```text\nnot code\n```\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    assert run_page("docs/page.md", work, slow=False) == 3
    assert (work / "made.txt").read_text() == "20"
    with pytest.raises(RuntimeError, match="only with -m slow"):
        run_page("docs/page.md", work, slow=True)
    page.write_text("```pycon\n>>> 1 + 1\n3\n```\n")
    with pytest.raises(AssertionError, match="doctest failed"):
        run_page("docs/page.md", work, slow=False)
    page.write_text("<!-- docs-test: skip -->\n```python\npass\n```\n")
    with pytest.raises(AssertionError, match="needs a reason"):
        run_page("docs/page.md", work, slow=False)
    page.write_text("```bash\n" + f'test "$(command -v python)" = "{Path(sys.executable).parent}/python"' + "\n```\n")
    assert run_page("docs/page.md", work, slow=False) == 1     # a shell block's python is the suite's own


@pytest.mark.slow
def test_docs_site_builds_without_warnings(tmp_path):
    """The Sphinx site (guides and API reference) builds with warnings as errors, as CI builds it."""
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_parser")
    pytest.importorskip("numpydoc")
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                           str(ROOT / "docs"), str(tmp_path / "html")], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert "sgmc.sample" in (tmp_path / "html" / "api.html").read_text()


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
        assert (ROOT / link).exists(), link
