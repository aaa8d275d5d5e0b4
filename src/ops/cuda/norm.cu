/* CUDA RMSNorm forward/backward and the fused residual scaling + RMSNorm forward/backward, plus
 * the column-sum machinery shared with the embedding backward (per-chunk partials in a workspace,
 * then a fixed-order total). Same math as ops/cpu/cpu_norm.c and cpu_resscale_* in cpu_dense.c,
 * with fp32 reductions. One block per row, a row read twice (the second read hits L1/L2); rows of
 * at most one 16-byte vector a lane (the router's) one warp each, the backward in one pass. */
#include "ops/cuda/cuda_util.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/mma.h"

#include <cuda_bf16.h>
#include <string.h>

typedef __nv_bfloat16 bf16;

/* ---- column sums ---- */

size_t cuda_ops_ws_bytes(int N, int C) {
    int R, P;
    zy_col_chunks(N > 0 ? N : 0, &R, &P);
    size_t b = (size_t)4 * (size_t)(P > 0 ? P : 1) * (size_t)(C > 0 ? C : 1) * sizeof(float);
    size_t e = cuda_embed_bwd_ws_bytes(N, C); /* column partials, id sort, segment partials */
    return b > e ? b : e;
}

/* Sums the P chunk partials of NS sums per column c = blockIdx.x * ZY_COL_TX + threadIdx.x: lane
 * threadIdx.y takes the chunks p = lane (mod ZY_COL_TY) in order, in double; the lanes are then
 * added in order, so the total does not depend on timing. */
template <int NS>
__global__ void __launch_bounds__(ZY_COL_TX *ZY_COL_TY)
    col_finish_k(zy_col_outs o, const float *part, int P, int C) {
    zy_pdl_begin();
    __shared__ double red[NS][ZY_COL_TY][ZY_COL_TX];
    const int c = blockIdx.x * ZY_COL_TX + threadIdx.x;
    double t[NS];
#pragma unroll
    for (int s = 0; s < NS; s++) t[s] = 0;
    /* B chunks' loads are issued before the first add: the grid is C / 32 blocks (8 for a width
     * of 256), so each thread's P / 8 dependent adds had waited one L2 round trip each. The adds
     * stay in chunk order, so the totals keep their bits. */
    constexpr int B = 8;
    if (c < C)
        for (int p0 = threadIdx.y; p0 < P; p0 += B * ZY_COL_TY) {
            float v[B][NS];
#pragma unroll
            for (int b = 0; b < B; b++) {
                const int p = p0 + b * ZY_COL_TY;
                if (p >= P) break;
#pragma unroll
                for (int s = 0; s < NS; s++) v[b][s] = part[((size_t)s * P + p) * C + c];
            }
#pragma unroll
            for (int b = 0; b < B; b++) {
                if (p0 + b * ZY_COL_TY >= P) break;
#pragma unroll
                for (int s = 0; s < NS; s++) t[s] += v[b][s];
            }
        }
#pragma unroll
    for (int s = 0; s < NS; s++) red[s][threadIdx.y][threadIdx.x] = t[s];
    __syncthreads();
    if (threadIdx.y != 0 || c >= C) return;
#pragma unroll
    for (int s = 0; s < NS; s++) {
        double v = 0;
        for (int y = 0; y < ZY_COL_TY; y++) v += red[s][y][threadIdx.x];
        t[s] = v;
    }
#pragma unroll
    for (int j = 0; j < 5; j++) {
        if (j >= o.n) break;
        double v = t[0]; /* t[o.src[j]] by selection: no local-memory copy of t */
#pragma unroll
        for (int s = 1; s < NS; s++)
            if (o.src[j] == s) v = t[s];
        if (o.mul[j]) v *= o.mul[j][c];
        o.dst[j][c] = (float)((double)o.dst[j][c] + v);
    }
}

int zy_col_finish_multi(const zy_col_outs *o, int ns, const float *part, int P, int C,
                        cudaStream_t st) {
    if (P <= 0 || C <= 0 || o->n == 0) return ZY_OK;
    dim3 grid((C + ZY_COL_TX - 1) / ZY_COL_TX), block(ZY_COL_TX, ZY_COL_TY);
    switch (ns) {
    case 1:
        zy_launch(col_finish_k<1>, grid, block, 0, st, *o, part, P, C);
        break;
    case 2:
        zy_launch(col_finish_k<2>, grid, block, 0, st, *o, part, P, C);
        break;
    case 3:
        zy_launch(col_finish_k<3>, grid, block, 0, st, *o, part, P, C);
        break;
    case 4:
        zy_launch(col_finish_k<4>, grid, block, 0, st, *o, part, P, C);
        break;
    default:
        return zy_fail("zy_col_finish_multi: %d sums (1..4)", ns);
    }
    ZY_CUDA_TRY_LAUNCH();
    return ZY_OK;
}

