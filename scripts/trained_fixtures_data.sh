#!/usr/bin/env bash
# Data for the trained-checkpoint fixtures (tests/fixtures/trained/train.json): a 512-token BPE
# tokenizer and shards of Debian's fortunes corpus in runs/fixture/. Then
#   zayac train --config tests/fixtures/trained/train.json                    (CPU, fp32)
#   zayac train --config tests/fixtures/trained/train.json --set device=\"cuda\" \
#                --set out_dir=\"runs/fixture/gpu\"                             (GPU, bf16)
# and scripts/make_trained_fixture.py on each final checkpoint (scripts/gpu_hf_agreement.sh does both).
set -euo pipefail
cd "$(dirname "$0")/.."
Z=${ZAYAC:-build/zayac}
CORPUS=${CORPUS:-/usr/share/games/fortunes}
OUT=runs/fixture
mkdir -p $OUT
[ -f $OUT/tokenizer.json ] ||
    $Z tokenizer train --input "$CORPUS" --doc-sep fortune --vocab-size 512 --out $OUT/tokenizer.json
if [ ! -f $OUT/data/.complete ]; then
    $Z data prepare --tokenizer $OUT/tokenizer.json --input "$CORPUS" --doc-sep fortune \
        --val-fraction 0.02 --out $OUT/data --force
    touch $OUT/data/.complete
fi
