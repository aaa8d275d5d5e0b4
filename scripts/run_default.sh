#!/usr/bin/env bash
# The main job on its built-in default: trains the tiny ZAYA1 model on the fortunes corpus (Debian's
# `fortunes` package: text nobody here wrote), with a byte-level BPE tokenizer trained on it.
# Installs what it needs, builds, prepares data once, trains, evaluates and prints samples.
# Extra arguments go to `zayac train` (e.g. --steps 100, --resume).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
make -j"$(nproc)" >/dev/null
Z=build/zayac
OUT=runs/default
CORPUS=/usr/share/games/fortunes
mkdir -p "$OUT"
if [ ! -f "$OUT/tokenizer.json" ]; then
    echo "== training a 4096-token byte-level BPE tokenizer on $CORPUS"
    $Z tokenizer train --input "$CORPUS" --doc-sep fortune --vocab-size 4096 --out "$OUT/tokenizer.json"
fi
if [ ! -f "$OUT/data/.complete" ]; then
    echo "== tokenizing the corpus into shards (2% of the documents held out for validation)"
    $Z data prepare --tokenizer "$OUT/tokenizer.json" --input "$CORPUS" --doc-sep fortune \
        --val-fraction 0.02 --out "$OUT/data" --force
    touch "$OUT/data/.complete"
fi
echo "== training (progress, validation loss, checkpoints and loss.png in $OUT)"
$Z train --config configs/train-tiny.json "$@"
