/* Device memory query for the training benchmark (see train_bench.h): the one CUDA runtime call
 * bench_train_run needs outside the ops interface. */
#include "base/err.h"

#include <cuda_runtime.h>
#include <stddef.h>

/* Free and total bytes of device dev (makes dev current). */
extern "C" int bench_train_gpu_mem(int dev, size_t *free_bytes, size_t *total_bytes) {
    cudaError_t e = cudaSetDevice(dev);
    if (e == cudaSuccess) e = cudaMemGetInfo(free_bytes, total_bytes);
    if (e != cudaSuccess)
        return zy_fail_runtime("device cuda:%d: cudaMemGetInfo failed: %s", dev,
                               cudaGetErrorString(e));
    return ZY_OK;
}
