/* Router and MoE ops of ops.h on CUDA: softmax + biased top-1 choice (one warp per row), the
 * deterministic dispatch (per-block expert histograms, then a stable per-block scatter ranked with
 * warp matches, no order-dependent atomics), gather / combine / combine backward / scatter-add of
 * bf16 rows (one warp per row, 16-byte accesses when the width allows), and the router's depth
 * averaging (EDA) with its fixed-order column sums. Same math as ops/cpu/cpu_moe.c and cpu_eda.c.
 * Activations (zy_act) are bf16; probabilities, gates and parameter gradients fp32. */
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/cuda_state.h"

#include <cuda_bf16.h>
#include <limits.h>
#include <string.h>

typedef __nv_bfloat16 bf16;

#define MOE_THREADS 256 /* threads per block of every kernel here */
#define MOE_WARPS   (MOE_THREADS / 32)
#define MOE_MAX_E   512 /* experts the dispatch's shared-memory tables hold */
#define FULL_MASK   0xffffffffu
#define ROW_UNROLL  4 /* vector accesses each lane of a row kernel has in flight */

__device__ __forceinline__ int warp_sum_i(int v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

__device__ __forceinline__ float warp_sum_f(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

/* Blocks of MOE_THREADS for one warp per row over `rows` rows. */
static unsigned warp_row_blocks(int rows) {
    return (unsigned)(((long long)rows + MOE_WARPS - 1) / MOE_WARPS);
}

/* 1 when every pointer is 16-byte aligned and C bf16 elements make whole 16-byte vectors, so the
 * rows of C elements can be moved 8 at a time. */
static int vec8_ok(int C, const void *a, const void *b, const void *c) {
    return C % 8 == 0 && zy_aligned(a, 16) && zy_aligned(b, 16) && (!c || zy_aligned(c, 16));
}

/* ---- router ---- */

/* One warp per row n: mx = max logit, probs = exp(x - mx) / sum (exp and sum in double, like the
 * CPU reference, so both devices agree to the last bit nearly always), then the first argmax of
 * probs + bias: lanes keep their first best, the butterfly keeps the larger value and, on equal
 * values, the smaller index, so every lane ends with the global first argmax. */
__global__ void __launch_bounds__(MOE_THREADS)
    router_select_k(float *probs, int32_t *choice, float *gate, const bf16 *logits,
                    const float *bias, int N, int E1) {
    zy_pdl_begin();
    int n = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
    if (n >= N) return; /* whole warps leave together */
    const bf16 *x = logits + (size_t)n * E1;
    float *p = probs + (size_t)n * E1;
    float mx = -INFINITY;
    for (int e = lane; e < E1; e += 32) mx = fmaxf(mx, __bfloat162float(x[e]));
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, o));
    double sum = 0;
    for (int e = lane; e < E1; e += 32) sum += exp((double)(__bfloat162float(x[e]) - mx));
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(FULL_MASK, sum, o);
    sum = __shfl_sync(FULL_MASK, sum, 0); /* one value for every lane */
    int best = E1;                        /* E1: this lane has seen nothing */
    float bestv = 0, bestp = 0;
    for (int e = lane; e < E1; e += 32) {
        float pe = (float)(exp((double)(__bfloat162float(x[e]) - mx)) / sum);
        p[e] = pe;
        float v = pe + bias[e];
        if (best == E1 || v > bestv) { /* strict: this lane's first index wins its ties */
            best = e;
            bestv = v;
            bestp = pe;
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(FULL_MASK, bestv, o);
        float op = __shfl_xor_sync(FULL_MASK, bestp, o);
        int ob = __shfl_xor_sync(FULL_MASK, best, o);
        if (ob < E1 && (best == E1 || ov > bestv || (ov == bestv && ob < best))) {
            best = ob;
            bestv = ov;
            bestp = op;
        }
    }
    if (lane == 0) {
        choice[n] = best;
        gate[n] = best == E1 - 1 ? 0.0f : bestp;
    }
}

/* probs fp32 softmax, choice first argmax of probs + bias, gate probs[choice] (0 for skip). */
void cuda_ops_router_select(zy_ctx *ctx, float *probs, int32_t *choice, float *gate,
                            const zy_act *logits, const float *bias, int N, int E1) {
    ZY_CHECKF(N >= 0 && E1 >= 1, "cuda router_select: impossible shape N=%d E1=%d", N, E1);
    if (N == 0) return;
    zy_launch(router_select_k, warp_row_blocks(N), MOE_THREADS, 0, cuda_stream(ctx), probs, choice,
              gate, (const bf16 *)logits, bias, N, E1);
    ZY_CUDA_CHECK_LAUNCH();
}

/* Element i = n*E1 + k: dlogits = dgate[n] p_c (delta_kc - p_k) with c = choice[n]; 0 for skip
 * rows (and, defensively, for a choice outside [0, E1) that would index out of the row). */
__global__ void router_bwd_k(bf16 *dlogits, const float *dgate, const float *probs,
                             const int32_t *choice, size_t total, int E1) {
    zy_pdl_begin();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t n = i / (unsigned)E1;
        int k = (int)(i - n * E1), c = choice[n];
        float v = 0.0f;
        if (c >= 0 && c < E1 - 1) {
            float a = dgate[n] * probs[n * E1 + c];
            v = a * ((k == c ? 1.0f : 0.0f) - probs[i]);
        }
        dlogits[i] = __float2bfloat16_rn(v);
    }
}

