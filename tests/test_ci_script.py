"""CI runs the README's test command once and reruns nothing: a flaky test fails it.

A retry would turn a test that fails by chance into a green run, hiding the flake; so ``.ci/run``
runs ``python -m pytest`` exactly once, outside any loop or ``||`` fallback, and pytest's own
configuration switches the rerun plugins off.
"""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _commands(text):
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]


def test_ci_runs_the_readme_test_command_once_without_retry():
    script = (ROOT / ".ci" / "run").read_text()
    lines = _commands(script)
    runs = [ln for ln in lines if re.search(r"\bpytest\b", ln)]
    assert runs == ["python -m pytest"], runs                      # once, as the README types it
    assert "set -euo pipefail" in lines                             # and its failure fails the script
    for word in ("--reruns", "--lf", "--last-failed", "--sw", "--stepwise", "pytest-flaky", "-p flaky"):
        assert word not in "\n".join(lines), word
    assert not any(re.match(r"(for|while|until)\b", ln) for ln in lines)    # no loop around anything
    assert not any("||" in ln for ln in runs)
    readme = (ROOT / "README.md").read_text()
    assert 'pip install ".[test]" && python -m pytest\n' in readme


def test_pytest_switches_the_rerun_plugins_off():
    opts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    assert "-p no:rerunfailures" in opts and "-p no:flaky" in opts
    assert "--reruns" not in opts
