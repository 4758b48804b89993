#!/usr/bin/env bash
# The GPU check of docs/gpu.md in one command, offline: set-up from the files it carries, the device
# tests (tests/test_gpu.py for CuPy, tests/test_torch_cuda.py for torch on CUDA), the static resource
# report, and the GPU benchmarks (asv_benchmarks/gpu_bench.py), which write docs/results/gpu_check.json.
# Run from anywhere; it works in the repository root.
#
#   asv_benchmarks/gpu_check.sh               on a machine with an NVIDIA GPU (at most 6 minutes)
#   asv_benchmarks/gpu_check.sh --setup-only  the set-up alone, then stop (no GPU needed)
#   asv_benchmarks/gpu_check.sh --dry-run     on any machine: every step that needs no GPU (NumPy only)
#   options: --out DIR (copy the results file and the logs there; default $OUT when set),
#            --no-install (use the Python environment as it is)
#
# Offline set-up. The GPU machine reaches no network, and its image holds CuPy, JAX, torch, numba,
# NumPy, SciPy and pytest but not array-api-compat. What it lacks is carried as wheels in wheels/
# (git-ignored; GPU_WHEELS=DIR names another folder), listed with pinned versions in
# asv_benchmarks/gpu_wheels.txt and fetched beforehand on a machine with an index:
#
#   python -m pip download --no-deps --only-binary=:all: -d wheels -r asv_benchmarks/gpu_wheels.txt
#
# The script installs them with pip --no-index --find-links (it never waits on a network) into a
# private folder put on PYTHONPATH, and runs sgmc from this checkout (PYTHONPATH); the image's own
# packages are used as they are. The pytest steps keep JAX on the CPU (JAX_PLATFORMS=cpu unless set;
# XLA_PYTHON_CLIENT_PREALLOCATE=false), so that JAX neither takes the GPU's memory from CuPy and torch
# nor fails the collection when its CUDA plugin cannot start.
#
# Time: every step has a timeout, and all of them fit in GPU_CHECK_BUDGET seconds (default 350 on the
# GPU; 900 for --dry-run, whose emulated kernels take minutes on a small CPU machine).
# The tests run in one process; each test that failed (or was skipped because an earlier one left
# the device unusable, or never reported) runs once more in a process of its own, at most RERUN_MAX
# (default 6) of them.
# Exit status: 0 when every step passed, 1 when a test or benchmark failed, 2 when set-up failed.
set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)
DRY=0
SETUP_ONLY=0
INSTALL=1
OUTDIR=${OUT:-}
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) DRY=1 ;;
        --setup-only) SETUP_ONLY=1 ;;
        --no-install) INSTALL=0 ;;
        --out) OUTDIR=$2; shift ;;
        *) echo "gpu_check: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
PY=${PYTHON:-python3}
WHEELS=${GPU_WHEELS:-$ROOT/wheels}
# the GPU run fits in 6 minutes; a dry run on a small CPU machine takes longer (the emulated kernels)
if [ "$DRY" = 1 ]; then BUDGET=${GPU_CHECK_BUDGET:-900}; else BUDGET=${GPU_CHECK_BUDGET:-350}; fi
RERUN_MAX=${RERUN_MAX:-6}
FETCH="python -m pip download --no-deps --only-binary=:all: -d wheels -r asv_benchmarks/gpu_wheels.txt"
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
LOG=$(mktemp -d "${TMPDIR:-/tmp}/sgmc-gpu-check.XXXXXX")
[ -n "$OUTDIR" ] && mkdir -p "$OUTDIR"
STATUS=0
START=$(date +%s)
say() { echo "gpu_check [$(( $(date +%s) - START )) s]: $*"; }
# seconds a step may take: its own limit, within what is left of the budget (at least 1)
cap() {
    local left=$(( START + BUDGET - $(date +%s) ))
    local want=$1
    [ "$left" -lt "$want" ] && want=$left
    [ "$want" -lt 1 ] && want=1
    echo "$want"
}

# -- 1. set-up (offline) ----------------------------------------------------------------------------------
if [ "$INSTALL" = 1 ]; then
    SITE="$LOG/site"
    if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
        say "installing the carried wheels from $WHEELS (no index)"
        if ! timeout "$(cap 60)" "$PY" -m pip install -q --no-index --find-links "$WHEELS" --no-deps --no-compile \
                --no-cache-dir --target "$SITE" -r asv_benchmarks/gpu_wheels.txt >"$LOG/pip.log" 2>&1; then
            tail -n 5 "$LOG/pip.log"
            say "the carried wheels did not install; fetch them where an index is reachable: $FETCH"
            exit 2
        fi
        export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
    else
        say "no wheels in $WHEELS: using the environment as it is"
    fi
    export PYTHONPATH="$ROOT:${PYTHONPATH:-}"  # sgmc from this checkout
