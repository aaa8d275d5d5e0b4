/* CCA ops of ops.h on CUDA: the two causal convolutions with the mean residuals, the value delay,
 * QK norm + temperature + partial RoPE, and decoding attention. STUB: each function aborts until
 * implemented. */
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/cuda_state.h"

void cuda_ops_cca_conv_fwd(zy_ctx *ctx, zy_act *q, zy_act *k, zy_act *mid_save, const zy_act *qk0,
                           const zy_act *state, const float *w1, const float *b1, const float *w2,
                           const float *b2, int B, int T, int Hq, int Hk, int d, int t0, int t1) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_cca_conv_fwd", "not implemented yet");
}

void cuda_ops_cca_conv_bwd(zy_ctx *ctx, zy_act *dqk0, float *dw1, float *db1, float *dw2,
                           float *db2, const zy_act *dq, const zy_act *dk, const zy_act *qk0,
                           const zy_act *mid_save, const float *w1, const float *w2, int B, int T,
                           int Hq, int Hk, int d, int t0, int t1) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_cca_conv_bwd", "not implemented yet");
}

void cuda_ops_value_delay_fwd(zy_ctx *ctx, zy_act *v, const zy_act *vcur, const zy_act *vdel,
                              const zy_act *prev, int B, int T, int half) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_value_delay_fwd", "not implemented yet");
}

void cuda_ops_value_delay_bwd(zy_ctx *ctx, zy_act *dvcur, zy_act *dvdel, const zy_act *dv, int B,
                              int T, int half) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_value_delay_bwd", "not implemented yet");
}

void cuda_ops_qknorm_rope_fwd(zy_ctx *ctx, zy_act *q, zy_act *k, float *qn, float *kn, zy_act *q_in,
                              zy_act *k_in, const float *temp, const int32_t *pos, int N, int Hq,
                              int Hk, int d, int rot, double theta, float eps_norm) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_qknorm_rope_fwd", "not implemented yet");
}

void cuda_ops_qknorm_rope_bwd(zy_ctx *ctx, zy_act *dq, zy_act *dk, float *dtemp, const zy_act *q_in,
                              const zy_act *k_in, const float *qn, const float *kn,
                              const float *temp, const int32_t *pos, int N, int Hq, int Hk, int d,
                              int rot, double theta, float eps_norm) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_qknorm_rope_bwd", "not implemented yet");
}

void cuda_ops_attention_decode(zy_ctx *ctx, zy_act *out, const zy_act *q, const zy_act *kc,
                               const zy_act *vc, int B, int Tk, int Tmax, int Hq, int Hk, int d,
                               float scale, int window) {
    zy_abort_at(__FILE__, __LINE__, "cuda_ops_attention_decode", "not implemented yet");
}
