/* Device helpers shared by the CUDA op kernels (the .cu files of ops/cuda, C++ only): fp32 <->
 * element-type conversion, loads/stores of W consecutive elements (one 16-byte access when W *
 * sizeof(T) is 16), block reductions, and the row chunking of the deterministic column sums
 * (parameter gradients are summed per chunk of rows into a workspace, then over chunks in order).
 */
#ifndef ZY_OPS_CUDA_UTIL_H
#define ZY_OPS_CUDA_UTIL_H

#include "base/check.h"

#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

/* Threads per block of the row kernels (one block per row). */
#define ZY_ROW_THREADS 256
/* Column-sum kernels: blocks of ZY_COL_TX columns x ZY_COL_TY row lanes; at most ZY_COL_MAXP
 * row chunks of at least ZY_COL_MINR rows. */
#define ZY_COL_TX   32
#define ZY_COL_TY   8
#define ZY_COL_MAXP 256
#define ZY_COL_MINR 64

__device__ __forceinline__ float zy_to_f(float v) {
    return v;
}
__device__ __forceinline__ float zy_to_f(__nv_bfloat16 v) {
    return __bfloat162float(v);
}
template <typename T> __device__ __forceinline__ T zy_from_f(float v);
template <> __device__ __forceinline__ float zy_from_f<float>(float v) {
    return v;
}
template <> __device__ __forceinline__ __nv_bfloat16 zy_from_f<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

/* out[0..W) = p[0..W) in fp32; 16-byte loads when W * sizeof(T) is a multiple of 16 (p then
 * 16-byte aligned), else element loads. */
template <typename T, int W> __device__ __forceinline__ void zy_load(const T *p, float *out) {
    if constexpr ((W * sizeof(T)) % 16 == 0) {
        constexpr int NV = W * sizeof(T) / 16, PER = 16 / sizeof(T);
#pragma unroll
        for (int j = 0; j < NV; j++) {
            uint4 u = reinterpret_cast<const uint4 *>(p)[j];
            const T *e = reinterpret_cast<const T *>(&u);
#pragma unroll
            for (int k = 0; k < PER; k++) out[j * PER + k] = zy_to_f(e[k]);
        }
    } else {
#pragma unroll
        for (int k = 0; k < W; k++) out[k] = zy_to_f(p[k]);
    }
}

/* p[0..W) = v[0..W) rounded to T (round to nearest even); 16-byte stores when the width allows. */
template <typename T, int W> __device__ __forceinline__ void zy_store(T *p, const float *v) {
    if constexpr ((W * sizeof(T)) % 16 == 0) {
        constexpr int NV = W * sizeof(T) / 16, PER = 16 / sizeof(T);
#pragma unroll
        for (int j = 0; j < NV; j++) {
            uint4 u;
            T *e = reinterpret_cast<T *>(&u);
#pragma unroll
            for (int k = 0; k < PER; k++) e[k] = zy_from_f<T>(v[j * PER + k]);
            reinterpret_cast<uint4 *>(p)[j] = u;
        }
    } else {
#pragma unroll
        for (int k = 0; k < W; k++) p[k] = zy_from_f<T>(v[k]);
    }
}

/* The exact (erf) GELU of v, as the router's MLP has it: the elementwise kernel and the fused
 * bias + GELU both call it, so they give the same bits. */
#define ZY_INV_SQRT2 0.70710678118654752440f
__device__ __forceinline__ float zy_gelu(float v) {
    return 0.5f * v * (1.0f + erff(v * ZY_INV_SQRT2));
}

/* dy * GELU'(v): the elementwise backward and the fused backward with the bias's column sums
 * both call it, so they give the same bits. */
#define ZY_INV_SQRT_2PI 0.39894228040143267794f
__device__ __forceinline__ float zy_gelu_bwd(float dy, float v) {
    const float cdf = 0.5f * (1.0f + erff(v * ZY_INV_SQRT2));
    const float pdf = ZY_INV_SQRT_2PI * expf(-0.5f * v * v);
    return dy * (cdf + v * pdf);
}

/* SwiGLU of a gate value g and its up value u, each as the activation type holds it: silu(g) u,
 * with the hardware's exp2 and reciprocal approximations (__expf, __fdividef: a few ulp of fp32,
 * far below the bf16 result's rounding; what torch's CUDA build does too). The exact libm path is
 * ~40 instructions an element, which made SwiGLU in the grouped GEMM's epilogue cost more than
 * the separate kernel. Large |g| gives the limits: exp overflows to inf and the quotient to 0.
 * The elementwise kernel and the grouped GEMM's epilogue both call zy_swiglu, so they give the
 * same bits. */
__device__ __forceinline__ float zy_swiglu(float g, float u) {
    return __fdividef(g, 1.0f + __expf(-g)) * u;
}
/* Its gradients for an output gradient dy: *dg for the gate value, *du for the up value, with
 * the same sigmoid. */
