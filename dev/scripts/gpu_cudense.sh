#!/usr/bin/env bash
# The dense CUDA ops of ops.h (src/ops/cuda/ops_dense.cu) on the lent GPU machine, in one call:
# builds everything and runs the whole suite (make all test; DEPS_ROOT is passed through when set),
# records nvcc's register/spill report of ops_dense.cu, runs tests/test_cuda_ops_dense (every op
# against its CPU op, then the printed bandwidth of rmsnorm/resscale/add/bias at bench sizes), then
# the same test under compute-sanitizer memcheck (without the benchmark) and racecheck on the
# column-sum kernels (bias_bwd, resscale_bwd), when compute-sanitizer is there.
# Usage (from the zayac root): [DEPS_ROOT=dir] [OUT=dir] bash dev/scripts/gpu_cudense.sh
# Logs land in $OUT (default /tmp/gpu_cudense_out): build.log (make all test), ptxas.log,
# test_cuda_ops_dense.log, memcheck.log, racecheck.log, summary.txt. Exit status 0 when the build,
# the test and the sanitizers passed (make test's own failures are reported, not fatal: other
# owners' tests).
set -u
export PATH=/usr/local/cuda/bin:$PATH
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
OUT=${OUT:-/tmp/gpu_cudense_out}
mkdir -p "$OUT"
T=build/tests/test_cuda_ops_dense
rc_all=0
note() { echo "$*" | tee -a "$OUT/summary.txt"; }
: >"$OUT/summary.txt"

DEPS=()
if [ -n "${DEPS_ROOT:-}" ]; then
    DEPS=("DEPS_ROOT=$DEPS_ROOT")
    L=$DEPS_ROOT/usr/lib/x86_64-linux-gnu
    export LD_LIBRARY_PATH=$L:$L/openblas-openmp:${LD_LIBRARY_PATH:-}
fi
{
    date -u +%Y-%m-%dT%H:%M:%SZ
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
    nvcc --version | tail -1
} >"$OUT/machine.log" 2>&1

# the library and the test binary first, so that a failing test elsewhere cannot hide our build
make -j16 "${DEPS[@]}" all "$T" build/tests/test_ops_backends >"$OUT/build.log" 2>&1
rc=$?
note "build rc=$rc"
if [ $rc -ne 0 ]; then
    tail -30 "$OUT/build.log"
    exit 1
fi
make -j16 "${DEPS[@]}" all test >>"$OUT/build.log" 2>&1
rc=$?
note "make test rc=$rc ($(tail -1 "$OUT/build.log"))"

nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Isrc -DZY_HAVE_CUDA -Xptxas -v \
    -c src/ops/cuda/ops_dense.cu -o /tmp/gpu_cudense_ptxas.o 2>&1 |
    grep -E "Compiling entry|registers|spill" >"$OUT/ptxas.log"
note "ops_dense.cu kernels with spills: $(grep -cE '[1-9][0-9]* bytes spill' "$OUT/ptxas.log")"

timeout 600 "$T" >"$OUT/test_cuda_ops_dense.log" 2>&1
rc=$?
note "test_cuda_ops_dense rc=$rc: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) \]' \
    "$OUT/test_cuda_ops_dense.log" | head -3 | tr '\n' ' ')"
grep -E "worst|BENCH|FAILURE|Failure|fatal|not written" "$OUT/test_cuda_ops_dense.log" |
    head -40 | tee -a "$OUT/summary.txt"
[ $rc -ne 0 ] && rc_all=1
if grep -q '^\[  SKIPPED \]' "$OUT/test_cuda_ops_dense.log"; then
    note "WARNING: tests were skipped (no GPU visible to the test?)"
    rc_all=1
fi

if command -v compute-sanitizer >/dev/null; then
    ZY_SKIP_BENCH=1 timeout 900 compute-sanitizer --tool memcheck --leak-check full \
        --error-exitcode 99 "$T" >"$OUT/memcheck.log" 2>&1
    rc=$?
    note "memcheck rc=$rc: $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
    [ $rc -ne 0 ] && rc_all=1
    : >"$OUT/racecheck.log"
    for t in bias_bwd resscale; do # the column-sum kernels, through the op table
        OH_FILTER="cuda $t(*" timeout 600 compute-sanitizer --tool racecheck --error-exitcode 99 \
            build/tests/test_ops_backends >>"$OUT/racecheck.log" 2>&1
        rc=$?
        note "racecheck $t rc=$rc: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' \
            "$OUT/racecheck.log" | tail -1)"
        [ $rc -ne 0 ] && rc_all=1
    done
else
    note "compute-sanitizer not found: sanitizer runs skipped"
fi
note "overall rc=$rc_all"
exit $rc_all
