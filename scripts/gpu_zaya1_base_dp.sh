#!/usr/bin/env bash
# The full zaya1-base (8.84B parameters, 40 layers) with AdamW on the GPUs of one host under ZeRO-1
# (issue 16): `zayac bench train -n 1` (expected to be refused: it does not fit one GPU) and `-n N`
# at batch 1 x 4096 per GPU. Prints the memory estimate's verdict, ms/step, tokens/s per GPU, MFU
# and memory per GPU as the runs finish. Usage (from the zayac root, on a 2-GPU machine):
#   DEBS=.ext/debs [OPTIMS="adamw muon"] [STEPS=6] bash scripts/gpu_zaya1_base_dp.sh
# Files in $OUT (default /tmp/zaya1_base_dp): build.log, base_<optim>_n<N>.{txt,json}.
set -u
export PATH=/usr/local/cuda/bin:$PATH
export NCCL_NVLS_ENABLE=0 # NVLink multicast stays off on the lent machines
OUT=${OUT:-/tmp/zaya1_base_dp}
STEPS=${STEPS:-6}
mkdir -p "$OUT"
. "$(dirname "$0")/gpu_deps.sh"
N=$(nvidia-smi -L | wc -l)
echo "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1) x $N"
t0=$(date +%s)
make -j"$(nproc)" DEPS_ROOT="$DEPS_ROOT" CUDA=1 build/zayac >"$OUT/build.log" 2>&1 ||
    { grep -E "error" "$OUT/build.log" | head -20; echo "build FAILED"; exit 1; }
echo "build done ($(($(date +%s) - t0)) s)"
for optim in ${OPTIMS:-adamw}; do
    for n in 1 "$N"; do
        f="$OUT/base_${optim}_n$n"
        t=$(date +%s)
        timeout 240 build/zayac bench train -n "$n" --preset zaya1-base --batch 1 --seq 4096 \
            --optim "$optim" --steps "$STEPS" --warmup 2 --peak-tflops 989 --json "$f.json" >"$f.txt" 2>&1
        rc=$?
        echo "== zaya1-base $optim on $n GPU(s): rc=$rc in $(($(date +%s) - t)) s"
        grep -E "needs|memory|tokens/s|MFU|optimizer|step|GiB" "$f.txt" | tail -12
        [ -f "$f.json" ] && python3 - "$f.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
m = j["memory"]
print("| zaya1-base | %s GPUs | ms/step mean %.1f median %.1f | tokens/s %.0f, per GPU %.0f | MFU %.1f%% | optimizer GiB/rank %.2f | device GiB %.1f |" % (
    j["world_size"], j["step_ms"]["mean"], j["step_ms"]["median"], j["tokens_per_s"],
    j["tokens_per_s"] / j["world_size"], 100 * j["mfu"], m["optimizer_bytes"] / 2**30, j["mem_gib"]))
PY
    done
done
