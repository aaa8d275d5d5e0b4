/* Tests of src/optim: Newton-Schulz against an SVD (LAPACK dgesvd_ in double), AdamW against
 * hand-computed steps, Muon against an independent double-precision step, schedules, clipping, the
 * balancing controller on a synthetic router, state round trips and bad configs. The Muon vs AdamW
 * step timing runs only with ZAYAC_BENCH=1. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/bf16.h"
#include "base/err.h"
#include "base/rng.h"
#include "base/timer.h"
#include "optim/balance.h"
#include "optim/clip.h"
#include "optim/optim.h"
#include "optim/schedule.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* LAPACK's SVD (column-major), from OpenBLAS; the trailing lengths are Fortran's hidden ones. */
void dgesvd_(const char *jobu, const char *jobvt, const int *m, const int *n, double *a,
             const int *lda, double *s, double *u, const int *ldu, double *vt, const int *ldvt,
             double *work, const int *lwork, int *info, size_t jobu_len, size_t jobvt_len);

/* Thin SVD of a row-major [r, c] matrix: x = U diag(s) Vt with U [r, k], Vt [k, c] row-major,
 * k = min(r, c), s descending. */
static void svd(const double *x, int r, int c, double *U, double *s, double *Vt) {
    int k = r < c ? r : c, info = 0, lwork = -1;
    double *a = malloc(sizeof(double) * (size_t)(r * c));
    double *ucm = malloc(sizeof(double) * (size_t)(r * k));
    double *vtcm = malloc(sizeof(double) * (size_t)(k * c));
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++) a[i + j * r] = x[i * c + j];
    double wq;
    dgesvd_("S", "S", &r, &c, a, &r, s, ucm, &r, vtcm, &k, &wq, &lwork, &info, 1, 1);
    assert_int_equal(info, 0);
    lwork = (int)wq;
    double *work = malloc(sizeof(double) * (size_t)lwork);
    dgesvd_("S", "S", &r, &c, a, &r, s, ucm, &r, vtcm, &k, work, &lwork, &info, 1, 1);
    assert_int_equal(info, 0);
    for (int i = 0; i < r; i++)
        for (int l = 0; l < k; l++) U[i * k + l] = ucm[i + l * r];
    for (int l = 0; l < k; l++)
        for (int j = 0; j < c; j++) Vt[l * c + j] = vtcm[l + j * k];
    free(a);
    free(ucm);
    free(vtcm);
    free(work);
}

/* The context every optimiser, clipping and balancing call of these tests runs on. */
static zy_ctx cpu = {.device = ZY_DEV_CPU, .num_threads = 0, .act_dtype = ZY_DTYPE_F32};

static void fill_normal(float *x, size_t n, float std, zy_rng *r) {
    for (size_t i = 0; i < n; i++) x[i] = std * zy_rng_normal(r);
}

/* Muon's fixed quintic, written out here rather than taken from ns_coef.c. */
static const float FIXED_ABC[5][3] = {{3.4445f, -4.7750f, 2.0315f},
                                      {3.4445f, -4.7750f, 2.0315f},
                                      {3.4445f, -4.7750f, 2.0315f},
                                      {3.4445f, -4.7750f, 2.0315f},
                                      {3.4445f, -4.7750f, 2.0315f}};

/* The iterations' quintics applied in turn to one (normalised) singular value. */
static double ns_poly(double s, int steps, const float (*abc)[3]) {
    for (int i = 0; i < steps; i++)
        s = abc[i][0] * s + abc[i][1] * s * s * s + abc[i][2] * s * s * s * s * s;
    return s;
}

/* Newton-Schulz keeps the singular vectors and maps each normalised singular value through the
 * iterations' quintics: NS(X) = U diag(p_k(...p_1(s / (||X||_F + 1e-7)))) V^T, computed here in
 * double via an SVD. The band the outputs must lie in: [0.6, 1.3] for the fixed quintic at 5
 * iterations (where the input's normalised value is not below 2e-3, which 5 cannot lift), the
 * schedule's promise [0.7, 1.3] for minimax ones (inputs from ns_minimax_lower(steps)). */
static void check_ns_coefs(int r, int c, uint64_t seed, int steps, const float (*abc)[3],
                           double band_lo, double small_below) {
    const int k = r < c ? r : c;
    const size_t n = (size_t)r * (size_t)c;
    zy_rng rng = zy_rng_init(seed, 1);
    float *x = malloc(n * sizeof *x);
    fill_normal(x, n, 0.3f, &rng);
    double *xd = malloc(n * sizeof *xd), *U = malloc(sizeof(double) * (size_t)(r * k));
    double *Vt = malloc(sizeof(double) * (size_t)(k * c)), *s = malloc(sizeof(double) * k);
    double fro = 0;
    for (size_t i = 0; i < n; i++) {
        xd[i] = x[i];
        fro += xd[i] * xd[i];
    }
    fro = sqrt(fro);
    svd(xd, r, c, U, s, Vt);
    double *sp = malloc(sizeof(double) * k);
    for (int l = 0; l < k; l++) sp[l] = ns_poly(s[l] / (fro + 1e-7), steps, abc);

    float *work = malloc(optim_ns_work_floats(r, c) * sizeof *work);
    optim_newton_schulz(x, r, c, steps, abc, ZY_NS_PRECOND_FROBENIUS, work);

    double maxdiff = 0;
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++) {
            double ref = 0;
            for (int l = 0; l < k; l++) ref += U[i * k + l] * sp[l] * Vt[l * c + j];
            double d = fabs(ref - x[i * c + j]);
            if (d > maxdiff) maxdiff = d;
        }
    if (getenv("ZAYAC_VERBOSE")) printf("NS %dx%d: max |NS - U p(S) V^T| = %.2e\n", r, c, maxdiff);
    /* fp32 products of O(1) entries through 5 iterations: errors of a few 1e-6 are expected */
    assert_true(maxdiff < 1e-4);

    /* the output's own singular values: the predicted ones, and inside the band wherever the
     * input's normalised singular value is not below small_below */
    double *out_d = malloc(n * sizeof *out_d), *so = malloc(sizeof(double) * k);
    for (size_t i = 0; i < n; i++) out_d[i] = x[i];
    svd(out_d, r, c, U, so, Vt);
    /* sort predicted values descending (p^5 is not monotone) to compare with LAPACK's order */
    for (int a = 0; a < k; a++)
        for (int b = a + 1; b < k; b++)
            if (sp[b] > sp[a]) {
                double tmp = sp[a];
                sp[a] = sp[b];
                sp[b] = tmp;
            }
    int small = 0; /* inputs too small for the band; they map below it and sort last */
    for (int l = 0; l < k; l++) small += s[l] / fro < small_below;
    for (int l = 0; l < k; l++) {
        assert_true(fabs(so[l] - sp[l]) < 1e-4);
        if (l < k - small) assert_true(so[l] >= band_lo && so[l] <= 1.3);
    }
    /* rectangular Gaussian matrices are well conditioned: every value is in range there */
    if (r != c) assert_int_equal(small, 0);
    free(x);
    free(xd);
    free(U);
    free(Vt);
    free(s);
    free(sp);
    free(work);
    free(out_d);
    free(so);
}

static void check_ns_shape(int r, int c, uint64_t seed) {
    check_ns_coefs(r, c, seed, 5, FIXED_ABC, 0.6, 2e-3);
    /* the minimax schedule at 4 iterations, applied in its order (reversed, the large first
     * quintic would come last and throw values out of the band) */
    float mm[4][3];
    ns_coefficients(ZY_NS_MINIMAX, 4, mm);
    check_ns_coefs(r, c, seed, 4, (const float(*)[3])mm, 0.7 - 1e-3, ns_minimax_lower(4));
}

static void test_newton_schulz_vs_svd(void **state) {
    (void)state;
    check_ns_shape(24, 24, 11); /* square */
    check_ns_shape(40, 16, 12); /* tall: works on the transpose */
    check_ns_shape(16, 40, 13); /* wide */
    check_ns_shape(64, 64, 14);
    check_ns_shape(1, 9, 15); /* a single row: normalised to unit norm, then the polynomial */
}

/* The minimax schedules keep their promise on the scalar map, for any iteration count the setting
 * allows: every value in [l, 1] (l = ns_minimax_lower) ends in [0.7, 1.3], on a grid dense enough
 * to see the first quintic's narrow dip; where l is above its 1e-4 floor it is the smallest start
 * that does (a tenth below it ends below 0.7); a value rounding put 4% above 1 still ends in
 * [0.5, 1.5]. At 4 iterations they lift a value the fixed quintic leaves below 0.5 into the band
 * (the fixed one needs s >= 0.0037 to reach 0.5 in 4). */
static void test_ns_minimax_schedule(void **state) {
    (void)state;
    static const int counts[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 16, 30, 100};
    static float abc[100][3];
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
        const int steps = counts[ci];
        ns_coefficients(ZY_NS_MINIMAX, steps, abc);
        const double l = ns_minimax_lower(steps);
        assert_true(l >= 1e-4 && l < 1);
        double lo = INFINITY, hi = -INFINITY;
        for (int i = 0; i <= 400000; i++) {
            const double y = ns_poly(l * pow(1.0 / l, i / 400000.0), steps, (const float(*)[3])abc);
            lo = fmin(lo, y), hi = fmax(hi, y);
        }
        if (getenv("ZAYAC_VERBOSE")) printf("minimax %d: l %.3g, [%.4f, %.4f]\n", steps, l, lo, hi);
        assert_true(lo >= 0.7 - 1e-4 && hi <= 1.3 + 1e-4);
        if (l > 1.0001e-4) assert_true(ns_poly(0.9 * l, steps, (const float(*)[3])abc) < 0.7);
        for (double x = 1.0; x <= 1.04; x += 1e-4) {
            const double y = ns_poly(x, steps, (const float(*)[3])abc);
            assert_true(y >= 0.5 && y <= 1.5);
        }
    }
    float mm[4][3], fx[4][3];
    ns_coefficients(ZY_NS_MINIMAX, 4, mm);
    ns_coefficients(ZY_NS_FIXED, 4, fx);
    assert_true(fx[3][0] == 3.4445f && fx[3][1] == -4.7750f && fx[3][2] == 2.0315f);
    assert_true(ns_poly(0.003, 4, (const float(*)[3])mm) >= 0.7);
    assert_true(ns_poly(0.003, 4, FIXED_ABC) < 0.5);
}

/* A zero gradient stays zero (no division by zero in the normalisation or AOL's row sums), and
 * so does a zero row under AOL while the other rows are orthogonalised. */