fi
if ! timeout "$(cap 90)" "$PY" - >"$LOG/setup.log" 2>&1 <<'EOF'
import importlib, importlib.util, sys
need = {"numpy": "numpy", "scipy": "scipy", "array_api_compat": "array-api-compat",
        "threadpoolctl": "threadpoolctl", "pytest": "pytest"}
missing = [pkg for mod, pkg in need.items() if importlib.util.find_spec(mod) is None]
if missing:
    print("missing:", " ".join(missing))
    sys.exit(1)
import sgmc
for mod in ("numpy", "array_api_compat"):
    m = importlib.import_module(mod)
    print(f"{mod} {m.__version__} from {m.__file__}")
print(f"sgmc from {sgmc.__file__}")
EOF
then
    cat "$LOG/setup.log"
    if grep -q "^missing:" "$LOG/setup.log"; then
        say "set-up failed: carry what is missing as wheels in $WHEELS (list it in asv_benchmarks/gpu_wheels.txt; fetch: $FETCH)"
    else
        say "set-up failed: sgmc or a package it needs does not import here (above)"
    fi
    exit 2
fi
cat "$LOG/setup.log"
"$PY" -c "import array_api_strict" 2>/dev/null || say "array-api-strict is missing: tests that use it skip"
if [ "$SETUP_ONLY" = 1 ]; then
    say "set-up complete (--setup-only: stopping before the device steps)"
    exit 0
fi
timeout "$(cap 90)" "$PY" - <<'EOF'
import importlib
for mod in ("cupy", "torch", "jax", "numba"):
    try:
        m = importlib.import_module(mod)
        print(f"{mod} {getattr(m, '__version__', '?')} from {m.__file__}")
    except Exception as exc:  # noqa: BLE001 - the image's libraries are reported, not required here
        print(f"{mod} not importable ({type(exc).__name__}: {exc})")
EOF

# the pytest steps: JAX on the CPU, and never holding the GPU's memory
export JAX_PLATFORMS=${JAX_PLATFORMS:-cpu} XLA_PYTHON_CLIENT_PREALLOCATE=false
TESTS="tests/test_gpu.py tests/test_torch_cuda.py"

# -- 2. the device --------------------------------------------------------------------------------------
if [ "$DRY" = 0 ]; then
    if ! timeout "$(cap 60)" "$PY" -c "
from sgmc.backends.cupy import device_status
ok, why = device_status()
print('device:', 'usable' if ok else why)
raise SystemExit(0 if ok else 1)"; then
        say "no usable CUDA device; run with --dry-run on a machine without one"
        exit 2
    fi
    timeout "$(cap 15)" nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv \
        >"$LOG/nvidia-smi.csv" 2>&1
    cat "$LOG/nvidia-smi.csv"
fi

# -- 3. tests ------------------------------------------------------------------------------------------
if [ "$DRY" = 1 ]; then
    say "tests: tests/test_cuda_kernels.py (no GPU needed) and the collection of the device tests"
    timeout "$(cap 600)" "$PY" -m pytest -q -p no:cacheprovider tests/test_cuda_kernels.py \
        >"$LOG/test_cuda_kernels.log" 2>&1 || { STATUS=1; say "tests/test_cuda_kernels.py FAILED"; }
    tail -n 3 "$LOG/test_cuda_kernels.log"
    # shellcheck disable=SC2086
    timeout "$(cap 60)" "$PY" -m pytest -q -p no:cacheprovider $TESTS >"$LOG/test_gpu.log" 2>&1 \
        || { STATUS=1; say "the device tests did not collect"; }
    tail -n 1 "$LOG/test_gpu.log"
else
    say "tests: $TESTS"
    # shellcheck disable=SC2086
    timeout "$(cap 150)" "$PY" -m pytest -q -p no:cacheprovider -m gpu -rs --junitxml="$LOG/tests.xml" $TESTS \
        >"$LOG/test_gpu.log" 2>&1
    tail -n 15 "$LOG/test_gpu.log"
    # shellcheck disable=SC2086
    timeout "$(cap 60)" "$PY" -m pytest -q -p no:cacheprovider --collect-only -m gpu $TESTS 2>/dev/null \
        | grep '^tests/' | sort >"$LOG/all.txt"
    # from the report: the tests that passed, and those to run again (failed, or skipped because the
    # device was left unusable, or never reported: a crash)
    "$PY" - "$LOG/tests.xml" "$LOG/all.txt" "$RERUN_MAX" >"$LOG/again.txt" 2>"$LOG/report.txt" <<'EOF'
import sys
import xml.etree.ElementTree as ET

