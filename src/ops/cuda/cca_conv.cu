/* CCA's two causal convolutions with the mean residuals on the GPU (ops.h ops_cca_conv_fwd/bwd),
 * the grouped conv on tensor cores through mma.sync m16n8k16 (bf16 operands, fp32 accumulation).
 *
 * Forward: one block per (head g, tile of 128 time steps, sequence b). It computes the depthwise
 * conv of its tile plus t1-1 rows of halo straight from qk0 (or the decoding state) into shared
 * memory as bf16 (the owner of a row also writes it to mid_save), then the grouped conv as t1
 * GEMMs [128 x d] x [d x d] whose A operand is the mid tile shifted by the tap; the taps' bf16
 * weights stream through a two-slot cp.async ring, the first two loads overlapping the depthwise
 * conv. The epilogue adds b2 and the mean residual and stores q or k with 16-byte stores.
 *
 * Backward: the same GEMM shape gives dmid[s] = sum_j dconv[s-j] W_j (A = dq or dk rows, shifted
 * the other way). The tile keeps dmid in fp32 in shared memory and from it writes dqk0 (depthwise
 * backward plus the mean-residual gradients) and its partial sums of db1, dw1 and db2. Tiles
 * advance by 128-(t0-1) rows so that each dqk0 row finds the t0 dmid rows it needs in one tile.
 * dw2 = dconv^T mid (per head and tap a [d x d] GEMM over time) runs in a second kernel split
 * over fixed chunks of rows. The partials are summed in a fixed order by two small kernels, so
 * the weight gradients are the same bits on every run.
 *
 * The tap weights w2 [C, d, t1] (fp32) are repacked each call into bf16 [t1][C][d] blocks (one
 * [d x d] block per tap and head, rows = GEMM n, columns = GEMM k) in the context's workspace.
 * Shared-memory tiles are [rows][d + 8] bf16: the 16-byte pad puts the 8 rows read by one
 * ldmatrix phase in 8 different bank groups. Supported: d in {32, 64, 128}, t0, t1 <= 4. */
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/cuda_state.h"
#include "ops/cuda/mma.h"

#include <cuda_bf16.h>
#include <stdint.h>

typedef __nv_bfloat16 bf16;

#define CCA_BM                 128 /* time steps per tile of the conv kernels (GEMM rows) */
#define CCA_NTH                256 /* threads of the conv kernels */
#define CCA_MAXTAP             4   /* largest t0 and t1 */
#define CCA_BK                 32  /* dw2: time steps per pipeline stage */
#define CCA_NSTAGE             4   /* dw2: pipeline stages */
#define CCA_DW2_CTAS           256 /* dw2: blocks aimed at (one wave of 2 per SM on 128-132 SMs) */
#define CCA_DW2_MINR           256 /* dw2: fewest rows per split-K chunk */
#define CCA_ROWS_IN_FLIGHT     4   /* forward: rows a thread handles a round, loads together */
#define CCA_BWD_ROWS_IN_FLIGHT 2   /* the same in the backward (more registers per row) */

/* ---- the conv tile kernels (forward and dmid) ---- */

/* Compile-time layout of a conv tile for head dim D: 8 warps as WMW (rows) x WNW (32 columns
 * each), MT m16 tiles per warp; NV 16-byte vectors per head row and RL row lanes of the
 * element-wise phases (thread = row lane x vector). */
template <int D> struct cca_cfg {
    static_assert(D == 32 || D == 64 || D == 128, "CCA conv: head dim 32, 64 or 128");
    static constexpr int WNW = D / 32, WMW = 8 / WNW, WM = CCA_BM / WMW, MT = WM / 16;
    static constexpr int LD = D + 8;  /* bf16 tile row stride */
    static constexpr int LDS = D + 8; /* fp32 stage row stride (float2 stores conflict-free) */
    static constexpr int NV = D / 8, RL = CCA_NTH / NV;
};

/* Dynamic shared memory of a conv tile: the A tile [128 + t1 - 1][D + 8] bf16, then one region
 * used first as the weight ring [2][D][D + 8] bf16 and then as the fp32 stage [128][D + 8]; the
 * backward adds the depthwise weights of the head [CCA_MAXTAP][D] (fp32). */
static __host__ __device__ size_t cca_tile_smem(int d, int t1, int bwd) {
    size_t a = (size_t)(CCA_BM + t1 - 1) * (d + 8) * 2;
    size_t ring = (size_t)2 * d * (d + 8) * 2, stage = (size_t)CCA_BM * (d + 8) * 4;
    return a + (ring > stage ? ring : stage) + (bwd ? (size_t)CCA_MAXTAP * d * 4 : 0);
}

typedef struct {
    const bf16 *qk0;   /* [B*T, C] */
    const bf16 *state; /* forward: [B, P, C] rows before the chunk, or NULL (zeros) */
    const bf16 *wp;    /* packed tap weights [t1][C][d] (forward [o][i], backward [i][o]) */
    const float *w1;   /* [C, t0] */
    const float *b1;   /* [C] */
    const float *b2;   /* [C] */
    bf16 *q;           /* forward: [B*T, Hq*d] */
    bf16 *k;           /* forward: [B*T, Hk*d] */
    bf16 *mid;         /* forward: [B, Tm, C] or NULL; backward: unused */
    const bf16 *dq;    /* backward: [B*T, Hq*d] */
    const bf16 *dk;    /* backward: [B*T, Hk*d] */
    bf16 *dqk0;        /* backward: [B*T, C] */
    float *part;       /* backward: per-tile sums [B*ntiles][C*(2+t0)] (db1 | db2 | dw1) */
    int B, T, Hq, Hk, G, C, t0, t1, P, Tm, ntiles, step;
} cca_args;

