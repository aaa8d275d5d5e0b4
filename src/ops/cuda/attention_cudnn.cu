/* Causal GQA attention through cuDNN (attention_cudnn.h): the forward and backward operation graphs
 * of cudnn-frontend's composite SDPA nodes, written against the backend API (cudnn_graph.h), with
 * strides for zayac's token-major rows, and a cache of their plans per shape. */
#include "ops/cuda/attention_cudnn.h"
#include "ops/cuda/cudnn_graph.h"

#include "base/err.h"

#include <cuda_runtime.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

long cudnn_attn_version(void) {
    return cudnn_lib_version();
}

#if !ZY_HAVE_CUDNN

int cudnn_attn_create(cudnn_attn **out, cudaStream_t s) {
    *out = NULL;
    return cudnn_lib_load(); /* fails, saying the headers were missing */
}
void cudnn_attn_destroy(cudnn_attn *a) {}
int cudnn_attn_prepare(cudnn_attn *a, const cudnn_attn_shape *sh, size_t *f, size_t *b) {
    return zy_fail_runtime("cuDNN unavailable: zayac was built without the cuDNN headers");
}
int cudnn_attn_seen(cudnn_attn *a, const cudnn_attn_shape *sh) {
    return 0;
}
const char *cudnn_attn_describe(cudnn_attn *a, const cudnn_attn_shape *sh) {
    return "";
}
int cudnn_attn_fwd(cudnn_attn *a, const cudnn_attn_shape *sh, const void *q, const void *k,
                   const void *v, void *out, float *lse, void *ws, size_t ws_bytes) {
    return cudnn_attn_prepare(a, sh, NULL, NULL);
}
int cudnn_attn_bwd(cudnn_attn *a, const cudnn_attn_shape *sh, const void *dout, const void *q,
                   const void *k, const void *v, const void *out, const float *lse, void *dq,
                   void *dk, void *dv, void *ws, size_t ws_bytes) {
    return cudnn_attn_prepare(a, sh, NULL, NULL);
}

#else

/* The unique ids of the tensors the caller passes (virtual ones count from 1000). */
enum {
    U_Q = 1,
    U_K,
    U_V,
    U_O,
    U_STATS,
    U_SCALE,
    U_NEG_INF,
    U_WINDOW,
    U_DO,
    U_DQ,
    U_DK,
    U_DV,
    U_ROWSUM,
    U_ONE,
    U_SEQ_Q,
    U_SEQ_KV,
    U_DQ_ACCUM
};

#define ALIGN_UP(x) (((x) + 255) & ~(size_t)255)

/* One shape's plans, or the reason cuDNN refused it. */
typedef struct {
    cudnn_attn_shape key;
    int ok;
    char reason[512];
    cg_graph fwd, bwd;
    int pad;         /* backward with the padding-mask workaround (seq lengths in seqlen) */
    int32_t *seqlen; /* device [2B]: T for every sequence, queries then keys */
    /* the values of the by-value scalars, alive as long as the plans */
    float scale, neg_inf, window, one;
    /* backward workspace: [row sums | dq accumulator | cuDNN's] */
    size_t rowsum_bytes, accum_bytes, bwd_ws, fwd_ws;
    char desc[200];
} attn_plan;

struct cudnn_attn {
    cudnnHandle_t handle;
    attn_plan **plans;
    int nplans;
};

int cudnn_attn_create(cudnn_attn **out, cudaStream_t s) {
    *out = NULL;
    ZY_TRY(cudnn_lib_load());
    cudnn_attn *a = (cudnn_attn *)calloc(1, sizeof *a);
    if (!a) return zy_fail_runtime("out of host memory");
    cudnnStatus_t st = cudnn_fn.create(&a->handle);
    if (st == CUDNN_STATUS_SUCCESS) {
        st = cudnn_fn.set_stream(a->handle, s);
        if (st != CUDNN_STATUS_SUCCESS) cudnn_fn.destroy(a->handle);
    }
    if (st != CUDNN_STATUS_SUCCESS) {
        free(a);
        return zy_fail_runtime("cuDNN: cudnnCreate/cudnnSetStream: %s", cudnn_fn.error_string(st));
    }
    *out = a;
    return ZY_OK;
}

