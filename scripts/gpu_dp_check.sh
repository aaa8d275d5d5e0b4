#!/usr/bin/env bash
# Data parallel on the GPUs of one host, in one call (a 2-GPU kind of the device tool):
#   1. the NCCL communicator's tests over every GPU (each NCCL algorithm: default, Ring, Tree);
#   2. `zayac bench train -n 1` and `-n N` side by side (bench-small; AdamW and Muon; then
#      zaya1-base's widths with 4 layers and bench-base's 8, AdamW): tokens/s per GPU, MFU, memory,
#      optimizer per rank; the embedding is updated a slice per rank (dist.embedding_update's
#      default), and each N-GPU case runs again with it updated by every rank (`--embedding-update
#      replicated`, rows "+replicated"; REPLICATED=0 skips them) and by its owner alone (rows
#      "+owner"; OWNER=0 skips them);
#   3. `zayac launch -n N -- zayac train` against one GPU on real text (bench-small widths, the
#      same global batch): the two loss curves (and one GPU taking each step as 2 micro-batches:
#      the noise floor; and N GPUs with dist.embedding_update=owner), and a stop at the middle + --resume
#      on N GPUs against the uninterrupted N-GPU run (bit for bit);
#   4. a kernel trace of the N-GPU bench-small step (TRACE=0 skips it): the share of the NCCL
#      kernels' time the other kernels run beside them.
# Usage (from the zayac root; DATA holds tokenizer.json and data/ from `zayac data prepare`):
#   DEBS=.ext/debs DATA=.ext/dpdata [ALGOS="default Ring Tree,Ring"] [ONE_GPU=1] [BASE=1] \
#       bash scripts/gpu_dp_check.sh
# ONE_GPU=0 skips the 1-GPU benchmark baselines, BASE=0 the zaya1-base widths (4 and 8 layers; BASE4=0
# the 4 alone), TRAIN=0 the training on text (3.) and the trace; NCCL_VARIANTS="VAR=VALUE ..." adds
# the N-GPU bench-base AdamW step under each NCCL setting. The summary and
# the tails of failed runs' logs are printed at the end.
# Files land in $OUT: summary.txt (the results), build.log, comm_*.log, bench_*.{txt,json},
# train_*/ (metrics.jsonl, loss.png) and curves.txt.
set -u
export PATH=/usr/local/cuda/bin:$PATH
export NCCL_NVLS_ENABLE=0 # NVLink multicast stays off on the lent machines
OUT=${OUT:-/tmp/gpu_dp_out}
DATA=${DATA:-.ext/dpdata}
mkdir -p "$OUT"
note() { echo "$*" | tee -a "$OUT/summary.txt"; }
. "$(dirname "$0")/gpu_deps.sh"
N=$(nvidia-smi -L | wc -l)
note "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1) x $N"
nvidia-smi topo -m >"$OUT/topo.txt" 2>&1
t0=$(date +%s)
make -j"$(nproc)" DEPS_ROOT="$DEPS_ROOT" CUDA=1 all build/tests/test_comm_nccl >"$OUT/build.log" 2>&1 ||
    { grep -E "error" "$OUT/build.log" | head -20 | tee -a "$OUT/summary.txt"; note "build FAILED"; exit 1; }
note "build done ($(($(date +%s) - t0)) s)"
Z=$PWD/build/zayac

# 1. the communicator
for algo in ${ALGOS:-default Ring Tree,Ring}; do
    env_algo=()
    [ "$algo" != default ] && env_algo=(NCCL_ALGO=$algo)
    env "${env_algo[@]}" timeout 90 build/tests/test_comm_nccl >"$OUT/comm_$algo.log" 2>&1
    note "test_comm_nccl NCCL_ALGO=$algo rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/comm_$algo.log" | tr '\n' ' ')"
done

