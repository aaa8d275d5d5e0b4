/* Shared pieces of the GEMM tests (tests/test_cuda_gemm.c, dev/test_gemm_grouped.c): one
 * cuda_gemm_ctx set up per test program, random bf16-exact inputs, NaN-poisoned outputs, the
 * relative L2 error and the tolerance per type combination. Include after <cmocka.h>, in a file
 * built with CUDA. */
#ifndef ZY_TESTS_GEMM_TEST_UTIL_H
#define ZY_TESTS_GEMM_TEST_UTIL_H

#include "base/err.h"
#include "base/rng.h"
#include "io/safetensors.h" /* zy_f32_to_bf16, zy_bf16_to_f32 */
#include "ops/cuda/gemm.h"
#include "ops/ops.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL_BF16_OUT 1e-2 /* bf16 output: rounding of the output, 2^-9 per element */
#define TOL_FP32_OUT 2e-3 /* fp32 output of bf16 inputs: only accumulation order differs */
#define TOL_FP32     1e-5 /* the fp32 path (no TF32) against OpenBLAS sgemm */

static int ngpu;
static zy_rng rng;
static zy_ctx cpu = {.device = ZY_DEV_CPU, .num_threads = 0};
static cuda_gemm_ctx g;
static double worst[3]; /* per type combination: the largest error seen */

static const char *combo_name[3] = {"bf16->bf16", "bf16->fp32", "fp32->fp32"};
static const cuda_gemm_dtype combo_ab[3] = {CUDA_GEMM_BF16, CUDA_GEMM_BF16, CUDA_GEMM_FP32};
static const cuda_gemm_dtype combo_c[3] = {CUDA_GEMM_BF16, CUDA_GEMM_FP32, CUDA_GEMM_FP32};
static const double combo_tol[3] = {TOL_BF16_OUT, TOL_FP32_OUT, TOL_FP32};

static int setup(void **state) {
    (void)state;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    ngpu = n;
    rng = zy_rng_init(20261122, 4);
    if (ngpu && cuda_gemm_init(&g) != ZY_OK) {
        fprintf(stderr, "cuda_gemm_init: %s\n", zy_errmsg());
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    if (ngpu) {
        printf("worst relative L2 error: bf16->bf16 %.3g, bf16->fp32 %.3g, fp32 %.3g\n", worst[0],
               worst[1], worst[2]);
        printf("plan cache: %ld hits, %ld misses; %ld GEMMs through classic cuBLAS (cuBLASLt had "
               "no algorithm)\n",
               g.hits, g.misses, g.legacy);
        cuda_gemm_free(&g);
    }
    return 0;
}

/* n random values uniform in [-1, 1), rounded to bf16 when dt is bf16 (so the reference sees
 * exactly what the GPU sees). */
static float *rand_vals(size_t n, cuda_gemm_dtype dt) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) {
        float v = 2.0f * zy_rng_uniform(&rng) - 1.0f;
        p[i] = dt == CUDA_GEMM_BF16 ? zy_bf16_to_f32(zy_f32_to_bf16(v)) : v;
    }
    return p;
}

/* Device copy of host floats in type dt (exact: the values are already representable). */
static void *upload(const float *x, size_t n, cuda_gemm_dtype dt) {
    size_t bytes = (n ? n : 1) * (dt == CUDA_GEMM_BF16 ? 2 : 4);
    void *d = NULL;
    assert_int_equal(cudaMalloc(&d, bytes), cudaSuccess);
    if (dt == CUDA_GEMM_BF16) {
        uint16_t *h = malloc(bytes);
        assert_non_null(h);
        for (size_t i = 0; i < n; i++) h[i] = zy_f32_to_bf16(x[i]);
        assert_int_equal(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice), cudaSuccess);
        free(h);
    } else {
        assert_int_equal(cudaMemcpy(d, x, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    }
    return d;
}

/* n elements of type dt set to NaN (all bits set is a NaN in both types). */
static void *poisoned(size_t n, cuda_gemm_dtype dt) {
    size_t bytes = (n ? n : 1) * (dt == CUDA_GEMM_BF16 ? 2 : 4);
    void *d = NULL;
    assert_int_equal(cudaMalloc(&d, bytes), cudaSuccess);
    assert_int_equal(cudaMemset(d, 0xff, bytes), cudaSuccess);
    return d;
}

/* Waits for the GPU and fetches n elements of type dt as floats. */
static float *download(const void *d, size_t n, cuda_gemm_dtype dt) {
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    float *out = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(out);
    if (dt == CUDA_GEMM_BF16) {
        uint16_t *h = malloc((n ? n : 1) * 2);
        assert_non_null(h);
        assert_int_equal(cudaMemcpy(h, d, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
        for (size_t i = 0; i < n; i++) out[i] = zy_bf16_to_f32(h[i]);
        free(h);
    } else {
        assert_int_equal(cudaMemcpy(out, d, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return out;
}

/* Relative L2 error of got against ref (NaN in got gives NaN, which fails every bound). */
static double rel_l2(const float *got, const double *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    den = sqrt(den);
    return sqrt(num) / (den > 0 ? den : 1e-300);
}

/* Fails with the formatted description when err is not below the tolerance of combo. */
static void check_err(double err, int combo, const char *fmt, ...) {
    double *w = &worst[combo];
    double tol = combo_tol[combo];
    if (err > *w || err != err) *w = err;
    if (!(err < tol)) {
        char what[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof what, fmt, ap);
        va_end(ap);
        fail_msg("%s %s: relative L2 error %.3g, tolerance %.1g", combo_name[combo], what, err,
                 tol);
    }
}

#endif
