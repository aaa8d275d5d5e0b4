#!/usr/bin/env bash
# A/B of an environment setting on `zayac bench train`, in one call on one GPU: builds, then runs
# every case and optimizer with ENV_B unset and set, alternating, ROUNDS rounds, and prints the
# medians. Usage (from the zayac root, on the GPU machine):
#   DEBS=.ext/debs ENV_B="CUDA_DEVICE_MAX_CONNECTIONS=1" [ROUNDS=2] [CASES="bench-small:8:2048"] \
#       [OPTIMS="adamw"] bash dev/scripts/env_ab.sh
# Files land in $OUT: summary.txt, build.log, ab_*.json / .txt.
set -u
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/env_ab_out}
mkdir -p "$OUT"
note() { echo "$*" | tee -a "$OUT/summary.txt"; }
. "$(dirname "$0")/../../scripts/gpu_deps.sh"
note "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader); B: $ENV_B"
make -j"$(nproc)" DEPS_ROOT="$DEPS_ROOT" CUDA=1 all >"$OUT/build.log" 2>&1 ||
    { grep -E "error" "$OUT/build.log" | head -20; exit 1; }
note "| case | optim | variant | round | ms/step |"
note "|---|---|---|---|---|"
for r in $(seq 1 "${ROUNDS:-2}"); do
    for c in ${CASES:-bench-small:8:2048 bench-base:4:4096}; do
        IFS=: read -r preset batch seq <<<"$c"
        for optim in ${OPTIMS:-adamw}; do
            for v in A B; do
                f="$OUT/ab_${preset}_${optim}_${v}_$r"
                if [ $v = B ]; then pre=(env "$ENV_B"); else pre=(env); fi
                timeout 240 "${pre[@]}" build/zayac bench train --preset "$preset" --batch "$batch" \
                    --seq "$seq" --optim "$optim" --steps 20 --warmup 5 --peak-tflops 989 \
                    --json "$f.json" >"$f.txt" 2>&1
                row=$(python3 -c "import json;print('%.2f'%json.load(open('$f.json'))['step_ms']['median'])" 2>/dev/null || echo failed)
                note "| $preset | $optim | $v | $r | $row |"
            done
        done
    done
done
python3 - "$OUT" <<'PY' | tee -a "$OUT/summary.txt"
import glob, json, re, statistics, sys
ms = {}
for f in glob.glob(sys.argv[1] + "/ab_*.json"):
    m = re.search(r"ab_(.+)_(\w+)_([AB])_\d+\.json$", f)
    try: ms.setdefault((m[1], m[2], m[3]), []).append(json.load(open(f))["step_ms"]["median"])
    except Exception: pass
print("| case | optim | A ms | B ms | A / B |\n|---|---|---|---|---|")
for case, optim in sorted({(k[0], k[1]) for k in ms}):
    a, b = (statistics.median(ms.get((case, optim, v), [0])) for v in "AB")
    print(f"| {case} | {optim} | {a:.2f} | {b:.2f} | {a / b if b else 0:.3f} |")
PY
