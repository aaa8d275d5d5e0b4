/* Return-code checks for CUDA, NCCL and cuBLAS calls in .cu files: a failed call becomes a
 * zy_fail() message with file:line, the call and the library's own description, and the calling
 * function returns ZY_ERR (operational: the caller cleans up and reports). */
#ifndef ZY_DIST_CUDA_CHECK_H
#define ZY_DIST_CUDA_CHECK_H

extern "C" {
#include "base/err.h"
}
#include <cuda_runtime.h>

#define CUDA_TRY(expr)                                                                             \
    do {                                                                                           \
        cudaError_t zy_e_ = (expr);                                                                \
        if (zy_e_ != cudaSuccess)                                                                  \
            return zy_fail("%s:%d: %s failed: %s", __FILE__, __LINE__, #expr,                      \
                           cudaGetErrorString(zy_e_));                                             \
    } while (0)

/* After a kernel launch: the launch error (bad configuration), not the kernel's completion. */
#define CUDA_TRY_LAUNCH() CUDA_TRY(cudaGetLastError())

/* Records the first failure in a status variable instead of returning (for cleanup paths). */
#define CUDA_NOTE(st, expr)                                                                        \
    do {                                                                                           \
        cudaError_t zy_e_ = (expr);                                                                \
        if (zy_e_ != cudaSuccess && (st) == ZY_OK)                                                 \
            (st) = zy_fail("%s:%d: %s failed: %s", __FILE__, __LINE__, #expr,                      \
                           cudaGetErrorString(zy_e_));                                             \
    } while (0)

#endif
