/* Shared helpers of the op tests (tests/test_ops_*.c): random tensors, error measures, and the
 * gradient check, which compares an analytic gradient with central finite differences of a scalar
 * loss L = sum(out * R) (R random, L summed in double) at sampled elements of a tensor.
 *
 * Two finite-difference checks per tensor:
 *  - through the test's own double-precision reference forward: step TU_H_REF = 1e-3 (times
 *    max(|x|,1)), Richardson-extrapolated from steps h and h/2 so the truncation error is O(h^4)
 *    ~ 1e-12; the quotient divides by the actual difference of the perturbed floats, and the double
 *    loss has ~1e-16 relative noise. What is left is the op's fp32 gradient (~1e-7 relative, more
 *    where sums cancel): tolerance TU_TOL_REF = 1e-5 of the largest gradient in the sample, 10x
 *    below the 1e-4 the model must reach.
 *  - through the op's own fp32 forward (step TU_H_OP = 1e-2, a few elements, also Richardson-
 *    extrapolated, which matters for inputs of small scale): fp32 rounding of M outputs puts noise
 *    ~sqrt(M) 4e-8 |out| / (2h), times 5/3 for the extrapolation, ~1e-4 on the quotient for the
 *    sizes used here, so the tolerance is TU_TOL_OP = 2e-3. It checks that backward is the
 *    derivative of the forward actually run, not only of the reference.
 * Include after <cmocka.h>. */
#ifndef ZY_OPS_TEST_UTIL_H
#define ZY_OPS_TEST_UTIL_H

#include "base/rng.h"
#include "ops/ops.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TU_H_REF    1e-3
#define TU_TOL_REF  1e-5
#define TU_H_OP     1e-2
#define TU_TOL_OP   2e-3
#define TU_NSAMP    48 /* elements checked against the reference per tensor */
#define TU_NSAMP_OP 6  /* elements checked against the op's forward per tensor */

static zy_rng tu_rng;
static zy_ctx tu_ctx = {.device = ZY_DEV_CPU, .num_threads = 2};

/* The largest error seen per test file, printed at the end (the report's measurements). */
static double tu_worst_fwd, tu_worst_ref, tu_worst_op;

static inline float *tu_alloc(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(p);
    return p;
}

/* n floats, normal(0, sd). */
static inline float *tu_randn(size_t n, float sd) {
    float *p = tu_alloc(n);
    for (size_t i = 0; i < n; i++) p[i] = zy_rng_normal(&tu_rng) * sd;
    return p;
}

/* n floats, uniform in [lo, hi). */
static inline float *tu_randu(size_t n, float lo, float hi) {
    float *p = tu_alloc(n);
    for (size_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * zy_rng_uniform(&tu_rng);
    return p;
}

/* n floats equal to v (NAN marks memory an op must overwrite). */
static inline float *tu_const(size_t n, float v) {
    float *p = tu_alloc(n);
    for (size_t i = 0; i < n; i++) p[i] = v;
    return p;
}

static inline float *tu_dup(const float *x, size_t n) {
    float *p = tu_alloc(n);
    memcpy(p, x, n * sizeof(float));
    return p;
}

static inline double *tu_dalloc(size_t n) {
    double *p = calloc(n ? n : 1, sizeof(double));
    assert_non_null(p);
    return p;
}

/* max |a - ref| / max |ref| (absolute when ref is all zero); NaN in a gives +inf. */
static inline double tu_err(const float *a, const double *ref, size_t n) {
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (isnan(d)) return INFINITY;
        if (d > e) e = d;
        if (fabs(ref[i]) > m) m = fabs(ref[i]);
    }
    return m > 0 ? e / m : e;
}

/* Records and asserts a forward error. */
static inline void tu_check_fwd(const char *what, double err, double tol) {
    printf("    fwd %-34s max rel err %.2e (tol %.0e)\n", what, err, tol);
    if (err > tu_worst_fwd) tu_worst_fwd = err;
    assert_true(err <= tol);
}

/* Sum of x * r in double. */
static inline double tu_dot(const float *x, const float *r, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * r[i];
    return s;
}

static inline double tu_ddot(const double *x, const float *r, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += x[i] * r[i];
    return s;
}

typedef double (*tu_loss_fn)(void *ctx);

/* Central difference quotient of loss at x[i] with step `step`; the quotient divides by the actual
 * difference of the two perturbed floats. */
