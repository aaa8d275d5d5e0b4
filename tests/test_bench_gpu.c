/* GPU tests of the benchmarks (skipped without a GPU): the membw kernels' results, cuBLASLt
 * outputs in every layout and type against a float64 reference on sampled elements, and the
 * collectives' correctness check on 1 GPU and, with two GPUs, on two ranks (threads) — including
 * a self-test that the check does count planted wrong elements. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "bench/coll.h"
#include "bench/gemm.h"
#include "bench/membw.h"
#include "bench/util.h"
#include "dist/launch.h"
#include "dist/rdv.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ngpu;

static int setup(void **state) {
    (void)state;
    if (bench_gpu_count(&ngpu) != ZY_OK) ngpu = 0;
    return 0;
}

static void test_membw_results(void **state) {
    (void)state;
    if (!ngpu) skip();
    bench_membw_opts o;
    bench_membw_opts_default(&o);
    o.min_bytes = 256 << 10;
    o.max_bytes = 8 << 20;
    o.host_min_bytes = 64 << 10;
    o.host_max_bytes = 1 << 20;
    o.target_ms = 1;
    bench_membw_result r;
    assert_int_equal(bench_membw_run(&o, 0, &r, NULL), ZY_OK);
    int device_rows = 0;
    for (int i = 0; i < r.nrows; i++) {
        assert_true(r.rows[i].gbps > 0);
        if (r.rows[i].kind <= MEMBW_MEMCPY) {
            assert_int_equal(r.rows[i].wrong, 0);
            device_rows++;
        }
    }
    assert_int_equal(device_rows, 4 * 6); /* 4 kinds x 256K..8M */
    bench_membw_result_free(&r);
}

static void test_gemm_layouts_and_types(void **state) {
    (void)state;
    if (!ngpu) skip();
    /* The repeated 512x512x4096 would overflow to inf within a few shapes if outputs were ever
     * read back as inputs (each generation grows by ~sqrt(K)). */
    const char *specs[] = {"257x129x65:xwt",  "64x96x1000:xw",    "300x200x17:xtw",
                           "512x512x512",     "33x4097x64:xwt",   "512x512x4096",
                           "512x512x4096:xw", "512x512x4096:xtw", "512x512x4096",
                           "512x512x4096:xw", "512x512x4096:xtw"};
    enum { NS = sizeof specs / sizeof specs[0] };
    bench_gemm_shape shapes[NS];
    for (int i = 0; i < NS; i++)
        assert_int_equal(bench_gemm_parse_shape(specs[i], &shapes[i]), ZY_OK);
    bench_gemm_opts o;
    bench_gemm_opts_default(&o);
    o.shapes = shapes;
    o.nshapes = NS;
    o.target_ms = 1;
    o.warmup_ms = 0;
    bench_gemm_result r;
    assert_int_equal(bench_gemm_run(&o, 0, &r, NULL), ZY_OK);
    assert_int_equal(r.nrows, 3 * NS); /* bf16, tf32, fp32 */
    double bf16_err = 0;
    for (int i = 0; i < r.nrows; i++) {
        if (r.rows[i].check_bad != 0)
            fail_msg("%s %s: %d samples outside tolerance (worst %.2f x tol)",
                     bench_dtype_name(r.rows[i].dtype), r.rows[i].s.label, r.rows[i].check_bad,
                     r.rows[i].check_err);
        assert_true(r.rows[i].tflops > 0);
        if (r.rows[i].dtype == BENCH_BF16 && r.rows[i].check_err > bf16_err)
            bf16_err = r.rows[i].check_err;
    }
    assert_true(bf16_err > 0); /* the reference differs by bf16 rounding: it compares something */
    bench_gemm_result_free(&r);
}

typedef struct {
    int rank, world, port, corrupt;
    int rc;
    char msg[1024];
    bench_coll_result res;
} coll_arg;

static void *coll_rank(void *p) {
    coll_arg *a = p;
    dist_rdv rdv;
    a->rc = dist_rdv_init(&rdv, a->rank, a->world, "127.0.0.1", a->port, 60);
    if (a->rc == ZY_OK) {
        bench_coll_opts o;
        bench_coll_opts_default(&o);
        o.min_bytes = 8;
        o.max_bytes = 4 << 20;
        o.factor = 4;
        o.warmup = 1;
        o.iters = 2;
        o.dtypes[0] = BENCH_BF16;
        o.dtypes[1] = BENCH_FP32;
        o.ndtypes = 2;
        o.timeout_s = 60;
        o.corrupt = a->corrupt;
        a->rc = bench_coll_run(&o, &rdv, a->rank % ngpu, &a->res, NULL, NULL, NULL);
        dist_rdv_free(&rdv);
    }
    snprintf(a->msg, sizeof a->msg, "%s", zy_errmsg());
    return NULL;
}

/* Runs the sweep on world ranks (threads, one GPU each) and checks every row's wrong count. */
static void coll_world(int world, int corrupt) {
    coll_arg a[2];
    pthread_t th[2];
    int port;
    assert_int_equal(dist_free_port(&port), ZY_OK);
    memset(a, 0, sizeof a);
    for (int r = 0; r < world; r++) {
        a[r].rank = r, a[r].world = world, a[r].port = port, a[r].corrupt = corrupt;
        pthread_create(&th[r], NULL, coll_rank, &a[r]);
    }
    for (int r = 0; r < world; r++) pthread_join(th[r], NULL);
    size_t *sizes;
    int nsizes;
    assert_int_equal(bench_sizes(8, 4 << 20, 4, &sizes, &nsizes), ZY_OK); /* as coll_rank */
    free(sizes);
    for (int r = 0; r < world; r++) {
        if (a[r].rc != ZY_OK) fail_msg("rank %d: %s", r, a[r].msg);
        /* types x collectives x sizes x placements */
        assert_int_equal(a[r].res.nrows, 2 * COLL_NKINDS * nsizes * 2);
        for (int i = 0; i < a[r].res.nrows; i++) {
            const bench_coll_row *w = &a[r].res.rows[i];
            /* planted: `corrupt` elements on every rank's output, summed over ranks */
            size_t recv = w->size_bytes / bench_dtype_size(w->dtype);
            if (w->coll == COLL_REDUCE_SCATTER) recv /= (size_t)world;
            size_t planted = recv < (size_t)corrupt ? recv : (size_t)corrupt;
            int64_t want = (int64_t)world * (int64_t)planted;
            if (w->coll == COLL_ALL_TO_ALL && w->inplace) want = -1; /* not defined: unchecked */
            if (w->wrong != want)
                fail_msg("rank %d: %s %s %s %zu B: %lld wrong, expected %lld", r,
                         bench_coll_name(w->coll), bench_dtype_name(w->dtype),
                         w->inplace ? "in-place" : "out-of-place", w->size_bytes,
                         (long long)w->wrong, (long long)want);
        }
        bench_coll_result_free(&a[r].res);
    }
}

static void test_collectives_one_gpu(void **state) {
    (void)state;
    if (!ngpu) skip();
    coll_world(1, 0);
    coll_world(1, 3);
}

static void test_collectives_two_gpus(void **state) {
    (void)state;
    if (ngpu < 2) skip();
    coll_world(2, 0);
    coll_world(2, 3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_membw_results),
        cmocka_unit_test(test_gemm_layouts_and_types),
        cmocka_unit_test(test_collectives_one_gpu),
        cmocka_unit_test(test_collectives_two_gpus),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
