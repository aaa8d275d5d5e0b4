/* Dense ops of ops.h on CUDA: GEMMs through cuBLASLt (gemm.cu), y += x, bias and its gradient,
 * embedding, RMSNorm, residual scaling, GELU, SwiGLU and cross-entropy (attention:
 * ops_attention.cu). The add, bias and residual-scaling kernels live here; the rest wraps norm.cu,
 * elementwise.cu and xent.cu. Everything runs asynchronously on the context's stream, except the
 * cross-entropy, which returns the loss sum to the host (ops.h) and so waits for the stream.
 *
 * Row kernels use "tiles": blocks of ZY_COL_TX x ZY_COL_TY threads, a thread owning W consecutive
 * columns (loaded with one vector access) of the rows its lane visits, so per-column parameters are
 * read once per thread. Parameter gradients are column sums over rows: every block sums one chunk
 * of rows (zy_col_chunks) into per-chunk partials in the workspace, and a finishing kernel adds the
 * chunks in a fixed order (in double), so the result is deterministic and needs no atomics. */
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/cuda_state.h"
#include "ops/cuda/kernels.h"

#include <cuda_bf16.h>
#include <stddef.h>
#include <string.h>

typedef __nv_bfloat16 bf16;

#define TILE_THREADS   (ZY_COL_TX * ZY_COL_TY)
#define TILE_MAXBLOCKS 4096 /* blocks of a tile grid without a chunk structure (rows loop) */

/* ---- vector loads of W elements: 16 bytes for fp32 x 4 and bf16 x 8, 8 bytes for bf16 x 4 ---- */

template <typename T, int W> __device__ __forceinline__ void ld(const T *p, float *out) {
    if constexpr (sizeof(T) == 2 && W == 4) {
        uint2 u = *reinterpret_cast<const uint2 *>(p);
        const T *e = reinterpret_cast<const T *>(&u);
#pragma unroll
        for (int k = 0; k < 4; k++) out[k] = zy_to_f(e[k]);
    } else {
        zy_load<T, W>(p, out);
    }
}

template <typename T, int W> __device__ __forceinline__ void st(T *p, const float *v) {
    if constexpr (sizeof(T) == 2 && W == 4) {
        uint2 u;
        T *e = reinterpret_cast<T *>(&u);
#pragma unroll
        for (int k = 0; k < 4; k++) e[k] = zy_from_f<T>(v[k]);
        *reinterpret_cast<uint2 *>(p) = u;
    } else {
        zy_store<T, W>(p, v);
    }
}

/* ---- tiles and deterministic column sums ---- */

/* Grid of a tile kernel over N rows of C columns, W columns per thread, no chunking. */
static dim3 tile_grid(int N, int C, int W) {
    int units = (C + W - 1) / W;
    int gx = (units + ZY_COL_TX - 1) / ZY_COL_TX;
    int gy = (N + ZY_COL_TY - 1) / ZY_COL_TY, cap = TILE_MAXBLOCKS / gx;
    if (cap < 1) cap = 1;
    if (gy > cap) gy = cap;
    if (gy > 65535) gy = 65535;
    return dim3((unsigned)gx, (unsigned)(gy > 0 ? gy : 1));
}

/* Adds acc[s][0..W) over the block's ZY_COL_TY row lanes (in lane order) and writes the sums of
 * chunk p to part[(s*P + p)*C + col] for the block's columns. Every thread of the block calls it;
 * threads past the last column pass zeros. The lanes' values meet in shared memory, one thread's
 * W values contiguous, so a thread stores them with W/4 16-byte writes and thread t of the block
 * then sums column t of the block's ZY_COL_TX*W columns. */
template <int NS, int W>
__device__ __forceinline__ void col_partials(float *part, int P, int p, int C,
                                             const float (&acc)[NS][W]) {
    __shared__ __align__(16) float red[ZY_COL_TY][ZY_COL_TX * W];
    const int t = threadIdx.y * ZY_COL_TX + threadIdx.x;
    const int col = blockIdx.x * ZY_COL_TX * W + t;
#pragma unroll
    for (int s = 0; s < NS; s++) {
        if (s > 0) __syncthreads(); /* the previous sum's reads are done */
#pragma unroll
        for (int k = 0; k < W; k++) red[threadIdx.y][threadIdx.x * W + k] = acc[s][k];
        __syncthreads();
        if (t < ZY_COL_TX * W && col < C) {
            float v = 0;
#pragma unroll
            for (int y = 0; y < ZY_COL_TY; y++) v += red[y][t];
            part[((size_t)s * P + p) * C + col] = v;
        }
    }
}

