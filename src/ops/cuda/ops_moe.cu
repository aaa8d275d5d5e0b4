/* Router and MoE ops of ops.h on CUDA: softmax + biased top-1, dispatch (counts, offsets,
 * permutation), gather, combine, scatter, depth averaging. STUB: each function aborts until
 * implemented. */
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/cuda_state.h"

void cuda_ops_router_select(zy_ctx *ctx, float *probs, int32_t *choice, float *gate,
                            const zy_act *logits, const float *bias, int N, int E1) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_router_select", "not implemented yet");
}

void cuda_ops_router_bwd(zy_ctx *ctx, zy_act *dlogits, const float *dgate, const float *probs,
                         const int32_t *choice, int N, int E1) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_router_bwd", "not implemented yet");
}

int cuda_ops_moe_dispatch(zy_ctx *ctx, int32_t *counts, int32_t *offsets, int32_t *offsets_host,
                          int32_t *perm, const int32_t *choice, int N, int E) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_moe_dispatch", "not implemented yet");
    return 0;
}

void cuda_ops_gather_rows(zy_ctx *ctx, zy_act *xs, const zy_act *x, const int32_t *perm, int nrows,
                          int C) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_gather_rows", "not implemented yet");
}

void cuda_ops_moe_combine(zy_ctx *ctx, zy_act *y, const zy_act *ys, const float *gate,
                          const int32_t *perm, int nrows, int N, int D) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_moe_combine", "not implemented yet");
}

void cuda_ops_moe_combine_bwd(zy_ctx *ctx, zy_act *dys, float *dgate, const zy_act *dy,
                              const zy_act *ys, const float *gate, const int32_t *perm, int nrows,
                              int N, int D) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_moe_combine_bwd", "not implemented yet");
}

void cuda_ops_scatter_add_rows(zy_ctx *ctx, zy_act *dx, const zy_act *dxs, const int32_t *perm,
                               int nrows, int C) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_scatter_add_rows", "not implemented yet");
}

void cuda_ops_eda_fwd(zy_ctx *ctx, zy_act *z, const zy_act *r_prev, const float *g, int N, int R) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_eda_fwd", "not implemented yet");
}

void cuda_ops_eda_bwd(zy_ctx *ctx, zy_act *dr_prev, float *dg, const zy_act *dz,
                      const zy_act *r_prev, const float *g, int N, int R) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_eda_bwd", "not implemented yet");
}
