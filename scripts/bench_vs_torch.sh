#!/usr/bin/env bash
# zayac against PyTorch (HF transformers' ZAYA, eager and torch.compile) on the same GPU, the same
# config (bench-small), the same batch (8 x 2048) and AdamW, in one call of the lent GPU machine;
# also Muon's cost per step against AdamW. Builds zayac, runs
#   zayac bench train --optim adamw (measures the bf16 matmul peak), then --optim muon (same peak),
#   the PyTorch baseline compiled, then eager,
# and prints a table with the ratios. Usage (from the zayac root):
#   [DEPS_ROOT=dir | DEBS=.ext/debs] [TORCH_BASELINE=.ext/torch_zaya_baseline.py] [OUT=dir] \
#       bash scripts/bench_vs_torch.sh
# DEPS_ROOT: Debian packages already unpacked with dpkg -x (passed to make); else the .deb files
# of $DEBS are unpacked into /tmp/zy_deps when there are any. Everything lands in $OUT (logs,
# zayac_*.json, hf_*.json, summary.md). BUDGET_S (default 470) caps the whole run: each step's
# time limit shrinks to what is left, and a step with under 20 s left is skipped.
set -u
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1 OMP_WAIT_POLICY=passive
OUT=${OUT:-/tmp/bench_vs_torch}
TB=${TORCH_BASELINE:-.ext/torch_zaya_baseline.py}
BUDGET_S=${BUDGET_S:-470}
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

# --- zayac
step build 240 make -j16 "${MAKE_DEPS[@]}" CUDA=1 all
Z=build/zayac
COMMON=(bench train --preset bench-small --batch 8 --seq 2048 --steps "$STEPS" --profile)
if [ -x $Z ]; then
    step zayac_adamw 120 $Z "${COMMON[@]}" --optim adamw --json "$OUT/zayac_adamw.json"
else
    echo "zayac did not build: see $OUT/build.log" | tee -a "$OUT/steps.txt"
    tail -20 "$OUT/build.log"
fi
# the Muon run uses the peak measured by the AdamW run: one denominator for both MFUs
PEAK=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["peak_tflops"] or "")' \
    "$OUT/zayac_adamw.json" 2>/dev/null)

# --- PyTorch: the baseline script's arguments are hidden layers experts moe_inter seq batch vocab
# compile; it builds the model, runs 3 warm-up and 10 timed steps and prints one JSON line.
# torch.compile goes first: it is the number the target is set against and the slowest to start.
if [ -f "$TB" ]; then
    step hf_compile 330 python3 "$TB" 1024 12 16 1024 2048 8 32768 1
else
    echo "no PyTorch baseline at $TB (TORCH_BASELINE): skipped" | tee -a "$OUT/steps.txt"
fi
[ -x $Z ] && step zayac_muon 120 $Z "${COMMON[@]}" --optim muon ${PEAK:+--peak-tflops "$PEAK"} \
    --json "$OUT/zayac_muon.json"
[ -f "$TB" ] && step hf_eager 150 python3 "$TB" 1024 12 16 1024 2048 8 32768 0

# --- the comparison
cat >"$OUT/compare.py" <<'EOF'
import json, os, sys
out = sys.argv[1]
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
za, zm = load("zayac_adamw.json"), load("zayac_muon.json")
he, hc = hf("hf_eager"), hf("hf_compile")
for name, v in (("hf_eager", he), ("hf_compile", hc)):
    if v: json.dump(v, open(os.path.join(out, name + ".json"), "w"), indent=1)
peak = (za or zm or {}).get("peak_tflops")
L = []
P = L.append
gpu = ((za or zm or {}).get("machine") or {}).get("gpu") or "GPU"
P(f"# zayac vs HF transformers ZAYA: bench-small, batch 8 x 2048, one {gpu}")
P("")
P("| run | step ms (mean) | tokens/s | model TFLOP/s | MFU | memory GiB |")
P("|---|---|---|---|---|---|")
def zrow(label, z):
    if not z: P(f"| {label} | failed or skipped | | | | |"); return
    mfu = z.get("mfu")
    P(f"| {label} | {z['step_ms']['mean']:.1f} (min {z['step_ms']['min']:.1f}) | {z['tokens_per_s']:,.0f} | "
      f"{z['model_tflops']:.1f} | {100 * mfu:.1f}% | {z['mem_gib']:.1f} (device {z['memory'].get('device_used_gib') or 0:.1f}) |"
      if mfu is not None else
      f"| {label} | {z['step_ms']['mean']:.1f} | {z['tokens_per_s']:,.0f} | {z['model_tflops']:.1f} | n/a | {z['mem_gib']:.1f} |")
