#!/usr/bin/env bash
# Muon's Newton-Schulz iteration count in training: the default job's config (the tiny model on the
# fortunes corpus, CPU) trained once per (ns_steps, seed), then a table of validation losses and an
# SVG of their curves (dev/ns/val_curves.py). Needs the default job's data (bash
# scripts/run_default.sh --stop-after 0) and a CPU build (make CUDA=0 BUILD=build-cpu).
# Usage (from the zayac root): [NS="5 4 3"] [SEEDS="1 2"] [OUT=/tmp/ns_study] bash dev/ns/ns_steps_study.sh
set -euo pipefail
NS=${NS:-5 4 3}
SEEDS=${SEEDS:-1 2}
OUT=${OUT:-/tmp/ns_study}
Z=${ZAYAC_BIN:-build-cpu/zayac}
mkdir -p "$OUT"
runs=()
for seed in $SEEDS; do
    for ns in $NS; do
        d="$OUT/ns${ns}_seed${seed}"
        echo "== ns_steps $ns, seed $seed -> $d"
        "$Z" train --config configs/train-tiny.json --device cpu --seed "$seed" \
            --set optimizer.ns_steps="$ns" --out "$d" --overwrite >"$d.log" 2>&1
        runs+=("ns_steps $ns, seed $seed=$d/metrics.jsonl")
    done
done
python3 dev/ns/val_curves.py "$OUT/val_curves.svg" "${runs[@]}"
