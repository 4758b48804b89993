"""The GPU check's set-up, dry-run on the CPU as the GPU machine would see it: no network, no array-api-compat.

``asv_benchmarks/gpu_check.sh --setup-only`` runs in a Python environment made here to look like the
GPU machine's image: every package of this environment except array-api-compat and sgmc (linked into
a fresh virtual environment), with pip told that no index exists (``PIP_NO_INDEX``, an index and
proxies at a closed local port). The script must install array-api-compat from the carried wheels
(``wheels/``, fetched by ``.ci/run``) and import sgmc from the checkout; with no wheel carried it must
stop at set-up, naming what is missing. Skipped, saying how to fetch them, where ``wheels/`` holds
no wheel for the pinned version.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "asv_benchmarks" / "gpu_check.sh"
PINS = ROOT / "asv_benchmarks" / "gpu_wheels.txt"
WHEELS = ROOT / "wheels"
FETCH = "python -m pip download --no-deps --only-binary=:all: -d wheels -r asv_benchmarks/gpu_wheels.txt"


def _pins() -> dict:
    lines = [ln.strip() for ln in PINS.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    return dict(ln.split("==") for ln in lines)


def _carried() -> bool:
    files = [p.name for p in WHEELS.glob("*.whl")] if WHEELS.is_dir() else []
    return all(any(f.startswith(f"{name.replace('-', '_')}-{version}-") for f in files)
               for name, version in _pins().items())


pytestmark = pytest.mark.skipif(not _carried(), reason=f"no carried wheels in wheels/; fetch them with: {FETCH}")

_HIDDEN = re.compile(r"^(array_api_compat|sgmc|_?_?editable__.*sgmc|__editable__)", re.IGNORECASE)


@pytest.fixture(scope="module")
def image_python(tmp_path_factory) -> Path:
    """A virtual environment with this one's packages, less array-api-compat and sgmc (links only)."""
    env = tmp_path_factory.mktemp("image") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    py = env / "bin" / "python"
    target = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 check=True, capture_output=True, text=True, timeout=60).stdout.strip())
    sources = {Path(sysconfig.get_paths()["purelib"]), Path(sysconfig.get_paths()["platlib"])}
    for src in sources:
        for entry in src.iterdir():
            if _HIDDEN.match(entry.name) or (entry.suffix == ".pth" and "sgmc" in entry.read_text(errors="ignore")):
                continue
            if not (target / entry.name).exists():
                (target / entry.name).symlink_to(entry)
    return py


def _run(py: Path, wheels: Path, tmp: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON", "VIRTUAL_ENV"))
           and k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")}
    closed = "http://127.0.0.1:9"  # the discard port: nothing answers there
    env.update(TMPDIR=str(tmp), PYTHON=str(py), GPU_WHEELS=str(wheels), PIP_NO_INDEX="1", PIP_INDEX_URL=f"{closed}/simple",
               PIP_FIND_LINKS="", HTTP_PROXY=closed, HTTPS_PROXY=closed, http_proxy=closed, https_proxy=closed,
               PIP_RETRIES="0", PIP_TIMEOUT="2")
    return subprocess.run(["bash", str(SCRIPT), "--setup-only"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=240)


def test_the_image_environment_lacks_array_api_compat(image_python):
    out = subprocess.run([str(image_python), "-c", "import array_api_compat"], capture_output=True, text=True,
                         timeout=60, env={"PATH": os.environ.get("PATH", "")})
    assert out.returncode != 0 and "No module named 'array_api_compat'" in out.stderr
    ok = subprocess.run([str(image_python), "-c", "import numpy, scipy, pytest"], capture_output=True, text=True,
                        timeout=120, env={"PATH": os.environ.get("PATH", "")})
    assert ok.returncode == 0, ok.stderr


def test_setup_installs_the_carried_wheels_offline_and_imports_sgmc_from_the_checkout(image_python, tmp_path):
    out = _run(image_python, WHEELS, tmp_path)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert "set-up complete" in text
    version = _pins()["array-api-compat"]
    line = next(ln for ln in text.splitlines() if ln.startswith("array_api_compat "))
    assert line.startswith(f"array_api_compat {version} from ") and "sgmc-gpu-check." in line, line
    assert f"sgmc from {ROOT / 'sgmc' / '__init__.py'}" in text
    assert "device:" not in text and "tests:" not in text  # stopped before the device steps


def test_setup_without_the_wheels_stops_naming_what_is_missing(image_python, tmp_path):
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    out = _run(image_python, empty, tmp_path)
    text = out.stdout + out.stderr
    assert out.returncode == 2, text
    assert "missing: array-api-compat" in text and "set-up failed" in text and FETCH in text
