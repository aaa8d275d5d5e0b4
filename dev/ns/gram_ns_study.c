/* dev/ns/gram_ns_study: Muon's Newton-Schulz iterated on the Gram matrix, checked against the
 * plain iteration in bf16 storage (a numerical study for docs/gpu-plan.md item 7, not shipped).
 *
 * Plain (what zayac runs on the GPU, every stored matrix bf16, products accumulated in fp32):
 *   X <- X0 / ||X0||_F;  5 times: A = X X^T;  B = b A + c A A;  X = a X + B X
 * Gram (the same polynomial in exact arithmetic: every iterate is P(R0) X0, and all P commute):
 *   R = X X^T;  5 times: M = a I + b R + c R R;  Q = M Q (Q = M the first time);
 *   R = M R M (skipped the last time);  then X = Q X0
 * For X [m x n], m < n, the plain iteration costs 5 (m^2 n + m^3 + 2 m^2 n) multiply-adds with its
 * two symmetric products halved; Gram costs m^2 n / 2 + 5 m^3 / 2 + 4 m^3 / 2 (M Q, symmetric
 * since they commute) + 4 * 2 m^3 / 2 (M R M) + m^2 n: at n = 2 m (the experts' gate_up) 24.7
 * GFLOP against 37.5 for m = 1024, equal at n = m (the down projection).
 *
 * Printed per case: the relative Frobenius distance of each variant's result to the plain
 * iteration in fp64, and the mean and standard deviation of the result's squared singular values
 * (the eigenvalues of Y Y^T, from its trace and Frobenius norm).
 * Variants: plain bf16 (the reference's own bf16 noise), Gram bf16, Gram with R, M, Q kept in fp32
 * (only X in bf16) with fp32 products or with bf16 operands (what bf16 GEMMs with fp32 results
 * would do on the GPU), and restarted after 2 iterations (X = Q X0 and R recomputed).
 *
 * With arguments FILE ROWS COLS [LABEL] it studies that matrix (raw fp32) instead (e.g. a Muon
 * momentum taken from a checkpoint's train_state safetensors).
 * Build and run (CPU, OpenBLAS):
 *   cc -O2 -fopenmp -I/usr/include/x86_64-linux-gnu/openblas-openmp dev/ns/gram_ns_study.c \
 *       -lopenblas -lm -o /tmp/gram_ns_study && /tmp/gram_ns_study */
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NS_A  3.4445
#define NS_B  (-4.7750)
#define NS_C  2.0315
#define STEPS 5

/* Round to bf16 (nearest even) and back, in place; keep = 1 leaves fp32. */
static void round_bf16(float *x, size_t n, int keep) {
    if (keep) return;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        u += 0x7fff + ((u >> 16) & 1);
        u &= 0xffff0000u;
        memcpy(&x[i], &u, 4);
    }
}

static uint64_t rng = 88172645463325252ull;
static double gauss(void) {
    double u1, u2;
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    u1 = ((rng >> 11) + 0.5) / 9007199254740992.0;
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    u2 = ((rng >> 11) + 0.5) / 9007199254740992.0;
    return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}

/* C[m x n] = alpha A[m x k] op(B) + beta C, fp32, row-major; tb: B stored [n x k]. */
static void mm(int m, int n, int k, float alpha, const float *A, const float *B, int tb, float beta,
               float *C) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, A, k,
                B, tb ? k : n, beta, C, n);
}

/* The plain iteration in fp64: y [m x n] from x0. */
static void plain_f64(const double *x0, double *y, int m, int n) {
    double *A = malloc(sizeof(double) * m * m), *B = malloc(sizeof(double) * m * m);
    double *t = malloc(sizeof(double) * m * n), ss = 0;
    for (size_t i = 0; i < (size_t)m * n; i++) ss += x0[i] * x0[i];
    for (size_t i = 0; i < (size_t)m * n; i++) y[i] = x0[i] / (sqrt(ss) + 1e-7);
    for (int it = 0; it < STEPS; it++) {
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, m, n, 1, y, n, y, n, 0, A, m);
        memcpy(B, A, sizeof(double) * m * m);
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, m, m, NS_C, A, m, A, m, NS_B, B,
                    m);
        memcpy(t, y, sizeof(double) * m * n);
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, m, 1, B, m, t, n, NS_A, y, n);
    }
    free(A), free(B), free(t);
}

