/* The optimiser, gradient clipping and the balancing-bias update on the GPU (see optim_cuda.h).
 *
 * AdamW: one launch over a chunk table built at init (every AdamW tensor cut into chunks of at
 * most ADAM_CH elements; a block per chunk), so ~200 tensors cost one launch.
 *
 * Muon: the matrices of all Muon tensors (an [E, out, in] stack gives E of them) are grouped by
 * shape at init, whatever layer they come from, and each group is cut into calls ("batches") of at
 * most batch_elems elements. Per batch: the momentum kernel (mom = mu mom + g, the Nesterov update
 * u written as bf16 into the X buffer, and per-chunk sums of u^2), the normalisation by
 * 1 / (||u|| + 1e-7) (each matrix's chunk sums added in a fixed order, in double): folded into the
 * first Newton-Schulz step's SYRKs and X' (newton_schulz) where both symmetric products go to the
 * SYRK, else a kernel that scales X in place (4 bytes an element instead of re-reading g and the
 * momentum), with optimizer.ns_precondition aol AOL's row factors from the first A and two passes
 * over [s, s] matrices (ns_aol_gram, ns_aol_poly), five quintic
 * Newton-Schulz steps as strided-batched bf16 GEMMs (fp32 accumulation, bf16 results):
 *     A = X X^T,   B = c A A + b A,   X' = B X + a X        (wide: rows <= cols)
 *     A = X^T X,   B = c A A + b A,   X' = X B + a X        (tall: the Gram matrix is cols^2)
 * A and B are symmetric. Where the device runs it (Hopper), both go to the batched SYRK of
 * ops/cuda/syrk.h, which computes only the [128 x 128] tiles on and below the diagonal and mirrors
 * them (36 of 64 tiles at s = 1024); measured on H100s the optimizer step took 0.88-0.94x
 * (bench-small) and 0.92-0.94x (bench-base) as long as with cuBLAS. Otherwise (and under
 * optim_cuda_set_syrk(c, 0)), for a Gram side s >= 2048 they are computed by kb block rows of
 * s / kb rows, block row i only up to its diagonal block ((kb + 1) / (2 kb) of the FLOPs: 5/8 at
 * kb 4), and the mirror kernel copies the lower blocks onto the upper ones. Every other GEMM goes
 * through the context's GEMM module (ops/cuda/gemm.h, cuda_gemm_run: its plan cache, planned at
 * init; cuBLASLt, whose D may differ from C so that nothing is copied; classic cuBLAS where
 * cuBLASLt has no algorithm; blocks only where cuBLASLt runs them all). Last, the apply kernel:
 * p -= lr (scale u + wd p). The X buffers hold each matrix row-major with rows padded to a multiple
 * of 8 elements (column-major [cols, rows] for cuBLAS); the batch strides are multiples of 128
 * elements so every matrix starts 256-byte aligned.
 *
 * Clipping: the non-buffer tensors become segments (contiguous tensors merged), passed by value in
 * launches of up to SEG_MAX; a block sums its chunk's squares in double, blocks write partials in
 * table order, and one block adds them in a fixed order. */
extern "C" { /* ops.h has no C++ guards of its own: include it with C linkage first */
#include "model/config.h"
#include "ops/ops.h"
#include "optim/optim_cuda.h"
}
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/cuda_state.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/syrk.h"
#include "optim/moments.h"

#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef __nv_bfloat16 bf16;

#define NT          256  /* threads per block of the element-wise kernels */
#define ADAM_CH     8192 /* elements per AdamW block */
#define ADAM_U      4    /* float4 groups per thread in flight in the AdamW kernel */
#define ADAM_W_BF16 8    /* elements per group with bf16 moments: 16-byte moment accesses */
#define ADAM_U_BF16 2    /* groups in flight with bf16 moments (measured: see adamw_kernel) */
#define MUON_CH     8192 /* elements per Muon element-wise block */
#define CLIP_CH     8192 /* elements per clipping block */
#define SEG_MAX     96   /* segments per clipping launch (passed by value: ~2 KB) */

/* The Newton-Schulz normalisation epsilon, as optim.c's. */
#define NS_EPS 1e-7

static int64_t round_up(int64_t x, int64_t m) {
    return (x + m - 1) / m * m;
}

/* The ops profiler (ops_prof_read) times these calls too when ctx->prof is set. */
static int prof_begin(zy_ctx *ctx) {
    return ctx->prof ? cuda_ops_prof_begin(ctx) : -1;
}
static void prof_end(zy_ctx *ctx, int slot, const char *name) {
    if (slot >= 0) cuda_ops_prof_end(ctx, slot, name);
}

/* ---- plan ---- */

/* A piece of one AdamW tensor. */
typedef struct {
    uint64_t p, s; /* element offsets into params/grads and into exp_avg/exp_avg_sq */
    uint32_t n;    /* elements, <= ADAM_CH */
    float wd;      /* weight decay of the tensor's kind */
} adam_chunk;

#define NS_KB_MAX         4    /* block rows of the symmetric products */
#define MIRROR_T          32   /* tile of the mirror kernel */
#define NS_BLOCK_MIN_SIDE 2048 /* the smallest Gram side computed by block rows */

/* The Newton-Schulz GEMMs of one (shape, batch count). */
typedef struct {
    int64_t rows, cols; /* each matrix [rows, cols] row-major */
    int64_t s, l;       /* min and max of rows, cols: the Gram matrix is [s, s] */
    int tall;           /* rows > cols */
    int64_t ldx, lds;   /* leading dimensions (elements) of X (cols padded) and of the Gram */
    int64_t sx, ss;     /* batch strides of X and of the Gram buffers */
    int count;          /* matrices per call */
    int kb;             /* block rows of A and B (1: whole products; ns_block_rows) */
    int syrk_a, syrk_b; /* A and B by cuda_syrk_bf16 */
} ns_shape;

/* One Newton-Schulz call: count matrices of one shape. */
typedef struct {
    int shape;  /* index into shapes */
    int first;  /* first matrix in goff/moff */
    int count;  /* matrices */
    int vec;    /* 8: 8-wide aligned accesses; 1: element by element */
    int nchunk; /* MUON_CH blocks per matrix */
    int key;    /* the run of table entries its matrices belong to (0 in an unkeyed plan) */
    float scale;
} muon_batch;

struct zy_optim_cuda {
    adam_chunk *chunks; /* device [nchunks] */
    int nchunks;
    /* host [n_params + 1]: entry i's AdamW chunks are [chunk_at[i], chunk_at[i + 1]) */
    int *chunk_at;
    uint64_t *goff, *moff; /* device [nmat]: each matrix's offset in params/grads, in momentum */
    int nmat;
    ns_shape *shapes; /* host [nshapes] */
    int nshapes, ngroups;
    muon_batch *batches; /* host [nbatches] */
    int nbatches;
    bf16 *x[2], *ga, *gb; /* workspace: iterates, Gram A, polynomial B */
    float *part;          /* [count * nchunk] chunk sums of u^2 */
    float *fold;          /* [4 * count]: inv, inv^2, a inv, a per matrix (the scale folded in) */
    float *aol_d;         /* [count * s]: AOL's row factors of each Gram matrix (aol only) */
    int keyed;            /* batches never span two keys (optim_cuda_init's key) */
    int legacy;
    int previous; /* bench/test hook: the previous scheme (optim_cuda_set_previous) */
    int no_syrk;  /* bench/test hook: A and B through cuBLAS (optim_cuda_set_syrk) */
    int lt_missing;
};

/* Block rows of the symmetric products for a Gram side s: only from NS_BLOCK_MIN_SIDE up, and
 * s / kb a multiple of the mirror's tile. Measured on an H100 (scripts/gpu_muon_bench.sh): at
 * s = 2048 (bench-base) 4 blocks of 512 rows made the optimizer step 0.93x as long; at s = 1024
 * (bench-small) 4 blocks of 256 rows 1.09x and 2 blocks of 512 rows 1.06x: the smaller GEMMs and
 * the mirror cost more than the FLOPs they save there. */
static int ns_block_rows(int64_t s) {
    if (s < NS_BLOCK_MIN_SIDE) return 1;
    for (int kb = NS_KB_MAX; kb > 1; kb /= 2)
        if (s % (kb * MIRROR_T) == 0) return kb;
    return 1;
}

/* The GEMMs of one quintic step over sh->count matrices, row-major (gemm.h) on the X buffer's
 * [rows, cols] matrices (rows ldx apart) and the [s, s] Gram buffers (rows lds apart); with kb
 * block rows of h = s / kb rows, block row i (r0 = i h) up to column n = (i + 1) h:
 *   0: A[r0:r0+h, :n] = X[r0:r0+h] X[:n]^T (wide) or X[:, r0:r0+h]^T X[:, :n] (tall)
 *   1: B[r0:r0+h, :n] = c A[r0:r0+h, :] A[:, :n] + b A[r0:r0+h, :n]   (C = A, D = Gram B)
 *   2: X' = B X + a X (wide) or X B + a X (tall), whole   (C = X, D = the other X buffer)
 * with the step's (a, b, c) = k.
 * kb = 1 is the whole product. cuBLAS sees X as column-major [cols, rows]: gemm.h's mapping gives
 * it the same transposes, layouts and strides as the column-major formulation of the header
 * comment. Leading dimensions are given, so each is planned for its exact sizes. */
