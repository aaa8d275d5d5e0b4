/* GPU tests of ops/cuda/syrk.h (every test skips without a GPU the kernel runs on): the batched
 * bf16 SYRK D = alpha X X^T + beta C against the CPU ops_matmul of the same bf16 inputs, element
 * by element (bf16 rounding of the fp32 result, 2^-8 relative, plus accumulation-order slack of
 * 1e-5 of the matrix's largest |value|), on shapes with partial tiles in n and k, padded rows and
 * gaps between matrices, beta 0 (C poisoned with NaN, so reading it fails) and beta != 0, C
 * apart from D and C = D, with and without per-matrix factors (alpha a_b, beta b_b, + d_b on the
 * diagonal); C is symmetric, as syrk.h requires. The result must be exactly symmetric
 * (the mirrored stores) and every element outside the [n, n] matrices (row padding, gaps) must be
 * left as it was. Then the timing of Newton-Schulz's shapes against cuBLAS's whole product
 * (printed, not asserted). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#ifdef ZY_HAVE_CUDA
#include "gemm_test_util.h"
#include "ops/cuda/syrk.h"

static int supported;

static int setup_syrk(void **state) {
    int rc = setup(state);
    supported = ngpu && cuda_syrk_supported();
    if (ngpu && !supported) printf("cuda_syrk: this device or build has no sm_90a kernel\n");
    return rc;
}

/* One case: batch matrices X [n, k] (trans 0) or [k, n] (trans 1), rows ldx apart, sx apart,
 * into D [n, n] (ldd, sd); scaled: per-matrix factors a_b, b_b, d_b (syrk.h) too. */
