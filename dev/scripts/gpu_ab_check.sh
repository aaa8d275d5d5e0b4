#!/usr/bin/env bash
# One GPU call that checks a kernel change and measures it against the build it replaces: the
# named test programs (gpu_check.sh), compute-sanitizer memcheck on test_ops_backends' cases that
# match MEMCHECK_FILTER, the step A/B (gpu_overlap_bench.sh, the previous build from PREV_TAR, AdamW),
# and one profiled step of each build and case, printing the ops named in OPS and the losses (the
# two builds start from the same seed, so the same bits give the same losses).
# Usage (from the zayac root):
#   DEBS=.ext/debs PREV_TAR=.ext/prev.tar TESTS="test_ops_backends test_cuda_model" \
#       [MEMCHECK_FILTER="*resnorm* *xent*"] [OPS="resnorm_bwd"] [ROUNDS=2] \
#       [CASES="bench-small:8:2048 bench-base:4:4096"] bash dev/scripts/gpu_ab_check.sh
# Files land in $OUT: check.txt, tests.log.gz, bench.txt, profile.txt.
set -u
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/gpu_ab_out}
mkdir -p "$OUT"
CASES=${CASES:-bench-small:8:2048 bench-base:4:4096}
SANITIZE_TESTS=none ROUNDS=0 TESTS_TIMEOUT_S=${TESTS_TIMEOUT_S:-300} OUT=/tmp/gpu_ab_check \
    bash scripts/gpu_check.sh >/dev/null 2>&1
cp /tmp/gpu_ab_check/summary.txt "$OUT/check.txt"
# the tests' whole output, so a failing check's message comes back with its name
[ -f /tmp/gpu_ab_check/tests.log ] && gzip -c /tmp/gpu_ab_check/tests.log >"$OUT/tests.log.gz"
cat "$OUT/check.txt"
. scripts/gpu_deps.sh
set -f # the patterns are the harness's, not the shell's
for filter in ${MEMCHECK_FILTER:-}; do # one memcheck run per pattern (space-separated)
    OH_SELF=0 OH_FILTER="$filter" timeout 240 compute-sanitizer --tool memcheck \
        --error-exitcode 99 build/tests/test_ops_backends >/tmp/gpu_ab_memcheck.log 2>&1
    echo "memcheck test_ops_backends ($filter) rc=$?: $(grep -E 'ERROR SUMMARY|PASSED|FAILED' /tmp/gpu_ab_memcheck.log | tr '\n' ' ')" |
        tee -a "$OUT/check.txt"
done
set +f
OPTIMS=adamw SKIP_TESTS=1 VARIANTS="prev 1" ROUNDS=${ROUNDS:-2} CASES="$CASES" OUT=/tmp/gpu_ab_bench \
    bash scripts/gpu_overlap_bench.sh >/dev/null 2>&1
cp /tmp/gpu_ab_bench/summary.txt "$OUT/bench.txt"
cat "$OUT/bench.txt"
for c in $CASES; do
    IFS=: read -r preset batch seq <<<"$c"
    for b in /tmp/zy_prev/build/zayac build/zayac; do
        [ -x "$b" ] || continue
        "$b" bench train --preset "$preset" --batch "$batch" --seq "$seq" --steps 3 --warmup 2 \
            --peak-tflops 989 --profile >/tmp/gpu_ab_prof.txt 2>&1
        echo "== $b $preset: $(grep -E '^  loss' /tmp/gpu_ab_prof.txt)" >>"$OUT/profile.txt"
        grep -E "^  ($(echo "${OPS:-resnorm_bwd}" | tr ' ' '|')) " /tmp/gpu_ab_prof.txt >>"$OUT/profile.txt"
    done
done
cat "$OUT/profile.txt"