static void test_newton_schulz_zero(void **state) {
    (void)state;
    float work[64];
    assert_true(optim_ns_work_floats(3, 4) <= 64);
    for (int pc = ZY_NS_PRECOND_FROBENIUS; pc <= ZY_NS_PRECOND_AOL; pc++) {
        float x[12] = {0};
        optim_newton_schulz(x, 3, 4, 5, FIXED_ABC, pc, work);
        for (int i = 0; i < 12; i++) assert_true(x[i] == 0.0f);
    }
    float y[12] = {1, 2, 0, -1, 0, 0, 0, 0, 3, -1, 2, 1}; /* row 1 zero */
    optim_newton_schulz(y, 3, 4, 5, FIXED_ABC, ZY_NS_PRECOND_AOL, work);
    for (int j = 0; j < 4; j++) assert_true(y[4 + j] == 0.0f);
    for (int j = 0; j < 12; j++) assert_true(isfinite(y[j]));
}

/* AOL's starting iterate (one iteration of the identity quintic a = 1, b = c = 0 returns it)
 * against the formula computed here in double from the input: xn = x / (||x||_F + 1e-7), A = xn
 * xn^T on the Gram side, d_i = (sum_j |A_ij|)^-1/2, D xn (wide) or xn D (tall); and its spectral
 * norm at most 1, the bound AOL guarantees (Frobenius normalisation alone leaves the largest
 * singular value of such a matrix well under 1). */
static void test_newton_schulz_aol_start(void **state) {
    (void)state;
    static const float IDENTITY[1][3] = {{1.0f, 0.0f, 0.0f}};
    const int shapes[2][2] = {{24, 40}, {40, 24}};
    zy_rng rng = zy_rng_init(11, 0);
    for (int t = 0; t < 2; t++) {
        const int r = shapes[t][0], c = shapes[t][1], wide = r <= c, s = wide ? r : c;
        const size_t n = (size_t)r * c;
        float *x = malloc(n * sizeof *x), *w = malloc(optim_ns_work_floats(r, c) * sizeof *w);
        double *xn = malloc(n * sizeof *xn), *d = malloc(sizeof(double) * s);
        fill_normal(x, n, 1.0f, &rng);
        for (int i = 0; i < r; i++) /* rows (or columns) of very different sizes */
            for (int j = 0; j < c; j++)
                x[(size_t)i * c + j] *= powf(10.0f, -2.0f * (wide ? i : j) / s);
        double fro = 0;
        for (size_t i = 0; i < n; i++) fro += (double)x[i] * x[i];
        for (size_t i = 0; i < n; i++) xn[i] = x[i] / (sqrt(fro) + 1e-7);
        for (int i = 0; i < s; i++) {
            double sum = 0;
            for (int j = 0; j < s; j++) {
                double a = 0; /* A_ij = <row i, row j> (wide) or <column i, column j> (tall) */
                for (int k = 0; k < (wide ? c : r); k++)
                    a += wide ? xn[(size_t)i * c + k] * xn[(size_t)j * c + k]
                              : xn[(size_t)k * c + i] * xn[(size_t)k * c + j];
                sum += fabs(a);
            }
            d[i] = 1.0 / sqrt(sum);
        }
        optim_newton_schulz(x, r, c, 1, IDENTITY, ZY_NS_PRECOND_AOL, w);
        double worst = 0, big = 0;
        for (int i = 0; i < r; i++)
            for (int j = 0; j < c; j++) {
                const double ref = xn[(size_t)i * c + j] * d[wide ? i : j];
                worst = fmax(worst, fabs(ref - x[(size_t)i * c + j]));
                big = fmax(big, fabs(ref));
            }
        assert_true(worst < 1e-5 * big);
        double *xd = malloc(n * sizeof *xd), *U = malloc(sizeof(double) * (size_t)r * s);
        double *Vt = malloc(sizeof(double) * (size_t)s * c), *sv = malloc(sizeof(double) * s);
        for (size_t i = 0; i < n; i++) xd[i] = x[i];
        svd(xd, r, c, U, sv, Vt);
        if (getenv("ZAYAC_VERBOSE"))
            printf("AOL %dx%d: max diff %.2e of %.2e, singular values %.3f .. %.3g\n", r, c, worst,
                   big, sv[0], sv[s - 1]);
        assert_true(sv[0] <= 1.0 + 1e-5);
        assert_true(sv[0] > 0.5); /* the bound is not met trivially by shrinking everything */
        free(x), free(w), free(xn), free(d), free(xd), free(U), free(Vt), free(sv);
    }
}

/* What AOL is for: X = diag(r) Q, Q with orthonormal rows (16 rows of a 32 x 32 Sylvester
 * Hadamard matrix / sqrt(32)) and row norms r_i from 1 down to 1e-3. Frobenius normalisation
 * starts the smallest singular value at ~1e-3, which three fixed quintics lift only to ~0.04; AOL
 * rescales the rows to Q itself (A is diagonal), so after three iterations every singular value
 * is on the quintic's plateau [0.7, 1.2]. */
static void test_newton_schulz_aol_lifts(void **state) {
    (void)state;
    enum { R = 16, C = 32 };
    float x[2][R * C];
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) {
            const int parity = __builtin_popcount((unsigned)(i & j)) & 1; /* H_ij = (-1)^<i,j> */
            x[0][i * C + j] = x[1][i * C + j] =
                (parity ? -1.0f : 1.0f) / sqrtf((float)C) * powf(10.0f, -3.0f * i / (R - 1));
        }
    float *w = malloc(optim_ns_work_floats(R, C) * sizeof *w);
    double lo[2];
    for (int pc = 0; pc < 2; pc++) {
        optim_newton_schulz(x[pc], R, C, 3, FIXED_ABC, pc, w);
        double xd[R * C], U[R * R], Vt[R * C], sv[R];
        for (int i = 0; i < R * C; i++) xd[i] = x[pc][i];
        svd(xd, R, C, U, sv, Vt);
        lo[pc] = sv[R - 1];
        if (pc == ZY_NS_PRECOND_AOL) assert_true(sv[0] <= 1.2 + 1e-4);
    }
    if (getenv("ZAYAC_VERBOSE"))
        printf("3 iterations, smallest singular value: frobenius %.4f, aol %.4f\n", lo[0], lo[1]);
    assert_true(lo[ZY_NS_PRECOND_FROBENIUS] < 0.1);
    assert_true(lo[ZY_NS_PRECOND_AOL] >= 0.7 - 1e-4);
    free(w);
}

/* Two AdamW steps on a 3-vector against values worked out by hand (lr 0.1, betas (0.9, 0.999),
 * wd 0.1, eps 1e-8). Step 1: mhat = g and vhat = g^2, so the step is sign(g):
 *   p1 = p0 - 0.1 * (sign(g1) + 0.1 p0).
 * Step 2 (bc1 = 0.19, bc2 = 0.001999):
 *   e0: g 0.5, 0.5:  m 0.095, mhat 0.5, vhat 0.25 -> 1;            p2 = 0.89 - 0.1 (1 + 0.089)
 *   e1: g -1, 1:     m 0.01, mhat 0.0526316, vhat 1 -> 0.0526316;  p2 = 2.08 - 0.1 (0.0526316 +
 * 0.208) e2: g 2, -2:     m -0.02, mhat -0.105263, vhat 4 -> -0.0526316; p2 = -0.595 - 0.1
 * (-0.0526316 - 0.0595) A vector-kind copy gets no weight decay (step 1: p1 = p0 - 0.1 sign(g1)).
 */
static void test_adamw_hand_computed(void **state) {
    (void)state;
    zy_param_table t;
    params_init(&t);
    int64_t sh[1] = {3};
    int iw = params_add(&t, "w", 1, sh, ZY_PARAM_EMBED, -1);
    int iv = params_add(&t, "v", 1, sh, ZY_PARAM_VECTOR, -1);
    float *p = calloc(t.total, sizeof *p), *g = calloc(t.total, sizeof *g);
    const float p0[3] = {1.0f, 2.0f, -0.5f}, g1[3] = {0.5f, -1.0f, 2.0f},
                g2[3] = {0.5f, 1.0f, -2.0f};
    for (int k = 0; k < 2; k++) memcpy(p + t.items[k ? iv : iw].offset, p0, sizeof p0);

    zy_optim_config cfg;
    optim_config_default(&cfg);
    cfg.beta1 = 0.9f;
    cfg.beta2 = 0.999f;
    cfg.eps = 1e-8f;
    cfg.weight_decay = 0.1f;
    zy_optim opt;
    assert_int_equal(optim_init(&opt, &cpu, &cfg, &t), ZY_OK);

    for (int k = 0; k < 2; k++) memcpy(g + t.items[k ? iv : iw].offset, g1, sizeof g1);
    optim_step(&opt, &t, p, g, 0.1f, 1.0f);
    const float *w = p + t.items[iw].offset, *v = p + t.items[iv].offset;
    const double w1[3] = {0.89, 2.08, -0.595}, v1[3] = {0.9, 2.1, -0.6};
    for (int i = 0; i < 3; i++) {
        assert_true(fabs(w[i] - w1[i]) < 1e-6);
        assert_true(fabs(v[i] - v1[i]) < 1e-6);
    }
    for (int k = 0; k < 2; k++) memcpy(g + t.items[k ? iv : iw].offset, g2, sizeof g2);
    optim_step(&opt, &t, p, g, 0.1f, 1.0f);
    const double w2[3] = {0.89 - 0.1 * (1 + 0.089), 2.08 - 0.1 * (0.01 / 0.19 + 0.208),
                          -0.595 - 0.1 * (-0.02 / 0.19 / 2 - 0.0595)};
    const double v2[3] = {0.9 - 0.1, 2.1 - 0.1 * (0.01 / 0.19), -0.6 - 0.1 * (-0.02 / 0.19 / 2)};
    for (int i = 0; i < 3; i++) {
        assert_true(fabs(w[i] - w2[i]) < 2e-6);
        assert_true(fabs(v[i] - v2[i]) < 2e-6);
    }
    assert_int_equal(opt.step, 2);
    optim_free(&opt);
    params_free(&t);
    free(p);
    free(g);
}

/* ---- AdamW with bf16 moments (optimizer.adam_moments bfloat16) ---- */

/* The two bf16 values next to x (lo <= x <= hi, equal when x is one), by truncation of the
 * magnitude: an independent statement of what stochastic rounding may return. */
static void bf16_neighbours(float x, float *lo, float *hi) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t t = u & 0xffff0000u, up = t + 0x10000u;
    float a, b;
    memcpy(&a, &t, 4);
    memcpy(&b, &up, 4);
    if (t == u) b = a;
    *lo = fminf(a, b);
    *hi = fmaxf(a, b);
}

/* Stochastic roundings seen: errors in units of the gap between the two neighbours. */
typedef struct {
    double sum, abs;
    long n;
} rounding_stats;

/* got is one of exact's two bf16 neighbours; where there is a choice its error is counted. */
static void check_rounding(float got, float exact, rounding_stats *st) {
    float lo, hi;
    bf16_neighbours(exact, &lo, &hi);
    assert_true(got == lo || got == hi);
    if (hi > lo) {
        const double e = ((double)got - exact) / ((double)hi - lo);
        st->sum += e;
        st->abs += fabs(e);
        st->n++;
    }
}

/* At least min_n roundings, unbiased: the mean error a small fraction of a unit, where rounding
 * towards zero would give minus half a unit, so this fails on truncation. */
