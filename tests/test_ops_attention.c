/* Tests of the CPU attention ops: causal grouped-query softmax attention with and without a
 * sliding window (forward and lse against a direct double softmax over an explicit mask, backward
 * against finite differences), single-row decoding against the same formula and against the
 * training forward, and thread-count independence of the backward. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "ops_test_util.h"

typedef struct {
    int B, T, Hq, Hk, d, window;
    float scale;
    float *q, *k, *v, *R, *sout, *slse;
} att_case;

/* The mask, written from its definition: key s is visible to query t iff s <= t and, with a
 * window, t - window < s. */
static int visible(int t, int s, int window) {
    return s <= t && (window <= 0 || s > t - window);
}

/* Direct formula in double: out [B*T, Hq*d], lse [B, Hq, T]. */
static void att_ref(const att_case *c, double *out, double *lse) {
    int d = c->d, G = c->Hq / c->Hk;
    double *sc = tu_dalloc((size_t)c->T);
    for (int b = 0; b < c->B; b++)
        for (int i = 0; i < c->Hq; i++)
            for (int t = 0; t < c->T; t++) {
                const float *qr = c->q + ((size_t)b * c->T + t) * c->Hq * d + (size_t)i * d;
                double mx = -INFINITY;
                for (int s = 0; s < c->T; s++) {
                    if (!visible(t, s, c->window)) continue;
                    const float *kr =
                        c->k + ((size_t)b * c->T + s) * c->Hk * d + (size_t)(i / G) * d;
                    double dot = 0;
                    for (int e = 0; e < d; e++) dot += (double)qr[e] * kr[e];
                    sc[s] = dot * c->scale;
                    if (sc[s] > mx) mx = sc[s];
                }
                double z = 0;
                for (int s = 0; s < c->T; s++)
                    if (visible(t, s, c->window)) z += exp(sc[s] - mx);
                double *o = out + ((size_t)b * c->T + t) * c->Hq * d + (size_t)i * d;
                for (int e = 0; e < d; e++) o[e] = 0;
                for (int s = 0; s < c->T; s++) {
                    if (!visible(t, s, c->window)) continue;
                    const float *vr =
                        c->v + ((size_t)b * c->T + s) * c->Hk * d + (size_t)(i / G) * d;
                    double p = exp(sc[s] - mx) / z;
                    for (int e = 0; e < d; e++) o[e] += p * vr[e];
                }
                if (lse) lse[((size_t)b * c->Hq + i) * c->T + t] = mx + log(z);
            }
    free(sc);
}

static double att_ref_loss(void *p) {
    att_case *c = p;
    size_t n = (size_t)c->B * c->T * c->Hq * c->d;
    double *out = tu_dalloc(n);
    att_ref(c, out, NULL);
    double L = tu_ddot(out, c->R, n);
    free(out);
    return L;
}

static double att_op_loss(void *p) {
    att_case *c = p;
    ops_attention_fwd(&tu_ctx, c->sout, c->slse, c->q, c->k, c->v, c->B, c->T, c->Hq, c->Hk, c->d,
                      c->scale, c->window);
    return tu_dot(c->sout, c->R, (size_t)c->B * c->T * c->Hq * c->d);
}

