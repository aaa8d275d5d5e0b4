/* CCA ops of ops.h on CUDA: the value delay, QK norm + key temperature + partial RoPE (forward and
 * backward) and decoding attention. The two convolutions with the mean residuals
 * (cuda_ops_cca_conv_fwd/bwd) live in cca_conv.cu. All memory-bound: 16-byte vectors where the
 * widths and pointers allow (else element by element), one block per row for the norms, fp32
 * arithmetic; dtemp is summed in a fixed order. */
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/cuda_state.h"

#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

typedef __nv_bfloat16 bf16;

#define CCA_ROPE_MAXHALF 128 /* rot/2 of the GPU RoPE (d up to 256) */

/* ---- value delay ---- */

/* Copies W bf16 (16 bytes when W = 8), or zeros when src is NULL. */
template <int W> static __device__ __forceinline__ void vd_copy(bf16 *dst, const bf16 *src) {
    if constexpr (W == 8) {
        *reinterpret_cast<uint4 *>(dst) =
            src ? *reinterpret_cast<const uint4 *>(src) : make_uint4(0, 0, 0, 0);
    } else {
#pragma unroll
        for (int e = 0; e < W; e++) dst[e] = src ? src[e] : __float2bfloat16_rn(0.0f);
    }
}

/* v[n] = [vv[n, :half] | vv[n-1, half:]] (prev [B, half] or zeros at t = 0). */
template <int W>
__global__ void vdelay_fwd_k(bf16 *v, const bf16 *vv, const bf16 *prev, int T, int half,
                             size_t units) {
    zy_pdl_begin();
    const int per = 2 * half / W;
    for (size_t u = blockIdx.x * (size_t)blockDim.x + threadIdx.x; u < units;
         u += (size_t)gridDim.x * blockDim.x) {
        const size_t n = u / per;
        const int e = (int)(u - n * per) * W, t = (int)(n % T);
        const bf16 *src;
        if (e < half)
            src = vv + n * 2 * half + e;
        else if (t > 0)
            src = vv + (n - 1) * 2 * half + e;
        else
            src = prev ? prev + (n / T) * half + (e - half) : nullptr;
        vd_copy<W>(v + n * 2 * half + e, src);
    }
}

/* dvv[n] = [dv[n, :half] | dv[n+1, half:]] (0 at t = T-1). */
template <int W>
__global__ void vdelay_bwd_k(bf16 *dvv, const bf16 *dv, int T, int half, size_t units) {
    zy_pdl_begin();
    const int per = 2 * half / W;
    for (size_t u = blockIdx.x * (size_t)blockDim.x + threadIdx.x; u < units;
         u += (size_t)gridDim.x * blockDim.x) {
        const size_t n = u / per;
        const int e = (int)(u - n * per) * W, t = (int)(n % T);
        const bf16 *src = e < half    ? dv + n * 2 * half + e
                          : t + 1 < T ? dv + (n + 1) * 2 * half + e
                                      : nullptr;
        vd_copy<W>(dvv + n * 2 * half + e, src);
    }
}

/* v [B*T, 2*half] = [vcur | vdel one step back] from vv = [vcur | vdel] (prev [B, half] or zeros
 * at t = 0). */
void cuda_ops_value_delay_fwd(zy_ctx *ctx, zy_act *v, const zy_act *vv, const zy_act *prev, int B,
                              int T, int half) {
    ZY_CHECK(B >= 0 && T >= 0 && half >= 0);
    size_t rows = (size_t)B * T;
    if (rows == 0 || half == 0) return;
    cudaStream_t st = cuda_stream(ctx);
    int vec =
        half % 8 == 0 && zy_aligned(v, 16) && zy_aligned(vv, 16) && (!prev || zy_aligned(prev, 16));
    size_t units = rows * 2 * half / (vec ? 8 : 1);
    if (vec)
        zy_launch(vdelay_fwd_k<8>, zy_grid_blocks(units), 256, 0, st, (bf16 *)v, (const bf16 *)vv,
                  (const bf16 *)prev, T, half, units);
    else
        zy_launch(vdelay_fwd_k<1>, zy_grid_blocks(units), 256, 0, st, (bf16 *)v, (const bf16 *)vv,
                  (const bf16 *)prev, T, half, units);
    ZY_CUDA_CHECK_LAUNCH();
}

