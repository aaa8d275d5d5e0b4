/* Tests of the CPU ops of CCA's projection path: the two causal convolutions with mean residuals,
 * the delayed values, and QK norm + key temperature + partial RoPE. Forward against direct double
 * formulas written from the ops.h comments (and HF's fp32 RoPE angle recipe), backward against
 * finite differences (ops_test_util.h), accumulate/overwrite semantics. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "ops_test_util.h"

#include <float.h>
#include <stdint.h>

/* ---- convolutions + mean residuals ---- */

typedef struct {
    int B, T, Hq, Hk, d, t0, t1;
    float *qk0, *state, *w1, *b1, *w2, *b2, *Rq, *Rk;
    float *sq, *sk, *smid; /* scratch for the op loss */
} cca_case;

/* Direct formula: q [B*T, Hq*d], k [B*T, Hk*d], mid [B, T+t1-1, C] in double. */
static void cca_ref(const cca_case *c, const float *state, double *q, double *k, double *mid) {
    int B = c->B, T = c->T, d = c->d, C = (c->Hq + c->Hk) * d, G = c->Hq / c->Hk;
    int P = c->t0 - 1 + c->t1 - 1, Tm = T + c->t1 - 1;
    double *xpad = tu_dalloc((size_t)(T + P) * C), *m = tu_dalloc((size_t)Tm * C);
    for (int b = 0; b < B; b++) {
        for (int r = 0; r < T + P; r++)
            for (int ch = 0; ch < C; ch++)
                xpad[(size_t)r * C + ch] =
                    r >= P ? c->qk0[((size_t)b * T + r - P) * C + ch]
                           : (state ? state[((size_t)b * P + r) * C + ch] : 0.0);
        for (int t = 0; t < Tm; t++)
            for (int ch = 0; ch < C; ch++) {
                double s = c->b1[ch];
                for (int j = 0; j < c->t0; j++)
                    s += (double)c->w1[ch * c->t0 + j] * xpad[(size_t)(t + j) * C + ch];
                m[(size_t)t * C + ch] = s;
                if (mid) mid[((size_t)b * Tm + t) * C + ch] = s;
            }
        for (int t = 0; t < T; t++) {
            size_t n = (size_t)b * T + t;
            const float *q0 = c->qk0 + n * C, *k0 = q0 + c->Hq * d;
            for (int ch = 0; ch < C; ch++) {
                int g = ch / d;
                double s = c->b2[ch];
                for (int j = 0; j < c->t1; j++)
                    for (int i = 0; i < d; i++)
                        s += (double)c->w2[((size_t)ch * d + i) * c->t1 + j] *
                             m[(size_t)(t + j) * C + g * d + i];
                if (ch < c->Hq * d)
                    q[n * c->Hq * d + ch] = s;
                else
                    k[n * c->Hk * d + ch - c->Hq * d] = s;
            }
            for (int i = 0; i < c->Hq; i++)
                for (int e = 0; e < d; e++)
                    q[n * c->Hq * d + i * d + e] +=
                        0.5 * ((double)q0[i * d + e] + k0[(i / G) * d + e]);
            for (int j = 0; j < c->Hk; j++)
                for (int e = 0; e < d; e++) {
                    double kr = 0;
                    for (int i = j * G; i < (j + 1) * G; i++)
                        kr += 0.5 * ((double)q0[i * d + e] + k0[j * d + e]);
                    k[n * c->Hk * d + j * d + e] += kr / G;
                }
        }
    }
    free(xpad);
    free(m);
}

static double cca_ref_loss(void *p) {
    cca_case *c = p;
    size_t nq = (size_t)c->B * c->T * c->Hq * c->d, nk = (size_t)c->B * c->T * c->Hk * c->d;
    double *q = tu_dalloc(nq), *k = tu_dalloc(nk);
    cca_ref(c, NULL, q, k, NULL);
    double L = tu_ddot(q, c->Rq, nq) + tu_ddot(k, c->Rk, nk);
    free(q);
    free(k);
    return L;
}

static double cca_op_loss(void *p) {
    cca_case *c = p;
    ops_cca_conv_fwd(&tu_ctx, c->sq, c->sk, c->smid, c->qk0, NULL, c->w1, c->b1, c->w2, c->b2, c->B,
                     c->T, c->Hq, c->Hk, c->d, c->t0, c->t1);
    size_t nq = (size_t)c->B * c->T * c->Hq * c->d, nk = (size_t)c->B * c->T * c->Hk * c->d;
    return tu_dot(c->sq, c->Rq, nq) + tu_dot(c->sk, c->Rk, nk);
}

