#!/usr/bin/env bash
# The supervisor on 2 GPUs (issue 18): kill and hang recovery with NCCL, with the recovery time.
# `zayac supervise --hang-timeout S -- zayac launch -n 2 -- zayac train` on real text (bench-small's
# widths, 2 layers, 4 experts, vocab 4096; global batch 16 x 512, Muon) with
# ZAYAC_FAULT=kill:rank=1:step=30,spike:rank=0:step=60,hang:rank=0:step=90 (the loss-spike
# detector on; the hang on rank 0, so that no rank fails twice in a row, which would move the run
# to 1 GPU), then the same run undisturbed. Prints the incidents, the summary, the table (fault,
# how and how soon it was detected, downtime until the first new step, steps redone; goodput; the
# worst relative loss difference against the undisturbed run: scripts/supervise_report.py) and what
# is left running afterwards (nothing should be). About 2 minutes with the build.
# Usage (from the zayac root; DATA holds tokenizer.json and data/ from `zayac data prepare`):
#   DEBS=.ext/debs DATA=.ext/dpdata bash scripts/gpu_supervise_drill.sh
# DEVICE=cpu runs the same drill on 2 CPU ranks (`zayac launch --cpu`, a small model; ZAYAC_BIN,
# default build-cpu/zayac, already built), to check the script without a GPU. HANG_TIMEOUT (10),
# STEPS (120) and OUT (/tmp/gpu_supervise_out) can be set.
set -u
DEVICE=${DEVICE:-cuda}
OUT=${OUT:-/tmp/gpu_supervise_out}
DATA=$(realpath "${DATA:-.ext/dpdata}")
STEPS=${STEPS:-120}
HANG_TIMEOUT=${HANG_TIMEOUT:-10}
FAULTS=${FAULTS:-"kill:rank=1:step=30,spike:rank=0:step=60,hang:rank=0:step=90"}
rm -rf "$OUT" && mkdir -p "$OUT"
t0=$(date +%s)
if [ "$DEVICE" = cuda ]; then
    export PATH=/usr/local/cuda/bin:$PATH
    export NCCL_NVLS_ENABLE=0 # NVLink multicast stays off on the lent machines
    . "$(dirname "$0")/gpu_deps.sh"
    echo "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1) x $(nvidia-smi -L | wc -l)"
    make -j"$(nproc)" DEPS_ROOT="$DEPS_ROOT" CUDA=1 build/zayac >"$OUT/build.log" 2>&1 ||
        { grep -E "error" "$OUT/build.log" | head -20; echo "build FAILED"; exit 1; }
    echo "build done ($(($(date +%s) - t0)) s)"
    Z=$PWD/build/zayac
    LAUNCH=(launch -n 2)
    python3 - "$OUT/model.json" <<'EOF'
import json, sys
c = json.load(open("configs/bench-small.json"))
c.update(num_hidden_layers=2, layer_types=c["layer_types"][:2], num_experts=4, vocab_size=4096)
json.dump(c, open(sys.argv[1], "w"), indent=1)
EOF
    BATCH=16 SEQ=512 LR=0.003
else
    if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
    Z=$(realpath "${ZAYAC_BIN:-build-cpu/zayac}")
    LAUNCH=(launch --cpu -n 2)
    cat >"$OUT/model.json" <<'EOF'
{"model_type": "zaya", "vocab_size": 4096, "hidden_size": 32, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_experts": 4,
 "moe_intermediate_size": 32, "router_hidden_size": 8, "max_position_embeddings": 128}
EOF
    BATCH=8 SEQ=64 LR=0.01
fi
cat >"$OUT/train.json" <<EOF
{"model": "$OUT/model.json", "tokenizer": "$DATA/tokenizer.json", "data": "$DATA/data",
 "batch_size": $BATCH, "seq_len": $SEQ, "steps": $STEPS, "optimizer": {"name": "muon", "lr": $LR},
 "schedule": {"kind": "cosine", "warmup": 10}, "eval_interval": 0, "checkpoint_interval": 20,
 "keep_checkpoints": 0, "checkpoint_async": false, "log_interval": 20, "seed": 1,
 "device": "$DEVICE", "spike": {"factor": 3, "warmup": 20}, "dist": {"timeout_s": 120}}
EOF
# dist.timeout_s 120: the supervisor's heartbeat (HANG_TIMEOUT s) finds the hang, not the job's own
# collective watchdog; the launcher's default --grace 5 s is what a kill costs the surviving rank
cmd=(supervise --hang-timeout "$HANG_TIMEOUT" --backoff 1 -- "$Z" "${LAUNCH[@]}" -- "$Z" train
    --config "$OUT/train.json" --out "$OUT/supervised")
echo "command: ZAYAC_FAULT=$FAULTS zayac ${cmd[*]}"
t1=$(date +%s)
ZAYAC_FAULT=$FAULTS timeout 300 "$Z" "${cmd[@]}" >"$OUT/supervised.out" 2>"$OUT/supervised.err"
echo "supervised run: exit $? in $(($(date +%s) - t1)) s"
grep -hE '^supervise: |^ZAYAC_FAULT|did not return|fatal|error' "$OUT/supervised.err" "$OUT/supervised.out" | head -40
grep -hE "^resumed from|^resume:" "$OUT/supervised.out" | head -10
t1=$(date +%s)
timeout 200 "$Z" "${LAUNCH[@]}" -- "$Z" train --config "$OUT/train.json" --out "$OUT/undisturbed" \
    >"$OUT/undisturbed.out" 2>&1
echo "undisturbed run: exit $? in $(($(date +%s) - t1)) s"
grep -E '^done|fatal|error' "$OUT/undisturbed.out" | head -5
python3 "$(dirname "$0")/supervise_report.py" "$OUT/supervised" "$OUT/undisturbed" "$STEPS" \
    "$OUT/table.md"
sleep 1
echo "left running: $(pgrep -c -f "$OUT/[s]upervised" || true) processes of the supervised run;" \
    "$(pgrep -c zayac || true) zayac processes on this host:"
pgrep -a zayac | head -5
if [ "$DEVICE" = cuda ]; then
    echo "GPU compute processes left: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l)"
fi
echo "total $(($(date +%s) - t0)) s"
