/* CUDA fused cross-entropy: per row, one online pass over the logits for the running max and the
 * sum of exp (rescaled when the max grows), then the loss and, in a second pass, dlogits =
 * (softmax - onehot) * grad_scale written over the logits or into a separate buffer; the softmax
 * is never stored. A one-block kernel then sums the row losses in a fixed order. Same math as
 * ops/cpu/cpu_loss.c (which sums exp in double). */
#include "ops/cuda/cuda_util.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/kernels.h"

#include <cuda_bf16.h>
#include <math.h>

typedef __nv_bfloat16 bf16;

/* exp(x - m) as exp2((x - m) log2 e): one FMA and the hardware exp2 (ex2.approx, relative error
 * ~2^-22) instead of expf's accurate range reduction, which made the two passes over bench-small's
 * logits (two exponentials per element) compute-bound. */
#define XENT_LOG2E 1.4426950408889634f
__device__ __forceinline__ float exp_shift(float x, float m) {
    return exp2f(fmaf(x, XENT_LOG2E, -m * XENT_LOG2E));
}

/* (m, s) <- the pair for the union of two sets of logits, each summarised by its max m and
 * s = sum exp(x - m); s == 0 marks an empty set. */
__device__ __forceinline__ void ms_merge(float &m, float &s, float m2, float s2) {
    if (s2 == 0.0f) return;
    if (s == 0.0f) {
        m = m2, s = s2;
        return;
    }
    float mx = fmaxf(m, m2);
    s = s * expf(m - mx) + s2 * expf(m2 - mx);
    m = mx;
}

/* The (max, sum-exp) pair over the block; every thread gets it. */
__device__ __forceinline__ void ms_block(float &m, float &s) {
    __shared__ float pm[32], ps[32];
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        ms_merge(m, s, m2, s2);
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) pm[warp] = m, ps[warp] = s;
    __syncthreads();
    m = pm[0], s = ps[0];
    for (int j = 1; j < nw; j++) ms_merge(m, s, pm[j], ps[j]);
}

/* One block per row. */
template <typename T, int W>
__global__ void __launch_bounds__(ZY_ROW_THREADS)
    xent_rows_k(T *dl, float *loss, const T *x, const int32_t *targets, int V, int ignore_index,
                float grad_scale) {
    zy_pdl_begin();
    __shared__ float xy_sh;
    size_t base = (size_t)blockIdx.x * V;
    int y = targets[blockIdx.x];
    if (y == ignore_index || y < 0 || y >= V) { /* uniform over the block */
        if (threadIdx.x == 0) loss[blockIdx.x] = y == ignore_index ? 0.0f : NAN;
        if (dl) {
            float z[W];
#pragma unroll
            for (int k = 0; k < W; k++) z[k] = 0;
            for (int v = threadIdx.x * W; v < V; v += blockDim.x * W)
                zy_store<T, W>(dl + base + v, z);
        }
        return;
    }
    /* the target logit is read before any thread can overwrite it (dl may alias x) */
    if (threadIdx.x == 0) xy_sh = zy_to_f(x[base + y]);
    float m = -INFINITY, s = 0;
    for (int v = threadIdx.x * W; v < V; v += blockDim.x * W) {
        float e[W];
        zy_load<T, W>(x + base + v, e);
#pragma unroll
        for (int k = 0; k < W; k++) {
            if (e[k] > m) {
                s = s * exp_shift(m, e[k]) + 1.0f;
                m = e[k];
            } else {
                s += exp_shift(e[k], m);
            }
        }
    }
    ms_block(m, s); /* has a barrier: xy_sh is visible after it */
    float xy = xy_sh;
    if (threadIdx.x == 0) loss[blockIdx.x] = m + logf(s) - xy;
    if (!dl) return;
    float a = grad_scale / s;
    for (int v = threadIdx.x * W; v < V; v += blockDim.x * W) {
        float e[W];
        zy_load<T, W>(x + base + v, e);
#pragma unroll
        for (int k = 0; k < W; k++) e[k] = exp_shift(e[k], m) * a;
        zy_store<T, W>(dl + base + v, e);
    }
    __syncthreads(); /* the target slot was written above by some thread */
    if (threadIdx.x == 0) dl[base + y] = zy_from_f<T>(exp_shift(xy, m) * a - grad_scale);
}

/* One block: *sum = sum of loss[N] (double, fixed order), *count = rows not ignored. */
__global__ void xent_sum_k(double *sum, int *count, const float *loss, const int32_t *targets,
                           int N, int ignore_index) {
    zy_pdl_begin();
    __shared__ double ssum[256];
    __shared__ int scnt[256];
    double t = 0;
    int c = 0;
    for (int n = threadIdx.x; n < N; n += blockDim.x) {
        t += loss[n];
        c += targets[n] != ignore_index;
    }
    ssum[threadIdx.x] = t;
    scnt[threadIdx.x] = c;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h >>= 1) {
        if (threadIdx.x < h) {
            ssum[threadIdx.x] += ssum[threadIdx.x + h];
            scnt[threadIdx.x] += scnt[threadIdx.x + h];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        *sum = ssum[0];
        if (count) *count = scnt[0];
    }
}

template <typename T>
static int xent(T *dl, float *loss_rows, double *loss_sum, int *count, const T *logits,
                const int32_t *targets, int N, int V, int ignore_index, float grad_scale,
                void *stream) {
    if (N < 0 || V <= 0) return zy_fail("cuda xent: impossible shape N=%d V=%d", N, V);
    cudaStream_t st = (cudaStream_t)stream;
    if (N > 0) {
        constexpr int W = 16 / sizeof(T);
        if (V % W == 0 && zy_aligned(logits, 16) && (!dl || zy_aligned(dl, 16)))
            zy_launch(xent_rows_k<T, W>, N, zy_row_threads(V / W), 0, st, dl, loss_rows, logits,
                      targets, V, ignore_index, grad_scale);
        else
            zy_launch(xent_rows_k<T, 1>, N, zy_row_threads(V), 0, st, dl, loss_rows, logits,
                      targets, V, ignore_index, grad_scale);
        ZY_CUDA_TRY_LAUNCH();
    }
    if (loss_sum) {
        zy_launch(xent_sum_k, 1, 256, 0, st, loss_sum, count, loss_rows, targets, N, ignore_index);
        ZY_CUDA_TRY_LAUNCH();
    }
    return ZY_OK;
}

int cuda_xent_fwd_bwd_bf16(zy_bf16 *dlogits, float *loss_rows, double *loss_sum, int *count,
                           const zy_bf16 *logits, const int32_t *targets, int N, int V,
                           int ignore_index, float grad_scale, void *stream) {
    return xent<bf16>((bf16 *)dlogits, loss_rows, loss_sum, count, (const bf16 *)logits, targets, N,
                      V, ignore_index, grad_scale, stream);
}
