/* Batched bf16 SYRK on Hopper (syrk.h): TMA loads, an mbarrier ring, wgmma m64n128k16.
 *
 * A CTA of 384 threads loops over lower tiles (b, i, j), j <= i, of the whole batch, CTAs
 * striding by the grid (one CTA per SM: the ring and the epilogue buffers take ~200 KB):
 *   warpgroup 0, one thread: for each k step, waits until the stage is empty, then TMA-loads
 *     the tile's rows [128 i, +128) and [128 j, +128) of X_b (X^T X: columns), k [64 kt, +64),
 *     into it (16 KB each; once on a diagonal tile; rows past n and k past k arrive as zeros);
 *   warpgroups 1 and 2: rows [64 c, +64) of the tile (c = warpgroup - 1) against all 128
 *     columns, four wgmma k16 per stage, one commit group in flight; a stage is released once the
 *     MMAs reading it are complete. C's part of the tile is copied into shared memory (cp.async)
 *     while the MMAs run. The epilogue forms alpha a_b acc + beta b_b C (+ d_b on the diagonal)
 *     in fp32, rounds to bf16 into the warpgroup's own shared rows and their transpose, and
 *     stores both, the transpose at the mirrored place (on a diagonal tile, the elements on and
 *     below the diagonal and the mirrors of those below). The two warpgroups synchronise only
 *     through the ring, so one's stores overlap the other's MMAs.
 * Shared operand tiles use the 128-byte swizzle TMA writes and the wgmma descriptors read:
 * K-major for X X^T (row r of a [128][64] tile is 128 bytes at 128 r whose 16-byte chunks are
 * permuted by r % 8; 8-row atoms 1024 bytes apart), MN-major for X^T X ([64 k][64 n] boxes of
 * 128-byte rows, 8 KB apart along n). */
#include "ops/cuda/syrk.h"
#include "ops/cuda/launch.h"

#include "base/check.h"
#include "base/err.h"
#include "ops/cuda/hopper.h"
#include "ops/cuda/mma.h"
#include "ops/cuda/wgmma.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <stdint.h>

typedef __nv_bfloat16 bf16;

#define SY_BM     128 /* tile side */
#define SY_BK     64  /* k per stage: one 128-byte swizzle row */
#define SY_STAGES 4
#define SY_NTH    384
#define SY_TILE_B (SY_BM * SY_BK * 2) /* bytes of one operand tile */
#define SY_EP_LD  (SY_BM + 8) /* epilogue rows [64][EP_LD] bf16 per warpgroup: 16-byte pad */
#define SY_ET_LD  (64 + 8)    /* the same transposed, [128][ET_LD]: conflict-free writes */
#define SY_EP_B   (2 * (64 * SY_EP_LD + SY_BM * SY_ET_LD) * 2)
#define SY_BAR_AT (2 * SY_STAGES * SY_TILE_B + SY_EP_B)
#define SY_SMEM   (SY_BAR_AT + 2 * SY_STAGES * 8 + 1024) /* + slack to align the base to 1024 */

/* Tile t of the batch: matrix b, lower tile (i, j) of the row-major order of ntri = T (T + 1) / 2
 * tiles (0,0), (1,0), (1,1), (2,0), ... */
static __device__ __forceinline__ void tile_of(int t, int ntri, int *b, int *i, int *j) {
    *b = t / ntri;
    const int r = t - *b * ntri;
    int row = (int)((sqrtf(8.0f * (float)r + 1.0f) - 1.0f) * 0.5f);
    while ((row + 1) * (row + 2) / 2 <= r) row++;
    while (row * (row + 1) / 2 > r) row--;
    *i = row;
    *j = r - row * (row + 1) / 2;
}

/* grid: CTAs striding over `total` = batch x ntri tiles; block SY_NTH; SY_SMEM dynamic bytes.
 * TR 0: X_b [n, k], D = X X^T, a stage holds rows [128 i, +128) x k [64 kt, +64) (one box);
 * TR 1: X_b [k, n], D = X^T X, a stage holds k rows [64 kt, +64) x columns [128 i, +128) as two
 * [64][64] boxes, 8 KB apart. */
