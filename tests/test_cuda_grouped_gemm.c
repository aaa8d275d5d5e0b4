/* GPU tests of ops/cuda/grouped_gemm.h (every test skips without a GPU the kernel runs on): the
 * experts' forward GEMM with the offsets on the device, Y[r] = X[r] W_e^T, against a double
 * reference of the same bf16 inputs, element by element: bf16 rounding of the output (2^-8
 * relative) plus fp32 accumulation-order slack (the reduction's length times 2^-23 times the sum
 * of |x w| over it), for the forward (X W_e^T) and the input gradient (X W_e). Shapes
 * with empty experts, one-row experts, partial tiles in rows, N and K, and every expert empty;
 * rows at and past offsets[E] start as NaN and must stay so. Two runs give the same bits. The
 * gate_up projection with its SwiGLU in one launch gives the bits of the kernel above followed by
 * the elementwise SwiGLU kernel, and writes nothing past the routed rows. Then the kernel's time
 * against the per-expert cuBLAS GEMMs on the MoE shapes of bench-small and bench-base, and the
 * fused SwiGLU's against the two launches (printed, not asserted; ZAYAC_NO_BENCH set skips
 * them). */
#include <setjmp.h>
#include <stdlib.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#ifdef ZY_HAVE_CUDA
/* this test compares element by element: the shared error summaries go unused */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-variable"
#include "gemm_test_util.h"
#pragma GCC diagnostic pop
#include "ops/cuda/grouped_gemm.h"
#include "ops/cuda/kernels.h"

static int supported;

static int setup_grouped(void **state) {
    int rc = setup(state);
    supported = ngpu && cuda_grouped_gemm_supported();
    if (ngpu && !supported)
        printf("cuda_grouped_gemm: this device or build has no sm_90a kernel\n");
    return rc;
}

static int32_t *device_offsets(const int *rows, int E, int *total) {
    int32_t off[129];
    off[0] = 0;
    for (int e = 0; e < E; e++) off[e + 1] = off[e] + rows[e];
    *total = off[E];
    int32_t *d = NULL;
    assert_int_equal(cudaMalloc((void **)&d, (size_t)(E + 1) * sizeof *d), cudaSuccess);
    assert_int_equal(cudaMemcpy(d, off, (size_t)(E + 1) * sizeof *d, cudaMemcpyHostToDevice),
                     cudaSuccess);
    return d;
}

/* One case: E experts with rows[e] rows each, then `spare` rows past them in X and Y; W [E, N, K];
 * trans_w 0: Y [., N] = X [., K] W_e^T, 1: Y [., K] = X [., N] W_e. */
