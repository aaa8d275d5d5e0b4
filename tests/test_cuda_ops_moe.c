/* GPU-only timing of dispatch + gather + combine (and their backward) at N=16384, E=16, D=1024
 * (printed, not asserted). Every comparison of a router, MoE or EDA op with its CPU op is a case of
 * tests/op_cases_moe.c (the blocked expert GEMMs: its "cuda+chunk" backend). Skipped without a
 * GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "op_harness.h"

#include "base/timer.h"

#include <stdio.h>
#include <string.h>

#ifdef ZY_HAVE_CUDA
/* cudart maps memory in ASan's shadow gap; ASan must leave the gap unprotected (SAN=1 builds). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
    return "protect_shadow_gap=0";
}
#endif

/* ---- timing (printed, not asserted) ---- */

static void test_timing(void **state) {
    (void)state;
    zy_ctx *gpu = oh_backend_ctx("cuda");
    if (!gpu) skip();
    oh_run *r = oh_run_begin(gpu);
    const int N = 16384, E = 16, D = 1024, iters = 20;
    size_t nd = (size_t)N * D;
    int32_t *choice = oh_ints(r, N, 0);
    for (int n = 0; n < N; n++) choice[n] = (int32_t)zy_rng_below(oh_rng(), (uint64_t)E + 1);
    int32_t *dchoice = oh_i32(r, choice, N), *dcnt = oh_alloc(r, E * 4);
    int32_t *doff = oh_alloc(r, (E + 1) * 4), *dperm = oh_alloc(r, (size_t)N * 4);
    int32_t offh[16 + 1]; /* E + 1 */
    size_t ab = nd * ops_act_size(gpu);
    zy_act *x = oh_act(r, oh_randn(r, nd, 1.0f), nd), *xs = oh_alloc(r, ab), *y = oh_alloc(r, ab);
    zy_act *dys = oh_alloc(r, ab), *dx = oh_alloc(r, ab);
    float *gate = oh_f32(r, oh_randu(r, N, 0.0f, 1.0f), N), *dgate = oh_alloc(r, (size_t)N * 4);
    int routed = 0;
    double wall[2] = {0, 0};
    for (int phase = 0; phase < 2; phase++) { /* 0: warm-up (workspace growth, first launches) */
        if (phase == 1) {
            ops_prof_reset(gpu);
            gpu->prof = 1;
        }
        int n_it = phase ? iters : 3;
        double t0 = zy_now();
        for (int it = 0; it < n_it; it++) {
            routed = ops_moe_dispatch(gpu, dcnt, doff, offh, dperm, dchoice, N, E);
            ops_gather_rows(gpu, xs, x, dperm, routed, D);
            ops_moe_combine(gpu, y, xs, gate, dperm, routed, N, D);
        }
        ops_sync(gpu);
        double t1 = zy_now();
        for (int it = 0; it < n_it; it++) {
            ops_moe_combine_bwd(gpu, dys, dgate, y, xs, gate, dperm, routed, N, D);
            ops_scatter_add_rows(gpu, dx, dys, dperm, routed, D);
        }
        ops_sync(gpu);
        wall[0] = (t1 - t0) / n_it;
        wall[1] = (zy_now() - t1) / n_it;
    }
    gpu->prof = 0;
    zy_op_time t[16];
    int nt = ops_prof_read(gpu, t, 16);
    double row = (double)D * ops_act_size(gpu); /* bytes of one activation row */
    printf("    timing N=%d E=%d D=%d, %d routed rows, mean of %d iterations:\n", N, E, D, routed,
           iters);
    for (int i = 0; i < nt; i++) {
        double us = t[i].ms * 1e3 / (double)t[i].calls, bytes = 0;
        if (!strcmp(t[i].name, "gather_rows")) bytes = 2.0 * routed * row;
        if (!strcmp(t[i].name, "moe_combine")) bytes = ((double)N + routed) * row;
        if (!strcmp(t[i].name, "moe_combine_bwd")) bytes = 3.0 * routed * row;
        if (!strcmp(t[i].name, "scatter_add_rows")) bytes = 3.0 * routed * row;
        printf("      %-18s %8.1f us device", t[i].name, us);
        if (bytes > 0) printf("  (%.0f GB/s of row traffic)", bytes / (us * 1e-6) / 1e9);
        printf("\n");
    }
    printf("      wall per iteration: dispatch+gather+combine %.1f us (dispatch waits for the host "
           "copy), combine_bwd+scatter_add %.1f us\n",
           wall[0] * 1e6, wall[1] * 1e6);
    oh_run_end(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_timing)};
    return cmocka_run_group_tests(tests, NULL, oh_teardown);
}
