/* The MoE expert GEMMs of ops.h on CUDA. One expert's GEMM (about N*E1/E rows) fills only part of
 * the GPU (bench-small's down projection: 1024 x 1024 outputs = 32 tiles of 128 x 256 for 132
 * SMs), so the experts run on the side streams (cuda_state.h) at once: fork from the context's
 * stream with an event, experts dealt to the streams largest first, join back with events. Each
 * side stream has its own cuBLASLt context (workspace and plan cache), so nothing is shared
 * between concurrent GEMMs; each row's result does not depend on which stream ran it. The
 * backward issues an expert layer's input-gradient and weight-gradient GEMMs as one set of jobs
 * (cuda_ops_expert_matmul_bwd), so neither waits for the other's slowest stream.
 * cuda.expert_chunk on runs the forward and input-gradient GEMMs by blocks instead: every
 * expert's full blocks of CUDA_GEMM_CHUNK_ROWS rows in one pointer-array batched GEMM on the
 * context's stream, the remaining rows on the side streams at the same time. Off by default: on
 * an H100 cuBLASLt's pointer-array kernels ran the blocks no faster than per-expert calls
 * (results/single-gpu/README.md, fourth session). */
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/cuda_state.h"
#include "ops/cuda/grouped_gemm.h"

#include <stdlib.h>

/* The forward and input-gradient GEMMs by blocks (1) or every expert whole (0): the context's
 * zy_cuda_opts.expert_chunk. */
static int use_chunks(zy_ctx *ctx) {
    return cuda_st(ctx)->expert_chunk;
}

/* The GEMM that run_jobs issues on the context's stream beside the side streams' (NULL: none): the
 * blocks' pointer-array GEMM, or with dev_offsets the grouped kernel over all `rows`. */
typedef struct {
    void *out;
    const void *in, *W;
    const int32_t *offsets;
    int E, N, K, data_grad;
    const int32_t *dev_offsets;
    int rows;
} chunk_call;

/* One expert's GEMM: C[M,N] = op(A) op(B) + beta C (gemm.h's expert layout) as cuda_gemm takes
 * it. */
typedef struct {
    cuda_gemm_expert g;
    float beta;
    cuda_gemm_dtype dc;
} expert_job;

/* ctx's stream waits for everything issued so far on the side streams. */
void cuda_ops_expert_join(zy_ctx *ctx) {
    cuda_state *s = cuda_st(ctx);
    for (int i = 0; i < s->nside; i++) {
        ZY_CUDA_CHECK(cudaEventRecord(s->join[i], s->side[i]));
        ZY_CUDA_CHECK(cudaStreamWaitEvent(s->stream, s->join[i], 0));
    }
}

/* Runs jobs[0..n) spread over the side streams, and cc (when not NULL) on ctx's stream at the same
 * time, ordered after everything issued on ctx's stream and (wait = 1) before anything issued
 * after; wait = 0 leaves the side streams running for cuda_ops_expert_join. Larger jobs are dealt
 * first, each to the least loaded stream (by rows), so the streams finish at about the same
 * time. */
static void run_jobs(zy_ctx *ctx, expert_job *jobs, int n, const chunk_call *cc, int wait) {
    cuda_state *s = cuda_st(ctx);
    if (n == 0 && !cc) return;            /* with blocks only, no stream is forked (ns = 0) */
    int order[2 * CUDA_GEMM_MAX_EXPERTS]; /* the backward's data and weight gradients */
    ZY_CHECKF(n <= 2 * CUDA_GEMM_MAX_EXPERTS, "expert_matmul: %d GEMMs (at most %d)", n,
              2 * CUDA_GEMM_MAX_EXPERTS);
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 1; i < n; i++) /* insertion sort by work, largest first (n is small) */
        for (int j = i; j > 0; j--) {
            const expert_job *a = &jobs[order[j - 1]], *b = &jobs[order[j]];
            if ((double)a->g.M * a->g.N * a->g.K >= (double)b->g.M * b->g.N * b->g.K) break;
            int t = order[j - 1];
            order[j - 1] = order[j], order[j] = t;
        }
    int ns = s->nside < n ? s->nside : n;
    double load[CUDA_SIDE_STREAMS] = {0};
    ZY_CUDA_CHECK(cudaEventRecord(s->fork, s->stream));
    for (int i = 0; i < ns; i++) ZY_CUDA_CHECK(cudaStreamWaitEvent(s->side[i], s->fork, 0));
    if (cc && cc->dev_offsets) /* after the fork: the side streams do not wait for it */
        ZY_STATUS_CHECK(cuda_grouped_gemm_bf16(cc->out, cc->in, cc->W, cc->dev_offsets, cc->E,
                                               cc->N, cc->K, cc->rows, cc->data_grad, s->stream));
    else if (cc)
        ZY_STATUS_CHECK(cuda_gemm_grouped_chunks(
            &s->gemm, cc->out, cc->in, cc->W, cc->offsets, cc->E, cc->N, cc->K,
            CUDA_GEMM_CHUNK_ROWS, cc->data_grad, CUDA_GEMM_BF16, CUDA_GEMM_BF16, s->stream));
    for (int i = 0; i < n; i++) {
        const expert_job *j = &jobs[order[i]];
        int best = 0;
        for (int k = 1; k < ns; k++)
            if (load[k] < load[best]) best = k;
        load[best] += (double)j->g.M * j->g.N * j->g.K;
        ZY_STATUS_CHECK(cuda_gemm(&s->side_gemm[best], j->g.C, j->g.A, j->g.B, j->g.M, j->g.N,
                                  j->g.K, j->g.transA, j->g.transB, 1.0f, j->beta, CUDA_GEMM_BF16,
                                  j->dc, s->side[best]));
    }
    /* every side stream, not only the ns used here: an earlier call with wait = 0 may have left
     * work running on the others */
    if (wait) cuda_ops_expert_join(ctx);
}

