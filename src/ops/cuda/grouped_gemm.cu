/* The experts' forward GEMM in one launch, offsets on the device (grouped_gemm.h).
 *
 * A CTA of 384 threads loops over the tiles t of all experts, CTAs striding by the grid (one CTA
 * per SM). Tile t is m-tile t / ntn (counted over the experts in order: expert e has
 * ceil(rows_e / 128) of them) and n-tile t % ntn, so the CTAs at work at one time share a few
 * m-tiles of X and one expert's W. Each CTA reads the offsets once into shared memory and forms
 * the m-tile prefix there.
 *   warpgroup 0, one thread: for each k step waits for an empty stage, then TMA-loads X rows
 *     [offsets[e] + 128 i, +128) and W rows [e N + 128 j, +128), k [64 kt, +64), into it (rows
 *     past the tensors and k past K arrive as zeros; rows of the next expert or the next
 *     expert's W rows are loaded, computed and never stored);
 *   warpgroups 1 and 2: rows [64 c, +64) of the tile against its 128 columns, wgmma m64n128k16
 *     with both operands K-major, one commit group in flight; a stage is released once the MMAs
 *     reading it are complete. The epilogue rounds to bf16 into the warpgroup's shared rows and
 *     stores the rows inside the expert as 16-byte vectors. */
#include "ops/cuda/grouped_gemm.h"

#include "base/check.h"
#include "base/err.h"
#include "ops/cuda/hopper.h"
#include "ops/cuda/mma.h"
#include "ops/cuda/wgmma.h"

#include <cuda_bf16.h>

typedef __nv_bfloat16 bf16;

#define GG_BM     128 /* tile rows and columns */
#define GG_BK     64  /* k per stage: one 128-byte swizzle row */
#define GG_STAGES 4
#define GG_NTH    384
#define GG_MAX_E  128
#define GG_TILE_B (GG_BM * GG_BK * 2) /* bytes of one operand tile */
#define GG_EP_LD  (GG_BM + 8)         /* epilogue rows [64][EP_LD] bf16 per warpgroup */
#define GG_EP_B   (2 * 64 * GG_EP_LD * 2)
#define GG_BAR_AT (2 * GG_STAGES * GG_TILE_B + GG_EP_B)
#define GG_SMEM   (GG_BAR_AT + 2 * GG_STAGES * 8 + 1024) /* + slack to align the base to 1024 */

/* The expert and m-tile within it of global m-tile mt; mstart [E+1] is the m-tile prefix. */
static __device__ __forceinline__ int expert_of(int mt, const int *mstart, int E) {
    int e = 0;
    while (e + 1 < E && mstart[e + 1] <= mt) e++;
    return e;
}

/* BT 0: Y [rows, N] = X W_e^T, the reduction over K; a stage holds W rows [e N + 128 j, +128) x
 *   k [64 kt, +64) (K-major, one box).
 * BT 1: Y [rows, K] = X W_e, the reduction over W_e's N rows; a stage holds W rows
 *   [e N + 64 kt, +64) x columns [128 j, +128) as two [64][64] boxes 8 KB apart (MN-major).
 * out_w: Y's width (N or K); wn: W_e's rows (N); nk: stages of the reduction. */
template <int BT>
__global__ void __launch_bounds__(GG_NTH, 1)
    grouped_gemm_kernel(const __grid_constant__ CUtensorMap xmap,
                        const __grid_constant__ CUtensorMap wmap, bf16 *__restrict__ Y,
                        const int32_t *__restrict__ offsets, int E, int out_w, int wn, int nk,
                        int rows_cap) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ uint8_t gg_smem[];
    __shared__ int off_s[GG_MAX_E + 1], mstart[GG_MAX_E + 1];
    const uint32_t raw = smem_u32(gg_smem), base = (raw + 1023u) & ~1023u;
    uint8_t *gbase = gg_smem + (base - raw);
    const uint32_t sa = base, sb = base + GG_STAGES * GG_TILE_B, bars = base + GG_BAR_AT;
