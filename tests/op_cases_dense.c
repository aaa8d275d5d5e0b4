/* Op cases of the dense ops (GEMMs, y += x, bias, embedding, RMSNorm, residual scaling, GELU,
 * SwiGLU, cross-entropy, zero sizes) for the op harness (op_harness.h).
 *
 * Measure (OH_BOUND): every element must satisfy |got - ref| <= rel |ref| + eps * scale[i]. rel is
 * the rounding of the output: 2^-8 (REL_BF, half a bf16 unit in the last place, relative) for bf16
 * outputs, ~0 for fp32 ones. scale[i] is the size of the terms output i is computed from (sum of
 * |products| for a GEMM or a column sum, |x| for a function of x...), and eps covers fp32
 * arithmetic on them: 1e-6 (~16 units of fp32 rounding) for short elementwise expressions, 4e-6
 * (~67 units) for column sums (fp32 sums of one or two dozen terms per row chunk, then double),
 * 2^-20 per unit of K for GEMMs (16x the worst case of a sequential fp32 sum). A wrong index or a
 * lost chunk errs by O(scale), orders of magnitude above. Also: every transA/transB with beta 0
 * and 1 for both GEMMs (bf16 and fp32 C), zero sizes, the aliasing the contracts allow (resscale
 * dh == dout, xent dlogits == logits, gelu dx == dy; on the compared backend, the reference runs
 * without aliasing), unaligned activation pointers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "op_cases.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define REL_BF  (1.0 / 256.0) /* bf16 rounding of an output, relative */
#define REL_F32 (1.0 / 4194304.0)
#define EPS_EW  1e-6
#define EPS_SUM 4e-6
#define EPS_K   (1.0 / 1048576.0) /* GEMM: per unit of K, times sum |a b| */
#define RMS_EPS 1e-5f
#define IGNORE  (-100)

/* ---- GEMMs ---- */

/* C[M,N] (bf16, or fp32 when f32c) = alpha op(A) op(B) + beta C. */
static void matmul_one(oh_run *r, int M, int N, int K, int ta, int tb, float alpha, float beta,
                       int f32c) {
    zy_ctx *c = oh_ctx(r);
    size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
    float *A = oh_randn_bf(r, na, 1.0f), *B = oh_randn_bf(r, nb, 1.0f);
    float *C0 = beta != 0.0f ? oh_randn(r, nc, 1.0f) : oh_const(r, nc, NAN);
    if (!f32c && beta != 0.0f) oh_bf(C0, nc); /* fp32 C keeps its low bits: bf16 would lose them */
    /* scale = K |alpha| sum_k |a_ik b_kj| + |beta c_ij| */
    double *scale = oh_zeros(r, nc);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++) {
                double a = ta ? A[(size_t)k * M + i] : A[(size_t)i * K + k];
                double b = tb ? B[(size_t)j * K + k] : B[(size_t)k * N + j];
                s += fabs(a * b);
            }
            double cc = beta != 0.0f ? fabs((double)beta * C0[(size_t)i * N + j]) : 0.0;
            scale[(size_t)i * N + j] = (K > 0 ? K : 1) * fabs((double)alpha) * s + cc;
        }
    oh_measure m = oh_bound(f32c ? REL_F32 : REL_BF, EPS_K, scale);
    if (!f32c && beta != 0.0f) {
        /* bf16 C with beta != 0: cuBLASLt rounds alpha*AB to bf16 before adding beta*C (seen on
         * an H100), so besides the final rounding each addend carries one bf16 rounding */
        float *ref = oh_dup(r, C0, nc);
        ops_matmul(oh_cpu(), ref, A, B, M, N, K, ta, tb, alpha, beta);
        for (size_t i = 0; i < nc; i++) {
            double bc = (double)beta * C0[i], ab = (double)ref[i] - bc;
            scale[i] = EPS_K * scale[i] + REL_BF * (fabs(ab) + fabs(bc));
        }
        m = oh_bound(REL_BF, 1.0, scale);
    }
    zy_act *dA = oh_act(r, A, na), *dB = oh_act(r, B, nb);
    const char *fmt = "matmul%s M=%d N=%d K=%d tA=%d tB=%d a=%g b=%g";
    const char *sfx = f32c ? "_f32" : "";
    if (f32c) {
        float *dC = oh_f32(r, C0, nc);
        ops_matmul_f32(c, dC, dA, dB, M, N, K, ta, tb, alpha, beta);
        oh_out_f32(r, m, dC, nc, fmt, sfx, M, N, K, ta, tb, (double)alpha, (double)beta);
    } else {
        zy_act *dC = oh_act(r, C0, nc);
        ops_matmul(c, dC, dA, dB, M, N, K, ta, tb, alpha, beta);
        oh_out_act(r, m, dC, nc, fmt, sfx, M, N, K, ta, tb, (double)alpha, (double)beta);
    }
}

/* p: M, N, K, alpha in thousandths; every transA, transB, beta 0/1, bf16 and fp32 C. */
static void case_matmul(oh_run *r, const int *p) {
    for (int f32c = 0; f32c < 2; f32c++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int b = 0; b < 2; b++)
                    matmul_one(r, p[0], p[1], p[2], ta, tb, (float)p[3] / 1000.0f, (float)b, f32c);
}

/* Accumulation of small products onto large fp32 values (a parameter gradient): bf16 rounding of
 * C anywhere would lose them. */
static void case_matmul_acc(oh_run *r, const int *p) {
    for (int ta = 0; ta < 2; ta++) matmul_one(r, p[0], p[1], p[2], ta, 0, 1e-3f, 1.0f, 1);
}

