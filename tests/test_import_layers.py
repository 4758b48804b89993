"""The package's layers: a module imports only modules of its own layer or of the layers below it.

``docs/architecture.md`` draws the picture; :data:`LAYERS` is the same map, lowest layer first. Every
``import`` statement of every module under ``sgmc/`` is read with :mod:`ast`, at module level and
inside functions alike (an import moved into a function still ties the two layers together), and
resolved to the ``sgmc`` module it names (with :func:`test_imports._targets`). An import that reaches
up a layer fails the test with its file, line and statement, unless :data:`EXCEPTIONS` names the pair
and says why. A package's ``__init__`` may re-export any of its own submodules, whatever their layer
(``sgmc.diagnostics`` hands out :func:`~sgmc.diagnostics.pseudo_variance`); its other imports follow
the rule.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from test_imports import ROOT, _modules, _targets

#: Lowest layer first. A module belongs to the layer of its longest listed prefix (``"sgmc"`` itself is
#: the package's ``__init__`` only).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", (
        "sgmc._array_api", "sgmc._validation", "sgmc._names", "sgmc._param_names", "sgmc._progress",
        "sgmc._distinct", "sgmc._draw_continuation", "sgmc._trace_checks", "sgmc._atomic",
    )),
    ("backends and natives", (
        "sgmc.backends", "sgmc._dispatch", "sgmc._keys", "sgmc._flow", "sgmc._sampling", "sgmc._scatter",
        "sgmc._model_args",
    )),
    ("data and file edges", ("sgmc.datasets", "sgmc._blocks", "sgmc._safefile")),
    # the metric a model offers through fisher_metric() is part of the model contract
    ("models", ("sgmc.models", "sgmc.optimize", "sgmc._lbfgs", "sgmc.samplers.metrics")),
    ("estimators", ("sgmc.estimators",)),
    ("samplers", ("sgmc.samplers",)),
    ("state space and sequence methods", ("sgmc.ssm", "sgmc.clustering", "sgmc.rnn")),
    ("diagnostics", ("sgmc.diagnostics",)),
    ("chains, executors and run records", (
        "sgmc.chains", "sgmc.executors", "sgmc.trace", "sgmc.adapt", "sgmc._stepgrid", "sgmc._stepbias",
        "sgmc._sd_step", "sgmc._registry", "sgmc._codec", "sgmc._decode", "sgmc._checkpoint",
        "sgmc._inputs", "sgmc._plan", "sgmc._budget", "sgmc._assemble", "sgmc._checkpoint_job",
    )),
    ("entry points", (
        "sgmc", "sgmc.__main__", "sgmc.run", "sgmc.tuning", "sgmc.conditioning", "sgmc.plot", "sgmc.cli",
        "sgmc.experiments",
    )),
]

#: Imports that reach up a layer today, each with the reason it stays.
EXCEPTIONS: dict[tuple[str, str], str] = {
    # V_0's pilot chains (thesis section 4.5.3) run SGLD while the adaptive estimator is prepared.
    ("sgmc.estimators.v0", "sgmc.samplers.langevin"): "pilot chains of the V_0 calibration",
    # The exception a diverging state space run raises is the runner's own (chains.DivergenceError).
    ("sgmc.ssm._divergence", "sgmc.chains"): "the runner's DivergenceError",
    # sgmc.ssm re-exports forecast_plot, which lives with the other plots.
    ("sgmc.ssm", "sgmc.plot"): "re-export of forecast_plot",
}


def layer_of(module: str) -> int | None:
    """Index in :data:`LAYERS` of ``module`` (by its longest listed prefix), or None when unlisted."""
    best, depth = None, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or (p != "sgmc" and module.startswith(p + "."))) and p.count(".") > depth:
                best, depth = i, p.count(".")
    return best


def imports(root: Path = ROOT) -> list[tuple[str, str, str, str, bool]]:
    """``(importer, imported, file:line, statement, importer is a package)`` for every sgmc import under ``root``."""
    mods = _modules(root)
    known = set(mods)
    out = []
    for name, path in sorted(mods.items()):
        src = path.read_text(encoding="utf-8")
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(src, filename=str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                where = f"{path.relative_to(root.parent).as_posix()}:{node.lineno}"
                for target in _targets(node, name, is_pkg, known):
                    if target and target != name:
                        out.append((name, target, where, ast.get_source_segment(src, node), is_pkg))
    return out


def violations(root: Path = ROOT, exceptions: dict | None = None) -> tuple[list[str], set]:
    """Upward imports not in ``exceptions`` (one line each), and the exceptions that were used."""
    exceptions = EXCEPTIONS if exceptions is None else exceptions
    bad, used = [], set()
    for importer, imported, where, stmt, is_pkg in imports(root):
        if is_pkg and imported.startswith(importer + "."):
            continue  # a package re-exporting its own submodule
        lo, hi = layer_of(importer), layer_of(imported)
        if lo is None or hi is None or hi <= lo:
            continue
        if (importer, imported) in exceptions:
            used.add((importer, imported))
            continue
        bad.append(f"{where}: {importer} ({LAYERS[lo][0]}) imports {imported} ({LAYERS[hi][0]}): {stmt}")
    return bad, used


def test_every_module_has_a_layer():
    unlisted = sorted(m for m in _modules() if layer_of(m) is None)
    msg = "modules in no layer (add them to LAYERS and docs/architecture.md): " + ", ".join(unlisted)
    assert not unlisted, msg


def test_no_module_imports_a_higher_layer():
    bad, used = violations()
    msg = "imports that reach up a layer:\n" + "\n".join(bad)
    assert not bad, msg
    stale = sorted(set(EXCEPTIONS) - used)
    msg = f"EXCEPTIONS that no import needs any more (remove them and their line in docs/architecture.md): {stale}"
    assert not stale, msg


def test_the_page_lists_the_layers_and_the_exceptions():
    page = (ROOT.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    for name, prefixes in LAYERS:
        assert f"**{name[0].upper() + name[1:]}**" in page, name
        for p in prefixes:
            short = p.removeprefix("sgmc.")
            assert f"`{short}`" in page or f"`{short.replace('.', '/')}/`" in page, (name, p)
    for importer, imported in EXCEPTIONS:
        assert f"`{importer}`" in page and f"`{imported}`" in page, (importer, imported)


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "sgmc"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.mark.parametrize("where", ["module", "function"])
def test_an_upward_import_is_named(tmp_path, where):
    body = "from ..run import sample\n"
    if where == "function":
        body = "def f():\n    " + body
    root = _package(tmp_path, {
        "__init__.py": "from .models import base\nfrom .run import sample\n",
        "run.py": "from .models.base import Model\n",
        "models/__init__.py": "from .base import Model\n",
        "models/base.py": "import numpy\n" + body,
    })
    bad, _ = violations(root, exceptions={})
    assert len(bad) == 1, bad
    line = 2 if where == "module" else 3
    assert bad[0].startswith(f"sgmc/models/base.py:{line}: sgmc.models.base (models) imports sgmc.run (entry points)")
    assert "from ..run import sample" in bad[0]
    bad, used = violations(root, exceptions={("sgmc.models.base", "sgmc.run"): "why"})
    assert bad == [] and used == {("sgmc.models.base", "sgmc.run")}


def test_a_package_may_re_export_its_own_submodules(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "",
        "diagnostics/__init__.py": "from .pseudo_variance import f\n",
        "diagnostics/pseudo_variance.py": "from ..estimators import g\n",
        "estimators/__init__.py": "from .base import g\n",
        "estimators/base.py": "from ..diagnostics import f\n",     # estimators sit below diagnostics
    })
    bad, _ = violations(root, exceptions={})
    assert len(bad) == 1 and bad[0].startswith("sgmc/estimators/base.py:1: sgmc.estimators.base (estimators) "
                                               "imports sgmc.diagnostics (diagnostics)"), bad


def test_layer_of_takes_the_longest_prefix():
    assert LAYERS[layer_of("sgmc.samplers.metrics")][0] == "models"
    assert LAYERS[layer_of("sgmc.samplers.langevin")][0] == "samplers"
    assert LAYERS[layer_of("sgmc")][0] == "entry points"
    assert layer_of("sgmc.nowhere") is None
    assert layer_of("sgmc.models_extra") is None     # a prefix counts only at a dot
