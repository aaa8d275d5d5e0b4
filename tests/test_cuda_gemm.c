/* GPU tests of ops/cuda/gemm.h (every test skips without a GPU): cuda_gemm against the CPU
 * ops_matmul on the same bf16-rounded random inputs, for M, N, K in {1, 7, 64, 129, 1000}, all
 * four transpose combinations, beta 0 and 1, bf16 -> bf16, bf16 -> fp32 and the fp32 path;
 * cuda_gemm_run (strided batches over rows padded past their widths, gaps between matrices, D
 * apart from C) through cuBLASLt and through classic cuBLAS, C left untouched, the K = 0 product;
 * Muon's Newton-Schulz GEMMs through gemm.h bitwise equal to the direct cuBLASLt calls the
 * optimiser made before it used gemm.h (test_ns_same: the same algorithms and products); the plan
 * cache and cuda_gemm_prepare; argument errors. Outputs are poisoned with NaN first, so
 * an element the GPU never writes fails. Error measure: relative L2,
 * sqrt(sum (got - ref)^2 / sum ref^2). The expert GEMM variants are tested in
 * dev/test_gemm_grouped.c (make dev). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#ifdef ZY_HAVE_CUDA
#include "gemm_test_util.h"

/* the reference calls of test_ns_same; cuBLASLt's header declares one function without a
 * prototype */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h>
#pragma GCC diagnostic pop

/* One shape in every transpose, beta and type combination. */
static void check_shape(int M, int N, int K) {
    size_t mk = (size_t)M * K, kn = (size_t)K * N, mn = (size_t)M * N;
    for (int combo = 0; combo < 3; combo++) {
        cuda_gemm_dtype dab = combo_ab[combo], dc = combo_c[combo];
        /* A is M*K values and B K*N whatever the transposes: the same random buffer serves as
         * A [M,K] or A [K,M]. */
        float *A = rand_vals(mk, dab), *B = rand_vals(kn, dab), *C0 = rand_vals(mn, dc);
        void *dA = upload(A, mk, dab), *dB = upload(B, kn, dab);
        float *ref = malloc(mn * sizeof(float));
        double *dref = malloc(mn * sizeof(double));
        assert_non_null(ref);
        assert_non_null(dref);
        for (int t = 0; t < 4; t++) {
            int tA = t & 1, tB = t >> 1;
            for (int bi = 0; bi < 2; bi++) {
                float alpha = 0.75f, beta = (float)bi;
                void *dC = bi ? upload(C0, mn, dc) : poisoned(mn, dc);
                if (cuda_gemm(&g, dC, dA, dB, M, N, K, tA, tB, alpha, beta, dab, dc, NULL) != ZY_OK)
                    fail_msg("cuda_gemm %s M=%d N=%d K=%d tA=%d tB=%d beta=%g: %s",
                             combo_name[combo], M, N, K, tA, tB, (double)beta, zy_errmsg());
                float *got = download(dC, mn, dc);
                if (bi)
                    memcpy(ref, C0, mn * sizeof(float));
                else
                    for (size_t i = 0; i < mn; i++) ref[i] = NAN; /* beta 0 ignores NaN */
                ops_matmul(&cpu, ref, A, B, M, N, K, tA, tB, alpha, beta);
                for (size_t i = 0; i < mn; i++) dref[i] = ref[i];
                check_err(rel_l2(got, dref, mn), combo, "C M=%d N=%d K=%d tA=%d tB=%d beta=%g", M,
                          N, K, tA, tB, (double)beta);
                free(got);
                cudaFree(dC);
            }
        }
        cudaFree(dA);
        cudaFree(dB);
        free(A), free(B), free(C0), free(ref), free(dref);
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
                                   CUDA_GEMM_FP32, NULL),
                         ZY_OK);
    assert_int_equal(g.misses - m0, 1);
    assert_int_equal(g.hits - h0, 2);
    assert_int_equal(cuda_gemm(&g, dC, dA, dB, 48, 48, 32, 0, 0, 1.0f, 0.0f, CUDA_GEMM_BF16,
                               CUDA_GEMM_FP32, NULL),
                     ZY_OK);
    assert_int_equal(g.misses - m0, 1);
    assert_int_equal(g.hits - h0, 3);
    assert_int_equal(cuda_gemm(&g, dC, dA, dB, 48, 48, 20, 0, 0, 1.0f, 0.0f, CUDA_GEMM_BF16,
                               CUDA_GEMM_FP32, NULL),
                     ZY_OK); /* K = 20: another leading-dimension alignment: a new bucket plan (and
                              * an exact one if cuBLASLt refuses the bucket's algorithm for K=20) */
    assert_true(g.misses - m0 >= 2);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    cudaFree(dA), cudaFree(dB), cudaFree(dC);
    free(A), free(B);
}

