/* Batched bf16 SYRK on Hopper (syrk.h): TMA loads, cluster multicast, an mbarrier ring, wgmma
 * m64n128k16.
 *
 * Clusters of two CTAs (one CTA of 384 threads per SM: the ring and the epilogue buffers take
 * ~200 KB) loop over items of the whole batch, clusters striding by the grid. An item is two lower
 * tiles of one block row, (i, 2p) and (i, 2p + 1), one per CTA: both read the rows [128 i, +128)
 * of X_b (X^T X: columns), so each CTA loads half of them into both CTAs' shared memory (TMA
 * multicast) and its own column block alone. That is 24 KB from L2 per k step and tile instead
 * of 32: the 128 x 128 tile is bound by L2 bandwidth (ncu, results/one-gpu-limit/README.md). The
 * last item of an even block row is the diagonal tile alone; the second CTA computes it too and
 * does not store it.
 *   warpgroup 0, one thread: for each item in turn and each k step, waits until the stage is
 *     empty in both CTAs, then loads its half of the shared rows into both and its column block
 *     (k [64 kt, +64); none on a diagonal tile, which reads the shared rows twice; rows past n
 *     and k past k arrive as zeros);
 *   warpgroups 1 and 2 take the items in turn (ping-pong): each computes its CTA's whole tile,
 *     all 128 rows against all 128 columns (two wgmma m64n128k16 per k16, one commit group in
 *     flight; a stage is released, in both CTAs, once the MMAs reading it are complete). While
 *     one runs its tile's MMAs, the other runs the epilogue of its previous tile. An ordering
 *     barrier hands the ring from one to the other once a tile's MMAs are issued, so each waits
 *     on the ring's barriers in the producer's order (a parity wait must never be two phases
 *     ahead). C's part of the tile is copied into shared memory (cp.async) before the MMAs. The
 *     epilogue forms alpha a_b acc + beta b_b C (+ d_b on the diagonal) in fp32, rounds to bf16
 *     into the warpgroup's shared tile, stores its rows, then writes the transpose into the same
 *     buffer and stores it at the mirrored place (on a diagonal tile, the elements on and below
 *     the diagonal and the mirrors of those below).
 * Shared operand tiles use the 128-byte swizzle TMA writes and the wgmma descriptors read:
 * K-major for X X^T (row r of a [128][64] tile is 128 bytes at 128 r whose 16-byte chunks are
 * permuted by r % 8; 8-row atoms 1024 bytes apart), MN-major for X^T X ([64 k][64 n] boxes of
 * 128-byte rows, 8 KB apart along n). */
#include "ops/cuda/syrk.h"

#include "base/check.h"
#include "base/err.h"
#include "ops/cuda/mma.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <pthread.h>
#include <stdint.h>

typedef __nv_bfloat16 bf16;

#define SY_BM     128 /* tile side */
#define SY_BK     64  /* k per stage: one 128-byte swizzle row */
#define SY_STAGES 4
#define SY_NTH    384
#define SY_TILE_B (SY_BM * SY_BK * 2) /* bytes of one operand tile */
#define SY_EP_LD  (SY_BM + 8) /* a consumer's epilogue tile [128][EP_LD] bf16: 16-byte pad */
#define SY_EP_B   (2 * SY_BM * SY_EP_LD * 2)
#define SY_BAR_AT (2 * SY_STAGES * SY_TILE_B + SY_EP_B)
#define SY_SMEM   (SY_BAR_AT + 2 * SY_STAGES * 8 + 1024) /* + slack to align the base to 1024 */

/* ---- PTX: mbarriers, TMA, wgmma ---- */

static __device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

static __device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}

static __device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

/* Waits until the phase of parity `parity` of the barrier has completed. */
static __device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred p;\n"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}

/* The box of map at (c0, c1, c2) into shared dst; completes `bar`'s transaction bytes. */
static __device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap *map, int c0,
                                                   int c1, int c2, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
                 "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
                 : "memory");
}