/* Zero sizes: nothing happens, except that K = 0 leaves beta C (0 from NaN when beta = 0). */
static void case_matmul_zero(oh_run *r, const int *p) {
    (void)p;
    zy_ctx *c = oh_ctx(r);
    const int M = 5, N = 9;
    size_t nc = (size_t)M * N;
    float *C0 = oh_randn_bf(r, nc, 1.0f), *nan = oh_const(r, nc, NAN), *one = oh_const(r, 64, 1);
    zy_act *A = oh_act(r, one, 64), *B = oh_act(r, one, 64);
    for (int f32c = 0; f32c < 2; f32c++) {
        const float betas[3] = {0.0f, 1.0f, 0.5f};
        for (int b = 0; b < 3; b++) {
            const float *init = betas[b] == 0.0f ? nan : C0;
            float *want = oh_const(r, nc, 0.0f), *got;
            for (size_t i = 0; i < nc; i++) want[i] = betas[b] == 0.0f ? 0.0f : betas[b] * C0[i];
            if (f32c) {
                float *dC = oh_f32(r, init, nc);
                ops_matmul_f32(c, dC, A, B, M, N, 0, 0, 1, 1.0f, betas[b]);
                got = oh_get_f32(r, dC, nc);
            } else {
                zy_act *dC = oh_act(r, init, nc);
                ops_matmul(c, dC, A, B, M, N, 0, 1, 0, 1.0f, betas[b]);
                got = oh_get_act(r, dC, nc);
            }
            oh_expect(oh_bound(f32c ? 0.0 : REL_BF, 0.0, NULL), got, want, nc,
                      "matmul%s K=0 beta=%g", f32c ? "_f32" : "", (double)betas[b]);
        }
        /* M = 0 or N = 0: C untouched */
        zy_act *dC = oh_act(r, C0, nc);
        ops_matmul(c, dC, A, B, 0, N, 4, 0, 0, 1.0f, 0.0f);
        ops_matmul(c, dC, A, B, M, 0, 4, 0, 0, 1.0f, 0.0f);
        float *dCf = oh_f32(r, C0, nc);
        ops_matmul_f32(c, dCf, A, B, 0, N, 4, 0, 0, 1.0f, 0.0f);
        ops_matmul_f32(c, dCf, A, B, M, 0, 4, 0, 0, 1.0f, 0.0f);
        oh_expect(oh_exact(), oh_get_act(r, dC, nc), C0, nc, "matmul M=0 / N=0 leave C");
        oh_expect(oh_exact(), oh_get_f32(r, dCf, nc), C0, nc, "matmul_f32 M=0 / N=0 leave C");
    }
}

/* ---- y += x, bias ---- */

/* p: n; element offsets of y and x 0/0, 1/1, 0/3 inside larger buffers. */
static void case_add_act(oh_run *r, const int *p) {
    static const int offs[3][2] = {{0, 0}, {1, 1}, {0, 3}};
    size_t n = (size_t)p[0];
    for (int o = 0; o < 3; o++) {
        float *y = oh_randn_bf(r, n, 1.0f), *x = oh_randn_bf(r, n, 1.0f);
        double *scale = oh_zeros(r, n);
        for (size_t i = 0; i < n; i++) scale[i] = fabsf(x[i]) + fabsf(y[i]);
        float *ypad = oh_const(r, n + 8, 0.0f), *xpad = oh_const(r, n + 8, 0.0f);
        memcpy(ypad + offs[o][0], y, n * sizeof(float));
        memcpy(xpad + offs[o][1], x, n * sizeof(float));
        zy_act *dy = oh_act(r, ypad, n + 8), *dx = oh_act(r, xpad, n + 8);
        zy_act *py = ops_act_at(oh_ctx(r), dy, offs[o][0]);
        ops_add_act(oh_ctx(r), py, ops_act_at(oh_ctx(r), dx, offs[o][1]), n);
        oh_out_act(r, oh_bound(REL_BF, EPS_EW, scale), py, n, "add_act n=%zu offsets %d,%d", n,
                   offs[o][0], offs[o][1]);
    }
}

/* p: N, C, gelu (1: ops_bias_gelu_fwd). A bf16 backend rounds x + b (2^-8 relative) before the
 * GELU, whose slope is at most 1.13 in size: y is then within 2^-8 |y| (its own rounding) plus
 * 1.13 (1 + 2^-8) 2^-8 |x + b| of the reference. Near x + b = -3 that second term is ~8x the
 * first, so a bound relative to |y| alone does not hold. */
static void case_add_bias(oh_run *r, const int *p) {
    int N = p[0], C = p[1], gelu = p[2];
    size_t n = (size_t)N * C;
    float *x = oh_randn_bf(r, n, gelu ? 2.0f : 1.0f), *b = oh_randn(r, C, 0.5f);
    double *scale = oh_zeros(r, n), *zabs = oh_zeros(r, n);
    for (size_t i = 0; i < n; i++) {
        scale[i] = fabsf(x[i]) + fabsf(b[i % (size_t)C]);
        zabs[i] = fabs((double)x[i] + b[i % (size_t)C]);
    }
    zy_act *dx = oh_act(r, x, n), *dy = oh_nan_act(r, n);
    if (gelu)
        ops_bias_gelu_fwd(oh_ctx(r), dy, dx, oh_f32(r, b, C), N, C);
    else
        ops_add_bias(oh_ctx(r), dx, oh_f32(r, b, C), N, C);
    oh_out_act(r, oh_bound(REL_BF, EPS_EW, scale), dx, n, "add_bias N=%d C=%d%s x", N, C,
               gelu ? " gelu" : "");
    if (gelu)
        oh_out_act(r, oh_bound(REL_BF, 1.15 * REL_BF, zabs), dy, n, "bias_gelu N=%d C=%d y", N, C);
}

