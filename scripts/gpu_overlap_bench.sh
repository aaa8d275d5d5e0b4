#!/usr/bin/env bash
# The optimizer update beside the next step's forward (cuda.overlap_optimizer, train/step.h) on one
# GPU, in one call: build; test_cuda_step (the same bits as the update after the step, AdamW and
# Muon) and test_cuda_optim; then, with MUTANT=1, test_cuda_step against a copy of the build whose
# forward does not wait for each group's update (it must fail there); then `zayac bench train`
# with the update after the step (--overlap-optimizer 0) and beside it (1), and the build of
# PREV_TAR (`git archive -o .ext/prev.tar REV`) when given, alternating, ROUNDS rounds of every
# case and optimizer, and the median of each; the GPU's temperature and clock before and after,
# and a warning where one build's rounds differ by more than 5% (a drifting machine).
# Usage (from the zayac root):
#   DEBS=.ext/debs [PREV_TAR=.ext/prev.tar] [ROUNDS=2] [CASES="bench-small:8:2048 bench-base:4:4096"] \
#       [OPTIMS="adamw muon"] [VARIANTS="prev 0 1"] [MUTANT=1] [SKIP_TESTS=1] \
#       bash scripts/gpu_overlap_bench.sh
# An OPTIMS entry muon-nsK runs Muon with K Newton-Schulz iterations (--ns-steps K), muon-nsKm
# the same with the minimax coefficients (--ns-coefficients minimax), an a in the suffix (muon-ns4a,
# muon-ns3am) starting from AOL's rescaling (--ns-precondition aol). A -bf16m suffix (adamw-bf16m,
# muon-ns4-bf16m) keeps AdamW's moments in bf16 (--adam-moments bfloat16), a -bf16u suffix after it
# (muon-bf16u, muon-bf16m-bf16u) Muon's momentum (--muon-momentum-dtype bfloat16).
# The closing table gives each case's medians and, where AdamW ran beside too, each optimizer's
# step against AdamW's from the same call (the Muon / AdamW ratio of issue 19).
# Files land in $OUT: summary.txt, build.log, tests.log, mutant.log, bench_*.json.
set -u
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/gpu_overlap_out}
mkdir -p "$OUT"
NJ=$(nproc)
note() { echo "$*" | tee -a "$OUT/summary.txt"; }

. "$(dirname "$0")/gpu_deps.sh"
note "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"
t0=$(date +%s)
make -j"$NJ" DEPS_ROOT="$DEPS_ROOT" CUDA=1 all build/tests/test_cuda_step build/tests/test_cuda_optim \
    >"$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -20 | tee -a "$OUT/summary.txt"; exit 1; }
note "build done ($(($(date +%s) - t0)) s)"
variants="0 1"
if [ -n "${PREV_TAR:-}" ]; then
    rm -rf /tmp/zy_prev && mkdir -p /tmp/zy_prev && tar -xf "$PREV_TAR" -C /tmp/zy_prev
    (cd /tmp/zy_prev && make -j"$NJ" DEPS_ROOT="$DEPS_ROOT" CUDA=1 all) >>"$OUT/build.log" 2>&1 &&
        variants="prev 0 1"
    note "previous build: $([ "$variants" = "0 1" ] && echo FAILED || echo done) ($(($(date +%s) - t0)) s)"
fi
# VARIANTS (e.g. "prev 1") runs only those; prev is dropped when its build failed
[ -n "${VARIANTS:-}" ] && variants=$(for v in $VARIANTS; do case " $variants " in *" $v "*) echo -n "$v ";; esac; done)

if [ "${SKIP_TESTS:-0}" != 1 ]; then
    for t in test_cuda_step test_cuda_optim; do
        ZAYAC_ROOT=$PWD ZAYAC_OPTGPU_NO_BENCH=1 timeout 200 build/tests/$t >>"$OUT/tests.log" 2>&1
        note "$t rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/tests.log" | tail -1)"
    done
    grep -E "the update after the step and beside" "$OUT/tests.log" | tee -a "$OUT/summary.txt"
fi

if [ "${MUTANT:-0}" = 1 ]; then
    # a forward that waits only for the whole update at its last layer, not for each group
    rm -rf /tmp/zy_mut && mkdir -p /tmp/zy_mut && cp -a Makefile src tests build /tmp/zy_mut/
    sed -i 's|^    ops_wait_mark(s->ctx, s->updated\[group + 1\]);|    (void)0; /* mutant: no wait */|' \
        /tmp/zy_mut/src/train/step.c
    if grep -q "mutant: no wait" /tmp/zy_mut/src/train/step.c &&
        (cd /tmp/zy_mut && make -j"$NJ" DEPS_ROOT="$DEPS_ROOT" CUDA=1 build/tests/test_cuda_step) \
            >"$OUT/mutant.log" 2>&1; then
        ZAYAC_ROOT=$PWD timeout 200 /tmp/zy_mut/build/tests/test_cuda_step >>"$OUT/mutant.log" 2>&1
        note "mutant (no per-group wait): test_cuda_step rc=$? (must be nonzero): $(grep -E 'differs|FAILED  \]' "$OUT/mutant.log" | head -3 | tr '\n' ' ')"
    else
        note "mutant: could not be built"
    fi
