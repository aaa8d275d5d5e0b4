/* CUDA elementwise ops: exact (erf) GELU, SwiGLU, and the embedding + input affine, forward and
 * backward. Same math as ops/cpu/cpu_elementwise.c and cpu_embed_* (cpu_dense.c), in fp32 (the CPU
 * evaluates transcendentals in double). Grid-stride loops over W-element units: 16-byte accesses
 * when the row width and the pointers allow, single elements otherwise. */
#include "ops/cuda/cuda_util.h"
#include "ops/cuda/kernels.h"

#include <cuda_bf16.h>

typedef __nv_bfloat16 bf16;

#define ZY_INV_SQRT2    0.70710678118654752440f
#define ZY_INV_SQRT_2PI 0.39894228040143267794f

/* ---- GELU ---- */

template <typename T, int W> __global__ void gelu_fwd_k(T *y, const T *x, size_t units) {
    for (size_t u = (size_t)blockIdx.x * blockDim.x + threadIdx.x; u < units;
         u += (size_t)gridDim.x * blockDim.x) {
        float v[W], o[W];
        zy_load<T, W>(x + u * W, v);
#pragma unroll
        for (int k = 0; k < W; k++) o[k] = 0.5f * v[k] * (1.0f + erff(v[k] * ZY_INV_SQRT2));
        zy_store<T, W>(y + u * W, o);
    }
}

template <typename T, int W>
__global__ void gelu_bwd_k(T *dx, const T *dy, const T *x, size_t units) {
    for (size_t u = (size_t)blockIdx.x * blockDim.x + threadIdx.x; u < units;
         u += (size_t)gridDim.x * blockDim.x) {
        float v[W], g[W], o[W];
        zy_load<T, W>(x + u * W, v);
        zy_load<T, W>(dy + u * W, g);
#pragma unroll
        for (int k = 0; k < W; k++) {
            float cdf = 0.5f * (1.0f + erff(v[k] * ZY_INV_SQRT2));
            float pdf = ZY_INV_SQRT_2PI * expf(-0.5f * v[k] * v[k]);
            o[k] = g[k] * (cdf + v[k] * pdf);
        }
        zy_store<T, W>(dx + u * W, o);
    }
}

template <typename T> static int gelu_fwd(T *y, const T *x, size_t n, void *stream) {
    if (n == 0) return ZY_OK;
    cudaStream_t st = (cudaStream_t)stream;
    constexpr int W = 16 / sizeof(T);
    if (n % W == 0 && zy_aligned(y, 16) && zy_aligned(x, 16))
        gelu_fwd_k<T, W><<<zy_grid_blocks(n / W), 256, 0, st>>>(y, x, n / W);
    else
        gelu_fwd_k<T, 1><<<zy_grid_blocks(n), 256, 0, st>>>(y, x, n);
    CUDA_TRY_LAUNCH();
    return ZY_OK;
}

template <typename T> static int gelu_bwd(T *dx, const T *dy, const T *x, size_t n, void *stream) {
    if (n == 0) return ZY_OK;
    cudaStream_t st = (cudaStream_t)stream;
    constexpr int W = 16 / sizeof(T);
    if (n % W == 0 && zy_aligned(dx, 16) && zy_aligned(dy, 16) && zy_aligned(x, 16))
        gelu_bwd_k<T, W><<<zy_grid_blocks(n / W), 256, 0, st>>>(dx, dy, x, n / W);
    else
        gelu_bwd_k<T, 1><<<zy_grid_blocks(n), 256, 0, st>>>(dx, dy, x, n);
    CUDA_TRY_LAUNCH();
    return ZY_OK;
}

int cuda_gelu_fwd_f32(float *y, const float *x, size_t n, void *stream) {
    return gelu_fwd<float>(y, x, n, stream);
}
int cuda_gelu_fwd_bf16(zy_bf16 *y, const zy_bf16 *x, size_t n, void *stream) {
    return gelu_fwd<bf16>((bf16 *)y, (const bf16 *)x, n, stream);
}
int cuda_gelu_bwd_f32(float *dx, const float *dy, const float *x, size_t n, void *stream) {
    return gelu_bwd<float>(dx, dy, x, n, stream);
}
int cuda_gelu_bwd_bf16(zy_bf16 *dx, const zy_bf16 *dy, const zy_bf16 *x, size_t n, void *stream) {
    return gelu_bwd<bf16>((bf16 *)dx, (const bf16 *)dy, (const bf16 *)x, n, stream);
}

/* ---- SwiGLU ---- */