/* The expert weight gradients' form, dW = A^T B with A [K, M] and B [K, N] (K: the expert's row
 * count, a new one every step): K is no operand's leading dimension, so K = 40..48 with every
 * power-of-two divisor share the bucket's one plan (before, each divisor made its own, and on
 * bench-small those keys overflowed the cache), and each result is still the CPU's. */
static void test_plan_cache_row_counts(void **state) {
    (void)state;
    if (!ngpu) skip();
    enum { M = 64, N = 48, KMAX = 48 };
    const int ks[5] = {40, 41, 42, 44, 48}; /* divisors 8, 1, 2, 4, 16; bucket 64 */
    float *A = rand_vals(KMAX * M, CUDA_GEMM_BF16), *B = rand_vals(KMAX * N, CUDA_GEMM_BF16);
    void *dA = upload(A, KMAX * M, CUDA_GEMM_BF16), *dB = upload(B, KMAX * N, CUDA_GEMM_BF16);
    float *ref = malloc(M * N * sizeof *ref);
    double *dref = malloc(M * N * sizeof *dref);
    const long m0 = g.misses;
    for (int i = 0; i < 5; i++) {
        void *dC = poisoned(M * N, CUDA_GEMM_FP32);
        assert_int_equal(cuda_gemm(&g, dC, dA, dB, M, N, ks[i], 1, 0, 1.0f, 0.0f, CUDA_GEMM_BF16,
                                   CUDA_GEMM_FP32, NULL),
                         ZY_OK);
        float *got = download(dC, M * N, CUDA_GEMM_FP32);
        ops_matmul(&cpu, ref, A, B, M, N, ks[i], 1, 0, 1.0f, 0.0f);
        for (int j = 0; j < M * N; j++) dref[j] = ref[j];
        check_err(rel_l2(got, dref, M * N), 1, "C M=%d N=%d K=%d tA=1", M, N, ks[i]);
        free(got);
        cudaFree(dC);
    }
    assert_int_equal(g.misses - m0, 1);
    cudaFree(dA), cudaFree(dB);
    free(A), free(B), free(ref), free(dref);
}

/* cuda_gemm_run on `batch` products whose rows are padded past their widths and whose matrices
 * have gaps between them, D apart from C (alpha 0.75, beta 0.5), against ops_matmul per matrix;
 * classic = 1 forces classic cuBLAS (C copied into D first). C must come back unchanged. */
