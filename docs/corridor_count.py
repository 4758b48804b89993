"""How many places a model passes through between ``sgmc.sample`` and the first iteration.

A *place* is a call of a function defined in ``sgmc/`` that receives the model object as an argument
(or reads it from an enclosing scope, as a comprehension does), other than as ``self``: each one is a
place where the model is looked at again. The count runs ``sgmc.sample(model, "sgld", ESTIMATOR,
...)`` on a small logistic regression (N = 2000, d = 5, 2 chains, 3 iterations) under
``sys.setprofile`` and stops at the first iteration (a sampler's ``step``, or the ``run`` of a
compiled block). For each estimator it records the places, the modules they are in, and the
returns from frames that hold the model.

``--old-src DIR`` measures another checkout too (its ``sgmc`` is imported in a child process with
``PYTHONPATH=DIR``); the file records both. The figures in docs/architecture.md compare this tree
with commit 720b6a8, made with ``git worktree add ../sgmc-720b6a8 720b6a8``.

Usage (from the repository root)::

    python docs/corridor_count.py [--old-src ../sgmc-720b6a8] [--list]

writes ``docs/results/corridor_count.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

ESTIMATORS = ("minibatch", "cv", "svrg")
#: Where the first iteration starts: (function name, part of its module's path).
FIRST = (("step", "samplers"), ("run", "_fused"), ("run", "_compiled"))


def count_places(estimator: str) -> dict:
    """Places, modules and returns of one ``sgmc.sample`` call with ``estimator``, with the sgmc imported here."""
    import numpy as np

    import sgmc

    root = os.path.dirname(sgmc.__file__)
    gen = np.random.default_rng(0)
    X = gen.standard_normal((2000, 5))
    y = (gen.random(2000) < 0.5).astype(float)
    model = sgmc.models.LogisticRegression(X, y)
    places: list = []
    state = {"done": False, "returns": 0}

    def holds(frame) -> bool:
        return any(v is model for k, v in frame.f_locals.items() if k != "self")

    def watch(frame, event, arg):
        if state["done"]:
            return
        code = frame.f_code
        if not code.co_filename.startswith(root):
            return
        where = os.path.relpath(code.co_filename, root)
        if event == "call":
            if any(code.co_name == name and part in where for name, part in FIRST):
                state["done"] = True
            elif holds(frame):
                places.append(f"{where}:{code.co_name}")
        elif event == "return" and holds(frame):
            state["returns"] += 1

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sys.setprofile(watch)
        try:
            sgmc.sample(model, "sgld", estimator, step_size=1e-4, n_iter=3, chains=2, rng=1, progress=False)
        finally:
            sys.setprofile(None)
    if not state["done"]:
        msg = f"the run with estimator {estimator!r} ended without reaching a first iteration"
        raise RuntimeError(msg)
    return {"places": len(places), "modules": len({p.split(":")[0] for p in places}),
            "returns": state["returns"], "list": places}


def _in_child(src: Path, estimator: str) -> dict:
    """:func:`count_places` in a fresh process importing sgmc from ``src``."""
    env = dict(os.environ, PYTHONPATH=str(src))
    out = subprocess.run([sys.executable, __file__, "--child", estimator], env=env, cwd=str(src),
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        msg = f"counting {estimator!r} in {src} failed:\n{out.stderr[-2000:]}"
        raise RuntimeError(msg)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _commit(src: Path) -> str | None:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=str(src), capture_output=True, text=True)
    return out.stdout.strip() or None


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old-src", default=None, help="another checkout to measure (its root folder)")
    parser.add_argument("--list", action="store_true", help="print every place")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        print(json.dumps(count_places(args.child)))
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from docs._results import write_results

    here = Path(__file__).resolve().parents[1]
    sources = [("this tree", here)]
    if args.old_src is not None:
        old = Path(args.old_src).resolve()
        if not (old / "sgmc" / "__init__.py").is_file():
            msg = f"--old-src: expected the root of an sgmc checkout (with sgmc/__init__.py); got {args.old_src!r}"
            raise SystemExit(msg)
        sources.append(("old checkout", old))
    rows, lists = [], {}
    for label, src in sources:
        commit = _commit(src)
        for est in ESTIMATORS:
            got = _in_child(src, est)
            rows.append([est, label, commit, got["places"], got["modules"], got["returns"]])
            lists[f"{commit}:{est}"] = got["list"]
            print(f"{label} ({commit}) {est}: places {got['places']} modules {got['modules']} "
                  f"returns {got['returns']}")
            if args.list:
                print("   " + "\n   ".join(got["list"]))
    tables = {"corridor": {
        "columns": ["estimator", "source", "commit", "places", "modules", "returns"],
        "rows": rows,
        "notes": ("calls of sgmc functions that receive the model (not as self) from sgmc.sample to the first "
                  "iteration; logistic regression N=2000, d=5, sgld, 2 chains"),
    }}
    extra = {"places": lists}
    if args.old_src is not None:
        extra["old_checkout"] = (f"commit {_commit(sources[1][1])}, checked out beside this tree with "
                                 "`git worktree add ../sgmc-720b6a8 720b6a8`")
    print(write_results("corridor_count", tables, extra=extra))


if __name__ == "__main__":
    main()