/* Starts copying one tap's [D][D] weight block (contiguous) into the ring slot sw [D][D + 8]. */
template <int D> static __device__ __forceinline__ void cca_load_w(bf16 *sw, const bf16 *src) {
    constexpr int NV = D / 8, TOTAL = D * NV;
    for (int u = threadIdx.x; u < TOTAL; u += CCA_NTH) {
        int r = u / NV, cv = u % NV;
        cp_async16(smem_u32(sw + r * (D + 8) + cv * 8), src + (size_t)r * D + cv * 8, true);
    }
}

/* acc[128 x D] (this warp's part) += A[rows of sa, D] W^T, W = sw [D (n)][D (k)]. */
template <int D>
static __device__ __forceinline__ void cca_mma_tap(float (&acc)[cca_cfg<D>::MT][4][4],
                                                   const bf16 *sa, const bf16 *sw, int wm, int wn,
                                                   int lane) {
    typedef cca_cfg<D> K;
    const bf16 *pa =
        sa + (size_t)(wm * K::WM + (lane & 7) + ((lane >> 3) & 1) * 8) * K::LD + (lane >> 4) * 8;
    const bf16 *pb =
        sw + (size_t)(wn * 32 + (lane & 7) + (lane >> 4) * 8) * K::LD + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int kk = 0; kk < D; kk += 16) {
        uint32_t af[K::MT][4], bfr[2][4];
#pragma unroll
        for (int mt = 0; mt < K::MT; mt++) ldsm_x4(af[mt], pa + mt * 16 * K::LD + kk);
#pragma unroll
        for (int np = 0; np < 2; np++) ldsm_x4(bfr[np], pb + np * 16 * K::LD + kk);
#pragma unroll
        for (int mt = 0; mt < K::MT; mt++)
#pragma unroll
            for (int np = 0; np < 2; np++) {
                mma16816(acc[mt][2 * np], af[mt], bfr[np][0], bfr[np][1]);
                mma16816(acc[mt][2 * np + 1], af[mt], bfr[np][2], bfr[np][3]);
            }
    }
}

/* The tap loop shared by both directions: tap j multiplies the A tile shifted down by
 * shift0 + dir * j rows with the ring slot j & 1. On entry the groups of taps 0 and 1 (and
 * whatever the caller put in group 0) are committed; tap j + 2 is loaded once slot j is free. */
template <int D>
static __device__ __forceinline__ void cca_taps(float (&acc)[cca_cfg<D>::MT][4][4], const bf16 *sa,
                                                bf16 *sw, const bf16 *wg, size_t wtap, int t1,
                                                int shift0, int dir, int wm, int wn, int lane) {
    typedef cca_cfg<D> K;
#pragma unroll
    for (int mt = 0; mt < K::MT; mt++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[mt][nt][e] = 0.0f;
    for (int j = 0; j < t1; j++) {
        cp_async_wait<1>(); /* groups 0..j (tap j) have landed */
        __syncthreads();
        cca_mma_tap<D>(acc, sa + (size_t)(shift0 + dir * j) * K::LD, sw + (j & 1) * D * K::LD, wm,
                       wn, lane);
        __syncthreads(); /* slot j & 1 is free */
        if (j + 2 < t1) cca_load_w<D>(sw + (j & 1) * D * K::LD, wg + (size_t)(j + 2) * wtap);
        cp_async_commit();
    }
    cp_async_wait<0>(); /* only empty groups can be left; the region becomes the stage */
}

/* Writes this warp's accumulators to the fp32 stage [128][D + 8]. */
template <int D>
static __device__ __forceinline__ void
cca_stage(float *stg, const float (&acc)[cca_cfg<D>::MT][4][4], int wm, int wn, int lane) {
    typedef cca_cfg<D> K;
    int gid = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int mt = 0; mt < K::MT; mt++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++) {
            int r = wm * K::WM + mt * 16 + gid, c = wn * 32 + nt * 8 + 2 * tq;
            *reinterpret_cast<float2 *>(stg + r * K::LDS + c) =
                make_float2(acc[mt][nt][0], acc[mt][nt][1]);
            *reinterpret_cast<float2 *>(stg + (r + 8) * K::LDS + c) =
                make_float2(acc[mt][nt][2], acc[mt][nt][3]);
        }
}