/* The plain iteration with every stored matrix in bf16. */
static void plain_bf16(const float *x0, float *y, int m, int n) {
    float *A = malloc(sizeof(float) * m * m), *B = malloc(sizeof(float) * m * m);
    float *t = malloc(sizeof(float) * m * n);
    double ss = 0;
    for (size_t i = 0; i < (size_t)m * n; i++) ss += (double)x0[i] * x0[i];
    for (size_t i = 0; i < (size_t)m * n; i++) y[i] = (float)(x0[i] / (sqrt(ss) + 1e-7));
    round_bf16(y, (size_t)m * n, 0);
    for (int it = 0; it < STEPS; it++) {
        mm(m, m, n, 1, y, y, 1, 0, A);
        round_bf16(A, (size_t)m * m, 0);
        memcpy(B, A, sizeof(float) * m * m);
        mm(m, m, m, (float)NS_C, A, A, 0, (float)NS_B, B);
        round_bf16(B, (size_t)m * m, 0);
        memcpy(t, y, sizeof(float) * m * n);
        mm(m, n, m, 1, B, t, 0, (float)NS_A, y);
        round_bf16(y, (size_t)m * n, 0);
    }
    free(A), free(B), free(t);
}

/* mm with both operands rounded to bf16 first when bf (a bf16 GEMM with an fp32 result); A is
 * m x k, B is k x n (or n x k when tb). */
static void mm_ops(int bf, int m, int n, int k, float alpha, const float *A, const float *B, int tb,
                   float beta, float *C) {
    if (!bf) {
        mm(m, n, k, alpha, A, B, tb, beta, C);
        return;
    }
    float *a = malloc(sizeof(float) * m * k), *b = malloc(sizeof(float) * n * k);
    memcpy(a, A, sizeof(float) * m * k);
    memcpy(b, B, sizeof(float) * n * k);
    round_bf16(a, (size_t)m * k, 0);
    round_bf16(b, (size_t)n * k, 0);
    mm(m, n, k, alpha, a, b, tb, beta, C);
    free(a), free(b);
}

/* The Gram iteration: X in bf16; mode 0: R, M, Q stored in bf16; 1: stored in fp32, fp32
 * products; 2: stored in fp32, every product's operands rounded to bf16 (bf16 GEMMs with fp32
 * results and epilogues). restart > 0: after that many iterations X = Q X, R = X X^T, Q = I. */
static void gram(const float *x0, float *y, int m, int n, int mode, int restart) {
    const int f32 = mode != 0, bf = mode == 2;
    const size_t mm2 = (size_t)m * m;
    float *R = malloc(4 * mm2), *M = malloc(4 * mm2), *Q = malloc(4 * mm2), *T = malloc(4 * mm2);
    float *x = malloc(sizeof(float) * m * n);
    double ss = 0;
    for (size_t i = 0; i < (size_t)m * n; i++) ss += (double)x0[i] * x0[i];
    for (size_t i = 0; i < (size_t)m * n; i++) x[i] = (float)(x0[i] / (sqrt(ss) + 1e-7));
    round_bf16(x, (size_t)m * n, 0);
    mm(m, m, n, 1, x, x, 1, 0, R);
    round_bf16(R, mm2, f32);
    int fresh = 1; /* Q = I */
    for (int it = 0; it < STEPS; it++) {
        memcpy(M, R, 4 * mm2); /* M = a I + b R + c R R */
        mm_ops(bf, m, m, m, (float)NS_C, R, R, 0, (float)NS_B, M);
        for (int i = 0; i < m; i++) M[(size_t)i * m + i] += (float)NS_A;
        round_bf16(M, mm2, f32);
        if (fresh)
            memcpy(Q, M, 4 * mm2), fresh = 0;
        else
            mm_ops(bf, m, m, m, 1, M, Q, 0, 0, T), round_bf16(T, mm2, f32), memcpy(Q, T, 4 * mm2);
        if (it == STEPS - 1) break;
        if (restart && it + 1 == restart) { /* x = Q x; R = x x^T; Q = I */
            float *t = malloc(sizeof(float) * m * n);
            mm_ops(bf, m, n, m, 1, Q, x, 0, 0, t);
            round_bf16(t, (size_t)m * n, 0);
            memcpy(x, t, sizeof(float) * m * n);
            free(t);
            mm(m, m, n, 1, x, x, 1, 0, R);
            round_bf16(R, mm2, f32);
            fresh = 1;
            continue;
        }
        mm_ops(bf, m, m, m, 1, M, R, 0, 0, T); /* R = M R M */
        round_bf16(T, mm2, f32);
        mm_ops(bf, m, m, m, 1, T, M, 0, 0, R);
        round_bf16(R, mm2, f32);
    }
    mm_ops(bf, m, n, m, 1, Q, x, 0, 0, y);
    round_bf16(y, (size_t)m * n, 0);
    free(R), free(M), free(Q), free(T), free(x);
}

/* ||y - ref||_F / ||ref||_F */
static double rel_dist(const float *y, const double *ref, size_t n) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) d += (y[i] - ref[i]) * (y[i] - ref[i]), r += ref[i] * ref[i];
    return sqrt(d / r);
}

