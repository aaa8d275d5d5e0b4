#!/usr/bin/env bash
# zayac against PyTorch (HF transformers' ZAYA, eager and torch.compile) on the same GPU, the same
# config and batch, in one call of the lent GPU machine, for each case of $CASES:
#   small     bench-small, batch 8 x 2048: AdamW, and Muon's cost per step against AdamW
#   base      bench-base (zaya1-base's widths, 8 layers), batch 4 x 4096 (BASELINES.md's case)
#   small32k  bench-small's widths at max_position_embeddings 32768, batch 1 x 32768
# Per case: zayac bench train --optim adamw (the first run measures the bf16 matmul peak, the
# others reuse it), the PyTorch baseline compiled, then eager; and a table with the ratio against
# the faster of the two. Usage (from the zayac root):
#   [DEPS_ROOT=dir | DEBS=.ext/debs] [TORCH_BASELINE=.ext/torch_zaya_baseline.py] [OUT=dir] \
#       [CASES=small,base,small32k] [NO_EAGER=base] bash scripts/bench_vs_torch.sh
# DEPS_ROOT: Debian packages already unpacked with dpkg -x (passed to make); else the .deb files
# of $DEBS are unpacked into /tmp/zy_deps when there are any. Everything lands in $OUT (logs and
# JSON packed into logs.tgz, summary.md, steps.txt). BUDGET_S (default 540) caps the whole run:
# each step's time limit shrinks to what is left, and a step with under 20 s left is skipped.
# NO_EAGER: cases whose HF eager run is skipped (BASELINES.md: eager ran out of memory at base).
# EAGER_FIRST (default small32k): cases whose eager run goes before the compiled one.
# ZAYAC_ARGS: extra `zayac bench train` flags for every zayac run (e.g. "--recompute").
# BF16M (default small,base): cases that also run zayac's AdamW with its moments in bf16
# (--adam-moments bfloat16, optimizer.adam_moments), reported beside the default fp32 moments.
# HF_NOCACHE (default small): cases that also run the compiled baseline with use_cache=False (a
# copy of $TORCH_BASELINE with that one argument added): the baseline trains with the config's
# default use_cache=True, building ZAYA's hybrid cache, which the model says is not compileable,
# every forward. The faster HF run is the one compared. Both compiled runs log torch.compile's
# graph breaks (TORCH_LOGS=graph_breaks); the summary counts them.
set -u
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1 OMP_WAIT_POLICY=passive
OUT=${OUT:-/tmp/bench_vs_torch}
TB=${TORCH_BASELINE:-.ext/torch_zaya_baseline.py}
BUDGET_S=${BUDGET_S:-540}
CASES=${CASES:-small,base,small32k}
NO_EAGER=${NO_EAGER:-}
BF16M=${BF16M-small,base}
EAGER_FIRST=${EAGER_FIRST-small32k}
HF_NOCACHE=${HF_NOCACHE-small}
STEPS=${STEPS:-20}
mkdir -p "$OUT"
T0=$(date +%s)
: >"$OUT/steps.txt"

# step NAME LIMIT CMD...: runs CMD under min(LIMIT, time left), logging to $OUT/NAME.log
step() {
    local name=$1 limit=$2
    shift 2
    local t=$(date +%s)
    local left=$((BUDGET_S - (t - T0)))
    if [ $left -lt 20 ]; then
        echo "$name skipped: out of time ($((t - T0)) s used of $BUDGET_S)" | tee -a "$OUT/steps.txt"
        return 99
    fi
    [ $limit -gt $left ] && limit=$left
    timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    echo "$name rc=$rc $(($(date +%s) - t)) s (at $(($(date +%s) - T0)) s, limit $limit s)" |
        tee -a "$OUT/steps.txt"
    return $rc
}

