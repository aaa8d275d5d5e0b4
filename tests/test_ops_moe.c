/* Tests of the CPU ops of the MoE block: exact GELU and SwiGLU, the router (softmax, biased top-1
 * choice with first-index ties, skip class, backward), the stable dispatch, gather, combine and its
 * backward, and the scatter-add. Forward against direct double formulas, backward against finite
 * differences (ops_test_util.h), overwrite/accumulate semantics. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "ops_test_util.h"

#include <stdint.h>

/* Per-element relative error max |a - ref| / |ref| (ref == 0 needs a == 0 up to 1e-30). */
static double err_elem(const float *a, const double *ref, size_t n) {
    double e = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(a[i] - ref[i]) / (fabs(ref[i]) + 1e-30);
        if (isnan(d)) return INFINITY;
        if (d > e) e = d;
    }
    return e;
}

/* ---- GELU ---- */

typedef struct {
    size_t n;
    float *x, *R, *s;
} ew_case;

static double gelu_ref(double x) {
    return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
}

static double gelu_ref_loss(void *p) {
    ew_case *c = p;
    double L = 0;
    for (size_t i = 0; i < c->n; i++) L += gelu_ref(c->x[i]) * c->R[i];
    return L;
}

static double gelu_op_loss(void *p) {
    ew_case *c = p;
    ops_gelu_fwd(&tu_ctx, c->s, c->x, c->n);
    return tu_dot(c->s, c->R, c->n);
}

static void test_gelu(void **state) {
    (void)state;
    size_t n = 300;
    ew_case c = {n, tu_randn(n, 3), tu_randn(n, 1), tu_alloc(n)};
    float special[] = {0.0f, 1e-3f, -1e-3f, 1.0f, -1.0f, 5.0f, -5.0f, 30.0f, -30.0f, 1e-30f};
    memcpy(c.x, special, sizeof special);
    float *y = tu_const(n, NAN);
    ops_gelu_fwd(&tu_ctx, y, c.x, n);
    double *ref = tu_dalloc(n);
    for (size_t i = 0; i < n; i++) ref[i] = gelu_ref(c.x[i]);
    tu_check_fwd("gelu (per element)", err_elem(y, ref, n), 1e-6);
    float *dx = tu_const(n, NAN);
    ops_gelu_bwd(&tu_ctx, dx, c.R, c.x, n);
    tu_check_grad("gelu dx", gelu_ref_loss, gelu_op_loss, &c, c.x, dx, n, 0);
    free(c.x);
    free(c.R);
    free(c.s);
    free(y);
    free(ref);
    free(dx);
}

/* ---- SwiGLU ---- */

typedef struct {
    int N, F;
    float *gu, *R, *s;
} sw_case;

static double swiglu_ref(const sw_case *c, int n, int f) {
    double g = c->gu[(size_t)n * 2 * c->F + f], u = c->gu[(size_t)n * 2 * c->F + c->F + f];
    return g / (1.0 + exp(-g)) * u;
}

static double swiglu_ref_loss(void *p) {
    sw_case *c = p;
    double L = 0;
    for (int n = 0; n < c->N; n++)
        for (int f = 0; f < c->F; f++) L += swiglu_ref(c, n, f) * c->R[(size_t)n * c->F + f];
    return L;
}

static double swiglu_op_loss(void *p) {
    sw_case *c = p;
    ops_swiglu_fwd(&tu_ctx, c->s, c->gu, c->N, c->F);
    return tu_dot(c->s, c->R, (size_t)c->N * c->F);
}

