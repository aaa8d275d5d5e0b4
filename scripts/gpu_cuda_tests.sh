#!/usr/bin/env bash
# The CUDA op tests on the lent GPU machine, in one call: builds zayac with CUDA (sm_90a) against
# the Debian packages of $DEBS (unpacked with dpkg -x, as gpu_bench_issue5.sh does; or an already
# unpacked DEPS_ROOT), writes nvcc's register/spill report of src/ops/cuda, runs every
# tests/test_cuda_*.c binary, then test_cuda_elementwise again under compute-sanitizer memcheck.
# Usage (from the zayac root): DEBS=.ext/debs bash scripts/gpu_cuda_tests.sh
# Logs land in $OUT (build.log, ptxas.log, <test>.log, memcheck.log, summary.txt). Exit status 0
# when every step passed.
set -u
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/gpu_cuda_out}
mkdir -p "$OUT"
NJ=$(nproc)
rc_all=0
note() { echo "$*" | tee -a "$OUT/summary.txt"; }

if [ -z "${DEPS_ROOT:-}" ]; then
    DEPS_ROOT=/tmp/zy_deps
    mkdir -p "$DEPS_ROOT"
    for f in "${DEBS:-.ext/debs}"/*.deb; do dpkg -x "$f" "$DEPS_ROOT"; done
fi
L=$DEPS_ROOT/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$L:$L/openblas-openmp:${LD_LIBRARY_PATH:-}
{
    date -u +%Y-%m-%dT%H:%M:%SZ
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    nvcc --version | tail -1
} >"$OUT/machine.log" 2>&1

TESTS=()
for t in tests/test_cuda_*.c; do TESTS+=("build/tests/$(basename "$t" .c)"); done
TESTS+=(build/tests/test_ops_backends) # every op on the CPU and CUDA backends
make -j"$NJ" DEPS_ROOT="$DEPS_ROOT" CUDA=1 "${TESTS[@]}" >"$OUT/build.log" 2>&1
rc=$?
note "build rc=$rc"
[ $rc -ne 0 ] && { tail -30 "$OUT/build.log"; exit 1; }

# registers and spills of the op kernels (the build itself does not ask ptxas for them)
for f in src/ops/cuda/*.cu; do
    echo "== $f"
    nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Isrc -DZY_HAVE_CUDA -Xptxas -v \
        -c "$f" -o /tmp/ptxas_probe.o 2>&1 | grep -E "Compiling entry|registers|spill"
done >"$OUT/ptxas.log" 2>&1
note "spills: $(grep -cE '[1-9][0-9]* bytes spill' "$OUT/ptxas.log") kernels with nonzero spill lines"

export OMP_WAIT_POLICY=passive
for t in "${TESTS[@]}"; do
    name=$(basename "$t")
    timeout 300 "$t" >"$OUT/$name.log" 2>&1
    rc=$?
    note "$name rc=$rc: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) \]' "$OUT/$name.log" | head -3 | tr '\n' ' ')"
    grep -E "worst|FAILURE|error|not written" "$OUT/$name.log" | head -20 | tee -a "$OUT/summary.txt"
    [ $rc -ne 0 ] && rc_all=1
done

if command -v compute-sanitizer >/dev/null; then
    timeout 400 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 99 \
        build/tests/test_cuda_elementwise >"$OUT/memcheck.log" 2>&1
    rc=$?
    note "memcheck test_cuda_elementwise rc=$rc: $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
    [ $rc -ne 0 ] && rc_all=1
else
    note "compute-sanitizer not found"
    rc_all=1
fi
note "overall rc=$rc_all"
exit $rc_all
