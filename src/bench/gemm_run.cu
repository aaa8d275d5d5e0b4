/* GEMM benchmark, GPU side: cuBLASLt matmuls on random non-zero inputs, timed with events (see
 * gemm.h). Inputs live in one pool filled once per element type with random non-zero values and
 * outputs in another, so no GEMM ever reads an earlier GEMM's output (values that would grow to
 * inf/NaN); when a shape's operands are small enough to stay in L2, successive runs rotate
 * through copies spread over several times the
 * L2 size, so the rate is that of data coming from HBM as in a real step.
 * It calls cuBLASLt directly, not through ops/cuda/gemm.h, on purpose: it measures the library
 * itself (every candidate algorithm the heuristic offers for a shape, its tile and split-K, TF32
 * compute), where gemm.h runs one cached algorithm per shape for training. Serving it through
 * gemm.h would widen the training module with benchmark-only entry points (candidates for a
 * shape, run candidate i, describe it) for no shared code; a port measures the new library here
 * as it is. */
#include "bench/gemm.h"
#include "base/check.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ALIGN_UP(x) (((x) + 255) & ~(size_t)255)

/* Uniform in +-[0.5, 1): never zero (zeros run faster than real data and hide indexing bugs). */
__global__ void gemm_fill(void *p, int bf16, size_t n, uint64_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
        x ^= x >> 31;
        x *= 0xbf58476d1ce4e5b9ull;
        x ^= x >> 29;
        float u = (float)((x >> 40) & 0xffffff) / 16777216.0f;
        float v = (0.5f + 0.5f * u) * ((x >> 20) & 1 ? -1.0f : 1.0f);
        if (bf16)
            ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
        else
            ((float *)p)[i] = v;
    }
}

/* cuBLASLt's tile enum as rows x columns of its (column-major) output; 0 when not in this list. */
static void tile_dims(int id, int *rows, int *cols) {
    int r = 0, c = 0;
    switch (id) {
    case CUBLASLT_MATMUL_TILE_64x64:
        r = 64, c = 64;
        break;
    case CUBLASLT_MATMUL_TILE_64x128:
        r = 64, c = 128;
        break;
    case CUBLASLT_MATMUL_TILE_128x64:
        r = 128, c = 64;
        break;
    case CUBLASLT_MATMUL_TILE_64x256:
        r = 64, c = 256;
        break;
    case CUBLASLT_MATMUL_TILE_128x128:
        r = 128, c = 128;
        break;
    case CUBLASLT_MATMUL_TILE_256x64:
        r = 256, c = 64;
        break;
    case CUBLASLT_MATMUL_TILE_64x512:
        r = 64, c = 512;
        break;
    case CUBLASLT_MATMUL_TILE_128x256:
        r = 128, c = 256;
        break;
    case CUBLASLT_MATMUL_TILE_256x128:
        r = 256, c = 128;
        break;
    case CUBLASLT_MATMUL_TILE_512x64:
        r = 512, c = 64;
        break;
    case CUBLASLT_MATMUL_TILE_64x96:
        r = 64, c = 96;
        break;
    case CUBLASLT_MATMUL_TILE_96x64:
        r = 96, c = 64;
        break;
    case CUBLASLT_MATMUL_TILE_96x128:
        r = 96, c = 128;
        break;
    case CUBLASLT_MATMUL_TILE_128x160:
        r = 128, c = 160;
        break;
    case CUBLASLT_MATMUL_TILE_160x128:
        r = 160, c = 128;
        break;
    case CUBLASLT_MATMUL_TILE_192x128:
        r = 192, c = 128;
        break;
    case CUBLASLT_MATMUL_TILE_128x192:
        r = 128, c = 192;
        break;
    case CUBLASLT_MATMUL_TILE_128x96:
        r = 128, c = 96;
        break;
    case CUBLASLT_MATMUL_TILE_64x192:
        r = 64, c = 192;
        break;
    case CUBLASLT_MATMUL_TILE_192x192:
        r = 192, c = 192;
        break;
    case CUBLASLT_MATMUL_TILE_192x256:
        r = 192, c = 256;
        break;
    case CUBLASLT_MATMUL_TILE_256x192:
        r = 256, c = 192;
        break;
    case CUBLASLT_MATMUL_TILE_256x256:
        r = 256, c = 256;
        break;
    case CUBLASLT_MATMUL_TILE_128x384:
        r = 128, c = 384;
        break;
    case CUBLASLT_MATMUL_TILE_128x512:
        r = 128, c = 512;
        break;
    case CUBLASLT_MATMUL_TILE_512x128:
        r = 512, c = 128;
        break;
    case CUBLASLT_MATMUL_TILE_256x512:
        r = 256, c = 512;
        break;
    case CUBLASLT_MATMUL_TILE_512x512:
        r = 512, c = 512;
        break;
    default:
        break;
    }
    *rows = r, *cols = c;
}

