/* Op cases of the memory-bound ops on the grid of rows {1, 7, 1000} x widths {1, 3, 128, 1024,
 * 2049} (the CUDA kernels' vector and element paths, one-row and many-row launches) for the op
 * harness (op_harness.h): RMSNorm (residual-stream fp32 rows in, or activation rows), residual
 * scaling + RMSNorm, GELU, SwiGLU, cross-entropy, forward and backward (the embedding on this grid:
 * op_cases_dense.c).
 * Measures: fp32 outputs max|got - ref| / max(max|ref|, S) <= 1e-5; activation outputs
 * RMS(got - ref) / max(RMS(ref), S) <= 1e-2, where S is the size of the terms an output is the
 * difference of (0 where nothing cancels): e.g. RMSNorm's dx = rstd*dy*w - k*x cancels entirely at
 * C = 1, and no fp32 kernel can give it more than ~1e-7 * S absolute accuracy. Parameter gradients
 * start from random values; their increments are compared (max-relative, 1e-5). What ops.h cannot
 * show (the cross-entropy kernel's per-row losses) is tested in test_cuda_elementwise.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "op_cases.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define TOL_F32  1e-5
#define TOL_BF16 1e-2
#define EPS      1e-5f
#define IGNORE   (-100)

static const int WIDTHS[] = {1, 3, 128, 1024, 2048, 2049};
#define NWIDTHS 6

/* The measure of an activation output (act) or an fp32 one. */
static oh_measure m_out(int act, double floor) {
    return act ? oh_rmsrel(TOL_BF16, floor) : oh_maxrel(TOL_F32, floor);
}

double oh_maxabs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i]) && fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

double oh_norm_terms(const float *rstd, const float *g, const float *w, int N, int C) {
    double m = 0;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            double t = fabs((double)rstd[n] * g[(size_t)n * C + c] * w[c]);
            if (t > m) m = t;
        }
    return m;
}

/* ---- RMSNorm ---- */

/* p: x an activation (1; else fp32 rows), rows, accumulate into dx on odd widths (0) or even (1).
 * The backward reads the CPU's rstd. */
static void case_rmsnorm(oh_run *r, const int *p) {
    zy_ctx *c = oh_ctx(r);
    const int xact = p[0], N = p[1];
    const zy_dtype xt = xact ? c->act_dtype : ZY_DTYPE_F32;
    const char *vn = xact ? "act" : "f32_act";
    for (int b = 0; b < NWIDTHS; b++) {
        int C = WIDTHS[b], acc = (b + p[2]) % 2;
        size_t nc = (size_t)N * C;
        float *x = oh_randn(r, nc, 1.5f), *w = oh_randu(r, C, 0.5f, 1.5f);
        if (xact) oh_bf(x, nc);
        float *yr = oh_const(r, nc, 0.0f), *rr = oh_const(r, N, 0.0f);
        ops_rmsnorm_fwd(oh_cpu(), yr, rr, x, ZY_DTYPE_F32, w, N, C, EPS);
        void *dx = xact ? (void *)oh_act(r, x, nc) : (void *)oh_f32(r, x, nc);
        float *dw = oh_f32(r, w, C), *drs = oh_nan_f32(r, N);
        zy_act *dy = oh_nan_act(r, nc);
        ops_rmsnorm_fwd(c, dy, drs, dx, xt, dw, N, C, EPS);
        oh_out_act(r, m_out(1, 0), dy, nc, "rmsnorm_fwd_%s N=%d C=%d y", vn, N, C);
        oh_out_f32(r, m_out(0, 0), drs, N, "rmsnorm_fwd_%s N=%d C=%d rstd", vn, N, C);

        /* backward from the CPU's rstd, onto random dx (acc) and dw */
        float *g = oh_randn_bf(r, nc, 1.0f), *dx0 = oh_randn(r, nc, 1.0f);
        float *dw0 = oh_randn(r, C, 0.1f);
        if (xact) oh_bf(dx0, nc);
        void *ddx = xact ? (void *)oh_act(r, acc ? dx0 : NULL, nc)
                         : (void *)oh_f32(r, acc ? dx0 : NULL, nc);
        float *ddw = oh_f32(r, dw0, C);
        ops_rmsnorm_bwd(c, ddx, ddw, oh_act(r, g, nc), dx, xt, dw, oh_f32(r, rr, N), N, C, acc);
        oh_measure m = m_out(xact, oh_norm_terms(rr, g, w, N, C) + (acc ? oh_maxabs(dx0, nc) : 0));
        const char *fmt = "rmsnorm_bwd_%s N=%d C=%d acc=%d dx";
        if (xact)
            oh_out_act(r, m, ddx, nc, fmt, vn, N, C, acc);
        else
            oh_out_f32(r, m, ddx, nc, fmt, vn, N, C, acc);
        oh_out_f32(r, oh_inc(dw0, TOL_F32), ddw, C, "rmsnorm_bwd_%s N=%d C=%d dw", vn, N, C);
    }
}

