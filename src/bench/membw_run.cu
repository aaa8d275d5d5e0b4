/* Memory bandwidth benchmark, GPU side (see membw.h). Each thread moves UNROLL 16-byte vectors
 * per step, all loads issued before the first store, so several loads are in flight per thread.
 * Four variants are timed per point and the fastest kept: a grid that covers the array once or a
 * persistent grid (8 blocks per SM) striding over it, each with plain or streaming (evict-first)
 * accesses. Results are checked after timing. */
#include "bench/membw.h"
#include "base/check.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MEMBW_THREADS 256
#define UNROLL        4

__device__ __forceinline__ float4 ld4(const float4 *p, int streaming) {
    return streaming ? __ldcs(p) : *p;
}

__device__ __forceinline__ void st4(float4 *p, float4 v, int streaming) {
    if (streaming)
        __stcs(p, v);
    else
        *p = v;
}

/* kind 0: b = a; 1: b = s * a; 2: a = b + s * c (arrays of n float4). */
__global__ void __launch_bounds__(MEMBW_THREADS)
    membw_kernel(int kind, int streaming, float4 *__restrict__ a, float4 *__restrict__ b,
                 const float4 *__restrict__ c, float s, size_t n) {
    size_t step = (size_t)gridDim.x * MEMBW_THREADS * UNROLL;
    for (size_t base = (size_t)blockIdx.x * MEMBW_THREADS * UNROLL + threadIdx.x; base < n;
         base += step) {
        float4 x[UNROLL], y[UNROLL];
        if (kind < 2) {
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                size_t i = base + (size_t)u * MEMBW_THREADS;
                if (i < n) x[u] = ld4(a + i, streaming);
            }
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                size_t i = base + (size_t)u * MEMBW_THREADS;
                float4 v = x[u];
                if (kind == 1)
                    v = make_float4(__fmul_rn(s, v.x), __fmul_rn(s, v.y), __fmul_rn(s, v.z),
                                    __fmul_rn(s, v.w));
                if (i < n) st4(b + i, v, streaming);
            }
        } else {
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                size_t i = base + (size_t)u * MEMBW_THREADS;
                if (i < n) x[u] = ld4(b + i, streaming), y[u] = ld4(c + i, streaming);
            }
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                size_t i = base + (size_t)u * MEMBW_THREADS;
                float4 v = make_float4(__fmaf_rn(s, y[u].x, x[u].x), __fmaf_rn(s, y[u].y, x[u].y),
                                       __fmaf_rn(s, y[u].z, x[u].z), __fmaf_rn(s, y[u].w, x[u].w));
                if (i < n) st4(a + i, v, streaming);
            }
        }
    }
}

__global__ void membw_fill(float *p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)seed << 32);
        x ^= x >> 29;
        x *= 0xbf58476d1ce4e5b9ull;
        x ^= x >> 32;
        p[i] = 0.5f + (float)(x & 0xffffff) / 16777216.0f;
    }
}

/* Counts elements that differ from the kernel's result (the same rounded operations). */
__global__ void membw_check(int kind, const float *a, const float *b, const float *c, float s,
                            size_t n, unsigned long long *wrong) {
    unsigned long long bad = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        int ok = kind == 0   ? b[i] == a[i]
                 : kind == 1 ? b[i] == __fmul_rn(s, a[i])
                             : a[i] == __fmaf_rn(s, c[i], b[i]);
        bad += !ok;
    }
    for (int o = 16; o > 0; o >>= 1) bad += __shfl_down_sync(0xffffffffu, bad, o);
    if ((threadIdx.x & 31) == 0 && bad) atomicAdd(wrong, bad);
}

typedef struct {
    cudaStream_t s;
    cudaEvent_t e0, e1;
    float *a, *b, *c; /* device arrays of max_bytes */
    void *pageable, *pinned;
    unsigned long long *d_wrong;
    int sms;
} membw_ctx;