static void run_cca(int B, int T, int Hq, int Hk, int d, int t0, int t1) {
    printf("  cca_conv B=%d T=%d Hq=%d Hk=%d d=%d t0=%d t1=%d\n", B, T, Hq, Hk, d, t0, t1);
    int C = (Hq + Hk) * d, P = t0 - 1 + t1 - 1, Tm = T + t1 - 1;
    size_t nqk = (size_t)B * T * C, nq = (size_t)B * T * Hq * d, nk = (size_t)B * T * Hk * d;
    size_t nmid = (size_t)B * Tm * C, nw1 = (size_t)C * t0, nw2 = (size_t)C * d * t1;
    cca_case c = {B,
                  T,
                  Hq,
                  Hk,
                  d,
                  t0,
                  t1,
                  tu_randn(nqk, 1),
                  tu_randn((size_t)B * P * C, 1),
                  tu_randn(nw1, 0.7f),
                  tu_randn(C, 0.3f),
                  tu_randn(nw2, 0.5f),
                  tu_randn(C, 0.3f),
                  tu_randn(nq, 1),
                  tu_randn(nk, 1),
                  tu_alloc(nq),
                  tu_alloc(nk),
                  tu_alloc(nmid)};
    double *rq = tu_dalloc(nq), *rk = tu_dalloc(nk), *rm = tu_dalloc(nmid);
    float *q = tu_const(nq, NAN), *k = tu_const(nk, NAN), *mid = tu_const(nmid, NAN);
    /* zero padding, then with a carried state */
    for (int s = 0; s < 2; s++) {
        const float *st = s ? c.state : NULL;
        ops_cca_conv_fwd(&tu_ctx, q, k, mid, c.qk0, st, c.w1, c.b1, c.w2, c.b2, B, T, Hq, Hk, d, t0,
                         t1);
        cca_ref(&c, st, rq, rk, rm);
        tu_check_fwd(s ? "cca q (state)" : "cca q", tu_err(q, rq, nq), 1e-6);
        tu_check_fwd(s ? "cca k (state)" : "cca k", tu_err(k, rk, nk), 1e-6);
        tu_check_fwd(s ? "cca mid_save (state)" : "cca mid_save", tu_err(mid, rm, nmid), 1e-6);
    }
    /* mid_save may be NULL (inference): same q, k */
    float *q2 = tu_const(nq, NAN), *k2 = tu_const(nk, NAN);
    ops_cca_conv_fwd(&tu_ctx, q2, k2, NULL, c.qk0, c.state, c.w1, c.b1, c.w2, c.b2, B, T, Hq, Hk, d,
                     t0, t1);
    tu_check_same("cca q (mid_save NULL)", q2, q, nq);
    tu_check_same("cca k (mid_save NULL)", k2, k, nk);

    ops_cca_conv_fwd(&tu_ctx, q, k, mid, c.qk0, NULL, c.w1, c.b1, c.w2, c.b2, B, T, Hq, Hk, d, t0,
                     t1);
    float *dqk0 = tu_const(nqk, NAN), *dw1 = tu_const(nw1, 0), *db1 = tu_const(C, 0);
    float *dw2 = tu_const(nw2, 0), *db2 = tu_const(C, 0);
    ops_cca_conv_bwd(&tu_ctx, dqk0, dw1, db1, dw2, db2, c.Rq, c.Rk, c.qk0, mid, c.w1, c.w2, B, T,
                     Hq, Hk, d, t0, t1);
    tu_check_grad("cca dqk0", cca_ref_loss, cca_op_loss, &c, c.qk0, dqk0, nqk, 0);
    tu_check_grad("cca dw1", cca_ref_loss, cca_op_loss, &c, c.w1, dw1, nw1, 0);
    tu_check_grad("cca db1", cca_ref_loss, cca_op_loss, &c, c.b1, db1, C, 0);
    tu_check_grad("cca dw2", cca_ref_loss, cca_op_loss, &c, c.w2, dw2, nw2, 0);
    tu_check_grad("cca db2", cca_ref_loss, cca_op_loss, &c, c.b2, db2, C, 0);
    /* parameters accumulate, dqk0 is overwritten */
    float *p1 = tu_randn(nw1, 1), *p2 = tu_randn(C, 1), *p3 = tu_randn(nw2, 1),
          *p4 = tu_randn(C, 1);
    float *a1 = tu_dup(p1, nw1), *a2 = tu_dup(p2, C), *a3 = tu_dup(p3, nw2), *a4 = tu_dup(p4, C);
    float *a0 = tu_randn(nqk, 1);
    ops_cca_conv_bwd(&tu_ctx, a0, a1, a2, a3, a4, c.Rq, c.Rk, c.qk0, mid, c.w1, c.w2, B, T, Hq, Hk,
                     d, t0, t1);
    tu_check_same("cca dqk0", a0, dqk0, nqk);
    tu_check_accum("cca dw1", a1, p1, dw1, nw1);
    tu_check_accum("cca db1", a2, p2, db1, C);
    tu_check_accum("cca dw2", a3, p3, dw2, nw2);
    tu_check_accum("cca db2", a4, p4, db2, C);
    float *bufs[] = {c.qk0,  c.state, c.w1, c.b1, c.w2, c.b2, c.Rq, c.Rk, c.sq, c.sk,
                     c.smid, q,       k,    mid,  q2,   k2,   dqk0, dw1,  db1,  dw2,
                     db2,    p1,      p2,   p3,   p4,   a0,   a1,   a2,   a3,   a4};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(rq);
    free(rk);
    free(rm);
}

