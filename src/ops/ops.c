/* Op dispatch: every ops_* function of ops.h checks the context's device and runs the matching
 * implementation. For now only the CPU reference (ops/cpu/) exists, so a context for another
 * device is a programming error. Owns the choice of the CPU thread count. */
#include "ops/ops.h"

#include "base/err.h"
#include "ops/cpu/cpu_ops.h"

#include <omp.h>

/* Threads for a CPU op: the context's count, or OpenMP's default when it is 0. */
static int cpu_threads(const zy_ctx *ctx) {
    ZY_CHECKF(ctx != NULL && ctx->device == ZY_DEV_CPU, "ops: only the CPU device is implemented");
    int nt = ctx->num_threads > 0 ? ctx->num_threads : omp_get_max_threads();
    return nt > 0 ? nt : 1;
}

/* ---- memory ---- */

/* Allocates zeroed, 64-byte aligned memory on the context's device; aborts on OOM. */
void *ops_alloc(zy_ctx *ctx, size_t bytes) {
    cpu_threads(ctx);
    return cpu_alloc(bytes);
}

/* Frees memory from ops_alloc (NULL is ignored). */
void ops_free(zy_ctx *ctx, void *p) {
    cpu_threads(ctx);
    cpu_free(p);
}

/* Copies bytes (the regions may overlap). */
void ops_copy(zy_ctx *ctx, void *dst, const void *src, size_t bytes) {
    cpu_copy(cpu_threads(ctx), dst, src, bytes);
}

/* Sets n floats to value. */
void ops_fill(zy_ctx *ctx, float *x, float value, size_t n) {
    cpu_fill(cpu_threads(ctx), x, value, n);
}

/* ---- dense algebra ---- */

/* C = alpha op(A) op(B) + beta C (OpenBLAS sgemm). */
void ops_matmul(zy_ctx *ctx, float *C, const float *A, const float *B, int M, int N, int K,
                int transA, int transB, float alpha, float beta) {
    cpu_matmul(cpu_threads(ctx), C, A, B, M, N, K, transA, transB, alpha, beta);
}

/* y += a x. */
void ops_axpy(zy_ctx *ctx, float *y, const float *x, float a, size_t n) {
    cpu_axpy(cpu_threads(ctx), y, x, a, n);
}

/* y[N,C] += bias[C]. */
void ops_add_bias(zy_ctx *ctx, float *y, const float *bias, int N, int C) {
    cpu_add_bias(cpu_threads(ctx), y, bias, N, C);
}

/* dbias[C] += column sums of dy[N,C]. */
void ops_bias_bwd(zy_ctx *ctx, float *dbias, const float *dy, int N, int C) {
    cpu_bias_bwd(cpu_threads(ctx), dbias, dy, N, C);
}

/* ---- embedding and input affine ---- */

/* h = (emb[ids] + bias) * scale. */
void ops_embed_fwd(zy_ctx *ctx, float *h, const float *emb, const int32_t *ids, const float *bias,
                   const float *scale, int N, int D) {
    cpu_embed_fwd(cpu_threads(ctx), h, emb, ids, bias, scale, N, D);
}

/* demb, dbias, dscale += gradients of the embedding affine. */
void ops_embed_bwd(zy_ctx *ctx, float *demb, float *dbias, float *dscale, const float *dh,
                   const float *emb, const int32_t *ids, const float *bias, const float *scale,
                   int N, int D, int skip_id) {
    cpu_embed_bwd(cpu_threads(ctx), demb, dbias, dscale, dh, emb, ids, bias, scale, N, D, skip_id);
}

/* ---- RMSNorm ---- */

/* y = x * rstd * w; saves rstd. */
void ops_rmsnorm_fwd(zy_ctx *ctx, float *y, float *rstd, const float *x, const float *w, int N,
                     int C, float eps) {
    cpu_rmsnorm_fwd(cpu_threads(ctx), y, rstd, x, w, N, C, eps);
}

/* dx (= or +=), dw +=. */
void ops_rmsnorm_bwd(zy_ctx *ctx, float *dx, float *dw, const float *dy, const float *x,
                     const float *w, const float *rstd, int N, int C, int accumulate) {
    cpu_rmsnorm_bwd(cpu_threads(ctx), dx, dw, dy, x, w, rstd, N, C, accumulate);
}

/* ---- residual scaling ---- */

