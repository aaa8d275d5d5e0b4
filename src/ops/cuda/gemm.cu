/* GPU GEMMs through cuBLASLt (see gemm.h): the context, the plan cache, the epilogues (fused when
 * cuBLASLt has a kernel for the case, otherwise our own small kernels after a plain GEMM) and the
 * grouped expert GEMMs. Our row-major C[M,N] is cuBLAS's column-major C^T [N,M] = op(B)^T op(A)^T,
 * so cuBLAS's A is our B and its B is our A, with m = N, n = M. */
#include "ops/cuda/gemm.h"
#include "base/check.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>


/* Everything the descriptors and the chosen algorithm depend on (compared with memcmp). */
typedef struct {
    int M, N, K, transA, transB, dab, dc, epi, beta_nz;
    int align_a, align_b, align_c, align_bias; /* bytes: largest power of two <= 256 */
    int div_m, div_k; /* largest power of two <= 16 dividing M, K (leading-dimension alignment) */
    int batch;        /* strided batch count (1: one GEMM; -1: pointer-array batch, any count) */
    int div_s;        /* largest power of two <= 16 dividing every batch stride (1 when batch 1) */
} plan_key;

/* Batch strides in elements of our A, B and C (unused when batch is 1); for a pointer-array batch
 * (key batch -1) the count and the smallest alignment of each operand's pointers. */
typedef struct {
    long long a, b, c;
    int count, align_a, align_b, align_c;
} batch_strides;

struct cuda_gemm_plan {
    plan_key key; /* M and K rounded up to their bucket (see dim_bucket) */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc; /* cuBLAS's A (our B), B (our A), C = D */
    int cur_m, cur_k;                  /* the actual M, K the layouts describe now */
    long long cur_sa, cur_sb, cur_sc;  /* and the batch strides (elements of our A, B, C) */
    int cur_count;                     /* and the pointer-array batch count */
    cublasLtMatmulAlgo_t algo;
    int fallback; /* 1: cuBLASLt has no kernel with this epilogue: plain GEMM + our kernel;
                     2: none at all: cublasGemmEx + our kernel */
};

/* cuBLAS's column-major view of our row-major problem. */
typedef struct {
    cublasOperation_t ta, tb;
    int m, n, k;
    int arows, acols, lda, brows, bcols, ldb, ldc;
} colmajor;

static colmajor to_colmajor(int M, int N, int K, int transA, int transB) {
    colmajor v;
    v.m = N, v.n = M, v.k = K;
    if (transB) /* B stored [N,K] row-major = K x N column-major, transposed */
        v.ta = CUBLAS_OP_T, v.arows = K, v.acols = N, v.lda = K;
    else /* B stored [K,N] = N x K column-major */
        v.ta = CUBLAS_OP_N, v.arows = N, v.acols = K, v.lda = N;
    if (transA) /* A stored [K,M] = M x K column-major, transposed */
        v.tb = CUBLAS_OP_T, v.brows = M, v.bcols = K, v.ldb = M;
    else /* A stored [M,K] = K x M column-major */
        v.tb = CUBLAS_OP_N, v.brows = K, v.bcols = M, v.ldb = K;
    v.ldc = N;
    return v;
}

/* The plan of a GEMM is cached per bucket of M and K: the MoE expert GEMMs have a different row
 * count every step (M for the forward and data gradient, K for the weight gradient), and a cache
 * keyed on exact sizes would ask cuBLASLt's heuristic for every one of them. The algorithm picked
 * for the bucket's size runs the actual (smaller or equal) size; the layouts are re-sized in place
 * before each call (host-only attribute writes). Buckets: 64, then powers of two; the key keeps
 * the power-of-two divisors of M and K, which decide the leading dimensions' alignment. When the
 * bucket's algorithm refuses the actual size (cuBLASLt says so before launching), that size gets
 * an exact plan of its own, which later calls find first. */
static int dim_bucket(int x) {
    int b = 64;
    while (b < x && b < (1 << 30)) b <<= 1;
    return b;
}

static int pow2_divisor(int x) {
    int d = 1;
    while (d < 16 && x % (2 * d) == 0) d <<= 1;
    return d;
}

static int elt_size(int dt) {
    return dt == CUDA_GEMM_BF16 ? 2 : 4;
}
static cudaDataType_t cuda_type(int dt) {
    return dt == CUDA_GEMM_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

static int ptr_align(const void *p) {
    uintptr_t a = (uintptr_t)p;
    if (a == 0) return 256;
    int b = 1;
    while (b < 256 && !(a & (uintptr_t)b)) b <<= 1;
    return b;
}

/* ---- our epilogue kernels (fallback, and the K = 0 case) ---- */

__device__ static float ld_elt(const void *p, size_t i, int dt) {
    if (dt == CUDA_GEMM_BF16) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    return ((const float *)p)[i];
}

__device__ static void st_elt(void *p, size_t i, int dt, float v) {
    if (dt == CUDA_GEMM_BF16)
        ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
    else
        ((float *)p)[i] = v;
}

__device__ static float gelu_tanh(float x) {
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

/* C[M,N] = beta * C (0 when beta == 0, whatever C held): the K = 0 product. */
__global__ static void k_scale(void *C, size_t n, int dc, float beta) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        st_elt(C, i, dc, beta == 0.0f ? 0.0f : beta * ld_elt(C, i, dc));
}

/* C[i,j] = act(C[i,j] + bias[j]) for C [M,N]. */
__global__ static void k_bias(void *C, const void *bias, int M, int N, int dc, int gelu) {
    size_t n = (size_t)M * N;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = ld_elt(C, i, dc) + ld_elt(bias, i % (size_t)N, dc);
        st_elt(C, i, dc, gelu ? gelu_tanh(v) : v);
    }
}