typedef struct {
    cublasLtHandle_t lt;
    cudaStream_t stream;
    cudaEvent_t e0, e1;
    void *ws;
    size_t ws_bytes;
    char *pool; /* inputs: [copies] x (W, X) */
    size_t pool_bytes;
    char *out; /* outputs: [copies] x Y */
    size_t out_bytes;
    char *scratch; /* [max K * 4] bytes for the check's gathered rows */
    size_t scratch_bytes;
    size_t l2;
    int sms;
} gemm_ctx;

/* One shape's cuBLASLt objects. Our row-major Y[M,N] is cuBLAS's column-major Y^T[N,M], so
 * cuBLAS computes Y^T = op(W) op(X) with m = N, n = M. */
typedef struct {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    size_t bytes_x, bytes_w, bytes_y;
} gemm_op;

static void op_free(gemm_op *g) {
    if (g->desc) cublasLtMatmulDescDestroy(g->desc);
    if (g->la) cublasLtMatrixLayoutDestroy(g->la);
    if (g->lb) cublasLtMatrixLayoutDestroy(g->lb);
    if (g->lc) cublasLtMatrixLayoutDestroy(g->lc);
    memset(g, 0, sizeof *g);
}

static int op_init(gemm_op *g, const bench_gemm_shape *s, bench_dtype t) {
    memset(g, 0, sizeof *g);
    cudaDataType_t dt = t == BENCH_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasComputeType_t ct = t == BENCH_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    size_t elt = bench_dtype_size(t);
    ZY_CUBLAS_TRY(cublasLtMatmulDescCreate(&g->desc, ct, CUDA_R_32F));
    cublasOperation_t ta, tb;
    uint64_t arows, acols, lda, brows, bcols, ldb;
    /* A = W, B = X in cuBLAS's column-major view of the row-major buffers. */
    switch (s->layout) {
    case GEMM_XWT: /* W [N,K] row-major = KxN col-major; X [M,K] = KxM */
        ta = CUBLAS_OP_T, arows = s->k, acols = s->n, lda = s->k;
        tb = CUBLAS_OP_N, brows = s->k, bcols = s->m, ldb = s->k;
        break;
    case GEMM_XW: /* W [K,N] = NxK col-major; X [M,K] = KxM */
        ta = CUBLAS_OP_N, arows = s->n, acols = s->k, lda = s->n;
        tb = CUBLAS_OP_N, brows = s->k, bcols = s->m, ldb = s->k;
        break;
    default: /* XTW: W [K,N] = NxK; X [K,M] = MxK col-major, transposed */
        ta = CUBLAS_OP_N, arows = s->n, acols = s->k, lda = s->n;
        tb = CUBLAS_OP_T, brows = s->m, bcols = s->k, ldb = s->m;
        break;
    }
    ZY_CUBLAS_TRY(
        cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    ZY_CUBLAS_TRY(
        cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    ZY_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&g->la, dt, arows, acols, (int64_t)lda));
    ZY_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&g->lb, dt, brows, bcols, (int64_t)ldb));
    ZY_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&g->lc, dt, s->n, s->m, s->n));
    g->bytes_w = ALIGN_UP((size_t)s->n * s->k * elt);
    g->bytes_x = ALIGN_UP((size_t)s->m * s->k * elt);
    g->bytes_y = ALIGN_UP((size_t)s->m * s->n * elt);
    return ZY_OK;
}

