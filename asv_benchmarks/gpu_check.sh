#!/usr/bin/env bash
# The GPU check of docs/gpu.md in one command: install, tests/test_gpu.py (each test in a process of
# its own), the static resource report, and the GPU benchmarks (asv_benchmarks/gpu_bench.py), which
# write docs/results/gpu_check.json. Run from anywhere; it works in the repository root.
#
#   asv_benchmarks/gpu_check.sh            on a machine with an NVIDIA GPU (about 4 to 5 minutes)
#   asv_benchmarks/gpu_check.sh --dry-run  on any machine: every step that needs no GPU (NumPy only)
#   options: --out DIR (copy the results file and the logs there; default $OUT when set),
#            --no-install (use the Python environment as it is)
#
# Installing: from the project's own files. With network access, pip install -e ".[gpu]" plus the
# test tools; without it (a device machine that reaches nothing), the wheels in .whl/ if any
# (pip install --no-index), then sgmc itself with --no-deps --no-build-isolation. A CuPy already
# installed is kept (the image may hold cupy-cuda13x; installing cupy-cuda12x beside it would break
# both). The script stops at once when sgmc, CuPy or pytest do not import afterwards.
# Exit status: 0 when every step passed, 1 when a test or benchmark failed, 2 when set-up failed.
set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)
DRY=0
INSTALL=1
OUTDIR=${OUT:-}
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) DRY=1 ;;
        --no-install) INSTALL=0 ;;
        --out) OUTDIR=$2; shift ;;
        *) echo "gpu_check: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
LOG=$(mktemp -d "${TMPDIR:-/tmp}/sgmc-gpu-check.XXXXXX")
[ -n "$OUTDIR" ] && mkdir -p "$OUTDIR"
STATUS=0
START=$(date +%s)
say() { echo "gpu_check [$(( $(date +%s) - START )) s]: $*"; }