/* dlogits (overwrite, bf16) from dgate through the softmax. */
void cuda_ops_router_bwd(zy_ctx *ctx, zy_act *dlogits, const float *dgate, const float *probs,
                         const int32_t *choice, int N, int E1) {
    ZY_CHECKF(N >= 0 && E1 >= 1, "cuda router_bwd: impossible shape N=%d E1=%d", N, E1);
    size_t total = (size_t)N * E1;
    if (total == 0) return;
    zy_launch(router_bwd_k, zy_grid_blocks(total), 256, 0, cuda_stream(ctx), (bf16 *)dlogits, dgate,
              probs, choice, total, E1);
    ZY_CUDA_CHECK_LAUNCH();
}

/* ---- dispatch ----
 * Rows are cut into tiles of `tile` rows (a multiple of MOE_THREADS), one block per tile, at most
 * ~64 tiles so that every block can afford to re-read all the tiles' histograms. Pass 1 counts
 * each tile's rows per expert; pass 2 gives each block the totals (hence offsets) and the count of
 * its expert's rows in earlier tiles, then walks its tile in rounds of MOE_THREADS rows: a row's
 * place is its expert's next free slot + the rows of that expert in earlier warps of the round +
 * its rank among its warp's lanes of the same expert (__match_any_sync). That is exactly the
 * n-ordered counting sort of the CPU, with no atomics on positions. */

/* Rows per tile for N rows: rounds of MOE_THREADS rows, at least 2 per block, <= ~64 blocks. */
static int dispatch_tile(int N) {
    int per64 = MOE_THREADS * 64;
    int rounds = (N + per64 - 1) / per64;
    return (rounds < 2 ? 2 : rounds) * MOE_THREADS;
}

/* hist[e*B + b] = rows of tile b routed to expert e (e = E: skipped), e <= E; bad[b] = first row
 * of the tile whose choice is outside [0, E] (INT_MAX if none). Counting order does not matter. */
__global__ void __launch_bounds__(MOE_THREADS)
    dispatch_hist_k(int *hist, int *bad, const int32_t *choice, int N, int E, int tile) {
    zy_pdl_begin();
    __shared__ int cnt[MOE_MAX_E + 1];
    __shared__ int first_bad;
    int b = blockIdx.x, B = gridDim.x;
    for (int e = threadIdx.x; e <= E; e += blockDim.x) cnt[e] = 0;
    if (threadIdx.x == 0) first_bad = INT_MAX;
    __syncthreads();
    int n0 = b * tile, n1 = min(N, n0 + tile);
    for (int base = n0; base < n1; base += blockDim.x) { /* uniform over the block */
        int n = base + threadIdx.x, e = E + 1;           /* E + 1: counted nowhere */
        if (n < n1) {
            int c = choice[n];
            if (c < 0 || c > E)
                atomicMin(&first_bad, n);
            else
                e = c;
        }
        unsigned peers = __match_any_sync(FULL_MASK, e);
        /* the group's lowest lane adds its size: up to 32x fewer atomics under skew */
        if (e <= E && (int)(threadIdx.x & 31) == __ffs(peers) - 1)
            atomicAdd(&cnt[e], __popc(peers));
    }
    __syncthreads();
    for (int e = threadIdx.x; e <= E; e += blockDim.x) hist[(size_t)e * B + b] = cnt[e];
    if (threadIdx.x == 0) bad[b] = first_bad;
}

