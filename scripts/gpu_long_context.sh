#!/usr/bin/env bash
# Long context and memory settings on one GPU, in one call: `zayac bench train` at 32k (bench-small
# widths, 1 x 32768, AdamW) under cuDNN attention backward workspace caps (auto, the default: one
# pass where it fits; 2 GiB runs the deterministic backward in chunks of query rows; 17 GiB lets it
# run in one pass), and with
# activation recomputation; bench-base (4 x 4096) with and without recomputation; and the exit status
# of `--attention cudnn` on a shape cuDNN refuses (T = 1: status 2 expected).
# Usage (from the zayac root): DEBS=.ext/debs [LONG=0] [BASE=0] bash scripts/gpu_long_context.sh
# (LONG=0 skips the 32k cases, BASE=0 the bench-base ones)
# Files land in $OUT: summary.txt (the table), build.log, lc_*.{txt,json}.
set -u
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/gpu_long_context_out}
mkdir -p "$OUT"
note() { echo "$*" | tee -a "$OUT/summary.txt"; }
. "$(dirname "$0")/gpu_deps.sh"
note "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
make -j"$(nproc)" DEPS_ROOT="$DEPS_ROOT" CUDA=1 all >"$OUT/build.log" 2>&1 ||
    { grep -E "error" "$OUT/build.log" | head -20 | tee -a "$OUT/summary.txt"; note "build FAILED"; exit 1; }
Z=$PWD/build/zayac
note "| case | args | ms/step mean | median | tokens/s | MFU | device GiB | attention |"
note "|---|---|---|---|---|---|---|---|"
run() { # label args...
    local label=$1
    shift
    local f="$OUT/lc_$label"
    timeout 180 $Z bench train --steps 10 --warmup 3 --json "$f.json" "$@" >"$f.txt" 2>&1 ||
        { note "| $label | $* | failed rc=$?: $(tail -2 "$f.txt" | tr '\n' ' ') |"; return; }
    python3 - "$f.json" "$label" "$*" "$(grep -m1 -oE '(cuDNN [0-9]+|zayac.s kernels)[^;]*(backward in [0-9]+ chunks)?' "$f.txt")" <<'EOF' | tee -a "$OUT/summary.txt"
import json, sys
j = json.load(open(sys.argv[1]))
print("| %s | %s | %.1f | %.1f | %.0f | %.1f%% | %.1f | %s |" % (sys.argv[2], sys.argv[3], j["step_ms"]["mean"],
      j["step_ms"]["median"], j["tokens_per_s"], 100 * j["mfu"], j["mem_gib"], sys.argv[4][:90]))
EOF
}
python3 -c 'import json,sys; c=json.load(open("configs/bench-small.json")); c["max_position_embeddings"]=32768; json.dump(c, open(sys.argv[1], "w"), indent=1)' \
    "$OUT/small32k.json"
if [ "${LONG:-1}" = 1 ]; then
    L32="--config $OUT/small32k.json --batch 1 --seq 32768 --optim adamw"
    run 32k_auto $L32
    run 32k_ws2 $L32 --attention-workspace-gib 2
    run 32k_ws8 $L32 --attention-workspace-gib 8
    run 32k_ws17 $L32 --attention-workspace-gib 17
    run 32k_recompute $L32 --recompute
    run 32k_zayac $L32 --attention zayac
fi
if [ "${BASE:-1}" = 1 ]; then
    B="--preset bench-base --batch 4 --seq 4096 --optim adamw"
    run base $B
    run base_recompute $B --recompute
    run base_ws4 $B --attention-workspace-gib 4
fi
# cuDNN refuses T = 1: `--attention cudnn` must end with status 2 and cuDNN's reason
timeout 60 $Z bench train --preset tiny --batch 1 --seq 1 --steps 1 --warmup 0 --attention cudnn \
    >"$OUT/lc_refused.txt" 2>&1
note "--attention cudnn at T = 1: rc=$? (2 expected): $(grep -m1 -iE 'cudnn|error' "$OUT/lc_refused.txt" | cut -c1-200)"
