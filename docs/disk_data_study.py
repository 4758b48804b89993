"""Cost of an SGLD iteration on data read from disk: memmap, zarr and Dask, plain and chunk-aware minibatches.

Logistic regression on N = 1,000,000 rows of d = 10 float64 covariates (80 MB), written once to a
raw file (read as a ``numpy.memmap``) and to a zarr array in chunks of 10,000 rows (zarr's default
compressor), which the Dask rows read through ``dask.array.from_zarr``. Each configuration runs SGLD
with minibatches of n = 1,000 rows per chain, 1 chain and 4 chains:

* ``minibatch``: a uniform minibatch. On zarr and Dask it touches about every chunk, each read
  (and decompressed) once per iteration, so an iteration reads nearly the whole array.
* ``chunked``: :class:`sgmc.estimators.ChunkedMinibatch` with two chunks per chain (500 rows from
  each), so an iteration reads at most two chunks per chain.

The same model in memory (NumPy arrays, the compiled minibatch loop) is the floor. The cost per
iteration is the difference of the wall (and CPU) times of two runs of ``sgmc.sample`` that differ
only in their number of iterations, divided by that difference, so the set-up is not counted; the
median of three repeats is reported, and the ratios to the memmap's cost use CPU time (of all the
process's threads: zarr decompresses chunks on a thread pool), which other work on the machine
inflates less than wall time. Short runs may not mix: their warnings are silenced, since only
their time is used.

Run from the repository root (about three CPU minutes; the data go to a temporary folder)::

    python docs/disk_data_study.py

It writes docs/results/disk_data.json (docs/big-data.md names it).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from docs._results import write_results  # noqa: E402  (imported first: the load at start)

import dask.array as da  # noqa: E402
import numpy as np  # noqa: E402
import zarr  # noqa: E402

import sgmc  # noqa: E402
from sgmc.models import LogisticRegression  # noqa: E402

N, D, CHUNK_ROWS, BATCH, N_CHUNKS = 1_000_000, 10, 10_000, 1_000, 2
CHAINS = (1, 4)
REPEATS = 3


def make_data(folder: str) -> tuple[str, str, np.ndarray]:
    """The covariates as a raw float64 file and as a zarr array; the labels in memory."""
    rng = np.random.default_rng(0)
    beta = np.linspace(-1.0, 1.0, D)
    raw, store = os.path.join(folder, "X.f64"), os.path.join(folder, "X.zarr")
    z = zarr.create_array(store, shape=(N, D), chunks=(CHUNK_ROWS, D), dtype="f8")
    y = np.empty(N)
    with open(raw, "wb") as f:
        for a in range(0, N, 100_000):
            Xb = rng.normal(size=(100_000, D))
            y[a:a + 100_000] = rng.uniform(size=100_000) < 1.0 / (1.0 + np.exp(-Xb @ beta))
            Xb.tofile(f)
            z[a:a + 100_000] = Xb
    return raw, store, y


def per_iteration(model, estimator: str, chains: int, n_iter: int) -> tuple[float, float]:
    """Wall and CPU seconds per iteration: (run of 2 + n_iter) minus (run of 2), over n_iter."""
    def run(k: int) -> tuple[float, float]:
        t, c = time.perf_counter(), time.process_time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sgmc.sample(model, "sgld", estimator, step_size=1e-6, batch_size=BATCH, n_iter=k, burn_in=0,
                        chains=chains, rng=1, progress=False,
                        estimator_options={"n_chunks": N_CHUNKS} if estimator == "chunked" else None)
        return time.perf_counter() - t, time.process_time() - c

    walls, cpus = [], []
    for _ in range(REPEATS):
        w0, c0 = run(2)
        w1, c1 = run(2 + n_iter)
        walls.append((w1 - w0) / n_iter)
        cpus.append((c1 - c0) / n_iter)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    rows, raw_times = [], {}
    with tempfile.TemporaryDirectory() as folder:
        raw, store, y = make_data(folder)
        X = np.fromfile(raw).reshape(N, D)
        configs = [
            ("NumPy in memory", "minibatch", LogisticRegression(X, y), 400),
            ("memmap", "minibatch", LogisticRegression(np.memmap(raw, dtype=np.float64, mode="r", shape=(N, D)), y), 200),
            ("zarr", "minibatch", LogisticRegression(zarr.open_array(store, mode="r"), y), 6),
            ("zarr", "chunked", LogisticRegression(zarr.open_array(store, mode="r"), y), 100),
            ("Dask (from zarr)", "minibatch", LogisticRegression(da.from_zarr(store), y), 6),
            ("Dask (from zarr)", "chunked", LogisticRegression(da.from_zarr(store), y), 100),
        ]
        del X
        for data, estimator, model, n_iter in configs:
            cells = [data, estimator]
            for chains in CHAINS:
                wall, cpu = per_iteration(model, estimator, chains, n_iter)
                raw_times[f"{data}/{estimator}/{chains}"] = {"wall_s": wall, "cpu_s": cpu, "n_iter": n_iter}
                cells += [wall * 1e3, cpu * 1e3]
                print(f"{data:18s} {estimator:10s} chains={chains}: {wall * 1e3:8.2f} ms wall, {cpu * 1e3:8.2f} ms CPU",
                      flush=True)
            rows.append(cells)
    memmap = {c: raw_times[f"memmap/minibatch/{c}"]["cpu_s"] for c in CHAINS}
    for row in rows:
        row += [raw_times[f"{row[0]}/{row[1]}/{c}"]["cpu_s"] / memmap[c] for c in CHAINS]
    columns = ["data", "estimator"]
    for c in CHAINS:
        columns += [f"ms/iter, {c} chain{'s' * (c > 1)} (wall)", "(CPU)"]
    columns += [f"CPU / memmap's, {c} chain{'s' * (c > 1)}" for c in CHAINS]
    notes = (f"SGLD on logistic regression, N = {N:,} rows, d = {D} float64 (80 MB), n = {BATCH:,} rows per chain "
             f"and iteration; zarr chunks of {CHUNK_ROWS:,} rows (zarr's default compressor), Dask reading the same "
             f"store; 'chunked' draws {N_CHUNKS} chunks per chain and {BATCH // N_CHUNKS} rows in each. Cost per "
             f"iteration from the difference of two runs' times, median of {REPEATS} repeats. The ratios compare CPU "
             f"times (all threads of the process), which a busy machine inflates less than wall times.")
    formats = ["", ""] + [".3g"] * (3 * len(CHAINS))
    write_results("disk_data", {"sgld_iteration": {"columns": columns, "rows": rows, "notes": notes, "formats": formats}},
                  command="python docs/disk_data_study.py",
                  extra={"times": raw_times, "N": N, "d": D, "chunk_rows": CHUNK_ROWS, "batch_size": BATCH,
                         "n_chunks": N_CHUNKS, "repeats": REPEATS},
                  packages=("zarr", "dask"))


if __name__ == "__main__":
    main()
