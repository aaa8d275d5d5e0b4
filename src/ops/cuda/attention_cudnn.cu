/* Causal GQA attention through cuDNN (attention_cudnn.h): plans of the graphs of
 * attention_cudnn_graphs.h, cached per shape, the backward in one pass or in chunks of query rows,
 * and their execution. */
#include "ops/cuda/attention_cudnn.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/attention_cudnn_graphs.h"
#include "ops/cuda/cuda_util.h"
#include "ops/cuda/cudnn_graph.h"

#include "base/err.h"

#include <cuda_runtime.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

long cudnn_attn_version(void) {
    return cudnn_lib_version();
}

#if !ZY_HAVE_CUDNN

int cudnn_attn_create(cudnn_attn **out, cudaStream_t s, size_t workspace_cap) {
    *out = NULL;
    return cudnn_lib_load(); /* fails, saying the headers were missing */
}
void cudnn_attn_destroy(cudnn_attn *a) {}
int cudnn_attn_prepare(cudnn_attn *a, const cudnn_attn_shape *sh, size_t *f, size_t *b) {
    return zy_fail_runtime("cuDNN unavailable: zayac was built without the cuDNN headers");
}
void cudnn_attn_set_limits(cudnn_attn *a, const cudnn_attn_limits *l) {}
void cudnn_attn_set_cap(cudnn_attn *a, size_t cap) {}
int cudnn_attn_one_pass_bytes(cudnn_attn *a, const cudnn_attn_shape *sh, size_t *bytes) {
    return cudnn_attn_prepare(a, sh, NULL, NULL);
}
size_t cudnn_attn_workspace_cap(const cudnn_attn *a) {
    return CUDNN_ATTN_WORKSPACE_CAP;
}
int cudnn_attn_plan_get(cudnn_attn *a, const cudnn_attn_shape *sh, cudnn_attn_plan_info *info) {
    return cudnn_attn_prepare(a, sh, NULL, NULL);
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

#define ALIGN_UP(x)            (((x) + 255) & ~(size_t)255)

/* The oldest cuDNN whose SDPA graphs take the bottom-right-aligned causal mask for any
 * s_q <= s_kv (cudnn-frontend: 9.3 for the alignment at all, 9.6 for sizes off multiples of 64). */
#define CUDNN_BOTTOM_RIGHT_MIN 90600

/* One chunk of a chunked backward: queries [q0, q0 + Tq) against keys [k0, k0 + Tkv), k0 + Tkv =
 * q0 + Tq, so query row i of the chunk is key column i + (Tkv - Tq) (bottom-right alignment). */
typedef struct {
    int q0, Tq, k0, Tkv;
    int pad;                   /* the padding-mask workaround (Tkv % 128 != 0 on cuDNN <= 9.15) */
    int32_t sq, skv, window_i; /* by-value scalars: s_q, s_kv, the window */
    float window;              /* the left bound's f32 scalar: window - (Tkv - Tq) */
    int plan;                  /* the chunk whose graph g it runs (chunks of one geometry share) */
    cg_graph g;                /* built when plan is the chunk's own index */
} attn_chunk;

/* One shape's plans, or the reason cuDNN refused it. */
typedef struct {
    cudnn_attn_shape key;
    cudnn_attn_limits lim; /* the limits it was built under (part of the key) */
    int ok;
    char reason[512];
    cg_graph fwd, bwd; /* bwd: the single pass (not built when chunked) */
    int pad;           /* single pass with the padding-mask workaround (seq lengths in seqlen) */
    int32_t *seqlen;   /* device [2B]: T for every sequence, queries then keys */
    /* the values of the by-value scalars, alive as long as the plans */
    float scale, neg_inf, window, one;
    /* backward workspace: [row sums | dq accumulator | cuDNN's]; chunked: [row sums of a chunk |
     * fp32 sums of dk, dv | a chunk's dk, dv | cuDNN's for the largest chunk] */
    size_t rowsum_bytes, accum_bytes, bwd_ws, fwd_ws;
    /* the chunked backward: nchunks > 0 plans of chunk query rows */
    int chunk, nchunks;
    attn_chunk *chunks;
    int32_t *chunk_seqlen; /* device [nchunks][2B]: each chunk's s_q, then s_kv, per sequence */
    size_t sum_bytes, part_bytes, chunk_ws;
    attn_chunk probe; /* the last chunk plan built while sizing chunks (reused when it fits) */
    int probe_tc;     /* its chunk size (0: none held) */
    char note[400];   /* why a shape past the cap is not chunked */
    char desc[640];
} attn_plan;

struct cudnn_attn {
    cudnnHandle_t handle;
    cudaStream_t stream;
    size_t cap; /* the workspace cap given at creation */
    cudnn_attn_limits lim;
    attn_plan **plans;
    int nplans;
};

/* l with its zero fields set to a's defaults. */
static cudnn_attn_limits limits_of(const cudnn_attn *a, const cudnn_attn_limits *l) {
    cudnn_attn_limits n = {a->cap, 0};
    if (!l) return n;
    if (l->workspace_cap) n.workspace_cap = l->workspace_cap;
    if (l->max_chunk > 0) n.max_chunk = l->max_chunk < 128 ? 128 : l->max_chunk / 128 * 128;
    return n;
}

int cudnn_attn_create(cudnn_attn **out, cudaStream_t s, size_t workspace_cap) {
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
    a->stream = s;
    a->cap = workspace_cap ? workspace_cap : CUDNN_ATTN_WORKSPACE_CAP;
    a->lim = limits_of(a, NULL);
    *out = a;
    return ZY_OK;
}

void cudnn_attn_set_limits(cudnn_attn *a, const cudnn_attn_limits *l) {
    a->lim = limits_of(a, l);
}

void cudnn_attn_set_cap(cudnn_attn *a, size_t cap) {
    a->cap = cap;
    a->lim.workspace_cap = cap;
}

int cudnn_attn_one_pass_bytes(cudnn_attn *a, const cudnn_attn_shape *sh, size_t *bytes) {
    const cudnn_attn_limits in_force = a->lim;
    a->lim.workspace_cap = (size_t)ZY_ATTN_WORKSPACE_GIB_MAX << 30;
    a->lim.max_chunk = 0;
    cudnn_attn_plan_info info;
    const int rc = cudnn_attn_plan_get(a, sh, &info);
    a->lim = in_force;
    ZY_TRY(rc);
    *bytes = info.chunk ? SIZE_MAX : info.bwd_ws; /* past 64 GiB: no single pass */
    return ZY_OK;
}

size_t cudnn_attn_workspace_cap(const cudnn_attn *a) {
    return a->lim.workspace_cap;
}

/* Releases the chunked backward's plans and buffers. */
static void free_chunks(attn_plan *p) {
    for (int i = 0; i < p->nchunks; i++)
        if (p->chunks[i].plan == i) cg_free(&p->chunks[i].g);
    free(p->chunks);
    if (p->chunk_seqlen) cudaFree(p->chunk_seqlen);
    if (p->probe_tc) cg_free(&p->probe.g);
    p->chunks = NULL;
    p->chunk_seqlen = NULL;
    p->nchunks = p->chunk = p->probe_tc = 0;
}

void cudnn_attn_destroy(cudnn_attn *a) {
    if (!a) return;
    for (int i = 0; i < a->nplans; i++) {
        attn_plan *p = a->plans[i];
        cg_free(&p->fwd);
        cg_free(&p->bwd);
        free_chunks(p);
        if (p->seqlen) cudaFree(p->seqlen);
        free(p);
    }
    free(a->plans);
    cudnn_fn.destroy(a->handle);
    free(a);
}

/* ---- the chunks' dk, dv sums ---- */

/* One chunk's bf16 dk and dv (blockIdx.y: 0 dk, 1 dv) into the fp32 sums, over key rows [lo, hi) of
 * every sequence (T * hd elements apart; hd = Hk * d, a multiple of 8): rows from add_from on add
 * the sum the later chunks left (the others start it), and rows from fin on are final (no earlier
 * chunk sees them) and go to the bf16 output instead of the sum. Each element gets the same
 * additions in the same order on every run. */
__global__ void chunk_sum_kernel(const __nv_bfloat16 *part_k, const __nv_bfloat16 *part_v,
                                 float *sum_k, float *sum_v, __nv_bfloat16 *dk, __nv_bfloat16 *dv,
                                 int64_t seq_elems, int hd, int lo, int hi, int add_from, int fin,
                                 int64_t n8) {
    zy_pdl_begin();
    const __nv_bfloat16 *part = blockIdx.y ? part_v : part_k;
    float *sum = blockIdx.y ? sum_v : sum_k;
    __nv_bfloat16 *out = blockIdx.y ? dv : dk;
    const int64_t per_seq8 = (int64_t)(hi - lo) * hd / 8;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n8;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t b = i / per_seq8, e = (i - b * per_seq8) * 8;
        const int t = lo + (int)(e / hd);
        const int64_t off = b * seq_elems + (int64_t)lo * hd + e;
        float v[8];
        zy_load<__nv_bfloat16, 8>(part + off, v);
        if (t >= add_from) {
            float s[8];
            zy_load<float, 8>(sum + off, s);
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] += s[k];
        }
        if (t >= fin)
            zy_store<__nv_bfloat16, 8>(out + off, v);
        else
            zy_store<float, 8>(sum + off, v);
    }
}