/* Pass 2 (see above), the skipped rows as one more bucket after the experts', so perm's tail
 * lists them in order of n. Block 0 also writes counts, offsets and offsets[E] (the routed
 * total, or -1 - first bad row when a choice was out of range, which the host turns into an
 * abort). */
__global__ void __launch_bounds__(MOE_THREADS)
    dispatch_scatter_k(int32_t *perm, int32_t *counts, int32_t *offsets, const int *hist,
                       const int *bad, const int32_t *choice, int N, int E, int tile) {
    zy_pdl_begin();
    __shared__ int tot[MOE_MAX_E + 1];           /* rows per bucket over all tiles */
    __shared__ int next[MOE_MAX_E + 1];          /* next free slot of each bucket for this block */
    __shared__ int wc[MOE_WARPS][MOE_MAX_E + 1]; /* rows per (warp, bucket) in the current round */
    int b = blockIdx.x, B = gridDim.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    /* totals and this tile's prefix over earlier tiles: one warp per expert */
    for (int e = warp; e <= E; e += MOE_WARPS) {
        int t = 0, pre = 0;
        for (int j = lane; j < B; j += 32) {
            int h = hist[(size_t)e * B + j];
            t += h;
            pre += j < b ? h : 0;
        }
        t = warp_sum_i(t);
        pre = warp_sum_i(pre);
        if (lane == 0) {
            tot[e] = t;
            next[e] = pre;
        }
    }
    for (int i = threadIdx.x; i < MOE_WARPS * (MOE_MAX_E + 1); i += blockDim.x) (&wc[0][0])[i] = 0;
    __syncthreads();
    /* exclusive scan of the totals over the buckets by warp 0, 32 at a time */
    if (warp == 0) {
        int acc = 0, routed = 0;
        for (int e0 = 0; e0 <= E; e0 += 32) {
            int e = e0 + lane, v = e <= E ? tot[e] : 0, incl = v;
            for (int o = 1; o < 32; o <<= 1) {
                int t = __shfl_up_sync(FULL_MASK, incl, o);
                if (lane >= o) incl += t;
            }
            if (e <= E) {
                int excl = acc + incl - v;
                next[e] += excl;
                if (b == 0 && e < E) {
                    counts[e] = v;
                    offsets[e] = excl;
                }
            }
            if (e0 <= E && E < e0 + 32) /* the skipped bucket's start: the routed total */
                routed = __shfl_sync(FULL_MASK, acc + incl - v, E - e0);
            acc += __shfl_sync(FULL_MASK, incl, 31);
        }
        if (b == 0) {
            int fb = INT_MAX;
            for (int j = lane; j < B; j += 32) fb = min(fb, bad[j]);
            for (int o = 16; o > 0; o >>= 1) fb = min(fb, __shfl_xor_sync(FULL_MASK, fb, o));
            if (lane == 0) offsets[E] = fb == INT_MAX ? routed : -1 - fb;
        }
    }
    __syncthreads();
    int n0 = b * tile, n1 = min(N, n0 + tile);
    for (int base = n0; base < n1; base += blockDim.x) { /* uniform over the block */
        int n = base + threadIdx.x, e = E + 1;
        if (n < n1) {
            int c = choice[n];
            if (c >= 0 && c <= E) e = c; /* out-of-range rows were counted nowhere: skip them */
        }
        unsigned peers = __match_any_sync(FULL_MASK, e);
        int rank = __popc(peers & ((1u << lane) - 1u));
        if (e <= E && rank == 0) wc[warp][e] = __popc(peers);
        __syncthreads();
        if (e <= E) {
            int pos = next[e] + rank;
            for (int w = 0; w < warp; w++) pos += wc[w][e];
            perm[pos] = n;
        }
        __syncthreads(); /* every place computed before the round's counts are folded in */
        for (int ee = threadIdx.x; ee <= E; ee += blockDim.x) {
            int s = 0;
            for (int w = 0; w < MOE_WARPS; w++) {
                s += wc[w][ee];
                wc[w][ee] = 0;
            }
            next[ee] += s;
        }
        __syncthreads();
    }
}

