/* The kernels of the fused causal GQA attention (attention.h) and their launchers, as templates
 * over the head dim D and the tile shape: included by attention.cu, which instantiates the shapes
 * the training path uses, and by dev/attention_variants.cu, which offers the others for tuning.
 * CUDA C++ only.
 *
 * Forward: one block per (sequence, query head, tile of 16*NW*MR query rows); each warp owns 16
 * (MR = 1) or 32 (MR = 2) query rows and keeps its O accumulator in registers; key/value tiles of
 * 64 rows stream through shared memory (cp.async, two stages) and the softmax is online (running
 * max and sum in the exp2 domain), so the T x T scores never exist. Writes out (bf16) and lse
 * (fp32).
 *
 * Backward: D = rowsum(dout * out) first (one small kernel). Then one block per (sequence, key
 * head, tile of 16*NW key rows); each warp owns 16 keys and keeps their dK and dV accumulators in
 * registers while the block walks over every query tile of every query head of the GQA group, so
 * dk/dv are complete when the block ends (no atomics). Per query tile it recomputes P^T from lse,
 * dP^T = V dO^T, dS^T = P^T (dP^T - D), and accumulates dV += P^T dO and dK += dS^T Q.
 * dQ = scale * dS K needs a sum over every key block. On the stored path (ATT_DQ_STORED) the main
 * kernel also writes dS (the bf16 values dK uses) into 64 x 64 tiles of the causal triangle in the
 * scratch, and a second kernel (one block per (sequence, GB query heads of a group, 64 query
 * rows)) streams its rows of tiles with the key tiles in a fixed order and keeps dQ in registers:
 * bitwise-repeatable, for one more T x T x d product and about B * Hq * T^2 bytes written and read.
 * On the recomputing path (ATT_DQ_RECOMPUTE) the second kernel instead recomputes S, P, dP and dS
 * per key tile (three more products, no tiles). No float atomics anywhere (an fp32-atomic dq was
 * measured, 0.875 ms against the stored path's 0.690 at B=8 T=2048 on an H100, and removed).
 *
 * Shared-memory tiles are [rows][d + 8] bf16: the 16-byte pad puts the 8 rows read by one
 * ldmatrix phase in 8 different bank groups for every d. */
#ifndef ZY_OPS_CUDA_ATTENTION_KERNELS_H
#define ZY_OPS_CUDA_ATTENTION_KERNELS_H

#include "base/err.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/mma.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

typedef __nv_bfloat16 bf16;

#define ATT_LOG2E 1.4426950408889634f
#define ATT_LN2   0.6931471805599453f
#define ATT_BC    64 /* forward: keys per tile */
#define ATT_DT    64 /* stored dS tiles: 64 keys x 64 queries */

/* How the backward gets dQ = scale * dS K: from the dS tiles the main kernel stores (the default),
 * or by recomputing dS in a second kernel (long contexts, where the tiles would be too big). */
enum { ATT_DQ_STORED = 0, ATT_DQ_RECOMPUTE = 1 };

/* Tiles of the stored dS per (sequence, query head): the causal triangle of 64 x 64 tiles, tile
 * (query tile i, key tile j <= i) at i (i + 1) / 2 + j, each [64 keys][64 queries] bf16. */
static __host__ __device__ __forceinline__ size_t att_ds_tiles(int T) {
    const size_t n = (size_t)(T + ATT_DT - 1) / ATT_DT;
    return n * (n + 1) / 2;
}

static __device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* Key s visible to query t (both in [0, T)). */
static __device__ __forceinline__ bool att_visible(int t, int s, int T, int window) {
    return s <= t && t < T && (window <= 0 || s > t - window);
}

/* Starts copying rows [r0, r0 + ROWS) of one head (D columns at base, rows stride elements apart)
 * into the shared tile sm [ROWS][D + 8]; rows >= T are zero-filled. */
template <int ROWS, int D, int NTH>
static __device__ __forceinline__ void load_tile(bf16 *sm, const bf16 *base, size_t stride, int r0,
                                                 int T) {
    constexpr int CPR = D / 8, TOTAL = ROWS * CPR;
#pragma unroll
    for (int c0 = 0; c0 < TOTAL; c0 += NTH) {
        int c = c0 + (int)threadIdx.x;
        if (TOTAL % NTH == 0 || c < TOTAL) {
            int r = c / CPR, cc = c % CPR;
            bool ok = r0 + r < T;
            const bf16 *src = ok ? base + (size_t)(r0 + r) * stride + cc * 8 : base;
            cp_async16(smem_u32(sm + r * (D + 8) + cc * 8), src, ok);
        }
    }
}

/* Starts copying n floats src[r0 ..] to sm, zero past T. */
template <int NTH>
static __device__ __forceinline__ void load_vec(float *sm, const float *src, int r0, int n, int T) {
    for (int x = threadIdx.x; x < n; x += NTH) {
        bool ok = r0 + x < T;
        cp_async4(smem_u32(sm + x), ok ? src + r0 + x : src, ok);
    }
}

/* ---- forward ---- */

/* Grid (B*Hq, ceil(T/BR)), NW warps of MR m-tiles (16 query rows each): BR = 16*MR*NW rows per
 * block. With MR = 1 a warp keeps its Q fragments in registers; with MR = 2 it reads them from
 * shared memory at each use, and each K/V fragment it loads feeds both m-tiles (half the
 * shared-memory traffic per product, for more registers). Query tiles run in reverse so the
 * longest start first. */