/* ---- dense algebra ---- */

/* C = alpha op(A) op(B) + beta C, bf16 everywhere, fp32 accumulation (cuBLASLt plan cache). */
void cuda_ops_matmul(zy_ctx *ctx, zy_act *C, const zy_act *A, const zy_act *B, int M, int N, int K,
                     int transA, int transB, float alpha, float beta) {
    ZY_STATUS_CHECK(cuda_gemm(&cuda_st(ctx)->gemm, C, A, B, M, N, K, transA, transB, alpha, beta,
                              CUDA_GEMM_BF16, CUDA_GEMM_BF16, cuda_stream(ctx)));
}

/* The same with an fp32 C: beta = 1 accumulates parameter gradients in fp32. */
void cuda_ops_matmul_f32(zy_ctx *ctx, float *C, const zy_act *A, const zy_act *B, int M, int N,
                         int K, int transA, int transB, float alpha, float beta) {
    ZY_STATUS_CHECK(cuda_gemm(&cuda_st(ctx)->gemm, C, A, B, M, N, K, transA, transB, alpha, beta,
                              CUDA_GEMM_BF16, CUDA_GEMM_FP32, cuda_stream(ctx)));
}

/* y[units*W] += x, grid-stride. */
template <int W> __global__ void add_act_k(bf16 *y, const bf16 *x, size_t units) {
    zy_pdl_begin();
    for (size_t u = (size_t)blockIdx.x * blockDim.x + threadIdx.x; u < units;
         u += (size_t)gridDim.x * blockDim.x) {
        float a[W], b[W];
        zy_load<bf16, W>(y + u * W, a);
        zy_load<bf16, W>(x + u * W, b);
#pragma unroll
        for (int k = 0; k < W; k++) a[k] += b[k];
        zy_store<bf16, W>(y + u * W, a);
    }
}

/* y[n] += x[n]: 16-byte units over the aligned body, single elements for the < 8 left over. */
void cuda_ops_add_act(zy_ctx *ctx, zy_act *y, const zy_act *x, size_t n) {
    if (n == 0) return;
    cudaStream_t st = cuda_stream(ctx);
    bf16 *by = (bf16 *)y;
    const bf16 *bx = (const bf16 *)x;
    size_t nv = zy_aligned(y, 16) && zy_aligned(x, 16) ? n / 8 : 0, done = nv * 8;
    if (nv) {
        zy_launch(add_act_k<8>, zy_grid_blocks(nv), 256, 0, st, by, bx, nv);
        ZY_CUDA_CHECK_LAUNCH();
    }
    if (done < n) {
        zy_launch(add_act_k<1>, zy_grid_blocks(n - done), 256, 0, st, by + done, bx + done,
                  n - done);
        ZY_CUDA_CHECK_LAUNCH();
    }
}

/* Tile kernel: x[N,C] += bias[C]; with GELU also y = GELU(x) of the bf16 values x now holds
 * (add_bias then gelu_fwd_k in one pass over x). */
template <int W, int GELU>
__global__ void __launch_bounds__(TILE_THREADS)
    add_bias_k(bf16 *y, bf16 *x, const float *bias, int N, int C) {
    zy_pdl_begin();
    const int c = (blockIdx.x * ZY_COL_TX + threadIdx.x) * W;
    if (c >= C) return;
    float b[W];
    zy_load<float, W>(bias + c, b);
    for (int n = blockIdx.y * ZY_COL_TY + threadIdx.y; n < N; n += gridDim.y * ZY_COL_TY) {
        float v[W], g[W];
        bf16 *p = x + (size_t)n * C + c;
        zy_load<bf16, W>(p, v);
#pragma unroll
        for (int k = 0; k < W; k++) {
            v[k] += b[k];
            if (GELU) {
                v[k] = __bfloat162float(__float2bfloat16_rn(v[k])); /* what x will hold */
                g[k] = zy_gelu(v[k]);
            }
        }
        zy_store<bf16, W>(p, v);
        if (GELU) zy_store<bf16, W>(y + (size_t)n * C + c, g);
    }
}

