/* The device state behind a CUDA zy_ctx (ctx->cuda), shared by the ops/cuda/ops_*.cu files: the
 * stream every op runs on, the cuBLASLt context, one workspace for the backward column sums, the
 * attention backward scratch, cuDNN's attention plans and the profiler's events. C++ only. */
#ifndef ZY_OPS_CUDA_STATE_H
#define ZY_OPS_CUDA_STATE_H

#include "ops/cuda/cuda_util.h"
#include "ops/cuda/gemm.h"
#include "ops/ops.h"

#include <cuda_runtime.h>

#include "base/check.h" /* ZY_CUDA_CHECK and friends: every ops/cuda file checks through these */

/* Side streams for concurrent expert GEMMs (one expert's GEMM fills few SMs): at most
 * CUDA_SIDE_STREAMS, as many as zy_cuda_opts.expert_streams (cuda.expert_streams in the training
 * config; default ZY_EXPERT_STREAMS_DEFAULT). On an H200 at bench-small, 2 streams gave the
 * shortest step: ~0.4 ms less than 4; 3, 8 and 16 were slower than 4 (dev/scripts/gpu_speed.sh;
 * results/single-gpu/README.md). */
#define CUDA_SIDE_STREAMS ZY_EXPERT_STREAMS_MAX
#define CUDA_PROF_SLOTS   8192 /* event pairs between two ops_prof_read calls */
#define CUDA_PROF_NAMES   96

typedef struct {
    cudaStream_t stream;
    cuda_gemm_ctx gemm;
    /* side streams for the expert GEMMs, each with its own cuBLASLt context (workspace, plans);
     * forked from and joined back into `stream` with events */
    cudaStream_t side[CUDA_SIDE_STREAMS];
    cuda_gemm_ctx side_gemm[CUDA_SIDE_STREAMS];
    cudaEvent_t fork, join[CUDA_SIDE_STREAMS];
    int nside;        /* side streams created */
    int expert_chunk; /* zy_cuda_opts.expert_chunk: blocked expert GEMMs (ops_experts.cu) */
    void *ws;         /* column-sum workspace (grown on demand by cuda_ws) */
    size_t ws_bytes;
    int attention;            /* zy_cuda_opts.attention: zy_attention_backend */
    struct cudnn_attn *cudnn; /* cuDNN's handle and plans (ops_attention.cu); NULL when unused */
    int attention_ws_auto;    /* cuda.attention_workspace_gib = auto: the job may raise the cap */
    /* profiler */
    cudaEvent_t *ev; /* [2 * CUDA_PROF_SLOTS] start/stop pairs */
    const char **ev_name;
    int nslots;
    zy_op_time times[CUDA_PROF_NAMES];
    int ntimes;
} cuda_state;

/* The state of a CUDA context. */
static inline cuda_state *cuda_st(zy_ctx *ctx) {
    return (cuda_state *)ctx->cuda;
}
static inline cudaStream_t cuda_stream(zy_ctx *ctx) {
    return ((cuda_state *)ctx->cuda)->stream;
}
/* Sets up the attention backend of opts->attention, with cuDNN's backward workspace capped at
 * opts->attention_workspace_gib (ops_attention.cu), on a context whose stream exists; ZY_ERR (bad
 * input) when CUDNN is asked for and cuDNN cannot load. */
int cuda_attention_ctx_init(zy_ctx *ctx, const zy_cuda_opts *opts);
void cuda_attention_ctx_free(cuda_state *s);
/* A workspace of at least bytes (reallocated when too small, after waiting for ctx's own stream
 * only: only the first steps of a run grow it). Not for two ops at once, and no op may leave work
 * that reads it running on another stream when it returns (cca_conv_bwd's side stream joins
 * first): a later grow would free it under that work. */
void *cuda_ws(zy_ctx *ctx, size_t bytes);

#endif
