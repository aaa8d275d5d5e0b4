/* CUDA elementwise ops: exact (erf) GELU, SwiGLU, and the embedding + input affine, forward and
 * backward. Same math as ops/cpu/cpu_elementwise.c and cpu_embed_* (cpu_dense.c), in fp32 (the CPU
 * evaluates transcendentals in double). Grid-stride loops over W-element units: 16-byte accesses
 * when the row width and the pointers allow, single elements otherwise. The embedding table
 * gradient is summed without atomics: rows are sorted by token id (a stable radix sort), then
 * each id's rows are added in a fixed order, so the result does not depend on scheduling. */
#include "ops/cuda/cuda_util.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/kernels.h"

#include <cub/device/device_radix_sort.cuh>
#include <cuda_bf16.h>

typedef __nv_bfloat16 bf16;

/* ---- GELU ---- */

template <typename T, int W> __global__ void gelu_fwd_k(T *y, const T *x, size_t units) {
    zy_pdl_begin();
    for (size_t u = (size_t)blockIdx.x * blockDim.x + threadIdx.x; u < units;
         u += (size_t)gridDim.x * blockDim.x) {
        float v[W], o[W];
        zy_load<T, W>(x + u * W, v);
#pragma unroll
        for (int k = 0; k < W; k++) o[k] = zy_gelu(v[k]);
        zy_store<T, W>(y + u * W, o);
    }
}

template <typename T, int W>
__global__ void gelu_bwd_k(T *dx, const T *dy, const T *x, size_t units) {
    zy_pdl_begin();
    for (size_t u = (size_t)blockIdx.x * blockDim.x + threadIdx.x; u < units;
         u += (size_t)gridDim.x * blockDim.x) {
        float v[W], g[W], o[W];
        zy_load<T, W>(x + u * W, v);
        zy_load<T, W>(dy + u * W, g);
#pragma unroll
        for (int k = 0; k < W; k++) o[k] = zy_gelu_bwd(g[k], v[k]);
        zy_store<T, W>(dx + u * W, o);
    }
}

template <typename T> static int gelu_fwd(T *y, const T *x, size_t n, void *stream) {
    if (n == 0) return ZY_OK;
    cudaStream_t st = (cudaStream_t)stream;
    constexpr int W = 16 / sizeof(T);
    if (n % W == 0 && zy_aligned(y, 16) && zy_aligned(x, 16))
        zy_launch(gelu_fwd_k<T, W>, zy_grid_blocks(n / W), 256, 0, st, y, x, n / W);
    else
        zy_launch(gelu_fwd_k<T, 1>, zy_grid_blocks(n), 256, 0, st, y, x, n);
    ZY_CUDA_TRY_LAUNCH();
    return ZY_OK;
}

template <typename T> static int gelu_bwd(T *dx, const T *dy, const T *x, size_t n, void *stream) {
    if (n == 0) return ZY_OK;
    cudaStream_t st = (cudaStream_t)stream;
    constexpr int W = 16 / sizeof(T);
    if (n % W == 0 && zy_aligned(dx, 16) && zy_aligned(dy, 16) && zy_aligned(x, 16))
        zy_launch(gelu_bwd_k<T, W>, zy_grid_blocks(n / W), 256, 0, st, dx, dy, x, n / W);
    else
        zy_launch(gelu_bwd_k<T, 1>, zy_grid_blocks(n), 256, 0, st, dx, dy, x, n);
    ZY_CUDA_TRY_LAUNCH();
    return ZY_OK;
}

int cuda_gelu_fwd_bf16(zy_bf16 *y, const zy_bf16 *x, size_t n, void *stream) {
    return gelu_fwd<bf16>((bf16 *)y, (const bf16 *)x, n, stream);
}
int cuda_gelu_bwd_bf16(zy_bf16 *dx, const zy_bf16 *dy, const zy_bf16 *x, size_t n, void *stream) {
    return gelu_bwd<bf16>((bf16 *)dx, (const bf16 *)dy, (const bf16 *)x, n, stream);
}

/* ---- SwiGLU ---- */

