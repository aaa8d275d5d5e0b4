/* The operation graphs of cuDNN's fused attention (attention_cudnn_graphs.h), written against the
 * backend API (cudnn_graph.h) with strides for zayac's token-major rows. */
#include "ops/cuda/attention_cudnn_graphs.h"

#include <stdint.h>

#if ZY_HAVE_CUDNN

/* ---- layouts ---- */

static cg_layout layout(int64_t d0, int64_t d1, int64_t d2, int64_t d3, int64_t s0, int64_t s1,
                        int64_t s2, int64_t s3) {
    cg_layout l = {{d0, d1, d2, d3}, {s0, s1, s2, s3}};
    return l;
}
/* [B, H, n, d] over token-major rows [B*T, H*d] (q, k, v, out and their gradients): n rows of
 * each sequence of T (n < T for a chunk, whose pointer starts at its first row). */
static cg_layout rows_bhtd(int64_t B, int64_t H, int64_t n, int64_t d, int64_t T) {
    return layout(B, H, n, d, T * H * d, d, H * d, 1);
}
/* The same transposed in its last two dims, [B, H, d, n] (K and V as the products read them). */
static cg_layout rows_bhdt(int64_t B, int64_t H, int64_t n, int64_t d, int64_t T) {
    return layout(B, H, d, n, T * H * d, d, 1, H * d);
}
/* Scores [B, H, m, n] and their transpose [B, H, n, m] (a view with swapped strides). */
static cg_layout scores(int64_t B, int64_t H, int64_t m, int64_t n) {
    return layout(B, H, m, n, H * m * n, m * n, n, 1);
}
static cg_layout scores_t(int64_t B, int64_t H, int64_t m, int64_t n) {
    return layout(B, H, n, m, H * m * n, m * n, 1, n);
}
/* Per-row values [B, H, n, 1] in rows of T per head (lse [B, H, T]; n = T, or a chunk's rows
 * from its first); dense when n = T. */
static cg_layout per_row(int64_t B, int64_t H, int64_t n, int64_t T) {
    return layout(B, H, n, 1, H * T, T, 1, 1);
}
/* A gradient per query head before the sum over a key head's group, [B, Hq, T, d] dense. */
static cg_layout per_head(int64_t B, int64_t H, int64_t T, int64_t d) {
    return layout(B, H, T, d, H * T * d, T * d, d, 1);
}

/* ---- the graphs ---- */

/* x op y in int32 along axis 3: an index shifted by a sequence length or the window, as the
 * frontend's band mask computes it. */
static cg_desc shift_index(cg_graph *g, cudnnPointwiseMode_t mode, cg_desc x, cg_desc y,
                           cg_layout l) {
    cg_desc z = cg_virtual(g, CUDNN_DATA_INT32, l);
    cg_pointwise(g, mode, CUDNN_DATA_INT32, x, y, NULL, z, 3);
    return z;
}

/* s with -inf where query row r (axis 2) may not see key column c (axis 3): the right bound, then
 * the left, each with its own index generators, as cudnn-frontend's diagonal band nodes lay them
 * out (the fusion matches these patterns).
 * Right bound: keep r >= c. Bottom-right aligned (sq and skv given: int32 scalars, or the
 * [B, 1, 1, 1] sequence lengths), the row index plus the s_kv - s_q offset before the compare:
 * keep r + skv - sq >= c.
 * Left bound (a window): keep c + window > r, window an f32 scalar (with the bottom-right
 * alignment and fixed lengths its value is the window less s_kv - s_q); with sequence lengths,
 * window_i an int32 scalar: keep c + window_i - skv + sq > r. */
