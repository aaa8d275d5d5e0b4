/* Causal GQA attention through cuDNN's fused flash-attention (the graph that cudnn-frontend's SDPA
 * forward and backward nodes build, in the backend API; cudnn_graph.h loads the library). Same
 * contract and layout as cuda_attention_fwd/bwd (ops/cuda/attention.h): q, out, dout, dq
 * [N = B*T, Hq*d], k, v, dk, dv [N, Hk*d] bf16, token-major (cuDNN sees them as [B, H, T, d] with
 * strides); query t sees keys s <= t, and s > t - window when window > 0.
 * lse [B, Hq, T] fp32 is cuDNN's softmax stats: max + log(sum exp(S - max)) of S = scale * q.k
 * over the visible keys, the natural-log logsumexp, the same quantity cuda_attention_fwd saves,
 * so either backward reads either forward's lse; zayac still keeps one backend per shape for both
 * directions (ops_attention.cu).
 * The backward is deterministic when the shape says so: no fp32 dq accumulator (cuDNN's atomics),
 * the dP-workspace kernel cudnn-frontend picks for set_deterministic_algorithm on Hopper, and no
 * engine that cuDNN notes as non-deterministic. That backward keeps dP in its workspace (B Hq T^2
 * bf16); when the single pass would need more than the workspace cap (2 GiB unless the handle was
 * given another), the backward runs over chunks of query rows instead: chunk [q0, q1) sees keys
 * [0, q1) (with a window, from the first 128-row block it can see) through a bottom-right-aligned
 * causal mask, writes its dq rows directly, and its dk, dv go to scratch in bf16, summed in fp32
 * in a fixed order (the last chunk first) and rounded to bf16 once. The forward is always one call.
 * A handle holds the plans it built, one per shape (and per limits, below), forward and backward
 * together (a chunked backward has one plan per chunk); a shape cuDNN refuses is remembered with
 * the reason. Usable from C; not thread-safe (one handle per stream). */
#ifndef ZY_CUDA_ATTENTION_CUDNN_H
#define ZY_CUDA_ATTENTION_CUDNN_H

#include "ops/ops.h"

#include <cuda_runtime_api.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cudnn_attn cudnn_attn;

/* The backward's workspace cap of a handle created with cap 0 (training passes
 * cuda.attention_workspace_gib): cuda.attention = auto runs cuDNN on a shape only when its backward
 * (single pass, or chunked) fits the cap. */
#define CUDNN_ATTN_WORKSPACE_CAP ((size_t)ZY_ATTN_WORKSPACE_GIB_BASE << 30)

/* Limits on the plans a handle builds; zero fields take the handle's defaults. Set only by tests
 * and the dev timer. */
typedef struct {
    size_t workspace_cap; /* backward workspace cap in bytes; 0: the handle's (cudnn_attn_create) */
    int max_chunk;        /* > 0: chunk every deterministic backward with T > max_chunk, chunks of
                             at most max_chunk rows (rounded down to a multiple of 128) */
} cudnn_attn_limits;

/* How a prepared shape runs. chunk: the query rows per chunk of the backward (0: one pass; the
 * last chunk may be shorter), nchunks chunks; chunk_ws: cuDNN's workspace for the largest chunk
 * (included in bwd_ws). */
typedef struct {
    int chunk, nchunks;
    size_t fwd_ws, bwd_ws, chunk_ws;
} cudnn_attn_plan_info;

/* One attention problem: the plan cache's key. deterministic: the backward must give the same
 * bits on every call (training always asks for it; the benchmark also times the other). */
typedef struct {
    int B, T, Hq, Hk, d, window;
    float scale;
    int deterministic;
} cudnn_attn_shape;

/* Loads cuDNN (once per process) and creates a handle on the current device whose work runs on
 * stream s, with a backward workspace cap of workspace_cap bytes (0: CUDNN_ATTN_WORKSPACE_CAP).
 * ZY_ERR with a runtime error saying why cuDNN is unusable. */
int cudnn_attn_create(cudnn_attn **out, cudaStream_t s, size_t workspace_cap);
void cudnn_attn_destroy(cudnn_attn *a);
/* cudnnGetVersion() of the loaded library (91400 = 9.14.0); 0 when not loaded. */
long cudnn_attn_version(void);

/* Builds (once) the forward and backward plans of shape sh. ZY_OK with the workspace bytes each
 * direction needs (NULL to skip); ZY_ERR with a runtime error saying why cuDNN cannot run it (an
 * impossible shape, a refused graph, only non-deterministic engines); the same answer on every
 * later call. */
int cudnn_attn_prepare(cudnn_attn *a, const cudnn_attn_shape *sh, size_t *fwd_ws, size_t *bwd_ws);
/* Sets the limits for the plans built from now on (NULL: the handle's defaults); a shape prepared
 * under other limits keeps its own plans. Tests and the dev timer only. */
void cudnn_attn_set_limits(cudnn_attn *a, const cudnn_attn_limits *l);
/* Sets the handle's workspace cap (what limits without one take) and the one in force, for the
 * shapes prepared from now on: cuda.attention_workspace_gib = auto raising it to a one-pass need
 * (ops_attention_workspace_grow). */
void cudnn_attn_set_cap(cudnn_attn *a, size_t cap);
/* The deterministic backward's workspace of shape sh in one pass, whatever the cap (its plans are
 * built under a 64 GiB cap and kept; the limits in force are restored). ZY_ERR as
 * cudnn_attn_prepare. */
int cudnn_attn_one_pass_bytes(cudnn_attn *a, const cudnn_attn_shape *sh, size_t *bytes);
/* The workspace cap in force (the handle's unless set). */
size_t cudnn_attn_workspace_cap(const cudnn_attn *a);
/* How shape sh runs (prepares it when needed); ZY_ERR as cudnn_attn_prepare. */
int cudnn_attn_plan_get(cudnn_attn *a, const cudnn_attn_shape *sh, cudnn_attn_plan_info *info);
/* 1 when sh was prepared before (its plans built or its refusal remembered), else 0. */
int cudnn_attn_seen(cudnn_attn *a, const cudnn_attn_shape *sh);
/* One line on the plans of a shape (cuDNN's version, each direction's engine and workspace), or
 * the reason cuDNN refused it; prepares the shape when needed. */
const char *cudnn_attn_describe(cudnn_attn *a, const cudnn_attn_shape *sh);

/* out and lse from q, k, v (prepares the shape when needed). ws: device memory of at least the
 * forward's workspace bytes (may be NULL when that is 0). Asynchronous on the handle's stream. */
int cudnn_attn_fwd(cudnn_attn *a, const cudnn_attn_shape *sh, const void *q, const void *k,
                   const void *v, void *out, float *lse, void *ws, size_t ws_bytes);
/* dq, dk, dv (overwritten) from dout and the forward's q, k, v, out, lse. ws: at least the
 * backward's workspace bytes (the row sums rowsum(dout * out), cuDNN's own; chunked: also the
 * fp32 dk, dv sums and a chunk's bf16 dk, dv). */
int cudnn_attn_bwd(cudnn_attn *a, const cudnn_attn_shape *sh, const void *dout, const void *q,
                   const void *k, const void *v, const void *out, const float *lse, void *dq,
                   void *dk, void *dv, void *ws, size_t ws_bytes);

#ifdef __cplusplus
}
#endif

#endif