/* dvv [B*T, 2*half] (overwritten) from dv [B*T, 2*half]. */
void cuda_ops_value_delay_bwd(zy_ctx *ctx, zy_act *dvv, const zy_act *dv, int B, int T, int half) {
    ZY_CHECK(B >= 0 && T >= 0 && half >= 0);
    size_t rows = (size_t)B * T;
    if (rows == 0 || half == 0) return;
    cudaStream_t st = cuda_stream(ctx);
    int vec = half % 8 == 0 && zy_aligned(dvv, 16) && zy_aligned(dv, 16);
    size_t units = rows * 2 * half / (vec ? 8 : 1);
    if (vec)
        zy_launch(vdelay_bwd_k<8>, zy_grid_blocks(units), 256, 0, st, (bf16 *)dvv, (const bf16 *)dv,
                  T, half, units);
    else
        zy_launch(vdelay_bwd_k<1>, zy_grid_blocks(units), 256, 0, st, (bf16 *)dvv, (const bf16 *)dv,
                  T, half, units);
    ZY_CUDA_CHECK_LAUNCH();
}

/* ---- QK norm + key temperature + partial RoPE ---- */

/* inv_freq as a kernel argument (no copy, no sync). */
typedef struct {
    float v[CCA_ROPE_MAXHALF];
} rope_freqs;

/* inv_freq[i] = 1 / theta^(2i/rot) in fp32 exactly as the CPU op (and HF's init) computes it:
 * fp32 exponent, fp32 powf, fp32 reciprocal, so both sides rotate by the same fp32 angles. */
static rope_freqs rope_host_freqs(int rot, double theta) {
    rope_freqs f;
    for (int i = 0; i < CCA_ROPE_MAXHALF; i++) f.v[i] = 0.0f;
    for (int i = 0; i < rot / 2; i++) {
        float e = (float)(2 * i) / (float)rot;
        f.v[i] = 1.0f / powf((float)theta, e);
    }
    return f;
}

/* Shared-memory layout of a row block: x [H*d], then cos/sin [half] each, then per head two
 * coefficients [H] each. */
static size_t qk_smem(int H, int d, int half, int nx) {
    return ((size_t)nx * H * d + 2 * (size_t)half + 2 * (size_t)H) * sizeof(float);
}

/* Sum over the warp (every lane gets it). */
static __device__ __forceinline__ float qk_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Forward, one block per row n: stage the row's Hq + Hk input heads in fp32, cos/sin of
 * pos[n] * inv_freq, one warp per head for the clamped norm, then every element:
 * y = x * (sqrt(d) / nrm) [* temp], rotated against its rotate-half partner. W = elements per
 * vector (8 when d % 8 == 0 and the pointers are 16-byte aligned). */
template <int W>
__global__ void qknorm_fwd_k(bf16 *q, bf16 *k, float *qn, float *kn, const bf16 *q_in,
                             const bf16 *k_in, const float *temp, const int32_t *pos, int Hq,
                             int Hk, int d, int half, float sqrtd, float eps, rope_freqs fr) {
    zy_pdl_begin();
    extern __shared__ float qk_sm[];
    const int H = Hq + Hk, Qd = Hq * d, Kd = Hk * d, Wd = H * d;
    float *sx = qk_sm, *cs = sx + Wd, *sn = cs + half, *fh = sn + half, *th = fh + H;
    const size_t n = blockIdx.x;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = blockDim.x >> 5;
    for (int e = tid * W; e < Wd; e += blockDim.x * W) {
        const bool isq = e < Qd;
        const bf16 *p = isq ? q_in + n * Qd + e : k_in + n * Kd + (e - Qd);
        float x[W];
        zy_load<bf16, W>(p, x);
#pragma unroll
        for (int i = 0; i < W; i++) sx[e + i] = x[i];
    }
    const float pf = (float)pos[n];
    for (int i = tid; i < half; i += blockDim.x) sincosf(pf * fr.v[i], &sn[i], &cs[i]);
    __syncthreads();
    for (int h = warp; h < H; h += nw) {
        float ss = 0.0f;
        for (int e = lane; e < d; e += 32) ss = fmaf(sx[h * d + e], sx[h * d + e], ss);
        ss = qk_warp_sum(ss);
        if (lane == 0) {
            float nrm = sqrtf(ss);
            if (nrm < eps) nrm = eps;
            fh[h] = (1.0f / nrm) * sqrtd; /* as HF: reciprocal(norm) * scale in fp32 */
            th[h] = h < Hq ? 1.0f : temp[h - Hq];
            if (h < Hq) {
                if (qn) qn[n * Hq + h] = nrm;
            } else if (kn) {
                kn[n * Hk + (h - Hq)] = nrm;
            }
        }
    }
    __syncthreads();
    for (int e = tid * W; e < Wd; e += blockDim.x * W) {
        const int h = e / d; /* W divides d: one head per vector */
        const float f = fh[h], tp = th[h];
        const bool key = h >= Hq;
        float y[W];
#pragma unroll
        for (int i = 0; i < W; i++) {
            const int el = e + i, c = el - h * d;
            const float xs = key ? (sx[el] * f) * tp : sx[el] * f;
            if (c < half) {
                const float xp = key ? (sx[el + half] * f) * tp : sx[el + half] * f;
                y[i] = xs * cs[c] - xp * sn[c];
            } else if (c < 2 * half) {
                const float xp = key ? (sx[el - half] * f) * tp : sx[el - half] * f;
                y[i] = xs * cs[c - half] + xp * sn[c - half];
            } else {
                y[i] = xs;
            }
        }
        if (e < Qd)
            zy_store<bf16, W>(q + n * Qd + e, y);
        else
            zy_store<bf16, W>(k + n * Kd + (e - Qd), y);
    }
}