/* x[N,C] += bias broadcast over rows, and with gelu y = GELU(x). */
static void add_bias_launch(zy_ctx *ctx, zy_act *y, zy_act *x, const float *bias, int N, int C,
                            int gelu) {
    ZY_CHECKF(N >= 0 && C >= 0, "%s: impossible shape N=%d C=%d", gelu ? "bias_gelu" : "add_bias",
              N, C);
    if (N == 0 || C == 0) return;
    cudaStream_t st = cuda_stream(ctx);
    dim3 block(ZY_COL_TX, ZY_COL_TY);
    bf16 *yb = (bf16 *)y, *xb = (bf16 *)x;
    if (C % 8 == 0 && zy_aligned(y, 16) && zy_aligned(x, 16) && zy_aligned(bias, 16)) {
        if (gelu)
            zy_launch(add_bias_k<8, 1>, tile_grid(N, C, 8), block, 0, st, yb, xb, bias, N, C);
        else
            zy_launch(add_bias_k<8, 0>, tile_grid(N, C, 8), block, 0, st, yb, xb, bias, N, C);
    } else {
        if (gelu)
            zy_launch(add_bias_k<1, 1>, tile_grid(N, C, 1), block, 0, st, yb, xb, bias, N, C);
        else
            zy_launch(add_bias_k<1, 0>, tile_grid(N, C, 1), block, 0, st, yb, xb, bias, N, C);
    }
    ZY_CUDA_CHECK_LAUNCH();
}

void cuda_ops_add_bias(zy_ctx *ctx, zy_act *y, const float *bias, int N, int C) {
    add_bias_launch(ctx, NULL, y, bias, N, C, 0);
}

void cuda_ops_bias_gelu_fwd(zy_ctx *ctx, zy_act *y, zy_act *x, const float *bias, int N, int C) {
    add_bias_launch(ctx, y, x, bias, N, C, 1);
}

/* Chunk partials of the column sums of dy [N,C]: block (column tile blockIdx.x, chunk blockIdx.y
 * of R rows). GELU: the sums are of dx = dy * GELU'(x), which the kernel also stores as bf16 (dx
 * may alias dy: each element is read and written by one thread); it sums the stored values, in
 * the same order, so dx and the partials are the bits of gelu_bwd followed by the plain kernel. */
template <int W, bool GELU>
__global__ void __launch_bounds__(TILE_THREADS)
    bias_col_k(float *part, int P, int R, bf16 *dx, const bf16 *dy, const bf16 *x, int N, int C) {
    zy_pdl_begin();
    const int c = (blockIdx.x * ZY_COL_TX + threadIdx.x) * W, p = blockIdx.y;
    const int n0 = p * R, n1 = n0 + R < N ? n0 + R : N;
    float acc[1][W];
#pragma unroll
    for (int k = 0; k < W; k++) acc[0][k] = 0;
    /* B rows' loads are issued before any of them is used: the grids are small (C = R = 256 is
     * one block column), so bandwidth needs several loads in flight per thread, and with GELU the
     * stores to dx (which may alias dy) would otherwise keep the compiler from hoisting them. */
    constexpr int B = 4;
    if (c < C)
        for (int n = n0 + threadIdx.y; n < n1; n += B * ZY_COL_TY) {
            float v[B][W], xv[B][GELU ? W : 1];
#pragma unroll
            for (int b = 0; b < B; b++) {
                const size_t at = (size_t)(n + b * ZY_COL_TY) * C + c;
                if (n + b * ZY_COL_TY >= n1) break;
                zy_load<bf16, W>(dy + at, v[b]);
                if constexpr (GELU) zy_load<bf16, W>(x + at, xv[b]);
            }
#pragma unroll
            for (int b = 0; b < B; b++) {
                if (n + b * ZY_COL_TY >= n1) break;
                if constexpr (GELU) {
#pragma unroll
                    for (int k = 0; k < W; k++) v[b][k] = zy_gelu_bwd(v[b][k], xv[b][k]);
                    zy_store<bf16, W>(dx + (size_t)(n + b * ZY_COL_TY) * C + c, v[b]);
#pragma unroll
                    for (int k = 0; k < W; k++) v[b][k] = zy_to_f(zy_from_f<bf16>(v[b][k]));
                }
#pragma unroll
                for (int k = 0; k < W; k++) acc[0][k] += v[b][k]; /* rows in order, as before */
            }
        }
    col_partials<1, W>(part, P, p, C, acc);
}