/* The counting sort's two kernels on ctx's stream, then the copy of the offsets to offsets_host
 * (asynchronous where offsets_host is ops_host_alloc memory). */
static void dispatch_issue(zy_ctx *ctx, int32_t *counts, int32_t *offsets, int32_t *offsets_host,
                           int32_t *perm, const int32_t *choice, int N, int E) {
    ZY_CHECKF(N >= 0 && E >= 1 && E <= MOE_MAX_E,
              "cuda moe_dispatch: N=%d E=%d (E must be in [1, %d])", N, E, MOE_MAX_E);
    cudaStream_t st = cuda_stream(ctx);
    size_t obytes = ((size_t)E + 1) * sizeof(int32_t);
    if (N == 0) {
        ZY_CUDA_CHECK(cudaMemsetAsync(counts, 0, (size_t)E * sizeof(int32_t), st));
        ZY_CUDA_CHECK(cudaMemsetAsync(offsets, 0, obytes, st));
    } else {
        int tile = dispatch_tile(N), B = (N + tile - 1) / tile;
        int *hist = (int *)cuda_ws(ctx, ((size_t)E + 2) * B * sizeof(int)); /* [E+1][B], bad[B] */
        int *bad = hist + ((size_t)E + 1) * B;
        zy_launch(dispatch_hist_k, B, MOE_THREADS, 0, st, hist, bad, choice, N, E, tile);
        ZY_CUDA_CHECK_LAUNCH();
        zy_launch(dispatch_scatter_k, B, MOE_THREADS, 0, st, perm, counts, offsets, hist, bad,
                  choice, N, E, tile);
        ZY_CUDA_CHECK_LAUNCH();
    }
    ZY_CUDA_CHECK(cudaMemcpyAsync(offsets_host, offsets, obytes, cudaMemcpyDeviceToHost, st));
}

/* Stable counting sort of the routed rows by expert; waits for the device to copy the offsets to
 * the host (ops_moe_routed reads them). */
void cuda_ops_moe_dispatch(zy_ctx *ctx, int32_t *counts, int32_t *offsets, int32_t *offsets_host,
                           int32_t *perm, const int32_t *choice, int N, int E) {
    dispatch_issue(ctx, counts, offsets, offsets_host, perm, choice, N, E);
    ZY_CUDA_CHECK(cudaStreamSynchronize(cuda_stream(ctx)));
}

/* The same without waiting: offsets_host is written when the device gets there. */
void cuda_ops_moe_dispatch_async(zy_ctx *ctx, int32_t *counts, int32_t *offsets,
                                 int32_t *offsets_host, int32_t *perm, const int32_t *choice, int N,
                                 int E) {
    dispatch_issue(ctx, counts, offsets, offsets_host, perm, choice, N, E);
}

/* ---- rows: one warp per row, W bf16 elements per access (8: one 16-byte vector) ---- */

/* xs[r] = x[perm[r]] (a copy: V is uint4 for 8 elements, or one bf16's bits); U = V per row.
 * Each lane issues ROW_UNROLL loads before its stores, so a warp has several in flight. */
template <typename V>
__global__ void __launch_bounds__(MOE_THREADS)
    gather_k(V *__restrict__ xs, const V *__restrict__ x, const int32_t *__restrict__ perm,
             int nrows, int U) {
    zy_pdl_begin();
    int r = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
    if (r >= nrows) return;
    const V *src = x + (size_t)perm[r] * U;
    V *dst = xs + (size_t)r * U;
    for (int u0 = lane; u0 < U; u0 += 32 * ROW_UNROLL) {
        V t[ROW_UNROLL];
#pragma unroll
        for (int k = 0; k < ROW_UNROLL; k++)
            if (u0 + 32 * k < U) t[k] = src[u0 + 32 * k];
#pragma unroll
        for (int k = 0; k < ROW_UNROLL; k++)
            if (u0 + 32 * k < U) dst[u0 + 32 * k] = t[k];
    }
}

