#!/usr/bin/env bash
# Probe (an experiment, not part of the product): why the 2-GPU step loses time to the gradient
# reduces that run beside the backward (results/data-parallel/README.md, "The stall").
# It applies dev/scripts/dp_stall_probe.patch to the tree it runs in (the device tool's copy: never run it
# in a checkout you commit from), which adds environment switches read by the step:
#   ZAYAC_PROBE_TL=1          rank 0 prints a timeline of step 8: each layer's backward done (on
#                             the compute stream) and each reduce done (on the communicator's)
#   ZAYAC_PROBE_NO_REDUCE=1   no gradient reduce (wrong training, the compute alone)
#   ZAYAC_PROBE_REDUCE_AFTER=1  every reduce after the whole backward (no overlap)
#   ZAYAC_PROBE_HALF=1        half of each bucket reduced (the bytes of a bf16 reduce)
#   ZAYAC_PROBE_RS=1          each bucket as a reduce-scatter (both link directions)
#   ZAYAC_PROBE_P2P=1         each bucket sent to its owner with ncclSend/ncclRecv, not summed
#   ZAYAC_PROBE_PRIO=1        the communicator's stream at the highest priority
#   ZAYAC_PROBE_GEMM_SMS=n    cuBLASLt's SM_COUNT_TARGET for every GEMM
# then `zayac bench train` on bench-small (AdamW, median step) under each, with NCCL's own knobs.
# Usage (2-GPU machine): DEBS=.ext/debs bash dev/scripts/gpu_dp_stall_probe.sh
set -u
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/dp_probe}
mkdir -p "$OUT"
grep -q ZAYAC_PROBE_TL src/dist/comm_nccl.cu || git apply dev/scripts/dp_stall_probe.patch || exit 1
. "$(dirname "$0")/../../scripts/gpu_deps.sh"
make -j"$(nproc)" DEPS_ROOT="$DEPS_ROOT" CUDA=1 all >"$OUT/build.log" 2>&1 || { tail "$OUT/build.log"; exit 1; }
Z=$PWD/build/zayac
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
one() { # label n model env...
    local label=$1 n=$2 model=$3
    shift 3
    env "$@" timeout 120 $Z bench train -n "$n" $model --optim adamw --steps 10 --warmup 3 \
        --peak-tflops 989 --json "$OUT/$label.json" >"$OUT/$label.txt" 2>&1 ||
        { echo "$label failed: $(tail -2 "$OUT/$label.txt")"; return; }
    python3 -c "
import json,statistics as s;j=json.load(open('$OUT/$label.json'));a=j['step_ms']['all']
print('%-18s n=%d median %.1f ms  min %.1f  [%s]' % ('$label', j['world_size'], s.median(a), min(a), '$*'))"
    # b<layer>:ms = that layer's backward done, r<layer>:ms = its reduce done
    grep "^TL" "$OUT/$label.txt" | grep -v "reduce start" |
        awk '{printf "%s%s:%s ", substr($6,1,1), $NF, $4} END {print ""}'
}
S="--preset bench-small --batch 8 --seq 2048"
one one_gpu 1 "$S"
one base 2 "$S"
one no_reduce 2 "$S" ZAYAC_PROBE_NO_REDUCE=1 ZAYAC_PROBE_TL=1
one reduce 2 "$S" ZAYAC_PROBE_TL=1
one reduce_after 2 "$S" ZAYAC_PROBE_REDUCE_AFTER=1
one half 2 "$S" ZAYAC_PROBE_HALF=1
one rs 2 "$S" ZAYAC_PROBE_RS=1
one p2p 2 "$S" ZAYAC_PROBE_P2P=1 ZAYAC_PROBE_TL=1
one ctas2 2 "$S" NCCL_MAX_CTAS=2 ZAYAC_PROBE_TL=1
one ctas16_sm116 2 "$S" NCCL_MAX_CTAS=16 ZAYAC_PROBE_GEMM_SMS=116
one prio 2 "$S" ZAYAC_PROBE_PRIO=1
one policy_eff 2 "$S" NCCL_CTA_POLICY=1
one cga0 2 "$S" NCCL_CGA_CLUSTER_SIZE=0
one memsync0 2 "$S" NCCL_MEM_SYNC_DOMAIN=0
one ll128 2 "$S" NCCL_PROTO=LL128
one maxconn32 2 "$S" CUDA_DEVICE_MAX_CONNECTIONS=32