static void check_run(int M, int N, int K, int tA, int tB, int combo, int classic) {
    enum { BATCH = 3 };
    const cuda_gemm_dtype dab = combo_ab[combo], dc = combo_c[combo];
    const int ra = tA ? K : M, wa = tA ? M : K; /* A stored [ra, wa] */
    const int rb = tB ? N : K, wb = tB ? K : N; /* B stored [rb, wb] */
    cuda_gemm_desc d;
    memset(&d, 0, sizeof d);
    d.M = M, d.N = N, d.K = K, d.transA = tA, d.transB = tB, d.alpha = 0.75f, d.beta = 0.5f;
    d.dtype_ab = dab, d.dtype_c = dc, d.classic = classic, d.batch = BATCH;
    d.lda = wa + 3, d.ldb = wb + 5, d.ldc = N + 2;
    d.stride_a = ra * d.lda + 7, d.stride_b = rb * d.ldb + 1, d.stride_c = M * d.ldc + 9;
    const size_t na = BATCH * d.stride_a, nb = BATCH * d.stride_b, nc = BATCH * d.stride_c;
    float *A = rand_vals(na, dab), *B = rand_vals(nb, dab), *C = rand_vals(nc, dc);
    void *dA = upload(A, na, dab), *dB = upload(B, nb, dab), *dC = upload(C, nc, dc);
    void *dD = poisoned(nc, dc);
    if (cuda_gemm_run(&g, &d, dD, dC, dA, dB, NULL) != ZY_OK)
        fail_msg("cuda_gemm_run %s M=%d N=%d K=%d tA=%d tB=%d classic=%d: %s", combo_name[combo], M,
                 N, K, tA, tB, classic, zy_errmsg());
    float *got = download(dD, nc, dc), *c_after = download(dC, nc, dc);
    for (size_t i = 0; i < nc; i++)
        if (c_after[i] != C[i]) fail_msg("cuda_gemm_run wrote C (element %zu)", i);
    float *ai = malloc((size_t)ra * wa * sizeof(float) + 1), *bi = malloc((size_t)rb * wb * 4 + 1);
    float *ci = malloc((size_t)M * N * sizeof(float) + 1), *gi = malloc((size_t)M * N * 4 + 1);
    double *ref = malloc((size_t)M * N * sizeof(double) + 1);
    assert_true(ai && bi && ci && gi && ref);
    for (int m = 0; m < BATCH; m++) { /* each matrix packed, then the CPU product */
        for (int r = 0; r < ra; r++)
            memcpy(ai + (size_t)r * wa, A + m * d.stride_a + r * d.lda, (size_t)wa * 4);
        for (int r = 0; r < rb; r++)
            memcpy(bi + (size_t)r * wb, B + m * d.stride_b + r * d.ldb, (size_t)wb * 4);
        for (int r = 0; r < M; r++) {
            memcpy(ci + (size_t)r * N, C + m * d.stride_c + r * d.ldc, (size_t)N * 4);
            memcpy(gi + (size_t)r * N, got + m * d.stride_c + r * d.ldc, (size_t)N * 4);
        }
        ops_matmul(&cpu, ci, ai, bi, M, N, K, tA, tB, d.alpha, d.beta);
        for (size_t i = 0; i < (size_t)M * N; i++) ref[i] = ci[i];
        check_err(rel_l2(gi, ref, (size_t)M * N), combo,
                  "cuda_gemm_run M=%d N=%d K=%d tA=%d tB=%d classic=%d matrix %d", M, N, K, tA, tB,
                  classic, m);
    }
    cudaFree(dA), cudaFree(dB), cudaFree(dC), cudaFree(dD);
    free(A), free(B), free(C), free(got), free(c_after), free(ai), free(bi), free(ci), free(gi);
    free(ref);
}

static void test_gemm_run(void **state) {
    (void)state;
    if (!ngpu) skip();
    static const int shapes[4][3] = {{7, 13, 5}, {64, 40, 129}, {1, 1, 1}, {130, 96, 64}};
    for (int s = 0; s < 4; s++)
        for (int t = 0; t < 4; t++)
            for (int combo = 0; combo < 3; combo++)
                for (int classic = 0; classic < 2; classic++)
                    check_run(shapes[s][0], shapes[s][1], shapes[s][2], t & 1, t >> 1, combo,
                              classic);
}