/* xs[r,:] = x[perm[r],:]. */
void cuda_ops_gather_rows(zy_ctx *ctx, zy_act *xs, const zy_act *x, const int32_t *perm, int nrows,
                          int C) {
    ZY_CHECKF(nrows >= 0 && C >= 1, "cuda gather_rows: impossible shape nrows=%d C=%d", nrows, C);
    if (nrows == 0) return;
    cudaStream_t st = cuda_stream(ctx);
    if (vec8_ok(C, xs, x, NULL))
        zy_launch(gather_k<uint4>, warp_row_blocks(nrows), MOE_THREADS, 0, st, (uint4 *)xs,
                  (const uint4 *)x, perm, nrows, C / 8);
    else
        zy_launch(gather_k<unsigned short>, warp_row_blocks(nrows), MOE_THREADS, 0, st,
                  (unsigned short *)xs, (const unsigned short *)x, perm, nrows, C);
    ZY_CUDA_CHECK_LAUNCH();
}

/* inv[perm[r]] = r (inv preset to -1): which expert row, if any, feeds output row n. Entries of
 * perm outside [0, N) are ignored rather than written out of bounds. */
__global__ void combine_inverse_k(int *inv, const int32_t *perm, int nrows, int N) {
    zy_pdl_begin();
    for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < nrows; r += gridDim.x * blockDim.x) {
        int n = perm[r];
        if (n >= 0 && n < N) inv[n] = r;
    }
}

/* One warp per output row n: y[n] = gate[n] * ys[inv[n]], or 0 when no expert row feeds n or its
 * gate is 0 (a skipped row listed in perm's tail: its ys row was never written). Every row of y
 * is written once, so there is no separate zero pass over y. */
template <int W>
__global__ void __launch_bounds__(MOE_THREADS)
    combine_k(bf16 *__restrict__ y, const bf16 *__restrict__ ys, const float *__restrict__ gate,
              const int *__restrict__ inv, int N, int D) {
    zy_pdl_begin();
    int n = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
    if (n >= N) return;
    const int r = inv[n];
    const float g = r < 0 ? 0.0f : gate[n];
    bf16 *yr = y + (size_t)n * D;
    if (g == 0.0f) {
        float z[W];
#pragma unroll
        for (int k = 0; k < W; k++) z[k] = 0.0f;
        for (int c = lane * W; c < D; c += 32 * W) zy_store<bf16, W>(yr + c, z);
        return;
    }
    const bf16 *s = ys + (size_t)r * D;
    for (int c0 = lane * W; c0 < D; c0 += 32 * W * ROW_UNROLL) {
        float v[ROW_UNROLL][W];
#pragma unroll
        for (int k = 0; k < ROW_UNROLL; k++)
            if (c0 + 32 * W * k < D) zy_load<bf16, W>(s + c0 + 32 * W * k, v[k]);
#pragma unroll
        for (int k = 0; k < ROW_UNROLL; k++)
            if (c0 + 32 * W * k < D) {
#pragma unroll
                for (int j = 0; j < W; j++) v[k][j] = g * v[k][j];
                zy_store<bf16, W>(yr + c0 + 32 * W * k, v[k]);
            }
    }
}