static cuda_gemm_desc ns_desc(const ns_shape *sh, int which, int i, int kb, const float k[3]) {
    const int s = (int)sh->s, l = (int)sh->l, h = s / kb;
    cuda_gemm_desc g;
    memset(&g, 0, sizeof g);
    g.dtype_ab = g.dtype_c = CUDA_GEMM_BF16;
    g.batch = sh->count;
    g.alpha = 1.0f;
    if (which == 0) { /* [h, n] over K = l: wide X [s, l], tall X [l, s] */
        g.M = h, g.N = (i + 1) * h, g.K = l;
        g.transA = sh->tall, g.transB = !sh->tall;
        g.lda = g.ldb = sh->ldx, g.ldc = sh->lds;
        g.stride_a = g.stride_b = sh->sx, g.stride_c = sh->ss;
    } else if (which == 1) {
        g.M = h, g.N = (i + 1) * h, g.K = s;
        g.lda = g.ldb = g.ldc = sh->lds;
        g.stride_a = g.stride_b = g.stride_c = sh->ss;
        g.alpha = k[2], g.beta = k[1];
    } else {
        if (sh->tall) { /* X' [l, s] = X [l, s] B [s, s] + a X */
            g.M = l, g.N = s, g.K = s;
            g.lda = sh->ldx, g.ldb = sh->lds, g.stride_a = sh->sx, g.stride_b = sh->ss;
        } else { /* X' [s, l] = B [s, s] X [s, l] + a X */
            g.M = s, g.N = l, g.K = s;
            g.lda = sh->lds, g.ldb = sh->ldx, g.stride_a = sh->ss, g.stride_b = sh->sx;
        }
        g.ldc = sh->ldx, g.stride_c = sh->sx;
        g.beta = k[0];
    }
    return g;
}

/* The operands of GEMM `which`, block row i of kb, of a step whose iterate is x (y: the other X
 * buffer). */
typedef struct {
    const void *A, *B, *C;
    void *D;
} ns_ops;

static ns_ops ns_operands(const zy_optim_cuda *c, const ns_shape *sh, int which, int i, int kb,
                          bf16 *x, bf16 *y) {
    const int64_t r0 = i * (sh->s / kb);
    ns_ops o;
    if (which == 0) /* rows r0.. of X (wide) or its columns r0.. (tall), against X's first n */
        o.A = x + (sh->tall ? r0 : r0 * sh->ldx), o.B = x, o.C = o.D = c->ga + r0 * sh->lds;
    else if (which == 1)
        o.A = o.C = c->ga + r0 * sh->lds, o.B = c->ga, o.D = c->gb + r0 * sh->lds;
    else
        o.A = sh->tall ? x : c->gb, o.B = sh->tall ? c->gb : x, o.C = x, o.D = y;
    return o;
}

/* Rows, columns and count of the matrices of a Muon tensor ([out, in] or [..., out, in]). */
static void matrix_dims(const zy_param *p, int64_t *rows, int64_t *cols, int64_t *count) {
    *rows = p->shape[p->ndim - 2];
    *cols = p->shape[p->ndim - 1];
    *count = (int64_t)p->numel / (*rows * *cols);
}

/* The AdamW chunk table of opt, uploaded. */
static void plan_adam(zy_ctx *ctx, zy_optim_cuda *c, const zy_optim *opt, const zy_param_table *t) {
    const zy_optim_config *cfg = &opt->cfg;
    size_t n = 0;
    for (int i = 0; i < t->count; i++)
        if (opt->method[i] == ZY_OPT_ADAMW)
            n += (opt->upd_hi[i] - opt->upd_lo[i] + ADAM_CH - 1) / ADAM_CH;
    ZY_CHECKF(n < (1u << 31), "optimizer: %zu AdamW chunks", n);
    c->nchunks = (int)n;
    c->chunk_at = (int *)zy_calloc((size_t)t->count + 1, sizeof *c->chunk_at);
    adam_chunk *h = (adam_chunk *)zy_calloc(n, sizeof *h);
    size_t k = 0;
    for (int i = 0; i < t->count; i++) {
        const zy_param *p = &t->items[i];
        const float wd = (cfg->decay_kinds & ZY_KIND_BIT(p->kind)) ? cfg->weight_decay : 0.0f;
        const size_t hi = opt->upd_hi[i]; /* the elements [lo, hi) a step updates */
        for (size_t o = opt->upd_lo[i]; opt->method[i] == ZY_OPT_ADAMW && o < hi;
             o += ADAM_CH, k++) {
            h[k].p = p->offset + o;
            h[k].s = opt->state_off[i] + (o - opt->upd_lo[i]); /* the state holds [lo, hi) */
            h[k].n = (uint32_t)(hi - o < ADAM_CH ? hi - o : ADAM_CH);
            h[k].wd = wd;
        }
        c->chunk_at[i + 1] = (int)k;
    }
    if (n == 0) {
        free(h);
        return;
    }
    c->chunks = (adam_chunk *)ops_alloc(ctx, n * sizeof *h);
    ops_copy(ctx, c->chunks, h, n * sizeof *h);
    free(h);
}

/* Plans the GEMMs of sh's quintic step (at sh->kb) in the context's GEMM module; returns how many
 * have no cuBLASLt algorithm (classic cuBLAS, which copies C's whole extent into D before a GEMM
 * whose D is not C: that would overwrite other block rows, so blocks need cuBLASLt). */
static int ns_prepare(zy_ctx *ctx, const zy_optim_cuda *c, const ns_shape *sh) {
    static const float any_k[3] = {1.0f, 1.0f, 1.0f}; /* a plan depends on beta != 0 only */
    int missing = 0;
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < (k == 2 ? 1 : sh->kb); j++) {
            const cuda_gemm_desc g = ns_desc(sh, k, j, sh->kb, any_k);
            const ns_ops o = ns_operands(c, sh, k, j, sh->kb, c->x[0], c->x[1]);
            int lt = 1;
            ZY_STATUS_CHECK(cuda_gemm_prepare(&cuda_st(ctx)->gemm, &g, o.D, o.C, o.A, o.B, &lt));
            missing += !lt;
            if (k == 2 && ((sh->syrk_a && sh->syrk_b) || c->aol_d)) { /* the first step's X'
                                                                       * folded or after AOL */
                cuda_gemm_desc g0 = g;
                g0.beta = 0.0f;
                ZY_STATUS_CHECK(
                    cuda_gemm_prepare(&cuda_st(ctx)->gemm, &g0, o.D, o.C, o.A, o.B, &lt));
                missing += !lt;
            }
        }
    return missing;
}

/* Groups the Muon matrices by shape, cuts the groups into batches, builds their GEMM plans and
 * allocates the workspace. */