/* The column partials of dy [N,C] (GELU's backward first when x is given, writing dx), then
 * dbias[C] += their sums in a fixed order. */
static void bias_bwd(zy_ctx *ctx, float *dbias, bf16 *dx, const bf16 *dy, const bf16 *x, int N,
                     int C) {
    cudaStream_t st = cuda_stream(ctx);
    int R, P;
    zy_col_chunks(N, &R, &P);
    float *part = (float *)cuda_ws(ctx, (size_t)P * C * sizeof(float));
    dim3 block(ZY_COL_TX, ZY_COL_TY);
    const bool vec =
        C % 8 == 0 && zy_aligned(dy, 16) && (!x || (zy_aligned(x, 16) && zy_aligned(dx, 16)));
    dim3 grid(((vec ? C / 8 : C) + ZY_COL_TX - 1) / ZY_COL_TX, P);
    if (x && vec)
        zy_launch(bias_col_k<8, true>, grid, block, 0, st, part, P, R, dx, dy, x, N, C);
    else if (x)
        zy_launch(bias_col_k<1, true>, grid, block, 0, st, part, P, R, dx, dy, x, N, C);
    else if (vec)
        zy_launch(bias_col_k<8, false>, grid, block, 0, st, part, P, R, dx, dy, x, N, C);
    else
        zy_launch(bias_col_k<1, false>, grid, block, 0, st, part, P, R, dx, dy, x, N, C);
    ZY_CUDA_CHECK_LAUNCH();
    zy_col_outs o;
    memset(&o, 0, sizeof o);
    o.dst[0] = dbias, o.src[0] = 0, o.n = 1;
    ZY_STATUS_CHECK(zy_col_finish_multi(&o, 1, part, P, C, st));
}

/* dx = dy * GELU'(x), dbias[C] += column sums of dx (deterministic). */
void cuda_ops_gelu_bias_bwd(zy_ctx *ctx, zy_act *dx, float *dbias, const zy_act *dy,
                            const zy_act *x, int N, int C) {
    ZY_CHECKF(N >= 0 && C >= 0, "gelu_bias_bwd: impossible shape N=%d C=%d", N, C);
    if (N == 0 || C == 0) return;
    bias_bwd(ctx, dbias, (bf16 *)dx, (const bf16 *)dy, (const bf16 *)x, N, C);
}

/* dbias[C] += column sums of dy [N,C] (deterministic). */
void cuda_ops_bias_bwd(zy_ctx *ctx, float *dbias, const zy_act *dy, int N, int C) {
    ZY_CHECKF(N >= 0 && C >= 0, "bias_bwd: impossible shape N=%d C=%d", N, C);
    if (N == 0 || C == 0) return;
    bias_bwd(ctx, dbias, nullptr, (const bf16 *)dy, nullptr, N, C);
}

/* ---- embedding ---- */

/* h = (emb[ids] + bias) * scale (fp32). */
void cuda_ops_embed_fwd(zy_ctx *ctx, float *h, const float *emb, const int32_t *ids,
                        const float *bias, const float *scale, int N, int D) {
    ZY_STATUS_CHECK(cuda_embed_fwd_f32(h, emb, ids, bias, scale, N, D, cuda_stream(ctx)));
}

/* demb (fp32 atomics), dbias, dscale (deterministic) +=. */
void cuda_ops_embed_bwd(zy_ctx *ctx, float *demb, float *dbias, float *dscale, const float *dh,
                        const float *emb, const int32_t *ids, const float *bias, const float *scale,
                        int N, int D, int skip_id) {
    float *ws = NULL; /* the kernel checks the shape; N = 0 returns before using ws */
    if (N > 0 && D > 0) ws = (float *)cuda_ws(ctx, cuda_ops_ws_bytes(N, D));
    ZY_STATUS_CHECK(cuda_embed_bwd_f32(demb, dbias, dscale, ws, dh, emb, ids, bias, scale, N, D,
                                       skip_id, cuda_stream(ctx)));
}

/* ---- RMSNorm ---- */