void cudnn_attn_destroy(cudnn_attn *a) {
    if (!a) return;
    for (int i = 0; i < a->nplans; i++) {
        attn_plan *p = a->plans[i];
        cg_free(&p->fwd);
        cg_free(&p->bwd);
        if (p->seqlen) cudaFree(p->seqlen);
        free(p);
    }
    free(a->plans);
    cudnn_fn.destroy(a->handle);
    free(a);
}

/* ---- layouts ---- */

static cg_layout layout(int64_t d0, int64_t d1, int64_t d2, int64_t d3, int64_t s0, int64_t s1,
                        int64_t s2, int64_t s3) {
    cg_layout l = {{d0, d1, d2, d3}, {s0, s1, s2, s3}};
    return l;
}
/* [B, H, T, d] over token-major rows [B*T, H*d] (q, k, v, out and their gradients). */
static cg_layout rows_bhtd(int64_t B, int64_t H, int64_t T, int64_t d) {
    return layout(B, H, T, d, T * H * d, d, H * d, 1);
}
/* The same transposed in its last two dims, [B, H, d, T] (K and V as the products read them). */
static cg_layout rows_bhdt(int64_t B, int64_t H, int64_t T, int64_t d) {
    return layout(B, H, d, T, T * H * d, d, 1, H * d);
}
/* Scores [B, H, T, T] and their transpose (a view with swapped strides). */
static cg_layout scores(int64_t B, int64_t H, int64_t T) {
    return layout(B, H, T, T, H * T * T, T * T, T, 1);
}
static cg_layout scores_t(int64_t B, int64_t H, int64_t T) {
    return layout(B, H, T, T, H * T * T, T * T, 1, T);
}
/* Per-row values [B, H, T, 1] (lse, row sums), zayac's lse layout [B, H, T]. */
static cg_layout per_row(int64_t B, int64_t H, int64_t T) {
    return layout(B, H, T, 1, H * T, T, 1, 1);
}
/* A gradient per query head before the sum over a key head's group, [B, Hq, T, d] dense. */
static cg_layout per_head(int64_t B, int64_t H, int64_t T, int64_t d) {
    return layout(B, H, T, d, H * T * d, T * d, d, 1);
}

/* ---- the graphs ---- */

/* s with -inf where query t (axis 2) may not see key c (axis 3): c > t, and c <= t - window when
 * window is given (the value of the window as a float scalar). The right bound, then the left,
 * each with its own index generators, as cudnn-frontend's diagonal band nodes lay them out (the
 * fusion matches these patterns). */
static cg_desc mask_band(cg_graph *g, cg_desc s, cg_layout l, cg_desc neg_inf, cg_desc window) {
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT, i32 = CUDNN_DATA_INT32, b = CUDNN_DATA_BOOLEAN;
    cg_desc row = cg_virtual(g, i32, l), col = cg_virtual(g, i32, l);
    cg_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, f32, s, NULL, NULL, row, 2);
    cg_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, f32, s, NULL, NULL, col, 3);
    cg_desc keep = cg_pw(g, CUDNN_POINTWISE_CMP_GE, b, row, col, NULL, b, l);
    s = cg_pw(g, CUDNN_POINTWISE_BINARY_SELECT, f32, s, neg_inf, keep, f32, l);
    if (!window) return s;
    row = cg_virtual(g, i32, l), col = cg_virtual(g, i32, l);
    cg_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, f32, s, NULL, NULL, row, 2);
    cg_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, f32, s, NULL, NULL, col, 3);
    cg_desc shifted = cg_pw(g, CUDNN_POINTWISE_ADD, f32, col, window, NULL, f32, l);
    keep = cg_pw(g, CUDNN_POINTWISE_CMP_GT, b, shifted, row, NULL, b, l);
    return cg_pw(g, CUDNN_POINTWISE_BINARY_SELECT, f32, s, neg_inf, keep, f32, l);
}

