/* Kernel launches with programmatic dependent launch (PDL, Hopper): every kernel of the step is
 * launched by zy_launch, which lets the GPU start scheduling it while the kernel before it in the
 * stream is still running, and every such kernel starts with zy_pdl_begin, which waits until the
 * kernel before it has finished and its writes are visible, then lets the next kernel be
 * scheduled. What this removes is the gap between dependent kernels (the next grid's launch and
 * its blocks filling the SMs as the last wave of this one drains): 1-2 us a boundary on an H100
 * (dev/time_launch_gap.cu), on ~1,100 boundaries a bench-small step.
 *
 * The rule that keeps it correct: a kernel launched by zy_launch calls zy_pdl_begin before it
 * reads or writes global memory (scripts/check_pdl.sh, run by the test command, checks that every
 * __global__ function of the files that launch by zy_launch begins with it). Launches that are not
 * kernels (copies, memsets), other libraries' kernels and event waits keep the stream's full
 * ordering. */
#ifndef ZY_OPS_CUDA_LAUNCH_H
#define ZY_OPS_CUDA_LAUNCH_H

#include <cuda_runtime.h>
#include <utility>

/* First statement of every kernel launched by zy_launch: wait for the grid before this one in the
 * stream to complete (its memory visible), then let the grid after this one launch. No-ops when
 * the kernel was launched without the PDL attribute. */
__device__ __forceinline__ void zy_pdl_begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

/* kernel<<<grid, block, smem, stream>>>(args...) with programmatic stream serialization allowed,
 * in clusters of `cluster_x` blocks along x when it is above 1 (grid.x a multiple of it). Errors
 * are left for ZY_CUDA_TRY_LAUNCH (cudaGetLastError), as after <<<>>>. */
template <typename... Params, typename... Args>
static inline void zy_launch_cluster(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                                     cudaStream_t stream, int cluster_x, Args &&...args) {
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    attr[1].id = cudaLaunchAttributeClusterDimension;
    attr[1].val.clusterDim.x = (unsigned)cluster_x;
    attr[1].val.clusterDim.y = 1;
    attr[1].val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = cluster_x > 1 ? 2 : 1;
    (void)cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

/* kernel<<<grid, block, smem, stream>>>(args...) with programmatic stream serialization allowed. */
template <typename... Params, typename... Args>
static inline void zy_launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                             cudaStream_t stream, Args &&...args) {
    zy_launch_cluster(kernel, grid, block, smem, stream, 1, std::forward<Args>(args)...);
}

#endif