/* Appends the forward (data_grad 0) or input-gradient (1) GEMM of every expert with rows to
 * jobs[*n..]: with blocks, only the rows after each expert's last full block. */
static void add_data_jobs(expert_job *jobs, int *n, zy_act *out, const zy_act *in, const zy_act *W,
                          const int32_t *offsets_host, int E, int N, int K, int data_grad,
                          int chunks) {
    const cuda_gemm_expert_kind kind = data_grad ? CUDA_GEMM_EXPERT_BWD_DATA : CUDA_GEMM_EXPERT_FWD;
    for (int e = 0; e < E; e++) {
        int ne = offsets_host[e + 1] - offsets_host[e];
        const int blocked = chunks ? ne / CUDA_GEMM_CHUNK_ROWS * CUDA_GEMM_CHUNK_ROWS : 0;
        ne -= blocked;
        if (ne <= 0) continue;
        expert_job *j = &jobs[(*n)++];
        j->g = cuda_gemm_expert_problem(kind, e, offsets_host[e] + blocked, ne, out, in, W, N, K,
                                        CUDA_GEMM_BF16, CUDA_GEMM_BF16);
        j->beta = 0.0f, j->dc = CUDA_GEMM_BF16;
    }
}

/* Appends the weight-gradient GEMM of every expert with rows to jobs[*n..]; an expert without
 * rows gets zeros (beta 0, on ctx's stream before the fork) or is left alone (beta 1). */
static void add_wgrad_jobs(zy_ctx *ctx, expert_job *jobs, int *n, float *dW, const zy_act *dY,
                           const zy_act *X, const int32_t *offsets_host, int E, int N, int K,
                           float beta) {
    for (int e = 0; e < E; e++) {
        int ne = offsets_host[e + 1] - offsets_host[e];
        if (ne <= 0) {
            if (beta == 0.0f)
                ZY_CUDA_CHECK(cudaMemsetAsync(dW + (size_t)e * N * K, 0,
                                              (size_t)N * K * sizeof(float), cuda_stream(ctx)));
            continue;
        }
        expert_job *j = &jobs[(*n)++];
        j->g = cuda_gemm_expert_problem(CUDA_GEMM_EXPERT_BWD_WEIGHT, e, offsets_host[e], ne, dW, dY,
                                        X, N, K, CUDA_GEMM_BF16, CUDA_GEMM_FP32);
        j->beta = beta, j->dc = CUDA_GEMM_FP32;
    }
}

void cuda_ops_expert_matmul(zy_ctx *ctx, zy_act *out, const zy_act *in, const zy_act *W,
                            const int32_t *offsets_host, int E, int N, int K, int data_grad) {
    expert_job jobs[CUDA_GEMM_MAX_EXPERTS];
    ZY_CHECKF(E <= CUDA_GEMM_MAX_EXPERTS, "expert_matmul: %d experts (at most %d)", E,
              CUDA_GEMM_MAX_EXPERTS);
    const int chunks = use_chunks(ctx);
    int n = 0;
    add_data_jobs(jobs, &n, out, in, W, offsets_host, E, N, K, data_grad, chunks);
    const chunk_call cc = {out, in, W, offsets_host, E, N, K, data_grad, NULL, 0};
    run_jobs(ctx, jobs, n, chunks ? &cc : NULL, 1);
}