# --- dependencies and the machine
MAKE_DEPS=()
if [ -z "${DEPS_ROOT:-}" ] && ls "${DEBS:-.ext/debs}"/*.deb >/dev/null 2>&1; then
    DEPS_ROOT=/tmp/zy_deps
    mkdir -p "$DEPS_ROOT"
    for f in "${DEBS:-.ext/debs}"/*.deb; do dpkg -x "$f" "$DEPS_ROOT"; done
fi
if [ -n "${DEPS_ROOT:-}" ]; then
    MAKE_DEPS=(DEPS_ROOT="$DEPS_ROOT")
    L=$DEPS_ROOT/usr/lib/x86_64-linux-gnu
    export LD_LIBRARY_PATH=$L:$L/openblas-openmp:${LD_LIBRARY_PATH:-}
fi
{
    date -u +%Y-%m-%dT%H:%M:%SZ
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
    nvcc --version | tail -1
    python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
    nproc
} >"$OUT/machine.log" 2>&1

# --- zayac and PyTorch, case by case
step build 240 make -j16 "${MAKE_DEPS[@]}" CUDA=1 all
Z=build/zayac
[ -x $Z ] || { echo "zayac did not build: see $OUT/build.log" | tee -a "$OUT/steps.txt"; tail -20 "$OUT/build.log"; }
[ -f "$TB" ] || echo "no PyTorch baseline at $TB (TORCH_BASELINE): skipped" | tee -a "$OUT/steps.txt"
# bench-small's widths at 32k positions (the preset stops at 2048)
python3 -c 'import json,sys; c=json.load(open("configs/bench-small.json")); c["max_position_embeddings"]=32768; json.dump(c, open(sys.argv[1], "w"), indent=1)' \
    "$OUT/bench-small-32k.json"
PEAK=
# the peak measured by the first zayac run: one denominator for every MFU
peak_of() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["peak_tflops"] or "")' "$1" 2>/dev/null; }

# run_case CASE BATCH SEQ STEPS "HF_ARGS" MODEL_ARGS...: zayac AdamW (and Muon for small), HF
# compiled and eager; HF_ARGS: the baseline's hidden layers experts moe_inter seq batch vocab
run_case() {
    local c=$1 b=$2 t=$3 n=$4 hf=$5
    shift 5
    local model=("$@")
    local zc=(bench train "${model[@]}" --batch "$b" --seq "$t" --steps "$n" --profile ${ZAYAC_ARGS:-})
    if [ -x $Z ]; then
        step ${c}_zayac_adamw 150 $Z "${zc[@]}" --optim adamw ${PEAK:+--peak-tflops "$PEAK"} \
            --json "$OUT/${c}_zayac_adamw.json"
        [ -z "$PEAK" ] && PEAK=$(peak_of "$OUT/${c}_zayac_adamw.json")
    fi
    # torch.compile first: the number the targets are set against and the slowest to start; in
    # the cases of EAGER_FIRST eager goes first, where it is the faster baseline and the compile
    # the one an exhausted budget should drop (32k: eager 448 ms a step against compile's 741)
    case ",$EAGER_FIRST," in *",$c,"*) hf_eager "$c" "$hf" ;; esac
    [ -f "$TB" ] && TORCH_LOGS=graph_breaks step ${c}_hf_compile 240 python3 "$TB" $hf 1
    case ",$HF_NOCACHE," in *",$c,"*) hf_nocache "$c" "$hf" ;; esac
    [ -x $Z ] && [ "$c" = small ] && step ${c}_zayac_muon 120 $Z "${zc[@]}" --optim muon \
        ${PEAK:+--peak-tflops "$PEAK"} --json "$OUT/${c}_zayac_muon.json"
    case ",$BF16M," in
    *",$c,"*) [ -x $Z ] && step ${c}_zayac_adamw_bf16m 150 $Z "${zc[@]}" --optim adamw \
        --adam-moments bfloat16 ${PEAK:+--peak-tflops "$PEAK"} --json "$OUT/${c}_zayac_adamw_bf16m.json" ;;
    esac
    case ",$EAGER_FIRST," in *",$c,"*) ;; *) hf_eager "$c" "$hf" ;; esac
}
# hf_nocache CASE "HF_ARGS": the compiled baseline with use_cache=False in its training call
hf_nocache() {
    [ -f "$TB" ] || return 0
    local nc="$OUT/torch_zaya_baseline_nocache.py"
    sed 's/step(input_ids=x, labels=x)/step(input_ids=x, labels=x, use_cache=False)/' "$TB" >"$nc"
    if ! grep -q "use_cache=False" "$nc"; then
        echo "${1}_hf_compile_nocache skipped: $TB has no 'step(input_ids=x, labels=x)' to change" |
            tee -a "$OUT/steps.txt"
        return 0
    fi
    TORCH_LOGS=graph_breaks step ${1}_hf_compile_nocache 240 python3 "$nc" $2 1
}
# hf_eager CASE "HF_ARGS": the eager baseline, unless NO_EAGER names the case
hf_eager() {
    [ -f "$TB" ] || return 0
    case ",$NO_EAGER," in
    *",$1,"*) echo "${1}_hf_eager skipped (NO_EAGER)" | tee -a "$OUT/steps.txt" ;;
    *) step ${1}_hf_eager 120 python3 "$TB" $2 0 ;;
    esac
}
for c in ${CASES//,/ }; do
    case $c in
    small) run_case small 8 2048 "$STEPS" "1024 12 16 1024 2048 8 32768" --preset bench-small ;;
    base) run_case base 4 4096 10 "2048 8 16 2048 4096 4 262272" --preset bench-base ;;
    small32k) run_case small32k 1 32768 10 "1024 12 16 1024 32768 1 32768" \
        --config "$OUT/bench-small-32k.json" ;;
    *) echo "unknown case '$c' in CASES (small, base, small32k)" | tee -a "$OUT/steps.txt" ;;
    esac
done

# --- the comparison
cat >"$OUT/compare.py" <<'EOF'
import json, os, sys
out, cases = sys.argv[1], sys.argv[2].split(",")
CASES = {"small": ("bench-small", "8 x 2048", 2.0), "base": ("bench-base", "4 x 4096", 1.5),
         "small32k": ("bench-small widths at 32k", "1 x 32768", 1.5)}
def load(name):
    try: return json.load(open(os.path.join(out, name)))
    except Exception: return None
def hf(name):  # the last JSON line with tokens_per_s in the baseline's log
    try: lines = open(os.path.join(out, name + ".log")).read().splitlines()
    except OSError: return None
    for ln in reversed(lines):
        if ln.startswith("{") and "tokens_per_s" in ln:
            try: return json.loads(ln)
            except ValueError: pass
    return None
runs = {}
for c in cases:
    runs[c] = dict(za=load(c + "_zayac_adamw.json"), zm=load(c + "_zayac_muon.json"),
                   zb=load(c + "_zayac_adamw_bf16m.json"),
                   he=hf(c + "_hf_eager"), hc=hf(c + "_hf_compile"),
                   hn=hf(c + "_hf_compile_nocache"))
    for k, name in (("he", "_hf_eager"), ("hc", "_hf_compile"), ("hn", "_hf_compile_nocache")):
        if runs[c][k]: json.dump(runs[c][k], open(os.path.join(out, c + name + ".json"), "w"), indent=1)
zs = [z for r in runs.values() for z in (r["za"], r["zm"]) if z]
peak = zs[0].get("peak_tflops") if zs else None
gpu = (zs[0].get("machine") or {}).get("gpu") if zs else None
L = []
P = L.append
P(f"# zayac vs HF transformers ZAYA, one {gpu or 'GPU'}, every run in this call")
P("")
if peak: P(f"MFU against the bf16 matmul peak zayac measured on this GPU: {peak:.0f} TFLOP/s (8192^3 GEMM).")
def zrow(label, z):
    if not z: P(f"| {label} | failed or skipped | | | | |"); return
    mfu = z.get("mfu")
    mfu = f"{100 * mfu:.1f}%" if mfu is not None else "n/a"
    P(f"| {label} | {z['step_ms']['mean']:.1f} (min {z['step_ms']['min']:.1f}) | {z['tokens_per_s']:,.0f} | "
      f"{z['model_tflops']:.1f} | {mfu} | {z['mem_gib']:.1f} (device {z['memory'].get('device_used_gib') or 0:.1f}) |")
def hrow(label, h):
    if not h: P(f"| {label} | failed or skipped | | | | |"); return
    mfu = f"{100 * h['tflops'] / peak:.1f}%" if peak else "n/a"
    P(f"| {label} | {h['step_ms']:.1f} | {h['tokens_per_s']:,.0f} | {h['tflops']:.1f} | {mfu} | "
      f"{h['mem_gb'] * 1e9 / 2**30:.1f} (max allocated) |")
def ratio(label, a, b, target=None):
    if a and b:
        r = a / b
        P(f"- {label}: **{r:.3f}**" + (f" (target >= {target}: {'met' if r >= target else 'NOT met'})" if target else ""))
    else:
        P(f"- {label}: n/a (a run failed or was skipped)")
tps = lambda r: r and r["tokens_per_s"]
def graph_breaks(name):  # torch.compile's graph-break records in a run's log (TORCH_LOGS)
    try: return sum("Graph break" in ln for ln in open(os.path.join(out, name + ".log")))
    except OSError: return None
for c in cases:
    if c not in CASES: continue
    name, batch, target = CASES[c]
    za, zm, zb, he, hc, hn = (runs[c][k] for k in ("za", "zm", "zb", "he", "hc", "hn"))
    P("")
    P(f"## {name}, batch {batch}, AdamW")
    P("")
    P("| run | step ms (mean) | tokens/s | model TFLOP/s | MFU | memory GiB |")
    P("|---|---|---|---|---|---|")
    zrow("zayac, AdamW", za)
    if c == "small": zrow("zayac, Muon", zm)
    if zb: zrow("zayac, AdamW, bf16 moments", zb)
    hrow("HF eager (sdpa)", he)
    hrow("HF + torch.compile", hc)
    if hn: hrow("HF + torch.compile, use_cache=False", hn)
    if za and hc:
        flz, flh = za["flops_per_token"], hc["tflops"] * 1e12 / hc["tokens_per_s"]
        P(f"\nModel FLOPs per token: zayac {flz / 1e6:.1f} M, the baseline's count {flh / 1e6:.1f} M.")
    P("")
    for k, label in (("_hf_compile", "HF + torch.compile"), ("_hf_compile_nocache", "the same, use_cache=False")):
        n = graph_breaks(c + k)
        if n is not None: P(f"\n{label}: {n} graph-break records in its log (TORCH_LOGS=graph_breaks).")
    best = max([h for h in (he, hc, hn) if h], key=lambda h: h["tokens_per_s"], default=None)
    which = ("n/a" if not best else "HF eager" if best is he else "HF + torch.compile" if best is hc
             else "HF + torch.compile, use_cache=False")
    ratio(f"zayac AdamW / the faster HF ({which})", tps(za), tps(best), target)
    ratio("zayac AdamW / HF eager", tps(za), tps(he))
    ratio("zayac AdamW / HF + torch.compile", tps(za), tps(hc))
    if zb:  # HF's baseline keeps bf16 weights and moments; this keeps fp32 weights, bf16 moments
        ratio(f"zayac AdamW with bf16 moments / the faster HF ({which})", tps(zb), tps(best), target)
        ratio("zayac AdamW with bf16 moments / with fp32 moments", tps(zb), tps(za))
    if c == "small":
        P("")
        P("### Muon against AdamW (zayac)")
        if za and zm:
            a, m = za["step_ms"]["mean"], zm["step_ms"]["mean"]
            P(f"- step: AdamW {a:.2f} ms, Muon {m:.2f} ms: {m - a:+.2f} ms per step ({m / a:.3f}x; target <= 1.3x)")
            pa, pm = za.get("phases_ms") or {}, zm.get("phases_ms") or {}
            if "optimizer" in pa and "optimizer" in pm:
                P(f"- optimizer phase of the profiled step: AdamW {pa['optimizer']:.2f} ms, Muon {pm['optimizer']:.2f} ms")
            P(f"- optimizer state: AdamW {za['memory']['optimizer_bytes'] / 2**30:.2f} GiB, Muon {zm['memory']['optimizer_bytes'] / 2**30:.2f} GiB")
        else:
            P("- n/a (a zayac run failed or was skipped)")
    for label, z in (("AdamW", za), ("Muon", zm), ("AdamW, bf16 moments", zb)):
        if not z or not z.get("breakdown"): continue
        P("")
        P(f"### zayac {label}, {name}: one profiled step, {z['profiled_step_ms']:.1f} ms wall")
        ph = z.get("phases_ms") or {}
        P("phases: " + ", ".join(f"{k} {v:.2f}" for k, v in ph.items()) + " ms")
        P("")
        P("| op | calls | ms/step | % |")
        P("|---|---|---|---|")
        for o in z["breakdown"][:15]:
            P(f"| {o['op']} | {o['calls']} | {o['ms_per_step']:.3f} | {o['pct']:.1f} |")
        tot = sum(o["ms_per_step"] for o in z["breakdown"])
        P(f"| (all {len(z['breakdown'])} ops) | | {tot:.3f} | {100 * tot / z['profiled_step_ms']:.1f} |")
open(os.path.join(out, "summary.md"), "w").write("\n".join(L) + "\n")
print("\n".join(L))
EOF
python3 "$OUT/compare.py" "$OUT" "$CASES"
echo "=== steps"
cat "$OUT/steps.txt"
for f in "$OUT"/*_zayac_*.log "$OUT"/*_hf_*.log; do
    [ -f "$f" ] && ! [ -f "${f%.log}.json" ] && { echo "=== $(basename "$f") (tail)"; tail -15 "$f"; }
done
echo "total $(($(date +%s) - T0)) s" | tee -a "$OUT/steps.txt"
# the GPU machine returns at most 8 files: keep summary.md and steps.txt, pack the JSON results
# into results.tgz and the logs and helpers into logs.tgz
(cd "$OUT" && tar czf results.tgz --remove-files *.json 2>/dev/null
    tar czf logs.tgz --remove-files $(ls | grep -vE '^(summary\.md|steps\.txt|results\.tgz|logs\.tgz)$'))