/* s with -inf outside the first seq_q rows and seq_kv columns of each sequence: the workaround
 * cudnn-frontend applies to the backward when T is not a multiple of 128 on cuDNN <= 9.15. */
static cg_desc mask_padding(cg_graph *g, cg_desc s, cg_layout l, cg_desc neg_inf, cg_desc seq_q,
                            cg_desc seq_kv) {
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT, i32 = CUDNN_DATA_INT32, b = CUDNN_DATA_BOOLEAN;
    cg_desc row = cg_virtual(g, i32, l), col = cg_virtual(g, i32, l);
    cg_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, i32, s, NULL, NULL, row, 2);
    cg_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, i32, s, NULL, NULL, col, 3);
    cg_desc in_q = cg_pw(g, CUDNN_POINTWISE_CMP_LT, b, row, seq_q, NULL, b, l);
    cg_desc in_kv = cg_pw(g, CUDNN_POINTWISE_CMP_LT, b, col, seq_kv, NULL, b, l);
    cg_desc keep = cg_pw(g, CUDNN_POINTWISE_LOGICAL_AND, b, in_q, in_kv, NULL, b, l);
    return cg_pw(g, CUDNN_POINTWISE_BINARY_SELECT, f32, s, neg_inf, keep, f32, l);
}

/* out = softmax(mask(scale q k^T)) v and the stats (lse). */
static void build_fwd(cg_graph *g, const cudnn_attn_shape *sh) {
    const int64_t B = sh->B, T = sh->T, Hq = sh->Hq, Hk = sh->Hk, d = sh->d;
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT, bf16 = CUDNN_DATA_BFLOAT16;
    const cg_layout ls = scores(B, Hq, T), lr = per_row(B, Hq, T);
    cg_desc q = cg_tensor(g, U_Q, bf16, rows_bhtd(B, Hq, T, d));
    cg_desc kt = cg_tensor(g, U_K, bf16, rows_bhdt(B, Hk, T, d));
    cg_desc v = cg_tensor(g, U_V, bf16, rows_bhtd(B, Hk, T, d));
    cg_desc o = cg_tensor(g, U_O, bf16, rows_bhtd(B, Hq, T, d));
    cg_desc stats = cg_tensor(g, U_STATS, f32, lr);
    cg_desc scale = cg_scalar(g, U_SCALE, f32), neg_inf = cg_scalar(g, U_NEG_INF, f32);
    cg_desc window = sh->window > 0 ? cg_scalar(g, U_WINDOW, f32) : NULL;

    cg_desc s = cg_virtual(g, f32, ls); /* [B, Hq, T, T] */
    cg_matmul(g, q, kt, s, NULL, NULL, NULL);
    s = cg_pw(g, CUDNN_POINTWISE_MUL, f32, s, scale, NULL, f32, ls);
    s = mask_band(g, s, ls, neg_inf, window);
    /* softmax with its stats: max, exp(s - max), their sum, stats = max + log(sum) */
    cg_desc mx = cg_virtual(g, f32, lr), sum = cg_virtual(g, f32, lr);
    cg_reduction(g, CUDNN_REDUCE_TENSOR_MAX, s, mx);
    cg_desc e = cg_pw(g, CUDNN_POINTWISE_SUB, f32, s, mx, NULL, f32, ls);
    e = cg_pw(g, CUDNN_POINTWISE_EXP, f32, e, NULL, NULL, f32, ls);
    cg_reduction(g, CUDNN_REDUCE_TENSOR_ADD, e, sum);
    cg_desc log_sum = cg_pw(g, CUDNN_POINTWISE_LOG, f32, sum, NULL, NULL, f32, lr);
    cg_pointwise(g, CUDNN_POINTWISE_ADD, f32, mx, log_sum, NULL, stats, -1);
    /* the probabilities in bf16 for the PV product */
    cg_desc p = cg_pw(g, CUDNN_POINTWISE_DIV, f32, e, sum, NULL, bf16, ls);
    cg_matmul(g, p, v, o, NULL, NULL, NULL);
}

