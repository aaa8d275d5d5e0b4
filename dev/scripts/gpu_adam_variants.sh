#!/usr/bin/env bash
# The AdamW kernel with bf16 moments (optimizer.adam_moments) in variants of one source change
# each, built in copies of the tree, timed by the profiled bench-small step's optim_adamw (the
# kernel alone, the GPU synchronised around it) and the step, with fp32 and bf16 moments, in one
# call.
# Variants: uN / bN (ADAM_U / ADAM_U_BF16 = N: groups in flight a thread with fp32 / bf16
# moments; the tree's are 4 and 2), wN (ADAM_W_BF16 = N: elements a group with bf16 moments, 4
# or 8; the tree's 8), lbN (at least N blocks an SM: registers capped to fit), and cheaphash (one multiply
# instead of murmur's finaliser: what the hash costs; not for use); "+" joins edits (w8+b2).
# Usage (from the zayac root): DEBS=.ext/debs [VARIANTS="w4+b3 u6"] [ROUNDS=2] OUT=dir \
#     bash dev/scripts/gpu_adam_variants.sh
set -u
OUT=${OUT:-/tmp/gpu_adam_variants}; mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH; . scripts/gpu_deps.sh
nvidia-smi --query-gpu=name,temperature.gpu --format=csv,noheader
make -j16 DEPS_ROOT=$DEPS_ROOT CUDA=1 all > $OUT/build.log 2>&1 || tail $OUT/build.log
K=src/optim/optim_cuda.cu
builds="tree:build"
for v in ${VARIANTS:-w4+b3 b1 b3}; do
    d=/tmp/zy_$v; rm -rf $d && mkdir -p $d && cp -a Makefile src tools tests dev build $d/
    for e in ${v//+/ }; do
        case $e in
        u*) sed -i "s/^#define ADAM_U      4 /#define ADAM_U      ${e#u} /" $d/$K ;;
        b*) sed -i "s/^#define ADAM_U_BF16 2 /#define ADAM_U_BF16 ${e#b} /" $d/$K ;;
        w*) sed -i "s/^#define ADAM_W_BF16 8 /#define ADAM_W_BF16 ${e#w} /" $d/$K ;;
        lb*) sed -i "/^template <typename MT, int W, int U>/{n;s/__launch_bounds__(NT)/__launch_bounds__(NT, ${e#lb})/}" $d/$K ;;
        cheaphash) sed -i 's/return zy_moment_bits(hi == hi0 ? key : zy_moment_key(step, hi), (uint32_t)e);/return ((uint32_t)e ^ key) * 0x9e3779b1u;/' $d/src/optim/moments.h ;;
        esac
    done
    if diff -rq src $d/src >/dev/null; then echo "$v: the change did not apply"; continue; fi
    (cd $d && make -j16 DEPS_ROOT=$DEPS_ROOT CUDA=1 all) > $OUT/build_${v//+/-}.log 2>&1 || { echo "$v: build failed"; continue; }
    builds="$builds $v:$d/build"
done
echo "| build | moments | round | optim_adamw ms | step ms (median) |"
echo "|---|---|---|---|---|"
for r in $(seq 1 "${ROUNDS:-2}"); do
    for b in $builds; do
        name=${b%%:*} dir=${b#*:}
        for m in float32 bfloat16; do
            f=$OUT/${name//+/-}_${m}_$r.json
            timeout 120 $dir/zayac bench train --preset bench-small --batch 8 --seq 2048 --optim adamw \
                --adam-moments $m --steps 10 --warmup 3 --profile --peak-tflops 989 --json $f > $f.txt 2>&1
            python3 -c "import json,sys; j=json.load(open('$f')); o=[x for x in j['breakdown'] if x['op']=='optim_adamw']; print('| $name | $m | $r | %.3f | %.2f |' % (o[0]['ms_per_step'], j['step_ms']['median']))" 2>/dev/null || echo "| $name | $m | $r | failed | |"
        done
    done
done