static void test_swiglu(void **state) {
    (void)state;
    int N = 7, F = 13;
    size_t nf = (size_t)N * F;
    sw_case c = {N, F, tu_randn(2 * nf, 2), tu_randn(nf, 1), tu_alloc(nf)};
    c.gu[0] = 40.0f; /* saturated gate */
    c.gu[1] = -40.0f;
    float *y = tu_const(nf, NAN);
    ops_swiglu_fwd(&tu_ctx, y, c.gu, N, F);
    double *ref = tu_dalloc(nf);
    for (int n = 0; n < N; n++)
        for (int f = 0; f < F; f++) ref[(size_t)n * F + f] = swiglu_ref(&c, n, f);
    tu_check_fwd("swiglu (per element)", err_elem(y, ref, nf), 1e-6);
    float *dgu = tu_const(2 * nf, NAN);
    ops_swiglu_bwd(&tu_ctx, dgu, c.R, c.gu, N, F);
    tu_check_grad("swiglu dgu", swiglu_ref_loss, swiglu_op_loss, &c, c.gu, dgu, 2 * nf, 0);
    free(c.gu);
    free(c.R);
    free(c.s);
    free(y);
    free(ref);
    free(dgu);
}

/* ---- router ---- */

typedef struct {
    int N, E1;
    float *logits, *bias, *R, *sp, *sg;
    int32_t *sc;
} rt_case;

/* Softmax in double, choice = first argmax of p + bias, gate (0 for skip). */
static void router_ref(const rt_case *c, double *probs, int *choice, double *gate) {
    for (int n = 0; n < c->N; n++) {
        const float *x = c->logits + (size_t)n * c->E1;
        double mx = x[0], z = 0;
        for (int e = 1; e < c->E1; e++) mx = x[e] > mx ? x[e] : mx;
        for (int e = 0; e < c->E1; e++) z += exp(x[e] - mx);
        int best = 0;
        double bv = -INFINITY;
        for (int e = 0; e < c->E1; e++) {
            double p = exp(x[e] - mx) / z;
            if (probs) probs[(size_t)n * c->E1 + e] = p;
            if (p + c->bias[e] > bv) {
                bv = p + c->bias[e];
                best = e;
            }
        }
        if (choice) choice[n] = best;
        gate[n] = best == c->E1 - 1 ? 0 : exp(x[best] - mx) / z;
    }
}

static double router_ref_loss(void *p) {
    rt_case *c = p;
    double *gate = tu_dalloc((size_t)c->N);
    router_ref(c, NULL, NULL, gate);
    double L = tu_ddot(gate, c->R, (size_t)c->N);
    free(gate);
    return L;
}

static double router_op_loss(void *p) {
    rt_case *c = p;
    ops_router_select(&tu_ctx, c->sp, c->sc, c->sg, c->logits, c->bias, c->N, c->E1);
    return tu_dot(c->sg, c->R, (size_t)c->N);
}

static void test_router(void **state) {
    (void)state;
    int N = 24, E1 = 7;
    size_t ne = (size_t)N * E1;
    rt_case c = {N,
                 E1,
                 tu_randn(ne, 1.5f),
                 tu_randn(E1, 0.05f),
                 tu_randn(N, 1),
                 tu_alloc(ne),
                 tu_alloc(N),
                 malloc((size_t)N * sizeof(int32_t))};
    c.bias[E1 - 1] = -0.05f;
    for (int e = 0; e < E1; e++) c.logits[(size_t)3 * E1 + e] = 0; /* row 3: uniform probs */
    c.logits[(size_t)4 * E1 + E1 - 1] = 9;                         /* row 4: the skip class wins */
    float *probs = tu_const(ne, NAN), *gate = tu_const(N, NAN);
    int32_t *choice = malloc((size_t)N * sizeof(int32_t));
    ops_router_select(&tu_ctx, probs, choice, gate, c.logits, c.bias, N, E1);
    double *rp = tu_dalloc(ne), *rg = tu_dalloc(N);
    int *rc = malloc((size_t)N * sizeof(int));
    router_ref(&c, rp, rc, rg);
    tu_check_fwd("router probs", tu_err(probs, rp, ne), 1e-6);
    tu_check_fwd("router gate", tu_err(gate, rg, N), 1e-6);
    for (int n = 0; n < N; n++) assert_int_equal(choice[n], rc[n]);
    assert_int_equal(choice[4], E1 - 1);
    assert_true(gate[4] == 0.0f);

    float *dl = tu_const(ne, NAN);
    ops_router_bwd(&tu_ctx, dl, c.R, probs, choice, N, E1);
    tu_check_grad("router dlogits", router_ref_loss, router_op_loss, &c, c.logits, dl, ne, 0);
    for (int e = 0; e < E1; e++) assert_true(dl[(size_t)4 * E1 + e] == 0.0f);

    /* ties: equal probabilities + equal biases pick the first index; a skip-favouring bias gives a
     * zero gate */
    float tl[3 * 5] = {0}, tb[5] = {0, 0.5f, 0, 0.5f, 0}, tz[5] = {0}, ts[5] = {0, 0, 0, 0, 2};
    float tp[15], tg[3];
    int32_t tc[3];
    ops_router_select(&tu_ctx, tp, tc, tg, tl, tz, 3, 5);
    for (int n = 0; n < 3; n++) {
        assert_int_equal(tc[n], 0);
        assert_true(fabsf(tg[n] - 0.2f) < 1e-7f);
    }
    ops_router_select(&tu_ctx, tp, tc, tg, tl, tb, 3, 5);
    for (int n = 0; n < 3; n++) assert_int_equal(tc[n], 1);
    ops_router_select(&tu_ctx, tp, tc, tg, tl, ts, 3, 5);
    for (int n = 0; n < 3; n++) {
        assert_int_equal(tc[n], 4);
        assert_true(tg[n] == 0.0f);
    }
    free(c.logits);
    free(c.bias);
    free(c.R);
    free(c.sp);
    free(c.sg);
    free(c.sc);
    free(probs);
    free(gate);
    free(choice);
    free(rp);
    free(rg);
    free(rc);
    free(dl);
}