/* y = 0 on all N rows, then y[perm[r]] = gate[perm[r]] * ys[r] (perm rows distinct). */
void cuda_ops_moe_combine(zy_ctx *ctx, zy_act *y, const zy_act *ys, const float *gate,
                          const int32_t *perm, int nrows, int N, int D) {
    ZY_CHECKF(nrows >= 0 && nrows <= N && D >= 1,
              "cuda moe_combine: impossible shape nrows=%d N=%d D=%d", nrows, N, D);
    if (N == 0) return;
    cudaStream_t st = cuda_stream(ctx);
    int *inv = (int *)cuda_ws(ctx, (size_t)N * sizeof(int));
    ZY_CUDA_CHECK(cudaMemsetAsync(inv, 0xff, (size_t)N * sizeof(int), st)); /* -1 */
    if (nrows > 0) {
        zy_launch(combine_inverse_k, zy_grid_blocks(nrows), 256, 0, st, inv, perm, nrows, N);
        ZY_CUDA_CHECK_LAUNCH();
    }
    if (vec8_ok(D, y, ys, NULL))
        zy_launch(combine_k<8>, warp_row_blocks(N), MOE_THREADS, 0, st, (bf16 *)y, (const bf16 *)ys,
                  gate, inv, N, D);
    else
        zy_launch(combine_k<1>, warp_row_blocks(N), MOE_THREADS, 0, st, (bf16 *)y, (const bf16 *)ys,
                  gate, inv, N, D);
    ZY_CUDA_CHECK_LAUNCH();
}

/* One warp per expert row r (n = perm[r]): dys[r] = gate[n] dy[n]; dgate[n] = dy[n].ys[r] summed
 * in fp32 in a fixed order (lane-strided, then the butterfly). */
template <int W>
__global__ void __launch_bounds__(MOE_THREADS)
    combine_bwd_k(bf16 *__restrict__ dys, float *__restrict__ dgate, const bf16 *__restrict__ dy,
                  const bf16 *__restrict__ ys, const float *__restrict__ gate,
                  const int32_t *__restrict__ perm, int nrows, int D) {
    zy_pdl_begin();
    int r = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
    if (r >= nrows) return;
    int n = perm[r];
    float g = gate[n], acc = 0.0f;
    const bf16 *gr = dy + (size_t)n * D, *sr = ys + (size_t)r * D;
    bf16 *o = dys + (size_t)r * D;
    for (int c0 = lane * W; c0 < D; c0 += 32 * W * ROW_UNROLL) {
        float a[ROW_UNROLL][W], s[ROW_UNROLL][W];
#pragma unroll
        for (int k = 0; k < ROW_UNROLL; k++)
            if (c0 + 32 * W * k < D) {
                zy_load<bf16, W>(gr + c0 + 32 * W * k, a[k]);
                zy_load<bf16, W>(sr + c0 + 32 * W * k, s[k]);
            }
#pragma unroll
        for (int k = 0; k < ROW_UNROLL; k++)
            if (c0 + 32 * W * k < D) {
                float v[W];
#pragma unroll
                for (int j = 0; j < W; j++) {
                    v[j] = g * a[k][j];
                    acc += a[k][j] * s[k][j];
                }
                zy_store<bf16, W>(o + c0 + 32 * W * k, v);
            }
    }
    acc = warp_sum_f(acc);
    if (lane == 0) dgate[n] = acc;
}

/* dys (overwrite) and dgate (overwrite all N: 0 for rows no expert row feeds). */
void cuda_ops_moe_combine_bwd(zy_ctx *ctx, zy_act *dys, float *dgate, const zy_act *dy,
                              const zy_act *ys, const float *gate, const int32_t *perm, int nrows,
                              int N, int D) {
    ZY_CHECKF(nrows >= 0 && nrows <= N && D >= 1,
              "cuda moe_combine_bwd: impossible shape nrows=%d N=%d D=%d", nrows, N, D);
    if (N == 0) return;
    cudaStream_t st = cuda_stream(ctx);
    ZY_CUDA_CHECK(cudaMemsetAsync(dgate, 0, (size_t)N * sizeof(float), st));
    if (nrows == 0) return;
    const bf16 *a = (const bf16 *)dy, *s = (const bf16 *)ys;
    if (vec8_ok(D, dys, dy, ys))
        zy_launch(combine_bwd_k<8>, warp_row_blocks(nrows), MOE_THREADS, 0, st, (bf16 *)dys, dgate,
                  a, s, gate, perm, nrows, D);
    else
        zy_launch(combine_bwd_k<1>, warp_row_blocks(nrows), MOE_THREADS, 0, st, (bf16 *)dys, dgate,
                  a, s, gate, perm, nrows, D);
    ZY_CUDA_CHECK_LAUNCH();
}

