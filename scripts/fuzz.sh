#!/usr/bin/env bash
# Runs every fuzz target (the programs BUILD/fuzz/fuzz_<parser> that `make fuzz` builds) on its
# seed corpus tests/fuzz/corpus/<parser>/ for a bounded time, with a fixed seed, so CI runs the
# same inputs each time (up to the time limit). Crashing inputs are saved under BUILD/fuzz/crashes/
# (replay one: BUILD/fuzz/fuzz_<parser> --replay FILE). Exits 1 when any input crashed.
#   bash scripts/fuzz.sh [--seconds S] [--seed K] [BUILD]     (defaults: 20 s each, seed 1, build-san)
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=20 seed=1 build=build-san
while [ $# -gt 0 ]; do
    case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    *) build=$1; shift ;;
    esac
done
# A finding is a crash of the input, not a leak of the child at exit (the driver skips that check).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
failed=0 n=0
for bin in "$build"/fuzz/fuzz_*; do
    [ -x "$bin" ] || continue
    target=${bin##*/fuzz_}
    n=$((n + 1))
    "$bin" --seconds "$seconds" --seed "$seed" --crashes "$build/fuzz/crashes/$target" \
        "tests/fuzz/corpus/$target" || failed=$((failed + 1))
done
[ "$n" -gt 0 ] || { echo "fuzz: no targets in $build/fuzz (make fuzz)" >&2; exit 2; }
echo "fuzz: $n targets, $failed with crashes"
[ "$failed" -eq 0 ]