static void check_unbiased(const rounding_stats *st, const char *what, long min_n) {
    const double bias = st->sum / (double)st->n;
    printf("%s: %ld stochastic roundings, mean error %.4f of a unit (mean |error| %.3f)\n", what,
           st->n, bias, st->abs / (double)st->n);
    assert_true(st->n > min_n);
    assert_true(fabs(bias) < 0.02);
}

/* A table of one n-element entry of `kind`, and an AdamW-only config with bf16 moments. */
static void bf16_moments_case(zy_param_table *t, int64_t n, zy_param_kind kind, float beta2,
                              zy_optim_config *cfg) {
    params_init(t);
    params_add(t, "w", 1, (int64_t[]){n}, kind, -1);
    optim_config_default(cfg);
    cfg->use_muon = 0;
    cfg->adam_moments = ZY_ADAM_MOMENTS_BF16;
    cfg->beta2 = beta2;
}

/* Each step's moments are one of the two bf16 neighbours of the fp32 moments computed from the
 * previous stored ones; the weights move by the formula from the stored (rounded) moments; over
 * many elements the rounding is unbiased (the mean error a small fraction of its spread, where
 * rounding towards zero would give minus half a unit, so this fails on truncation); and the bits
 * are reproducible from (step, index) alone: a second optimizer gives the same. */
static void test_adamw_bf16_moments(void **state) {
    (void)state;
    enum { N = 20000 };
    zy_param_table t;
    zy_optim_config cfg;
    bf16_moments_case(&t, N, ZY_PARAM_EMBED, 0.99f, &cfg);
    zy_optim opt, again;
    assert_int_equal(optim_init(&opt, &cpu, &cfg, &t), ZY_OK);
    assert_int_equal(optim_init(&again, &cpu, &cfg, &t), ZY_OK);
    float *p = malloc(N * sizeof *p), *p2 = malloc(N * sizeof *p2), *g = malloc(N * sizeof *g);
    for (int i = 0; i < N; i++) p[i] = p2[i] = 0.01f * (float)(i % 97) - 0.4f;
    float *m = opt.exp_avg, *v = opt.exp_avg_sq;   /* the CPU keeps them in fp32 buffers */
    rounding_stats st[2] = {{0, 0, 0}, {0, 0, 0}}; /* m, v */
    for (int s = 1; s <= 4; s++) {
        for (int i = 0; i < N; i++) g[i] = sinf(0.37f * (float)i + (float)s) * (s == 3 ? 1e-3f : 1);
        float *m0 = malloc(N * sizeof *m0), *v0 = malloc(N * sizeof *v0);
        float *pw = malloc(N * sizeof *pw);
        memcpy(m0, m, N * sizeof *m0);
        memcpy(v0, v, N * sizeof *v0);
        memcpy(pw, p, N * sizeof *pw);
        const float lr = 1e-2f;
        optim_step(&opt, &t, p, g, lr, 1.0f);
        optim_step(&again, &t, p2, g, lr, 1.0f);
        const double bc1 = 1.0 - pow(0.9, s), bc2 = 1.0 - pow(0.99, s);
        for (int i = 0; i < N; i++) {
            const float me = 0.9f * m0[i] + (1.0f - 0.9f) * g[i];
            const float ve = 0.99f * v0[i] + (1.0f - 0.99f) * g[i] * g[i];
            check_rounding(m[i], me, &st[0]);
            check_rounding(v[i], ve, &st[1]);
            const double want =
                pw[i] - lr * ((m[i] / bc1) / (sqrt(v[i] / bc2) + 1e-8) + 0.1 * pw[i]);
            assert_true(fabs(p[i] - want) <= 1e-6 * (1 + fabs(want)));
        }
        free(m0);
        free(v0);
        free(pw);
    }
    check_unbiased(&st[0], "bf16 moments, m", 10000);
    check_unbiased(&st[1], "bf16 moments, v", 10000);
    assert_memory_equal(p, p2, N * sizeof *p);
    assert_memory_equal(opt.exp_avg, again.exp_avg, N * sizeof(float));
    assert_memory_equal(opt.exp_avg_sq, again.exp_avg_sq, N * sizeof(float));
    optim_free(&opt);
    optim_free(&again);
    params_free(&t);
    free(p);
    free(p2);
    free(g);
}

/* The random bits follow the element's index in the parameter buffer: two entries with the same
 * values round differently (with indices counted within an entry they would round alike). */
static void test_adamw_bf16_moments_by_index(void **state) {
    (void)state;
    enum { N = 4096 };
    zy_param_table t;
    zy_optim_config cfg;
    bf16_moments_case(&t, N, ZY_PARAM_VECTOR, 0.95f, &cfg);
    params_add(&t, "w2", 1, (int64_t[]){N}, ZY_PARAM_VECTOR, -1);
    zy_optim opt;
    assert_int_equal(optim_init(&opt, &cpu, &cfg, &t), ZY_OK);
    float *p = calloc(t.total, sizeof *p), *g = calloc(t.total, sizeof *g);
    const size_t o2 = t.items[1].offset;
    for (int i = 0; i < N; i++) g[i] = g[o2 + i] = sinf(0.61f * (float)i);
    optim_step(&opt, &t, p, g, 1e-3f, 1.0f);
    const float *m = opt.exp_avg, *v = opt.exp_avg_sq;
    const size_t s2 = opt.state_off[1];
    int differ = 0;
    for (int i = 0; i < N; i++) differ += m[i] != m[s2 + i] || v[i] != v[s2 + i];
    printf("bf16 moments of two equal entries: %d of %d elements rounded differently\n", differ, N);
    assert_true(differ > N / 4);
    optim_free(&opt);
    params_free(&t);
    free(p);
    free(g);
}

/* x rounded to the nearest bf16 value. */
static float bf16_nearest(float x) {
    return zy_bf16_to_f32(zy_f32_to_bf16(x));
}

/* A checkpoint of one step under cfg_a "resumed" under cfg_b: a (cfg_a) takes a step, its state
 * tensors are copied by order into b (cfg_b) and loaded (optim_state_from_host). The caller frees
 * both optimizers. */
static void resume_state_into(const zy_param_table *t, const zy_optim_config *cfg_a,
                              const zy_optim_config *cfg_b, zy_optim *a, zy_optim *b) {
    assert_int_equal(optim_init(a, &cpu, cfg_a, t), ZY_OK);
    assert_int_equal(optim_init(b, &cpu, cfg_b, t), ZY_OK);
    float *p = calloc(t->total, sizeof *p), *g = calloc(t->total, sizeof *g);
    for (size_t i = 0; i < t->total; i++) g[i] = cosf(0.3f * (float)i);
    optim_step(a, t, p, g, 1e-3f, 1.0f);
    int na, nb;
    zy_state_tensor *sa = optim_state_tensors(a, t, &na), *sb = optim_state_tensors(b, t, &nb);
    assert_int_equal(na, nb);
    for (int k = 0; k < na; k++) memcpy(sb[k].data, sa[k].data, sa[k].numel * sizeof(float));
    optim_state_from_host(b);
    free(sa);
    free(sb);
    free(p);
    free(g);
}

/* A fp32 state loaded into a bf16-moments optimizer (a checkpoint of a fp32 run, resumed with the
 * setting changed) is rounded to nearest once loaded, as the GPU's copy rounds it. */
static void test_adamw_bf16_moments_load_fp32(void **state) {
    (void)state;
    enum { N = 1000 };
    zy_param_table t;
    zy_optim_config cfg, cfg32;
    bf16_moments_case(&t, N, ZY_PARAM_VECTOR, 0.95f, &cfg);
    cfg32 = cfg;
    cfg32.adam_moments = ZY_ADAM_MOMENTS_F32;
    zy_optim a, b;
    resume_state_into(&t, &cfg32, &cfg, &a, &b);
    const float *live[2] = {b.exp_avg, b.exp_avg_sq}, *src[2] = {a.exp_avg, a.exp_avg_sq};
    int not_bf16 = 0;
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < N; i++) {
            not_bf16 += bf16_nearest(src[k][i]) != src[k][i];
            assert_true(live[k][i] == bf16_nearest(src[k][i]));
        }
    assert_true(not_bf16 > N); /* the fp32 state was not bf16 already */
    optim_free(&a);
    optim_free(&b);
    params_free(&t);
}

/* Why the rounding is stochastic: with beta2 = 0.999 a second moment whose gradient stops decays by
 * 0.1% a step, under half a bf16 unit, so rounding to nearest would keep it where it is (and
 * truncation would halve it every ~140 steps). Stochastic rounding keeps the mean on 0.999^t. */
static void test_adamw_bf16_moments_decay(void **state) {
    (void)state;
    enum { N = 4096, STEPS = 1000 };
    zy_param_table t;
    zy_optim_config cfg;
    bf16_moments_case(&t, N, ZY_PARAM_VECTOR, 0.999f, &cfg);
    zy_optim opt;
    assert_int_equal(optim_init(&opt, &cpu, &cfg, &t), ZY_OK);
    float *p = calloc(N, sizeof *p), *g = malloc(N * sizeof *g);
    for (int i = 0; i < N; i++) g[i] = 1.0f;
    optim_step(&opt, &t, p, g, 0.0f, 1.0f); /* v = 0.001 (rounded) */
    double v1 = 0;
    for (int i = 0; i < N; i++) v1 += ((float *)opt.exp_avg_sq)[i];
    memset(g, 0, N * sizeof *g);
    for (int s = 1; s < STEPS; s++) optim_step(&opt, &t, p, g, 0.0f, 1.0f);
    double v = 0;
    for (int i = 0; i < N; i++) v += ((float *)opt.exp_avg_sq)[i];
    const double ratio = v / v1, want = pow(0.999, STEPS - 1);
    printf("bf16 second moment after %d steps without gradient: %.4f of its start (exact %.4f)\n",
           STEPS - 1, ratio, want);
    assert_true(fabs(ratio / want - 1.0) < 0.02);
    optim_free(&opt);
    params_free(&t);
    free(p);
    free(g);
}

/* ---- Muon with a bf16 momentum (optimizer.muon_momentum_dtype bfloat16) ---- */

/* A table of one Muon stack [S, R, C] (S equal-shaped matrices) and a config with a bf16 momentum
 * (AdamW's moments left fp32, so only the momentum is rounded). */
enum { MB_S = 3, MB_R = 48, MB_C = 96, MB_N = MB_S * MB_R * MB_C };
static void bf16_momentum_case(zy_param_table *t, zy_optim_config *cfg) {
    params_init(t);
    params_add(t, "w", 3, (int64_t[]){MB_S, MB_R, MB_C}, ZY_PARAM_MATRIX, -1);
    optim_config_default(cfg);
    cfg->muon_momentum_dtype = ZY_ADAM_MOMENTS_BF16;
}

