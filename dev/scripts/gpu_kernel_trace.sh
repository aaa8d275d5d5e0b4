#!/usr/bin/env bash
# Kernel timeline of the 2-GPU step on the GPU machine (dev/trace/kernel_trace.c, CUPTI): zayac bench
# train -n 1 and -n 2 on bench-small (AdamW; MODEL and OPTIM change them) traced, then dev/trace/kernel_trace_summary.py over each rank's file:
# what the step's kernels do while the gradient reduces' NCCL kernels run (SUMMARY_ARGS="--kernels 40":
# also the kernels with the most time a step; ZYTRACE_API=1: also the host's CUDA runtime calls a
# step and the ones that held it over 1 ms, from trace_n1.*.api.tsv, one GPU). Prints as it goes;
# files in $OUT. Usage (from the zayac root): DEBS=.ext/debs bash dev/scripts/gpu_kernel_trace.sh
set -u
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/kernel_trace}
mkdir -p "$OUT"
. "$(dirname "$0")/../../scripts/gpu_deps.sh"
make -j"$(nproc)" DEPS_ROOT="$DEPS_ROOT" CUDA=1 all >"$OUT/build.log" 2>&1 || { tail "$OUT/build.log"; exit 1; }
CUDA_HOME=$(dirname "$(dirname "$(command -v nvcc)")")
CUPTI_LIB=$(dirname "$(find "$CUDA_HOME"/ /usr/local/cuda*/ -name 'libcupti.so*' 2>/dev/null | head -1)")
cc -shared -fPIC -O2 -I"$CUDA_HOME/include" dev/trace/kernel_trace.c -o "$OUT/libzytrace.so" \
    -L"$CUPTI_LIB" -lcupti -Wl,-rpath,"$CUPTI_LIB" || exit 1
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
MODEL=${MODEL:---preset bench-small --batch 8 --seq 2048}
# the 1-GPU step first (RANKS="1 2"): the compute and idle time per step that the 2-GPU one adds to
for n in ${RANKS:-1 2}; do
    rm -f "$OUT"/trace_n$n.*.tsv
    CUDA_INJECTION64_PATH=$OUT/libzytrace.so ZYTRACE_OUT=$OUT/trace_n$n timeout 180 build/zayac bench train \
        -n $n $MODEL --optim ${OPTIM:-adamw} --steps 10 --warmup 3 --peak-tflops 989 >"$OUT/bench_n$n.txt" 2>&1
    echo "bench -n $n rc=$?: $(grep -E 'step time|tokens/s' "$OUT/bench_n$n.txt" | head -2 | tr '\n' ' ')"
    API=; [ "$n" = 1 ] && API=$(ls "$OUT"/trace_n$n.*.api.tsv 2>/dev/null | head -1) # one process
    python3 dev/trace/kernel_trace_summary.py ${SUMMARY_ARGS:-} ${API:+--api "$API"} \
        $(ls "$OUT"/trace_n$n.*.tsv | grep -v "\.api\.tsv$")
done