/* The same box into the shared memory of every CTA of the cluster in `mask`, at the same
 * offset, each completing the barrier at the same offset in its own CTA. */
static __device__ __forceinline__ void tma_load_3d_mc(uint32_t dst, const CUtensorMap *map, int c0,
                                                      int c1, int c2, uint32_t bar, uint16_t mask) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 ".multicast::cluster [%0], [%1, {%2, %3, %4}], [%5], %6;\n" ::"r"(dst),
                 "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(c2), "r"(bar), "h"(mask)
                 : "memory");
}

/* Arrives on the barrier at the same offset in CTA `cta` of the cluster. */
static __device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar, uint32_t cta) {
    uint32_t remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(bar), "r"(cta));
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(remote)
                 : "memory");
}

/* Every thread of the cluster's CTAs. */
static __device__ __forceinline__ void cluster_sync(void) {
    asm volatile(
        "barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::
            : "memory");
}

static __device__ __forceinline__ uint32_t cluster_rank(void) {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}

/* The wgmma descriptor of a K-major, 128-byte-swizzled operand at shared address addr: start
 * address >> 4 (bits 0-13), leading offset 1 (unused by swizzled K-major layouts), stride offset
 * 1024 bytes >> 4 between 8-row atoms (bits 32-45), layout SWIZZLE_128B (1, bits 62-63). The
 * next k16 slice of the same rows starts 32 bytes on: +2 in the address field. */
static __device__ __forceinline__ uint64_t sw128_desc(uint32_t addr) {
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) |
           ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}

/* The same for an MN-major operand (trans): [64 k rows][64 MN] boxes of 128-byte rows, the MN
 * chunks of 64 `chunk` bytes apart (leading offset), groups of 8 k rows 1024 bytes apart (stride
 * offset). The next k16 slice starts 16 rows = 2048 bytes on: +128 in the address field. */
static __device__ __forceinline__ uint64_t sw128_desc_mn(uint32_t addr, uint32_t chunk) {
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)(chunk >> 4) << 16) |
           ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}