/* ---- dispatch ---- */

/* Checks ops_moe_dispatch against a direct construction: for each expert, its rows in order. */
static void check_dispatch(const int32_t *choice, int N, int E) {
    int32_t *counts = malloc(((size_t)E + 1) * sizeof(int32_t));
    int32_t *offsets = malloc(((size_t)E + 2) * sizeof(int32_t));
    int32_t *perm = malloc(((size_t)N + 1) * sizeof(int32_t));
    for (int i = 0; i <= N; i++) perm[i] = -7;
    int32_t offh[257];
    assert_true(E < 257);
    int routed = ops_moe_dispatch(&tu_ctx, counts, offsets, offh, perm, choice, N, E);
    for (int e = 0; e <= E; e++) assert_int_equal(offh[e], offsets[e]); /* the host copy */
    int r = 0;
    assert_int_equal(offsets[0], 0);
    for (int e = 0; e < E; e++) {
        int cnt = 0;
        for (int n = 0; n < N; n++) {
            if (choice[n] != e) continue;
            assert_int_equal(perm[r], n);
            r++;
            cnt++;
        }
        assert_int_equal(counts[e], cnt);
        assert_int_equal(offsets[e + 1], r);
    }
    assert_int_equal(routed, r);
    for (int n = 0; n < N; n++) /* then the skipped rows, in order */
        if (choice[n] == E) assert_int_equal(perm[r++], n);
    assert_int_equal(r, N);
    assert_int_equal(perm[N], -7); /* nothing written past perm's N rows */
    free(counts);
    free(offsets);
    free(perm);
}

static void test_dispatch(void **state) {
    (void)state;
    int N = 40, E = 6;
    int32_t *choice = malloc((size_t)N * sizeof(int32_t));
    for (int n = 0; n < N; n++) {
        int e = (int)zy_rng_below(&tu_rng, (uint64_t)E + 1);
        choice[n] = (e == 2 || e == 4) ? E : e; /* experts 2 and 4 get no rows */
    }
    check_dispatch(choice, N, E);
    for (int n = 0; n < N; n++) choice[n] = E; /* all skipped */
    check_dispatch(choice, N, E);
    for (int n = 0; n < N; n++) choice[n] = 0; /* all to one expert */
    check_dispatch(choice, N, E);
    for (int n = 0; n < N; n++) choice[n] = (int32_t)(N - 1 - n) % (E + 1);
    check_dispatch(choice, N, E);
    check_dispatch(choice, 1, E);
    check_dispatch(choice, 0, E);
    free(choice);
}

/* ---- gather, combine, scatter ---- */