/* One warp per expert row r: dx[perm[r]] += dxs[r] (sum in fp32, one bf16 rounding). */
template <int W>
__global__ void __launch_bounds__(MOE_THREADS)
    scatter_add_k(bf16 *__restrict__ dx, const bf16 *__restrict__ dxs,
                  const int32_t *__restrict__ perm, int nrows, int C) {
    zy_pdl_begin();
    int r = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
    if (r >= nrows) return;
    bf16 *o = dx + (size_t)perm[r] * C;
    const bf16 *s = dxs + (size_t)r * C;
    for (int c0 = lane * W; c0 < C; c0 += 32 * W * ROW_UNROLL) {
        float a[ROW_UNROLL][W], v[ROW_UNROLL][W];
#pragma unroll
        for (int k = 0; k < ROW_UNROLL; k++)
            if (c0 + 32 * W * k < C) {
                zy_load<bf16, W>(o + c0 + 32 * W * k, a[k]);
                zy_load<bf16, W>(s + c0 + 32 * W * k, v[k]);
            }
#pragma unroll
        for (int k = 0; k < ROW_UNROLL; k++)
            if (c0 + 32 * W * k < C) {
#pragma unroll
                for (int j = 0; j < W; j++) a[k][j] += v[k][j];
                zy_store<bf16, W>(o + c0 + 32 * W * k, a[k]);
            }
    }
}

/* dx[perm[r]] += dxs[r]; the rows of perm must be distinct (as dispatch makes them), since rows
 * run in parallel. */
void cuda_ops_scatter_add_rows(zy_ctx *ctx, zy_act *dx, const zy_act *dxs, const int32_t *perm,
                               int nrows, int C) {
    ZY_CHECKF(nrows >= 0 && C >= 1, "cuda scatter_add_rows: impossible shape nrows=%d C=%d", nrows,
              C);
    if (nrows == 0) return;
    cudaStream_t st = cuda_stream(ctx);
    if (vec8_ok(C, dx, dxs, NULL))
        zy_launch(scatter_add_k<8>, warp_row_blocks(nrows), MOE_THREADS, 0, st, (bf16 *)dx,
                  (const bf16 *)dxs, perm, nrows, C);
    else
        zy_launch(scatter_add_k<1>, warp_row_blocks(nrows), MOE_THREADS, 0, st, (bf16 *)dx,
                  (const bf16 *)dxs, perm, nrows, C);
    ZY_CUDA_CHECK_LAUNCH();
}

/* ---- router depth averaging (EDA) ---- */

/* z[N,R] += r_prev * g[c], W consecutive elements of one row per unit (R % W == 0). */
template <int W>
__global__ void eda_fwd_k(bf16 *__restrict__ z, const bf16 *__restrict__ rp,
                          const float *__restrict__ g, size_t units, int R) {
    zy_pdl_begin();
    for (size_t u = blockIdx.x * (size_t)blockDim.x + threadIdx.x; u < units;
         u += (size_t)gridDim.x * blockDim.x) {
        size_t i = u * W;
        int c = (int)(i % (unsigned)R);
        float zv[W], rv[W], gv[W];
        zy_load<bf16, W>(z + i, zv);
        zy_load<bf16, W>(rp + i, rv);
        zy_load<float, W>(g + c, gv);
#pragma unroll
        for (int k = 0; k < W; k++) zv[k] += rv[k] * gv[k];
        zy_store<bf16, W>(z + i, zv);
    }
}

/* z += r_prev * g (g broadcast over rows). */
void cuda_ops_eda_fwd(zy_ctx *ctx, zy_act *z, const zy_act *r_prev, const float *g, int N, int R) {
    ZY_CHECKF(N >= 0 && R >= 1, "cuda eda_fwd: impossible shape N=%d R=%d", N, R);
    size_t total = (size_t)N * R;
    if (total == 0) return;
    cudaStream_t st = cuda_stream(ctx);
    if (vec8_ok(R, z, r_prev, g))
        zy_launch(eda_fwd_k<8>, zy_grid_blocks(total / 8), 256, 0, st, (bf16 *)z,
                  (const bf16 *)r_prev, g, total / 8, R);
    else
        zy_launch(eda_fwd_k<1>, zy_grid_blocks(total), 256, 0, st, (bf16 *)z, (const bf16 *)r_prev,
                  g, total, R);
    ZY_CUDA_CHECK_LAUNCH();
}