static void check_case(int n, int k, int trans, long long ldx, long long sx, long long ldd,
                       long long sd, int batch, float alpha, float beta, int in_place, int scaled) {
    const int xr = trans ? k : n, xc = trans ? n : k; /* X as stored */
    const size_t nx = (size_t)sx * batch, nd = (size_t)sd * batch;
    float *X = rand_vals(nx, CUDA_GEMM_BF16), *C0 = rand_vals(nd, CUDA_GEMM_BF16);
    for (int b = 0; b < batch; b++) /* C symmetric (syrk.h); the rest of C0 is the sentinel */
        for (int r = 0; r < n; r++)
            for (int c = r + 1; c < n; c++)
                C0[(size_t)b * sd + (size_t)r * ldd + c] = C0[(size_t)b * sd + (size_t)c * ldd + r];
    void *dX = upload(X, nx, CUDA_GEMM_BF16);
    /* D starts as C0 (the sentinel outside the matrices, and C itself when in place) */
    void *dD = upload(C0, nd, CUDA_GEMM_BF16);
    void *dC =
        in_place ? dD : (beta != 0 ? upload(C0, nd, CUDA_GEMM_BF16) : poisoned(nd, CUDA_GEMM_BF16));
    float *fac = malloc(3 * (size_t)batch * sizeof(float)); /* a_b | b_b | d_b */
    assert_non_null(fac);
    for (int b = 0; b < batch; b++)
        fac[b] = 0.5f + 0.25f * (float)(b % 7), fac[batch + b] = 1.0f - 0.1f * (float)(b % 5),
        fac[2 * batch + b] = 0.3f * (float)(b % 3 + 1);
    float *dfac = NULL;
    assert_int_equal(cudaMalloc((void **)&dfac, 3 * (size_t)batch * sizeof(float)), cudaSuccess);
    assert_int_equal(
        cudaMemcpy(dfac, fac, 3 * (size_t)batch * sizeof(float), cudaMemcpyHostToDevice),
        cudaSuccess);
    const cuda_syrk_scales per = {dfac, dfac + batch, dfac + 2 * batch};
    if (cuda_syrk_bf16(dD, dC, dX, n, k, trans, ldx, sx, ldd, sd, batch, alpha, beta,
                       scaled ? &per : NULL, NULL) != ZY_OK)
        fail_msg("cuda_syrk n=%d k=%d trans=%d batch=%d: %s", n, k, trans, batch, zy_errmsg());
    float *got = download(dD, nd, CUDA_GEMM_BF16);
    float *xb = malloc((size_t)n * k * sizeof(float)), *ref = malloc((size_t)n * n * sizeof(float));
    assert_non_null(xb);
    assert_non_null(ref);
    size_t outside = 0, bad = 0;
    double worst_rel = 0;
    int tile_bad[16][16] = {{0}}; /* wrong elements by [128 x 128] tile (first 16 x 16 tiles) */
    for (int b = 0; b < batch; b++) {
        for (int r = 0; r < xr; r++)
            for (int c = 0; c < xc; c++)
                xb[(size_t)r * xc + c] = X[(size_t)b * sx + (size_t)r * ldx + c];
        for (int r = 0; r < n; r++)
            for (int c = 0; c < n; c++)
                ref[(size_t)r * n + c] =
                    beta != 0 ? C0[(size_t)b * sd + (size_t)r * ldd + c] : 0.0f;
        const float fa = scaled ? alpha * fac[b] : alpha,
                    fb = scaled ? beta * fac[batch + b] : beta;
        ops_matmul(&cpu, ref, xb, xb, n, n, k, trans, !trans, fa, fb);
        if (scaled)
            for (int r = 0; r < n; r++) ref[(size_t)r * n + r] += fac[2 * batch + b];
        double *dref = malloc((size_t)n * n * sizeof(double));
        float *gb = malloc((size_t)n * n * sizeof(float));
        assert_non_null(dref);
        assert_non_null(gb);
        for (int r = 0; r < n; r++)
            for (int c = 0; c < n; c++) {
                dref[(size_t)r * n + c] = ref[(size_t)r * n + c];
                gb[(size_t)r * n + c] = got[(size_t)b * sd + (size_t)r * ldd + c];
            }
        const double rel = rel_l2(gb, dref, (size_t)n * n);
        if (rel > worst_rel) worst_rel = rel;
        free(dref), free(gb);
        double big = 0;
        for (size_t i = 0; i < (size_t)n * n; i++) big = fmax(big, fabs(ref[i]));
        for (int r = 0; r < n; r++)
            for (int c = 0; c < n; c++) {
                const float gv = got[(size_t)b * sd + (size_t)r * ldd + c],
                            e = ref[(size_t)r * n + c];
                const float gt = got[(size_t)b * sd + (size_t)c * ldd + r];
                if (!(fabs(gv - e) <= ldexp(fabs(e), -8) + 1e-5 * big) ||
                    memcmp(&gv, &gt, 4) != 0) {
                    if (r / 128 < 16 && c / 128 < 16) tile_bad[r / 128][c / 128]++;
                    if (bad++ < 5)
                        printf("  n=%d k=%d b=%d [%d][%d]: got %.6g (mirror %.6g), want %.6g\n", n,
                               k, b, r, c, (double)gv, (double)gt, (double)e);
                }
            }
    }
    for (size_t i = 0; i < nd; i++) { /* outside every matrix: untouched */
        const size_t b = i / (size_t)sd, o = i % (size_t)sd, r = o / (size_t)ldd,
                     c = o % (size_t)ldd;
        if ((b < (size_t)batch && r < (size_t)n && c < (size_t)n)) continue;
        if (memcmp(&got[i], &C0[i], 4) != 0) outside++;
    }
    if (bad) { /* where they are, to tell a pipeline fault from an epilogue one */
        const int nt = (n + 127) / 128 < 16 ? (n + 127) / 128 : 16;
        for (int ti = 0; ti < nt; ti++) {
            printf("  tile row %2d:", ti);
            for (int tj = 0; tj < nt; tj++) printf(" %5d", tile_bad[ti][tj]);
            printf("\n");
        }
    }
    check_err(worst_rel, 0, "syrk n=%d k=%d trans=%d batch=%d beta=%g", n, k, trans, batch,
              (double)beta);
    if (bad || outside)
        fail_msg("cuda_syrk n=%d k=%d trans=%d ldx=%lld ldd=%lld batch=%d beta=%g%s: %zu wrong or "
                 "asymmetric elements, %zu written outside the matrices",
                 n, k, trans, ldx, ldd, batch, (double)beta, in_place ? " (C = D)" : "", bad,
                 outside);
    free(X), free(C0), free(got), free(xb), free(ref), free(fac);
    cudaFree(dfac);
    cudaFree(dX);
    if (!in_place) cudaFree(dC);
    cudaFree(dD);
}

