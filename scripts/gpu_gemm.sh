#!/usr/bin/env bash
# The GPU GEMM checks of issue 4 on the lent GPU machine: tests/test_cuda_gemm (cuda_gemm and the
# grouped expert GEMMs against the CPU ops_matmul) and its timing mode (per-expert cuBLASLt calls
# against cublasGemmGroupedBatchedEx on bench-small's expert shapes). Run from the zayac root after
# `make DEPS_ROOT=...` (BUILD=dir if not build/). SANITIZE=1 also runs the tests under
# compute-sanitizer (slow). Logs land in $OUT: test_cuda_gemm.log, gemm_grouped_time.log and,
# with SANITIZE=1, test_cuda_gemm_memcheck.log; the last lines of each are printed.
set -u
OUT=${OUT:-/tmp/gpu_gemm_out}
BUILD=${BUILD:-build}
T=$BUILD/tests/test_cuda_gemm
mkdir -p "$OUT"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
if [ ! -x "$T" ]; then
    echo "$T: not built (run make DEPS_ROOT=... first)" | tee "$OUT/test_cuda_gemm.log"
    exit 1
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >"$OUT/gpu.txt" 2>&1
timeout 300 "$T" >"$OUT/test_cuda_gemm.log" 2>&1
rc_test=$?
echo "== test_cuda_gemm rc=$rc_test"
tail -n 12 "$OUT/test_cuda_gemm.log"
if grep -q '^\[  SKIPPED \]' "$OUT/test_cuda_gemm.log"; then
    echo "WARNING: GPU tests were skipped (no GPU visible to the test)"
    rc_test=2
fi
timeout 120 "$T" --time >"$OUT/gemm_grouped_time.log" 2>&1
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
[ $rc_test -eq 0 ] && [ $rc_time -eq 0 ] && [ $rc_san -eq 0 ]