static void test_cca_conv(void **state) {
    (void)state;
    run_cca(2, 5, 2, 1, 3, 2, 2); /* ZAYA1's kernels, G = 2 */
    run_cca(1, 1, 4, 4, 2, 2, 3); /* T = 1 shorter than both kernels, G = 1 */
    run_cca(2, 7, 4, 1, 4, 3, 2); /* G = 4 */
    run_cca(1, 3, 2, 2, 5, 1, 1); /* no padding */
    run_cca(2, 2, 4, 2, 3, 3, 3); /* T shorter than the kernels, G = 2 */
    run_cca(1, 9, 1, 1, 4, 4, 1);
}

/* ---- delayed values ---- */

typedef struct {
    int B, T, half;
    float *vv, *R; /* vv [N, 2*half] = [vcur | vdel] per row */
} vd_case;

static double vd_ref_loss(void *p) {
    vd_case *c = p;
    const size_t row = (size_t)2 * c->half;
    double L = 0;
    for (int b = 0; b < c->B; b++)
        for (int t = 0; t < c->T; t++) {
            const size_t n = (size_t)b * c->T + t;
            const float *r = c->R + n * row;
            for (int e = 0; e < c->half; e++) {
                L += (double)c->vv[n * row + e] * r[e];
                if (t > 0) L += (double)c->vv[(n - 1) * row + c->half + e] * r[c->half + e];
            }
        }
    return L;
}

static void run_value_delay(int B, int T, int half) {
    printf("  value_delay B=%d T=%d half=%d\n", B, T, half);
    size_t nv = (size_t)B * T * 2 * half;
    vd_case c = {B, T, half, tu_randn(nv, 1), tu_randn(nv, 1)};
    float *prev = tu_randn((size_t)B * half, 1), *v = tu_const(nv, NAN);
    double *ref = tu_dalloc(nv);
    for (int s = 0; s < 2; s++) {
        const float *pv = s ? prev : NULL;
        ops_value_delay_fwd(&tu_ctx, v, c.vv, pv, B, T, half);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                for (int e = 0; e < half; e++) {
                    size_t n = (size_t)b * T + t;
                    ref[n * 2 * half + e] = c.vv[n * 2 * half + e];
                    ref[n * 2 * half + half + e] = t > 0 ? c.vv[(n - 1) * 2 * half + half + e]
                                                   : pv  ? pv[(size_t)b * half + e]
                                                         : 0.0;
                }
        tu_check_fwd(s ? "value_delay (prev)" : "value_delay", tu_err(v, ref, nv), 0);
    }
    float *dvv = tu_const(nv, NAN);
    ops_value_delay_bwd(&tu_ctx, dvv, c.R, B, T, half);
    tu_check_grad("value_delay dvv", vd_ref_loss, NULL, &c, c.vv, dvv, nv, 0);
    free(c.vv);
    free(c.R);
    free(prev);
    free(v);
    free(ref);
    free(dvv);
}

static void test_value_delay(void **state) {
    (void)state;
    run_value_delay(2, 4, 3);
    run_value_delay(3, 1, 2);
}