/* K = 0: D = beta C exactly (0.5 times a bf16 value is exact), C untouched, both matrices. */
static void test_gemm_run_k0(void **state) {
    (void)state;
    if (!ngpu) skip();
    cuda_gemm_desc d;
    memset(&d, 0, sizeof d);
    d.M = 5, d.N = 6, d.K = 0, d.alpha = 1.0f, d.beta = 0.5f, d.batch = 2, d.ldc = 8;
    d.dtype_ab = d.dtype_c = CUDA_GEMM_BF16, d.stride_c = 5 * 8 + 3;
    const size_t nc = 2 * d.stride_c;
    float *C = rand_vals(nc, CUDA_GEMM_BF16);
    void *dC = upload(C, nc, CUDA_GEMM_BF16), *dD = poisoned(nc, CUDA_GEMM_BF16);
    assert_int_equal(cuda_gemm_run(&g, &d, dD, dC, dC, dC, NULL), ZY_OK);
    float *got = download(dD, nc, CUDA_GEMM_BF16), *c_after = download(dC, nc, CUDA_GEMM_BF16);
    for (int m = 0; m < 2; m++)
        for (int r = 0; r < 5; r++)
            for (int col = 0; col < 6; col++) {
                size_t i = (size_t)(m * d.stride_c + r * d.ldc + col);
                if (got[i] != 0.5f * C[i])
                    fail_msg("K = 0: D[%d][%d][%d] = %g, expected %g", m, r, col, (double)got[i],
                             0.5 * C[i]);
            }
    assert_memory_equal(c_after, C, nc * sizeof(float));
    cudaFree(dC), cudaFree(dD);
    free(C), free(got), free(c_after);
}

/* cuda_gemm_prepare makes the plan a later cuda_gemm_run finds (a hit, no new miss). */
static void test_prepare(void **state) {
    (void)state;
    if (!ngpu) skip();
    cuda_gemm_desc d;
    memset(&d, 0, sizeof d);
    d.M = 24, d.N = 40, d.K = 56, d.alpha = 1.0f, d.batch = 4, d.lda = 64, d.ldb = 48, d.ldc = 48;
    d.dtype_ab = d.dtype_c = CUDA_GEMM_BF16;
    d.stride_a = 24 * 64, d.stride_b = 56 * 48, d.stride_c = 24 * 48;
    void *dA = poisoned(4 * 24 * 64, CUDA_GEMM_BF16), *dB = poisoned(4 * 56 * 48, CUDA_GEMM_BF16);
    void *dC = poisoned(4 * 24 * 48, CUDA_GEMM_BF16);
    long h0 = g.hits, m0 = g.misses;
    int lt = -1;
    assert_int_equal(cuda_gemm_prepare(&g, &d, dC, dC, dA, dB, &lt), ZY_OK);
    assert_true(lt == 0 || lt == 1);
    assert_int_equal(g.misses - m0, 1);
    assert_int_equal(cuda_gemm_run(&g, &d, dC, dC, dA, dB, NULL), ZY_OK);
    assert_int_equal(g.misses - m0, 1);
    assert_int_equal(g.hits - h0, 1);
    d.classic = 1; /* classic cuBLAS: no plan at all */
    assert_int_equal(cuda_gemm_prepare(&g, &d, dC, dC, dA, dB, &lt), ZY_OK);
    assert_int_equal(lt, 0);
    assert_int_equal(g.misses - m0, 1);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    cudaFree(dA), cudaFree(dB), cudaFree(dC);
}

/* ---- Newton-Schulz: the same bits as the optimiser's own cuBLASLt calls before gemm.h ---- */

#define NS_A 3.4445f /* the quintic's coefficients, as optim_cuda.cu's */
#define NS_B (-4.7750f)
#define NS_C 2.0315f

#define LT_OK(call) assert_int_equal((call), CUBLAS_STATUS_SUCCESS)

static long long round_up_ll(long long x, long long m) {
    return (x + m - 1) / m * m;
}

/* The heuristic's first algorithm for (desc, a, b, c = d) with the workspace cap and otherwise
 * default preferences, as optim_cuda.cu asked for it; 0 when cuBLASLt has none. */