# -- 1. install ---------------------------------------------------------------------------------------
if [ "$INSTALL" = 1 ]; then
    say "installing from the project's files"
    if [ -d .whl ]; then
        $PY -m pip install -q --no-index --no-deps --find-links .whl .whl/*.whl >"$LOG/pip-wheels.log" 2>&1 \
            || say "the wheels in .whl did not all install (see pip-wheels.log)"
    fi
    if $PY -c "import cupy" 2>/dev/null; then
        EXTRAS=""   # keep the CuPy that is there
    else
        EXTRAS="[gpu]"
    fi
    if ! timeout 120 $PY -m pip install -q --retries 0 --timeout 10 -e ".$EXTRAS" pytest hypothesis \
            array-api-strict scipy >"$LOG/pip.log" 2>&1; then
        say "pip could not fetch the dependencies (offline?); installing sgmc alone"
        $PY -m pip install -q --no-deps --no-build-isolation -e . >>"$LOG/pip.log" 2>&1 \
            || export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
    fi
fi
MISSING=$($PY - <<'EOF'
import importlib
need = ["numpy", "scipy", "array_api_compat", "pytest", "sgmc"]
print(" ".join(m for m in need if importlib.util.find_spec(m) is None))
EOF
)
if [ -n "$MISSING" ]; then
    say "missing after the install: $MISSING (carry their wheels in .whl/)"
    exit 2
fi
$PY -c "import array_api_strict" 2>/dev/null || say "array-api-strict is missing: tests that use it skip"

# -- 2. the device --------------------------------------------------------------------------------------
if [ "$DRY" = 0 ]; then
    if ! $PY -c "
from sgmc.backends.cupy import device_status
ok, why = device_status()
print('device:', 'usable' if ok else why)
raise SystemExit(0 if ok else 1)"; then
        say "no usable CUDA device; run with --dry-run on a machine without one"
        exit 2
    fi
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv >"$LOG/nvidia-smi.csv" 2>&1
    cat "$LOG/nvidia-smi.csv"
fi

# -- 3. tests ------------------------------------------------------------------------------------------
# Without a GPU: the CUDA source checks (NVRTC, the emulated launch grid) and the collection of the
# device tests (they skip). With one: every device test in a process of its own, so a sticky CUDA
# error fails that test alone.
if [ "$DRY" = 1 ]; then
    say "tests: tests/test_cuda_kernels.py (no GPU needed) and the collection of tests/test_gpu.py"
    $PY -m pytest -q -p no:cacheprovider tests/test_cuda_kernels.py >"$LOG/test_cuda_kernels.log" 2>&1 \
        || { STATUS=1; say "tests/test_cuda_kernels.py FAILED"; }
    tail -n 3 "$LOG/test_cuda_kernels.log"
    $PY -m pytest -q -p no:cacheprovider tests/test_gpu.py >"$LOG/test_gpu.log" 2>&1 \
        || { STATUS=1; say "tests/test_gpu.py did not collect"; }
    tail -n 1 "$LOG/test_gpu.log"
else
    # one process first (each test starts with a device-health check); then every test that failed
    # or was skipped runs again in a process of its own, so that a sticky CUDA error of one test
    # cannot hide the others' results
    say "tests: tests/test_gpu.py"
    timeout 200 $PY -m pytest -v -p no:cacheprovider -m gpu -rs tests/test_gpu.py >"$LOG/test_gpu.log" 2>&1
    # every collected test that did not pass (failed, skipped, or never reported after a crash)
    $PY -m pytest -q -p no:cacheprovider --collect-only -m gpu tests/test_gpu.py 2>/dev/null \
        | grep '^tests/test_gpu.py::' | sort >"$LOG/all.txt"
    grep -E "^tests/test_gpu.py::\S+ PASSED" "$LOG/test_gpu.log" | awk '{print $1}' | sort >"$LOG/passed.txt"
    comm -23 "$LOG/all.txt" "$LOG/passed.txt" >"$LOG/again.txt"
    PASSED=$(grep -cE "^tests/test_gpu.py::\S+ PASSED" "$LOG/test_gpu.log")
    FAILED=0; SKIPPED=0
    while read -r TEST; do
        if timeout 90 $PY -m pytest -q -p no:cacheprovider -m gpu -rs "$TEST" >"$LOG/one.log" 2>&1; then
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
    say "tests/test_gpu.py: $PASSED passed, $FAILED failed, $SKIPPED skipped (failed and skipped ones rerun alone)"
    grep -E "^(FAILED|SKIPPED) alone" "$LOG/test_gpu.log" | head -n 40
    { [ "$FAILED" = 0 ] && [ "$PASSED" -gt 0 ]; } || STATUS=1
fi

# -- 4. static resource report (NVRTC; no GPU needed) -----------------------------------------------------
say "resource report"
$PY -m sgmc.backends.cupy.report sm_90 >"$LOG/resources.md" 2>&1 || { STATUS=1; say "resource report FAILED"; }
tail -n 2 "$LOG/resources.md"

# -- 5. benchmarks -------------------------------------------------------------------------------------
say "benchmarks"
BENCH_ARGS=()
[ "$DRY" = 1 ] && BENCH_ARGS+=(--dry-run)
[ -n "$OUTDIR" ] && BENCH_ARGS+=(--out "$OUTDIR")
[ "$DRY" = 1 ] && [ -z "$OUTDIR" ] && BENCH_ARGS+=(--out "$LOG")
timeout 240 $PY asv_benchmarks/gpu_bench.py "${BENCH_ARGS[@]}" 2>&1 | tee "$LOG/bench.log"
[ "${PIPESTATUS[0]}" = 0 ] || { STATUS=1; say "benchmarks FAILED or timed out"; }

if [ -n "$OUTDIR" ]; then  # a few files (a device machine returns at most 8)
    cp "$LOG/test_gpu.log" "$LOG/bench.log" "$LOG/resources.md" "$OUTDIR"/ 2>/dev/null
    tar -czf "$OUTDIR/gpu_check_logs.tar.gz" -C "$LOG" . 2>/dev/null
fi
say "done (status $STATUS); logs in $LOG${OUTDIR:+ and $OUTDIR}"
exit $STATUS
