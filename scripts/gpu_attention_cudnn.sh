#!/usr/bin/env bash
# cuDNN's attention backend (cuda.attention; docs/attention.md) on the GPU machine, in one call,
# printing as it goes: build zayac with CUDA against the Debian packages in $DEBS; the tests
# (tests/test_cuda_attention_cudnn: cuDNN against zayac's kernels on small and ZAYA1 shapes, the
# chunked backward, determinism, refused shapes; the op table's attention cases on the "cuda+cudnn" backend against
# the CPU op); the timings of zayac's kernels and cuDNN's on the ZAYA1 shapes
# (dev/time_attention_cudnn) and torch SDPA's (scripts/bench_attention_torch.py); and a short
# `zayac bench train` on bench-small with --attention zayac, then cudnn. Every step runs even when
# one before it failed, each under a time limit; the exit status is 1 when any failed.
# Usage, from the zayac root: DEBS=.ext/debs bash scripts/gpu_attention_cudnn.sh
set -u
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
NJ=$(nproc)
T0=$(date +%s)
rc_all=0

# step NAME LIMIT CMD...: runs CMD under a time limit, its output straight to ours
step() {
    local name=$1 limit=$2
    shift 2
    echo "=== $name (limit ${limit}s, at $(($(date +%s) - T0))s)"
    timeout --kill-after=5 "$limit" "$@"
    local rc=$?
    echo "=== $name: rc=$rc ($(($(date +%s) - T0))s)"
    [ $rc -ne 0 ] && rc_all=1
    return $rc
}

. "$(dirname "$0")/gpu_deps.sh"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
ls /usr/lib/x86_64-linux-gnu/libcudnn.so.9* /usr/include/cudnn_graph.h \
    /usr/include/x86_64-linux-gnu/cudnn_graph*.h 2>/dev/null

BUILD_LOG=/tmp/gpu_attention_cudnn_build.log
step build 150 sh -c "make -j$NJ DEPS_ROOT=$DEPS_ROOT CUDA=1 all build/tests/test_cuda_attention_cudnn \
    build/tests/test_ops_backends build/dev/time_attention_cudnn >$BUILD_LOG 2>&1" || {
    grep -E "error:" "$BUILD_LOG" | head -30
    tail -5 "$BUILD_LOG"
}
export ZAYAC_BIN=$PWD/build/zayac ZAYAC_ROOT=$PWD

# the chunked cases build many plans (one per chunk geometry, and probes): a longer limit
step "test_cuda_attention_cudnn" 300 build/tests/test_cuda_attention_cudnn
# the op table's attention cases through ops.h on cuda.attention = auto, against the CPU op (each
# shape's backend is named on stderr: look for "cuDNN 9..." against "zayac's kernels")
step "op table: attention on cuda+cudnn" 45 env OH_SELF=0 OH_FILTER='cuda+cudnn*' \
    build/tests/test_ops_backends

step "timings: zayac vs cuDNN" 180 build/dev/time_attention_cudnn
step "timings: torch SDPA" 60 python3 scripts/bench_attention_torch.py

# bench-small, 8 x 2048: ms per step with each backend (--peak-tflops skips the GEMM peak probe)
rm -f /tmp/bench_train_zayac.json /tmp/bench_train_cudnn.json
for att in zayac cudnn; do
    step "bench train bench-small --attention $att" 45 build/zayac bench train --preset bench-small \
        --batch 8 --seq 2048 --steps 10 --warmup 3 --peak-tflops 790 --attention "$att" \
        --json "/tmp/bench_train_$att.json"
done
for att in zayac cudnn; do
    [ -f "/tmp/bench_train_$att.json" ] &&
        python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(sys.argv[2], 'median ms/step', j['step_ms']['median'], 'mean', j['step_ms']['mean'])" \
            "/tmp/bench_train_$att.json" "$att"
done
echo "total $(($(date +%s) - T0))s, rc=$rc_all"
exit $rc_all
