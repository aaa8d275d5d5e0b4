/* Status checks for library calls (CUDA, cuBLAS/cuBLASLt, NCCL, our own zy_status), one scheme for
 * every library, in the two tiers of err.h:
 *   ZY_<LIB>_TRY(expr)       set-up paths: a failure records zy_fail_runtime("file:line: call
 *                            failed: <library's description>") and the enclosing function returns
 *                            ZY_ERR, so its caller can clean up and report;
 *   ZY_<LIB>_CHECK(expr)     inside a training step, where no caller can recover: a failure ends
 *                            the process through zy_fatal_runtime_at (the call, file:line, rank
 *                            and step; exit status ZY_EXIT_RUNTIME, so a supervisor retries);
 *   ZY_<LIB>_NOTE(st, expr)  cleanup paths: the first failure is recorded into the status variable
 *                            st and the cleanup goes on.
 * A failed library call is a runtime failure (a device error, out of device memory, a dead peer),
 * never bad input. The macros are expanded where they are used, so this header includes no library
 * header: a C file without CUDA includes it freely, and a file using ZY_CUBLAS_TRY includes
 * <cublas_api.h> (or cublasLt.h) itself. A new library adds its names on the generic ZY_LIB_*
 * forms: a status type, its success value and a function from status to description; e.g. the
 * MPI backend: #define ZY_MPI_TRY(expr) ZY_LIB_TRY(int, MPI_SUCCESS, its_describe, #expr, expr).
 * The generic forms take the call's text separately so the message shows the call as written, not
 * with its macros expanded. */
#ifndef ZY_BASE_CHECK_H
#define ZY_BASE_CHECK_H

#include "base/err.h"

#define ZY_LIB_TRY(type, ok, describe, what, expr)                                                 \
    do {                                                                                           \
        type zy_s_ = (expr);                                                                       \
        if (zy_s_ != (ok))                                                                         \
            return zy_fail_runtime("%s:%d: %s failed: %s", __FILE__, __LINE__, what,               \
                                   describe(zy_s_));                                               \
    } while (0)
#define ZY_LIB_CHECK(type, ok, describe, what, expr)                                               \
    do {                                                                                           \
        type zy_s_ = (expr);                                                                       \
        if (zy_s_ != (ok)) zy_fatal_runtime_at(__FILE__, __LINE__, what, "%s", describe(zy_s_));   \
    } while (0)
#define ZY_LIB_NOTE(st, type, ok, describe, what, expr)                                            \
    do {                                                                                           \
        type zy_s_ = (expr);                                                                       \
        if (zy_s_ != (ok) && (st) == ZY_OK)                                                        \
            (st) = zy_fail_runtime("%s:%d: %s failed: %s", __FILE__, __LINE__, what,               \
                                   describe(zy_s_));                                               \
    } while (0)

/* CUDA runtime (cudaError_t). The launch forms check the launch of the kernel just queued (a bad
 * configuration), not its completion. */
#define ZY_CUDA_TRY(expr)   ZY_LIB_TRY(cudaError_t, cudaSuccess, cudaGetErrorString, #expr, expr)
#define ZY_CUDA_CHECK(expr) ZY_LIB_CHECK(cudaError_t, cudaSuccess, cudaGetErrorString, #expr, expr)
#define ZY_CUDA_NOTE(st, expr)                                                                     \
    ZY_LIB_NOTE(st, cudaError_t, cudaSuccess, cudaGetErrorString, #expr, expr)
#define ZY_CUDA_TRY_LAUNCH()   ZY_CUDA_TRY(cudaGetLastError())
#define ZY_CUDA_CHECK_LAUNCH() ZY_CUDA_CHECK(cudaGetLastError())

/* cuBLAS and cuBLASLt (both return cublasStatus_t). */
#define ZY_CUBLAS_TRY(expr)                                                                        \
    ZY_LIB_TRY(cublasStatus_t, CUBLAS_STATUS_SUCCESS, cublasGetStatusString, #expr, expr)
#define ZY_CUBLAS_CHECK(expr)                                                                      \
    ZY_LIB_CHECK(cublasStatus_t, CUBLAS_STATUS_SUCCESS, cublasGetStatusString, #expr, expr)

/* NCCL calls outside a communicator's guarded waits (ncclGetUniqueId, ...); calls on a
 * communicator go through dist/nccl_comm.h's ZY_NCCL_COMM_TRY (watchdog, non-blocking completion).
 */
#define ZY_NCCL_TRY(expr) ZY_LIB_TRY(ncclResult_t, ncclSuccess, ncclGetErrorString, #expr, expr)

/* Our own status (ZY_OK/ZY_ERR from a wrapper such as cuda_gemm) inside a training step: the
 * recorded message is the description. The TRY tier is err.h's ZY_TRY. */
#define ZY_STATUS_CHECK(expr)                                                                      \
    do {                                                                                           \
        if ((expr) != ZY_OK) zy_fatal_runtime_at(__FILE__, __LINE__, #expr, "%s", zy_errmsg());    \
    } while (0)

#endif