template <int D, int NW, int MR>
__global__ void __launch_bounds__(NW * 32)
    att_fwd_kernel(const bf16 *__restrict__ q, const bf16 *__restrict__ k,
                   const bf16 *__restrict__ v, bf16 *__restrict__ out, float *__restrict__ lse,
                   int T, int Hq, int Hk, float sl2, int window) {
    zy_pdl_begin();
    constexpr int WR = 16 * MR, BR = WR * NW, BC = ATT_BC, LD = D + 8, NTH = NW * 32;
    constexpr int KD = D / 16, ND = D / 8, NS = BC / 8;
    extern __shared__ __align__(16) unsigned char att_smem[];
    bf16 *sQ = (bf16 *)att_smem; /* [BR][LD] */
    bf16 *sK = sQ + BR * LD;     /* [2][BC][LD] */
    bf16 *sV = sK + 2 * BC * LD; /* [2][BC][LD] */
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, tq = lane & 3;
    const int b = blockIdx.x / Hq, h = blockIdx.x % Hq, hk = h / (Hq / Hk);
    const int m0 = (gridDim.y - 1 - blockIdx.y) * BR;
    const size_t qs = (size_t)Hq * D, ks = (size_t)Hk * D;
    const bf16 *qb = q + (size_t)b * T * qs + (size_t)h * D;
    const bf16 *kb = k + (size_t)b * T * ks + (size_t)hk * D;
    const bf16 *vb = v + (size_t)b * T * ks + (size_t)hk * D;
    const int qlast = min(m0 + BR, T) - 1;
    const int kfirst = window > 0 ? max(0, m0 - window + 1) : 0;
    const int j0 = kfirst / BC, j1 = qlast / BC;
    const bf16 *sQw = sQ + w * WR * LD; /* this warp's rows */

    load_tile<BR, D, NTH>(sQ, qb, qs, m0, T);
    load_tile<BC, D, NTH>(sK, kb, ks, j0 * BC, T);
    load_tile<BC, D, NTH>(sV, vb, ks, j0 * BC, T);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();

    uint32_t qf[MR == 1 ? KD : 1][4]; /* MR = 1: the warp's 16 query rows as A fragments */
    if constexpr (MR == 1) {
#pragma unroll
        for (int kc = 0; kc < KD; kc++)
            ldsm_x4(qf[kc], sQw + (lane & 15) * LD + kc * 16 + (lane >> 4) * 8);
    }

    float o[MR][ND][4], mx[MR][2], l[MR][2];
#pragma unroll
    for (int mi = 0; mi < MR; mi++) {
#pragma unroll
        for (int i = 0; i < ND; i++) o[mi][i][0] = o[mi][i][1] = o[mi][i][2] = o[mi][i][3] = 0.0f;
        mx[mi][0] = mx[mi][1] = -INFINITY;
        l[mi][0] = l[mi][1] = 0.0f;
    }
    const int r0 = m0 + w * WR + g; /* row of element (mi, hi): r0 + 16 mi + 8 hi */

    for (int j = j0; j <= j1; j++) {
        const int st = (j - j0) & 1;
        if (j > j0) __syncthreads(); /* every warp is done with tile j-1 (buffer st^1) */
        if (j < j1) {
            load_tile<BC, D, NTH>(sK + (st ^ 1) * BC * LD, kb, ks, (j + 1) * BC, T);
            load_tile<BC, D, NTH>(sV + (st ^ 1) * BC * LD, vb, ks, (j + 1) * BC, T);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads(); /* tile j visible to every warp */
        const bf16 *sKs = sK + st * BC * LD, *sVs = sV + st * BC * LD;
        const int n0 = j * BC;

        /* S = Q K^T for WR rows x 64 keys */
        float s[MR][NS][4];
#pragma unroll
        for (int mi = 0; mi < MR; mi++)
#pragma unroll
            for (int i = 0; i < NS; i++)
                s[mi][i][0] = s[mi][i][1] = s[mi][i][2] = s[mi][i][3] = 0.0f;
#pragma unroll
        for (int kc = 0; kc < KD; kc++) {
            uint32_t a[MR][4];
#pragma unroll
            for (int mi = 0; mi < MR; mi++) {
                if constexpr (MR == 1) {
                    a[mi][0] = qf[kc][0], a[mi][1] = qf[kc][1];
                    a[mi][2] = qf[kc][2], a[mi][3] = qf[kc][3];
                } else {
                    ldsm_x4(a[mi], sQw + (mi * 16 + (lane & 15)) * LD + kc * 16 + (lane >> 4) * 8);
                }
            }
#pragma unroll
            for (int np = 0; np < NS / 2; np++) {
                uint32_t bb[4];
                ldsm_x4(bb, sKs + (np * 16 + (lane & 7) + (lane >> 4) * 8) * LD + kc * 16 +
                                ((lane >> 3) & 1) * 8);
#pragma unroll
                for (int mi = 0; mi < MR; mi++) {
                    mma16816(s[mi][2 * np], a[mi], bb[0], bb[1]);
                    mma16816(s[mi][2 * np + 1], a[mi], bb[2], bb[3]);
                }
            }
        }

        const bool need_mask =
            n0 + BC - 1 > m0 || n0 + BC > T || (window > 0 && n0 <= m0 + BR - 1 - window);
#pragma unroll
        for (int mi = 0; mi < MR; mi++) {
            /* scale to the exp2 domain and mask */
            float xlo = -INFINITY, xhi = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < NS; nt++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float x = s[mi][nt][e] * sl2;
                    if (need_mask && !att_visible(r0 + 16 * mi + (e < 2 ? 0 : 8),
                                                  n0 + nt * 8 + 2 * tq + (e & 1), T, window))
                        x = -INFINITY;
                    s[mi][nt][e] = x;
                }
                xlo = fmaxf(xlo, fmaxf(s[mi][nt][0], s[mi][nt][1]));
                xhi = fmaxf(xhi, fmaxf(s[mi][nt][2], s[mi][nt][3]));
            }
            xlo = fmaxf(xlo, __shfl_xor_sync(0xffffffffu, xlo, 1));
            xlo = fmaxf(xlo, __shfl_xor_sync(0xffffffffu, xlo, 2));
            xhi = fmaxf(xhi, __shfl_xor_sync(0xffffffffu, xhi, 1));
            xhi = fmaxf(xhi, __shfl_xor_sync(0xffffffffu, xhi, 2));

            /* online softmax: rescale the running sums to the new maximum (0 while a row has
             * seen only masked keys, so that no -inf - -inf appears) */
            const float nlo = fmaxf(mx[mi][0], xlo), nhi = fmaxf(mx[mi][1], xhi);
            const float ulo = nlo == -INFINITY ? 0.0f : nlo, uhi = nhi == -INFINITY ? 0.0f : nhi;
            const float alo = ex2(mx[mi][0] - ulo), ahi = ex2(mx[mi][1] - uhi);
            mx[mi][0] = nlo;
            mx[mi][1] = nhi;
            float plo = 0.0f, phi = 0.0f;
#pragma unroll
            for (int nt = 0; nt < NS; nt++) {
                s[mi][nt][0] = ex2(s[mi][nt][0] - ulo);
                s[mi][nt][1] = ex2(s[mi][nt][1] - ulo);
                s[mi][nt][2] = ex2(s[mi][nt][2] - uhi);
                s[mi][nt][3] = ex2(s[mi][nt][3] - uhi);
                plo += s[mi][nt][0] + s[mi][nt][1];
                phi += s[mi][nt][2] + s[mi][nt][3];
            }
            l[mi][0] = l[mi][0] * alo + plo;
            l[mi][1] = l[mi][1] * ahi + phi;
#pragma unroll
            for (int i = 0; i < ND; i++) {
                o[mi][i][0] *= alo;
                o[mi][i][1] *= alo;
                o[mi][i][2] *= ahi;
                o[mi][i][3] *= ahi;
            }
        }

        /* O += P V */
#pragma unroll
        for (int kc = 0; kc < BC / 16; kc++) {
            uint32_t a[MR][4];
#pragma unroll
            for (int mi = 0; mi < MR; mi++) {
                a[mi][0] = pack_bf16(s[mi][2 * kc][0], s[mi][2 * kc][1]);
                a[mi][1] = pack_bf16(s[mi][2 * kc][2], s[mi][2 * kc][3]);
                a[mi][2] = pack_bf16(s[mi][2 * kc + 1][0], s[mi][2 * kc + 1][1]);
                a[mi][3] = pack_bf16(s[mi][2 * kc + 1][2], s[mi][2 * kc + 1][3]);
            }
#pragma unroll
            for (int dp = 0; dp < ND / 2; dp++) {
                uint32_t bb[4];
                ldsm_x4_t(bb, sVs + (kc * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + dp * 16 +
                                  (lane >> 4) * 8);
#pragma unroll
                for (int mi = 0; mi < MR; mi++) {
                    mma16816(o[mi][2 * dp], a[mi], bb[0], bb[1]);
                    mma16816(o[mi][2 * dp + 1], a[mi], bb[2], bb[3]);
                }
            }
        }
    }

    /* finish: lse, then O / l staged in this warp's own rows of sQ (read only by this warp),
     * then 16-byte stores */
    bf16 *so = sQ + w * WR * LD;
    __syncwarp();
#pragma unroll
    for (int mi = 0; mi < MR; mi++) {
        float ls[2];
#pragma unroll
        for (int hi = 0; hi < 2; hi++) {
            float x = l[mi][hi];
            x += __shfl_xor_sync(0xffffffffu, x, 1);
            x += __shfl_xor_sync(0xffffffffu, x, 2);
            const int r = r0 + 16 * mi + 8 * hi;
            if (tq == 0 && r < T)
                lse[((size_t)b * Hq + h) * T + r] = (mx[mi][hi] + log2f(x)) * ATT_LN2;
            ls[hi] = x > 0.0f ? 1.0f / x : 0.0f;
        }
#pragma unroll
        for (int nt = 0; nt < ND; nt++) {
            *(uint32_t *)(so + (mi * 16 + g) * LD + nt * 8 + 2 * tq) =
                pack_bf16(o[mi][nt][0] * ls[0], o[mi][nt][1] * ls[0]);
            *(uint32_t *)(so + (mi * 16 + g + 8) * LD + nt * 8 + 2 * tq) =
                pack_bf16(o[mi][nt][2] * ls[1], o[mi][nt][3] * ls[1]);
        }
    }
    __syncwarp();
    for (int c = lane; c < WR * ND; c += 32) {
        int r = c / ND, cc = c % ND, t = m0 + w * WR + r;
        if (t < T)
            *(uint4 *)(out + ((size_t)b * T + t) * qs + (size_t)h * D + cc * 8) =
                *(const uint4 *)(so + r * LD + cc * 8);
    }
}

