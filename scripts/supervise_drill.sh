#!/usr/bin/env bash
# A longer supervised run with several injected faults (docs/supervisor.md's table): the tiny
# model on 2 CPU ranks for STEPS steps under `zayac supervise`, one fault of each kind, then the
# same run undisturbed; prints the incidents, the summary and the worst relative loss difference.
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
 "optimizer": {"name": "muon", "lr": 0.01}, "schedule": {"warmup": 10}}
JSON
faults="kill:rank=1:step=31,exit:rank=0:step=57,hang:rank=1:step=83,nan:rank=0:step=109"
faults="$faults,corrupt-checkpoint:step=140,kill:rank=1:step=147,enospc:rank=1:step=$steps"
ZAYAC_FAULT=$faults "$bin" supervise --hang-timeout 5 --backoff 1 -- "$bin" launch --cpu -n 2 -- \
    "$bin" train --config "$work/train.json" --out "$work/faulty" --set checkpoint_async=false \
    > "$work/supervise.out" 2> "$work/supervise.err" || { tail "$work/supervise.err"; exit 1; }
mpirun --oversubscribe -n 2 "$bin" train --config "$work/train.json" --out "$work/straight" \
    --set checkpoint_async=false > /dev/null
cat "$work/faulty/incidents.jsonl"
cat "$work/faulty/summary.json"
python3 - "$work" "$steps" <<'PY'
import json, sys
work, steps = sys.argv[1], int(sys.argv[2])
def losses(run):
    out = {}
    for line in open(f"{work}/{run}/metrics.jsonl"):
        row = json.loads(line)
        if "loss" in row: out[row["step"]] = row["loss"]
    return out
a, b = losses("faulty"), losses("straight")
assert len(a) == len(b) == steps, (len(a), len(b))
print("worst relative loss difference:", max(abs(a[s] - b[s]) / abs(b[s]) for s in b))
PY
