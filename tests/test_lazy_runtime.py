"""The compiled CPU runtime (Numba, llvmlite) loads only when a run first reaches a compiled path.

Each case runs in a fresh interpreter, so that what the test process itself imported does not count.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

_HAS_NUMBA = importlib.util.find_spec("numba") is not None

_RUN = """
import json, sys
import numpy as np
import sgmc
from sgmc.models import Gaussian, LogisticRegression

case = sys.argv[1]
after_import = "numba" in sys.modules
r = np.random.default_rng(0)
if case == "gaussian":          # a model without a compiled kernel; minibatches drawn without replacement
    model = Gaussian(r.standard_normal((20_000, 20)))
    sgmc.sample(model, "sgld", "minibatch", step_size=1e-5, batch_size=200, n_iter=300, chains=2, rng=1,
                progress=False)
elif case == "logistic":        # d >= the GLM loop's threshold: the fused compiled blocks run where Numba is on
    X = r.standard_normal((5_000, 40))
    y = (r.random(5_000) < 0.5).astype(np.float64)
    sgmc.sample(LogisticRegression(X, y), "sgld", "minibatch", step_size=1e-5, batch_size=100, n_iter=200,
                chains=2, rng=1, progress=False)
elif case == "ksd":
    from sgmc.diagnostics import ksd
    x = r.standard_normal((300, 3))
    ksd(x, -x)
elif case != "bare":
    raise SystemExit("unknown case " + case)
print(json.dumps({"after_import": after_import, "numba": "numba" in sys.modules,
                  "llvmlite": "llvmlite" in sys.modules,
                  "peak_mib": PEAK()}))
"""

_BARE = """
import json
import numpy as np
print(json.dumps({"peak_mib": PEAK()}))
"""

# The process's own high-water mark (VmHWM). getrusage's ru_maxrss would also count the forked parent's
# pages from before exec, here the whole test process.
_PEAK = """
def PEAK():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
"""


def _child(code: str, *args: str, native: str = "1") -> dict:
    env = dict(os.environ, SGMC_NATIVE=native)
    out = subprocess.run([sys.executable, "-c", _PEAK + code, *args], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_and_a_run_without_compiled_kernels_leave_numba_unloaded():
    got = _child(_RUN, "gaussian")
    assert not got["after_import"], "import sgmc loaded Numba"
    assert not got["numba"] and not got["llvmlite"], got


def test_natives_off_keeps_numba_unloaded_on_a_glm():
    got = _child(_RUN, "logistic", native="0")
    assert not got["numba"] and not got["llvmlite"], got


@pytest.mark.skipif(not _HAS_NUMBA, reason="the compiled CPU paths need Numba (pip install 'sgmc[cpu]')")
@pytest.mark.parametrize("case", ["logistic", "ksd"])
def test_a_run_through_a_compiled_path_loads_numba(case):
    got = _child(_RUN, case)
    assert not got["after_import"], "import sgmc loaded Numba"
    assert got["numba"], f"the {case} run should have reached a compiled path"


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the peak resident set from /proc")
def test_peak_memory_of_a_run_without_compiled_kernels():
    # Numba alone adds 100-130 MiB to a process's peak (docs/performance.md, native_memory.json); sgmc and a
    # small run add about 30 MiB to a bare NumPy process. A bound between the two catches an eager load.
    bare = _child(_BARE)["peak_mib"]
    run = _child(_RUN, "gaussian")["peak_mib"]
    assert run - bare < 70.0, f"peak RSS {run:.1f} MiB, {run - bare:.1f} MiB over a bare NumPy process ({bare:.1f})"