/* Each step's momentum is one of the two bf16 neighbours of mu * (the stored momentum) + g, the
 * rounding unbiased over many elements (truncation would give minus half a unit); the update is
 * Newton-Schulz of the Nesterov u formed from the stored (rounded) momentum, applied exactly as
 * optim_apply_update does; equal matrices of the stack round differently (the bits follow the
 * element's index in the parameter buffer, not its index within a matrix); a second optimizer
 * draws the same bits. */
static void test_muon_bf16_momentum(void **state) {
    (void)state;
    const int MN = MB_R * MB_C;
    zy_param_table t;
    zy_optim_config cfg;
    bf16_momentum_case(&t, &cfg);
    zy_optim opt, again;
    assert_int_equal(optim_init(&opt, &cpu, &cfg, &t), ZY_OK);
    assert_int_equal(optim_init(&again, &cpu, &cfg, &t), ZY_OK);
    assert_int_equal(opt.momentum_bf16, 0); /* the CPU keeps the values in an fp32 buffer */
    float *p = malloc(MB_N * sizeof *p), *p2 = malloc(MB_N * sizeof *p2);
    float *g = malloc(MB_N * sizeof *g), *m0 = malloc(MB_N * sizeof *m0);
    float *pw = malloc(MB_N * sizeof *pw), *u = malloc(MN * sizeof *u);
    float *work = malloc(optim_ns_work_floats(MB_R, MB_C) * sizeof *work);
    for (int i = 0; i < MB_N; i++) p[i] = p2[i] = 0.02f * (float)(i % 89) - 0.9f;
    const float *mom = opt.momentum, mu = cfg.muon_momentum, lr = 1e-2f;
    const float scale = optim_muon_scale(cfg.muon_scale, MB_R, MB_C);
    rounding_stats st = {0, 0, 0};
    int differ = 0;
    for (int s = 1; s <= 4; s++) {
        /* the stack's matrices get the same gradient: their momenta differ by the rounding alone */
        for (int i = 0; i < MB_N; i++) g[i] = sinf(0.37f * (float)(i % MN) + (float)s);
        memcpy(m0, mom, MB_N * sizeof *m0);
        memcpy(pw, p, MB_N * sizeof *pw);
        optim_step(&opt, &t, p, g, lr, 1.0f);
        optim_step(&again, &t, p2, g, lr, 1.0f);
        for (int i = 0; i < MB_N; i++) check_rounding(mom[i], mu * m0[i] + g[i], &st);
        for (int k = 0; k < MB_S; k++) {
            const size_t o = (size_t)k * MN;
            for (int i = 0; i < MN; i++) u[i] = g[o + i] + mu * mom[o + i];
            optim_newton_schulz(u, MB_R, MB_C, cfg.muon_ns_steps, opt.ns_abc, cfg.muon_ns_precond,
                                work);
            optim_apply_update(pw + o, u, MN, lr * cfg.muon_lr_ratio, scale, cfg.weight_decay);
            if (k > 0)
                for (int i = 0; i < MN; i++) differ += mom[o + i] != mom[i];
        }
        assert_memory_equal(p, pw, MB_N * sizeof *p);
    }
    check_unbiased(&st, "bf16 Muon momentum", 40000);
    printf("bf16 Muon momentum: equal matrices rounded differently at %d of %d elements\n", differ,
           4 * (MB_S - 1) * MN);
    assert_true(differ > (MB_S - 1) * MN); /* over 4 steps: a quarter of the chances or more */
    assert_memory_equal(p, p2, MB_N * sizeof *p);
    assert_memory_equal(opt.momentum, again.momentum, MB_N * sizeof(float));
    optim_free(&opt);
    optim_free(&again);
    params_free(&t);
    free(p);
    free(p2);
    free(g);
    free(m0);
    free(pw);
    free(u);
    free(work);
}

/* A fp32 momentum loaded into a bf16-momentum optimizer is rounded to nearest once loaded (as the
 * GPU's copy rounds it); AdamW's fp32 moments, not asked to be bf16, are left as loaded. */
static void test_muon_bf16_momentum_load_fp32(void **state) {
    (void)state;
    zy_param_table t;
    zy_optim_config cfg, cfg32;
    bf16_momentum_case(&t, &cfg);
    params_add(&t, "b", 1, (int64_t[]){256}, ZY_PARAM_VECTOR, -1);
    cfg32 = cfg;
    cfg32.muon_momentum_dtype = ZY_ADAM_MOMENTS_F32;
    zy_optim a, b;
    resume_state_into(&t, &cfg32, &cfg, &a, &b);
    const float *ma = a.momentum, *mb = b.momentum;
    int not_bf16 = 0;
    for (int i = 0; i < MB_N; i++) {
        not_bf16 += bf16_nearest(ma[i]) != ma[i];
        assert_true(mb[i] == bf16_nearest(ma[i]));
    }
    assert_true(not_bf16 > MB_N / 2); /* the fp32 momentum was not bf16 already */
    assert_memory_equal(b.exp_avg, a.exp_avg, a.adam_total * sizeof(float));
    assert_memory_equal(b.exp_avg_sq, a.exp_avg_sq, a.adam_total * sizeof(float));
    optim_free(&a);
    optim_free(&b);
    params_free(&t);
}

/* ---- an independent double-precision Muon (literal algorithm: transpose tall matrices) ---- */

/* c[m, n] = a[m, k] b[k, n] (row-major, double) */
static void matmul_d(const double *a, const double *b, double *c, int m, int k, int n) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int l = 0; l < k; l++) s += a[i * k + l] * b[l * n + j];
            c[i * n + j] = s;
        }
}

static void ns_ref(double *x, int r, int c, int steps) {
    int tr = r > c, R = tr ? c : r, C = tr ? r : c;
    double *X = malloc(sizeof(double) * (size_t)(r * c)), *A = malloc(sizeof(double) * R * R);
    double *AA = malloc(sizeof(double) * R * R), *BX = malloc(sizeof(double) * R * C);
    double *Xt = malloc(sizeof(double) * R * C);
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++) X[tr ? j * r + i : i * c + j] = x[i * c + j];
    double fro = 0;
    for (int i = 0; i < R * C; i++) fro += X[i] * X[i];
    fro = sqrt(fro) + 1e-7;
    for (int i = 0; i < R * C; i++) X[i] /= fro;
    for (int it = 0; it < steps; it++) {
        for (int i = 0; i < R; i++) /* Xt = X^T */
            for (int j = 0; j < C; j++) Xt[j * R + i] = X[i * C + j];
        matmul_d(X, Xt, A, R, C, R);
        matmul_d(A, A, AA, R, R, R);
        for (int i = 0; i < R * R; i++) AA[i] = -4.7750 * A[i] + 2.0315 * AA[i];
        matmul_d(AA, X, BX, R, R, C);
        for (int i = 0; i < R * C; i++) X[i] = 3.4445 * X[i] + BX[i];
    }
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++) x[i * c + j] = X[tr ? j * r + i : i * c + j];
    free(X);
    free(A);
    free(AA);
    free(BX);
    free(Xt);
}

/* A small model-like table: Muon matrices of every shape class, and the AdamW kinds. */
static void build_table(zy_param_table *t) {
    params_init(t);
    params_add(t, "wide", 2, (int64_t[]){6, 10}, ZY_PARAM_MATRIX, 0);
    params_add(t, "tall", 2, (int64_t[]){12, 5}, ZY_PARAM_MATRIX, 0);
    params_add(t, "experts", 3, (int64_t[]){3, 8, 6}, ZY_PARAM_MATRIX, 0);
    params_add(t, "norm", 1, (int64_t[]){7}, ZY_PARAM_VECTOR, 0);
    params_add(t, "emb", 2, (int64_t[]){9, 4}, ZY_PARAM_EMBED, -1);
    params_add(t, "conv", 3, (int64_t[]){4, 1, 3}, ZY_PARAM_CONV, 0);
    params_add(t, "bias_buf", 1, (int64_t[]){5}, ZY_PARAM_BUFFER, 0);
}

/* Two steps of the whole optimiser (Muon + AdamW) against a double-precision reference. */
static void check_muon_steps(zy_muon_scale rule, float ratio) {
    zy_param_table t;
    build_table(&t);
    zy_rng rng = zy_rng_init(5, 0);
    float *p = calloc(t.total, sizeof *p), *g = calloc(t.total, sizeof *g);
    float *p0 = malloc(t.total * sizeof *p0);
    fill_normal(p, t.total, 1.0f, &rng);
    memcpy(p0, p, t.total * sizeof *p);
    double *ref = malloc(t.total * sizeof *ref), *mom = calloc(t.total, sizeof *mom);
    double *m = calloc(t.total, sizeof *m), *v = calloc(t.total, sizeof *v);
    for (size_t i = 0; i < t.total; i++) ref[i] = p[i];

    zy_optim_config cfg;
    optim_config_default(&cfg);
    cfg.weight_decay = 0.05f;
    cfg.muon_scale = rule;
    cfg.muon_lr_ratio = ratio;
    zy_optim opt;
    assert_int_equal(optim_init(&opt, &cpu, &cfg, &t), ZY_OK);
    const double lr = 0.02, mu = 0.95, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.05;
    for (int step = 1; step <= 2; step++) {
        fill_normal(g, t.total, 0.5f, &rng);
        optim_step(&opt, &t, p, g, (float)lr, 1.0f);
        for (int i = 0; i < t.count; i++) {
            const zy_param *q = &t.items[i];
            size_t o = q->offset;
            if (q->kind == ZY_PARAM_BUFFER) continue;
            double dec = (q->kind == ZY_PARAM_MATRIX || q->kind == ZY_PARAM_EMBED) ? wd : 0;
            if (q->kind == ZY_PARAM_MATRIX) {
                int r = (int)q->shape[q->ndim - 2], c = (int)q->shape[q->ndim - 1];
                double scale = rule == ZY_MUON_SCALE_MATCH_ADAMW_RMS ? 0.2 * sqrt(r > c ? r : c)
                               : rule == ZY_MUON_SCALE_SPECTRAL ? sqrt(fmax(1.0, (double)r / c))
                                                                : 1.0;
                double *u = malloc(sizeof(double) * (size_t)(r * c));
                for (size_t e = 0; e < q->numel / (size_t)(r * c); e++) {
                    size_t b = o + e * (size_t)(r * c);
                    for (int j = 0; j < r * c; j++) {
                        mom[b + j] = mu * mom[b + j] + g[b + j];
                        u[j] = g[b + j] + mu * mom[b + j];
                    }
                    ns_ref(u, r, c, 5);
                    for (int j = 0; j < r * c; j++)
                        ref[b + j] -= lr * ratio * (scale * u[j] + wd * ref[b + j]);
                }
                free(u);
            } else {
                double bc1 = 1 - pow(b1, step), bc2 = 1 - pow(b2, step);
                for (size_t j = o; j < o + q->numel; j++) {
                    m[j] = b1 * m[j] + (1 - b1) * g[j];
                    v[j] = b2 * v[j] + (1 - b2) * g[j] * g[j];
                    ref[j] -= lr * ((m[j] / bc1) / (sqrt(v[j] / bc2) + eps) + dec * ref[j]);
                }
            }
        }
    }
    /* compare the parameter change; it is O(lr) and float rounding of p (O(1)) is ~1e-7 */
    for (int i = 0; i < t.count; i++) {
        const zy_param *q = &t.items[i];
        double maxd = 0, maxref = 0;
        for (size_t j = q->offset; j < q->offset + q->numel; j++) {
            double dref = ref[j] - p0[j], d = (double)p[j] - p0[j];
            if (fabs(d - dref) > maxd) maxd = fabs(d - dref);
            if (fabs(dref) > maxref) maxref = fabs(dref);
        }
        if (q->kind == ZY_PARAM_BUFFER)
            assert_true(maxref == 0 && maxd == 0); /* untouched */
        else
            assert_true(maxd < 1e-4 * maxref + 1e-6);
    }
    optim_free(&opt);
    params_free(&t);
    free(p);
    free(g);
    free(p0);
    free(ref);
    free(mom);
    free(m);
    free(v);
}