/* out = (o + ob) * os + (h + rb) * rs. */
void ops_resscale_fwd(zy_ctx *ctx, float *out, const float *o, const float *h, const float *ob,
                      const float *os, const float *rb, const float *rs, int N, int D) {
    cpu_resscale_fwd(cpu_threads(ctx), out, o, h, ob, os, rb, rs, N, D);
}

/* d_o, dh (=), parameter gradients (+=). */
void ops_resscale_bwd(zy_ctx *ctx, float *d_o, float *dh, float *dob, float *dos, float *drb,
                      float *drs, const float *dout, const float *o, const float *h,
                      const float *ob, const float *os, const float *rb, const float *rs, int N,
                      int D) {
    cpu_resscale_bwd(cpu_threads(ctx), d_o, dh, dob, dos, drb, drs, dout, o, h, ob, os, rb, rs, N,
                     D);
}

/* ---- CCA ---- */

/* q, k (and mid_save) from qk0 through the two causal convolutions and the mean residuals. */
void ops_cca_conv_fwd(zy_ctx *ctx, float *q, float *k, float *mid_save, const float *qk0,
                      const float *state, const float *w1, const float *b1, const float *w2,
                      const float *b2, int B, int T, int Hq, int Hk, int d, int t0, int t1) {
    cpu_cca_conv_fwd(cpu_threads(ctx), q, k, mid_save, qk0, state, w1, b1, w2, b2, B, T, Hq, Hk, d,
                     t0, t1);
}

/* dqk0 (=), conv parameter gradients (+=). */
void ops_cca_conv_bwd(zy_ctx *ctx, float *dqk0, float *dw1, float *db1, float *dw2, float *db2,
                      const float *dq, const float *dk, const float *qk0, const float *mid_save,
                      const float *w1, const float *w2, int B, int T, int Hq, int Hk, int d, int t0,
                      int t1) {
    cpu_cca_conv_bwd(cpu_threads(ctx), dqk0, dw1, db1, dw2, db2, dq, dk, qk0, mid_save, w1, w2, B,
                     T, Hq, Hk, d, t0, t1);
}

/* v = [vcur[t] | vdel[t-1]]. */
void ops_value_delay_fwd(zy_ctx *ctx, float *v, const float *vcur, const float *vdel,
                         const float *prev, int B, int T, int half) {
    cpu_value_delay_fwd(cpu_threads(ctx), v, vcur, vdel, prev, B, T, half);
}

/* dvcur, dvdel (=) from dv. */
void ops_value_delay_bwd(zy_ctx *ctx, float *dvcur, float *dvdel, const float *dv, int B, int T,
                         int half) {
    cpu_value_delay_bwd(cpu_threads(ctx), dvcur, dvdel, dv, B, T, half);
}

/* QK norm, key temperature and partial RoPE, in place. */
void ops_qknorm_rope_fwd(zy_ctx *ctx, float *q, float *k, float *qn, float *kn, float *q_in,
                         float *k_in, const float *temp, const int32_t *pos, int N, int Hq, int Hk,
                         int d, int rot, double theta, float eps_norm) {
    cpu_qknorm_rope_fwd(cpu_threads(ctx), q, k, qn, kn, q_in, k_in, temp, pos, N, Hq, Hk, d, rot,
                        theta, eps_norm);
}

/* Backward of the above, in place on dq, dk; dtemp +=. */
void ops_qknorm_rope_bwd(zy_ctx *ctx, float *dq, float *dk, float *dtemp, const float *q_in,
                         const float *k_in, const float *qn, const float *kn, const float *temp,
                         const int32_t *pos, int N, int Hq, int Hk, int d, int rot, double theta,
                         float eps_norm) {
    cpu_qknorm_rope_bwd(cpu_threads(ctx), dq, dk, dtemp, q_in, k_in, qn, kn, temp, pos, N, Hq, Hk,
                        d, rot, theta, eps_norm);
}

/* ---- attention ---- */

/* Causal (optionally windowed) GQA softmax attention; saves lse. */
void ops_attention_fwd(zy_ctx *ctx, float *out, float *lse, const float *q, const float *k,
                       const float *v, int B, int T, int Hq, int Hk, int d, float scale,
                       int window) {
    cpu_attention_fwd(cpu_threads(ctx), out, lse, q, k, v, B, T, Hq, Hk, d, scale, window);
}

/* dq, dk, dv (=). */
void ops_attention_bwd(zy_ctx *ctx, float *dq, float *dk, float *dv, const float *dout,
                       const float *out, const float *lse, const float *q, const float *k,
                       const float *v, int B, int T, int Hq, int Hk, int d, float scale,
                       int window) {
    cpu_attention_bwd(cpu_threads(ctx), dq, dk, dv, dout, out, lse, q, k, v, B, T, Hq, Hk, d, scale,
                      window);
}

