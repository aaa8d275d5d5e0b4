#!/usr/bin/env bash
# The test command: installs what is needed, then builds with ASan/UBSan and runs every test
# (GPU tests skip without a GPU). Ends with "N passed, N failed, N skipped".
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
jobs=$(nproc)
if command -v clang-format >/dev/null; then make format-check; fi
bash scripts/check_layers.sh # no folder includes one above it (docs/architecture.md)
bash scripts/check_pdl.sh    # kernels launched by zy_launch wait for the one before (launch.h)
make -j"$jobs" SAN=1 WERROR=1 all
# the dev/ variants are not shipped, but they must keep compiling (CUDA builds only)
if command -v nvcc >/dev/null; then make -j"$jobs" SAN=1 WERROR=1 dev; fi
# every parser under the fuzzers for a bounded time (tests/fuzz/, 20 s a target, a fixed seed)
make -j"$jobs" SAN=1 WERROR=1 fuzz
bash scripts/fuzz.sh --seconds 20 build-san
make -j"$jobs" SAN=1 WERROR=1 test