/* dq, dk, dv from dout and the forward's tensors: P = exp(mask(scale q k^T) - lse), dv = P^T dout,
 * dS = P (dout v^T - rowsum(dout * out)) scale, dk = dS^T q, dq = dS k; with GQA the per-query-
 * head dk, dv are summed over each key head's group. deterministic: dq straight from the product
 * (no fp32 accumulator, the dP-workspace kernel); otherwise through an fp32 accumulator that
 * cuDNN fills with atomics. */
static void build_bwd(cg_graph *g, const cudnn_attn_shape *sh, int pad) {
    const int64_t B = sh->B, T = sh->T, Hq = sh->Hq, Hk = sh->Hk, d = sh->d;
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT, bf16 = CUDNN_DATA_BFLOAT16;
    const cg_layout ls = scores(B, Hq, T), lst = scores_t(B, Hq, T), lr = per_row(B, Hq, T);
    cg_desc q = cg_tensor(g, U_Q, bf16, rows_bhtd(B, Hq, T, d));
    cg_desc kt = cg_tensor(g, U_K, bf16, rows_bhdt(B, Hk, T, d));
    cg_desc vt = cg_tensor(g, U_V, bf16, rows_bhdt(B, Hk, T, d));
    cg_desc o = cg_tensor(g, U_O, bf16, rows_bhtd(B, Hq, T, d));
    cg_desc dout = cg_tensor(g, U_DO, bf16, rows_bhtd(B, Hq, T, d));
    cg_desc stats = cg_tensor(g, U_STATS, f32, lr);
    cg_desc dq = cg_tensor(g, U_DQ, bf16, rows_bhtd(B, Hq, T, d));
    cg_desc dk = cg_tensor(g, U_DK, bf16, rows_bhtd(B, Hk, T, d));
    cg_desc dv = cg_tensor(g, U_DV, bf16, rows_bhtd(B, Hk, T, d));
    cg_desc scale = cg_scalar(g, U_SCALE, f32), neg_inf = cg_scalar(g, U_NEG_INF, f32);
    cg_desc one = cg_scalar(g, U_ONE, f32);
    cg_desc window = sh->window > 0 ? cg_scalar(g, U_WINDOW, f32) : NULL;
    cg_desc seq_q = NULL, seq_kv = NULL;
    if (pad) {
        const cg_layout lb = layout(B, 1, 1, 1, 1, 1, 1, 1);
        seq_q = cg_tensor(g, U_SEQ_Q, CUDNN_DATA_INT32, lb);
        seq_kv = cg_tensor(g, U_SEQ_KV, CUDNN_DATA_INT32, lb);
    }

    /* row sums D = rowsum(dout * out), [B, Hq, T, 1], kept in the workspace */
    cg_desc prod = cg_pw(g, CUDNN_POINTWISE_MUL, f32, dout, o, NULL, f32,
                         layout(B, Hq, T, d, Hq * T * d, T * d, Hq * d, 1));
    cg_desc red = cg_virtual(g, f32, lr);
    cg_reduction(g, CUDNN_REDUCE_TENSOR_ADD, prod, red);
    cg_desc rowsum = cg_tensor(g, U_ROWSUM, f32, lr);
    cg_pointwise(g, CUDNN_POINTWISE_MUL, f32, red, one, NULL, rowsum, -1);

    /* P = exp(mask(scale q k^T) - lse) */
    cg_desc s = cg_virtual(g, f32, ls);
    cg_matmul(g, q, kt, s, seq_q, seq_kv, NULL);
    s = cg_pw(g, CUDNN_POINTWISE_MUL, f32, s, scale, NULL, f32, ls);
    if (pad) s = mask_padding(g, s, ls, neg_inf, seq_q, seq_kv);
    s = cg_pw(g, CUDNN_POINTWISE_SUB, f32, s, stats, NULL, f32, ls);
    s = mask_band(g, s, ls, neg_inf, window);
    cg_desc p = cg_pw(g, CUDNN_POINTWISE_EXP, f32, s, NULL, NULL, f32, ls);

    /* dv = P^T dout (summed over the group) */
    cg_desc pt = cg_virtual(g, bf16, lst);
    cg_reshape(g, p, pt);
    cg_desc dv_heads = Hq == Hk ? dv : cg_virtual(g, bf16, per_head(B, Hq, T, d));
    cg_matmul(g, pt, dout, dv_heads, seq_kv, NULL, seq_q);
    if (Hq != Hk) cg_reduction(g, CUDNN_REDUCE_TENSOR_ADD, dv_heads, dv);

    /* dS = P (dout v^T - D) scale */
    cg_desc ds = cg_virtual(g, f32, ls);
    cg_matmul(g, dout, vt, ds, seq_q, seq_kv, NULL);
    ds = cg_pw(g, CUDNN_POINTWISE_SUB, f32, ds, rowsum, NULL, f32, ls);
    ds = cg_pw(g, CUDNN_POINTWISE_MUL, f32, ds, p, NULL, f32, ls);
    ds = cg_pw(g, CUDNN_POINTWISE_MUL, f32, ds, scale, NULL, f32, ls);

    /* dk = dS^T q (summed over the group) */
    cg_desc dst = cg_virtual(g, bf16, lst);
    cg_reshape(g, ds, dst);
    cg_desc dk_heads = Hq == Hk ? dk : cg_virtual(g, bf16, per_head(B, Hq, T, d));
    cg_matmul(g, dst, q, dk_heads, seq_kv, NULL, seq_q);
    if (Hq != Hk) cg_reduction(g, CUDNN_REDUCE_TENSOR_ADD, dk_heads, dk);

    /* dq = dS k, k seen untransposed */
    cg_desc k = cg_virtual(g, bf16, rows_bhtd(B, Hk, T, d));
    cg_reshape(g, kt, k);
    if (sh->deterministic) {
        cg_matmul(g, ds, k, dq, seq_q, NULL, seq_kv);
    } else {
        cg_desc acc = cg_tensor(g, U_DQ_ACCUM, f32, per_head(B, Hq, T, d));
        cg_matmul(g, ds, k, acc, seq_q, NULL, seq_kv);
        cg_pointwise(g, CUDNN_POINTWISE_IDENTITY, f32, acc, NULL, NULL, dq, -1);
    }
}

