/* CUDA RMSNorm forward/backward and the fused residual scaling + RMSNorm forward/backward, plus
 * the column-sum machinery shared with the embedding backward (per-chunk partials in a workspace,
 * then a fixed-order total). Same math as ops/cpu/cpu_norm.c and cpu_resscale_* in cpu_dense.c,
 * with fp32 reductions. One block per row; a row is read twice (the second read hits L1/L2). */
#include "ops/cuda/cuda_util.h"
#include "ops/cuda/kernels.h"

#include <cuda_bf16.h>

typedef __nv_bfloat16 bf16;

/* ---- column sums ---- */

size_t cuda_ops_ws_bytes(int N, int C) {
    int R, P;
    zy_col_chunks(N > 0 ? N : 0, &R, &P);
    size_t b = (size_t)4 * (size_t)(P > 0 ? P : 1) * (size_t)(C > 0 ? C : 1) * sizeof(float);
    size_t e = cuda_embed_bwd_ws_bytes(N, C); /* column partials, id sort, segment partials */
    return b > e ? b : e;
}

/* dst[c] += (sum_p part[p*C + c]) * mul[c]; the chunk totals are added in order, in double. */
__global__ void col_finish_k(float *dst, const float *part, const float *mul, int P, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double t = 0;
    for (int p = 0; p < P; p++) t += part[(size_t)p * C + c];
    if (mul) t *= mul[c];
    dst[c] = (float)((double)dst[c] + t);
}

int zy_col_finish(float *dst, const float *part, const float *mul, int P, int C,
                  cudaStream_t stream) {
    if (P <= 0 || C <= 0) return ZY_OK;
    col_finish_k<<<(C + 255) / 256, 256, 0, stream>>>(dst, part, mul, P, C);
    CUDA_TRY_LAUNCH();
    return ZY_OK;
}

/* ---- RMSNorm forward ---- */

/* One block per row: sum of squares, rstd, then y = w * (x * rstd). */
template <typename TX, typename TY, int W>
__global__ void __launch_bounds__(ZY_ROW_THREADS)
    rmsnorm_fwd_k(TY *y, float *rstd, const TX *x, const float *w, int C, float eps) {
    size_t row = blockIdx.x;
    const TX *xr = x + row * C;
    TY *yr = y + row * C;
    float ss = 0;
    for (int c = threadIdx.x * W; c < C; c += blockDim.x * W) {
        float v[W];
        zy_load<TX, W>(xr + c, v);
#pragma unroll
        for (int k = 0; k < W; k++) ss += v[k] * v[k];
    }
    ss = zy_block_sum(ss);
    float r = 1.0f / sqrtf(ss / (float)C + eps);
    if (threadIdx.x == 0) rstd[row] = r;
    for (int c = threadIdx.x * W; c < C; c += blockDim.x * W) {
        float v[W], wv[W], o[W];
        zy_load<TX, W>(xr + c, v);
        zy_load<float, W>(w + c, wv);
#pragma unroll
        for (int k = 0; k < W; k++) o[k] = wv[k] * (v[k] * r);
        zy_store<TY, W>(yr + c, o);
    }
}

template <typename TX, typename TY>
static int rmsnorm_fwd(TY *y, float *rstd, const TX *x, const float *w, int N, int C, float eps,
                       void *stream) {
    if (N < 0 || C <= 0) return zy_fail("cuda rmsnorm_fwd: impossible shape N=%d C=%d", N, C);
    if (N == 0) return ZY_OK;
    cudaStream_t st = (cudaStream_t)stream;
    constexpr int W = 16 / (sizeof(TX) < sizeof(TY) ? sizeof(TX) : sizeof(TY));
    if (C % W == 0 && zy_aligned(y, 16) && zy_aligned(x, 16) && zy_aligned(w, 16))
        rmsnorm_fwd_k<TX, TY, W><<<N, zy_row_threads(C / W), 0, st>>>(y, rstd, x, w, C, eps);
    else
        rmsnorm_fwd_k<TX, TY, 1><<<N, zy_row_threads(C), 0, st>>>(y, rstd, x, w, C, eps);
    CUDA_TRY_LAUNCH();
    return ZY_OK;
}

