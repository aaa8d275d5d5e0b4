/* GPU GEMMs: a context owning the cuBLASLt and cuBLAS handles, one workspace and a cache of plans
 * (matmul descriptors with their heuristic-chosen algorithm), so a step's repeated shapes pay the
 * descriptor and heuristic cost once. Every cuBLAS/cuBLASLt call of the library goes through here
 * (the ops' GEMMs, the expert GEMMs, Muon's Newton-Schulz): one plan cache, one place to port.
 * src/bench/gemm_run.cu alone calls cuBLASLt directly: it measures cuBLASLt's candidates.
 * Row-major semantics as ops_matmul (ops.h):
 *   D[M,N] = alpha * op(A) op(B) + beta * C
 * with op(A) [M,K] (A stored [K,M] when transA) and op(B) [K,N] (B stored [N,K] when transB),
 * fp32 accumulation; D is C unless a call names its own. Pointers are device memory; `stream` is
 * a cudaStream_t (NULL = the legacy default stream). Not yet behind ops.h. */
#ifndef ZY_OPS_CUDA_GEMM_H
#define ZY_OPS_CUDA_GEMM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types of the operands: bf16 (storage; products accumulate in fp32) or fp32 (no TF32). */
typedef enum { CUDA_GEMM_BF16 = 0, CUDA_GEMM_FP32 = 1 } cuda_gemm_dtype;

#define CUDA_GEMM_CACHE_SIZE                                                                       \
    512 /* cached (shape bucket, types, layout, alignment) plans:                                  \
           bench-small's step keeps 171 */
#define CUDA_GEMM_WORKSPACE   (32u << 20)
#define CUDA_GEMM_MAX_EXPERTS 128 /* experts per expert call; products per pointer-array call */
#define CUDA_GEMM_CHUNK_ROWS  256 /* rows per block of the chunked expert GEMMs */

typedef struct cuda_gemm_plan cuda_gemm_plan;

typedef struct {
    void *lt;              /* cublasLtHandle_t */
    void *blas;            /* cublasHandle_t (the shapes cuBLASLt has no algorithm for) */
    void *workspace;       /* CUDA_GEMM_WORKSPACE bytes of device memory */
    void *ptrs;            /* device [3 * CUDA_GEMM_MAX_EXPERTS] pointers for pointer arrays */
    cuda_gemm_plan *plans; /* [CUDA_GEMM_CACHE_SIZE] */
    int nplans, next_evict;
    long hits, misses; /* plan cache statistics */
    long legacy;       /* GEMMs cuBLASLt had no algorithm for at all: classic cuBLAS */
    int nexact;        /* cached exact-size plans (made when a bucket's algorithm was refused) */
    int device;
} cuda_gemm_ctx;

/* Creates the handles, the workspace and the cache on the current device. */
int cuda_gemm_init(cuda_gemm_ctx *c);
/* Releases everything init created (safe on a zeroed or failed context). */
void cuda_gemm_free(cuda_gemm_ctx *c);

/* C[M,N] = alpha op(A) op(B) + beta C, packed row-major (see the top of this file); A and B have
 * dtype_ab, C dtype_c (dtype_ab fp32 requires dtype_c fp32). beta == 0 ignores C's old contents.
 * M, N, K >= 0; returns ZY_ERR with a message on bad arguments or a CUDA failure. Plans are
 * cached per size bucket of M and K (row counts that change every step share one). */
int cuda_gemm(cuda_gemm_ctx *c, void *C, const void *A, const void *B, int M, int N, int K,
              int transA, int transB, float alpha, float beta, cuda_gemm_dtype dtype_ab,
              cuda_gemm_dtype dtype_c, void *stream);

/* A GEMM spelled out: strided batches, leading dimensions, an output apart from C. */
typedef struct {
    int M, N, K, transA, transB;
    float alpha, beta;
    cuda_gemm_dtype dtype_ab, dtype_c;
    /* elements between rows of A, B and C as stored (D has C's); 0: packed (A: K, or M when
     * transA; B: N, or K when transB; C: N). A call naming any of them is planned for its exact
     * sizes (its caller lays out fixed shapes), not by size bucket. */
    long long lda, ldb, ldc;
    int batch; /* products (>= 1): matrix i of X starts stride_x elements after matrix i-1 */
    long long stride_a, stride_b, stride_c;
    int classic; /* 1: classic cuBLAS even where cuBLASLt has an algorithm (tests of that path) */
} cuda_gemm_desc;