# 2. bench train, 1 GPU and N GPUs (--batch is per GPU)
python3 - "$OUT/base4.json" <<'EOF'
import json, sys
c = json.load(open("configs/zaya1-base.json"))
c["num_hidden_layers"] = 4
c["layer_types"] = c["layer_types"][:4]
json.dump(c, open(sys.argv[1], "w"), indent=1)
EOF
note "| model | optim | GPUs | batch/GPU x seq | ms/step | tokens/s | tokens/s per GPU | per GPU vs 1 | ms/step median | per GPU vs 1, medians | MFU | optimizer GiB per rank (max) | device GiB |"
note "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
bench() { # model-args label optim batch seq n [extra bench args, label suffix]
    local f="$OUT/bench_$2${8:-}_$3_n$6"
    timeout 120 $Z bench train -n "$6" $1 --batch "$4" --seq "$5" --optim "$3" --steps 10 --warmup 3 \
        --peak-tflops 989 --profile ${7:-} --json "$f.json" >"$f.txt" 2>&1 || { note "| $2${8:-} | $3 | $6 | failed: $(tail -2 "$f.txt" | tr '\n' ' ') |"; return; }
    python3 - "$f.json" "$OUT/bench_$2_$3_n1.json" "$2${8:-}" "$3" "$6" "$4" "$5" <<'EOF' | tee -a "$OUT/summary.txt"
import json, os, sys
j = json.load(open(sys.argv[1]))
per = j["tokens_per_s"] / j["world_size"]
one = json.load(open(sys.argv[2])) if os.path.exists(sys.argv[2]) else None
ratio = per / one["tokens_per_s"] if one else float("nan")
# per GPU vs 1 from the median step times (each GPU's batch is the 1-GPU batch): one slow step
# moves the mean, not this
ratio_med = one["step_ms"]["median"] / j["step_ms"]["median"] if one else float("nan")
m = j["memory"]
print("| %s | %s | %s | %s x %s | %.1f | %.0f | %.0f | %.3f | %.1f | %.3f | %.1f%% | %.2f | %.1f |" % (
    sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7], j["step_ms"]["mean"],
    j["tokens_per_s"], per, ratio, j["step_ms"]["median"], ratio_med, 100 * j["mfu"],
    m["optimizer_bytes"] / 2**30, j["mem_gib"]))
EOF
}
counts="$N"
[ "${ONE_GPU:-1}" = 1 ] && counts="1 $N"
cases() { # model-args label optim batch seq: 1 GPU (unless ONE_GPU=0), N GPUs, N GPUs +replicated
    for n in $counts; do bench "$1" "$2" "$3" "$4" "$5" "$n"; done
    if [ "${REPLICATED:-1}" = 1 ]; then
        bench "$1" "$2" "$3" "$4" "$5" "$N" "--embedding-update replicated" +replicated
    fi
    if [ "${OWNER:-1}" = 1 ]; then
        bench "$1" "$2" "$3" "$4" "$5" "$N" "--embedding-update owner" +owner
    fi
}
for optim in adamw muon; do cases "--preset bench-small" bench-small "$optim" 8 2048; done
if [ "${BASE:-1}" = 1 ]; then
    [ "${BASE4:-1}" = 1 ] && cases "--config $OUT/base4.json" base-4layers adamw 2 4096
    # bench-base: the same widths with 8 layers and bench_vs_torch's batch (the embedding's
    # reduce at the end of the backward, 2.15 GB, is a smaller share of a longer step)
    for optim in adamw muon; do cases "--preset bench-base" bench-base "$optim" 4 4096; done
    # NCCL's own settings on the N-GPU bench-base AdamW step, one per word of NCCL_VARIANTS
    # ("NCCL_MAX_CTAS=16 NCCL_CTA_POLICY=1"): rows "bench-base+VAR=VALUE"
    for v in ${NCCL_VARIANTS:-}; do
        export "${v?}"
        bench "--preset bench-base" bench-base adamw 4 4096 "$N" "" "+$v"
        unset "${v%%=*}"
    done
fi
for f in "$OUT"/bench_*_n"$N".txt; do
    note "$(basename "$f"): $(grep -E 'optimizer phase per rank|share_weights' "$f" | tr '\n' ' ')"
done

# 3. training on text: 1 GPU against N GPUs (global batch 16 x 1024), then stop + resume on N
[ "${TRAIN:-1}" = 1 ] || { note "training on text skipped (TRAIN=0)"; exit 0; }
cat >"$OUT/train.json" <<EOF
{"model": "bench-small", "tokenizer": "$PWD/$DATA/tokenizer.json",
 "data": [{"path": "$PWD/$DATA/data", "weight": 1.0}], "batch_size": 16, "seq_len": 1024,
 "steps": 40, "optimizer": {"name": "muon", "lr": 0.003}, "schedule": {"kind": "cosine", "warmup": 5},
 "eval_interval": 0, "checkpoint_interval": 20, "log_interval": 10, "seed": 1, "device": "cuda",
 "dist": {"timeout_s": 60}}
