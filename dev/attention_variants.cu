/* Attention kernel shapes for tuning (attention_variants.h): every shape of the kernels in
 * ops/cuda/attention_kernels.h, with the shipped defaults where the caller leaves a choice at 0. */
#include "attention_variants.h"
#include "ops/cuda/attention_kernels.h"

/* The dq path cfg asks for (NULL or 0: the default). */
static int dq_mode(const dev_attention_cfg *cfg, int B, int T, int Hq) {
    return cfg && cfg->dq_recompute ? ATT_DQ_RECOMPUTE : att_dq_default(B, T, Hq);
}

#define ATT_FWD(D, NW, MR)                                                                         \
    att_launch_fwd<D, NW, MR>(bq, bk, bv, bo, lse, B, T, Hq, Hk, scale, window, s)

extern "C" int dev_attention_fwd_cfg(const void *q, const void *k, const void *v, void *out,
                                     float *lse, int B, int T, int Hq, int Hk, int d, float scale,
                                     int window, const dev_attention_cfg *cfg, cudaStream_t s) {
    const void *ptrs[5] = {q, k, v, out, lse};
    ZY_TRY(att_check_args("dev_attention_fwd", B, T, Hq, Hk, d, scale, ptrs, 5));
    if (B == 0 || T == 0) return ZY_OK;
    int nw = cfg && cfg->fwd_warps ? cfg->fwd_warps : 4;
    int mr = cfg && cfg->fwd_mtiles ? cfg->fwd_mtiles : d == 128 && nw == 4 ? 2 : 1;
    if ((nw != 4 && nw != 8) || (mr != 1 && mr != 2) || (mr == 2 && nw != 4))
        return zy_fail("dev_attention_fwd: fwd_warps %d / fwd_mtiles %d not supported (4 or 8 / "
                       "1, or 4 / 2)",
                       nw, mr);
    const bf16 *bq = (const bf16 *)q, *bk = (const bf16 *)k, *bv = (const bf16 *)v;
    bf16 *bo = (bf16 *)out;
    const int variant = mr == 2 ? 2 : nw == 8 ? 1 : 0;
    switch (d) {
    case 128:
        return variant == 0   ? ATT_FWD(128, 4, 1)
               : variant == 1 ? ATT_FWD(128, 8, 1)
                              : ATT_FWD(128, 4, 2);
    case 64:
        return variant == 0   ? ATT_FWD(64, 4, 1)
               : variant == 1 ? ATT_FWD(64, 8, 1)
                              : ATT_FWD(64, 4, 2);
    case 32:
        return ATT_FWD(32, 4, 1);
    default:
        return ATT_FWD(16, 4, 1);
    }
}

extern "C" size_t dev_attention_bwd_scratch_bytes_cfg(int B, int T, int Hq, int d,
                                                      const dev_attention_cfg *cfg) {
    return att_bwd_scratch(B, T, Hq, d, dq_mode(cfg, B, T, Hq));
}

/* One (D, warps, rows) shape on the dq path `mode`. */
#define ATT_BWD(D, NW, BR)                                                                         \
    (mode == ATT_DQ_RECOMPUTE                                                                      \
         ? att_bwd_run<D, NW, BR, ATT_DQ_RECOMPUTE>(dout, q, k, v, out, lse, dq, dk, dv, scratch,  \
                                                    B, T, Hq, Hk, scale, window, s)                \
         : att_bwd_run<D, NW, BR, ATT_DQ_STORED>(dout, q, k, v, out, lse, dq, dk, dv, scratch, B,  \
                                                 T, Hq, Hk, scale, window, s))

extern "C" int dev_attention_bwd_cfg(const void *dout, const void *q, const void *k, const void *v,
                                     const void *out, const float *lse, void *dq, void *dk,
                                     void *dv, void *scratch, size_t scratch_bytes, int B, int T,
                                     int Hq, int Hk, int d, float scale, int window,
                                     const dev_attention_cfg *cfg, cudaStream_t s) {
    if (cfg && cfg->dq_recompute != 0 && cfg->dq_recompute != 1)
        return zy_fail("dev_attention_bwd: dq_recompute %d not supported (0 or 1)",
                       cfg->dq_recompute);
    const void *ptrs[10] = {dout, q, k, v, out, lse, dq, dk, dv, scratch};
    ZY_TRY(att_bwd_check("dev_attention_bwd", ptrs, B, T, Hq, Hk, d, scale, scratch, scratch_bytes,
                         dev_attention_bwd_scratch_bytes_cfg(B, T, Hq, d, cfg)));
    if (B == 0 || T == 0) return ZY_OK;
    const int mode = dq_mode(cfg, B, T, Hq);
    int nw = cfg && cfg->bwd_warps ? cfg->bwd_warps : mode == ATT_DQ_STORED ? 4 : 8;
    int br = cfg && cfg->bwd_rows ? cfg->bwd_rows : 64;
    if ((nw != 4 && nw != 8) || (br != 32 && br != 64))
        return zy_fail("dev_attention_bwd: bwd_warps %d / bwd_rows %d not supported (4 or 8 / "
                       "32 or 64)",
                       nw, br);
    const int variant = (nw == 8 ? 2 : 0) + (br == 64 ? 1 : 0);
    switch (d) {
    case 128:
        return variant == 0   ? ATT_BWD(128, 4, 32)
               : variant == 1 ? ATT_BWD(128, 4, 64)
               : variant == 2 ? ATT_BWD(128, 8, 32)
                              : ATT_BWD(128, 8, 64);
    case 64:
        return variant == 0   ? ATT_BWD(64, 4, 32)
               : variant == 1 ? ATT_BWD(64, 4, 64)
               : variant == 2 ? ATT_BWD(64, 8, 32)
                              : ATT_BWD(64, 8, 64);
    case 32:
        return ATT_BWD(32, 4, 64);
    default:
        return ATT_BWD(16, 4, 64);
    }
}