#define FULL(s)  (bars + 8u * (uint32_t)(s))
#define EMPTY(s) (bars + 8u * (uint32_t)(GG_STAGES + (s)))
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    for (int e = threadIdx.x; e <= E; e += blockDim.x) off_s[e] = offsets[e];
    if (threadIdx.x == 0) {
        for (int s = 0; s < GG_STAGES; s++) {
            mbar_init(FULL(s), 1);
            mbar_init(EMPTY(s), 256); /* every consumer thread releases */
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        mstart[0] = 0;
        for (int e = 0; e < E; e++)
            mstart[e + 1] = mstart[e] + (max(off_s[e + 1] - off_s[e], 0) + GG_BM - 1) / GG_BM;
    }
    __syncthreads();
    const int ntn = (out_w + GG_BM - 1) / GG_BM, total = mstart[E] * ntn;

    if (wg == 0) { /* producer */
        if (tid == 0) {
            int stage = 0;
            uint32_t phase = 0;
            for (int t = blockIdx.x; t < total; t += gridDim.x) {
                const int mt = t / ntn, j = t % ntn, e = expert_of(mt, mstart, E);
                const int xrow = off_s[e] + (mt - mstart[e]) * GG_BM;
                for (int kt = 0; kt < nk; kt++) {
                    mbar_wait(EMPTY(stage), phase ^ 1u);
                    mbar_expect_tx(FULL(stage), 2 * GG_TILE_B);
                    tma_load_2d(sa + stage * GG_TILE_B, &xmap, kt * GG_BK, xrow, FULL(stage));
                    if (BT)
                        for (int h = 0; h < 2; h++)
                            tma_load_2d(sb + stage * GG_TILE_B + h * (GG_TILE_B / 2), &wmap,
                                        j * GG_BM + 64 * h, e * wn + kt * GG_BK, FULL(stage));
                    else
                        tma_load_2d(sb + stage * GG_TILE_B, &wmap, kt * GG_BK, e * wn + j * GG_BM,
                                    FULL(stage));
                    if (++stage == GG_STAGES) stage = 0, phase ^= 1u;
                }
            }
        }
        return;
    }

    /* consumers: c = 0, 1 own tile rows [64 c, +64), each with its own epilogue rows and named
     * barrier, so one can run the next tile's MMAs during the other's stores */
    const int c = wg - 1, warp = tid / 32, lane = tid % 32;
    bf16 *ep = (bf16 *)(gbase + 2 * GG_STAGES * GG_TILE_B) + c * 64 * GG_EP_LD;
    const uint32_t bar_id = 1 + c;
    int stage = 0;
    uint32_t phase = 0;
    for (int t = blockIdx.x; t < total; t += gridDim.x) {
        const int mt = t / ntn, j = t % ntn, e = expert_of(mt, mstart, E);
        const int64_t r0 = off_s[e] + (int64_t)(mt - mstart[e]) * GG_BM + 64 * c;
        /* stores stay inside the expert and Y, whatever the offsets hold */
        const int64_t rend = min(off_s[e + 1], rows_cap), c0 = (int64_t)j * GG_BM;
        float acc[64];
#pragma unroll
        for (int q = 0; q < 64; q++) acc[q] = 0.0f;
        fence_acc(acc);
        int prev = -1;
        for (int kt = 0; kt < nk; kt++) {
            mbar_wait(FULL(stage), phase);
            wgmma_fence();
            const uint64_t da = sw128_desc(sa + stage * GG_TILE_B + c * 64 * 128);
            const uint64_t db = BT ? sw128_desc_mn(sb + stage * GG_TILE_B, GG_TILE_B / 2)
                                   : sw128_desc(sb + stage * GG_TILE_B);
            /* the next k16 in 16-byte units: 32 bytes on along a K-major row, 16 rows (2048
             * bytes) on in an MN-major box */
            const int step_b = BT ? 2048 >> 4 : 32 >> 4;
#pragma unroll
            for (int kk = 0; kk < GG_BK / 16; kk++)
                wgmma_m64n128k16<0, BT>(acc, da + 2 * kk, db + step_b * kk, 1);
            wgmma_commit();
            fence_acc(acc);
            if (prev >= 0) { /* the previous stage's MMAs are done: release it */
                wgmma_wait<1>();
                mbar_arrive(EMPTY(prev));
            }
            prev = stage;
            if (++stage == GG_STAGES) stage = 0, phase ^= 1u;
        }
        wgmma_wait<0>();
        fence_acc(acc);
        if (prev >= 0) mbar_arrive(EMPTY(prev));

            /* epilogue: bf16 rows [r0, r0 + 64) of the tile into ep, then stored inside the expert
             */
#pragma unroll
        for (int jn = 0; jn < 16; jn++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int r = warp * 16 + lane / 4 + 8 * h, col = 8 * jn + 2 * (lane % 4);
                *(__nv_bfloat162 *)(ep + r * GG_EP_LD + col) =
                    __floats2bfloat162_rn(acc[4 * jn + 2 * h], acc[4 * jn + 2 * h + 1]);
            }
        asm volatile("bar.sync %0, 128;\n" ::"r"(bar_id) : "memory");
        for (int u = tid; u < 64 * (GG_BM / 8); u += 128) { /* rows, 16-byte vectors */
            const int r = u / (GG_BM / 8), v = u % (GG_BM / 8);
            if (r0 + r >= rend || r0 + r < 0 || c0 + 8 * v >= out_w) continue;
            *(uint4 *)(Y + (r0 + r) * out_w + c0 + 8 * v) =
                *(const uint4 *)(ep + r * GG_EP_LD + 8 * v);
        }
        asm volatile("bar.sync %0, 128;\n" ::"r"(bar_id) : "memory"); /* free for the next tile */
    }
#undef FULL
#undef EMPTY
#else
    __trap(); /* a build without sm_90a: cuda_grouped_gemm_supported() is 0 */
#endif
}

