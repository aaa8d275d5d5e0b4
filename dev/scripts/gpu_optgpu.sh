#!/usr/bin/env bash
# The GPU optimiser checks on the lent GPU machine: builds zayac and its tests (make
# -j16 all test, which also runs the CPU suite; DEPS_ROOT passed through when set), runs
# build/tests/test_cuda_optim (AdamW, Muon, batching, clipping, state round trip and balancing on
# CUDA against the CPU, then the bench-small timing of one AdamW and one Muon step), and the same
# test without the timing under compute-sanitizer memcheck when it is installed. Run from the
# zayac root. Logs land in $OUT (default /tmp/gpu_optgpu_out): build.log, test_cuda_optim.log,
# memcheck.log, summary.txt. Exit status 0 when every step passed and no GPU test was skipped.
set -u
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/gpu_optgpu_out}
BUILD=${BUILD:-build}
mkdir -p "$OUT"
note() { echo "$*" | tee -a "$OUT/summary.txt"; }
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
DEPS=()
if [ -n "${DEPS_ROOT:-}" ]; then
    DEPS=(DEPS_ROOT="$DEPS_ROOT")
    L=$DEPS_ROOT/usr/lib/x86_64-linux-gnu
    export LD_LIBRARY_PATH=$L:$L/openblas-openmp:${LD_LIBRARY_PATH:-}
fi
{
    date -u +%Y-%m-%dT%H:%M:%SZ
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
    nvcc --version | tail -1
} >"$OUT/machine.log" 2>&1

make -j16 "${DEPS[@]}" BUILD="$BUILD" all test >"$OUT/build.log" 2>&1
rc_build=$?
note "make all test rc=$rc_build: $(grep -E '^[0-9]+ passed' "$OUT/build.log" | tail -1)"
[ $rc_build -ne 0 ] && tail -n 30 "$OUT/build.log"
T=$BUILD/tests/test_cuda_optim
if [ ! -x "$T" ]; then
    note "$T: not built"
    exit 1
fi

timeout 300 "$T" >"$OUT/test_cuda_optim.log" 2>&1
rc_test=$?
note "test_cuda_optim rc=$rc_test"
grep -vE '^\[ +(RUN|OK) +\]' "$OUT/test_cuda_optim.log" | tail -n 40
if grep -q '^\[  SKIPPED \]' "$OUT/test_cuda_optim.log"; then
    note "WARNING: GPU tests were skipped (no GPU visible to the test)"
    rc_test=2
fi

rc_san=0
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ -x "$SAN" ]; then
    ZAYAC_OPTGPU_NO_BENCH=1 timeout 300 "$SAN" --tool memcheck --error-exitcode 3 "$T" \
        >"$OUT/memcheck.log" 2>&1
    rc_san=$?
    note "compute-sanitizer memcheck rc=$rc_san: $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
    [ $rc_san -ne 0 ] && tail -n 20 "$OUT/memcheck.log"
else
    note "compute-sanitizer not found: memcheck skipped"
fi
[ $rc_build -eq 0 ] && [ $rc_test -eq 0 ] && [ $rc_san -eq 0 ]
