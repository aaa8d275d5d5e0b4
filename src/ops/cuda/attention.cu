/* Fused causal GQA attention on the GPU (attention.h): the entry points, each running the kernel
 * shape measured fastest on an H100 (bench/attention_NOTES.md, results/single-gpu/README.md). The
 * kernels and their launchers are templates in attention_kernels.h; dev/attention_variants.cu
 * instantiates the other shapes for tuning. */
#include "ops/cuda/attention.h"
#include "ops/cuda/attention_kernels.h"

/* The forward for one (D, warps, m-tiles per warp) choice. */
#define ATT_FWD(D, NW, MR)                                                                         \
    att_launch_fwd<D, NW, MR>(bq, bk, bv, bo, lse, B, T, Hq, Hk, scale, window, s)

extern "C" int cuda_attention_fwd(const void *q, const void *k, const void *v, void *out,
                                  float *lse, int B, int T, int Hq, int Hk, int d, float scale,
                                  int window, cudaStream_t s) {
    const void *ptrs[5] = {q, k, v, out, lse};
    ZY_TRY(att_check_args("cuda_attention_fwd", B, T, Hq, Hk, d, scale, ptrs, 5));
    if (B == 0 || T == 0) return ZY_OK;
    const bf16 *bq = (const bf16 *)q, *bk = (const bf16 *)k, *bv = (const bf16 *)v;
    bf16 *bo = (bf16 *)out;
    /* 4 warps; two 16-row m-tiles per warp at d = 128 (half the shared-memory traffic per
     * product: 0.269 ms against 0.293 with one at B=8 T=2048), one elsewhere */
    switch (d) {
    case 128:
        return ATT_FWD(128, 4, 2);
    case 64:
        return ATT_FWD(64, 4, 1);
    case 32:
        return ATT_FWD(32, 4, 1);
    default:
        return ATT_FWD(16, 4, 1);
    }
}

extern "C" size_t cuda_attention_bwd_scratch_bytes(int B, int T, int Hq, int d) {
    return att_bwd_scratch(B, T, Hq, d, att_dq_default(B, T, Hq));
}

/* The backward for one (D, warps, rows per step, dq path) choice. */
#define ATT_BWD(D, NW, BR, M)                                                                      \
    att_bwd_run<D, NW, BR, M>(dout, q, k, v, out, lse, dq, dk, dv, scratch, B, T, Hq, Hk, scale,   \
                              window, s)

extern "C" int cuda_attention_bwd(const void *dout, const void *q, const void *k, const void *v,
                                  const void *out, const float *lse, void *dq, void *dk, void *dv,
                                  void *scratch, size_t scratch_bytes, int B, int T, int Hq, int Hk,
                                  int d, float scale, int window, cudaStream_t s) {
    const void *ptrs[10] = {dout, q, k, v, out, lse, dq, dk, dv, scratch};
    ZY_TRY(att_bwd_check("cuda_attention_bwd", ptrs, B, T, Hq, Hk, d, scale, scratch, scratch_bytes,
                         cuda_attention_bwd_scratch_bytes(B, T, Hq, d)));
    if (B == 0 || T == 0) return ZY_OK;
    /* 64 query rows per step; 4 warps on the stored-dS path, 8 when recomputing (the fastest of
     * each at d = 128, T = 2048 on an H100; d = 32 and 16 have one shape) */
    const int stored = att_dq_default(B, T, Hq) == ATT_DQ_STORED;
    switch (d) {
    case 128:
        return stored ? ATT_BWD(128, 4, 64, ATT_DQ_STORED) : ATT_BWD(128, 8, 64, ATT_DQ_RECOMPUTE);
    case 64:
        return stored ? ATT_BWD(64, 4, 64, ATT_DQ_STORED) : ATT_BWD(64, 8, 64, ATT_DQ_RECOMPUTE);
    case 32:
        return stored ? ATT_BWD(32, 4, 64, ATT_DQ_STORED) : ATT_BWD(32, 4, 64, ATT_DQ_RECOMPUTE);
    default:
        return stored ? ATT_BWD(16, 4, 64, ATT_DQ_STORED) : ATT_BWD(16, 4, 64, ATT_DQ_RECOMPUTE);
    }
}
