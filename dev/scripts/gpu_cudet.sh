#!/usr/bin/env bash
# Deterministic GPU backward (attention dq without atomics, embedding table gradient through an
# id sort) on the lent GPU machine, in one call: builds test_cuda_attention and
# test_cuda_elementwise (Debian packages of $DEBS unpacked with dpkg -x, or an unpacked
# DEPS_ROOT, as gpu_cuda_tests.sh does), writes ptxas's register/spill report of attention.cu and
# elementwise.cu, runs both tests (correctness against the CPU ops, bitwise repeatability), times
# the attention backward's two dq paths (dev/test_attention_variants --bench), then compute-sanitizer:
# memcheck + racecheck on the attention's small shapes, memcheck on the embedding tests.
# Every step runs even when an earlier one failed; each has a time limit.
# Usage (from the zayac root): DEBS=.ext/debs bash dev/scripts/gpu_cudet.sh
# Logs land in $OUT (default /tmp/cudet_out): build.log, ptxas.log, <step>.log, summary.txt.
# Exit status 0 when every step passed.
set -u
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/cudet_out}
mkdir -p "$OUT"
NJ=$(nproc)
rc_all=0
T0=$(date +%s)
: >"$OUT/summary.txt"
note() { echo "$*" | tee -a "$OUT/summary.txt"; }

# step NAME LIMIT CMD...: runs CMD with a time limit, output to $OUT/NAME.log
step() {
    local name=$1 limit=$2
    shift 2
    local t
    t=$(date +%s)
    timeout --kill-after=5 "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    note "$name: rc=$rc, $(($(date +%s) - t))s"
    [ $rc -ne 0 ] && rc_all=1
    return $rc
}

if [ -z "${DEPS_ROOT:-}" ]; then
    DEPS_ROOT=/tmp/zy_deps
    mkdir -p "$DEPS_ROOT"
    for f in "${DEBS:-.ext/debs}"/*.deb; do dpkg -x "$f" "$DEPS_ROOT"; done
fi
L=$DEPS_ROOT/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$L:$L/openblas-openmp:${LD_LIBRARY_PATH:-}
export OMP_WAIT_POLICY=passive
{
    date -u +%Y-%m-%dT%H:%M:%SZ
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
    nvcc --version | tail -1
} >"$OUT/machine.log" 2>&1

ATT=build/tests/test_cuda_attention
VAR=build/dev/test_attention_variants # every kernel shape, --bench, the sanitizer set
ELEM=build/tests/test_cuda_elementwise
step build 300 make -j"$NJ" DEPS_ROOT="$DEPS_ROOT" CUDA=1 $ATT $VAR $ELEM
if [ ! -x $ATT ] || [ ! -x $VAR ] || [ ! -x $ELEM ]; then
    tail -30 "$OUT/build.log"
    exit 1
fi

# registers and spills (the build itself does not ask ptxas for them)
for f in src/ops/cuda/attention.cu src/ops/cuda/elementwise.cu; do
    echo "== $f"
    nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Isrc -DZY_HAVE_CUDA -Xptxas -v \
        -c "$f" -o /tmp/cudet_ptxas_probe.o 2>&1 | grep -E "Compiling entry|registers|spill" |
        paste - - - | sed -E 's/ptxas info *: //g; s/ +/ /g' | cut -c1-260
done >"$OUT/ptxas.log" 2>&1
note "spills: $(grep -cE '[1-9][0-9]* bytes spill' "$OUT/ptxas.log") kernels with nonzero spill lines"

step attention 240 $ATT
step elementwise 240 $ELEM
step variants 240 $VAR
step bench 120 $VAR --bench
if command -v compute-sanitizer >/dev/null; then
    step att_memcheck 180 env ATTN_FILTER=test_sanitize \
        compute-sanitizer --tool memcheck --error-exitcode 3 $VAR
    step att_racecheck 240 env ATTN_FILTER=test_sanitize \
        compute-sanitizer --tool racecheck --racecheck-report all --error-exitcode 3 $VAR
    step elem_memcheck 300 env 'ELEM_FILTER=test_embed*' \
        compute-sanitizer --tool memcheck --leak-check full --error-exitcode 3 $ELEM
else
    note "compute-sanitizer not found"
    rc_all=1
fi

# --- what the reply shows
echo "=== attention (per shape, repeat counts)"
grep -E "B=|worst|PASSED|FAILED|SKIPPED|ERROR|error|failed" "$OUT/attention.log" | cut -c1-260
echo "=== elementwise"
grep -E "embed|worst|PASSED|FAILED|SKIPPED|ERROR|error|failed" "$OUT/elementwise.log" |
    cut -c1-260
echo "=== bench (backward: deterministic dq vs atomic dq)"
grep -vE "^RESULT" "$OUT/bench.log"
echo "=== sanitizers"
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED|Invalid|hazard" \
    "$OUT"/att_memcheck.log "$OUT"/att_racecheck.log "$OUT"/elem_memcheck.log 2>/dev/null | head -30
echo "=== ptxas (attention backward, dq, embedding kernels)"
grep -E "bwd_kernel|dq_kernel|embed_seg" "$OUT/ptxas.log" | sed -E 's/EEvPK.*sm_90a.//' | head -30
note "overall rc=$rc_all, $(($(date +%s) - T0))s"
exit $rc_all