static int launch(membw_ctx *x, bench_membw_kind k, int streaming, size_t bytes) {
    size_t n4 = bytes / 16;
    switch (k) {
    case MEMBW_COPY:
    case MEMBW_SCALE:
    case MEMBW_TRIAD: {
        size_t blocks = (n4 + MEMBW_THREADS * UNROLL - 1) / (MEMBW_THREADS * UNROLL);
        membw_kernel<<<(unsigned)blocks, MEMBW_THREADS, 0, x->s>>>(
            k == MEMBW_COPY    ? 0
            : k == MEMBW_SCALE ? 1
                               : 2,
            streaming, (float4 *)x->a, (float4 *)x->b, (const float4 *)x->c, 3.0f, n4);
        ZY_CUDA_TRY_LAUNCH();
        break;
    }
    case MEMBW_MEMCPY:
        ZY_CUDA_TRY(cudaMemcpyAsync(x->b, x->a, bytes, cudaMemcpyDeviceToDevice, x->s));
        break;
    case MEMBW_H2D_PAGEABLE:
        ZY_CUDA_TRY(cudaMemcpyAsync(x->a, x->pageable, bytes, cudaMemcpyHostToDevice, x->s));
        break;
    case MEMBW_D2H_PAGEABLE:
        ZY_CUDA_TRY(cudaMemcpyAsync(x->pageable, x->a, bytes, cudaMemcpyDeviceToHost, x->s));
        break;
    case MEMBW_H2D_PINNED:
        ZY_CUDA_TRY(cudaMemcpyAsync(x->a, x->pinned, bytes, cudaMemcpyHostToDevice, x->s));
        break;
    default:
        ZY_CUDA_TRY(cudaMemcpyAsync(x->pinned, x->a, bytes, cudaMemcpyDeviceToHost, x->s));
        break;
    }
    return ZY_OK;
}

static int time_runs(membw_ctx *x, bench_membw_kind k, int variant, size_t bytes, int iters,
                     double *sec) {
    ZY_CUDA_TRY(cudaEventRecord(x->e0, x->s));
    for (int i = 0; i < iters; i++) ZY_TRY(launch(x, k, variant, bytes));
    ZY_CUDA_TRY(cudaEventRecord(x->e1, x->s));
    ZY_CUDA_TRY(cudaEventSynchronize(x->e1));
    float ms;
    ZY_CUDA_TRY(cudaEventElapsedTime(&ms, x->e0, x->e1));
    *sec = ms / 1e3 / iters;
    return ZY_OK;
}

static int measure(membw_ctx *x, const bench_membw_opts *o, bench_membw_kind k, size_t bytes,
                   bench_membw_row *row) {
    memset(row, 0, sizeof *row);
    row->kind = k;
    row->bytes = bytes;
    row->wrong = -1;
    int variants = k <= MEMBW_TRIAD ? 4 : 1;
    double best = INFINITY;
    for (int v = 0; v < variants; v++) {
        double est, sec;
        ZY_TRY(launch(x, k, v, bytes)); /* warm-up */
        ZY_TRY(time_runs(x, k, v, bytes, 2, &est));
        int iters = (int)(o->target_ms * 1e-3 / (est > 1e-7 ? est : 1e-7));
        iters = iters < 3 ? 3 : iters > 20000 ? 20000 : iters;
        ZY_TRY(time_runs(x, k, v, bytes, iters, &sec));
        if (sec < best) best = sec, row->variant = v;
    }
    row->time_us = best * 1e6;
    row->gbps = bench_membw_moved(k, bytes) / best / 1e9;
    if (k <= MEMBW_MEMCPY) {
        int kind = k == MEMBW_SCALE ? 1 : k == MEMBW_TRIAD ? 2 : 0;
        ZY_CUDA_TRY(cudaMemsetAsync(x->d_wrong, 0, sizeof *x->d_wrong, x->s));
        membw_check<<<x->sms * 8, 256, 0, x->s>>>(kind, x->a, x->b, x->c, 3.0f, bytes / 4,
                                                  x->d_wrong);
        ZY_CUDA_TRY_LAUNCH();
        unsigned long long h;
        ZY_CUDA_TRY(cudaMemcpyAsync(&h, x->d_wrong, sizeof h, cudaMemcpyDeviceToHost, x->s));
        ZY_CUDA_TRY(cudaStreamSynchronize(x->s));
        row->wrong = (int64_t)h;
    }
    return ZY_OK;
}