int cuda_rmsnorm_fwd_f32(float *y, float *rstd, const float *x, const float *w, int N, int C,
                         float eps, void *stream) {
    return rmsnorm_fwd<float, float>(y, rstd, x, w, N, C, eps, stream);
}
int cuda_rmsnorm_fwd_bf16(zy_bf16 *y, float *rstd, const zy_bf16 *x, const float *w, int N, int C,
                          float eps, void *stream) {
    return rmsnorm_fwd<bf16, bf16>((bf16 *)y, rstd, (const bf16 *)x, w, N, C, eps, stream);
}
int cuda_rmsnorm_fwd_f32_bf16(zy_bf16 *y, float *rstd, const float *x, const float *w, int N, int C,
                              float eps, void *stream) {
    return rmsnorm_fwd<float, bf16>((bf16 *)y, rstd, x, w, N, C, eps, stream);
}

/* ---- residual scaling + RMSNorm forward ---- */

/* One block per row: out = (o + ob) * os + (h + rb) * rs (stored, fp32), sum of squares of out,
 * then y = w * (out * rstd) (each thread re-reads the elements it wrote). */
template <typename T, int W>
__global__ void __launch_bounds__(ZY_ROW_THREADS)
    resnorm_fwd_k(float *out, T *y, float *rstd, const T *o, const float *h, const float *ob,
                  const float *os, const float *rb, const float *rs, const float *w, int D,
                  float eps) {
    size_t base = (size_t)blockIdx.x * D;
    float ss = 0;
    for (int c = threadIdx.x * W; c < D; c += blockDim.x * W) {
        float ov[W], hv[W], obv[W], osv[W], rbv[W], rsv[W], v[W];
        zy_load<T, W>(o + base + c, ov);
        zy_load<float, W>(h + base + c, hv);
        zy_load<float, W>(ob + c, obv);
        zy_load<float, W>(os + c, osv);
        zy_load<float, W>(rb + c, rbv);
        zy_load<float, W>(rs + c, rsv);
#pragma unroll
        for (int k = 0; k < W; k++) {
            v[k] = (ov[k] + obv[k]) * osv[k] + (hv[k] + rbv[k]) * rsv[k];
            ss += v[k] * v[k];
        }
        zy_store<float, W>(out + base + c, v);
    }
    ss = zy_block_sum(ss);
    float r = 1.0f / sqrtf(ss / (float)D + eps);
    if (threadIdx.x == 0) rstd[blockIdx.x] = r;
    for (int c = threadIdx.x * W; c < D; c += blockDim.x * W) {
        float v[W], wv[W], yv[W];
        zy_load<float, W>(out + base + c, v);
        zy_load<float, W>(w + c, wv);
#pragma unroll
        for (int k = 0; k < W; k++) yv[k] = wv[k] * (v[k] * r);
        zy_store<T, W>(y + base + c, yv);
    }
}

template <typename T>
static int resnorm_fwd(float *out, T *y, float *rstd, const T *o, const float *h, const float *ob,
                       const float *os, const float *rb, const float *rs, const float *w, int N,
                       int D, float eps, void *stream) {
    if (N < 0 || D <= 0) return zy_fail("cuda resnorm_fwd: impossible shape N=%d D=%d", N, D);
    if (N == 0) return ZY_OK;
    cudaStream_t st = (cudaStream_t)stream;
    constexpr int W = 16 / sizeof(T);
    const void *ptrs[] = {out, y, o, h, ob, os, rb, rs, w};
    int vec = D % W == 0;
    for (const void *p : ptrs) vec = vec && zy_aligned(p, 16);
    if (vec)
        resnorm_fwd_k<T, W>
            <<<N, zy_row_threads(D / W), 0, st>>>(out, y, rstd, o, h, ob, os, rb, rs, w, D, eps);
    else
        resnorm_fwd_k<T, 1>
            <<<N, zy_row_threads(D), 0, st>>>(out, y, rstd, o, h, ob, os, rb, rs, w, D, eps);
    CUDA_TRY_LAUNCH();
    return ZY_OK;
}

