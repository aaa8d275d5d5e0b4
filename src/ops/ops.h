/* The op interface: every computation of the ZAYA1 forward and backward pass, at the granularity of
 * the fastest GPU kernel. ops/cpu/ implements them in plain C + OpenMP (the fp32 reference);
 * ops/cuda/ will implement the same signatures. Pointers are in the memory of ctx's device.
 *
 * Conventions: activations are row-major with one row per token; N = B*T rows, sequence b owns rows
 * [b*T, (b+1)*T). Linear weights are [out, in] (HF layout). Backward ops ACCUMULATE (+=) into
 * parameter gradients (names starting with d and ending in w/b/scale...) and OVERWRITE input
 * gradients unless the comment says otherwise. Dimension names: B batch, T time, D model width,
 * Hq query heads, Hk key heads, d head dim, E experts, F expert width, R router width, V vocab. */
#ifndef ZY_OPS_H
#define ZY_OPS_H

#include <stddef.h>
#include <stdint.h>

typedef enum { ZY_DEV_CPU = 0, ZY_DEV_CUDA = 1 } zy_device;

typedef struct {
    zy_device device;
    int num_threads; /* CPU: OpenMP threads (0 = library default) */
} zy_ctx;

/* ---- memory ---- */
void *ops_alloc(zy_ctx *ctx, size_t bytes); /* zeroed; aborts on OOM */
void ops_free(zy_ctx *ctx, void *p);
void ops_copy(zy_ctx *ctx, void *dst, const void *src, size_t bytes);
void ops_fill(zy_ctx *ctx, float *x, float value, size_t n);

/* ---- dense algebra ---- */
/* C[M,N] = alpha * op(A) op(B) + beta * C, row-major; op(A) is [M,K] (A stored [K,M] when transA),
 * op(B) is [K,N] (B stored [N,K] when transB). beta = 0 ignores C's old contents (even NaN). */
void ops_matmul(zy_ctx *ctx, float *C, const float *A, const float *B, int M, int N, int K,
                int transA, int transB, float alpha, float beta);
/* y[n] += x[n] * a */
void ops_axpy(zy_ctx *ctx, float *y, const float *x, float a, size_t n);
/* y[N,C] += bias[C] broadcast over rows */
void ops_add_bias(zy_ctx *ctx, float *y, const float *bias, int N, int C);
/* dbias[C] += sum over rows of dy[N,C] */
void ops_bias_bwd(zy_ctx *ctx, float *dbias, const float *dy, int N, int C);

/* ---- embedding and input affine ---- */
/* h[N,D] = (emb[ids[n]] + bias) * scale. ids must be in [0, V) (checked by the caller). */
void ops_embed_fwd(zy_ctx *ctx, float *h, const float *emb, const int32_t *ids, const float *bias,
                   const float *scale, int N, int D);
/* demb[ids[n]] += dh * scale (rows equal to skip_id get nothing, like torch's padding_idx; -1 =
 * none); dbias += sum dh*scale; dscale += sum dh*(emb+bias). */
void ops_embed_bwd(zy_ctx *ctx, float *demb, float *dbias, float *dscale, const float *dh,
                   const float *emb, const int32_t *ids, const float *bias, const float *scale,
                   int N, int D, int skip_id);

/* ---- RMSNorm ---- */
/* y[N,C] = x * rstd * w, rstd[N] = 1/sqrt(mean(x^2) + eps) (saved for backward). */
void ops_rmsnorm_fwd(zy_ctx *ctx, float *y, float *rstd, const float *x, const float *w, int N,
                     int C, float eps);
/* dx = (overwrite, or += when accumulate) ; dw += sum over rows dy * x * rstd. */
void ops_rmsnorm_bwd(zy_ctx *ctx, float *dx, float *dw, const float *dy, const float *x,
                     const float *w, const float *rstd, int N, int C, int accumulate);

/* ---- residual scaling: out = (o + ob) * os + (h + rb) * rs, all [N,D], vectors [D] ---- */
void ops_resscale_fwd(zy_ctx *ctx, float *out, const float *o, const float *h, const float *ob,
                      const float *os, const float *rb, const float *rs, int N, int D);
/* From dout: do = dout*os (overwrite), dh = dout*rs (overwrite; dh may alias dout),
 * dob += sum dout*os, dos += sum dout*(o+ob), drb += sum dout*rs, drs += sum dout*(h+rb). */
void ops_resscale_bwd(zy_ctx *ctx, float *d_o, float *dh, float *dob, float *dos, float *drb,
                      float *drs, const float *dout, const float *o, const float *h,
                      const float *ob, const float *os, const float *rb, const float *rs, int N,
                      int D);