static void check_case(int E, int N, int K, const int *rows, int spare, int trans_w) {
    int total = 0;
    int32_t *doff = device_offsets(rows, E, &total);
    const int cap = total + spare, xw = trans_w ? N : K, yw = trans_w ? K : N;
    const size_t nx = (size_t)cap * xw, nw = (size_t)E * N * K, ny = (size_t)cap * yw;
    float *X = rand_vals(nx, CUDA_GEMM_BF16), *W = rand_vals(nw, CUDA_GEMM_BF16);
    void *dX = upload(X, nx, CUDA_GEMM_BF16), *dW = upload(W, nw, CUDA_GEMM_BF16);
    void *dY = poisoned(ny, CUDA_GEMM_BF16), *dY2 = poisoned(ny, CUDA_GEMM_BF16);
    assert_int_equal(cuda_grouped_gemm_bf16(dY, dX, dW, doff, E, N, K, cap, trans_w, NULL), ZY_OK);
    assert_int_equal(cuda_grouped_gemm_bf16(dY2, dX, dW, doff, E, N, K, cap, trans_w, NULL), ZY_OK);
    float *Y = download(dY, ny, CUDA_GEMM_BF16);
    uint16_t *b1 = malloc(ny * 2), *b2 = malloc(ny * 2);
    assert_non_null(b1);
    assert_non_null(b2);
    assert_int_equal(cudaMemcpy(b1, dY, ny * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_int_equal(cudaMemcpy(b2, dY2, ny * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_memory_equal(b1, b2, ny * 2); /* deterministic */
    long bad = 0;
    double worst_ratio = 0;
    int r = 0;
    for (int e = 0; e < E; e++)
        for (int i = 0; i < rows[e]; i++, r++)
            for (int n = 0; n < yw; n++) { /* output column n, reduction over xw */
                double ref = 0, mag = 0;
                const float *x = X + (size_t)r * xw, *we = W + (size_t)e * N * K;
                for (int k = 0; k < xw; k++) {
                    const double t =
                        (double)x[k] * (trans_w ? we[(size_t)k * K + n] : we[(size_t)n * K + k]);
                    ref += t;
                    mag += fabs(t);
                }
                const double got = Y[(size_t)r * yw + n];
                const double tol = ldexp(fabs(ref), -8) + xw * ldexp(mag, -23) + 1e-30;
                const double ratio = fabs(got - ref) / tol;
                if (!(ratio <= 1.0) && bad++ < 5)
                    printf("E=%d N=%d K=%d: row %d (expert %d) col %d: %g, expected %g\n", E, N, K,
                           r, e, n, got, ref);
                if (ratio > worst_ratio || ratio != ratio) worst_ratio = ratio;
            }
    long touched = 0; /* rows past the experts' must still hold the poison's bits */
    for (size_t i = (size_t)total * yw; i < ny; i++) touched += b1[i] != 0xffff;
    printf("E=%d N=%d K=%d trans_w=%d rows %d (+%d spare): worst error / tolerance %.3f, %ld bad, "
           "%ld spare elements written\n",
           E, N, K, trans_w, total, spare, worst_ratio, bad, touched);
    assert_int_equal(bad, 0);
    assert_int_equal(touched, 0);
    free(X), free(W), free(Y), free(b1), free(b2);
    cudaFree(dX), cudaFree(dW), cudaFree(dY), cudaFree(dY2), cudaFree(doff);
}

static void test_grouped_small_shapes(void **state) {
    (void)state;
    if (!supported) skip();
    const int a[4] = {300, 0, 129, 1}; /* partial tiles, an empty and a one-row expert */
    for (int t = 0; t < 2; t++) check_case(4, 256, 128, a, 37, t);
    const int b[3] = {5, 260, 64}; /* N and K not multiples of the tile (128) or stage (64) */
    check_case(3, 200, 72, b, 3, 0);
    check_case(3, 192, 72, b, 3, 1); /* the input gradient: N a multiple of 64, K of 8 */
    const int c[2] = {128, 256};     /* whole tiles only */
    for (int t = 0; t < 2; t++) check_case(2, 128, 64, c, 0, t);
}

static void test_grouped_moe_shape(void **state) {
    (void)state;
    if (!supported) skip();
    int rows[16]; /* bench-small's gate_up widths, uneven routing */
    for (int e = 0; e < 16; e++) rows[e] = (e * 37) % 90 + (e == 3 ? 200 : 0);
    for (int t = 0; t < 2; t++) check_case(16, 2048, 1024, rows, 50, t);
}

static void test_grouped_all_empty(void **state) {
    (void)state;
    if (!supported) skip();
    const int z[5] = {0, 0, 0, 0, 0};
    for (int t = 0; t < 2; t++) check_case(5, 64, 64, z, 130, t); /* nothing routed or written */
}

static void test_grouped_rejects(void **state) {
    (void)state;
    if (!supported) skip();
    int32_t *doff = NULL;
    assert_int_equal(cudaMalloc((void **)&doff, 8), cudaSuccess);
    void *p = NULL;
    assert_int_equal(cudaMalloc(&p, 4096), cudaSuccess);
    assert_int_equal(cuda_grouped_gemm_bf16(p, p, p, doff, 1, 12, 64, 4, 0, NULL), ZY_ERR); /* N */
    assert_int_equal(cuda_grouped_gemm_bf16(p, p, p, doff, 0, 64, 64, 4, 0, NULL), ZY_ERR); /* E */
    assert_int_equal(cuda_grouped_gemm_bf16((char *)p + 2, p, p, doff, 1, 64, 64, 4, 0, NULL),
                     ZY_ERR); /* alignment */
    /* the input gradient's reduction would reach the next expert's rows of W */
    assert_int_equal(cuda_grouped_gemm_bf16(p, p, p, doff, 1, 72, 64, 4, 1, NULL), ZY_ERR);
    cudaFree(p), cudaFree(doff);
}

/* The fused gate_up + SwiGLU against the plain kernel then cuda_swiglu_fwd_bf16 over the routed
 * rows: the same bits in Y and act, nothing written past the routed rows. W [E, 2F, K]. */
static void check_swiglu_case(int E, int F, int K, const int *rows, int spare) {
    int total = 0;
    int32_t *doff = device_offsets(rows, E, &total);
    const int cap = total + spare;
    const size_t nx = (size_t)cap * K, nw = (size_t)E * 2 * F * K, ny = (size_t)cap * 2 * F,
                 na = (size_t)cap * F;
    float *X = rand_vals(nx, CUDA_GEMM_BF16), *W = rand_vals(nw, CUDA_GEMM_BF16);
    void *dX = upload(X, nx, CUDA_GEMM_BF16), *dW = upload(W, nw, CUDA_GEMM_BF16);
    void *dY = poisoned(ny, CUDA_GEMM_BF16), *dA = poisoned(na, CUDA_GEMM_BF16);
    void *dY2 = poisoned(ny, CUDA_GEMM_BF16), *dA2 = poisoned(na, CUDA_GEMM_BF16);
    assert_int_equal(cuda_grouped_gemm_swiglu_bf16(dY, dA, dX, dW, doff, E, F, K, cap, NULL),
                     ZY_OK);
    assert_int_equal(cuda_grouped_gemm_bf16(dY2, dX, dW, doff, E, 2 * F, K, cap, 0, NULL), ZY_OK);
    assert_int_equal(cuda_swiglu_fwd_bf16(dA2, dY2, total, F, NULL), ZY_OK);
    uint16_t *y = malloc(ny * 2), *y2 = malloc(ny * 2), *a = malloc(na * 2), *a2 = malloc(na * 2);
    assert_true(y && y2 && a && a2);
    assert_int_equal(cudaMemcpy(y, dY, ny * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_int_equal(cudaMemcpy(y2, dY2, ny * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_int_equal(cudaMemcpy(a, dA, na * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_int_equal(cudaMemcpy(a2, dA2, na * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    long ydiff = 0, adiff = 0, touched = 0;
    for (size_t i = 0; i < (size_t)total * 2 * F; i++) ydiff += y[i] != y2[i];
    for (size_t i = 0; i < (size_t)total * F; i++) adiff += a[i] != a2[i];
    for (size_t i = (size_t)total * 2 * F; i < ny; i++) touched += y[i] != 0xffff;
    for (size_t i = (size_t)total * F; i < na; i++) touched += a[i] != 0xffff;
    printf("swiglu E=%d F=%d K=%d rows %d (+%d spare): %ld gate_up and %ld act elements differ "
           "from the two launches, %ld spare elements written\n",
           E, F, K, total, spare, ydiff, adiff, touched);
    assert_int_equal(ydiff, 0);
    assert_int_equal(adiff, 0);
    assert_int_equal(touched, 0);
    free(X), free(W), free(y), free(y2), free(a), free(a2);
    cudaFree(dX), cudaFree(dW), cudaFree(dY), cudaFree(dA), cudaFree(dY2), cudaFree(dA2);
    cudaFree(doff);
}

static void test_grouped_swiglu(void **state) {
    (void)state;
    if (!supported) skip();
    const int a[4] = {300, 0, 129, 1}; /* partial tiles, an empty and a one-row expert */
    check_swiglu_case(4, 128, 128, a, 37);
    const int b[3] = {5, 260, 64}; /* F not a multiple of the 64-column half tile, K of the stage */
    check_swiglu_case(3, 200, 72, b, 3);
    check_swiglu_case(3, 8, 64, b, 0); /* one 8-column vector of gate and of up per row */
    int rows[16];                      /* bench-small's widths, uneven routing */
    for (int e = 0; e < 16; e++) rows[e] = (e * 37) % 90 + (e == 3 ? 200 : 0);
    check_swiglu_case(16, 1024, 1024, rows, 50);
    const int z[2] = {0, 0};
    check_swiglu_case(2, 64, 64, z, 130); /* nothing routed: nothing written */
    /* refused: F not a multiple of 8, act misaligned */
    void *p = NULL;
    assert_int_equal(cudaMalloc(&p, 1 << 16), cudaSuccess);
    int32_t *doff = NULL;
    assert_int_equal(cudaMalloc((void **)&doff, 8), cudaSuccess);
    assert_int_equal(cuda_grouped_gemm_swiglu_bf16(p, p, p, p, doff, 1, 12, 64, 4, NULL), ZY_ERR);
    assert_int_equal(
        cuda_grouped_gemm_swiglu_bf16(p, (char *)p + 2, p, p, doff, 1, 64, 64, 4, NULL), ZY_ERR);
    cudaFree(p), cudaFree(doff);
}

/* Milliseconds per call of fn over `iters` calls, after one. */
typedef int (*run_fn)(void *arg);
static double time_ms(run_fn fn, void *arg, int iters) {
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    assert_int_equal(fn(arg), ZY_OK);
    cudaEventRecord(a, NULL);
    for (int i = 0; i < iters; i++) assert_int_equal(fn(arg), ZY_OK);
    cudaEventRecord(b, NULL);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return ms / iters;
}

typedef struct {
    void *Y, *X, *W, *act;
    int32_t *doff;
    int off[17], E, N, K, cap, trans_w;
} moe_args;

/* N = 2F: the gate_up projection, then the elementwise SwiGLU over every row (as the forward
 * did before the fused kernel), or both in one launch */
static int run_two_launches(void *p) {
    moe_args *m = p;
    ZY_TRY(cuda_grouped_gemm_bf16(m->Y, m->X, m->W, m->doff, m->E, m->N, m->K, m->cap, 0, NULL));
    return cuda_swiglu_fwd_bf16(m->act, m->Y, m->cap, m->N / 2, NULL);
}
static int run_fused(void *p) {
    moe_args *m = p;
    return cuda_grouped_gemm_swiglu_bf16(m->Y, m->act, m->X, m->W, m->doff, m->E, m->N / 2, m->K,
                                         m->cap, NULL);
}

static int run_grouped(void *p) {
    moe_args *m = p;
    return cuda_grouped_gemm_bf16(m->Y, m->X, m->W, m->doff, m->E, m->N, m->K, m->cap, m->trans_w,
                                  NULL);
}

static int run_per_expert(void *p) {
    moe_args *m = p;
    for (int e = 0; e < m->E; e++) {
        const int n = m->off[e + 1] - m->off[e];
        if (n == 0) continue;
        const int xw = m->trans_w ? m->N : m->K, yw = m->trans_w ? m->K : m->N;
        ZY_TRY(cuda_gemm(&g, (char *)m->Y + (size_t)m->off[e] * yw * 2,
                         (const char *)m->X + (size_t)m->off[e] * xw * 2,
                         (const char *)m->W + (size_t)e * m->N * m->K * 2, n, yw, xw, 0,
                         !m->trans_w, 1.0f, 0.0f, CUDA_GEMM_BF16, CUDA_GEMM_BF16, NULL));
    }
    return ZY_OK;
}

static void test_grouped_timing(void **state) {
    (void)state;
    if (!supported || getenv("ZAYAC_NO_BENCH")) skip(); /* e.g. under compute-sanitizer */
    const struct {
        const char *name;
        int N, K;
    } shapes[4] = {{"bench-small gate_up", 2048, 1024},
                   {"bench-small down", 1024, 1024},
                   {"bench-base gate_up", 4096, 2048},
                   {"bench-base down", 2048, 2048}};
    const int E = 16, T = 16384;
    printf("| shape | GEMM | routing | per-expert cuBLAS ms (GPU) | grouped ms | speed-up |\n"
           "|---|---|---|---|---|---|\n");
    for (int s = 0; s < 4; s++)
        for (int t = 0; t < 2; t++)
            for (int skew = 0; skew < 2; skew++) {
                moe_args m = {.E = E, .N = shapes[s].N, .K = shapes[s].K, .cap = T, .trans_w = t};
                int rows[16], sum = 0;
                for (int e = 0; e < E; e++) /* skewed: busiest expert ~4x the mean, 6% skipped */
                    rows[e] = skew ? (int)(T * 0.94 * (e == 0 ? 0.25 : 0.75 / 15)) : T / E;
                for (int e = 0; e < E; e++) sum += rows[e];
                m.doff = device_offsets(rows, E, &sum);
                m.off[0] = 0;
                for (int e = 0; e < E; e++) m.off[e + 1] = m.off[e] + rows[e];
                const size_t wide = (size_t)T * (m.N > m.K ? m.N : m.K) * 2;
                assert_int_equal(cudaMalloc(&m.X, wide), cudaSuccess);
                assert_int_equal(cudaMalloc(&m.W, (size_t)E * m.N * m.K * 2), cudaSuccess);
                assert_int_equal(cudaMalloc(&m.Y, wide), cudaSuccess);
                cudaMemset(m.X, 0, wide);
                cudaMemset(m.W, 0, (size_t)E * m.N * m.K * 2);
                const double a = time_ms(run_per_expert, &m, 20), b = time_ms(run_grouped, &m, 20);
                printf("| %s | %s | %s | %.3f | %.3f | %.2fx |\n", shapes[s].name,
                       t ? "input gradient" : "forward", skew ? "skewed" : "balanced", a, b, a / b);
                if (s == 0 && t == 0) { /* gate_up: the fused SwiGLU against two launches */
                    assert_int_equal(cudaMalloc(&m.act, wide / 2), cudaSuccess);
                    const double c = time_ms(run_two_launches, &m, 20),
                                 d = time_ms(run_fused, &m, 20);
                    printf("| %s | forward + SwiGLU | %s | two launches %.3f | fused %.3f | "
                           "%.2fx |\n",
                           shapes[s].name, skew ? "skewed" : "balanced", c, d, c / d);
                    cudaFree(m.act);
                }
                cudaFree(m.X), cudaFree(m.W), cudaFree(m.Y), cudaFree(m.doff);
            }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grouped_small_shapes), cmocka_unit_test(test_grouped_moe_shape),
        cmocka_unit_test(test_grouped_all_empty),    cmocka_unit_test(test_grouped_rejects),
        cmocka_unit_test(test_grouped_swiglu),       cmocka_unit_test(test_grouped_timing),
    };
    return cmocka_run_group_tests(tests, setup_grouped, teardown);
}
#else
#include "no_cuda_main.h"
#endif