static __device__ __forceinline__ void wgmma_fence(void) {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
static __device__ __forceinline__ void wgmma_commit(void) {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> static __device__ __forceinline__ void wgmma_wait(void) {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/* Pins the accumulators in place around the asynchronous MMAs: the compiler sees each register
 * read and written here, so it neither hoists the epilogue's reads above wgmma_wait nor sinks
 * the zeroing below the first wgmma (the wgmma asm alone does not tell it the registers change
 * later, asynchronously). */
static __device__ __forceinline__ void fence_acc(float (&d)[64]) {
#pragma unroll
    for (int e = 0; e < 64; e++) asm volatile("" : "+f"(d[e])::"memory");
}

/* d[64 x 128] (this warpgroup's fragment) (+)= A[64 x 16] B[128 x 16]^T from descriptors, both
 * K-major (TR 0) or both MN-major (TR 1); accumulate 0 overwrites d. Fragment: warp w of the
 * warpgroup holds rows 16 w + lane / 4 (+ 8), d[4 j + 0, 1] columns 8 j + 2 (lane % 4) + {0, 1} of
 * the first row, d[4 j + 2, 3] of the second. */
template <int TR>
static __device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t da, uint64_t db,
                                                        int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                 "}, %64, %65, p, 1, 1, %67, %67;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
                   "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                   "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
                   "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
                   "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
                   "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
                   "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(accumulate), "n"(TR));
}

/* Items: a cluster of two CTAs computes two tiles of one block row i at once, (i, 2p) and
 * (i, 2p + 1), sharing the rows [128 i, +128): row i has i / 2 + 1 items, the last one of an even
 * row a single diagonal tile (i, i), which the second CTA computes too but does not store. Items
 * before row i: f(i) = m (m + 1) for i = 2m, (m + 1)^2 for i = 2m + 1. */
static __device__ __forceinline__ int items_before(int i) {
    const int m = i / 2;
    return i % 2 ? (m + 1) * (m + 1) : m * (m + 1);
}

/* Item t of the batch (nitem per matrix): matrix b, block row i, this CTA's tile column j (rank
 * cr of the cluster), and whether it is the duplicate that is not stored. */
static __device__ __forceinline__ void item_of(int t, int nitem, int cr, int *b, int *i, int *j,
                                               bool *dup) {
    *b = t / nitem;
    const int r = t - *b * nitem;
    int row = max((int)(2.0f * sqrtf((float)r)) - 2, 0);
    while (items_before(row + 1) <= r) row++;
    while (items_before(row) > r) row--;
    *i = row;
    const int col = 2 * (r - items_before(row)) + cr;
    *dup = col > row;
    *j = *dup ? row : col;
}

/* grid: clusters of 2 CTAs striding over `total` = batch x nitem items; block SY_NTH; SY_SMEM
 * dynamic bytes. A stage holds this CTA's two operands, each two [64][64] boxes 8 KB apart:
 * TR 0: X_b [n, k], D = X X^T, rows [128 i + 64 h, +64) x k [64 kt, +64);
 * TR 1: X_b [k, n], D = X^T X, k rows [64 kt, +64) x columns [128 i + 64 h, +64).
 * The shared operand's box h is loaded by CTA h of the cluster into both. */
template <int TR>
__global__ void __launch_bounds__(SY_NTH, 1)
    syrk_kernel(const __grid_constant__ CUtensorMap xmap, bf16 *__restrict__ D,
                const bf16 *__restrict__ C, int n, int nk, int64_t ldd, int64_t sd, int nitem,
                int total, float alpha, float beta, cuda_syrk_scales per) {
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
            /* lane 0 of each warp of the consumer of the stage's item, in both CTAs: the
             * stage is written by both CTAs' loads */
            mbar_init(EMPTY(s), 8);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    cluster_sync();
    const uint32_t cr = cluster_rank(), peer = cr ^ 1u;
    const int cid = (int)blockIdx.x / 2, ncl = (int)gridDim.x / 2;
    const int nmine = (total - cid + ncl - 1) / ncl; /* this cluster's items */

    if (wg == 0) { /* producer */
        /* its registers go to the consumers (128 x 40 + 256 x 232 <= 64 K) */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (tid == 0) {
            int stage = 0;
            uint32_t phase = 0;
            for (int q = 0; q < nmine; q++) {
                int b, i, j;
                bool dup;
                item_of(cid + q * ncl, nitem, (int)cr, &b, &i, &j, &dup);
                for (int kt = 0; kt < nk; kt++) {
                    /* both CTAs' consumers have released the stage: this CTA writes both */
                    mbar_wait(EMPTY(stage), phase ^ 1u);
                    mbar_expect_tx(FULL(stage), (i == j ? 1 : 2) * SY_TILE_B);
                    const uint32_t at = stage * SY_TILE_B;
                    const int h = (int)cr; /* this CTA's box of the shared rows, to both */
                    tma_load_3d_mc(sa + at + h * (SY_TILE_B / 2), &xmap,
                                   TR ? i * SY_BM + 64 * h : kt * SY_BK,
                                   TR ? kt * SY_BK : i * SY_BM + 64 * h, b, FULL(stage), 3);
                    if (i != j) /* its own column block; a diagonal tile reads the shared rows */
                        for (int hb = 0; hb < 2; hb++)
                            tma_load_3d(sb + at + hb * (SY_TILE_B / 2), &xmap,
                                        TR ? j * SY_BM + 64 * hb : kt * SY_BK,
                                        TR ? kt * SY_BK : j * SY_BM + 64 * hb, b, FULL(stage));
                    if (++stage == SY_STAGES) stage = 0, phase ^= 1u;
                }
            }
        }
        __syncwarp();
    } else {
        /* consumers: c = 0, 1 take the CTA's tiles q = c, c + 2, ..., each with its own epilogue
         * buffer and named barrier 1 + c; barriers 3 and 4 order the mainloops: 3 is passed when
         * consumer 0 has issued a tile's MMAs (consumer 1 may start the next), 4 the other way */
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
        const int c = wg - 1, warp = tid / 32, lane = tid % 32;
        bf16 *ep =
            (bf16 *)(gbase + 2 * SY_STAGES * SY_TILE_B) + c * SY_BM * SY_EP_LD; /* [128][LD] */
        const uint32_t bar_id = 1 + c, wait_id = c == 0 ? 4 : 3, pass_id = c == 0 ? 3 : 4;
        for (int q = c; q < nmine; q += 2) {
            int b, i, j;
            bool dup;
            item_of(cid + q * ncl, nitem, (int)cr, &b, &i, &j, &dup);
            const int64_t r0 = (int64_t)i * SY_BM, c0 = (int64_t)j * SY_BM;
            const bool diag = i == j;
            if (beta != 0.0f && !dup) { /* C's [r0, +128) x [c0, +128) into ep beside the MMAs */
                const bf16 *Cb = C + (int64_t)b * sd;
                for (int u = tid; u < SY_BM * (SY_BM / 8); u += 128) {
                    const int r = u / (SY_BM / 8), v = u % (SY_BM / 8);
                    if (diag && 8 * v > r) continue; /* above the diagonal: unused */
                    const bool ok = r0 + r < n && c0 + 8 * v < n;
                    cp_async16(smem_u32(ep + r * SY_EP_LD + 8 * v),
                               ok ? Cb + (r0 + r) * ldd + c0 + 8 * v : Cb, ok);
                }
                cp_async_commit();
            }
            float acc[2][64]; /* rows [64 h, +64) of the tile, h = 0, 1 */
#pragma unroll
            for (int e = 0; e < 64; e++) acc[0][e] = acc[1][e] = 0.0f;
            fence_acc(acc[0]);
            fence_acc(acc[1]);
            if (q > 0) asm volatile("bar.sync %0, 256;\n" ::"r"(wait_id) : "memory");
            int prev = -1;
            for (int kt = 0; kt < nk; kt++) {
                const int64_t g = (int64_t)q * nk + kt; /* the ring's use of this k step */
                const int stage = (int)(g % SY_STAGES);
                mbar_wait(FULL(stage), (uint32_t)(g / SY_STAGES) & 1u);
                wgmma_fence();
                const uint32_t ta = sa + stage * SY_TILE_B,
                               tb = (diag ? sa : sb) + stage * SY_TILE_B;
                /* rows [64 h, +64) of A: 64 K-major rows, or the h-th MN chunk */
                const uint64_t da0 = TR ? sw128_desc_mn(ta, SY_TILE_B / 2) : sw128_desc(ta);
                const uint64_t da1 = TR ? sw128_desc_mn(ta + SY_TILE_B / 2, SY_TILE_B / 2)
                                        : sw128_desc(ta + 64 * 128);
                const uint64_t db = TR ? sw128_desc_mn(tb, SY_TILE_B / 2) : sw128_desc(tb);
                const int step = TR ? 2048 >> 4 : 32 >> 4; /* the next k16, in 16-byte units */
#pragma unroll
                for (int kk = 0; kk < SY_BK / 16; kk++) {
                    wgmma_m64n128k16<TR>(acc[0], da0 + step * kk, db + step * kk, 1);
                    wgmma_m64n128k16<TR>(acc[1], da1 + step * kk, db + step * kk, 1);
                }
                wgmma_commit();
                fence_acc(acc[0]);
                fence_acc(acc[1]);
                if (prev >= 0) { /* the previous stage's MMAs are done: release it in both CTAs */
                    wgmma_wait<1>();
                    if (lane == 0) mbar_arrive(EMPTY(prev)), mbar_arrive_cluster(EMPTY(prev), peer);
                }
                prev = stage;
            }
            /* every wait on the ring for this tile is behind: the other consumer may start */
            if (q + 1 < nmine) asm volatile("bar.arrive %0, 256;\n" ::"r"(pass_id) : "memory");
            wgmma_wait<0>();
            fence_acc(acc[0]);
            fence_acc(acc[1]);
            if (lane == 0) mbar_arrive(EMPTY(prev)), mbar_arrive_cluster(EMPTY(prev), peer);
            if (dup) continue; /* the other CTA stores this diagonal tile */

            /* epilogue: alpha acc + beta C (prefetched into ep) -> bf16 tile rows in ep, over C;
             * the results are kept packed in o for the transpose */
            if (beta != 0.0f) {
                cp_async_wait<0>();
                asm volatile("bar.sync %0, 128;\n" ::"r"(bar_id) : "memory");
            }
            bf16 *Db = D + (int64_t)b * sd;
            const float fa = per.a ? alpha * per.a[b] : alpha, fb = per.b ? beta * per.b[b] : beta;
            const float fd = per.d ? per.d[b] : 0.0f;
            __nv_bfloat162 o[2][16][2];
#pragma unroll
            for (int hf = 0; hf < 2; hf++)
#pragma unroll
                for (int jn = 0; jn < 16; jn++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const int r = 64 * hf + warp * 16 + lane / 4 + 8 * h;
                        const int col = 8 * jn + 2 * (lane % 4);
                        float v0 = fa * acc[hf][4 * jn + 2 * h],
                              v1 = fa * acc[hf][4 * jn + 2 * h + 1];
                        if (beta != 0.0f) { /* this thread reads and then writes the same pair */
                            const __nv_bfloat162 cv =
                                *(const __nv_bfloat162 *)(ep + r * SY_EP_LD + col);
                            v0 += fb * __bfloat162float(cv.x);
                            v1 += fb * __bfloat162float(cv.y);
                        }
                        if (diag && col == r) v0 += fd; /* the diagonal: col even, so v0 */
                        if (diag && col + 1 == r) v1 += fd;
                        o[hf][jn][h] = __floats2bfloat162_rn(v0, v1);
                        *(__nv_bfloat162 *)(ep + r * SY_EP_LD + col) = o[hf][jn][h];
                    }
            asm volatile("bar.sync %0, 128;\n" ::"r"(bar_id) : "memory");
            /* Stores. On a diagonal tile only the elements on and below its diagonal are stored as
             * computed and the ones below mirrored (the MMA does not give (x, y) and (y, x) the
             * same bits), so vectors that cross the diagonal go element by element. */
            for (int u = tid; u < SY_BM * (SY_BM / 8); u += 128) { /* rows, 16-byte vectors */
                const int r = u / (SY_BM / 8), v = u % (SY_BM / 8);
                if (r0 + r >= n || c0 + 8 * v >= n) continue;
                const int ok = diag ? min(max(r - 8 * v + 1, 0), 8) : 8; /* first ok cols */
                bf16 *dst = Db + (r0 + r) * ldd + c0 + 8 * v;
                const bf16 *src = ep + r * SY_EP_LD + 8 * v;
                if (ok == 8)
                    *(uint4 *)dst = *(const uint4 *)src;
                else
                    for (int e = 0; e < ok; e++) dst[e] = src[e];
            }
            asm volatile("bar.sync %0, 128;\n" ::"r"(bar_id) : "memory");
#pragma unroll
            for (int hf = 0; hf < 2; hf++) /* the transpose into ep: [col][row] */
#pragma unroll
                for (int jn = 0; jn < 16; jn++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const int r = 64 * hf + warp * 16 + lane / 4 + 8 * h;
                        const int col = 8 * jn + 2 * (lane % 4);
                        ep[col * SY_EP_LD + r] = o[hf][jn][h].x;
                        ep[(col + 1) * SY_EP_LD + r] = o[hf][jn][h].y;
                    }
            asm volatile("bar.sync %0, 128;\n" ::"r"(bar_id) : "memory");
            for (int u = tid; u < SY_BM * (SY_BM / 8); u += 128) { /* mirrored: D[c0 + cc][r0..] */
                const int cc = u / (SY_BM / 8), v = u % (SY_BM / 8);
                if (c0 + cc >= n || r0 + 8 * v >= n) continue;
                /* element e mirrors tile row 8 v + e, column cc: below the diagonal from e0 */
                const int e0 = diag ? min(max(cc - 8 * v + 1, 0), 8) : 0;
                bf16 *dst = Db + (c0 + cc) * ldd + r0 + 8 * v;
                const bf16 *src = ep + cc * SY_EP_LD + 8 * v;
                if (e0 == 0)
                    *(uint4 *)dst = *(const uint4 *)src;
                else
                    for (int e = e0; e < 8; e++) dst[e] = src[e];
            }
            asm volatile("bar.sync %0, 128;\n" ::"r"(bar_id)
                         : "memory"); /* free for the next tile */
        }
    }
    /* no CTA leaves while the other may still arrive on its barriers */
    cluster_sync();
#undef FULL
#undef EMPTY
#else
    __trap(); /* a build without sm_90a: cuda_syrk_supported() is 0, so nothing launches this */
#endif
}

/* *flag = 1 when this build compiled the kernel's body (sm_90a features), else 0. */
__global__ void syrk_probe(int *flag) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    *flag = 1;
#else
    *flag = 0;
#endif
}

/* ---- host ---- */

static PFN_cuTensorMapEncodeTiled_v12000 lookup_encode_tiled(void) {
    void *p = NULL;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
        return NULL;
    return (PFN_cuTensorMapEncodeTiled_v12000)p;
}

static PFN_cuTensorMapEncodeTiled_v12000 encode_tiled(void) {
    static const PFN_cuTensorMapEncodeTiled_v12000 fn = lookup_encode_tiled(); /* once, safely */
    return fn;
}

/* Per device (the current one): whether the kernel runs there (-1: not yet known), how many of its
 * clusters fit at once, and whether its shared-memory opt-in is set; under one lock, since threads
 * of one process may drive different GPUs. */
#define SY_MAX_DEV 64
static pthread_mutex_t dev_lock = PTHREAD_MUTEX_INITIALIZER;
static int dev_ok[SY_MAX_DEV], dev_known[SY_MAX_DEV], dev_clusters[SY_MAX_DEV];

/* How many clusters of two CTAs of the kernel are resident at once on the current device (0 on
 * failure). */
static int max_clusters(void) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 2, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
    cfg.gridDim = dim3(2), cfg.blockDim = dim3(SY_NTH), cfg.dynamicSmemBytes = SY_SMEM;
    cfg.attrs = attr, cfg.numAttrs = 1;
    int n0 = 0, n1 = 0;
    if (cudaOccupancyMaxActiveClusters(&n0, syrk_kernel<0>, &cfg) != cudaSuccess ||
        cudaOccupancyMaxActiveClusters(&n1, syrk_kernel<1>, &cfg) != cudaSuccess)
        return 0;
    return n0 < n1 ? n0 : n1;
}

