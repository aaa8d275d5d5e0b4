#!/usr/bin/env bash
# Issue 4 on the lent GPU machine in one call: build zayac with CUDA (sm_90a) against the Debian
# packages in $DEBS (unpacked with dpkg -x), run every GPU test (each CUDA op vs its CPU op, the
# whole GPU model vs the CPU model, 200 GPU training steps vs the CPU curve, exact resume on the
# GPU), compute-sanitizer memcheck on the op tests, then the training benchmark side by side with
# PyTorch (scripts/bench_vs_torch.sh) unless SKIP_BENCH=1.
# Usage (from the zayac root): DEBS=.ext/debs bash scripts/gpu_issue4.sh
# Logs land in $OUT (summary.txt, build.log, <test>.log, memcheck_<test>.log, bench files).
set -u
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/gpu_issue4_out}
mkdir -p "$OUT"
NJ=$(nproc)
rc_all=0
note() { echo "$*" | tee -a "$OUT/summary.txt"; }

. "$(dirname "$0")/gpu_deps.sh"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$OUT/machine.log" 2>&1

t0=$(date +%s)
make -j"$NJ" DEPS_ROOT="$DEPS_ROOT" CUDA=1 all tests dev >"$OUT/build.log" 2>&1
rc=$?
note "build rc=$rc ($(($(date +%s) - t0)) s)"
[ $rc -ne 0 ] && { grep -E "error" "$OUT/build.log" | head -30; tail -20 "$OUT/build.log"; exit 1; }

TESTS=()
for t in tests/test_cuda_*.c; do TESTS+=("build/tests/$(basename "$t" .c)"); done
TESTS+=(build/tests/test_ops_backends) # every op on the CPU and CUDA backends
for t in dev/test_*.c; do TESTS+=("build/dev/$(basename "$t" .c)"); done
TESTS+=(build/tests/test_train_resume)
for t in "${TESTS[@]}"; do
    name=$(basename "$t")
    s0=$(date +%s)
    ZAYAC_BIN=build/zayac timeout 300 "$t" >"$OUT/$name.log" 2>&1
    rc=$?
    note "$name rc=$rc ($(($(date +%s) - s0)) s): $(grep -E '^\[  (PASSED|FAILED|SKIPPED) \]' "$OUT/$name.log" | head -3 | tr '\n' ' ')"
    grep -E "FAILED|FAILURE|Assert|abort|error" "$OUT/$name.log" | head -12 | tee -a "$OUT/summary.txt"
    [ $rc -ne 0 ] && rc_all=1
done

if [ "${SANITIZE:-1}" = 1 ] && command -v compute-sanitizer >/dev/null; then
    for name in ${SANITIZE_TESTS:-test_ops_backends test_cuda_ops_dense test_cuda_ops_moe test_cuda_ops_cca test_cuda_optim test_attention_variants test_cuda_elementwise test_cuda_model}; do
        bin=build/tests/$name
        [ -x "$bin" ] || bin=build/dev/$name # dev/test_*.c (make dev)
        [ -x "$bin" ] || continue
        OH_SELF=0 CCA_TEST_QUICK=1 ZY_SKIP_BENCH=1 ATTN_FILTER=test_sanitize ELEM_FILTER="test_embed*" timeout 240 compute-sanitizer --tool memcheck --error-exitcode 99 \
            "$bin" >"$OUT/memcheck_$name.log" 2>&1
        rc=$?
        note "memcheck $name rc=$rc: $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_$name.log" | tail -1)"
        [ $rc -ne 0 ] && rc_all=1
    done
fi

if [ "${SKIP_BENCH:-0}" != 1 ] && [ -f scripts/bench_vs_torch.sh ]; then
    OUT="$OUT/bench" bash scripts/bench_vs_torch.sh >"$OUT/bench.log" 2>&1
    note "bench rc=$?"
    cp "$OUT/bench/summary.md" "$OUT/bench_summary.md" 2>/dev/null
    sed -n '1,/## zayac Muon/p' "$OUT/bench/summary.md" | tee -a "$OUT/summary.txt"
fi
note "overall rc=$rc_all"
# the device tool returns at most 8 files: every log travels in one archive
(cd "$OUT" && tar czf /tmp/zy_issue4_logs.tgz --exclude=summary.txt . && find . -type f \
    ! -name summary.txt ! -name '*.json' ! -name '*.md' -delete && mv /tmp/zy_issue4_logs.tgz logs.tgz)
exit $rc_all