template <int TR>
__global__ void __launch_bounds__(SY_NTH, 1)
    syrk_kernel(const __grid_constant__ CUtensorMap xmap, bf16 *__restrict__ D,
                const bf16 *__restrict__ C, int n, int nk, int64_t ldd, int64_t sd, int ntri,
                int total, float alpha, float beta, cuda_syrk_scales per) {
    zy_pdl_begin();
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ uint8_t sy_smem[];
    const uint32_t raw = smem_u32(sy_smem), base = (raw + 1023u) & ~1023u;
    uint8_t *gbase = sy_smem + (base - raw);
    const uint32_t sa = base, sb = base + SY_STAGES * SY_TILE_B, bars = base + SY_BAR_AT;
#define FULL(s)  (bars + 8u * (uint32_t)(s))
#define EMPTY(s) (bars + 8u * (uint32_t)(SY_STAGES + (s)))
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    if (threadIdx.x == 0) {
        for (int s = 0; s < SY_STAGES; s++) {
            mbar_init(FULL(s), 1);
            mbar_init(EMPTY(s), 256); /* every consumer thread releases */
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) { /* producer; a diagonal tile's two operands are the same rows: loaded once */
        if (tid == 0) {
            int stage = 0;
            uint32_t phase = 0;
            for (int t = blockIdx.x; t < total; t += gridDim.x) {
                int b, i, j;
                tile_of(t, ntri, &b, &i, &j);
                for (int kt = 0; kt < nk; kt++) {
                    mbar_wait(EMPTY(stage), phase ^ 1u);
                    mbar_expect_tx(FULL(stage), (i == j ? 1 : 2) * SY_TILE_B);
                    for (int h = 0; h < (TR ? 2 : 1); h++) {
                        const uint32_t at = stage * SY_TILE_B + h * (SY_TILE_B / 2);
                        const int ca = TR ? i * SY_BM + 64 * h : kt * SY_BK;
                        const int cb = TR ? j * SY_BM + 64 * h : kt * SY_BK;
                        const int ka = TR ? kt * SY_BK : i * SY_BM;
                        const int kb2 = TR ? kt * SY_BK : j * SY_BM;
                        tma_load_3d(sa + at, &xmap, ca, ka, b, FULL(stage));
                        if (i != j) tma_load_3d(sb + at, &xmap, cb, kb2, b, FULL(stage));
                    }
                    if (++stage == SY_STAGES) stage = 0, phase ^= 1u;
                }
            }
        }
        return;
    }

    /* consumers: c = 0, 1 own tile rows [64 c, +64), each with its own part of the epilogue
     * buffers and its own named barrier, so one can run the next tile's MMAs during the other's
     * stores */
    const int c = wg - 1, warp = tid / 32, lane = tid % 32;
    bf16 *ep = (bf16 *)(gbase + 2 * SY_STAGES * SY_TILE_B) +
               c * (64 * SY_EP_LD + SY_BM * SY_ET_LD); /* [64][EP_LD]: rows of the tile */
    bf16 *et = ep + 64 * SY_EP_LD;                     /* [128][ET_LD]: the same, transposed */
    int stage = 0;
    uint32_t phase = 0;
    for (int t = blockIdx.x; t < total; t += gridDim.x) {
        int b, i, j;
        tile_of(t, ntri, &b, &i, &j);
        const int64_t r0 = (int64_t)i * SY_BM, c0 = (int64_t)j * SY_BM, rh = r0 + c * 64;
        if (beta != 0.0f) { /* C's rows [rh, +64) x [c0, +128) into ep during the MMAs */
            const bf16 *Cb = C + (int64_t)b * sd;
            for (int u = tid; u < 64 * (SY_BM / 8); u += 128) {
                const int r = u / (SY_BM / 8), v = u % (SY_BM / 8);
                if (i == j && 8 * v > c * 64 + r) continue; /* above the diagonal: unused */
                const bool ok = rh + r < n && c0 + 8 * v < n;
                cp_async16(smem_u32(ep + r * SY_EP_LD + 8 * v),
                           ok ? Cb + (rh + r) * ldd + c0 + 8 * v : Cb, ok);
            }
            cp_async_commit();
        }
        float acc[64];
#pragma unroll
        for (int e = 0; e < 64; e++) acc[e] = 0.0f;
        fence_acc(acc);
        int prev = -1;
        for (int kt = 0; kt < nk; kt++) {
            mbar_wait(FULL(stage), phase);
            wgmma_fence();
            const uint32_t ta = sa + stage * SY_TILE_B, tb = (i == j ? sa : sb) + stage * SY_TILE_B;
            /* this warpgroup's 64 rows of A: 64 K-major rows, or the c-th MN chunk */
            const uint64_t da = TR ? sw128_desc_mn(ta + c * (SY_TILE_B / 2), SY_TILE_B / 2)
                                   : sw128_desc(ta + c * 64 * 128);
            const uint64_t db = TR ? sw128_desc_mn(tb, SY_TILE_B / 2) : sw128_desc(tb);
            const int step = TR ? 2048 >> 4 : 32 >> 4; /* the next k16, in 16-byte units */
#pragma unroll
            for (int kk = 0; kk < SY_BK / 16; kk++)
                wgmma_m64n128k16<TR, TR>(acc, da + step * kk, db + step * kk, 1);
            wgmma_commit();
            fence_acc(acc);
            if (prev >= 0) { /* the previous stage's MMAs are done: release it */
                wgmma_wait<1>();
                mbar_arrive(EMPTY(prev));
            }
            prev = stage;
            if (++stage == SY_STAGES) stage = 0, phase ^= 1u;
        }
        wgmma_wait<0>();
        fence_acc(acc);
        mbar_arrive(EMPTY(prev));

        /* epilogue: alpha acc + beta C (prefetched into ep) -> bf16 rows [rh, rh + 64) of the
         * tile in ep, over C, and their transpose in et */
        const uint32_t bar_id = 1 + c;
        if (beta != 0.0f) {
            cp_async_wait<0>();
            asm volatile("bar.sync %0, 128;\n" ::"r"(bar_id) : "memory");
        }
        bf16 *Db = D + (int64_t)b * sd;
        const bool diag = i == j;
        const float fa = per.a ? alpha * per.a[b] : alpha, fb = per.b ? beta * per.b[b] : beta;
        const float fd = per.d ? per.d[b] : 0.0f;
#pragma unroll
        for (int jn = 0; jn < 16; jn++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int r = warp * 16 + lane / 4 + 8 * h, col = 8 * jn + 2 * (lane % 4);
                float v0 = fa * acc[4 * jn + 2 * h], v1 = fa * acc[4 * jn + 2 * h + 1];
                if (beta != 0.0f) { /* this thread reads and then writes the same pair */
                    const __nv_bfloat162 cv = *(const __nv_bfloat162 *)(ep + r * SY_EP_LD + col);
                    v0 += fb * __bfloat162float(cv.x);
                    v1 += fb * __bfloat162float(cv.y);
                }
                if (diag && col == c * 64 + r) v0 += fd; /* the diagonal: col even, so v0 */
                if (diag && col + 1 == c * 64 + r) v1 += fd;
                const __nv_bfloat162 o = __floats2bfloat162_rn(v0, v1);
                *(__nv_bfloat162 *)(ep + r * SY_EP_LD + col) = o;
                et[col * SY_ET_LD + r] = o.x;
                et[(col + 1) * SY_ET_LD + r] = o.y;
            }
        asm volatile("bar.sync %0, 128;\n" ::"r"(bar_id) : "memory");
        /* Stores. On a diagonal tile only the elements on and below its diagonal are stored as
         * computed and the ones below mirrored (the MMA does not give (x, y) and (y, x) the same
         * bits), so vectors that cross the diagonal go element by element. */
        for (int u = tid; u < 64 * (SY_BM / 8); u += 128) { /* rows, 16-byte vectors */
            const int r = u / (SY_BM / 8), v = u % (SY_BM / 8);
            if (rh + r >= n || c0 + 8 * v >= n) continue;
            const int ok = diag ? min(max(c * 64 + r - 8 * v + 1, 0), 8) : 8; /* first ok cols */
            bf16 *dst = Db + (rh + r) * ldd + c0 + 8 * v;
            const bf16 *src = ep + r * SY_EP_LD + 8 * v;
            if (ok == 8)
                *(uint4 *)dst = *(const uint4 *)src;
            else
                for (int e = 0; e < ok; e++) dst[e] = src[e];
        }
        for (int u = tid; u < SY_BM * 8; u += 128) { /* columns, mirrored: D[c0 + cc][rh..] */
            const int cc = u / 8, v = u % 8;
            if (c0 + cc >= n || rh + 8 * v >= n) continue;
            /* element e mirrors tile row c 64 + 8 v + e, column cc: below the diagonal from e0 */
            const int e0 = diag ? min(max(cc - c * 64 - 8 * v + 1, 0), 8) : 0;
            bf16 *dst = Db + (c0 + cc) * ldd + rh + 8 * v;
            const bf16 *src = et + cc * SY_ET_LD + 8 * v;
            if (e0 == 0)
                *(uint4 *)dst = *(const uint4 *)src;
            else
                for (int e = e0; e < 8; e++) dst[e] = src[e];
        }
        asm volatile("bar.sync %0, 128;\n" ::"r"(bar_id) : "memory"); /* free for the next tile */
    }
#undef FULL
#undef EMPTY
#else
    __trap(); /* a build without sm_90a: cuda_syrk_supported() is 0, so nothing launches this */
#endif
}

/* ---- host ---- */

/* Both layouts' kernels take SY_SMEM bytes of shared memory, set once per device. */
static int set_attrs(void) {
    return cudaFuncSetAttribute(syrk_kernel<0>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                SY_SMEM) == cudaSuccess &&
           cudaFuncSetAttribute(syrk_kernel<1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                SY_SMEM) == cudaSuccess;
}

static cuda_hopper_cache hopper = CUDA_HOPPER_CACHE_INIT;

int cuda_syrk_supported(void) {
    return cuda_hopper_device(&hopper, SY_SMEM, set_attrs, NULL) >= 0;
}

int cuda_syrk_fits(const void *D, const void *C, const void *X, int n, int k, int trans,
                   long long ldx, long long sx, long long ldd, long long sd) {
    const int al = ((uintptr_t)D | (uintptr_t)X | (C ? (uintptr_t)C : 0)) % 16 == 0;
    const long long xrows = trans ? k : n, xcols = trans ? n : k;
    return al && n >= 1 && k >= 1 && n % 8 == 0 && ldx % 8 == 0 && sx % 8 == 0 && ldd % 8 == 0 &&
           sd % 8 == 0 && n <= ldd && xcols <= ldx && sx >= ldx * xrows && sd >= ldd * n;
}

int cuda_syrk_bf16(void *D, const void *C, const void *X, int n, int k, int trans, long long ldx,
                   long long sx, long long ldd, long long sd, int batch, float alpha, float beta,
                   const cuda_syrk_scales *per, void *stream) {
    const cuda_syrk_scales none = {NULL, NULL, NULL}, p = per ? *per : none;
    if (batch < 1) return ZY_OK;
    if (!cuda_syrk_fits(D, beta != 0.0f ? C : NULL, X, n, k, trans, ldx, sx, ldd, sd))
        return zy_fail("cuda_syrk: layout does not fit (n=%d k=%d trans=%d ldx=%lld sx=%lld "
                       "ldd=%lld sd=%lld, or a pointer not 16-byte aligned)",
                       n, k, trans, ldx, sx, ldd, sd);
    if (beta != 0.0f && !C) return zy_fail("cuda_syrk: beta %g without C", (double)beta);
    int sms = 0;
    if (cuda_hopper_device(&hopper, SY_SMEM, set_attrs, &sms) < 0)
        return zy_fail("cuda_syrk: this device or build cannot run it (needs compute capability "
                       "9.0 and an sm_90a build)");
    PFN_cuTensorMapEncodeTiled_v12000 enc = encode_tiled();
    CUtensorMap map;
    /* dims innermost first: [batch][rows][cols] of X; boxes [64 k][128 rows] or [64 k][64 cols] */
    const cuuint64_t dims[3] = {(cuuint64_t)(trans ? n : k), (cuuint64_t)(trans ? k : n),
                                (cuuint64_t)batch};
    const cuuint64_t strides[2] = {(cuuint64_t)ldx * 2, (cuuint64_t)sx * 2}; /* bytes, dims 1, 2 */
    const cuuint32_t box[3] = {64, trans ? 64u : (cuuint32_t)SY_BM, 1}, estr[3] = {1, 1, 1};
    CUresult r = enc(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, (void *)X, dims, strides, box, estr,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                     CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) return zy_fail("cuda_syrk: cuTensorMapEncodeTiled failed (%d)", (int)r);
    const long long tiles = (n + SY_BM - 1) / SY_BM, ntri = tiles * (tiles + 1) / 2;
    const long long total = ntri * batch;
    if (total > (1ll << 30)) return zy_fail("cuda_syrk: %lld tiles", total);
    /* persistent, one CTA per SM: measured beside the forward (cuda.overlap_optimizer) on one
     * H100, a CTA per tile was no better (bench-small Muon step 83.17 / 82.62 ms against 81.66 /
     * 82.21) and half the SMs worse (89.1 ms) */
    const int grid = (int)(total < sms ? total : sms);
    if (trans)
        zy_launch(syrk_kernel<1>, grid, SY_NTH, SY_SMEM, (cudaStream_t)stream, map, (bf16 *)D,
                  (const bf16 *)C, n, (k + SY_BK - 1) / SY_BK, (int64_t)ldd, (int64_t)sd, (int)ntri,
                  (int)total, alpha, beta, p);
    else
        zy_launch(syrk_kernel<0>, grid, SY_NTH, SY_SMEM, (cudaStream_t)stream, map, (bf16 *)D,
                  (const bf16 *)C, n, (k + SY_BK - 1) / SY_BK, (int64_t)ldd, (int64_t)sd, (int)ntri,
                  (int)total, alpha, beta, p);
    ZY_CUDA_TRY_LAUNCH();
    return ZY_OK;
}