static int ns_algo(cublasLtHandle_t lt, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                   cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatmulAlgo_t *algo) {
    cublasLtMatmulPreference_t pref;
    LT_OK(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = CUDA_GEMM_WORKSPACE;
    LT_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                               sizeof ws));
    cublasLtMatmulHeuristicResult_t h;
    int n = 0;
    if (cublasLtMatmulAlgoGetHeuristic(lt, d, a, b, c, c, pref, 1, &h, &n) != CUBLAS_STATUS_SUCCESS)
        n = 0;
    cublasLtMatmulPreferenceDestroy(pref);
    if (n > 0) *algo = h.algo;
    return n > 0;
}

/* One quintic step's three GEMMs on `count` [rows, cols] matrices (rows padded to 8 elements,
 * matrices 128 elements apart) twice: through cuda_gemm_run with the row-major descriptions
 * optim_cuda.cu uses, and through cuBLASLt directly with the column-major descriptors it built
 * before (X column-major [cols, rows]); every byte of the Gram matrices A and B and of the new
 * iterate must agree. A GEMM cuBLASLt has no algorithm for is not compared (classic cuBLAS runs
 * it in both). */
static void check_ns_same(int rows, int cols, int count) {
    const int tall = rows > cols, s = tall ? cols : rows, l = tall ? rows : cols;
    const long long ldx = round_up_ll(cols, 8), lds = round_up_ll(s, 8);
    const long long sx = round_up_ll(ldx * rows, 128), ss = round_up_ll(lds * s, 128);
    const size_t nx = (size_t)(count * sx), ns = (size_t)(count * ss);
    float *X = rand_vals(nx, CUDA_GEMM_BF16);
    for (size_t i = 0; i < nx; i++) X[i] *= 0.05f; /* entries of a unit-norm-ish matrix */
    void *x = upload(X, nx, CUDA_GEMM_BF16), *bufs[6];
    for (int i = 0; i < 6; i++) bufs[i] = poisoned(i % 3 == 2 ? nx : ns, CUDA_GEMM_BF16);
    void *ga = bufs[0], *gb = bufs[1], *y = bufs[2], *ga2 = bufs[3], *gb2 = bufs[4], *y2 = bufs[5];
    /* through gemm.h, as ns_descs in optim_cuda.cu */
    cuda_gemm_desc d[3];
    memset(d, 0, sizeof d);
    for (int i = 0; i < 3; i++)
        d[i].dtype_ab = d[i].dtype_c = CUDA_GEMM_BF16, d[i].batch = count, d[i].alpha = 1.0f;
    d[0].M = d[0].N = s, d[0].K = l, d[0].transA = tall, d[0].transB = !tall;
    d[0].lda = d[0].ldb = ldx, d[0].ldc = lds;
    d[0].stride_a = d[0].stride_b = sx, d[0].stride_c = ss;
    d[1].M = d[1].N = d[1].K = s, d[1].lda = d[1].ldb = d[1].ldc = lds;
    d[1].stride_a = d[1].stride_b = d[1].stride_c = ss, d[1].alpha = NS_C, d[1].beta = NS_B;
    if (tall) /* X' [l, s] = X B + a X */
        d[2].M = l, d[2].N = s, d[2].K = s, d[2].lda = ldx, d[2].ldb = lds, d[2].stride_a = sx,
        d[2].stride_b = ss;
    else /* X' [s, l] = B X + a X */
        d[2].M = s, d[2].N = l, d[2].K = s, d[2].lda = lds, d[2].ldb = ldx, d[2].stride_a = ss,
        d[2].stride_b = sx;
    d[2].ldc = ldx, d[2].stride_c = sx, d[2].beta = NS_A;
    assert_int_equal(cuda_gemm_run(&g, &d[0], ga, ga, x, x, NULL), ZY_OK);
    assert_int_equal(cuda_gemm_run(&g, &d[1], gb, ga, ga, ga, NULL), ZY_OK);
    assert_int_equal(cuda_gemm_run(&g, &d[2], y, x, tall ? x : gb, tall ? gb : x, NULL), ZY_OK);
    /* directly, as optim_cuda.cu's shape_build and ns_gemm did */
    cublasLtHandle_t lt = (cublasLtHandle_t)g.lt;
    const cublasOperation_t N = CUBLAS_OP_N, T = CUBLAS_OP_T;
    const cublasOperation_t ta = tall ? N : T, tb = tall ? T : N;
    cublasLtMatmulDesc_t gram, nn;
    LT_OK(cublasLtMatmulDescCreate(&gram, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT_OK(cublasLtMatmulDescSetAttribute(gram, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_OK(cublasLtMatmulDescSetAttribute(gram, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    LT_OK(cublasLtMatmulDescCreate(&nn, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT_OK(cublasLtMatmulDescSetAttribute(nn, CUBLASLT_MATMUL_DESC_TRANSA, &N, sizeof N));
    LT_OK(cublasLtMatmulDescSetAttribute(nn, CUBLASLT_MATMUL_DESC_TRANSB, &N, sizeof N));
    cublasLtMatrixLayout_t lx, ls;
    LT_OK(cublasLtMatrixLayoutCreate(&lx, CUDA_R_16BF, (uint64_t)cols, (uint64_t)rows, ldx));
    LT_OK(cublasLtMatrixLayoutCreate(&ls, CUDA_R_16BF, (uint64_t)s, (uint64_t)s, lds));
    const int32_t cnt = count;
    const int64_t strides[2] = {sx, ss};
    cublasLtMatrixLayout_t lays[2] = {lx, ls};
    for (int i = 0; i < 2; i++) {
        LT_OK(cublasLtMatrixLayoutSetAttribute(lays[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &cnt,
                                               sizeof cnt));
        LT_OK(cublasLtMatrixLayoutSetAttribute(lays[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                               &strides[i], sizeof strides[i]));
    }
    void *ws = NULL;
    assert_int_equal(cudaMalloc(&ws, CUDA_GEMM_WORKSPACE), cudaSuccess);
    cublasLtMatmulAlgo_t al[3];
    const int have[3] = {ns_algo(lt, gram, lx, lx, ls, &al[0]), ns_algo(lt, nn, ls, ls, ls, &al[1]),
                         ns_algo(lt, nn, tall ? ls : lx, tall ? lx : ls, lx, &al[2])};
    const float one = 1.0f, zero = 0.0f, c_ = NS_C, b_ = NS_B, a_ = NS_A;
    if (have[0])
        LT_OK(cublasLtMatmul(lt, gram, &one, x, lx, x, lx, &zero, ga2, ls, ga2, ls, &al[0], ws,
                             CUDA_GEMM_WORKSPACE, NULL));
    else
        assert_int_equal(cudaMemcpy(ga2, ga, ns * 2, cudaMemcpyDeviceToDevice), cudaSuccess);
    if (have[1])
        LT_OK(cublasLtMatmul(lt, nn, &c_, ga2, ls, ga2, ls, &b_, ga2, ls, gb2, ls, &al[1], ws,
                             CUDA_GEMM_WORKSPACE, NULL));
    else
        assert_int_equal(cudaMemcpy(gb2, gb, ns * 2, cudaMemcpyDeviceToDevice), cudaSuccess);
    if (have[2] && tall)
        LT_OK(cublasLtMatmul(lt, nn, &one, gb2, ls, x, lx, &a_, x, lx, y2, lx, &al[2], ws,
                             CUDA_GEMM_WORKSPACE, NULL));
    else if (have[2])
        LT_OK(cublasLtMatmul(lt, nn, &one, x, lx, gb2, ls, &a_, x, lx, y2, lx, &al[2], ws,
                             CUDA_GEMM_WORKSPACE, NULL));
    else
        assert_int_equal(cudaMemcpy(y2, y, nx * 2, cudaMemcpyDeviceToDevice), cudaSuccess);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    const char *name[3] = {"Gram A", "polynomial B", "iterate X'"};
    const size_t n[3] = {ns, ns, nx};
    for (int i = 0; i < 3; i++) {
        uint16_t *h1 = malloc(n[i] * 2), *h2 = malloc(n[i] * 2);
        assert_true(h1 && h2);
        assert_int_equal(cudaMemcpy(h1, bufs[i], n[i] * 2, cudaMemcpyDeviceToHost), cudaSuccess);
        assert_int_equal(cudaMemcpy(h2, bufs[i + 3], n[i] * 2, cudaMemcpyDeviceToHost),
                         cudaSuccess);
        if (memcmp(h1, h2, n[i] * 2) != 0)
            fail_msg("Newton-Schulz [%d x %d] x %d: %s differs from the direct cuBLASLt call", rows,
                     cols, count, name[i]);
        free(h1), free(h2);
    }
    printf("Newton-Schulz [%d x %d] x %d: bitwise equal (cuBLASLt algorithms: %d %d %d)\n", rows,
           cols, count, have[0], have[1], have[2]);
    cublasLtMatmulDescDestroy(gram), cublasLtMatmulDescDestroy(nn);
    cublasLtMatrixLayoutDestroy(lx), cublasLtMatrixLayoutDestroy(ls);
    cudaFree(ws), cudaFree(x);
    for (int i = 0; i < 6; i++) cudaFree(bufs[i]);
    free(X);
}

static void test_ns_same(void **state) {
    (void)state;
    if (!ngpu) skip();
    check_ns_same(64, 192, 3);    /* wide */
    check_ns_same(200, 72, 2);    /* tall */
    check_ns_same(33, 47, 1);     /* odd widths (padded rows), one matrix */
    check_ns_same(1, 40, 4);      /* a single row */
    check_ns_same(1024, 512, 16); /* an expert stack of bench-small's size */
}

/* Impossible arguments: one clear error each, nothing launched. */
static void test_bad_arguments(void **state) {
    (void)state;
    if (!ngpu) skip();
    void *d = poisoned(64, CUDA_GEMM_FP32);
    assert_int_equal(
        cuda_gemm(&g, d, d, d, -1, 4, 4, 0, 0, 1, 0, CUDA_GEMM_BF16, CUDA_GEMM_BF16, NULL), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "negative"));
    assert_int_equal(
        cuda_gemm(&g, d, d, d, 4, 4, 4, 0, 0, 1, 0, CUDA_GEMM_FP32, CUDA_GEMM_BF16, NULL), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "fp32 inputs"));
    cuda_gemm_desc s;
    memset(&s, 0, sizeof s);
    s.M = s.N = s.K = 4, s.alpha = 1, s.dtype_ab = s.dtype_c = CUDA_GEMM_BF16, s.batch = 2;
    s.stride_a = s.stride_b = 16, s.stride_c = 8;
    assert_int_equal(cuda_gemm_run(&g, &s, d, d, d, d, NULL), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "overlap")); /* C's [4 x 4] matrices 8 elements apart */
    s.ldc = 6, s.stride_c = 23; /* rows 6 apart: a matrix spans 3 * 6 + 4 = 22 elements */
    assert_int_equal(cuda_gemm_run(&g, &s, d, d, d, d, NULL), ZY_OK);
    s.stride_c = 21;
    assert_int_equal(cuda_gemm_run(&g, &s, d, d, d, d, NULL), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "overlap"));
    s.stride_c = 32, s.lda = 3; /* A [4, 4] rows 3 apart */
    assert_int_equal(cuda_gemm_run(&g, &s, d, d, d, d, NULL), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "leading dimension of A"));
    s.lda = 0, s.batch = 0;
    assert_int_equal(cuda_gemm_run(&g, &s, d, d, d, d, NULL), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "batch count"));
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    cudaFree(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_plan_cache),
        cmocka_unit_test(test_plan_cache_row_counts),
        cmocka_unit_test(test_prepare),
        cmocka_unit_test(test_gemm_run_k0),
        cmocka_unit_test(test_gemm_run),
        cmocka_unit_test(test_ns_same),
        cmocka_unit_test(test_gemm_shapes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

#else /* built without CUDA: nothing to test */

#include "no_cuda_main.h"
#endif
