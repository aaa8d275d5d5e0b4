/* Tests of the CPU cross-entropy op: the summed loss and counted rows against a direct double
 * log-sum-exp, ignore_index rows, all rows ignored, large logits, the gradient against finite
 * differences of grad_scale * loss, dlogits aliasing logits, and thread-count independence. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "ops_test_util.h"

#include <stdint.h>

#define IGNORE (-100)

typedef struct {
    int N, V;
    const int32_t *targets;
    float grad_scale;
    float *logits;
} xe_case;

/* sum over counted rows of log(sum_v exp(x_v)) - x_target, in double. */
static double xent_ref(const xe_case *c, int *count, double *dlogits) {
    double L = 0;
    int cnt = 0;
    for (int n = 0; n < c->N; n++) {
        const float *x = c->logits + (size_t)n * c->V;
        int y = c->targets[n];
        if (y == IGNORE) {
            if (dlogits)
                for (int v = 0; v < c->V; v++) dlogits[(size_t)n * c->V + v] = 0;
            continue;
        }
        double mx = x[0], z = 0;
        for (int v = 1; v < c->V; v++) mx = x[v] > mx ? x[v] : mx;
        for (int v = 0; v < c->V; v++) z += exp(x[v] - mx);
        L += mx + log(z) - x[y];
        cnt++;
        if (dlogits)
            for (int v = 0; v < c->V; v++)
                dlogits[(size_t)n * c->V + v] =
                    (exp(x[v] - mx) / z - (v == y ? 1.0 : 0.0)) * c->grad_scale;
    }
    if (count) *count = cnt;
    return L;
}

static double xent_ref_loss(void *p) {
    xe_case *c = p;
    return xent_ref(c, NULL, NULL) * c->grad_scale;
}

static double xent_op_loss(void *p) {
    xe_case *c = p;
    int cnt;
    return ops_xent_fwd_bwd(&tu_ctx, NULL, c->logits, c->targets, c->N, c->V, IGNORE, 1.0f, &cnt) *
           c->grad_scale;
}

static void test_xent(void **state) {
    (void)state;
    int N = 11, V = 13;
    size_t nv = (size_t)N * V;
    int32_t targets[11];
    for (int n = 0; n < N; n++) targets[n] = (int32_t)zy_rng_below(&tu_rng, (uint64_t)V);
    targets[2] = targets[5] = IGNORE;
    xe_case c = {N, V, targets, 0.37f, tu_randn(nv, 3)};
    for (int v = 0; v < V; v++) c.logits[(size_t)7 * V + v] = v % 2 ? 80.0f : -80.0f; /* large */
    int cnt = -1, rcnt;
    float *dl = tu_const(nv, NAN);
    double L = ops_xent_fwd_bwd(&tu_ctx, dl, c.logits, targets, N, V, IGNORE, c.grad_scale, &cnt);
    double *rdl = tu_dalloc(nv);
    double RL = xent_ref(&c, &rcnt, rdl);
    assert_int_equal(cnt, N - 2);
    assert_int_equal(cnt, rcnt);
    /* the op takes exp(x - max) in fp32 (like torch): <= ~1e-7 absolute per row's loss */
    tu_check_fwd("xent sum", fabs(L - RL) / fabs(RL), 1e-6);
    tu_check_fwd("xent dlogits", tu_err(dl, rdl, nv), 1e-6);
    for (int v = 0; v < V; v++) assert_true(dl[(size_t)2 * V + v] == 0.0f);
    tu_check_grad("xent dlogits", xent_ref_loss, xent_op_loss, &c, c.logits, dl, nv, 0);
    /* dlogits NULL: same sum; dlogits aliasing logits: same gradient */
    int cnt2;
    assert_true(ops_xent_fwd_bwd(&tu_ctx, NULL, c.logits, targets, N, V, IGNORE, 1.0f, &cnt2) == L);
    float *alias = tu_dup(c.logits, nv);
    double L2 = ops_xent_fwd_bwd(&tu_ctx, alias, alias, targets, N, V, IGNORE, c.grad_scale, &cnt2);
    assert_true(L2 == L);
    tu_check_same("xent dlogits aliasing logits", alias, dl, nv);
    /* every row ignored: zero loss, zero count, zero gradient */
    int32_t none[11];
    for (int n = 0; n < N; n++) none[n] = IGNORE;
    float *dz = tu_const(nv, NAN);
    assert_true(ops_xent_fwd_bwd(&tu_ctx, dz, c.logits, none, N, V, IGNORE, 1.0f, &cnt2) == 0.0);
    assert_int_equal(cnt2, 0);
    for (size_t i = 0; i < nv; i++) assert_true(dz[i] == 0.0f);
    free(c.logits);
    free(dl);
    free(rdl);
    free(alias);
    free(dz);
}

static void test_xent_threads_deterministic(void **state) {
    (void)state;
    int N = 300, V = 501;
    size_t nv = (size_t)N * V;
    float *x = tu_randn(nv, 2), *g1 = tu_alloc(nv), *g2 = tu_alloc(nv);
    int32_t *t = malloc((size_t)N * sizeof(int32_t));
    for (int n = 0; n < N; n++) t[n] = n % 17 == 0 ? IGNORE : (int32_t)zy_rng_below(&tu_rng, V);
    zy_ctx one = {.device = ZY_DEV_CPU, .num_threads = 1},
           two = {.device = ZY_DEV_CPU, .num_threads = 2};
    int c1, c2;
    double l1 = ops_xent_fwd_bwd(&one, g1, x, t, N, V, IGNORE, 0.5f, &c1);
    double l2 = ops_xent_fwd_bwd(&two, g2, x, t, N, V, IGNORE, 0.5f, &c2);
    assert_true(l1 == l2);
    assert_int_equal(c1, c2);
    assert_memory_equal(g1, g2, nv * sizeof(float));
    free(x);
    free(g1);
    free(g2);
    free(t);
}

static void test_summary(void **state) {
    (void)state;
    tu_print_worst("test_ops_loss");
}

int main(void) {
    tu_rng = zy_rng_init(1234, 5);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_xent),
        cmocka_unit_test(test_xent_threads_deterministic),
        cmocka_unit_test(test_summary),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
