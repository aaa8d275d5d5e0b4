#!/usr/bin/env bash
# The CCA kernels (conv, QK norm) against a previous build in one GPU call: the op cases matching
# CASES (default "cuda cca_conv*") on the GPU, then test_cuda_ops_cca's bench-small timing of both
# builds, alternating (two rounds).
# Usage (from the zayac root): DEBS=.ext/debs PREV_TAR=.ext/prev.tar OUT=dir bash dev/scripts/gpu_cca_ab.sh
set -u
OUT=${OUT:-/tmp/gpu_cca_ab}; mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH; . scripts/gpu_deps.sh
nvidia-smi --query-gpu=name,temperature.gpu --format=csv,noheader
make -j16 DEPS_ROOT=$DEPS_ROOT CUDA=1 all build/tests/test_ops_backends build/tests/test_cuda_ops_cca build/tests/test_cuda_model build/tests/test_cuda_step > $OUT/build.log 2>&1 || tail $OUT/build.log
(rm -rf /tmp/zy_prev && mkdir -p /tmp/zy_prev && tar -xf "$PREV_TAR" -C /tmp/zy_prev && cd /tmp/zy_prev && make -j16 DEPS_ROOT=$DEPS_ROOT CUDA=1 all build/tests/test_cuda_ops_cca) > $OUT/prev_build.log 2>&1 || tail $OUT/prev_build.log
OH_FILTER="${CASES:-cuda cca_conv*}" build/tests/test_ops_backends > $OUT/ops.txt 2>&1; grep -E "PASSED|FAILED" $OUT/ops.txt
for i in 1 2; do for b in /tmp/zy_prev/build build; do echo "$b: $($b/tests/test_cuda_ops_cca 2>&1 | grep -E 'cca_conv_(fwd|bwd)|qknorm' | tr -s ' ' | tr '\n' ' ')"; done; done