/* How many operand sets to rotate through: enough to span 4x L2 when one set would stay there. */
static size_t rotation_copies(const gemm_ctx *c, size_t set_bytes) {
    if (set_bytes >= 2 * c->l2) return 1;
    size_t n = (4 * c->l2 + set_bytes - 1) / set_bytes;
    return n < 2 ? 2 : n;
}

static int run_matmul(gemm_ctx *c, gemm_op *g, const cublasLtMatmulAlgo_t *algo, size_t copy) {
    float alpha = 1.0f, beta = 0.0f;
    char *base = c->pool + copy * (g->bytes_w + g->bytes_x);
    void *w = base, *x = base + g->bytes_w, *y = c->out + copy * g->bytes_y;
    ZY_CUBLAS_TRY(cublasLtMatmul(c->lt, g->desc, &alpha, w, g->la, x, g->lb, &beta, y, g->lc, y,
                                 g->lc, algo, c->ws, c->ws_bytes, c->stream));
    return ZY_OK;
}

/* Mean seconds per matmul over iters runs, rotating copies. */
static int time_matmul(gemm_ctx *c, gemm_op *g, const cublasLtMatmulAlgo_t *algo, size_t copies,
                       int iters, double *sec) {
    ZY_CUDA_TRY(cudaEventRecord(c->e0, c->stream));
    for (int i = 0; i < iters; i++) ZY_TRY(run_matmul(c, g, algo, (size_t)i % copies));
    ZY_CUDA_TRY(cudaEventRecord(c->e1, c->stream));
    ZY_CUDA_TRY(cudaEventSynchronize(c->e1));
    float ms;
    ZY_CUDA_TRY(cudaEventElapsedTime(&ms, c->e0, c->e1));
    *sec = ms / 1e3 / iters;
    return ZY_OK;
}

static double host_elt(const void *p, int bf16, size_t i) {
    if (!bf16) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    uint32_t b = (uint32_t)h << 16;
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

/* dst[i] = src[off + i * stride] for i < n (elements of elt bytes): a row or a column. */
__global__ void gemm_gather(const char *src, size_t off, size_t stride, size_t n, int elt,
                            char *dst) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        if (elt == 2)
            ((uint16_t *)dst)[i] = ((const uint16_t *)src)[off + i * stride];
        else
            ((uint32_t *)dst)[i] = ((const uint32_t *)src)[off + i * stride];
    }
}

/* Gathers n elements at stride (elements) from device p + off into host dst, through scratch. */
static int gather(gemm_ctx *c, void *dst, const char *p, size_t off, size_t stride, size_t n,
                  size_t elt) {
    gemm_gather<<<c->sms * 4, 256, 0, c->stream>>>(p, off, stride, n, (int)elt, c->scratch);
    ZY_CUDA_TRY_LAUNCH();
    ZY_CUDA_TRY(cudaMemcpyAsync(dst, c->scratch, n * elt, cudaMemcpyDeviceToHost, c->stream));
    ZY_CUDA_TRY(cudaStreamSynchronize(c->stream));
    return ZY_OK;
}

/* Compares sampled outputs of copy 0 with float64 sums of the same (rounded) inputs; the bound is
 * tol * sum |x_k w_k| for the type's input and output rounding plus fp32 accumulation. */
