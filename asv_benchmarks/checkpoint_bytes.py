"""Bytes written per checkpoint: the run's state and draws, not its data set.

A run of ``sgmc.sample(..., checkpoint=PATH)`` on a linear regression with N data points in d
dimensions (SGLD, minibatch gradients) writes a checkpoint every ``--every`` iterations. The script
counts the bytes of every file the checkpoint writer writes (the data file ``PATH.HASH.data``,
written once, and each checkpoint), and for comparison the size of the pickle that the earlier
checkpoint format wrote at the same moments (``pickle.dumps`` of the same run object with the
same protocol, which that format wrote whole at every checkpoint).

Usage (from the repository root)::

    python asv_benchmarks/checkpoint_bytes.py                   # N = 1e5, d = 10
    python asv_benchmarks/checkpoint_bytes.py --n 1000000 --d 100

The table goes to ``docs/results/checkpoint_bytes.json`` (``--results none`` to skip it).
"""

from __future__ import annotations

import argparse
import copy
import os
import pickle
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from docs._results import write_results  # noqa: E402  (imported first: it records the load at start)

import numpy as np  # noqa: E402

import sgmc  # noqa: E402
from sgmc import _checkpoint, run  # noqa: E402
from sgmc.models import LinearRegression  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--d", type=int, default=10)
    ap.add_argument("--iters", type=int, default=1000)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--results", default="checkpoint_bytes")
    args = ap.parse_args()
    r = np.random.default_rng(0)
    X = r.normal(size=(args.n, args.d))
    y = X @ r.normal(size=args.d) + r.normal(size=args.n)
    model = LinearRegression(X, y)

    writes, earlier = [], []
    real_write, real_save = _checkpoint.write_container, run._Job.save

    def counting(path, kind, meta, members):
        t0 = time.perf_counter()
        size = real_write(path, kind, meta, members)
        writes.append({"kind": kind, "bytes": size, "seconds": time.perf_counter() - t0})
        return size

    def save(job, *a, **k):
        as_before = copy.copy(job)
        as_before.file = None  # what the earlier _Job held: no record of a data file
        earlier.append(len(pickle.dumps({"magic": "sgmc checkpoint 1", "job": as_before}, protocol=pickle.HIGHEST_PROTOCOL)))
        return real_save(job, *a, **k)

    _checkpoint.write_container = counting
    run._Job.save = save
    try:
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "run.ckpt")
            sgmc.sample(model, "sgld", step_size=1e-6, batch_size=100, n_iter=args.iters, chains=args.chains,
                        rng=1, progress=False, checkpoint=path, checkpoint_every=args.every)
            on_disk = {name: os.path.getsize(os.path.join(folder, name)) for name in os.listdir(folder)}
    finally:
        _checkpoint.write_container, run._Job.save = real_write, real_save
    data = [w for w in writes if w["kind"] == "checkpoint data"]
    ckpts = [w for w in writes if w["kind"] == "checkpoint"]
    data_bytes = X.nbytes + y.nbytes
    rows = [
        ["earlier format (pickle of the whole run)", len(earlier), min(earlier), max(earlier), sum(earlier)],
        ["data file (once per run)", len(data), min(w["bytes"] for w in data), max(w["bytes"] for w in data),
         sum(w["bytes"] for w in data)],
        ["checkpoint (state and draws)", len(ckpts), min(w["bytes"] for w in ckpts), max(w["bytes"] for w in ckpts),
         sum(w["bytes"] for w in ckpts)],
    ]
    for row in rows:
        print(f"{row[0]}: {row[1]} writes, {row[2]:,} to {row[3]:,} bytes each, {row[4]:,} in all")
    print(f"data set: {data_bytes:,} bytes; files left: {on_disk}")
    if args.results != "none":
        table = {"columns": ["what is written", "writes", "bytes (smallest)", "bytes (largest)", "bytes in all"],
                 "rows": rows, "formats": [None, None, ",d", ",d", ",d"],
                 "notes": (f"LinearRegression N = {args.n:,}, d = {args.d} (data set {data_bytes:,} bytes), SGLD, "
                           f"{args.chains} chains, {args.iters} iterations, a checkpoint every {args.every}.")}
        extra = {"writes": writes, "earlier_pickle_bytes": earlier, "files_left": on_disk, "data_set_bytes": data_bytes}
        print("wrote", write_results(args.results, {"bytes": table}, extra=extra))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