static void run_attention(int B, int T, int Hq, int Hk, int d, int window, float scale) {
    printf("  attention B=%d T=%d Hq=%d Hk=%d d=%d window=%d scale=%g\n", B, T, Hq, Hk, d, window,
           scale);
    size_t nq = (size_t)B * T * Hq * d, nk = (size_t)B * T * Hk * d, nl = (size_t)B * Hq * T;
    att_case c = {B,
                  T,
                  Hq,
                  Hk,
                  d,
                  window,
                  scale,
                  tu_randn(nq, 1),
                  tu_randn(nk, 1),
                  tu_randn(nk, 1),
                  tu_randn(nq, 1),
                  tu_alloc(nq),
                  tu_alloc(nl)};
    float *out = tu_const(nq, NAN), *lse = tu_const(nl, NAN);
    ops_attention_fwd(&tu_ctx, out, lse, c.q, c.k, c.v, B, T, Hq, Hk, d, scale, window);
    double *ro = tu_dalloc(nq), *rl = tu_dalloc(nl);
    att_ref(&c, ro, rl);
    tu_check_fwd("attention out", tu_err(out, ro, nq), 1e-6);
    tu_check_fwd("attention lse", tu_err(lse, rl, nl), 1e-6);

    float *dq = tu_const(nq, NAN), *dk = tu_const(nk, NAN), *dv = tu_const(nk, NAN);
    ops_attention_bwd(&tu_ctx, dq, dk, dv, c.R, out, lse, c.q, c.k, c.v, B, T, Hq, Hk, d, scale,
                      window);
    tu_check_grad("attention dq", att_ref_loss, att_op_loss, &c, c.q, dq, nq, 0);
    tu_check_grad("attention dk", att_ref_loss, att_op_loss, &c, c.k, dk, nk, 0);
    tu_check_grad("attention dv", att_ref_loss, att_op_loss, &c, c.v, dv, nk, 0);
    /* all three are overwritten */
    float *dq2 = tu_randn(nq, 1), *dk2 = tu_randn(nk, 1), *dv2 = tu_randn(nk, 1);
    ops_attention_bwd(&tu_ctx, dq2, dk2, dv2, c.R, out, lse, c.q, c.k, c.v, B, T, Hq, Hk, d, scale,
                      window);
    tu_check_same("attention dq", dq2, dq, nq);
    tu_check_same("attention dk", dk2, dk, nk);
    tu_check_same("attention dv", dv2, dv, nk);

    /* decoding: the query of step t against a cache holding rows 0..t (rows past Tk are NaN and
     * must not be read) equals row t of the training forward */
    int Tmax = T + 3;
    size_t kcs = (size_t)B * Tmax * Hk * d;
    float *kc = tu_const(kcs, NAN), *vc = tu_const(kcs, NAN);
    float *qd = tu_alloc((size_t)B * Hq * d), *od = tu_const((size_t)B * Hq * d, NAN);
    double *rd = tu_dalloc((size_t)B * Hq * d);
    double err = 0;
    for (int t = 0; t < T; t++) {
        for (int b = 0; b < B; b++) {
            size_t rs = (size_t)Hk * d;
            memcpy(kc + ((size_t)b * Tmax + t) * rs, c.k + ((size_t)b * T + t) * rs,
                   rs * sizeof(float));
            memcpy(vc + ((size_t)b * Tmax + t) * rs, c.v + ((size_t)b * T + t) * rs,
                   rs * sizeof(float));
            memcpy(qd + (size_t)b * Hq * d, c.q + ((size_t)b * T + t) * Hq * d,
                   (size_t)Hq * d * sizeof(float));
            memcpy(rd + (size_t)b * Hq * d, ro + ((size_t)b * T + t) * Hq * d,
                   (size_t)Hq * d * sizeof(double));
        }
        ops_attention_decode(&tu_ctx, od, qd, kc, vc, B, t + 1, Tmax, Hq, Hk, d, scale, window);
        double e = tu_err(od, rd, (size_t)B * Hq * d);
        if (e > err) err = e;
    }
    tu_check_fwd("attention_decode (every step)", err, 1e-6);
    float *bufs[] = {c.q, c.k, c.v, c.R, c.sout, c.slse, out, lse, dq,
                     dk,  dv,  dq2, dk2, dv2,    kc,     vc,  qd,  od};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(ro);
    free(rl);
    free(rd);
}

static void test_attention(void **state) {
    (void)state;
    run_attention(2, 1, 1, 1, 4, 0, 0.5f);       /* a single step */
    run_attention(2, 7, 2, 1, 5, 0, 0.4472136f); /* G = 2 */
    run_attention(1, 9, 4, 2, 3, 3, 0.57735f);   /* window 3, G = 2 */
    run_attention(2, 6, 4, 1, 4, 1, 0.5f);       /* window 1: each query sees itself only */
    run_attention(1, 5, 2, 2, 8, 20, 0.9f);      /* window longer than the sequence */
    run_attention(1, 33, 4, 4, 16, 0, 0.25f);    /* G = 1, longer */
    run_attention(2, 12, 4, 1, 4, 5, 0.5f);      /* G = 4, window */
    run_attention(1, 150, 2, 1, 4, 37, 0.5f);    /* several query blocks, window across blocks */
    run_attention(1, 130, 2, 2, 4, 0, 0.5f);     /* several query blocks, causal */
}

static void test_attention_threads_deterministic(void **state) {
    (void)state;
    int B = 2, T = 64, Hq = 4, Hk = 2, d = 16;
    size_t nq = (size_t)B * T * Hq * d, nk = (size_t)B * T * Hk * d, nl = (size_t)B * Hq * T;
    float *q = tu_randn(nq, 1), *k = tu_randn(nk, 1), *v = tu_randn(nk, 1), *g = tu_randn(nq, 1);
    zy_ctx ctxs[2] = {{.device = ZY_DEV_CPU, .num_threads = 1},
                      {.device = ZY_DEV_CPU, .num_threads = 2}};
    float *res[2][5];
    for (int t = 0; t < 2; t++) {
        res[t][0] = tu_alloc(nq);
        res[t][1] = tu_alloc(nl);
        res[t][2] = tu_alloc(nq);
        res[t][3] = tu_alloc(nk);
        res[t][4] = tu_alloc(nk);
        ops_attention_fwd(&ctxs[t], res[t][0], res[t][1], q, k, v, B, T, Hq, Hk, d, 0.25f, 0);
        ops_attention_bwd(&ctxs[t], res[t][2], res[t][3], res[t][4], g, res[t][0], res[t][1], q, k,
                          v, B, T, Hq, Hk, d, 0.25f, 0);
    }
    size_t sz[5] = {nq, nl, nq, nk, nk};
    for (int i = 0; i < 5; i++) {
        assert_memory_equal(res[0][i], res[1][i], sz[i] * sizeof(float));
        free(res[0][i]);
        free(res[1][i]);
    }
    free(q);
    free(k);
    free(v);
    free(g);
}

static void test_summary(void **state) {
    (void)state;
    tu_print_worst("test_ops_attention");
}

int main(void) {
    tu_rng = zy_rng_init(1234, 3);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_attention_threads_deterministic),
        cmocka_unit_test(test_summary),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
