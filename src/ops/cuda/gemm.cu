/* GPU GEMMs through cuBLASLt (see gemm.h): the context, the plan cache, classic cuBLAS for the
 * layouts cuBLASLt has no algorithm for, the pointer-array batches and the expert GEMMs by blocks.
 * Our row-major C[M,N] is cuBLAS's column-major C^T [N,M] = op(B)^T op(A)^T, so cuBLAS's A is our
 * B and its B is our A, with m = N, n = M. */
#include "ops/cuda/gemm.h"
#include "ops/cuda/launch.h"
#include "base/check.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Everything the descriptors and the chosen algorithm depend on (compared with memcmp: ints only,
 * so no padding bytes). */
typedef struct {
    int M, N, K, transA, transB, dab, dc, beta_nz;
    int lda, ldb, ldc; /* the caller's row strides of A, B, C (0: packed for this key's sizes) */
    int align_a, align_b, align_c; /* bytes: largest power of two <= 256 (align_c: of C and D) */
    int div_m, div_k; /* largest power of two <= 16 dividing M, K (leading-dimension alignment) */
    int batch;        /* strided batch count (1: one GEMM; -1: pointer-array batch, any count) */
    int strided;      /* the layouts carry batch attributes (batch != 1, or strides given) */
    int div_s;        /* largest power of two <= 16 dividing every batch stride (1 when none) */
} plan_key;

/* Batch strides in elements of our A, B and C; for a pointer-array batch (key batch -1) the count
 * and the smallest alignment of each operand's pointers. */
typedef struct {
    long long a, b, c;
    int count, align_a, align_b, align_c;
} batch_strides;

struct cuda_gemm_plan {
    plan_key key;  /* M and K rounded up to their bucket (plan_for) unless exact */
    uint32_t hash; /* key_hash(&key): the lookup compares it before the whole key */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc; /* cuBLAS's A (our B), B (our A), C = D */
    int cur_m, cur_k;                  /* the actual M, K the layouts describe now */
    long long cur_sa, cur_sb, cur_sc;  /* and the batch strides (elements of our A, B, C) */
    int cur_count;                     /* and the pointer-array batch count */
    cublasLtMatmulAlgo_t algo;
    int classic; /* cuBLASLt has no algorithm for the key: classic cuBLAS runs it */
};

/* cuBLAS's column-major view of our row-major problem. */
typedef struct {
    cublasOperation_t ta, tb;
    int m, n, k;
    int arows, acols, lda, brows, bcols, ldb, ldc;
} colmajor;

static colmajor to_colmajor(const plan_key *k) {
    colmajor v;
    const int M = k->M, N = k->N, K = k->K;
    v.m = N, v.n = M, v.k = K;
    if (k->transB) /* B stored [N,K] row-major = K x N column-major, transposed */
        v.ta = CUBLAS_OP_T, v.arows = K, v.acols = N, v.lda = k->ldb ? k->ldb : K;
    else /* B stored [K,N] = N x K column-major */
        v.ta = CUBLAS_OP_N, v.arows = N, v.acols = K, v.lda = k->ldb ? k->ldb : N;
    if (k->transA) /* A stored [K,M] = M x K column-major, transposed */
        v.tb = CUBLAS_OP_T, v.brows = M, v.bcols = K, v.ldb = k->lda ? k->lda : M;
    else /* A stored [M,K] = K x M column-major */
        v.tb = CUBLAS_OP_N, v.brows = K, v.bcols = M, v.ldb = k->lda ? k->lda : K;
    v.ldc = k->ldc ? k->ldc : N;
    return v;
}

/* A packed plan is cached per bucket of M and K: the MoE expert GEMMs have a different row count
 * every step (M for the forward and data gradient, K for the weight gradient), and a cache keyed
 * on exact sizes would ask cuBLASLt's heuristic for every one of them. The algorithm picked for
 * the bucket's size runs the actual (smaller or equal) size; the layouts are re-sized in place
 * before each call (host-only attribute writes). Buckets: 64, then powers of two; the key keeps
 * the power-of-two divisors of M and K, which decide the leading dimensions' alignment. When the
 * bucket's algorithm refuses the actual size (cuBLASLt says so before launching), that size gets
 * an exact plan of its own, which later calls find first. A call with its own leading dimensions
 * (Newton-Schulz: fixed shapes with padded rows) is always planned exactly. */
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