xml_path, all_path, cap = sys.argv[1], sys.argv[2], int(sys.argv[3])
collected = [ln.strip() for ln in open(all_path) if ln.strip()]
try:
    cases = ET.parse(xml_path).getroot().iter("testcase")
except (OSError, ET.ParseError):
    cases = []
seen, passed, skipped, again = set(), 0, 0, []
for c in cases:
    node = c.get("classname", "").replace(".", "/") + ".py::" + c.get("name", "")
    seen.add(node)
    bad = c.find("failure") is not None or c.find("error") is not None
    skip = c.find("skipped")
    if bad or (skip is not None and "unusable" in (skip.get("message") or "")):
        again.append(node)
    elif skip is not None:
        skipped += 1
    else:
        passed += 1
again += [node for node in collected if node not in seen]
print("\n".join(again[:cap]))
print(f"{passed} {skipped} {len(again)} {max(0, len(again) - cap)}", file=sys.stderr)
EOF
    read -r PASSED SKIPPED NAGAIN DROPPED <"$LOG/report.txt" || { PASSED=0; SKIPPED=0; NAGAIN=0; DROPPED=0; }
    FAILED=$DROPPED
    while read -r TEST; do
        [ -n "$TEST" ] || continue
        if [ $(( START + BUDGET - $(date +%s) )) -lt 60 ]; then
            FAILED=$((FAILED + 1)); echo "NOT RERUN (time) $TEST" >>"$LOG/test_gpu.log"; continue
        fi
        if timeout "$(cap 60)" "$PY" -m pytest -q -p no:cacheprovider -m gpu -rs "$TEST" >"$LOG/one.log" 2>&1; then
            if grep -q " passed" "$LOG/one.log"; then
                PASSED=$((PASSED + 1)); echo "PASSED alone $TEST" >>"$LOG/test_gpu.log"
            else
                SKIPPED=$((SKIPPED + 1)); echo "SKIPPED alone $TEST" >>"$LOG/test_gpu.log"
                grep -i "skip" "$LOG/one.log" | tail -n 2 >>"$LOG/test_gpu.log"
            fi
        else
            FAILED=$((FAILED + 1)); echo "FAILED alone $TEST" >>"$LOG/test_gpu.log"
            tail -n 40 "$LOG/one.log" | sed 's/^/    /' >>"$LOG/test_gpu.log"
        fi
    done <"$LOG/again.txt"
    say "device tests: $PASSED passed, $FAILED failed, $SKIPPED skipped ($NAGAIN run again alone, at most $RERUN_MAX)"
    grep -E "^(FAILED|SKIPPED) alone|^NOT RERUN" "$LOG/test_gpu.log" | head -n 40
    { [ "$FAILED" = 0 ] && [ "$PASSED" -gt 0 ]; } || STATUS=1
fi

# -- 4. static resource report (NVRTC; no GPU needed) -----------------------------------------------------
say "resource report"
timeout "$(cap 45)" "$PY" -m sgmc.backends.cupy.report sm_90 >"$LOG/resources.md" 2>&1 \
    || { STATUS=1; say "resource report FAILED"; }
tail -n 2 "$LOG/resources.md"

# -- 5. benchmarks: what is left of the budget, less 10 s for the copies ---------------------------------------
say "benchmarks"
BENCH_ARGS=()
[ "$DRY" = 1 ] && BENCH_ARGS+=(--dry-run)
[ -n "$OUTDIR" ] && BENCH_ARGS+=(--out "$OUTDIR")
[ "$DRY" = 1 ] && [ -z "$OUTDIR" ] && BENCH_ARGS+=(--out "$LOG")
BENCH_LEFT=$(( START + BUDGET - $(date +%s) - 10 ))
if [ "$BENCH_LEFT" -lt 30 ]; then
    STATUS=1; say "benchmarks NOT RUN: ${BENCH_LEFT} s left of the ${BUDGET} s budget"
else
    timeout "$BENCH_LEFT" "$PY" asv_benchmarks/gpu_bench.py "${BENCH_ARGS[@]}" 2>&1 | tee "$LOG/bench.log"
    [ "${PIPESTATUS[0]}" = 0 ] || { STATUS=1; say "benchmarks FAILED or timed out (${BENCH_LEFT} s)"; }
fi

if [ -n "$OUTDIR" ]; then  # a few files (a device machine returns at most 8)
    cp "$LOG/test_gpu.log" "$LOG/bench.log" "$LOG/resources.md" "$OUTDIR"/ 2>/dev/null
    tar -czf "$OUTDIR/gpu_check_logs.tar.gz" -C "$LOG" --exclude=./site . 2>/dev/null
fi
say "done (status $STATUS); logs in $LOG${OUTDIR:+ and $OUTDIR}"
exit $STATUS