int cuda_resnorm_fwd_f32(float *out, float *y, float *rstd, const float *o, const float *h,
                         const float *ob, const float *os, const float *rb, const float *rs,
                         const float *w, int N, int D, float eps, void *stream) {
    return resnorm_fwd<float>(out, y, rstd, o, h, ob, os, rb, rs, w, N, D, eps, stream);
}
int cuda_resnorm_fwd_bf16(float *out, zy_bf16 *y, float *rstd, const zy_bf16 *o, const float *h,
                          const float *ob, const float *os, const float *rb, const float *rs,
                          const float *w, int N, int D, float eps, void *stream) {
    return resnorm_fwd<bf16>(out, (bf16 *)y, rstd, (const bf16 *)o, h, ob, os, rb, rs, w, N, D, eps,
                             stream);
}

/* ---- RMSNorm backward: rows ---- */

/* One block per row: dot = sum dy*w*x, k = rstd^3 dot / C, dx = rstd*dy*w - k*x (+ add[] when
 * add != NULL; add may alias dx: each element is read before the same thread writes it). */
template <typename TX, typename TY, typename TD, int W>
__global__ void __launch_bounds__(ZY_ROW_THREADS)
    rmsnorm_bwd_rows_k(TD *dx, const TD *add, const TY *dy, const TX *x, const float *w,
                       const float *rstd, int C) {
    size_t base = (size_t)blockIdx.x * C;
    float dot = 0;
    for (int c = threadIdx.x * W; c < C; c += blockDim.x * W) {
        float g[W], xv[W], wv[W];
        zy_load<TY, W>(dy + base + c, g);
        zy_load<TX, W>(x + base + c, xv);
        zy_load<float, W>(w + c, wv);
#pragma unroll
        for (int k = 0; k < W; k++) dot += g[k] * wv[k] * xv[k];
    }
    dot = zy_block_sum(dot);
    float r = rstd[blockIdx.x];
    float kk = r * r * r * dot / (float)C;
    for (int c = threadIdx.x * W; c < C; c += blockDim.x * W) {
        float g[W], xv[W], wv[W], d[W];
        zy_load<TY, W>(dy + base + c, g);
        zy_load<TX, W>(x + base + c, xv);
        zy_load<float, W>(w + c, wv);
#pragma unroll
        for (int k = 0; k < W; k++) d[k] = r * g[k] * wv[k] - kk * xv[k];
        if (add) {
            float a[W];
            zy_load<TD, W>(add + base + c, a);
#pragma unroll
            for (int k = 0; k < W; k++) d[k] += a[k];
        }
        zy_store<TD, W>(dx + base + c, d);
    }
}

template <typename TX, typename TY, typename TD>
static void rmsnorm_bwd_rows(TD *dx, const TD *add, const TY *dy, const TX *x, const float *w,
                             const float *rstd, int N, int C, cudaStream_t st) {
    constexpr size_t MN = sizeof(TX) < sizeof(TY) ? sizeof(TX) : sizeof(TY);
    constexpr int W = 16 / (MN < sizeof(TD) ? MN : sizeof(TD));
    const void *ptrs[] = {dx, add, dy, x, w};
    int vec = C % W == 0;
    for (const void *p : ptrs) vec = vec && zy_aligned(p, 16);
    if (vec)
        rmsnorm_bwd_rows_k<TX, TY, TD, W>
            <<<N, zy_row_threads(C / W), 0, st>>>(dx, add, dy, x, w, rstd, C);
    else
        rmsnorm_bwd_rows_k<TX, TY, TD, 1>
            <<<N, zy_row_threads(C), 0, st>>>(dx, add, dy, x, w, rstd, C);
}

/* ---- backward: column sums ---- */