/* y (bf16) and rstd from fp32 rows (residual stream) or bf16 rows (router state). */
void cuda_ops_rmsnorm_fwd(zy_ctx *ctx, zy_act *y, float *rstd, const void *x, zy_dtype xt,
                          const float *w, int N, int C, float eps) {
    cudaStream_t st = cuda_stream(ctx);
    if (xt == ZY_DTYPE_F32)
        ZY_STATUS_CHECK(
            cuda_rmsnorm_fwd_f32_bf16((zy_bf16 *)y, rstd, (const float *)x, w, N, C, eps, st));
    else if (xt == ZY_DTYPE_BF16)
        ZY_STATUS_CHECK(
            cuda_rmsnorm_fwd_bf16((zy_bf16 *)y, rstd, (const zy_bf16 *)x, w, N, C, eps, st));
    else
        zy_abort_at(__FILE__, __LINE__, "rmsnorm_fwd", "unknown input dtype %d", (int)xt);
}

/* dx of x's dtype (= or += with accumulate), dw += (deterministic). */
void cuda_ops_rmsnorm_bwd(zy_ctx *ctx, void *dx, float *dw, const zy_act *dy, const void *x,
                          zy_dtype xt, const float *w, const float *rstd, int N, int C,
                          int accumulate) {
    ZY_CHECKF(xt == ZY_DTYPE_F32 || xt == ZY_DTYPE_BF16, "rmsnorm_bwd: unknown input dtype %d",
              (int)xt);
    cudaStream_t st = cuda_stream(ctx);
    float *ws = NULL; /* the kernels check the shape; N = 0 returns before using ws */
    if (N > 0 && C > 0) ws = (float *)cuda_ws(ctx, cuda_ops_ws_bytes(N, C));
    if (xt == ZY_DTYPE_F32)
        ZY_STATUS_CHECK(cuda_rmsnorm_bwd_f32_bf16((float *)dx, dw, ws, (const zy_bf16 *)dy,
                                                  (const float *)x, w, rstd, N, C, accumulate, st));
    else
        ZY_STATUS_CHECK(cuda_rmsnorm_bwd_bf16((zy_bf16 *)dx, dw, ws, (const zy_bf16 *)dy,
                                              (const zy_bf16 *)x, w, rstd, N, C, accumulate, st));
}

/* ---- the router's input block (norm.cu's one-pass kernels) ---- */

int cuda_ops_router_norm_fwd_fits(int R, const zy_act *z, const zy_act *u0, const float *bias,
                                  const zy_act *r_prev, const float *g, const float *w) {
    const void *ptrs[] = {z, u0, bias, r_prev, r_prev ? g : NULL, w};
    return cuda_router_norm_fits(R, ptrs, 6);
}

int cuda_ops_router_norm_bwd_fits(int R, const zy_act *dz, const zy_act *carry, const zy_act *du0,
                                  const zy_act *z, const zy_act *r_prev, const float *w,
                                  const float *g) {
    const void *ptrs[] = {dz, carry, du0, z, r_prev, w, r_prev ? g : NULL};
    return cuda_router_norm_fits(R, ptrs, 7);
}

void cuda_ops_router_norm_fwd(zy_ctx *ctx, zy_act *z, zy_act *u0, float *rstd, const float *bias,
                              const zy_act *r_prev, const float *g, const float *w, int N, int R,
                              float eps) {
    ZY_STATUS_CHECK(cuda_router_norm_fwd_bf16((zy_bf16 *)z, (zy_bf16 *)u0, rstd, bias,
                                              (const zy_bf16 *)r_prev, g, w, N, R, eps,
                                              cuda_stream(ctx)));
}

void cuda_ops_router_norm_bwd(zy_ctx *ctx, zy_act *dz, float *dw, float *dg, float *dbias,
                              zy_act *carry, int carry_in, const zy_act *du0, const zy_act *z,
                              const zy_act *r_prev, const float *w, const float *rstd,
                              const float *g, int N, int R) {
    float *ws = NULL; /* 3 P R floats: within cuda_ops_ws_bytes's 4 */
    if (N > 0) ws = (float *)cuda_ws(ctx, cuda_ops_ws_bytes(N, R));
    ZY_STATUS_CHECK(cuda_router_norm_bwd_bf16(
        (zy_bf16 *)dz, dw, dg, dbias, ws, (zy_bf16 *)carry, carry_in, (const zy_bf16 *)du0,
        (const zy_bf16 *)z, (const zy_bf16 *)r_prev, w, rstd, g, N, R, cuda_stream(ctx)));
}

