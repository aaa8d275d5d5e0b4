#!/usr/bin/env bash
# The CUDA router / MoE / EDA op tests on the GPU machine: builds zayac and every test
# (make all test: the whole suite runs once on the way, its log kept), then runs
# build/tests/test_cuda_ops_moe (CUDA ops against the CPU ops, plus the dispatch + gather + combine
# timing at N=16384, E=16, D=1024) and, when compute-sanitizer is present, the same binary under its
# memcheck and racecheck tools. Run from the zayac root; DEPS_ROOT (unpacked Debian packages, see
# the Makefile) is passed to make when set. Logs land in $OUT when set (else /tmp/gpu_cumoe_out):
# build.log, test_cuda_ops_moe.log, memcheck.log, racecheck.log, summary.txt.
# Exit status 0 when the build, the test and the sanitizers all passed.
set -u
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/gpu_cumoe_out}
mkdir -p "$OUT"
: >"$OUT/summary.txt"
note() { echo "$*" | tee -a "$OUT/summary.txt"; }
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
MAKEARGS=(-j16)
if [ -n "${DEPS_ROOT:-}" ]; then
    MAKEARGS+=(DEPS_ROOT="$DEPS_ROOT")
    L=$DEPS_ROOT/usr/lib/x86_64-linux-gnu
    export LD_LIBRARY_PATH=$L:$L/openblas-openmp:${LD_LIBRARY_PATH:-}
fi
T=build/tests/test_cuda_ops_moe
rc_all=0

{
    date -u +%Y-%m-%dT%H:%M:%SZ
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
    nvcc --version | tail -1
} >"$OUT/machine.log" 2>&1

make "${MAKEARGS[@]}" all test >"$OUT/build.log" 2>&1
rc=$?
note "make all test rc=$rc: $(tail -1 "$OUT/build.log")"
[ $rc -ne 0 ] && rc_all=1
if [ ! -x "$T" ]; then
    note "$T was not built"
    tail -30 "$OUT/build.log"
    exit 1
fi

timeout 300 "$T" >"$OUT/test_cuda_ops_moe.log" 2>&1
rc=$?
note "test_cuda_ops_moe rc=$rc: $(grep -E '^\[  (PASSED|FAILED) +\] [0-9]+ test|SKIPPED TEST' "$OUT/test_cuda_ops_moe.log" | tr '\n' ' ')"
grep -E "worst error|FAILURE|not written|over the tolerance|^    timing|us device|wall per" \
    "$OUT/test_cuda_ops_moe.log" | tee -a "$OUT/summary.txt"
[ $rc -ne 0 ] && rc_all=1
if grep -q '^\[  SKIPPED \]' "$OUT/test_cuda_ops_moe.log"; then
    note "WARNING: tests were skipped (no GPU visible to the test)"
    rc_all=1
fi

if command -v compute-sanitizer >/dev/null; then
    for tool in memcheck racecheck; do
        extra=()
        [ $tool = memcheck ] && extra=(--leak-check full)
        timeout 600 compute-sanitizer --tool $tool "${extra[@]}" --error-exitcode 99 "$T" \
            >"$OUT/$tool.log" 2>&1
        rc=$?
        note "$tool rc=$rc: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool.log" | tail -1)"
        [ $rc -ne 0 ] && rc_all=1
    done
else
    note "compute-sanitizer not found: sanitizer runs skipped"
fi
note "overall rc=$rc_all"
exit $rc_all