/* ---- the plan cache ---- */

static int same_limits(const cudnn_attn_limits *a, const cudnn_attn_limits *b) {
    return a->workspace_cap == b->workspace_cap && a->max_chunk == b->max_chunk;
}

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

/* A device copy of n int32 values, queued on the stream of a's kernels; NULL with a runtime
 * error. Not cudaMemcpy: from pageable memory it returns once the values are staged, and its
 * transfer runs on the legacy stream, which a's non-blocking stream does not wait for, so a
 * kernel could read the buffer before it lands. */
static int32_t *device_ints(const cudnn_attn *a, const int32_t *host, size_t n) {
    int32_t *dev = NULL;
    cudaError_t e = cudaMalloc((void **)&dev, n * sizeof *host);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(dev, host, n * sizeof *host, cudaMemcpyHostToDevice, a->stream);
    if (e == cudaSuccess) return dev;
    if (dev) cudaFree(dev);
    zy_fail_runtime("sequence lengths: %s", cudaGetErrorString(e));
    return NULL;
}

/* The single-pass backward of p; ZY_ERR with the reason in p->reason. */
static int build_single(cudnn_attn *a, attn_plan *p) {
    const cudnn_attn_shape *sh = &p->key;
    const bwd_rows rows = {sh->T, sh->T, sh->T, 0, p->pad};
    cg_init(&p->bwd, a->handle);
    attn_graph_bwd(&p->bwd, sh, &rows);
    if (cg_plan(&p->bwd, sh->deterministic, "attention backward") != ZY_OK) goto fail;
    if (p->pad && !p->seqlen) {
        const size_t n = 2 * (size_t)sh->B;
        int32_t *host = (int32_t *)malloc(n * sizeof *host);
        if (!host) {
            zy_fail_runtime("out of host memory");
            goto fail;
        }
        for (size_t i = 0; i < n; i++) host[i] = sh->T;
        p->seqlen = device_ints(a, host, n);
        free(host);
        if (!p->seqlen) goto fail;
    }
    p->rowsum_bytes = ALIGN_UP((size_t)sh->B * sh->Hq * sh->T * sizeof(float));
    p->accum_bytes =
        sh->deterministic ? 0 : ALIGN_UP((size_t)sh->B * sh->Hq * sh->T * sh->d * sizeof(float));
    p->bwd_ws = p->rowsum_bytes + p->accum_bytes + (size_t)p->bwd.workspace;
    return ZY_OK;
fail:
    snprintf(p->reason, sizeof p->reason, "%s", zy_errmsg());
    cg_free(&p->bwd);
    return ZY_ERR;
}

