/* The CUDA context (stream, cuBLASLt, workspace), device memory, fp32 <-> bf16 casts and the
 * per-op profiler of ops.h's CUDA side. */
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/cuda_state.h"

#include <stdlib.h>
#include <string.h>

/* The runtime maps streams onto CUDA_DEVICE_MAX_CONNECTIONS hardware queues (default 8); with
 * fewer queues than side streams, independent expert GEMMs queue behind each other. The runtime
 * reads the variable once, when it initialises, so this runs before the first CUDA call of ours
 * (the device count, which every context creation and the trainer's device choice call first);
 * a value the user set wins. */
static void set_device_connections(void) {
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
}

int cuda_ops_device_count(void) {
    set_device_connections();
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* no driver / no GPU: clear the sticky error, report none */
        return 0;
    }
    return n;
}

/* The device's stream priorities: high = its greatest, low = its least (the default's). */
typedef enum { PRIORITY_LOW = 0, PRIORITY_HIGH = 1 } stream_priority;

static int stream_create(cudaStream_t *st, stream_priority pr) {
    int least = 0, greatest = 0;
    ZY_CUDA_TRY(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    ZY_CUDA_TRY(cudaStreamCreateWithPriority(st, cudaStreamNonBlocking,
                                             pr == PRIORITY_HIGH ? greatest : least));
    return ZY_OK;
}

/* A context's state: its stream and opts->expert_streams side streams at priority pr. */
static int ctx_init(zy_ctx *ctx, int gpu, const zy_cuda_opts *opts, stream_priority pr) {
    int n = cuda_ops_device_count();
    if (gpu < 0 || gpu >= n)
        return zy_fail_runtime("device cuda:%d: %d CUDA GPU%s visible to this process", gpu, n,
                               n == 1 ? "" : "s");
    ZY_CUDA_TRY(cudaSetDevice(gpu));
    cuda_state *s = (cuda_state *)calloc(1, sizeof *s);
    if (!s) return zy_fail_runtime("out of host memory");
    if (stream_create(&s->stream, pr) != ZY_OK) {
        free(s);
        return ZY_ERR;
    }
    if (cuda_gemm_init(&s->gemm) != ZY_OK) {
        cudaStreamDestroy(s->stream);
        free(s);
        return zy_fail_ctx("device cuda:%d: cuBLASLt setup", gpu);
    }
    ZY_CUDA_TRY(cudaEventCreateWithFlags(&s->fork, cudaEventDisableTiming));
    s->expert_chunk = opts->expert_chunk;
    const int nside = opts->expert_streams;
    for (int i = 0; i < nside; i++) {
        ZY_TRY(stream_create(&s->side[i], pr));
        ZY_CUDA_TRY(cudaEventCreateWithFlags(&s->join[i], cudaEventDisableTiming));
        if (cuda_gemm_init(&s->side_gemm[i]) != ZY_OK)
            return zy_fail_ctx("device cuda:%d: cuBLASLt setup of side stream %d", gpu, i);
        s->nside = i + 1;
    }
    memset(ctx, 0, sizeof *ctx);
    ctx->device = ZY_DEV_CUDA;
    ctx->act_dtype = ZY_DTYPE_BF16;
    ctx->gpu = gpu;
    ctx->cuda = s;
    if (cuda_attention_ctx_init(ctx, opts) != ZY_OK) {
        cuda_ops_ctx_free(ctx);
        memset(ctx, 0, sizeof *ctx);
        return ZY_ERR;
    }
    return ZY_OK;
}

int cuda_ops_ctx_init(zy_ctx *ctx, int gpu, const zy_cuda_opts *opts) {
    return ctx_init(ctx, gpu, opts, opts->overlap_optimizer ? PRIORITY_HIGH : PRIORITY_LOW);
}

int cuda_ops_ctx_init_beside(zy_ctx *side, zy_ctx *ctx) {
    zy_cuda_opts o;
    memset(&o, 0, sizeof o); /* no expert side streams: it runs no expert GEMMs */
    o.attention = ZY_ATTN_ZAYAC;
    return ctx_init(side, ctx->gpu, &o, PRIORITY_LOW);
}

/* ---- marks ---- */

struct zy_mark {
    cudaEvent_t ev;
};

zy_mark *cuda_ops_mark_new(zy_ctx *ctx) {
    (void)ctx;
    zy_mark *m = (zy_mark *)zy_calloc(1, sizeof *m);
    ZY_CUDA_CHECK(cudaEventCreateWithFlags(&m->ev, cudaEventDisableTiming));
    return m;
}

void cuda_ops_mark_free(zy_mark *m) {
    if (!m) return;
    cudaEventDestroy(m->ev);
    free(m);
}

void cuda_ops_mark(zy_ctx *ctx, zy_mark *m) {
    ZY_CUDA_CHECK(cudaEventRecord(m->ev, cuda_stream(ctx)));
}

void cuda_ops_wait_mark(zy_ctx *ctx, zy_mark *m) {
    ZY_CUDA_CHECK(cudaStreamWaitEvent(cuda_stream(ctx), m->ev, 0));
}

void cuda_ops_mark_wait_host(zy_mark *m) {
    ZY_CUDA_CHECK(cudaEventSynchronize(m->ev));
}

void cuda_ops_ctx_free(zy_ctx *ctx) {
    cuda_state *s = cuda_st(ctx);
    if (!s) return;
    cudaStreamSynchronize(s->stream);
    cuda_gemm_free(&s->gemm);
    for (int i = 0; i < s->nside; i++) {
        cudaStreamSynchronize(s->side[i]);
        cuda_gemm_free(&s->side_gemm[i]);
        cudaStreamDestroy(s->side[i]);
        cudaEventDestroy(s->join[i]);
    }
    if (s->fork) cudaEventDestroy(s->fork);
    if (s->ws) cudaFree(s->ws);
    cuda_attention_ctx_free(s);
    if (s->ev) {
        for (int i = 0; i < 2 * CUDA_PROF_SLOTS; i++) cudaEventDestroy(s->ev[i]);
        free(s->ev);
        free(s->ev_name);
    }
    cudaStreamDestroy(s->stream);
    free(s);
    ctx->cuda = NULL;
}

void cuda_ops_sync(zy_ctx *ctx) {
    ZY_CUDA_CHECK(cudaStreamSynchronize(cuda_stream(ctx)));
}

void *cuda_ops_stream(zy_ctx *ctx) {
    return (void *)cuda_stream(ctx);
}

void *cuda_ws(zy_ctx *ctx, size_t bytes) {
    cuda_state *s = cuda_st(ctx);
    if (bytes > s->ws_bytes) {
        ZY_CUDA_CHECK(cudaStreamSynchronize(s->stream));
        if (s->ws) ZY_CUDA_CHECK(cudaFree(s->ws));
        size_t grow = bytes + bytes / 4;
        ZY_CUDA_CHECK(cudaMalloc(&s->ws, grow));
        s->ws_bytes = grow;
    }
    return s->ws;
}

/* ---- memory ---- */

int cuda_ops_device_mem(zy_ctx *ctx, size_t *used, size_t *total) {
    size_t free_b = 0, total_b = 0;
    cudaError_t e = cudaSetDevice(ctx->gpu);
    if (e == cudaSuccess) e = cudaMemGetInfo(&free_b, &total_b);
    if (e != cudaSuccess)
        return zy_fail_runtime("cuda:%d: cudaMemGetInfo failed: %s", ctx->gpu,
                               cudaGetErrorString(e));
    *used = total_b - free_b;
    *total = total_b;
    return ZY_OK;
}

void *cuda_ops_alloc(zy_ctx *ctx, size_t bytes) {
    void *p = NULL;
    if (bytes == 0) bytes = 1;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        cudaGetLastError();
        cudaMemGetInfo(&free_b, &total_b);
        zy_fatal_runtime_at(__FILE__, __LINE__, "cudaMalloc",
                            "out of GPU memory: asked for %.2f GiB, %.2f GiB free of %.2f GiB",
                            bytes / 1073741824.0, free_b / 1073741824.0, total_b / 1073741824.0);
    }
    ZY_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, cuda_stream(ctx)));
    ZY_CUDA_CHECK(cudaStreamSynchronize(cuda_stream(ctx)));
    return p;
}

