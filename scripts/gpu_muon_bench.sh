#!/usr/bin/env bash
# Muon's cost against AdamW on one GPU (issue 19), in one call of the lent GPU machine, printing as
# it goes:
#  1. builds zayac and the optimizer test with CUDA (sm_90a);
#  2. test_cuda_syrk: the Hopper SYRK against the CPU, then its time against cuBLAS's whole
#     product on Newton-Schulz's shapes;
#     test_cuda_optim: the GPU optimizer against the CPU one (AdamW bits, Muon within the bf16
#     tolerance: the symmetric products by the SYRK, by cuBLAS block rows and the scheme before
#     issue 19 alike), then the optimizer step alone on bench-small's and bench-base's tables:
#     AdamW, Muon as before, Muon with the symmetric products by cuBLAS, Muon now (ms, x AdamW,
#     Newton-Schulz TFLOP/s);
#  3. `zayac bench train --preset bench-small` (8 x 2048) with --optim adamw, then muon: ms/step
#     and the Muon/AdamW ratio (issue 19's goal: <= 1.3x), with the profiled optimizer phase.
# Usage (from the zayac root): DEBS=.ext/debs [OUT=dir] bash scripts/gpu_muon_bench.sh
set -u
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/gpu_muon_bench}
mkdir -p "$OUT"
T0=$(date +%s)
. "$(dirname "$0")/gpu_deps.sh"
at() { echo "[$(($(date +%s) - T0)) s] $*"; }
at "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"

timeout 200 make -j"$(nproc)" DEPS_ROOT="$DEPS_ROOT" CUDA=1 build/zayac build/tests/test_cuda_optim build/tests/test_cuda_syrk \
    >"$OUT/build.log" 2>&1 || { at "build FAILED"; grep -E "error" "$OUT/build.log" | head -20; exit 1; }
at "build done"

at "test_cuda_syrk (against the CPU, then against cuBLAS):"
timeout 120 build/tests/test_cuda_syrk 2>&1 | tee "$OUT/test_cuda_syrk.log" |
    grep -E "^\[ +(OK|FAILED|PASSED|SKIPPED) +\]|x [0-9]+ x|cuBLAS ms|whole product|ERROR|got "
at "test_cuda_syrk rc=${PIPESTATUS[0]}"

at "test_cuda_optim (GPU against CPU, then the optimizer step alone):"
ZAYAC_ROOT=$PWD timeout 150 build/tests/test_cuda_optim 2>&1 | tee "$OUT/test_cuda_optim.log" |
    grep -E "^\[ +(OK|FAILED|PASSED|SKIPPED) +\]|optimiser step|AdamW everywhere|Muon \+ AdamW|Muon now|Muon .*SYRK|Muon .*relative L2|worst:|clip_grad"
at "test_cuda_optim rc=${PIPESTATUS[0]}"

for o in adamw muon; do
    timeout 90 build/zayac bench train --preset bench-small --batch 8 --seq 2048 --steps 20 \
        --optim $o --profile --json "$OUT/train_$o.json" >"$OUT/train_$o.log" 2>&1
    at "bench train bench-small --optim $o rc=$?"
done
python3 - "$OUT" <<'EOF'
import json, os, sys
out = sys.argv[1]
r = {}
for o in ("adamw", "muon"):
    try: r[o] = json.load(open(os.path.join(out, f"train_{o}.json")))
    except Exception: print(f"{o}: no result (see {out}/train_{o}.log)")
for o, z in r.items():
    ph = z.get("phases_ms") or {}
    print(f"bench-small 8 x 2048, {o}: {z['step_ms']['mean']:.2f} ms/step (min {z['step_ms']['min']:.2f}), "
          f"{z['tokens_per_s']:,.0f} tokens/s; profiled optimizer phase {ph.get('optimizer', float('nan')):.2f} ms")
if len(r) == 2:
    a, m = r["adamw"]["step_ms"]["mean"], r["muon"]["step_ms"]["mean"]
    print(f"Muon / AdamW step: {m / a:.3f}x ({m - a:+.2f} ms per step; goal <= 1.3x)")
    for o in ("muon",):
        ops = [x for x in r[o].get("breakdown") or [] if x["op"].startswith(("optim", "clip"))]
        print("optimizer ops (muon run): " + ", ".join(f"{x['op']} {x['ms_per_step']:.2f} ms" for x in ops))
EOF
for o in adamw muon; do [ -f "$OUT/train_$o.json" ] || tail -5 "$OUT/train_$o.log"; done
at "total"