/* ---- chunk sizes ---- */

/* Chunk i of p's shape at chunk size tc (query rows; a multiple of 128): its rows, keys (from the
 * first 128-row block a window lets its first query see) and scalars; no plan. */
static attn_chunk chunk_at(const attn_plan *p, int tc, int i) {
    const cudnn_attn_shape *sh = &p->key;
    attn_chunk c;
    memset(&c, 0, sizeof c);
    c.q0 = i * tc;
    c.Tq = sh->T - c.q0 < tc ? sh->T - c.q0 : tc;
    const int first_key = sh->window > 0 ? c.q0 - sh->window + 1 : 0;
    c.k0 = first_key > 0 ? first_key / 128 * 128 : 0;
    c.Tkv = c.q0 + c.Tq - c.k0;
    /* cudnn-frontend's condition for the workaround is on s_kv alone; here s_q is off 128 only in
     * a last chunk, whose s_kv then is too */
    c.pad = c.Tkv % 128 != 0 && cudnn_lib_version() <= 91500;
    c.sq = c.Tq;
    c.skv = c.Tkv;
    c.window_i = sh->window;
    c.window = (float)(sh->window - (c.Tkv - c.Tq));
    return c;
}

static int chunk_count(const attn_plan *p, int tc) {
    return (p->key.T + tc - 1) / tc;
}

