/* GPU GEMMs for training: a context owning the cuBLASLt handle, one workspace and a small cache of
 * matmul descriptors with their heuristic-chosen algorithms, so a step's repeated shapes pay the
 * descriptor and heuristic cost once. Row-major semantics identical to ops_matmul (ops.h):
 *   C[M,N] = epilogue(alpha * op(A) op(B) + beta * C)
 * with op(A) [M,K] (A stored [K,M] when transA) and op(B) [K,N] (B stored [N,K] when transB),
 * fp32 accumulation. Also the MoE expert GEMMs over row ranges of a gathered activation matrix
 * (per-expert cuBLASLt calls, or cublasGemmGroupedBatchedEx). Pointers are device memory;
 * `stream` is a cudaStream_t (NULL = the legacy default stream). Not yet behind ops.h. */
#ifndef ZY_OPS_CUDA_GEMM_H
#define ZY_OPS_CUDA_GEMM_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types of the operands: bf16 (storage; products accumulate in fp32) or fp32 (no TF32). */
typedef enum { CUDA_GEMM_BF16 = 0, CUDA_GEMM_FP32 = 1 } cuda_gemm_dtype;

/* What happens after alpha*op(A)op(B) + beta*C; bias has dtype_c elements.
 *  BIAS:      C[i,j] += bias[j]                          (bias [N])
 *  GELU_BIAS: C[i,j] = gelu(that + bias[j]), gelu = tanh approximation
 *             0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) as cuBLASLt's
 *  BGRAD:     C as NONE, and bias[i] = sum_k op(A)[i,k] (bias [M], OVERWRITTEN; alpha must be 1):
 *             the bias gradient of a weight-gradient GEMM dW = dY^T X (A = dY, transA = 1). */
typedef enum {
    CUDA_GEMM_EPI_NONE = 0,
    CUDA_GEMM_EPI_BIAS = 1,
    CUDA_GEMM_EPI_GELU_BIAS = 2,
    CUDA_GEMM_EPI_BGRAD = 3
} cuda_gemm_epilogue;

/* How the expert GEMMs run. */
typedef enum {
    CUDA_GEMM_GROUPED_LOOP = 0,   /* one cached cuBLASLt call per non-empty expert */
    CUDA_GEMM_GROUPED_CUBLAS = 1, /* one cublasGemmGroupedBatchedEx call (no bf16 -> fp32 mix) */
    CUDA_GEMM_GROUPED_PADDED = 2, /* every expert owns cap rows (offsets[e] = e * cap, the rows
                                     past its tokens zero): one strided batched cuBLASLt GEMM */
    CUDA_GEMM_GROUPED_CHUNKED = 3 /* every expert's full blocks of CUDA_GEMM_CHUNK_ROWS rows as one
                                     pointer-array batched cuBLASLt GEMM, the rest per expert
                                     (the weight gradient: per expert, as LOOP) */
} cuda_gemm_grouped_impl;

#define CUDA_GEMM_CACHE_SIZE  192 /* cached (shape bucket, types, epilogue, alignment) plans */
#define CUDA_GEMM_WORKSPACE   (32u << 20)
#define CUDA_GEMM_MAX_EXPERTS 128 /* experts per grouped call */
#define CUDA_GEMM_CHUNK_ROWS  256 /* rows per block of the chunked expert GEMMs */

typedef struct cuda_gemm_plan cuda_gemm_plan;

typedef struct {
    void *lt;              /* cublasLtHandle_t */
    void *blas;            /* cublasHandle_t (grouped GEMM) */
    void *workspace;       /* CUDA_GEMM_WORKSPACE bytes of device memory */
    void *ptrs;            /* device [3 * CUDA_GEMM_MAX_EXPERTS] pointers for the grouped call */
    cuda_gemm_plan *plans; /* [CUDA_GEMM_CACHE_SIZE] */
    int nplans, next_evict;
    long hits, misses; /* plan cache statistics */
    long fallbacks;    /* GEMMs whose epilogue cuBLASLt had no kernel for: our own kernels */
    long legacy;       /* GEMMs cuBLASLt had no algorithm for at all: cublasGemmEx */
    int nexact;        /* cached exact-size plans (made when a bucket's algorithm was refused) */
    int device;
} cuda_gemm_ctx;

/* Creates the handles, the workspace and the cache on the current device. */
int cuda_gemm_init(cuda_gemm_ctx *c);
/* Releases everything init created (safe on a zeroed or failed context). */
void cuda_gemm_free(cuda_gemm_ctx *c);

/* C[M,N] = epilogue(alpha op(A) op(B) + beta C), row-major (see the top of this file); A and B
 * have dtype_ab, C and bias dtype_c (dtype_ab fp32 requires dtype_c fp32). beta == 0 ignores C's
 * old contents. M, N, K >= 0; returns ZY_ERR with a message on bad arguments or a CUDA failure. */