/* Mean and standard deviation of the eigenvalues of y y^T (the squared singular values). */
static void sv2_stats(const float *y, int m, int n, double *mean, double *sd) {
    float *G = malloc(sizeof(float) * m * m);
    mm(m, m, n, 1, y, y, 1, 0, G);
    double tr = 0, fro = 0;
    for (int i = 0; i < m; i++) tr += G[(size_t)i * m + i];
    for (size_t i = 0; i < (size_t)m * m; i++) fro += (double)G[i] * G[i];
    *mean = tr / m;
    *sd = sqrt(fmax(fro / m - *mean * *mean, 0));
    free(G);
}

/* x0 [m x n]: Gaussian (decay 0), or U diag(s) V with s_i = exp(-i decay / m) (Gaussian U, V). */
static void make_input(float *x0, int m, int n, double decay) {
    if (decay == 0) {
        for (size_t i = 0; i < (size_t)m * n; i++) x0[i] = (float)gauss();
        return;
    }
    float *U = malloc(sizeof(float) * m * m), *V = malloc(sizeof(float) * m * n);
    for (size_t i = 0; i < (size_t)m * m; i++) U[i] = (float)gauss();
    for (int j = 0; j < m; j++)
        for (int i = 0; i < m; i++) U[(size_t)i * m + j] *= (float)exp(-j * decay / m);
    for (size_t i = 0; i < (size_t)m * n; i++) V[i] = (float)gauss();
    mm(m, n, m, 1, U, V, 0, 0, x0);
    free(U), free(V);
}

/* One table block: every variant on x0 [m x n] (m <= n). */
static void run_case(const float *x0, int m, int n, const char *spec) {
    const size_t N = (size_t)m * n;
    float *y = malloc(4 * N);
    double *x0d = malloc(8 * N), *ref = malloc(8 * N);
    for (size_t i = 0; i < N; i++) x0d[i] = x0[i];
    plain_f64(x0d, ref, m, n);
    for (int v = 0; v < 7; v++) {
        const char *name[] = {"plain fp64",
                              "plain bf16",
                              "Gram bf16",
                              "Gram, R M Q fp32",
                              "Gram, R M Q fp32, bf16 operands",
                              "Gram bf16, restart at 2",
                              "Gram fp32 state, bf16 operands, restart at 2"};
        static const int mode[] = {0, 0, 0, 1, 2, 0, 2}, restart[] = {0, 0, 0, 0, 0, 2, 2};
        if (v == 0)
            for (size_t i = 0; i < N; i++) y[i] = (float)ref[i];
        else if (v == 1)
            plain_bf16(x0, y, m, n);
        else
            gram(x0, y, m, n, mode[v], restart[v]);
        double mean, sd;
        sv2_stats(y, m, n, &mean, &sd);
        printf("| %d x %d | %s | %s | %.2e | %.3f | %.3f |\n", m, n, spec, name[v],
               rel_dist(y, ref, N), mean, sd);
    }
    free(y), free(x0d), free(ref);
}

/* Arguments FILE ROWS COLS [LABEL]: the matrix in FILE (raw little-endian fp32, row-major; taken
 * transposed when ROWS > COLS, as Muon does) instead of the synthetic cases. */
int main(int argc, char **argv) {
    printf("| m x n | spectrum | variant | rel. distance to plain fp64 | sv^2 mean | sv^2 sd |\n");
    printf("|---|---|---|---|---|---|\n");
    if (argc >= 4) {
        const int rows = atoi(argv[2]), cols = atoi(argv[3]);
        const size_t N = (size_t)rows * cols;
        float *a = malloc(4 * N), *x0 = malloc(4 * N);
        FILE *f = fopen(argv[1], "rb");
        if (rows < 1 || cols < 1 || !f || fread(a, 4, N, f) != N) {
            fprintf(stderr, "%s: cannot read %d x %d fp32 values\n", argv[1], rows, cols);
            return 2;
        }
        fclose(f);
        const int m = rows < cols ? rows : cols, n = rows < cols ? cols : rows;
        for (int i = 0; i < rows; i++)
            for (int j = 0; j < cols; j++)
                x0[rows <= cols ? (size_t)i * cols + j : (size_t)j * rows + i] =
                    a[(size_t)i * cols + j];
        run_case(x0, m, n, argc > 4 ? argv[4] : argv[1]);
        free(a), free(x0);
        return 0;
    }
    const struct {
        int m, n;
        double decay;
    } cases[] = {{256, 512, 0},  {256, 512, 8},  {256, 512, 20},
                 {512, 1024, 0}, {512, 1024, 8}, {256, 256, 8}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int m = cases[c].m, n = cases[c].n;
        float *x0 = malloc(4 * (size_t)m * n);
        make_input(x0, m, n, cases[c].decay);
        char spec[48];
        snprintf(spec, sizeof spec, cases[c].decay == 0 ? "Gaussian" : "s_i = exp(-%g i / m)",
                 cases[c].decay);
        run_case(x0, m, n, spec);
        free(x0);
    }
    return 0;
}