static cg_desc mask_band(cg_graph *g, cg_desc s, cg_layout l, cg_desc neg_inf, cg_desc window,
                         cg_desc sq, cg_desc skv, cg_desc window_i) {
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT, i32 = CUDNN_DATA_INT32, b = CUDNN_DATA_BOOLEAN;
    cg_desc row = cg_virtual(g, i32, l), col = cg_virtual(g, i32, l);
    cg_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, f32, s, NULL, NULL, row, 2);
    cg_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, f32, s, NULL, NULL, col, 3);
    if (skv) {
        row = shift_index(g, CUDNN_POINTWISE_ADD, row, skv, l);
        row = shift_index(g, CUDNN_POINTWISE_SUB, row, sq, l);
    }
    cg_desc keep = cg_pw(g, CUDNN_POINTWISE_CMP_GE, b, row, col, NULL, b, l);
    s = cg_pw(g, CUDNN_POINTWISE_BINARY_SELECT, f32, s, neg_inf, keep, f32, l);
    if (!window && !window_i) return s;
    row = cg_virtual(g, i32, l), col = cg_virtual(g, i32, l);
    cg_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, f32, s, NULL, NULL, row, 2);
    cg_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, f32, s, NULL, NULL, col, 3);
    cg_desc shifted;
    if (window_i) {
        shifted = shift_index(g, CUDNN_POINTWISE_ADD, col, window_i, l);
        shifted = shift_index(g, CUDNN_POINTWISE_SUB, shifted, skv, l);
        shifted = shift_index(g, CUDNN_POINTWISE_ADD, shifted, sq, l);
    } else {
        shifted = cg_pw(g, CUDNN_POINTWISE_ADD, f32, col, window, NULL, f32, l);
    }
    keep = cg_pw(g, CUDNN_POINTWISE_CMP_GT, b, shifted, row, NULL, b, l);
    return cg_pw(g, CUDNN_POINTWISE_BINARY_SELECT, f32, s, neg_inf, keep, f32, l);
}

/* s with -inf outside the first seq_q rows and seq_kv columns of each sequence: the workaround
 * cudnn-frontend applies to the backward when s_kv is not a multiple of 128 on cuDNN <= 9.15. */
static cg_desc mask_padding(cg_graph *g, cg_desc s, cg_layout l, cg_desc neg_inf, cg_desc seq_q,
                            cg_desc seq_kv) {
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT, i32 = CUDNN_DATA_INT32, b = CUDNN_DATA_BOOLEAN;
    cg_desc row = cg_virtual(g, i32, l), col = cg_virtual(g, i32, l);
    cg_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, i32, s, NULL, NULL, row, 2);
    cg_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, i32, s, NULL, NULL, col, 3);
    cg_desc in_q = cg_pw(g, CUDNN_POINTWISE_CMP_LT, b, row, seq_q, NULL, b, l);
    cg_desc in_kv = cg_pw(g, CUDNN_POINTWISE_CMP_LT, b, col, seq_kv, NULL, b, l);
    cg_desc keep = cg_pw(g, CUDNN_POINTWISE_LOGICAL_AND, b, in_q, in_kv, NULL, b, l);
    return cg_pw(g, CUDNN_POINTWISE_BINARY_SELECT, f32, s, neg_inf, keep, f32, l);
}

/* out = softmax(mask(scale q k^T)) v and the stats (lse). */
void attn_graph_fwd(cg_graph *g, const cudnn_attn_shape *sh) {
    const int64_t B = sh->B, T = sh->T, Hq = sh->Hq, Hk = sh->Hk, d = sh->d;
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT, bf16 = CUDNN_DATA_BFLOAT16;
    const cg_layout ls = scores(B, Hq, T, T), lr = per_row(B, Hq, T, T);
    cg_desc q = cg_tensor(g, U_Q, bf16, rows_bhtd(B, Hq, T, d, T));
    cg_desc kt = cg_tensor(g, U_K, bf16, rows_bhdt(B, Hk, T, d, T));
    cg_desc v = cg_tensor(g, U_V, bf16, rows_bhtd(B, Hk, T, d, T));
    cg_desc o = cg_tensor(g, U_O, bf16, rows_bhtd(B, Hq, T, d, T));
    cg_desc stats = cg_tensor(g, U_STATS, f32, lr);
    cg_desc scale = cg_scalar(g, U_SCALE, f32), neg_inf = cg_scalar(g, U_NEG_INF, f32);
    cg_desc window = sh->window > 0 ? cg_scalar(g, U_WINDOW, f32) : NULL;

    cg_desc s = cg_virtual(g, f32, ls); /* [B, Hq, T, T] */
    cg_matmul(g, q, kt, s, NULL, NULL, NULL);
    s = cg_pw(g, CUDNN_POINTWISE_MUL, f32, s, scale, NULL, f32, ls);
    s = mask_band(g, s, ls, neg_inf, window, NULL, NULL, NULL);
    /* softmax with its stats: max, exp(s - max), their sum, stats = max + log(sum) */
    cg_desc mx = cg_virtual(g, f32, lr), sum = cg_virtual(g, f32, lr);
    cg_reduction(g, CUDNN_REDUCE_TENSOR_MAX, s, mx);
    cg_desc e = cg_pw(g, CUDNN_POINTWISE_SUB, f32, s, mx, NULL, f32, ls);
    e = cg_pw(g, CUDNN_POINTWISE_EXP, f32, e, NULL, NULL, f32, ls);
    cg_reduction(g, CUDNN_REDUCE_TENSOR_ADD, e, sum);
    cg_desc log_sum = cg_pw(g, CUDNN_POINTWISE_LOG, f32, sum, NULL, NULL, f32, lr);
    cg_pointwise(g, CUDNN_POINTWISE_ADD, f32, mx, log_sum, NULL, stats, -1);
    /* the probabilities in bf16 for the PV product */
    cg_desc p = cg_pw(g, CUDNN_POINTWISE_DIV, f32, e, sum, NULL, bf16, ls);
    cg_matmul(g, p, v, o, NULL, NULL, NULL);
}