/* ---- residual scaling + RMSNorm ---- */

/* p: rows. The backward reads the CPU's out and rstd; dres is present except for N == 7, D > 1;
 * with dres the compared backend runs it again in place, as the model calls it (d_o over dy, dh
 * over dres). */
static void case_resnorm(oh_run *r, const int *p) {
    zy_ctx *c = oh_ctx(r);
    const int N = p[0];
    for (int b = 0; b < NWIDTHS; b++) {
        int D = WIDTHS[b];
        size_t nd = (size_t)N * D;
        float *o = oh_randn_bf(r, nd, 1.0f), *h = oh_randn(r, nd, 1.0f);
        float *ob = oh_randn(r, D, 0.3f), *os = oh_randu(r, D, 0.5f, 1.5f);
        float *rb = oh_randn(r, D, 0.3f), *rs = oh_randu(r, D, 0.5f, 1.5f);
        float *w = oh_randu(r, D, 0.5f, 1.5f);
        float *outr = oh_const(r, nd, 0.0f), *yr = oh_const(r, nd, 0.0f);
        float *rr = oh_const(r, N, 0.0f);
        ops_resscale_fwd(oh_cpu(), outr, o, h, ob, os, rb, rs, N, D);
        ops_rmsnorm_fwd(oh_cpu(), yr, rr, outr, ZY_DTYPE_F32, w, N, D, EPS);
        zy_act *d_o = oh_act(r, o, nd), *dy = oh_nan_act(r, nd);
        float *dh = oh_f32(r, h, nd), *dob = oh_f32(r, ob, D), *dos = oh_f32(r, os, D);
        float *drb = oh_f32(r, rb, D), *drs = oh_f32(r, rs, D), *dw = oh_f32(r, w, D);
        float *dout = oh_nan_f32(r, nd), *drstd = oh_nan_f32(r, N);
        ops_resnorm_fwd(c, dout, dy, drstd, d_o, dh, dob, dos, drb, drs, dw, N, D, EPS);
        double terms = 0;
        for (size_t i = 0; i < nd; i++) {
            size_t k = i % (size_t)D;
            double t = fabs(((double)o[i] + ob[k]) * os[k]) + fabs(((double)h[i] + rb[k]) * rs[k]);
            if (t > terms) terms = t;
        }
        oh_out_f32(r, m_out(0, terms), dout, nd, "resnorm_fwd N=%d D=%d out", N, D);
        /* y and rstd against the CPU RMSNorm of the backend's own out (out may cancel) */
        float *outg = oh_get_f32(r, dout, nd);
        float *yr2 = oh_const(r, nd, 0.0f), *rr2 = oh_const(r, N, 0.0f);
        ops_rmsnorm_fwd(oh_cpu(), yr2, rr2, outg, ZY_DTYPE_F32, w, N, D, EPS);
        oh_expect(m_out(1, 0), oh_get_act(r, dy, nd), yr2, nd, "resnorm_fwd N=%d D=%d y", N, D);
        oh_expect(m_out(0, 0), oh_get_f32(r, drstd, N), rr2, N, "resnorm_fwd N=%d D=%d rstd", N, D);

        int has_res = N != 7 || D == 1;
        float *g = oh_randn_bf(r, nd, 1.0f), *res = oh_randn(r, nd, 1.0f), *p0[5], *pd[5];
        for (int k = 0; k < 5; k++) p0[k] = oh_randn(r, D, 0.1f);
        float *doutin = oh_f32(r, outr, nd), *drr = oh_f32(r, rr, N);
        double dterms = oh_norm_terms(rr, g, w, N, D) + (has_res ? oh_maxabs(res, nd) : 0);
        static const char *pn[] = {"dw", "dob", "dos", "drb", "drs"};
        for (int inplace = 0; inplace < 1 + has_res; inplace++) {
            zy_act *dg = oh_act(r, g, nd), *dd_o = oh_nan_act(r, nd);
            float *dres = has_res ? oh_f32(r, res, nd) : NULL, *ddh = oh_nan_f32(r, nd);
            if (inplace && !oh_is_ref(r)) dd_o = dg, ddh = dres;
            for (int k = 0; k < 5; k++) pd[k] = oh_f32(r, p0[k], D);
            ops_resnorm_bwd(c, dd_o, ddh, pd[0], pd[1], pd[2], pd[3], pd[4], dg, dres, doutin, drr,
                            dw, d_o, dh, dob, dos, drb, drs, N, D);
            const char *ip = inplace ? " in place" : "";
            oh_out_act(r, m_out(1, dterms * oh_maxabs(os, D)), dd_o, nd,
                       "resnorm_bwd%s N=%d D=%d d_o", ip, N, D);
            oh_out_f32(r, m_out(0, dterms * oh_maxabs(rs, D)), ddh, nd,
                       "resnorm_bwd%s N=%d D=%d dh", ip, N, D);
            for (int k = 0; k < (inplace ? 1 : 5); k++)
                oh_out_f32(r, oh_inc(p0[k], TOL_F32), pd[k], D, "resnorm_bwd%s N=%d D=%d %s", ip, N,
                           D, pn[k]);
        }
    }
}