/* ---- host ---- */

/* Both kernels take GG_SMEM dynamic bytes (and ~1 KB static), set once per device. */
static int set_attrs(void) {
    return cudaFuncSetAttribute(grouped_gemm_kernel<0>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                GG_SMEM) == cudaSuccess &&
           cudaFuncSetAttribute(grouped_gemm_kernel<1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                GG_SMEM) == cudaSuccess;
}

static cuda_hopper_cache hopper = CUDA_HOPPER_CACHE_INIT;

int cuda_grouped_gemm_supported(void) {
    return cuda_hopper_device(&hopper, GG_SMEM + 2048, set_attrs, NULL) >= 0;
}

int cuda_grouped_gemm_fits(const void *Y, const void *X, const void *W, int E, int N, int K,
                           int rows_cap, int trans_w) {
    const int al = ((uintptr_t)Y | (uintptr_t)X | (uintptr_t)W) % 16 == 0;
    return al && E >= 1 && E <= GG_MAX_E && N >= 8 && K >= 8 && N % 8 == 0 && K % 8 == 0 &&
           (!trans_w || N % GG_BK == 0) && rows_cap >= 1 && (long long)E * N < (1ll << 31);
}

/* A 2-D bf16 map over [rows][K] with [box_rows][64] boxes, 128-byte swizzle. */
static int make_map(CUtensorMap *map, const void *p, long long rows, int K, int box_rows) {
    const cuuint64_t dims[2] = {(cuuint64_t)K, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)K * 2};
    const cuuint32_t box[2] = {GG_BK, (cuuint32_t)box_rows}, estr[2] = {1, 1};
    CUresult r =
        encode_tiled()(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)p, dims, strides, box,
                       estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                       CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return zy_fail("cuda_grouped_gemm: cuTensorMapEncodeTiled failed (%d)", (int)r);
    return ZY_OK;
}

int cuda_grouped_gemm_bf16(void *Y, const void *X, const void *W, const int32_t *offsets, int E,
                           int N, int K, int rows_cap, int trans_w, void *stream) {
    if (!cuda_grouped_gemm_fits(Y, X, W, E, N, K, rows_cap, trans_w))
        return zy_fail("cuda_grouped_gemm: E=%d N=%d K=%d rows=%d trans_w=%d do not fit (1 <= E <= "
                       "%d, N and K multiples of 8, N of 64 with trans_w, pointers 16-byte "
                       "aligned)",
                       E, N, K, rows_cap, trans_w, GG_MAX_E);
    int sms = 0;
    if (cuda_hopper_device(&hopper, GG_SMEM + 2048, set_attrs, &sms) < 0)
        return zy_fail("cuda_grouped_gemm: this device or build cannot run it (needs compute "
                       "capability 9.0 and an sm_90a build)");
    CUtensorMap xmap, wmap;
    const int out_w = trans_w ? K : N, red = trans_w ? N : K; /* Y's width, the reduction */
    ZY_TRY(make_map(&xmap, X, rows_cap, red, GG_BM));
    ZY_TRY(make_map(&wmap, W, (long long)E * N, K, trans_w ? GG_BK : GG_BM));
    /* persistent: at most one CTA per SM, fewer when even the most tiles (every expert one
     * partial m-tile more) are fewer */
    const long long most = ((long long)rows_cap / GG_BM + E) * ((out_w + GG_BM - 1) / GG_BM);
    const int grid = (int)(most < sms ? most : sms);
    const int nk = (red + GG_BK - 1) / GG_BK;
    if (trans_w)
        grouped_gemm_kernel<1><<<grid, GG_NTH, GG_SMEM, (cudaStream_t)stream>>>(
            xmap, wmap, (bf16 *)Y, offsets, E, out_w, N, nk, rows_cap);
    else
        grouped_gemm_kernel<0><<<grid, GG_NTH, GG_SMEM, (cudaStream_t)stream>>>(
            xmap, wmap, (bf16 *)Y, offsets, E, out_w, N, nk, rows_cap);
    ZY_CUDA_TRY_LAUNCH();
    return ZY_OK;
}