static int check_samples(gemm_ctx *c, gemm_op *g, const bench_gemm_shape *s, bench_dtype t,
                         int *bad, double *worst) {
    int bf16 = t == BENCH_BF16;
    size_t elt = bench_dtype_size(t), K = (size_t)s->k;
    double tol = (t == BENCH_BF16   ? ldexp(1, -7)
                  : t == BENCH_TF32 ? ldexp(1, -8)
                                    : 0) +
                 2.0 * (double)K * ldexp(1, -24);
    const char *w = c->pool, *x = c->pool + g->bytes_w, *y = c->out;
    void *xv = zy_malloc(K * elt), *wv = zy_malloc(K * elt);
    *bad = 0;
    *worst = 0;
    int rc = ZY_OK;
    uint64_t st = 0x12345678u ^ (uint64_t)s->m * 31 ^ (uint64_t)s->n * 131 ^ (uint64_t)s->k;
    for (int q = 0; q < 6 && rc == ZY_OK; q++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        size_t i = (size_t)((st >> 33) % (uint64_t)s->m);
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        size_t j = (size_t)((st >> 33) % (uint64_t)s->n);
        /* Row i of op(X) and column j of op(W), in the stored layouts. */
        if (s->layout == GEMM_XTW)
            rc = gather(c, xv, x, i, (size_t)s->m, K, elt);
        else
            rc = gather(c, xv, x, i * K, 1, K, elt);
        if (rc == ZY_OK) {
            if (s->layout == GEMM_XWT)
                rc = gather(c, wv, w, j * K, 1, K, elt);
            else
                rc = gather(c, wv, w, j, (size_t)s->n, K, elt);
        }
        unsigned char yb[4];
        if (rc == ZY_OK) rc = gather(c, yb, y, i * (size_t)s->n + j, 1, 1, elt);
        if (rc != ZY_OK) break;
        double ref = 0, mag = 0;
        for (size_t kk = 0; kk < K; kk++) {
            double p = host_elt(xv, bf16, kk) * host_elt(wv, bf16, kk);
            ref += p;
            mag += fabs(p);
        }
        double got = host_elt(yb, bf16, 0);
        double e = fabs(got - ref) / (tol * mag + 1e-30);
        if (!(e <= 1.0)) (*bad)++;
        if (!(e <= *worst)) *worst = e;
    }
    free(xv);
    free(wv);
    return rc;
}

