#!/usr/bin/env bash
# One GPU call for a change to the SYRK (src/ops/cuda/syrk.cu) against the build it replaces:
# test_cuda_syrk on this build (correctness, then timing against cuBLAS's whole product); if it
# passes, scripts/gpu_overlap_bench.sh with PREV_TAR (`git archive -o .ext/prev.tar main`), which
# builds both, runs test_cuda_step and test_cuda_optim and times the Muon step of both builds
# alternating (CASES, ROUNDS); then the previous build's SYRK timing and memcheck on the SYRK's
# correctness tests.
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
make -j"$(nproc)" DEPS_ROOT="$DEPS_ROOT" CUDA=1 build/tests/test_cuda_syrk >"$OUT/build.log" 2>&1 ||
    { grep error "$OUT/build.log" | head; exit 1; }
env -u ZAYAC_NO_BENCH timeout 120 build/tests/test_cuda_syrk >"$OUT/test_cuda_syrk.log" 2>&1
note "test_cuda_syrk rc=$?: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/test_cuda_syrk.log" | tr '\n' ' ')"
note "this build, SYRK against cuBLAS's whole product:"
grep -E " x [0-9]+ x |worst" "$OUT/test_cuda_syrk.log" | tee -a "$OUT/summary.txt"
grep -q "PASSED" "$OUT/test_cuda_syrk.log" || { note "test_cuda_syrk failed: no step timing"; exit 1; }
OPTIMS=muon VARIANTS="prev 1" ROUNDS=${ROUNDS:-2} CASES=${CASES:-bench-small:8:2048} \
    OUT="$OUT/overlap" bash scripts/gpu_overlap_bench.sh >/dev/null 2>&1
tee -a "$OUT/summary.txt" <"$OUT/overlap/summary.txt"
note "previous build, SYRK against cuBLAS's whole product:"
(cd /tmp/zy_prev && make -j"$(nproc)" DEPS_ROOT="$DEPS_ROOT" CUDA=1 build/tests/test_cuda_syrk \
    >/dev/null 2>&1 && env -u ZAYAC_NO_BENCH timeout 60 build/tests/test_cuda_syrk 2>&1) |
    grep -E " x [0-9]+ x " | tee -a "$OUT/summary.txt"
ZAYAC_NO_BENCH=1 timeout 90 compute-sanitizer --tool memcheck --error-exitcode 99 \
    build/tests/test_cuda_syrk >"$OUT/memcheck.log" 2>&1
note "memcheck test_cuda_syrk rc=$?: $(grep -E 'ERROR SUMMARY|PASSED|FAILED' "$OUT/memcheck.log" | tr '\n' ' ')"