/* D_i = alpha op(A_i) op(B_i) + beta C_i for i < g->batch: one cuBLASLt call. D may be C; when it
 * is not, the two do not overlap (where classic cuBLAS runs it, C's whole extent, gaps between
 * rows and matrices included, is copied into D first). Matrices of D must not overlap. */
int cuda_gemm_run(cuda_gemm_ctx *c, const cuda_gemm_desc *g, void *D, const void *C, const void *A,
                  const void *B, void *stream);

/* Builds (or finds) the plan cuda_gemm_run uses for g on pointers aligned as these, running
 * nothing, so a caller can plan at set-up; *lt = 1 when cuBLASLt has an algorithm for it, 0 when
 * classic cuBLAS runs it. */
int cuda_gemm_prepare(cuda_gemm_ctx *c, const cuda_gemm_desc *g, const void *D, const void *C,
                      const void *A, const void *B, int *lt);

/* C_i = alpha op(A_i) op(B_i) + beta C_i for i < batch: A, B, C are HOST arrays of device
 * pointers, one packed shape for all; pointer-array batched cuBLASLt calls of up to
 * CUDA_GEMM_MAX_EXPERTS products (the pointers go to the device through a kernel argument, so no
 * synchronisation). K >= 1. */
int cuda_gemm_ptr_array(cuda_gemm_ctx *c, void *const *C, const void *const *A,
                        const void *const *B, int M, int N, int K, int transA, int transB,
                        float alpha, float beta, cuda_gemm_dtype dtype_ab, cuda_gemm_dtype dtype_c,
                        int batch, void *stream);

/* The three GEMMs of an expert layer: expert e owns rows offsets[e] .. offsets[e+1]-1 of the
 * gathered matrices, W [E,N,K].
 *  FWD:         Y[rows, N] = X[rows, K] W[e]^T     (out = Y, in = X, w = W)
 *  BWD_DATA:    dX[rows, K] = dY[rows, N] W[e]     (out = dX, in = dY, w = W)
 *  BWD_WEIGHT:  dW[e] [N,K] = dY[rows]^T X[rows]   (out = dW, in = dY, w = X) */
typedef enum {
    CUDA_GEMM_EXPERT_FWD = 0,
    CUDA_GEMM_EXPERT_BWD_DATA = 1,
    CUDA_GEMM_EXPERT_BWD_WEIGHT = 2
} cuda_gemm_expert_kind;

/* One expert's GEMM as cuda_gemm takes it: C[M,N] = op(A) op(B). */
typedef struct {
    void *C;
    const void *A, *B;
    int M, N, K, transA, transB;
} cuda_gemm_expert;

/* The GEMM of `kind` for rows row0 .. row0+rows-1 of expert e (operands of dtype_ab, output of
 * dtype_c). */
cuda_gemm_expert cuda_gemm_expert_problem(cuda_gemm_expert_kind kind, int e, int row0, int rows,
                                          void *out, const void *in, const void *w, int N, int K,
                                          cuda_gemm_dtype dtype_ab, cuda_gemm_dtype dtype_c);

/* Expert GEMMs by blocks: every full block of `chunk` rows of every expert (HOST offsets [E+1],
 * non-decreasing from 0) in pointer-array GEMMs, the forward (data_grad 0) or the input gradient
 * (data_grad 1), overwriting; the rows after an expert's last full block are left to the caller. */
int cuda_gemm_grouped_chunks(cuda_gemm_ctx *c, void *out, const void *in, const void *W,
                             const int *offsets, int E, int N, int K, int chunk, int data_grad,
                             cuda_gemm_dtype dtype_ab, cuda_gemm_dtype dtype_c, void *stream);

#ifdef __cplusplus
}
#endif

#endif