static void plan_muon(zy_ctx *ctx, zy_optim_cuda *c, const zy_optim *opt, const zy_param_table *t,
                      size_t batch_elems, const int *key) {
    /* every matrix in table order, with its group (same shape and key; order of first
     * appearance) */
    int nmat = 0;
    for (int i = 0; i < t->count; i++) {
        if (opt->method[i] != ZY_OPT_MUON) continue;
        int64_t r, cc, e;
        matrix_dims(&t->items[i], &r, &cc, &e);
        nmat += (int)e;
    }
    c->nmat = nmat;
    if (nmat == 0) return;
    uint64_t *goff = (uint64_t *)zy_calloc((size_t)nmat, sizeof *goff);
    uint64_t *moff = (uint64_t *)zy_calloc((size_t)nmat, sizeof *moff);
    int *grp = (int *)zy_calloc((size_t)nmat, sizeof *grp);
    int64_t(*gdim)[3] = (int64_t(*)[3])zy_calloc((size_t)nmat, sizeof *gdim); /* rows, cols, key */
    int *gsize = (int *)zy_calloc((size_t)nmat, sizeof *gsize);
    int ng = 0, m = 0;
    for (int i = 0; i < t->count; i++) {
        if (opt->method[i] != ZY_OPT_MUON) continue;
        const zy_param *p = &t->items[i];
        int64_t r, cc, e;
        matrix_dims(p, &r, &cc, &e);
        const int64_t k_i = key ? key[i] : 0;
        int g = 0;
        while (g < ng && !(gdim[g][0] == r && gdim[g][1] == cc && gdim[g][2] == k_i)) g++;
        if (g == ng) gdim[ng][0] = r, gdim[ng][1] = cc, gdim[ng][2] = k_i, ng++;
        for (int64_t k = 0; k < e; k++, m++) {
            goff[m] = p->offset + (uint64_t)(k * r * cc);
            moff[m] = opt->state_off[i] + (uint64_t)(k * r * cc);
            grp[m] = g;
            gsize[g]++;
        }
    }
    /* matrices ordered by group (stable: table order inside a group) */
    uint64_t *sg = (uint64_t *)zy_calloc((size_t)nmat, sizeof *sg);
    uint64_t *sm = (uint64_t *)zy_calloc((size_t)nmat, sizeof *sm);
    int *gfirst = (int *)zy_calloc((size_t)ng + 1, sizeof *gfirst);
    for (int g = 0; g < ng; g++) gfirst[g + 1] = gfirst[g] + gsize[g];
    int *fill = (int *)zy_calloc((size_t)ng, sizeof *fill);
    for (int k = 0; k < nmat; k++) {
        int at = gfirst[grp[k]] + fill[grp[k]]++;
        sg[at] = goff[k];
        sm[at] = moff[k];
    }
    c->ngroups = ng;
    c->shapes = (ns_shape *)zy_calloc((size_t)(2 * ng), sizeof *c->shapes);
    c->batches = (muon_batch *)zy_calloc((size_t)nmat, sizeof *c->batches);
    const zy_optim_config *cfg = &opt->cfg;
    size_t max_x = 0, max_s = 0, max_part = 0, max_count = 0, max_side = 0;
    /* the calls by key, each key's in order of first appearance: a key's calls are one stretch
     * (a group of a later key can appear in the table before one of an earlier key) */
    int *by_key = (int *)zy_calloc((size_t)ng, sizeof *by_key);
    for (int g = 0, k = 0; g < ng; g++) {
        int at = k++;
        while (at > 0 && gdim[by_key[at - 1]][2] > gdim[g][2]) by_key[at] = by_key[at - 1], at--;
        by_key[at] = g;
    }
    for (int gi = 0; gi < ng; gi++) {
        const int g = by_key[gi];
        const int64_t r = gdim[g][0], cc = gdim[g][1], mn = r * cc, n = gsize[g];
        int64_t per = (int64_t)batch_elems / mn;
        if (per < 1) per = 1;
        if (per > 65535) per = 65535; /* the grid's y dimension */
        const int64_t nb = (n + per - 1) / per, size = (n + nb - 1) / nb;
        int shape_of[2] = {-1, -1}; /* shapes for `size` matrices and for a shorter last batch */
        for (int64_t first = 0; first < n; first += size) {
            const int count = (int)(n - first < size ? n - first : size);
            int which = count == size ? 0 : 1;
            if (shape_of[which] < 0) {
                ns_shape *sh = &c->shapes[c->nshapes];
                sh->rows = r, sh->cols = cc, sh->tall = r > cc;
                sh->s = sh->tall ? cc : r, sh->l = sh->tall ? r : cc;
                sh->ldx = round_up(cc, 8), sh->lds = round_up(sh->s, 8);
                sh->sx = round_up(sh->ldx * r, 128), sh->ss = round_up(sh->lds * sh->s, 128);
                sh->count = count;
                sh->kb = ns_block_rows(sh->s);
                shape_of[which] = c->nshapes++;
            }
            muon_batch *b = &c->batches[c->nbatches++];
            b->shape = shape_of[which];
            b->first = gfirst[g] + (int)first;
            b->count = count;
            b->nchunk = (int)((mn + MUON_CH - 1) / MUON_CH);
            b->key = (int)gdim[g][2];
            b->scale = optim_muon_scale(cfg->muon_scale, r, cc);
            int vec = cc % 8 == 0;
            for (int k = 0; k < count; k++)
                vec = vec && sg[b->first + k] % 8 == 0 && sm[b->first + k] % 8 == 0;
            b->vec = vec ? 8 : 1;
            const ns_shape *sh = &c->shapes[b->shape];
            if ((size_t)(count * sh->sx) > max_x) max_x = (size_t)(count * sh->sx);
            if ((size_t)(count * sh->ss) > max_s) max_s = (size_t)(count * sh->ss);
            if ((size_t)count * b->nchunk > max_part) max_part = (size_t)count * b->nchunk;
            if ((size_t)count > max_count) max_count = (size_t)count;
            if ((size_t)(count * sh->s) > max_side) max_side = (size_t)(count * sh->s);
        }
    }
    for (int i = 1; i < c->nbatches; i++) /* by key: optim_cuda_muon_key runs one stretch */
        ZY_CHECKF(c->batches[i].key >= c->batches[i - 1].key,
                  "Muon plan: call %d's key %d after key %d", i, c->batches[i].key,
                  c->batches[i - 1].key);
    c->goff = (uint64_t *)ops_alloc(ctx, (size_t)nmat * sizeof *sg);
    c->moff = (uint64_t *)ops_alloc(ctx, (size_t)nmat * sizeof *sm);
    ops_copy(ctx, c->goff, sg, (size_t)nmat * sizeof *sg);
    ops_copy(ctx, c->moff, sm, (size_t)nmat * sizeof *sm);
    for (int i = 0; i < 2; i++) c->x[i] = (bf16 *)ops_alloc(ctx, max_x * sizeof(bf16));
    c->ga = (bf16 *)ops_alloc(ctx, max_s * sizeof(bf16));
    c->gb = (bf16 *)ops_alloc(ctx, max_s * sizeof(bf16));
    c->part = (float *)ops_alloc(ctx, max_part * sizeof(float));
    c->fold = (float *)ops_alloc(ctx, 4 * max_count * sizeof(float));
    if (cfg->muon_ns_precond == ZY_NS_PRECOND_AOL)
        c->aol_d = (float *)ops_alloc(ctx, max_side * sizeof(float));
    /* the symmetric products by the Hopper SYRK where it runs and the layouts fit; then the GEMM
     * plans, so the first step pays nothing; the two X buffers align alike */
    const int syrk = cuda_syrk_supported();
    for (int i = 0; i < c->nshapes; i++) {
        ns_shape *sh = &c->shapes[i];
        ZY_CHECKF(sh->rows * sh->cols < INT32_MAX && sh->s * sh->s < INT32_MAX,
                  "Muon plan: a [%lld x %lld] matrix is past the element-wise kernels' int index",
                  (long long)sh->rows, (long long)sh->cols);
        sh->syrk_a = syrk &&
                     cuda_syrk_fits(c->ga, NULL, c->x[0], (int)sh->s, (int)sh->l, sh->tall, sh->ldx,
                                    sh->sx, sh->lds, sh->ss) &&
                     cuda_syrk_fits(c->ga, NULL, c->x[1], (int)sh->s, (int)sh->l, sh->tall, sh->ldx,
                                    sh->sx, sh->lds, sh->ss);
        /* B's SYRK reads A as symmetric: only an A from the SYRK is, bit for bit */
        sh->syrk_b = sh->syrk_a && cuda_syrk_fits(c->gb, c->ga, c->ga, (int)sh->s, (int)sh->s, 0,
                                                  sh->lds, sh->ss, sh->lds, sh->ss);
    } /* every GEMM is planned below all the same: optim_cuda_set_syrk(c, 0) runs them */
    for (int i = 0; i < c->nshapes; i++) {
        ns_shape *sh = &c->shapes[i];
        int missing = ns_prepare(ctx, c, sh);
        if (missing && sh->kb > 1) { /* block rows only where cuBLASLt runs every block */
            sh->kb = 1;
            missing = ns_prepare(ctx, c, sh);
        }
        c->lt_missing += missing;
    }
    free(goff);
    free(moff);
    free(grp);
    free(gdim);
    free(gsize);
    free(sg);
    free(sm);
    free(gfirst);
    free(fill);
    free(by_key);
}

zy_optim_cuda *optim_cuda_init(zy_ctx *ctx, const zy_optim *opt, const zy_param_table *t,
                               size_t batch_elems, const int *key) {
    zy_optim_cuda *c = (zy_optim_cuda *)zy_calloc(1, sizeof *c);
    plan_adam(ctx, c, opt, t);
    plan_muon(ctx, c, opt, t, batch_elems ? batch_elems : OPTIM_CUDA_BATCH_ELEMS, key);
    c->keyed = key != NULL;
    return c;
}

void optim_cuda_free(zy_ctx *ctx, zy_optim_cuda *c) {
    if (!c) return;
    ops_free(ctx, c->chunks);
    free(c->chunk_at);
    ops_free(ctx, c->goff);
    ops_free(ctx, c->moff);
    for (int i = 0; i < 2; i++) ops_free(ctx, c->x[i]);
    ops_free(ctx, c->ga);
    ops_free(ctx, c->gb);
    ops_free(ctx, c->part);
    ops_free(ctx, c->fold);
    ops_free(ctx, c->aol_d);
    free(c->shapes);
    free(c->batches);
    free(c);
}

void optim_cuda_set_legacy_gemm(zy_optim_cuda *c, int legacy) {
    c->legacy = legacy;
}

void optim_cuda_set_previous(zy_optim_cuda *c, int previous) {
    c->previous = previous;
}

void optim_cuda_set_syrk(zy_optim_cuda *c, int on) {
    c->no_syrk = !on;
}

void optim_cuda_plan_info(const zy_optim_cuda *c, zy_optim_cuda_info *info) {
    info->adam_chunks = c->nchunks;
    info->muon_groups = c->ngroups;
    info->muon_batches = c->nbatches;
    info->muon_mats = c->nmat;
    info->lt_missing = c->lt_missing;
    info->muon_blocked = info->muon_syrk = 0;
    for (int i = 0; i < c->nshapes; i++) {
        info->muon_blocked += c->shapes[i].kb > 1;
        info->muon_syrk += c->shapes[i].syrk_a + c->shapes[i].syrk_b;
    }
}

/* ---- AdamW ---- */

typedef struct {
    float lr, beta1, beta2, omb1, omb2, eps, step, inv_sqrt_bc2, gscale;
    uint64_t round_step; /* bf16 moments: the step whose bits round them (moments.h) */
} adam_args;

