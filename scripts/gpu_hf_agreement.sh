#!/usr/bin/env bash
# A trained checkpoint computes the same logits in transformers as in zayac, on the GPU machine in
# one call (it has torch and transformers 5.17; nothing to install but the Debian packages in
# $DEBS). From the zayac root, with runs/default (the default run, trained here or carried) and
# runs/fixture (scripts/trained_fixtures_data.sh, with its CPU-trained checkpoint) present:
#   DEBS=.ext/debs bash scripts/gpu_hf_agreement.sh
# 1. builds zayac with CUDA; runs test_cuda_optim (balancing biases CPU = GPU bits) and
#    test_train_resume (GPU resume, GPU vs CPU curve);
# 2. trains tests/fixtures/trained/train.json on the GPU (bf16, fp32 master weights);
# 3. HF references: scripts/make_hf_fixtures.py, scripts/make_trained_fixture.py on the CPU- and
#    GPU-trained checkpoints, then the C test test_model_hf against them;
# 4. scripts/check_hf_load.py on the default run's last checkpoint and the GPU-trained one;
# 5. zayac export (bf16 sharded, fp32) of the default run's checkpoint, scripts/check_hf_export.py.
# Results in $OUT: summary.txt and fixtures.tgz (tests/fixtures/{hf,trained} as made here).
set -u
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu_hf_agreement_out}
mkdir -p "$OUT"
rc_all=0
note() { echo "$*" | tee -a "$OUT/summary.txt"; }
step() { # name command...: runs, logs to $OUT/name.log, notes rc and the log's last lines
    local name=$1; shift
    local s0=$(date +%s)
    "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    note "== $name rc=$rc ($(($(date +%s) - s0)) s)"
    grep -vE "Loading weights|it/s\]|^\[transformers\]" "$OUT/$name.log" | tail -${TAILN:-8} | tee -a "$OUT/summary.txt"
    [ $rc -ne 0 ] && rc_all=1
    return $rc
}
. "$(dirname "$0")/gpu_deps.sh"
note "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
note "$(python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)')"
step build make -j"$(nproc)" DEPS_ROOT="$DEPS_ROOT" CUDA=1 all tests || exit 1
Z=build/zayac
export ZAYAC_BIN=$PWD/$Z ZAYAC_ROOT=$PWD
TAILN=4 step test_cuda_optim build/tests/test_cuda_optim
TAILN=8 step test_train_resume build/tests/test_train_resume
rm -rf runs/fixture/gpu
step train_gpu $Z train --config tests/fixtures/trained/train.json --set 'device="cuda"' \
    --set 'out_dir="runs/fixture/gpu"'
F=$OUT/fixtures
mkdir -p $F/hf $F/trained
step hf_fixtures python3 scripts/make_hf_fixtures.py $F/hf
step trained_cpu python3 scripts/make_trained_fixture.py runs/fixture/cpu/checkpoints/step_000000400/model $F/trained/cpu
step trained_gpu python3 scripts/make_trained_fixture.py runs/fixture/gpu/checkpoints/step_000000400/model $F/trained/gpu
cp -r $F/hf/small_a $F/hf/small_b tests/fixtures/hf/ && rm -rf tests/fixtures/trained/cpu tests/fixtures/trained/gpu &&
    cp -r $F/trained/cpu $F/trained/gpu tests/fixtures/trained/
TAILN=14 step test_model_hf build/tests/test_model_hf
TAILN=8 step test_cli build/tests/test_cli
DEF=$(ls -d runs/default/checkpoints/step_* | tail -1)
step check_default python3 scripts/check_hf_load.py "$DEF/model" $Z
step check_gpu_trained python3 scripts/check_hf_load.py runs/fixture/gpu/checkpoints/step_000000400/model $Z
rm -rf /tmp/ex_bf16 /tmp/ex_fp32
step export_bf16 $Z export --model "$DEF" --out /tmp/ex_bf16 --shard-size 2MB
step export_fp32 $Z export --model "$DEF" --out /tmp/ex_fp32 --dtype fp32
ls -la /tmp/ex_bf16 /tmp/ex_fp32 >>"$OUT/summary.txt"
step check_export_fp32 python3 scripts/check_hf_export.py /tmp/ex_fp32 $Z
step check_export_bf16 python3 scripts/check_hf_export.py /tmp/ex_bf16 $Z
step check_export_fp32_gpu_trained bash -c "$Z export --model runs/fixture/gpu/checkpoints/step_000000400 --out /tmp/ex_g --dtype fp32 && python3 scripts/check_hf_export.py /tmp/ex_g $Z"
note "overall rc=$rc_all"
(cd "$OUT" && tar czf logs.tgz *.log && rm -f *.log && tar czf fixtures.tgz fixtures && rm -rf fixtures)
exit $rc_all