/* Backward, one block per row n: g = un-rotated output gradient, x = input (both staged in fp32);
 * per head (one warp) dot = g.x, ss = x.x; then dx = a (g - b x) with a = sqrt(d) t / ||x||,
 * b = dot / ss (or a = sqrt(d) t / eps, b = 0 where the clamp held). part[n][j] = the row's dtemp
 * term f * dot of key head j. */
template <int W>
__global__ void qknorm_bwd_k(bf16 *dq, bf16 *dk, float *part, const bf16 *q_in, const bf16 *k_in,
                             const float *qn, const float *kn, const float *temp,
                             const int32_t *pos, int Hq, int Hk, int d, int half, float sqrtd,
                             float eps, rope_freqs fr) {
    zy_pdl_begin();
    extern __shared__ float qk_sm[];
    const int H = Hq + Hk, Qd = Hq * d, Kd = Hk * d, Wd = H * d;
    float *sg = qk_sm, *sx = sg + Wd, *cs = sx + Wd, *sn = cs + half, *ca = sn + half, *cb = ca + H;
    const size_t n = blockIdx.x;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = blockDim.x >> 5;
    for (int e = tid * W; e < Wd; e += blockDim.x * W) {
        const bool isq = e < Qd;
        float g[W], x[W];
        zy_load<bf16, W>(isq ? dq + n * Qd + e : dk + n * Kd + (e - Qd), g);
        zy_load<bf16, W>(isq ? q_in + n * Qd + e : k_in + n * Kd + (e - Qd), x);
#pragma unroll
        for (int i = 0; i < W; i++) sg[e + i] = g[i], sx[e + i] = x[i];
    }
    const float pf = (float)pos[n];
    for (int i = tid; i < half; i += blockDim.x) sincosf(pf * fr.v[i], &sn[i], &cs[i]);
    __syncthreads();
    /* undo the rotation (the transpose of [[c, -s], [s, c]]), one pair per thread */
    for (int p = tid; p < H * half; p += blockDim.x) {
        const int h = p / half, i = p - h * half, el = h * d + i;
        const float a = sg[el], b = sg[el + half];
        sg[el] = a * cs[i] + b * sn[i];
        sg[el + half] = b * cs[i] - a * sn[i];
    }
    __syncthreads();
    for (int h = warp; h < H; h += nw) {
        float ss = 0.0f, dot = 0.0f;
        for (int e = lane; e < d; e += 32) {
            const float x = sx[h * d + e];
            ss = fmaf(x, x, ss);
            dot = fmaf(sg[h * d + e], x, dot);
        }
        ss = qk_warp_sum(ss);
        dot = qk_warp_sum(dot);
        if (lane == 0) {
            const bool key = h >= Hq;
            const float nrm = key ? kn[n * Hk + (h - Hq)] : qn[n * Hq + h];
            const float t = key ? temp[h - Hq] : 1.0f;
            const float raw = sqrtf(ss);
            if (raw >= eps) {
                ca[h] = sqrtd * t / raw;
                cb[h] = dot / ss;
            } else {
                ca[h] = sqrtd * t / eps;
                cb[h] = 0.0f;
            }
            if (key) part[n * Hk + (h - Hq)] = ((1.0f / nrm) * sqrtd) * dot;
        }
    }
    __syncthreads();
    for (int e = tid * W; e < Wd; e += blockDim.x * W) {
        const int h = e / d;
        const float a = ca[h], b = cb[h];
        float y[W];
#pragma unroll
        for (int i = 0; i < W; i++) y[i] = a * (sg[e + i] - b * sx[e + i]);
        if (e < Qd)
            zy_store<bf16, W>(dq + n * Qd + e, y);
        else
            zy_store<bf16, W>(dk + n * Kd + (e - Qd), y);
    }
}

