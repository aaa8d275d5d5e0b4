#!/usr/bin/env bash
# AdamW's moments in fp32 and in bf16 (optimizer.adam_moments) trained side by side: for each
# beta2 of BETA2S and each seed, one run per moment precision through dev/ns/ns_steps_study.sh
# (AdamW for every tensor, its model and data settings), then one table and SVG of all the
# validation curves (dev/ns/val_curves.py). beta2 0.999 is where rounding to nearest would stall
# the second moment (optim/moments.h), so it is the case stochastic rounding has to carry.
# Usage (from the zayac root):
#   [DEVICE=cuda] [ZAYAC_BIN=build/zayac] [WIDTHS=zaya1-base] [DATA=runs/big/data] [LR=0.001] \
#       [BETA2S="0.95 0.999"] [SEEDS=1] [OUT=/tmp/moments_study] [SETS="steps=600 ..."] \
#       bash dev/optim/moments_study.sh
set -euo pipefail
OUT=${OUT:-/tmp/moments_study}
SEEDS=${SEEDS:-1}
mkdir -p "$OUT"
runs=()
for b2 in ${BETA2S:-0.95 0.999}; do
    for m in float32 bfloat16; do
        d="$OUT/beta2_${b2}_$m"
        DEVICE=${DEVICE:-cuda} ZAYAC_BIN=${ZAYAC_BIN:-build/zayac} WIDTHS=${WIDTHS:-zaya1-base} \
            DATA=${DATA:-runs/big/data} NS=5 SEEDS="$SEEDS" PRUNE=1 OUT="$d" \
            SETS="${SETS:-steps=600 eval_interval=50 eval_batches=16} optimizer.name=\"adamw\"
                  optimizer.lr=${LR:-0.001} optimizer.beta2=$b2 optimizer.adam_moments=\"$m\"" \
            bash dev/ns/ns_steps_study.sh >"$d.log" 2>&1 || { tail -5 "$d.log"; exit 1; }
        for s in $SEEDS; do runs+=("beta2 $b2 $m, seed $s=$d/ns5_seed$s/metrics.jsonl"); done
    done
done
python3 dev/ns/val_curves.py "$OUT/moments_val_curves.svg" "${runs[@]}" | tee "$OUT/table.md"