/* Unit u covers elements [u*W, u*W + W) of y [N,F], all in one row (F % W == 0). */
template <typename T, int W> __global__ void swiglu_fwd_k(T *y, const T *gu, int F, size_t units) {
    for (size_t u = (size_t)blockIdx.x * blockDim.x + threadIdx.x; u < units;
         u += (size_t)gridDim.x * blockDim.x) {
        size_t i = u * W, n = i / F, f = i % F;
        const T *g = gu + n * 2 * F + f;
        float gv[W], uv[W], o[W];
        zy_load<T, W>(g, gv);
        zy_load<T, W>(g + F, uv);
#pragma unroll
        for (int k = 0; k < W; k++) o[k] = gv[k] / (1.0f + expf(-gv[k])) * uv[k];
        zy_store<T, W>(y + i, o);
    }
}

template <typename T, int W>
__global__ void swiglu_bwd_k(T *dgu, const T *dy, const T *gu, int F, size_t units) {
    for (size_t u = (size_t)blockIdx.x * blockDim.x + threadIdx.x; u < units;
         u += (size_t)gridDim.x * blockDim.x) {
        size_t i = u * W, n = i / F, f = i % F, r = n * 2 * F + f;
        float gv[W], uv[W], dyv[W], dg[W], du[W];
        zy_load<T, W>(gu + r, gv);
        zy_load<T, W>(gu + r + F, uv);
        zy_load<T, W>(dy + i, dyv);
#pragma unroll
        for (int k = 0; k < W; k++) {
            float sig = 1.0f / (1.0f + expf(-gv[k]));
            du[k] = dyv[k] * gv[k] * sig;
            dg[k] = dyv[k] * uv[k] * sig * (1.0f + gv[k] * (1.0f - sig));
        }
        zy_store<T, W>(dgu + r, dg);
        zy_store<T, W>(dgu + r + F, du);
    }
}

template <typename T> static int swiglu_fwd(T *y, const T *gu, int N, int F, void *stream) {
    if (N < 0 || F <= 0) return zy_fail("cuda swiglu_fwd: impossible shape N=%d F=%d", N, F);
    if (N == 0) return ZY_OK;
    cudaStream_t st = (cudaStream_t)stream;
    constexpr int W = 16 / sizeof(T);
    size_t n = (size_t)N * F;
    if (F % W == 0 && zy_aligned(y, 16) && zy_aligned(gu, 16))
        swiglu_fwd_k<T, W><<<zy_grid_blocks(n / W), 256, 0, st>>>(y, gu, F, n / W);
    else
        swiglu_fwd_k<T, 1><<<zy_grid_blocks(n), 256, 0, st>>>(y, gu, F, n);
    CUDA_TRY_LAUNCH();
    return ZY_OK;
}

template <typename T>
static int swiglu_bwd(T *dgu, const T *dy, const T *gu, int N, int F, void *stream) {
    if (N < 0 || F <= 0) return zy_fail("cuda swiglu_bwd: impossible shape N=%d F=%d", N, F);
    if (N == 0) return ZY_OK;
    cudaStream_t st = (cudaStream_t)stream;
    constexpr int W = 16 / sizeof(T);
    size_t n = (size_t)N * F;
    if (F % W == 0 && zy_aligned(dgu, 16) && zy_aligned(dy, 16) && zy_aligned(gu, 16))
        swiglu_bwd_k<T, W><<<zy_grid_blocks(n / W), 256, 0, st>>>(dgu, dy, gu, F, n / W);
    else
        swiglu_bwd_k<T, 1><<<zy_grid_blocks(n), 256, 0, st>>>(dgu, dy, gu, F, n);
    CUDA_TRY_LAUNCH();
    return ZY_OK;
}

int cuda_swiglu_fwd_f32(float *y, const float *gu, int N, int F, void *stream) {
    return swiglu_fwd<float>(y, gu, N, F, stream);
}
int cuda_swiglu_fwd_bf16(zy_bf16 *y, const zy_bf16 *gu, int N, int F, void *stream) {
    return swiglu_fwd<bf16>((bf16 *)y, (const bf16 *)gu, N, F, stream);
}
int cuda_swiglu_bwd_f32(float *dgu, const float *dy, const float *gu, int N, int F, void *stream) {
    return swiglu_bwd<float>(dgu, dy, gu, N, F, stream);
}
int cuda_swiglu_bwd_bf16(zy_bf16 *dgu, const zy_bf16 *dy, const zy_bf16 *gu, int N, int F,
                         void *stream) {
    return swiglu_bwd<bf16>((bf16 *)dgu, (const bf16 *)dy, (const bf16 *)gu, N, F, stream);
}

/* ---- embedding + input affine ---- */