/* Block (ZY_COL_TX x ZY_COL_TY threads) over ZY_COL_TX*W columns and the rows [p*rows, (p+1)*rows)
 * of chunk p = blockIdx.y: writes dr_prev = dz * g and part[p*R + c] = the chunk's sum of
 * dz * r_prev (row lanes, then the ZY_COL_TY lane sums in order: a fixed order). dr_prev may alias
 * dz: each element is read before the same thread writes it. */
template <int W>
__global__ void __launch_bounds__(ZY_COL_TX *ZY_COL_TY)
    eda_bwd_k(float *part, bf16 *dr, const bf16 *dz, const bf16 *rp, const float *g, int N, int R,
              int rows) {
    zy_pdl_begin();
    __shared__ float red[ZY_COL_TY][ZY_COL_TX * W + 1];
    int c = (blockIdx.x * ZY_COL_TX + threadIdx.x) * W, p = blockIdx.y;
    int n0 = p * rows, n1 = min(N, n0 + rows);
    float s[W];
#pragma unroll
    for (int k = 0; k < W; k++) s[k] = 0.0f;
    if (c < R) { /* R % W == 0, so the whole vector is inside the row */
        float gv[W];
        zy_load<float, W>(g + c, gv);
        for (int n = n0 + threadIdx.y; n < n1; n += ZY_COL_TY) {
            size_t i = (size_t)n * R + c;
            float a[W], b[W], o[W];
            zy_load<bf16, W>(dz + i, a);
            zy_load<bf16, W>(rp + i, b);
            zy_eda_bwd<W>(a, b, gv, o, s);
            zy_store<bf16, W>(dr + i, o);
        }
    }
#pragma unroll
    for (int k = 0; k < W; k++) red[threadIdx.y][threadIdx.x * W + k] = s[k];
    __syncthreads();
    int cols = ZY_COL_TX * W;
    for (int j = threadIdx.y * ZY_COL_TX + threadIdx.x; j < cols; j += ZY_COL_TX * ZY_COL_TY) {
        int cc = blockIdx.x * cols + j;
        if (cc < R) {
            float t = 0.0f;
            for (int y = 0; y < ZY_COL_TY; y++) t += red[y][j];
            part[(size_t)p * R + cc] = t;
        }
    }
}

/* dr_prev = dz * g (overwrite); dg += column sums of dz * r_prev (per row chunk, then over chunks
 * in order in double: deterministic). */
void cuda_ops_eda_bwd(zy_ctx *ctx, zy_act *dr_prev, float *dg, const zy_act *dz,
                      const zy_act *r_prev, const float *g, int N, int R) {
    ZY_CHECKF(N >= 0 && R >= 1, "cuda eda_bwd: impossible shape N=%d R=%d", N, R);
    if (N == 0) return;
    cudaStream_t st = cuda_stream(ctx);
    int rows, P;
    zy_col_chunks(N, &rows, &P);
    float *part = (float *)cuda_ws(ctx, (size_t)P * R * sizeof(float));
    bf16 *d = (bf16 *)dr_prev;
    const bf16 *a = (const bf16 *)dz, *b = (const bf16 *)r_prev;
    dim3 block(ZY_COL_TX, ZY_COL_TY);
    if (vec8_ok(R, dr_prev, dz, r_prev) && zy_aligned(g, 16)) {
        dim3 grid((R + ZY_COL_TX * 8 - 1) / (ZY_COL_TX * 8), P);
        zy_launch(eda_bwd_k<8>, grid, block, 0, st, part, d, a, b, g, N, R, rows);
    } else {
        dim3 grid((R + ZY_COL_TX - 1) / ZY_COL_TX, P);
        zy_launch(eda_bwd_k<1>, grid, block, 0, st, part, d, a, b, g, N, R, rows);
    }
    ZY_CUDA_CHECK_LAUNCH();
    ZY_STATUS_CHECK(zy_col_finish(dg, part, NULL, P, R, st));
}