/* p: N, C */
static void case_bias_bwd(oh_run *r, const int *p) {
    int N = p[0], C = p[1];
    size_t n = (size_t)N * C;
    float *dy = oh_randn_bf(r, n, 1.0f), *db0 = oh_randn(r, C, 1.0f);
    double *scale = oh_zeros(r, C);
    for (int i = 0; i < C; i++) scale[i] = fabsf(db0[i]);
    for (size_t i = 0; i < n; i++) scale[i % (size_t)C] += fabsf(dy[i]);
    float *ddb = oh_f32(r, db0, C);
    ops_bias_bwd(oh_ctx(r), ddb, oh_act(r, dy, n), N, C);
    oh_out_f32(r, oh_bound(REL_F32, EPS_SUM, scale), ddb, C, "bias_bwd N=%d C=%d", N, C);
}

/* p: N, C, alias (1: dx is dy on the compared backend). ops_gelu_bias_bwd against the reference's
 * GELU backward and column sums; on every backend also bitwise against its own gelu_bwd followed
 * by bias_bwd (what it fuses). The column sums add the backend's stored dx, which on a bf16
 * backend carries one rounding (2^-8 relative) per term. */
static void case_gelu_bias_bwd(oh_run *r, const int *p) {
    zy_ctx *c = oh_ctx(r);
    const int N = p[0], C = p[1], alias = p[2] && !oh_is_ref(r);
    const size_t n = (size_t)N * C;
    float *x = oh_randn_bf(r, n, 2.0f), *g = oh_randn_bf(r, n, 1.0f), *db0 = oh_randn(r, C, 1.0f);
    double *dsc = oh_zeros(r, n), *bsc = oh_zeros(r, C);
    for (int i = 0; i < C; i++) bsc[i] = fabsf(db0[i]);
    for (size_t i = 0; i < n; i++) {
        dsc[i] = fabsf(g[i]) * (1 + fabsf(x[i]));
        bsc[i % (size_t)C] += dsc[i];
    }
    zy_act *dx_in = oh_act(r, x, n), *dg = oh_act(r, g, n);
    zy_act *ddx = alias ? dg : oh_nan_act(r, n);
    float *ddb = oh_f32(r, db0, C);
    ops_gelu_bias_bwd(c, ddx, ddb, dg, dx_in, N, C);
    /* the two ops it fuses, on fresh copies of the same inputs */
    zy_act *sdx = oh_nan_act(r, n);
    float *sdb = oh_f32(r, db0, C);
    ops_gelu_bwd(c, sdx, oh_act(r, g, n), dx_in, n);
    ops_bias_bwd(c, sdb, sdx, N, C);
    oh_expect(oh_exact(), oh_get_act(r, ddx, n), oh_get_act(r, sdx, n), n,
              "gelu_bias_bwd N=%d C=%d dx = gelu_bwd's", N, C);
    oh_expect(oh_exact(), oh_get_f32(r, ddb, C), oh_get_f32(r, sdb, C), (size_t)C,
              "gelu_bias_bwd N=%d C=%d dbias = bias_bwd's", N, C);
    oh_out_act(r, oh_bound(REL_BF, EPS_EW, dsc), ddx, n, "gelu_bias_bwd N=%d C=%d%s dx", N, C,
               p[2] ? " dx=dy" : "");
    oh_out_f32(r, oh_bound(REL_F32, REL_BF + EPS_SUM, bsc), ddb, C, "gelu_bias_bwd N=%d C=%d dbias",
               N, C);
}

/* ---- embedding ---- */

/* p: N, D, measure (V = 50; the id of row 1 is skip_id when N > 1). Measure 0: OH_BOUND as above;
 * 1: that of the rows x widths grid (op_cases_elem.c): fp32 max-relative 1e-5 over the size of
 * the terms, gradient increments. */
static void case_embed(oh_run *r, const int *p) {
    zy_ctx *c = oh_ctx(r);
    const int V = 50, N = p[0], D = p[1];
    size_t nd = (size_t)N * D, vd = (size_t)V * D;
    float *emb = oh_randn(r, vd, 1.0f), *bias = oh_randn(r, D, 0.2f);
    float *sc = oh_randu(r, D, 0.5f, 1.5f);
    int32_t *ids = oh_ints(r, N, 0);
    for (int n = 0; n < N; n++) ids[n] = (int32_t)zy_rng_below(oh_rng(), (uint64_t)V);
    int skip = N > 1 ? ids[1] : -1;
    double *hsc = oh_zeros(r, nd);
    for (size_t i = 0; i < nd; i++) {
        size_t k = i % (size_t)D;
        hsc[i] = (fabsf(emb[(size_t)ids[i / (size_t)D] * D + k]) + fabsf(bias[k])) * sc[k];
    }
    float *demb = oh_f32(r, emb, vd), *dbias = oh_f32(r, bias, D), *dsc = oh_f32(r, sc, D);
    int32_t *dids = oh_i32(r, ids, N);
    float *dh = oh_nan_f32(r, nd);
    ops_embed_fwd(c, dh, demb, dids, dbias, dsc, N, D);
    oh_measure mf = oh_bound(0.0, EPS_EW, hsc);
    if (p[2]) mf = oh_maxrel(1e-5, (oh_maxabs(emb, vd) + oh_maxabs(bias, D)) * oh_maxabs(sc, D));
    oh_out_f32(r, mf, dh, nd, "embed_fwd N=%d D=%d", N, D);

    float *g = oh_randn(r, nd, 1.0f);
    float *ge0 = oh_randn(r, vd, 0.1f), *gb0 = oh_randn(r, D, 0.1f), *gs0 = oh_randn(r, D, 0.1f);
    double *se = oh_zeros(r, vd), *sb = oh_zeros(r, D), *ss = oh_zeros(r, D);
    for (size_t i = 0; i < vd; i++) se[i] = fabsf(ge0[i]);
    for (int k = 0; k < D; k++) sb[k] = fabsf(gb0[k]), ss[k] = fabsf(gs0[k]);
    for (size_t i = 0; i < nd; i++) {
        size_t n = i / (size_t)D, k = i % (size_t)D, e = (size_t)ids[n] * D + k;
        se[e] += fabsf(g[i] * sc[k]);
        sb[k] += fabsf(g[i] * sc[k]);
        ss[k] += fabsf(g[i]) * (fabsf(emb[e]) + fabsf(bias[k]));
    }
    float *dge = oh_f32(r, ge0, vd), *dgb = oh_f32(r, gb0, D), *dgs = oh_f32(r, gs0, D);
    ops_embed_bwd(c, dge, dgb, dgs, oh_f32(r, g, nd), demb, dids, dbias, dsc, N, D, skip);
    oh_measure me = oh_bound(REL_F32, EPS_SUM, se), mb = oh_bound(REL_F32, EPS_SUM, sb);
    oh_measure ms = oh_bound(REL_F32, EPS_SUM, ss);
    if (p[2]) me = oh_inc(ge0, 1e-5), mb = oh_inc(gb0, 1e-5), ms = oh_inc(gs0, 1e-5);
    oh_out_f32(r, me, dge, vd, "embed_bwd N=%d D=%d skip=%d demb", N, D, skip);
    if (skip >= 0)
        oh_expect(oh_exact(), oh_get_f32(r, dge + (size_t)skip * D, D), ge0 + (size_t)skip * D, D,
                  "embed_bwd N=%d D=%d: row skip_id=%d unchanged", N, D, skip);
    oh_out_f32(r, mb, dgb, D, "embed_bwd N=%d D=%d dbias", N, D);
    oh_out_f32(r, ms, dgs, D, "embed_bwd N=%d D=%d dscale", N, D);
}

