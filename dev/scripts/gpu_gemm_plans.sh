#!/usr/bin/env bash
# Which cuBLASLt algorithm each GEMM plan got, and which the heuristic would pick with every
# split-K reduction allowed (ZAYAC_GEMM_PLANS): for the op cases matching $FILTER (default
# "cuda matmul*") and one step of each preset in CASES. From the zayac root on the GPU machine:
#   DEBS=.ext/debs OUT=dir [FILTER=...] [CASES="bench-small:8:2048"] bash dev/scripts/gpu_gemm_plans.sh
# Files in $OUT: plans_ops.txt, plans_<preset>.txt (the plan lines), summary.txt.
set -u
export PATH=/usr/local/cuda/bin:$PATH
. scripts/gpu_deps.sh
mkdir -p "$OUT"
make -j"$(nproc)" DEPS_ROOT="$DEPS_ROOT" CUDA=1 all build/tests/test_ops_backends >"$OUT/build.log" 2>&1 ||
    { tail -20 "$OUT/build.log"; exit 1; }
ZAYAC_GEMM_PLANS=1 OH_FILTER="${FILTER:-cuda matmul*}" build/tests/test_ops_backends >"$OUT/ops.log" 2>&1
echo "op cases rc=$?: $(grep -cE '^\[       OK' "$OUT/ops.log") ok, failed: $(grep -E '^\[  FAILED  \] cuda' "$OUT/ops.log" | sort -u | tr '\n' ' ')" |
    tee "$OUT/summary.txt"
grep "^gemm plan" "$OUT/ops.log" >"$OUT/plans_ops.txt"
for c in ${CASES:-bench-small:8:2048 bench-base:4:4096}; do
    IFS=: read -r preset batch seq <<<"$c"
    ZAYAC_GEMM_PLANS=1 build/zayac bench train --preset "$preset" --batch "$batch" --seq "$seq" \
        --steps 1 --warmup 1 --peak-tflops 989 >"$OUT/step_$preset.log" 2>&1
    grep "^gemm plan" "$OUT/step_$preset.log" >"$OUT/plans_$preset.txt"
done
# plans whose algorithm the reduction rule changed (chosen != the unrestricted heuristic's)
for f in "$OUT"/plans_*.txt; do
    echo "== $f: $(wc -l <"$f") plans, $(sed -E 's/.*: (.*) \(any reduction: (.*)\)$/\1|\2/' "$f" |
        awk -F'|' '$1 != $2' | wc -l) changed by the reduction rule"
    sed -E 's/.*: (.*) \(any reduction: (.*)\)$/\1|\2|&/' "$f" | awk -F'|' '$1 != $2 {print $3}' | head -10
done | tee -a "$OUT/summary.txt"
