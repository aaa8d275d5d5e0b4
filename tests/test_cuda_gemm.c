/* GPU tests of ops/cuda/gemm.h (every test skips without a GPU): cuda_gemm against the CPU
 * ops_matmul on the same bf16-rounded random inputs, for M, N, K in {1, 7, 64, 129, 1000}, all
 * four transpose combinations, beta 0 and 1, each epilogue (bias, tanh-GELU and the bias gradient
 * applied to the reference here in double), bf16 -> bf16, bf16 -> fp32 and the fp32 path; the
 * grouped expert GEMMs (both implementations, experts with no rows) against per-expert
 * ops_matmul; argument errors. Outputs are poisoned with NaN first, so an element the GPU never
 * writes fails. Error measure: relative L2, sqrt(sum (got - ref)^2 / sum ref^2).
 *
 * `test_cuda_gemm --time` instead prints the grouped-GEMM timing table (cuda_gemm_grouped_time). */
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
#include "ops/cuda/gemm.h"
#include <cuda_runtime.h>

#define TOL_BF16_OUT 1e-2 /* bf16 output: rounding of the output, 2^-9 per element */
#define TOL_FP32_OUT 2e-3 /* fp32 output of bf16 inputs: only accumulation order differs */
#define TOL_FP32     1e-5 /* the fp32 path (no TF32) against OpenBLAS sgemm */
/* GELU outputs in fp32: cuBLASLt does not document the accuracy of its tanh; a hardware
 * approximation (tanh.approx.f32, relative error ~2^-11) moves 0.5 x tanh(u) by up to 2^-11 of
 * itself, ~3.5e-4 of ||gelu|| in relative L2 at the worst, so the bound is that of bf16 -> fp32 and
 * the worst GELU error is printed apart. */
#define TOL_GELU_FP32 2e-3

static int ngpu;
static zy_rng rng;
static zy_ctx cpu = {.device = ZY_DEV_CPU, .num_threads = 0};
static cuda_gemm_ctx g;
static double worst[3];      /* per type combination: the largest error seen */
static double worst_gelu[3]; /* the same for GELU outputs alone */

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
        printf("worst relative L2 error: bf16->bf16 %.3g, bf16->fp32 %.3g, fp32 %.3g; GELU "
               "outputs: %.3g, %.3g, %.3g\n",
               worst[0], worst[1], worst[2], worst_gelu[0], worst_gelu[1], worst_gelu[2]);
        printf("plan cache: %ld hits, %ld misses; %ld GEMMs with our epilogue kernels (cuBLASLt "
               "had no fused one)\n",
               g.hits, g.misses, g.fallbacks);
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
/* ||got - ref|| / max(||ref||, floor): floor is the norm of the GELU's input for GELU outputs
 * (0 otherwise). GELU flattens large negative inputs to ~0, where a relative error of the output
 * alone measures nothing (float tanh gives exactly 0 where double gives -1e-14); the rounding of
 * the input passes through GELU with a slope of at most 1.13, so the input's norm is its scale. */
static double rel_l2_floor(const float *got, const double *ref, size_t n, double floor) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    den = fmax(sqrt(den), floor);
    return sqrt(num) / (den > 0 ? den : 1e-300);
}

static double rel_l2(const float *got, const double *ref, size_t n) {
    return rel_l2_floor(got, ref, n, 0.0);
}

/* Fails with the formatted description when err is not below the tolerance of combo (of GELU
 * outputs when gelu). */
