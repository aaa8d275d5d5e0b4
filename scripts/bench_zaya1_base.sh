#!/usr/bin/env bash
# Does the full zaya1-base preset (8.8B parameters, 40 layers) train on one GPU
# at sequence 4096? Tries `zayac bench train` with AdamW and with Muon at batch 1 x 4096; when a
# run does not fit (zayac stops with "out of GPU memory: asked for X GiB, Y free"), also runs a
# 20-layer cut of the same config, whose tokens/s and memory give the per-layer cost.
# Usage (from the zayac root, after a CUDA build): OUT=dir bash scripts/bench_zaya1_base.sh
set -u
export OMP_WAIT_POLICY=passive
OUT=${OUT:-/tmp/zaya1_base}
mkdir -p "$OUT"
Z=build/zayac
run() { # name limit args...
    local name=$1 limit=$2
    shift 2
    local t=$(date +%s)
    timeout --kill-after=5 "$limit" $Z bench train "$@" --json "$OUT/$name.json" >"$OUT/$name.log" 2>&1
    echo "$name rc=$? $(($(date +%s) - t)) s: $(grep -E 'out of GPU memory|tokens/s|fatal' "$OUT/$name.log" | tail -2 | tr '\n' ' ')" |
        tee -a "$OUT/zaya1_summary.txt"
}
for opt in muon adamw; do
    run "zaya1_base_$opt" 150 --preset zaya1-base --batch 1 --seq 4096 --steps 3 --warmup 1 --optim "$opt"
done
python3 - "$OUT/zaya1_20layers.json.cfg" <<'PY'
import json, sys
c = json.load(open("configs/zaya1-base.json"))
c["num_hidden_layers"] = 20
c["layer_types"] = c["layer_types"][:20]
json.dump(c, open(sys.argv[1], "w"), indent=1)
PY
run zaya1_20layers_adamw 120 --config "$OUT/zaya1_20layers.json.cfg" --batch 1 --seq 4096 --steps 3 --warmup 1 --optim adamw