/* The chunk with the most scores (Tq Tkv) at chunk size tc: the one whose dP workspace is
 * largest. */
static int largest_chunk(const attn_plan *p, int tc, double *scores_out) {
    int best = 0;
    double most = -1;
    for (int i = 0; i < chunk_count(p, tc); i++) {
        attn_chunk c = chunk_at(p, tc, i);
        double n = (double)c.Tq * c.Tkv;
        if (n > most) most = n, best = i;
    }
    if (scores_out) *scores_out = most * p->key.B * p->key.Hq;
    return best;
}

/* The chunked backward's own workspace at chunk size tc: one chunk's row sums, the fp32 sums of
 * dk and dv, and a chunk's bf16 dk and dv. */
static size_t chunk_scratch(const attn_plan *p, int tc) {
    const cudnn_attn_shape *sh = &p->key;
    const size_t kv = (size_t)sh->B * sh->T * sh->Hk * sh->d;
    return ALIGN_UP((size_t)sh->B * sh->Hq * tc * sizeof(float)) + 2 * ALIGN_UP(kv * 4) +
           2 * ALIGN_UP(kv * 2);
}

/* Builds chunk c's plan; ZY_ERR with cuDNN's reason. */
static int build_chunk(cudnn_attn *a, attn_plan *p, attn_chunk *c) {
    const bwd_rows rows = {c->Tq, c->Tkv, p->key.T, c->Tkv > c->Tq, c->pad};
    char what[128];
    snprintf(what, sizeof what, "attention backward chunk (s_q %d, s_kv %d)", c->Tq, c->Tkv);
    cg_init(&c->g, a->handle);
    attn_graph_bwd(&c->g, &p->key, &rows);
    if (cg_plan(&c->g, 1, what) == ZY_OK) return ZY_OK;
    cg_free(&c->g);
    return ZY_ERR;
}

/* cuDNN's workspace for the largest chunk at chunk size tc, from its plan (kept in p->probe for
 * the final build). ZY_ERR when cuDNN refuses the chunk. */
static int probe_chunk(cudnn_attn *a, attn_plan *p, int tc, int64_t *ws) {
    if (p->probe_tc) cg_free(&p->probe.g);
    p->probe_tc = 0;
    p->probe = chunk_at(p, tc, largest_chunk(p, tc, NULL));
    ZY_TRY(build_chunk(a, p, &p->probe));
    p->probe_tc = tc;
    *ws = p->probe.g.workspace;
    return ZY_OK;
}

/* Builds every chunk's plan at chunk size tc; ZY_OK with the largest cuDNN workspace in *ws, or
 * ZY_ERR with cuDNN's reason (nothing kept). */