/* One query row per sequence against a KV cache. */
void ops_attention_decode(zy_ctx *ctx, float *out, const float *q, const float *kc, const float *vc,
                          int B, int Tk, int Tmax, int Hq, int Hk, int d, float scale, int window) {
    cpu_attention_decode(cpu_threads(ctx), out, q, kc, vc, B, Tk, Tmax, Hq, Hk, d, scale, window);
}

/* ---- elementwise ---- */

/* y = GELU(x), exact. */
void ops_gelu_fwd(zy_ctx *ctx, float *y, const float *x, size_t n) {
    cpu_gelu_fwd(cpu_threads(ctx), y, x, n);
}

/* dx = dy * GELU'(x). */
void ops_gelu_bwd(zy_ctx *ctx, float *dx, const float *dy, const float *x, size_t n) {
    cpu_gelu_bwd(cpu_threads(ctx), dx, dy, x, n);
}

/* y = SiLU(g) * u. */
void ops_swiglu_fwd(zy_ctx *ctx, float *y, const float *gu, int N, int F) {
    cpu_swiglu_fwd(cpu_threads(ctx), y, gu, N, F);
}

/* dgu (=) from dy. */
void ops_swiglu_bwd(zy_ctx *ctx, float *dgu, const float *dy, const float *gu, int N, int F) {
    cpu_swiglu_bwd(cpu_threads(ctx), dgu, dy, gu, N, F);
}

/* ---- router ---- */

/* Softmax, biased top-1 choice and gate. */
void ops_router_select(zy_ctx *ctx, float *probs, int32_t *choice, float *gate, const float *logits,
                       const float *bias, int N, int E1) {
    cpu_router_select(cpu_threads(ctx), probs, choice, gate, logits, bias, N, E1);
}

/* dlogits (=) from dgate. */
void ops_router_bwd(zy_ctx *ctx, float *dlogits, const float *dgate, const float *probs,
                    const int32_t *choice, int N, int E1) {
    cpu_router_bwd(cpu_threads(ctx), dlogits, dgate, probs, choice, N, E1);
}

/* ---- MoE dispatch / combine ---- */

/* Counting sort of routed rows by expert (stable); returns the routed row count. */
int ops_moe_dispatch(zy_ctx *ctx, int32_t *counts, int32_t *offsets, int32_t *perm,
                     const int32_t *choice, int N, int E) {
    cpu_threads(ctx);
    return cpu_moe_dispatch(counts, offsets, perm, choice, N, E);
}

/* xs[r] = x[perm[r]]. */
void ops_gather_rows(zy_ctx *ctx, float *xs, const float *x, const int32_t *perm, int nrows,
                     int C) {
    cpu_gather_rows(cpu_threads(ctx), xs, x, perm, nrows, C);
}

/* y = 0, then y[perm[r]] = gate * ys[r]. */
void ops_moe_combine(zy_ctx *ctx, float *y, const float *ys, const float *gate, const int32_t *perm,
                     int nrows, int N, int D) {
    cpu_moe_combine(cpu_threads(ctx), y, ys, gate, perm, nrows, N, D);
}

/* dys, dgate (=). */
void ops_moe_combine_bwd(zy_ctx *ctx, float *dys, float *dgate, const float *dy, const float *ys,
                         const float *gate, const int32_t *perm, int nrows, int N, int D) {
    cpu_moe_combine_bwd(cpu_threads(ctx), dys, dgate, dy, ys, gate, perm, nrows, N, D);
}

/* dx[perm[r]] += dxs[r]. */
void ops_scatter_add_rows(zy_ctx *ctx, float *dx, const float *dxs, const int32_t *perm, int nrows,
                          int C) {
    cpu_scatter_add_rows(cpu_threads(ctx), dx, dxs, perm, nrows, C);
}

/* ---- loss ---- */

/* Summed cross-entropy over counted rows, with the optional logits gradient. */
double ops_xent_fwd_bwd(zy_ctx *ctx, float *dlogits, const float *logits, const int32_t *targets,
                        int N, int V, int ignore_index, float grad_scale, int *count) {
    return cpu_xent_fwd_bwd(cpu_threads(ctx), dlogits, logits, targets, N, V, ignore_index,
                            grad_scale, count);
}