size_t cuda_ops_mem_available(zy_ctx *ctx) {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return free_b;
}

void cuda_ops_free(zy_ctx *ctx, void *p) {
    if (!p || cuda_ops_free_releasable(ctx, p)) return;
    ZY_CUDA_CHECK(cudaStreamSynchronize(cuda_stream(ctx)));
    ZY_CUDA_CHECK(cudaFree(p));
}

/* Any direction (unified addressing); synchronous with respect to the host. */
void cuda_ops_copy(zy_ctx *ctx, void *dst, const void *src, size_t bytes) {
    if (bytes == 0 || dst == src) return;
    ZY_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cuda_stream(ctx)));
    ZY_CUDA_CHECK(cudaStreamSynchronize(cuda_stream(ctx)));
}

/* Page-locked host memory (see ops_host_alloc). */
void *cuda_ops_host_alloc(zy_ctx *ctx, size_t bytes) {
    (void)ctx;
    void *p = NULL;
    cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault);
    if (e != cudaSuccess) {
        cudaGetLastError();
        zy_fatal_runtime_at(__FILE__, __LINE__, "cudaHostAlloc",
                            "cannot pin %.2f GiB of host memory: %s", bytes / 1073741824.0,
                            cudaGetErrorString(e));
    }
    return p;
}

void cuda_ops_host_free(zy_ctx *ctx, void *p) {
    if (!p) return;
    ZY_CUDA_CHECK(cudaStreamSynchronize(cuda_stream(ctx))); /* no copy still reads or writes it */
    ZY_CUDA_CHECK(cudaFreeHost(p));
}

/* Any direction, queued on the context's stream. */
void cuda_ops_copy_async(zy_ctx *ctx, void *dst, const void *src, size_t bytes) {
    if (bytes == 0 || dst == src) return;
    ZY_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cuda_stream(ctx)));
}

__global__ void fill_f32_kernel(float *x, float v, size_t n) {
    zy_pdl_begin();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = v;
}

