#!/usr/bin/env bash
# Packs a GPU call's results for the trip back: the device tool returns at most 8 files from
# $OUT, so everything under $1 (a scratch folder) except ncu reports goes into one $OUT/$2.tgz.
# Usage (on the GPU machine): bash dev/scripts/gpu_call_pack.sh /tmp/call name
set -u
tar czf "$OUT/$2.tgz" --exclude='*.ncu-rep' --exclude='*.safetensors' --exclude='checkpoints' \
    -C "$1" . && ls -la "$OUT/$2.tgz"