static void test_muon_vs_double_reference(void **state) {
    (void)state;
    check_muon_steps(ZY_MUON_SCALE_MATCH_ADAMW_RMS, 1.0f);
    check_muon_steps(ZY_MUON_SCALE_SPECTRAL, 5.0f);
    check_muon_steps(ZY_MUON_SCALE_NONE, 1.0f);
}

/* MATCH_ADAMW_RMS gives an update RMS near 0.2 whatever the shape; the scale rules as formulas. */
static void test_muon_scale_rules(void **state) {
    (void)state;
    assert_true(fabsf(optim_muon_scale(ZY_MUON_SCALE_MATCH_ADAMW_RMS, 64, 256) - 3.2f) < 1e-6f);
    assert_true(fabsf(optim_muon_scale(ZY_MUON_SCALE_SPECTRAL, 256, 64) - 2.0f) < 1e-6f);
    assert_true(optim_muon_scale(ZY_MUON_SCALE_SPECTRAL, 64, 256) == 1.0f);
    assert_true(optim_muon_scale(ZY_MUON_SCALE_NONE, 64, 256) == 1.0f);
    const int shapes[3][2] = {{64, 256}, {256, 64}, {96, 96}};
    zy_rng rng = zy_rng_init(3, 0);
    for (int s = 0; s < 3; s++) {
        int r = shapes[s][0], c = shapes[s][1];
        size_t n = (size_t)(r * c);
        float *x = malloc(n * sizeof *x), *w = malloc(optim_ns_work_floats(r, c) * sizeof *w);
        fill_normal(x, n, 1.0f, &rng);
        optim_newton_schulz(x, r, c, 5, FIXED_ABC, ZY_NS_PRECOND_FROBENIUS, w);
        double ss = 0, k = optim_muon_scale(ZY_MUON_SCALE_MATCH_ADAMW_RMS, r, c);
        for (size_t i = 0; i < n; i++) ss += (k * x[i]) * (k * x[i]);
        double rms = sqrt(ss / (double)n);
        /* singular values in ~[0.7, 1.2] put the RMS within that band of 0.2 */
        assert_true(rms > 0.2 * 0.65 && rms < 0.2 * 1.25);
        free(x);
        free(w);
    }
}

/* use_muon = 0: matrices get AdamW (first step = -lr * (sign(g) + wd p)), vectors and conv no wd.
 */
static void test_adamw_only_and_decay_kinds(void **state) {
    (void)state;
    zy_param_table t;
    build_table(&t);
    zy_optim_config cfg;
    optim_config_default(&cfg);
    cfg.use_muon = 0;
    cfg.weight_decay = 0.5f;
    zy_optim opt;
    assert_int_equal(optim_init(&opt, &cpu, &cfg, &t), ZY_OK);
    assert_int_equal(opt.muon_total, 0);
    float *p = malloc(t.total * sizeof *p), *g = malloc(t.total * sizeof *g);
    for (size_t i = 0; i < t.total; i++) {
        p[i] = 1.0f;
        g[i] = (i % 2) ? 0.25f : -3.0f;
    }
    optim_step(&opt, &t, p, g, 0.01f, 1.0f);
    for (int i = 0; i < t.count; i++) {
        const zy_param *q = &t.items[i];
        double wd = (q->kind == ZY_PARAM_MATRIX || q->kind == ZY_PARAM_EMBED) ? 0.5 : 0.0;
        for (size_t j = q->offset; j < q->offset + q->numel; j++) {
            double want =
                q->kind == ZY_PARAM_BUFFER ? 1.0 : 1.0 - 0.01 * ((g[j] > 0 ? 1 : -1) + wd);
            assert_true(fabs(p[j] - want) < 1e-6);
        }
    }
    optim_free(&opt);
    params_free(&t);
    free(p);
    free(g);
}

/* build_table's table, two optimisers of the default config over it, and their weights and a
 * gradient buffer: the tests that step both and compare them. */
typedef struct {
    zy_param_table t;
    zy_optim a, b;
    float *pa, *pb, *g; /* [t.total]: a's weights, b's (a copy of a's to start), a gradient */
    zy_rng rng;         /* drew pa; draws the gradients next */
} optim_pair;

static void pair_init(optim_pair *x, uint64_t seed) {
    build_table(&x->t);
    zy_optim_config cfg;
    optim_config_default(&cfg);
    assert_int_equal(optim_init(&x->a, &cpu, &cfg, &x->t), ZY_OK);
    assert_int_equal(optim_init(&x->b, &cpu, &cfg, &x->t), ZY_OK);
    const size_t bytes = x->t.total * sizeof(float);
    x->pa = malloc(bytes), x->pb = malloc(bytes), x->g = malloc(bytes);
    x->rng = zy_rng_init(seed, 0);
    fill_normal(x->pa, x->t.total, 1.0f, &x->rng);
    memcpy(x->pb, x->pa, bytes);
}

static void pair_free(optim_pair *x) {
    optim_free(&x->a);
    optim_free(&x->b);
    params_free(&x->t);
    free(x->pa);
    free(x->pb);
    free(x->g);
}

/* Names, shapes and a round trip through a name-keyed store: a fresh optimiser loaded from the
 * saved state continues bit-identically. */
static void test_optim_state_round_trip(void **state) {
    (void)state;
    optim_pair x;
    pair_init(&x, 9);
    zy_param_table t = x.t;
    zy_optim *a = &x.a, *b = &x.b;
    float *pa = x.pa, *pb = x.pb, *g = x.g;
    for (int s = 0; s < 3; s++) {
        fill_normal(g, t.total, 1.0f, &x.rng);
        optim_step(a, &t, pa, g, 1e-2f, 1.0f);
    }
    int na, nb;
    zy_state_tensor *sa = optim_state_tensors(a, &t, &na);
    zy_state_tensor *sb = optim_state_tensors(b, &t, &nb);
    /* 3 Muon tensors (1 each) + norm, emb, conv (2 each); the buffer has none */
    assert_int_equal(na, 3 + 2 * 3);
    assert_int_equal(nb, na);
    assert_string_equal(sa[0].name, "muon_momentum.wide");
    assert_string_equal(sa[2].name, "muon_momentum.experts");
    assert_int_equal(sa[2].ndim, 3);
    assert_int_equal(sa[2].shape[0], 3);
    assert_int_equal(sa[2].numel, 3 * 8 * 6);
    assert_string_equal(sa[3].name, "exp_avg.norm");
    assert_string_equal(sa[4].name, "exp_avg_sq.norm");
    for (int i = 0; i < na; i++)
        for (int j = i + 1; j < na; j++) assert_true(strcmp(sa[i].name, sa[j].name) != 0);
    /* "save" by name, "load" by name in reverse order */
    for (int i = nb - 1; i >= 0; i--) {
        int found = 0;
        for (int j = 0; j < na; j++)
            if (strcmp(sa[j].name, sb[i].name) == 0) {
                assert_int_equal(sa[j].numel, sb[i].numel);
                memcpy(sb[i].data, sa[j].data, sa[j].numel * sizeof(float));
                found = 1;
            }
        assert_true(found);
    }
    b->step = a->step;
    memcpy(pb, pa, t.total * sizeof *pa);
    fill_normal(g, t.total, 1.0f, &x.rng);
    optim_step(a, &t, pa, g, 1e-2f, 1.0f);
    optim_step(b, &t, pb, g, 1e-2f, 1.0f);
    assert_memory_equal(pa, pb, t.total * sizeof *pa);
    free(sa);
    free(sb);
    pair_free(&x);
}

/* ZeRO-1's split entries: an optimizer updating a 16-aligned slice of each AdamW entry holds
 * those elements' moments only (the state is the slices' size), and its host mirror holds every
 * entry whole: after optim_state_to_host the slices carry the bits a whole optimizer's moments
 * have there (AdamW is elementwise), the rest of the mirror what was loaded into it; a load
 * through the mirror (optim_state_from_host) continues the slices bit for bit. */
