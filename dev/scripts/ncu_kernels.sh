#!/usr/bin/env bash
# ncu's view of a few kernels with clock control off, so the GPU's settings stay as they are. From
# the zayac root on the GPU machine:
#   DEBS=.ext/debs OUT=dir bash dev/scripts/ncu_kernels.sh        time, DRAM, L2 and tensor-pipe use of two
#       SYRK launches, one cuBLAS launch and the CCA conv kernels (files $OUT/ncu_*.txt);
#   DEBS=.ext/debs OUT=dir bash dev/scripts/ncu_kernels.sh syrk [skip]   one SYRK launch in detail
#       (launch, occupancy and cluster figures, warp stalls; $OUT/ncu_syrk.txt);
#   DEBS=.ext/debs OUT=dir bash dev/scripts/ncu_kernels.sh syrk-src   the SYRK at bench-small's
#       n = 1024 (the timing test's 1024 x 1024 x 16, its + beta C case, 1024 x 2048 and its X^T X), and
#       cuBLAS's product at 1024 x 1024 x 16, with ncu's full set and warp-stall samples per SASS
#       instruction (a -lineinfo build; $OUT/syrk_src_*.csv, $OUT/ncu_syrk_src.txt);
#   DEBS=.ext/debs OUT=dir bash dev/scripts/ncu_kernels.sh norms   the residual-norm and QK-norm
#       kernels of bench-small's first training step in detail (the forward's last layers and the
#       backward's first; $OUT/ncu_norms.txt);
#   DEBS=.ext/debs OUT=dir bash dev/scripts/ncu_kernels.sh cca   the same for the CCA conv kernels
#       (forward, backward tile and dw2; $OUT/ncu_cca_step.txt);
#   DEBS=.ext/debs OUT=dir bash dev/scripts/ncu_kernels.sh gelu   the same for the router backward's
#       GELU + bias column partials (bias_col_k; $OUT/ncu_gelu.txt).
# The skips count syrk_kernel launches of test_cuda_syrk: 60 fell in test_syrk_shapes (a
# one-CTA case), 740 on a launch whose time matches the timing test's 2048 x 4096 x 16 (one H100,
# 2026-11-26); other builds of the test may move them.
set -u
export PATH=/usr/local/cuda/bin:$PATH
. scripts/gpu_deps.sh
make -j16 DEPS_ROOT="$DEPS_ROOT" CUDA=1 build/tests/test_cuda_ops_cca build/tests/test_cuda_syrk >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum,l1tex__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active
if [ "${1:-}" = syrk ]; then
    $NCU --clock-control none -k regex:syrk_kernel --launch-skip "${2:-740}" --launch-count 1 \
        --section LaunchStats --section Occupancy --section SpeedOfLight --section WarpStateStats \
        --metrics $M build/tests/test_cuda_syrk > "$OUT/ncu_syrk.txt" 2>&1
    grep -v "^==PROF==\|^\[" "$OUT/ncu_syrk.txt" | grep -E "syrk_kernel|Cluster|Grid|Duration|Throughput|Occupancy|Waves|Stall|lts__|tensor|Registers|Block Limit|Warp Cycles|Active" | head -60
    exit 0
fi
if [ "${1:-}" = syrk-src ]; then
    # launches of test_cuda_syrk: 121-208 in test_syrk_shapes (one H100, 2026-11-27: skip 120 was
    # a one-CTA case, 210 the first timing shape), then 96 per timing shape and way
    make -j16 DEPS_ROOT="$DEPS_ROOT" CUDA=1 NVEXTRA=-lineinfo build/tests/test_cuda_syrk >>"$OUT/build.log" 2>&1 || exit 1
    for c in "syrk 210 1024x1024" "syrk 306 1024x1024_beta" "syrk 402 1024x2048" "syrk 500 1024x2048_tr" "nvjet|gemm|sm90 20 cublas_1024x1024"; do
        set -- $c
        $NCU --clock-control none --set full --import-source yes -k regex:"$1" --launch-skip "$2" \
            --launch-count 1 -o "$OUT/syrk_src_$3" -f build/tests/test_cuda_syrk >/dev/null 2>&1
        $NCU -i "$OUT/syrk_src_$3.ncu-rep" --page details >>"$OUT/ncu_syrk_src.txt" 2>&1
        $NCU -i "$OUT/syrk_src_$3.ncu-rep" --page source --csv --print-source sass \
            >"$OUT/syrk_src_$3.csv" 2>&1
    done
    grep -E "syrk_kernel|nvjet|Duration|Compute \(SM\) Throughput|L2 Cache Throughput|Registers|Achieved Occupancy|Warp Cycles Per Issued|Issue Slots Busy|No Eligible|Stall" "$OUT/ncu_syrk_src.txt" | head -80
    exit 0
fi
# the step's kernels matching $2 in detail (first step of bench-small, launches skip $3 .. +$4)
step_kernels() {
    make -j16 DEPS_ROOT="$DEPS_ROOT" CUDA=1 all >>"$OUT/build.log" 2>&1 || exit 1
    $NCU --clock-control none -k regex:"$2" --launch-skip "$3" --launch-count "$4" \
        --section LaunchStats --section Occupancy --section SpeedOfLight --section WarpStateStats \
        --section MemoryWorkloadAnalysis \
        build/zayac bench train --preset bench-small --batch 8 --seq 2048 --steps 1 --warmup 0 \
        --peak-tflops 989 > "$OUT/ncu_$1.txt" 2>&1
    grep -v "^==PROF==\|^\[" "$OUT/ncu_$1.txt" | grep -E "_k<|_k\(|Duration|Memory Throughput|DRAM Throughput|L2 Cache Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Warp Cycles Per Issued|Stall|stalled|Grid Size|Waves" | head -150
    exit 0
}
[ "${1:-}" = norms ] && step_kernels norms "resnorm_bwd_onepass|resnorm_fwd_k|qknorm_fwd_warp|qknorm_bwd_warp" 30 12
[ "${1:-}" = cca ] && step_kernels cca_step "cca_fwd_k|cca_bwd_k|cca_dw2_k" 10 6
[ "${1:-}" = gelu ] && step_kernels gelu "bias_col_k" 0 4
show() { grep -E "^  [a-zA-Z_].*\(|gpu__time|dram__|lts__|l1tex__|tensor_op|warps_active" "$1"; }
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