typedef struct {
    int N, D, nrows;
    const int32_t *perm;
    float *ys, *gate, *R, *s;
} cb_case;

static double combine_ref_loss(void *p) {
    cb_case *c = p;
    double L = 0;
    for (int r = 0; r < c->nrows; r++) {
        int n = c->perm[r];
        for (int k = 0; k < c->D; k++)
            L += (double)c->gate[n] * c->ys[(size_t)r * c->D + k] * c->R[(size_t)n * c->D + k];
    }
    return L;
}

static double combine_op_loss(void *p) {
    cb_case *c = p;
    ops_moe_combine(&tu_ctx, c->s, c->ys, c->gate, c->perm, c->nrows, c->N, c->D);
    return tu_dot(c->s, c->R, (size_t)c->N * c->D);
}

static void test_gather_combine_scatter(void **state) {
    (void)state;
    int N = 19, D = 37, E = 4;
    int32_t choice[19], counts[4], offsets[5], perm[19];
    for (int n = 0; n < N; n++) choice[n] = (int32_t)zy_rng_below(&tu_rng, (uint64_t)E + 1);
    choice[0] = E;
    choice[5] = E;
    int32_t offh[257];
    int nrows = ops_moe_dispatch(&tu_ctx, counts, offsets, offh, perm, choice, N, E);
    assert_true(nrows < N);
    size_t nd = (size_t)N * D, rd = (size_t)nrows * D;
    float *x = tu_randn(nd, 1), *xs = tu_const(rd, NAN);
    ops_gather_rows(&tu_ctx, xs, x, perm, nrows, D);
    for (int r = 0; r < nrows; r++)
        assert_memory_equal(xs + (size_t)r * D, x + (size_t)perm[r] * D, (size_t)D * sizeof(float));

    cb_case c = {
        N, D, nrows, perm, tu_randn(rd, 1), tu_randu(N, 0.1f, 1), tu_randn(nd, 1), tu_alloc(nd)};
    float *y = tu_const(nd, NAN);
    ops_moe_combine(&tu_ctx, y, c.ys, c.gate, perm, nrows, N, D);
    double *ref = tu_dalloc(nd);
    for (int r = 0; r < nrows; r++)
        for (int k = 0; k < D; k++)
            ref[(size_t)perm[r] * D + k] = (double)c.gate[perm[r]] * c.ys[(size_t)r * D + k];
    tu_check_fwd("moe_combine (skipped rows 0)", tu_err(y, ref, nd), 1e-7);

    float *dys = tu_const(rd, NAN), *dgate = tu_const(N, NAN);
    ops_moe_combine_bwd(&tu_ctx, dys, dgate, c.R, c.ys, c.gate, perm, nrows, N, D);
    tu_check_grad("moe_combine dys", combine_ref_loss, combine_op_loss, &c, c.ys, dys, rd, 0);
    tu_check_grad("moe_combine dgate", combine_ref_loss, combine_op_loss, &c, c.gate, dgate, N, 0);
    assert_true(dgate[0] == 0.0f && dgate[5] == 0.0f);

    /* scatter-add: dx[perm[r]] += dxs[r], onto existing values, with repeated rows too */
    float *dx = tu_randn(nd, 1), *dx0 = tu_dup(dx, nd), *dxs = tu_randn(rd, 1);
    ops_scatter_add_rows(&tu_ctx, dx, dxs, perm, nrows, D);
    for (size_t i = 0; i < nd; i++) ref[i] = dx0[i];
    for (int r = 0; r < nrows; r++)
        for (int k = 0; k < D; k++) ref[(size_t)perm[r] * D + k] += dxs[(size_t)r * D + k];
    tu_check_fwd("scatter_add_rows", tu_err(dx, ref, nd), 1e-7);
    int32_t rep[4] = {3, 1, 3, 3};
    memcpy(dx, dx0, nd * sizeof(float));
    ops_scatter_add_rows(&tu_ctx, dx, dxs, rep, 4, D);
    for (size_t i = 0; i < nd; i++) ref[i] = dx0[i];
    for (int r = 0; r < 4; r++)
        for (int k = 0; k < D; k++) ref[(size_t)rep[r] * D + k] += dxs[(size_t)r * D + k];
    tu_check_fwd("scatter_add_rows (repeated rows)", tu_err(dx, ref, nd), 1e-6);
    float *bufs[] = {x, xs, c.ys, c.gate, c.R, c.s, y, dys, dgate, dx, dx0, dxs};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(ref);
}

