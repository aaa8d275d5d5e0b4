#!/usr/bin/env bash
# The CCA CUDA ops on the GPU machine, in one call: builds zayac and the tests (make -j16, with
# DEPS_ROOT passed through when set: a folder of Debian packages unpacked with dpkg -x), runs
# tests/test_cuda_ops_cca (per-case errors against the CPU ops, then the bench-small timing of
# cca_conv fwd+bwd), the same test without the timing under compute-sanitizer memcheck and
# racecheck when /usr/local/cuda/bin/compute-sanitizer exists, and last the whole suite
# (make -j16 all test). Logs land in $OUT (default /tmp/gpu_cucca): build.log, cca.log,
# memcheck.log, racecheck.log, suite.log, summary.txt. Exit status 0 when every step passed.
# Usage, from the zayac root: [DEPS_ROOT=/path/to/unpacked/debs] [OUT=dir] bash dev/scripts/gpu_cucca.sh
set -u
export PATH=/usr/local/cuda/bin:$PATH OMP_WAIT_POLICY=passive
OUT=${OUT:-/tmp/gpu_cucca}
mkdir -p "$OUT"
: >"$OUT/summary.txt"
MK=(make -j16)
if [ -n "${DEPS_ROOT:-}" ]; then
    MK+=("DEPS_ROOT=$DEPS_ROOT")
    L=$DEPS_ROOT/usr/lib/x86_64-linux-gnu
    export LD_LIBRARY_PATH=$L:$L/openblas-openmp:${LD_LIBRARY_PATH:-}
fi
BIN=./build/tests/test_cuda_ops_cca
SAN=/usr/local/cuda/bin/compute-sanitizer
rc_all=0

# step NAME LIMIT CMD...: runs CMD with a time limit, output to $OUT/NAME.log
step() {
    local name=$1 limit=$2
    shift 2
    local t0=$(date +%s)
    timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    echo "$name: rc=$rc, $(($(date +%s) - t0))s" | tee -a "$OUT/summary.txt"
    [ $rc -ne 0 ] && rc_all=1
    return $rc
}

{
    date -u +%Y-%m-%dT%H:%M:%SZ
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
    nvcc --version | tail -1
} >"$OUT/machine.log" 2>&1

if ! step build 600 "${MK[@]}" all "$BIN"; then
    tail -40 "$OUT/build.log"
    exit 1
fi
step cca 600 "$BIN"
if [ -x "$SAN" ]; then
    step memcheck 900 env CCA_TEST_QUICK=1 "$SAN" --tool memcheck --error-exitcode 3 "$BIN"
    step racecheck 900 env CCA_TEST_QUICK=1 "$SAN" --tool racecheck --racecheck-report all \
        --error-exitcode 3 "$BIN"
else
    echo "compute-sanitizer: not found at $SAN, skipped" | tee -a "$OUT/summary.txt"
fi
step suite 1800 "${MK[@]}" all test

echo "=== test_cuda_ops_cca"
grep -E "^  [a-z]|err|exact|identical|ms |worst|PASSED|FAILED|SKIPPED" "$OUT/cca.log" | cut -c1-200
echo "=== sanitizers"
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|Invalid|hazard" "$OUT/memcheck.log" \
    "$OUT/racecheck.log" 2>/dev/null | head -20
echo "=== suite"
tail -5 "$OUT/suite.log"
echo "=== steps"
cat "$OUT/summary.txt"
exit $rc_all