/* ---- GELU, SwiGLU ---- */

/* p: rows (n = rows x width) */
static void case_gelu(oh_run *r, const int *p) {
    for (int b = 0; b < NWIDTHS; b++) {
        size_t n = (size_t)p[0] * WIDTHS[b];
        float *x = oh_randn_bf(r, n, 2.0f), *g = oh_randn_bf(r, n, 1.0f);
        zy_act *dx = oh_act(r, x, n), *dy = oh_nan_act(r, n), *ddx = oh_nan_act(r, n);
        ops_gelu_fwd(oh_ctx(r), dy, dx, n);
        ops_gelu_bwd(oh_ctx(r), ddx, oh_act(r, g, n), dx, n);
        /* x/2 + x/2 erf(x/sqrt 2) cancels for negative x */
        oh_out_act(r, m_out(1, 0.5 * oh_maxabs(x, n)), dy, n, "gelu_fwd n=%zu", n);
        oh_out_act(r, m_out(1, oh_maxabs(g, n)), ddx, n, "gelu_bwd n=%zu", n);
    }
}

/* p: rows */
static void case_swiglu(oh_run *r, const int *p) {
    const int N = p[0];
    for (int b = 0; b < NWIDTHS; b++) {
        int F = WIDTHS[b];
        size_t nf = (size_t)N * F;
        zy_act *gu = oh_act(r, oh_randn(r, 2 * nf, 2.0f), 2 * nf);
        zy_act *g = oh_act(r, oh_randn(r, nf, 1.0f), nf), *y = oh_nan_act(r, nf);
        zy_act *dgu = oh_nan_act(r, 2 * nf);
        ops_swiglu_fwd(oh_ctx(r), y, gu, N, F);
        ops_swiglu_bwd(oh_ctx(r), dgu, g, gu, N, F);
        oh_out_act(r, m_out(1, 0), y, nf, "swiglu_fwd N=%d F=%d", N, F);
        oh_out_act(r, m_out(1, 0), dgu, 2 * nf, "swiglu_bwd N=%d F=%d", N, F);
    }
}

/* ---- cross-entropy ---- */

/* p: rows, V, dlogits in place over the logits on the compared backend, logits masked to -inf
 * at the start of every row */