/* ---- residual scaling: out = (o + ob) * os + (h + rb) * rs ---- */

/* Tile kernel of the forward: 10 bytes per element (o bf16 in, h fp32 in, out fp32 out). */
template <int W>
__global__ void __launch_bounds__(TILE_THREADS)
    resscale_fwd_k(float *out, const bf16 *o, const float *h, const float *ob, const float *os,
                   const float *rb, const float *rs, int N, int D) {
    zy_pdl_begin();
    const int c = (blockIdx.x * ZY_COL_TX + threadIdx.x) * W;
    if (c >= D) return;
    float obv[W], osv[W], rbv[W], rsv[W];
    zy_load<float, W>(ob + c, obv);
    zy_load<float, W>(os + c, osv);
    zy_load<float, W>(rb + c, rbv);
    zy_load<float, W>(rs + c, rsv);
    for (int n = blockIdx.y * ZY_COL_TY + threadIdx.y; n < N; n += gridDim.y * ZY_COL_TY) {
        const size_t i = (size_t)n * D + c;
        float ov[W], hv[W], v[W];
        ld<bf16, W>(o + i, ov);
        zy_load<float, W>(h + i, hv);
#pragma unroll
        for (int k = 0; k < W; k++) v[k] = (ov[k] + obv[k]) * osv[k] + (hv[k] + rbv[k]) * rsv[k];
        zy_store<float, W>(out + i, v);
    }
}

/* W = 4 (16-byte fp32, 8-byte bf16 accesses) when D and every pointer allow it. */
static int resscale_vec(int D, const void *const *f32, int nf, const void *const *b16, int nb) {
    int ok = D % 4 == 0;
    for (int i = 0; i < nf; i++) ok = ok && zy_aligned(f32[i], 16);
    for (int i = 0; i < nb; i++) ok = ok && zy_aligned(b16[i], 8);
    return ok;
}

/* out [N,D] fp32 from the block output o (bf16) and the residual h (fp32). */
void cuda_ops_resscale_fwd(zy_ctx *ctx, float *out, const zy_act *o, const float *h,
                           const float *ob, const float *os, const float *rb, const float *rs,
                           int N, int D) {
    ZY_CHECKF(N >= 0 && D >= 0, "resscale_fwd: impossible shape N=%d D=%d", N, D);
    if (N == 0 || D == 0) return;
    cudaStream_t st = cuda_stream(ctx);
    const bf16 *bo = (const bf16 *)o;
    const void *f32[] = {out, h, ob, os, rb, rs}, *b16[] = {o};
    dim3 block(ZY_COL_TX, ZY_COL_TY);
    if (resscale_vec(D, f32, 6, b16, 1))
        zy_launch(resscale_fwd_k<4>, tile_grid(N, D, 4), block, 0, st, out, bo, h, ob, os, rb, rs,
                  N, D);
    else
        zy_launch(resscale_fwd_k<1>, tile_grid(N, D, 1), block, 0, st, out, bo, h, ob, os, rb, rs,
                  N, D);
    ZY_CUDA_CHECK_LAUNCH();
}

/* One pass of the backward over chunk blockIdx.y: reads dout, o, h, writes d_o = dout*os (bf16)
 * and dh = dout*rs (16 bytes per element), and sums per column s0 = dout, s1 = dout*(o+ob),
 * s2 = dout*(h+rb) into the chunk partials. dh may alias dout: a thread reads its elements of a
 * row before it writes the same elements, and no other thread touches them. */