/* optim_adamw_update on one element, operation by operation (IEEE rounding, no FMA); with bf16
 * moments (RND) the new m and v rounded as optim.c rounds them, with the element's random bits r
 * (zy_moment_bits), before the weight's update reads them. */
template <bool RND>
__device__ __forceinline__ void adam_one(float &p, float g, float &m, float &v, const adam_args &a,
                                         float decay, uint32_t r) {
    g = __fmul_rn(g, a.gscale); /* clipping's factor, as if applied in place */
    float mi = __fadd_rn(__fmul_rn(a.beta1, m), __fmul_rn(a.omb1, g));
    float vi = __fadd_rn(__fmul_rn(a.beta2, v), __fmul_rn(__fmul_rn(a.omb2, g), g));
    if (RND) {
        mi = zy_round_moment(mi, r & 0xffffu);
        vi = zy_round_moment(vi, r >> 16);
    }
    m = mi;
    v = vi;
    const float den = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), a.inv_sqrt_bc2), a.eps);
    p = __fsub_rn(p, __fadd_rn(__fdiv_rn(__fmul_rn(a.step, mi), den), __fmul_rn(decay, p)));
}

/* W moments from fp32 or bf16 storage (one 16-byte access, or 8 bytes for four bf16) and back.
 * A bf16 moment is stored as the raw high half of its fp32 value, which zy_round_moment already
 * made a bf16 value: a conversion instruction would make a NaN canonical, where the CPU keeps its
 * bits. */
template <int W> __device__ __forceinline__ void load_moments(const float *q, float *x) {
    zy_load<float, W>(q, x);
}
template <int W> __device__ __forceinline__ void store_moments(float *q, const float *x) {
    zy_store<float, W>(q, x);
}
template <int W> __device__ __forceinline__ void load_moments(const bf16 *q, float *x) {
    static_assert(W == 4 || W == 8, "bf16 moments: 4 or 8 a group");
    uint32_t u[W / 2];
    if constexpr (W == 8) {
        const uint4 t = *reinterpret_cast<const uint4 *>(q);
        u[0] = t.x, u[1] = t.y, u[2] = t.z, u[3] = t.w;
    } else {
        const uint2 t = *reinterpret_cast<const uint2 *>(q);
        u[0] = t.x, u[1] = t.y;
    }
#pragma unroll
    for (int k = 0; k < W / 2; k++) {
        x[2 * k] = __uint_as_float(u[k] << 16);
        x[2 * k + 1] = __uint_as_float(u[k] & 0xffff0000u);
    }
}
template <int W> __device__ __forceinline__ void store_moments(bf16 *q, const float *x) {
    uint32_t u[W / 2];
#pragma unroll
    for (int k = 0; k < W / 2; k++)
        u[k] = (__float_as_uint(x[2 * k]) >> 16) | (__float_as_uint(x[2 * k + 1]) & 0xffff0000u);
    if constexpr (W == 8)
        *reinterpret_cast<uint4 *>(q) = make_uint4(u[0], u[1], u[2], u[3]);
    else
        *reinterpret_cast<uint2 *>(q) = make_uint2(u[0], u[1]);
}
/* The bf16 compute copy of W weights (16 bytes for 8, 8 bytes for 4). */
template <int W> __device__ __forceinline__ void store_copy(bf16 *q, const float *x) {
    if constexpr (W == 4)
        zy_store_bf16x4(q, x);
    else
        zy_store<bf16, W>(q, x);
}
__device__ __forceinline__ float load_moment(const float *q) {
    return *q;
}
__device__ __forceinline__ float load_moment(const bf16 *q) {
    return __bfloat162float(*q);
}
__device__ __forceinline__ void store_moment(float *q, float x) {
    *q = x;
}
__device__ __forceinline__ void store_moment(bf16 *q, float x) {
    *q = __ushort_as_bfloat16((unsigned short)(__float_as_uint(x) >> 16));
}

/* One block per chunk; groups of W elements (16-byte accesses of the weights, gradients and fp32
 * moments; of bf16 moments with W = 8) when the parameter offset allows (state offsets are
 * 16-element aligned), then the chunk's tail one element at a time. MT: the moments' storage,
 * float or bf16 (rounded stochastically); U: groups a thread has in flight. bench-small's update on
 * one H100 (dev/scripts/gpu_adam_variants.sh): fp32 moments 7.28 ms at W = 4, U = 4 (2 and 3
 * slower); bf16 moments at W = 4: 5.59 ms at U = 3, 5.71 at 2, 5.89 at 4 and 6, 7.94 at 8 (one
 * block an SM); at W = 8 (same call as W = 4, U = 3 at 5.60): 5.32 ms at U = 2 (94 registers,
 * 2.81 TB/s, fp32's rate), 5.54 at U = 1, 5.64 at U = 2 held to 3 blocks an SM; a one-multiply
 * hash instead of murmur's finaliser saved 0.1 ms. */
template <typename MT, int W, int U>
__global__ void __launch_bounds__(NT)
    adamw_kernel(float *__restrict__ p, const float *__restrict__ g, MT *__restrict__ m,
                 MT *__restrict__ v, const adam_chunk *__restrict__ chunks, adam_args a,
                 bf16 *__restrict__ pc) {
    zy_pdl_begin();
    constexpr bool RND = sizeof(MT) == 2;
    const adam_chunk ch = chunks[blockIdx.x];
    float *pp = p + ch.p;
    MT *mm = m + ch.s, *vv = v + ch.s;
    bf16 *cc = pc ? pc + ch.p : NULL; /* the bf16 compute copy, refreshed in the same pass */
    const float *gg = g + ch.p;
    const float decay = __fmul_rn(a.lr, ch.wd);
    const uint32_t hi0 = (uint32_t)(ch.p >> 32);
    const uint32_t key = RND ? zy_moment_key(a.round_step, hi0) : 0;
    uint32_t done = 0;
    if (ch.p % W == 0) {
        /* U groups per thread per round, every load issued before any arithmetic so that enough
         * bytes are in flight to keep HBM busy (the chunks are short) */
        const uint32_t nw = ch.n / W;
        for (uint32_t i0 = threadIdx.x; i0 < nw; i0 += NT * U) {
            float P[U][W], M[U][W], V[U][W], G[U][W];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const size_t e = (size_t)W * (i0 + u * NT);
                if (i0 + u * NT >= nw) break;
                zy_load<float, W>(pp + e, P[u]);
                load_moments<W>(mm + e, M[u]);
                load_moments<W>(vv + e, V[u]);
                zy_load<float, W>(gg + e, G[u]);
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                const size_t e = (size_t)W * (i0 + u * NT);
                if (i0 + u * NT >= nw) break;
#pragma unroll
                for (int k = 0; k < W; k++) {
                    const uint32_t r =
                        RND ? zy_moment_bits_at(ch.p + e + k, a.round_step, key, hi0) : 0;
                    adam_one<RND>(P[u][k], G[u][k], M[u][k], V[u][k], a, decay, r);
                }
                zy_store<float, W>(pp + e, P[u]);
                store_moments<W>(mm + e, M[u]);
                store_moments<W>(vv + e, V[u]);
                if (cc) store_copy<W>(cc + e, P[u]); /* ch.p % W == 0: aligned */
            }
        }
        done = nw * W;
    }
    for (uint32_t i = done + threadIdx.x; i < ch.n; i += NT) {
        const uint32_t r = RND ? zy_moment_bits_at(ch.p + i, a.round_step, key, hi0) : 0;
        float P = pp[i], M = load_moment(mm + i), V = load_moment(vv + i);
        adam_one<RND>(P, gg[i], M, V, a, decay, r);
        pp[i] = P;
        store_moment(mm + i, M);
        store_moment(vv + i, V);
        if (cc) cc[i] = __float2bfloat16_rn(P);
    }
}

/* ---- Muon element-wise kernels: grid (nchunk, count), block NT ---- */

/* Index in the X buffer of element e of a row-major [*, cols] matrix whose rows are ldx apart. */
__device__ __forceinline__ int64_t x_index(int64_t e, int64_t cols, int64_t ldx) {
    return ldx == cols ? e : (e / cols) * ldx + e % cols;
}

/* The Nesterov update from g and the already advanced momentum mi (optim_muon_momentum). */
__device__ __forceinline__ float muon_u(float g, float mi, float mu, int nesterov) {
    return nesterov ? __fadd_rn(g, __fmul_rn(mu, mi)) : mi;
}

/* VEC momenta from fp32 or bf16 storage and back (VEC 1, or 8: 16-byte aligned). */
template <int VEC, typename MT> __device__ __forceinline__ void load_mom(const MT *q, float *x) {
    if constexpr (VEC == 1)
        x[0] = load_moment(q);
    else
        load_moments<VEC>(q, x);
}
template <int VEC, typename MT> __device__ __forceinline__ void store_mom(MT *q, const float *x) {
    if constexpr (VEC == 1)
        store_moment(q, x[0]);
    else
        store_moments<VEC>(q, x);
}

/* mom = mu mom + g (with a bf16 momentum, MT, rounded as optim_muon_momentum rounds it with the
 * bits of (round_step, the element's index in params) before u reads it); part[m * nchunk +
 * chunk] = sum of u^2 over the block's chunk; X = bf16(u) unless X is NULL (the previous scheme,
 * whose normalise kernel recomputes u). */