static void case_xent(oh_run *r, const int *p) {
    const float scale = 0.37f;
    const int N = p[0], V = p[1], inplace = p[2], masked = p[3];
    size_t nv = (size_t)N * V;
    float *x = oh_randn_bf(r, nv, 2.0f);
    for (int n = 0; n < N; n++) /* a masked prefix of every row: logits -inf */
        for (int v = 0; v < masked; v++) x[(size_t)n * V + v] = -INFINITY;
    int32_t *t = oh_ints(r, N, 0);
    for (int n = 0; n < N; n++)
        t[n] =
            n % 4 == 3 ? IGNORE : masked + (int32_t)zy_rng_below(oh_rng(), (uint64_t)(V - masked));
    int cnt_ref = 0;
    double sum_ref = ops_xent_fwd_bwd(oh_cpu(), NULL, x, t, N, V, IGNORE, scale, &cnt_ref);
    /* the loss is max + log(sum) - logit: terms of the size of the logits */
    double *tol = oh_zeros(r, 1);
    tol[0] = TOL_F32 * fmax(fabs(sum_ref), oh_maxabs(x, nv) * cnt_ref + 1e-30);
    zy_act *dx = oh_act(r, x, nv), *ddl = inplace && !oh_is_ref(r) ? dx : oh_nan_act(r, nv);
    int cnt = -1;
    double sum = ops_xent_fwd_bwd(oh_ctx(r), ddl, dx, oh_i32(r, t, N), N, V, IGNORE, scale, &cnt);
    oh_out_host(r, oh_bound(0.0, 1.0, tol), &sum, 1, "xent N=%d V=%d inplace=%d loss sum", N, V,
                inplace);
    oh_out_host_i32(r, &cnt, 1, "xent N=%d V=%d inplace=%d count", N, V, inplace);
    oh_out_act(r, m_out(1, 0), ddl, nv, "xent N=%d V=%d inplace=%d dlogits", N, V, inplace);
    float *dl = oh_get_act(r, ddl, nv);
    for (int n = 0; n < N; n++)
        if (t[n] == IGNORE)
            for (int v = 0; v < V; v++)
                if (dl[(size_t)n * V + v] != 0.0f)
                    fail_msg("xent N=%d V=%d: ignored row %d has %g at %d", N, V, n,
                             (double)dl[(size_t)n * V + v], v);
}

/* ---- the router's input block (ops_router_norm_fwd/bwd) ----
 * p: rows, width, r_prev (the EDA term), carry_in. Against the reference's composition of the
 * same ops in fp32: the compared backend rounds z and dz to the activation dtype between the steps
 * (as its separate ops store them), so rstd (from the rounded z) and the sums over dz (dg, dbias)
 * are held to the activation tolerance; dw sums exact inputs and keeps fp32's. */
static void case_router_norm(oh_run *r, const int *p) {
    zy_ctx *c = oh_ctx(r);
    const int N = p[0], R = p[1], prev = p[2], cin = p[3];
    const size_t n = (size_t)N * R;
    float *z = oh_randn_bf(r, n, 1.0f), *rp = oh_randn_bf(r, n, 1.0f);
    float *bias = oh_randn(r, R, 0.5f), *g = oh_randu(r, R, 0.5f, 1.5f);
    float *w = oh_randu(r, R, 0.5f, 1.5f);
    zy_act *dzf = oh_act(r, z, n), *du0 = oh_nan_act(r, n), *drp = prev ? oh_act(r, rp, n) : NULL;
    float *drstd = oh_nan_f32(r, N), *dg = oh_f32(r, g, R), *dw = oh_f32(r, w, R);
    ops_router_norm_fwd(c, dzf, du0, drstd, oh_f32(r, bias, R), drp, dg, dw, N, R, EPS);
    oh_out_act(r, m_out(1, 0), dzf, n, "router_norm_fwd N=%d R=%d prev=%d z", N, R, prev);
    oh_out_act(r, m_out(1, 0), du0, n, "router_norm_fwd N=%d R=%d prev=%d u0", N, R, prev);
    oh_out_f32(r, m_out(1, 0), drstd, N, "router_norm_fwd N=%d R=%d prev=%d rstd", N, R, prev);

    /* backward from bf16 inputs and the reference's rstd of them */
    float *gy = oh_randn_bf(r, n, 1.0f), *zz = oh_randn_bf(r, n, 1.5f);
    float *carry = oh_randn_bf(r, n, 1.0f);
    float *yr = oh_const(r, n, 0.0f), *rr = oh_const(r, N, 0.0f);
    ops_rmsnorm_fwd(oh_cpu(), yr, rr, zz, ZY_DTYPE_F32, w, N, R, EPS);
    float *w0 = oh_randn(r, R, 0.1f), *g0 = oh_randn(r, R, 0.1f), *b0 = oh_randn(r, R, 0.1f);
    zy_act *ddz = oh_nan_act(r, n), *dcarry = oh_act(r, carry, n);
    float *ddw = oh_f32(r, w0, R), *ddg = oh_f32(r, g0, R), *ddb = oh_f32(r, b0, R);
    ops_router_norm_bwd(c, ddz, ddw, ddg, ddb, dcarry, cin, oh_act(r, gy, n), oh_act(r, zz, n), drp,
                        dw, oh_f32(r, rr, N), dg, N, R);
    const double dterms = oh_norm_terms(rr, gy, w, N, R) + (cin ? oh_maxabs(carry, n) : 0.0);
    oh_out_act(r, m_out(1, dterms), ddz, n, "router_norm_bwd N=%d R=%d prev=%d cin=%d dz", N, R,
               prev, cin);
    if (prev)
        oh_out_act(r, m_out(1, dterms * oh_maxabs(g, R)), dcarry, n,
                   "router_norm_bwd N=%d R=%d prev=%d cin=%d carry", N, R, prev, cin);
    oh_out_f32(r, oh_inc(w0, TOL_F32), ddw, R, "router_norm_bwd N=%d R=%d prev=%d cin=%d dw", N, R,
               prev, cin);
    oh_out_f32(r, oh_inc(g0, TOL_BF16), ddg, R, "router_norm_bwd N=%d R=%d prev=%d cin=%d dg", N, R,
               prev, cin);
    oh_out_f32(r, oh_inc(b0, TOL_BF16), ddb, R, "router_norm_bwd N=%d R=%d prev=%d cin=%d dbias", N,
               R, prev, cin);
}