static int build_all_chunks(cudnn_attn *a, attn_plan *p, int tc, size_t *ws) {
    const int n = chunk_count(p, tc);
    p->chunks = (attn_chunk *)calloc(n, sizeof *p->chunks);
    if (!p->chunks) return zy_fail_runtime("out of host memory");
    *ws = 0;
    for (int i = 0; i < n; i++) {
        attn_chunk *c = &p->chunks[i];
        *c = chunk_at(p, tc, i);
        c->plan = i;
        for (int j = 0; j < i && c->plan == i; j++)
            if (p->chunks[j].Tq == c->Tq && p->chunks[j].Tkv == c->Tkv) c->plan = j;
        if (c->plan == i) {
            if (p->probe_tc == tc && p->probe.Tq == c->Tq && p->probe.Tkv == c->Tkv) {
                c->g = p->probe.g; /* its plan built already */
                p->probe_tc = 0;
            } else if (build_chunk(a, p, c) != ZY_OK) {
                c->plan = -1;
                p->nchunks = i + 1;
                free_chunks(p);
                return ZY_ERR;
            }
        }
        p->nchunks = i + 1;
        if ((size_t)c->g.workspace > *ws) *ws = (size_t)c->g.workspace;
    }
    /* every chunk's sequence lengths (only the padded ones read theirs) */
    int32_t *host = (int32_t *)malloc((size_t)n * 2 * p->key.B * sizeof *host);
    if (!host) {
        free_chunks(p);
        return zy_fail_runtime("out of host memory");
    }
    for (int i = 0; i < n; i++)
        for (int b = 0; b < p->key.B; b++) {
            host[(size_t)i * 2 * p->key.B + b] = p->chunks[i].Tq;
            host[(size_t)i * 2 * p->key.B + p->key.B + b] = p->chunks[i].Tkv;
        }
    p->chunk_seqlen = device_ints(a, host, (size_t)n * 2 * p->key.B);
    free(host);
    if (!p->chunk_seqlen) {
        free_chunks(p);
        return ZY_ERR;
    }
    p->chunk = tc;
    return ZY_OK;
}

/* The largest chunk size (a multiple of 128, at least two chunks, at most lim.max_chunk) whose
 * backward workspace, cuDNN's for the largest chunk plus chunk_scratch, fits the cap, with every
 * chunk's plan built. cuDNN's workspace is read from a plan of the
 * largest chunk: the first guess takes it as dP alone (B Hq Tq Tkv bf16), the next ones scale
 * the bytes per score it reported, between the largest size known to fit and the smallest known
 * not to. ZY_ERR with the reason (cuDNN's refusal, or no size fits). */
static int size_chunks(cudnn_attn *a, attn_plan *p) {
    const cudnn_attn_shape *sh = &p->key;
    const double cap = (double)p->lim.workspace_cap;
    int top = (sh->T - 1) / 128 * 128;
    if (p->lim.max_chunk > 0 && p->lim.max_chunk < top) top = p->lim.max_chunk;
    if (top < 128) return zy_fail_runtime("T = %d is too short to chunk", sh->T);
    double per_score = 2.0; /* dP in bf16 */
    int fit = 0, over = top + 128;
    for (int tries = 0; tries < 12; tries++) {
        /* the largest size in (fit, over) that the bytes per score predict to fit */
        int tc = over - 128;
        double n = 0;
        for (; tc > fit; tc -= 128) {
            largest_chunk(p, tc, &n);
            if (per_score * n + (double)chunk_scratch(p, tc) <= cap) break;
        }
        if (tc <= fit) {
            if (fit) break;
            largest_chunk(p, 128, &n);
            return zy_fail_runtime("chunks of 128 query rows would need %.1f MiB of workspace, "
                                   "past the cap of %.1f MiB",
                                   (per_score * n + chunk_scratch(p, 128)) / 1048576.0,
                                   cap / 1048576.0);
        }
        int64_t ws = 0;
        ZY_TRY(probe_chunk(a, p, tc, &ws));
        if ((double)ws + (double)chunk_scratch(p, tc) <= cap)
            fit = tc;
        else
            over = tc;
        per_score = n > 0 ? (double)ws / n : per_score;
        if (per_score <= 0) per_score = 1e-9; /* no workspace at all: any size that fits scratch */
    }
    if (!fit) return zy_fail_runtime("no chunk size fits the cap of %.1f MiB", cap / 1048576.0);
    /* the other chunks' plans; a chunk needing more than the largest one moves a size down */
    for (int tc = fit, k = 0; tc >= 128 && k < 4; tc -= 128, k++) {
        size_t ws = 0;
        ZY_TRY(build_all_chunks(a, p, tc, &ws));
        if ((double)ws + (double)chunk_scratch(p, tc) <= cap) {
            const size_t kv = (size_t)sh->B * sh->T * sh->Hk * sh->d;
            p->chunk_ws = ws;
            p->rowsum_bytes = ALIGN_UP((size_t)sh->B * sh->Hq * tc * sizeof(float));
            p->accum_bytes = 0;
            p->sum_bytes = ALIGN_UP(kv * 4);
            p->part_bytes = ALIGN_UP(kv * 2);
            p->bwd_ws = chunk_scratch(p, tc) + ws;
            if (p->probe_tc) cg_free(&p->probe.g);
            p->probe_tc = 0;
            return ZY_OK;
        }
        free_chunks(p);
    }
    return zy_fail_runtime("no chunk size fits the cap of %.1f MiB", cap / 1048576.0);
}