/* Fills dev_* for the current device once; returns its index or -1. */
static int device_state(void) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= SY_MAX_DEV) return -1;
    pthread_mutex_lock(&dev_lock);
    if (!dev_known[dev]) {
        int major = 0, minor = 0, optin = 0, ok = 0, *flag = NULL;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess &&
            cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) ==
                cudaSuccess &&
            major == 9 && minor == 0 && optin >= SY_SMEM && encode_tiled() &&
            cudaMalloc(&flag, sizeof *flag) == cudaSuccess) {
            /* the body exists only in an sm_90a build (Makefile CUDA_ARCH): ask the device */
            int h = 0;
            syrk_probe<<<1, 1>>>(flag);
            ok = cudaMemcpy(&h, flag, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess && h == 1 &&
                 cudaFuncSetAttribute(syrk_kernel<0>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      SY_SMEM) == cudaSuccess &&
                 cudaFuncSetAttribute(syrk_kernel<1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      SY_SMEM) == cudaSuccess &&
                 (dev_clusters[dev] = max_clusters()) > 0;
        }
        if (flag) cudaFree(flag);
        (void)cudaGetLastError(); /* a failed probe leaves no error behind for the next call */
        dev_ok[dev] = ok;
        dev_known[dev] = 1;
    }
    pthread_mutex_unlock(&dev_lock);
    return dev;
}