fi

gpu_state() { nvidia-smi --query-gpu=temperature.gpu,clocks.sm,power.draw --format=csv,noheader; }
note "GPU before the rounds (temperature C, SM MHz, W): $(gpu_state)"
note "| case | optim | overlap | round | ms/step | tokens/s | device GiB |"
note "|---|---|---|---|---|---|---|"
for r in $(seq 1 "${ROUNDS:-2}"); do
    for c in ${CASES:-bench-small:8:2048 bench-base:4:4096}; do
        IFS=: read -r preset batch seq <<<"$c"
        for optim in ${OPTIMS:-adamw muon}; do
            ns=()
            if [[ $optim == *-ns* ]]; then
                k=${optim##*-ns}
                k=${k%%-*}
                ns=(--ns-steps "${k%%[am]*}")
                [[ $k == *m* ]] && ns+=(--ns-coefficients minimax)
                [[ $k == *a* ]] && ns+=(--ns-precondition aol)
            fi
            [[ $optim == *-bf16m || $optim == *-bf16m-* ]] && ns+=(--adam-moments bfloat16)
            [[ $optim == *-bf16u ]] && ns+=(--muon-momentum-dtype bfloat16)
            for ov in $variants; do
                f="$OUT/bench_${preset}_${optim}_ov${ov}_$r"
                if [ "$ov" = prev ]; then
                    args=(/tmp/zy_prev/build/zayac bench train)
                else
                    args=(build/zayac bench train --overlap-optimizer "$ov")
                fi
                timeout 240 "${args[@]}" --preset "$preset" --batch "$batch" --seq "$seq" \
                    --optim "${optim%%-*}" "${ns[@]}" --steps 20 --warmup 5 --peak-tflops 989 --json "$f.json" \
                    >"$f.txt" 2>&1
                row=$(python3 -c "import json;j=json.load(open('$f.json'));print('%.2f | %.0f | %.1f'%(j['step_ms']['median'],j['tokens_per_s'],j['memory']['device_used_gib']))" 2>/dev/null || echo "failed | - | -")
                note "| $preset $batch x $seq | $optim | $ov | $r | $row |"
            done
        done
    done
done
note "GPU after the rounds (temperature C, SM MHz, W): $(gpu_state)"
python3 - "$OUT" <<'EOF' | tee -a "$OUT/summary.txt"
import glob, json, re, statistics, sys
ms = {}
for f in glob.glob(sys.argv[1] + "/bench_*.json"):
    m = re.search(r"bench_(.+)_((?:adamw|muon(?:-ns\d+[am]*)?)(?:-bf16m)?(?:-bf16u)?)_ov(\w+)_\d+\.json$", f)
    try:
        ms.setdefault((m[1], m[2], m[3]), []).append(json.load(open(f))["step_ms"]["median"])
    except Exception:
        pass
med = {k: statistics.median(v) for k, v in ms.items()}
print("| case | optim | previous build ms | after the step ms | beside ms | previous / beside | after / beside | beside / AdamW beside |")
print("|---|---|---|---|---|---|---|---|")
for case, optim in sorted({(k[0], k[1]) for k in ms}):
    p, a, b = (med.get((case, optim, v)) for v in ("prev", "0", "1"))
    adamw = med.get((case, "adamw", "1"))
    f = lambda x: f"{x:.2f}" if x else "-"
    r = lambda x: f"{x / b:.3f}" if x and b else "-"
    q = f"{b / adamw:.3f}" if b and adamw else "-"  # Muon's step against AdamW's, same call
    print(f"| {case} | {optim} | {f(p)} | {f(a)} | {f(b)} | {r(p)} | {r(a)} | {q} |")
# one build's rounds should agree to a few percent: more means the machine's speed moved under
# the runs (a GPU heating up to its limit, another tenant), and the ratios above mean nothing
for k, v in sorted(ms.items()):
    if len(v) > 1 and max(v) > 1.05 * min(v):
        print(f"WARNING: {k[0]} {k[1]} {k[2]}: rounds {min(v):.2f}-{max(v):.2f} ms differ by "
              f"{100 * (max(v) / min(v) - 1):.0f}%: the machine's speed drifted; not a measurement")
EOF
