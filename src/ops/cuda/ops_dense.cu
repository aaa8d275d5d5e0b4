/* Dense ops of ops.h on CUDA: GEMMs through cuBLASLt, bias, embedding, RMSNorm, residual scaling,
 * GELU, SwiGLU, cross-entropy and attention (wrapping the kernels of norm.cu, elementwise.cu,
 * xent.cu, gemm.cu, attention.cu). STUB: each function aborts until implemented. */
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/cuda_state.h"

void cuda_ops_matmul(zy_ctx *ctx, zy_act *C, const zy_act *A, const zy_act *B, int M, int N, int K,
                     int transA, int transB, float alpha, float beta) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_matmul", "not implemented yet");
}

void cuda_ops_matmul_f32(zy_ctx *ctx, float *C, const zy_act *A, const zy_act *B, int M, int N,
                         int K, int transA, int transB, float alpha, float beta) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_matmul_f32", "not implemented yet");
}

void cuda_ops_add_act(zy_ctx *ctx, zy_act *y, const zy_act *x, size_t n) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_add_act", "not implemented yet");
}

void cuda_ops_add_bias(zy_ctx *ctx, zy_act *y, const float *bias, int N, int C) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_add_bias", "not implemented yet");
}

void cuda_ops_bias_bwd(zy_ctx *ctx, float *dbias, const zy_act *dy, int N, int C) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_bias_bwd", "not implemented yet");
}

void cuda_ops_embed_fwd(zy_ctx *ctx, float *h, const float *emb, const int32_t *ids,
                        const float *bias, const float *scale, int N, int D) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_embed_fwd", "not implemented yet");
}

void cuda_ops_embed_bwd(zy_ctx *ctx, float *demb, float *dbias, float *dscale, const float *dh,
                        const float *emb, const int32_t *ids, const float *bias, const float *scale,
                        int N, int D, int skip_id) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_embed_bwd", "not implemented yet");
}

void cuda_ops_rmsnorm_fwd(zy_ctx *ctx, zy_act *y, float *rstd, const void *x, zy_dtype xt,
                          const float *w, int N, int C, float eps) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_rmsnorm_fwd", "not implemented yet");
}

void cuda_ops_rmsnorm_bwd(zy_ctx *ctx, void *dx, float *dw, const zy_act *dy, const void *x,
                          zy_dtype xt, const float *w, const float *rstd, int N, int C,
                          int accumulate) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_rmsnorm_bwd", "not implemented yet");
}

void cuda_ops_resscale_fwd(zy_ctx *ctx, float *out, const zy_act *o, const float *h,
                           const float *ob, const float *os, const float *rb, const float *rs,
                           int N, int D) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_resscale_fwd", "not implemented yet");
}

void cuda_ops_resscale_bwd(zy_ctx *ctx, zy_act *d_o, float *dh, float *dob, float *dos, float *drb,
                           float *drs, const float *dout, const zy_act *o, const float *h,
                           const float *ob, const float *os, const float *rb, const float *rs,
                           int N, int D) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_resscale_bwd", "not implemented yet");
}

void cuda_ops_gelu_fwd(zy_ctx *ctx, zy_act *y, const zy_act *x, size_t n) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_gelu_fwd", "not implemented yet");
}

void cuda_ops_gelu_bwd(zy_ctx *ctx, zy_act *dx, const zy_act *dy, const zy_act *x, size_t n) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_gelu_bwd", "not implemented yet");
}

void cuda_ops_swiglu_fwd(zy_ctx *ctx, zy_act *y, const zy_act *gu, int N, int F) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_swiglu_fwd", "not implemented yet");
}

void cuda_ops_swiglu_bwd(zy_ctx *ctx, zy_act *dgu, const zy_act *dy, const zy_act *gu, int N,
                         int F) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_swiglu_bwd", "not implemented yet");
}

double cuda_ops_xent_fwd_bwd(zy_ctx *ctx, zy_act *dlogits, const zy_act *logits,
                             const int32_t *targets, int N, int V, int ignore_index,
                             float grad_scale, int *count) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_xent_fwd_bwd", "not implemented yet");
    return 0;
}

void cuda_ops_attention_fwd(zy_ctx *ctx, zy_act *out, float *lse, const zy_act *q, const zy_act *k,
                            const zy_act *v, int B, int T, int Hq, int Hk, int d, float scale,
                            int window) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_attention_fwd", "not implemented yet");
}

void cuda_ops_attention_bwd(zy_ctx *ctx, zy_act *dq, zy_act *dk, zy_act *dv, const zy_act *dout,
                            const zy_act *out, const float *lse, const zy_act *q, const zy_act *k,
                            const zy_act *v, int B, int T, int Hq, int Hk, int d, float scale,
                            int window) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_attention_bwd", "not implemented yet");
}