template <int VEC, typename MT>
__global__ void __launch_bounds__(NT)
    muon_momentum_kernel(const float *__restrict__ g, MT *__restrict__ mom,
                         const uint64_t *__restrict__ goff, const uint64_t *__restrict__ moff,
                         int64_t mn, float mu, int nesterov, float gscale, float *__restrict__ part,
                         int64_t cols, int64_t ldx, int64_t sx, bf16 *__restrict__ X,
                         uint64_t round_step) {
    zy_pdl_begin();
    constexpr bool RND = sizeof(MT) == 2;
    const int m = blockIdx.y;
    const float *gm = g + goff[m];
    MT *mm = mom + moff[m];
    bf16 *xm = X ? X + (int64_t)m * sx : NULL;
    const int64_t lo = (int64_t)blockIdx.x * MUON_CH, hi = min(mn, lo + MUON_CH);
    const uint32_t hi0 = (uint32_t)((goff[m] + lo) >> 32);
    const uint32_t key = RND ? zy_moment_key(round_step, hi0) : 0;
    float acc = 0.0f;
    for (int64_t e = lo + (int64_t)threadIdx.x * VEC; e < hi; e += NT * VEC) {
        float gv[VEC], mv[VEC], uv[VEC];
        zy_load<float, VEC>(gm + e, gv);
        load_mom<VEC>(mm + e, mv);
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            gv[k] = __fmul_rn(gv[k], gscale);
            mv[k] = __fadd_rn(__fmul_rn(mu, mv[k]), gv[k]);
            if (RND)
                mv[k] = zy_round_moment(
                    mv[k], zy_moment_bits_at(goff[m] + e + k, round_step, key, hi0) & 0xffffu);
            uv[k] = muon_u(gv[k], mv[k], mu, nesterov);
            acc += uv[k] * uv[k];
        }
        store_mom<VEC>(mm + e, mv);
        if (!xm) continue;
        if (VEC > 1) /* cols % 8 == 0: rows are not padded */
            zy_store<bf16, VEC>(xm + e, uv);
        else
            xm[x_index(e, cols, ldx)] = __float2bfloat16_rn(uv[0]);
    }
    const float s = zy_block_sum(acc);
    if (threadIdx.x == 0) part[(int64_t)m * gridDim.x + blockIdx.x] = s;
}

/* 1 / (||u|| + 1e-7) of matrix m from its nchunk chunk sums (fixed order, double), into *inv;
 * the block's first warp computes it, every thread may read it after the barrier. */
__device__ __forceinline__ void muon_inv_norm(const float *__restrict__ part, int m, int nchunk,
                                              float *inv) {
    if (threadIdx.x < 32) {
        double s = 0;
        for (int j = threadIdx.x; j < nchunk; j += 32) s += part[(int64_t)m * nchunk + j];
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (threadIdx.x == 0) *inv = (float)(1.0 / (sqrt(s) + NS_EPS));
    }
    __syncthreads();
}

/* X *= 1 / (||u|| + 1e-7) in place over each matrix's rows * ldx elements (padding included:
 * nothing reads it), 8 at a time (ldx % 8 == 0, sx % 128 == 0); grid (chunks of MUON_CH, count). */
__global__ void __launch_bounds__(NT)
    muon_scale_kernel(const float *__restrict__ part, int nchunk, int64_t n, int64_t sx,
                      bf16 *__restrict__ X) {
    zy_pdl_begin();
    __shared__ float s_inv;
    const int m = blockIdx.y;
    muon_inv_norm(part, m, nchunk, &s_inv);
    const float inv = s_inv;
    bf16 *xm = X + (int64_t)m * sx;
    const int64_t lo = (int64_t)blockIdx.x * MUON_CH, hi = min(n, lo + MUON_CH);
    for (int64_t e = lo + (int64_t)threadIdx.x * 8; e < hi; e += NT * 8) {
        float v[8];
        zy_load<bf16, 8>(xm + e, v);
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = __fmul_rn(v[k], inv);
        zy_store<bf16, 8>(xm + e, v);
    }
}

/* The normalisation folded into the first Newton-Schulz step instead of a pass over X: per
 * matrix m (grid count, block 32) inv = 1 / (||u|| + 1e-7) from its chunk sums as
 * muon_scale_kernel computes it, and fold = [inv | inv^2 | a inv | a] (a: the first iteration's)
 * for the SYRKs of newton_schulz's first step (the last slot: AOL's B + a I, see there). */
__global__ void muon_fold_kernel(const float *__restrict__ part, int nchunk, int count, float a,
                                 float *__restrict__ fold) {
    zy_pdl_begin();
    __shared__ float s_inv;
    const int m = blockIdx.x;
    muon_inv_norm(part, m, nchunk, &s_inv);
    if (threadIdx.x == 0) {
        const float inv = s_inv;
        fold[m] = inv;
        fold[count + m] = __fmul_rn(inv, inv);
        fold[2 * count + m] = __fmul_rn(a, inv);
        fold[3 * count + m] = a;
    }
}

/* The upper blocks of each symmetric [s, s] matrix of G (rows ld apart, stride ss) from the lower
 * ones: G[r][c] = G[c][r] wherever c's block (of h rows) is right of r's; grid (tiles^2, count),
 * block (MIRROR_T, 8), through a shared tile so both sides are read and written by rows. */
__global__ void __launch_bounds__(MIRROR_T * 8)
    ns_mirror_kernel(bf16 *__restrict__ G, int64_t ld, int64_t ss, int tiles, int h) {
    zy_pdl_begin();
    __shared__ bf16 tile[MIRROR_T][MIRROR_T + 1];
    const int tr = blockIdx.x / tiles, tc = blockIdx.x % tiles; /* destination tile */
    if ((tc * MIRROR_T) / h <= (tr * MIRROR_T) / h) return;     /* not in an upper block */
    bf16 *g = G + (int64_t)blockIdx.y * ss;
    const int x = threadIdx.x;
    for (int y = threadIdx.y; y < MIRROR_T; y += 8) /* source: rows of tile (tc, tr) */
        tile[y][x] = g[(int64_t)(tc * MIRROR_T + y) * ld + tr * MIRROR_T + x];
    __syncthreads();
    for (int y = threadIdx.y; y < MIRROR_T; y += 8)
        g[(int64_t)(tr * MIRROR_T + y) * ld + tc * MIRROR_T + x] = tile[x][y];
}

/* The previous scheme's normalisation (optim_cuda_set_previous):
 * X = bf16(u * inv), inv = 1 / (||u|| + 1e-7) from the matrix's chunk sums (fixed order, double),
 * u recomputed from g and the advanced momentum exactly as the momentum kernel made it. */
template <int VEC, typename MT>
__global__ void __launch_bounds__(NT)
    muon_normalise_kernel(const float *__restrict__ g, const MT *__restrict__ mom,
                          const uint64_t *__restrict__ goff, const uint64_t *__restrict__ moff,
                          int64_t mn, int64_t cols, int64_t ldx, int64_t sx, float mu, int nesterov,
                          float gscale, const float *__restrict__ part, bf16 *__restrict__ X) {
    zy_pdl_begin();
    __shared__ float s_inv;
    const int m = blockIdx.y;
    muon_inv_norm(part, m, gridDim.x, &s_inv);
    const float inv = s_inv;
    const float *gm = g + goff[m];
    const MT *mm = mom + moff[m];
    bf16 *xm = X + (int64_t)m * sx;
    const int64_t lo = (int64_t)blockIdx.x * MUON_CH, hi = min(mn, lo + MUON_CH);
    for (int64_t e = lo + (int64_t)threadIdx.x * VEC; e < hi; e += NT * VEC) {
        float gv[VEC], mv[VEC], xv[VEC];
        zy_load<float, VEC>(gm + e, gv);
        load_mom<VEC>(mm + e, mv);
#pragma unroll
        for (int k = 0; k < VEC; k++)
            xv[k] = __fmul_rn(muon_u(__fmul_rn(gv[k], gscale), mv[k], mu, nesterov), inv);
        if (VEC > 1) /* cols % 8 == 0: rows are not padded */
            zy_store<bf16, VEC>(xm + e, xv);
        else
            xm[x_index(e, cols, ldx)] = __float2bfloat16_rn(xv[0]);
    }
}

/* p -= su * u + decay * p (optim_apply_update), u the final iterate. */
template <int VEC>
__global__ void __launch_bounds__(NT)
    muon_apply_kernel(float *__restrict__ p, const uint64_t *__restrict__ goff, int64_t mn,
                      int64_t cols, int64_t ldx, int64_t sx, const bf16 *__restrict__ X, float su,
                      float decay, bf16 *__restrict__ pc) {
    zy_pdl_begin();
    const int m = blockIdx.y;
    float *pm = p + goff[m];
    bf16 *cm = pc ? pc + goff[m] : NULL; /* the bf16 compute copy, refreshed in the same pass */
    const bf16 *xm = X + (int64_t)m * sx;
    const int64_t lo = (int64_t)blockIdx.x * MUON_CH, hi = min(mn, lo + MUON_CH);
    for (int64_t e = lo + (int64_t)threadIdx.x * VEC; e < hi; e += NT * VEC) {
        float pv[VEC], uv[VEC];
        zy_load<float, VEC>(pm + e, pv);
        if (VEC > 1)
            zy_load<bf16, VEC>(xm + e, uv);
        else
            uv[0] = __bfloat162float(xm[x_index(e, cols, ldx)]);
#pragma unroll
        for (int k = 0; k < VEC; k++)
            pv[k] = __fsub_rn(pv[k], __fadd_rn(__fmul_rn(su, uv[k]), __fmul_rn(decay, pv[k])));
        zy_store<float, VEC>(pm + e, pv);
        if (cm) zy_store<bf16, VEC>(cm + e, pv);
    }
}