static int run_all(membw_ctx *x, const bench_membw_opts *o, bench_membw_result *res) {
    size_t *sizes;
    int n;
    ZY_TRY(bench_sizes(o->min_bytes, o->max_bytes, 2, &sizes, &n));
    int rc = ZY_OK;
    for (int k = MEMBW_COPY; k <= MEMBW_MEMCPY && rc == ZY_OK; k++)
        for (int i = 0; i < n && rc == ZY_OK; i++) {
            bench_membw_row row;
            rc = measure(x, o, (bench_membw_kind)k, sizes[i], &row);
            if (rc == ZY_OK) bench_membw_result_add(res, &row);
        }
    free(sizes);
    ZY_TRY(rc);
    if (o->host_max_bytes == 0) return ZY_OK;
    ZY_TRY(bench_sizes(o->host_min_bytes, o->host_max_bytes, 2, &sizes, &n));
    for (int k = MEMBW_H2D_PAGEABLE; k < MEMBW_NKINDS && rc == ZY_OK; k++)
        for (int i = 0; i < n && rc == ZY_OK; i++) {
            bench_membw_row row;
            rc = measure(x, o, (bench_membw_kind)k, sizes[i], &row);
            if (rc == ZY_OK) bench_membw_result_add(res, &row);
        }
    free(sizes);
    return rc;
}

int bench_membw_run(const bench_membw_opts *o, int dev, bench_membw_result *res, FILE *out) {
    bench_membw_result_init(res);
    bench_machine_host(&res->machine);
    ZY_TRY(bench_gpu_describe(&res->machine, dev));
    if (o->min_bytes < 16 || o->max_bytes % 16 || o->min_bytes % 16)
        return zy_fail("membw: sizes must be multiples of 16 bytes (got %zu .. %zu)", o->min_bytes,
                       o->max_bytes);
    if (o->host_max_bytes > o->max_bytes)
        return zy_fail("membw: --host-max-bytes (%zu) may not exceed --max-bytes (%zu)",
                       o->host_max_bytes, o->max_bytes);
    ZY_CUDA_TRY(cudaSetDevice(dev));
    membw_ctx x;
    memset(&x, 0, sizeof x);
    x.sms = res->machine.sm_count;
    int rc = ZY_OK;
    cudaError_t e = cudaStreamCreateWithFlags(&x.s, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaEventCreate(&x.e0);
    if (e == cudaSuccess) e = cudaEventCreate(&x.e1);
    if (e == cudaSuccess) e = cudaMalloc((void **)&x.a, o->max_bytes);
    if (e == cudaSuccess) e = cudaMalloc((void **)&x.b, o->max_bytes);
    if (e == cudaSuccess) e = cudaMalloc((void **)&x.c, o->max_bytes);
    if (e == cudaSuccess) e = cudaMalloc((void **)&x.d_wrong, sizeof *x.d_wrong);
    if (e == cudaSuccess && o->host_max_bytes) e = cudaMallocHost(&x.pinned, o->host_max_bytes);
    if (e != cudaSuccess)
        rc = zy_fail_runtime("membw: allocating 3 x %zu device bytes and %zu pinned bytes: %s",
                             o->max_bytes, o->host_max_bytes, cudaGetErrorString(e));
    if (rc == ZY_OK && o->host_max_bytes) {
        x.pageable = malloc(o->host_max_bytes);
        if (!x.pageable)
            rc = zy_fail_runtime("membw: out of host memory (%zu bytes)", o->host_max_bytes);
        else
            memset(x.pageable, 1, o->host_max_bytes); /* touch every page before timing */
        if (x.pinned) memset(x.pinned, 1, o->host_max_bytes);
    }
    if (rc == ZY_OK) {
        size_t n = o->max_bytes / 4;
        membw_fill<<<x.sms * 8, 256, 0, x.s>>>(x.a, n, 1);
        membw_fill<<<x.sms * 8, 256, 0, x.s>>>(x.b, n, 2);
        membw_fill<<<x.sms * 8, 256, 0, x.s>>>(x.c, n, 3);
        ZY_CUDA_NOTE(rc, cudaGetLastError());
        ZY_CUDA_NOTE(rc, cudaStreamSynchronize(x.s));
    }
    if (rc == ZY_OK) rc = run_all(&x, o, res);
    if (rc == ZY_OK && out) bench_membw_print(out, res);
    free(x.pageable);
    if (x.pinned) cudaFreeHost(x.pinned);
    cudaFree(x.a);
    cudaFree(x.b);
    cudaFree(x.c);
    cudaFree(x.d_wrong);
    if (x.e0) cudaEventDestroy(x.e0);
    if (x.e1) cudaEventDestroy(x.e1);
    if (x.s) cudaStreamDestroy(x.s);
    return rc;
}