/* ---- QK norm + temperature + partial RoPE ---- */

typedef struct {
    int N, Hq, Hk, d, rot;
    double theta;
    float eps;
    int exact_angles; /* 1: HF's fp32 angle recipe; 0: angles in double */
    const int32_t *pos;
    float *q, *k, *temp, *Rq, *Rk, *sq, *sk;
} qk_case;

/* RoPE angle of pair i at position pos. HF: inv_freq = 1 / theta^(arange(0,rot,2)/rot) in fp32
 * (fp32 exponent, fp32 pow, fp32 reciprocal), freqs = pos * inv_freq as an fp32 product. */
static double rope_angle(const qk_case *c, int32_t pos, int i) {
    if (!c->exact_angles) return pos * pow(c->theta, -2.0 * i / c->rot);
    float ex = (float)(2 * i) / (float)c->rot;
    float inv = 1.0f / powf((float)c->theta, ex);
    return (double)((float)pos * inv);
}

/* One head of the direct formula in double: y = rope(sqrt(d) x / max(||x||, eps) * t). */
static void qk_ref_head(const qk_case *c, const float *x, double t, int32_t pos, double *y,
                        double *norm) {
    int d = c->d, h = c->rot / 2;
    double ss = 0;
    for (int e = 0; e < d; e++) ss += (double)x[e] * x[e];
    double nr = sqrt(ss);
    if (nr < c->eps) nr = c->eps;
    if (norm) *norm = nr;
    double u[256];
    for (int e = 0; e < d; e++) u[e] = sqrt((double)d) * x[e] / nr * t;
    for (int e = 0; e < d; e++) y[e] = u[e];
    for (int i = 0; i < h; i++) {
        double a = rope_angle(c, pos, i), cs = cos(a), sn = sin(a);
        y[i] = u[i] * cs - u[i + h] * sn;
        y[i + h] = u[i + h] * cs + u[i] * sn;
    }
}

static void qk_ref(const qk_case *c, double *q, double *k, double *qn, double *kn) {
    int d = c->d;
    for (int n = 0; n < c->N; n++) {
        for (int i = 0; i < c->Hq; i++) {
            size_t o = ((size_t)n * c->Hq + i) * d;
            qk_ref_head(c, c->q + o, 1.0, c->pos[n], q + o, qn ? qn + (size_t)n * c->Hq + i : NULL);
        }
        for (int j = 0; j < c->Hk; j++) {
            size_t o = ((size_t)n * c->Hk + j) * d;
            qk_ref_head(c, c->k + o, c->temp[j], c->pos[n], k + o,
                        kn ? kn + (size_t)n * c->Hk + j : NULL);
        }
    }
}

static double qk_ref_loss(void *p) {
    qk_case *c = p;
    size_t nq = (size_t)c->N * c->Hq * c->d, nk = (size_t)c->N * c->Hk * c->d;
    double *q = tu_dalloc(nq), *k = tu_dalloc(nk);
    qk_ref(c, q, k, NULL, NULL);
    double L = tu_ddot(q, c->Rq, nq) + tu_ddot(k, c->Rk, nk);
    free(q);
    free(k);
    return L;
}

static double qk_op_loss(void *p) {
    qk_case *c = p;
    size_t nq = (size_t)c->N * c->Hq * c->d, nk = (size_t)c->N * c->Hk * c->d;
    memcpy(c->sq, c->q, nq * sizeof(float));
    memcpy(c->sk, c->k, nk * sizeof(float));
    ops_qknorm_rope_fwd(&tu_ctx, c->sq, c->sk, NULL, NULL, c->sq, c->sk, c->temp, c->pos, c->N,
                        c->Hq, c->Hk, c->d, c->rot, c->theta, c->eps); /* in place */
    return tu_dot(c->sq, c->Rq, nq) + tu_dot(c->sk, c->Rk, nk);
}