/* ---- backward ---- */

/* Dsum[b, h, t] = sum_e dout[n, h*D + e] * out[n, h*D + e] (n = b*T + t); D/8 threads per row. */
template <int D>
__global__ void att_bwd_dot_kernel(const bf16 *__restrict__ dout, const bf16 *__restrict__ out,
                                   float *__restrict__ Dsum, size_t rows, int T, int Hq) {
    zy_pdl_begin();
    constexpr int TPR = D / 8;
    size_t gid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t rh = gid / TPR;
    int part = (int)(gid % TPR);
    float acc = 0.0f;
    if (rh < rows) {
        uint4 a = *(const uint4 *)(dout + rh * D + part * 8);
        uint4 c = *(const uint4 *)(out + rh * D + part * 8);
        const uint32_t wa[4] = {a.x, a.y, a.z, a.w}, wc[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
        for (int i = 0; i < 4; i++) /* a bf16 is the top half of an fp32 */
            acc += __uint_as_float(wa[i] << 16) * __uint_as_float(wc[i] << 16) +
                   __uint_as_float(wa[i] & 0xffff0000u) * __uint_as_float(wc[i] & 0xffff0000u);
    }
#pragma unroll
    for (int off = TPR / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (rh < rows && part == 0) {
        size_t n = rh / Hq;
        int hh = (int)(rh % Hq);
        size_t bb = n / T, t = n % T;
        Dsum[(bb * Hq + hh) * T + t] = acc;
    }
}

/* Starts loading step `it` of a backward block (query head hk*G + it/nqt, query tile i0 +
 * it%nqt) into stage buffers: Q and dO tiles, lse and Dsum rows. */
template <int D, int BR, int NTH>
static __device__ __forceinline__ void
bwd_issue(bf16 *sQ, bf16 *sO, float *sL, float *sD, const bf16 *q, const bf16 *dout,
          const float *lse, const float *Dsum, int b, int h, int q0, int T, int Hq) {
    const size_t qs = (size_t)Hq * D, off = (size_t)b * T * qs + (size_t)h * D;
    load_tile<BR, D, NTH>(sQ, q + off, qs, q0, T);
    load_tile<BR, D, NTH>(sO, dout + off, qs, q0, T);
    const size_t lo = ((size_t)b * Hq + h) * T;
    load_vec<NTH>(sL, lse + lo, q0, BR, T);
    load_vec<NTH>(sD, Dsum + lo, q0, BR, T);
}

/* Grid (B*Hk, ceil(T/BC)), NW warps, BC = 16*NW keys per block, BR query rows per step. DQM
 * (ATT_DQ_*): STORED also writes dS (bf16, the values dK uses) into the tiles ds for
 * att_dq_stored_kernel; RECOMPUTE leaves dQ to att_dq_kernel. */
template <int D, int NW, int BR, int DQM>
__global__ void __launch_bounds__(NW * 32)
    att_bwd_kernel(const bf16 *__restrict__ q, const bf16 *__restrict__ k,
                   const bf16 *__restrict__ v, const bf16 *__restrict__ dout,
                   const float *__restrict__ lse, const float *__restrict__ Dsum,
                   bf16 *__restrict__ ds, bf16 *__restrict__ dk, bf16 *__restrict__ dv, int T,
                   int Hq, int Hk, float sl2, float scale, int window) {
    zy_pdl_begin();
    constexpr int BC = 16 * NW, LD = D + 8, LDS = BR + 8, NTH = NW * 32;
    constexpr int KD = D / 16, ND = D / 8, NQ = BR / 8;
    /* rows of the dS^T tile: the stored path stages each warp's 16 rows there on their way to
     * global memory */
    constexpr int SR = DQM != ATT_DQ_RECOMPUTE ? BC : 0;
    /* att_dq_stored_kernel reads every element of a 64 x 64 dS tile: the blocks must write whole
     * tiles (a key block of whole tiles, query steps that tile 64), or it would read scratch no
     * kernel wrote, and 0 times a leftover Inf is NaN */
    static_assert(DQM != ATT_DQ_STORED || (BC % ATT_DT == 0 && ATT_DT % BR == 0),
                  "stored dS: key blocks of whole 64-key tiles, query steps dividing 64");
    extern __shared__ __align__(16) unsigned char att_smem[];
    bf16 *sK = (bf16 *)att_smem;          /* [BC][LD] */
    bf16 *sV = sK + BC * LD;              /* [BC][LD] */
    bf16 *sQ = sV + BC * LD;              /* [2][BR][LD] */
    bf16 *sO = sQ + 2 * BR * LD;          /* [2][BR][LD] dout */
    bf16 *sS = sO + 2 * BR * LD;          /* [SR][LDS] dS^T */
    float *sL = (float *)(sS + SR * LDS); /* [2][BR] lse */
    float *sD = sL + 2 * BR;              /* [2][BR] Dsum */
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, tq = lane & 3;
    const int b = blockIdx.x / Hk, hk = blockIdx.x % Hk, G = Hq / Hk;
    const int n0 = blockIdx.y * BC;
    const size_t ks = (size_t)Hk * D;
    const int klast = min(n0 + BC, T) - 1;
    int tlast = window > 0 ? min(T - 1, klast + window - 1) : T - 1;
    /* stored dS: whole 64-query tiles (rows past the window or T get dS = 0, not garbage) */
    if (DQM == ATT_DQ_STORED) tlast = (tlast / ATT_DT + 1) * ATT_DT - 1;
    const int i0 = n0 / BR, nqt = tlast / BR - i0 + 1, total = G * nqt;

    load_tile<BC, D, NTH>(sK, k + (size_t)b * T * ks + (size_t)hk * D, ks, n0, T);
    load_tile<BC, D, NTH>(sV, v + (size_t)b * T * ks + (size_t)hk * D, ks, n0, T);
    bwd_issue<D, BR, NTH>(sQ, sO, sL, sD, q, dout, lse, Dsum, b, hk * G, i0 * BR, T, Hq);
    cp_async_commit();

    float dka[ND][4], dva[ND][4];
#pragma unroll
    for (int i = 0; i < ND; i++) {
        dka[i][0] = dka[i][1] = dka[i][2] = dka[i][3] = 0.0f;
        dva[i][0] = dva[i][1] = dva[i][2] = dva[i][3] = 0.0f;
    }
    const int klo = n0 + w * 16 + g, khi = klo + 8;

    for (int it = 0; it < total; it++) {
        const int st = it & 1;
        /* Step it-1 has no barrier after its reads of stage st^1: wait for stage st, then
         * one barrier (stage st visible, every warp done with st^1), then refill st^1. */
        cp_async_wait<0>();
        __syncthreads();
        if (it + 1 < total) {
            bwd_issue<D, BR, NTH>(sQ + (st ^ 1) * BR * LD, sO + (st ^ 1) * BR * LD,
                                  sL + (st ^ 1) * BR, sD + (st ^ 1) * BR, q, dout, lse, Dsum, b,
                                  hk * G + (it + 1) / nqt, (i0 + (it + 1) % nqt) * BR, T, Hq);
            cp_async_commit();
        }
        const int h = hk * G + it / nqt, q0 = (i0 + it % nqt) * BR;
        const bf16 *sQs = sQ + st * BR * LD, *sOs = sO + st * BR * LD;
        const float *sLs = sL + st * BR, *sDs = sD + st * BR;

        /* S^T = K Q^T and dP^T = V dO^T for this warp's 16 keys x BR queries */
        float sa[NQ][4], pa[NQ][4];
#pragma unroll
        for (int i = 0; i < NQ; i++) {
            sa[i][0] = sa[i][1] = sa[i][2] = sa[i][3] = 0.0f;
            pa[i][0] = pa[i][1] = pa[i][2] = pa[i][3] = 0.0f;
        }
#pragma unroll
        for (int kc = 0; kc < KD; kc++) {
            uint32_t a[4], av[4];
            ldsm_x4(a, sK + (w * 16 + (lane & 15)) * LD + kc * 16 + (lane >> 4) * 8);
            ldsm_x4(av, sV + (w * 16 + (lane & 15)) * LD + kc * 16 + (lane >> 4) * 8);
#pragma unroll
            for (int np = 0; np < NQ / 2; np++) {
                const int boff =
                    (np * 16 + (lane & 7) + (lane >> 4) * 8) * LD + kc * 16 + ((lane >> 3) & 1) * 8;
                uint32_t bb[4];
                ldsm_x4(bb, sQs + boff);
                mma16816(sa[2 * np], a, bb[0], bb[1]);
                mma16816(sa[2 * np + 1], a, bb[2], bb[3]);
                ldsm_x4(bb, sOs + boff);
                mma16816(pa[2 * np], av, bb[0], bb[1]);
                mma16816(pa[2 * np + 1], av, bb[2], bb[3]);
            }
        }

        /* P^T = exp(scale S^T - lse) (masked to 0), dS^T = P^T (dP^T - D) */
        const bool need_mask = q0 < n0 + BC - 1 || q0 + BR > T || n0 + BC > T ||
                               (window > 0 && n0 <= q0 + BR - 1 - window);
#pragma unroll
        for (int nt = 0; nt < NQ; nt++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int c = nt * 8 + 2 * tq + (e & 1);
                float p = ex2(sa[nt][e] * sl2 - sLs[c] * ATT_LOG2E);
                if (need_mask && !att_visible(q0 + c, e < 2 ? klo : khi, T, window)) p = 0.0f;
                sa[nt][e] = p;
                pa[nt][e] = p * (pa[nt][e] - sDs[c]);
            }
        }

        /* dV += P^T dO and dK += dS^T Q (k = queries) */
#pragma unroll
        for (int kq = 0; kq < BR / 16; kq++) {
            uint32_t ap[4] = {pack_bf16(sa[2 * kq][0], sa[2 * kq][1]),
                              pack_bf16(sa[2 * kq][2], sa[2 * kq][3]),
                              pack_bf16(sa[2 * kq + 1][0], sa[2 * kq + 1][1]),
                              pack_bf16(sa[2 * kq + 1][2], sa[2 * kq + 1][3])};
            uint32_t as[4] = {pack_bf16(pa[2 * kq][0], pa[2 * kq][1]),
                              pack_bf16(pa[2 * kq][2], pa[2 * kq][3]),
                              pack_bf16(pa[2 * kq + 1][0], pa[2 * kq + 1][1]),
                              pack_bf16(pa[2 * kq + 1][2], pa[2 * kq + 1][3])};
#pragma unroll
            for (int dp = 0; dp < ND / 2; dp++) {
                const int boff =
                    (kq * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + dp * 16 + (lane >> 4) * 8;
                uint32_t bb[4];
                ldsm_x4_t(bb, sOs + boff);
                mma16816(dva[2 * dp], ap, bb[0], bb[1]);
                mma16816(dva[2 * dp + 1], ap, bb[2], bb[3]);
                ldsm_x4_t(bb, sQs + boff);
                mma16816(dka[2 * dp], as, bb[0], bb[1]);
                mma16816(dka[2 * dp + 1], as, bb[2], bb[3]);
            }
        }

        if constexpr (DQM == ATT_DQ_STORED) {
            /* this warp's 16 x BR block of dS^T into its tile (key tile kt, query tile qt), unless
             * the tile lies above the diagonal (every entry masked: never read): through the
             * warp's own rows of sS, so that the global stores are whole 16-byte pieces of
             * consecutive tile rows */
            const int kt = (n0 + w * 16) / ATT_DT, qt = q0 / ATT_DT;
            if (kt <= qt) {
                bf16 *sw = sS + w * 16 * LDS;
                __syncwarp(); /* the previous step's reads of these rows are done */
#pragma unroll
                for (int nt = 0; nt < NQ; nt++) {
                    *(uint32_t *)(sw + g * LDS + nt * 8 + 2 * tq) = pack_bf16(pa[nt][0], pa[nt][1]);
                    *(uint32_t *)(sw + (g + 8) * LDS + nt * 8 + 2 * tq) =
                        pack_bf16(pa[nt][2], pa[nt][3]);
                }
                __syncwarp();
                bf16 *tile =
                    ds + (((size_t)b * Hq + h) * att_ds_tiles(T) + (size_t)qt * (qt + 1) / 2 + kt) *
                             (ATT_DT * ATT_DT);
                bf16 *dst = tile + ((n0 + w * 16) % ATT_DT) * ATT_DT + q0 % ATT_DT;
#pragma unroll
                for (int c = lane; c < 16 * (BR / 8); c += 32) {
                    const int r = c / (BR / 8), cc = c % (BR / 8);
                    *(uint4 *)(dst + r * ATT_DT + cc * 8) = *(const uint4 *)(sw + r * LDS + cc * 8);
                }
            }
        }
    }

    /* dK (times scale) and dV: stage each warp's 16 rows in sK / sV, then 16-byte stores */
    __syncthreads(); /* every warp is done with the loop before its rows are restaged */
    bf16 *sk = sK + w * 16 * LD, *sv = sV + w * 16 * LD;
#pragma unroll
    for (int nt = 0; nt < ND; nt++) {
        *(uint32_t *)(sk + g * LD + nt * 8 + 2 * tq) =
            pack_bf16(dka[nt][0] * scale, dka[nt][1] * scale);
        *(uint32_t *)(sk + (g + 8) * LD + nt * 8 + 2 * tq) =
            pack_bf16(dka[nt][2] * scale, dka[nt][3] * scale);
        *(uint32_t *)(sv + g * LD + nt * 8 + 2 * tq) = pack_bf16(dva[nt][0], dva[nt][1]);
        *(uint32_t *)(sv + (g + 8) * LD + nt * 8 + 2 * tq) = pack_bf16(dva[nt][2], dva[nt][3]);
    }
    __syncwarp();
    for (int c = lane; c < 16 * ND; c += 32) {
        int r = c / ND, cc = c % ND, s = n0 + w * 16 + r;
        if (s < T) {
            size_t off = ((size_t)b * T + s) * ks + (size_t)hk * D + cc * 8;
            *(uint4 *)(dk + off) = *(const uint4 *)(sk + r * LD + cc * 8);
            *(uint4 *)(dv + off) = *(const uint4 *)(sv + r * LD + cc * 8);
        }
    }
}

/* ---- deterministic dQ ---- */

/* One warp's 16 rows t0.. of dq (rows at dst + t * stride) = bf16(scale * acc), the m16 x D
 * accumulator fragments staged in so [16][D + 8] (rows only this warp touches), then 16-byte
 * stores; rows past T are dropped. */
template <int D>
static __device__ __forceinline__ void att_store_dq_rows(bf16 *dst, size_t stride, int t0, int T,
                                                         bf16 *so, const float (&acc)[D / 8][4],
                                                         float scale) {
    constexpr int ND = D / 8, LD = D + 8;
    const int lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int nt = 0; nt < ND; nt++) {
        *(uint32_t *)(so + g * LD + nt * 8 + 2 * tq) =
            pack_bf16(acc[nt][0] * scale, acc[nt][1] * scale);
        *(uint32_t *)(so + (g + 8) * LD + nt * 8 + 2 * tq) =
            pack_bf16(acc[nt][2] * scale, acc[nt][3] * scale);
    }
    __syncwarp();
    for (int c = lane; c < 16 * ND; c += 32) {
        const int r = c / ND, cc = c % ND, t = t0 + r;
        if (t < T)
            *(uint4 *)(dst + (size_t)t * stride + cc * 8) = *(const uint4 *)(so + r * LD + cc * 8);
    }
}

#define ATT_DQ_NW 4 /* warps of att_dq_kernel: 16 query rows each */

/* dq = scale * dS K without atomics. Grid (B*Hq, ceil(T/BR)), BR = 16*ATT_DQ_NW query rows per
 * block (tiles in reverse, the longest first); each warp owns 16 rows and reads their Q and dO
 * fragments from shared memory at each use (registers go to the dQ accumulator). Key/value tiles
 * of ATT_BC rows stream through a two-stage cp.async buffer in increasing order, the same order
 * on every call; per tile S = Q K^T and dP = dO V^T, P = exp(scale S - lse) (0 where masked),
 * dS = P (dP - D), dQ += dS K. */
template <int D>
__global__ void __launch_bounds__(ATT_DQ_NW * 32)
    att_dq_kernel(const bf16 *__restrict__ q, const bf16 *__restrict__ k,
                  const bf16 *__restrict__ v, const bf16 *__restrict__ dout,
                  const float *__restrict__ lse, const float *__restrict__ Dsum,
                  bf16 *__restrict__ dq, int T, int Hq, int Hk, float sl2, float scale,
                  int window) {
    zy_pdl_begin();
    constexpr int NW = ATT_DQ_NW, BR = 16 * NW, BC = ATT_BC, LD = D + 8, NTH = NW * 32;
    constexpr int KD = D / 16, ND = D / 8, NS = BC / 8;
    extern __shared__ __align__(16) unsigned char att_smem[];
    bf16 *sQ = (bf16 *)att_smem; /* [BR][LD] */
    bf16 *sO = sQ + BR * LD;     /* [BR][LD] dout */
    bf16 *sK = sO + BR * LD;     /* [2][BC][LD] */
    bf16 *sV = sK + 2 * BC * LD; /* [2][BC][LD] */
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, tq = lane & 3;
    const int b = blockIdx.x / Hq, h = blockIdx.x % Hq, hk = h / (Hq / Hk);
    const int m0 = (gridDim.y - 1 - blockIdx.y) * BR;
    const size_t qs = (size_t)Hq * D, ks = (size_t)Hk * D;
    const size_t qoff = (size_t)b * T * qs + (size_t)h * D;
    const bf16 *kb = k + (size_t)b * T * ks + (size_t)hk * D;
    const bf16 *vb = v + (size_t)b * T * ks + (size_t)hk * D;
    const int qlast = min(m0 + BR, T) - 1;
    const int kfirst = window > 0 ? max(0, m0 - window + 1) : 0;
    const int j0 = kfirst / BC, j1 = qlast / BC;
    const bf16 *sQw = sQ + w * 16 * LD, *sOw = sO + w * 16 * LD; /* this warp's rows */

    load_tile<BR, D, NTH>(sQ, q + qoff, qs, m0, T);
    load_tile<BR, D, NTH>(sO, dout + qoff, qs, m0, T);
    load_tile<BC, D, NTH>(sK, kb, ks, j0 * BC, T);
    load_tile<BC, D, NTH>(sV, vb, ks, j0 * BC, T);
    cp_async_commit();

    /* lse (to the exp2 domain) and D of this thread's rows r0 and r0 + 8; 0 past T, where Q and
     * dO are zero-filled, so those rows get finite dS = P * (0 - 0) and are never stored */
    const int r0 = m0 + w * 16 + g;
    const size_t lo = ((size_t)b * Hq + h) * T;
    float ll[2], dd[2];
#pragma unroll
    for (int hi = 0; hi < 2; hi++) {
        const int r = r0 + 8 * hi;
        ll[hi] = r < T ? lse[lo + r] * ATT_LOG2E : 0.0f;
        dd[hi] = r < T ? Dsum[lo + r] : 0.0f;
    }
    float acc[ND][4];
#pragma unroll
    for (int i = 0; i < ND; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
    cp_async_wait<0>();
    __syncthreads();

    for (int j = j0; j <= j1; j++) {
        const int st = (j - j0) & 1;
        if (j > j0) __syncthreads(); /* every warp is done with tile j-1 (buffer st^1) */
        if (j < j1) {
            load_tile<BC, D, NTH>(sK + (st ^ 1) * BC * LD, kb, ks, (j + 1) * BC, T);
            load_tile<BC, D, NTH>(sV + (st ^ 1) * BC * LD, vb, ks, (j + 1) * BC, T);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads(); /* tile j visible to every warp */
        const bf16 *sKs = sK + st * BC * LD, *sVs = sV + st * BC * LD;
        const int n0 = j * BC;

        /* S = Q K^T and dP = dO V^T for 16 rows x BC keys */
        float sa[NS][4], pa[NS][4];
#pragma unroll
        for (int i = 0; i < NS; i++) {
            sa[i][0] = sa[i][1] = sa[i][2] = sa[i][3] = 0.0f;
            pa[i][0] = pa[i][1] = pa[i][2] = pa[i][3] = 0.0f;
        }
#pragma unroll
        for (int kc = 0; kc < KD; kc++) {
            uint32_t a[4], ao[4];
            ldsm_x4(a, sQw + (lane & 15) * LD + kc * 16 + (lane >> 4) * 8);
            ldsm_x4(ao, sOw + (lane & 15) * LD + kc * 16 + (lane >> 4) * 8);
#pragma unroll
            for (int np = 0; np < NS / 2; np++) {
                const int boff =
                    (np * 16 + (lane & 7) + (lane >> 4) * 8) * LD + kc * 16 + ((lane >> 3) & 1) * 8;
                uint32_t bb[4];
                ldsm_x4(bb, sKs + boff);
                mma16816(sa[2 * np], a, bb[0], bb[1]);
                mma16816(sa[2 * np + 1], a, bb[2], bb[3]);
                ldsm_x4(bb, sVs + boff);
                mma16816(pa[2 * np], ao, bb[0], bb[1]);
                mma16816(pa[2 * np + 1], ao, bb[2], bb[3]);
            }
        }

        /* P = exp(scale S - lse), masked to 0; dS = P (dP - D), kept in sa */
        const bool need_mask =
            n0 + BC - 1 > m0 || n0 + BC > T || (window > 0 && n0 <= m0 + BR - 1 - window);
#pragma unroll
        for (int nt = 0; nt < NS; nt++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int hi = e >> 1;
                float p = ex2(sa[nt][e] * sl2 - ll[hi]);
                if (need_mask &&
                    !att_visible(r0 + 8 * hi, n0 + nt * 8 + 2 * tq + (e & 1), T, window))
                    p = 0.0f;
                sa[nt][e] = p * (pa[nt][e] - dd[hi]);
            }
        }

        /* dQ += dS K (k = keys) */
#pragma unroll
        for (int kc = 0; kc < BC / 16; kc++) {
            const uint32_t a[4] = {pack_bf16(sa[2 * kc][0], sa[2 * kc][1]),
                                   pack_bf16(sa[2 * kc][2], sa[2 * kc][3]),
                                   pack_bf16(sa[2 * kc + 1][0], sa[2 * kc + 1][1]),
                                   pack_bf16(sa[2 * kc + 1][2], sa[2 * kc + 1][3])};
#pragma unroll
            for (int dp = 0; dp < ND / 2; dp++) {
                uint32_t bb[4];
                ldsm_x4_t(bb, sKs + (kc * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + dp * 16 +
                                  (lane >> 4) * 8);
                mma16816(acc[2 * dp], a, bb[0], bb[1]);
                mma16816(acc[2 * dp + 1], a, bb[2], bb[3]);
            }
        }
    }

    /* dq = scale * dQ, staged in this warp's own rows of sQ (read only by this warp) */
    __syncwarp();
    att_store_dq_rows<D>(dq + (size_t)b * T * qs + (size_t)h * D, qs, m0 + w * 16, T,
                         sQ + w * 16 * LD, acc, scale);
}

/* ---- dQ from the stored dS ---- */

/* dq = scale * dS K from the tiles att_bwd_kernel<..., ATT_DQ_STORED> wrote. Grid
 * (B*Hq/GB, ceil(T/64)), query tiles in reverse (the longest first): a block takes GB query heads
 * of one GQA group (they share K) and one tile of 64 query rows, 4 warps of 16 rows per head. The
 * GB dS^T tiles [64 keys][64 queries] and the group's K tile stream through a two-stage cp.async
 * buffer, key tiles in increasing order (the same order on every call); A = dS comes from the
 * transposed tile by ldmatrix.trans. One T x T x d product instead of att_dq_kernel's three. */
template <int D, int GB>
__global__ void __launch_bounds__(GB *ATT_DQ_NW * 32)
    att_dq_stored_kernel(const bf16 *__restrict__ ds, const bf16 *__restrict__ k,
                         bf16 *__restrict__ dq, int T, int Hq, int Hk, float scale, int window) {
    zy_pdl_begin();
    constexpr int NW = ATT_DQ_NW * GB, BR = ATT_DT, LD = D + 8, LDT = ATT_DT + 8, NTH = NW * 32;
    constexpr int ND = D / 8, TILE = ATT_DT * LDT;
    static_assert(16 * ATT_DQ_NW == ATT_DT, "one warp per 16 query rows of a tile");
    extern __shared__ __align__(16) unsigned char att_smem[];
    bf16 *sS = (bf16 *)att_smem;   /* [2][GB][64 keys][LDT] dS^T */
    bf16 *sK = sS + 2 * GB * TILE; /* [2][64][LD] */
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int wh = w / ATT_DQ_NW, wr = w % ATT_DQ_NW; /* this warp's head (of GB) and rows */
    const int hb = Hq / GB, b = blockIdx.x / hb, h0 = (blockIdx.x % hb) * GB, hk = h0 / (Hq / Hk);
    const int it = gridDim.y - 1 - blockIdx.y, m0 = it * BR;
    const size_t qs = (size_t)Hq * D, ks = (size_t)Hk * D, ntile = att_ds_tiles(T);
    const bf16 *kb = k + (size_t)b * T * ks + (size_t)hk * D;
    const bf16 *dsb = ds + (((size_t)b * Hq + h0) * ntile + (size_t)it * (it + 1) / 2) *
                               (ATT_DT * ATT_DT); /* head h0's tile (it, 0) */
    const int kfirst = window > 0 ? max(0, m0 - window + 1) : 0;
    const int j0 = kfirst / ATT_DT, j1 = it;

    /* key tile j: the GB dS^T tiles (rows of 128 contiguous bytes) and the K tile */
    auto issue = [&](int j, int st) {
        for (int c = threadIdx.x; c < GB * ATT_DT * (ATT_DT / 8); c += NTH) {
            const int hh = c / (ATT_DT * ATT_DT / 8), r = (c / (ATT_DT / 8)) % ATT_DT,
                      cc = c % (ATT_DT / 8);
            const bf16 *src = dsb + ((size_t)hh * ntile + j) * ATT_DT * ATT_DT;
            cp_async16(smem_u32(sS + (st * GB + hh) * TILE + r * LDT + cc * 8),
                       src + r * ATT_DT + cc * 8, true);
        }
        load_tile<ATT_DT, D, NTH>(sK + st * ATT_DT * LD, kb, ks, j * ATT_DT, T);
        cp_async_commit();
    };
    float acc[ND][4];
#pragma unroll
    for (int i = 0; i < ND; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
    issue(j0, 0);
    for (int j = j0; j <= j1; j++) {
        const int st = (j - j0) & 1;
        if (j < j1) {
            issue(j + 1, st ^ 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads(); /* tile j visible to every warp */
        const bf16 *sSs = sS + (st * GB + wh) * TILE, *sKs = sK + st * ATT_DT * LD;
#pragma unroll
        for (int kk = 0; kk < ATT_DT / 16; kk++) {
            uint32_t a[4];
            ldsm_x4_t(a, sSs + (kk * 16 + (lane & 7) + (lane >> 4) * 8) * LDT + wr * 16 +
                             ((lane >> 3) & 1) * 8);
#pragma unroll
            for (int dp = 0; dp < ND / 2; dp++) {
                uint32_t bb[4];
                ldsm_x4_t(bb, sKs + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + dp * 16 +
                                  (lane >> 4) * 8);
                mma16816(acc[2 * dp], a, bb[0], bb[1]);
                mma16816(acc[2 * dp + 1], a, bb[2], bb[3]);
            }
        }
        __syncthreads(); /* every warp is done with stage st before it is refilled */
    }

    /* dq = scale * dQ, staged in this warp's rows of the dS buffers (free after the barrier:
     * NW * 16 rows of D + 8 fit in the 2 * GB tiles) */
    att_store_dq_rows<D>(dq + (size_t)b * T * qs + (size_t)(h0 + wh) * D, qs, m0 + wr * 16, T,
                         sS + w * 16 * LD, acc, scale);
}

/* ---- host side ---- */

static inline int att_cuda_ok(cudaError_t e, const char *what) {
    if (e != cudaSuccess)
        return zy_fail_runtime("cuda attention: %s failed: %s", what, cudaGetErrorString(e));
    return ZY_OK;
}

/* Raises a kernel's dynamic shared-memory limit to smem bytes and asks for the largest carveout. */
static inline int att_set_smem(const void *fn, size_t smem) {
    if (smem > 48 * 1024)
        ZY_TRY(att_cuda_ok(
            cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
            "raising the shared-memory limit"));
    return att_cuda_ok(cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout,
                                            (int)cudaSharedmemCarveoutMaxShared),
                       "setting the shared-memory carveout");
}

template <int D, int NW, int MR>
static int att_launch_fwd(const bf16 *q, const bf16 *k, const bf16 *v, bf16 *out, float *lse, int B,
                          int T, int Hq, int Hk, float scale, int window, cudaStream_t s) {
    constexpr int BR = 16 * MR * NW;
    const size_t smem = (size_t)(BR + 4 * ATT_BC) * (D + 8) * sizeof(bf16);
    ZY_TRY(att_set_smem((const void *)att_fwd_kernel<D, NW, MR>, smem));
    dim3 grid((unsigned)(B * Hq), (unsigned)((T + BR - 1) / BR));
    zy_launch(att_fwd_kernel<D, NW, MR>, grid, NW * 32, smem, s, q, k, v, out, lse, T, Hq, Hk,
              scale * ATT_LOG2E, window);
    return att_cuda_ok(cudaGetLastError(), "forward kernel launch");
}

template <int D, int GB>
static int att_launch_dq_stored(const bf16 *ds, const bf16 *k, bf16 *dq, int B, int T, int Hq,
                                int Hk, float scale, int window, cudaStream_t s) {
    const size_t smem = (size_t)2 * ATT_DT * (GB * (ATT_DT + 8) + (D + 8)) * sizeof(bf16);
    ZY_TRY(att_set_smem((const void *)att_dq_stored_kernel<D, GB>, smem));
    dim3 grid((unsigned)(B * Hq / GB), (unsigned)((T + ATT_DT - 1) / ATT_DT));
    zy_launch(att_dq_stored_kernel<D, GB>, grid, GB * ATT_DQ_NW * 32, smem, s, ds, k, dq, T, Hq, Hk,
              scale, window);
    return att_cuda_ok(cudaGetLastError(), "stored-dS dq kernel launch");
}

template <int D, int NW, int BR, int DQM>
static int att_launch_bwd(const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v,
                          const bf16 *out, const float *lse, bf16 *dq, bf16 *dk, bf16 *dv, bf16 *ds,
                          float *Dsum, int B, int T, int Hq, int Hk, float scale, int window,
                          cudaStream_t s) {
    constexpr int BC = 16 * NW;
    const size_t rows = (size_t)B * T * Hq;
    const size_t dot_threads = rows * (D / 8);
    zy_launch(att_bwd_dot_kernel<D>, (unsigned)((dot_threads + 255) / 256), 256, 0, s, dout, out,
              Dsum, rows, T, Hq);
    ZY_TRY(att_cuda_ok(cudaGetLastError(), "backward row-sum kernel launch"));
    const size_t smem = (size_t)(2 * BC + 4 * BR) * (D + 8) * sizeof(bf16) +
                        (DQM != ATT_DQ_RECOMPUTE ? (size_t)BC * (BR + 8) * sizeof(bf16) : 0) +
                        4 * BR * sizeof(float);
    ZY_TRY(att_set_smem((const void *)att_bwd_kernel<D, NW, BR, DQM>, smem));
    dim3 grid((unsigned)(B * Hk), (unsigned)((T + BC - 1) / BC));
    zy_launch(att_bwd_kernel<D, NW, BR, DQM>, grid, NW * 32, smem, s, q, k, v, dout, lse, Dsum, ds,
              dk, dv, T, Hq, Hk, scale * ATT_LOG2E, scale, window);
    ZY_TRY(att_cuda_ok(cudaGetLastError(), "backward kernel launch"));
    if (DQM == ATT_DQ_STORED) {
        /* two query heads per block when the group allows: on an H100 at d = 128, T = 2048,
         * 0.690 ms for the whole backward against 0.721 with one head and 0.707 with four
         * (dev/test_attention_variants --bench) */
        if ((Hq / Hk) % 2 == 0)
            return att_launch_dq_stored<D, 2>(ds, k, dq, B, T, Hq, Hk, scale, window, s);
        return att_launch_dq_stored<D, 1>(ds, k, dq, B, T, Hq, Hk, scale, window, s);
    }
    constexpr int BQ = 16 * ATT_DQ_NW;
    const size_t dsmem = (size_t)(2 * BQ + 4 * ATT_BC) * (D + 8) * sizeof(bf16);
    ZY_TRY(att_set_smem((const void *)att_dq_kernel<D>, dsmem));
    dim3 dgrid((unsigned)(B * Hq), (unsigned)((T + BQ - 1) / BQ));
    zy_launch(att_dq_kernel<D>, dgrid, ATT_DQ_NW * 32, dsmem, s, q, k, v, dout, lse, Dsum, dq, T,
              Hq, Hk, scale * ATT_LOG2E, scale, window);
    return att_cuda_ok(cudaGetLastError(), "dq kernel launch");
}

/* Shared argument checks; returns ZY_OK or the failure. */
static inline int att_check_args(const char *fn, int B, int T, int Hq, int Hk, int d, float scale,
                                 const void *const *ptrs, int nptr) {
    if (B < 0 || T < 0 || Hq < 1 || Hk < 1 || Hq % Hk != 0)
        return zy_fail("%s: impossible shape B=%d T=%d Hq=%d Hk=%d (need B, T >= 0, Hq a "
                       "multiple of Hk >= 1)",
                       fn, B, T, Hq, Hk);
    if (d != 16 && d != 32 && d != 64 && d != 128)
        return zy_fail("%s: head dim %d not supported (16, 32, 64 or 128)", fn, d);
    if (!isfinite(scale)) return zy_fail("%s: scale %g is not finite", fn, (double)scale);
    if ((T + 15) / 16 > 65535) return zy_fail("%s: T=%d too long (grid limit)", fn, T);
    for (int i = 0; i < nptr; i++)
        if (((uintptr_t)ptrs[i] & 15) != 0)
            return zy_fail("%s: pointer argument %d is not 16-byte aligned", fn, i);
    return ZY_OK;
}

/* ---- host helpers shared by the entry points ---- */

/* The stored dS grows as T^2: past this many bytes (long contexts) the default dq recomputes. */
#define ATT_DS_MAX_BYTES ((size_t)1 << 30)

/* Dsum [B*Hq*T] fp32 rounded up to 256 bytes: where the dS tiles start in the scratch. */
static inline size_t att_dsum_bytes(int B, int T, int Hq) {
    return ((size_t)B * T * Hq * sizeof(float) + 255) & ~(size_t)255;
}

/* The default dq path: stored dS while its tiles take at most ATT_DS_MAX_BYTES, else
 * recomputing. */
static inline int att_dq_default(int B, int T, int Hq) {
    const size_t ds = (size_t)B * Hq * att_ds_tiles(T) * ATT_DT * ATT_DT * sizeof(bf16);
    return ds <= ATT_DS_MAX_BYTES ? ATT_DQ_STORED : ATT_DQ_RECOMPUTE;
}

/* Scratch bytes of the backward on dq path mode: Dsum, then (stored path) the dS tiles. */
static inline size_t att_bwd_scratch(int B, int T, int Hq, int d, int mode) {
    if (B <= 0 || T <= 0 || Hq <= 0 || d <= 0) return 0;
    if (mode == ATT_DQ_RECOMPUTE) return (size_t)B * T * Hq * sizeof(float);
    return att_dsum_bytes(B, T, Hq) +
           (size_t)B * Hq * att_ds_tiles(T) * ATT_DT * ATT_DT * sizeof(bf16);
}

/* The backward's checks: the arguments, then (unless B or T is 0) scratch of at least need
 * bytes. */
static inline int att_bwd_check(const char *fn, const void *const *ptrs, int B, int T, int Hq,
                                int Hk, int d, float scale, const void *scratch,
                                size_t scratch_bytes, size_t need) {
    ZY_TRY(att_check_args(fn, B, T, Hq, Hk, d, scale, ptrs, 10));
    if (B == 0 || T == 0) return ZY_OK;
    if (scratch == NULL || scratch_bytes < need)
        return zy_fail("%s: scratch of %zu bytes given, %zu needed", fn, scratch_bytes, need);
    return ZY_OK;
}

/* The backward for one (D, warps, rows per step, dq path), its scratch carved into Dsum [B, Hq, T]
 * and (stored path) the dS tiles; arguments checked. */
template <int D, int NW, int BR, int DQM>
static int att_bwd_run(const void *dout, const void *q, const void *k, const void *v,
                       const void *out, const float *lse, void *dq, void *dk, void *dv,
                       void *scratch, int B, int T, int Hq, int Hk, float scale, int window,
                       cudaStream_t s) {
    float *Dsum = (float *)scratch;
    bf16 *ds = DQM == ATT_DQ_STORED ? (bf16 *)((char *)scratch + att_dsum_bytes(B, T, Hq)) : NULL;
    return att_launch_bwd<D, NW, BR, DQM>(
        (const bf16 *)dout, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, (const bf16 *)out,
        lse, (bf16 *)dq, (bf16 *)dk, (bf16 *)dv, ds, Dsum, B, T, Hq, Hk, scale, window, s);
}

#endif
