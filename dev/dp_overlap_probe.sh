#!/usr/bin/env bash
# Probe (an experiment, not part of the product): where data parallel loses time on 2 GPUs.
# `zayac bench train -n 2` on bench-small (AdamW) under NCCL/CUDA settings that change how the
# gradient reduces overlap the backward, plus 1 GPU as the reference; median step ms each; and an
# nsys kernel summary of one 2-GPU run when nsys is installed. Usage: bash dev/dp_overlap_probe.sh
set -u
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/dp_probe}
mkdir -p "$OUT"
. "$(dirname "$0")/../scripts/gpu_deps.sh"
make -j"$(nproc)" DEPS_ROOT="$DEPS_ROOT" CUDA=1 all >"$OUT/build.log" 2>&1 || { tail "$OUT/build.log"; exit 1; }
Z=$PWD/build/zayac
MODEL=${MODEL:---preset bench-small --batch 8 --seq 2048}
one() { # label n env...
    local label=$1 n=$2
    shift 2
    env "$@" timeout 120 $Z bench train -n "$n" $MODEL --optim adamw --steps 12 --warmup 3 \
        --json "$OUT/$label.json" >"$OUT/$label.txt" 2>&1 || { echo "$label failed: $(tail -2 "$OUT/$label.txt")"; return; }
    python3 -c "
import json,statistics as s;j=json.load(open('$OUT/$label.json'));a=j['step_ms']['all']
print('%-28s n=%d median %.1f ms  min %.1f' % ('$label', j['world_size'], s.median(a), min(a)))"
}
one one_gpu 1
one base 2
one channels2 2 NCCL_MAX_NCHANNELS=2
one channels8 2 NCCL_MAX_NCHANNELS=8
one maxconn1 2 CUDA_DEVICE_MAX_CONNECTIONS=1
one proto_simple 2 NCCL_PROTO=Simple
one p2p_ce 2 NCCL_P2P_USE_CUDA_MEMCPY=1
if command -v nsys >/dev/null; then
    nsys profile -o "$OUT/prof" -t cuda,nvtx --force-overwrite true $Z bench train -n 2 $MODEL \
        --optim adamw --steps 6 --warmup 2 >"$OUT/nsys_run.txt" 2>&1
    nsys stats -r cuda_gpu_kern_sum "$OUT"/prof*.nsys-rep 2>/dev/null | head -40
else
    echo "no nsys"
fi