/* AOL's factors (ns_coef.h) of each [s, s] Gram matrix of the batch (rows lds apart, stride ss):
 * d[m s + i] = (sum_j |A_ij|)^-1/2, 0 for an all-zero row. A warp per row, its lanes over the
 * columns (VEC at a time: s % 8 == 0) and then a shuffle tree: a fixed order. Grid (ceil(s / 8),
 * count), block NT. */
template <int VEC>
__global__ void __launch_bounds__(NT) ns_aol_sums_kernel(const bf16 *__restrict__ A, int64_t lds,
                                                         int64_t ss, int s, float *__restrict__ d) {
    zy_pdl_begin();
    const int m = blockIdx.y, i = blockIdx.x * (NT / 32) + threadIdx.x / 32,
              lane = threadIdx.x % 32;
    if (i >= s) return; /* a whole warp */
    const bf16 *row = A + (int64_t)m * ss + (int64_t)i * lds;
    float sum = 0.0f;
    for (int j = lane * VEC; j < s; j += 32 * VEC) {
        float v[VEC];
        zy_load<bf16, VEC>(row + j, v);
#pragma unroll
        for (int k = 0; k < VEC; k++) sum += fabsf(v[k]);
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) d[(int64_t)m * s + i] = sum > 0.0f ? rsqrtf(sum) : 0.0f;
}

/* G[i][j] = (G[i][j] + diag [i == j]) f dr[i] dc[j] over each [s, s] Gram matrix of the batch
 * (rows lds apart, stride ss), with dr, dc the matrix's row of AOL's factors ([count, s]; NULL: 1)
 * and f = fold[m] (NULL: 1); VEC columns at a time (s % 8 == 0). AOL's A~ = D A D (diag 0) and
 * B'' (ns_aol_poly). Grid (chunks of NT * 4 vectors, count), block NT. */
template <int VEC>
__global__ void __launch_bounds__(NT)
    ns_gram_scale_kernel(bf16 *__restrict__ G, int64_t lds, int64_t ss, int s,
                         const float *__restrict__ dr, const float *__restrict__ dc, float diag,
                         const float *__restrict__ fold) {
    zy_pdl_begin();
    const int m = blockIdx.y, cv = s / VEC;
    const float f = fold ? fold[m] : 1.0f;
    const float *rm = dr ? dr + (int64_t)m * s : NULL, *cm = dc ? dc + (int64_t)m * s : NULL;
    bf16 *mm = G + (int64_t)m * ss;
    const int nv = s * cv, v0 = blockIdx.x * NT * 4 + threadIdx.x; /* < 2^31: checked at plan */
    float x[4][VEC]; /* the four vectors' loads issued before any store */
    int64_t at[4];
#pragma unroll
    for (int e = 0; e < 4; e++) {
        const int v = v0 + e * NT;
        if (v >= nv) break;
        at[e] = (int64_t)(v / cv) * lds + (v % cv) * VEC;
        zy_load<bf16, VEC>(mm + at[e], x[e]);
    }
#pragma unroll
    for (int e = 0; e < 4; e++) {
        const int v = v0 + e * NT;
        if (v >= nv) break;
        const int i = v / cv, j = (v % cv) * VEC;
        const float ri = f * (rm ? rm[i] : 1.0f);
#pragma unroll
        for (int k = 0; k < VEC; k++)
            x[e][k] = (i == j + k ? x[e][k] + diag : x[e][k]) * (cm ? ri * cm[j + k] : ri);
        zy_store<bf16, VEC>(mm + at[e], x[e]);
    }
}

/* ---- Newton-Schulz GEMMs ---- */

/* ns_gram_scale_kernel over the batch's Gram matrices G (ga or gb), 8 columns at a time where s
 * allows. */
static void ns_gram_scale(zy_ctx *ctx, const ns_shape *sh, bf16 *G, const float *dr,
                          const float *dc, float diag, const float *fold) {
    const int s = (int)sh->s, vec = s % 8 == 0 ? 8 : 1;
    const int64_t nv = (int64_t)s * (s / vec), per = NT * 4;
    const dim3 g((unsigned)((nv + per - 1) / per), (unsigned)sh->count);
    if (vec == 8)
        zy_launch(ns_gram_scale_kernel<8>, g, NT, 0, cuda_stream(ctx), G, sh->lds, sh->ss, s, dr,
                  dc, diag, fold);
    else
        zy_launch(ns_gram_scale_kernel<1>, g, NT, 0, cuda_stream(ctx), G, sh->lds, sh->ss, s, dr,
                  dc, diag, fold);
    ZY_CUDA_CHECK_LAUNCH();
}

/* AOL on the first step's A (full: the SYRK's mirror or the whole product): its row factors d,
 * then A~ = D A D in place. */
static void ns_aol_gram(zy_ctx *ctx, const zy_optim_cuda *c, const ns_shape *sh) {
    const int s = (int)sh->s, n = sh->count;
    cudaStream_t st = cuda_stream(ctx);
    const dim3 gs((unsigned)((s + NT / 32 - 1) / (NT / 32)), (unsigned)n);
    if (s % 8 == 0)
        zy_launch(ns_aol_sums_kernel<8>, gs, NT, 0, st, (const bf16 *)c->ga, sh->lds, sh->ss, s,
                  c->aol_d);
    else
        zy_launch(ns_aol_sums_kernel<1>, gs, NT, 0, st, (const bf16 *)c->ga, sh->lds, sh->ss, s,
                  c->aol_d);
    ZY_CUDA_CHECK_LAUNCH();
    ns_gram_scale(ctx, sh, c->ga, c->aol_d, c->aol_d, 0.0f, NULL);
}

/* The first step's B'' = (B + a I) D (wide: X' = B'' X) or D (B + a I) (tall: X' = X B''), times
 * the folded normalisation where fold is given, in place of B; a = 0 where B holds B + a I
 * already (the SYRK added it before its one rounding). */
static void ns_aol_poly(zy_ctx *ctx, const zy_optim_cuda *c, const ns_shape *sh, float a,
                        const float *fold) {
    ns_gram_scale(ctx, sh, c->gb, sh->tall ? c->aol_d : NULL, sh->tall ? NULL : c->aol_d, a, fold);
}

/* The lower blocks of each [s, s] matrix of G copied onto the upper ones (kb block rows). */
static void ns_mirror(zy_ctx *ctx, const ns_shape *sh, int kb, bf16 *G) {
    const int tiles = (int)(sh->s / MIRROR_T);
    zy_launch(ns_mirror_kernel, dim3((unsigned)(tiles * tiles), (unsigned)sh->count),
              dim3(MIRROR_T, 8), 0, cuda_stream(ctx), G, sh->lds, sh->ss, tiles, (int)(sh->s / kb));
    ZY_CUDA_CHECK_LAUNCH();
}

/* `steps` quintic iterations on the count matrices of *x (swapping *x and *y as it goes): A and B
 * by the Hopper SYRK where sh says so and `syrk` allows (cuda_syrk_bf16: lower tiles, mirrored),
 * the rest through the context's GEMM module (classic cuBLAS for every GEMM while the test hook
 * says so), A and B by kb block rows, mirrored. With fold (muon_fold_kernel's [inv | inv^2 |
 * a inv | a], A and B by the SYRK), *x holds u unnormalised and the first step takes the scale in:
 *     A = inv^2 U U^T,   B' = inv (c A A + b A) + a inv I,   X' = B' U   (X U or U X: tall, wide)
 * which is the quintic step on X = inv U with the a X term inside B'. With aol (ns_coef.h) the
 * first step is the quintic step on X~ = D X (X = inv U where folded, D = diag(d)) without
 * writing X~: A~ = D A D (ns_aol_gram), B = c A~ A~ + b A~, and X' = B'' X with
 *     B'' = (B + a I) D (wide) or D (B + a I) (tall)     (ns_aol_poly; times inv where folded)
 * so the first step's extra passes are over [s, s] matrices only. */
