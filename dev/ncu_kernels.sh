#!/usr/bin/env bash
# ncu's view of a few kernels (time, DRAM, L2 and tensor-pipe use) with clock control off, so the
# GPU's settings stay as they are. From the zayac root on the GPU machine: DEBS=.ext/debs OUT=dir
# bash dev/ncu_kernels.sh. Files: $OUT/ncu_*.txt.
set -u
export PATH=/usr/local/cuda/bin:$PATH
. scripts/gpu_deps.sh
make -j16 DEPS_ROOT="$DEPS_ROOT" CUDA=1 build/tests/test_cuda_ops_cca build/tests/test_cuda_syrk >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum,l1tex__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active
show() { grep -E "^  [a-zA-Z_].*\(|gpu__time|dram__|lts__|l1tex__|tensor_op|warps_active" "$1"; }
# the SYRK: launches in test_cuda_syrk's timing (1024 x 1024 x 16 first, then 2048 x 4096 X^T X)
for skip in 60 740; do
    $NCU --clock-control none -k regex:syrk_kernel --launch-skip $skip --launch-count 1 --metrics $M \
        build/tests/test_cuda_syrk > "$OUT/ncu_syrk_$skip.txt" 2>&1
    show "$OUT/ncu_syrk_$skip.txt"
done
$NCU --clock-control none -k regex:"cublas|gemm|sm90" --launch-skip 60 --launch-count 1 --metrics $M \
    build/tests/test_cuda_syrk > "$OUT/ncu_cublas.txt" 2>&1
show "$OUT/ncu_cublas.txt"
$NCU --clock-control none -k regex:"cca_fwd|cca_bwd|cca_dw2_k" --launch-skip 6 --launch-count 3 --metrics $M \
    build/tests/test_cuda_ops_cca > "$OUT/ncu_cca.txt" 2>&1
show "$OUT/ncu_cca.txt"
