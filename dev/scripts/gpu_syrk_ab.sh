#!/usr/bin/env bash
# One GPU call for a change to the SYRK (src/ops/cuda/syrk.cu) against the build it replaces:
# builds this tree and PREV_TAR (`git archive -o .ext/prev.tar main`) side by side, runs
# test_cuda_syrk (correctness and timing against cuBLAS's whole product), test_cuda_optim and
# test_cuda_step on this build and the timing of the previous one, then the Muon training step of
# both builds alternating (CASES, ROUNDS), and memcheck on the SYRK's correctness tests.
# Usage (from the zayac root on the GPU machine):
#   DEBS=.ext/debs PREV_TAR=.ext/prev.tar [ROUNDS=2] [CASES="bench-small:8:2048"] \
#       OUT=dir bash dev/scripts/gpu_syrk_ab.sh
set -u
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/gpu_syrk_ab}
mkdir -p "$OUT"
. scripts/gpu_deps.sh
note() { echo "$*" | tee -a "$OUT/summary.txt"; }
note "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
T="build/tests/test_cuda_syrk build/tests/test_cuda_optim build/tests/test_cuda_step"
rm -rf /tmp/zy_prev && mkdir -p /tmp/zy_prev && tar -xf "$PREV_TAR" -C /tmp/zy_prev
(cd /tmp/zy_prev && make -j8 DEPS_ROOT="$DEPS_ROOT" CUDA=1 all build/tests/test_cuda_syrk >"$OUT/build_prev.log" 2>&1) &
make -j8 DEPS_ROOT="$DEPS_ROOT" CUDA=1 all $T >"$OUT/build.log" 2>&1 || { grep error "$OUT/build.log" | head; exit 1; }
wait
for t in $T; do
    timeout 120 ./$t >"$OUT/$(basename $t).log" 2>&1
    note "$(basename $t) rc=$?: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$(basename $t).log" | tr '\n' ' ')"
done
note "this build, SYRK against cuBLAS's whole product:"
grep -E " x [0-9]+ x |worst" "$OUT/test_cuda_syrk.log" | tee -a "$OUT/summary.txt"
note "previous build:"
(cd /tmp/zy_prev && env -u ZAYAC_NO_BENCH timeout 60 ./build/tests/test_cuda_syrk 2>&1) | grep -E " x [0-9]+ x " | tee -a "$OUT/summary.txt"
grep -q "PASSED" "$OUT/test_cuda_syrk.log" || { note "test_cuda_syrk failed: no step timing"; exit 1; }
note "| case | build | round | Muon ms/step |"
for r in $(seq 1 "${ROUNDS:-2}"); do
    for c in ${CASES:-bench-small:8:2048}; do
        IFS=: read -r preset batch seq <<<"$c"
        for b in /tmp/zy_prev/build/zayac build/zayac; do
            f="$OUT/bench_${preset}_$(basename "$(dirname "$(dirname "$b")")")_$r.json"
            timeout 150 "$b" bench train --preset "$preset" --batch "$batch" --seq "$seq" --optim muon \
                --steps 20 --warmup 5 --peak-tflops 989 --json "$f" >/dev/null 2>&1
            note "| $preset | $b | $r | $(python3 -c "import json;print('%.2f'%json.load(open('$f'))['step_ms']['median'])" 2>/dev/null || echo failed) |"
        done
    done
done
ZAYAC_NO_BENCH=1 timeout 90 compute-sanitizer --tool memcheck --error-exitcode 99 \
    build/tests/test_cuda_syrk >"$OUT/memcheck.log" 2>&1
note "memcheck test_cuda_syrk rc=$?: $(grep -E 'ERROR SUMMARY|PASSED|FAILED' "$OUT/memcheck.log" | tr '\n' ' ')"