int zy_col_finish(float *dst, const float *part, const float *mul, int P, int C,
                  cudaStream_t stream) {
    zy_col_outs o;
    memset(&o, 0, sizeof o);
    o.dst[0] = dst, o.mul[0] = mul, o.src[0] = 0, o.n = 1;
    return zy_col_finish_multi(&o, 1, part, P, C, stream);
}

/* ---- RMSNorm forward ---- */

/* One block per row: sum of squares, rstd, then y = w * (x * rstd). */
template <typename TX, typename TY, int W>
__global__ void __launch_bounds__(ZY_ROW_THREADS)
    rmsnorm_fwd_k(TY *y, float *rstd, const TX *x, const float *w, int C, float eps) {
    zy_pdl_begin();
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

/* ---- rows of at most one vector a lane (the router's 256 columns) ----
 * One warp per row, NORM_WARP_ROWS rows a block: a block per row would be 32 threads doing one
 * load each (16,384 blocks of one warp at bench-small's router: 4x the time of the bytes). A
 * lane holds its W elements in registers. The sums are formed as the block kernels form them
 * for such a row (each thread's W products in order, then the warp's xor-shuffle sum, which the
 * block sum of a single warp passes on unchanged). */
#define NORM_WARP_ROWS (ZY_ROW_THREADS / 32)

static unsigned norm_warp_blocks(int N) {
    return (unsigned)((N + NORM_WARP_ROWS - 1) / NORM_WARP_ROWS);
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* The end of a warp's row norm: rstd from the lanes' sums of squares ss, then y = w * (v * rstd)
 * for this lane's W columns from c (none past C). */
template <typename TY, int W>
__device__ __forceinline__ void warp_norm_out(TY *y, float *rstd, const float *w,
                                              const float (&v)[W], float ss, int row, int c, int C,
                                              float eps) {
    ss = warp_sum(ss);
    const float r = 1.0f / sqrtf(ss / (float)C + eps);
    if ((threadIdx.x & 31) == 0) rstd[row] = r;
    if (c >= C) return;
    float wv[W], o[W];
    zy_load<float, W>(w + c, wv);
#pragma unroll
    for (int k = 0; k < W; k++) o[k] = wv[k] * (v[k] * r);
    zy_store<TY, W>(y + (size_t)row * C + c, o);
}

/* One row of the RMSNorm backward in a warp, the row kernels' expressions: the column sums
 * s += dy x rstd, then dx = rstd dy w - (rstd^3 dot / C) x with dot the warp's sum of dy w x.
 * Lanes past the row hold zeros. */
template <int W>
__device__ __forceinline__ void warp_norm_bwd_row(const float (&gy)[W], const float (&x)[W],
                                                  const float (&wv)[W], float r, int C,
                                                  float (&s)[W], float (&d)[W]) {
    float dot = 0.0f;
#pragma unroll
    for (int k = 0; k < W; k++) {
        dot += gy[k] * wv[k] * x[k];
        s[k] += gy[k] * x[k] * r;
    }
    dot = warp_sum(dot);
    const float kk = r * r * r * dot / (float)C;
#pragma unroll
    for (int k = 0; k < W; k++) d[k] = r * gy[k] * wv[k] - kk * x[k];
}

/* out[0..C) = the block's warps' column sums s (lane l's W columns from l W), added in warp order
 * as norm_col_k adds its row lanes, through red [NORM_WARP_ROWS][32 W]. Every thread calls it;
 * a caller that reuses red calls __syncthreads first. */
template <int W>
__device__ __forceinline__ void warp_col_sums(float (*red)[32 * W], const float (&s)[W], float *out,
                                              int C) {
    const int warp = threadIdx.x >> 5, c = (threadIdx.x & 31) * W;
#pragma unroll
    for (int k = 0; k < W; k++) red[warp][c + k] = s[k]; /* columns past C: zeros, unread */
    __syncthreads();
    for (int col = threadIdx.x; col < C; col += ZY_ROW_THREADS) {
        float t = 0.0f;
#pragma unroll
        for (int j = 0; j < NORM_WARP_ROWS; j++) t += red[j][col];
        out[col] = t;
    }
}

/* y = w * (x * rstd) for rows of C <= 32 W columns, lane l owning columns [l W, l W + W). */
template <typename TX, typename TY, int W>
__global__ void __launch_bounds__(ZY_ROW_THREADS)
    rmsnorm_fwd_warp_k(TY *y, float *rstd, const TX *x, const float *w, int N, int C, float eps) {
    zy_pdl_begin();
    const int lane = threadIdx.x & 31, c = lane * W;
    const int row = blockIdx.x * NORM_WARP_ROWS + (threadIdx.x >> 5);
    if (row >= N) return; /* a whole warp: the shuffles below see only live lanes' warps */
    float v[W], ss = 0;
    if (c < C) {
        zy_load<TX, W>(x + (size_t)row * C + c, v);
#pragma unroll
        for (int k = 0; k < W; k++) ss += v[k] * v[k];
    }
    warp_norm_out<TY, W>(y, rstd, w, v, ss, row, c, C, eps);
}

template <typename TX, typename TY>
static int rmsnorm_fwd(TY *y, float *rstd, const TX *x, const float *w, int N, int C, float eps,
                       void *stream) {
    if (N < 0 || C <= 0) return zy_fail("cuda rmsnorm_fwd: impossible shape N=%d C=%d", N, C);
    if (N == 0) return ZY_OK;
    cudaStream_t st = (cudaStream_t)stream;
    constexpr int W = 16 / (sizeof(TX) < sizeof(TY) ? sizeof(TX) : sizeof(TY));
    const int vec = C % W == 0 && zy_aligned(y, 16) && zy_aligned(x, 16) && zy_aligned(w, 16);
    if (vec && C <= 32 * W)
        zy_launch(rmsnorm_fwd_warp_k<TX, TY, W>, norm_warp_blocks(N), ZY_ROW_THREADS, 0, st, y,
                  rstd, x, w, N, C, eps);
    else if (vec)
        zy_launch(rmsnorm_fwd_k<TX, TY, W>, N, zy_row_threads(C / W), 0, st, y, rstd, x, w, C, eps);
    else
        zy_launch(rmsnorm_fwd_k<TX, TY, 1>, N, zy_row_threads(C), 0, st, y, rstd, x, w, C, eps);
    ZY_CUDA_TRY_LAUNCH();
    return ZY_OK;
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

/* The residual-scaling sum out = (o + ob) * os + (h + rb) * rs, with its one rounding choice fixed
 * (an explicit FMA) so that the backward's recomputation gives the forward's bits. */
static __device__ __forceinline__ float resnorm_mix(float o, float ob, float os, float h, float rb,
                                                    float rs) {
    return __fmaf_rn(o + ob, os, (h + rb) * rs);
}

/* One block per row: out = resnorm_mix (stored, fp32), sum of squares of out, then
 * y = w * (out * rstd) (each thread re-reads the elements it wrote). */
template <typename T, int W>
__global__ void __launch_bounds__(ZY_ROW_THREADS)
    resnorm_fwd_k(float *out, T *y, float *rstd, const T *o, const float *h, const float *ob,
                  const float *os, const float *rb, const float *rs, const float *w, int D,
                  float eps) {
    zy_pdl_begin();
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
            v[k] = resnorm_mix(ov[k], obv[k], osv[k], hv[k], rbv[k], rsv[k]);
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
        zy_launch(resnorm_fwd_k<T, W>, N, zy_row_threads(D / W), 0, st, out, y, rstd, o, h, ob, os,
                  rb, rs, w, D, eps);
    else
        zy_launch(resnorm_fwd_k<T, 1>, N, zy_row_threads(D), 0, st, out, y, rstd, o, h, ob, os, rb,
                  rs, w, D, eps);
    ZY_CUDA_TRY_LAUNCH();
    return ZY_OK;
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
    zy_pdl_begin();
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
        zy_launch(rmsnorm_bwd_rows_k<TX, TY, TD, W>, N, zy_row_threads(C / W), 0, st, dx, add, dy,
                  x, w, rstd, C);
    else
        zy_launch(rmsnorm_bwd_rows_k<TX, TY, TD, 1>, N, zy_row_threads(C), 0, st, dx, add, dy, x, w,
                  rstd, C);
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
    zy_pdl_begin();
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

/* ---- backward of rows of at most one vector a lane, in one pass ----
 * dx and the chunk partials of dw together (the column kernel and the row kernel read dy and x
 * once each otherwise). Block p takes chunk p's rows [p R, p R + R), warp j the rows p R + j,
 * + NORM_WARP_ROWS, ... in order: the rows norm_col_k's row lane j takes, summed the same way,
 * then the warps' sums added in warp order as its lanes' are (and dx as the row kernel forms it).
 * NORM_BWD_RR rows' loads are issued together. dx may alias dy and add: a lane reads its
 * elements of a row before it writes them, and no other lane touches them. */
#define NORM_BWD_RR 2
static_assert(NORM_WARP_ROWS == ZY_COL_TY, "the warps play norm_col_k's row lanes");

template <typename TX, typename TY, typename TD, int W>
__global__ void __launch_bounds__(ZY_ROW_THREADS)
    rmsnorm_bwd_warp_k(float *part, int R, int N, int C, TD *dx, const TD *add, const TY *dy,
                       const TX *x, const float *w, const float *rstd) {
    zy_pdl_begin();
    __shared__ float red[NORM_WARP_ROWS][32 * W];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, c = lane * W, p = blockIdx.x;
    const int n0 = p * R, n1 = min(N, n0 + R);
    const bool live = c < C;
    float wv[W], s[W];
#pragma unroll
    for (int k = 0; k < W; k++) wv[k] = s[k] = 0.0f;
    if (live) zy_load<float, W>(w + c, wv);
    for (int nb = n0 + warp; nb < n1; nb += NORM_BWD_RR * NORM_WARP_ROWS) {
        float g[NORM_BWD_RR][W], xv[NORM_BWD_RR][W], a[NORM_BWD_RR][W], r[NORM_BWD_RR];
#pragma unroll
        for (int u = 0; u < NORM_BWD_RR; u++) {
            const int n = nb + u * NORM_WARP_ROWS;
            r[u] = 0.0f;
#pragma unroll
            for (int k = 0; k < W; k++) g[u][k] = xv[u][k] = a[u][k] = 0.0f;
            if (n >= n1) continue;
            r[u] = rstd[n];
            if (!live) continue;
            const size_t i = (size_t)n * C + c;
            zy_load<TY, W>(dy + i, g[u]);
            zy_load<TX, W>(x + i, xv[u]);
            if (add) zy_load<TD, W>(add + i, a[u]);
        }
#pragma unroll
        for (int u = 0; u < NORM_BWD_RR; u++) {
            const int n = nb + u * NORM_WARP_ROWS;
            if (n >= n1) break; /* the same for the whole warp */
            float d[W];
            warp_norm_bwd_row<W>(g[u], xv[u], wv, r[u], C, s, d);
            if (!live) continue;
            if (add)
#pragma unroll
                for (int k = 0; k < W; k++) d[k] += a[u][k];
            zy_store<TD, W>(dx + (size_t)n * C + c, d);
        }
    }
    warp_col_sums<W>(red, s, part + (size_t)p * C, C);
}

/* The one-pass backward where rows fit a warp's vectors and the pointers allow 16-byte access
 * (else ZY_ERR without a launch). */
template <typename TX, typename TY, typename TD>
static int rmsnorm_bwd_warp(TD *dx, float *ws, const TY *dy, const TX *x, const float *w,
                            const float *rstd, int N, int C, int R, int P, int accumulate,
                            cudaStream_t st) {
    constexpr size_t MN = sizeof(TX) < sizeof(TY) ? sizeof(TX) : sizeof(TY);
    constexpr int W = 16 / (MN < sizeof(TD) ? MN : sizeof(TD));
    const void *ptrs[] = {dx, dy, x, w};
    int ok = C % W == 0 && C <= 32 * W;
    for (const void *q : ptrs) ok = ok && zy_aligned(q, 16);
    if (!ok) return ZY_ERR;
    zy_launch(rmsnorm_bwd_warp_k<TX, TY, TD, W>, P, ZY_ROW_THREADS, 0, st, ws, R, N, C, dx,
              accumulate ? (const TD *)dx : (const TD *)nullptr, dy, x, w, rstd);
    return ZY_OK;
}

/* ---- the router's input block: z += bias (+ r_prev g), u0 = RMSNorm(z) w, and its backward ----
 * What ops_add_bias, ops_eda_fwd and ops_rmsnorm_fwd do one after another (and, backward,
 * ops_rmsnorm_bwd, ops_add_act, ops_eda_bwd and ops_bias_bwd), for rows of at most one 16-byte
 * vector a lane, one warp a row: each intermediate rounded to bf16 where those ops store it, and
 * the column sums in their order (norm_col_k's row lanes are the warps), so the same bits in one
 * pass over the rows instead of three (four backward). */
/* v rounded to bf16 and back (round to nearest even, as zy_store does). */
template <int W> __device__ __forceinline__ void bf16_round(float (&v)[W]) {
#pragma unroll
    for (int k = 0; k < W; k++) v[k] = __bfloat162float(__float2bfloat16_rn(v[k]));
}

__global__ void __launch_bounds__(ZY_ROW_THREADS)
    router_norm_fwd_k(bf16 *z, bf16 *u0, float *rstd, const float *bias, const bf16 *rp,
                      const float *g, const float *w, int N, int C, float eps) {
    zy_pdl_begin();
    constexpr int W = 8;
    const int lane = threadIdx.x & 31, c = lane * W;
    const int row = blockIdx.x * NORM_WARP_ROWS + (threadIdx.x >> 5);
    if (row >= N) return; /* a whole warp */
    const size_t i = (size_t)row * C + c;
    float v[W], ss = 0.0f;
    if (c < C) {
        float b[W];
        zy_load<bf16, W>(z + i, v);
        zy_load<float, W>(bias + c, b);
#pragma unroll
        for (int k = 0; k < W; k++) v[k] += b[k];
        bf16_round<W>(v); /* what add_bias stores */
        if (rp) {
            float rv[W], gv[W];
            zy_load<bf16, W>(rp + i, rv);
            zy_load<float, W>(g + c, gv);
#pragma unroll
            for (int k = 0; k < W; k++) v[k] += rv[k] * gv[k];
            bf16_round<W>(v);
        }
        zy_store<bf16, W>(z + i, v);
#pragma unroll
        for (int k = 0; k < W; k++) ss += v[k] * v[k];
    }
    warp_norm_out<bf16, W>(u0, rstd, w, v, ss, row, c, C, eps);
}

/* Backward: dz = the norm's backward of du0 (+ carry when carry_in); then carry = dz g and
 * part sum 1 += dz r_prev when rp; part sums 0 (dw: du0 z rstd) and 2 (dbias: dz). */
__global__ void __launch_bounds__(ZY_ROW_THREADS)
    router_norm_bwd_k(float *part, int P, int R, int N, int C, bf16 *dz, bf16 *carry, int carry_in,
                      const bf16 *du0, const bf16 *z, const bf16 *rp, const float *w,
                      const float *rstd, const float *g) {
    zy_pdl_begin();
    constexpr int W = 8;
    __shared__ float red[NORM_WARP_ROWS][32 * W];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, c = lane * W, p = blockIdx.x;
    const int n0 = p * R, n1 = min(N, n0 + R);
    const bool live = c < C;
    float wv[W], gv[W], s0[W], s1[W], s2[W];
#pragma unroll
    for (int k = 0; k < W; k++) wv[k] = gv[k] = s0[k] = s1[k] = s2[k] = 0.0f;
    if (live) {
        zy_load<float, W>(w + c, wv);
        if (rp) zy_load<float, W>(g + c, gv);
    }
    for (int n = n0 + warp; n < n1; n += NORM_WARP_ROWS) {
        const size_t i = (size_t)n * C + c;
        const float r = rstd[n];
        float gy[W], x[W];
#pragma unroll
        for (int k = 0; k < W; k++) gy[k] = x[k] = 0.0f;
        if (live) {
            zy_load<bf16, W>(du0 + i, gy);
            zy_load<bf16, W>(z + i, x);
        }
        float d[W];
        warp_norm_bwd_row<W>(gy, x, wv, r, C, s0, d);
        if (!live) continue;
        bf16_round<W>(d); /* each step's bf16 value, as the separate ops store it */
        if (carry_in) {
            float a[W];
            zy_load<bf16, W>(carry + i, a);
#pragma unroll
            for (int k = 0; k < W; k++) d[k] += a[k];
            bf16_round<W>(d);
        }
        zy_store<bf16, W>(dz + i, d);
        if (rp) {
            float b[W], o[W];
            zy_load<bf16, W>(rp + i, b);
            zy_eda_bwd<W>(d, b, gv, o, s1);
            zy_store<bf16, W>(carry + i, o);
        }
#pragma unroll
        for (int k = 0; k < W; k++) s2[k] += d[k];
    }
    warp_col_sums<W>(red, s0, part + (size_t)p * C, C);
    __syncthreads(); /* red is read again below */
    warp_col_sums<W>(red, s1, part + ((size_t)P + p) * C, C);
    __syncthreads();
    warp_col_sums<W>(red, s2, part + ((size_t)2 * P + p) * C, C);
}

/* 1 when the router's rows fit the kernels above: C <= 256 bf16, whole 16-byte vectors. */
int cuda_router_norm_fits(int C, const void *const *ptrs, int n) {
    if (C <= 0 || C % 8 != 0 || C > 32 * 8) return 0;
    for (int k = 0; k < n; k++)
        if (ptrs[k] && !zy_aligned(ptrs[k], 16)) return 0;
    return 1;
}

int cuda_router_norm_fwd_bf16(zy_bf16 *z, zy_bf16 *u0, float *rstd, const float *bias,
                              const zy_bf16 *r_prev, const float *g, const float *w, int N, int C,
                              float eps, void *stream) {
    const void *ptrs[] = {z, u0, bias, r_prev, r_prev ? g : NULL, w};
    if (N < 0 || !cuda_router_norm_fits(C, ptrs, 6)) return ZY_ERR;
    if (N == 0) return ZY_OK;
    zy_launch(router_norm_fwd_k, norm_warp_blocks(N), ZY_ROW_THREADS, 0, (cudaStream_t)stream,
              (bf16 *)z, (bf16 *)u0, rstd, bias, (const bf16 *)r_prev, g, w, N, C, eps);
    ZY_CUDA_TRY_LAUNCH();
    return ZY_OK;
}

int cuda_router_norm_bwd_bf16(zy_bf16 *dz, float *dw, float *dg, float *dbias, float *ws,
                              zy_bf16 *carry, int carry_in, const zy_bf16 *du0, const zy_bf16 *z,
                              const zy_bf16 *r_prev, const float *w, const float *rstd,
                              const float *g, int N, int C, void *stream) {
    const void *ptrs[] = {dz, carry, du0, z, r_prev, w, r_prev ? g : NULL, ws};
    if (N < 0 || !cuda_router_norm_fits(C, ptrs, 8) || ((carry_in || r_prev) && !carry))
        return ZY_ERR;
    if (N == 0) return ZY_OK;
    cudaStream_t st = (cudaStream_t)stream;
    int R, P;
    zy_col_chunks(N, &R, &P);
    zy_launch(router_norm_bwd_k, P, ZY_ROW_THREADS, 0, st, ws, P, R, N, C, (bf16 *)dz,
              (bf16 *)carry, carry_in, (const bf16 *)du0, (const bf16 *)z, (const bf16 *)r_prev, w,
              rstd, g);
    ZY_CUDA_TRY_LAUNCH();
    zy_col_outs f; /* sums: 0 du0 z rstd (dw), 1 dz r_prev (dg), 2 dz (dbias) */
    memset(&f, 0, sizeof f);
    f.dst[0] = dw, f.src[0] = 0;
    f.dst[1] = dbias, f.src[1] = 2;
    f.n = 2;
    if (r_prev) f.dst[2] = dg, f.src[2] = 1, f.n = 3;
    return zy_col_finish_multi(&f, 3, ws, P, C, st);
}

template <typename TX, typename TY, typename TD>
static int rmsnorm_bwd(TD *dx, float *dw, float *ws, const TY *dy, const TX *x, const float *w,
                       const float *rstd, int N, int C, int accumulate, void *stream) {
    if (N < 0 || C <= 0) return zy_fail("cuda rmsnorm_bwd: impossible shape N=%d C=%d", N, C);
    if (N == 0) return ZY_OK;
    cudaStream_t st = (cudaStream_t)stream;
    int R, P;
    zy_col_chunks(N, &R, &P);
    if (rmsnorm_bwd_warp<TX, TY, TD>(dx, ws, dy, x, w, rstd, N, C, R, P, accumulate, st) == ZY_OK) {
        ZY_CUDA_TRY_LAUNCH();
        return zy_col_finish(dw, ws, NULL, P, C, st);
    }
    /* dw first: dx may alias dy */
    dim3 grid((C + ZY_COL_TX - 1) / ZY_COL_TX, P), block(ZY_COL_TX, ZY_COL_TY);
    zy_launch(norm_col_k<0, TX, TY>, grid, block, 0, st, ws, P, R, N, C, dy, x, rstd, nullptr,
              nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
    ZY_CUDA_TRY_LAUNCH();
    if (zy_col_finish(dw, ws, NULL, P, C, st) != ZY_OK) return ZY_ERR;
    rmsnorm_bwd_rows<TX, TY, TD>(dx, accumulate ? dx : NULL, dy, x, w, rstd, N, C, st);
    ZY_CUDA_TRY_LAUNCH();
    return ZY_OK;
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

/* ---- residual scaling + RMSNorm backward ----
 * One pass when dy / o are bf16, D % 8 == 0 and D <= 2048; else the row and column kernels above.
 * The one-pass kernel:
 * Block p = blockIdx.x (256 threads) takes rows [p*R, p*R + R) one after another; thread t owns the
 * column groups c = 4 (t + 256 j), j < J. A row's inputs (dy, o, h and dres: 12 bytes a column)
 * arrive by cp.async into a ring of RESNORM_STAGES row slots in shared memory, issued
 * RESNORM_STAGES - 1 rows ahead, so an SM keeps two rows per block in flight without holding them
 * in registers (the kernel is bound by memory latency: at 2 blocks an SM, one row ahead in
 * registers reached 66-75% of the DRAM bandwidth, ncu on an H100). Per row: out recomputed from
 * o and h (resnorm_mix: the forward's bits, and 4 bytes per element less to read than loading it),
 * the norm's dot sum dy*w*out (block sum in a fixed order: the partial slots alternate by row
 * parity), then dout = dres + rstd*dy*w - k*out, d_o = dout*os, dh = dout*rs, and the column sums
 * s0 = dy*out*rstd, s1 = dout, s2 = dout*(o+ob), s3 = dout*(h+rb) kept in registers until the
 * chunk ends (written to part[(s*P + p)*D + c], summed over chunks by zy_col_finish_multi). Reads
 * 12 and writes 6 bytes per element, against 36 for the norm and residual-scaling kernels one
 * after the other. d_o may alias dy and dh may alias dres: a row's inputs are in shared memory
 * before any of its outputs is written, and only this block touches the row. */
#define RESNORM_NT     256
#define RESNORM_STAGES 3

/* Bytes of one row slot: dy and o (bf16), then h and dres (fp32). */
static __host__ __device__ size_t resnorm_slot_bytes(int D) {
    return (size_t)D * 12;
}

/* Starts copying row `row`'s inputs into slot `slot` (16-byte pieces spread over the block). */
__device__ __forceinline__ void resnorm_issue_row(uint8_t *slot, size_t row, int D, const bf16 *dy,
                                                  const float *dres, const bf16 *o,
                                                  const float *h) {
    const int n8 = D / 8, n4 = D / 4; /* 16-byte pieces of a bf16 row, of an fp32 row */
    for (int u = threadIdx.x; u < 2 * n8 + (dres ? 2 : 1) * n4; u += RESNORM_NT) {
        const void *src;
        uint32_t dst;
        if (u < n8)
            src = dy + row * D + 8 * u, dst = smem_u32(slot) + 16 * u;
        else if (u < 2 * n8)
            src = o + row * D + 8 * (u - n8), dst = smem_u32(slot) + 16 * u;
        else if (u < 2 * n8 + n4)
            src = h + row * D + 4 * (u - 2 * n8), dst = smem_u32(slot) + 4 * D + 16 * (u - 2 * n8);
        else
            src = dres + row * D + 4 * (u - 2 * n8 - n4),
            dst = smem_u32(slot) + 8 * D + 16 * (u - 2 * n8 - n4);
        cp_async16(dst, src, true);
    }
}

template <int J>
__global__ void __launch_bounds__(RESNORM_NT)
    resnorm_bwd_onepass_k(float *part, int P, int R, int N, int D, bf16 *d_o, float *dh,
                          const bf16 *dy, const float *dres, const float *rstd, const float *w,
                          const bf16 *o, const float *h, const float *ob, const float *os,
                          const float *rb, const float *rs) {
    zy_pdl_begin();
    extern __shared__ __align__(16) uint8_t rn_ring[]; /* RESNORM_STAGES slots */
    __shared__ float red[2][RESNORM_NT / 32];
    const int p = blockIdx.x, n0 = p * R, n1 = n0 + R < N ? n0 + R : N;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const size_t slot_b = resnorm_slot_bytes(D);
    /* rows n0 .. n0 + STAGES - 2 first, one commit group each (empty past n1) */
#pragma unroll
    for (int s = 0; s < RESNORM_STAGES - 1; s++) {
        if (n0 + s < n1)
            resnorm_issue_row(rn_ring + s * slot_b, (size_t)(n0 + s), D, dy, dres, o, h);
        cp_async_commit();
    }
    float wv[J][4], osv[J][4], rsv[J][4], obv[J][4], rbv[J][4], acc[J][4][4];
#pragma unroll
    for (int j = 0; j < J; j++) {
        const int c = 4 * ((int)threadIdx.x + RESNORM_NT * j);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            wv[j][k] = osv[j][k] = rsv[j][k] = obv[j][k] = rbv[j][k] = 0.0f;
#pragma unroll
            for (int s = 0; s < 4; s++) acc[j][s][k] = 0.0f;
        }
        if (c >= D) continue;
        zy_load<float, 4>(w + c, wv[j]);
        zy_load<float, 4>(os + c, osv[j]);
        zy_load<float, 4>(rs + c, rsv[j]);
        zy_load<float, 4>(ob + c, obv[j]);
        zy_load<float, 4>(rb + c, rbv[j]);
    }
    for (int n = n0; n < n1; n++) {
        /* the slot of row n + STAGES - 1 was last read before the previous row's dot barrier */
        const int ahead = n + RESNORM_STAGES - 1;
        if (ahead < n1)
            resnorm_issue_row(rn_ring + (size_t)((ahead - n0) % RESNORM_STAGES) * slot_b,
                              (size_t)ahead, D, dy, dres, o, h);
        cp_async_commit();
        cp_async_wait<RESNORM_STAGES - 1>(); /* this thread's pieces of row n have landed */
        __syncthreads();                     /* and every thread's */
        const uint8_t *slot = rn_ring + (size_t)((n - n0) % RESNORM_STAGES) * slot_b;
        const float r = rstd[n];
        float dyv[J][4], ov[J][4], hv[J][4], resv[J][4], outv[J][4];
        float dot = 0.0f;
#pragma unroll
        for (int j = 0; j < J; j++) {
            const int c = 4 * ((int)threadIdx.x + RESNORM_NT * j);
            if (c >= D) { /* no columns here: zeros add nothing to the row's dot */
#pragma unroll
                for (int k = 0; k < 4; k++) dyv[j][k] = ov[j][k] = hv[j][k] = resv[j][k] = 0.0f;
            } else {
                zy_load_bf16x4((const bf16 *)slot + c, dyv[j]);
                zy_load_bf16x4((const bf16 *)slot + D + c, ov[j]);
                zy_load<float, 4>((const float *)(slot + 4 * D) + c, hv[j]);
                if (dres)
                    zy_load<float, 4>((const float *)(slot + 8 * D) + c, resv[j]);
                else
#pragma unroll
                    for (int k = 0; k < 4; k++) resv[j][k] = 0.0f;
            }
#pragma unroll
            for (int k = 0; k < 4; k++) {
                outv[j][k] = resnorm_mix(ov[j][k], obv[j][k], osv[j][k], hv[j][k], rbv[j][k],
                                         rsv[j][k]); /* zero past D */
                dot += dyv[j][k] * wv[j][k] * outv[j][k];
            }
        }
        for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        if (lane == 0) red[n & 1][warp] = dot;
        __syncthreads();
        dot = 0.0f;
#pragma unroll
        for (int k = 0; k < RESNORM_NT / 32; k++) dot += red[n & 1][k];
        const float kk = r * r * r * dot / (float)D;
#pragma unroll
        for (int j = 0; j < J; j++) {
            const int c = 4 * ((int)threadIdx.x + RESNORM_NT * j);
            if (c >= D) break;
            float dov[4], dhv[4];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const float g = resv[j][k] + (r * dyv[j][k] * wv[j][k] - kk * outv[j][k]);
                acc[j][0][k] += dyv[j][k] * outv[j][k] * r;
                acc[j][1][k] += g;
                acc[j][2][k] += g * (ov[j][k] + obv[j][k]);
                acc[j][3][k] += g * (hv[j][k] + rbv[j][k]);
                dov[k] = g * osv[j][k];
                dhv[k] = g * rsv[j][k];
            }
            const size_t i = (size_t)n * D + c;
            zy_store_bf16x4(d_o + i, dov);
            zy_store<float, 4>(dh + i, dhv);
        }
    }
    cp_async_wait<0>(); /* only empty groups can be left */
#pragma unroll
    for (int j = 0; j < J; j++) {
        const int c = 4 * ((int)threadIdx.x + RESNORM_NT * j);
        if (c >= D) break;
#pragma unroll
        for (int s = 0; s < 4; s++)
            zy_store<float, 4>(part + ((size_t)s * P + p) * D + c, acc[j][s]);
    }
}

/* The one-pass backward when the shape and alignment allow it (else ZY_ERR without a launch). */
static int resnorm_bwd_onepass(bf16 *d_o, float *dh, float *ws, int P, int R, const bf16 *dy,
                               const float *dres, const float *rstd, const float *w, const bf16 *o,
                               const float *h, const float *ob, const float *os, const float *rb,
                               const float *rs, int N, int D, cudaStream_t st) {
    const void *a16[] = {dh, w, os, rs, ob, rb, dres ? dres : dh, ws, d_o, dy, o};
    if (D % 8 != 0 || D > 4 * RESNORM_NT * 2) return ZY_ERR; /* wider rows would spill */
    for (const void *q : a16)
        if (!zy_aligned(q, 16)) return ZY_ERR;
    const int J = (D / 4 + RESNORM_NT - 1) / RESNORM_NT;
    const size_t smem = RESNORM_STAGES * resnorm_slot_bytes(D);
    const auto kern = J == 1 ? resnorm_bwd_onepass_k<1> : resnorm_bwd_onepass_k<2>;
    /* past the default 48 KB (D > 1365) the kernel asks for more (per device, so every time) */
    if (smem > 48 * 1024 &&
        cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)smem) != cudaSuccess) {
        (void)cudaGetLastError(); /* the two-pass fallback's launch check must not see it */
        return ZY_ERR;
    }
    zy_launch(kern, P, RESNORM_NT, smem, st, ws, P, R, N, D, d_o, dh, dy, dres, rstd, w, o, h, ob,
              os, rb, rs);
    return ZY_OK;
}

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
    int onepass = ZY_ERR;
    if constexpr (sizeof(T) == 2)
        onepass = resnorm_bwd_onepass(d_o, dh, ws, P, R, dy, dres, rstd, w, o, h, ob, os, rb, rs, N,
                                      D, st);
    if (onepass != ZY_OK) { /* two passes: dout = dres + norm backward into dh, then the sums */
        rmsnorm_bwd_rows<float, T, float>(dh, dres, dy, out, w, rstd, N, D, st);
        ZY_CUDA_TRY_LAUNCH();
        dim3 grid((D + ZY_COL_TX - 1) / ZY_COL_TX, P), block(ZY_COL_TX, ZY_COL_TY);
        zy_launch(norm_col_k<1, float, T>, grid, block, 0, st, ws, P, R, N, D, dy, out, rstd, dh,
                  d_o, o, h, ob, os, rb, rs);
    }
    ZY_CUDA_TRY_LAUNCH();
    zy_col_outs f; /* sums: 0 dy*out*rstd, 1 dout, 2 dout*(o+ob), 3 dout*(h+rb) */
    memset(&f, 0, sizeof f);
    f.dst[0] = dw, f.src[0] = 0;
    f.dst[1] = dob, f.src[1] = 1, f.mul[1] = os; /* sum dout*os = os * sum dout */
    f.dst[2] = dos, f.src[2] = 2;
    f.dst[3] = drb, f.src[3] = 1, f.mul[3] = rs;
    f.dst[4] = drs, f.src[4] = 3;
    f.n = 5;
    return zy_col_finish_multi(&f, 4, ws, P, D, st);
}

int cuda_resnorm_bwd_bf16(zy_bf16 *d_o, float *dh, float *dw, float *dob, float *dos, float *drb,
                          float *drs, float *ws, const zy_bf16 *dy, const float *dres,
                          const float *out, const float *rstd, const float *w, const zy_bf16 *o,
                          const float *h, const float *ob, const float *os, const float *rb,
                          const float *rs, int N, int D, void *stream) {
    return resnorm_bwd<bf16>((bf16 *)d_o, dh, dw, dob, dos, drb, drs, ws, (const bf16 *)dy, dres,
                             out, rstd, w, (const bf16 *)o, h, ob, os, rb, rs, N, D, stream);
}
