#!/usr/bin/env bash
# Muon's Newton-Schulz iteration count in training: the default job's config (the tiny model on the
# fortunes corpus) trained once per (ns_steps, seed), then a table of validation losses and an SVG
# of their curves (dev/ns/val_curves.py). Needs the default job's data and tokenizer (bash
# scripts/run_default.sh --stop-after 0: runs/default/data and runs/default/tokenizer.json) and a
# build (CPU: make CUDA=0 BUILD=build-cpu).
# Usage (from the zayac root):
#   [NS="5 4 3"] [SEEDS="1 2"] [OUT=/tmp/ns_study] [DEVICE=cpu] [ZAYAC_BIN=build-cpu/zayac] \
#       [WIDTHS=bench-small] [SETS="steps=300 ..."] bash dev/ns/ns_steps_study.sh
# WIDTHS=bench-small trains bench-small's widths instead of the tiny model's (hidden 1024, 8/2
# heads of 128, 16 experts of 1024, router 256) with 4 layers, the corpus's 4096-token vocabulary
# and 512 positions, 8 x 512 tokens a step for 200 steps (about one pass over the corpus). A GPU's
# job: whether four iterations keep up at widths where the normalised singular values are small
# (results/one-gpu-limit/README.md).
# WIDTHS=zaya1-base: the same with zaya1-base's widths (hidden 2048, 16 experts of 2048), where
# the normalised singular values are smaller still.
# LAYERS sets that model's depth (default 4; bench-small has 12).
# SETS: more `--set` overrides (space-separated key=value).
# DATA=DIR trains on a `zayac data prepare` folder other than the default job's (its own
# tokenizer.json inside), e.g. a corpus larger than fortunes for runs longer than one pass.
# PRUNE=1 deletes each run's checkpoints once it ends (only metrics.jsonl is read; at zaya1-base's
# widths a run's final checkpoint is 6.7 GB).
# NS entries ending in m (e.g. "4m") use the minimax coefficients (optimizer.ns_coefficients);
# entries with an a (e.g. "4a", "3am") start from AOL's rescaling (optimizer.ns_precondition aol).
set -euo pipefail
NS=${NS:-5 4 3}
SEEDS=${SEEDS:-1 2}
OUT=${OUT:-/tmp/ns_study}
DEVICE=${DEVICE:-cpu}
Z=${ZAYAC_BIN:-build-cpu/zayac}
mkdir -p "$OUT"
sets=()
case "${WIDTHS:-tiny}" in
    tiny) width= ;;
    bench-small) width=1024 ;;
    zaya1-base) width=2048 ;;
    *) echo "ns_steps_study: WIDTHS must be tiny, bench-small or zaya1-base" >&2; exit 2 ;;
esac
if [ -n "$width" ]; then
    model='{"model_type": "zaya", "vocab_size": 4096, "hidden_size": '$width', "num_hidden_layers": '"${LAYERS:-4}"',
 "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 128, "num_experts": 16,
 "num_experts_per_tok": 1, "moe_intermediate_size": '$width', "router_hidden_size": 256,
 "max_position_embeddings": 512, "cca_time0": 2, "cca_time1": 2, "rms_norm_eps": 1e-05,
 "initializer_range": 0.02, "pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 1,
 "rope_parameters": {"hybrid": {"rope_type": "default", "rope_theta": 5000000.0,
 "partial_rotary_factor": 0.5}, "hybrid_sliding": {"rope_type": "default", "rope_theta": 10000.0,
 "partial_rotary_factor": 0.5}}}'
    sets+=(--set "model=$model" --set seq_len=512 --set batch_size=8 --set steps=200
        --set eval_interval=25 --set checkpoint_interval=0)
fi
if [ -n "${DATA:-}" ]; then
    sets+=(--set "tokenizer=\"$DATA/tokenizer.json\"" --set "data=[{\"path\": \"$DATA\", \"weight\": 1.0}]")
fi
for kv in ${SETS:-}; do sets+=(--set "$kv"); done
runs=()
for seed in $SEEDS; do
    for ns in $NS; do
        steps=${ns%%[am]*} coef=fixed pre=frobenius
        case "$ns" in *m*) coef=minimax ;; esac
        case "$ns" in *a*) pre=aol ;; esac
        d="$OUT/ns${ns}_seed${seed}"
        echo "== ns_steps $steps ($coef, $pre), seed $seed -> $d"
        "$Z" train --config configs/train-tiny.json --device "$DEVICE" --seed "$seed" \
            --set optimizer.ns_steps="$steps" --set optimizer.ns_coefficients="\"$coef\"" \
            --set optimizer.ns_precondition="\"$pre\"" \
            "${sets[@]}" --out "$d" --overwrite >"$d.log" 2>&1
        [ "${PRUNE:-0}" = 1 ] && rm -rf "$d/checkpoints"
        echo "   val_loss at the end: $(grep -o '"val_loss":[0-9.]*' "$d/metrics.jsonl" | tail -1)"
        runs+=("ns_steps $steps $coef $pre, seed $seed=$d/metrics.jsonl")
    done
done
python3 dev/ns/val_curves.py "$OUT/val_curves.svg" "${runs[@]}"