/* dtemp[j] += sum over rows of part[n][j]: one block of QK_DT_NT threads per key head, thread i
 * adds rows i, i + QK_DT_NT, ... (loads unrolled: a lone block must keep many in flight), then a
 * fixed tree over the threads (double). */
#define QK_DT_NT 1024
__global__ void __launch_bounds__(QK_DT_NT)
    qk_dtemp_k(float *dtemp, const float *part, int N, int Hk) {
    zy_pdl_begin();
    __shared__ double sh[QK_DT_NT];
    const int j = blockIdx.x, tid = threadIdx.x;
    double s = 0;
#pragma unroll 8
    for (int n = tid; n < N; n += QK_DT_NT) s += part[(size_t)n * Hk + j];
    sh[tid] = s;
    __syncthreads();
    for (int w = QK_DT_NT / 2; w > 0; w >>= 1) {
        if (tid < w) sh[tid] += sh[tid + w];
        __syncthreads();
    }
    if (tid == 0) dtemp[j] = (float)((double)dtemp[j] + sh[0]);
}

/* ---- QK norm, one warp per row ----
 * The block-per-row kernels above stage a row in shared memory between two barriers, so an SM
 * keeps only ~12 rows (~30 KB) in flight: 1/3 of the bandwidth their bytes need (bench-small's
 * rows are 10 heads of 128). Here a warp owns a row and keeps it in registers: lane l holds the
 * 16-byte vectors v = it * 32 + l (it < MAXIT: 2, 4, 6 or 8, as few as the row needs), one head
 * per VPH = d / 8 consecutive lanes, all loads issued before any arithmetic. Head sums are xor
 * shuffles inside the lane group, the rotate-half partner is the lane half / 8 away, and a lane's
 * RoPE angles are the same for every head (its column in the head is fixed), so it reads its 8
 * cos/sin pairs once per row from the block's table (qkw_trig_fill). Needs d / 8 a power of two
 * dividing 32 (d in 8 .. 256), rot / 2 a multiple of 8 and H * d <= 256 QKW_MAXIT; other shapes
 * take the block kernels. Same arithmetic as they do, per element. */
#define QKW_MAXIT 8 /* 16-byte vectors per lane: rows up to 2048 elements */
#define QKW_ROWS  8 /* rows (warps) per block */

static int qkw_fits(int H, int d, int half) {
    const int vph = d / 8;
    return d % 8 == 0 && vph >= 1 && vph <= 32 && (32 % vph) == 0 && half % 8 == 0 &&
           (long long)H * d <= 256LL * QKW_MAXIT;
}