static int bench_shape(gemm_ctx *c, const bench_gemm_opts *o, const bench_gemm_shape *s,
                       bench_dtype t, bench_gemm_row *row) {
    memset(row, 0, sizeof *row);
    row->s = *s;
    row->dtype = t;
    row->check_bad = -1;
    row->misaligned = bench_gemm_misaligned(s, bench_dtype_size(t));
    gemm_op g;
    int rc = op_init(&g, s, t);
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t heur[8];
    int found = 0;
    if (rc == ZY_OK && cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS)
        rc = zy_fail_runtime("%s:%d: cublasLtMatmulPreferenceCreate failed", __FILE__, __LINE__);
    if (rc == ZY_OK) {
        cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &c->ws_bytes, sizeof c->ws_bytes);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasLtMatmulAlgoGetHeuristic(c->lt, g.desc, g.la, g.lb, g.lc, g.lc, pref,
                                                o->algos < 8 ? (o->algos > 0 ? o->algos : 1) : 8,
                                                heur, &found);
        if (st != CUBLAS_STATUS_SUCCESS || found == 0)
            rc = zy_fail("%s:%d: cuBLASLt has no algorithm for %s %s M=%d N=%d K=%d (%s)", __FILE__,
                         __LINE__, bench_dtype_name(t), bench_gemm_layout_name(s->layout), s->m,
                         s->n, s->k, cublasGetStatusString(st));
    }
    size_t set = g.bytes_w + g.bytes_x + g.bytes_y;
    size_t copies = rotation_copies(c, set);
    if (copies * (g.bytes_w + g.bytes_x) > c->pool_bytes)
        copies = c->pool_bytes / (g.bytes_w + g.bytes_x);
    if (copies * g.bytes_y > c->out_bytes) copies = c->out_bytes / g.bytes_y;
    double best = INFINITY;
    int best_i = 0;
    for (int a = 0; a < found && rc == ZY_OK; a++) {
        const cublasLtMatmulAlgo_t *algo = &heur[a].algo;
        double est;
        rc = run_matmul(c, &g, algo, 0); /* loads the kernel */
        if (rc == ZY_OK) rc = time_matmul(c, &g, algo, copies, 2, &est);
        /* Warm up for warmup_ms first: the clocks settle under sustained load (a short burst
         * after idle runs faster than the same GEMM in a training step). */
        if (rc == ZY_OK && o->warmup_ms > 0) {
            int wi = (int)(o->warmup_ms * 1e-3 / (est > 1e-7 ? est : 1e-7));
            wi = wi < 1 ? 1 : wi > 100000 ? 100000 : wi;
            rc = time_matmul(c, &g, algo, copies, wi, &est);
        }
        if (rc != ZY_OK) break;
        int iters = (int)(o->target_ms * 1e-3 / (est > 1e-7 ? est : 1e-7));
        iters = iters < 5 ? 5 : iters > 5000 ? 5000 : iters;
        double sec;
        rc = time_matmul(c, &g, algo, copies, iters, &sec);
        if (rc == ZY_OK && sec < best) best = sec, best_i = a;
    }
    if (rc == ZY_OK) {
        row->time_us = best * 1e6;
        row->tflops = bench_gemm_flops(s) / best / 1e12;
        int tile = 0, splitk = 1;
        size_t wr;
        cublasLtMatmulAlgoConfigGetAttribute(&heur[best_i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID,
                                             &tile, sizeof tile, &wr);
        cublasLtMatmulAlgoConfigGetAttribute(&heur[best_i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                             &splitk, sizeof splitk, &wr);
        int tr, tc;
        tile_dims(tile, &tr, &tc);
        row->tile_id = tile;
        row->splitk = splitk;
        row->tile_n = tr; /* cuBLAS rows = our N */
        row->tile_m = tc; /* cuBLAS columns = our M */
        bench_gemm_quant(s->m, s->n, tc > 0 ? tc : 128, tr > 0 ? tr : 128, splitk, c->sms,
                         &row->tiles, &row->waves, &row->wave_eff, &row->tile_eff);
        if (o->check) rc = check_samples(c, &g, s, t, &row->check_bad, &row->check_err);
    }
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    op_free(&g);
    return rc;
}

static int fill_pool(gemm_ctx *c, bench_dtype t, uint64_t seed) {
    size_t n = c->pool_bytes / bench_dtype_size(t);
    gemm_fill<<<c->sms * 8, 256, 0, c->stream>>>(c->pool, t == BENCH_BF16, n, seed);
    ZY_CUDA_TRY_LAUNCH();
    ZY_CUDA_TRY(cudaStreamSynchronize(c->stream));
    return ZY_OK;
}

int bench_gemm_run(const bench_gemm_opts *o, int dev, bench_gemm_result *res, FILE *out) {
    bench_gemm_result_init(res);
    bench_machine_host(&res->machine);
    ZY_TRY(bench_gpu_describe(&res->machine, dev));
    res->machine.cublaslt = (int)cublasLtGetVersion();
    ZY_CUDA_TRY(cudaSetDevice(dev));
    gemm_ctx c;
    memset(&c, 0, sizeof c);
    c.sms = res->machine.sm_count;
    c.l2 = (size_t)res->machine.l2_bytes;
    c.ws_bytes = o->workspace;
    /* Every dtype's sweep, and the pool that holds the largest rotation of any shape. */
    bench_gemm_shape *shapes[3] = {NULL, NULL, NULL};
    int nshapes[3] = {0, 0, 0};
    int rc = ZY_OK;
    for (int d = 0; d < o->ndtypes && rc == ZY_OK; d++) {
        rc = bench_gemm_sweep(o, o->dtypes[d], &shapes[d], &nshapes[d]);
        for (int i = 0; i < nshapes[d] && rc == ZY_OK; i++) {
            gemm_op g;
            rc = op_init(&g, &shapes[d][i], o->dtypes[d]);
            size_t set = g.bytes_w + g.bytes_x + g.bytes_y;
            size_t n = rotation_copies(&c, set);
            if (n * (g.bytes_w + g.bytes_x) > c.pool_bytes)
                c.pool_bytes = n * (g.bytes_w + g.bytes_x);
            if (n * g.bytes_y > c.out_bytes) c.out_bytes = n * g.bytes_y;
            if ((size_t)shapes[d][i].k * 4 > c.scratch_bytes)
                c.scratch_bytes = (size_t)shapes[d][i].k * 4;
            op_free(&g);
        }
    }
    if (rc == ZY_OK) {
        cudaError_t e = cudaMalloc((void **)&c.pool, c.pool_bytes);
        if (e == cudaSuccess) e = cudaMalloc((void **)&c.out, c.out_bytes);
        if (e != cudaSuccess)
            rc = zy_fail_runtime(
                "gemm: allocating %.1f GB of inputs and %.1f GB of outputs on device %d: "
                "%s",
                c.pool_bytes / 1e9, c.out_bytes / 1e9, dev, cudaGetErrorString(e));
    }
    if (rc == ZY_OK) {
        cudaError_t e = cudaMalloc((void **)&c.scratch, c.scratch_bytes + 256);
        if (e != cudaSuccess)
            rc = zy_fail_runtime("gemm: allocating %zu bytes of scratch: %s", c.scratch_bytes,
                                 cudaGetErrorString(e));
    }
    if (rc == ZY_OK && c.ws_bytes) {
        cudaError_t e = cudaMalloc(&c.ws, c.ws_bytes);
        if (e != cudaSuccess)
            rc = zy_fail_runtime("gemm: allocating %zu bytes of workspace: %s", c.ws_bytes,
                                 cudaGetErrorString(e));
    }
    if (rc == ZY_OK && cublasLtCreate(&c.lt) != CUBLAS_STATUS_SUCCESS)
        rc = zy_fail_runtime("%s:%d: cublasLtCreate failed", __FILE__, __LINE__);
    if (rc == ZY_OK) {
        cudaError_t e = cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking);
        if (e == cudaSuccess) e = cudaEventCreate(&c.e0);
        if (e == cudaSuccess) e = cudaEventCreate(&c.e1);
        if (e != cudaSuccess)
            rc = zy_fail_runtime("%s:%d: %s", __FILE__, __LINE__, cudaGetErrorString(e));
    }
    for (int d = 0; d < o->ndtypes && rc == ZY_OK; d++) {
        bench_dtype t = o->dtypes[d];
        if (out) {
            fprintf(out, "# %s: %d shapes\n", bench_dtype_name(t), nshapes[d]);
            fflush(out);
        }
        rc = fill_pool(&c, t, 0x5eed0000u + (uint64_t)d);
        for (int i = 0; i < nshapes[d] && rc == ZY_OK; i++) {
            bench_gemm_row row;
            rc = bench_shape(&c, o, &shapes[d][i], t, &row);
            if (rc == ZY_OK) bench_gemm_result_add(res, &row);
        }
    }
    if (rc == ZY_OK) {
        bench_gemm_finish(res);
        if (out) {
            bench_gemm_print_header(out);
            for (int i = 0; i < res->nrows; i++) bench_gemm_print_row(out, &res->rows[i]);
        }
    }
    for (int d = 0; d < 3; d++) free(shapes[d]);
    if (c.e0) cudaEventDestroy(c.e0);
    if (c.e1) cudaEventDestroy(c.e1);
    if (c.stream) cudaStreamDestroy(c.stream);
    if (c.lt) cublasLtDestroy(c.lt);
    cudaFree(c.ws);
    cudaFree(c.pool);
    cudaFree(c.out);
    cudaFree(c.scratch);
    return rc;
}
