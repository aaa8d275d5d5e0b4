/* Op cases of the CCA ops (the convolutions with mean residuals, the value delay, QK norm +
 * temperature + partial RoPE, decoding attention) for the op harness (op_harness.h). Every input
 * and weight holds bf16 values.
 * Tolerances (errors are max |got - ref| over a head row divided by that row's max |ref|, so a
 * row's own scale sets its bound; u = 2^-8 is bf16's largest relative rounding error, half an ulp
 * of its 8-bit significand):
 *  - TOL_OUT u + 1e-4 for bf16 outputs rounded once from fp32 (the rounding is at most u of the
 *    element; the GPU's fp32 sums differ from the CPU's double ones by ~1e-6);
 *  - TOL_OUT2 3u for the conv outputs q, k, which also go through the rounding of mid to bf16:
 *    d*t1 terms each off by up to u of their size add like a random walk, ~u/sqrt(3) of a typical
 *    output, ~4 of those at the worst of a few thousand outputs against a row max of ~3 typical;
 *  - TOL_GRAD 1e-4 of the tensor's largest |increment| for fp32 parameter gradients (fp32 sums of
 *    up to ~10^3 exact products per partial, tensor-core additions truncate: <= 10^3 * 2^-23);
 *  - copies (the value delay) and the QK norm's inputs (left unchanged) must be exact.
 * Weight gradients of the conv must also be the same bits on a second run (determinism). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "op_cases.h"

#include <math.h>
#include <string.h>

#define TOL_OUT  (1.0 / 256 + 1e-4)
#define TOL_OUT2 (3.0 / 256)
#define TOL_GRAD 1e-4
#define TOL_NORM 1e-5 /* saved fp32 norms: fp32 vs double sums of squares */

/* ---- convolutions + mean residuals ---- */

/* p: B, T, Hq, Hk, d, t0, t1. Forward with and without the decoding state, backward (both sides
 * from the CPU forward's mid rounded to bf16, the dtype the GPU keeps it in), and the backward
 * again twice from zeroed gradients: the same bits. */
static void case_conv(oh_run *r, const int *p) {
    zy_ctx *c = oh_ctx(r);
    const int B = p[0], T = p[1], Hq = p[2], Hk = p[3], d = p[4], t0 = p[5], t1 = p[6];
    const int C = (Hq + Hk) * d, P = t0 - 1 + t1 - 1, Tm = T + t1 - 1, N = B * T;
    const size_t nq = (size_t)N * Hq * d, nk = (size_t)N * Hk * d, nx = (size_t)N * C;
    const size_t nm = (size_t)B * Tm * C, ns = (size_t)B * P * C, nw1 = (size_t)C * t0,
                 nw2 = (size_t)C * d * t1;
    float *qk0 = oh_randn_bf(r, nx, 1.0f), *w1 = oh_randn_bf(r, nw1, 0.5f);
    float *b1 = oh_randn_bf(r, C, 0.1f), *w2 = oh_randn_bf(r, nw2, 1.0f / sqrtf((float)(d * t1)));
    float *b2 = oh_randn_bf(r, C, 0.1f);
    float *gw1 = oh_f32(r, w1, nw1), *gb1 = oh_f32(r, b1, C), *gw2 = oh_f32(r, w2, nw2);
    float *gb2 = oh_f32(r, b2, C);
    zy_act *gqk0 = oh_act(r, qk0, nx);
    for (int with_state = 0; with_state < 2; with_state++) {
        if (with_state && P == 0) continue;
        zy_act *gstate = with_state ? oh_act(r, oh_randn_bf(r, ns, 1.0f), ns) : NULL;
        zy_act *gq = oh_nan_act(r, nq), *gk = oh_nan_act(r, nk), *gmid = oh_nan_act(r, nm);
        ops_cca_conv_fwd(c, gq, gk, gmid, gqk0, gstate, gw1, gb1, gw2, gb2, B, T, Hq, Hk, d, t0,
                         t1);
        const char *sn = with_state ? " with state" : "";
        oh_out_act(r, oh_seg(d, TOL_OUT), gmid, nm, "conv fwd%s mid", sn);
        oh_out_act(r, oh_seg(d, TOL_OUT2), gq, nq, "conv fwd%s q", sn);
        oh_out_act(r, oh_seg(d, TOL_OUT2), gk, nk, "conv fwd%s k", sn);
    }

    /* backward: every backend from the same dq, dk, qk0, mid and random gradient starts */
    float *mid = oh_const(r, nm, 0.0f), *hq = oh_const(r, nq, 0.0f), *hk = oh_const(r, nk, 0.0f);
    ops_cca_conv_fwd(oh_cpu(), hq, hk, mid, qk0, NULL, w1, b1, w2, b2, B, T, Hq, Hk, d, t0, t1);
    oh_bf(mid, nm);
    float *dq = oh_randn_bf(r, nq, 1.0f), *dk = oh_randn_bf(r, nk, 1.0f);
    float *g0[4] = {oh_randn_bf(r, nw1, 1.0f), oh_randn_bf(r, C, 1.0f), oh_randn_bf(r, nw2, 1.0f),
                    oh_randn_bf(r, C, 1.0f)};
    const size_t gn[4] = {nw1, (size_t)C, nw2, (size_t)C};
    float *gg[4];
    for (int i = 0; i < 4; i++) gg[i] = oh_f32(r, g0[i], gn[i]);
    zy_act *gdq = oh_act(r, dq, nq), *gdk = oh_act(r, dk, nk), *gmid = oh_act(r, mid, nm);
    zy_act *gdqk0 = oh_nan_act(r, nx);
    ops_cca_conv_bwd(c, gdqk0, gg[0], gg[1], gg[2], gg[3], gdq, gdk, gqk0, gmid, gw1, gw2, B, T, Hq,
                     Hk, d, t0, t1);
    oh_out_act(r, oh_seg(d, TOL_OUT), gdqk0, nx, "conv bwd dqk0");
    static const char *gname[4] = {"dw1", "db1", "dw2", "db2"};
    for (int i = 0; i < 4; i++)
        oh_out_f32(r, oh_inc(g0[i], TOL_GRAD), gg[i], gn[i], "conv bwd %s", gname[i]);

    /* determinism: two runs from zeroed gradients give the same bits */
    float *runs[2][5];
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 4; i++) ops_zero(c, gg[i], gn[i] * sizeof(float));
        ops_cca_conv_bwd(c, gdqk0, gg[0], gg[1], gg[2], gg[3], gdq, gdk, gqk0, gmid, gw1, gw2, B, T,
                         Hq, Hk, d, t0, t1);
        for (int i = 0; i < 4; i++) runs[k][i] = oh_get_f32(r, gg[i], gn[i]);
        runs[k][4] = oh_get_act(r, gdqk0, nx);
    }
    for (int i = 0; i < 5; i++)
        oh_expect(oh_exact(), runs[1][i], runs[0][i], i < 4 ? gn[i] : nx, "conv bwd second run: %s",
                  i < 4 ? gname[i] : "dqk0");
}