static void test_syrk_shapes(void **state) {
    (void)state;
    if (!supported) skip();
    /* n, k, row pads, matrix gaps, batch */
    static const int cases[][5] = {
        {128, 64, 0, 0, 1},
        {128, 128, 0, 0, 1},
        {256, 64, 0, 0, 1},
        {1024, 1024, 0, 0, 3},
        {256, 2048, 8, 64, 2},
        {200, 72, 0, 8, 2},
        {8, 1, 8, 0, 1},
        {136, 130, 16, 16, 3},
        {384, 64, 0, 0, 5},
        /* more tiles than SMs: CTAs loop over tiles (ring phases, buffers reused, the two
         * warpgroups a tile apart when k is short) */
        {1024, 64, 0, 0, 8},
        {8, 1, 0, 0, 300},
        {200, 72, 8, 8, 60},
    };
    for (int trans = 0; trans < 2; trans++) /* X [n, k]; X [k, n] */
        for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
            const int n = cases[ci][0], k = cases[ci][1], pad = cases[ci][2], gap = cases[ci][3];
            const int batch = cases[ci][4], xr = trans ? k : n, xc = trans ? n : k;
            const long long ldx = ((xc + 7) / 8) * 8 + pad, ldd = n + pad;
            const long long sx = ldx * xr + gap, sd = ldd * n + gap;
            check_case(n, k, trans, ldx, sx, ldd, sd, batch, 1.0f, 0.0f, 0, 0);
            check_case(n, k, trans, ldx, sx, ldd, sd, batch, 2.0315f, -4.775f, 0, 0);
            check_case(n, k, trans, ldx, sx, ldd, sd, batch, 0.5f, 1.0f, 1, 0);
            check_case(n, k, trans, ldx, sx, ldd, sd, batch, 2.0315f, -4.775f, 0, 1);
            check_case(n, k, trans, ldx, sx, ldd, sd, batch, 1.0f, 0.0f, 0, 1);
        }
}

static void test_syrk_refuses(void **state) {
    (void)state;
    if (!supported) skip();
    void *d = NULL;
    assert_int_equal(cudaMalloc(&d, 1 << 20), cudaSuccess);
    /* n not a multiple of 8, ldx not, a misaligned pointer, k > ldx, beta without C, a
     * transposed X [k, n] whose n columns do not fit ldx */
    assert_int_equal(
        cuda_syrk_bf16(d, NULL, d, 12, 16, 0, 16, 16 * 12, 16, 16 * 12, 1, 1, 0, NULL, NULL),
        ZY_ERR);
    assert_int_equal(
        cuda_syrk_bf16(d, NULL, d, 16, 16, 0, 20, 20 * 16, 16, 256, 1, 1, 0, NULL, NULL), ZY_ERR);
    assert_int_equal(
        cuda_syrk_bf16((char *)d + 2, NULL, d, 16, 16, 0, 16, 256, 16, 256, 1, 1, 0, NULL, NULL),
        ZY_ERR);
    assert_int_equal(cuda_syrk_bf16(d, NULL, d, 16, 24, 0, 16, 256, 16, 256, 1, 1, 0, NULL, NULL),
                     ZY_ERR);
    assert_int_equal(
        cuda_syrk_bf16(d, NULL, d, 16, 16, 0, 16, 256, 16, 256, 1, 1, 1.0f, NULL, NULL), ZY_ERR);
    assert_int_equal(cuda_syrk_bf16(d, NULL, d, 32, 8, 1, 16, 512, 32, 1024, 1, 1, 0, NULL, NULL),
                     ZY_ERR);
    assert_int_equal(cuda_syrk_bf16(d, NULL, d, 32, 8, 1, 32, 256, 32, 1024, 1, 1, 0, NULL, NULL),
                     ZY_OK);
    cudaFree(d);
}

/* Newton-Schulz's products on bench-small's and bench-base's expert shapes: the SYRK against
 * cuBLAS's whole product (bf16 out): per call, the median of 10 windows of 8 calls queued back to
 * back (as Newton-Schulz issues them; a lone call's time would include its host-side launch). */