/* The chunked backward of p (each chunk's dk, dv from cuDNN in bf16: fp32 outputs, where cuDNN
 * 9.14 accepted them, came out wrong; docs/attention.md). ZY_ERR with why in p->note. */
static int build_chunks(cudnn_attn *a, attn_plan *p) {
    const long version = cudnn_lib_version();
    if (version < CUDNN_BOTTOM_RIGHT_MIN) {
        snprintf(p->note, sizeof p->note,
                 "chunked backward refused: the bottom-right causal mask needs cuDNN %d or newer",
                 CUDNN_BOTTOM_RIGHT_MIN);
        return ZY_ERR;
    }
    const int rc = size_chunks(a, p);
    if (p->probe_tc) cg_free(&p->probe.g);
    p->probe_tc = 0;
    if (rc != ZY_OK) snprintf(p->note, sizeof p->note, "chunked backward refused: %s", zy_errmsg());
    zy_err_clear();
    return rc;
}

/* Builds p's plans: the forward; the backward in one pass, or in chunks when it is deterministic
 * and one pass would need more workspace than the cap (or lim.max_chunk asks for chunks). A
 * shape past the cap whose chunks cuDNN refuses keeps the single pass (cuda.attention = auto then
 * leaves it to zayac's kernels). ZY_ERR with the reason in p->reason. */
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
    attn_graph_fwd(&p->fwd, sh);
    if (cg_plan(&p->fwd, 0, "attention forward") != ZY_OK) {
        snprintf(p->reason, sizeof p->reason, "%s", zy_errmsg());
        return ZY_ERR;
    }
    p->fwd_ws = (size_t)p->fwd.workspace;
    /* dP alone (B Hq T^2 bf16) past the cap: no need to build the single pass to know */
    const double cap = (double)p->lim.workspace_cap;
    const double dp = 2.0 * sh->B * sh->Hq * (double)sh->T * sh->T;
    const int forced = p->lim.max_chunk > 0 && sh->T > p->lim.max_chunk;
    int single = !sh->deterministic || (!forced && dp <= cap);
    if (single) {
        ZY_TRY(build_single(a, p));
        if (!sh->deterministic || (!forced && (double)p->bwd_ws <= cap)) return ZY_OK;
    }
    if (build_chunks(a, p) == ZY_OK) {
        if (single) cg_free(&p->bwd);
        return ZY_OK;
    }
    if (!single && build_single(a, p) != ZY_OK) {
        const size_t n = strlen(p->reason);
        if (n + 3 < sizeof p->reason)
            snprintf(p->reason + n, sizeof p->reason - n, "; %s", (const char *)p->note);
        return ZY_ERR;
    }
    return ZY_OK;
}