/* tiny_q: every query head below the clamp (||q|| < eps), exercising the clamped branch. */
static void run_qk(int N, int Hq, int Hk, int d, int rot, double theta, int maxpos, int tiny_q) {
    printf("  qknorm_rope N=%d Hq=%d Hk=%d d=%d rot=%d theta=%g maxpos=%d%s\n", N, Hq, Hk, d, rot,
           theta, maxpos, tiny_q ? " (clamped q)" : "");
    size_t nq = (size_t)N * Hq * d, nk = (size_t)N * Hk * d;
    int32_t *pos = malloc((size_t)N * sizeof(int32_t));
    for (int n = 0; n < N; n++) pos[n] = (int32_t)zy_rng_below(&tu_rng, (uint64_t)maxpos + 1);
    pos[0] = 0;
    pos[N - 1] = maxpos;
    qk_case c = {N,   Hq,   Hk,   d,    rot,  theta, FLT_EPSILON,  1,
                 pos, NULL, NULL, NULL, NULL, NULL,  tu_alloc(nq), tu_alloc(nk)};
    c.q = tu_randn(nq, tiny_q ? 1e-9f : 1.0f);
    c.k = tu_randn(nk, 1);
    c.temp = tu_randn(Hk, 1);
    c.Rq = tu_randn(nq, 1);
    c.Rk = tu_randn(nk, 1);
    float *q = tu_const(nq, NAN), *k = tu_const(nk, NAN); /* outputs of the inputs qin, kin */
    float *qin = tu_dup(c.q, nq), *kin = tu_dup(c.k, nk);
    float *qn = tu_const((size_t)N * Hq, NAN), *kn = tu_const((size_t)N * Hk, NAN);
    ops_qknorm_rope_fwd(&tu_ctx, q, k, qn, kn, qin, kin, c.temp, pos, N, Hq, Hk, d, rot, theta,
                        FLT_EPSILON);
    double *rq = tu_dalloc(nq), *rk = tu_dalloc(nk), *rqn = tu_dalloc((size_t)N * Hq),
           *rkn = tu_dalloc((size_t)N * Hk);
    qk_ref(&c, rq, rk, rqn, rkn);
    tu_check_fwd("qknorm_rope q (HF fp32 angles)", tu_err(q, rq, nq), 1e-6);
    tu_check_fwd("qknorm_rope k (HF fp32 angles)", tu_err(k, rk, nk), 1e-6);
    tu_check_fwd("qknorm_rope qn", tu_err(qn, rqn, (size_t)N * Hq), 1e-6);
    tu_check_fwd("qknorm_rope kn", tu_err(kn, rkn, (size_t)N * Hk), 1e-6);
    tu_check_same("qknorm_rope q_in unchanged", qin, c.q, nq);
    tu_check_same("qknorm_rope k_in unchanged", kin, c.k, nk);
    if (maxpos < 64) { /* short positions: the fp32 angles agree with exact ones to ~1e-6 */
        c.exact_angles = 0;
        qk_ref(&c, rq, rk, NULL, NULL);
        tu_check_fwd("qknorm_rope q (double angles)", tu_err(q, rq, nq), 1e-5);
        tu_check_fwd("qknorm_rope k (double angles)", tu_err(k, rk, nk), 1e-5);
        c.exact_angles = 1;
    }

    float *dq = tu_dup(c.Rq, nq), *dk = tu_dup(c.Rk, nk), *dtemp = tu_const(Hk, 0);
    ops_qknorm_rope_bwd(&tu_ctx, dq, dk, dtemp, qin, kin, qn, kn, c.temp, pos, N, Hq, Hk, d, rot,
                        theta, FLT_EPSILON);
    /* in the clamped branch the output is linear in q; step 1e-12 keeps ||q|| below eps */
    tu_check_grad("qknorm_rope dq", qk_ref_loss, tiny_q ? NULL : qk_op_loss, &c, c.q, dq, nq,
                  tiny_q ? 1e-12 : 0);
    tu_check_grad("qknorm_rope dk", qk_ref_loss, qk_op_loss, &c, c.k, dk, nk, 0);
    tu_check_grad("qknorm_rope dtemp", qk_ref_loss, qk_op_loss, &c, c.temp, dtemp, Hk, 0);
    float *pre = tu_randn(Hk, 1), *acc = tu_dup(pre, Hk);
    float *dq2 = tu_dup(c.Rq, nq), *dk2 = tu_dup(c.Rk, nk);
    ops_qknorm_rope_bwd(&tu_ctx, dq2, dk2, acc, qin, kin, qn, kn, c.temp, pos, N, Hq, Hk, d, rot,
                        theta, FLT_EPSILON);
    tu_check_accum("qknorm_rope dtemp", acc, pre, dtemp, Hk);
    float *bufs[] = {c.q, c.k, c.temp, c.Rq, c.Rk, c.sq,  c.sk, q,   k,   qin,
                     kin, qn,  kn,     dq,   dk,   dtemp, pre,  acc, dq2, dk2};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(rq);
    free(rk);
    free(rqn);
    free(rkn);
    free(pos);
}

