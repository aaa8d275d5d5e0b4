/* Op dispatch: every ops_* function of ops.h runs the CUDA implementation (ops/cuda/cuda_ops.h)
 * when the context is a CUDA one and the CPU reference (ops/cpu/) otherwise. With ctx->prof set,
 * each op's device time is recorded under its name (CPU: wall time). Owns the choice of the CPU
 * thread count. */
#include "ops/ops.h"

#include "base/err.h"
#include "base/sysmem.h"
#include "base/timer.h"
#include "ops/cpu/cpu_ops.h"
#ifdef ZY_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* Threads for a CPU op: the context's count, or OpenMP's default when it is 0. */
static int cpu_threads(const zy_ctx *ctx) {
    ZY_CHECKF(ctx != NULL && ctx->device == ZY_DEV_CPU,
              "ops: a CUDA context in a build without CUDA");
    int nt = ctx->num_threads > 0 ? ctx->num_threads : omp_get_max_threads();
    return nt > 0 ? nt : 1;
}

/* ---- the CPU profiler: wall time per op name (names are static strings) ---- */
#define CPU_PROF_MAX 64
static zy_op_time cpu_prof[CPU_PROF_MAX];
static int cpu_prof_n;

static void cpu_prof_add(const char *name, double ms) {
    for (int i = 0; i < cpu_prof_n; i++)
        if (cpu_prof[i].name == name || strcmp(cpu_prof[i].name, name) == 0) {
            cpu_prof[i].calls++;
            cpu_prof[i].ms += ms;
            return;
        }
    if (cpu_prof_n < CPU_PROF_MAX) cpu_prof[cpu_prof_n++] = (zy_op_time){name, 1, ms};
}

