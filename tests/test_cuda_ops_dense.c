/* GPU-only checks of the dense CUDA ops that the op table (test_ops_backends) cannot express: the
 * profiler's names and call counts, and (printed, not asserted; skipped when ZY_SKIP_BENCH is set)
 * the time and bandwidth of rmsnorm_fwd, resscale_fwd/bwd at N = 16384, D = 1024, and of add_act
 * and bias_bwd at bench-small sizes. Every comparison of an op with its CPU op is a case of
 * tests/op_cases_dense.c. Skipped when no GPU is present. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "op_harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RMS_EPS 1e-5f

#ifdef ZY_HAVE_CUDA
/* cudart maps memory in ASan's shadow gap; ASan must leave the gap unprotected (SAN=1 builds). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
    return "protect_shadow_gap=0";
}
#endif

static const zy_op_time *find_op(const zy_op_time *t, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(t[i].name, name) == 0) return &t[i];
    return NULL;
}

/* ---- profiler ---- */

static void test_profiler(void **state) {
    (void)state;
    zy_ctx *gpu = oh_backend_ctx("cuda");
    if (!gpu) skip();
    oh_run *r = oh_run_begin(gpu);
    const int M = 64, N = 32, K = 48;
    zy_act *A = oh_act(r, oh_randn(r, (size_t)M * K, 1.0f), (size_t)M * K);
    zy_act *B = oh_act(r, oh_randn(r, (size_t)K * N, 1.0f), (size_t)K * N);
    zy_act *C = oh_act(r, oh_const(r, (size_t)M * N, 0.0f), (size_t)M * N);
    gpu->prof = 1;
    ops_prof_reset(gpu);
    ops_matmul(gpu, C, A, B, M, N, K, 0, 0, 1.0f, 0.0f);
    ops_matmul(gpu, C, A, B, M, N, K, 0, 0, 1.0f, 1.0f);
    ops_add_act(gpu, C, C, (size_t)M * N);
    zy_op_time t[16];
    int n = ops_prof_read(gpu, t, 16);
    gpu->prof = 0;
    for (int i = 0; i < n; i++)
        printf("    profiler: %-12s calls %ld  %.4f ms\n", t[i].name, t[i].calls, t[i].ms);
    const zy_op_time *mm = find_op(t, n, "matmul"), *ad = find_op(t, n, "add_act");
    assert_non_null(mm);
    assert_non_null(ad);
    assert_int_equal(mm->calls, 2);
    assert_int_equal(ad->calls, 1);
    assert_true(mm->ms >= 0.0 && ad->ms >= 0.0);
    oh_run_end(r);
}

/* ---- bandwidth (printed, not asserted) ---- */

/* Average ms per call of op `name` over the profiler's record. */
static double prof_ms(zy_ctx *gpu, const char *name) {
    zy_op_time t[32];
    int n = ops_prof_read(gpu, t, 32);
    const zy_op_time *e = find_op(t, n, name);
    assert_non_null(e);
    return e->ms / (double)e->calls;
}

static void report(const char *name, const char *shape, double ms, double bytes) {
    printf("BENCH %-14s %-16s %8.1f us  %7.0f GB/s  (%.0f MB moved)\n", name, shape, ms * 1e3,
           bytes / (ms * 1e-3) / 1e9, bytes / 1e6);
}

static void test_bench(void **state) {
    (void)state;
    zy_ctx *gpu = oh_backend_ctx("cuda");
    if (!gpu) skip();
    if (getenv("ZY_SKIP_BENCH")) skip();
    oh_run *r = oh_run_begin(gpu);
    const int N = 16384, Dm = 1024, R = 256, IT = 20;
    size_t nd = (size_t)N * Dm, as = ops_act_size(gpu);
    float *x = oh_alloc(r, nd * 4), *h = oh_alloc(r, nd * 4), *out = oh_alloc(r, nd * 4);
    float *dh = oh_alloc(r, nd * 4), *rstd = oh_alloc(r, (size_t)N * 4), *vec[8];
    zy_act *y = oh_alloc(r, nd * as), *o = oh_alloc(r, nd * as), *d_o = oh_alloc(r, nd * as);
    for (int k = 0; k < 8; k++) {
        vec[k] = oh_alloc(r, (size_t)Dm * 4);
        ops_fill(gpu, vec[k], 1.0f, Dm);
    }
    ops_fill(gpu, x, 0.5f, nd);
    ops_fill(gpu, h, 0.25f, nd);
    ops_cast_to_act(gpu, o, h, nd);
    ops_fill(gpu, dh, 0.125f, nd); /* the incoming dout */
    char shape[32];
    snprintf(shape, sizeof shape, "N=%d D=%d", N, Dm);
    for (int pass = 0; pass < 2; pass++) { /* pass 0 warms up (plans, workspace growth) */
        gpu->prof = 1;
        ops_prof_reset(gpu);
        int it = pass ? IT : 2;
        for (int i = 0; i < it; i++)
            ops_rmsnorm_fwd(gpu, y, rstd, x, ZY_DTYPE_F32, vec[0], N, Dm, RMS_EPS);
        for (int i = 0; i < it; i++)
            ops_resscale_fwd(gpu, out, o, h, vec[0], vec[1], vec[2], vec[3], N, Dm);
        for (int i = 0; i < it; i++) /* dh aliases dout, as the model may call it */
            ops_resscale_bwd(gpu, d_o, dh, vec[4], vec[5], vec[6], vec[7], dh, o, h, vec[0], vec[1],
                             vec[2], vec[3], N, Dm);
        for (int i = 0; i < it; i++) ops_add_act(gpu, y, o, nd);
        for (int i = 0; i < it; i++) ops_bias_bwd(gpu, vec[4], y, N, R);
        ops_sync(gpu);
    }
    report("rmsnorm_fwd", shape, prof_ms(gpu, "rmsnorm_fwd"), nd * (4.0 + 2.0) + N * 4.0);
    report("resscale_fwd", shape, prof_ms(gpu, "resscale_fwd"), nd * (2.0 + 4.0 + 4.0));
    report("resscale_bwd", shape, prof_ms(gpu, "resscale_bwd"), nd * (4.0 + 2.0 + 4.0 + 2.0 + 4.0));
    report("add_act", shape, prof_ms(gpu, "add_act"), nd * 6.0);
    snprintf(shape, sizeof shape, "N=%d C=%d", N, R);
    report("bias_bwd", shape, prof_ms(gpu, "bias_bwd"), (double)N * R * 2.0);
    gpu->prof = 0;
    oh_run_end(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_profiler),
        cmocka_unit_test(test_bench),
    };
    return cmocka_run_group_tests(tests, NULL, oh_teardown);
}