/* Sum over the vph lanes of this lane's head (vph a power of two, groups aligned). */
static __device__ __forceinline__ float qkw_head_sum(float v, int vph) {
    for (int o = vph >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* The block's rows' RoPE cos and sin, [QKW_ROWS][half] each: one sincosf per (row, frequency),
 * spread over the block's threads. Every lane used to take its eight itself, and the eight lanes
 * of a head group that rotate share them, so the warp kernels spent ~30% of their instructions
 * there (ncu: 1-2k instructions a row, issue-bound at 24-35% occupancy). Same argument, same
 * bits. Ends with a barrier: call it before any warp leaves. */
typedef struct {
    float cs[QKW_ROWS][CCA_ROPE_MAXHALF], sn[QKW_ROWS][CCA_ROPE_MAXHALF];
} qkw_trig;

static __device__ __forceinline__ void qkw_trig_fill(qkw_trig *t, const int32_t *pos, size_t row0,
                                                     int N, int half, const rope_freqs &fr) {
    for (int u = threadIdx.x; u < QKW_ROWS * half; u += blockDim.x) {
        const int rl = u / half, i = u % half;
        if (row0 + rl < (size_t)N)
            sincosf((float)pos[row0 + rl] * fr.v[i], &t->sn[rl][i], &t->cs[rl][i]);
    }
    __syncthreads();
}

/* The lane's rotation: kind 0 none, 1 lower half (partner + half), 2 upper half (partner - half);
 * cos/sin of its 8 columns (row rl of the block's table); src = the partner's lane. */
typedef struct {
    int kind, src;
    float cs[8], sn[8];
} qkw_rot;

static __device__ __forceinline__ qkw_rot qkw_rotation(int lane, int vph, int half,
                                                       const qkw_trig *t, int rl) {
    qkw_rot r;
    const int c0 = (lane % vph) * 8, hv = half / 8;
    r.kind = c0 < half ? 1 : c0 < 2 * half ? 2 : 0;
    r.src = r.kind == 1 ? lane + hv : r.kind == 2 ? lane - hv : lane;
    const int i0 = r.kind == 2 ? c0 - half : c0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        r.cs[i] = r.kind ? t->cs[rl][i0 + i] : 1.0f;
        r.sn[i] = r.kind ? t->sn[rl][i0 + i] : 0.0f;
    }
    return r;
}

template <int MAXIT>
__global__ void __launch_bounds__(QKW_ROWS * 32)
    qknorm_fwd_warp_k(bf16 *q, bf16 *k, float *qn, float *kn, const bf16 *q_in, const bf16 *k_in,
                      const float *temp, const int32_t *pos, int N, int Hq, int Hk, int d, int half,
                      float sqrtd, float eps, rope_freqs fr) {
    zy_pdl_begin();
    __shared__ qkw_trig trig;
    const int lane = threadIdx.x & 31, rl = threadIdx.x >> 5;
    const size_t n = (size_t)blockIdx.x * QKW_ROWS + rl;
    qkw_trig_fill(&trig, pos, (size_t)blockIdx.x * QKW_ROWS, N, half, fr);
    if (n >= (size_t)N) return; /* whole warps leave: the shuffles below see full warps */
    const int vph = d / 8, H = Hq + Hk, nv = H * vph, qv = Hq * vph;
    uint4 raw[MAXIT];
#pragma unroll
    for (int it = 0; it < MAXIT; it++) {
        const int v = it * 32 + lane;
        raw[it] = make_uint4(0, 0, 0, 0);
        if (v < qv)
            raw[it] = reinterpret_cast<const uint4 *>(q_in + n * Hq * d)[v];
        else if (v < nv)
            raw[it] = reinterpret_cast<const uint4 *>(k_in + n * Hk * d)[v - qv];
    }
    const qkw_rot r = qkw_rotation(lane, vph, half, &trig, rl);
#pragma unroll
    for (int it = 0; it < MAXIT; it++) {
        if (it * 32 >= nv) break; /* uniform over the warp */
        const int v = it * 32 + lane, h = v / vph;
        const bool live = v < nv, key = h >= Hq;
        float x[8], y[8];
        zy_load<bf16, 8>(reinterpret_cast<const bf16 *>(&raw[it]), x);
        float ss = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) ss = fmaf(x[i], x[i], ss);
        ss = qkw_head_sum(ss, vph);
        float nrm = sqrtf(ss);
        if (nrm < eps) nrm = eps;
        const float f = (1.0f / nrm) * sqrtd, tp = key && live ? temp[h - Hq] : 1.0f;
        if (live && lane % vph == 0) {
            if (!key) {
                if (qn) qn[n * Hq + h] = nrm;
            } else if (kn) {
                kn[n * Hk + (h - Hq)] = nrm;
            }
        }
#pragma unroll
        for (int i = 0; i < 8; i++) x[i] = key ? (x[i] * f) * tp : x[i] * f;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const float xp = __shfl_sync(0xffffffffu, x[i], r.src);
            y[i] = r.kind == 1   ? x[i] * r.cs[i] - xp * r.sn[i]
                   : r.kind == 2 ? x[i] * r.cs[i] + xp * r.sn[i]
                                 : x[i];
        }
        if (!live) continue;
        if (!key)
            zy_store<bf16, 8>(q + n * Hq * d + (size_t)v * 8, y);
        else
            zy_store<bf16, 8>(k + n * Hk * d + (size_t)(v - qv) * 8, y);
    }
}

/* Three blocks an SM up to bench-small's rows (MAXIT 6: 80 registers with ~100 bytes of spills,
 * against 102 registers and two blocks: 0.082 -> 0.073 ms at bench-small's size on an H100). */