static void test_sliced_state(void **state) {
    (void)state;
    zy_param_table t;
    params_init(&t);
    params_add(&t, "emb", 2, (int64_t[]){37, 8}, ZY_PARAM_EMBED, -1);
    params_add(&t, "mat", 2, (int64_t[]){4, 8}, ZY_PARAM_MATRIX, 0); /* Muon: no AdamW state */
    params_add(&t, "norm", 1, (int64_t[]){7}, ZY_PARAM_VECTOR, 0);
    params_add(&t, "buf", 1, (int64_t[]){5}, ZY_PARAM_BUFFER, 0); /* no state */
    params_add(&t, "emb2", 2, (int64_t[]){11, 9}, ZY_PARAM_EMBED, -1);
    zy_optim_config cfg;
    optim_config_default(&cfg);
    /* slices of emb and emb2; the rest whole */
    size_t range[10] = {16, 160, 0, 32, 0, 7, 0, 5, 48, 99};
    zy_optim whole, part, again;
    assert_int_equal(optim_init(&whole, &cpu, &cfg, &t), ZY_OK);
    assert_int_equal(optim_init_owned(&part, &cpu, &cfg, &t, NULL, range, NULL), ZY_OK);
    assert_int_equal(optim_init_owned(&again, &cpu, &cfg, &t, NULL, range, NULL), ZY_OK);
    assert_int_equal(part.adam_total, 144 + 16 + 64); /* 16-aligned slices */
    assert_true(optim_state_mirrored(&part) && !optim_state_mirrored(&whole));
    zy_rng rng = zy_rng_init(41, 0);
    float *pw = malloc(t.total * sizeof(float)), *pp = malloc(t.total * sizeof(float));
    float *g = malloc(t.total * sizeof(float));
    fill_normal(pw, t.total, 1.0f, &rng);
    memcpy(pp, pw, t.total * sizeof(float));
    for (int k = 0; k < 3; k++) {
        fill_normal(g, t.total, 0.5f, &rng);
        optim_step(&whole, &t, pw, g, 1e-2f, 1.0f);
        optim_step(&part, &t, pp, g, 1e-2f, 1.0f);
    }
    optim_state_to_host(&part);
    int nw, np;
    zy_state_tensor *sw = optim_state_tensors(&whole, &t, &nw);
    zy_state_tensor *sp = optim_state_tensors(&part, &t, &np);
    assert_int_equal(nw, 7); /* 3 AdamW entries, 2 moments each; the matrix's momentum */
    assert_int_equal(np, nw);
    for (int k = 0; k < nw; k++) {
        assert_string_equal(sp[k].name, sw[k].name);
        const int i = params_find(&t, strchr(sw[k].name, '.') + 1);
        const size_t lo = range[2 * i], hi = range[2 * i + 1];
        assert_int_equal(sp[k].numel, t.items[i].numel); /* named and shaped whole */
        assert_memory_equal(sp[k].data + lo, sw[k].data + lo, (hi - lo) * sizeof(float));
        for (size_t j = 0; j < t.items[i].numel; j++) /* nothing was loaded outside the slice */
            if (j < lo || j >= hi) assert_true(sp[k].data[j] == 0.0f);
        assert_memory_equal(pp + t.items[i].offset + lo, pw + t.items[i].offset + lo,
                            (hi - lo) * sizeof(float));
    }
    /* a resume: the whole moments loaded by name into a fresh sliced optimizer */
    zy_state_tensor *sa = optim_state_tensors(&again, &t, &np);
    for (int k = 0; k < np; k++) memcpy(sa[k].data, sw[k].data, sw[k].numel * sizeof(float));
    optim_state_from_host(&again);
    again.step = whole.step;
    float *pa = malloc(t.total * sizeof(float));
    memcpy(pa, pw, t.total * sizeof(float));
    fill_normal(g, t.total, 0.5f, &rng);
    optim_step(&whole, &t, pw, g, 1e-2f, 1.0f);
    optim_step(&again, &t, pa, g, 1e-2f, 1.0f);
    for (int i = 0; i < t.count; i++)
        assert_memory_equal(pa + t.items[i].offset + range[2 * i],
                            pw + t.items[i].offset + range[2 * i],
                            (range[2 * i + 1] - range[2 * i]) * sizeof(float));
    free(sa);
    free(sw);
    free(sp);
    free(pw);
    free(pp);
    free(pa);
    free(g);
    optim_free(&whole);
    optim_free(&part);
    optim_free(&again);
    params_free(&t);
}

/* Clipping's factor given to the step (grad_scale) gives the bits of scaling the gradients in
 * place first, for AdamW and Muon tensors, weights and state alike; the gradients are not
 * modified. */
static void test_grad_scale_is_scaling_in_place(void **state) {
    (void)state;
    optim_pair x;
    pair_init(&x, 11);
    zy_param_table t = x.t;
    zy_optim *a = &x.a, *b = &x.b;
    float *pa = x.pa, *pb = x.pb, *g = x.g;
    float *g0 = malloc(t.total * sizeof *g0), *gs = malloc(t.total * sizeof *gs);
    const float scales[3] = {0.3f, 1.0f, 0.0123f};
    for (int step = 0; step < 3; step++) {
        fill_normal(g, t.total, 2.0f, &x.rng);
        memcpy(g0, g, t.total * sizeof *g);
        for (size_t i = 0; i < t.total; i++) gs[i] = g[i] * scales[step];
        optim_step(a, &t, pa, g, 1e-2f, scales[step]);
        optim_step(b, &t, pb, gs, 1e-2f, 1.0f);
        assert_memory_equal(g, g0, t.total * sizeof *g);
    }
    assert_memory_equal(pa, pb, t.total * sizeof *pa);
    int na, nb;
    zy_state_tensor *sa = optim_state_tensors(a, &t, &na);
    zy_state_tensor *sb = optim_state_tensors(b, &t, &nb);
    assert_int_equal(na, nb);
    for (int i = 0; i < na; i++)
        assert_memory_equal(sa[i].data, sb[i].data, sa[i].numel * sizeof(float));
    free(sa);
    free(sb);
    pair_free(&x);
    free(g0);
    free(gs);
}

/* optim_step_runs' contract (ZeRO-1 queues each group's broadcast in done): done(group) once per
 * run of equal groups, in table order, when that run's entries are updated; on the CPU (this
 * test) the later runs' not yet (the GPU's plan by runs, optim_plan_runs, may have updated the
 * next run of its key too); and the same weights as optim_step. */
typedef struct {
    const zy_param_table *t;
    const int *group;
    const float *p, *p0; /* the weights being updated, and before the step */
    int calls, seen[8], bad;
} runs_probe;

static void probe_done(void *user, int group) {
    runs_probe *r = user;
    r->seen[r->calls++] = group;
    for (int i = 0; i < r->t->count; i++) { /* entries of earlier runs moved, later ones did not */
        const zy_param *q = &r->t->items[i];
        if (q->kind == ZY_PARAM_BUFFER) continue;
        const int moved = memcmp(r->p + q->offset, r->p0 + q->offset, q->numel * sizeof(float));
        if ((moved != 0) != (r->group[i] <= group)) r->bad = 1;
    }
}

static void test_step_runs_calls_done_per_group(void **state) {
    (void)state;
    optim_pair x;
    pair_init(&x, 13);
    zy_param_table t = x.t;
    float *pa = x.pa, *pb = x.pb, *g = x.g;
    /* build_table's 7 entries as 3 runs: -1, 0 x 4, 1 x 2 (a buffer among them: no update) */
    const int group[7] = {-1, 0, 0, 0, 0, 1, 1};
    assert_int_equal(t.count, 7);
    float *p0 = malloc(t.total * sizeof *p0);
    fill_normal(g, t.total, 1.0f, &x.rng);
    memcpy(p0, pa, t.total * sizeof *pa);
    runs_probe r = {&t, group, pa, p0, 0, {0}, 0};
    optim_step_runs(&x.a, &t, pa, g, 1e-2f, 1.0f, group, probe_done, &r);
    optim_step(&x.b, &t, pb, g, 1e-2f, 1.0f);
    assert_int_equal(r.calls, 3);
    assert_int_equal(r.seen[0], -1);
    assert_int_equal(r.seen[1], 0);
    assert_int_equal(r.seen[2], 1);
    assert_int_equal(r.bad, 0);
    assert_memory_equal(pa, pb, t.total * sizeof *pa);
    pair_free(&x);
    free(p0);
}

static void test_optim_bad_config(void **state) {
    (void)state;
    zy_param_table t;
    build_table(&t);
    zy_optim opt;
    zy_optim_config c;
    optim_config_default(&c);
    assert_int_equal(optim_config_check(&c), ZY_OK);
    c.beta1 = 1.0f;
    assert_int_equal(optim_init(&opt, &cpu, &c, &t), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "beta1"));
    assert_non_null(strstr(zy_errmsg(), "found 1"));
    optim_free(&opt); /* safe after a failed init */
    optim_config_default(&c);
    c.muon_ns_steps = 0;
    assert_int_equal(optim_config_check(&c), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "muon_ns_steps"));
    optim_config_default(&c);
    c.muon_ns_coefs = 2;
    assert_int_equal(optim_config_check(&c), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "muon_ns_coefs"));
    optim_config_default(&c);
    c.muon_ns_precond = 2;
    assert_int_equal(optim_config_check(&c), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "muon_ns_precond"));
    optim_config_default(&c);
    c.eps = 0;
    assert_int_equal(optim_config_check(&c), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "eps"));
    optim_config_default(&c);
    c.lr = NAN;
    assert_int_equal(optim_config_check(&c), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "lr"));
    optim_config_default(&c);
    c.muon_scale = (zy_muon_scale)7;
    assert_int_equal(optim_config_check(&c), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "muon_scale"));
    optim_config_default(&c);
    c.decay_kinds |= ZY_KIND_BIT(ZY_PARAM_BUFFER);
    assert_int_equal(optim_config_check(&c), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "decay_kinds"));
    optim_config_default(&c);
    c.embedding_update = 3;
    assert_int_equal(optim_config_check(&c), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "embedding_update"));
    optim_config_default(&c);
    c.adam_moments = 2;
    assert_int_equal(optim_config_check(&c), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "adam_moments"));
    optim_config_default(&c);
    c.muon_momentum_dtype = -1;
    assert_int_equal(optim_config_check(&c), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "muon_momentum_dtype"));
    params_free(&t);
}

/* ---- schedules ---- */

static void test_schedule_cosine(void **state) {
    (void)state;
    zy_schedule s;
    schedule_default(&s, 110);
    s.kind = ZY_SCHED_COSINE;
    s.lr = 2.0f;
    s.warmup_steps = 10;
    s.min_lr_ratio = 0.1f;
    assert_int_equal(schedule_check(&s), ZY_OK);
    assert_true(fabsf(schedule_lr(&s, 0) - 0.2f) < 1e-6f);  /* 2 * 1/10 */
    assert_true(fabsf(schedule_lr(&s, 4) - 1.0f) < 1e-6f);  /* 2 * 5/10 */
    assert_true(fabsf(schedule_lr(&s, 9) - 2.0f) < 1e-6f);  /* warmup end: peak */
    assert_true(fabsf(schedule_lr(&s, 10) - 2.0f) < 1e-6f); /* cosine start */
    assert_true(fabsf(schedule_lr(&s, 60) - 1.1f) < 1e-6f); /* midpoint: (2 + 0.2) / 2 */
    assert_true(fabs(schedule_lr(&s, 35) - (0.2 + 1.8 * 0.5 * (1 + cos(M_PI / 4)))) < 1e-6);
    assert_true(fabsf(schedule_lr(&s, 110) - 0.2f) < 1e-6f); /* end: min */
    assert_true(fabsf(schedule_lr(&s, 500) - 0.2f) < 1e-6f);
    for (int64_t k = 10; k < 110; k++) assert_true(schedule_lr(&s, k + 1) <= schedule_lr(&s, k));
    s.kind = ZY_SCHED_CONSTANT;
    assert_true(fabsf(schedule_lr(&s, 60) - 2.0f) < 1e-6f);
    assert_true(fabsf(schedule_lr(&s, 0) - 0.2f) < 1e-6f);
}

static void test_schedule_wsd(void **state) {
    (void)state;
    zy_schedule s;
    schedule_default(&s, 100);
    s.kind = ZY_SCHED_WSD;
    s.lr = 1.0f;
    s.warmup_steps = 10;
    s.min_lr_ratio = 0.0f;
    s.decay_frac = 0.2f; /* decay over steps 80..100 */
    assert_int_equal(schedule_check(&s), ZY_OK);
    assert_true(fabsf(schedule_lr(&s, 9) - 1.0f) < 1e-6f);
    assert_true(fabsf(schedule_lr(&s, 50) - 1.0f) < 1e-6f);
    assert_true(fabsf(schedule_lr(&s, 80) - 1.0f) < 1e-6f);
    assert_true(fabsf(schedule_lr(&s, 90) - 0.5f) < 1e-6f); /* halfway through a linear decay */
    assert_true(fabsf(schedule_lr(&s, 95) - 0.25f) < 1e-6f);
    assert_true(schedule_lr(&s, 100) == 0.0f);
    s.decay = ZY_DECAY_SQRT;
    assert_true(fabs(schedule_lr(&s, 90) - (1.0 - sqrt(0.5))) < 1e-6);
    assert_true(fabsf(schedule_lr(&s, 85) - 0.5f) < 1e-6f); /* 1 - sqrt(1/4) */
    s.min_lr_ratio = 0.1f;
    assert_true(fabsf(schedule_lr(&s, 85) - 0.55f) < 1e-6f);
    assert_true(fabsf(schedule_lr(&s, 100) - 0.1f) < 1e-6f);
    /* a decay phase longer than the post-warmup part starts after warmup */
    s.decay_frac = 1.0f;
    s.decay = ZY_DECAY_LINEAR;
    s.min_lr_ratio = 0.0f;
    assert_true(fabsf(schedule_lr(&s, 10) - 1.0f) < 1e-6f);
    assert_true(fabsf(schedule_lr(&s, 55) - 0.5f) < 1e-6f);
}

