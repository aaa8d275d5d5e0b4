/* GPU presence and description for the benchmarks (see util.h). */
#include "bench/util.h"
#include "base/check.h"

#include <stdio.h>
#include <string.h>

int bench_gpu_count(int *n) {
    *n = 0;
    cudaError_t e = cudaGetDeviceCount(n);
    if (e != cudaSuccess) {
        *n = 0;
        return zy_fail_runtime("no CUDA GPU available (%s)", cudaGetErrorString(e));
    }
    if (*n == 0) return zy_fail_runtime("no CUDA GPU available (the driver reports no devices)");
    return ZY_OK;
}

int bench_gpu_describe(bench_machine *m, int dev) {
    cudaDeviceProp p;
    ZY_CUDA_TRY(cudaGetDeviceProperties(&p, dev));
    snprintf(m->gpu, sizeof m->gpu, "%s", p.name);
    ZY_CUDA_TRY(cudaGetDeviceCount(&m->gpus));
    m->sm_count = p.multiProcessorCount;
    m->cc = p.major * 10 + p.minor;
    m->l2_bytes = p.l2CacheSize;
    m->mem_bytes = (long long)p.totalGlobalMem;
    ZY_CUDA_TRY(cudaDeviceGetAttribute(&m->clock_khz, cudaDevAttrClockRate, dev));
    ZY_CUDA_TRY(cudaDriverGetVersion(&m->driver));
    ZY_CUDA_TRY(cudaRuntimeGetVersion(&m->runtime));
    return ZY_OK;
}