template <int MAXIT>
__global__ void __launch_bounds__(QKW_ROWS * 32, MAXIT <= 6 ? 3 : 2)
    qknorm_bwd_warp_k(bf16 *dq, bf16 *dk, float *part, const bf16 *q_in, const bf16 *k_in,
                      const float *qn, const float *kn, const float *temp, const int32_t *pos,
                      int N, int Hq, int Hk, int d, int half, float sqrtd, float eps,
                      rope_freqs fr) {
    zy_pdl_begin();
    __shared__ qkw_trig trig;
    const int lane = threadIdx.x & 31, rl = threadIdx.x >> 5;
    const size_t n = (size_t)blockIdx.x * QKW_ROWS + rl;
    qkw_trig_fill(&trig, pos, (size_t)blockIdx.x * QKW_ROWS, N, half, fr);
    if (n >= (size_t)N) return;
    const int vph = d / 8, H = Hq + Hk, nv = H * vph, qv = Hq * vph;
    uint4 graw[MAXIT], xraw[MAXIT];
#pragma unroll
    for (int it = 0; it < MAXIT; it++) {
        const int v = it * 32 + lane;
        graw[it] = xraw[it] = make_uint4(0, 0, 0, 0);
        if (v < qv) {
            graw[it] = reinterpret_cast<const uint4 *>(dq + n * Hq * d)[v];
            xraw[it] = reinterpret_cast<const uint4 *>(q_in + n * Hq * d)[v];
        } else if (v < nv) {
            graw[it] = reinterpret_cast<const uint4 *>(dk + n * Hk * d)[v - qv];
            xraw[it] = reinterpret_cast<const uint4 *>(k_in + n * Hk * d)[v - qv];
        }
    }
    const qkw_rot r = qkw_rotation(lane, vph, half, &trig, rl);
#pragma unroll
    for (int it = 0; it < MAXIT; it++) {
        if (it * 32 >= nv) break;
        const int v = it * 32 + lane, h = v / vph;
        const bool live = v < nv, key = h >= Hq;
        float g[8], x[8], y[8];
        zy_load<bf16, 8>(reinterpret_cast<const bf16 *>(&graw[it]), g);
        zy_load<bf16, 8>(reinterpret_cast<const bf16 *>(&xraw[it]), x);
        /* undo the rotation: lower a c + b s, upper b c - a s (a lower, b upper element) */
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const float gp = __shfl_sync(0xffffffffu, g[i], r.src);
            y[i] = r.kind == 1   ? g[i] * r.cs[i] + gp * r.sn[i]
                   : r.kind == 2 ? g[i] * r.cs[i] - gp * r.sn[i]
                                 : g[i];
        }
        float ss = 0.0f, dot = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) ss = fmaf(x[i], x[i], ss), dot = fmaf(y[i], x[i], dot);
        ss = qkw_head_sum(ss, vph);
        dot = qkw_head_sum(dot, vph);
        if (!live) continue;
        const float t = key ? temp[h - Hq] : 1.0f, raw_n = sqrtf(ss);
        float a, b;
        if (raw_n >= eps)
            a = sqrtd * t / raw_n, b = dot / ss;
        else
            a = sqrtd * t / eps, b = 0.0f;
        if (key && lane % vph == 0)
            part[n * Hk + (h - Hq)] = ((1.0f / kn[n * Hk + (h - Hq)]) * sqrtd) * dot;
#pragma unroll
        for (int i = 0; i < 8; i++) y[i] = a * (y[i] - b * x[i]);
        if (!key)
            zy_store<bf16, 8>(dq + n * Hq * d + (size_t)v * 8, y);
        else
            zy_store<bf16, 8>(dk + n * Hk * d + (size_t)(v - qv) * 8, y);
    }
    (void)qn;
}

/* Aborts on arguments the kernels do not handle. */
static void qk_check(int N, int Hq, int Hk, int d, int rot) {
    ZY_CHECK(N >= 0 && Hq >= 0 && Hk >= 0 && d >= 1);
    ZY_CHECKF(rot >= 0 && rot <= d && rot % 2 == 0 && rot / 2 <= CCA_ROPE_MAXHALF,
              "cuda qknorm_rope: rot %d must be even, in [0, d=%d] and at most %d", rot, d,
              2 * CCA_ROPE_MAXHALF);
    ZY_CHECKF(qk_smem(Hq + Hk, d, rot / 2, 2) <= 48 * 1024,
              "cuda qknorm_rope: a row of %d heads of %d is too wide", Hq + Hk, d);
}

/* 1 when every non-NULL pointer is 16-byte aligned. */
static int qk_aligned(const void *a, const void *b, const void *c, const void *d) {
    return (!a || zy_aligned(a, 16)) && (!b || zy_aligned(b, 16)) && (!c || zy_aligned(c, 16)) &&
           (!d || zy_aligned(d, 16));
}

