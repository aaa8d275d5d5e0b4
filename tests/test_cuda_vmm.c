/* Device memory given back in pieces (ops_alloc_releasable / ops_release_except, ops/cuda/vmm.cu)
 * and the model's sharded fp32 masters built on it (model_release_masters, model_set_weights):
 * the kept bytes survive the release bit for bit, the given-back ones return to the device's free
 * memory, and a model whose masters are sharded sets its kept masters and its whole compute copy
 * exactly as a whole model does. Skips without a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "model/config.h"
#include "model/model.h"
#include "ops/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ngpu;
static zy_ctx gpu;

static int setup(void **state) {
    (void)state;
    ngpu = ops_cuda_device_count();
    if (ngpu && ops_ctx_init_cuda(&gpu, 0) != ZY_OK) {
        fprintf(stderr, "ops_ctx_init_cuda: %s\n", zy_errmsg());
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    if (ngpu) ops_ctx_free(&gpu);
    return 0;
}

#define NEED_GPU()                                                                                 \
    do {                                                                                           \
        if (!ngpu) skip();                                                                         \
    } while (0)

static float pattern(size_t i) {
    return (float)(i % 1000003) * 0.5f + 1.0f;
}

/* 400 MB with three kept ranges (one at each end, one in the middle): the kept floats stay, at
 * most a granule either side of each range stays backed, and the rest is free memory again. */
static void test_release_keeps_ranges(void **state) {
    (void)state;
    NEED_GPU();
    const size_t n = 100000007, bytes = n * sizeof(float);
    const size_t keep_f[3][2] = {{0, 1000}, {50000000, 5}, {n - 777, 777}};
    size_t keep[3][2];
    for (int i = 0; i < 3; i++) keep[i][0] = keep_f[i][0] * 4, keep[i][1] = keep_f[i][1] * 4;
    float *h = malloc(bytes);
    for (size_t i = 0; i < n; i++) h[i] = pattern(i);
    const size_t free0 = ops_mem_available(&gpu);
    float *d = ops_alloc_releasable(&gpu, bytes);
    const size_t free1 = ops_mem_available(&gpu);
    ops_copy(&gpu, d, h, bytes);
    const size_t left = ops_release_except(&gpu, d, bytes, (const size_t(*)[2])keep, 3);
    const size_t free2 = ops_mem_available(&gpu);
    printf("400 MB releasable: %.1f MB taken, %.1f MB left backed, %.1f MB free again\n",
           (double)(free0 - free1) / 1e6, (double)left / 1e6, (double)(free2 - free1) / 1e6);
    assert_true(free0 - free1 >= bytes);       /* it was backed whole */
    assert_true(left >= 4 * (1000 + 5 + 777)); /* the kept bytes are */
    assert_true(left <= 6 * (4u << 20));       /* at most two granules of 2-4 MiB per range */
    assert_true(free2 - free1 + left >= bytes - (bytes >> 6)); /* the rest went back */
    memset(h, 0, bytes);
    for (int r = 0; r < 3; r++) { /* the kept floats, bit for bit */
        ops_copy(&gpu, h + keep_f[r][0], d + keep_f[r][0], keep_f[r][1] * sizeof(float));
        for (size_t i = keep_f[r][0]; i < keep_f[r][0] + keep_f[r][1]; i++)
            assert_true(h[i] == pattern(i));
    }
    /* releasing again with the same ranges gives nothing more back; freeing the rest works */
    assert_true(ops_release_except(&gpu, d, bytes, (const size_t(*)[2])keep, 3) == left);
    ops_free(&gpu, d);
    assert_true(ops_mem_available(&gpu) >= free0 - (free0 >> 6));
    free(h);
}

/* A model on the GPU with the masters of every other matrix given back: model_set_weights writes
 * the kept masters and the whole compute copy as it does on a whole model, and
 * model_sync_compute_weights recasts only the kept masters. */
static void test_model_sharded_masters(void **state) {
    (void)state;
    NEED_GPU();
    zy_config cfg;
    assert_int_equal(config_preset(&cfg, "tiny"), ZY_OK);
    zy_model whole, part;
    assert_int_equal(model_init(&whole, &cfg, &gpu, 1), ZY_OK);
    assert_int_equal(model_init(&part, &cfg, &gpu, 1), ZY_OK);
    const zy_param_table *t = &whole.table;
    unsigned char *keep = calloc((size_t)t->count, 1);
    int released = 0;
    for (int i = 0; i < t->count; i++) {
        keep[i] = t->items[i].kind != ZY_PARAM_MATRIX || i % 2;
        released += !keep[i];
    }
    assert_true(released > 0);
    model_release_masters(&part, keep);
    assert_non_null(part.kept);
    const size_t bytes = t->total * sizeof(float), half = ops_act_size(&gpu);
    float *h = malloc(bytes), *a = malloc(bytes), *b = malloc(bytes);
    for (size_t i = 0; i < t->total; i++) h[i] = pattern(i) * 1e-3f;
    model_set_weights(&whole, h);
    model_set_weights(&part, h);
    char *ca = malloc(t->total * half), *cb = malloc(t->total * half);
    ops_copy(&gpu, ca, whole.cparams, t->total * half);
    ops_copy(&gpu, cb, part.cparams, t->total * half);
    ops_copy(&gpu, a, whole.params, bytes);
    for (int i = 0; i < t->count; i++) {
        const zy_param *p = &t->items[i];
        assert_memory_equal(ca + p->offset * half, cb + p->offset * half, p->numel * half);
        if (!keep[i]) continue;
        ops_copy(&gpu, b + p->offset, part.params + p->offset, p->numel * sizeof(float));
        assert_memory_equal(a + p->offset, b + p->offset, p->numel * sizeof(float));
    }
    /* a changed kept master reaches the compute copy; nothing else moves */
    const zy_param *v = NULL;
    for (int i = 0; i < t->count && !v; i++)
        if (keep[i] && t->items[i].kind != ZY_PARAM_MATRIX) v = &t->items[i];
    const float x = 3.0f;
    ops_copy(&gpu, part.params + v->offset, &x, sizeof x);
    model_sync_compute_weights(&part);
    char *cc = malloc(t->total * half);
    ops_copy(&gpu, cc, part.cparams, t->total * half);
    assert_memory_not_equal(cc + v->offset * half, cb + v->offset * half, half);
    assert_memory_equal(cc, cb, v->offset * half);
    assert_memory_equal(cc + (v->offset + 1) * half, cb + (v->offset + 1) * half,
                        (t->total - v->offset - 1) * half);
    printf("tiny: %d of %d tensors' masters given back; %.2f of %.2f MB backed\n", released,
           t->count, (double)part.params_resident / 1e6, (double)bytes / 1e6);
    free(cc);
    free(ca);
    free(cb);
    free(h);
    free(a);
    free(b);
    free(keep);
    model_free(&whole);
    model_free(&part);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_release_keeps_ranges),
        cmocka_unit_test(test_model_sharded_masters),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