/* ---- value delay ---- */

/* p: B, T, half, with prev */
static void case_value_delay(oh_run *r, const int *p) {
    zy_ctx *c = oh_ctx(r);
    const int B = p[0], T = p[1], half = p[2], with_prev = p[3];
    size_t nv = (size_t)B * T * 2 * half, np = (size_t)B * half;
    zy_act *vv = oh_act(r, oh_randn(r, nv, 1.0f), nv); /* [vcur | vdel] per row */
    zy_act *prev = oh_act(r, oh_randn(r, np, 1.0f), np), *v = oh_nan_act(r, nv);
    ops_value_delay_fwd(c, v, vv, with_prev ? prev : NULL, B, T, half);
    oh_out_act(r, oh_exact(), v, nv, "value_delay v");
    zy_act *dv = oh_act(r, oh_randn(r, nv, 1.0f), nv), *dvv = oh_nan_act(r, nv);
    ops_value_delay_bwd(c, dvv, dv, B, T, half);
    oh_out_act(r, oh_exact(), dvv, nv, "value_delay dvv");
}

/* ---- QK norm + temperature + partial RoPE ---- */

/* p: N, Hq, Hk, d, rot, theta. Each backend's backward reads its own forward's saved tensors. */
static void case_qknorm_rope(oh_run *r, const int *p) {
    zy_ctx *c = oh_ctx(r);
    const int N = p[0], Hq = p[1], Hk = p[2], d = p[3], rot = p[4];
    const double theta = p[5];
    const float eps = 1e-6f;
    size_t nq = (size_t)N * Hq * d, nk = (size_t)N * Hk * d;
    float *q = oh_randn_bf(r, nq, 3.0f), *k = oh_randn_bf(r, nk, 0.5f),
          *temp = oh_randu(r, Hk, 0, 1);
    for (int j = 0; j < Hk; j++) temp[j] = 0.5f + 1.5f * temp[j];
    /* one zero head of each kind: the norm clamp */
    if (N > 3) {
        memset(q + (size_t)2 * Hq * d, 0, (size_t)d * sizeof(float));
        memset(k + (size_t)3 * Hk * d, 0, (size_t)d * sizeof(float));
    }
    int32_t *pos = oh_ints(r, N, 0);
    for (int n = 0; n < N; n++) pos[n] = (int32_t)zy_rng_below(oh_rng(), 4096);
    pos[0] = 4095;
    if (N > 1) pos[1] = 0;

    zy_act *gqi = oh_act(r, q, nq), *gki = oh_act(r, k, nk); /* the inputs */
    zy_act *gq = oh_nan_act(r, nq), *gk = oh_nan_act(r, nk);
    float *gtemp = oh_f32(r, temp, Hk), *gqn = oh_nan_f32(r, (size_t)N * Hq);
    float *gkn = oh_nan_f32(r, (size_t)N * Hk);
    int32_t *gpos = oh_i32(r, pos, N);
    ops_qknorm_rope_fwd(c, gq, gk, gqn, gkn, gqi, gki, gtemp, gpos, N, Hq, Hk, d, rot, theta, eps);
    oh_out_act(r, oh_seg(d, TOL_OUT), gq, nq, "qknorm_rope q");
    oh_out_act(r, oh_seg(d, TOL_OUT), gk, nk, "qknorm_rope k");
    oh_out_f32(r, oh_seg(1, TOL_NORM), gqn, (size_t)N * Hq, "qknorm_rope qn");
    oh_out_f32(r, oh_seg(1, TOL_NORM), gkn, (size_t)N * Hk, "qknorm_rope kn");
    oh_expect(oh_exact(), oh_get_act(r, gqi, nq), q, nq, "qknorm_rope q_in unchanged");
    oh_expect(oh_exact(), oh_get_act(r, gki, nk), k, nk, "qknorm_rope k_in unchanged");
    /* in place (inputs and outputs the same buffers): the same bits */
    zy_act *gq2 = oh_act(r, q, nq), *gk2 = oh_act(r, k, nk);
    float *gqn2 = oh_nan_f32(r, (size_t)N * Hq), *gkn2 = oh_nan_f32(r, (size_t)N * Hk);
    ops_qknorm_rope_fwd(c, gq2, gk2, gqn2, gkn2, gq2, gk2, gtemp, gpos, N, Hq, Hk, d, rot, theta,
                        eps);
    oh_expect(oh_exact(), oh_get_f32(r, gqn2, (size_t)N * Hq), oh_get_f32(r, gqn, (size_t)N * Hq),
              (size_t)N * Hq, "qknorm_rope qn in place");
    oh_expect(oh_exact(), oh_get_f32(r, gkn2, (size_t)N * Hk), oh_get_f32(r, gkn, (size_t)N * Hk),
              (size_t)N * Hk, "qknorm_rope kn in place");
    oh_expect(oh_exact(), oh_get_act(r, gq2, nq), oh_get_act(r, gq, nq), nq,
              "qknorm_rope q in place");
    oh_expect(oh_exact(), oh_get_act(r, gk2, nk), oh_get_act(r, gk, nk), nk,
              "qknorm_rope k in place");

    float *dt0 = oh_randn_bf(r, Hk, 1.0f), *gdt = oh_f32(r, dt0, Hk);
    zy_act *gdq = oh_act(r, oh_randn(r, nq, 1.0f), nq), *gdk = oh_act(r, oh_randn(r, nk, 1), nk);
    ops_qknorm_rope_bwd(c, gdq, gdk, gdt, gqi, gki, gqn, gkn, gtemp, gpos, N, Hq, Hk, d, rot, theta,
                        eps);
    oh_out_act(r, oh_seg(d, TOL_OUT), gdq, nq, "qknorm_rope dq");
    oh_out_act(r, oh_seg(d, TOL_OUT), gdk, nk, "qknorm_rope dk");
    oh_out_f32(r, oh_inc(dt0, TOL_GRAD), gdt, Hk, "qknorm_rope dtemp");
}