/* Block (ZY_COL_TX columns, ZY_COL_TY row lanes) over the rows [p*R, (p+1)*R) of chunk p =
 * blockIdx.y; the NS sums of the chunk go to part[(s*P + p)*C + c].
 * MODE 0 (RMSNorm): s0 = dy*x*rstd.
 * MODE 1 (residual scaling after the norm): dout is read from dh, s0 = dy*x*rstd (x = out),
 *   s1 = dout, s2 = dout*(o+ob), s3 = dout*(h+rb); then d_o = dout*os, dh = dout*rs in place. */
template <int MODE, typename TX, typename TY>
__global__ void __launch_bounds__(ZY_COL_TX *ZY_COL_TY)
    norm_col_k(float *part, int P, int R, int N, int C, const TY *dy, const TX *x,
               const float *rstd, float *dh, TY *d_o, const TY *o, const float *h, const float *ob,
               const float *os, const float *rb, const float *rs) {
    constexpr int NS = MODE == 0 ? 1 : 4;
    __shared__ float red[NS][ZY_COL_TY][ZY_COL_TX + 1];
    int c = blockIdx.x * ZY_COL_TX + threadIdx.x, p = blockIdx.y;
    int n0 = p * R, n1 = n0 + R < N ? n0 + R : N;
    float s[NS];
#pragma unroll
    for (int k = 0; k < NS; k++) s[k] = 0;
    if (c < C) {
        float obc = 0, osc = 0, rbc = 0, rsc = 0;
        if constexpr (MODE == 1) obc = ob[c], osc = os[c], rbc = rb[c], rsc = rs[c];
        for (int n = n0 + threadIdx.y; n < n1; n += ZY_COL_TY) {
            size_t i = (size_t)n * C + c;
            s[0] += zy_to_f(dy[i]) * zy_to_f(x[i]) * rstd[n];
            if constexpr (MODE == 1) {
                float g = dh[i];
                s[1] += g;
                s[2] += g * (zy_to_f(o[i]) + obc);
                s[3] += g * (h[i] + rbc);
                d_o[i] = zy_from_f<TY>(g * osc);
                dh[i] = g * rsc;
            }
        }
    }
#pragma unroll
    for (int k = 0; k < NS; k++) red[k][threadIdx.y][threadIdx.x] = s[k];
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
#pragma unroll
        for (int k = 0; k < NS; k++) {
            float t = 0;
            for (int j = 0; j < ZY_COL_TY; j++) t += red[k][j][threadIdx.x];
            part[((size_t)k * P + p) * C + c] = t;
        }
    }
}

template <typename TX, typename TY, typename TD>
static int rmsnorm_bwd(TD *dx, float *dw, float *ws, const TY *dy, const TX *x, const float *w,
                       const float *rstd, int N, int C, int accumulate, void *stream) {
    if (N < 0 || C <= 0) return zy_fail("cuda rmsnorm_bwd: impossible shape N=%d C=%d", N, C);
    if (N == 0) return ZY_OK;
    cudaStream_t st = (cudaStream_t)stream;
    int R, P;
    zy_col_chunks(N, &R, &P);
    /* dw first: dx may alias dy */
    dim3 grid((C + ZY_COL_TX - 1) / ZY_COL_TX, P), block(ZY_COL_TX, ZY_COL_TY);
    norm_col_k<0, TX, TY><<<grid, block, 0, st>>>(ws, P, R, N, C, dy, x, rstd, NULL, NULL, NULL,
                                                  NULL, NULL, NULL, NULL, NULL);
    CUDA_TRY_LAUNCH();
    if (zy_col_finish(dw, ws, NULL, P, C, st) != ZY_OK) return ZY_ERR;
    rmsnorm_bwd_rows<TX, TY, TD>(dx, accumulate ? dx : NULL, dy, x, w, rstd, N, C, st);
    CUDA_TRY_LAUNCH();
    return ZY_OK;
}