static void check_err(double err, int combo, int gelu, const char *fmt, ...) {
    double *w = gelu ? &worst_gelu[combo] : &worst[combo];
    double tol = gelu && combo_c[combo] == CUDA_GEMM_FP32 ? TOL_GELU_FP32 : combo_tol[combo];
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

static double gelu_tanh(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

static const char *epi_name[4] = {"none", "bias", "gelu_bias", "bgrad"};

/* One shape in every transpose, beta, epilogue and type combination. */
static void check_shape(int M, int N, int K) {
    size_t mk = (size_t)M * K, kn = (size_t)K * N, mn = (size_t)M * N;
    int nb = M > N ? M : N;
    for (int combo = 0; combo < 3; combo++) {
        cuda_gemm_dtype dab = combo_ab[combo], dc = combo_c[combo];
        /* A is M*K values and B K*N whatever the transposes: the same random buffer serves as
         * A [M,K] or A [K,M]. */
        float *A = rand_vals(mk, dab), *B = rand_vals(kn, dab);
        float *C0 = rand_vals(mn, dc), *bias = rand_vals((size_t)nb, dc);
        void *dA = upload(A, mk, dab), *dB = upload(B, kn, dab), *dbias = upload(bias, nb, dc);
        float *ref = malloc(mn * sizeof(float));
        double *dref = malloc((mn > (size_t)nb ? mn : (size_t)nb) * sizeof(double));
        assert_non_null(ref);
        assert_non_null(dref);
        for (int t = 0; t < 4; t++) {
            int tA = t & 1, tB = t >> 1;
            for (int bi = 0; bi < 2; bi++) {
                float beta = (float)bi;
                for (int epi = 0; epi < 4; epi++) {
                    float alpha = epi == CUDA_GEMM_EPI_BGRAD ? 1.0f : 0.75f;
                    void *dC = bi ? upload(C0, mn, dc) : poisoned(mn, dc);
                    void *dgrad = epi == CUDA_GEMM_EPI_BGRAD ? poisoned((size_t)M, dc) : NULL;
                    void *b = epi == CUDA_GEMM_EPI_BGRAD ? dgrad : epi ? dbias : NULL;
                    int rc = cuda_gemm(&g, dC, dA, dB, M, N, K, tA, tB, alpha, beta, dab, dc,
                                       (cuda_gemm_epilogue)epi, b, NULL);
                    if (rc != ZY_OK)
                        fail_msg("cuda_gemm %s M=%d N=%d K=%d tA=%d tB=%d beta=%g %s: %s",
                                 combo_name[combo], M, N, K, tA, tB, (double)beta, epi_name[epi],
                                 zy_errmsg());
                    float *got = download(dC, mn, dc);
                    /* reference: fp32 ops_matmul, then the epilogue in double */
                    if (bi)
                        memcpy(ref, C0, mn * sizeof(float));
                    else
                        for (size_t i = 0; i < mn; i++) ref[i] = NAN; /* beta 0 ignores NaN */
                    ops_matmul(&cpu, ref, A, B, M, N, K, tA, tB, alpha, beta);
                    /* The error scale: || |product| + |bias| ||. Where cuBLASLt has no fused
                     * epilogue, the product is rounded to dtype_c before the bias is added, so
                     * its rounding error scales with |product|, not with |product + bias| (they
                     * can cancel: a single element with product 1 and bias -0.99). */
                    double scale2 = 0;
                    for (size_t i = 0; i < mn; i++) {
                        double v = ref[i], a = fabs(v);
                        if (epi == CUDA_GEMM_EPI_BIAS || epi == CUDA_GEMM_EPI_GELU_BIAS) {
                            v += bias[i % (size_t)N];
                            a += fabs(bias[i % (size_t)N]);
                        }
                        scale2 += a * a;
                        dref[i] = epi == CUDA_GEMM_EPI_GELU_BIAS ? gelu_tanh(v) : v;
                    }
                    int gelu = epi == CUDA_GEMM_EPI_GELU_BIAS;
                    int biased = gelu || epi == CUDA_GEMM_EPI_BIAS;
                    check_err(rel_l2_floor(got, dref, mn, biased ? sqrt(scale2) : 0.0), combo, gelu,
                              "C M=%d N=%d K=%d tA=%d tB=%d beta=%g %s", M, N, K, tA, tB,
                              (double)beta, epi_name[epi]);
                    free(got);
                    if (epi == CUDA_GEMM_EPI_BGRAD) { /* dbias[i] = sum_k op(A)[i,k] */
                        float *gb = download(dgrad, (size_t)M, dc);
                        for (int i = 0; i < M; i++) {
                            double s = 0;
                            for (int k = 0; k < K; k++)
                                s += A[tA ? (size_t)k * M + i : (size_t)i * K + k];
                            dref[i] = s;
                        }
                        check_err(rel_l2(gb, dref, (size_t)M), combo, 0,
                                  "bias gradient M=%d N=%d K=%d tA=%d tB=%d beta=%g", M, N, K, tA,
                                  tB, (double)beta);
                        free(gb);
                        cudaFree(dgrad);
                    }
                    cudaFree(dC);
                }
            }
        }
        cudaFree(dA);
        cudaFree(dB);
        cudaFree(dbias);
        free(A), free(B), free(C0), free(bias), free(ref), free(dref);
    }
}

static void test_gemm_shapes(void **state) {
    (void)state;
    if (!ngpu) skip();
    static const int sizes[5] = {1, 7, 64, 129, 1000};
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 5; j++)
            for (int k = 0; k < 5; k++) check_shape(sizes[i], sizes[j], sizes[k]);
}

/* The same GEMM twice reuses its plan, so does a size in the same bucket (row counts 33..64 share
 * one); a size in another bucket misses. */
static void test_plan_cache(void **state) {
    (void)state;
    if (!ngpu) skip();
    float *A = rand_vals(64 * 32, CUDA_GEMM_BF16), *B = rand_vals(32 * 48, CUDA_GEMM_BF16);
    void *dA = upload(A, 64 * 32, CUDA_GEMM_BF16), *dB = upload(B, 32 * 48, CUDA_GEMM_BF16);
    void *dC = poisoned(64 * 48, CUDA_GEMM_FP32);
    long h0 = g.hits, m0 = g.misses;
    for (int r = 0; r < 3; r++)
        assert_int_equal(cuda_gemm(&g, dC, dA, dB, 64, 48, 32, 0, 0, 1.0f, 0.0f, CUDA_GEMM_BF16,
                                   CUDA_GEMM_FP32, CUDA_GEMM_EPI_NONE, NULL, NULL),
                         ZY_OK);
    assert_int_equal(g.misses - m0, 1);
    assert_int_equal(g.hits - h0, 2);
    assert_int_equal(cuda_gemm(&g, dC, dA, dB, 48, 48, 32, 0, 0, 1.0f, 0.0f, CUDA_GEMM_BF16,
                               CUDA_GEMM_FP32, CUDA_GEMM_EPI_NONE, NULL, NULL),
                     ZY_OK);
    assert_int_equal(g.misses - m0, 1);
    assert_int_equal(g.hits - h0, 3);
    assert_int_equal(cuda_gemm(&g, dC, dA, dB, 48, 48, 20, 0, 0, 1.0f, 0.0f, CUDA_GEMM_BF16,
                               CUDA_GEMM_FP32, CUDA_GEMM_EPI_NONE, NULL, NULL),
                     ZY_OK); /* K = 20: another leading-dimension alignment: a new bucket plan (and
                              * an exact one if cuBLASLt refuses the bucket's algorithm for K=20) */
    assert_true(g.misses - m0 >= 2);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    cudaFree(dA), cudaFree(dB), cudaFree(dC);
    free(A), free(B);
}

/* Grouped: E = 6 experts with rows {0, 7, 0, 129, 64, 0} (empty first, middle and last). */
enum { GE = 6 };
static const int grows_small[GE] = {0, 7, 0, 129, 64, 0};
/* the chunked implementation: two full blocks and a rest, exactly one block */
static const int grows_chunked[GE] = {0, 7, 0, 2 * CUDA_GEMM_CHUNK_ROWS + 88, CUDA_GEMM_CHUNK_ROWS,
                                      0};

static void check_grouped(int N, int K, int combo, cuda_gemm_grouped_impl impl) {
    cuda_gemm_dtype dab = combo_ab[combo], dc = combo_c[combo];
    const int *grows = impl == CUDA_GEMM_GROUPED_CHUNKED ? grows_chunked : grows_small;
    /* the padded layout gives every expert cap rows, zero past its own */
    const int cap = impl == CUDA_GEMM_GROUPED_PADDED ? 136 : 0;
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
    const char *iname = impl == CUDA_GEMM_GROUPED_LOOP      ? "loop"
                        : impl == CUDA_GEMM_GROUPED_PADDED  ? "padded"
                        : impl == CUDA_GEMM_GROUPED_CHUNKED ? "chunked"
                                                            : "cublas";
    double *ref = malloc((wn > rn ? (wn > rk ? wn : rk) : (rn > rk ? rn : rk)) * sizeof(double));
    float *tmp = malloc((wn > rn ? (wn > rk ? wn : rk) : (rn > rk ? rn : rk)) * sizeof(float));
    assert_non_null(ref);
    assert_non_null(tmp);

    /* forward: Y[rows of e] = X[rows of e] W[e]^T */
    void *dYo = poisoned(rn, dc);
    if (cuda_gemm_grouped_fwd(&g, dYo, dX_in, dWt, off, GE, N, K, dab, dc, impl, NULL) != ZY_OK)
        fail_msg("grouped fwd %s: %s", iname, zy_errmsg());
    float *got = download(dYo, rn, dc);
    memset(tmp, 0, rn * sizeof(float)); /* padding rows: 0 = zero rows times W */
    for (int e = 0; e < GE; e++)
        if (grows[e])
            ops_matmul(&cpu, tmp + (size_t)off[e] * N, X + (size_t)off[e] * K,
                       W + (size_t)e * N * K, grows[e], N, K, 0, 1, 1.0f, 0.0f);
    for (size_t i = 0; i < rn; i++) ref[i] = tmp[i];
    check_err(rel_l2(got, ref, rn), combo, 0, "grouped fwd %s N=%d K=%d", iname, N, K);
    free(got);
    cudaFree(dYo);

    /* input gradient: dX[rows of e] = dY[rows of e] W[e] */
    void *dXo = poisoned(rk, dc);
    if (cuda_gemm_grouped_bwd_data(&g, dXo, ddY, dWt, off, GE, N, K, dab, dc, impl, NULL) != ZY_OK)
        fail_msg("grouped bwd_data %s: %s", iname, zy_errmsg());
    got = download(dXo, rk, dc);
    memset(tmp, 0, rk * sizeof(float));
    for (int e = 0; e < GE; e++)
        if (grows[e])
            ops_matmul(&cpu, tmp + (size_t)off[e] * K, dY + (size_t)off[e] * N,
                       W + (size_t)e * N * K, grows[e], K, N, 0, 0, 1.0f, 0.0f);
    for (size_t i = 0; i < rk; i++) ref[i] = tmp[i];
    check_err(rel_l2(got, ref, rk), combo, 0, "grouped bwd_data %s N=%d K=%d", iname, N, K);
    free(got);
    cudaFree(dXo);

    /* weight gradient, overwrite (empty experts become 0) and accumulate (they keep dW0) */
    for (int bi = 0; bi < 2; bi++) {
        void *ddW = bi ? upload(dW0, wn, dc) : poisoned(wn, dc);
        if (cuda_gemm_grouped_bwd_weight(&g, ddW, ddY, dX_in, off, GE, N, K, (float)bi, dab, dc,
                                         impl, NULL) != ZY_OK)
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
        check_err(rel_l2(got, ref, wn), combo, 0, "grouped bwd_weight %s beta=%d N=%d K=%d", iname,
                  bi, N, K);
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
            check_grouped(nk[s][0], nk[s][1], combo, CUDA_GEMM_GROUPED_LOOP);
            check_grouped(nk[s][0], nk[s][1], combo, CUDA_GEMM_GROUPED_PADDED);
            check_grouped(nk[s][0], nk[s][1], combo, CUDA_GEMM_GROUPED_CHUNKED);
            if (combo != 1) /* cublasGemmGroupedBatchedEx path: equal input and output types */
                check_grouped(nk[s][0], nk[s][1], combo, CUDA_GEMM_GROUPED_CUBLAS);
        }
}

/* Impossible arguments: one clear error each, nothing launched. */
static void test_bad_arguments(void **state) {
    (void)state;
    if (!ngpu) skip();
    void *d = poisoned(64, CUDA_GEMM_FP32);
    assert_int_equal(cuda_gemm(&g, d, d, d, -1, 4, 4, 0, 0, 1, 0, CUDA_GEMM_BF16, CUDA_GEMM_BF16,
                               CUDA_GEMM_EPI_NONE, NULL, NULL),
                     ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "negative"));
    assert_int_equal(cuda_gemm(&g, d, d, d, 4, 4, 4, 0, 0, 1, 0, CUDA_GEMM_FP32, CUDA_GEMM_BF16,
                               CUDA_GEMM_EPI_NONE, NULL, NULL),
                     ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "fp32 inputs"));
    assert_int_equal(cuda_gemm(&g, d, d, d, 4, 4, 4, 0, 0, 1, 0, CUDA_GEMM_BF16, CUDA_GEMM_BF16,
                               CUDA_GEMM_EPI_BIAS, NULL, NULL),
                     ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "bias pointer"));
    assert_int_equal(cuda_gemm(&g, d, d, d, 4, 4, 4, 1, 0, 0.5f, 0, CUDA_GEMM_BF16, CUDA_GEMM_FP32,
                               CUDA_GEMM_EPI_BGRAD, d, NULL),
                     ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "alpha = 1"));
    int bad_off[3] = {0, 5, 3};
    assert_int_equal(cuda_gemm_grouped_fwd(&g, d, d, d, bad_off, 2, 4, 4, CUDA_GEMM_BF16,
                                           CUDA_GEMM_BF16, CUDA_GEMM_GROUPED_LOOP, NULL),
                     ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "offsets decrease"));
    int off[2] = {0, 2};
    assert_int_equal(cuda_gemm_grouped_fwd(&g, d, d, d, off, 1, 4, 4, CUDA_GEMM_BF16,
                                           CUDA_GEMM_FP32, CUDA_GEMM_GROUPED_CUBLAS, NULL),
                     ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "equal input and output types"));
    assert_int_equal(cuda_gemm_grouped_bwd_weight(&g, d, d, d, off, 1, 4, 4, 0.5f, CUDA_GEMM_BF16,
                                                  CUDA_GEMM_BF16, CUDA_GEMM_GROUPED_LOOP, NULL),
                     ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "beta must be 0 or 1"));
    int uneven[4] = {0, 2, 3, 6}; /* rows 2, 1, 3: not e * cap */
    assert_int_equal(cuda_gemm_grouped_fwd(&g, d, d, d, uneven, 3, 4, 4, CUDA_GEMM_BF16,
                                           CUDA_GEMM_BF16, CUDA_GEMM_GROUPED_PADDED, NULL),
                     ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "offsets e * cap"));
    assert_int_equal(cuda_gemm_strided(&g, d, d, d, 4, 4, 4, 0, 0, 1, 0, CUDA_GEMM_BF16,
                                       CUDA_GEMM_BF16, 2, 16, 16, 8, NULL),
                     ZY_ERR); /* C's two [4 x 4] matrices 8 elements apart overlap */
    assert_non_null(strstr(zy_errmsg(), "overlap"));
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    cudaFree(d);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--time") == 0) {
        if (cuda_gemm_grouped_time(stdout) != ZY_OK) {
            fprintf(stderr, "%s\n", zy_errmsg());
            return 1;
        }
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_plan_cache),
        cmocka_unit_test(test_grouped),
        cmocka_unit_test(test_gemm_shapes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

#else /* built without CUDA: nothing to test */

static void test_no_cuda(void **state) {
    (void)state;
    skip();
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_no_cuda)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif
