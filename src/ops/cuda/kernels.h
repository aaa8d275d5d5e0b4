/* Host API of the standalone CUDA kernels for the memory-bound ops (RMSNorm, the fused residual
 * scaling + RMSNorm, SwiGLU, GELU, embedding, fused cross-entropy). Each computes the same math as
 * its CPU op in ops/ops.h (see there for the formulas); ops/cuda/ops_dense.cu calls them for ops.h.
 *
 * Conventions: pointers are device memory; `stream` is a cudaStream_t (NULL = legacy default).
 * Suffix _bf16: activations bf16 (zy_bf16 holds the bits of a __nv_bfloat16; the CUDA context's
 * activations are always bf16, so there are no fp32-activation variants); _f32_bf16: fp32 input
 * rows (the residual stream), bf16 output rows; _f32 (embedding): fp32 throughout. Weights,
 * parameter gradients, the residual stream, rstd and losses are fp32; every reduction runs in fp32
 * (chunk totals of the parameter gradients in double). Parameter gradients ACCUMULATE (+=); input
 * gradients overwrite unless stated. Parameter-gradient sums over rows are deterministic (per-chunk
 * partials in `ws`, then a fixed-order sum; the embedding table gradient through a sort by id): no
 * atomics, the same bits on every run. `ws` is a workspace of cuda_ops_ws_bytes(N, C) bytes
 * (16-byte aligned, as cudaMalloc gives), not used concurrently by two launches. Return ZY_OK, or
 * ZY_ERR with zy_errmsg() naming a failed launch or an impossible shape. Launches are asynchronous:
 * a kernel fault shows at the next synchronising call. */
#ifndef ZY_OPS_CUDA_KERNELS_H
#define ZY_OPS_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t zy_bf16; /* bf16 bits (device: __nv_bfloat16) */

/* Bytes of the workspace the backward kernels need for N rows of width C (on the current device:
 * the embedding backward's share includes CUB's radix-sort storage). */
size_t cuda_ops_ws_bytes(int N, int C);
/* The embedding backward's share of it (cuda_ops_ws_bytes is at least this). */
size_t cuda_embed_bwd_ws_bytes(int N, int D);

/* ---- RMSNorm: y[N,C] = x * rstd * w, rstd[N] = 1/sqrt(mean(x^2) + eps) ---- */
int cuda_rmsnorm_fwd_bf16(zy_bf16 *y, float *rstd, const zy_bf16 *x, const float *w, int N, int C,
                          float eps, void *stream);
int cuda_rmsnorm_fwd_f32_bf16(zy_bf16 *y, float *rstd, const float *x, const float *w, int N, int C,
                              float eps, void *stream);
/* dx[N,C] (overwrite, or += when accumulate; may alias dy when both have one type), dw[C] +=. */
int cuda_rmsnorm_bwd_bf16(zy_bf16 *dx, float *dw, float *ws, const zy_bf16 *dy, const zy_bf16 *x,
                          const float *w, const float *rstd, int N, int C, int accumulate,
                          void *stream);
/* fp32 x and dx (the residual stream), bf16 dy. */
int cuda_rmsnorm_bwd_f32_bf16(float *dx, float *dw, float *ws, const zy_bf16 *dy, const float *x,
                              const float *w, const float *rstd, int N, int C, int accumulate,
                              void *stream);

/* 1 when rows of C bf16 and these pointers (NULL ones skipped) suit the two below. */
int cuda_router_norm_fits(int C, const void *const *ptrs, int n);
/* The router's input block in one pass where its rows are at most 256 bf16 (whole 16-byte
 * vectors, aligned pointers; else ZY_ERR and nothing launched): z[N,C] += bias (+ r_prev * g),
 * u0 = RMSNorm(z) * w, rstd saved; the same bits as ops_add_bias, ops_eda_fwd, ops_rmsnorm_fwd. */
int cuda_router_norm_fwd_bf16(zy_bf16 *z, zy_bf16 *u0, float *rstd, const float *bias,
                              const zy_bf16 *r_prev, const float *g, const float *w, int N, int C,
                              float eps, void *stream);
/* Its backward: dz = RMSNorm backward of du0 (overwrite; + carry when carry_in), dw +=; with
 * r_prev, carry = dz * g (overwrite) and dg += sum dz * r_prev; dbias += sum dz. ws: 3 P C floats
 * (zy_col_chunks). The bits of ops_rmsnorm_bwd, ops_add_act, ops_eda_bwd and ops_bias_bwd. */