/* ---- the plan cache ---- */

static int same_shape(const cudnn_attn_shape *a, const cudnn_attn_shape *b) {
    return a->B == b->B && a->T == b->T && a->Hq == b->Hq && a->Hk == b->Hk && a->d == b->d &&
           a->window == b->window && memcmp(&a->scale, &b->scale, sizeof a->scale) == 0 &&
           !a->deterministic == !b->deterministic;
}

/* Why cuDNN cannot take the shape before any graph is built ("" when it may). */
static void shape_refusal(const cudnn_attn_shape *sh, long version, char *why, size_t n) {
    why[0] = 0;
    if (sh->B < 1 || sh->T < 1 || sh->Hk < 1 || sh->Hq % sh->Hk != 0 || !isfinite(sh->scale))
        snprintf(why, n, "impossible shape");
    else if (sh->d % 8 != 0 || sh->d > 128)
        snprintf(why, n, "head dim %d (cuDNN takes multiples of 8 up to 128 here)", sh->d);
    else if (sh->T == 1)
        snprintf(why, n, "T = 1 (cuDNN's backward refuses s_q = s_kv = 1)");
    else if (version == 91000 || version == 91001)
        snprintf(why, n, "cuDNN 9.10.0/9.10.1 have a known bug in the SDPA backward");
    else if ((double)sh->B * sh->Hq * sh->T * sh->T >= 9.2e18)
        snprintf(why, n, "scores index past int64");
}