/* ---- the K = 0 product ---- */

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

/* D[M,N] = beta * C (0 when beta == 0, whatever C held), rows ld elements apart. */
__global__ static void k_scale(void *D, const void *C, int M, int N, long long ld, int dc,
                               float beta) {
    zy_pdl_begin();
    const size_t n = (size_t)M * N;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t at = i / (size_t)N * (size_t)ld + i % (size_t)N;
        st_elt(D, at, dc, beta == 0.0f ? 0.0f : beta * ld_elt(C, at, dc));
    }
}

static int grid_for(size_t n) {
    size_t g = (n + 255) / 256;
    return (int)(g < 1 ? 1 : g > 4096 ? 4096 : g);
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

/* "id tile stages splitK reduction" of an algorithm, or "none". */
static void algo_desc(const cublasLtMatmulAlgo_t *a, char *buf, size_t n) {
    int32_t id = -1, splitk = 1;
    uint32_t tile = 0, stages = 0, scheme = 0;
    if (!a) {
        snprintf(buf, n, "none");
        return;
    }
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, NULL);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, NULL);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages,
                                         NULL);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk,
                                         NULL);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                                         sizeof scheme, NULL);
    snprintf(buf, n, "algo %d tile %u stages %u splitK %d reduction %u", (int)id, tile, stages,
             (int)splitk, scheme);
}

/* ZAYAC_GEMM_PLANS set: one line on stderr per plan made, its algorithm and what the heuristic
 * picks with every reduction scheme allowed (a diagnostic; the plan is not changed). */
static void log_plan(cuda_gemm_ctx *c, const cuda_gemm_plan *p, const plan_key *k,
                     cublasLtMatmulPreference_t pref, const cublasLtMatmulAlgo_t *chosen) {
    char a[128], b[128];
    algo_desc(chosen, a, sizeof a);
    const uint32_t all = CUBLASLT_REDUCTION_SCHEME_MASK;
    cublasLtMatmulHeuristicResult_t h;
    int n = 0;
    if (cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &all,
                                             sizeof all) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)c->lt, p->desc, p->la, p->lb, p->lc, p->lc,
                                       pref, 1, &h, &n) != CUBLAS_STATUS_SUCCESS)
        n = 0;
    algo_desc(n > 0 ? &h.algo : NULL, b, sizeof b);
    fprintf(stderr,
            "gemm plan M=%d N=%d K=%d tA=%d tB=%d ab=%s c=%s batch=%d lds=%d,%d,%d align=%d,%d,%d "
            "div=%d,%d,%d beta=%d (%d plans cached): %s (any reduction: %s)\n",
            k->M, k->N, k->K, k->transA, k->transB, k->dab == CUDA_GEMM_BF16 ? "bf16" : "f32",
            k->dc == CUDA_GEMM_BF16 ? "bf16" : "f32", k->batch, k->lda, k->ldb, k->ldc, k->align_a,
            k->align_b, k->align_c, k->div_m, k->div_k, k->div_s, k->beta_nz, c->nplans, a, b);
}

/* Descriptors for key k (batch strides bs when k->strided) and the heuristic's first algorithm;
 * *found = 0 when cuBLASLt has none. */