template <int W>
__global__ void __launch_bounds__(TILE_THREADS)
    resscale_bwd_k(float *part, int P, int R, int N, int D, bf16 *d_o, float *dh, const float *dout,
                   const bf16 *o, const float *h, const float *ob, const float *os, const float *rb,
                   const float *rs) {
    zy_pdl_begin();
    const int c = (blockIdx.x * ZY_COL_TX + threadIdx.x) * W, p = blockIdx.y;
    const int n0 = p * R, n1 = n0 + R < N ? n0 + R : N;
    float acc[3][W];
#pragma unroll
    for (int s = 0; s < 3; s++)
#pragma unroll
        for (int k = 0; k < W; k++) acc[s][k] = 0;
    if (c < D) {
        float obv[W], osv[W], rbv[W], rsv[W];
        zy_load<float, W>(ob + c, obv);
        zy_load<float, W>(os + c, osv);
        zy_load<float, W>(rb + c, rbv);
        zy_load<float, W>(rs + c, rsv);
        for (int n = n0 + threadIdx.y; n < n1; n += ZY_COL_TY) {
            const size_t i = (size_t)n * D + c;
            float g[W], ov[W], hv[W], dov[W], dhv[W];
            zy_load<float, W>(dout + i, g);
            ld<bf16, W>(o + i, ov);
            zy_load<float, W>(h + i, hv);
#pragma unroll
            for (int k = 0; k < W; k++) {
                acc[0][k] += g[k];
                acc[1][k] += g[k] * (ov[k] + obv[k]);
                acc[2][k] += g[k] * (hv[k] + rbv[k]);
                dov[k] = g[k] * osv[k];
                dhv[k] = g[k] * rsv[k];
            }
            st<bf16, W>(d_o + i, dov);
            zy_store<float, W>(dh + i, dhv);
        }
    }
    col_partials<3, W>(part, P, p, D, acc);
}

/* d_o, dh (overwrite; dh may alias dout); dob += sum dout * os, dos += sum dout (o + ob),
 * drb += sum dout * rs, drs += sum dout (h + rb) (deterministic). */
void cuda_ops_resscale_bwd(zy_ctx *ctx, zy_act *d_o, float *dh, float *dob, float *dos, float *drb,
                           float *drs, const float *dout, const zy_act *o, const float *h,
                           const float *ob, const float *os, const float *rb, const float *rs,
                           int N, int D) {
    ZY_CHECKF(N >= 0 && D >= 0, "resscale_bwd: impossible shape N=%d D=%d", N, D);
    if (N == 0 || D == 0) return;
    cudaStream_t st = cuda_stream(ctx);
    int R, P;
    zy_col_chunks(N, &R, &P);
    float *part = (float *)cuda_ws(ctx, (size_t)3 * P * D * sizeof(float));
    bf16 *bdo = (bf16 *)d_o;
    const bf16 *bo = (const bf16 *)o;
    const void *f32[] = {dh, dout, h, ob, os, rb, rs}, *b16[] = {d_o, o};
    dim3 block(ZY_COL_TX, ZY_COL_TY);
    if (resscale_vec(D, f32, 7, b16, 2)) {
        dim3 grid((D / 4 + ZY_COL_TX - 1) / ZY_COL_TX, P);
        zy_launch(resscale_bwd_k<4>, grid, block, 0, st, part, P, R, N, D, bdo, dh, dout, bo, h, ob,
                  os, rb, rs);
    } else {
        dim3 grid((D + ZY_COL_TX - 1) / ZY_COL_TX, P);
        zy_launch(resscale_bwd_k<1>, grid, block, 0, st, part, P, R, N, D, bdo, dh, dout, bo, h, ob,
                  os, rb, rs);
    }
    ZY_CUDA_CHECK_LAUNCH();
    zy_col_outs f;
    memset(&f, 0, sizeof f);
    f.dst[0] = dob, f.src[0] = 0, f.mul[0] = os; /* sum dout*os = os * sum dout */
    f.dst[1] = dos, f.src[1] = 1;
    f.dst[2] = drb, f.src[2] = 0, f.mul[2] = rs;
    f.dst[3] = drs, f.src[3] = 2;
    f.n = 4;
    ZY_STATUS_CHECK(zy_col_finish_multi(&f, 3, part, P, D, st));
}

/* ---- residual scaling + RMSNorm (norm.cu) ---- */

void cuda_ops_resnorm_fwd(zy_ctx *ctx, float *out, zy_act *y, float *rstd, const zy_act *o,
                          const float *h, const float *ob, const float *os, const float *rb,
                          const float *rs, const float *w, int N, int D, float eps) {
    ZY_STATUS_CHECK(cuda_resnorm_fwd_bf16(out, (zy_bf16 *)y, rstd, (const zy_bf16 *)o, h, ob, os,
                                          rb, rs, w, N, D, eps, cuda_stream(ctx)));
}