/* Appends to p->desc what fmt says, cut at its end. */
static void desc_add(attn_plan *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void desc_add(attn_plan *p, const char *fmt, ...) {
    const size_t used = strlen(p->desc);
    if (used + 1 >= sizeof p->desc) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->desc + used, sizeof p->desc - used, fmt, ap);
    va_end(ap);
}

/* p's line for cudnn_attn_describe. */
static void describe_plan(attn_plan *p) {
    const cudnn_attn_shape *sh = &p->key;
    p->desc[0] = 0;
    desc_add(p, "cuDNN %ld: forward engine %lld (workspace %.1f MiB), ", cudnn_lib_version(),
             (long long)p->fwd.engine, p->fwd_ws / 1048576.0);
    int plans = 0;
    for (int i = 0; i < p->nchunks; i++) plans += p->chunks[i].plan == i;
    if (p->chunk)
        desc_add(p,
                 "backward in %d chunks of %d query rows (bottom-right causal mask; %d plans), "
                 "engine %lld, "
                 "dk/dv per chunk in bf16 summed in fp32, deterministic (workspace %.1f MiB: "
                 "cuDNN's %.1f MiB for the largest chunk, %.1f MiB of sums and row sums)",
                 p->nchunks, p->chunk, plans,
                 (long long)p->chunks[p->chunks[p->nchunks - 1].plan].g.engine,
                 p->bwd_ws / 1048576.0, p->chunk_ws / 1048576.0,
                 (p->bwd_ws - p->chunk_ws) / 1048576.0);
    else
        desc_add(p, "backward engine %lld%s (workspace %.1f MiB)%s", (long long)p->bwd.engine,
                 sh->deterministic ? ", deterministic" : "", p->bwd_ws / 1048576.0,
                 p->pad ? ", padding mask (T % 128 != 0)" : "");
    if (p->note[0]) desc_add(p, "; %s", p->note);
}

