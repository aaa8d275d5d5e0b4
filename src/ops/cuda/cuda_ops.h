/* The CUDA implementation of ops/ops.h: one cuda_ops_* function per ops_* function, with the same
 * arguments and contract (see ops.h). ops.c dispatches here when ctx->device is ZY_DEV_CUDA;
 * nothing else should call these. Every call is asynchronous on the context's stream unless ops.h
 * says it waits; errors (a failed launch, an impossible shape) abort through ZY_CHECK with the op's
 * name. Activation buffers (zy_act) hold bf16. */
#ifndef ZY_OPS_CUDA_OPS_H
#define ZY_OPS_CUDA_OPS_H

#include "ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- context (ops_core.cu) ---- */
/* Creates ctx->cuda on GPU gpu (stream, cuBLASLt context, workspaces) with opts (checked by the
 * caller); ZY_ERR with a message when the GPU cannot be used. Sets ctx->device, gpu and act_dtype
 * (bf16). */
int cuda_ops_ctx_init(zy_ctx *ctx, int gpu, const zy_cuda_opts *opts);
void cuda_ops_ctx_free(zy_ctx *ctx);
int cuda_ops_device_count(void);
void cuda_ops_sync(zy_ctx *ctx);
int cuda_ops_device_mem(zy_ctx *ctx, size_t *used, size_t *total);
void *cuda_ops_stream(zy_ctx *ctx);
int cuda_ops_ctx_init_beside(zy_ctx *side, zy_ctx *ctx);
zy_mark *cuda_ops_mark_new(zy_ctx *ctx);
void cuda_ops_mark_free(zy_mark *m);
void cuda_ops_mark(zy_ctx *ctx, zy_mark *m);
void cuda_ops_wait_mark(zy_ctx *ctx, zy_mark *m);
void cuda_ops_mark_wait_host(zy_mark *m);
/* Profiler hooks used by ops.c around every op when ctx->prof is set: begin records a start event
 * and returns a slot, end records the stop event for that slot under name (a static string). */
int cuda_ops_prof_begin(zy_ctx *ctx);
void cuda_ops_prof_end(zy_ctx *ctx, int slot, const char *name);
void cuda_ops_prof_reset(zy_ctx *ctx);
int cuda_ops_prof_read(zy_ctx *ctx, zy_op_time *out, int max);
void cuda_ops_cast_to_act(zy_ctx *ctx, zy_act *dst, const float *src, size_t n);
void cuda_ops_act_to_f32(zy_ctx *ctx, float *dst, const zy_act *src, size_t n);

/* ---- the ops (same order as ops.h) ---- */
void *cuda_ops_alloc(zy_ctx *ctx, size_t bytes);
void cuda_ops_free(zy_ctx *ctx, void *p);
void *cuda_ops_alloc_releasable(zy_ctx *ctx, size_t bytes); /* vmm.cu */
size_t cuda_ops_release_except(zy_ctx *ctx, void *p, size_t bytes, const size_t (*keep)[2],
                               int nkeep);
/* Frees p if it came from cuda_ops_alloc_releasable (returns 1), else returns 0. */
int cuda_ops_free_releasable(zy_ctx *ctx, void *p);
size_t cuda_ops_mem_available(zy_ctx *ctx);
size_t cuda_ops_attention_workspace_bytes(zy_ctx *ctx, int B, int T, int Hq, int d);
size_t cuda_ops_attention_workspace_wanted(zy_ctx *ctx, int B, int T, int Hq, int Hk, int d);
size_t cuda_ops_attention_workspace_grow(zy_ctx *ctx, size_t want, size_t spare);
void cuda_ops_copy(zy_ctx *ctx, void *dst, const void *src, size_t bytes);
void *cuda_ops_host_alloc(zy_ctx *ctx, size_t bytes);
void cuda_ops_host_free(zy_ctx *ctx, void *p);
void cuda_ops_copy_async(zy_ctx *ctx, void *dst, const void *src, size_t bytes);
void cuda_ops_fill(zy_ctx *ctx, float *x, float value, size_t n);
void cuda_ops_zero(zy_ctx *ctx, void *p, size_t bytes);
void cuda_ops_matmul(zy_ctx *ctx, zy_act *C, const zy_act *A, const zy_act *B, int M, int N, int K,
                     int transA, int transB, float alpha, float beta);
void cuda_ops_matmul_f32(zy_ctx *ctx, float *C, const zy_act *A, const zy_act *B, int M, int N,
                         int K, int transA, int transB, float alpha, float beta);
int cuda_ops_experts_grouped(zy_ctx *ctx, int E, int N, int K);
void cuda_ops_expert_swiglu_grouped(zy_ctx *ctx, zy_act *gu, zy_act *act, const zy_act *in,
                                    const zy_act *W, const int32_t *offsets, int E, int F, int K,
                                    int rows);