/* bias[i] = sum_k op(A)[i,k], op(A) [M,K] (A stored [K,M] when transA). One thread per i. */
__global__ static void k_bgrad(void *bias, const void *A, int M, int K, int transA, int dab,
                               int dc) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= M) return;
    float s = 0.0f;
    for (int k = 0; k < K; k++) s += ld_elt(A, transA ? (size_t)k * M + i : (size_t)i * K + k, dab);
    st_elt(bias, i, dc, s);
}

static int grid_for(size_t n) {
    size_t g = (n + 255) / 256;
    return (int)(g < 1 ? 1 : g > 4096 ? 4096 : g);
}

/* The epilogue by our own kernels, after C = alpha op(A) op(B) + beta C is in place. */
static int epilogue_kernels(const plan_key *k, void *C, const void *A, void *bias, cudaStream_t s) {
    if (k->epi == CUDA_GEMM_EPI_BIAS || k->epi == CUDA_GEMM_EPI_GELU_BIAS) {
        k_bias<<<grid_for((size_t)k->M * k->N), 256, 0, s>>>(C, bias, k->M, k->N, k->dc,
                                                             k->epi == CUDA_GEMM_EPI_GELU_BIAS);
        ZY_CUDA_TRY_LAUNCH();
    } else if (k->epi == CUDA_GEMM_EPI_BGRAD) {
        k_bgrad<<<(k->M + 127) / 128, 128, 0, s>>>(bias, A, k->M, k->K, k->transA, k->dab, k->dc);
        ZY_CUDA_TRY_LAUNCH();
    }
    return ZY_OK;
}

/* ---- plans ---- */

static void plan_release(cuda_gemm_plan *p) {
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
    memset(p, 0, sizeof *p);
}

/* The batch count and strides of p's three layouts (cuBLAS's A is our B, its B our A); batch -1:
 * a pointer-array batch of bs->count. */
static cublasStatus_t set_batch(cuda_gemm_plan *p, int batch, const batch_strides *bs) {
    const struct {
        cublasLtMatrixLayout_t l;
        int64_t stride;
    } set[3] = {{p->la, bs->b}, {p->lb, bs->a}, {p->lc, bs->c}};
    const int ptrs = batch < 0, count = ptrs ? bs->count : batch;
    for (int i = 0; i < 3; i++) {
        cublasStatus_t st = cublasLtMatrixLayoutSetAttribute(
            set[i].l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count);
        if (ptrs) {
            const cublasLtBatchMode_t mode = CUBLASLT_BATCH_MODE_POINTER_ARRAY;
            if (st == CUBLAS_STATUS_SUCCESS)
                st = cublasLtMatrixLayoutSetAttribute(set[i].l, CUBLASLT_MATRIX_LAYOUT_BATCH_MODE,
                                                      &mode, sizeof mode);
            if (st != CUBLAS_STATUS_SUCCESS) return st;
            continue;
        }
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasLtMatrixLayoutSetAttribute(set[i].l,
                                                  CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                  &set[i].stride, sizeof set[i].stride);
        if (st != CUBLAS_STATUS_SUCCESS) return st;
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* Descriptors for key with cuBLASLt epilogue epi_lt (batch strides bs when k->batch > 1);
 * *found = 0 when no algorithm fits. */
static int plan_build(cuda_gemm_ctx *c, cuda_gemm_plan *p, const plan_key *k,
                      cublasLtEpilogue_t epi_lt, void *bias, const batch_strides *bs, int *found,
                      cublasStatus_t *why) {
    colmajor v = to_colmajor(k->M, k->N, k->K, k->transA, k->transB);
    cudaDataType_t tab = cuda_type(k->dab), tc = cuda_type(k->dc);
    *found = 0;
    *why = CUBLAS_STATUS_SUCCESS;
    ZY_CUBLAS_TRY(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    ZY_CUBLAS_TRY(
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &v.ta, sizeof v.ta));
    ZY_CUBLAS_TRY(
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &v.tb, sizeof v.tb));
    ZY_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi_lt,
                                          sizeof epi_lt));
    if (epi_lt != CUBLASLT_EPILOGUE_DEFAULT) {
        ZY_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                              sizeof bias));
        ZY_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &tc,
                                              sizeof tc)); /* the bias has dtype_c elements */
    }
    ZY_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p->la, tab, v.arows, v.acols, v.lda));
    ZY_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p->lb, tab, v.brows, v.bcols, v.ldb));
    ZY_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p->lc, tc, v.m, v.n, v.ldc));
    if (k->batch != 1) {
        ZY_CUBLAS_TRY(set_batch(p, k->batch, bs));
    }
    cublasLtMatmulPreference_t pref;
    ZY_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = CUDA_GEMM_WORKSPACE;
    uint32_t al[4] = {(uint32_t)k->align_b, (uint32_t)k->align_a, (uint32_t)k->align_c,
                      (uint32_t)k->align_c};
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    const cublasLtMatmulPreferenceAttributes_t aa[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4 && st == CUBLAS_STATUS_SUCCESS; i++)
        st = cublasLtMatmulPreferenceSetAttribute(pref, aa[i], &al[i], sizeof al[i]);
    cublasLtMatmulHeuristicResult_t h;
    int n = 0;
    if (st == CUBLAS_STATUS_SUCCESS) {
        /* a refusal (no kernel for this case, whatever the status says) is an answer: found = 0 */
        cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)c->lt, p->desc, p->la,
                                                           p->lb, p->lc, p->lc, pref, 1, &h, &n);
        if (hs != CUBLAS_STATUS_SUCCESS) n = 0, *why = hs;
    }
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS)
        return zy_fail_runtime("%s:%d: cuBLASLt preference/heuristic failed: %s", __FILE__,
                               __LINE__, cublasGetStatusString(st));
    if (n > 0) p->algo = h.algo, *found = 1;
    p->cur_m = k->M, p->cur_k = k->K;
    p->cur_sa = bs->a, p->cur_sb = bs->b, p->cur_sc = bs->c, p->cur_count = bs->count;
    return ZY_OK;
}

