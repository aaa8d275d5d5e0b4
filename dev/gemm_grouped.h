/* Expert GEMM variants kept for tuning (dev/, not in libzayac): the three GEMMs of an expert layer
 * (gemm.h's cuda_gemm_expert_kind) over all experts in one call, by one of three methods, to time
 * them against each other (dev/time_gemm_grouped.cu) and to test them (dev/test_gemm_grouped.c).
 * The training path runs its expert GEMMs in src/ops/cuda/ops_experts.cu (per expert on side
 * streams, or by blocks with the cuda.expert_chunk setting). Measured on an H100
 * (results/single-gpu): by blocks no faster than per expert; the padded layout as fast as one dense
 * GEMM when the experts are balanced, which bench-small's routing is not. Same pointer and dtype
 * conventions as gemm.h.
 */
#ifndef ZY_DEV_GEMM_GROUPED_H
#define ZY_DEV_GEMM_GROUPED_H

#include "ops/cuda/gemm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    DEV_GROUPED_LOOP = 0,   /* one cached cuBLASLt call per non-empty expert, on one stream */
    DEV_GROUPED_PADDED = 1, /* every expert owns cap rows (offsets[e] = e * cap, the rows past its
                               tokens zero): one strided batched cuBLASLt GEMM */
    DEV_GROUPED_CHUNKED = 2 /* every expert's full blocks of CUDA_GEMM_CHUNK_ROWS rows as one
                               pointer-array batched GEMM, the rest per expert (the weight
                               gradient: per expert, as LOOP) */
} dev_grouped_impl;

/* cap when offsets[e] = e * cap for every e <= E (the padded expert layout), else -1. */
int dev_gemm_uniform_cap(const int *offsets, int E);

/* The GEMM `kind` of every expert: expert e owns rows offsets[e] .. offsets[e+1]-1 (HOST [E+1],
 * non-decreasing from 0) of the gathered matrices, W [E,N,K] (dtype_ab). FWD and BWD_DATA
 * overwrite their rows; BWD_WEIGHT computes dW[e] = dY[rows of e]^T X[rows of e] + beta dW[e]
 * (beta 0 or 1), an expert with no rows getting beta dW[e] (zeros when beta = 0). Experts with no
 * rows cost nothing otherwise. Returns ZY_ERR with a message on bad arguments or a CUDA failure. */
int dev_gemm_grouped(cuda_gemm_ctx *c, cuda_gemm_expert_kind kind, void *out, const void *in,
                     const void *w, const int *offsets, int E, int N, int K, float beta,
                     cuda_gemm_dtype dtype_ab, cuda_gemm_dtype dtype_c, dev_grouped_impl impl,
                     void *stream);

#ifdef __cplusplus
}
#endif

#endif
