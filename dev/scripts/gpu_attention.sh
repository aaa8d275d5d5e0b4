#!/usr/bin/env bash
# The CUDA attention on the lent GPU machine, in one call: build zayac (Debian packages for cJSON,
# cmocka, OpenBLAS and PCRE2 travel as .debs and are unpacked into a folder of their own), run
# tests/test_cuda_attention and dev/test_attention_variants (plain, then the variants' small
# shapes under compute-sanitizer memcheck and racecheck), time every kernel shape
# (dev/test_attention_variants --bench) and torch SDPA
# (scripts/bench_attention_torch.py), and print the comparison. Every step runs even when an
# earlier one failed; each has a time limit. Logs land in $OUT (default /tmp/attn_out).
# Usage, from the zayac tree: DEBS=../debs-attn bash dev/scripts/gpu_attention.sh
set -u
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/attn_out}
DEBS=${DEBS:-../debs-attn}
BUDGET_S=${BUDGET_S:-270} # the whole script, so the logs come back before the call's limit
mkdir -p "$OUT"
T0=$(date +%s)
SUMMARY=$OUT/summary.md
: >"$SUMMARY"

# step NAME LIMIT LOG CMD...: runs CMD with a time limit, appending its output to LOG
step() {
    local name=$1 limit=$2 log=$3
    shift 3
    local now=$(($(date +%s) - T0))
    if [ $((now + 10)) -ge "$BUDGET_S" ]; then
        echo "- $name: skipped (out of time at ${now}s)" | tee -a "$SUMMARY"
        return 99
    fi
    [ $((now + limit)) -gt "$BUDGET_S" ] && limit=$((BUDGET_S - now))
    echo "=== $name (limit ${limit}s)" >>"$log"
    timeout --kill-after=5 "$limit" "$@" >>"$log" 2>&1
    local rc=$?
    echo "- $name: rc=$rc, $(($(date +%s) - T0 - now))s (at $(($(date +%s) - T0))s)" |
        tee -a "$SUMMARY"
    return $rc
}

BUILD_LOG=$OUT/build.log
{
    date -u +%Y-%m-%dT%H:%M:%SZ
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit \
        --format=csv
    nvcc --version | tail -2
    gcc --version | head -1
    nproc
} >"$BUILD_LOG" 2>&1

# --- dependencies: unpack the carried .debs; the OpenBLAS headers sit in a subfolder that the
# alternatives system links on an installed machine, so link them by hand
DEPS=/tmp/zy_deps
mkdir -p $DEPS
for f in "$DEBS"/*.deb; do dpkg -x "$f" $DEPS; done
inc=$DEPS/usr/include/x86_64-linux-gnu
for h in "$inc"/openblas-openmp/*.h; do ln -sf "$h" "$inc/$(basename "$h")"; done
export LD_LIBRARY_PATH=$DEPS/usr/lib/x86_64-linux-gnu:$DEPS/usr/lib/x86_64-linux-gnu/openblas-openmp:${LD_LIBRARY_PATH:-}

# --- build: the whole tree, then (in case something unrelated broke) the test alone
NJ=$(nproc)
step build 150 "$BUILD_LOG" make -j"$NJ" DEPS_ROOT=$DEPS all build/tests/test_cuda_attention \
    build/dev/test_attention_variants ||
    step build_test_only 100 "$BUILD_LOG" make -j"$NJ" DEPS_ROOT=$DEPS \
        build/tests/test_cuda_attention build/dev/test_attention_variants
TBIN=./build/tests/test_cuda_attention
BIN=./build/dev/test_attention_variants # every kernel shape, --bench, the sanitizer set
if [ ! -x $BIN ] || [ ! -x $TBIN ]; then
    echo "test binary did not build; end of the build log:"
    tail -40 "$BUILD_LOG"
    exit 1
fi
cuobjdump --dump-resource-usage build/src/ops/cuda/attention.cu.o 2>&1 |
    grep -E "Function|REG" | paste - - | sed -E 's/ +/ /g' | cut -c1-220 >>"$BUILD_LOG"

# --- correctness, then speed, then the sanitizers (slowest last)
step test 100 "$OUT/test.log" $TBIN
step test_variants 100 "$OUT/test.log" $BIN
step bench_ours 60 "$OUT/bench_ours.log" $BIN --bench
step bench_torch 90 "$OUT/bench_torch.log" python3 scripts/bench_attention_torch.py \
    --ours "$OUT/bench_ours.log"
step memcheck 60 "$OUT/sanitize.log" env ATTN_FILTER=test_sanitize \
    compute-sanitizer --tool memcheck --error-exitcode 3 $BIN
step racecheck 90 "$OUT/sanitize.log" env ATTN_FILTER=test_sanitize \
    compute-sanitizer --tool racecheck --racecheck-report all --error-exitcode 3 $BIN

# --- what the reply shows
echo
echo "=== test (per shape)"
grep -E "B=|worst|PASSED|FAILED|SKIPPED|Error|error|failed" "$OUT/test.log" | cut -c1-260
echo "=== ours"
grep -vE "^RESULT" "$OUT/bench_ours.log"
echo "=== torch"
grep -vE "^RESULT" "$OUT/bench_torch.log" | cut -c1-400
echo "=== sanitizers"
grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED|=== |Invalid|hazard" "$OUT/sanitize.log" |
    head -30
echo "=== steps"
cat "$SUMMARY"
echo "total $(($(date +%s) - T0))s"