EOF
train() { # name launcher-args... -- extra train args
    local name=$1
    shift
    timeout 120 "$@" >"$OUT/train_$name.txt" 2>&1
    note "train $name rc=$?: $(grep -E '^done|stopped|error|fatal' "$OUT/train_$name.txt" | head -3 | tr '\n' ' ')"
}
train one $Z train --config "$OUT/train.json" --out "$OUT/train_one"
# the noise floor: one GPU again, each step as 2 micro-batches of 8 (the GEMM shapes of each of
# 2 ranks), so a 1-vs-N difference can be read against what the shapes alone change
train one_accum2 $Z train --config "$OUT/train.json" --out "$OUT/train_one_accum2" \
    --set batch_size=8 --set grad_accum=2
train dp $Z launch -n "$N" -- $Z train --config "$OUT/train.json" --out "$OUT/train_dp"
train dp_owner $Z launch -n "$N" -- $Z train --config "$OUT/train.json" --out "$OUT/train_dp_owner" \
    --set dist.embedding_update=owner
train dp_stop $Z launch -n "$N" -- $Z train --config "$OUT/train.json" --out "$OUT/train_dp_resume" --stop-after 20
train dp_resume $Z launch -n "$N" -- $Z train --config "$OUT/train.json" --out "$OUT/train_dp_resume" --resume
python3 - "$OUT" <<'EOF' | tee "$OUT/curves.txt" | tee -a "$OUT/summary.txt"
import json, sys
def rows(run):
    out = {}
    try:
        for line in open("%s/train_%s/metrics.jsonl" % (sys.argv[1], run)):
            r = json.loads(line)
            if "loss" in r and "step" in r: out[r["step"]] = (r["loss"], r.get("grad_norm"), r.get("world_size"))
    except OSError as e:
        print("no metrics for", run, e)
    return out
one, dp, res, acc = rows("one"), rows("dp"), rows("dp_resume"), rows("one_accum2")
own = rows("dp_owner")
steps = sorted(set(one) & set(dp))
if steps:
    worst = max(abs(dp[s][0] - one[s][0]) / abs(one[s][0]) for s in steps)
    print("1 GPU vs N GPUs: %d steps, loss %.4f -> %.4f (1 GPU), %.4f -> %.4f (N), worst relative loss difference %.2e" % (
        len(steps), one[steps[0]][0], one[steps[-1]][0], dp[steps[0]][0], dp[steps[-1]][0], worst))
    floor = sorted(set(one) & set(acc))
    if floor:
        print("the noise floor, 1 GPU as 2 micro-batches of 8 vs 1 of 16: worst relative loss difference %.2e" % max(
            abs(acc[s][0] - one[s][0]) / abs(one[s][0]) for s in floor))
    owned = sorted(set(one) & set(own) & set(dp))
    if owned:
        print("1 GPU vs N GPUs with the embedding's owner updating it: worst relative loss difference %.2e; vs a slice each (the default) %.2e" % (
            max(abs(own[s][0] - one[s][0]) / abs(one[s][0]) for s in owned),
            max(abs(own[s][0] - dp[s][0]) / abs(dp[s][0]) for s in owned)))
    for s in steps[::5]:
        print("  step %3d  1 GPU %.5f  N GPUs %.5f  (world_size %s)" % (s, one[s][0], dp[s][0], dp[s][2]))
both = sorted(set(dp) & set(res))
if both:
    same = all(dp[s][0] == res[s][0] for s in both)
    print("N GPUs stopped at 20 and resumed vs uninterrupted: %d steps, bit-identical losses: %s" % (len(both), same))
EOF
# 4. the kernel trace of the 2-GPU bench-small step (dev/scripts/gpu_kernel_trace.sh): how much of
#    the gradient reduces' NCCL time the backward's kernels run beside them (TRACE=0 skips it)
if [ "${TRACE:-1}" = 1 ]; then
    OUT=$OUT/trace timeout 180 bash dev/scripts/gpu_kernel_trace.sh >"$OUT/trace.txt" 2>&1
    note "kernel trace rc=$?: $(grep -E '^NCCL kernels run' "$OUT/trace.txt" | tr '\n' ' ')"
fi
note "total $(($(date +%s) - t0)) s"
for f in "$OUT"/comm_*.log "$OUT"/bench_*.txt "$OUT"/train_*.txt; do
    grep -qE "FAILED|fatal|error|rc=[1-9]" "$f" 2>/dev/null || continue
    grep -q "PASSED" "$f" && ! grep -q "FAILED" "$f" && continue # the tests' expected errors
    echo "=== $(basename "$f") (tail)"
    grep -vE "^\[ +(RUN|OK) +\]" "$f" | tail -25
done
echo "=== summary"
cat "$OUT/summary.txt"