/* Rebuilds p as a plain GEMM whose epilogue our kernels apply. */
static int plan_fallback(cuda_gemm_ctx *c, cuda_gemm_plan *p, const plan_key *k,
                         const batch_strides *bs, int *found, cublasStatus_t *why) {
    plan_release(p);
    int rc = plan_build(c, p, k, CUBLASLT_EPILOGUE_DEFAULT, NULL, bs, found, why);
    p->fallback = 1;
    p->key = *k;
    return rc;
}

static cuda_gemm_plan *plan_find(cuda_gemm_ctx *c, const plan_key *k) {
    for (int i = 0; i < c->nplans; i++)
        if (memcmp(&c->plans[i].key, k, sizeof *k) == 0) return &c->plans[i];
    return NULL;
}

/* The cached plan for k, building it on a miss (the oldest entry is evicted when full). */
static int plan_get(cuda_gemm_ctx *c, const plan_key *k, void *bias, const batch_strides *bs,
                    cuda_gemm_plan **out) {
    cuda_gemm_plan *p = plan_find(c, k);
    if (p) {
        c->hits++;
        *out = p;
        return ZY_OK;
    }
    c->misses++;
    if (c->nplans < CUDA_GEMM_CACHE_SIZE)
        p = &c->plans[c->nplans++];
    else {
        p = &c->plans[c->next_evict];
        c->next_evict = (c->next_evict + 1) % CUDA_GEMM_CACHE_SIZE;
        plan_release(p);
    }
    static const cublasLtEpilogue_t lt_epi[4] = {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS,
                                                 CUBLASLT_EPILOGUE_GELU_BIAS,
                                                 CUBLASLT_EPILOGUE_BGRADB};
    int found = 0;
    cublasStatus_t why;
    int rc = plan_build(c, p, k, lt_epi[k->epi], bias, bs, &found, &why);
    if (rc == ZY_OK && !found && k->epi != CUDA_GEMM_EPI_NONE)
        rc = plan_fallback(c, p, k, bs, &found, &why);
    if (rc == ZY_OK && !found) p->fallback = 2; /* the classic cuBLAS API takes any layout */
    if (rc != ZY_OK) {
        plan_release(p);
        /* keep the table dense: move the last entry into the hole */
        int idx = (int)(p - c->plans);
        if (idx != c->nplans - 1) {
            c->plans[idx] = c->plans[c->nplans - 1];
            memset(&c->plans[c->nplans - 1], 0, sizeof *p);
        }
        c->nplans--;
        if (c->next_evict >= c->nplans) c->next_evict = 0;
        return ZY_ERR;
    }
    p->key = *k;
    *out = p;
    return ZY_OK;
}

/* Points p's layouts at the actual sizes of k (same N, transposes and types as the plan). */
static cublasStatus_t plan_resize(cuda_gemm_plan *p, const plan_key *k, const batch_strides *bs) {
    colmajor v = to_colmajor(k->M, k->N, k->K, k->transA, k->transB);
    const struct {
        cublasLtMatrixLayout_t l;
        uint64_t rows, cols;
        int64_t ld;
    } set[3] = {{p->la, (uint64_t)v.arows, (uint64_t)v.acols, v.lda},
                {p->lb, (uint64_t)v.brows, (uint64_t)v.bcols, v.ldb},
                {p->lc, (uint64_t)v.m, (uint64_t)v.n, v.ldc}};
    for (int i = 0; i < 3; i++) {
        cublasStatus_t st = cublasLtMatrixLayoutSetAttribute(set[i].l, CUBLASLT_MATRIX_LAYOUT_ROWS,
                                                             &set[i].rows, sizeof set[i].rows);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasLtMatrixLayoutSetAttribute(set[i].l, CUBLASLT_MATRIX_LAYOUT_COLS,
                                                  &set[i].cols, sizeof set[i].cols);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasLtMatrixLayoutSetAttribute(set[i].l, CUBLASLT_MATRIX_LAYOUT_LD, &set[i].ld,
                                                  sizeof set[i].ld);
        if (st != CUBLAS_STATUS_SUCCESS) return st;
    }
    if (k->batch != 1) {
        cublasStatus_t st = set_batch(p, k->batch, bs);
        if (st != CUBLAS_STATUS_SUCCESS) return st;
    }
    p->cur_m = k->M, p->cur_k = k->K;
    p->cur_sa = bs->a, p->cur_sb = bs->b, p->cur_sc = bs->c, p->cur_count = bs->count;
    return CUBLAS_STATUS_SUCCESS;
}

/* C = alpha op(A) op(B) + beta C by plan p, without our epilogue kernels: cuBLASLt, or the
 * classic cublasGemmEx for the layouts cuBLASLt has no algorithm for. */