/* ---- RMSNorm ---- */

/* p: N, C, x an activation (bf16 on CUDA; else fp32), accumulate into dx; the backward reads the
 * CPU's rstd. */
static void case_rmsnorm(oh_run *r, const int *p) {
    zy_ctx *c = oh_ctx(r);
    int N = p[0], C = p[1], xbf = p[2], acc = p[3];
    zy_dtype xt = xbf ? c->act_dtype : ZY_DTYPE_F32; /* the router state: activation dtype */
    const char *tn = xbf ? "bf16" : "f32";
    size_t n = (size_t)N * C;
    float *x = oh_randn(r, n, 1.5f), *w = oh_randu(r, C, 0.5f, 1.5f);
    if (xbf) oh_bf(x, n);
    float *yr = oh_const(r, n, 0.0f), *rr = oh_const(r, N, 0.0f);
    ops_rmsnorm_fwd(oh_cpu(), yr, rr, x, ZY_DTYPE_F32, w, N, C, RMS_EPS);
    double *ysc = oh_zeros(r, n);
    for (size_t i = 0; i < n; i++) ysc[i] = fabsf(x[i]) * rr[i / (size_t)C] * w[i % (size_t)C];
    void *dx = xbf ? (void *)oh_act(r, x, n) : (void *)oh_f32(r, x, n);
    float *dw = oh_f32(r, w, C), *drstd = oh_nan_f32(r, N);
    zy_act *dy = oh_nan_act(r, n);
    ops_rmsnorm_fwd(c, dy, drstd, dx, xt, dw, N, C, RMS_EPS);
    oh_out_act(r, oh_bound(REL_BF, EPS_EW, ysc), dy, n, "rmsnorm_fwd x=%s N=%d C=%d y", tn, N, C);
    oh_out_f32(r, oh_bound(EPS_EW, 0.0, NULL), drstd, N, "rmsnorm_fwd x=%s N=%d C=%d rstd", tn, N,
               C);

    /* backward from the CPU's rstd, onto random dx (accumulate) and dw */
    float *g = oh_randn_bf(r, n, 1.0f), *dw0 = oh_randn(r, C, 0.1f);
    float *dx0 = acc ? oh_randn(r, n, 1.0f) : oh_const(r, n, NAN);
    if (xbf && acc) oh_bf(dx0, n);
    /* dx = r g w - (r^3 dot / C) x (+ dx0): scale = |r g w| + r^3 sum|g w x| / C |x| */
    double *dxsc = oh_zeros(r, n), *dwsc = oh_zeros(r, C);
    for (int k = 0; k < C; k++) dwsc[k] = fabsf(dw0[k]);
    for (int row = 0; row < N; row++) {
        double t = 0, rs = rr[row];
        for (int k = 0; k < C; k++) {
            size_t i = (size_t)row * C + k;
            t += fabs((double)g[i] * w[k] * x[i]);
            dwsc[k] += (float)fabs((double)g[i] * x[i] * rs);
        }
        t *= rs * rs * rs / C;
        for (int k = 0; k < C; k++) {
            size_t i = (size_t)row * C + k;
            dxsc[i] = (float)(rs * fabs((double)g[i] * w[k]) + t * fabs((double)x[i]) +
                              (acc ? fabs((double)dx0[i]) : 0.0));
        }
    }
    void *ddx = xbf ? (void *)oh_act(r, dx0, n) : (void *)oh_f32(r, dx0, n);
    float *ddw = oh_f32(r, dw0, C);
    ops_rmsnorm_bwd(c, ddx, ddw, oh_act(r, g, n), dx, xt, dw, oh_f32(r, rr, N), N, C, acc);
    oh_measure mdx = oh_bound(xbf ? REL_BF : REL_F32, 1e-5, dxsc);
    const char *fmt = "rmsnorm_bwd x=%s N=%d C=%d acc=%d dx";
    if (xbf)
        oh_out_act(r, mdx, ddx, n, fmt, tn, N, C, acc);
    else
        oh_out_f32(r, mdx, ddx, n, fmt, tn, N, C, acc);
    oh_out_f32(r, oh_bound(REL_F32, EPS_SUM, dwsc), ddw, C, "rmsnorm_bwd x=%s N=%d C=%d dw", tn, N,
               C);
}

/* ---- residual scaling ---- */