/* ---- decoding attention ---- */

/* p: B, Tk, Tmax, Hq, Hk, d, window. Cache rows the query must not see are NaN. */
static void case_attention_decode(oh_run *r, const int *p) {
    const int B = p[0], Tk = p[1], Tmax = p[2], Hq = p[3], Hk = p[4], d = p[5], window = p[6];
    size_t nq = (size_t)B * Hq * d, nc = (size_t)B * Tmax * Hk * d;
    float *kc = oh_randn(r, nc, 1.0f), *vc = oh_randn(r, nc, 1.0f);
    int lo = (window > 0 && Tk - window > 0) ? Tk - window : 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tmax; t++)
            if (t < lo || t >= Tk)
                for (int e = 0; e < Hk * d; e++) {
                    kc[((size_t)b * Tmax + t) * Hk * d + e] = NAN;
                    vc[((size_t)b * Tmax + t) * Hk * d + e] = NAN;
                }
    zy_act *q = oh_act(r, oh_randn(r, nq, 1.0f), nq), *out = oh_nan_act(r, nq);
    ops_attention_decode(oh_ctx(r), out, q, oh_act(r, kc, nc), oh_act(r, vc, nc), B, Tk, Tmax, Hq,
                         Hk, d, 1.0f / sqrtf((float)d), window);
    oh_out_act(r, oh_seg(d, TOL_OUT), out, nq, "attention_decode out");
}