def hrow(label, h):
    if not h: P(f"| {label} | failed or skipped | | | | |"); return
    mfu = f"{100 * h['tflops'] / peak:.1f}%" if peak else "n/a"
    P(f"| {label} | {h['step_ms']:.1f} | {h['tokens_per_s']:,.0f} | {h['tflops']:.1f} | {mfu} | "
      f"{h['mem_gb'] * 1e9 / 2**30:.1f} (max allocated) |")
zrow("zayac, AdamW", za)
zrow("zayac, Muon", zm)
hrow("HF eager (sdpa)", he)
hrow("HF + torch.compile", hc)
P("")
if peak: P(f"MFU against the bf16 matmul peak zayac measured on this GPU: {peak:.0f} TFLOP/s (8192^3 GEMM).")
if za and hc:
    flz, flh = za["flops_per_token"], hc["tflops"] * 1e12 / hc["tokens_per_s"]
    P(f"Model FLOPs per token: zayac {flz / 1e6:.1f} M, the baseline's count {flh / 1e6:.1f} M.")
P("")
P("## ratios (tokens/s)")
def ratio(label, a, b, target=None):
    if a and b:
        r = a / b
        P(f"- {label}: **{r:.3f}**" + (f" (target >= {target}: {'met' if r >= target else 'NOT met'})" if target else ""))
    else:
        P(f"- {label}: n/a (a run failed or was skipped)")
ratio("zayac AdamW / HF eager", za and za["tokens_per_s"], he and he["tokens_per_s"])
ratio("zayac AdamW / HF + torch.compile", za and za["tokens_per_s"], hc and hc["tokens_per_s"], 1.5)
ratio("zayac Muon / HF + torch.compile", zm and zm["tokens_per_s"], hc and hc["tokens_per_s"])
P("")
P("## Muon against AdamW (zayac)")
if za and zm:
    a, m = za["step_ms"]["mean"], zm["step_ms"]["mean"]
    P(f"- step: AdamW {a:.2f} ms, Muon {m:.2f} ms: {m - a:+.2f} ms per step ({m / a:.3f}x)")
    pa, pm = za.get("phases_ms") or {}, zm.get("phases_ms") or {}
    if "optimizer" in pa and "optimizer" in pm:
        P(f"- optimizer phase of the profiled step: AdamW {pa['optimizer']:.2f} ms, Muon {pm['optimizer']:.2f} ms")
    P(f"- optimizer state: AdamW {za['memory']['optimizer_bytes'] / 2**30:.2f} GiB, Muon {zm['memory']['optimizer_bytes'] / 2**30:.2f} GiB")
else:
    P("- n/a (a zayac run failed or was skipped)")
for label, z in (("AdamW", za), ("Muon", zm)):
    if not z or not z.get("breakdown"): continue
    P("")
    P(f"## zayac {label}: one profiled step, {z['profiled_step_ms']:.1f} ms wall")
    ph = z.get("phases_ms") or {}
    P("phases: " + ", ".join(f"{k} {v:.2f}" for k, v in ph.items()) + " ms")
    P("")
    P("| op | calls | ms/step | % |")
    P("|---|---|---|---|")
    tot = 0
    for o in z["breakdown"][:15]:
        P(f"| {o['op']} | {o['calls']} | {o['ms_per_step']:.3f} | {o['pct']:.1f} |")
    for o in z["breakdown"]: tot += o["ms_per_step"]
    P(f"| (all {len(z['breakdown'])} ops) | | {tot:.3f} | {100 * tot / z['profiled_step_ms']:.1f} |")
open(os.path.join(out, "summary.md"), "w").write("\n".join(L) + "\n")
print("\n".join(L))
EOF
python3 "$OUT/compare.py" "$OUT"
echo "=== steps"
cat "$OUT/steps.txt"
for f in zayac_adamw zayac_muon; do
    [ -f "$OUT/$f.log" ] && ! [ -f "$OUT/$f.json" ] && { echo "=== $f.log (tail)"; tail -15 "$OUT/$f.log"; }
done
for f in hf_eager hf_compile; do
    [ -f "$OUT/$f.log" ] && ! [ -f "$OUT/$f.json" ] && { echo "=== $f.log (tail)"; tail -15 "$OUT/$f.log"; }
done
echo "total $(($(date +%s) - T0)) s" | tee -a "$OUT/steps.txt"
# the GPU machine returns at most 8 files: keep summary.md, the JSON results and steps.txt, pack
# the logs and helpers into logs.tgz
(cd "$OUT" && tar czf logs.tgz --remove-files $(ls | grep -vE '^(summary\.md|steps\.txt|.*\.json|logs\.tgz)$'))