static void test_schedule_bad_config(void **state) {
    (void)state;
    zy_schedule s;
    schedule_default(&s, 100);
    s.warmup_steps = 101;
    assert_int_equal(schedule_check(&s), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "warmup_steps"));
    schedule_default(&s, 0);
    assert_int_equal(schedule_check(&s), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "total_steps"));
    schedule_default(&s, 100);
    s.min_lr_ratio = 1.5f;
    assert_int_equal(schedule_check(&s), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "min_lr_ratio"));
    schedule_default(&s, 100);
    s.decay_frac = -0.1f;
    assert_int_equal(schedule_check(&s), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "decay_frac"));
}

/* ---- clipping ---- */

static void test_clip(void **state) {
    (void)state;
    zy_param_table t;
    params_init(&t);
    int ia = params_add(&t, "a", 1, (int64_t[]){2}, ZY_PARAM_VECTOR, -1);
    int ib = params_add(&t, "b", 2, (int64_t[]){1, 1}, ZY_PARAM_MATRIX, 0);
    int ic = params_add(&t, "buf", 1, (int64_t[]){3}, ZY_PARAM_BUFFER, 0);
    float *g = calloc(t.total, sizeof *g);
    float *ga = g + t.items[ia].offset, *gb = g + t.items[ib].offset, *gc = g + t.items[ic].offset;
    ga[0] = 3;
    ga[1] = 4;
    gb[0] = -12;
    gc[0] = gc[1] = gc[2] = 100; /* ignored */
    assert_true(fabs(clip_grad_sumsq(&cpu, &t, g) - 169.0) < 1e-9);
    assert_true(clip_factor(13.0, 100.0f) == 1.0f); /* below max: no clipping */
    assert_true(clip_factor(13.0, 0.0f) == 1.0f);   /* 0 = off */
    assert_true(fabs(clip_factor(13.0, 6.5f) - 6.5 / (13.0 + 1e-6)) < 1e-7);
    /* a non-finite gradient: the norm says so and the factor leaves the gradients alone (the
     * step decides what to do) */
    ga[0] = NAN;
    assert_true(isnan(clip_grad_sumsq(&cpu, &t, g)));
    assert_true(clip_factor(NAN, 1.0f) == 1.0f && clip_factor(INFINITY, 1.0f) == 1.0f);
    params_free(&t);
    free(g);

    /* a large tensor (several chunks) against a direct double sum */
    params_init(&t);
    params_add(&t, "big", 1, (int64_t[]){1000003}, ZY_PARAM_EMBED, -1);
    g = malloc(t.total * sizeof *g);
    zy_rng rng = zy_rng_init(1, 2);
    fill_normal(g, t.total, 1.0f, &rng);
    double want = 0;
    for (size_t i = 0; i < 1000003; i++) want += (double)g[i] * g[i];
    assert_true(fabs(clip_grad_sumsq(&cpu, &t, g) - want) < 1e-9 * want);
    params_free(&t);
    free(g);
}

/* ---- the balancing controller ---- */

/* The first update moves each bias by step_size * g / (|g| + eps) against the sign of g, then
 * shifts the layer so the skip class is at -1 (the canonical form): the differences between
 * classes are those of the plain update. */
static void test_balance_single_update(void **state) {
    (void)state;
    zy_balance_config cfg;
    balance_config_default(&cfg);
    cfg.step_size = 0.01f;
    zy_balance b;
    assert_int_equal(balance_init(&b, &cfg, 2, 3), ZY_OK);
    float bias0[4] = {0, 0, 0, -1}, bias1[4] = {0.5f, 0, 0, -1};
    float *biases[2] = {bias0, bias1};
    const int64_t counts[8] = {6, 2, 2, 0, /* layer 1 routed nothing: unchanged */ 0, 0, 0, 0};
    balance_step(&b, &cpu, biases, counts);
    const double f[4] = {0.6, 0.2, 0.2, 0.0}, init[4] = {0, 0, 0, -1};
    double plain[4];
    for (int e = 0; e < 4; e++) {
        double g = f[e] - 0.25;
        plain[e] = init[e] - 0.01 * g / (fabs(g) + 1e-8);
    }
    assert_true(plain[3] > -0.999); /* the skip class was under-used: the plain update raised it */
    for (int e = 0; e < 4; e++) assert_true(fabs(bias0[e] - (plain[e] - (plain[3] + 1.0))) < 1e-6);
    assert_true(bias0[3] == -1.0f);
    assert_true(bias1[0] == 0.5f && bias1[1] == 0.0f && bias1[3] == -1.0f);
    assert_int_equal(b.step, 1);
    balance_free(&b);
}

/* Many steps of the canonical controller route exactly as the plain (unshifted) Adam update would:
 * the differences to the skip class agree to rounding and the skip bias stays -1 bit for bit. */
static void test_balance_canonical_matches_plain(void **state) {
    (void)state;
    enum { E = 5, C = E + 1, STEPS = 400 };
    zy_balance_config cfg;
    balance_config_default(&cfg);
    cfg.step_size = 0.01f;
    zy_balance b;
    assert_int_equal(balance_init(&b, &cfg, 1, E), ZY_OK);
    float bias[C] = {0, 0, 0, 0, 0, -1};
    float *biases[1] = {bias};
    double plain[C] = {0, 0, 0, 0, 0, -1}, m[C] = {0}, v[C] = {0};
    zy_rng rng = zy_rng_init(4, 0);
    for (int t = 1; t <= STEPS; t++) {
        int64_t counts[C], total = 0;
        for (int e = 0; e < C; e++) total += counts[e] = (int64_t)zy_rng_below(&rng, 100) + 5 * e;
        balance_step(&b, &cpu, biases, counts);
        for (int e = 0; e < C; e++) { /* the plain update in double */
            double g = (double)counts[e] / (double)total - 1.0 / C;
            m[e] = 0.9 * m[e] + 0.1 * g;
            v[e] = 0.999 * v[e] + 0.001 * g * g;
            double mh = m[e] / (1 - pow(0.9, t)), vh = v[e] / (1 - pow(0.999, t));
            plain[e] -= 0.01 * mh / (sqrt(vh) + 1e-8);
        }
        assert_true(bias[E] == -1.0f);
    }
    assert_true(fabs(plain[E] + 1.0) > 0.1); /* unshifted, the skip bias would have moved far */
    for (int e = 0; e < E; e++)
        assert_true(fabs((bias[e] - bias[E]) - (plain[e] - plain[E])) < 1e-4);
    balance_free(&b);
}

static void test_balance_load_summary(void **state) {
    (void)state;
    const int64_t counts[4] = {10, 30, 0, 60};
    zy_load_summary s;
    balance_load_summary(counts, 3, &s);
    assert_true(fabsf(s.max_frac - 0.3f) < 1e-6f);
    assert_true(s.min_frac == 0.0f);
    assert_true(fabsf(s.skip_frac - 0.6f) < 1e-6f);
    double h = -(0.1 * log(0.1) + 0.3 * log(0.3) + 0.6 * log(0.6));
    assert_true(fabs(s.entropy - h) < 1e-6);
    assert_true(fabs(s.entropy_norm - h / log(4.0)) < 1e-6);
    assert_int_equal(s.tokens, 100);
    assert_true(s.max_over_mean == 30.0 * 3 / 40); /* 30 of 40 routed over 3 experts */
    const int64_t uniform[5] = {7, 7, 7, 7, 7};
    balance_load_summary(uniform, 4, &s);
    assert_true(fabsf(s.entropy_norm - 1.0f) < 1e-6f);
    assert_true(fabsf(s.max_frac - s.min_frac) < 1e-7f);
    assert_true(s.max_over_mean == 1.0);
    const int64_t skipped[3] = {0, 0, 5}; /* everything to the skip class */
    balance_load_summary(skipped, 2, &s);
    assert_true(s.max_over_mean == 0.0);
}

/* A synthetic router: fixed per-token probabilities where expert 0 dominates; each step routes by
 * argmax(p + bias) and runs the controller. The load must move toward uniform: the max expert
 * fraction falls toward 1/(E+1) and the skip fraction (0 at first, bias -1) rises toward it. */
static void test_balance_moves_load_to_uniform(void **state) {
    (void)state;
    enum { N = 1024, E = 8, C = E + 1, STEPS = 3000, TAIL = 500 };
    float *p = malloc(sizeof(float) * N * C);
    zy_rng rng = zy_rng_init(21, 0);
    for (int i = 0; i < N; i++) {
        float z[C], mx = -1e30f, s = 0;
        for (int e = 0; e < C; e++) {
            z[e] = zy_rng_normal(&rng) + (e == 0 ? 2.0f : 0.0f);
            if (z[e] > mx) mx = z[e];
        }
        for (int e = 0; e < C; e++) s += (z[e] = expf(z[e] - mx));
        for (int e = 0; e < C; e++) p[i * C + e] = z[e] / s;
    }
    zy_balance_config cfg;
    balance_config_default(&cfg);
    zy_balance b;
    assert_int_equal(balance_init(&b, &cfg, 1, E), ZY_OK);
    float bias[C] = {0};
    bias[E] = -1.0f;
    float *biases[1] = {bias};
    double first_max = 0, first_skip = 0, first_h = 0, tail_max = 0, tail_skip = 0, tail_h = 0;
    double worst_tail_max = 0;
    for (int step = 0; step < STEPS; step++) {
        int64_t counts[C] = {0};
        for (int i = 0; i < N; i++) {
            int best = 0;
            for (int e = 1; e < C; e++)
                if (p[i * C + e] + bias[e] > p[i * C + best] + bias[best]) best = e;
            counts[best]++;
        }
        zy_load_summary s;
        balance_load_summary(counts, E, &s);
        if (step == 0) {
            first_max = s.max_frac;
            first_skip = s.skip_frac;
            first_h = s.entropy_norm;
        }
        if (step >= STEPS - TAIL) {
            tail_max += s.max_frac / TAIL;
            tail_skip += s.skip_frac / TAIL;
            tail_h += s.entropy_norm / TAIL;
            if (s.max_frac > worst_tail_max) worst_tail_max = s.max_frac;
        }
        balance_step(&b, &cpu, biases, counts);
    }
    const double u = 1.0 / C;
    if (getenv("ZAYAC_VERBOSE"))
        printf("balance: max %.3f -> %.3f (worst %.3f), skip %.3f -> %.3f, H %.3f -> %.3f, "
               "1/(E+1) %.3f\n",
               first_max, tail_max, worst_tail_max, first_skip, tail_skip, first_h, tail_h, u);
    assert_true(first_max > 0.4);   /* expert 0 dominates at the start */
    assert_true(first_skip == 0.0); /* a -1 bias on a probability never wins */
    assert_true(tail_max < 1.5 * u);
    assert_true(worst_tail_max < 2.0 * u);
    assert_true(fabs(tail_skip - u) < 0.5 * u);
    assert_true(tail_h > 0.98);
    balance_free(&b);
    free(p);
}