/* p: N, D, alias (the compared backend's dh is dout's buffer; the forward is checked without) */
static void case_resscale(oh_run *r, const int *p) {
    zy_ctx *c = oh_ctx(r);
    int N = p[0], D = p[1], alias = p[2];
    size_t nd = (size_t)N * D;
    float *o = oh_randn_bf(r, nd, 1.0f), *h = oh_randn(r, nd, 1.0f);
    float *ob = oh_randn(r, D, 0.3f), *os = oh_randu(r, D, 0.5f, 1.5f);
    float *rb = oh_randn(r, D, 0.3f), *rs = oh_randu(r, D, 0.5f, 1.5f);
    double *osc = oh_zeros(r, nd);
    for (size_t i = 0; i < nd; i++) {
        size_t k = i % (size_t)D;
        osc[i] = (fabsf(o[i]) + fabsf(ob[k])) * os[k] + (fabsf(h[i]) + fabsf(rb[k])) * rs[k];
    }
    zy_act *d_o = oh_act(r, o, nd);
    float *dh = oh_f32(r, h, nd), *dob = oh_f32(r, ob, D), *dos = oh_f32(r, os, D);
    float *drb = oh_f32(r, rb, D), *drs = oh_f32(r, rs, D), *dout = oh_nan_f32(r, nd);
    if (!alias) {
        ops_resscale_fwd(c, dout, d_o, dh, dob, dos, drb, drs, N, D);
        oh_out_f32(r, oh_bound(0.0, EPS_EW, osc), dout, nd, "resscale_fwd N=%d D=%d", N, D);
    }

    /* backward: parameter gradients start random */
    float *g = oh_randn(r, nd, 1.0f), *p0[4], *pd[4];
    double *psc[4];
    for (int k = 0; k < 4; k++) {
        p0[k] = oh_randn(r, D, 0.1f);
        psc[k] = oh_zeros(r, D);
        for (int i = 0; i < D; i++) psc[k][i] = fabsf(p0[k][i]);
        pd[k] = oh_f32(r, p0[k], D);
    }
    double *dosc = oh_zeros(r, nd), *dhsc = oh_zeros(r, nd);
    for (size_t i = 0; i < nd; i++) {
        size_t k = i % (size_t)D;
        float ag = fabsf(g[i]);
        dosc[i] = ag * os[k];
        dhsc[i] = ag * rs[k];
        psc[0][k] += ag * os[k];
        psc[1][k] += ag * (fabsf(o[i]) + fabsf(ob[k]));
        psc[2][k] += ag * rs[k];
        psc[3][k] += ag * (fabsf(h[i]) + fabsf(rb[k]));
    }
    float *dg = oh_f32(r, g, nd), *ddh = alias && !oh_is_ref(r) ? dg : oh_nan_f32(r, nd);
    zy_act *dd_o = oh_nan_act(r, nd);
    ops_resscale_bwd(c, dd_o, ddh, pd[0], pd[1], pd[2], pd[3], dg, d_o, dh, dob, dos, drb, drs, N,
                     D);
    const char *an = alias ? " dh=dout" : "";
    oh_out_act(r, oh_bound(REL_BF, EPS_EW, dosc), dd_o, nd, "resscale_bwd N=%d D=%d%s d_o", N, D,
               an);
    oh_out_f32(r, oh_bound(REL_F32, EPS_EW, dhsc), ddh, nd, "resscale_bwd N=%d D=%d%s dh", N, D,
               an);
    static const char *pn[4] = {"dob", "dos", "drb", "drs"};
    for (int k = 0; k < 4; k++)
        oh_out_f32(r, oh_bound(REL_F32, EPS_SUM, psc[k]), pd[k], D, "resscale_bwd N=%d D=%d%s %s",
                   N, D, an, pn[k]);
}

/* ---- GELU, SwiGLU ---- */

/* p: n, mode (0 plain, 1 dx aliasing dy on the compared backend, 2 pointers one element in) */
static void case_gelu(oh_run *r, const int *p) {
    zy_ctx *c = oh_ctx(r);
    size_t n = (size_t)p[0], off = p[1] == 2 ? 1 : 0;
    int mode = p[1];
    float *x = oh_randn_bf(r, n, 2.0f), *g = oh_randn_bf(r, n, 1.0f);
    double *ysc = oh_zeros(r, n), *dsc = oh_zeros(r, n);
    for (size_t i = 0; i < n; i++) ysc[i] = fabsf(x[i]), dsc[i] = fabsf(g[i]) * (1 + fabsf(x[i]));
    float *xp = oh_const(r, n + 1, 0.0f), *gp = oh_const(r, n + 1, 0.0f);
    memcpy(xp + off, x, n * sizeof(float));
    memcpy(gp + off, g, n * sizeof(float));
    zy_act *dx = oh_act(r, xp, n + 1), *dg = oh_act(r, gp, n + 1);
    zy_act *px = ops_act_at(c, dx, off), *pg = ops_act_at(c, dg, off);
    zy_act *py = ops_act_at(c, oh_nan_act(r, n + 1), off);
    zy_act *ddx = mode == 1 && !oh_is_ref(r) ? dg : oh_nan_act(r, n + 1);
    zy_act *pdx = ops_act_at(c, ddx, off);
    ops_gelu_fwd(c, py, px, n);
    ops_gelu_bwd(c, pdx, pg, px, n);
    static const char *mn[3] = {"", " dx=dy", " offset"};
    oh_out_act(r, oh_bound(REL_BF, EPS_EW, ysc), py, n, "gelu_fwd n=%zu%s", n, mn[mode]);
    oh_out_act(r, oh_bound(REL_BF, EPS_EW, dsc), pdx, n, "gelu_bwd n=%zu%s", n, mn[mode]);
}