/* ---- CCA: convolutions and mean residuals ----
 * qk0[N,C] = [q0 (Hq*d) | k0 (Hk*d)] per row, C = (Hq+Hk)*d. Per sequence, the input is left-padded
 * with P = (t0-1)+(t1-1) zero rows (or, when state != NULL, the P rows of state[B,P,C] that came
 * before this chunk). Then
 *   mid[t,c]  = b1[c] + sum_{j<t0} w1[c,j] * xpad[t + j, c]                  for t in [0, T+t1-1)
 *   conv[t,c] = b2[c] + sum_{j<t1} sum_{i<d} w2[c,i,j] * mid[t + j, g*d + i], g = c / d (head)
 * (w1 [C,t0] = depthwise weight [C,1,t0]; w2 [C,d,t1] = grouped weight). Then with G = Hq/Hk,
 *   qr_i = (q0_i + k0_{i/G}) / 2,  kr_j = mean_{i in group j} qr_i,
 *   q[N,Hq*d] = conv[:, :Hq*d] + qr,  k[N,Hk*d] = conv[:, Hq*d:] + kr.
 * mid_save [B, T+t1-1, C] keeps the depthwise output for backward. */
void ops_cca_conv_fwd(zy_ctx *ctx, float *q, float *k, float *mid_save, const float *qk0,
                      const float *state, const float *w1, const float *b1, const float *w2,
                      const float *b2, int B, int T, int Hq, int Hk, int d, int t0, int t1);
/* Backward of the above given dq, dk: dqk0 (overwrite), dw1/db1/dw2/db2 (+=). No state gradient
 * (training always starts from zero padding). */
void ops_cca_conv_bwd(zy_ctx *ctx, float *dqk0, float *dw1, float *db1, float *dw2, float *db2,
                      const float *dq, const float *dk, const float *qk0, const float *mid_save,
                      const float *w1, const float *w2, int B, int T, int Hq, int Hk, int d, int t0,
                      int t1);

/* ---- CCA: delayed values ----
 * v[N, 2*half] = [vcur[t] | vdel[t-1]] per row, vdel[-1] = prev[b] (prev [B,half]) or 0 if NULL. */
void ops_value_delay_fwd(zy_ctx *ctx, float *v, const float *vcur, const float *vdel,
                         const float *prev, int B, int T, int half);
/* dvcur, dvdel (overwrite) from dv. */
void ops_value_delay_bwd(zy_ctx *ctx, float *dvcur, float *dvdel, const float *dv, int B, int T,
                         int half);

/* ---- CCA: QK norm, key temperature, partial RoPE (in place) ----
 * For each row n (position pos[n]) and head: x <- sqrt(d) * x / max(||x||, eps_norm), keys also
 * times temp[j]; then the first rot channels are rotated (rotate-half layout) with
 * inv_freq_i = theta^(-2i/rot), angle = pos * inv_freq_i. q [N,Hq*d], k [N,Hk*d].
 * qn [N,Hq], kn [N,Hk] save the clamped norms; q_in/k_in keep copies of the inputs for backward
 * (may be NULL in inference). */
void ops_qknorm_rope_fwd(zy_ctx *ctx, float *q, float *k, float *qn, float *kn, float *q_in,
                         float *k_in, const float *temp, const int32_t *pos, int N, int Hq, int Hk,
                         int d, int rot, double theta, float eps_norm);
/* dq, dk in place (on entry: grads w.r.t. the outputs; on exit: w.r.t. the inputs); dtemp += . */
void ops_qknorm_rope_bwd(zy_ctx *ctx, float *dq, float *dk, float *dtemp, const float *q_in,
                         const float *k_in, const float *qn, const float *kn, const float *temp,
                         const int32_t *pos, int N, int Hq, int Hk, int d, int rot, double theta,
                         float eps_norm);

/* ---- causal GQA attention ----
 * out[N,Hq*d]: per sequence, query t of head i attends keys s <= t (and s > t - window when
 * window > 0) of key head i/(Hq/Hk), softmax(scale * q.k) v. lse[B,Hq,T] saved for backward. */
void ops_attention_fwd(zy_ctx *ctx, float *out, float *lse, const float *q, const float *k,
                       const float *v, int B, int T, int Hq, int Hk, int d, float scale,
                       int window);
/* dq, dk, dv (overwrite). */
void ops_attention_bwd(zy_ctx *ctx, float *dq, float *dk, float *dv, const float *dout,
                       const float *out, const float *lse, const float *q, const float *k,
                       const float *v, int B, int T, int Hq, int Hk, int d, float scale,
                       int window);