static void test_syrk_timing(void **state) {
    (void)state;
    if (!supported || getenv("ZAYAC_NO_BENCH")) skip();
    /* n, k, batch, beta != 0 (B = c A A + b A), trans (A = X^T X of a tall X) */
    static const int shapes[][5] = {{1024, 1024, 16, 0, 0}, {1024, 1024, 16, 1, 0},
                                    {1024, 2048, 16, 0, 0}, {1024, 2048, 16, 0, 1},
                                    {2048, 2048, 16, 0, 0}, {2048, 2048, 16, 1, 0},
                                    {2048, 4096, 16, 0, 0}, {2048, 4096, 16, 0, 1}};
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    printf("%-26s %10s %10s %8s %14s\n", "n x k x batch", "cuBLAS ms", "SYRK ms", "ratio",
           "SYRK TFLOP/s*");
    for (int si = 0; si < (int)(sizeof shapes / sizeof shapes[0]); si++) {
        const int n = shapes[si][0], k = shapes[si][1], batch = shapes[si][2];
        const float alpha = shapes[si][3] ? 2.0315f : 1.0f, beta = shapes[si][3] ? -4.775f : 0.0f;
        const int tr = shapes[si][4];
        const long long sx = (long long)n * k, sd = (long long)n * n;
        void *dX = NULL, *dD = NULL, *dC = NULL;
        assert_int_equal(cudaMalloc(&dX, (size_t)sx * batch * 2), cudaSuccess);
        assert_int_equal(cudaMalloc(&dD, (size_t)sd * batch * 2), cudaSuccess);
        assert_int_equal(cudaMalloc(&dC, (size_t)sd * batch * 2), cudaSuccess);
        cudaMemset(dX, 0x3c, (size_t)sx * batch * 2); /* 0x3c3c: ~0.0115, finite products */
        cudaMemset(dC, 0x3c, (size_t)sd * batch * 2); /* symmetric */
        cuda_gemm_desc gd = {.M = n,
                             .N = n,
                             .K = k,
                             .transA = tr,
                             .transB = !tr,
                             .alpha = alpha,
                             .beta = beta,
                             .dtype_ab = CUDA_GEMM_BF16,
                             .dtype_c = CUDA_GEMM_BF16,
                             .lda = tr ? n : k,
                             .ldb = tr ? n : k,
                             .ldc = n,
                             .batch = batch,
                             .stride_a = sx,
                             .stride_b = sx,
                             .stride_c = sd};
        float ms[2][10];
        for (int way = 0; way < 2; way++)
            for (int rep = -2; rep < 10; rep++) { /* 8 calls queued back to back per window */
                cudaEventRecord(e0, NULL);
                for (int q = 0; q < 8; q++) {
                    if (way == 0)
                        assert_int_equal(cuda_gemm_run(&g, &gd, dD, dC, dX, dX, NULL), ZY_OK);
                    else
                        assert_int_equal(cuda_syrk_bf16(dD, dC, dX, n, k, tr, tr ? n : k, sx, n, sd,
                                                        batch, alpha, beta, NULL, NULL),
                                         ZY_OK);
                }
                cudaEventRecord(e1, NULL);
                cudaEventSynchronize(e1);
                if (rep >= 0) cudaEventElapsedTime(&ms[way][rep], e0, e1);
                if (rep >= 0) ms[way][rep] /= 8;
            }
        float med[2];
        for (int way = 0; way < 2; way++) { /* insertion sort, median of 10 */
            for (int a = 1; a < 10; a++)
                for (int b = a; b > 0 && ms[way][b] < ms[way][b - 1]; b--) {
                    float t = ms[way][b];
                    ms[way][b] = ms[way][b - 1], ms[way][b - 1] = t;
                }
            med[way] = 0.5f * (ms[way][4] + ms[way][5]);
        }
        char name[48];
        snprintf(name, sizeof name, "%d x %d x %d%s%s", n, k, batch, tr ? " X^T X" : "",
                 beta != 0 ? " + beta C" : "");
        const double full = 2.0 * n * n * (double)k * batch;
        printf("%-26s %10.3f %10.3f %8.3f %14.0f\n", name, (double)med[0], (double)med[1],
               (double)(med[0] / med[1]), full / (med[1] * 1e-3) / 1e12);
        cudaFree(dX);
        cudaFree(dD);
        cudaFree(dC);
    }
    printf("(* the whole product's FLOPs over the SYRK's time)\n");
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_syrk_shapes),
        cmocka_unit_test(test_syrk_refuses),
        cmocka_unit_test(test_syrk_timing),
    };
    return cmocka_run_group_tests(tests, setup_syrk, teardown);
}
#else
#include "no_cuda_main.h"
#endif