/* p: N, F */
static void case_swiglu(oh_run *r, const int *p) {
    int N = p[0], F = p[1];
    size_t nf = (size_t)N * F;
    float *gu = oh_randn_bf(r, 2 * nf, 2.0f), *dy = oh_randn_bf(r, nf, 1.0f);
    double *ysc = oh_zeros(r, nf), *dsc = oh_zeros(r, 2 * nf);
    for (int n = 0; n < N; n++)
        for (int f = 0; f < F; f++) {
            size_t i = (size_t)n * F + f, k = (size_t)n * 2 * F + f;
            float a = fabsf(gu[k]), u = fabsf(gu[k + F]), d = fabsf(dy[i]);
            ysc[i] = a * u;
            dsc[k] = d * u * (1.0f + a);
            dsc[k + F] = d * a;
        }
    zy_act *dgu = oh_act(r, gu, 2 * nf), *ddy = oh_act(r, dy, nf);
    zy_act *y = oh_nan_act(r, nf), *dd = oh_nan_act(r, 2 * nf);
    ops_swiglu_fwd(oh_ctx(r), y, dgu, N, F);
    ops_swiglu_bwd(oh_ctx(r), dd, ddy, dgu, N, F);
    oh_out_act(r, oh_bound(REL_BF, EPS_EW, ysc), y, nf, "swiglu_fwd N=%d F=%d", N, F);
    oh_out_act(r, oh_bound(REL_BF, EPS_EW, dsc), dd, 2 * nf, "swiglu_bwd N=%d F=%d", N, F);
}

/* ---- cross-entropy ---- */

/* p: N, V, mode (0 loss only, 1 separate dlogits, 2 dlogits in place on the compared backend),
 * masked (1: the last V / 8 logits of every row are -inf, as a masked slice of the vocabulary;
 * the targets are below it) */
static void case_xent(oh_run *r, const int *p) {
    const float gs = 0.37f;
    int N = p[0], V = p[1], mode = p[2], masked = p[3];
    size_t nv = (size_t)N * V;
    float *x = oh_randn_bf(r, nv, 2.0f);
    const int live = masked ? V - V / 8 : V; /* logits [live, V) are -inf */
    for (int n = 0; n < N; n++)
        for (int v = live; v < V; v++) x[(size_t)n * V + v] = -INFINITY;
    int32_t *t = oh_ints(r, N, 0);
    for (int n = 0; n < N; n++)
        t[n] = n % 4 == 3 ? IGNORE : (int32_t)zy_rng_below(oh_rng(), (uint64_t)live);
    float *dlr = oh_const(r, nv, 0.0f);
    int cnt_ref = -1;
    ops_xent_fwd_bwd(oh_cpu(), dlr, x, t, N, V, IGNORE, gs, &cnt_ref);
    /* bound of the sum: 2e-5 per counted row times (|max| + |target logit| + 1) */
    double *sum_bound = oh_zeros(r, 1), *dsc = oh_zeros(r, nv);
    for (int n = 0; n < N; n++) {
        if (t[n] == IGNORE) continue;
        const float *row = x + (size_t)n * V;
        double mx = 0;
        for (int v = 0; v < live; v++) mx = fmax(mx, fabs((double)row[v]));
        sum_bound[0] += 2e-5 * (mx + fabs((double)row[t[n]]) + 1.0);
        for (int v = 0; v < V; v++) { /* p + onehot = dlogits/gs + 2 onehot */
            size_t i = (size_t)n * V + v;
            dsc[i] = (float)(fabsf(dlr[i]) / gs + (v == t[n] ? 2.0f : 0.0f)) * gs;
        }
    }
    zy_act *dx = oh_act(r, x, nv);
    zy_act *ddl = mode == 0 ? NULL : mode == 2 && !oh_is_ref(r) ? dx : oh_nan_act(r, nv);
    int cnt = -1;
    static const char *mn[3] = {"loss only", "dlogits", "dlogits=logits"};
    double sum = ops_xent_fwd_bwd(oh_ctx(r), ddl, dx, oh_i32(r, t, N), N, V, IGNORE, gs, &cnt);
    oh_out_host(r, oh_bound(0.0, 1.0, sum_bound), &sum, 1, "xent N=%d V=%d %s loss sum", N, V,
                mn[mode]);
    oh_out_host_i32(r, &cnt, 1, "xent N=%d V=%d %s count", N, V, mn[mode]);
    if (mode > 0) {
        oh_out_act(r, oh_bound(REL_BF, 2e-5, dsc), ddl, nv, "xent N=%d V=%d %s", N, V, mn[mode]);
        float *dl = oh_get_act(r, ddl, nv);
        for (int n = 0; n < N; n++)
            if (t[n] == IGNORE)
                for (int v = 0; v < V; v++)
                    if (dl[(size_t)n * V + v] != 0.0f)
                        fail_msg("xent N=%d V=%d %s: ignored row %d has %g at %d", N, V, mn[mode],
                                 n, (double)dl[(size_t)n * V + v], v);
    } else { /* the logits are untouched when no gradient is asked for */
        oh_expect(oh_exact(), oh_get_act(r, dx, nv), x, nv, "xent loss only leaves the logits");
    }
}

/* ---- zero rows: every op is a no-op ---- */