void cuda_ops_expert_matmul_wgrad(zy_ctx *ctx, float *dW, const zy_act *dY, const zy_act *X,
                                  const int32_t *offsets_host, int E, int N, int K, float beta) {
    expert_job jobs[CUDA_GEMM_MAX_EXPERTS];
    ZY_CHECKF(E <= CUDA_GEMM_MAX_EXPERTS, "expert_matmul_wgrad: %d experts (at most %d)", E,
              CUDA_GEMM_MAX_EXPERTS);
    int n = 0;
    add_wgrad_jobs(ctx, jobs, &n, dW, dY, X, offsets_host, E, N, K, beta);
    run_jobs(ctx, jobs, n, NULL, 1);
}

void cuda_ops_expert_matmul_bwd(zy_ctx *ctx, zy_act *dX, float *dW, const zy_act *dY,
                                const zy_act *X, const zy_act *W, const int32_t *offsets_host,
                                const int32_t *offsets, int E, int N, int K, float beta, int wait) {
    expert_job jobs[2 * CUDA_GEMM_MAX_EXPERTS];
    ZY_CHECKF(E <= CUDA_GEMM_MAX_EXPERTS, "expert_matmul_bwd: %d experts (at most %d)", E,
              CUDA_GEMM_MAX_EXPERTS);
    const int rows = offsets_host[E];
    /* the input gradient as one grouped GEMM (fits: its reduction over W's N rows in whole
     * stages, and the pointers' alignment) */
    const int grouped = offsets && rows > 0 && cuda_ops_experts_grouped(ctx, E, N, K) &&
                        cuda_grouped_gemm_fits(dX, dY, W, E, N, K, rows, 1);
    const int chunks = !grouped && use_chunks(ctx);
    int n = 0;
    if (!grouped) add_data_jobs(jobs, &n, dX, dY, W, offsets_host, E, N, K, 1, chunks);
    add_wgrad_jobs(ctx, jobs, &n, dW, dY, X, offsets_host, E, N, K, beta);
    const chunk_call cc = {dX, dY, W, offsets_host, E, N, K, 1, grouped ? offsets : NULL, rows};
    run_jobs(ctx, jobs, n, grouped || chunks ? &cc : NULL, wait);
}

/* The grouped kernel for weights [E, N, K]: the device runs it, the widths fit, and each
 * expert's matrix has at most 4M elements. Past that its [128 x 128] tiles lose to cuBLAS's
 * larger ones (test_cuda_grouped_gemm's timing, 16384 rows over 16 experts, one H100: bench-small's
 * 2048 x 1024 and 1024 x 1024 1.4x and 2.5x faster than the per-expert GEMMs, bench-base's
 * 2048 x 2048 0.99-1.04x and 4096 x 2048 0.83-0.97x), and bench-base's step ran 0.993x as fast
 * with it (results/one-gpu-limit/README.md). */
int cuda_ops_experts_grouped(zy_ctx *ctx, int E, int N, int K) {
    (void)ctx;
    return E >= 1 && E <= CUDA_GEMM_MAX_EXPERTS && N % 8 == 0 && K % 8 == 0 && N >= 8 && K >= 8 &&
           (long long)N * K <= (4ll << 20) && cuda_grouped_gemm_supported();
}

/* One launch on ctx's stream for every expert, the offsets read on the device. */
void cuda_ops_expert_matmul_grouped(zy_ctx *ctx, zy_act *out, const zy_act *in, const zy_act *W,
                                    const int32_t *offsets, int E, int N, int K, int rows) {
    if (rows == 0) return;
    ZY_STATUS_CHECK(
        cuda_grouped_gemm_bf16(out, in, W, offsets, E, N, K, rows, 0, cuda_stream(ctx)));
}

/* The gate_up GEMM and its SwiGLU in one launch on ctx's stream (grouped_gemm.h). */
void cuda_ops_expert_swiglu_grouped(zy_ctx *ctx, zy_act *gu, zy_act *act, const zy_act *in,
                                    const zy_act *W, const int32_t *offsets, int E, int F, int K,
                                    int rows) {
    if (rows == 0) return;
    ZY_STATUS_CHECK(
        cuda_grouped_gemm_swiglu_bf16(gu, act, in, W, offsets, E, F, K, rows, cuda_stream(ctx)));
}