template <int W>
__global__ void embed_fwd_k(float *h, const float *emb, const int32_t *ids, const float *bias,
                            const float *scale, int D, size_t units) {
    for (size_t u = (size_t)blockIdx.x * blockDim.x + threadIdx.x; u < units;
         u += (size_t)gridDim.x * blockDim.x) {
        size_t i = u * W, n = i / D, c = i % D;
        float e[W], b[W], s[W], o[W];
        zy_load<float, W>(emb + (size_t)ids[n] * D + c, e);
        zy_load<float, W>(bias + c, b);
        zy_load<float, W>(scale + c, s);
#pragma unroll
        for (int k = 0; k < W; k++) o[k] = (e[k] + b[k]) * s[k];
        zy_store<float, W>(h + i, o);
    }
}

int cuda_embed_fwd_f32(float *h, const float *emb, const int32_t *ids, const float *bias,
                       const float *scale, int N, int D, void *stream) {
    if (N < 0 || D <= 0) return zy_fail("cuda embed_fwd: impossible shape N=%d D=%d", N, D);
    if (N == 0) return ZY_OK;
    cudaStream_t st = (cudaStream_t)stream;
    size_t n = (size_t)N * D;
    if (D % 4 == 0 && zy_aligned(h, 16) && zy_aligned(emb, 16) && zy_aligned(bias, 16) &&
        zy_aligned(scale, 16))
        embed_fwd_k<4><<<zy_grid_blocks(n / 4), 256, 0, st>>>(h, emb, ids, bias, scale, D, n / 4);
    else
        embed_fwd_k<1><<<zy_grid_blocks(n), 256, 0, st>>>(h, emb, ids, bias, scale, D, n);
    CUDA_TRY_LAUNCH();
    return ZY_OK;
}

/* Column sums of one row chunk (as norm.cu's norm_col_k): s0 = dh*scale -> dbias,
 * s1 = dh*(emb+bias) -> dscale; the table gradient goes straight to demb with fp32 atomics. */
__global__ void __launch_bounds__(ZY_COL_TX *ZY_COL_TY)
    embed_col_k(float *part, int P, int R, int N, int D, float *demb, const float *dh,
                const float *emb, const int32_t *ids, const float *bias, const float *scale,
                int skip_id) {
    __shared__ float red[2][ZY_COL_TY][ZY_COL_TX + 1];
    int c = blockIdx.x * ZY_COL_TX + threadIdx.x, p = blockIdx.y;
    int n0 = p * R, n1 = n0 + R < N ? n0 + R : N;
    float s0 = 0, s1 = 0;
    if (c < D) {
        float sc = scale[c], b = bias[c];
        for (int n = n0 + threadIdx.y; n < n1; n += ZY_COL_TY) {
            int id = ids[n];
            float g = dh[(size_t)n * D + c], gs = g * sc;
            s0 += gs;
            s1 += g * (emb[(size_t)id * D + c] + b);
            if (id != skip_id) atomicAdd(&demb[(size_t)id * D + c], gs);
        }
    }
    red[0][threadIdx.y][threadIdx.x] = s0;
    red[1][threadIdx.y][threadIdx.x] = s1;
    __syncthreads();
    if (threadIdx.y == 0 && c < D) {
        for (int k = 0; k < 2; k++) {
            float t = 0;
            for (int j = 0; j < ZY_COL_TY; j++) t += red[k][j][threadIdx.x];
            part[((size_t)k * P + p) * D + c] = t;
        }
    }
}

int cuda_embed_bwd_f32(float *demb, float *dbias, float *dscale, float *ws, const float *dh,
                       const float *emb, const int32_t *ids, const float *bias, const float *scale,
                       int N, int D, int skip_id, void *stream) {
    if (N < 0 || D <= 0) return zy_fail("cuda embed_bwd: impossible shape N=%d D=%d", N, D);
    if (N == 0) return ZY_OK;
    cudaStream_t st = (cudaStream_t)stream;
    int R, P;
    zy_col_chunks(N, &R, &P);
    dim3 grid((D + ZY_COL_TX - 1) / ZY_COL_TX, P), block(ZY_COL_TX, ZY_COL_TY);
    embed_col_k<<<grid, block, 0, st>>>(ws, P, R, N, D, demb, dh, emb, ids, bias, scale, skip_id);
    CUDA_TRY_LAUNCH();
    if (zy_col_finish(dbias, ws, NULL, P, D, st) != ZY_OK ||
        zy_col_finish(dscale, ws + (size_t)P * D, NULL, P, D, st) != ZY_OK)
        return ZY_ERR;
    return ZY_OK;
}