static void case_zero_rows(oh_run *r, const int *p) {
    (void)p;
    zy_ctx *c = oh_ctx(r);
    float *one = oh_const(r, 64, 1.0f);
    zy_act *a = oh_act(r, one, 64), *b = oh_act(r, one, 64);
    float *f = oh_f32(r, one, 64), *f2 = oh_f32(r, one, 64), *f3 = oh_f32(r, one, 64);
    float *f4 = oh_f32(r, one, 64);
    int32_t zero_ids[1] = {0};
    int32_t *ids = oh_i32(r, zero_ids, 1);
    ops_add_act(c, a, b, 0);
    ops_add_bias(c, a, f, 0, 8);
    ops_bias_gelu_fwd(c, b, a, f, 0, 8);
    ops_bias_bwd(c, f, a, 0, 8);
    ops_gelu_bias_bwd(c, a, f, a, b, 0, 8);
    ops_embed_fwd(c, f2, f, ids, f, f, 0, 8);
    ops_embed_bwd(c, f2, f3, f4, f, f, ids, f, f, 0, 8, -1);
    ops_rmsnorm_fwd(c, a, f2, f, ZY_DTYPE_F32, f, 0, 8, RMS_EPS);
    ops_rmsnorm_bwd(c, f2, f3, a, f, ZY_DTYPE_F32, f, f, 0, 8, 0);
    ops_rmsnorm_bwd(c, b, f3, a, a, c->act_dtype, f, f, 0, 8, 1);
    ops_resscale_fwd(c, f2, a, f, f, f, f, f, 0, 8);
    ops_resscale_bwd(c, a, f2, f3, f3, f3, f3, f, a, f, f, f, f, f, 0, 8);
    ops_gelu_fwd(c, a, b, 0);
    ops_gelu_bwd(c, a, b, b, 0);
    ops_swiglu_fwd(c, a, b, 0, 8);
    ops_swiglu_bwd(c, a, b, b, 0, 8);
    ops_attention_fwd(c, a, f2, a, b, b, 0, 16, 2, 1, 16, 0.25f, 0);
    ops_attention_bwd(c, a, b, b, a, a, f, a, b, b, 1, 0, 2, 1, 16, 0.25f, 0);
    ops_sync(c);
    /* nothing above may have written anything */
    oh_expect(oh_exact(), oh_get_act(r, a, 64), one, 64, "zero rows: activations untouched");
    oh_expect(oh_exact(), oh_get_act(r, b, 64), one, 64, "zero rows: activations untouched");
    float *fs[4] = {f, f2, f3, f4};
    for (int k = 0; k < 4; k++)
        oh_expect(oh_exact(), oh_get_f32(r, fs[k], 64), one, 64, "zero rows: fp32 untouched");
    int cnt = -1;
    assert_true(ops_xent_fwd_bwd(c, NULL, NULL, NULL, 0, 16, IGNORE, 1.0f, &cnt) == 0.0);
    assert_int_equal(cnt, 0);
}