/* Sizes above the single-thread cutoff: 1 and 2 threads give identical bits. */
static void test_moe_threads_deterministic(void **state) {
    (void)state;
    int N = 1200, E1 = 17, F = 64, D = 64;
    size_t n = 20000, ne = (size_t)N * E1, nf = (size_t)N * F, nd = (size_t)N * D;
    float *x = tu_randn(n, 2), *gx = tu_randn(n, 1), *lg = tu_randn(ne, 1),
          *bias = tu_randn(E1, 0.1f);
    float *gu = tu_randn(2 * nf, 1), *gy = tu_randn(nf, 1), *dg = tu_randn(N, 1);
    float *ys = tu_randn(nd, 1), *dy = tu_randn(nd, 1);
    zy_ctx ctxs[2] = {{.device = ZY_DEV_CPU, .num_threads = 1},
                      {.device = ZY_DEV_CPU, .num_threads = 2}};
    enum { NRES = 12 };
    float *res[2][NRES];
    size_t sz[NRES] = {n, n, ne, N, ne, nf, 2 * nf, nd, nd, nd, N, nd};
    int32_t *choice[2], *perm[2], counts[16], offsets[17];
    for (int t = 0; t < 2; t++) {
        for (int i = 0; i < NRES; i++) res[t][i] = tu_const(sz[i], 0);
        float **r = res[t];
        choice[t] = malloc((size_t)N * sizeof(int32_t));
        perm[t] = malloc((size_t)N * sizeof(int32_t));
        ops_gelu_fwd(&ctxs[t], r[0], x, n);
        ops_gelu_bwd(&ctxs[t], r[1], gx, x, n);
        ops_router_select(&ctxs[t], r[2], choice[t], r[3], lg, bias, N, E1);
        ops_router_bwd(&ctxs[t], r[4], dg, r[2], choice[t], N, E1);
        ops_swiglu_fwd(&ctxs[t], r[5], gu, N, F);
        ops_swiglu_bwd(&ctxs[t], r[6], gy, gu, N, F);
        int32_t offh[257];
        int nrows =
            ops_moe_dispatch(&ctxs[t], counts, offsets, offh, perm[t], choice[t], N, E1 - 1);
        ops_gather_rows(&ctxs[t], r[7], ys, perm[t], nrows, D);
        ops_moe_combine(&ctxs[t], r[8], ys, r[3], perm[t], nrows, N, D);
        ops_moe_combine_bwd(&ctxs[t], r[9], r[10], dy, ys, r[3], perm[t], nrows, N, D);
        ops_scatter_add_rows(&ctxs[t], r[11], ys, perm[t], nrows, D);
    }
    assert_memory_equal(choice[0], choice[1], (size_t)N * sizeof(int32_t));
    assert_memory_equal(perm[0], perm[1], (size_t)N * sizeof(int32_t));
    for (int i = 0; i < NRES; i++) {
        assert_memory_equal(res[0][i], res[1][i], sz[i] * sizeof(float));
        free(res[0][i]);
        free(res[1][i]);
    }
    for (int t = 0; t < 2; t++) {
        free(choice[t]);
        free(perm[t]);
    }
    float *bufs[] = {x, gx, lg, bias, gu, gy, dg, ys, dy};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
}

static void test_summary(void **state) {
    (void)state;
    tu_print_worst("test_ops_moe");
}

int main(void) {
    tu_rng = zy_rng_init(1234, 4);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_swiglu),
        cmocka_unit_test(test_router),
        cmocka_unit_test(test_dispatch),
        cmocka_unit_test(test_gather_combine_scatter),
        cmocka_unit_test(test_moe_threads_deterministic),
        cmocka_unit_test(test_summary),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
