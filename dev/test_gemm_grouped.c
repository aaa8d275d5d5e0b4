/* GPU tests of the expert GEMM variants (dev/gemm_grouped.h; built by `make dev`, skipped
 * without a GPU): each implementation's forward, input gradient and weight gradient (overwrite
 * and accumulate) against per-expert ops_matmul on the same bf16-rounded inputs, experts with no
 * rows first, in the middle and last (their weight gradients exactly zero or untouched), the
 * chunked one with whole blocks and a rest; argument errors. Outputs are poisoned with NaN first.
 * Tolerances and helpers: tests/gemm_test_util.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "gemm_grouped.h"
#include "gemm_test_util.h"

/* Grouped: E = 6 experts with rows {0, 7, 0, 129, 64, 0} (empty first, middle and last). */
enum { GE = 6 };
static const int grows_small[GE] = {0, 7, 0, 129, 64, 0};
/* the chunked implementation: two full blocks and a rest, exactly one block */
static const int grows_chunked[GE] = {0, 7, 0, 2 * CUDA_GEMM_CHUNK_ROWS + 88, CUDA_GEMM_CHUNK_ROWS,
                                      0};

static void check_grouped(int N, int K, int combo, dev_grouped_impl impl) {
    cuda_gemm_dtype dab = combo_ab[combo], dc = combo_c[combo];
    const int *grows = impl == DEV_GROUPED_CHUNKED ? grows_chunked : grows_small;
    /* the padded layout gives every expert cap rows, zero past its own */
    const int cap = impl == DEV_GROUPED_PADDED ? 136 : 0;
    int off[GE + 1];
    off[0] = 0;
    for (int e = 0; e < GE; e++) off[e + 1] = cap ? (e + 1) * cap : off[e] + grows[e];
    int R = off[GE];
    size_t rk = (size_t)R * K, rn = (size_t)R * N, wn = (size_t)GE * N * K;
    float *X = rand_vals(rk, dab), *dY = rand_vals(rn, dab), *W = rand_vals(wn, dab);
    for (int e = 0; e < GE; e++) {
        size_t r0 = (size_t)off[e] + grows[e], r1 = (size_t)off[e + 1];
        memset(X + r0 * K, 0, (r1 - r0) * K * sizeof(float));
        memset(dY + r0 * N, 0, (r1 - r0) * N * sizeof(float));
    }
    float *dW0 = rand_vals(wn, dc);
    void *dX_in = upload(X, rk, dab), *ddY = upload(dY, rn, dab), *dWt = upload(W, wn, dab);
    const char *iname = impl == DEV_GROUPED_LOOP     ? "loop"
                        : impl == DEV_GROUPED_PADDED ? "padded"
                                                     : "chunked";
    double *ref = malloc((wn > rn ? (wn > rk ? wn : rk) : (rn > rk ? rn : rk)) * sizeof(double));
    float *tmp = malloc((wn > rn ? (wn > rk ? wn : rk) : (rn > rk ? rn : rk)) * sizeof(float));
    assert_non_null(ref);
    assert_non_null(tmp);

    /* forward: Y[rows of e] = X[rows of e] W[e]^T */
    void *dYo = poisoned(rn, dc);
    if (dev_gemm_grouped(&g, CUDA_GEMM_EXPERT_FWD, dYo, dX_in, dWt, off, GE, N, K, 0.0f, dab, dc,
                         impl, NULL) != ZY_OK)
        fail_msg("grouped fwd %s: %s", iname, zy_errmsg());
    float *got = download(dYo, rn, dc);
    memset(tmp, 0, rn * sizeof(float)); /* padding rows: 0 = zero rows times W */
    for (int e = 0; e < GE; e++)
        if (grows[e])
            ops_matmul(&cpu, tmp + (size_t)off[e] * N, X + (size_t)off[e] * K,
                       W + (size_t)e * N * K, grows[e], N, K, 0, 1, 1.0f, 0.0f);
    for (size_t i = 0; i < rn; i++) ref[i] = tmp[i];
    check_err(rel_l2(got, ref, rn), combo, "grouped fwd %s N=%d K=%d", iname, N, K);
    free(got);
    cudaFree(dYo);

    /* input gradient: dX[rows of e] = dY[rows of e] W[e] */
    void *dXo = poisoned(rk, dc);
    if (dev_gemm_grouped(&g, CUDA_GEMM_EXPERT_BWD_DATA, dXo, ddY, dWt, off, GE, N, K, 0.0f, dab, dc,
                         impl, NULL) != ZY_OK)
        fail_msg("grouped bwd_data %s: %s", iname, zy_errmsg());
    got = download(dXo, rk, dc);
    memset(tmp, 0, rk * sizeof(float));
    for (int e = 0; e < GE; e++)
        if (grows[e])
            ops_matmul(&cpu, tmp + (size_t)off[e] * K, dY + (size_t)off[e] * N,
                       W + (size_t)e * N * K, grows[e], K, N, 0, 0, 1.0f, 0.0f);
    for (size_t i = 0; i < rk; i++) ref[i] = tmp[i];
    check_err(rel_l2(got, ref, rk), combo, "grouped bwd_data %s N=%d K=%d", iname, N, K);
    free(got);
    cudaFree(dXo);

    /* weight gradient, overwrite (empty experts become 0) and accumulate (they keep dW0) */
    for (int bi = 0; bi < 2; bi++) {
        void *ddW = bi ? upload(dW0, wn, dc) : poisoned(wn, dc);
        if (dev_gemm_grouped(&g, CUDA_GEMM_EXPERT_BWD_WEIGHT, ddW, ddY, dX_in, off, GE, N, K,
                             (float)bi, dab, dc, impl, NULL) != ZY_OK)
            fail_msg("grouped bwd_weight %s beta=%d: %s", iname, bi, zy_errmsg());
        got = download(ddW, wn, dc);
        for (int e = 0; e < GE; e++) {
            float *t = tmp + (size_t)e * N * K;
            if (bi)
                memcpy(t, dW0 + (size_t)e * N * K, (size_t)N * K * sizeof(float));
            else
                memset(t, 0, (size_t)N * K * sizeof(float));
            if (grows[e])
                ops_matmul(&cpu, t, dY + (size_t)off[e] * N, X + (size_t)off[e] * K, N, K, grows[e],
                           1, 0, 1.0f, (float)bi);
        }
        for (size_t i = 0; i < wn; i++) ref[i] = tmp[i];
        check_err(rel_l2(got, ref, wn), combo, "grouped bwd_weight %s beta=%d N=%d K=%d", iname, bi,
                  N, K);
        /* empty experts exactly: zeros, or untouched */
        for (int e = 0; e < GE; e++)
            if (!grows[e])
                for (size_t i = (size_t)e * N * K; i < (size_t)(e + 1) * N * K; i++)
                    if (got[i] != (bi ? dW0[i] : 0.0f))
                        fail_msg("grouped bwd_weight %s beta=%d: empty expert %d element %zu is "
                                 "%g, expected %g",
                                 iname, bi, e, i - (size_t)e * N * K, (double)got[i],
                                 bi ? (double)dW0[i] : 0.0);
        free(got);
        cudaFree(ddW);
    }
    cudaFree(dX_in), cudaFree(ddY), cudaFree(dWt);
    free(X), free(dY), free(W), free(dW0), free(ref), free(tmp);
}

