#!/usr/bin/env bash
# Checkpoint stall and write throughput on the GPU, a synchronous save against one in the
# background in the same call (issue 17: "training stall per checkpoint, goal < 1 s at zaya1-base
# widths, and write throughput").
# The model: configs/zaya1-base.json cut to LAYERS layers (its widths and its 262k vocabulary;
# the tokenizer of DATA uses only its first ids, which the trainer accepts), AdamW, global batch
# 2 x 4096, on DATA's text; on 1 GPU and, with 2 or more GPUs, on 2 under `zayac launch -n 2`:
#   sync:  checkpoint_async=false, EVERY steps and one checkpoint: training waits for the write;
#   async: the default, checkpoints at steps EVERY and 2 x EVERY: the steps after the first run
#          beside its write, the second save waits for the write's end if it is still going.
# A checkpoint's stall is the step loop's pause for it: the snapshot (one device-to-host copy into
# pinned memory; with 2 ranks also the weights made whole and the replica check) plus any wait for
# its write (all of it when synchronous; in the background only when the next save comes first).
# The numbers come from the metrics row the trainer writes per checkpoint (checkpoint_stall_s,
# checkpoint_wait_s, checkpoint_write_s: the slowest rank's; checkpoint_bytes: every rank's
# tensors; rank 0's write includes the commit) and the step rows (a step's own time, without its
# checkpoint). Everything is printed to stdout: the markdown table, the runs' checkpoint lines,
# and the tails of failed runs' logs.
# Usage (from the zayac root; DATA holds tokenizer.json and data/ from `zayac data prepare`):
#   DEBS=.ext/debs DATA=.ext/dpdata [LAYERS=4] [EVERY=6] [RUNS=DIR] bash scripts/gpu_ckpt_bench.sh
# RUNS is where the checkpoints go (default $OUT/runs; each run's folder is removed after it).
# About 2-3 minutes: three writes of ~16 GB per GPU count at 4 layers; the 2-GPU part is skipped
# when the 1-GPU part left less than a minute of a 3-minute budget (BUDGET_S).
set -u
export PATH=/usr/local/cuda/bin:$PATH
export NCCL_NVLS_ENABLE=0 # NVLink multicast stays off on the lent machines
OUT=${OUT:-/tmp/gpu_ckpt_out}
DATA=${DATA:-.ext/dpdata}
RUNS=${RUNS:-$OUT/runs}
LAYERS=${LAYERS:-4}
EVERY=${EVERY:-6}
BUDGET_S=${BUDGET_S:-180}
mkdir -p "$OUT" "$RUNS"
t0=$(date +%s)
. "$(dirname "$0")/gpu_deps.sh"
N=$(nvidia-smi -L | wc -l)
echo "$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1) x $N;" \
    "$(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB host memory"
echo "checkpoints written to $RUNS: $(df -hT "$RUNS" | awk 'NR == 2 {print $2 " file system, " $5 " free of " $3}')"
make -j"$(nproc)" DEPS_ROOT="$DEPS_ROOT" CUDA=1 build/zayac >"$OUT/build.log" 2>&1 ||
    { grep -E "error" "$OUT/build.log" | head -20; echo "build FAILED"; exit 1; }
echo "build done ($(($(date +%s) - t0)) s)"
Z=$PWD/build/zayac

python3 - "$OUT/base.json" "$LAYERS" <<'EOF'
import json, sys
c = json.load(open("configs/zaya1-base.json"))
c["num_hidden_layers"] = int(sys.argv[2])
c["layer_types"] = c["layer_types"][: int(sys.argv[2])]
json.dump(c, open(sys.argv[1], "w"), indent=1)
EOF
cat >"$OUT/train.json" <<EOF
{"model": "$OUT/base.json", "tokenizer": "$PWD/$DATA/tokenizer.json", "data": "$PWD/$DATA/data",
 "batch_size": 2, "seq_len": 4096, "steps": $EVERY, "optimizer": {"name": "adamw", "lr": 1e-4},
 "schedule": {"kind": "constant", "warmup": 1}, "eval_interval": 0, "keep_checkpoints": 1,
 "log_interval": 20, "seed": 1, "device": "cuda", "dist": {"timeout_s": 300}}
EOF
echo "model: zaya1-base widths, $LAYERS layers: $($Z info --config "$OUT/base.json" | grep -E '^ +total  ' | awk '{print $2}') parameters" \
    "(vocab_size $(python3 -c "import json; print(json.load(open('$OUT/base.json'))['vocab_size'])"), tokenizer" \
    "$(python3 -c "import json; print(len(json.load(open('$DATA/tokenizer.json'))['model']['vocab']))") ids); AdamW; batch 2 x 4096"