int cuda_rmsnorm_bwd_f32(float *dx, float *dw, float *ws, const float *dy, const float *x,
                         const float *w, const float *rstd, int N, int C, int accumulate,
                         void *stream) {
    return rmsnorm_bwd<float, float, float>(dx, dw, ws, dy, x, w, rstd, N, C, accumulate, stream);
}
int cuda_rmsnorm_bwd_bf16(zy_bf16 *dx, float *dw, float *ws, const zy_bf16 *dy, const zy_bf16 *x,
                          const float *w, const float *rstd, int N, int C, int accumulate,
                          void *stream) {
    return rmsnorm_bwd<bf16, bf16, bf16>((bf16 *)dx, dw, ws, (const bf16 *)dy, (const bf16 *)x, w,
                                         rstd, N, C, accumulate, stream);
}
int cuda_rmsnorm_bwd_f32_bf16(float *dx, float *dw, float *ws, const zy_bf16 *dy, const float *x,
                              const float *w, const float *rstd, int N, int C, int accumulate,
                              void *stream) {
    return rmsnorm_bwd<float, bf16, float>(dx, dw, ws, (const bf16 *)dy, x, w, rstd, N, C,
                                           accumulate, stream);
}

/* ---- residual scaling + RMSNorm backward ---- */

template <typename T>
static int resnorm_bwd(T *d_o, float *dh, float *dw, float *dob, float *dos, float *drb, float *drs,
                       float *ws, const T *dy, const float *dres, const float *out,
                       const float *rstd, const float *w, const T *o, const float *h,
                       const float *ob, const float *os, const float *rb, const float *rs, int N,
                       int D, void *stream) {
    if (N < 0 || D <= 0) return zy_fail("cuda resnorm_bwd: impossible shape N=%d D=%d", N, D);
    if (N == 0) return ZY_OK;
    cudaStream_t st = (cudaStream_t)stream;
    int R, P;
    zy_col_chunks(N, &R, &P);
    /* dout = dres + norm backward, into dh */
    rmsnorm_bwd_rows<float, T, float>(dh, dres, dy, out, w, rstd, N, D, st);
    CUDA_TRY_LAUNCH();
    dim3 grid((D + ZY_COL_TX - 1) / ZY_COL_TX, P), block(ZY_COL_TX, ZY_COL_TY);
    norm_col_k<1, float, T>
        <<<grid, block, 0, st>>>(ws, P, R, N, D, dy, out, rstd, dh, d_o, o, h, ob, os, rb, rs);
    CUDA_TRY_LAUNCH();
    size_t S = (size_t)P * D;
    if (zy_col_finish(dw, ws, NULL, P, D, st) != ZY_OK ||
        zy_col_finish(dob, ws + S, os, P, D, st) != ZY_OK ||
        zy_col_finish(dos, ws + 2 * S, NULL, P, D, st) != ZY_OK ||
        zy_col_finish(drb, ws + S, rs, P, D, st) != ZY_OK ||
        zy_col_finish(drs, ws + 3 * S, NULL, P, D, st) != ZY_OK)
        return ZY_ERR;
    return ZY_OK;
}

int cuda_resnorm_bwd_f32(float *d_o, float *dh, float *dw, float *dob, float *dos, float *drb,
                         float *drs, float *ws, const float *dy, const float *dres,
                         const float *out, const float *rstd, const float *w, const float *o,
                         const float *h, const float *ob, const float *os, const float *rb,
                         const float *rs, int N, int D, void *stream) {
    return resnorm_bwd<float>(d_o, dh, dw, dob, dos, drb, drs, ws, dy, dres, out, rstd, w, o, h, ob,
                              os, rb, rs, N, D, stream);
}
int cuda_resnorm_bwd_bf16(zy_bf16 *d_o, float *dh, float *dw, float *dob, float *dos, float *drb,
                          float *drs, float *ws, const zy_bf16 *dy, const float *dres,
                          const float *out, const float *rstd, const float *w, const zy_bf16 *o,
                          const float *h, const float *ob, const float *os, const float *rb,
                          const float *rs, int N, int D, void *stream) {
    return resnorm_bwd<bf16>((bf16 *)d_o, dh, dw, dob, dos, drb, drs, ws, (const bf16 *)dy, dres,
                             out, rstd, w, (const bf16 *)o, h, ob, os, rb, rs, N, D, stream);
}