static int cmp_op_time(const void *a, const void *b) {
    double x = ((const zy_op_time *)a)->ms, y = ((const zy_op_time *)b)->ms;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* CPU ops run in the caller, so their time is the wall time around the body (see CPU_PROF). */
typedef struct {
    const zy_ctx *ctx;
    const char *name;
    double t0;
} cpu_prof_scope;

static cpu_prof_scope cpu_prof_open(const zy_ctx *ctx, const char *name) {
    return (cpu_prof_scope){ctx, name, ctx->prof ? zy_now() : 0.0};
}

static void cpu_prof_close(cpu_prof_scope *s) {
    if (s->ctx->prof) cpu_prof_add(s->name, (zy_now() - s->t0) * 1e3);
}

#define CPU_PROF(ctx, name)                                                                        \
    cpu_prof_scope prof_scope_ __attribute__((cleanup(cpu_prof_close))) = cpu_prof_open(ctx, name)

#ifdef ZY_HAVE_CUDA
/* Runs call on the GPU (timed when profiling) and returns from the op. */
#define ON_CUDA(ctx, name, call)                                                                   \
    if ((ctx)->device == ZY_DEV_CUDA) {                                                            \
        int slot_ = (ctx)->prof ? cuda_ops_prof_begin(ctx) : -1;                                   \
        call;                                                                                      \
        if (slot_ >= 0) cuda_ops_prof_end(ctx, slot_, name);                                       \
        return;                                                                                    \
    }                                                                                              \
    CPU_PROF(ctx, name)
#define ON_CUDA_RET(ctx, name, call)                                                               \
    if ((ctx)->device == ZY_DEV_CUDA) {                                                            \
        int slot_ = (ctx)->prof ? cuda_ops_prof_begin(ctx) : -1;                                   \
        __typeof__(call) ret_ = call;                                                              \
        if (slot_ >= 0) cuda_ops_prof_end(ctx, slot_, name);                                       \
        return ret_;                                                                               \
    }                                                                                              \
    CPU_PROF(ctx, name)
#else
#define ON_CUDA(ctx, name, call)     CPU_PROF(ctx, name)
#define ON_CUDA_RET(ctx, name, call) CPU_PROF(ctx, name)
#endif

/* ---- contexts ---- */

/* A CPU context with fp32 activations. */
void ops_ctx_init_cpu(zy_ctx *ctx, int num_threads) {
    memset(ctx, 0, sizeof *ctx);
    ctx->device = ZY_DEV_CPU;
    ctx->num_threads = num_threads;
    ctx->act_dtype = ZY_DTYPE_F32;
}

const char *const zy_attention_backend_names[] = {"auto", "zayac", "cudnn", NULL};

zy_cuda_opts ops_cuda_opts_default(void) {
    return (zy_cuda_opts){.expert_streams = ZY_EXPERT_STREAMS_DEFAULT,
                          .overlap_optimizer = 1,
                          .expert_chunk = 0,
                          .attention = ZY_ATTN_AUTO,
                          .attention_workspace_gib = ZY_ATTN_WORKSPACE_AUTO};
}

/* A CUDA context on GPU gpu with bf16 activations and the default options. */
int ops_ctx_init_cuda(zy_ctx *ctx, int gpu) {
    return ops_ctx_init_cuda_opts(ctx, gpu, NULL);
}

/* A CUDA context on GPU gpu with bf16 activations. */
int ops_ctx_init_cuda_opts(zy_ctx *ctx, int gpu, const zy_cuda_opts *opts) {
    memset(ctx, 0, sizeof *ctx);
    const zy_cuda_opts o = opts ? *opts : ops_cuda_opts_default();
    if (o.expert_streams < 1 || o.expert_streams > ZY_EXPERT_STREAMS_MAX)
        return zy_fail("cuda.expert_streams = %d is outside [1, %d]", o.expert_streams,
                       ZY_EXPERT_STREAMS_MAX);
    if (o.overlap_optimizer != 0 && o.overlap_optimizer != 1)
        return zy_fail("cuda.overlap_optimizer = %d must be 0 or 1", o.overlap_optimizer);
    if (o.expert_chunk != 0 && o.expert_chunk != 1)
        return zy_fail("cuda.expert_chunk = %d must be 0 or 1", o.expert_chunk);
    if (o.attention < ZY_ATTN_AUTO || o.attention > ZY_ATTN_CUDNN)
        return zy_fail("cuda.attention = %d is not a zy_attention_backend", o.attention);
    if (o.attention_workspace_gib != ZY_ATTN_WORKSPACE_AUTO &&
        !(o.attention_workspace_gib >= ZY_ATTN_WORKSPACE_GIB_MIN &&
          o.attention_workspace_gib <= ZY_ATTN_WORKSPACE_GIB_MAX))
        return zy_fail("cuda.attention_workspace_gib = %g is outside [%g, %g] (or auto)",
                       o.attention_workspace_gib, ZY_ATTN_WORKSPACE_GIB_MIN,
                       ZY_ATTN_WORKSPACE_GIB_MAX);
#ifdef ZY_HAVE_CUDA
    return cuda_ops_ctx_init(ctx, gpu, &o);
#else
    (void)gpu;
    return zy_fail("device cuda: this zayac was built without CUDA (rebuild with nvcc on PATH)");
#endif
}

/* Releases a context's device state. */
void ops_ctx_free(zy_ctx *ctx) {
#ifdef ZY_HAVE_CUDA
    if (ctx->device == ZY_DEV_CUDA) cuda_ops_ctx_free(ctx);
#endif
    memset(ctx, 0, sizeof *ctx);
}

/* GPUs usable by this process. */
int ops_cuda_device_count(void) {
#ifdef ZY_HAVE_CUDA
    return cuda_ops_device_count();
#else
    return 0;
#endif
}

int ops_device_mem(zy_ctx *ctx, size_t *used, size_t *total) {
    *used = *total = 0;
#ifdef ZY_HAVE_CUDA
    if (ctx->device == ZY_DEV_CUDA) return cuda_ops_device_mem(ctx, used, total);
#else
    (void)ctx;
#endif
    return 0;
}

/* Waits for the device. */
void ops_sync(zy_ctx *ctx) {
#ifdef ZY_HAVE_CUDA
    if (ctx->device == ZY_DEV_CUDA) cuda_ops_sync(ctx);
#else
    (void)ctx;
#endif
}

void *ops_stream(zy_ctx *ctx) {
#ifdef ZY_HAVE_CUDA
    if (ctx->device == ZY_DEV_CUDA) return cuda_ops_stream(ctx);
#endif
    (void)ctx;
    return NULL;
}

int ops_ctx_init_beside(zy_ctx *side, zy_ctx *ctx) {
#ifdef ZY_HAVE_CUDA
    if (ctx->device == ZY_DEV_CUDA) return cuda_ops_ctx_init_beside(side, ctx);
#endif
    ops_ctx_init_cpu(side, ctx->num_threads);
    return ZY_OK;
}

/* The CPU's marks: a placeholder (its ops are done when they return). */
struct zy_mark {
    char unused;
};

zy_mark *ops_mark_new(zy_ctx *ctx) {
#ifdef ZY_HAVE_CUDA
    if (ctx->device == ZY_DEV_CUDA) return cuda_ops_mark_new(ctx);
#endif
    return zy_calloc(1, sizeof(zy_mark));
}

void ops_mark_free(zy_ctx *ctx, zy_mark *m) {
#ifdef ZY_HAVE_CUDA
    if (ctx->device == ZY_DEV_CUDA) {
        cuda_ops_mark_free(m);
        return;
    }
#endif
    free(m);
}

void ops_mark(zy_ctx *ctx, zy_mark *m) {
#ifdef ZY_HAVE_CUDA
    if (ctx->device == ZY_DEV_CUDA) cuda_ops_mark(ctx, m);
#endif
    (void)ctx, (void)m;
}

void ops_wait_mark(zy_ctx *ctx, zy_mark *m) {
#ifdef ZY_HAVE_CUDA
    if (ctx->device == ZY_DEV_CUDA) cuda_ops_wait_mark(ctx, m);
#endif
    (void)ctx, (void)m;
}

void ops_mark_wait_host(zy_ctx *ctx, zy_mark *m) {
#ifdef ZY_HAVE_CUDA
    if (ctx->device == ZY_DEV_CUDA) cuda_ops_mark_wait_host(m);
#endif
    (void)ctx, (void)m;
}

/* ---- activation dtype helpers ---- */

size_t ops_act_size(const zy_ctx *ctx) {
    return ctx->act_dtype == ZY_DTYPE_BF16 ? 2 : 4;
}

zy_act *ops_act_at(const zy_ctx *ctx, const zy_act *p, size_t n) {
    return (char *)p + n * ops_act_size(ctx);
}

/* fp32 -> activation dtype. */
void ops_cast_to_act(zy_ctx *ctx, zy_act *dst, const float *src, size_t n) {
    ON_CUDA(ctx, "cast_to_act", cuda_ops_cast_to_act(ctx, dst, src, n));
    if (dst != src) cpu_copy(cpu_threads(ctx), dst, src, n * sizeof(float));
}

/* Activation dtype -> fp32. */
void ops_act_to_f32(zy_ctx *ctx, float *dst, const zy_act *src, size_t n) {
    ON_CUDA(ctx, "act_to_f32", cuda_ops_act_to_f32(ctx, dst, src, n));
    if (dst != src) cpu_copy(cpu_threads(ctx), dst, src, n * sizeof(float));
}

/* ---- profiler ---- */

void ops_prof_reset(zy_ctx *ctx) {
#ifdef ZY_HAVE_CUDA
    if (ctx->device == ZY_DEV_CUDA) {
        cuda_ops_prof_reset(ctx);
        return;
    }
#endif
    (void)ctx;
    cpu_prof_n = 0;
}

int ops_prof_read(zy_ctx *ctx, zy_op_time *out, int max) {
#ifdef ZY_HAVE_CUDA
    if (ctx->device == ZY_DEV_CUDA) return cuda_ops_prof_read(ctx, out, max);
#endif
    (void)ctx;
    zy_op_time sorted[CPU_PROF_MAX];
    memcpy(sorted, cpu_prof, (size_t)cpu_prof_n * sizeof *sorted);
    qsort(sorted, (size_t)cpu_prof_n, sizeof *sorted, cmp_op_time);
    int n = cpu_prof_n < max ? cpu_prof_n : max;
    memcpy(out, sorted, (size_t)n * sizeof *out);
    return n;
}

/* ---- memory (not profiled) ---- */

/* Allocates zeroed, aligned memory on the context's device; aborts on OOM. */
void *ops_alloc(zy_ctx *ctx, size_t bytes) {
#ifdef ZY_HAVE_CUDA
    if (ctx->device == ZY_DEV_CUDA) return cuda_ops_alloc(ctx, bytes);
#endif
    cpu_threads(ctx);
    return cpu_alloc(bytes);
}

void *ops_alloc_releasable(zy_ctx *ctx, size_t bytes) {
#ifdef ZY_HAVE_CUDA
    if (ctx->device == ZY_DEV_CUDA) return cuda_ops_alloc_releasable(ctx, bytes);
#endif
    return ops_alloc(ctx, bytes);
}

size_t ops_release_except(zy_ctx *ctx, void *p, size_t bytes, const size_t (*keep)[2], int nkeep) {
#ifdef ZY_HAVE_CUDA
    if (ctx->device == ZY_DEV_CUDA) return cuda_ops_release_except(ctx, p, bytes, keep, nkeep);
#endif
    (void)ctx, (void)p, (void)keep, (void)nkeep;
    return bytes;
}

size_t ops_attention_workspace_bytes(zy_ctx *ctx, int B, int T, int Hq, int d) {
#ifdef ZY_HAVE_CUDA
    if (ctx->device == ZY_DEV_CUDA) return cuda_ops_attention_workspace_bytes(ctx, B, T, Hq, d);
#endif
    return 0;
}

size_t ops_attention_workspace_wanted(zy_ctx *ctx, int B, int T, int Hq, int Hk, int d) {
#ifdef ZY_HAVE_CUDA
    if (ctx->device == ZY_DEV_CUDA)
        return cuda_ops_attention_workspace_wanted(ctx, B, T, Hq, Hk, d);
#endif
    (void)B, (void)T, (void)Hq, (void)Hk, (void)d;
    return 0;
}

size_t ops_attention_workspace_grow(zy_ctx *ctx, size_t want, size_t spare) {
#ifdef ZY_HAVE_CUDA
    if (ctx->device == ZY_DEV_CUDA) return cuda_ops_attention_workspace_grow(ctx, want, spare);
#endif
    (void)want, (void)spare;
    return 0;
}

size_t ops_mem_available(zy_ctx *ctx) {
#ifdef ZY_HAVE_CUDA
    if (ctx->device == ZY_DEV_CUDA) return cuda_ops_mem_available(ctx);
#endif
    size_t bytes;
    zy_host_mem_available(&bytes);
    return bytes;
}

/* Frees memory from ops_alloc (NULL is ignored). */
void ops_free(zy_ctx *ctx, void *p) {
#ifdef ZY_HAVE_CUDA
    if (ctx->device == ZY_DEV_CUDA) {
        cuda_ops_free(ctx, p);
        return;
    }
#endif
    cpu_threads(ctx);
    cpu_free(p);
}

/* Copies bytes between host and device memory in any direction. */
void ops_copy(zy_ctx *ctx, void *dst, const void *src, size_t bytes) {
#ifdef ZY_HAVE_CUDA
    if (ctx->device == ZY_DEV_CUDA) {
        cuda_ops_copy(ctx, dst, src, bytes);
        return;
    }
#endif
    cpu_copy(cpu_threads(ctx), dst, src, bytes);
}

void *ops_host_alloc(zy_ctx *ctx, size_t bytes) {
#ifdef ZY_HAVE_CUDA
    if (ctx->device == ZY_DEV_CUDA) return cuda_ops_host_alloc(ctx, bytes);
#endif
    (void)ctx;
    return zy_malloc(bytes ? bytes : 1);
}

void ops_host_free(zy_ctx *ctx, void *p) {
#ifdef ZY_HAVE_CUDA
    if (ctx->device == ZY_DEV_CUDA) {
        cuda_ops_host_free(ctx, p);
        return;
    }
#endif
    (void)ctx;
    free(p);
}

/* Queued on the stream (CUDA); the CPU copies at once. */
void ops_copy_async(zy_ctx *ctx, void *dst, const void *src, size_t bytes) {
#ifdef ZY_HAVE_CUDA
    if (ctx->device == ZY_DEV_CUDA) {
        cuda_ops_copy_async(ctx, dst, src, bytes);
        return;
    }
#endif
    cpu_copy(cpu_threads(ctx), dst, src, bytes);
}

/* Sets n floats to value. */
void ops_fill(zy_ctx *ctx, float *x, float value, size_t n) {
    ON_CUDA(ctx, "fill", cuda_ops_fill(ctx, x, value, n));
    cpu_fill(cpu_threads(ctx), x, value, n);
}

/* Sets bytes to zero. */
void ops_zero(zy_ctx *ctx, void *p, size_t bytes) {
    ON_CUDA(ctx, "zero", cuda_ops_zero(ctx, p, bytes));
    cpu_threads(ctx);
    memset(p, 0, bytes);
}

/* ---- dense algebra ---- */

/* C = alpha op(A) op(B) + beta C (OpenBLAS sgemm). */
void ops_matmul(zy_ctx *ctx, zy_act *C, const zy_act *A, const zy_act *B, int M, int N, int K,
                int transA, int transB, float alpha, float beta) {
    ON_CUDA(ctx, "matmul", cuda_ops_matmul(ctx, C, A, B, M, N, K, transA, transB, alpha, beta));
    cpu_matmul(cpu_threads(ctx), C, A, B, M, N, K, transA, transB, alpha, beta);
}

/* fp32 C = alpha op(A) op(B) + beta C. */
void ops_matmul_f32(zy_ctx *ctx, float *C, const zy_act *A, const zy_act *B, int M, int N, int K,
                    int transA, int transB, float alpha, float beta) {
    ON_CUDA(ctx, "matmul_f32",
            cuda_ops_matmul_f32(ctx, C, A, B, M, N, K, transA, transB, alpha, beta));
    cpu_matmul(cpu_threads(ctx), C, A, B, M, N, K, transA, transB, alpha, beta);
}

/* Per-expert GEMMs over grouped rows (the CPU runs them one after another). */
void ops_expert_matmul(zy_ctx *ctx, zy_act *out, const zy_act *in, const zy_act *W,
                       const int32_t *offsets_host, int E, int N, int K, int data_grad) {
    ON_CUDA(ctx, "expert_matmul",
            cuda_ops_expert_matmul(ctx, out, in, W, offsets_host, E, N, K, data_grad));
    int nt = cpu_threads(ctx);
    const int in_w = data_grad ? N : K, out_w = data_grad ? K : N;
    for (int e = 0; e < E; e++) {
        size_t r0 = (size_t)offsets_host[e];
        int ne = offsets_host[e + 1] - offsets_host[e];
        if (ne > 0)
            cpu_matmul(nt, (float *)out + r0 * out_w, (const float *)in + r0 * in_w,
                       (const float *)W + (size_t)e * N * K, ne, out_w, in_w, 0, !data_grad, 1.0f,
                       0.0f);
    }
}

int ops_experts_grouped(zy_ctx *ctx, int E, int N, int K) {
#ifdef ZY_HAVE_CUDA
    if (ctx->device == ZY_DEV_CUDA) return cuda_ops_experts_grouped(ctx, E, N, K);
#endif
    (void)ctx, (void)E, (void)N, (void)K;
    return 0;
}

/* The forward expert GEMMs from offsets in ctx's memory (the CPU's are host memory). */
void ops_expert_matmul_grouped(zy_ctx *ctx, zy_act *out, const zy_act *in, const zy_act *W,
                               const int32_t *offsets, int E, int N, int K, int rows) {
    ON_CUDA(ctx, "expert_matmul",
            cuda_ops_expert_matmul_grouped(ctx, out, in, W, offsets, E, N, K, rows));
    ZY_CHECKF(offsets[E] <= rows, "expert_matmul_grouped: %d routed rows of %d", offsets[E], rows);
    ops_expert_matmul(ctx, out, in, W, offsets, E, N, K, 0);
}

void ops_expert_swiglu_grouped(zy_ctx *ctx, zy_act *gu, zy_act *act, const zy_act *in,
                               const zy_act *W, const int32_t *offsets, int E, int F, int K,
                               int rows) {
    ON_CUDA(ctx, "expert_matmul_swiglu",
            cuda_ops_expert_swiglu_grouped(ctx, gu, act, in, W, offsets, E, F, K, rows));
    ZY_CHECKF(offsets[E] <= rows, "expert_swiglu_grouped: %d routed rows of %d", offsets[E], rows);
    ops_expert_matmul(ctx, gu, in, W, offsets, E, 2 * F, K, 0);
    ops_swiglu_fwd(ctx, act, gu, offsets[E], F);
}

/* dW[e] = dY[rows of e]^T X[rows of e] + beta dW[e]. */
void ops_expert_matmul_wgrad(zy_ctx *ctx, float *dW, const zy_act *dY, const zy_act *X,
                             const int32_t *offsets_host, int E, int N, int K, float beta) {
    ZY_CHECKF(beta == 0.0f || beta == 1.0f, "expert_matmul_wgrad: beta %g (0 or 1)", (double)beta);
    ON_CUDA(ctx, "expert_matmul_wgrad",
            cuda_ops_expert_matmul_wgrad(ctx, dW, dY, X, offsets_host, E, N, K, beta));
    int nt = cpu_threads(ctx);
    for (int e = 0; e < E; e++) {
        size_t r0 = (size_t)offsets_host[e];
        int ne = offsets_host[e + 1] - offsets_host[e];
        float *dWe = dW + (size_t)e * N * K;
        if (ne > 0)
            cpu_matmul(nt, dWe, (const float *)dY + r0 * N, (const float *)X + r0 * K, N, K, ne, 1,
                       0, 1.0f, beta);
        else if (beta == 0.0f)
            cpu_fill(nt, dWe, 0.0f, (size_t)N * K);
    }
}

/* dX and dW together (the CPU runs the two ops one after the other). */
void ops_expert_matmul_bwd(zy_ctx *ctx, zy_act *dX, float *dW, const zy_act *dY, const zy_act *X,
                           const zy_act *W, const int32_t *offsets_host, const int32_t *offsets,
                           int E, int N, int K, float beta, int wait) {
    ZY_CHECKF(beta == 0.0f || beta == 1.0f, "expert_matmul_bwd: beta %g (0 or 1)", (double)beta);
    ON_CUDA(ctx, "expert_matmul_bwd",
            cuda_ops_expert_matmul_bwd(ctx, dX, dW, dY, X, W, offsets_host, offsets, E, N, K, beta,
                                       wait));
    (void)offsets;
    ops_expert_matmul(ctx, dX, dY, W, offsets_host, E, N, K, 1);
    ops_expert_matmul_wgrad(ctx, dW, dY, X, offsets_host, E, N, K, beta);
}

/* The CPU has nothing left running. */
void ops_expert_join(zy_ctx *ctx) {
    ON_CUDA(ctx, "expert_join", cuda_ops_expert_join(ctx));
}

/* y += x. */
void ops_add_act(zy_ctx *ctx, zy_act *y, const zy_act *x, size_t n) {
    ON_CUDA(ctx, "add_act", cuda_ops_add_act(ctx, y, x, n));
    cpu_axpy(cpu_threads(ctx), y, x, 1.0f, n);
}

/* y[N,C] += bias[C]. */
void ops_add_bias(zy_ctx *ctx, zy_act *y, const float *bias, int N, int C) {
    ON_CUDA(ctx, "add_bias", cuda_ops_add_bias(ctx, y, bias, N, C));
    cpu_add_bias(cpu_threads(ctx), y, bias, N, C);
}

void ops_bias_gelu_fwd(zy_ctx *ctx, zy_act *y, zy_act *x, const float *bias, int N, int C) {
    ON_CUDA(ctx, "bias_gelu", cuda_ops_bias_gelu_fwd(ctx, y, x, bias, N, C));
    cpu_add_bias(cpu_threads(ctx), x, bias, N, C);
    cpu_gelu_fwd(cpu_threads(ctx), y, x, (size_t)N * C);
}

/* dbias[C] += column sums of dy[N,C]. */
void ops_bias_bwd(zy_ctx *ctx, float *dbias, const zy_act *dy, int N, int C) {
    ON_CUDA(ctx, "bias_bwd", cuda_ops_bias_bwd(ctx, dbias, dy, N, C));
    cpu_bias_bwd(cpu_threads(ctx), dbias, dy, N, C);
}

/* dx = dy * GELU'(x) and dbias[C] += column sums of dx. */
void ops_gelu_bias_bwd(zy_ctx *ctx, zy_act *dx, float *dbias, const zy_act *dy, const zy_act *x,
                       int N, int C) {
    ON_CUDA(ctx, "gelu_bias_bwd", cuda_ops_gelu_bias_bwd(ctx, dx, dbias, dy, x, N, C));
    cpu_gelu_bwd(cpu_threads(ctx), dx, dy, x, (size_t)N * C);
    cpu_bias_bwd(cpu_threads(ctx), dbias, dx, N, C);
}

/* h = (emb[ids] + bias) * scale. */
void ops_embed_fwd(zy_ctx *ctx, float *h, const float *emb, const int32_t *ids, const float *bias,
                   const float *scale, int N, int D) {
    ON_CUDA(ctx, "embed_fwd", cuda_ops_embed_fwd(ctx, h, emb, ids, bias, scale, N, D));
    cpu_embed_fwd(cpu_threads(ctx), h, emb, ids, bias, scale, N, D);
}

/* demb, dbias, dscale += gradients of the embedding affine. */
void ops_embed_bwd(zy_ctx *ctx, float *demb, float *dbias, float *dscale, const float *dh,
                   const float *emb, const int32_t *ids, const float *bias, const float *scale,
                   int N, int D, int skip_id) {
    ON_CUDA(ctx, "embed_bwd",
            cuda_ops_embed_bwd(ctx, demb, dbias, dscale, dh, emb, ids, bias, scale, N, D, skip_id));
    cpu_embed_bwd(cpu_threads(ctx), demb, dbias, dscale, dh, emb, ids, bias, scale, N, D, skip_id);
}

/* y = x * rstd * w; saves rstd. */
void ops_rmsnorm_fwd(zy_ctx *ctx, zy_act *y, float *rstd, const void *x, zy_dtype xt,
                     const float *w, int N, int C, float eps) {
    ON_CUDA(ctx, "rmsnorm_fwd", cuda_ops_rmsnorm_fwd(ctx, y, rstd, x, xt, w, N, C, eps));
    ZY_CHECKF(xt == ZY_DTYPE_F32, "rmsnorm: the CPU holds fp32 only");
    cpu_rmsnorm_fwd(cpu_threads(ctx), y, rstd, x, w, N, C, eps);
}

/* dx (= or +=), dw +=. */
void ops_rmsnorm_bwd(zy_ctx *ctx, void *dx, float *dw, const zy_act *dy, const void *x, zy_dtype xt,
                     const float *w, const float *rstd, int N, int C, int accumulate) {
    ON_CUDA(ctx, "rmsnorm_bwd",
            cuda_ops_rmsnorm_bwd(ctx, dx, dw, dy, x, xt, w, rstd, N, C, accumulate));
    ZY_CHECKF(xt == ZY_DTYPE_F32, "rmsnorm: the CPU holds fp32 only");
    cpu_rmsnorm_bwd(cpu_threads(ctx), dx, dw, dy, x, w, rstd, N, C, accumulate);
}

void ops_router_norm_fwd(zy_ctx *ctx, zy_act *z, zy_act *u0, float *rstd, const float *bias,
                         const zy_act *r_prev, const float *g, const float *w, int N, int R,
                         float eps) {
#ifdef ZY_HAVE_CUDA
    if (ctx->device == ZY_DEV_CUDA && cuda_ops_router_norm_fwd_fits(R, z, u0, bias, r_prev, g, w)) {
        ON_CUDA(ctx, "router_norm_fwd",
                cuda_ops_router_norm_fwd(ctx, z, u0, rstd, bias, r_prev, g, w, N, R, eps));
    }
#endif
    ops_add_bias(ctx, z, bias, N, R);
    if (r_prev) ops_eda_fwd(ctx, z, r_prev, g, N, R);
    ops_rmsnorm_fwd(ctx, u0, rstd, z, ctx->act_dtype, w, N, R, eps);
}

void ops_router_norm_bwd(zy_ctx *ctx, zy_act *dz, float *dw, float *dg, float *dbias, zy_act *carry,
                         int carry_in, const zy_act *du0, const zy_act *z, const zy_act *r_prev,
                         const float *w, const float *rstd, const float *g, int N, int R) {
#ifdef ZY_HAVE_CUDA
    if (ctx->device == ZY_DEV_CUDA &&
        cuda_ops_router_norm_bwd_fits(R, dz, carry, du0, z, r_prev, w, g)) {
        ON_CUDA(ctx, "router_norm_bwd",
                cuda_ops_router_norm_bwd(ctx, dz, dw, dg, dbias, carry, carry_in, du0, z, r_prev, w,
                                         rstd, g, N, R));
    }
#endif
    ops_rmsnorm_bwd(ctx, dz, dw, du0, z, ctx->act_dtype, w, rstd, N, R, 0);
    if (carry_in) ops_add_act(ctx, dz, carry, (size_t)N * R);
    if (r_prev) ops_eda_bwd(ctx, carry, dg, dz, r_prev, g, N, R);
    ops_bias_bwd(ctx, dbias, dz, N, R);
}

/* out = (o + ob) * os + (h + rb) * rs. */
void ops_resscale_fwd(zy_ctx *ctx, float *out, const zy_act *o, const float *h, const float *ob,
                      const float *os, const float *rb, const float *rs, int N, int D) {
    ON_CUDA(ctx, "resscale_fwd", cuda_ops_resscale_fwd(ctx, out, o, h, ob, os, rb, rs, N, D));
    cpu_resscale_fwd(cpu_threads(ctx), out, o, h, ob, os, rb, rs, N, D);
}

/* d_o, dh (=), parameter gradients (+=). */
void ops_resscale_bwd(zy_ctx *ctx, zy_act *d_o, float *dh, float *dob, float *dos, float *drb,
                      float *drs, const float *dout, const zy_act *o, const float *h,
                      const float *ob, const float *os, const float *rb, const float *rs, int N,
                      int D) {
    ON_CUDA(
        ctx, "resscale_bwd",
        cuda_ops_resscale_bwd(ctx, d_o, dh, dob, dos, drb, drs, dout, o, h, ob, os, rb, rs, N, D));
    cpu_resscale_bwd(cpu_threads(ctx), d_o, dh, dob, dos, drb, drs, dout, o, h, ob, os, rb, rs, N,
                     D);
}

/* Residual scaling + RMSNorm; the CPU runs the two ops. */
void ops_resnorm_fwd(zy_ctx *ctx, float *out, zy_act *y, float *rstd, const zy_act *o,
                     const float *h, const float *ob, const float *os, const float *rb,
                     const float *rs, const float *w, int N, int D, float eps) {
    ON_CUDA(ctx, "resnorm_fwd",
            cuda_ops_resnorm_fwd(ctx, out, y, rstd, o, h, ob, os, rb, rs, w, N, D, eps));
    cpu_resscale_fwd(cpu_threads(ctx), out, o, h, ob, os, rb, rs, N, D);
    cpu_rmsnorm_fwd(cpu_threads(ctx), y, rstd, out, w, N, D, eps);
}

void ops_resnorm_bwd(zy_ctx *ctx, zy_act *d_o, float *dh, float *dw, float *dob, float *dos,
                     float *drb, float *drs, const zy_act *dy, const float *dres, const float *out,
                     const float *rstd, const float *w, const zy_act *o, const float *h,
                     const float *ob, const float *os, const float *rb, const float *rs, int N,
                     int D) {
    ON_CUDA(ctx, "resnorm_bwd",
            cuda_ops_resnorm_bwd(ctx, d_o, dh, dw, dob, dos, drb, drs, dy, dres, out, rstd, w, o, h,
                                 ob, os, rb, rs, N, D));
    int nt = cpu_threads(ctx);
    size_t nd = (size_t)N * D;
    if (!dres) /* dout is built in dh: dres (dh may alias it) plus the norm's gradient */
        cpu_fill(nt, dh, 0.0f, nd);
    else if (dres != dh)
        memcpy(dh, dres, nd * sizeof(float));
    cpu_rmsnorm_bwd(nt, dh, dw, dy, out, w, rstd, N, D, 1);
    cpu_resscale_bwd(nt, d_o, dh, dob, dos, drb, drs, dh, o, h, ob, os, rb, rs, N, D);
}

/* q, k (and mid_save) from qk0 through the two causal convolutions and the mean residuals. */
void ops_cca_conv_fwd(zy_ctx *ctx, zy_act *q, zy_act *k, zy_act *mid_save, const zy_act *qk0,
                      const zy_act *state, const float *w1, const float *b1, const float *w2,
                      const float *b2, int B, int T, int Hq, int Hk, int d, int t0, int t1) {
    ON_CUDA(ctx, "cca_conv_fwd",
            cuda_ops_cca_conv_fwd(ctx, q, k, mid_save, qk0, state, w1, b1, w2, b2, B, T, Hq, Hk, d,
                                  t0, t1));
    cpu_cca_conv_fwd(cpu_threads(ctx), q, k, mid_save, qk0, state, w1, b1, w2, b2, B, T, Hq, Hk, d,
                     t0, t1);
}

/* dqk0 (=), conv parameter gradients (+=). */
void ops_cca_conv_bwd(zy_ctx *ctx, zy_act *dqk0, float *dw1, float *db1, float *dw2, float *db2,
                      const zy_act *dq, const zy_act *dk, const zy_act *qk0, const zy_act *mid_save,
                      const float *w1, const float *w2, int B, int T, int Hq, int Hk, int d, int t0,
                      int t1) {
    ON_CUDA(ctx, "cca_conv_bwd",
            cuda_ops_cca_conv_bwd(ctx, dqk0, dw1, db1, dw2, db2, dq, dk, qk0, mid_save, w1, w2, B,
                                  T, Hq, Hk, d, t0, t1));
    cpu_cca_conv_bwd(cpu_threads(ctx), dqk0, dw1, db1, dw2, db2, dq, dk, qk0, mid_save, w1, w2, B,
                     T, Hq, Hk, d, t0, t1);
}

/* v = [vcur[t] | vdel[t-1]]. */
void ops_value_delay_fwd(zy_ctx *ctx, zy_act *v, const zy_act *vv, const zy_act *prev, int B, int T,
                         int half) {
    ON_CUDA(ctx, "value_delay_fwd", cuda_ops_value_delay_fwd(ctx, v, vv, prev, B, T, half));
    cpu_value_delay_fwd(cpu_threads(ctx), v, vv, prev, B, T, half);
}

/* dvv (=) from dv. */
void ops_value_delay_bwd(zy_ctx *ctx, zy_act *dvv, const zy_act *dv, int B, int T, int half) {
    ON_CUDA(ctx, "value_delay_bwd", cuda_ops_value_delay_bwd(ctx, dvv, dv, B, T, half));
    cpu_value_delay_bwd(cpu_threads(ctx), dvv, dv, B, T, half);
}

/* QK norm, key temperature and partial RoPE: q_in, k_in -> q, k. */
void ops_qknorm_rope_fwd(zy_ctx *ctx, zy_act *q, zy_act *k, float *qn, float *kn,
                         const zy_act *q_in, const zy_act *k_in, const float *temp,
                         const int32_t *pos, int N, int Hq, int Hk, int d, int rot, double theta,
                         float eps_norm) {
    ON_CUDA(ctx, "qknorm_rope_fwd",
            cuda_ops_qknorm_rope_fwd(ctx, q, k, qn, kn, q_in, k_in, temp, pos, N, Hq, Hk, d, rot,
                                     theta, eps_norm));
    cpu_qknorm_rope_fwd(cpu_threads(ctx), q, k, qn, kn, q_in, k_in, temp, pos, N, Hq, Hk, d, rot,
                        theta, eps_norm);
}

/* Backward of the above, in place on dq, dk; dtemp +=. */
void ops_qknorm_rope_bwd(zy_ctx *ctx, zy_act *dq, zy_act *dk, float *dtemp, const zy_act *q_in,
                         const zy_act *k_in, const float *qn, const float *kn, const float *temp,
                         const int32_t *pos, int N, int Hq, int Hk, int d, int rot, double theta,
                         float eps_norm) {
    ON_CUDA(ctx, "qknorm_rope_bwd",
            cuda_ops_qknorm_rope_bwd(ctx, dq, dk, dtemp, q_in, k_in, qn, kn, temp, pos, N, Hq, Hk,
                                     d, rot, theta, eps_norm));
    cpu_qknorm_rope_bwd(cpu_threads(ctx), dq, dk, dtemp, q_in, k_in, qn, kn, temp, pos, N, Hq, Hk,
                        d, rot, theta, eps_norm);
}

/* Causal (optionally windowed) GQA softmax attention; saves lse. */
void ops_attention_fwd(zy_ctx *ctx, zy_act *out, float *lse, const zy_act *q, const zy_act *k,
                       const zy_act *v, int B, int T, int Hq, int Hk, int d, float scale,
                       int window) {
    ON_CUDA(ctx, "attention_fwd",
            cuda_ops_attention_fwd(ctx, out, lse, q, k, v, B, T, Hq, Hk, d, scale, window));
    cpu_attention_fwd(cpu_threads(ctx), out, lse, q, k, v, B, T, Hq, Hk, d, scale, window);
}

/* dq, dk, dv (=). */
void ops_attention_bwd(zy_ctx *ctx, zy_act *dq, zy_act *dk, zy_act *dv, const zy_act *dout,
                       const zy_act *out, const float *lse, const zy_act *q, const zy_act *k,
                       const zy_act *v, int B, int T, int Hq, int Hk, int d, float scale,
                       int window) {
    ON_CUDA(ctx, "attention_bwd",
            cuda_ops_attention_bwd(ctx, dq, dk, dv, dout, out, lse, q, k, v, B, T, Hq, Hk, d, scale,
                                   window));
    cpu_attention_bwd(cpu_threads(ctx), dq, dk, dv, dout, out, lse, q, k, v, B, T, Hq, Hk, d, scale,
                      window);
}

/* One query row per sequence against a KV cache. */
void ops_attention_decode(zy_ctx *ctx, zy_act *out, const zy_act *q, const zy_act *kc,
                          const zy_act *vc, int B, int Tk, int Tmax, int Hq, int Hk, int d,
                          float scale, int window) {
    ON_CUDA(ctx, "attention_decode",
            cuda_ops_attention_decode(ctx, out, q, kc, vc, B, Tk, Tmax, Hq, Hk, d, scale, window));
    cpu_attention_decode(cpu_threads(ctx), out, q, kc, vc, B, Tk, Tmax, Hq, Hk, d, scale, window);
}

/* y = GELU(x), exact. */
void ops_gelu_fwd(zy_ctx *ctx, zy_act *y, const zy_act *x, size_t n) {
    ON_CUDA(ctx, "gelu_fwd", cuda_ops_gelu_fwd(ctx, y, x, n));
    cpu_gelu_fwd(cpu_threads(ctx), y, x, n);
}

/* dx = dy * GELU'(x). */
void ops_gelu_bwd(zy_ctx *ctx, zy_act *dx, const zy_act *dy, const zy_act *x, size_t n) {
    ON_CUDA(ctx, "gelu_bwd", cuda_ops_gelu_bwd(ctx, dx, dy, x, n));
    cpu_gelu_bwd(cpu_threads(ctx), dx, dy, x, n);
}

/* y = SiLU(g) * u. */
void ops_swiglu_fwd(zy_ctx *ctx, zy_act *y, const zy_act *gu, int N, int F) {
    ON_CUDA(ctx, "swiglu_fwd", cuda_ops_swiglu_fwd(ctx, y, gu, N, F));
    cpu_swiglu_fwd(cpu_threads(ctx), y, gu, N, F);
}

/* dgu (=) from dy. */
void ops_swiglu_bwd(zy_ctx *ctx, zy_act *dgu, const zy_act *dy, const zy_act *gu, int N, int F) {
    ON_CUDA(ctx, "swiglu_bwd", cuda_ops_swiglu_bwd(ctx, dgu, dy, gu, N, F));
    cpu_swiglu_bwd(cpu_threads(ctx), dgu, dy, gu, N, F);
}

/* Softmax, biased top-1 choice and gate. */
void ops_router_select(zy_ctx *ctx, float *probs, int32_t *choice, float *gate,
                       const zy_act *logits, const float *bias, int N, int E1) {
    ON_CUDA(ctx, "router_select",
            cuda_ops_router_select(ctx, probs, choice, gate, logits, bias, N, E1));
    cpu_router_select(cpu_threads(ctx), probs, choice, gate, logits, bias, N, E1);
}

/* dlogits (=) from dgate. */
void ops_router_bwd(zy_ctx *ctx, zy_act *dlogits, const float *dgate, const float *probs,
                    const int32_t *choice, int N, int E1) {
    ON_CUDA(ctx, "router_bwd", cuda_ops_router_bwd(ctx, dlogits, dgate, probs, choice, N, E1));
    cpu_router_bwd(cpu_threads(ctx), dlogits, dgate, probs, choice, N, E1);
}

/* Counting sort of routed rows by expert (stable); returns the routed row count. */
int ops_moe_dispatch(zy_ctx *ctx, int32_t *counts, int32_t *offsets, int32_t *offsets_host,
                     int32_t *perm, const int32_t *choice, int N, int E) {
    ON_CUDA_RET(ctx, "moe_dispatch",
                (cuda_ops_moe_dispatch(ctx, counts, offsets, offsets_host, perm, choice, N, E),
                 ops_moe_routed(offsets_host, N, E)));
    cpu_threads(ctx);
    int routed = cpu_moe_dispatch(counts, offsets, perm, choice, N, E);
    memcpy(offsets_host, offsets, (size_t)(E + 1) * sizeof *offsets);
    return routed;
}

/* The same, not waiting for the device (the CPU has nothing to wait for). */
void ops_moe_dispatch_async(zy_ctx *ctx, int32_t *counts, int32_t *offsets, int32_t *offsets_host,
                            int32_t *perm, const int32_t *choice, int N, int E) {
    ON_CUDA(ctx, "moe_dispatch",
            cuda_ops_moe_dispatch_async(ctx, counts, offsets, offsets_host, perm, choice, N, E));
    (void)ops_moe_dispatch(ctx, counts, offsets, offsets_host, perm, choice, N, E);
}

/* offsets_host[E], or an abort at the row the device marked (-1 - row) as out of range. */
int ops_moe_routed(const int32_t *offsets_host, int N, int E) {
    const int routed = offsets_host[E];
    if (routed < 0)
        zy_abort_at(__FILE__, __LINE__, "moe_dispatch", "choice[%d] not in [0, %d]", -1 - routed,
                    E);
    ZY_CHECKF(routed <= N, "moe_dispatch: %d routed rows of %d", routed, N);
    return routed;
}

/* xs[r] = x[perm[r]]. */
void ops_gather_rows(zy_ctx *ctx, zy_act *xs, const zy_act *x, const int32_t *perm, int nrows,
                     int C) {
    ON_CUDA(ctx, "gather_rows", cuda_ops_gather_rows(ctx, xs, x, perm, nrows, C));
    cpu_gather_rows(cpu_threads(ctx), xs, x, perm, nrows, C);
}

/* y = 0, then y[perm[r]] = gate * ys[r]. */
void ops_moe_combine(zy_ctx *ctx, zy_act *y, const zy_act *ys, const float *gate,
                     const int32_t *perm, int nrows, int N, int D) {
    ON_CUDA(ctx, "moe_combine", cuda_ops_moe_combine(ctx, y, ys, gate, perm, nrows, N, D));
    cpu_moe_combine(cpu_threads(ctx), y, ys, gate, perm, nrows, N, D);
}

/* dys, dgate (=). */
void ops_moe_combine_bwd(zy_ctx *ctx, zy_act *dys, float *dgate, const zy_act *dy, const zy_act *ys,
                         const float *gate, const int32_t *perm, int nrows, int N, int D) {
    ON_CUDA(ctx, "moe_combine_bwd",
            cuda_ops_moe_combine_bwd(ctx, dys, dgate, dy, ys, gate, perm, nrows, N, D));
    cpu_moe_combine_bwd(cpu_threads(ctx), dys, dgate, dy, ys, gate, perm, nrows, N, D);
}

/* dx[perm[r]] += dxs[r]. */
void ops_scatter_add_rows(zy_ctx *ctx, zy_act *dx, const zy_act *dxs, const int32_t *perm,
                          int nrows, int C) {
    ON_CUDA(ctx, "scatter_add_rows", cuda_ops_scatter_add_rows(ctx, dx, dxs, perm, nrows, C));
    cpu_scatter_add_rows(cpu_threads(ctx), dx, dxs, perm, nrows, C);
}

/* Summed cross-entropy over counted rows, with the optional logits gradient. */
void ops_xent_fwd_bwd_queued(zy_ctx *ctx, zy_act *dlogits, const zy_act *logits,
                             const int32_t *targets, int N, int V, int ignore_index,
                             float grad_scale, zy_loss_host *out) {
    ON_CUDA(ctx, "xent_fwd_bwd",
            cuda_ops_xent_fwd_bwd_queued(ctx, dlogits, logits, targets, N, V, ignore_index,
                                         grad_scale, out));
    out->sum = cpu_xent_fwd_bwd(cpu_threads(ctx), dlogits, logits, targets, N, V, ignore_index,
                                grad_scale, &out->count);
}

/* The queued pass into host memory of this frame (on a GPU a copy to pageable memory, which the
 * driver completes before returning), then a wait for the context. */
double ops_xent_fwd_bwd(zy_ctx *ctx, zy_act *dlogits, const zy_act *logits, const int32_t *targets,
                        int N, int V, int ignore_index, float grad_scale, int *count) {
    zy_loss_host h = {0.0, 0};
    ops_xent_fwd_bwd_queued(ctx, dlogits, logits, targets, N, V, ignore_index, grad_scale, &h);
    ops_sync(ctx);
    if (count) *count = h.count;
    return h.sum;
}

/* z += r_prev * g. */
void ops_eda_fwd(zy_ctx *ctx, zy_act *z, const zy_act *r_prev, const float *g, int N, int R) {
    ON_CUDA(ctx, "eda_fwd", cuda_ops_eda_fwd(ctx, z, r_prev, g, N, R));
    cpu_eda_fwd(cpu_threads(ctx), z, r_prev, g, N, R);
}

/* dr_prev = dz * g; dg +=. */
void ops_eda_bwd(zy_ctx *ctx, zy_act *dr_prev, float *dg, const zy_act *dz, const zy_act *r_prev,
                 const float *g, int N, int R) {
    ON_CUDA(ctx, "eda_bwd", cuda_ops_eda_bwd(ctx, dr_prev, dg, dz, r_prev, g, N, R));
    cpu_eda_bwd(cpu_threads(ctx), dr_prev, dg, dz, r_prev, g, N, R);
}