/* Builds p's plans; ZY_ERR with the reason in p->reason. */
static int build_plans(cudnn_attn *a, attn_plan *p) {
    const cudnn_attn_shape *sh = &p->key;
    const long version = cudnn_lib_version();
    shape_refusal(sh, version, p->reason, sizeof p->reason);
    if (p->reason[0]) return ZY_ERR;
    p->scale = sh->scale;
    p->neg_inf = version < 91000 ? -FLT_MAX : -INFINITY; /* older versions want lowest() */
    p->window = (float)sh->window;
    p->one = 1.0f;
    p->pad = sh->T % 128 != 0 && version <= 91500;
    cg_init(&p->fwd, a->handle);
    cg_init(&p->bwd, a->handle);
    build_fwd(&p->fwd, sh);
    build_bwd(&p->bwd, sh, p->pad);
    int rc = cg_plan(&p->fwd, 0, "attention forward");
    if (rc == ZY_OK) rc = cg_plan(&p->bwd, sh->deterministic, "attention backward");
    if (rc != ZY_OK) {
        snprintf(p->reason, sizeof p->reason, "%s", zy_errmsg());
        return ZY_ERR;
    }
    if (p->pad) {
        const size_t n = 2 * (size_t)sh->B;
        int32_t *host = (int32_t *)malloc(n * sizeof *host);
        if (!host) {
            snprintf(p->reason, sizeof p->reason, "out of host memory");
            return ZY_ERR;
        }
        for (size_t i = 0; i < n; i++) host[i] = sh->T;
        cudaError_t e = cudaMalloc((void **)&p->seqlen, n * sizeof *host);
        if (e == cudaSuccess)
            e = cudaMemcpy(p->seqlen, host, n * sizeof *host, cudaMemcpyHostToDevice);
        free(host);
        if (e != cudaSuccess) {
            snprintf(p->reason, sizeof p->reason, "sequence lengths: %s", cudaGetErrorString(e));
            return ZY_ERR;
        }
    }
    p->fwd_ws = (size_t)p->fwd.workspace;
    p->rowsum_bytes = ALIGN_UP((size_t)sh->B * sh->Hq * sh->T * sizeof(float));
    p->accum_bytes =
        sh->deterministic ? 0 : ALIGN_UP((size_t)sh->B * sh->Hq * sh->T * sh->d * sizeof(float));
    p->bwd_ws = p->rowsum_bytes + p->accum_bytes + (size_t)p->bwd.workspace;
    snprintf(p->desc, sizeof p->desc,
             "cuDNN %ld: forward engine %lld (workspace %.1f MiB), backward engine %lld%s "
             "(workspace %.1f MiB)%s",
             version, (long long)p->fwd.engine, p->fwd_ws / 1048576.0, (long long)p->bwd.engine,
             sh->deterministic ? ", deterministic" : "", p->bwd_ws / 1048576.0,
             p->pad ? ", padding mask (T % 128 != 0)" : "");
    return ZY_OK;
}

/* The shape's cache entry, built on first sight. */
static attn_plan *find_plan(cudnn_attn *a, const cudnn_attn_shape *sh) {
    for (int i = 0; i < a->nplans; i++)
        if (same_shape(&a->plans[i]->key, sh)) return a->plans[i];
    attn_plan **grown = (attn_plan **)realloc(a->plans, (a->nplans + 1) * sizeof *grown);
    attn_plan *p = (attn_plan *)calloc(1, sizeof *p);
    if (!grown || !p) {
        free(p);
        if (grown) a->plans = grown;
        return NULL;
    }
    a->plans = grown;
    p->key = *sh;
    p->ok = build_plans(a, p) == ZY_OK;
    if (!p->ok) { /* keep the reason, release what was built */
        cg_free(&p->fwd);
        cg_free(&p->bwd);
    }
    a->plans[a->nplans++] = p;
    return p;
}