/* Decoding: one new query row per sequence against a cache of Tk keys (kc/vc [B,Tmax,Hk*d] rows
 * 0..Tk-1). out [B,Hq*d]. */
void ops_attention_decode(zy_ctx *ctx, float *out, const float *q, const float *kc, const float *vc,
                          int B, int Tk, int Tmax, int Hq, int Hk, int d, float scale, int window);

/* ---- elementwise ---- */
/* y = GELU(x) exact (erf). */
void ops_gelu_fwd(zy_ctx *ctx, float *y, const float *x, size_t n);
/* dx = dy * GELU'(x) (overwrite). */
void ops_gelu_bwd(zy_ctx *ctx, float *dx, const float *dy, const float *x, size_t n);
/* gu [N, 2F] = [g | u] per row; y [N,F] = SiLU(g) * u. */
void ops_swiglu_fwd(zy_ctx *ctx, float *y, const float *gu, int N, int F);
/* dgu [N,2F] (overwrite) from dy [N,F]. */
void ops_swiglu_bwd(zy_ctx *ctx, float *dgu, const float *dy, const float *gu, int N, int F);

/* ---- router ----
 * probs[N,E1] = softmax(logits) (fp32), E1 = E+1; choice[n] = argmax(probs + bias) (first index
 * wins ties); gate[n] = probs[n, choice] unless choice == E1-1 (skip) where gate = 0. */
void ops_router_select(zy_ctx *ctx, float *probs, int32_t *choice, float *gate, const float *logits,
                       const float *bias, int N, int E1);
/* dlogits (overwrite) from dgate[N] through the softmax (skip rows get zero). */
void ops_router_bwd(zy_ctx *ctx, float *dlogits, const float *dgate, const float *probs,
                    const int32_t *choice, int N, int E1);

/* ---- MoE dispatch / combine ----
 * From choice[N] in [0,E] (E = skip): counts[E], offsets[E+1] (exclusive scan; offsets[E] = routed
 * rows), perm[N]: routed rows sorted by expert, stable in n; rows of expert e are
 * perm[offsets[e]..offsets[e+1]). Skipped rows are not listed. Returns the routed row count. */
int ops_moe_dispatch(zy_ctx *ctx, int32_t *counts, int32_t *offsets, int32_t *perm,
                     const int32_t *choice, int N, int E);
/* xs[r,:] = x[perm[r],:] for r < nrows. */
void ops_gather_rows(zy_ctx *ctx, float *xs, const float *x, const int32_t *perm, int nrows, int C);
/* y[N,D] = 0 for all rows, then y[perm[r]] = gate[perm[r]] * ys[r] for r < nrows. */
void ops_moe_combine(zy_ctx *ctx, float *y, const float *ys, const float *gate, const int32_t *perm,
                     int nrows, int N, int D);
/* dys[r] = gate[perm[r]] * dy[perm[r]] (overwrite), dgate[n] = dot(dy[n], ys[r]) for routed n,
 * 0 for skipped rows (overwrite all N). */
void ops_moe_combine_bwd(zy_ctx *ctx, float *dys, float *dgate, const float *dy, const float *ys,
                         const float *gate, const int32_t *perm, int nrows, int N, int D);
/* dx[perm[r]] += dxs[r] (scatter-add). */
void ops_scatter_add_rows(zy_ctx *ctx, float *dx, const float *dxs, const int32_t *perm, int nrows,
                          int C);

/* ---- loss ----
 * Cross-entropy over logits [N,V] with targets[N] (ignore_index rows count for nothing).
 * Returns the SUM of losses over counted rows (double) and writes *count; when dlogits != NULL it
 * is set to (softmax - onehot) * grad_scale for counted rows and 0 for ignored rows. dlogits may
 * alias logits. */
double ops_xent_fwd_bwd(zy_ctx *ctx, float *dlogits, const float *logits, const int32_t *targets,
                        int N, int V, int ignore_index, float grad_scale, int *count);

/* ---- router depth averaging (EDA) ----
 * z[N,R] += r_prev[N,R] * g[R] (g broadcast over rows). */
void ops_eda_fwd(zy_ctx *ctx, float *z, const float *r_prev, const float *g, int N, int R);
/* dr_prev = dz * g (overwrite); dg += sum over rows dz * r_prev. */
void ops_eda_bwd(zy_ctx *ctx, float *dr_prev, float *dg, const float *dz, const float *r_prev,
                 const float *g, int N, int R);

#endif