void cuda_ops_expert_matmul_grouped(zy_ctx *ctx, zy_act *out, const zy_act *in, const zy_act *W,
                                    const int32_t *offsets, int E, int N, int K, int rows);
void cuda_ops_expert_matmul(zy_ctx *ctx, zy_act *out, const zy_act *in, const zy_act *W,
                            const int32_t *offsets_host, int E, int N, int K, int data_grad);
void cuda_ops_expert_matmul_wgrad(zy_ctx *ctx, float *dW, const zy_act *dY, const zy_act *X,
                                  const int32_t *offsets_host, int E, int N, int K, float beta);
void cuda_ops_expert_matmul_bwd(zy_ctx *ctx, zy_act *dX, float *dW, const zy_act *dY,
                                const zy_act *X, const zy_act *W, const int32_t *offsets_host,
                                const int32_t *offsets, int E, int N, int K, float beta, int wait);
void cuda_ops_expert_join(zy_ctx *ctx);
void cuda_ops_add_act(zy_ctx *ctx, zy_act *y, const zy_act *x, size_t n);
void cuda_ops_add_bias(zy_ctx *ctx, zy_act *y, const float *bias, int N, int C);
void cuda_ops_bias_gelu_fwd(zy_ctx *ctx, zy_act *y, zy_act *x, const float *bias, int N, int C);
void cuda_ops_gelu_bias_bwd(zy_ctx *ctx, zy_act *dx, float *dbias, const zy_act *dy,
                            const zy_act *x, int N, int C);
void cuda_ops_bias_bwd(zy_ctx *ctx, float *dbias, const zy_act *dy, int N, int C);
void cuda_ops_embed_fwd(zy_ctx *ctx, float *h, const float *emb, const int32_t *ids,
                        const float *bias, const float *scale, int N, int D);
void cuda_ops_embed_bwd(zy_ctx *ctx, float *demb, float *dbias, float *dscale, const float *dh,
                        const float *emb, const int32_t *ids, const float *bias, const float *scale,
                        int N, int D, int skip_id);
void cuda_ops_rmsnorm_fwd(zy_ctx *ctx, zy_act *y, float *rstd, const void *x, zy_dtype xt,
                          const float *w, int N, int C, float eps);
void cuda_ops_rmsnorm_bwd(zy_ctx *ctx, void *dx, float *dw, const zy_act *dy, const void *x,
                          zy_dtype xt, const float *w, const float *rstd, int N, int C,
                          int accumulate);
/* ops_router_norm_fwd/bwd in one pass (the rows and pointers fit: the _fits calls). */
int cuda_ops_router_norm_fwd_fits(int R, const zy_act *z, const zy_act *u0, const float *bias,
                                  const zy_act *r_prev, const float *g, const float *w);
int cuda_ops_router_norm_bwd_fits(int R, const zy_act *dz, const zy_act *carry, const zy_act *du0,
                                  const zy_act *z, const zy_act *r_prev, const float *w,
                                  const float *g);
void cuda_ops_router_norm_fwd(zy_ctx *ctx, zy_act *z, zy_act *u0, float *rstd, const float *bias,
                              const zy_act *r_prev, const float *g, const float *w, int N, int R,
                              float eps);
void cuda_ops_router_norm_bwd(zy_ctx *ctx, zy_act *dz, float *dw, float *dg, float *dbias,
                              zy_act *carry, int carry_in, const zy_act *du0, const zy_act *z,
                              const zy_act *r_prev, const float *w, const float *rstd,
                              const float *g, int N, int R);
void cuda_ops_resscale_fwd(zy_ctx *ctx, float *out, const zy_act *o, const float *h,
                           const float *ob, const float *os, const float *rb, const float *rs,
                           int N, int D);
void cuda_ops_resscale_bwd(zy_ctx *ctx, zy_act *d_o, float *dh, float *dob, float *dos, float *drb,
                           float *drs, const float *dout, const zy_act *o, const float *h,
                           const float *ob, const float *os, const float *rb, const float *rs,
                           int N, int D);
void cuda_ops_resnorm_fwd(zy_ctx *ctx, float *out, zy_act *y, float *rstd, const zy_act *o,
                          const float *h, const float *ob, const float *os, const float *rb,
                          const float *rs, const float *w, int N, int D, float eps);
void cuda_ops_resnorm_bwd(zy_ctx *ctx, zy_act *d_o, float *dh, float *dw, float *dob, float *dos,
                          float *drb, float *drs, const zy_act *dy, const float *dres,
                          const float *out, const float *rstd, const float *w, const zy_act *o,
                          const float *h, const float *ob, const float *os, const float *rb,
                          const float *rs, int N, int D);
void cuda_ops_cca_conv_fwd(zy_ctx *ctx, zy_act *q, zy_act *k, zy_act *mid_save, const zy_act *qk0,
                           const zy_act *state, const float *w1, const float *b1, const float *w2,
                           const float *b2, int B, int T, int Hq, int Hk, int d, int t0, int t1);