const oh_case oh_cases_elem[] = {
    {"rmsnorm_grid", case_rmsnorm, {1, 1, 1}},
    {"rmsnorm_grid", case_rmsnorm, {1, 7, 0}},
    {"rmsnorm_grid", case_rmsnorm, {1, 1000, 1}},
    {"rmsnorm_grid", case_rmsnorm, {0, 1, 0}},
    {"rmsnorm_grid", case_rmsnorm, {0, 7, 1}},
    {"rmsnorm_grid", case_rmsnorm, {0, 1000, 0}},
    {"resnorm", case_resnorm, {1}},
    {"resnorm", case_resnorm, {7}},
    {"resnorm", case_resnorm, {1000}},
    {"gelu_grid", case_gelu, {1}},
    {"gelu_grid", case_gelu, {7}},
    {"gelu_grid", case_gelu, {1000}},
    {"swiglu_grid", case_swiglu, {1}},
    {"swiglu_grid", case_swiglu, {7}},
    {"swiglu_grid", case_swiglu, {1000}},
    {"xent_grid", case_xent, {1, 50, 1}},
    {"xent_grid", case_xent, {1, 32768, 0}},
    {"xent_grid", case_xent, {7, 50, 0}},
    {"xent_grid", case_xent, {7, 32768, 1}},
    {"xent_grid", case_xent, {1000, 50, 1}},
    {"xent_grid", case_xent, {1000, 32768, 0}},
    /* appended last: a case's inputs are seeded by its place in the list. The router's width
     * (256: CUDA's one-pass kernels) over several row chunks, with and without the EDA term and
     * the carried gradient; lanes left idle (200); widths the one-pass kernels leave to the
     * separate ops (1000, 3) */
    {"router_norm", case_router_norm, {7, 256, 1, 1}},
    {"router_norm", case_router_norm, {1000, 256, 1, 1}},
    {"router_norm", case_router_norm, {1000, 256, 0, 1}},
    {"router_norm", case_router_norm, {1000, 256, 1, 0}},
    {"router_norm", case_router_norm, {300, 200, 1, 1}},
    {"router_norm", case_router_norm, {64, 1000, 1, 1}},
    {"router_norm", case_router_norm, {5, 3, 1, 0}},
    /* appended last (inputs seeded by place): rows whose first logits are -inf (masked), on the
     * kernels for widths that are no whole vector: a thread whose first logit is -inf, then one
     * that is -inf or finite (50 and 32,773 wide) */
    {"xent_masked", case_xent, {7, 50, 0, 9}},
    {"xent_masked", case_xent, {7, 32773, 0, 3000}},
    {"xent_masked", case_xent, {7, 32768, 0, 3000}},
};
const int oh_ncases_elem = (int)(sizeof oh_cases_elem / sizeof oh_cases_elem[0]);