/* q [N, Hq*d], k [N, Hk*d] from q_in, k_in (or in place); qn [N, Hq], kn [N, Hk]. */
void cuda_ops_qknorm_rope_fwd(zy_ctx *ctx, zy_act *q, zy_act *k, float *qn, float *kn,
                              const zy_act *q_in, const zy_act *k_in, const float *temp,
                              const int32_t *pos, int N, int Hq, int Hk, int d, int rot,
                              double theta, float eps_norm) {
    qk_check(N, Hq, Hk, d, rot);
    const int H = Hq + Hk, half = rot / 2;
    if (N == 0 || H == 0) return;
    rope_freqs fr = rope_host_freqs(rot, theta);
    float sqrtd = (float)sqrt((double)d);
    int vec = d % 8 == 0 && qk_aligned(q, k, q_in, k_in);
    int nth = zy_row_threads((long long)H * d / (vec ? 8 : 1));
    size_t smem = qk_smem(H, d, half, 1);
    cudaStream_t st = cuda_stream(ctx);
    if (vec && qkw_fits(H, d, half)) {
        const int nit = (H * d / 8 + 31) / 32, grid = (N + QKW_ROWS - 1) / QKW_ROWS;
#define QKW_FWD(M)                                                                                 \
    zy_launch(qknorm_fwd_warp_k<M>, grid, QKW_ROWS * 32, 0, st, (bf16 *)q, (bf16 *)k, qn, kn,      \
              (const bf16 *)q_in, (const bf16 *)k_in, temp, pos, N, Hq, Hk, d, half, sqrtd,        \
              eps_norm, fr)
        if (nit <= 2)
            QKW_FWD(2);
        else if (nit <= 4)
            QKW_FWD(4);
        else if (nit <= 6)
            QKW_FWD(6);
        else
            QKW_FWD(8);
#undef QKW_FWD
    } else if (vec)
        zy_launch(qknorm_fwd_k<8>, N, nth, smem, st, (bf16 *)q, (bf16 *)k, qn, kn,
                  (const bf16 *)q_in, (const bf16 *)k_in, temp, pos, Hq, Hk, d, half, sqrtd,
                  eps_norm, fr);
    else
        zy_launch(qknorm_fwd_k<1>, N, nth, smem, st, (bf16 *)q, (bf16 *)k, qn, kn,
                  (const bf16 *)q_in, (const bf16 *)k_in, temp, pos, Hq, Hk, d, half, sqrtd,
                  eps_norm, fr);
    ZY_CUDA_CHECK_LAUNCH();
}

/* In place on dq, dk; dtemp [Hk] += (fixed-order sum over rows; workspace [N, Hk]). */
void cuda_ops_qknorm_rope_bwd(zy_ctx *ctx, zy_act *dq, zy_act *dk, float *dtemp, const zy_act *q_in,
                              const zy_act *k_in, const float *qn, const float *kn,
                              const float *temp, const int32_t *pos, int N, int Hq, int Hk, int d,
                              int rot, double theta, float eps_norm) {
    qk_check(N, Hq, Hk, d, rot);
    const int H = Hq + Hk, half = rot / 2;
    if (N == 0 || H == 0) return;
    rope_freqs fr = rope_host_freqs(rot, theta);
    float sqrtd = (float)sqrt((double)d);
    int vec = d % 8 == 0 && qk_aligned(dq, dk, q_in, k_in);
    int nth = zy_row_threads((long long)H * d / (vec ? 8 : 1));
    size_t smem = qk_smem(H, d, half, 2);
    cudaStream_t st = cuda_stream(ctx);
    float *part = Hk > 0 ? (float *)cuda_ws(ctx, (size_t)N * Hk * sizeof(float)) : NULL;
    if (vec && qkw_fits(H, d, half)) {
        const int nit = (H * d / 8 + 31) / 32, grid = (N + QKW_ROWS - 1) / QKW_ROWS;
#define QKW_BWD(M)                                                                                 \
    zy_launch(qknorm_bwd_warp_k<M>, grid, QKW_ROWS * 32, 0, st, (bf16 *)dq, (bf16 *)dk, part,      \
              (const bf16 *)q_in, (const bf16 *)k_in, qn, kn, temp, pos, N, Hq, Hk, d, half,       \
              sqrtd, eps_norm, fr)
        if (nit <= 2)
            QKW_BWD(2);
        else if (nit <= 4)
            QKW_BWD(4);
        else if (nit <= 6)
            QKW_BWD(6);
        else
            QKW_BWD(8);
#undef QKW_BWD
    } else if (vec)
        zy_launch(qknorm_bwd_k<8>, N, nth, smem, st, (bf16 *)dq, (bf16 *)dk, part,
                  (const bf16 *)q_in, (const bf16 *)k_in, qn, kn, temp, pos, Hq, Hk, d, half, sqrtd,
                  eps_norm, fr);
    else
        zy_launch(qknorm_bwd_k<1>, N, nth, smem, st, (bf16 *)dq, (bf16 *)dk, part,
                  (const bf16 *)q_in, (const bf16 *)k_in, qn, kn, temp, pos, Hq, Hk, d, half, sqrtd,
                  eps_norm, fr);
    ZY_CUDA_CHECK_LAUNCH();
    if (Hk > 0) {
        zy_launch(qk_dtemp_k, Hk, QK_DT_NT, 0, st, dtemp, part, N, Hk);
        ZY_CUDA_CHECK_LAUNCH();
    }
}

/* ---- decoding attention ---- */

#define DEC_THREADS 256
#define DEC_MAXPL   8 /* head elements per lane (d <= 256) */