# run NAME GPUS ASYNC STEPS INTERVAL: trains, prints its checkpoint lines, keeps its metrics
run() {
    local dir=$RUNS/$1 log=$OUT/$1.log
    rm -rf "$dir"
    local cmd=("$Z" train --config "$OUT/train.json" --out "$dir" --steps "$4" --set
        "checkpoint_async=$3" --set "checkpoint_interval=$5")
    [ "$2" -gt 1 ] && cmd=("$Z" launch -n "$2" -- "${cmd[@]}")
    timeout 170 "${cmd[@]}" >"$log" 2>&1
    local rc=$?
    echo "run $1 ($2 GPU, async $3, $4 steps, checkpoint every $5): rc=$rc"
    grep -E "^(checkpoint step|waiting for|done:)" "$log" | sed 's/^/    /'
    [ $rc = 0 ] || { echo "=== $1.log (tail)"; tail -15 "$log"; }
    cp "$dir/metrics.jsonl" "$OUT/$1.metrics.jsonl" 2>/dev/null
    rm -rf "$dir"
    return $rc
}

# row MODE GPUS NAME: the table row of a run (its first checkpoint, at step EVERY)
row() {
    python3 - "$OUT/$3.metrics.jsonl" "$1" "$2" "$EVERY" <<'EOF' | tee -a "$OUT/table.md"
import json, statistics, sys
path, mode, gpus, at = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
step_ms, ck = {}, {}
for line in open(path):
    r = json.loads(line)
    if "loss" in r: step_ms[r["step"]] = 1000 * 2 * 4096 / r["tokens_per_s"]
    if "checkpoint_stall_s" in r: ck[r["step"]] = r
c = ck[at]
quiet = statistics.median(step_ms[s] for s in step_ms if 1 < s <= at)
during = [step_ms[s] for s in step_ms if at < s <= 2 * at]
last = ["%.3f (step %d)" % (ck[s]["checkpoint_stall_s"], s) for s in sorted(ck) if s != at]
print("| %s | %s | %.2f | %.3f | %.3f | %.3f%s | %.2f | %.2f | %.1f | %s |" % (
    mode, gpus, c["checkpoint_bytes"] / 1e9, c["checkpoint_stall_s"] - c["checkpoint_wait_s"],
    c["checkpoint_wait_s"], c["checkpoint_stall_s"], "; last save " + last[0] if last else "",
    c["checkpoint_write_s"], c["checkpoint_gb_per_s"], quiet,
    "%.1f" % statistics.median(during) if during else "-"))
EOF
}

header="| mode | GPUs | checkpoint GB (all ranks) | snapshot (s) | wait for the write (s) | stall (s) | write (s) | write GB/s | step ms without checkpoint | step ms beside the write |"
printf '%s\n|---|---|---|---|---|---|---|---|---|---|\n' "$header" >"$OUT/table.md"
counts=1
[ "$N" -ge 2 ] && counts="1 2"
for g in $counts; do
    if [ "$g" -gt 1 ] && [ $(($(date +%s) - t0)) -gt $((BUDGET_S - 60)) ]; then
        echo "| - | $g | skipped: less than a minute of the ${BUDGET_S} s budget left |" | tee -a "$OUT/table.md"
        continue
    fi
    run "sync_$g" "$g" false "$EVERY" "$EVERY" && row sync "$g" "sync_$g"
    run "async_$g" "$g" true $((2 * EVERY)) "$EVERY" && row async "$g" "async_$g"
done
echo
echo "Checkpoint stall and write throughput on $N x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1): zaya1-base widths, $LAYERS layers, its vocabulary; AdamW; 2 x 4096 tokens per step; a checkpoint every $EVERY steps"
echo "(command: DEBS=.ext/debs DATA=$DATA LAYERS=$LAYERS EVERY=$EVERY bash scripts/gpu_ckpt_bench.sh)"
cat "$OUT/table.md"
echo "stall = snapshot + wait: synchronous, the wait is the whole write; in the background, the"
echo "wait is what was left of the write when the next save came ($EVERY steps later here); 'last"
echo "save': the run's final one (its snapshot alone: the run then waits for its write, which is"
echo "not a training stall). Step ms: a step's own time (2 x 4096 tokens over tokens/s)."
echo "total $(($(date +%s) - t0)) s"