static void newton_schulz(zy_ctx *ctx, zy_optim_cuda *c, const ns_shape *sh, int kb, int syrk,
                          const float *fold, int aol, int steps, const float (*abc)[3], bf16 **x,
                          bf16 **y) {
    cuda_gemm_ctx *gc = &cuda_st(ctx)->gemm;
    const int s = (int)sh->s, n = sh->count;
    for (int it = 0; it < steps; it++) {
        const int folded_a = fold && it == 0, folded = folded_a && !aol, aol0 = aol && it == 0;
        /* AOL's first B + a I summed inside the B SYRK: B rounded alone to bf16 first would lose
         * B_ii + a to cancellation where B_ii ~ -a (fold's last slot holds a) */
        const int aol_syrk = aol0 && folded_a; /* fold: A and B by the SYRK */
        const float *kq = abc[it];
        for (int k = 0; k < 3; k++) {
            if (k == 1 && aol0) ns_aol_gram(ctx, c, sh);
            if (syrk && k == 0 && sh->syrk_a) { /* A = X X^T (X [s, l]) or X^T X (X [l, s]) */
                const cuda_syrk_scales pa = {fold + n, NULL, NULL};
                ZY_STATUS_CHECK(cuda_syrk_bf16(c->ga, NULL, *x, s, (int)sh->l, sh->tall, sh->ldx,
                                               sh->sx, sh->lds, sh->ss, n, 1.0f, 0.0f,
                                               folded_a ? &pa : NULL, cuda_stream(ctx)));
            } else if (syrk && k == 1 && sh->syrk_b) { /* B = c A A^T + b A, A symmetric */
                const cuda_syrk_scales pb = {fold, fold, fold + 2 * n}, /* folded: B' */
                    pb_aol = {NULL, NULL, fold + 3 * n};                /* AOL, folded: B + a I */
                ZY_STATUS_CHECK(cuda_syrk_bf16(c->gb, c->ga, c->ga, s, s, 0, sh->lds, sh->ss,
                                               sh->lds, sh->ss, n, kq[2], kq[1],
                                               folded     ? &pb
                                               : aol_syrk ? &pb_aol
                                                          : NULL,
                                               cuda_stream(ctx)));
            } else {
                for (int i = 0; i < (k == 2 ? 1 : kb); i++) {
                    cuda_gemm_desc g = ns_desc(sh, k, i, kb, kq);
                    g.classic = c->legacy;
                    if ((folded || aol0) && k == 2) g.beta = 0.0f; /* a X: in B' (B'') */
                    const ns_ops o = ns_operands(c, sh, k, i, kb, *x, *y);
                    ZY_STATUS_CHECK(cuda_gemm_run(gc, &g, o.D, o.C, o.A, o.B, cuda_stream(ctx)));
                }
                if (k < 2 && kb > 1) ns_mirror(ctx, sh, kb, k == 0 ? c->ga : c->gb);
            }
            if (k == 1 && aol0)
                ns_aol_poly(ctx, c, sh, aol_syrk ? 0.0f : kq[0], folded_a ? fold : NULL);
        }
        bf16 *tmp = *x;
        *x = *y;
        *y = tmp;
    }
}

/* Launches kernel<8> or kernel<1> over grid (nchunk, count). */
#define MUON_LAUNCH(kernel, b, ...)                                                                \
    do {                                                                                           \
        dim3 grid_((unsigned)(b)->nchunk, (unsigned)(b)->count);                                   \
        if ((b)->vec == 8)                                                                         \
            zy_launch(kernel<8>, grid_, NT, 0, cuda_stream(ctx), __VA_ARGS__);                     \
        else                                                                                       \
            zy_launch(kernel<1>, grid_, NT, 0, cuda_stream(ctx), __VA_ARGS__);                     \
        ZY_CUDA_CHECK_LAUNCH();                                                                    \
    } while (0)
/* The same for a kernel over the momentum (kernel<VEC, MT>(g, mom, ...)), MT its live type. */
#define MUON_LAUNCH_MT(kernel, MT, b, ...)                                                         \
    do {                                                                                           \
        dim3 grid_((unsigned)(b)->nchunk, (unsigned)(b)->count);                                   \
        if ((b)->vec == 8)                                                                         \
            zy_launch(kernel<8, MT>, grid_, NT, 0, cuda_stream(ctx), __VA_ARGS__);                 \
        else                                                                                       \
            zy_launch(kernel<1, MT>, grid_, NT, 0, cuda_stream(ctx), __VA_ARGS__);                 \
        ZY_CUDA_CHECK_LAUNCH();                                                                    \
    } while (0)
#define MUON_LAUNCH_MOM(kernel, b, g, ...)                                                         \
    do {                                                                                           \
        if (opt->momentum_bf16)                                                                    \
            MUON_LAUNCH_MT(kernel, bf16, b, g, (bf16 *)opt->momentum, __VA_ARGS__);                \
        else                                                                                       \
            MUON_LAUNCH_MT(kernel, float, b, g, (float *)opt->momentum, __VA_ARGS__);              \
    } while (0)

void optim_cuda_adamw(zy_ctx *ctx, zy_optim_cuda *c, const zy_optim *opt, float *params,
                      const float *grads, float lr_now, float gscale, double bc1, double bc2,
                      int first, int last) {
    const zy_optim_config *cfg = &opt->cfg;
    const int k0 = c->chunk_at[first], k1 = c->chunk_at[last];
    if (k1 == k0) return;
    int slot = prof_begin(ctx);
    adam_args a; /* the host numbers exactly as optim_adamw_update makes them */
    a.lr = lr_now;
    a.beta1 = cfg->beta1;
    a.beta2 = cfg->beta2;
    a.omb1 = 1.0f - cfg->beta1;
    a.omb2 = 1.0f - cfg->beta2;
    a.eps = cfg->eps;
    a.step = (float)(lr_now / bc1);
    a.inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
    a.gscale = gscale;
    a.round_step = (uint64_t)opt->step;
    if (opt->moments_bf16)
        zy_launch(adamw_kernel<bf16, ADAM_W_BF16, ADAM_U_BF16>, (unsigned)(k1 - k0), NT, 0,
                  cuda_stream(ctx), params, grads, (bf16 *)opt->exp_avg, (bf16 *)opt->exp_avg_sq,
                  c->chunks + k0, a, (bf16 *)opt->compute_copy);
    else
        zy_launch(adamw_kernel<float, 4, ADAM_U>, (unsigned)(k1 - k0), NT, 0, cuda_stream(ctx),
                  params, grads, (float *)opt->exp_avg, (float *)opt->exp_avg_sq, c->chunks + k0, a,
                  (bf16 *)opt->compute_copy);
    ZY_CUDA_CHECK_LAUNCH();
    prof_end(ctx, slot, "optim_adamw");
}

int optim_cuda_has_muon(const zy_optim_cuda *c) {
    return c->nbatches > 0;
}

void optim_cuda_step(zy_ctx *ctx, zy_optim_cuda *c, const zy_optim *opt, float *params,
                     const float *grads, float lr_now, float gscale, double bc1, double bc2) {
    optim_cuda_adamw(ctx, c, opt, params, grads, lr_now, gscale, bc1, bc2, 0, opt->n_params);
    optim_cuda_muon(ctx, c, opt, params, grads, lr_now, gscale);
}

/* The batches [b0, b1): momentum, Newton-Schulz and the apply of each. */
static void muon_batches(zy_ctx *ctx, zy_optim_cuda *c, const zy_optim *opt, float *params,
                         const float *grads, float lr_now, float gscale, int b0, int b1) {
    const zy_optim_config *cfg = &opt->cfg;
    if (b1 <= b0) return;
    const int slot = prof_begin(ctx);
    const float lr = lr_now * cfg->muon_lr_ratio, mu = cfg->muon_momentum;
    const float wd = (cfg->decay_kinds & ZY_KIND_BIT(ZY_PARAM_MATRIX)) ? cfg->weight_decay : 0.0f;
    const float decay = lr * wd;
    const int nesterov = cfg->muon_nesterov;
    /* a bf16 momentum's rounding bits (optim_muon_momentum) */
    const uint64_t round_step = opt->momentum_bf16 ? (uint64_t)opt->step : 0;
    for (int i = b0; i < b1; i++) {
        const muon_batch *b = &c->batches[i];
        const ns_shape *sh = &c->shapes[b->shape];
        const int64_t mn = sh->rows * sh->cols;
        const uint64_t *goff = c->goff + b->first, *moff = c->moff + b->first;
        if (c->previous) { /* momentum, then u recomputed, normalised and cast; whole products */
            MUON_LAUNCH_MOM(muon_momentum_kernel, b, grads, goff, moff, mn, mu, nesterov, gscale,
                            c->part, sh->cols, sh->ldx, sh->sx, (bf16 *)NULL, round_step);
            MUON_LAUNCH_MOM(muon_normalise_kernel, b, grads, goff, moff, mn, sh->cols, sh->ldx,
                            sh->sx, mu, nesterov, gscale, c->part, c->x[0]);
        }
        const int syrk = !c->previous && !c->legacy && !c->no_syrk;
        const int fold = syrk && sh->syrk_a && sh->syrk_b && cfg->muon_ns_steps > 0;
        if (!c->previous) { /* momentum writing bf16 u; then X scaled in place, or the scale
                             * folded into the first Newton-Schulz step */
            MUON_LAUNCH_MOM(muon_momentum_kernel, b, grads, goff, moff, mn, mu, nesterov, gscale,
                            c->part, sh->cols, sh->ldx, sh->sx, c->x[0], round_step);
            if (fold) {
                zy_launch(muon_fold_kernel, (unsigned)b->count, 32, 0, cuda_stream(ctx), c->part,
                          b->nchunk, b->count, opt->ns_abc[0][0], c->fold);
            } else {
                const int64_t nx = sh->rows * sh->ldx;
                zy_launch(muon_scale_kernel,
                          dim3((unsigned)((nx + MUON_CH - 1) / MUON_CH), (unsigned)b->count), NT, 0,
                          cuda_stream(ctx), c->part, b->nchunk, nx, sh->sx, c->x[0]);
            }
            ZY_CUDA_CHECK_LAUNCH();
        }
        bf16 *x = c->x[0], *y = c->x[1];
        const int kb = c->previous || c->legacy ? 1 : sh->kb; /* blocks need cuBLASLt */
        newton_schulz(ctx, c, sh, kb, syrk, fold ? c->fold : NULL,
                      cfg->muon_ns_precond == ZY_NS_PRECOND_AOL, cfg->muon_ns_steps, opt->ns_abc,
                      &x, &y);
        const float su = lr * b->scale;
        MUON_LAUNCH(muon_apply_kernel, b, params, goff, mn, sh->cols, sh->ldx, sh->sx, x, su, decay,
                    (bf16 *)opt->compute_copy);
    }
    prof_end(ctx, slot, "optim_muon");
}

