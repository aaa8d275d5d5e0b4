#!/usr/bin/env bash
# A longer supervised run with several injected faults (the table of results/supervisor/README.md):
# a 64-wide 2-layer model on 2 CPU ranks for 200 steps under `zayac supervise`, one fault of each
# kind (the loss-spike detector on, spike.factor 3), then the same run undisturbed; prints the
# incidents, the summary and the table (scripts/supervise_report.py: fault, step, rank, how it was
# detected, detection and down time, steps redone; restarts, goodput, the worst relative loss
# difference), also written to WORKDIR/table.md.
# Usage: scripts/supervise_drill.sh [ZAYAC_BIN] [WORKDIR]   (needs Open MPI's mpirun)
set -euo pipefail
bin=$(realpath "${1:-build/zayac}")
work=${2:-/tmp/zayac_drill}
steps=200
rm -rf "$work" && mkdir -p "$work"
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
root=$(cd "$(dirname "$0")/.." && pwd)
cat "$root"/README.md "$root"/docs/*.md > "$work/corpus.txt"
"$bin" tokenizer train --input "$work/corpus.txt" --vocab-size 512 --out "$work/tok.json" >/dev/null
"$bin" data prepare --tokenizer "$work/tok.json" --input "$work/corpus.txt" --out "$work/data" \
    --val-fraction 0.05 >/dev/null
cat > "$work/train.json" <<JSON
{"model": {"model_type": "zaya", "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_experts": 4,
  "moe_intermediate_size": 64, "router_hidden_size": 16, "max_position_embeddings": 128},
 "tokenizer": "$work/tok.json", "data": "$work/data", "batch_size": 8, "seq_len": 64,
 "steps": $steps, "eval_interval": 0, "checkpoint_interval": 20, "keep_checkpoints": 0,
 "log_interval": 50, "seed": 1, "device": "cpu", "dist": {"timeout_s": 300},
 "optimizer": {"name": "muon", "lr": 0.01}, "schedule": {"warmup": 10}, "spike": {"factor": 3}}
JSON
faults="kill:rank=1:step=31,exit:rank=0:step=57,hang:rank=1:step=83,nan:rank=0:step=109"
faults="$faults,corrupt-checkpoint:step=140,kill:rank=1:step=147,spike:rank=1:step=171"
faults="$faults,enospc:rank=1:step=$steps"
cmd=(supervise --hang-timeout 5 --backoff 1 -- "$bin" launch --cpu -n 2 -- "$bin" train
    --config "$work/train.json" --out "$work/faulty" --set checkpoint_async=false)
echo "command: ZAYAC_FAULT=$faults zayac ${cmd[*]}"
ZAYAC_FAULT=$faults "$bin" "${cmd[@]}" > "$work/supervise.out" 2> "$work/supervise.err" ||
    { tail "$work/supervise.err"; exit 1; }
grep '^supervise: ' "$work/supervise.err" "$work/supervise.out" | sed 's/^[^:]*://'
mpirun --oversubscribe -n 2 "$bin" train --config "$work/train.json" --out "$work/straight" \
    --set checkpoint_async=false > /dev/null
python3 "$root/scripts/supervise_report.py" "$work/faulty" "$work/straight" "$steps" \
    "$work/table.md"
echo "processes left: $(pgrep -c -f "$work/[f]aulty" || true)"