const oh_case oh_cases_dense[] = {
    {"matmul", case_matmul, {37, 19, 45, 750}},
    {"matmul", case_matmul, {64, 128, 96, 1000}},
    {"matmul", case_matmul, {7, 1024, 1024, 1000}},
    {"matmul", case_matmul, {1, 8, 3, 1000}},
    /* the router's logits and their gradients (E+1 = 17), and sizes off every power of two: a
     * cuBLASLt plan made at a bucket's size must not assume more alignment than they have */
    {"matmul", case_matmul, {300, 17, 256, 1000}},
    {"matmul", case_matmul, {300, 256, 17, 750}},
    {"matmul", case_matmul, {70, 8, 8, 1000}},
    {"matmul_acc", case_matmul_acc, {256, 64, 33}},
    {"matmul_zero", case_matmul_zero, {0}},
    {"add_act", case_add_act, {1}},
    {"add_act", case_add_act, {7}},
    {"add_act", case_add_act, {1001}},
    {"add_act", case_add_act, {8 * 256}},
    {"add_act", case_add_act, {33 * 1024 + 5}},
    {"add_bias", case_add_bias, {1, 3}},
    {"add_bias", case_add_bias, {7, 256}},
    {"add_bias", case_add_bias, {333, 1024}},
    {"add_bias", case_add_bias, {5, 1001}},
    {"add_bias", case_add_bias, {1000, 8}},
    {"bias_gelu", case_add_bias, {1, 3, 1}},
    {"bias_gelu", case_add_bias, {333, 256, 1}},
    {"bias_gelu", case_add_bias, {5, 1001, 1}},
    /* 4099: a last chunk of 3 rows; 20000: more than 256 chunks of 64, so 79-row chunks */
    {"bias_bwd", case_bias_bwd, {1, 3}},
    {"bias_bwd", case_bias_bwd, {7, 256}},
    {"bias_bwd", case_bias_bwd, {1000, 256}},
    {"bias_bwd", case_bias_bwd, {4099, 1024}},
    {"bias_bwd", case_bias_bwd, {70, 1001}},
    {"bias_bwd", case_bias_bwd, {20000, 8}},
    {"gelu_bias_bwd", case_gelu_bias_bwd, {1, 3, 0}},
    {"gelu_bias_bwd", case_gelu_bias_bwd, {333, 256, 1}},
    {"gelu_bias_bwd", case_gelu_bias_bwd, {4099, 256, 0}},
    {"gelu_bias_bwd", case_gelu_bias_bwd, {70, 1001, 1}},
    /* the 8-wide kernel with a partial column tile, more than one column block, 79-row chunks */
    {"gelu_bias_bwd", case_gelu_bias_bwd, {300, 24, 0}},
    {"gelu_bias_bwd", case_gelu_bias_bwd, {97, 1032, 1}},
    {"gelu_bias_bwd", case_gelu_bias_bwd, {20000, 8, 1}},
    {"bias_bwd", case_bias_bwd, {300, 24}},
    {"embed", case_embed, {1, 3}},
    {"embed", case_embed, {7, 1024}},
    {"embed", case_embed, {1000, 24}},
    {"embed", case_embed, {33, 1001}},
    {"embed", case_embed, {1, 1, 1}},
    {"embed", case_embed, {1, 3, 1}},
    {"embed", case_embed, {1, 128, 1}},
    {"embed", case_embed, {1, 1024, 1}},
    {"embed", case_embed, {1, 2049, 1}},
    {"embed", case_embed, {7, 1, 1}},
    {"embed", case_embed, {7, 3, 1}},
    {"embed", case_embed, {7, 128, 1}},
    {"embed", case_embed, {7, 1024, 1}},
    {"embed", case_embed, {7, 2049, 1}},
    {"embed", case_embed, {1000, 1, 1}},
    {"embed", case_embed, {1000, 3, 1}},
    {"embed", case_embed, {1000, 128, 1}},
    {"embed", case_embed, {1000, 1024, 1}},
    {"embed", case_embed, {1000, 2049, 1}},
    {"rmsnorm", case_rmsnorm, {1, 3, 0, 0}},
    {"rmsnorm", case_rmsnorm, {7, 256, 0, 1}},
    {"rmsnorm", case_rmsnorm, {333, 1024, 0, 0}},
    {"rmsnorm", case_rmsnorm, {5, 1001, 0, 1}},
    {"rmsnorm", case_rmsnorm, {64, 8, 0, 0}},
    {"rmsnorm", case_rmsnorm, {70, 1024, 0, 1}},
    {"rmsnorm", case_rmsnorm, {1, 3, 1, 0}},
    {"rmsnorm", case_rmsnorm, {7, 256, 1, 1}},
    {"rmsnorm", case_rmsnorm, {333, 1024, 1, 0}},
    {"rmsnorm", case_rmsnorm, {5, 1001, 1, 1}},
    {"rmsnorm", case_rmsnorm, {64, 8, 1, 0}},
    {"rmsnorm", case_rmsnorm, {70, 1024, 1, 1}},
    {"resscale", case_resscale, {1, 3, 0}},
    {"resscale", case_resscale, {1, 3, 1}},
    {"resscale", case_resscale, {7, 1024, 0}},
    {"resscale", case_resscale, {7, 1024, 1}},
    {"resscale", case_resscale, {333, 1024, 0}},
    {"resscale", case_resscale, {333, 1024, 1}},
    {"resscale", case_resscale, {5, 1001, 0}},
    {"resscale", case_resscale, {5, 1001, 1}},
    {"resscale", case_resscale, {20000, 8, 0}},
    {"resscale", case_resscale, {20000, 8, 1}},
    {"resscale", case_resscale, {64, 12, 0}},
    {"resscale", case_resscale, {64, 12, 1}},
    {"resscale", case_resscale, {4099, 256, 0}},
    {"resscale", case_resscale, {4099, 256, 1}},
    {"gelu", case_gelu, {1, 0}},
    {"gelu", case_gelu, {1, 1}},
    {"gelu", case_gelu, {1, 2}},
    {"gelu", case_gelu, {7, 0}},
    {"gelu", case_gelu, {7, 1}},
    {"gelu", case_gelu, {7, 2}},
    {"gelu", case_gelu, {1001, 0}},
    {"gelu", case_gelu, {1001, 1}},
    {"gelu", case_gelu, {1001, 2}},
    {"gelu", case_gelu, {8 * 256, 0}},
    {"gelu", case_gelu, {8 * 256, 1}},
    {"gelu", case_gelu, {8 * 256, 2}},
    {"gelu", case_gelu, {16 * 2048 + 3, 0}},
    {"gelu", case_gelu, {16 * 2048 + 3, 1}},
    {"gelu", case_gelu, {16 * 2048 + 3, 2}},
    {"swiglu", case_swiglu, {1, 3}},
    {"swiglu", case_swiglu, {7, 1024}},
    {"swiglu", case_swiglu, {33, 1001}},
    {"swiglu", case_swiglu, {5, 8}},
    /* vectorised rows (V % 8 == 0) and element rows, bench-small's vocabulary and larger; on CUDA
     * rows of V % 8 == 0 are held in registers: by one block up to 34,816 (8, 4104, 12296, 32768:
     * 1, 2, 4 and 8 vectors a thread), by a cluster above (40000 and 65544 on 2 blocks, the
     * second with 544 threads; 100,000 on 4; zaya1's 262,272 on 8); wider rows (278,536) are read
     * twice */
    {"xent", case_xent, {1, 50, 0}},
    {"xent", case_xent, {1, 50, 1}},
    {"xent", case_xent, {1, 50, 2}},
    {"xent", case_xent, {7, 1001, 0}},
    {"xent", case_xent, {7, 1001, 1}},
    {"xent", case_xent, {7, 1001, 2}},
    {"xent", case_xent, {33, 32768, 0}},
    {"xent", case_xent, {33, 32768, 1}},
    {"xent", case_xent, {33, 32768, 2}},
    {"xent", case_xent, {5, 8, 0}},
    {"xent", case_xent, {5, 8, 1}},
    {"xent", case_xent, {5, 8, 2}},
    {"xent", case_xent, {3, 12296, 0}},
    {"xent", case_xent, {3, 12296, 1}},
    {"xent", case_xent, {3, 12296, 2}},
    {"xent", case_xent, {4, 4104, 1}},
    {"xent", case_xent, {4, 4104, 2}},
    {"xent", case_xent, {3, 32776, 0}},
    {"xent", case_xent, {3, 32776, 1}},
    {"xent", case_xent, {3, 32776, 2}},
    {"xent", case_xent, {3, 65544, 2}},
    {"xent", case_xent, {4, 262272, 0}}, /* 4 rows: the last one's target is ignored */
    {"xent", case_xent, {4, 262272, 1}},
    {"xent", case_xent, {4, 262272, 2}},
    {"xent", case_xent, {4, 262272, 1, 1}}, /* the last block's whole share is -inf */
    {"xent", case_xent, {4, 100000, 1}},    /* a cluster of 4 */
    {"xent", case_xent, {4, 100000, 2}},
    {"xent", case_xent, {4, 32768, 1, 1}},
    {"xent", case_xent, {1, 278536, 1}},
    {"xent", case_xent, {1, 278536, 2}},
    {"xent", case_xent, {2, 40000, 0}},
    {"xent", case_xent, {2, 40000, 1}},
    {"xent", case_xent, {2, 40000, 2}},
    {"zero_rows", case_zero_rows, {0}},
};
const int oh_ncases_dense = (int)(sizeof oh_cases_dense / sizeof oh_cases_dense[0]);