void optim_cuda_muon(zy_ctx *ctx, zy_optim_cuda *c, const zy_optim *opt, float *params,
                     const float *grads, float lr_now, float gscale) {
    muon_batches(ctx, c, opt, params, grads, lr_now, gscale, 0, c->nbatches);
}

int optim_cuda_keyed(const zy_optim_cuda *c) {
    return c->keyed;
}

void optim_cuda_muon_key(zy_ctx *ctx, zy_optim_cuda *c, const zy_optim *opt, float *params,
                         const float *grads, float lr_now, float gscale, int key) {
    int b0 = 0;
    while (b0 < c->nbatches && c->batches[b0].key != key) b0++;
    int b1 = b0;
    while (b1 < c->nbatches && c->batches[b1].key == key) b1++; /* together: checked at plan */
    muon_batches(ctx, c, opt, params, grads, lr_now, gscale, b0, b1);
}

/* ---- clipping ---- */

/* Up to SEG_MAX segments [off, off + len) of the flat gradient buffer; segment i owns blocks
 * blk0[i] .. blk0[i+1]-1 of a launch, CLIP_CH elements each. */
typedef struct {
    int n;
    uint32_t blk0[SEG_MAX + 1];
    uint64_t off[SEG_MAX], len[SEG_MAX];
} seg_list;

/* Fills L with the next segments of t's non-buffer tensors from tensor *next on (contiguous
 * tensors merged); returns 0 when there are none left. */
static int seg_fill(const zy_param_table *t, int *next, seg_list *L) {
    L->n = 0;
    L->blk0[0] = 0;
    int i = *next;
    for (; i < t->count; i++) {
        const zy_param *p = &t->items[i];
        if (p->kind == ZY_PARAM_BUFFER || p->numel == 0) continue;
        if (L->n > 0 && L->off[L->n - 1] + L->len[L->n - 1] == p->offset) {
            L->len[L->n - 1] += p->numel;
            continue;
        }
        if (L->n == SEG_MAX) break;
        L->off[L->n] = p->offset;
        L->len[L->n] = p->numel;
        L->n++;
    }
    *next = i;
    for (int k = 0; k < L->n; k++) {
        const uint64_t blocks = (L->len[k] + CLIP_CH - 1) / CLIP_CH;
        ZY_CHECK(L->blk0[k] + blocks < (1u << 31));
        L->blk0[k + 1] = L->blk0[k] + (uint32_t)blocks;
    }
    return L->n > 0;
}

/* The segment of block b and the block's range [*lo, *hi) of the buffer. */
__device__ __forceinline__ void seg_range(const seg_list &L, uint32_t b, uint64_t *lo,
                                          uint64_t *hi) {
    int a = 0, z = L.n - 1;
    while (a < z) { /* the last segment whose first block is <= b */
        const int mid = (a + z + 1) / 2;
        if (L.blk0[mid] <= b)
            a = mid;
        else
            z = mid - 1;
    }
    *lo = L.off[a] + (uint64_t)(b - L.blk0[a]) * CLIP_CH;
    const uint64_t end = L.off[a] + L.len[a];
    *hi = *lo + CLIP_CH < end ? *lo + CLIP_CH : end;
}

/* Sum of v over the block (thread 0 gets it), in a fixed order. */
__device__ __forceinline__ double block_sum_d(double v) {
    __shared__ double part[32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) part[warp] = v;
    __syncthreads();
    v = 0;
    if (warp == 0) {
        v = lane < nw ? part[lane] : 0.0;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    }
    return v;
}

__global__ void __launch_bounds__(NT)
    sumsq_kernel(const float *__restrict__ g, const seg_list L, double *__restrict__ part) {
    zy_pdl_begin();
    uint64_t lo, hi;
    seg_range(L, blockIdx.x, &lo, &hi);
    double acc = 0;
    uint64_t i = lo;
    if (lo % 4 == 0) {
        const uint64_t n4 = (hi - lo) / 4;
        const float4 *g4 = reinterpret_cast<const float4 *>(g + lo);
        for (uint64_t j = threadIdx.x; j < n4; j += NT) {
            const float4 x = g4[j];
            acc += (double)x.x * x.x + (double)x.y * x.y + (double)x.z * x.z + (double)x.w * x.w;
        }
        i = lo + n4 * 4;
    }
    for (uint64_t j = i + threadIdx.x; j < hi; j += NT) acc += (double)g[j] * g[j];
    acc = block_sum_d(acc);
    if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

__global__ void __launch_bounds__(1024)
    sum_final_kernel(const double *__restrict__ part, int n, double *__restrict__ out) {
    zy_pdl_begin();
    double s = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += part[i];
    s = block_sum_d(s);
    if (threadIdx.x == 0) *out = s;
}

double optim_cuda_sumsq(zy_ctx *ctx, const zy_param_table *t, const float *grads) {
    seg_list L;
    int64_t total = 0;
    for (int next = 0; seg_fill(t, &next, &L);) total += L.blk0[L.n];
    if (total == 0) return 0.0;
    ZY_CHECK(total < (1 << 30));
    double *part = (double *)cuda_ws(ctx, (size_t)(total + 1) * sizeof(double));
    cudaStream_t st = cuda_stream(ctx);
    const int slot = prof_begin(ctx);
    int64_t base = 0;
    for (int next = 0; seg_fill(t, &next, &L);) {
        zy_launch(sumsq_kernel, L.blk0[L.n], NT, 0, st, grads, L, part + base);
        ZY_CUDA_CHECK_LAUNCH();
        base += L.blk0[L.n];
    }
    zy_launch(sum_final_kernel, 1, 1024, 0, st, part, (int)total, part + total);
    ZY_CUDA_CHECK_LAUNCH();
    prof_end(ctx, slot, "clip_sumsq");
    double out = 0;
    ZY_CUDA_CHECK(cudaMemcpyAsync(&out, part + total, sizeof out, cudaMemcpyDeviceToHost, st));
    ZY_CUDA_CHECK(cudaStreamSynchronize(st));
    return out;
}

/* ---- balancing biases ---- */

#define BIAS_MAXL 24
#define BIAS_MAXV 768

typedef struct {
    int nl, n;
    float *ptr[BIAS_MAXL];
    float delta[BIAS_MAXV]; /* [nl, n] */
} bias_list;

/* bias -= delta, then the canonical shift (optim/balance.h), as balance_apply: each
 * layer's biases are read into shared memory before any is written, since every class needs the
 * layer's skip bias. __fsub_rn/__fadd_rn keep the host's rounding (no contraction). */
__global__ void bias_sub_kernel(const bias_list L) {
    zy_pdl_begin();
    __shared__ float skip_shift[BIAS_MAXL];
    __shared__ float old_bias[BIAS_MAXV];
    for (int i = threadIdx.x; i < L.nl * L.n; i += blockDim.x)
        old_bias[i] = *(L.ptr[i / L.n] + i % L.n);
    __syncthreads();
    for (int l = threadIdx.x; l < L.nl; l += blockDim.x) {
        const int k = l * L.n + L.n - 1;
        skip_shift[l] = __fadd_rn(__fsub_rn(old_bias[k], L.delta[k]), 1.0f);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < L.nl * L.n; i += blockDim.x) {
        const int l = i / L.n, e = i % L.n;
        L.ptr[l][e] = e == L.n - 1 ? ZY_SKIP_BIAS
                                   : __fsub_rn(__fsub_rn(old_bias[i], L.delta[i]), skip_shift[l]);
    }
}

void optim_cuda_bias_sub(zy_ctx *ctx, float *const *biases, const float *delta, int n_layers,
                         int n) {
    ZY_CHECKF(n >= 1 && n <= BIAS_MAXV, "balancing: %d classes per layer (at most %d on CUDA)", n,
              BIAS_MAXV);
    int per = BIAS_MAXV / n;
    if (per > BIAS_MAXL) per = BIAS_MAXL;
    bias_list L;
    const int slot = prof_begin(ctx);
    for (int l0 = 0; l0 < n_layers; l0 += per) {
        L.nl = n_layers - l0 < per ? n_layers - l0 : per;
        L.n = n;
        for (int l = 0; l < L.nl; l++) {
            L.ptr[l] = biases[l0 + l];
            memcpy(L.delta + (size_t)l * n, delta + (size_t)(l0 + l) * n,
                   (size_t)n * sizeof(float));
        }
        zy_launch(bias_sub_kernel, 1, NT, 0, cuda_stream(ctx), L);
        ZY_CUDA_CHECK_LAUNCH();
    }
    prof_end(ctx, slot, "balance_bias");
}
