#!/usr/bin/env bash
# Runs each cmocka test binary given on the command line and ends with one summary line
# "N passed, N failed, N skipped" (counts of test cases across all binaries).
set -u
# Passive OpenMP waiting: spinning threads starve each other on a shared 2-core machine.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
passed=0 failed=0 skipped=0 broken=()
for t in "$@"; do
    name=$(basename "$t")
    echo "=== $name"
    t0=$(date +%s)
    out=$("$t" 2>&1)
    rc=$?
    echo "$out"
    echo "--- $name: $(($(date +%s) - t0)) s" # which programs a time limit should look at first
    p=$(grep -oE '^\[  PASSED  \] [0-9]+' <<<"$out" | awk '{s+=$NF} END {print s+0}')
    f=$(grep -oE '^\[  FAILED  \] [0-9]+' <<<"$out" | awk '{s+=$NF} END {print s+0}')
    s=$(grep -oE '^\[  SKIPPED \] [0-9]+' <<<"$out" | awk '{s+=$NF} END {print s+0}')
    passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0})); skipped=$((skipped + ${s:-0}))
    if [ $rc -ne 0 ] && [ "${f:-0}" = "0" ]; then
        failed=$((failed + 1)); broken+=("$name (exit $rc)")
    fi
    [ $rc -ne 0 ] && broken+=("$name")
done
if [ ${#broken[@]} -gt 0 ]; then printf 'failing: %s\n' "${broken[@]}" | sort -u; fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