static int plan_build(cuda_gemm_ctx *c, cuda_gemm_plan *p, const plan_key *k,
                      const batch_strides *bs, int *found) {
    colmajor v = to_colmajor(k);
    cudaDataType_t tab = cuda_type(k->dab), tc = cuda_type(k->dc);
    *found = 0;
    ZY_CUBLAS_TRY(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    ZY_CUBLAS_TRY(
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &v.ta, sizeof v.ta));
    ZY_CUBLAS_TRY(
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &v.tb, sizeof v.tb));
    ZY_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p->la, tab, v.arows, v.acols, v.lda));
    ZY_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p->lb, tab, v.brows, v.bcols, v.ldb));
    ZY_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p->lc, tc, v.m, v.n, v.ldc));
    if (k->strided) {
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
    /* Split-K parts summed in the output type (in place in D, or a workspace of the output type)
     * are each rounded to it: with a bf16 D that breaks the op's contract of fp32 accumulation
     * and one rounding at the end (op case matmul(300,256,17) with transA and transB came out
     * 0.016 off a sum of 0.013 over 17 products of ~1, one bf16 rounding of a partial sum of
     * 4-8). A bf16 D allows only one-pass and fp32-workspace reductions. */
    const uint32_t red = k->dc == CUDA_GEMM_BF16 ? CUBLASLT_REDUCTION_SCHEME_NONE |
                                                       CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE
                                                 : CUBLASLT_REDUCTION_SCHEME_MASK;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                  &red, sizeof red);
    cublasLtMatmulHeuristicResult_t h;
    int n = 0;
    if (st == CUBLAS_STATUS_SUCCESS) {
        /* a refusal (no kernel for this case, whatever the status says) is an answer: found = 0 */
        if (cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)c->lt, p->desc, p->la, p->lb, p->lc,
                                           p->lc, pref, 1, &h, &n) != CUBLAS_STATUS_SUCCESS)
            n = 0;
    }
    if (st == CUBLAS_STATUS_SUCCESS && getenv("ZAYAC_GEMM_PLANS"))
        log_plan(c, p, k, pref, n > 0 ? &h.algo : NULL);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS)
        return zy_fail_runtime("%s:%d: cuBLASLt preference failed: %s", __FILE__, __LINE__,
                               cublasGetStatusString(st));
    if (n > 0) p->algo = h.algo, *found = 1;
    p->cur_m = k->M, p->cur_k = k->K;
    p->cur_sa = bs->a, p->cur_sb = bs->b, p->cur_sc = bs->c, p->cur_count = bs->count;
    return ZY_OK;
}

/* FNV-1a over the key's bytes (keys are zeroed before they are filled: no stray padding). */
static uint32_t key_hash(const plan_key *k) {
    const unsigned char *b = (const unsigned char *)k;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < sizeof *k; i++) h = (h ^ b[i]) * 16777619u;
    return h;
}

/* Every GEMM call looks its plan up, so the scan compares one word per entry. */
static cuda_gemm_plan *plan_find(cuda_gemm_ctx *c, const plan_key *k) {
    const uint32_t h = key_hash(k);
    for (int i = 0; i < c->nplans; i++)
        if (c->plans[i].hash == h && memcmp(&c->plans[i].key, k, sizeof *k) == 0)
            return &c->plans[i];
    return NULL;
}

