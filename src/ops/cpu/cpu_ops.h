/* Internal interface of the CPU (fp32 reference) ops: one cpu_* function per ops_* function of
 * ops/ops.h, with the same arguments except that the context is replaced by nt, the number of
 * OpenMP threads to use (>= 1). ops.c dispatches here; nothing else should include this file.
 * Shared habits: norms, softmax sums, log-sum-exps and bias/scale/temperature gradients accumulate
 * in double; matrix products (matmul, the grouped conv, attention's Q K^T and P V) are fp32 sgemm
 * like HF's own fp32 path. Reductions over rows (parameter gradients) run per column block, per
 * head group or per fixed row chunk and are combined in a fixed order, so results do not depend
 * on the thread count. */
#ifndef ZY_CPU_OPS_H
#define ZY_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>

/* Columns per task in reductions over rows (one column block is summed by one thread). */
#define CPU_COL_BLOCK 32
/* Rows per fixed chunk for deterministic partial sums (chunk partials are added in order). */
#define CPU_ROW_CHUNK 64
/* Work (elements) below which a loop runs on one thread: spawning threads would cost more. */
#define CPU_PAR_MIN 16384

/* ---- BLAS helpers (cpu_dense.c) ---- */
/* Row-major C[M,N] = op(A) op(B) + beta C with leading dimensions (sgemm, alpha = 1) for blocks
 * inside an op: single-threaded (the op parallelises around it). Tolerates M, N or K = 0 and
 * clears C first when beta == 0. */
void cpu_sgemm(int transA, int transB, int M, int N, int K, const float *A, int lda, const float *B,
               int ldb, float beta, float *C, int ldc);

/* ---- memory (cpu_dense.c) ---- */
void *cpu_alloc(size_t bytes);
void cpu_free(void *p);
void cpu_copy(int nt, void *dst, const void *src, size_t bytes);
void cpu_fill(int nt, float *x, float value, size_t n);

/* ---- dense algebra, embedding, residual scaling (cpu_dense.c) ---- */
void cpu_matmul(int nt, float *C, const float *A, const float *B, int M, int N, int K, int transA,
                int transB, float alpha, float beta);
void cpu_axpy(int nt, float *y, const float *x, float a, size_t n);
void cpu_add_bias(int nt, float *y, const float *bias, int N, int C);
void cpu_bias_bwd(int nt, float *dbias, const float *dy, int N, int C);
void cpu_embed_fwd(int nt, float *h, const float *emb, const int32_t *ids, const float *bias,
                   const float *scale, int N, int D);
void cpu_embed_bwd(int nt, float *demb, float *dbias, float *dscale, const float *dh,
                   const float *emb, const int32_t *ids, const float *bias, const float *scale,
                   int N, int D, int skip_id);
void cpu_resscale_fwd(int nt, float *out, const float *o, const float *h, const float *ob,
                      const float *os, const float *rb, const float *rs, int N, int D);
void cpu_resscale_bwd(int nt, float *d_o, float *dh, float *dob, float *dos, float *drb, float *drs,
                      const float *dout, const float *o, const float *h, const float *ob,
                      const float *os, const float *rb, const float *rs, int N, int D);

/* ---- norms (cpu_norm.c) ---- */
void cpu_rmsnorm_fwd(int nt, float *y, float *rstd, const float *x, const float *w, int N, int C,
                     float eps);
void cpu_rmsnorm_bwd(int nt, float *dx, float *dw, const float *dy, const float *x, const float *w,
                     const float *rstd, int N, int C, int accumulate);
void cpu_qknorm_rope_fwd(int nt, float *q, float *k, float *qn, float *kn, const float *q_in,
                         const float *k_in, const float *temp, const int32_t *pos, int N, int Hq,
                         int Hk, int d, int rot, double theta, float eps_norm);
void cpu_qknorm_rope_bwd(int nt, float *dq, float *dk, float *dtemp, const float *q_in,
                         const float *k_in, const float *qn, const float *kn, const float *temp,
                         const int32_t *pos, int N, int Hq, int Hk, int d, int rot, double theta,
                         float eps_norm);

/* ---- CCA convolutions and delayed values (cpu_cca.c) ---- */
void cpu_cca_conv_fwd(int nt, float *q, float *k, float *mid_save, const float *qk0,
                      const float *state, const float *w1, const float *b1, const float *w2,
                      const float *b2, int B, int T, int Hq, int Hk, int d, int t0, int t1);
void cpu_cca_conv_bwd(int nt, float *dqk0, float *dw1, float *db1, float *dw2, float *db2,
                      const float *dq, const float *dk, const float *qk0, const float *mid_save,
                      const float *w1, const float *w2, int B, int T, int Hq, int Hk, int d, int t0,
                      int t1);
void cpu_value_delay_fwd(int nt, float *v, const float *vv, const float *prev, int B, int T,
                         int half);
void cpu_value_delay_bwd(int nt, float *dvv, const float *dv, int B, int T, int half);

/* ---- attention (cpu_attention.c) ---- */
void cpu_attention_fwd(int nt, float *out, float *lse, const float *q, const float *k,
                       const float *v, int B, int T, int Hq, int Hk, int d, float scale,
                       int window);
void cpu_attention_bwd(int nt, float *dq, float *dk, float *dv, const float *dout, const float *out,
                       const float *lse, const float *q, const float *k, const float *v, int B,
                       int T, int Hq, int Hk, int d, float scale, int window);
void cpu_attention_decode(int nt, float *out, const float *q, const float *kc, const float *vc,
                          int B, int Tk, int Tmax, int Hq, int Hk, int d, float scale, int window);

/* ---- elementwise (cpu_elementwise.c) ---- */
void cpu_gelu_fwd(int nt, float *y, const float *x, size_t n);
void cpu_gelu_bwd(int nt, float *dx, const float *dy, const float *x, size_t n);
void cpu_swiglu_fwd(int nt, float *y, const float *gu, int N, int F);
void cpu_swiglu_bwd(int nt, float *dgu, const float *dy, const float *gu, int N, int F);

/* ---- router and MoE routing (cpu_moe.c) ---- */
void cpu_router_select(int nt, float *probs, int32_t *choice, float *gate, const float *logits,
                       const float *bias, int N, int E1);
void cpu_router_bwd(int nt, float *dlogits, const float *dgate, const float *probs,
                    const int32_t *choice, int N, int E1);
int cpu_moe_dispatch(int32_t *counts, int32_t *offsets, int32_t *perm, const int32_t *choice, int N,
                     int E);
void cpu_gather_rows(int nt, float *xs, const float *x, const int32_t *perm, int nrows, int C);
void cpu_moe_combine(int nt, float *y, const float *ys, const float *gate, const int32_t *perm,
                     int nrows, int N, int D);
void cpu_moe_combine_bwd(int nt, float *dys, float *dgate, const float *dy, const float *ys,
                         const float *gate, const int32_t *perm, int nrows, int N, int D);
void cpu_scatter_add_rows(int nt, float *dx, const float *dxs, const int32_t *perm, int nrows,
                          int C);

/* ---- loss (cpu_loss.c) ---- */
double cpu_xent_fwd_bwd(int nt, float *dlogits, const float *logits, const int32_t *targets, int N,
                        int V, int ignore_index, float grad_scale, int *count);

/* ---- router depth averaging (cpu_eda.c) ---- */
void cpu_eda_fwd(int nt, float *z, const float *r_prev, const float *g, int N, int R);
void cpu_eda_bwd(int nt, float *dr_prev, float *dg, const float *dz, const float *r_prev,
                 const float *g, int N, int R);

#endif