int cuda_syrk_supported(void) {
    const int dev = device_state();
    return dev >= 0 && dev_ok[dev];
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
    const int dev = device_state();
    if (dev < 0 || !dev_ok[dev])
        return zy_fail("cuda_syrk: this device or build cannot run it (needs compute capability "
                       "9.0 and an sm_90a build)");
    PFN_cuTensorMapEncodeTiled_v12000 enc = encode_tiled();
    CUtensorMap map;
    /* dims innermost first: [batch][rows][cols] of X; [64][64] boxes (64 rows or columns) */
    const cuuint64_t dims[3] = {(cuuint64_t)(trans ? n : k), (cuuint64_t)(trans ? k : n),
                                (cuuint64_t)batch};
    const cuuint64_t strides[2] = {(cuuint64_t)ldx * 2, (cuuint64_t)sx * 2}; /* bytes, dims 1, 2 */
    const cuuint32_t box[3] = {64, 64, 1}, estr[3] = {1, 1, 1};
    CUresult r = enc(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, (void *)X, dims, strides, box, estr,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                     CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) return zy_fail("cuda_syrk: cuTensorMapEncodeTiled failed (%d)", (int)r);
    /* items of two tiles of a block row (item_of): sum over rows i of i / 2 + 1 */
    const long long tiles = (n + SY_BM - 1) / SY_BM, m = tiles / 2;
    const long long nitem = tiles % 2 ? (m + 1) * (m + 1) : m * (m + 1);
    const long long total = nitem * batch;
    if (total > (1ll << 30)) return zy_fail("cuda_syrk: %lld tiles", total);
    /* persistent, one cluster of two CTAs per two SMs: measured beside the forward
     * (cuda.overlap_optimizer) on one H100, a CTA per tile was no better (bench-small Muon step
     * 83.17 / 82.62 ms against 81.66 / 82.21) and half the SMs worse (89.1 ms) */
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 2, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
    cfg.blockDim = dim3(SY_NTH), cfg.dynamicSmemBytes = SY_SMEM;
    cfg.stream = (cudaStream_t)stream, cfg.attrs = attr, cfg.numAttrs = 1;
    /* as many clusters as fit at once: a cluster's CTAs share a GPC, so fewer than SMs / 2 where
     * GPCs have odd SM counts, and one cluster more would run in a second wave */
    const int clusters = (int)(total < dev_clusters[dev] ? total : dev_clusters[dev]);
    cfg.gridDim = dim3(2 * clusters);
    const int64_t ld = ldd, sdd = sd;
    const int nkt = (k + SY_BK - 1) / SY_BK, ni = (int)nitem, tot = (int)total;
    cudaError_t e = trans
                        ? cudaLaunchKernelEx(&cfg, syrk_kernel<1>, map, (bf16 *)D, (const bf16 *)C,
                                             n, nkt, ld, sdd, ni, tot, alpha, beta, p)
                        : cudaLaunchKernelEx(&cfg, syrk_kernel<0>, map, (bf16 *)D, (const bf16 *)C,
                                             n, nkt, ld, sdd, ni, tot, alpha, beta, p);
    if (e != cudaSuccess) return zy_fail("cuda_syrk: launch failed: %s", cudaGetErrorString(e));
    ZY_CUDA_TRY_LAUNCH();
    return ZY_OK;
}