/* Unit u covers elements [u*W, u*W + W) of y [N,F], all in one row (F % W == 0). */
template <typename T, int W> __global__ void swiglu_fwd_k(T *y, const T *gu, int F, size_t units) {
    zy_pdl_begin();
    for (size_t u = (size_t)blockIdx.x * blockDim.x + threadIdx.x; u < units;
         u += (size_t)gridDim.x * blockDim.x) {
        size_t i = u * W, n = i / F, f = i % F;
        const T *g = gu + n * 2 * F + f;
        float gv[W], uv[W], o[W];
        zy_load<T, W>(g, gv);
        zy_load<T, W>(g + F, uv);
#pragma unroll
        for (int k = 0; k < W; k++) o[k] = zy_swiglu(gv[k], uv[k]);
        zy_store<T, W>(y + i, o);
    }
}

template <typename T, int W>
__global__ void swiglu_bwd_k(T *dgu, const T *dy, const T *gu, int F, size_t units) {
    zy_pdl_begin();
    for (size_t u = (size_t)blockIdx.x * blockDim.x + threadIdx.x; u < units;
         u += (size_t)gridDim.x * blockDim.x) {
        size_t i = u * W, n = i / F, f = i % F, r = n * 2 * F + f;
        float gv[W], uv[W], dyv[W], dg[W], du[W];
        zy_load<T, W>(gu + r, gv);
        zy_load<T, W>(gu + r + F, uv);
        zy_load<T, W>(dy + i, dyv);
#pragma unroll
        for (int k = 0; k < W; k++) zy_swiglu_bwd(gv[k], uv[k], dyv[k], &dg[k], &du[k]);
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
        zy_launch(swiglu_fwd_k<T, W>, zy_grid_blocks(n / W), 256, 0, st, y, gu, F, n / W);
    else
        zy_launch(swiglu_fwd_k<T, 1>, zy_grid_blocks(n), 256, 0, st, y, gu, F, n);
    ZY_CUDA_TRY_LAUNCH();
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
        zy_launch(swiglu_bwd_k<T, W>, zy_grid_blocks(n / W), 256, 0, st, dgu, dy, gu, F, n / W);
    else
        zy_launch(swiglu_bwd_k<T, 1>, zy_grid_blocks(n), 256, 0, st, dgu, dy, gu, F, n);
    ZY_CUDA_TRY_LAUNCH();
    return ZY_OK;
}

int cuda_swiglu_fwd_bf16(zy_bf16 *y, const zy_bf16 *gu, int N, int F, void *stream) {
    return swiglu_fwd<bf16>((bf16 *)y, (const bf16 *)gu, N, F, stream);
}
int cuda_swiglu_bwd_bf16(zy_bf16 *dgu, const zy_bf16 *dy, const zy_bf16 *gu, int N, int F,
                         void *stream) {
    return swiglu_bwd<bf16>((bf16 *)dgu, (const bf16 *)dy, (const bf16 *)gu, N, F, stream);
}

/* ---- embedding + input affine ---- */

template <int W>
__global__ void embed_fwd_k(float *h, const float *emb, const int32_t *ids, const float *bias,
                            const float *scale, int D, size_t units) {
    zy_pdl_begin();
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
        zy_launch(embed_fwd_k<4>, zy_grid_blocks(n / 4), 256, 0, st, h, emb, ids, bias, scale, D,
                  n / 4);
    else
        zy_launch(embed_fwd_k<1>, zy_grid_blocks(n), 256, 0, st, h, emb, ids, bias, scale, D, n);
    ZY_CUDA_TRY_LAUNCH();
    return ZY_OK;
}

/* Column sums of one row chunk (as norm.cu's norm_col_k): s0 = dh*scale -> dbias,
 * s1 = dh*(emb+bias) -> dscale. */
__global__ void __launch_bounds__(ZY_COL_TX *ZY_COL_TY)
    embed_col_k(float *part, int P, int R, int N, int D, const float *dh, const float *emb,
                const int32_t *ids, const float *bias, const float *scale) {
    zy_pdl_begin();
    __shared__ float red[2][ZY_COL_TY][ZY_COL_TX + 1];
    int c = blockIdx.x * ZY_COL_TX + threadIdx.x, p = blockIdx.y;
    int n0 = p * R, n1 = n0 + R < N ? n0 + R : N;
    float s0 = 0, s1 = 0;
    if (c < D) {
        float sc = scale[c], b = bias[c];
        for (int n = n0 + threadIdx.y; n < n1; n += ZY_COL_TY) {
            float g = dh[(size_t)n * D + c];
            s0 += g * sc;
            s1 += g * (emb[(size_t)ids[n] * D + c] + b);
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

/* ---- embedding table gradient without atomics ----
 * The N rows are sorted by id (keys: ids as unsigned, values: row numbers; the sort is stable,
 * so each id's rows stay in increasing row order). The sorted list is cut into the P chunks of R
 * rows of zy_col_chunks. Per chunk and column, one thread walks the chunk's rows in order and
 * sums dh*scale per run of equal ids (a segment). A segment that lies inside the chunk goes
 * straight to demb (no other thread touches that id). A segment cut by a chunk boundary leaves
 * its partial sum in a slot of the workspace: slot 0 for the chunk's first segment, slot 1 for
 * its last; the chunk where such a segment starts then adds its partials in chunk order and
 * updates demb once. Every sum has a fixed order: the result is bitwise repeatable. */

#define EMB_SEG_THREADS 128 /* threads (column units) per block */
#define EMB_SEG_UNROLL  4   /* rows whose loads are in flight together */

/* Workspace of the embedding backward: byte offsets of its parts (each 256-byte aligned). */
typedef struct {
    size_t seg;        /* float [P][2][D] segment partials (the column partials [2][P][D] at 0) */
    size_t idx_in;     /* int32 [N] row numbers 0..N-1 */
    size_t keys_out;   /* uint32 [N] sorted ids */
    size_t idx_out;    /* int32 [N] row numbers in sorted order */
    size_t temp;       /* the radix sort's temporary storage */
    size_t temp_bytes; /* its size */
    size_t total;
} embed_ws_plan;

static size_t emb_align(size_t b) {
    return (b + 255) & ~(size_t)255;
}

/* Fills *L for N rows of width D; the sort's storage size comes from CUB (a host-side query for
 * the current device). Returns the query's status. */
static cudaError_t embed_ws_layout(int N, int D, embed_ws_plan *L) {
    int R, P;
    zy_col_chunks(N > 0 ? N : 0, &R, &P);
    const size_t pd = (size_t)(P > 0 ? P : 1) * (size_t)(D > 0 ? D : 1) * sizeof(float);
    const size_t n = (size_t)(N > 0 ? N : 1);
    L->seg = emb_align(2 * pd);
    L->idx_in = L->seg + emb_align(2 * pd);
    L->keys_out = L->idx_in + emb_align(n * sizeof(int32_t));
    L->idx_out = L->keys_out + emb_align(n * sizeof(uint32_t));
    L->temp = L->idx_out + emb_align(n * sizeof(int32_t));
    L->temp_bytes = 0;
    cudaError_t e = cub::DeviceRadixSort::SortPairs(
        nullptr, L->temp_bytes, (const uint32_t *)nullptr, (uint32_t *)nullptr,
        (const int32_t *)nullptr, (int32_t *)nullptr, (int)n, 0, 32);
    L->total = L->temp + emb_align(L->temp_bytes);
    return e;
}

size_t cuda_embed_bwd_ws_bytes(int N, int D) {
    embed_ws_plan L;
    if (embed_ws_layout(N, D, &L) != cudaSuccess) {
        /* no usable device to ask: CUB's radix sort needs about 2 N keys and values of
         * double-buffer space plus small tables, so this bound is generous */
        (void)cudaGetLastError();
        return L.temp + emb_align((size_t)(N > 0 ? N : 1) * 16 + ((size_t)1 << 20));
    }
    return L.total;
}

__global__ void embed_iota_k(int32_t *idx, int N) {
    zy_pdl_begin();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < N; i += gridDim.x * blockDim.x)
        idx[i] = i;
}

/* a[k] += b[k] for W floats at dst (read, add, write). */
template <int W> static __device__ __forceinline__ void emb_add_to(float *dst, const float *b) {
    float a[W];
    zy_load<float, W>(dst, a);
#pragma unroll
    for (int k = 0; k < W; k++) a[k] += b[k];
    zy_store<float, W>(dst, a);
}

/* Grid (P, column blocks): chunk p = blockIdx.x of the sorted rows, columns [c, c + W) per
 * thread. skey/sidx: sorted ids and their row numbers; part: the slots [P][2][D]. */
template <int W>
__global__ void __launch_bounds__(EMB_SEG_THREADS)
    embed_seg_k(float *demb, float *part, const float *dh, const uint32_t *skey,
                const int32_t *sidx, const float *scale, int N, int D, int R, uint32_t skip) {
    zy_pdl_begin();
    const int p = blockIdx.x, c = (blockIdx.y * EMB_SEG_THREADS + threadIdx.x) * W;
    if (c >= D) return;
    const int r0 = p * R, r1 = min(r0 + R, N);
    float sc[W], acc[W];
    zy_load<float, W>(scale + c, sc);
#pragma unroll
    for (int k = 0; k < W; k++) acc[k] = 0.0f;
    uint32_t cur = skey[r0];
    const bool before = r0 > 0 && skey[r0 - 1] == cur; /* the first segment started earlier */
    bool first = true;                                 /* cur is the chunk's first segment */
    for (int r = r0; r < r1; r += EMB_SEG_UNROLL) {
        float v[EMB_SEG_UNROLL][W];
        uint32_t key[EMB_SEG_UNROLL];
#pragma unroll
        for (int u = 0; u < EMB_SEG_UNROLL; u++)
            if (r + u < r1) {
                key[u] = skey[r + u];
                if (key[u] != skip) { /* skipped rows (padding) are summed as zeros */
                    zy_load<float, W>(dh + (size_t)sidx[r + u] * D + c, v[u]);
                } else {
#pragma unroll
                    for (int k = 0; k < W; k++) v[u][k] = 0.0f;
                }
            }
#pragma unroll
        for (int u = 0; u < EMB_SEG_UNROLL; u++) {
            if (r + u >= r1) break;
            if (key[u] != cur) { /* segment cur ends inside the chunk */
                if (first && before)
                    zy_store<float, W>(part + (size_t)2 * p * D + c, acc);
                else if (cur != skip)
                    emb_add_to<W>(demb + (size_t)cur * D + c, acc);
                first = false;
                cur = key[u];
#pragma unroll
                for (int k = 0; k < W; k++) acc[k] = 0.0f;
            }
#pragma unroll
            for (int k = 0; k < W; k++) acc[k] += v[u][k] * sc[k];
        }
    }
    const bool after = r1 < N && skey[r1] == cur; /* the last segment goes on in chunk p+1 */
    if (first && (before || after))
        zy_store<float, W>(part + (size_t)2 * p * D + c, acc);
    else if (after)
        zy_store<float, W>(part + ((size_t)2 * p + 1) * D + c, acc);
    else if (cur != skip)
        emb_add_to<W>(demb + (size_t)cur * D + c, acc);
}

/* Grid as embed_seg_k: when a segment cut by a chunk boundary starts in chunk p, its partials
 * (chunk p's slot, then slot 0 of each following chunk it covers) are summed in chunk order and
 * added to demb. */
template <int W>
__global__ void __launch_bounds__(EMB_SEG_THREADS)
    embed_seg_finish_k(float *demb, const float *part, const uint32_t *skey, int N, int D, int R,
                       int P, uint32_t skip) {
    zy_pdl_begin();
    const int p = blockIdx.x, c = (blockIdx.y * EMB_SEG_THREADS + threadIdx.x) * W;
    if (c >= D) return;
    const int r0 = p * R, r1 = min(r0 + R, N);
    const uint32_t k0 = skey[r0], kl = skey[r1 - 1];
    if (r1 >= N || skey[r1] != kl || kl == skip) return; /* the last segment ends here */
    int slot = 1;
    if (k0 == kl) { /* one segment fills the chunk: it starts here unless it started earlier */
        if (r0 > 0 && skey[r0 - 1] == k0) return;
        slot = 0;
    }
    int qe = p + 1; /* chunks p+1 .. qe-1 continue the segment */
    while (qe < P && skey[(size_t)qe * R] == kl) qe++;
    float t[W];
    zy_load<float, W>(part + ((size_t)2 * p + slot) * D + c, t);
#pragma unroll 4
    for (int q = p + 1; q < qe; q++) {
        float u[W];
        zy_load<float, W>(part + (size_t)2 * q * D + c, u);
#pragma unroll
        for (int k = 0; k < W; k++) t[k] += u[k];
    }
    emb_add_to<W>(demb + (size_t)kl * D + c, t);
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
    zy_launch(embed_col_k, grid, block, 0, st, ws, P, R, N, D, dh, emb, ids, bias, scale);
    ZY_CUDA_TRY_LAUNCH();
    if (zy_col_finish(dbias, ws, NULL, P, D, st) != ZY_OK ||
        zy_col_finish(dscale, ws + (size_t)P * D, NULL, P, D, st) != ZY_OK)
        return ZY_ERR;

    /* table gradient: sort (id, row) pairs, then the segment sums */
    embed_ws_plan L;
    cudaError_t e = embed_ws_layout(N, D, &L);
    if (e != cudaSuccess)
        return zy_fail_runtime("cuda embed_bwd: sizing the id sort failed: %s",
                               cudaGetErrorString(e));
    char *w = (char *)ws;
    float *seg = (float *)(w + L.seg);
    int32_t *idx_in = (int32_t *)(w + L.idx_in), *idx_out = (int32_t *)(w + L.idx_out);
    uint32_t *keys_out = (uint32_t *)(w + L.keys_out);
    zy_launch(embed_iota_k, zy_grid_blocks((size_t)N), 256, 0, st, idx_in, N);
    ZY_CUDA_TRY_LAUNCH();
    size_t temp_bytes = L.temp_bytes;
    e = cub::DeviceRadixSort::SortPairs(w + L.temp, temp_bytes, (const uint32_t *)ids, keys_out,
                                        idx_in, idx_out, N, 0, 32, st);
    if (e != cudaSuccess)
        return zy_fail_runtime("cuda embed_bwd: sorting the ids failed: %s", cudaGetErrorString(e));
    const uint32_t skip = (uint32_t)skip_id; /* -1: no valid id (< 2^31) matches */
    if (D % 4 == 0 && zy_aligned(demb, 16) && zy_aligned(dh, 16) && zy_aligned(scale, 16) &&
        zy_aligned(ws, 16)) {
        dim3 sgrid(P, (D / 4 + EMB_SEG_THREADS - 1) / EMB_SEG_THREADS);
        zy_launch(embed_seg_k<4>, sgrid, EMB_SEG_THREADS, 0, st, demb, seg, dh, keys_out, idx_out,
                  scale, N, D, R, skip);
        ZY_CUDA_TRY_LAUNCH();
        zy_launch(embed_seg_finish_k<4>, sgrid, EMB_SEG_THREADS, 0, st, demb, seg, keys_out, N, D,
                  R, P, skip);
    } else {
        dim3 sgrid(P, (D + EMB_SEG_THREADS - 1) / EMB_SEG_THREADS);
        zy_launch(embed_seg_k<1>, sgrid, EMB_SEG_THREADS, 0, st, demb, seg, dh, keys_out, idx_out,
                  scale, N, D, R, skip);
        ZY_CUDA_TRY_LAUNCH();
        zy_launch(embed_seg_finish_k<1>, sgrid, EMB_SEG_THREADS, 0, st, demb, seg, keys_out, N, D,
                  R, P, skip);
    }
    ZY_CUDA_TRY_LAUNCH();
    return ZY_OK;
}