/* 8 consecutive fp32 from shared memory. */
static __device__ __forceinline__ void cca_ld8s(const float *p, float *v) {
    float4 a = reinterpret_cast<const float4 *>(p)[0], b = reinterpret_cast<const float4 *>(p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

/* The depthwise conv's tap count inside the kernels: T0 > 0 compiles for t0 == T0 (ZAYA1's 2:
 * its loops unrolled, no registers for the taps it lacks), T0 = 0 for any t0 <= CCA_MAXTAP. */
template <int T0> struct cca_taps0 {
    static constexpr int N = T0 ? T0 : CCA_MAXTAP; /* register arrays' tap dimension */
    static __device__ __forceinline__ int t0(const cca_args &a) {
        return T0 ? T0 : a.t0;
    }
};

/* Forward. Grid (Hq+Hk, ntiles, B): block (g, tile, b) owns output rows [tile*128, +128) of head
 * g of sequence b, and mid rows [tile*128, +128) (the last tile also the t1-1 rows after T). */
template <int D, int T0> __global__ void __launch_bounds__(CCA_NTH, 2) cca_fwd_k(cca_args a) {
    zy_pdl_begin();
    typedef cca_cfg<D> K;
    typedef cca_taps0<T0> W;
    const int t0 = W::t0(a);
    extern __shared__ __align__(16) unsigned char cca_sm[];
    const int g = blockIdx.x, tile = blockIdx.y, b = blockIdx.z;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / K::WNW, wn = warp % K::WNW;
    const int rows = CCA_BM + a.t1 - 1, t_base = tile * CCA_BM, c0 = g * D;
    bf16 *sa = reinterpret_cast<bf16 *>(cca_sm); /* mid tile: row r = mid row t_base + r */
    bf16 *sw = sa + (size_t)rows * K::LD;
    float *stg = reinterpret_cast<float *>(sw);
    const size_t wtap = (size_t)a.C * D;
    const bf16 *wg = a.wp + (size_t)c0 * D;

    cca_load_w<D>(sw, wg);
    cp_async_commit();
    if (a.t1 > 1) cca_load_w<D>(sw + D * K::LD, wg + wtap);
    cp_async_commit();

    /* depthwise conv: mid[t, c] = b1[c] + sum_jj w1[c, jj] xpad[t + jj, c] (xpad row r is
     * state row r for r < P, else qk0 row r - P). A thread convolves CCA_ROWS_IN_FLIGHT
     * consecutive rows a round from the RR + t0 - 1 xpad rows they share, every load of the
     * round issued before any of its stores, so the latency is paid once a round. */
    {
        constexpr int RR = CCA_ROWS_IN_FLIGHT, NL = RR + W::N - 1;
        const int v = tid % K::NV, rl = tid / K::NV, c = c0 + v * 8;
        float wr[W::N][8], bb[8];
#pragma unroll
        for (int e = 0; e < 8; e++) {
            bb[e] = a.b1[c + e];
#pragma unroll
            for (int jj = 0; jj < W::N; jj++)
                wr[jj][e] = jj < t0 ? a.w1[(size_t)(c + e) * t0 + jj] : 0.0f;
        }
        for (int r0 = rl * RR; r0 < rows; r0 += RR * K::RL) {
            const int t_first = t_base + r0;
            /* rows r0 .. r0 + nr - 1 are the tile's; the first nt of them are before Tm (the
             * rest hold zeros) */
            const int nr = min(RR, rows - r0), nt = min(nr, a.Tm - t_first);
            uint4 xin[NL]; /* xpad rows t_first + q, 8 bf16 each, zero where xpad is 0 */
#pragma unroll
            for (int q = 0; q < NL; q++) {
                const int xr = t_first + q;
                const bf16 *src = q >= nt + t0 - 1 ? nullptr /* no row of the round reads it */
                                  : xr >= a.P ? a.qk0 + ((size_t)b * a.T + (xr - a.P)) * a.C + c
                                  : a.state   ? a.state + ((size_t)b * a.P + xr) * a.C + c
                                              : nullptr;
                xin[q] = src ? *reinterpret_cast<const uint4 *>(src) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int u = 0; u < RR; u++) {
                if (u >= nr) break;
                const int r = r0 + u, t = t_first + u;
                float o[8];
#pragma unroll
                for (int e = 0; e < 8; e++) o[e] = u < nt ? bb[e] : 0.0f;
#pragma unroll
                for (int jj = 0; jj < W::N; jj++) {
                    float x[8];
                    if (jj >= t0 || u >= nt) break;
                    zy_load<bf16, 8>(reinterpret_cast<const bf16 *>(&xin[u + jj]), x);
#pragma unroll
                    for (int e = 0; e < 8; e++) o[e] = fmaf(wr[jj][e], x[e], o[e]);
                }
                if (a.mid && u < nt && (r < CCA_BM || tile == a.ntiles - 1))
                    zy_store<bf16, 8>(a.mid + ((size_t)b * a.Tm + t) * a.C + c, o);
                zy_store<bf16, 8>(sa + (size_t)r * K::LD + v * 8, o);
            }
        }
    }

    /* grouped conv: out[m] = sum_j mid[t_base + m + j] W_j^T */
    float acc[K::MT][4][4];
    cca_taps<D>(acc, sa, sw, wg, wtap, a.t1, 0, 1, wm, wn, lane);
    cca_stage<D>(stg, acc, wm, wn, lane);
    __syncthreads();

    /* + b2 + mean residual: q_i += (q0_i + k0_{i/G}) / 2; k_j += mean_i of those. Rounds of
     * CCA_ROWS_IN_FLIGHT rows, their global loads issued together as above. */
    const int v = tid % K::NV, rl = tid / K::NV, c = c0 + v * 8;
    const int Qd = a.Hq * D, Kd = a.Hk * D;
    const bool qhead = g < a.Hq;
    /* the columns this thread adds to its own: for a query head those of its key head, for a
     * key head those of query head gi of its group (at + gi * D) */
    const size_t other =
        qhead ? (size_t)Qd + (size_t)(g / a.G) * D + v * 8 : (size_t)(g - a.Hq) * a.G * D + v * 8;
    float bias[8];
#pragma unroll
    for (int e = 0; e < 8; e++) bias[e] = a.b2[c + e];
    for (int m0 = rl; m0 < CCA_BM; m0 += CCA_ROWS_IN_FLIGHT * K::RL) {
        uint4 own[CCA_ROWS_IN_FLIGHT], oth[CCA_ROWS_IN_FLIGHT];
        float sum[CCA_ROWS_IN_FLIGHT][8];
#pragma unroll
        for (int u = 0; u < CCA_ROWS_IN_FLIGHT; u++) {
            const int t = t_base + m0 + u * K::RL;
            const bf16 *x0 = a.qk0 + ((size_t)b * a.T + (t < a.T ? t : 0)) * a.C;
            own[u] = *reinterpret_cast<const uint4 *>(x0 + c);
            oth[u] = *reinterpret_cast<const uint4 *>(x0 + other);
        }
        /* sum[u] = the mean-residual term: (q0 + k0) / 2, or the mean over the group of it
         * (query heads gi of the group, oth reloaded for each after the first) */
#pragma unroll
        for (int u = 0; u < CCA_ROWS_IN_FLIGHT; u++)
#pragma unroll
            for (int e = 0; e < 8; e++) sum[u][e] = 0.0f;
        for (int gi = 0; gi < (qhead ? 1 : a.G); gi++) {
            if (gi > 0)
#pragma unroll
                for (int u = 0; u < CCA_ROWS_IN_FLIGHT; u++) {
                    const int t = t_base + m0 + u * K::RL;
                    oth[u] = *reinterpret_cast<const uint4 *>(
                        a.qk0 + ((size_t)b * a.T + (t < a.T ? t : 0)) * a.C + other +
                        (size_t)gi * D);
                }
#pragma unroll
            for (int u = 0; u < CCA_ROWS_IN_FLIGHT; u++) {
                float x[8], y[8];
                zy_load<bf16, 8>(reinterpret_cast<const bf16 *>(&own[u]), x);
                zy_load<bf16, 8>(reinterpret_cast<const bf16 *>(&oth[u]), y);
#pragma unroll
                for (int e = 0; e < 8; e++) sum[u][e] += (y[e] + x[e]) * 0.5f;
            }
        }
#pragma unroll
        for (int u = 0; u < CCA_ROWS_IN_FLIGHT; u++) {
            const int m = m0 + u * K::RL, t = t_base + m;
            if (m >= CCA_BM || t >= a.T) break;
            const size_t n = (size_t)b * a.T + t;
            float o[8];
            cca_ld8s(stg + m * K::LDS + v * 8, o);
#pragma unroll
            for (int e = 0; e < 8; e++) {
                o[e] += bias[e];
                o[e] += qhead ? sum[u][e] : sum[u][e] / (float)a.G;
            }
            if (qhead)
                zy_store<bf16, 8>(a.q + n * Qd + c, o);
            else
                zy_store<bf16, 8>(a.k + n * Kd + (size_t)(g - a.Hq) * D + v * 8, o);
        }
    }
}

/* Backward (everything but dw2). Grid (Hq+Hk, ntiles, B), step = 128 - (t0-1): block (g, tile, b)
 * with s0 = tile*step computes dmid rows [s0, s0 + 128) of head g from dconv rows
 * [s0 - (t1-1), s0 + 128) (the A tile), and owns dmid rows and dconv rows [s0, s0 + step) (for
 * db1, dw1, db2) and dqk0 rows [s0 - (t1-1), s0 - (t1-1) + step), whose dmid rows
 * u + t1 - 1 .. u + P all lie in the tile. */
template <int D, int T0> __global__ void __launch_bounds__(CCA_NTH, 2) cca_bwd_k(cca_args a) {
    zy_pdl_begin();
    typedef cca_cfg<D> K;
    typedef cca_taps0<T0> W;
    const int t0 = W::t0(a);
    extern __shared__ __align__(16) unsigned char cca_sm[];
    const int g = blockIdx.x, tile = blockIdx.y, b = blockIdx.z;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / K::WNW, wn = warp % K::WNW;
    const int rows = CCA_BM + a.t1 - 1, s0 = tile * a.step, c0 = g * D;
    const int Qd = a.Hq * D, Kd = a.Hk * D;
    bf16 *sa = reinterpret_cast<bf16 *>(cca_sm); /* dconv tile: row r = dconv row s0-(t1-1)+r */
    bf16 *sw = sa + (size_t)rows * K::LD;
    float *stg = reinterpret_cast<float *>(sw);
    float *w1s = reinterpret_cast<float *>(cca_sm + cca_tile_smem(D, a.t1, 0)); /* [jj][D] */
    const size_t wtap = (size_t)a.C * D;
    const bf16 *wg = a.wp + (size_t)c0 * D;
    const bf16 *gsrc = g < a.Hq ? a.dq + (size_t)g * D : a.dk + (size_t)(g - a.Hq) * D;
    const int ldg = g < a.Hq ? Qd : Kd;

    for (int u = tid; u < rows * K::NV; u += CCA_NTH) {
        const int r = u / K::NV, cv = u % K::NV, t = s0 - (a.t1 - 1) + r;
        const bool ok = t >= 0 && t < a.T;
        cp_async16(smem_u32(sa + (size_t)r * K::LD + cv * 8),
                   ok ? gsrc + ((size_t)b * a.T + t) * ldg + cv * 8 : gsrc, ok);
    }
    cca_load_w<D>(sw, wg);
    cp_async_commit();
    if (a.t1 > 1) cca_load_w<D>(sw + D * K::LD, wg + wtap);
    cp_async_commit();
    for (int u = tid; u < t0 * D; u += CCA_NTH) w1s[u] = a.w1[(size_t)(c0 + u % D) * t0 + u / D];

    /* dmid[s0 + m] = sum_j dconv[s0 + m - j] W_j: A rows m + t1 - 1 - j */
    float acc[K::MT][4][4];
    cca_taps<D>(acc, sa, sw, wg, wtap, a.t1, a.t1 - 1, -1, wm, wn, lane);
    cca_stage<D>(stg, acc, wm, wn, lane);
    __syncthreads();

    const int v = tid % K::NV, rl = tid / K::NV, c = c0 + v * 8;
    float sb1[8], sb2[8], sw1[W::N][8];
#pragma unroll
    for (int e = 0; e < 8; e++) {
        sb1[e] = sb2[e] = 0.0f;
#pragma unroll
        for (int jj = 0; jj < W::N; jj++) sw1[jj][e] = 0.0f;
    }
    for (int m = rl; m < a.step; m += K::RL) {
        const int s = s0 + m;
        /* dmid row s: db1 += dmid; dw1[c, jj] += dmid[s, c] xpad[s + jj, c] (xpad = 0 for the
         * padding rows) */
        if (s < a.Tm) {
            float dm[8];
            cca_ld8s(stg + m * K::LDS + v * 8, dm);
#pragma unroll
            for (int e = 0; e < 8; e++) sb1[e] += dm[e];
#pragma unroll
            for (int jj = 0; jj < W::N; jj++) {
                if (jj >= t0) break;
                const int xr = s + jj;
                if (xr >= a.P) {
                    float x[8];
                    zy_load<bf16, 8>(a.qk0 + ((size_t)b * a.T + (xr - a.P)) * a.C + c, x);
#pragma unroll
                    for (int e = 0; e < 8; e++) sw1[jj][e] = fmaf(dm[e], x[e], sw1[jj][e]);
                }
            }
        }
        /* dconv row s: db2 */
        if (s < a.T) {
            float gv[8];
            zy_load<bf16, 8>(sa + (size_t)(m + a.t1 - 1) * K::LD + v * 8, gv);
#pragma unroll
            for (int e = 0; e < 8; e++) sb2[e] += gv[e];
        }
        /* dqk0 row u = s - (t1-1): sum_jj dmid[u + P - jj] w1[c, jj] (stage rows m + t0-1 - jj;
         * rows past Tm hold zeros) plus the mean-residual gradients */
        const int u = s - (a.t1 - 1);
        if (u >= 0 && u < a.T) {
            float o[8], own[8];
#pragma unroll
            for (int e = 0; e < 8; e++) o[e] = 0.0f;
#pragma unroll
            for (int jj = 0; jj < W::N; jj++) {
                if (jj >= t0) break;
                float dm[8], wv[8];
                cca_ld8s(stg + (m + t0 - 1 - jj) * K::LDS + v * 8, dm);
                cca_ld8s(w1s + jj * D + v * 8, wv);
#pragma unroll
                for (int e = 0; e < 8; e++) o[e] = fmaf(dm[e], wv[e], o[e]);
            }
            const size_t n = (size_t)b * a.T + u;
            zy_load<bf16, 8>(sa + (size_t)m * K::LD + v * 8, own); /* dconv row u */
            if (g < a.Hq) {
                /* dqr_i = dq_i + dk_{i/G} / G; dq0_i += dqr_i / 2 */
                float gk[8];
                zy_load<bf16, 8>(a.dk + n * Kd + (size_t)(g / a.G) * D + v * 8, gk);
#pragma unroll
                for (int e = 0; e < 8; e++) o[e] += 0.5f * (own[e] + gk[e] / (float)a.G);
            } else {
                /* dk0_j += sum over the group of dqr_i / 2 */
                const int j = g - a.Hq;
                float sum[8], gq[8];
#pragma unroll
                for (int e = 0; e < 8; e++) sum[e] = 0.0f;
                for (int gi = 0; gi < a.G; gi++) {
                    zy_load<bf16, 8>(a.dq + n * Qd + (size_t)(j * a.G + gi) * D + v * 8, gq);
#pragma unroll
                    for (int e = 0; e < 8; e++) sum[e] += gq[e] + own[e] / (float)a.G;
                }
#pragma unroll
                for (int e = 0; e < 8; e++) o[e] += 0.5f * sum[e];
            }
            zy_store<bf16, 8>(a.dqk0 + n * a.C + c, o);
        }
    }

    /* the block's column sums, row lanes added in lane order: part columns db1 [0, C),
     * db2 [C, 2C), dw1 [2C, 2C + C*t0) in dw1's [C, t0] order */
    __syncthreads(); /* the stage is free: it becomes red [RL][D] */
    float *red = stg;
    float *pp = a.part + (size_t)(b * a.ntiles + tile) * ((size_t)a.C * (2 + t0));
#pragma unroll
    for (int qi = 0; qi < 2 + W::N; qi++) {
        if (qi >= 2 + t0) break;
#pragma unroll
        for (int e = 0; e < 8; e++)
            red[rl * D + v * 8 + e] = qi == 0   ? sb1[e]
                                      : qi == 1 ? sb2[e]
                                                : sw1[qi >= 2 ? qi - 2 : 0][e];
        __syncthreads();
        if (tid < D) {
            float s = 0.0f;
            for (int r = 0; r < K::RL; r++) s += red[r * D + tid];
            const int cc = c0 + tid;
            const size_t col = qi == 0   ? (size_t)cc
                               : qi == 1 ? (size_t)a.C + cc
                                         : 2 * (size_t)a.C + (size_t)cc * t0 + (qi - 2);
            pp[col] = s;
        }
        __syncthreads();
    }
}

/* db1/db2/dw1 += sum over the P tile partials (part [P][ncol]), in a fixed order: lane y of a
 * column adds partials y, y + 8, ..., then the 8 lane sums are added in lane order (double). */
__global__ void cca_colsum_k(float *db1, float *db2, float *dw1, const float *part, int P, int C,
                             int ncol) {
    zy_pdl_begin();
    __shared__ double sh[8][33];
    const int tx = threadIdx.x, ty = threadIdx.y, col = blockIdx.x * 32 + tx;
    double s = 0;
    if (col < ncol)
        for (int p = ty; p < P; p += 8) s += part[(size_t)p * ncol + col];
    sh[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && col < ncol) {
        double t = 0;
        for (int y = 0; y < 8; y++) t += sh[y][tx];
        float *dst = col < C ? db1 + col : col < 2 * C ? db2 + (col - C) : dw1 + (col - 2 * C);
        *dst = (float)((double)*dst + t);
    }
}

/* ---- dw2 ---- */

/* Starts the loads of dw2's k-tile kt (rows n_lo + kt*BK ..) into ring slot kt % NSTAGE: dconv
 * rows n (zero past n_hi) and the mid rows b*Tm + t + j they meet (n = b*T + t). */
template <int D, int NTH>
static __device__ __forceinline__ void cca_dw2_load(bf16 *sbuf, int kt, const bf16 *gsrc,
                                                    size_t ldg, const bf16 *msrc, int n_lo,
                                                    int n_hi, int T, int Tm, int C, int j) {
    constexpr int LD = D + 8, NV = D / 8;
    bf16 *sA = sbuf + (size_t)(kt % CCA_NSTAGE) * 2 * CCA_BK * LD, *sB = sA + CCA_BK * LD;
    for (int u = threadIdx.x; u < CCA_BK * NV; u += NTH) {
        const int r = u / NV, cv = u % NV, n = n_lo + kt * CCA_BK + r;
        const bool ok = n < n_hi;
        const int bb = ok ? n / T : 0, t = ok ? n - bb * T : 0;
        cp_async16(smem_u32(sA + r * LD + cv * 8), ok ? gsrc + (size_t)n * ldg + cv * 8 : gsrc, ok);
        cp_async16(smem_u32(sB + r * LD + cv * 8),
                   ok ? msrc + ((size_t)bb * Tm + t + j) * C + cv * 8 : msrc, ok);
    }
}

/* Block (tap j, head g, chunk ch): part[ch][j][g*D + o][i] = sum over rows n of the chunk of
 * dconv[n, g*D + o] * mid[b, t + j, g*D + i] (n = b*T + t): a [D x D] GEMM over time whose both
 * operands are stored k-major (ldmatrix .trans), through a CCA_NSTAGE-deep cp.async ring. Warps
 * WMW x WNW, each a (D/WMW) x (D/WNW) tile. */
template <int D, int WMW, int WNW>
__global__ void __launch_bounds__(WMW *WNW * 32)
    cca_dw2_k(float *part, const bf16 *dq, const bf16 *dk, const bf16 *mid, int T, int Hq, int Hk,
              int t1, int Tm, int C, int N, int chunk) {
    zy_pdl_begin();
    constexpr int NTH = WMW * WNW * 32, LD = D + 8;
    constexpr int WM = D / WMW, WN = D / WNW, MT = WM / 16, NT = WN / 8;
    static_assert(MT >= 1 && NT % 2 == 0, "dw2 warp tile");
    extern __shared__ __align__(16) unsigned char cca_sm[];
    bf16 *sbuf = reinterpret_cast<bf16 *>(cca_sm); /* [NSTAGE][2][BK][LD]: dconv, mid */
    const int j = blockIdx.x, g = blockIdx.y, ch = blockIdx.z;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / WNW, wn = warp % WNW;
    const int n_lo = ch * chunk, n_hi = min(N, n_lo + chunk);
    const int nk = (n_hi - n_lo + CCA_BK - 1) / CCA_BK;
    const bf16 *gsrc = g < Hq ? dq + (size_t)g * D : dk + (size_t)(g - Hq) * D;
    const size_t ldg = (size_t)(g < Hq ? Hq : Hk) * D;
    const bf16 *msrc = mid + (size_t)g * D;

    float acc[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[mt][nt][e] = 0.0f;

#pragma unroll
    for (int s = 0; s < CCA_NSTAGE - 1; s++) {
        if (s < nk) cca_dw2_load<D, NTH>(sbuf, s, gsrc, ldg, msrc, n_lo, n_hi, T, Tm, C, j);
        cp_async_commit();
    }
    for (int kt = 0; kt < nk; kt++) {
        cp_async_wait<CCA_NSTAGE - 2>(); /* tile kt has landed */
        __syncthreads();                 /* ... for every thread; slot (kt-1) % NSTAGE is free */
        const bf16 *sA = sbuf + (size_t)(kt % CCA_NSTAGE) * 2 * CCA_BK * LD, *sB = sA + CCA_BK * LD;
#pragma unroll
        for (int kk = 0; kk < CCA_BK; kk += 16) {
            uint32_t af[MT][4], bfr[NT / 2][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
                ldsm_x4_t(af[mt], sA + (kk + (lane >> 4) * 8 + (lane & 7)) * LD + wm * WM +
                                      mt * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
            for (int np = 0; np < NT / 2; np++)
                ldsm_x4_t(bfr[np], sB + (kk + ((lane >> 3) & 1) * 8 + (lane & 7)) * LD + wn * WN +
                                       np * 16 + (lane >> 4) * 8);
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int np = 0; np < NT / 2; np++) {
                    mma16816(acc[mt][2 * np], af[mt], bfr[np][0], bfr[np][1]);
                    mma16816(acc[mt][2 * np + 1], af[mt], bfr[np][2], bfr[np][3]);
                }
        }
        if (kt + CCA_NSTAGE - 1 < nk)
            cca_dw2_load<D, NTH>(sbuf, kt + CCA_NSTAGE - 1, gsrc, ldg, msrc, n_lo, n_hi, T, Tm, C,
                                 j);
        cp_async_commit();
    }
    cp_async_wait<0>();

    float *out = part + (((size_t)ch * t1 + j) * C + (size_t)g * D) * D;
    const int gid = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            const int o = wm * WM + mt * 16 + gid, i = wn * WN + nt * 8 + 2 * tq;
            *reinterpret_cast<float2 *>(out + (size_t)o * D + i) =
                make_float2(acc[mt][nt][0], acc[mt][nt][1]);
            *reinterpret_cast<float2 *>(out + (size_t)(o + 8) * D + i) =
                make_float2(acc[mt][nt][2], acc[mt][nt][3]);
        }
}

/* dw2[c, i, j] += sum over chunks (in order) of part[ch][j][c][i]. */
__global__ void cca_dw2_sum_k(float *dw2, const float *part, int nch, int C, int d, int t1) {
    zy_pdl_begin();
    const size_t tot = (size_t)C * d * t1, cd = (size_t)C * d;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < tot;
         e += (size_t)gridDim.x * blockDim.x) {
        const int j = (int)(e % t1);
        const size_t ci = e / t1;
        double s = 0;
        for (int ch = 0; ch < nch; ch++) s += part[((size_t)ch * t1 + j) * cd + ci];
        dw2[e] = (float)((double)dw2[e] + s);
    }
}

/* ---- weight packing ---- */

/* wp[j][c][x] = bf16 of the tap-j weight: forward (trans = 0) w2[c, x, j] ([o][i] blocks);
 * backward (trans = 1) w2[g*d + x, c % d, j] with g = c / d ([i][o] blocks). */
__global__ void cca_pack_k(bf16 *wp, const float *w2, int C, int d, int t1, int trans) {
    zy_pdl_begin();
    const size_t tot = (size_t)t1 * C * d;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < tot;
         e += (size_t)gridDim.x * blockDim.x) {
        const int j = (int)(e / ((size_t)C * d));
        const size_t rem = e % ((size_t)C * d);
        const int c = (int)(rem / d), x = (int)(rem % d);
        size_t src;
        if (!trans) {
            src = ((size_t)c * d + x) * t1 + j;
        } else {
            const int gg = c / d, ii = c % d;
            src = (((size_t)gg * d + x) * d + ii) * t1 + j;
        }
        wp[e] = __float2bfloat16_rn(w2[src]);
    }
}

/* ---- host side ---- */

/* Aborts on a shape the kernels do not handle. */
static void cca_check_shape(int B, int T, int Hq, int Hk, int d, int t0, int t1) {
    ZY_CHECK(B >= 0 && T >= 0 && Hq >= 1 && Hk >= 1 && Hq % Hk == 0 && t0 >= 1 && t1 >= 1);
    ZY_CHECKF((d == 32 || d == 64 || d == 128) && t0 <= CCA_MAXTAP && t1 <= CCA_MAXTAP,
              "cuda cca_conv: head dim %d (32, 64 or 128 supported), kernels t0=%d t1=%d (at most "
              "%d)",
              d, t0, t1, CCA_MAXTAP);
    ZY_CHECKF((size_t)B * (T + t1 - 1) * (Hq + Hk) * d < ((size_t)1 << 40) &&
                  (T + CCA_BM - 1) / (CCA_BM - CCA_MAXTAP) < 65536 && B < 65536,
              "cuda cca_conv: B=%d T=%d too large", B, T);
}

/* 16-byte aligned (every bf16 row and head of the conv is a multiple of 16 bytes). */
static void cca_check_align(const void *p, const char *what) {
    ZY_CHECKF(p == NULL || zy_aligned(p, 16), "cuda cca_conv: %s is not 16-byte aligned", what);
}

/* x rounded up to 256 bytes (workspace carving). */
static size_t cca_round_up(size_t x) {
    return (x + 255) & ~(size_t)255;
}

/* wp [t1][C][d] bf16 <- w2 [C, d, t1] (see cca_pack_k). */
static void cca_pack(bf16 *wp, const float *w2, int C, int d, int t1, int trans, cudaStream_t st) {
    size_t n = (size_t)t1 * C * d;
    zy_launch(cca_pack_k, zy_grid_blocks(n), 256, 0, st, wp, w2, C, d, t1, trans);
    ZY_CUDA_CHECK_LAUNCH();
}

/* Launches kernel<D, 2> where t0 == 2 (ZAYA1's), kernel<D, 0> otherwise, over the conv tiles. */
#define CCA_TILE_LAUNCH(kernel, D, a, smem, st)                                                    \
    do {                                                                                           \
        const dim3 grid_((a).Hq + (a).Hk, (a).ntiles, (a).B);                                      \
        if ((a).t0 == 2) {                                                                         \
            ZY_CUDA_CHECK(cudaFuncSetAttribute(                                                    \
                kernel<D, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(smem)));          \
            zy_launch(kernel<D, 2>, grid_, CCA_NTH, smem, st, a);                                  \
        } else {                                                                                   \
            ZY_CUDA_CHECK(cudaFuncSetAttribute(                                                    \
                kernel<D, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(smem)));          \
            zy_launch(kernel<D, 0>, grid_, CCA_NTH, smem, st, a);                                  \
        }                                                                                          \
        ZY_CUDA_CHECK_LAUNCH();                                                                    \
    } while (0)

/* Launches the forward tiles for head dim D. */
template <int D> static void cca_fwd_launch(const cca_args &a, cudaStream_t st) {
    CCA_TILE_LAUNCH(cca_fwd_k, D, a, cca_tile_smem(D, a.t1, 0), st);
}

/* Launches the backward tiles for head dim D. */
template <int D> static void cca_bwd_launch(const cca_args &a, cudaStream_t st) {
    CCA_TILE_LAUNCH(cca_bwd_k, D, a, cca_tile_smem(D, a.t1, 1), st);
}

/* Launches the dw2 chunk GEMMs for head dim D (warps WMW x WNW). */
template <int D, int WMW, int WNW>
static void cca_dw2_launch(float *part, const bf16 *dq, const bf16 *dk, const bf16 *mid, int T,
                           int Hq, int Hk, int t1, int Tm, int C, int N, int nch, int chunk,
                           cudaStream_t st) {
    size_t smem = (size_t)CCA_NSTAGE * 2 * CCA_BK * (D + 8) * 2;
    ZY_CUDA_CHECK(cudaFuncSetAttribute(cca_dw2_k<D, WMW, WNW>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid(t1, Hq + Hk, nch);
    zy_launch(cca_dw2_k<D, WMW, WNW>, grid, WMW * WNW * 32, smem, st, part, dq, dk, mid, T, Hq, Hk,
              t1, Tm, C, N, chunk);
    ZY_CUDA_CHECK_LAUNCH();
}

/* q [B*T, Hq*d], k [B*T, Hk*d], mid_save [B, T+t1-1, C] (may be NULL) from qk0 [B*T, C] and the
 * optional decoding state [B, P, C] (ops.h). Workspace: the packed tap weights. */
void cuda_ops_cca_conv_fwd(zy_ctx *ctx, zy_act *q, zy_act *k, zy_act *mid_save, const zy_act *qk0,
                           const zy_act *state, const float *w1, const float *b1, const float *w2,
                           const float *b2, int B, int T, int Hq, int Hk, int d, int t0, int t1) {
    cca_check_shape(B, T, Hq, Hk, d, t0, t1);
    if (B == 0 || T == 0) return;
    cca_check_align(q, "q");
    cca_check_align(k, "k");
    cca_check_align(mid_save, "mid_save");
    cca_check_align(qk0, "qk0");
    cca_check_align(state, "state");
    cudaStream_t st = cuda_stream(ctx);
    cca_args a = {};
    a.B = B, a.T = T, a.Hq = Hq, a.Hk = Hk, a.G = Hq / Hk, a.C = (Hq + Hk) * d, a.t0 = t0,
    a.t1 = t1;
    a.P = (t0 - 1) + (t1 - 1), a.Tm = T + t1 - 1, a.ntiles = (T + CCA_BM - 1) / CCA_BM;
    a.step = CCA_BM;
    bf16 *wp = (bf16 *)cuda_ws(ctx, (size_t)t1 * a.C * d * sizeof(bf16));
    cca_pack(wp, w2, a.C, d, t1, 0, st);
    a.qk0 = (const bf16 *)qk0, a.state = (const bf16 *)state, a.wp = wp;
    a.w1 = w1, a.b1 = b1, a.b2 = b2;
    a.q = (bf16 *)q, a.k = (bf16 *)k, a.mid = (bf16 *)mid_save;
    switch (d) {
    case 32:
        cca_fwd_launch<32>(a, st);
        break;
    case 64:
        cca_fwd_launch<64>(a, st);
        break;
    default:
        cca_fwd_launch<128>(a, st);
        break;
    }
}

/* dqk0 [B*T, C] (overwritten), dw1 [C, t0], db1 [C], dw2 [C, d, t1], db2 [C] (+=) from dq, dk
 * (ops.h). Workspace: packed weights, tile partials, dw2 chunk partials. */
void cuda_ops_cca_conv_bwd(zy_ctx *ctx, zy_act *dqk0, float *dw1, float *db1, float *dw2,
                           float *db2, const zy_act *dq, const zy_act *dk, const zy_act *qk0,
                           const zy_act *mid_save, const float *w1, const float *w2, int B, int T,
                           int Hq, int Hk, int d, int t0, int t1) {
    cca_check_shape(B, T, Hq, Hk, d, t0, t1);
    ZY_CHECKF(mid_save != NULL, "cca_conv_bwd needs the forward's mid_save");
    if (B == 0 || T == 0) return;
    cca_check_align(dqk0, "dqk0");
    cca_check_align(dq, "dq");
    cca_check_align(dk, "dk");
    cca_check_align(qk0, "qk0");
    cca_check_align(mid_save, "mid_save");
    cudaStream_t st = cuda_stream(ctx);
    cca_args a = {};
    a.B = B, a.T = T, a.Hq = Hq, a.Hk = Hk, a.G = Hq / Hk, a.C = (Hq + Hk) * d, a.t0 = t0,
    a.t1 = t1;
    a.P = (t0 - 1) + (t1 - 1), a.Tm = T + t1 - 1, a.step = CCA_BM - (t0 - 1);
    a.ntiles = (a.Tm + a.step - 1) / a.step;
    /* dw2's split over time: about CCA_DW2_CTAS blocks of at least CCA_DW2_MINR rows each, a
     * function of the shape alone (the sums do not depend on the GPU model) */
    const int C = a.C, N = B * T, NG = Hq + Hk;
    int nch = (CCA_DW2_CTAS + t1 * NG - 1) / (t1 * NG),
        maxch = (N + CCA_DW2_MINR - 1) / CCA_DW2_MINR;
    nch = nch < maxch ? nch : maxch;
    const int chunk = ((N + nch - 1) / nch + CCA_BK - 1) / CCA_BK * CCA_BK;
    nch = (N + chunk - 1) / chunk;
    const int ncol = C * (2 + t0), Pt = B * a.ntiles;
    /* workspace: packed weights | tile partials [Pt][ncol] | dw2 partials [nch][t1][C][d] */
    size_t o_part = cca_round_up((size_t)t1 * C * d * sizeof(bf16));
    size_t o_dw2 = o_part + cca_round_up((size_t)Pt * ncol * sizeof(float));
    size_t total = o_dw2 + (size_t)nch * t1 * C * d * sizeof(float);
    char *ws = (char *)cuda_ws(ctx, total);
    bf16 *wp = (bf16 *)ws;
    float *part = (float *)(ws + o_part), *part2 = (float *)(ws + o_dw2);
    cca_pack(wp, w2, C, d, t1, 1, st);
    a.qk0 = (const bf16 *)qk0, a.wp = wp, a.w1 = w1;
    a.dq = (const bf16 *)dq, a.dk = (const bf16 *)dk, a.dqk0 = (bf16 *)dqk0, a.part = part;
    const bf16 *mid = (const bf16 *)mid_save;
    /* dw2 (its chunk GEMMs and their sum) reads only dq, dk and mid: it runs on a side stream
     * beside the tile kernel, whose blocks leave SMs idle between their phases and in their last
     * wave; joined back before the op returns */
    cuda_state *cs = cuda_st(ctx);
    cudaStream_t s2 = cs->nside > 0 ? cs->side[0] : st;
    if (s2 != st) {
        ZY_CUDA_CHECK(cudaEventRecord(cs->fork, st));
        ZY_CUDA_CHECK(cudaStreamWaitEvent(s2, cs->fork, 0));
    }
    switch (d) {
    case 32:
        cca_dw2_launch<32, 1, 1>(part2, a.dq, a.dk, mid, T, Hq, Hk, t1, a.Tm, C, N, nch, chunk, s2);
        cca_bwd_launch<32>(a, st);
        break;
    case 64:
        cca_dw2_launch<64, 2, 2>(part2, a.dq, a.dk, mid, T, Hq, Hk, t1, a.Tm, C, N, nch, chunk, s2);
        cca_bwd_launch<64>(a, st);
        break;
    default:
        cca_dw2_launch<128, 2, 4>(part2, a.dq, a.dk, mid, T, Hq, Hk, t1, a.Tm, C, N, nch, chunk,
                                  s2);
        cca_bwd_launch<128>(a, st);
        break;
    }
    size_t n2 = (size_t)C * d * t1;
    zy_launch(cca_dw2_sum_k, zy_grid_blocks(n2), 256, 0, s2, dw2, part2, nch, C, d, t1);
    ZY_CUDA_CHECK_LAUNCH();
    zy_launch(cca_colsum_k, (ncol + 31) / 32, dim3(32, 8), 0, st, db1, db2, dw1, part, Pt, C, ncol);
    ZY_CUDA_CHECK_LAUNCH();
    if (s2 != st) {
        ZY_CUDA_CHECK(cudaEventRecord(cs->join[0], s2));
        ZY_CUDA_CHECK(cudaStreamWaitEvent(st, cs->join[0], 0));
    }
}