void cuda_ops_resnorm_bwd(zy_ctx *ctx, zy_act *d_o, float *dh, float *dw, float *dob, float *dos,
                          float *drb, float *drs, const zy_act *dy, const float *dres,
                          const float *out, const float *rstd, const float *w, const zy_act *o,
                          const float *h, const float *ob, const float *os, const float *rb,
                          const float *rs, int N, int D) {
    float *ws = NULL; /* the kernels check the shape; N = 0 returns before using ws */
    if (N > 0 && D > 0) ws = (float *)cuda_ws(ctx, cuda_ops_ws_bytes(N, D));
    ZY_STATUS_CHECK(cuda_resnorm_bwd_bf16(
        (zy_bf16 *)d_o, dh, dw, dob, dos, drb, drs, ws, (const zy_bf16 *)dy, dres, out, rstd, w,
        (const zy_bf16 *)o, h, ob, os, rb, rs, N, D, cuda_stream(ctx)));
}

/* ---- elementwise ---- */

void cuda_ops_gelu_fwd(zy_ctx *ctx, zy_act *y, const zy_act *x, size_t n) {
    ZY_STATUS_CHECK(cuda_gelu_fwd_bf16((zy_bf16 *)y, (const zy_bf16 *)x, n, cuda_stream(ctx)));
}

/* dx may alias dy: the kernel's thread reads its dy and x elements before writing the same dx
 * elements, which no other thread touches. */
void cuda_ops_gelu_bwd(zy_ctx *ctx, zy_act *dx, const zy_act *dy, const zy_act *x, size_t n) {
    ZY_STATUS_CHECK(cuda_gelu_bwd_bf16((zy_bf16 *)dx, (const zy_bf16 *)dy, (const zy_bf16 *)x, n,
                                       cuda_stream(ctx)));
}

void cuda_ops_swiglu_fwd(zy_ctx *ctx, zy_act *y, const zy_act *gu, int N, int F) {
    ZY_STATUS_CHECK(
        cuda_swiglu_fwd_bf16((zy_bf16 *)y, (const zy_bf16 *)gu, N, F, cuda_stream(ctx)));
}

void cuda_ops_swiglu_bwd(zy_ctx *ctx, zy_act *dgu, const zy_act *dy, const zy_act *gu, int N,
                         int F) {
    ZY_STATUS_CHECK(cuda_swiglu_bwd_bf16((zy_bf16 *)dgu, (const zy_bf16 *)dy, (const zy_bf16 *)gu,
                                         N, F, cuda_stream(ctx)));
}

/* ---- loss ---- */

/* The fused kernel writes the per-row losses, their sum (double) and the counted rows into the
 * workspace ([sum | count | pad | loss rows]); the 16-byte head is copied to *out (page-locked)
 * behind it on the stream, without a host wait: the caller waits for a mark (ops.h). */
void cuda_ops_xent_fwd_bwd_queued(zy_ctx *ctx, zy_act *dlogits, const zy_act *logits,
                                  const int32_t *targets, int N, int V, int ignore_index,
                                  float grad_scale, zy_loss_host *out) {
    ZY_CHECKF(N >= 0 && V > 0, "xent: impossible shape N=%d V=%d", N, V);
    if (N == 0) {
        out->sum = 0.0, out->count = 0;
        return;
    }
    cudaStream_t st = cuda_stream(ctx);
    /* workspace: the sum (double) and count (int) as zy_loss_host lays them out, then the rows'
     * losses */
    static_assert(sizeof(zy_loss_host) == 16 && offsetof(zy_loss_host, count) == 8,
                  "zy_loss_host: the device writes a double and an int at 0 and 8");
    char *ws = (char *)cuda_ws(ctx, sizeof(zy_loss_host) + (size_t)N * sizeof(float));
    double *dsum = (double *)ws;
    int *dcnt = (int *)(ws + offsetof(zy_loss_host, count));
    float *rows = (float *)(ws + sizeof(zy_loss_host));
    ZY_STATUS_CHECK(cuda_xent_fwd_bwd_bf16((zy_bf16 *)dlogits, rows, dsum, dcnt,
                                           (const zy_bf16 *)logits, targets, N, V, ignore_index,
                                           grad_scale, st));
    /* stream order keeps the workspace's head unchanged until the copy has read it */
    ZY_CUDA_CHECK(cudaMemcpyAsync(out, ws, sizeof *out, cudaMemcpyDeviceToHost, st));
}
