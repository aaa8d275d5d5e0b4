/* Hopper (sm_90a) PTX wrappers shared by the TMA/wgmma kernels of ops/cuda (syrk.cu,
 * grouped_gemm.cu): mbarriers, TMA tile loads, 128-byte-swizzle wgmma descriptors, wgmma
 * m64n128k16 (bf16 in, fp32 accumulate), and the driver's tensor-map encoder. Device code and
 * the encoder lookup, C++ only; the PTX compiles only into an sm_90a build, so callers guard
 * their kernel bodies with __CUDA_ARCH_FEAT_SM90_ALL. */
#ifndef ZY_OPS_CUDA_WGMMA_H
#define ZY_OPS_CUDA_WGMMA_H

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <stdint.h>

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

/* The box of a 2-D map at (c0, c1) into shared dst; completes `bar`'s transaction bytes. */
static __device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap *map, int c0,
                                                   int c1, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
                 "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(bar)
                 : "memory");
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

/* d[64 x 128] (this warpgroup's fragment) (+)= A[64 x 16] B[128 x 16]^T from descriptors, A
 * K-major (TA 0) or MN-major (TA 1), B likewise (TB); accumulate 0 overwrites d. Fragment: warp w
 * of the warpgroup holds rows 16 w + lane / 4 (+ 8), d[4 j + 0, 1] columns 8 j + 2 (lane % 4) +
 * {0, 1} of the first row, d[4 j + 2, 3] of the second. */
template <int TA, int TB>
static __device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t da, uint64_t db,
                                                        int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                 "}, %64, %65, p, 1, 1, %67, %68;\n}\n"
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
                 : "l"(da), "l"(db), "r"(accumulate), "n"(TA), "n"(TB));
}

static PFN_cuTensorMapEncodeTiled_v12000 lookup_encode_tiled(void) {
    void *p = NULL;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
        return NULL;
    return (PFN_cuTensorMapEncodeTiled_v12000)p;
}

/* cuTensorMapEncodeTiled from the driver, looked up once per translation unit (NULL when the
 * driver has none). */
static PFN_cuTensorMapEncodeTiled_v12000 encode_tiled(void) {
    static const PFN_cuTensorMapEncodeTiled_v12000 fn = lookup_encode_tiled(); /* once, safely */
    return fn;
}

#endif
