#!/usr/bin/env bash
# Speed work on the lent GPU machine in one call: build zayac with CUDA (sm_90a) against the Debian
# packages in $DEBS, run the GPU tests named in $TESTS (default: none), then `zayac bench train` on
# bench-small (batch 8 x 2048, AdamW) once per variant in $VARIANTS, each variant a list of extra
# `zayac bench train` arguments joined by commas ("-" = none), alternating over $ROUNDS rounds so
# that drift of the GPU's clocks hits every variant alike. Prints one table: variant, round,
# ms/step, tokens/s. A variant's BIN=<path> runs that binary instead of build/zayac (a build of
# another commit).
# NSYS=1 also runs one variant-free bench under nsys and prints the kernels by total time.
# Usage (from the zayac root):
#   DEBS=.ext/debs VARIANTS="- --expert-streams,4 --expert-chunk,1" ROUNDS=2 bash dev/dev/scripts/gpu_speed.sh
# Files land in $OUT: summary.txt, build.log, <test>.log, bench_<variant>_<round>.{txt,json}.
set -u
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/gpu_speed_out}
mkdir -p "$OUT"
note() { echo "$*" | tee -a "$OUT/summary.txt"; }

. scripts/gpu_deps.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee -a "$OUT/summary.txt"

t0=$(date +%s)
make -j"$(nproc)" DEPS_ROOT="$DEPS_ROOT" CUDA=1 all tests >"$OUT/build.log" 2>&1 || {
    grep -E "error" "$OUT/build.log" | head -30
    exit 1
}
note "build ok ($(($(date +%s) - t0)) s)"

rc_all=0
for name in ${TESTS:-}; do
    s0=$(date +%s)
    ZAYAC_BIN=build/zayac timeout 300 "build/tests/$name" >"$OUT/$name.log" 2>&1
    rc=$?
    note "$name rc=$rc ($(($(date +%s) - s0)) s): $(grep -E '^\[ +(PASSED|FAILED|SKIPPED) +\]' "$OUT/$name.log" | head -3 | tr '\n' ' ')"
    grep -E "FAILED|Failure|abort|error:" "$OUT/$name.log" | head -12 | tee -a "$OUT/summary.txt"
    [ $rc -ne 0 ] && rc_all=1
done

STEPS=${STEPS:-20}
PEAK=${PEAK:-728}
note "| variant | round | ms/step | tokens/s |"
note "|---|---|---|---|"
for r in $(seq 1 "${ROUNDS:-1}"); do
    i=0
    for v in ${VARIANTS:--}; do
        i=$((i + 1))
        words=() args=()
        [ "$v" != "-" ] && IFS=, read -r -a words <<<"$v"
        bin=build/zayac # BIN=<path> in a variant runs another build (e.g. one of the base commit)
        for w in "${words[@]}"; do
            if [ "${w%%=*}" = BIN ]; then bin=${w#BIN=}; else args+=("$w"); fi
        done
        f="$OUT/bench_${i}_$r"
        prof=()
        [ "$r" = 1 ] && prof=(--profile)
        timeout 300 "$bin" bench train "${args[@]}" --preset bench-small --batch 8 \
            --seq 2048 --steps "$STEPS" --warmup 5 --peak-tflops "$PEAK" "${prof[@]}" \
            --json "$f.json" >"$f.txt" 2>&1
        ms=$(python3 -c "import json;j=json.load(open('$f.json'));print('%.2f | %.0f'%(j['step_ms']['mean'],j['tokens_per_s']))" 2>/dev/null || echo "failed | -")
        note "| $v | $r | $ms |"
    done
done
if [ "${NSYS:-0}" = 1 ]; then
    NS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
    if [ -n "$NS" ]; then
        "$NS" profile -o "$OUT/prof" --force-overwrite true build/zayac bench train --preset bench-small \
            --batch 8 --seq 2048 --steps 3 --warmup 2 --peak-tflops "$PEAK" >"$OUT/nsys_run.txt" 2>&1
        "$NS" stats --report cuda_gpu_kern_sum --format csv "$OUT/prof.nsys-rep" >"$OUT/kern.csv" 2>/dev/null
        python3 - "$OUT/kern.csv" <<'PY' | tee -a "$OUT/summary.txt"
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 8]
h = rows[0]; rows = rows[1:]
ti, ni, ki = h.index("Total Time (ns)"), h.index("Instances"), h.index("Name")
tot = sum(float(r[ti]) for r in rows)
print("kernels by total time over the run (%.1f ms in all)" % (tot / 1e6))
for r in rows[:45]:
    print("%8.3f ms %6s  %s" % (float(r[ti]) / 1e6, r[ni], r[ki][:110]))
PY
    else
        note "nsys not found"
    fi
fi
note "overall rc=$rc_all"
# the device tool returns few files: everything but the summary travels in one archive
(cd "$OUT" && tar czf /tmp/zy_speed_logs.tgz --exclude=summary.txt . &&
    find . -type f ! -name summary.txt -delete && mv /tmp/zy_speed_logs.tgz logs.tgz)
exit $rc_all
