#!/usr/bin/env bash
# ncu on one SYRK launch of test_cuda_syrk's timing (clock control off): launch, occupancy and
# cluster figures, time, L2 and tensor-pipe use. DEBS=.ext/debs OUT=dir bash dev/ncu_syrk.sh [skip]
set -u
export PATH=/usr/local/cuda/bin:$PATH
. scripts/gpu_deps.sh
make -j16 DEPS_ROOT="$DEPS_ROOT" CUDA=1 build/tests/test_cuda_syrk >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
$NCU --clock-control none -k regex:syrk_kernel --launch-skip "${1:-740}" --launch-count 1 \
    --section LaunchStats --section Occupancy --section SpeedOfLight --section WarpStateStats \
    --metrics lts__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed \
    build/tests/test_cuda_syrk > "$OUT/ncu_syrk.txt" 2>&1
grep -v "^==PROF==\|^\[" "$OUT/ncu_syrk.txt" | grep -E "syrk_kernel|Cluster|Grid|Duration|Throughput|Occupancy|Waves|Stall|lts__|tensor|Registers|Block Limit|Warp Cycles|Active" | head -60
