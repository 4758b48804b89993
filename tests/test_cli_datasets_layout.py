"""``sgmc.cli`` and ``sgmc.datasets`` are packages of small modules that keep every name users import.

Each package's ``__init__`` re-exports the names the single module used to offer, its docstring names
every module of the package (the layout), and no module grows past 600 lines.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import sgmc
import sgmc.cli
import sgmc.datasets

ROOT = Path(__file__).resolve().parents[1]

#: What ``from sgmc.datasets import X`` has offered: its ``__all__`` and the module's settings.
DATASETS_ALL = ["SimulatedData", "CSVData", "logistic_regression_data", "linear_regression_data",
                "covariate_covariance", "load_csv", "classification_data", "default_credit", "diamonds",
                "ExchangeRates", "exchange_rates", "RatingsSplit", "movielens100k", "ImageData", "mnist",
                "read_idx"]
DATASETS_SETTINGS = ["EIGENVALUE_FLOOR", "COEF_SCALES", "EXCHANGE_CURRENCIES"]
#: What ``from sgmc.cli import X`` has offered: ``main`` and ``build_parser``, and the command's settings.
CLI_ALL = ["main", "build_parser"]
CLI_SETTINGS = ["PROG", "FULL", "QUICK", "REF_ITERS_MIN", "REF_ITERS_MAX", "REF_PILOTS", "REF_PILOT_ITERS",
                "STEP_FACTORS", "MOMENTUM_FACTORS", "UNIT_FACTORS", "WARM_START_STEPS", "MOMENTUM_SAMPLERS",
                "CLI_SAMPLERS", "CLI_ESTIMATORS", "MALA_TARGET_ACCEPTANCE", "MIX_ESS", "LOG_LOSS_DRAWS",
                "BLAS_THREAD_VARS"]

PACKAGES = {"cli": (sgmc.cli, CLI_ALL, CLI_SETTINGS), "datasets": (sgmc.datasets, DATASETS_ALL, DATASETS_SETTINGS)}


@pytest.mark.parametrize("name", sorted(PACKAGES))
def test_the_package_offers_every_name_it_had(name):
    package, public, settings = PACKAGES[name]
    assert package.__all__ == public
    missing = [n for n in public + settings if not hasattr(package, n)]
    assert not missing, f"sgmc.{name} lost {missing}"
    for n in public:  # the names are the objects themselves, not the submodules of the same name
        assert not isinstance(getattr(package, n), type(sgmc)), f"sgmc.{name}.{n} is a module"


@pytest.mark.parametrize("name", sorted(PACKAGES))
def test_the_package_docstring_names_each_of_its_modules(name):
    folder = ROOT / "sgmc" / name
    doc = PACKAGES[name][0].__doc__
    listed = set(re.findall(r"^- ``(\w+)``", doc, flags=re.M))
    modules = {p.stem for p in folder.glob("*.py") if not p.name.startswith("__")}
    assert listed == modules, f"sgmc/{name}/__init__.py's layout lists {sorted(listed)}; the package has {sorted(modules)}"


@pytest.mark.parametrize("name", sorted(PACKAGES))
def test_no_module_of_the_package_is_past_600_lines(name):
    long = {p.name: n for p in (ROOT / "sgmc" / name).glob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600}
    assert not long, f"sgmc/{name}: modules past 600 lines: {long}"


@pytest.mark.parametrize("module", ["sgmc", "sgmc.cli"])
def test_python_dash_m_runs_the_command(module):
    proc = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"sgmc {sgmc.__version__}"