static inline double tu_cd(tu_loss_fn loss, void *ctx, float *x, size_t i, double step) {
    float x0 = x[i];
    float xp = (float)(x0 + step), xm = (float)(x0 - step);
    x[i] = xp;
    double lp = loss(ctx);
    x[i] = xm;
    double lm = loss(ctx);
    x[i] = x0;
    return (lp - lm) / ((double)xp - (double)xm);
}

/* dL/dx[i] by finite differences with step h * max(|x[i]|, 1). rich: Richardson extrapolation
 * (4 D(h/2) - D(h)) / 3, which cancels the O(h^2) truncation term. */
static inline double tu_fd(tu_loss_fn loss, void *ctx, float *x, size_t i, double h, int rich) {
    double step = h * (fabs(x[i]) > 1 ? fabs(x[i]) : 1);
    if (!rich) return tu_cd(loss, ctx, x, i, step);
    return (4 * tu_cd(loss, ctx, x, i, step / 2) - tu_cd(loss, ctx, x, i, step)) / 3;
}

/* Sample index k of m for a tensor of n elements: all when n <= m, else the ends plus random. */
static inline size_t tu_pick(size_t n, int m, int k) {
    if (n <= (size_t)m) return (size_t)k;
    if (k == 0) return 0;
    if (k == 1) return n - 1;
    return (size_t)zy_rng_below(&tu_rng, n);
}

/* Max over the sample of |g - fd| / max over the sample of |fd| (absolute if all fd are tiny). */
static inline double tu_fd_err(tu_loss_fn loss, void *ctx, float *x, const float *g, size_t n,
                               int m, double h, int rich) {
    int cnt = n < (size_t)m ? (int)n : m;
    double e = 0, mx = 0;
    for (int k = 0; k < cnt; k++) {
        size_t i = tu_pick(n, m, k);
        double fd = tu_fd(loss, ctx, x, i, h, rich);
        double d = fabs((double)g[i] - fd);
        if (isnan(d)) return INFINITY;
        if (d > e) e = d;
        if (fabs(fd) > mx) mx = fabs(fd);
    }
    return mx > 1e-6 ? e / mx : e;
}

/* Gradient check of g = dL/dx against both finite differences (see the file comment); op_loss may
 * be NULL. h_ref overrides TU_H_REF when > 0 (for inputs that must stay in a tiny range). */
static inline void tu_check_grad(const char *what, tu_loss_fn ref_loss, tu_loss_fn op_loss,
                                 void *ctx, float *x, const float *g, size_t n, double h_ref) {
    double er = tu_fd_err(ref_loss, ctx, x, g, n, TU_NSAMP, h_ref > 0 ? h_ref : TU_H_REF, 1);
    double eo = op_loss ? tu_fd_err(op_loss, ctx, x, g, n, TU_NSAMP_OP, TU_H_OP, 1) : 0;
    printf("    bwd %-34s ref-FD %.2e (tol %.0e)  op-FD %.2e (tol %.0e)\n", what, er, TU_TOL_REF,
           eo, TU_TOL_OP);
    if (er > tu_worst_ref) tu_worst_ref = er;
    if (eo > tu_worst_op) tu_worst_op = eo;
    assert_true(er <= TU_TOL_REF);
    assert_true(eo <= TU_TOL_OP);
}

/* Accumulate semantics: after = before + g (g from a run on zeroed buffers). The two sides are
 * fp32 computations that round in different orders (an op may add several terms into one element,
 * each rounding at most 6e-8 of partial sums of order 10), so the tolerance is
 * 1e-5 (1 + |before| + |g|); a wrong semantic (overwrite, double count) errs by O(|before|) = O(1).
 */
static inline void tu_check_accum(const char *what, const float *after, const float *before,
                                  const float *g, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double want = (double)before[i] + g[i];
        double tol = 1e-5 * (1 + fabs((double)before[i]) + fabs((double)g[i]));
        if (!(fabs(after[i] - want) <= tol)) {
            printf("    accumulate %s: element %zu is %.9g, want %.9g\n", what, i, after[i], want);
            fail();
        }
    }
}

/* Overwrite semantics: after == g bit for bit (the buffer held garbage before). */
static inline void tu_check_same(const char *what, const float *after, const float *g, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&after[i], &g[i], sizeof(float)) != 0) {
            printf("    overwrite %s: element %zu is %.9g, want %.9g\n", what, i, after[i], g[i]);
            fail();
        }
    }
}

/* Prints the worst errors of this test file. */
static inline void tu_print_worst(const char *file) {
    printf("%s worst: fwd %.2e, bwd vs reference FD %.2e, bwd vs op FD %.2e\n", file, tu_worst_fwd,
           tu_worst_ref, tu_worst_op);
}

#endif
