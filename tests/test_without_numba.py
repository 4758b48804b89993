"""The core install has no Numba: every path that has a compiled twin must then run its array-API one.

A fresh interpreter hides Numba with a finder that refuses it (as if it were not installed) and runs
the paths whose natives are looked up directly: draws without replacement above the compiled size,
the GLM gradient at d >= 32, resampling, the KSD and the exact HMM recursions.
"""

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent(
    """
    import importlib.abc, sys

    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "numba" or name.startswith("numba."):
                raise ModuleNotFoundError(f"No module named {name!r}")
            return None

    sys.meta_path.insert(0, Refuse())
    import numpy as np
    import sgmc
    from sgmc.backends import _native_switch
    from sgmc.diagnostics import ksd
    from sgmc.models import LogisticRegression
    from sgmc.ssm import resample

    r = np.random.default_rng(0)
    X = r.normal(size=(3000, 40))
    y = (X[:, 0] + r.normal(size=3000) > 0).astype(float)
    tr = sgmc.sample(LogisticRegression(X, y), "sgld", "minibatch", step_size=1e-4, n_iter=20,
                     batch_size=300, chains=2, rng=0, progress=False)
    assert np.all(np.isfinite(tr.draws))
    w = r.random((3, 500))
    for scheme in ("systematic", "stratified", "multinomial", "residual"):
        a = resample(sgmc.backends.default_rng(1), w / w.sum(axis=1, keepdims=True), scheme)
        assert a.shape == (3, 500) and a.min() >= 0 and a.max() < 500
    x = r.normal(size=(400, 2))
    assert np.isfinite(float(ksd(x, -x)))
    assert "numba" not in sys.modules
    assert not _native_switch.enabled()
    _native_switch.set_enabled(True)
    assert not _native_switch.enabled()
    print("ok")
    """
)


def test_every_compiled_path_has_a_twin_without_numba():
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("ok")