int cuda_router_norm_bwd_bf16(zy_bf16 *dz, float *dw, float *dg, float *dbias, float *ws,
                              zy_bf16 *carry, int carry_in, const zy_bf16 *du0, const zy_bf16 *z,
                              const zy_bf16 *r_prev, const float *w, const float *rstd,
                              const float *g, int N, int C, void *stream);

/* ---- residual scaling + RMSNorm, all rows [N,D], vectors [D]:
 * out = (o + ob) * os + (h + rb) * rs (fp32 residual stream), y = RMSNorm(out) * w (rstd saved) */
int cuda_resnorm_fwd_bf16(float *out, zy_bf16 *y, float *rstd, const zy_bf16 *o, const float *h,
                          const float *ob, const float *os, const float *rb, const float *rs,
                          const float *w, int N, int D, float eps, void *stream);
/* Backward: dout = dres + RMSNorm_bwd(dy) (dres: the gradient reaching `out` from elsewhere, NULL
 * = 0), then d_o = dout*os (overwrite; may alias dy), dh = dout*rs (overwrite, fp32; may alias
 * dres), dw += sum dy*out*rstd, dob += sum dout*os, dos += sum dout*(o+ob), drb += sum dout*rs,
 * drs += sum dout*(h+rb). */
int cuda_resnorm_bwd_bf16(zy_bf16 *d_o, float *dh, float *dw, float *dob, float *dos, float *drb,
                          float *drs, float *ws, const zy_bf16 *dy, const float *dres,
                          const float *out, const float *rstd, const float *w, const zy_bf16 *o,
                          const float *h, const float *ob, const float *os, const float *rb,
                          const float *rs, int N, int D, void *stream);

/* ---- GELU (exact erf): y = x Phi(x); dx = dy (Phi(x) + x phi(x)) (overwrite) ---- */
int cuda_gelu_fwd_bf16(zy_bf16 *y, const zy_bf16 *x, size_t n, void *stream);
int cuda_gelu_bwd_bf16(zy_bf16 *dx, const zy_bf16 *dy, const zy_bf16 *x, size_t n, void *stream);

/* ---- SwiGLU: gu [N,2F] = [g | u] per row, y [N,F] = SiLU(g) * u; dgu [N,2F] (overwrite) ---- */
int cuda_swiglu_fwd_bf16(zy_bf16 *y, const zy_bf16 *gu, int N, int F, void *stream);
int cuda_swiglu_bwd_bf16(zy_bf16 *dgu, const zy_bf16 *dy, const zy_bf16 *gu, int N, int F,
                         void *stream);

/* ---- embedding + input affine (fp32: the table is a master weight, h the residual stream) ----
 * h[N,D] = (emb[ids[n]] + bias) * scale; ids in [0, V) (the caller checks). */
int cuda_embed_fwd_f32(float *h, const float *emb, const int32_t *ids, const float *bias,
                       const float *scale, int N, int D, void *stream);
/* demb[ids[n]] += dh*scale (rows with ids[n] == skip_id get nothing, -1 = none), dbias += sum
 * dh*scale, dscale += sum dh*(emb+bias). No atomics: the (id, row) pairs are sorted by id (stable
 * radix sort in ws), each id's rows are summed in a fixed order (row order within chunks of the
 * sorted list, then the chunk partials in order) and the total is added to demb once. */
int cuda_embed_bwd_f32(float *demb, float *dbias, float *dscale, float *ws, const float *dh,
                       const float *emb, const int32_t *ids, const float *bias, const float *scale,
                       int N, int D, int skip_id, void *stream);

/* ---- fused cross-entropy over logits [N,V], targets [N] ----
 * Per row, one online pass for max and sum of exp, then loss_rows[n] = lse - logits[n,target]
 * (0 for ignore_index rows, NaN for a target outside [0,V)) and, when dlogits != NULL,
 * dlogits = (softmax - onehot) * grad_scale (0 on ignored rows); dlogits may alias logits (in
 * place). The softmax is never stored. When loss_sum != NULL, *loss_sum (device double) = the sum
 * of loss_rows and *count (device int, may be NULL) = the counted rows, in a fixed order. */
int cuda_xent_fwd_bwd_bf16(zy_bf16 *dlogits, float *loss_rows, double *loss_sum, int *count,
                           const zy_bf16 *logits, const int32_t *targets, int N, int V,
                           int ignore_index, float grad_scale, void *stream);

#ifdef __cplusplus
}
#endif

#endif
