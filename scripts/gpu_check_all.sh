#!/usr/bin/env bash
# Everything this repository checks on the lent GPU machine, in one call:
#   1. the HF reference fixtures regenerated there (transformers 5.17) and compared with the
#      committed ones (scripts/compare_hf_fixtures.py);
#   2. the machine benchmarks (scripts/gpu_machine_bench.sh): build, GPU tests, collectives against
#      nccl-tests on 1 and 2 GPUs, GEMM and memory bandwidth against torch.
# Needs, beside the checkout: .ext/debs (Debian packages: cJSON, cmocka, OpenBLAS, PCRE2) and
# .ext/nccl-tests (sources), carried with the call. Results under $OUT.
set -u
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
{
    echo "== HF fixtures regenerated on $(hostname) and compared"
    python3 scripts/make_hf_fixtures.py /tmp/hffix 2>&1 | grep -E "^small|Error|error"
    python3 scripts/compare_hf_fixtures.py tests/fixtures/hf /tmp/hffix
    echo "compare rc=$?"
} 2>&1 | tee "$OUT/hf_fixtures.log"
DEBS=${DEBS:-.ext/debs} NCCL_TESTS=${NCCL_TESTS:-.ext/nccl-tests} PARTS=${PARTS:-} \
    bash scripts/gpu_machine_bench.sh