/* The cache entry of sh under a's limits, built on first sight. */
static attn_plan *find_plan(cudnn_attn *a, const cudnn_attn_shape *sh) {
    for (int i = 0; i < a->nplans; i++)
        if (same_shape(&a->plans[i]->key, sh) && same_limits(&a->plans[i]->lim, &a->lim))
            return a->plans[i];
    attn_plan **grown = (attn_plan **)realloc(a->plans, (a->nplans + 1) * sizeof *grown);
    attn_plan *p = (attn_plan *)calloc(1, sizeof *p);
    if (!grown || !p) {
        free(p);
        if (grown) a->plans = grown;
        return NULL;
    }
    a->plans = grown;
    p->key = *sh;
    p->lim = a->lim;
    p->ok = build_plans(a, p) == ZY_OK;
    if (p->ok) {
        describe_plan(p);
    } else { /* keep the reason, release what was built */
        cg_free(&p->fwd);
        cg_free(&p->bwd);
        free_chunks(p);
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

int cudnn_attn_plan_get(cudnn_attn *a, const cudnn_attn_shape *sh, cudnn_attn_plan_info *info) {
    ZY_TRY(cudnn_attn_prepare(a, sh, NULL, NULL));
    const attn_plan *p = find_plan(a, sh);
    memset(info, 0, sizeof *info);
    info->chunk = p->chunk;
    info->nchunks = p->nchunks;
    info->fwd_ws = p->fwd_ws;
    info->bwd_ws = p->bwd_ws;
    info->chunk_ws = p->chunk_ws;
    return ZY_OK;
}

int cudnn_attn_seen(cudnn_attn *a, const cudnn_attn_shape *sh) {
    for (int i = 0; i < a->nplans; i++)
        if (same_shape(&a->plans[i]->key, sh) && same_limits(&a->plans[i]->lim, &a->lim)) return 1;
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

/* The chunked backward: the chunks from the last to the first, each one's dk, dv summed into the
 * fp32 sums right after it (the same order on every run), the bf16 dk, dv written as their rows
 * become final. */
static int bwd_chunked(cudnn_attn *a, attn_plan *p, const void *dout, const void *q, const void *k,
                       const void *v, const void *out, const float *lse, void *dq, void *dk,
                       void *dv, void *ws) {
    const cudnn_attn_shape *sh = &p->key;
    const size_t qrow = (size_t)sh->Hq * sh->d * 2, krow = (size_t)sh->Hk * sh->d * 2;
    const size_t grow = (size_t)sh->Hk * sh->d * 2;
    char *w = (char *)ws;
    char *rowsum = w, *sum_k = w + p->rowsum_bytes, *sum_v = sum_k + p->sum_bytes;
    char *part_k = sum_v + p->sum_bytes, *part_v = part_k + p->part_bytes;
    char *own = part_v + p->part_bytes;
    for (int c = p->nchunks - 1; c >= 0; c--) {
        attn_chunk *x = &p->chunks[c];
        cg_graph *g = &p->chunks[x->plan].g;
        const int br = x->Tkv > x->Tq;
        int64_t uids[19] = {U_Q,  U_K,  U_V,      U_O,     U_DO,      U_STATS, U_DQ,
                            U_DK, U_DV, U_ROWSUM, U_SCALE, U_NEG_INF, U_ONE};
        void *ptrs[19] = {(char *)q + x->q0 * qrow,
                          (char *)k + x->k0 * krow,
                          (char *)v + x->k0 * krow,
                          (char *)out + x->q0 * qrow,
                          (char *)dout + x->q0 * qrow,
                          (void *)(lse + x->q0),
                          (char *)dq + x->q0 * qrow,
                          part_k + x->k0 * grow,
                          part_v + x->k0 * grow,
                          rowsum,
                          &p->scale,
                          &p->neg_inf,
                          &p->one};
        int n = 13;
        if (sh->window > 0) {
            if (br && x->pad)
                uids[n] = U_WINDOW_I, ptrs[n++] = &x->window_i;
            else
                uids[n] = U_WINDOW, ptrs[n++] = &x->window;
        }
        if (br && !x->pad) {
            uids[n] = U_SQ, ptrs[n++] = &x->sq;
            uids[n] = U_SKV, ptrs[n++] = &x->skv;
        }
        if (x->pad) {
            int32_t *len = p->chunk_seqlen + (size_t)c * 2 * sh->B;
            uids[n] = U_SEQ_Q, ptrs[n++] = len;
            uids[n] = U_SEQ_KV, ptrs[n++] = len + sh->B;
        }
        ZY_TRY(cg_execute(g, n, uids, ptrs, g->workspace ? own : NULL, "attention backward chunk"));
        /* key rows [k0, q0 + Tq): those the later chunks saw (from their first key on) add to
         * the sums; those no earlier chunk sees (from q0 on) are final */
        const int hd = sh->Hk * sh->d, hi = x->q0 + x->Tq;
        const int add_from = c == p->nchunks - 1 ? INT_MAX : p->chunks[c + 1].k0;
        const int64_t n8 = (int64_t)sh->B * (hi - x->k0) * hd / 8;
        const int64_t want = (n8 + 255) / 256;
        const dim3 grid((unsigned)(want < 4096 ? want : 4096), 2);
        const int64_t seq = (int64_t)sh->T * hd;
        zy_launch(chunk_sum_kernel, grid, 256, 0, a->stream, (const __nv_bfloat16 *)part_k,
                  (const __nv_bfloat16 *)part_v, (float *)sum_k, (float *)sum_v,
                  (__nv_bfloat16 *)dk, (__nv_bfloat16 *)dv, seq, hd, x->k0, hi, add_from, x->q0,
                  n8);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess)
            return zy_fail_runtime("cuDNN attention backward: chunk sums: %s",
                                   cudaGetErrorString(e));
    }
    return ZY_OK;
}

int cudnn_attn_bwd(cudnn_attn *a, const cudnn_attn_shape *sh, const void *dout, const void *q,
                   const void *k, const void *v, const void *out, const float *lse, void *dq,
                   void *dk, void *dv, void *ws, size_t ws_bytes) {
    attn_plan *p = ready_plan(a, sh, ws_bytes, 1);
    if (!p) return ZY_ERR;
    if (p->chunk) return bwd_chunked(a, p, dout, q, k, v, out, lse, dq, dk, dv, ws);
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
