/* Tests of the CUDA attention (ops/cuda/attention.h) that the op table of test_ops_backends
 * (tests/op_cases_attention.c: the shipped kernels against the CPU op on T off the tiles, T = 1,
 * Hq = Hk, windows, d = 16..128) cannot express: test_repeat runs the backward several times on
 * the same inputs and requires bitwise-identical dq, dk, dv (memcmp), on both dq paths (stored dS
 * tiles; recomputing, which the default takes past 1 GiB of tiles: T = 16384 at 8 heads);
 * test_bad_args checks the argument errors and the scratch sizes without a GPU. The kernel shapes
 * kept for tuning are tested in dev/test_attention_variants.c (make dev).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "io/safetensors.h" /* zy_f32_to_bf16, zy_bf16_to_f32 */
#include "base/rng.h"
#include "ops/ops.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef ZY_HAVE_CUDA
#include "ops/cuda/attention.h"

#include <cuda_runtime_api.h>

static zy_rng rng;

#include "attention_test_util.h"

typedef struct {
    int B, T, Hq, Hk, d, window;
} att_shape;

/* Runs the backward `runs` times on one set of inputs (outputs poisoned before each run) and
 * counts the dq, dk, dv elements whose bits differ from the first run's; prints the counts. */
static void repeat_case(const att_shape *c, int runs, size_t diff[3]) {
    const int B = c->B, T = c->T, Hq = c->Hq, Hk = c->Hk, d = c->d, W = c->window;
    const size_t nq = (size_t)B * T * Hq * d, nk = (size_t)B * T * Hk * d, nl = (size_t)B * Hq * T;
    const size_t n[3] = {nq, nk, nk};
    const float scale = 1.0f / sqrtf((float)d);
    uint16_t *bq, *bk, *bv, *bdo;
    float *q = rand_bf16(nq, 1.0f, &bq), *k = rand_bf16(nk, 1.0f, &bk);
    float *v = rand_bf16(nk, 1.0f, &bv), *dout = rand_bf16(nq, 1.0f, &bdo);
    void *gq, *gk, *gv, *gdo, *go, *gs, *g[3];
    float *gl;
    size_t sb = cuda_attention_bwd_scratch_bytes(B, T, Hq, d);
    CK(cudaMalloc(&gq, nq * 2));
    CK(cudaMalloc(&gk, nk * 2));
    CK(cudaMalloc(&gv, nk * 2));
    CK(cudaMalloc(&gdo, nq * 2));
    CK(cudaMalloc(&go, nq * 2));
    CK(cudaMalloc((void **)&gl, nl * sizeof(float)));
    CK(cudaMalloc(&gs, sb));
    for (int i = 0; i < 3; i++) CK(cudaMalloc(&g[i], n[i] * 2));
    CK(cudaMemcpy(gq, bq, nq * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(gk, bk, nk * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(gv, bv, nk * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(gdo, bdo, nq * 2, cudaMemcpyHostToDevice));
    int rc = cuda_attention_fwd(gq, gk, gv, go, gl, B, T, Hq, Hk, d, scale, W, 0);
    if (rc != ZY_OK) fail_msg("forward: %s", zy_errmsg());
    uint16_t *first[3], *cur = malloc(nq * 2);
    assert_non_null(cur);
    for (int i = 0; i < 3; i++) {
        first[i] = malloc(n[i] * 2);
        assert_non_null(first[i]);
        diff[i] = 0;
    }
    for (int r = 0; r < runs; r++) {
        for (int i = 0; i < 3; i++) CK(cudaMemset(g[i], 0xff, n[i] * 2));
        CK(cudaMemset(gs, 0xff, sb));
        rc = cuda_attention_bwd(gdo, gq, gk, gv, go, gl, g[0], g[1], g[2], gs, sb, B, T, Hq, Hk, d,
                                scale, W, 0);
        if (rc != ZY_OK) fail_msg("backward: %s", zy_errmsg());
        CK(cudaDeviceSynchronize());
        for (int i = 0; i < 3; i++) {
            uint16_t *dst = r == 0 ? first[i] : cur;
            CK(cudaMemcpy(dst, g[i], n[i] * 2, cudaMemcpyDeviceToHost));
            if (r > 0 && memcmp(first[i], cur, n[i] * 2) != 0)
                for (size_t e = 0; e < n[i]; e++) diff[i] += first[i][e] != cur[e];
        }
    }
    size_t nan = 0; /* never written (poisoned) or computed NaN */
    for (int i = 0; i < 3; i++)
        for (size_t e = 0; e < n[i]; e++) nan += (first[i][e] & 0x7fff) > 0x7f80;
    printf("    B=%d T=%-5d Hq=%d Hk=%d d=%-3d win=%-4d, %d runs: elements differing from run 1: "
           "dq %zu dk %zu dv %zu (of %zu, %zu, %zu); NaN %zu\n",
           B, T, Hq, Hk, d, W, runs, diff[0], diff[1], diff[2], nq, nk, nk, nan);
    fflush(stdout);
    void *dev[10] = {gq, gk, gv, gdo, go, gl, gs, g[0], g[1], g[2]};
    for (int i = 0; i < 10; i++) CK(cudaFree(dev[i]));
    void *host[12] = {q, k, v, dout, bq, bk, bv, bdo, cur, first[0], first[1], first[2]};
    for (int i = 0; i < 12; i++) free(host[i]);
    assert_int_equal(nan, 0);
}

/* Determinism: the backward gives bitwise-identical dq, dk, dv on every run (causal, a window,
 * GQA, every d; the last shape's dS tiles would take 2 GiB, so dq is recomputed). */
static void test_repeat(void **state) {
    (void)state;
    if (!have_gpu()) skip();
    static const att_shape cs[] = {
        {2, 1000, 8, 2, 128, 0}, {1, 700, 4, 1, 64, 200},  {2, 300, 4, 2, 32, 0},
        {1, 333, 4, 4, 16, 17},  {1, 16384, 8, 2, 128, 0},
    };
    for (size_t i = 0; i < sizeof(cs) / sizeof(cs[0]); i++) {
        size_t diff[3];
        repeat_case(&cs[i], 3, diff);
        assert_int_equal(diff[0], 0);
        assert_int_equal(diff[1], 0);
        assert_int_equal(diff[2], 0);
    }
}

/* Bad arguments are refused with a message naming the call, before touching the GPU. */
static void test_bad_args(void **state) {
    (void)state;
    static _Alignas(16) char buf[64]; /* never read: each call fails its checks first */
    char *p = buf;
    float *l = (float *)(buf + 32);
    assert_int_equal(cuda_attention_fwd(p, p, p, p, l, 1, 8, 8, 2, 96, 0.1f, 0, 0), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "head dim 96"));
    assert_int_equal(cuda_attention_fwd(p, p, p, p, l, 1, 8, 6, 4, 64, 0.1f, 0, 0), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "impossible shape"));
    assert_int_equal(cuda_attention_fwd(p, p, p, p, l, -1, 8, 8, 2, 64, 0.1f, 0, 0), ZY_ERR);
    assert_int_equal(cuda_attention_fwd(p, p, p, p, l, 1, 8, 8, 2, 64, NAN, 0, 0), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "not finite"));
    assert_int_equal(cuda_attention_fwd(p + 2, p, p, p, l, 1, 8, 8, 2, 64, 0.1f, 0, 0), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "16-byte aligned"));
    /* scratch: the row sums (rounded up to 256 bytes) and the dS tiles (one 64 x 64 bf16 tile per
     * sequence and query head at T = 8; 3 at T = 65); too small is refused */
    size_t need = cuda_attention_bwd_scratch_bytes(2, 8, 8, 64);
    assert_int_equal(need, 2 * 8 * 8 * sizeof(float) + 2 * 8 * 64 * 64 * 2);
    assert_int_equal(cuda_attention_bwd_scratch_bytes(1, 65, 1, 64), 512 + 3 * 64 * 64 * 2);
    /* tiles past 1 GiB (8 heads at T = 16384: 8 * 256 * 257 / 2 tiles of 8 KiB, about 2 GiB):
     * the default recomputes and needs only the row sums; at T = 8192 (0.5 GiB) it stores */
    assert_int_equal(cuda_attention_bwd_scratch_bytes(1, 16384, 8, 128),
                     (size_t)16384 * 8 * sizeof(float));
    assert_int_equal(cuda_attention_bwd_scratch_bytes(1, 8192, 8, 128),
                     (size_t)8192 * 8 * sizeof(float) + (size_t)8 * 128 * 129 / 2 * 8192);
    assert_int_equal(cuda_attention_bwd(p, p, p, p, p, l, p, p, p, p + 16, need - 16, 2, 8, 8, 2,
                                        64, 0.1f, 0, 0),
                     ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "scratch"));
    /* empty batches are a no-op */
    assert_int_equal(cuda_attention_fwd(p, p, p, p, l, 0, 8, 8, 2, 64, 0.1f, 0, 0), ZY_OK);
    assert_int_equal(
        cuda_attention_bwd(p, p, p, p, p, l, p, p, p, p, 0, 2, 0, 8, 2, 64, 0.1f, 0, 0), ZY_OK);
}

int main(void) {
    rng = zy_rng_init(20261122, 7);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_repeat),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#else /* no CUDA in this build: the whole file skips */

#include "no_cuda_main.h"

#endif