static cublasStatus_t plan_run(cuda_gemm_ctx *c, cuda_gemm_plan *p, const plan_key *k, void *C,
                               const void *A, const void *B, float alpha, float beta, void *bias,
                               const batch_strides *bs, cudaStream_t s) {
    if (p->fallback == 2) {
        colmajor v = to_colmajor(k->M, k->N, k->K, k->transA, k->transB);
        cublasHandle_t h = (cublasHandle_t)c->blas;
        cublasStatus_t st = cublasSetStream(h, s);
        if (st != CUBLAS_STATUS_SUCCESS) return st;
        if (k->batch < 0)
            return cublasGemmBatchedEx(
                h, v.ta, v.tb, v.m, v.n, v.k, &alpha, (const void *const *)B, cuda_type(k->dab),
                v.lda, (const void *const *)A, cuda_type(k->dab), v.ldb, &beta, (void *const *)C,
                cuda_type(k->dc), v.ldc, bs->count, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (k->batch > 1)
            return cublasGemmStridedBatchedEx(
                h, v.ta, v.tb, v.m, v.n, v.k, &alpha, B, cuda_type(k->dab), v.lda, bs->b, A,
                cuda_type(k->dab), v.ldb, bs->a, &beta, C, cuda_type(k->dc), v.ldc, bs->c, k->batch,
                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        return cublasGemmEx(h, v.ta, v.tb, v.m, v.n, v.k, &alpha, B, cuda_type(k->dab), v.lda, A,
                            cuda_type(k->dab), v.ldb, &beta, C, cuda_type(k->dc), v.ldc,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    }
    if (!p->fallback && k->epi != CUDA_GEMM_EPI_NONE) {
        cublasStatus_t st = cublasLtMatmulDescSetAttribute(
            p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
        if (st != CUBLAS_STATUS_SUCCESS) return st;
    }
    if (p->cur_m != k->M || p->cur_k != k->K ||
        (k->batch > 1 && (p->cur_sa != bs->a || p->cur_sb != bs->b || p->cur_sc != bs->c)) ||
        (k->batch < 0 && p->cur_count != bs->count)) {
        cublasStatus_t st = plan_resize(p, k, bs);
        if (st != CUBLAS_STATUS_SUCCESS) return st;
    }
    return cublasLtMatmul((cublasLtHandle_t)c->lt, p->desc, &alpha, B, p->la, A, p->lb, &beta, C,
                          p->lc, C, p->lc, &p->algo, c->workspace, CUDA_GEMM_WORKSPACE, s);
}

/* ---- public ---- */

int cuda_gemm_init(cuda_gemm_ctx *c) {
    memset(c, 0, sizeof *c);
    ZY_CUDA_TRY(cudaGetDevice(&c->device));
    cublasLtHandle_t lt;
    ZY_CUBLAS_TRY(cublasLtCreate(&lt));
    c->lt = lt;
    cublasHandle_t b;
    cublasStatus_t st = cublasCreate(&b);
    if (st != CUBLAS_STATUS_SUCCESS) {
        cuda_gemm_free(c);
        return zy_fail_runtime("%s:%d: cublasCreate failed: %s", __FILE__, __LINE__,
                               cublasGetStatusString(st));
    }
    c->blas = b;
    cudaError_t e = cudaMalloc(&c->workspace, CUDA_GEMM_WORKSPACE);
    if (e == cudaSuccess) e = cudaMalloc(&c->ptrs, 3 * CUDA_GEMM_MAX_EXPERTS * sizeof(void *));
    if (e != cudaSuccess) {
        cuda_gemm_free(c);
        return zy_fail_runtime("%s:%d: cudaMalloc of the GEMM workspace failed: %s", __FILE__,
                               __LINE__, cudaGetErrorString(e));
    }
    c->plans = (cuda_gemm_plan *)zy_calloc(CUDA_GEMM_CACHE_SIZE, sizeof(cuda_gemm_plan));
    return ZY_OK;
}

void cuda_gemm_free(cuda_gemm_ctx *c) {
    if (c->plans)
        for (int i = 0; i < c->nplans; i++) plan_release(&c->plans[i]);
    free(c->plans);
    if (c->workspace) cudaFree(c->workspace);
    if (c->ptrs) cudaFree(c->ptrs);
    if (c->blas) cublasDestroy((cublasHandle_t)c->blas);
    if (c->lt) cublasLtDestroy((cublasLtHandle_t)c->lt);
    memset(c, 0, sizeof *c);
}

/* The GEMM of cuda_gemm, batch times over matrices bs->a, bs->b, bs->c elements apart. */
static int gemm_batched(cuda_gemm_ctx *c, void *C, const void *A, const void *B, int M, int N,
                        int K, int transA, int transB, float alpha, float beta,
                        cuda_gemm_dtype dtype_ab, cuda_gemm_dtype dtype_c, cuda_gemm_epilogue epi,
                        void *bias, int batch, const batch_strides *bs, void *stream) {
    if (M < 0 || N < 0 || K < 0)
        return zy_fail("cuda_gemm: shape M=%d N=%d K=%d has a negative size", M, N, K);
    if ((dtype_ab != CUDA_GEMM_BF16 && dtype_ab != CUDA_GEMM_FP32) ||
        (dtype_c != CUDA_GEMM_BF16 && dtype_c != CUDA_GEMM_FP32))
        return zy_fail("cuda_gemm: unknown element type (%d, %d)", (int)dtype_ab, (int)dtype_c);
    if (dtype_ab == CUDA_GEMM_FP32 && dtype_c != CUDA_GEMM_FP32)
        return zy_fail("cuda_gemm: fp32 inputs need an fp32 output, found bf16");
    if (epi < CUDA_GEMM_EPI_NONE || epi > CUDA_GEMM_EPI_BGRAD)
        return zy_fail("cuda_gemm: unknown epilogue %d", (int)epi);
    if (epi != CUDA_GEMM_EPI_NONE && !bias)
        return zy_fail("cuda_gemm: epilogue %d needs a bias pointer, found NULL", (int)epi);
    if (epi == CUDA_GEMM_EPI_BGRAD && alpha != 1.0f)
        return zy_fail("cuda_gemm: the bias-gradient epilogue needs alpha = 1, found %g",
                       (double)alpha);
    if (batch == 0 || batch < -1 || (batch < 0 && bs->count < 1))
        return zy_fail("cuda_gemm: batch count %d (at least 1)", batch < 0 ? bs->count : batch);
    if (batch < 0 && K == 0) return zy_fail("cuda_gemm: a pointer-array batch needs K >= 1");
    if (batch != 1 && epi != CUDA_GEMM_EPI_NONE)
        return zy_fail("cuda_gemm: a batched GEMM takes no epilogue (found %d)", (int)epi);
    if (batch > 1 && (bs->a < 0 || bs->b < 0 || bs->c < (long long)M * N))
        return zy_fail("cuda_gemm: batch strides A %lld, B %lld, C %lld: negative, or C's "
                       "matrices [%d x %d] overlap",
                       bs->a, bs->b, bs->c, M, N);
    cudaStream_t s = (cudaStream_t)stream;
    plan_key k;
    memset(&k, 0, sizeof k);
    k.M = M, k.N = N, k.K = K, k.transA = !!transA, k.transB = !!transB;
    k.dab = dtype_ab, k.dc = dtype_c, k.epi = epi, k.beta_nz = beta != 0.0f;
    k.align_a = ptr_align(A), k.align_b = ptr_align(B), k.align_c = ptr_align(C);
    if (batch < 0) /* A, B, C are arrays of pointers: the caller measured their alignment */
        k.align_a = bs->align_a, k.align_b = bs->align_b, k.align_c = bs->align_c;
    k.align_bias = epi != CUDA_GEMM_EPI_NONE ? ptr_align(bias) : 0;
    k.div_m = pow2_divisor(M), k.div_k = pow2_divisor(K);
    k.batch = batch, k.div_s = 1;
    if (batch > 1) { /* the strides' alignment, like the leading dimensions' */
        long long g = bs->a | bs->b | bs->c;
        k.div_s = pow2_divisor((int)(g & 0xffff ? g & 0xffff : 16));
    }
    if (epi == CUDA_GEMM_EPI_BGRAD && M > 0 && N == 0) /* no GEMM, but the bias gradient */
        return epilogue_kernels(&k, C, A, bias, s);
    if (M == 0 || N == 0) return ZY_OK;
    if (K == 0) { /* cuBLASLt wants k >= 1: C = beta C, then the epilogue */
        if (beta != 1.0f)
            for (int i = 0; i < batch; i++) {
                void *Ci = (char *)C + (size_t)i * bs->c * elt_size(dtype_c);
                k_scale<<<grid_for((size_t)M * N), 256, 0, s>>>(Ci, (size_t)M * N, dtype_c, beta);
                ZY_CUDA_TRY_LAUNCH();
            }
        return epilogue_kernels(&k, C, A, bias, s);
    }
    plan_key kb = k; /* the cache key: M and K by bucket */
    kb.M = dim_bucket(M), kb.K = dim_bucket(K);
    /* an exact plan exists only where a bucket's algorithm was refused: look for one first */
    cuda_gemm_plan *p = c->nexact > 0 && memcmp(&kb, &k, sizeof k) != 0 ? plan_find(c, &k) : NULL;
    if (p) {
        c->hits++;
        kb = k;
    } else {
        ZY_TRY(plan_get(c, &kb, bias, bs, &p));
    }
    cublasStatus_t st = plan_run(c, p, &k, C, A, B, alpha, beta, bias, bs, s);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED && (kb.M != M || kb.K != K)) {
        kb = k; /* this size gets its own plan */
        ZY_TRY(plan_get(c, &kb, bias, bs, &p));
        c->nexact++; /* counts plans made, evicted ones too: the lookup stays correct */
        st = plan_run(c, p, &k, C, A, B, alpha, beta, bias, bs, s);
    }
    if (st == CUBLAS_STATUS_NOT_SUPPORTED && p->fallback == 0 && epi != CUDA_GEMM_EPI_NONE) {
        /* the fused epilogue was refused at launch: from now on the plain GEMM + our kernel */
        int found = 0;
        cublasStatus_t why;
        if (plan_fallback(c, p, &kb, bs, &found, &why) != ZY_OK) {
            plan_release(p);
            p->key.M = -1; /* matches no future key; evicted in turn */
            return ZY_ERR;
        }
        if (!found) p->fallback = 2;
        st = plan_run(c, p, &k, C, A, B, alpha, beta, bias, bs, s);
    }
    if (st != CUBLAS_STATUS_SUCCESS)
        return zy_fail_runtime("%s:%d: %s M=%d N=%d K=%d transA=%d transB=%d batch=%d failed: %s",
                               __FILE__, __LINE__,
                               p->fallback == 2 ? "cublasGemmEx" : "cublasLtMatmul", M, N, K,
                               transA, transB, batch, cublasGetStatusString(st));
    if (p->fallback) {
        c->fallbacks += p->fallback == 1;
        c->legacy += p->fallback == 2;
        ZY_TRY(epilogue_kernels(&k, C, A, bias, s));
    }
    return ZY_OK;
}

int cuda_gemm(cuda_gemm_ctx *c, void *C, const void *A, const void *B, int M, int N, int K,
              int transA, int transB, float alpha, float beta, cuda_gemm_dtype dtype_ab,
              cuda_gemm_dtype dtype_c, cuda_gemm_epilogue epi, void *bias, void *stream) {
    const batch_strides none = {0, 0, 0, 0, 0, 0, 0};
    return gemm_batched(c, C, A, B, M, N, K, transA, transB, alpha, beta, dtype_ab, dtype_c, epi,
                        bias, 1, &none, stream);
}

int cuda_gemm_strided(cuda_gemm_ctx *c, void *C, const void *A, const void *B, int M, int N, int K,
                      int transA, int transB, float alpha, float beta, cuda_gemm_dtype dtype_ab,
                      cuda_gemm_dtype dtype_c, int batch, long long stride_a, long long stride_b,
                      long long stride_c, void *stream) {
    const batch_strides bs = {stride_a, stride_b, stride_c, 0, 0, 0, 0};
    return gemm_batched(c, C, A, B, M, N, K, transA, transB, alpha, beta, dtype_ab, dtype_c,
                        CUDA_GEMM_EPI_NONE, NULL, batch, &bs, stream);
}

/* ---- grouped expert GEMMs ---- */

int cuda_gemm_uniform_cap(const int *offsets, int E) {
    if (E <= 0 || offsets[0] != 0) return -1;
    int cap = offsets[1];
    for (int e = 1; e <= E; e++)
        if (offsets[e] != e * cap) return -1;
    return cap;
}

typedef enum { GROUP_FWD, GROUP_BWD_DATA, GROUP_BWD_WEIGHT } group_kind;

/* The pointer arrays of one grouped call, passed by value to the kernel that stores them in device
 * memory (no host-to-device copy, so no synchronisation with the stream). */
typedef struct {
    const void *a[CUDA_GEMM_MAX_EXPERTS]; /* cuBLAS's A (our B) */
    const void *b[CUDA_GEMM_MAX_EXPERTS]; /* cuBLAS's B (our A) */
    void *c[CUDA_GEMM_MAX_EXPERTS];
    int n;
} group_ptrs;

__global__ static void k_store_ptrs(group_ptrs g, void **dst) {
    int i = threadIdx.x;
    if (i < g.n) {
        dst[i] = (void *)g.a[i];
        dst[CUDA_GEMM_MAX_EXPERTS + i] = (void *)g.b[i];
        dst[2 * CUDA_GEMM_MAX_EXPERTS + i] = g.c[i];
    }
}

int cuda_gemm_ptr_array(cuda_gemm_ctx *c, void *const *C, const void *const *A,
                        const void *const *B, int M, int N, int K, int transA, int transB,
                        float alpha, float beta, cuda_gemm_dtype dtype_ab, cuda_gemm_dtype dtype_c,
                        int batch, void *stream) {
    if (batch < 0) return zy_fail("cuda_gemm_ptr_array: batch count %d is negative", batch);
    cudaStream_t s = (cudaStream_t)stream;
    void **d = (void **)c->ptrs;
    /* CUDA_GEMM_MAX_EXPERTS products per call: the arrays' slots are reused in stream order */
    for (int i0 = 0; i0 < batch; i0 += CUDA_GEMM_MAX_EXPERTS) {
        const int n = batch - i0 < CUDA_GEMM_MAX_EXPERTS ? batch - i0 : CUDA_GEMM_MAX_EXPERTS;
        group_ptrs gp;
        memset(&gp, 0, sizeof gp);
        batch_strides bs = {0, 0, 0, n, 256, 256, 256};
        for (int i = 0; i < n; i++) {
            gp.a[i] = B[i0 + i], gp.b[i] = A[i0 + i], gp.c[i] = C[i0 + i];
            int aa = ptr_align(A[i0 + i]), ab = ptr_align(B[i0 + i]), ac = ptr_align(C[i0 + i]);
            bs.align_a = aa < bs.align_a ? aa : bs.align_a;
            bs.align_b = ab < bs.align_b ? ab : bs.align_b;
            bs.align_c = ac < bs.align_c ? ac : bs.align_c;
        }
        gp.n = n;
        k_store_ptrs<<<1, CUDA_GEMM_MAX_EXPERTS, 0, s>>>(gp, d);
        ZY_CUDA_TRY_LAUNCH();
        /* our A array lives in cuBLAS's B slot (d + MAX), our B in its A slot (d) */
        ZY_TRY(gemm_batched(c, d + 2 * CUDA_GEMM_MAX_EXPERTS, d + CUDA_GEMM_MAX_EXPERTS, d, M, N, K,
                            transA, transB, alpha, beta, dtype_ab, dtype_c, CUDA_GEMM_EPI_NONE,
                            NULL, -1, &bs, stream));
    }
    return ZY_OK;
}

/* Expert e's GEMM as (our) C[M,N] = op(A) op(B) + beta C. */
typedef struct {
    void *C;
    const void *A, *B;
    int M, N, K, transA, transB;
} expert_gemm;

static expert_gemm expert_problem(group_kind kind, int e, int row0, int rows, void *out,
                                  const void *in, const void *w, int N, int K, size_t eab,
                                  size_t ec) {
    expert_gemm g;
    const char *inb = (const char *)in, *wb = (const char *)w;
    char *ob = (char *)out;
    if (kind == GROUP_FWD) { /* Y[rows,N] = X[rows,K] W_e[N,K]^T */
        g.C = ob + (size_t)row0 * N * ec, g.A = inb + (size_t)row0 * K * eab;
        g.B = wb + (size_t)e * N * K * eab;
        g.M = rows, g.N = N, g.K = K, g.transA = 0, g.transB = 1;
    } else if (kind == GROUP_BWD_DATA) { /* dX[rows,K] = dY[rows,N] W_e[N,K] */
        g.C = ob + (size_t)row0 * K * ec, g.A = inb + (size_t)row0 * N * eab;
        g.B = wb + (size_t)e * N * K * eab;
        g.M = rows, g.N = K, g.K = N, g.transA = 0, g.transB = 0;
    } else { /* dW_e[N,K] = dY[rows,N]^T X[rows,K]; here in = dY, w = X */
        g.C = ob + (size_t)e * N * K * ec, g.A = inb + (size_t)row0 * N * eab;
        g.B = wb + (size_t)row0 * K * eab;
        g.M = N, g.N = K, g.K = rows, g.transA = 1, g.transB = 0;
    }
    return g;
}

/* Most chunks one pointer-array call of cuda_gemm_grouped_chunks takes (host arrays on the stack);
 * more go in further calls. */
#define CHUNKS_PER_CALL 512

int cuda_gemm_grouped_chunks(cuda_gemm_ctx *c, void *out, const void *in, const void *W,
                             const int *offsets, int E, int N, int K, int chunk, int data_grad,
                             cuda_gemm_dtype dtype_ab, cuda_gemm_dtype dtype_c, void *stream) {
    if (chunk < 1) return zy_fail("cuda_gemm_grouped_chunks: chunk of %d rows", chunk);
    const group_kind kind = data_grad ? GROUP_BWD_DATA : GROUP_FWD;
    const size_t eab = (size_t)elt_size(dtype_ab), ec = (size_t)elt_size(dtype_c);
    void *cs[CHUNKS_PER_CALL];
    const void *as[CHUNKS_PER_CALL], *bs[CHUNKS_PER_CALL];
    int n = 0, M = 0, Nn = 0, Kk = 0;
    for (int e = 0; e < E; e++) {
        const int full = (offsets[e + 1] - offsets[e]) / chunk;
        for (int j = 0; j < full; j++) {
            expert_gemm g =
                expert_problem(kind, e, offsets[e] + j * chunk, chunk, out, in, W, N, K, eab, ec);
            cs[n] = g.C, as[n] = g.A, bs[n] = g.B, M = g.M, Nn = g.N, Kk = g.K;
            if (++n == CHUNKS_PER_CALL) {
                ZY_TRY(cuda_gemm_ptr_array(c, cs, as, bs, M, Nn, Kk, 0, !data_grad, 1.0f, 0.0f,
                                           dtype_ab, dtype_c, n, stream));
                n = 0;
            }
        }
    }
    if (n > 0)
        ZY_TRY(cuda_gemm_ptr_array(c, cs, as, bs, M, Nn, Kk, 0, !data_grad, 1.0f, 0.0f, dtype_ab,
                                   dtype_c, n, stream));
    return ZY_OK;
}

static int grouped(cuda_gemm_ctx *c, group_kind kind, void *out, const void *in, const void *w,
                   const int *offsets, int E, int N, int K, float beta, cuda_gemm_dtype dab,
                   cuda_gemm_dtype dc, cuda_gemm_grouped_impl impl, void *stream) {
    if (E < 0 || E > CUDA_GEMM_MAX_EXPERTS || N < 0 || K < 0)
        return zy_fail("cuda_gemm_grouped: E=%d N=%d K=%d outside 0..%d experts / negative sizes",
                       E, N, K, CUDA_GEMM_MAX_EXPERTS);
    if (offsets[0] != 0)
        return zy_fail("cuda_gemm_grouped: offsets[0] = %d, expected 0", offsets[0]);
    for (int e = 0; e < E; e++)
        if (offsets[e + 1] < offsets[e])
            return zy_fail("cuda_gemm_grouped: offsets decrease at expert %d (%d -> %d)", e,
                           offsets[e], offsets[e + 1]);
    if (dab == CUDA_GEMM_FP32 && dc != CUDA_GEMM_FP32)
        return zy_fail("cuda_gemm_grouped: fp32 inputs need an fp32 output, found bf16");
    size_t eab = (size_t)elt_size(dab), ec = (size_t)elt_size(dc);
    /* chunks share one weight-gradient matrix per expert: that GEMM is per expert anyway */
    if (impl == CUDA_GEMM_GROUPED_CHUNKED && kind == GROUP_BWD_WEIGHT)
        impl = CUDA_GEMM_GROUPED_LOOP;
    if (impl == CUDA_GEMM_GROUPED_LOOP || impl == CUDA_GEMM_GROUPED_CHUNKED) {
        /* chunked: the full blocks in one call, then per expert only the rows after them */
        const int block = impl == CUDA_GEMM_GROUPED_CHUNKED ? CUDA_GEMM_CHUNK_ROWS : 0;
        if (block)
            ZY_TRY(cuda_gemm_grouped_chunks(c, out, in, w, offsets, E, N, K, block,
                                            kind == GROUP_BWD_DATA, dab, dc, stream));
        for (int e = 0; e < E; e++) {
            int rows = offsets[e + 1] - offsets[e];
            const int done = block ? rows / block * block : 0;
            rows -= done;
            if (rows == 0 && kind != GROUP_BWD_WEIGHT) continue;
            if (rows == 0 && beta == 1.0f) continue; /* dW_e += nothing */
            expert_gemm g =
                expert_problem(kind, e, offsets[e] + done, rows, out, in, w, N, K, eab, ec);
            ZY_TRY(cuda_gemm(c, g.C, g.A, g.B, g.M, g.N, g.K, g.transA, g.transB, 1.0f, beta, dab,
                             dc, CUDA_GEMM_EPI_NONE, NULL, stream));
        }
        return ZY_OK;
    }
    if (impl == CUDA_GEMM_GROUPED_PADDED) {
        int cap = cuda_gemm_uniform_cap(offsets, E);
        if (cap < 0)
            return zy_fail("cuda_gemm_grouped: the padded implementation needs offsets e * cap, "
                           "found offsets[1] = %d, offsets[%d] = %d",
                           E > 0 ? offsets[1] : 0, E, offsets[E]);
        if (E == 0 || cap == 0) {
            if (kind == GROUP_BWD_WEIGHT && beta != 1.0f && E > 0)
                ZY_TRY(cuda_gemm_strided(c, out, in, w, N, K, 0, 1, 0, 1.0f, beta, dab, dc, E, 0, 0,
                                         (long long)N * K, stream));
            return ZY_OK;
        }
        /* expert 0's problem; expert e's operands lie e strides further */
        expert_gemm g = expert_problem(kind, 0, 0, cap, out, in, w, N, K, eab, ec);
        long long wmat = (long long)N * K;
        long long sa, sb, sc;
        if (kind == GROUP_FWD) /* X rows, W, Y rows */
            sa = (long long)cap * K, sb = wmat, sc = (long long)cap * N;
        else if (kind == GROUP_BWD_DATA) /* dY rows, W, dX rows */
            sa = (long long)cap * N, sb = wmat, sc = (long long)cap * K;
        else /* dY rows, X rows, dW */
            sa = (long long)cap * N, sb = (long long)cap * K, sc = wmat;
        return cuda_gemm_strided(c, g.C, g.A, g.B, g.M, g.N, g.K, g.transA, g.transB, 1.0f, beta,
                                 dab, dc, E, sa, sb, sc, stream);
    }
    if (impl != CUDA_GEMM_GROUPED_CUBLAS)
        return zy_fail("cuda_gemm_grouped: unknown implementation %d", (int)impl);
    if (dab != dc)
        return zy_fail("cuda_gemm_grouped: cublasGemmGroupedBatchedEx path needs equal input and "
                       "output types (bf16 -> fp32 is the loop path's)");
    cudaStream_t s = (cudaStream_t)stream;
    group_ptrs gp;
    memset(&gp, 0, sizeof gp);
    cublasOperation_t ta[CUDA_GEMM_MAX_EXPERTS], tb[CUDA_GEMM_MAX_EXPERTS];
    int m[CUDA_GEMM_MAX_EXPERTS], n[CUDA_GEMM_MAX_EXPERTS], k[CUDA_GEMM_MAX_EXPERTS];
    int lda[CUDA_GEMM_MAX_EXPERTS], ldb[CUDA_GEMM_MAX_EXPERTS], ldc[CUDA_GEMM_MAX_EXPERTS];
    int gsize[CUDA_GEMM_MAX_EXPERTS];
    float al[CUDA_GEMM_MAX_EXPERTS], be[CUDA_GEMM_MAX_EXPERTS];
    for (int e = 0; e < E; e++) {
        int rows = offsets[e + 1] - offsets[e];
        expert_gemm g = expert_problem(kind, e, offsets[e], rows, out, in, w, N, K, eab, ec);
        if (rows == 0) {
            if (kind == GROUP_BWD_WEIGHT && beta != 1.0f)
                ZY_TRY(cuda_gemm(c, g.C, g.A, g.B, g.M, g.N, 0, 1, 0, 1.0f, beta, dab, dc,
                                 CUDA_GEMM_EPI_NONE, NULL, stream));
            continue;
        }
        if (g.M == 0 || g.N == 0) continue;
        colmajor v = to_colmajor(g.M, g.N, g.K, g.transA, g.transB);
        int i = gp.n++;
        gp.a[i] = g.B, gp.b[i] = g.A, gp.c[i] = g.C;
        ta[i] = v.ta, tb[i] = v.tb, m[i] = v.m, n[i] = v.n, k[i] = v.k;
        lda[i] = v.lda, ldb[i] = v.ldb, ldc[i] = v.ldc, gsize[i] = 1;
        al[i] = 1.0f, be[i] = beta;
    }
    if (gp.n == 0) return ZY_OK;
    void **d = (void **)c->ptrs;
    k_store_ptrs<<<1, CUDA_GEMM_MAX_EXPERTS, 0, s>>>(gp, d);
    ZY_CUDA_TRY_LAUNCH();
    cublasHandle_t h = (cublasHandle_t)c->blas;
    ZY_CUBLAS_TRY(cublasSetStream(h, s));
    cudaDataType_t t = cuda_type(dab);
    ZY_CUBLAS_TRY(cublasGemmGroupedBatchedEx(h, ta, tb, m, n, k, al, (const void *const *)d, t, lda,
                                      (const void *const *)(d + CUDA_GEMM_MAX_EXPERTS), t, ldb, be,
                                      d + 2 * CUDA_GEMM_MAX_EXPERTS, cuda_type(dc), ldc, gp.n,
                                      gsize, CUBLAS_COMPUTE_32F));
    return ZY_OK;
}

int cuda_gemm_grouped_fwd(cuda_gemm_ctx *c, void *Y, const void *X, const void *W,
                          const int *offsets, int E, int N, int K, cuda_gemm_dtype dtype_ab,
                          cuda_gemm_dtype dtype_c, cuda_gemm_grouped_impl impl, void *stream) {
    return grouped(c, GROUP_FWD, Y, X, W, offsets, E, N, K, 0.0f, dtype_ab, dtype_c, impl, stream);
}

int cuda_gemm_grouped_bwd_data(cuda_gemm_ctx *c, void *dX, const void *dY, const void *W,
                               const int *offsets, int E, int N, int K, cuda_gemm_dtype dtype_ab,
                               cuda_gemm_dtype dtype_c, cuda_gemm_grouped_impl impl, void *stream) {
    return grouped(c, GROUP_BWD_DATA, dX, dY, W, offsets, E, N, K, 0.0f, dtype_ab, dtype_c, impl,
                   stream);
}

int cuda_gemm_grouped_bwd_weight(cuda_gemm_ctx *c, void *dW, const void *dY, const void *X,
                                 const int *offsets, int E, int N, int K, float beta,
                                 cuda_gemm_dtype dtype_ab, cuda_gemm_dtype dtype_c,
                                 cuda_gemm_grouped_impl impl, void *stream) {
    if (beta != 0.0f && beta != 1.0f)
        return zy_fail("cuda_gemm_grouped_bwd_weight: beta must be 0 or 1, found %g", (double)beta);
    return grouped(c, GROUP_BWD_WEIGHT, dW, dY, X, offsets, E, N, K, beta, dtype_ab, dtype_c, impl,
                   stream);
}