static void test_qknorm_rope(void **state) {
    (void)state;
    run_qk(5, 1, 1, 8, 2, 1e4, 40, 0);   /* partial rotary 0.25 */
    run_qk(6, 2, 1, 8, 4, 1e4, 6000, 0); /* 0.5 (ZAYA1), long positions */
    run_qk(4, 4, 1, 8, 8, 1e6, 50, 0);   /* 1.0 */
    run_qk(5, 4, 2, 16, 8, 5e6, 33000, 0);
    run_qk(3, 2, 2, 6, 0, 1e4, 10, 0);  /* no rotary channels */
    run_qk(4, 2, 1, 8, 4, 1e4, 100, 1); /* clamped query norms */
}

/* Sizes above the single-thread cutoff: 1 and 2 threads give identical bits. */
static void test_cca_threads_deterministic(void **state) {
    (void)state;
    int B = 2, T = 40, Hq = 4, Hk = 2, d = 16, t0 = 2, t1 = 2, N = B * T;
    int C = (Hq + Hk) * d, Tm = T + t1 - 1;
    size_t nqk = (size_t)N * C, nq = (size_t)N * Hq * d, nk = (size_t)N * Hk * d;
    size_t nmid = (size_t)B * Tm * C, nw1 = (size_t)C * t0, nw2 = (size_t)C * d * t1;
    float *qk0 = tu_randn(nqk, 1), *w1 = tu_randn(nw1, 1), *b1 = tu_randn(C, 1);
    float *w2 = tu_randn(nw2, 0.3f), *b2 = tu_randn(C, 1), *gq = tu_randn(nq, 1);
    float *gk = tu_randn(nk, 1), *temp = tu_randn(Hk, 1), *vc = tu_randn(nk, 1);
    int32_t *pos = malloc((size_t)N * sizeof(int32_t));
    for (int n = 0; n < N; n++) pos[n] = n % T;
    zy_ctx ctxs[2] = {{.device = ZY_DEV_CPU, .num_threads = 1},
                      {.device = ZY_DEV_CPU, .num_threads = 2}};
    enum { NRES = 15 };
    float *res[2][NRES];
    size_t sz[NRES] = {nq, nk, nmid, nqk, nw1, C, nw2, C, nq, nk, (size_t)N * Hq, (size_t)N * Hk,
                       nq, nk, Hk};
    for (int t = 0; t < 2; t++) {
        for (int i = 0; i < NRES; i++) res[t][i] = tu_const(sz[i], 0);
        float **r = res[t];
        ops_cca_conv_fwd(&ctxs[t], r[0], r[1], r[2], qk0, NULL, w1, b1, w2, b2, B, T, Hq, Hk, d, t0,
                         t1);
        ops_cca_conv_bwd(&ctxs[t], r[3], r[4], r[5], r[6], r[7], gq, gk, qk0, r[2], w1, w2, B, T,
                         Hq, Hk, d, t0, t1);
        float *qin = tu_dup(r[0], nq), *kin = tu_dup(r[1], nk);
        ops_qknorm_rope_fwd(&ctxs[t], r[8], r[9], r[10], r[11], qin, kin, temp, pos, N, Hq, Hk, d,
                            8, 1e4, FLT_EPSILON);
        memcpy(r[12], gq, nq * sizeof(float));
        memcpy(r[13], gk, nk * sizeof(float));
        ops_qknorm_rope_bwd(&ctxs[t], r[12], r[13], r[14], qin, kin, r[10], r[11], temp, pos, N, Hq,
                            Hk, d, 8, 1e4, FLT_EPSILON);
        free(qin);
        free(kin);
    }
    for (int i = 0; i < NRES; i++) {
        assert_memory_equal(res[0][i], res[1][i], sz[i] * sizeof(float));
        free(res[0][i]);
        free(res[1][i]);
    }
    float *bufs[] = {qk0, w1, b1, w2, b2, gq, gk, temp, vc};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(pos);
}

static void test_summary(void **state) {
    (void)state;
    tu_print_worst("test_ops_cca");
}

int main(void) {
    tu_rng = zy_rng_init(1234, 2);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cca_conv),    cmocka_unit_test(test_value_delay),
        cmocka_unit_test(test_qknorm_rope), cmocka_unit_test(test_cca_threads_deterministic),
        cmocka_unit_test(test_summary),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
