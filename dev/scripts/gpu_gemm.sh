#!/usr/bin/env bash
# The GPU GEMM checks on the lent GPU machine: tests/test_cuda_gemm (gemm.h against the CPU
# ops_matmul), dev/test_gemm_grouped (the expert GEMM variants of dev/) and dev/time_gemm_grouped
# (their timings on bench-small's expert shapes). Run from the zayac root after
# `make DEPS_ROOT=... tests dev` (BUILD=dir if not build/). SANITIZE=1 also runs the tests under
# compute-sanitizer (slow). Logs land in $OUT: test_cuda_gemm.log, test_gemm_grouped.log,
# gemm_grouped_time.log and, with SANITIZE=1, test_cuda_gemm_memcheck.log; the last lines of each
# are printed.
set -u
OUT=${OUT:-/tmp/gpu_gemm_out}
BUILD=${BUILD:-build}
T=$BUILD/tests/test_cuda_gemm
G=$BUILD/dev/test_gemm_grouped
TIME=$BUILD/dev/time_gemm_grouped
mkdir -p "$OUT"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
for b in "$T" "$G" "$TIME"; do
    if [ ! -x "$b" ]; then
        echo "$b: not built (run make DEPS_ROOT=... tests dev first)" | tee "$OUT/test_cuda_gemm.log"
        exit 1
    fi
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >"$OUT/gpu.txt" 2>&1
timeout 300 "$T" >"$OUT/test_cuda_gemm.log" 2>&1
rc_test=$?
echo "== test_cuda_gemm rc=$rc_test"
tail -n 12 "$OUT/test_cuda_gemm.log"
if grep -q '^\[  SKIPPED \]' "$OUT/test_cuda_gemm.log"; then
    echo "WARNING: GPU tests were skipped (no GPU visible to the test)"
    rc_test=2
fi
timeout 300 "$G" >"$OUT/test_gemm_grouped.log" 2>&1
rc_grouped=$?
echo "== dev/test_gemm_grouped rc=$rc_grouped"
tail -n 6 "$OUT/test_gemm_grouped.log"
timeout 120 "$TIME" >"$OUT/gemm_grouped_time.log" 2>&1
rc_time=$?
echo "== grouped GEMM timing rc=$rc_time"
cat "$OUT/gemm_grouped_time.log"
rc_san=0
if [ "${SANITIZE:-0}" = 1 ] && command -v compute-sanitizer >/dev/null; then
    timeout 400 compute-sanitizer --tool memcheck --error-exitcode 3 "$T" \
        >"$OUT/test_cuda_gemm_memcheck.log" 2>&1
    rc_san=$?
    echo "== compute-sanitizer memcheck rc=$rc_san"
    tail -n 6 "$OUT/test_cuda_gemm_memcheck.log"
fi
[ $rc_test -eq 0 ] && [ $rc_grouped -eq 0 ] && [ $rc_time -eq 0 ] && [ $rc_san -eq 0 ]