const oh_case oh_cases_cca[] = {
    {"cca_conv", case_conv, {2, 67, 8, 2, 128, 2, 2}}, /* bench-small heads, short sequences */
    {"cca_conv", case_conv, {3, 130, 4, 4, 64, 1, 3}}, /* G = 1, two forward tiles */
    {"cca_conv", case_conv, {1, 300, 4, 2, 32, 4, 1}}, /* t1 = 1: no grouped-conv halo */
    {"cca_conv", case_conv, {2, 5, 2, 1, 64, 3, 4}},   /* T shorter than the padding */
    {"cca_conv", case_conv, {3, 1, 4, 1, 128, 2, 2}},  /* one decoding step */
    {"cca_conv", case_conv, {2, 257, 2, 2, 32, 4, 4}}, /* widest kernels, three backward tiles */
    {"cca_conv", case_conv, {1, 129, 2, 2, 64, 2, 3}}, /* one row past a forward tile */
    {"cca_conv", case_conv, {2, 700, 2, 1, 32, 2, 2}}, /* several sequences per dw2 chunk */
    /* bench-small's heads over more tiles than an H100 has SMs (a partial last tile), and the
     * largest kernels at d = 128 (the most shared memory a tile takes) */
    {"cca_conv", case_conv, {2, 1100, 8, 2, 128, 2, 2}},
    {"cca_conv", case_conv, {1, 2100, 8, 2, 128, 4, 4}},
    {"value_delay", case_value_delay, {3, 5, 128, 0}},
    {"value_delay", case_value_delay, {3, 5, 128, 1}},
    {"value_delay", case_value_delay, {2, 1, 64, 1}},
    {"value_delay", case_value_delay, {2, 7, 3, 1}}, /* element path */
    {"value_delay", case_value_delay, {1, 4, 3, 0}},
    {"qknorm_rope", case_qknorm_rope, {134, 8, 2, 128, 64, 10000}},    /* bench-small: rotary 0.5 */
    {"qknorm_rope", case_qknorm_rope, {134, 8, 2, 128, 64, 5000000}},  /* ZAYA1-8B's theta */
    {"qknorm_rope", case_qknorm_rope, {134, 8, 2, 128, 128, 5000000}}, /* full rotation */
    {"qknorm_rope", case_qknorm_rope, {50, 2, 2, 64, 32, 10000}},      /* G = 1 */
    {"qknorm_rope", case_qknorm_rope, {50, 4, 1, 32, 32, 1000000}},    /* full rotation, d = 32 */
    {"qknorm_rope", case_qknorm_rope, {20, 2, 1, 24, 8, 10000}},       /* d % 8 != 0: elements */
    {"qknorm_rope", case_qknorm_rope, {20, 2, 2, 64, 0, 10000}},       /* no rotation */
    /* the warp-per-row kernels take the shapes above but for d = 24; these two take the
     * block-per-row kernels: rot / 2 not a multiple of 8, a row wider than 2048 */
    {"qknorm_rope", case_qknorm_rope, {30, 4, 2, 64, 8, 10000}},
    {"qknorm_rope", case_qknorm_rope, {10, 16, 2, 128, 64, 10000}},
    {"qknorm_rope", case_qknorm_rope, {1001, 8, 2, 128, 64, 10000}}, /* rows past 8 per block */
    {"attention_decode", case_attention_decode, {2, 1, 4, 8, 2, 128, 0}},
    {"attention_decode", case_attention_decode, {2, 37, 40, 8, 2, 128, 0}},
    {"attention_decode", case_attention_decode, {2, 300, 300, 8, 2, 128, 16}},
    {"attention_decode", case_attention_decode, {3, 100, 128, 4, 4, 64, 0}},
    {"attention_decode", case_attention_decode, {1, 50, 60, 2, 1, 32, 7}},
    {"attention_decode", case_attention_decode, {2, 20, 20, 2, 2, 40, 0}},
    {"attention_decode", case_attention_decode, {1, 1000, 1024, 8, 2, 128, 0}},
};
const int oh_ncases_cca = (int)(sizeof oh_cases_cca / sizeof oh_cases_cca[0]);