int cuda_gemm(cuda_gemm_ctx *c, void *C, const void *A, const void *B, int M, int N, int K,
              int transA, int transB, float alpha, float beta, cuda_gemm_dtype dtype_ab,
              cuda_gemm_dtype dtype_c, cuda_gemm_epilogue epi, void *bias, void *stream);

/* batch GEMMs C_i = alpha op(A_i) op(B_i) + beta C_i, i < batch, with X_i = X + i * stride_x
 * elements: one cuBLASLt call (strided batch). No epilogue. Matrices of C must not overlap. */
int cuda_gemm_strided(cuda_gemm_ctx *c, void *C, const void *A, const void *B, int M, int N, int K,
                      int transA, int transB, float alpha, float beta, cuda_gemm_dtype dtype_ab,
                      cuda_gemm_dtype dtype_c, int batch, long long stride_a, long long stride_b,
                      long long stride_c, void *stream);

/* C_i = alpha op(A_i) op(B_i) + beta C_i for i < batch: A, B, C are HOST arrays of device
 * pointers, one shape for all; pointer-array batched cuBLASLt calls of up to
 * CUDA_GEMM_MAX_EXPERTS products (the pointers go to the device through a kernel argument, so no
 * synchronisation). No epilogue; K >= 1. */
int cuda_gemm_ptr_array(cuda_gemm_ctx *c, void *const *C, const void *const *A,
                        const void *const *B, int M, int N, int K, int transA, int transB,
                        float alpha, float beta, cuda_gemm_dtype dtype_ab, cuda_gemm_dtype dtype_c,
                        int batch, void *stream);

/* Expert GEMMs by blocks: every full block of `chunk` rows of every expert (rows offsets[e] ..
 * offsets[e+1]-1, HOST offsets) in pointer-array GEMMs, the forward Y = X W_e^T (data_grad 0) or
 * the input gradient dX = dY W_e (data_grad 1), overwriting; the rows after an expert's last full
 * block are left to the caller. W [E,N,K]. */
int cuda_gemm_grouped_chunks(cuda_gemm_ctx *c, void *out, const void *in, const void *W,
                             const int *offsets, int E, int N, int K, int chunk, int data_grad,
                             cuda_gemm_dtype dtype_ab, cuda_gemm_dtype dtype_c, void *stream);

/* cap when offsets[e] = e * cap for every e <= E (the padded expert layout), else -1. */
int cuda_gemm_uniform_cap(const int *offsets, int E);

/* Expert e owns rows offsets[e] .. offsets[e+1]-1 (offsets: HOST [E+1], non-decreasing, from 0)
 * of the gathered matrices. W [E,N,K] (dtype_ab). Experts with no rows cost nothing. The CUBLAS
 * implementation keeps its pointer arrays in the context: one context's grouped calls must be
 * issued on one stream (or ordered between streams by the caller). */
/* Forward: Y[rows of e, N] = X[rows of e, K] W[e]^T (Y dtype_c, overwritten). */
int cuda_gemm_grouped_fwd(cuda_gemm_ctx *c, void *Y, const void *X, const void *W,
                          const int *offsets, int E, int N, int K, cuda_gemm_dtype dtype_ab,
                          cuda_gemm_dtype dtype_c, cuda_gemm_grouped_impl impl, void *stream);
/* Input gradient: dX[rows of e, K] = dY[rows of e, N] W[e] (dX dtype_c, overwritten). */
int cuda_gemm_grouped_bwd_data(cuda_gemm_ctx *c, void *dX, const void *dY, const void *W,
                               const int *offsets, int E, int N, int K, cuda_gemm_dtype dtype_ab,
                               cuda_gemm_dtype dtype_c, cuda_gemm_grouped_impl impl, void *stream);
/* Weight gradient: dW[e] [N,K] = dY[rows of e]^T X[rows of e] + beta dW[e] (beta 0 or 1: 1
 * accumulates); an expert with no rows gets beta dW[e] (zeros when beta = 0). */
int cuda_gemm_grouped_bwd_weight(cuda_gemm_ctx *c, void *dW, const void *dY, const void *X,
                                 const int *offsets, int E, int N, int K, float beta,
                                 cuda_gemm_dtype dtype_ab, cuda_gemm_dtype dtype_c,
                                 cuda_gemm_grouped_impl impl, void *stream);

/* Times the two grouped implementations on bench-small's expert shapes (E = 16, D = F = 1024,
 * 16384 rows split unevenly; gate_up [E,2F,D], down [E,D,F]; forward, input and weight
 * gradients) on the current device and prints a table to out. */
int cuda_gemm_grouped_time(FILE *out);

#ifdef __cplusplus
}
#endif

#endif
