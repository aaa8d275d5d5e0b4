#!/usr/bin/env bash
# Muon's momentum in fp32 and in bf16 (optimizer.muon_momentum_dtype) trained side by side: for
# each seed, one run per precision of the default optimizer (Muon for the matrices, AdamW's fp32
# moments for the rest) through dev/ns/ns_steps_study.sh (its model and data settings), then one
# table and SVG of all the validation curves (dev/ns/val_curves.py).
# Usage (from the zayac root):
#   [DEVICE=cuda] [ZAYAC_BIN=build/zayac] [WIDTHS=zaya1-base] [DATA=runs/big/data] [SEEDS="1 2 3"] \
#       [OUT=/tmp/muon_momentum_study] [SETS="steps=600 ..."] bash dev/optim/muon_momentum_study.sh
set -euo pipefail
OUT=${OUT:-/tmp/muon_momentum_study}
SEEDS=${SEEDS:-1 2 3}
mkdir -p "$OUT"
runs=()
for m in float32 bfloat16; do
    d="$OUT/$m"
    DEVICE=${DEVICE:-cuda} ZAYAC_BIN=${ZAYAC_BIN:-build/zayac} WIDTHS=${WIDTHS:-zaya1-base} \
        DATA=${DATA:-runs/big/data} NS=5 SEEDS="$SEEDS" PRUNE=1 OUT="$d" \
        SETS="${SETS:-steps=600 eval_interval=50 eval_batches=16} optimizer.muon_momentum_dtype=\"$m\"" \
        bash dev/ns/ns_steps_study.sh >"$d.log" 2>&1 || { tail -5 "$d.log"; exit 1; }
    for s in $SEEDS; do runs+=("momentum $m, seed $s=$d/ns5_seed$s/metrics.jsonl"); done
done
python3 dev/ns/val_curves.py "$OUT/muon_momentum_val_curves.svg" "${runs[@]}" | tee "$OUT/table.md"