/* Block (query head i, sequence b): warp w takes keys lo + w, lo + w + 8, ... with an online
 * softmax (fp32, lane l holds elements l, l + 32, ...), then the 8 warps' states are merged. */
__global__ void __launch_bounds__(DEC_THREADS)
    attn_decode_k(bf16 *out, const bf16 *q, const bf16 *kc, const bf16 *vc, int Tk, int Tmax,
                  int Hq, int Hk, int d, float scale, int lo) {
    zy_pdl_begin();
    __shared__ float sm_m[DEC_THREADS / 32], sm_l[DEC_THREADS / 32];
    __shared__ float sm_acc[DEC_THREADS / 32][DEC_MAXPL * 32];
    const int i = blockIdx.x, b = blockIdx.y, j = i / (Hq / Hk);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = DEC_THREADS / 32;
    const size_t ks = (size_t)Hk * d;
    const bf16 *qr = q + ((size_t)b * Hq + i) * d;
    const bf16 *kb = kc + (size_t)b * Tmax * ks + (size_t)j * d;
    const bf16 *vb = vc + (size_t)b * Tmax * ks + (size_t)j * d;
    float qv[DEC_MAXPL], acc[DEC_MAXPL];
#pragma unroll
    for (int u = 0; u < DEC_MAXPL; u++) {
        const int e = lane + 32 * u;
        qv[u] = e < d ? __bfloat162float(qr[e]) : 0.0f;
        acc[u] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int s = lo + warp; s < Tk; s += nw) {
        const bf16 *kr = kb + (size_t)s * ks, *vr = vb + (size_t)s * ks;
        float dot = 0.0f;
#pragma unroll
        for (int u = 0; u < DEC_MAXPL; u++) {
            const int e = lane + 32 * u;
            if (e < d) dot = fmaf(qv[u], __bfloat162float(kr[e]), dot);
        }
        dot = qk_warp_sum(dot);
        const float sc = dot * scale, mn = fmaxf(m, sc);
        const float corr = expf(m - mn), p = expf(sc - mn);
        l = l * corr + p;
#pragma unroll
        for (int u = 0; u < DEC_MAXPL; u++) {
            const int e = lane + 32 * u;
            if (e < d) acc[u] = acc[u] * corr + p * __bfloat162float(vr[e]);
        }
        m = mn;
    }
    if (lane == 0) sm_m[warp] = m, sm_l[warp] = l;
#pragma unroll
    for (int u = 0; u < DEC_MAXPL; u++) sm_acc[warp][lane + 32 * u] = acc[u];
    __syncthreads();
    float mx = -INFINITY;
    for (int w = 0; w < nw; w++) mx = fmaxf(mx, sm_m[w]);
    float L = 0.0f, sc[DEC_THREADS / 32];
    for (int w = 0; w < nw; w++) {
        sc[w] = sm_l[w] > 0.0f ? expf(sm_m[w] - mx) : 0.0f; /* a warp without keys adds 0 */
        L += sm_l[w] * sc[w];
    }
    bf16 *orow = out + ((size_t)b * Hq + i) * d;
    for (int e = threadIdx.x; e < d; e += DEC_THREADS) {
        float o = 0.0f;
        for (int w = 0; w < nw; w++) o += sm_acc[w][e] * sc[w];
        orow[e] = __float2bfloat16_rn(o / L);
    }
}

/* out [B, Hq*d] from one query row per sequence against kc, vc [B, Tmax, Hk*d] rows [lo, Tk). */
void cuda_ops_attention_decode(zy_ctx *ctx, zy_act *out, const zy_act *q, const zy_act *kc,
                               const zy_act *vc, int B, int Tk, int Tmax, int Hq, int Hk, int d,
                               float scale, int window) {
    ZY_CHECK(B >= 0 && Hq >= 1 && Hk >= 1 && Hq % Hk == 0 && d >= 1 && Tk >= 1 && Tk <= Tmax);
    ZY_CHECKF(d <= DEC_MAXPL * 32, "cuda attention_decode: head dim %d > %d", d, DEC_MAXPL * 32);
    ZY_CHECKF(Hq < 65536 && B < 65536, "cuda attention_decode: B=%d Hq=%d too large", B, Hq);
    if (B == 0) return;
    const int t = Tk - 1, lo = (window > 0 && t - window + 1 > 0) ? t - window + 1 : 0;
    zy_launch(attn_decode_k, dim3(Hq, B), DEC_THREADS, 0, cuda_stream(ctx), (bf16 *)out,
              (const bf16 *)q, (const bf16 *)kc, (const bf16 *)vc, Tk, Tmax, Hq, Hk, d, scale, lo);
    ZY_CUDA_CHECK_LAUNCH();
}