static void test_balance_state_and_biases(void **state) {
    (void)state;
    zy_balance_config cfg;
    balance_config_default(&cfg);
    zy_balance a, b;
    assert_int_equal(balance_init(&a, &cfg, 2, 3), ZY_OK);
    assert_int_equal(balance_init(&b, &cfg, 2, 3), ZY_OK);
    float ba[2][4] = {{0, 0, 0, -1}, {0, 0, 0, -1}};
    float *pa[2] = {ba[0], ba[1]};
    const int64_t c1[8] = {5, 1, 1, 1, 0, 4, 4, 0}, c2[8] = {2, 2, 3, 1, 1, 1, 5, 1};
    balance_step(&a, &cpu, pa, c1);
    balance_step(&a, &cpu, pa, c2);
    int na, nb;
    zy_state_tensor *sa = balance_state_tensors(&a, &na), *sb = balance_state_tensors(&b, &nb);
    assert_int_equal(na, 4);
    assert_string_equal(sa[0].name, "balance_exp_avg.model.layers.0.mlp.gate.balancing_biases");
    assert_string_equal(sa[3].name, "balance_exp_avg_sq.model.layers.1.mlp.gate.balancing_biases");
    assert_int_equal(sa[1].shape[0], 4);
    for (int i = 0; i < nb; i++) {
        assert_string_equal(sa[i].name, sb[i].name);
        memcpy(sb[i].data, sa[i].data, sa[i].numel * sizeof(float));
    }
    b.step = a.step;
    float bb[2][4];
    memcpy(bb, ba, sizeof ba);
    float *pb[2] = {bb[0], bb[1]};
    balance_step(&a, &cpu, pa, c1);
    balance_step(&b, &cpu, pb, c1);
    assert_memory_equal(ba, bb, sizeof ba);
    free(sa);
    free(sb);
    balance_free(&a);
    balance_free(&b);

    /* finding the biases in a parameter table */
    zy_param_table t;
    params_init(&t);
    params_add(&t, "model.layers.0.mlp.gate.balancing_biases", 1, (int64_t[]){4}, ZY_PARAM_BUFFER,
               0);
    params_add(&t, "model.layers.1.mlp.gate.balancing_biases", 1, (int64_t[]){5}, ZY_PARAM_BUFFER,
               1);
    float *params = calloc(t.total, sizeof *params), *found[3];
    assert_int_equal(balance_find_biases(&t, params, 1, 3, found), ZY_OK);
    assert_ptr_equal(found[0], params + t.items[0].offset);
    assert_int_equal(balance_find_biases(&t, params, 2, 3, found), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "model.layers.1.mlp.gate.balancing_biases"));
    assert_non_null(strstr(zy_errmsg(), "[4]"));
    assert_non_null(strstr(zy_errmsg(), "[5]"));
    assert_int_equal(balance_find_biases(&t, params, 3, 4, found), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "[5]")); /* layer 0 has the wrong shape for E = 4 */
    params_free(&t);
    free(params);

    cfg.beta2 = 1.0f;
    assert_int_equal(balance_init(&a, &cfg, 2, 3), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "beta2"));
    balance_config_default(&cfg);
    cfg.step_size = -1;
    assert_int_equal(balance_config_check(&cfg), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "step_size"));
}

/* ---- timing (ZAYAC_BENCH=1): one optimiser step, Muon vs AdamW, on tiny-model shapes ---- */

static void bench_table(zy_param_table *t, int D, int L, int E, int F, int R, int V) {
    params_init(t);
    char name[ZY_PARAM_NAME_MAX];
    params_add(t, "model.embed_tokens.weight", 2, (int64_t[]){V, D}, ZY_PARAM_EMBED, -1);
    for (int l = 0; l < L; l++) {
#define ADD(suffix, nd, kind, ...)                                                                 \
    snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix);                                  \
    params_add(t, name, nd, (int64_t[]){__VA_ARGS__}, kind, l)
        ADD("q", 2, ZY_PARAM_MATRIX, D, D);
        ADD("k", 2, ZY_PARAM_MATRIX, D / 2, D);
        ADD("v_cur", 2, ZY_PARAM_MATRIX, D / 4, D);
        ADD("v_del", 2, ZY_PARAM_MATRIX, D / 4, D);
        ADD("o", 2, ZY_PARAM_MATRIX, D, D);
        ADD("conv", 3, ZY_PARAM_CONV, 3 * D / 2, 1, 2);
        ADD("router_down", 2, ZY_PARAM_MATRIX, R, D);
        ADD("fc1", 2, ZY_PARAM_MATRIX, R, R);
        ADD("fc2", 2, ZY_PARAM_MATRIX, R, R);
        ADD("out_proj", 2, ZY_PARAM_MATRIX, E + 1, R);
        ADD("gate_up", 3, ZY_PARAM_MATRIX, E, 2 * F, D);
        ADD("down", 3, ZY_PARAM_MATRIX, E, D, F);
        for (int k = 0; k < 12; k++) {
            snprintf(name, sizeof name, "model.layers.%d.vec%d", l, k);
            params_add(t, name, 1, (int64_t[]){D}, ZY_PARAM_VECTOR, l);
        }
#undef ADD
    }
}

/* Multiply-adds of the Newton-Schulz iterations of one [r, c] matrix (3 products per step). */
static double ns_flops(double r, double c, int steps) {
    double s = r < c ? r : c, l = r < c ? c : r;
    return steps * 2.0 * (s * s * l + s * s * s + s * s * l);
}

static void test_bench_muon_vs_adamw(void **state) {
    (void)state;
    if (!getenv("ZAYAC_BENCH")) skip();
    /* D, L, E, F, R, V */
    const int cfgs[3][6] = {
        {128, 2, 4, 256, 32, 2048}, {256, 4, 8, 256, 64, 4096}, {512, 8, 16, 512, 128, 8192}};
    const int n_cfgs = getenv("ZAYAC_BENCH_BIG") ? 3 : 2;
    for (int k = 0; k < n_cfgs; k++) {
        zy_param_table t;
        bench_table(&t, cfgs[k][0], cfgs[k][1], cfgs[k][2], cfgs[k][3], cfgs[k][4], cfgs[k][5]);
        size_t mat = 0;
        double flops = 0;
        for (int i = 0; i < t.count; i++) {
            const zy_param *q = &t.items[i];
            if (q->kind != ZY_PARAM_MATRIX) continue;
            mat += q->numel;
            double r = (double)q->shape[q->ndim - 2], c = (double)q->shape[q->ndim - 1];
            flops += ns_flops(r, c, 5) * ((double)q->numel / (r * c));
        }
        float *p = malloc(t.total * sizeof *p), *g = malloc(t.total * sizeof *g);
        zy_rng rng = zy_rng_init(1, 1);
        fill_normal(p, t.total, 0.02f, &rng);
        fill_normal(g, t.total, 1e-3f, &rng);
        double ms[2];
        for (int muon = 0; muon < 2; muon++) {
            zy_optim_config cfg;
            optim_config_default(&cfg);
            cfg.use_muon = muon;
            zy_optim opt;
            assert_int_equal(optim_init(&opt, &cpu, &cfg, &t), ZY_OK);
            optim_step(&opt, &t, p, g, 1e-4f, 1.0f); /* warm */
            ms[muon] = 1e30;
            for (int r = 0; r < 5; r++) { /* best of 5: the machine is shared */
                double t0 = zy_now();
                optim_step(&opt, &t, p, g, 1e-4f, 1.0f);
                double dt = (zy_now() - t0) * 1e3;
                if (dt < ms[muon]) ms[muon] = dt;
            }
            optim_free(&opt);
        }
        printf("bench D=%d L=%d E=%d F=%d R=%d V=%d: %.2fM params (%.2fM in matrices): "
               "AdamW step %.1f ms, Muon step %.1f ms (x%.1f; Newton-Schulz %.1f GFLOP, "
               "%.0f GFLOP/s)\n",
               cfgs[k][0], cfgs[k][1], cfgs[k][2], cfgs[k][3], cfgs[k][4], cfgs[k][5],
               t.total / 1e6, mat / 1e6, ms[0], ms[1], ms[1] / ms[0], flops / 1e9,
               flops / (ms[1] * 1e-3) / 1e9);
        params_free(&t);
        free(p);
        free(g);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_newton_schulz_vs_svd),
        cmocka_unit_test(test_newton_schulz_zero),
        cmocka_unit_test(test_newton_schulz_aol_start),
        cmocka_unit_test(test_newton_schulz_aol_lifts),
        cmocka_unit_test(test_ns_minimax_schedule),
        cmocka_unit_test(test_adamw_hand_computed),
        cmocka_unit_test(test_adamw_bf16_moments),
        cmocka_unit_test(test_adamw_bf16_moments_decay),
        cmocka_unit_test(test_adamw_bf16_moments_by_index),
        cmocka_unit_test(test_adamw_bf16_moments_load_fp32),
        cmocka_unit_test(test_muon_bf16_momentum),
        cmocka_unit_test(test_muon_bf16_momentum_load_fp32),
        cmocka_unit_test(test_muon_vs_double_reference),
        cmocka_unit_test(test_muon_scale_rules),
        cmocka_unit_test(test_adamw_only_and_decay_kinds),
        cmocka_unit_test(test_optim_state_round_trip),
        cmocka_unit_test(test_sliced_state),
        cmocka_unit_test(test_optim_bad_config),
        cmocka_unit_test(test_schedule_cosine),
        cmocka_unit_test(test_schedule_wsd),
        cmocka_unit_test(test_schedule_bad_config),
        cmocka_unit_test(test_clip),
        cmocka_unit_test(test_grad_scale_is_scaling_in_place),
        cmocka_unit_test(test_step_runs_calls_done_per_group),
        cmocka_unit_test(test_balance_single_update),
        cmocka_unit_test(test_balance_canonical_matches_plain),
        cmocka_unit_test(test_balance_load_summary),
        cmocka_unit_test(test_balance_moves_load_to_uniform),
        cmocka_unit_test(test_balance_state_and_biases),
        cmocka_unit_test(test_bench_muon_vs_adamw),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