void cuda_ops_fill(zy_ctx *ctx, float *x, float value, size_t n) {
    if (n == 0) return;
    zy_launch(fill_f32_kernel, zy_grid_blocks(n), 256, 0, cuda_stream(ctx), x, value, n);
    ZY_CUDA_CHECK_LAUNCH();
}

void cuda_ops_zero(zy_ctx *ctx, void *p, size_t bytes) {
    if (bytes) ZY_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, cuda_stream(ctx)));
}

/* ---- casts ---- */

__global__ void f32_to_bf16_kernel(__nv_bfloat16 *dst, const float *src, size_t n) {
    zy_pdl_begin();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]);
}

__global__ void bf16_to_f32_kernel(float *dst, const __nv_bfloat16 *src, size_t n) {
    zy_pdl_begin();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __bfloat162float(src[i]);
}

void cuda_ops_cast_to_act(zy_ctx *ctx, zy_act *dst, const float *src, size_t n) {
    if (n == 0) return;
    zy_launch(f32_to_bf16_kernel, zy_grid_blocks(n), 256, 0, cuda_stream(ctx), (__nv_bfloat16 *)dst,
              src, n);
    ZY_CUDA_CHECK_LAUNCH();
}

void cuda_ops_act_to_f32(zy_ctx *ctx, float *dst, const zy_act *src, size_t n) {
    if (n == 0) return;
    zy_launch(bf16_to_f32_kernel, zy_grid_blocks(n), 256, 0, cuda_stream(ctx), dst,
              (const __nv_bfloat16 *)src, n);
    ZY_CUDA_CHECK_LAUNCH();
}

/* ---- profiler: event pairs resolved at read time ---- */

/* The event pairs, made once. Creating 16k events takes milliseconds of host time: made by the
 * reset before a profiled step rather than by its first op (where they inflated the bench's
 * first phase, zero_grads, to ~7 ms and the profiled step's wall time with it). */
static void prof_events(cuda_state *s) {
    if (s->ev) return;
    s->ev = (cudaEvent_t *)calloc(2 * CUDA_PROF_SLOTS, sizeof *s->ev);
    s->ev_name = (const char **)calloc(CUDA_PROF_SLOTS, sizeof *s->ev_name);
    ZY_CHECK(s->ev && s->ev_name);
    for (int i = 0; i < 2 * CUDA_PROF_SLOTS; i++) ZY_CUDA_CHECK(cudaEventCreate(&s->ev[i]));
}

int cuda_ops_prof_begin(zy_ctx *ctx) {
    cuda_state *s = cuda_st(ctx);
    prof_events(s);
    if (s->nslots == CUDA_PROF_SLOTS) {
        zy_op_time tmp[1];
        cuda_ops_prof_read(ctx, tmp, 0); /* folds the pending pairs into the totals */
    }
    int slot = s->nslots++;
    ZY_CUDA_CHECK(cudaEventRecord(s->ev[2 * slot], s->stream));
    return slot;
}

void cuda_ops_prof_end(zy_ctx *ctx, int slot, const char *name) {
    cuda_state *s = cuda_st(ctx);
    s->ev_name[slot] = name;
    ZY_CUDA_CHECK(cudaEventRecord(s->ev[2 * slot + 1], s->stream));
}

void cuda_ops_prof_reset(zy_ctx *ctx) {
    cuda_state *s = cuda_st(ctx);
    prof_events(s);
    ZY_CUDA_CHECK(cudaStreamSynchronize(s->stream));
    s->nslots = 0;
    s->ntimes = 0;
}

static int cmp_time_desc(const void *a, const void *b) {
    double x = ((const zy_op_time *)a)->ms, y = ((const zy_op_time *)b)->ms;
    return x < y ? 1 : x > y ? -1 : 0;
}

int cuda_ops_prof_read(zy_ctx *ctx, zy_op_time *out, int max) {
    cuda_state *s = cuda_st(ctx);
    ZY_CUDA_CHECK(cudaStreamSynchronize(s->stream));
    for (int i = 0; i < s->nslots; i++) {
        float ms = 0;
        ZY_CUDA_CHECK(cudaEventElapsedTime(&ms, s->ev[2 * i], s->ev[2 * i + 1]));
        const char *name = s->ev_name[i];
        int j = 0;
        while (j < s->ntimes && strcmp(s->times[j].name, name) != 0) j++;
        if (j == s->ntimes) {
            if (s->ntimes == CUDA_PROF_NAMES) continue;
            s->times[s->ntimes++] = (zy_op_time){name, 0, 0.0};
        }
        s->times[j].calls++;
        s->times[j].ms += ms;
    }
    s->nslots = 0;
    zy_op_time sorted[CUDA_PROF_NAMES];
    memcpy(sorted, s->times, (size_t)s->ntimes * sizeof *sorted);
    qsort(sorted, (size_t)s->ntimes, sizeof *sorted, cmp_time_desc);
    int n = s->ntimes < max ? s->ntimes : max;
    memcpy(out, sorted, (size_t)(n > 0 ? n : 0) * sizeof *out);
    return n;
}
