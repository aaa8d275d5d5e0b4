/* GPU-only timing of the CCA ops at bench-small size (printed, not asserted): fwd/bwd milliseconds
 * and TFLOP/s of the grouped-conv GEMMs, and the QK norm + RoPE bandwidth. Set CCA_TEST_QUICK=1 to
 * skip it. Every comparison of a CCA op with its CPU op (and the conv backward's determinism) is a
 * case of tests/op_cases_cca.c. Skipped without a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "op_harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef ZY_HAVE_CUDA
/* cudart maps memory in ASan's shadow gap; ASan must leave the gap unprotected (SAN=1 builds). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
    return "protect_shadow_gap=0";
}
#endif

/* ---- timing at bench-small size (printed, not asserted) ---- */

/* ms per call of op `name` from the profiler's table (0 when absent). */
static double prof_ms(const zy_op_time *t, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(t[i].name, name) == 0) return t[i].calls ? t[i].ms / t[i].calls : 0;
    return 0;
}

static void test_timing(void **state) {
    (void)state;
    zy_ctx *gpu = oh_backend_ctx("cuda");
    if (!gpu) skip();
    const char *quick = getenv("CCA_TEST_QUICK");
    if (quick && *quick && strcmp(quick, "0") != 0) skip();
    const int B = 8, T = 2048, Hq = 8, Hk = 2, d = 128, t0 = 2, t1 = 2, rot = 64, iters = 20;
    const int C = (Hq + Hk) * d, N = B * T, Tm = T + t1 - 1;
    const size_t nx = (size_t)N * C, nq = (size_t)N * Hq * d, nk = (size_t)N * Hk * d;
    oh_run *r = oh_run_begin(gpu);
    float *h = oh_randu(r, nx, -0.5f, 0.5f); /* timing only */
    zy_act *qk0 = oh_act(r, h, nx), *dq = oh_act(r, h, nq), *dk = oh_act(r, h + nq, nk);
    zy_act *q = oh_alloc(r, nq * 2), *k = oh_alloc(r, nk * 2), *dqk0 = oh_alloc(r, nx * 2);
    zy_act *mid = oh_alloc(r, (size_t)B * Tm * C * 2), *qi = oh_alloc(r, nq * 2);
    zy_act *ki = oh_alloc(r, nk * 2);
    float *w1 = oh_f32(r, h, (size_t)C * t0), *b1 = oh_f32(r, h + 7, C);
    float *w2 = oh_f32(r, h + 11, (size_t)C * d * t1), *b2 = oh_f32(r, h + 13, C);
    float *dw1 = oh_alloc(r, (size_t)C * t0 * 4), *db1 = oh_alloc(r, C * 4);
    float *dw2 = oh_alloc(r, (size_t)C * d * t1 * 4), *db2 = oh_alloc(r, C * 4);
    float *qn = oh_alloc(r, (size_t)N * Hq * 4), *kn = oh_alloc(r, (size_t)N * Hk * 4);
    float *temp = oh_alloc(r, Hk * 4), *dtemp = oh_alloc(r, Hk * 4);
    ops_fill(gpu, temp, 1.0f, Hk);
    int32_t *hpos = oh_ints(r, N, 0);
    for (int n = 0; n < N; n++) hpos[n] = n % T;
    int32_t *pos = oh_i32(r, hpos, N);

    for (int it = 0; it <= iters; it++) {
        if (it == 1) { /* the first round grows the workspace */
            ops_sync(gpu);
            gpu->prof = 1;
            ops_prof_reset(gpu);
        }
        ops_cca_conv_fwd(gpu, qi, ki, mid, qk0, NULL, w1, b1, w2, b2, B, T, Hq, Hk, d, t0, t1);
        ops_qknorm_rope_fwd(gpu, q, k, qn, kn, qi, ki, temp, pos, N, Hq, Hk, d, rot, 1e4, 1e-6f);
        ops_qknorm_rope_bwd(gpu, dq, dk, dtemp, qi, ki, qn, kn, temp, pos, N, Hq, Hk, d, rot, 1e4,
                            1e-6f);
        ops_cca_conv_bwd(gpu, dqk0, dw1, db1, dw2, db2, dq, dk, qk0, mid, w1, w2, B, T, Hq, Hk, d,
                         t0, t1);
    }
    zy_op_time t[16];
    int n = ops_prof_read(gpu, t, 16);
    gpu->prof = 0;
    double fl = 2.0 * N * C * d * t1; /* grouped-conv GEMM flops of the forward */
    double f = prof_ms(t, n, "cca_conv_fwd"), b = prof_ms(t, n, "cca_conv_bwd");
    printf("  timing B=%d T=%d Hq=%d Hk=%d d=%d t0=%d t1=%d (%d iterations)\n", B, T, Hq, Hk, d, t0,
           t1, iters);
    printf("    cca_conv_fwd    %.3f ms  %.1f TFLOP/s (%.1f GFLOP)\n", f, fl / (f * 1e9), fl / 1e9);
    printf("    cca_conv_bwd    %.3f ms  %.1f TFLOP/s (%.1f GFLOP)\n", b, 2 * fl / (b * 1e9),
           2 * fl / 1e9);
    printf("    cca_conv fwd+bwd %.3f ms  %.1f TFLOP/s\n", f + b, 3 * fl / ((f + b) * 1e9));
    double qf = prof_ms(t, n, "qknorm_rope_fwd"), qb = prof_ms(t, n, "qknorm_rope_bwd");
    double qbytes = (double)(nq + nk) * 2;
    printf("    qknorm_rope_fwd %.3f ms  %.0f GB/s\n", qf, 2 * qbytes / (qf * 1e6));
    printf("    qknorm_rope_bwd %.3f ms  %.0f GB/s\n", qb, 3 * qbytes / (qb * 1e6));
    oh_run_end(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_timing)};
    return cmocka_run_group_tests(tests, NULL, oh_teardown);
}