/* dq, dk, dv from dout and the forward's tensors: P = exp(mask(scale q k^T) - lse), dv = P^T dout,
 * dS = P (dout v^T - rowsum(dout * out)) scale, dk = dS^T q, dq = dS k; with GQA the per-query-
 * head dk, dv are summed over each key head's group. deterministic: dq straight from the product
 * (no fp32 accumulator, the dP-workspace kernel); otherwise through an fp32 accumulator that
 * cuDNN fills with atomics. */
void attn_graph_bwd(cg_graph *g, const cudnn_attn_shape *sh, const bwd_rows *r) {
    const int64_t B = sh->B, T = r->T, Tq = r->Tq, Tkv = r->Tkv, Hq = sh->Hq, Hk = sh->Hk,
                  d = sh->d;
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT, bf16 = CUDNN_DATA_BFLOAT16,
                          i32 = CUDNN_DATA_INT32;
    const cg_layout ls = scores(B, Hq, Tq, Tkv), lst = scores_t(B, Hq, Tq, Tkv);
    const cg_layout lr = per_row(B, Hq, Tq, Tq); /* dense: the row sums */
    cg_desc q = cg_tensor(g, U_Q, bf16, rows_bhtd(B, Hq, Tq, d, T));
    cg_desc kt = cg_tensor(g, U_K, bf16, rows_bhdt(B, Hk, Tkv, d, T));
    cg_desc vt = cg_tensor(g, U_V, bf16, rows_bhdt(B, Hk, Tkv, d, T));
    cg_desc o = cg_tensor(g, U_O, bf16, rows_bhtd(B, Hq, Tq, d, T));
    cg_desc dout = cg_tensor(g, U_DO, bf16, rows_bhtd(B, Hq, Tq, d, T));
    cg_desc stats = cg_tensor(g, U_STATS, f32, per_row(B, Hq, Tq, T));
    cg_desc dq = cg_tensor(g, U_DQ, bf16, rows_bhtd(B, Hq, Tq, d, T));
    cg_desc dk = cg_tensor(g, U_DK, bf16, rows_bhtd(B, Hk, Tkv, d, T));
    cg_desc dv = cg_tensor(g, U_DV, bf16, rows_bhtd(B, Hk, Tkv, d, T));
    cg_desc scale = cg_scalar(g, U_SCALE, f32), neg_inf = cg_scalar(g, U_NEG_INF, f32);
    cg_desc one = cg_scalar(g, U_ONE, f32);
    cg_desc seq_q = NULL, seq_kv = NULL;
    if (r->pad) {
        const cg_layout lb = layout(B, 1, 1, 1, 1, 1, 1, 1);
        seq_q = cg_tensor(g, U_SEQ_Q, i32, lb);
        seq_kv = cg_tensor(g, U_SEQ_KV, i32, lb);
    }
    /* the band: bottom-right offsets from the sequence lengths when there are any (as the frontend
     * does), else from by-value s_q, s_kv */
    cg_desc window = NULL, window_i = NULL, sq = NULL, skv = NULL;
    if (r->br) {
        sq = r->pad ? seq_q : cg_scalar(g, U_SQ, i32);
        skv = r->pad ? seq_kv : cg_scalar(g, U_SKV, i32);
    }
    if (sh->window > 0) {
        if (r->br && r->pad)
            window_i = cg_scalar(g, U_WINDOW_I, i32);
        else
            window = cg_scalar(g, U_WINDOW, f32);
    }

    /* row sums D = rowsum(dout * out), [B, Hq, Tq, 1], kept in the workspace */
    cg_desc prod = cg_pw(g, CUDNN_POINTWISE_MUL, f32, dout, o, NULL, f32,
                         layout(B, Hq, Tq, d, Hq * Tq * d, Tq * d, Hq * d, 1));
    cg_desc red = cg_virtual(g, f32, lr);
    cg_reduction(g, CUDNN_REDUCE_TENSOR_ADD, prod, red);
    cg_desc rowsum = cg_tensor(g, U_ROWSUM, f32, lr);
    cg_pointwise(g, CUDNN_POINTWISE_MUL, f32, red, one, NULL, rowsum, -1);

    /* P = exp(mask(scale q k^T) - lse) */
    cg_desc s = cg_virtual(g, f32, ls);
    cg_matmul(g, q, kt, s, seq_q, seq_kv, NULL);
    s = cg_pw(g, CUDNN_POINTWISE_MUL, f32, s, scale, NULL, f32, ls);
    if (r->pad) s = mask_padding(g, s, ls, neg_inf, seq_q, seq_kv);
    s = cg_pw(g, CUDNN_POINTWISE_SUB, f32, s, stats, NULL, f32, ls);
    s = mask_band(g, s, ls, neg_inf, window, sq, skv, window_i);
    cg_desc p = cg_pw(g, CUDNN_POINTWISE_EXP, f32, s, NULL, NULL, f32, ls);

    /* dv = P^T dout (summed over the group) */
    cg_desc pt = cg_virtual(g, bf16, lst);
    cg_reshape(g, p, pt);
    cg_desc dv_heads = Hq == Hk ? dv : cg_virtual(g, bf16, per_head(B, Hq, Tkv, d));
    cg_matmul(g, pt, dout, dv_heads, seq_kv, NULL, seq_q);
    if (Hq != Hk) cg_reduction(g, CUDNN_REDUCE_TENSOR_ADD, dv_heads, dv);

    /* dS = P (dout v^T - D) scale */
    cg_desc ds = cg_virtual(g, f32, ls);
    cg_matmul(g, dout, vt, ds, seq_q, seq_kv, NULL);
    ds = cg_pw(g, CUDNN_POINTWISE_SUB, f32, ds, rowsum, NULL, f32, ls);
    ds = cg_pw(g, CUDNN_POINTWISE_MUL, f32, ds, p, NULL, f32, ls);
    ds = cg_pw(g, CUDNN_POINTWISE_MUL, f32, ds, scale, NULL, f32, ls);

    /* dk = dS^T q (summed over the group) */
    cg_desc dst = cg_virtual(g, bf16, lst);
    cg_reshape(g, ds, dst);
    cg_desc dk_heads = Hq == Hk ? dk : cg_virtual(g, bf16, per_head(B, Hq, Tkv, d));
    cg_matmul(g, dst, q, dk_heads, seq_kv, NULL, seq_q);
    if (Hq != Hk) cg_reduction(g, CUDNN_REDUCE_TENSOR_ADD, dk_heads, dk);

    /* dq = dS k, k seen untransposed */
    cg_desc k = cg_virtual(g, bf16, rows_bhtd(B, Hk, Tkv, d, T));
    cg_reshape(g, kt, k);
    if (sh->deterministic) {
        cg_matmul(g, ds, k, dq, seq_q, NULL, seq_kv);
    } else {
        cg_desc acc = cg_tensor(g, U_DQ_ACCUM, f32, per_head(B, Hq, Tq, d));
        cg_matmul(g, ds, k, acc, seq_q, NULL, seq_kv);
        cg_pointwise(g, CUDNN_POINTWISE_IDENTITY, f32, acc, NULL, NULL, dq, -1);
    }
}

#endif