__device__ __forceinline__ void zy_swiglu_bwd(float g, float u, float dy, float *dg, float *du) {
    const float sig = __fdividef(1.0f, 1.0f + __expf(-g));
    *du = dy * g * sig;
    *dg = dy * u * sig * (1.0f + g * (1.0f - sig));
}

/* Four bf16 as one 8-byte access (p 8-byte aligned) to or from fp32. */
__device__ __forceinline__ void zy_load_bf16x4(const __nv_bfloat16 *p, float *v) {
    uint2 u = *reinterpret_cast<const uint2 *>(p);
    const __nv_bfloat16 *e = reinterpret_cast<const __nv_bfloat16 *>(&u);
#pragma unroll
    for (int k = 0; k < 4; k++) v[k] = __bfloat162float(e[k]);
}
__device__ __forceinline__ void zy_store_bf16x4(__nv_bfloat16 *p, const float *v) {
    uint2 u;
    __nv_bfloat16 *e = reinterpret_cast<__nv_bfloat16 *>(&u);
#pragma unroll
    for (int k = 0; k < 4; k++) e[k] = __float2bfloat16_rn(v[k]);
    *reinterpret_cast<uint2 *>(p) = u;
}

/* Threads for a row kernel over `units` vector units: a multiple of 32 in [32, max]. */
static inline int zy_row_threads_max(long long units, int max) {
    long long t = (units + 31) / 32 * 32;
    return t < 32 ? 32 : (t > max ? max : (int)t);
}
/* The same with the row kernels' default block, ZY_ROW_THREADS. */
static inline int zy_row_threads(long long units) {
    return zy_row_threads_max(units, ZY_ROW_THREADS);
}

/* Blocks for a grid-stride elementwise kernel over `units` items of 256 threads. */
static inline unsigned zy_grid_blocks(size_t units) {
    size_t b = (units + 255) / 256;
    return b < 1 ? 1u : (b > 8192 ? 8192u : (unsigned)b);
}

/* op(...) of v over the block (blockDim.x a multiple of 32, at most 1024; e: op's identity);
 * every thread gets it. The order is fixed by the thread layout, so the result is
 * deterministic. */
template <typename Op> __device__ __forceinline__ float zy_block_reduce(float v, float e, Op op) {
    __shared__ float part[32];
    __shared__ float total;
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads(); /* part/total may still be read by an earlier call */
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float s = lane < nw ? part[lane] : e;
        for (int o = 16; o > 0; o >>= 1) s = op(s, __shfl_xor_sync(0xffffffffu, s, o));
        if (lane == 0) total = s;
    }
    __syncthreads();
    return total;
}
/* Sum of v over the block. */
__device__ __forceinline__ float zy_block_sum(float v) {
    return zy_block_reduce(v, 0.0f, [](float a, float b) { return a + b; });
}
/* Max of v over the block. */
__device__ __forceinline__ float zy_block_max(float v) {
    return zy_block_reduce(v, -INFINITY, [](float a, float b) { return fmaxf(a, b); });
}

/* EDA's backward on W elements (ops_eda_bwd): dr = dz * g, and the column sums s += dz * r_prev.
 * One definition for eda_bwd_k and the router's one-pass backward, so both give the same bits. */
template <int W>
__device__ __forceinline__ void zy_eda_bwd(const float *dz, const float *rp, const float *g,
                                           float *dr, float *s) {
#pragma unroll
    for (int k = 0; k < W; k++) {
        dr[k] = dz[k] * g[k];
        s[k] += dz[k] * rp[k];
    }
}

/* 1 when p is aligned to `bytes` (the vector paths need 16- or 8-byte alignment). */
static inline int zy_aligned(const void *p, size_t bytes) {
    return ((uintptr_t)p % bytes) == 0;
}

/* Row chunking of the column sums for N rows: *R rows per chunk, *P chunks (P <= ZY_COL_MAXP). */
static inline void zy_col_chunks(int N, int *R, int *P) {
    int r = ZY_COL_MINR;
    if ((N + r - 1) / r > ZY_COL_MAXP) r = (N + ZY_COL_MAXP - 1) / ZY_COL_MAXP;
    *R = r;
    *P = N > 0 ? (N + r - 1) / r : 0;
}

/* The outputs of a finishing pass over NS column sums: dst[j][c] += mul[j][c] * (total of sum
 * src[j]) for j < n (mul NULL = 1). */
typedef struct {
    float *dst[5];
    const float *mul[5];
    int src[5];
    int n;
} zy_col_outs;

/* Totals the chunk partials part[(s*P + p)*C + c] (s < ns <= 4, p < P) per column in double, in an
 * order fixed by the thread layout, and adds them to the outputs o. Defined in norm.cu. */
int zy_col_finish_multi(const zy_col_outs *o, int ns, const float *part, int P, int C,
                        cudaStream_t stream);
/* The same for one sum: dst[c] += (sum over p < P of part[p*C + c]) (* mul[c] when mul != NULL). */
int zy_col_finish(float *dst, const float *part, const float *mul, int P, int C,
                  cudaStream_t stream);

#endif