static void test_grouped(void **state) {
    (void)state;
    if (!ngpu) skip();
    static const int nk[3][2] = {{64, 129}, {129, 7}, {1000, 64}};
    for (int s = 0; s < 3; s++)
        for (int combo = 0; combo < 3; combo++) {
            check_grouped(nk[s][0], nk[s][1], combo, DEV_GROUPED_LOOP);
            check_grouped(nk[s][0], nk[s][1], combo, DEV_GROUPED_PADDED);
            check_grouped(nk[s][0], nk[s][1], combo, DEV_GROUPED_CHUNKED);
        }
}

/* Impossible arguments: one clear error each, nothing launched. */
static void test_grouped_bad_arguments(void **state) {
    (void)state;
    if (!ngpu) skip();
    void *d = poisoned(64, CUDA_GEMM_FP32);
    int bad_off[3] = {0, 5, 3};
    assert_int_equal(dev_gemm_grouped(&g, CUDA_GEMM_EXPERT_FWD, d, d, d, bad_off, 2, 4, 4, 0.0f,
                                      CUDA_GEMM_BF16, CUDA_GEMM_BF16, DEV_GROUPED_LOOP, NULL),
                     ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "offsets decrease"));
    int off[2] = {0, 2};
    assert_int_equal(dev_gemm_grouped(&g, CUDA_GEMM_EXPERT_BWD_WEIGHT, d, d, d, off, 1, 4, 4, 0.5f,
                                      CUDA_GEMM_BF16, CUDA_GEMM_BF16, DEV_GROUPED_LOOP, NULL),
                     ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "beta must be 0 or 1"));
    int uneven[4] = {0, 2, 3, 6}; /* rows 2, 1, 3: not e * cap */
    assert_int_equal(dev_gemm_grouped(&g, CUDA_GEMM_EXPERT_FWD, d, d, d, uneven, 3, 4, 4, 0.0f,
                                      CUDA_GEMM_BF16, CUDA_GEMM_BF16, DEV_GROUPED_PADDED, NULL),
                     ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "offsets e * cap"));
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    cudaFree(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grouped_bad_arguments),
        cmocka_unit_test(test_grouped),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
