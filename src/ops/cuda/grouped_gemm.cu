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
 *     reading it are complete. They round the tile to bf16 into one of two staging slots and go
 *     on to the next tile's MMAs;
 *   warpgroup 0's warps 1-3 (the storers): store a staged tile's rows inside the expert as
 *     16-byte vectors, then free its slot. So the stores, and any work of the epilogue, run
 *     beside the next tile's MMAs.
 * With SwiGLU (the gate_up projection, W_e = [gate; up], each F rows) an n-tile is 64 gate rows
 * and the 64 up rows of the same columns (two [64 x 64] boxes a stage): the storers store gate
 * and up to Y and SwiGLU of their bf16 values to act, which saves the separate kernel's read of Y
 * (H100, bench-small's widths: 1.26x the two launches). Folding SwiGLU's backward into the down
 * projection's input gradient the same way was slower (0.73x: the storers' loads of the
 * forward's gate and up values); it is on branch swiglu-epilogue. */
#include "ops/cuda/grouped_gemm.h"
#include "ops/cuda/launch.h"

#include "base/check.h"
#include "base/err.h"
#include "ops/cuda/cuda_util.h"
#include "ops/cuda/hopper.h"
#include "ops/cuda/mma.h"
#include "ops/cuda/wgmma.h"

#include <cuda_bf16.h>

typedef __nv_bfloat16 bf16;

#define GG_BM       128 /* tile rows and columns */
#define GG_BK       64  /* k per stage: one 128-byte swizzle row */
#define GG_STAGES   4
#define GG_NTH      384
#define GG_MAX_E    128
#define GG_TILE_B   (GG_BM * GG_BK * 2) /* bytes of one operand tile */
#define GG_EP_LD    (GG_BM + 8)         /* a staged output tile [128][EP_LD] bf16: 16-byte pad */
#define GG_EP_B     (GG_BM * GG_EP_LD * 2)
#define GG_EP_SLOTS 2  /* staged tiles: the MMAs of one beside the other's stores */
#define GG_STORERS  96 /* threads of warps 1-3 of warpgroup 0 */
#define GG_BAR_AT   (2 * GG_STAGES * GG_TILE_B + GG_EP_SLOTS * GG_EP_B)
#define GG_SMEM     (GG_BAR_AT + (2 * GG_STAGES + 2 * GG_EP_SLOTS) * 8 + 1024) /* + align slack */

/* Where tile t of the grid's loop is: expert e, its first row r0 (of X and Y), the end of its rows
 * rend, and its n-tile j. */
struct gg_tile {
    int e, j;
    int64_t r0, rend;
};

/* n-tiles of an output out_w wide: 128 columns each, or with SwiGLU (out_w = 2F) 64 gate columns
 * and their 64 up columns each. */
static __host__ __device__ __forceinline__ int n_tiles(int out_w, int sw) {
    return sw ? (out_w / 2 + 63) / 64 : (out_w + GG_BM - 1) / GG_BM;
}

/* The expert and m-tile within it of global m-tile mt; mstart [E+1] is the m-tile prefix. */
static __device__ __forceinline__ int expert_of(int mt, const int *mstart, int E) {
    int e = 0;
    while (e + 1 < E && mstart[e + 1] <= mt) e++;
    return e;
}

static __device__ __forceinline__ gg_tile tile_at(int t, int ntn, const int *off_s,
                                                  const int *mstart, int E, int rows_cap) {
    gg_tile g;
    const int mt = t / ntn;
    g.j = t % ntn;
    g.e = expert_of(mt, mstart, E);
    g.r0 = off_s[g.e] + (int64_t)(mt - mstart[g.e]) * GG_BM;
    g.rend = min(off_s[g.e + 1], rows_cap); /* stores stay inside the expert and Y */
    return g;
}

/* BT 0: Y [rows, N] = X W_e^T, the reduction over K; a stage holds W rows [e N + 128 j, +128) x
 *   k [64 kt, +64) (K-major, one box).
 * BT 1: Y [rows, K] = X W_e, the reduction over W_e's N rows; a stage holds W rows
 *   [e N + 64 kt, +64) x columns [128 j, +128) as two [64][64] boxes 8 KB apart (MN-major).
 * SW 1 (with BT 0): W_e = [gate; up] of wn / 2 = F rows each; n-tile j is gate rows [64 j, +64)
 *   and up rows [F + 64 j, +64) ([64][64] K-major boxes, stacked); Y [rows, 2F] gets both and
 *   act [rows, F] = SwiGLU(gate, up) of their bf16 values.
 * out_w: Y's width (N or K); wn: W_e's rows (N); nk: stages of the reduction. */
template <int BT, int SW>
__global__ void __launch_bounds__(GG_NTH, 1)
    grouped_gemm_kernel(const __grid_constant__ CUtensorMap xmap,
                        const __grid_constant__ CUtensorMap wmap, bf16 *__restrict__ Y,
                        bf16 *__restrict__ act, const int32_t *__restrict__ offsets, int E,
                        int out_w, int wn, int nk, int rows_cap) {
    zy_pdl_begin();
    static_assert(!SW || !BT, "SwiGLU only in the forward");
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ uint8_t gg_smem[];
    __shared__ int off_s[GG_MAX_E + 1], mstart[GG_MAX_E + 1];
    const uint32_t raw = smem_u32(gg_smem), base = (raw + 1023u) & ~1023u;
    uint8_t *gbase = gg_smem + (base - raw);
    const uint32_t sa = base, sb = base + GG_STAGES * GG_TILE_B, bars = base + GG_BAR_AT;
    bf16 *const ep0 = (bf16 *)(gbase + 2 * GG_STAGES * GG_TILE_B); /* GG_EP_SLOTS staged tiles */
#define FULL(s)    (bars + 8u * (uint32_t)(s))
#define EMPTY(s)   (bars + 8u * (uint32_t)(GG_STAGES + (s)))
#define EP_FULL(s) (bars + 8u * (uint32_t)(2 * GG_STAGES + (s)))
#define EP_FREE(s) (bars + 8u * (uint32_t)(2 * GG_STAGES + GG_EP_SLOTS + (s)))
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    for (int e = threadIdx.x; e <= E; e += blockDim.x) off_s[e] = offsets[e];
    if (threadIdx.x == 0) {
        for (int s = 0; s < GG_STAGES; s++) {
            mbar_init(FULL(s), 1);
            mbar_init(EMPTY(s), 256); /* every consumer thread releases */
        }
        for (int s = 0; s < GG_EP_SLOTS; s++) {
            mbar_init(EP_FULL(s), 256);        /* every consumer thread has staged its part */
            mbar_init(EP_FREE(s), GG_STORERS); /* every storer has read the slot */
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
    const int F = out_w / 2; /* SW: the activation's width */
    const int ntn = n_tiles(out_w, SW), total = mstart[E] * ntn;

    if (wg == 0 && tid < 32) { /* producer: one thread */
        if (tid == 0) {
            int stage = 0;
            uint32_t phase = 0;
            for (int t = blockIdx.x; t < total; t += gridDim.x) {
                const gg_tile g = tile_at(t, ntn, off_s, mstart, E, rows_cap);
                for (int kt = 0; kt < nk; kt++) {
                    mbar_wait(EMPTY(stage), phase ^ 1u);
                    mbar_expect_tx(FULL(stage), 2 * GG_TILE_B);
                    tma_load_2d(sa + stage * GG_TILE_B, &xmap, kt * GG_BK, (int)g.r0, FULL(stage));
                    if (BT)
                        for (int h = 0; h < 2; h++)
                            tma_load_2d(sb + stage * GG_TILE_B + h * (GG_TILE_B / 2), &wmap,
                                        g.j * GG_BM + 64 * h, g.e * wn + kt * GG_BK, FULL(stage));
                    else if (SW) /* gate rows, then the up rows of the same columns */
                        for (int h = 0; h < 2; h++)
                            tma_load_2d(sb + stage * GG_TILE_B + h * (GG_TILE_B / 2), &wmap,
                                        kt * GG_BK, g.e * wn + h * F + 64 * g.j, FULL(stage));
                    else
                        tma_load_2d(sb + stage * GG_TILE_B, &wmap, kt * GG_BK,
                                    g.e * wn + g.j * GG_BM, FULL(stage));
                    if (++stage == GG_STAGES) stage = 0, phase ^= 1u;
                }
            }
        }
        return;
    }

    if (wg == 0) { /* storers: a staged tile's rows inside the expert to global memory */
        const int st = tid - 32;
        for (int t = blockIdx.x, it = 0; t < total; t += gridDim.x, it++) {
            const gg_tile g = tile_at(t, ntn, off_s, mstart, E, rows_cap);
            const int slot = it % GG_EP_SLOTS;
            const bf16 *ep = ep0 + slot * (GG_BM * GG_EP_LD);
            mbar_wait(EP_FULL(slot), (uint32_t)(it / GG_EP_SLOTS) & 1u);
            if (!SW)
                for (int u = st; u < GG_BM * (GG_BM / 8); u += GG_STORERS) {
                    const int r = u / (GG_BM / 8), v = u % (GG_BM / 8); /* row, 16-byte vector */
                    const int64_t row = g.r0 + r, col = (int64_t)g.j * GG_BM + 8 * v;
                    if (row >= g.rend || col >= out_w) continue;
                    *(uint4 *)(Y + row * out_w + col) = *(const uint4 *)(ep + r * GG_EP_LD + 8 * v);
                }
            else /* columns 0-63 of the tile are the gate's, 64-127 the up's */
                for (int u = st; u < GG_BM * 8; u += GG_STORERS) {
                    const int r = u / 8, v = u % 8;
                    const int64_t row = g.r0 + r, col = (int64_t)g.j * 64 + 8 * v;
                    if (row >= g.rend || col >= F) continue;
                    const uint4 gv = *(const uint4 *)(ep + r * GG_EP_LD + 8 * v);
                    const uint4 uv = *(const uint4 *)(ep + r * GG_EP_LD + 64 + 8 * v);
                    *(uint4 *)(Y + row * out_w + col) = gv;
                    *(uint4 *)(Y + row * out_w + F + col) = uv;
                    float a[8], b[8], o[8];
                    zy_load<bf16, 8>((const bf16 *)&gv, a);
                    zy_load<bf16, 8>((const bf16 *)&uv, b);
#pragma unroll
                    for (int q = 0; q < 8; q++) o[q] = zy_swiglu(a[q], b[q]);
                    zy_store<bf16, 8>(act + row * F + col, o);
                }
            mbar_arrive(EP_FREE(slot)); /* this thread's reads of the slot are done */
        }
        return;
    }

    /* consumers: c = 0, 1 own tile rows [64 c, +64); a tile's bf16 result is staged in a slot for
     * the storers, so the next tile's MMAs start at once */
    const int c = wg - 1, warp = tid / 32, lane = tid % 32;
    int stage = 0;
    uint32_t phase = 0;
    for (int t = blockIdx.x, it = 0; t < total; t += gridDim.x, it++) {
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

        /* rows [64 c, +64) of the tile, rounded to bf16, into the slot once the storers are done
         * with its previous tile */
        const int slot = it % GG_EP_SLOTS;
        bf16 *ep = ep0 + slot * (GG_BM * GG_EP_LD) + c * 64 * GG_EP_LD;
        mbar_wait(EP_FREE(slot), ((uint32_t)(it / GG_EP_SLOTS) & 1u) ^ 1u);
#pragma unroll
        for (int jn = 0; jn < 16; jn++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int r = warp * 16 + lane / 4 + 8 * h, col = 8 * jn + 2 * (lane % 4);
                *(__nv_bfloat162 *)(ep + r * GG_EP_LD + col) =
                    __floats2bfloat162_rn(acc[4 * jn + 2 * h], acc[4 * jn + 2 * h + 1]);
            }
        mbar_arrive(EP_FULL(slot)); /* releases this thread's writes to the storers */
    }
#undef FULL
#undef EMPTY
#undef EP_FULL
#undef EP_FREE
#else
    __trap(); /* a build without sm_90a: cuda_grouped_gemm_supported() is 0 */
#endif
}

/* ---- host ---- */

/* The kernels take GG_SMEM dynamic bytes (and ~1 KB static), set once per device. */
static int set_attrs(void) {
    const void *k[3] = {(const void *)grouped_gemm_kernel<0, 0>,
                        (const void *)grouped_gemm_kernel<1, 0>,
                        (const void *)grouped_gemm_kernel<0, 1>};
    for (int i = 0; i < 3; i++)
        if (cudaFuncSetAttribute(k[i], cudaFuncAttributeMaxDynamicSharedMemorySize, GG_SMEM) !=
            cudaSuccess)
            return 0;
    return 1;
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

/* Launches one of the kernels once the arguments fit: act non-NULL for SwiGLU (N = 2F). */
static int launch(void *Y, void *act, const void *X, const void *W, const int32_t *offsets, int E,
                  int N, int K, int rows_cap, int trans_w, void *stream) {
    int sms = 0;
    if (cuda_hopper_device(&hopper, GG_SMEM + 2048, set_attrs, &sms) < 0)
        return zy_fail("cuda_grouped_gemm: this device or build cannot run it (needs compute "
                       "capability 9.0 and an sm_90a build)");
    CUtensorMap xmap, wmap;
    const int out_w = trans_w ? K : N, red = trans_w ? N : K; /* Y's width, the reduction */
    ZY_TRY(make_map(&xmap, X, rows_cap, red, GG_BM));
    ZY_TRY(make_map(&wmap, W, (long long)E * N, K, trans_w || act ? 64 : GG_BM));
    /* persistent: at most one CTA per SM, fewer when even the most tiles (every expert one
     * partial m-tile more) are fewer */
    const int ntn = n_tiles(out_w, act != NULL);
    const long long most = ((long long)rows_cap / GG_BM + E) * ntn;
    const int grid = (int)(most < sms ? most : sms);
    const int nk = (red + GG_BK - 1) / GG_BK;
    cudaStream_t st = (cudaStream_t)stream;
    bf16 *y = (bf16 *)Y, *a = (bf16 *)act;
    if (trans_w)
        zy_launch(grouped_gemm_kernel<1, 0>, grid, GG_NTH, GG_SMEM, st, xmap, wmap, y, nullptr,
                  offsets, E, out_w, N, nk, rows_cap);
    else if (act)
        zy_launch(grouped_gemm_kernel<0, 1>, grid, GG_NTH, GG_SMEM, st, xmap, wmap, y, a, offsets,
                  E, out_w, N, nk, rows_cap);
    else
        zy_launch(grouped_gemm_kernel<0, 0>, grid, GG_NTH, GG_SMEM, st, xmap, wmap, y, nullptr,
                  offsets, E, out_w, N, nk, rows_cap);
    ZY_CUDA_TRY_LAUNCH();
    return ZY_OK;
}

int cuda_grouped_gemm_bf16(void *Y, const void *X, const void *W, const int32_t *offsets, int E,
                           int N, int K, int rows_cap, int trans_w, void *stream) {
    if (!cuda_grouped_gemm_fits(Y, X, W, E, N, K, rows_cap, trans_w))
        return zy_fail("cuda_grouped_gemm: E=%d N=%d K=%d rows=%d trans_w=%d do not fit (1 <= E <= "
                       "%d, N and K multiples of 8, N of 64 with trans_w, pointers 16-byte "
                       "aligned)",
                       E, N, K, rows_cap, trans_w, GG_MAX_E);
    return launch(Y, NULL, X, W, offsets, E, N, K, rows_cap, trans_w, stream);
}

int cuda_grouped_gemm_swiglu_fits(const void *Y, const void *act, const void *X, const void *W,
                                  int E, int F, int K, int rows_cap) {
    return F >= 8 && F % 8 == 0 && F < (1 << 29) && (uintptr_t)act % 16 == 0 &&
           cuda_grouped_gemm_fits(Y, X, W, E, 2 * F, K, rows_cap, 0);
}

int cuda_grouped_gemm_swiglu_bf16(void *Y, void *act, const void *X, const void *W,
                                  const int32_t *offsets, int E, int F, int K, int rows_cap,
                                  void *stream) {
    if (!cuda_grouped_gemm_swiglu_fits(Y, act, X, W, E, F, K, rows_cap))
        return zy_fail("cuda_grouped_gemm_swiglu: E=%d F=%d K=%d rows=%d do not fit (1 <= E <= %d, "
                       "F and K multiples of 8, pointers 16-byte aligned)",
                       E, F, K, rows_cap, GG_MAX_E);
    return launch(Y, act, X, W, offsets, E, 2 * F, K, rows_cap, 0, stream);
}