int cudnn_attn_prepare(cudnn_attn *a, const cudnn_attn_shape *sh, size_t *fwd_ws, size_t *bwd_ws) {
    attn_plan *p = find_plan(a, sh);
    if (!p) return zy_fail_runtime("out of host memory");
    if (!p->ok) return zy_fail_runtime("%s", p->reason);
    if (fwd_ws) *fwd_ws = p->fwd_ws;
    if (bwd_ws) *bwd_ws = p->bwd_ws;
    return ZY_OK;
}

int cudnn_attn_seen(cudnn_attn *a, const cudnn_attn_shape *sh) {
    for (int i = 0; i < a->nplans; i++)
        if (same_shape(&a->plans[i]->key, sh)) return 1;
    return 0;
}

const char *cudnn_attn_describe(cudnn_attn *a, const cudnn_attn_shape *sh) {
    attn_plan *p = find_plan(a, sh);
    return !p ? "" : p->ok ? p->desc : p->reason;
}

/* The prepared entry of sh and a check of the workspace. */
static attn_plan *ready_plan(cudnn_attn *a, const cudnn_attn_shape *sh, size_t ws_bytes, int bwd) {
    if (cudnn_attn_prepare(a, sh, NULL, NULL) != ZY_OK) return NULL;
    attn_plan *p = find_plan(a, sh);
    size_t need = bwd ? p->bwd_ws : p->fwd_ws;
    if (ws_bytes < need) {
        zy_fail_runtime("cuDNN attention %s: workspace of %zu bytes, the plan needs %zu",
                        bwd ? "backward" : "forward", ws_bytes, need);
        return NULL;
    }
    return p;
}

int cudnn_attn_fwd(cudnn_attn *a, const cudnn_attn_shape *sh, const void *q, const void *k,
                   const void *v, void *out, float *lse, void *ws, size_t ws_bytes) {
    attn_plan *p = ready_plan(a, sh, ws_bytes, 0);
    if (!p) return ZY_ERR;
    int64_t uids[8] = {U_Q, U_K, U_V, U_O, U_STATS, U_SCALE, U_NEG_INF, U_WINDOW};
    void *ptrs[8] = {(void *)q, (void *)k, (void *)v, out, lse, &p->scale, &p->neg_inf, &p->window};
    return cg_execute(&p->fwd, sh->window > 0 ? 8 : 7, uids, ptrs, ws, "attention forward");
}

int cudnn_attn_bwd(cudnn_attn *a, const cudnn_attn_shape *sh, const void *dout, const void *q,
                   const void *k, const void *v, const void *out, const float *lse, void *dq,
                   void *dk, void *dv, void *ws, size_t ws_bytes) {
    attn_plan *p = ready_plan(a, sh, ws_bytes, 1);
    if (!p) return ZY_ERR;
    char *w = (char *)ws;
    void *rowsum = w, *accum = w + p->rowsum_bytes, *own = w + p->rowsum_bytes + p->accum_bytes;
    int64_t uids[17] = {U_Q,  U_K,  U_V,      U_O,     U_DO,      U_STATS, U_DQ,
                        U_DK, U_DV, U_ROWSUM, U_SCALE, U_NEG_INF, U_ONE};
    void *ptrs[17] = {(void *)q, (void *)k, (void *)v, (void *)out, (void *)dout, (void *)lse, dq,
                      dk,        dv,        rowsum,    &p->scale,   &p->neg_inf,  &p->one};
    int n = 13;
    if (sh->window > 0) uids[n] = U_WINDOW, ptrs[n++] = &p->window;
    if (p->pad) {
        uids[n] = U_SEQ_Q, ptrs[n++] = p->seqlen;
        uids[n] = U_SEQ_KV, ptrs[n++] = p->seqlen + sh->B;
    }
    if (!sh->deterministic) uids[n] = U_DQ_ACCUM, ptrs[n++] = accum;
    return cg_execute(&p->bwd, n, uids, ptrs, p->bwd.workspace ? own : NULL, "attention backward");
}

#endif