/* The cached plan for k, building it on a miss (the oldest entry is evicted when full). */
static int plan_get(cuda_gemm_ctx *c, const plan_key *k, const batch_strides *bs,
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
    int found = 0;
    if (plan_build(c, p, k, bs, &found) != ZY_OK) {
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
    p->classic = !found; /* the classic cuBLAS API takes any layout */
    p->key = *k;
    p->hash = key_hash(k);
    *out = p;
    return ZY_OK;
}

/* The plan for k (actual sizes): by bucket of M and K for packed layouts, else exact; an exact
 * plan made earlier for this size wins. *kb gets the key the plan was made for. */
static int plan_for(cuda_gemm_ctx *c, const plan_key *k, const batch_strides *bs, plan_key *kb,
                    cuda_gemm_plan **p) {
    *kb = *k;
    if (!k->lda && !k->ldb && !k->ldc) kb->M = dim_bucket(k->M), kb->K = dim_bucket(k->K);
    *p = c->nexact > 0 && memcmp(kb, k, sizeof *k) != 0 ? plan_find(c, k) : NULL;
    if (*p) {
        c->hits++;
        *kb = *k;
        return ZY_OK;
    }
    return plan_get(c, kb, bs, p);
}

/* Points p's layouts at the actual sizes of k (same N, transposes and types as the plan). */
static cublasStatus_t plan_resize(cuda_gemm_plan *p, const plan_key *k, const batch_strides *bs) {
    colmajor v = to_colmajor(k);
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
    if (k->strided) {
        cublasStatus_t st = set_batch(p, k->batch, bs);
        if (st != CUBLAS_STATUS_SUCCESS) return st;
    }
    p->cur_m = k->M, p->cur_k = k->K;
    p->cur_sa = bs->a, p->cur_sb = bs->b, p->cur_sc = bs->c, p->cur_count = bs->count;
    return CUBLAS_STATUS_SUCCESS;
}

/* D = alpha op(A) op(B) + beta D through the classic cuBLAS API, which has no D apart from C (the
 * caller has copied C into D). */
static cublasStatus_t run_classic(cuda_gemm_ctx *c, const plan_key *k, void *D, const void *A,
                                  const void *B, float alpha, float beta, const batch_strides *bs,
                                  cudaStream_t s) {
    colmajor v = to_colmajor(k);
    cublasHandle_t h = (cublasHandle_t)c->blas;
    cublasStatus_t st = cublasSetStream(h, s);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    const cudaDataType_t tab = cuda_type(k->dab), tc = cuda_type(k->dc);
    if (k->batch < 0)
        return cublasGemmBatchedEx(h, v.ta, v.tb, v.m, v.n, v.k, &alpha, (const void *const *)B,
                                   tab, v.lda, (const void *const *)A, tab, v.ldb, &beta,
                                   (void *const *)D, tc, v.ldc, bs->count, CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT);
    if (k->strided)
        return cublasGemmStridedBatchedEx(h, v.ta, v.tb, v.m, v.n, v.k, &alpha, B, tab, v.lda,
                                          bs->b, A, tab, v.ldb, bs->a, &beta, D, tc, v.ldc, bs->c,
                                          k->batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return cublasGemmEx(h, v.ta, v.tb, v.m, v.n, v.k, &alpha, B, tab, v.lda, A, tab, v.ldb, &beta,
                        D, tc, v.ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

/* D = alpha op(A) op(B) + beta C by plan p: cuBLASLt, or classic cuBLAS where it has no
 * algorithm. */
static cublasStatus_t plan_run(cuda_gemm_ctx *c, cuda_gemm_plan *p, const plan_key *k, void *D,
                               const void *C, const void *A, const void *B, float alpha, float beta,
                               const batch_strides *bs, cudaStream_t s) {
    if (p->classic) return run_classic(c, k, D, A, B, alpha, beta, bs, s);
    if (p->cur_m != k->M || p->cur_k != k->K ||
        (k->batch >= 1 && k->strided &&
         (p->cur_sa != bs->a || p->cur_sb != bs->b || p->cur_sc != bs->c)) ||
        (k->batch < 0 && p->cur_count != bs->count)) {
        cublasStatus_t st = plan_resize(p, k, bs);
        if (st != CUBLAS_STATUS_SUCCESS) return st;
    }
    return cublasLtMatmul((cublasLtHandle_t)c->lt, p->desc, &alpha, B, p->la, A, p->lb, &beta, C,
                          p->lc, D, p->lc, &p->algo, c->workspace, CUDA_GEMM_WORKSPACE, s);
}

/* ---- the GEMM of a description ---- */

/* Bad arguments of g run `batch` times (-1: a pointer-array batch of bs->count); ZY_OK if none. */
static int check_desc(const cuda_gemm_desc *g, int batch, const batch_strides *bs) {
    const int M = g->M, N = g->N, K = g->K;
    if (M < 0 || N < 0 || K < 0)
        return zy_fail("cuda_gemm: shape M=%d N=%d K=%d has a negative size", M, N, K);
    if ((g->dtype_ab != CUDA_GEMM_BF16 && g->dtype_ab != CUDA_GEMM_FP32) ||
        (g->dtype_c != CUDA_GEMM_BF16 && g->dtype_c != CUDA_GEMM_FP32))
        return zy_fail("cuda_gemm: unknown element type (%d, %d)", (int)g->dtype_ab,
                       (int)g->dtype_c);
    if (g->dtype_ab == CUDA_GEMM_FP32 && g->dtype_c != CUDA_GEMM_FP32)
        return zy_fail("cuda_gemm: fp32 inputs need an fp32 output, found bf16");
    if (batch == 0 || batch < -1 || (batch < 0 && bs->count < 1))
        return zy_fail("cuda_gemm: batch count %d (at least 1)", batch < 0 ? bs->count : batch);
    if (batch < 0 && K == 0) return zy_fail("cuda_gemm: a pointer-array batch needs K >= 1");
    const long long wa = g->transA ? M : K, wb = g->transB ? K : N;
    const long long lds[3] = {g->lda, g->ldb, g->ldc}, widths[3] = {wa, wb, N};
    for (int i = 0; i < 3; i++)
        if (lds[i] < 0 || lds[i] > INT_MAX || (lds[i] > 0 && lds[i] < widths[i]))
            return zy_fail("cuda_gemm: leading dimension of %c is %lld: below its row width %lld, "
                           "negative or past 2^31",
                           "ABC"[i], lds[i], widths[i]);
    const long long ldc = g->ldc ? g->ldc : N;
    if (batch >= 1 && (bs->a < 0 || bs->b < 0 || bs->c < 0 ||
                       (batch > 1 && M > 0 && bs->c < (long long)(M - 1) * ldc + N)))
        return zy_fail("cuda_gemm: batch strides A %lld, B %lld, C %lld: negative, or C's "
                       "matrices [%d x %d] overlap",
                       bs->a, bs->b, bs->c, M, N);
    return ZY_OK;
}

/* The key of g on its actual sizes and these pointers (arguments checked). */
static plan_key key_of(const cuda_gemm_desc *g, int batch, const batch_strides *bs, const void *D,
                       const void *C, const void *A, const void *B) {
    plan_key k;
    memset(&k, 0, sizeof k);
    k.M = g->M, k.N = g->N, k.K = g->K, k.transA = !!g->transA, k.transB = !!g->transB;
    k.dab = g->dtype_ab, k.dc = g->dtype_c, k.beta_nz = g->beta != 0.0f;
    k.lda = (int)g->lda, k.ldb = (int)g->ldb, k.ldc = (int)g->ldc;
    const int ac = ptr_align(C), ad = ptr_align(D);
    k.align_a = ptr_align(A), k.align_b = ptr_align(B), k.align_c = ac < ad ? ac : ad;
    if (batch < 0) /* A, B, C are arrays of pointers: the caller measured their alignment */
        k.align_a = bs->align_a, k.align_b = bs->align_b, k.align_c = bs->align_c;
    /* M's and K's divisors only where they are a packed operand's leading dimension (M: A stored
     * [K, M]; K: A stored [M, K] or B stored [N, K]). Elsewhere they would split one bucket's plan
     * into five: the expert weight gradients' K is the expert's row count, a new one every step,
     * and those five-fold keys overflowed the cache (a plan rebuilt ~26 times a bench-small step).
     */
    k.div_m = k.transA ? pow2_divisor(g->M) : 1;
    k.div_k = k.transB || !k.transA ? pow2_divisor(g->K) : 1;
    k.batch = batch, k.div_s = 1;
    k.strided = batch != 1 || bs->a != 0 || bs->b != 0 || bs->c != 0;
    if (batch >= 1 && k.strided) { /* the strides' alignment, like the leading dimensions' */
        long long s = bs->a | bs->b | bs->c;
        k.div_s = pow2_divisor((int)(s & 0xffff ? s & 0xffff : 16));
    }
    return k;
}

/* D = C over the extent of k's C matrices (batch of them), for classic cuBLAS. */
static int copy_c(void *D, const void *C, const plan_key *k, int batch, const batch_strides *bs,
                  cudaStream_t s) {
    const long long ldc = k->ldc ? k->ldc : k->N;
    const long long n = (long long)(batch - 1) * bs->c + (long long)(k->M - 1) * ldc + k->N;
    ZY_CUDA_TRY(cudaMemcpyAsync(D, C, (size_t)n * elt_size(k->dc), cudaMemcpyDeviceToDevice, s));
    return ZY_OK;
}

/* The GEMM of g, `batch` times over matrices bs->a, bs->b, bs->c elements apart (batch -1: A, B,
 * C = D are device arrays of bs->count pointers). */
static int gemm_any(cuda_gemm_ctx *c, const cuda_gemm_desc *g, int batch, const batch_strides *bs,
                    void *D, const void *C, const void *A, const void *B, void *stream) {
    ZY_TRY(check_desc(g, batch, bs));
    const cudaStream_t s = (cudaStream_t)stream;
    const int M = g->M, N = g->N, K = g->K;
    const float alpha = g->alpha, beta = g->beta;
    const plan_key k = key_of(g, batch, bs, D, C, A, B);
    const int copy = D != C && beta != 0.0f; /* classic cuBLAS reads C from D */
    if (M == 0 || N == 0) return ZY_OK;
    if (K == 0) { /* cuBLASLt wants k >= 1: D = beta C */
        if (beta == 1.0f && D == C) return ZY_OK;
        const size_t ec = (size_t)elt_size(g->dtype_c);
        for (int i = 0; i < batch; i++) {
            zy_launch(k_scale, grid_for((size_t)M * N), 256, 0, s,
                      (char *)D + (size_t)i * bs->c * ec, (const char *)C + (size_t)i * bs->c * ec,
                      M, N, g->ldc ? g->ldc : N, g->dtype_c, beta);
            ZY_CUDA_TRY_LAUNCH();
        }
        return ZY_OK;
    }
    cublasStatus_t st;
    cuda_gemm_plan *p = NULL;
    if (g->classic) {
        if (copy) ZY_TRY(copy_c(D, C, &k, batch, bs, s));
        st = run_classic(c, &k, D, A, B, alpha, beta, bs, s);
    } else {
        plan_key kb;
        ZY_TRY(plan_for(c, &k, bs, &kb, &p));
        if (p->classic && copy) ZY_TRY(copy_c(D, C, &k, batch, bs, s));
        st = plan_run(c, p, &k, D, C, A, B, alpha, beta, bs, s);
        if (st == CUBLAS_STATUS_NOT_SUPPORTED && (kb.M != M || kb.K != K)) {
            kb = k; /* this size gets its own plan */
            ZY_TRY(plan_get(c, &kb, bs, &p));
            c->nexact++; /* counts plans made, evicted ones too: the lookup stays correct */
            if (p->classic && copy) ZY_TRY(copy_c(D, C, &k, batch, bs, s));
            st = plan_run(c, p, &k, D, C, A, B, alpha, beta, bs, s);
        }
    }
    if (st != CUBLAS_STATUS_SUCCESS)
        return zy_fail_runtime("%s:%d: %s M=%d N=%d K=%d transA=%d transB=%d batch=%d failed: %s",
                               __FILE__, __LINE__,
                               g->classic || p->classic ? "classic cuBLAS" : "cublasLtMatmul", M, N,
                               K, g->transA, g->transB, batch, cublasGetStatusString(st));
    if (p) c->legacy += p->classic;
    return ZY_OK;
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

/* A one-product description of packed operands. */
static cuda_gemm_desc packed_desc(int M, int N, int K, int transA, int transB, float alpha,
                                  float beta, cuda_gemm_dtype dtype_ab, cuda_gemm_dtype dtype_c) {
    cuda_gemm_desc g;
    memset(&g, 0, sizeof g);
    g.M = M, g.N = N, g.K = K, g.transA = transA, g.transB = transB;
    g.alpha = alpha, g.beta = beta, g.dtype_ab = dtype_ab, g.dtype_c = dtype_c;
    g.batch = 1;
    return g;
}

int cuda_gemm(cuda_gemm_ctx *c, void *C, const void *A, const void *B, int M, int N, int K,
              int transA, int transB, float alpha, float beta, cuda_gemm_dtype dtype_ab,
              cuda_gemm_dtype dtype_c, void *stream) {
    const batch_strides none = {0, 0, 0, 0, 0, 0, 0};
    const cuda_gemm_desc g = packed_desc(M, N, K, transA, transB, alpha, beta, dtype_ab, dtype_c);
    return gemm_any(c, &g, 1, &none, C, C, A, B, stream);
}

int cuda_gemm_run(cuda_gemm_ctx *c, const cuda_gemm_desc *g, void *D, const void *C, const void *A,
                  const void *B, void *stream) {
    if (g->batch < 1) return zy_fail("cuda_gemm_run: batch count %d (at least 1)", g->batch);
    const batch_strides bs = {g->stride_a, g->stride_b, g->stride_c, 0, 0, 0, 0};
    return gemm_any(c, g, g->batch, &bs, D, C, A, B, stream);
}

int cuda_gemm_prepare(cuda_gemm_ctx *c, const cuda_gemm_desc *g, const void *D, const void *C,
                      const void *A, const void *B, int *lt) {
    if (g->batch < 1) return zy_fail("cuda_gemm_prepare: batch count %d (at least 1)", g->batch);
    const batch_strides bs = {g->stride_a, g->stride_b, g->stride_c, 0, 0, 0, 0};
    ZY_TRY(check_desc(g, g->batch, &bs));
    *lt = !g->classic;
    if (g->classic || g->M == 0 || g->N == 0 || g->K == 0) return ZY_OK; /* no plan runs it */
    const plan_key k = key_of(g, g->batch, &bs, D, C, A, B);
    plan_key kb;
    cuda_gemm_plan *p;
    ZY_TRY(plan_for(c, &k, &bs, &kb, &p));
    *lt = !p->classic;
    return ZY_OK;
}

/* ---- pointer arrays and the expert GEMMs by blocks ---- */

/* The pointer arrays of one batched call, passed by value to the kernel that stores them in device
 * memory (no host-to-device copy, so no synchronisation with the stream). */
typedef struct {
    const void *a[CUDA_GEMM_MAX_EXPERTS]; /* cuBLAS's A (our B) */
    const void *b[CUDA_GEMM_MAX_EXPERTS]; /* cuBLAS's B (our A) */
    void *c[CUDA_GEMM_MAX_EXPERTS];
    int n;
} group_ptrs;

__global__ static void k_store_ptrs(group_ptrs g, void **dst) {
    zy_pdl_begin();
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
    const cuda_gemm_desc g = packed_desc(M, N, K, transA, transB, alpha, beta, dtype_ab, dtype_c);
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
        zy_launch(k_store_ptrs, 1, CUDA_GEMM_MAX_EXPERTS, 0, s, gp, d);
        ZY_CUDA_TRY_LAUNCH();
        /* our A array lives in cuBLAS's B slot (d + MAX), our B in its A slot (d) */
        void *dc = d + 2 * CUDA_GEMM_MAX_EXPERTS;
        ZY_TRY(gemm_any(c, &g, -1, &bs, dc, dc, d + CUDA_GEMM_MAX_EXPERTS, d, stream));
    }
    return ZY_OK;
}

cuda_gemm_expert cuda_gemm_expert_problem(cuda_gemm_expert_kind kind, int e, int row0, int rows,
                                          void *out, const void *in, const void *w, int N, int K,
                                          cuda_gemm_dtype dtype_ab, cuda_gemm_dtype dtype_c) {
    const size_t eab = (size_t)elt_size(dtype_ab), ec = (size_t)elt_size(dtype_c);
    cuda_gemm_expert g;
    const char *inb = (const char *)in, *wb = (const char *)w;
    char *ob = (char *)out;
    if (kind == CUDA_GEMM_EXPERT_FWD) { /* Y[rows,N] = X[rows,K] W_e[N,K]^T */
        g.C = ob + (size_t)row0 * N * ec, g.A = inb + (size_t)row0 * K * eab;
        g.B = wb + (size_t)e * N * K * eab;
        g.M = rows, g.N = N, g.K = K, g.transA = 0, g.transB = 1;
    } else if (kind == CUDA_GEMM_EXPERT_BWD_DATA) { /* dX[rows,K] = dY[rows,N] W_e[N,K] */
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
    const cuda_gemm_expert_kind kind = data_grad ? CUDA_GEMM_EXPERT_BWD_DATA : CUDA_GEMM_EXPERT_FWD;
    void *cs[CHUNKS_PER_CALL];
    const void *as[CHUNKS_PER_CALL], *bs[CHUNKS_PER_CALL];
    int n = 0, M = 0, Nn = 0, Kk = 0;
    for (int e = 0; e < E; e++) {
        const int full = (offsets[e + 1] - offsets[e]) / chunk;
        for (int j = 0; j < full; j++) {
            cuda_gemm_expert g = cuda_gemm_expert_problem(kind, e, offsets[e] + j * chunk, chunk,
                                                          out, in, W, N, K, dtype_ab, dtype_c);
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