void cuda_ops_cca_conv_bwd(zy_ctx *ctx, zy_act *dqk0, float *dw1, float *db1, float *dw2,
                           float *db2, const zy_act *dq, const zy_act *dk, const zy_act *qk0,
                           const zy_act *mid_save, const float *w1, const float *w2, int B, int T,
                           int Hq, int Hk, int d, int t0, int t1);
void cuda_ops_value_delay_fwd(zy_ctx *ctx, zy_act *v, const zy_act *vv, const zy_act *prev, int B,
                              int T, int half);
void cuda_ops_value_delay_bwd(zy_ctx *ctx, zy_act *dvv, const zy_act *dv, int B, int T, int half);
void cuda_ops_qknorm_rope_fwd(zy_ctx *ctx, zy_act *q, zy_act *k, float *qn, float *kn,
                              const zy_act *q_in, const zy_act *k_in, const float *temp,
                              const int32_t *pos, int N, int Hq, int Hk, int d, int rot,
                              double theta, float eps_norm);
void cuda_ops_qknorm_rope_bwd(zy_ctx *ctx, zy_act *dq, zy_act *dk, float *dtemp, const zy_act *q_in,
                              const zy_act *k_in, const float *qn, const float *kn,
                              const float *temp, const int32_t *pos, int N, int Hq, int Hk, int d,
                              int rot, double theta, float eps_norm);
void cuda_ops_attention_fwd(zy_ctx *ctx, zy_act *out, float *lse, const zy_act *q, const zy_act *k,
                            const zy_act *v, int B, int T, int Hq, int Hk, int d, float scale,
                            int window);
void cuda_ops_attention_bwd(zy_ctx *ctx, zy_act *dq, zy_act *dk, zy_act *dv, const zy_act *dout,
                            const zy_act *out, const float *lse, const zy_act *q, const zy_act *k,
                            const zy_act *v, int B, int T, int Hq, int Hk, int d, float scale,
                            int window);
void cuda_ops_attention_decode(zy_ctx *ctx, zy_act *out, const zy_act *q, const zy_act *kc,
                               const zy_act *vc, int B, int Tk, int Tmax, int Hq, int Hk, int d,
                               float scale, int window);
void cuda_ops_gelu_fwd(zy_ctx *ctx, zy_act *y, const zy_act *x, size_t n);
void cuda_ops_gelu_bwd(zy_ctx *ctx, zy_act *dx, const zy_act *dy, const zy_act *x, size_t n);
void cuda_ops_swiglu_fwd(zy_ctx *ctx, zy_act *y, const zy_act *gu, int N, int F);
void cuda_ops_swiglu_bwd(zy_ctx *ctx, zy_act *dgu, const zy_act *dy, const zy_act *gu, int N,
                         int F);
void cuda_ops_router_select(zy_ctx *ctx, float *probs, int32_t *choice, float *gate,
                            const zy_act *logits, const float *bias, int N, int E1);
void cuda_ops_router_bwd(zy_ctx *ctx, zy_act *dlogits, const float *dgate, const float *probs,
                         const int32_t *choice, int N, int E1);
void cuda_ops_moe_dispatch(zy_ctx *ctx, int32_t *counts, int32_t *offsets, int32_t *offsets_host,
                           int32_t *perm, const int32_t *choice, int N, int E);
void cuda_ops_moe_dispatch_async(zy_ctx *ctx, int32_t *counts, int32_t *offsets,
                                 int32_t *offsets_host, int32_t *perm, const int32_t *choice, int N,
                                 int E);
void cuda_ops_gather_rows(zy_ctx *ctx, zy_act *xs, const zy_act *x, const int32_t *perm, int nrows,
                          int C);
void cuda_ops_moe_combine(zy_ctx *ctx, zy_act *y, const zy_act *ys, const float *gate,
                          const int32_t *perm, int nrows, int N, int D);
void cuda_ops_moe_combine_bwd(zy_ctx *ctx, zy_act *dys, float *dgate, const zy_act *dy,
                              const zy_act *ys, const float *gate, const int32_t *perm, int nrows,
                              int N, int D);
void cuda_ops_scatter_add_rows(zy_ctx *ctx, zy_act *dx, const zy_act *dxs, const int32_t *perm,
                               int nrows, int C);
void cuda_ops_xent_fwd_bwd_queued(zy_ctx *ctx, zy_act *dlogits, const zy_act *logits,
                                  const int32_t *targets, int N, int V, int ignore_index,
                                  float grad_scale, zy_loss_host *out);
void cuda_ops_eda_fwd(zy_ctx *ctx, zy_act *z, const zy_act *r_prev, const float *g, int N, int R);
void cuda_ops_eda_bwd(zy_ctx *ctx, zy_act *dr_prev, float *dg, const zy_act *dz,
                      const zy_act *r_prev, const float *g, int N, int R);

#ifdef __cplusplus
}
#endif

#endif
