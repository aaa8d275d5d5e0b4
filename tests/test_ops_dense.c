/* Tests of the CPU ops for memory, sgemm, axpy/bias, the input embedding affine, RMSNorm and the
 * residual scaling: forward against direct double formulas, backward against finite differences
 * (ops_test_util.h), accumulate/overwrite semantics, and thread-count independence. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "ops_test_util.h"

#include <omp.h>
#include <stdint.h>

/* ---- memory ---- */

static void test_memory(void **state) {
    (void)state;
    size_t sizes[] = {0, 1, 3, 64, 1000, 4097};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        unsigned char *p = ops_alloc(&tu_ctx, sizes[s]);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % 64, 0);
        for (size_t i = 0; i < sizes[s]; i++) assert_int_equal(p[i], 0);
        ops_free(&tu_ctx, p);
    }
    ops_free(&tu_ctx, NULL);
    size_t n = 100003;
    float *a = ops_alloc(&tu_ctx, n * sizeof(float));
    ops_fill(&tu_ctx, a, 2.5f, n - 1);
    for (size_t i = 0; i < n - 1; i++) assert_true(a[i] == 2.5f);
    assert_true(a[n - 1] == 0.0f);
    for (size_t i = 0; i < n; i++) a[i] = (float)i;
    float *b = ops_alloc(&tu_ctx, n * sizeof(float));
    ops_copy(&tu_ctx, b, a, n * sizeof(float));
    assert_memory_equal(a, b, n * sizeof(float));
    ops_copy(&tu_ctx, a + 1, a, 10 * sizeof(float)); /* overlapping: behaves like memmove */
    for (int i = 1; i <= 10; i++) assert_true(a[i] == (float)(i - 1));
    ops_free(&tu_ctx, a);
    ops_free(&tu_ctx, b);
}

/* ---- matmul ---- */

/* Element (i, j) of op(X) where op(X) is [rows, cols] and X is stored transposed when t. */
static double mat_at(const float *X, int t, int rows, int cols, int i, int j) {
    return t ? X[(size_t)j * rows + i] : X[(size_t)i * cols + j];
}

static void test_matmul(void **state) {
    (void)state;
    int shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {17, 9, 33}, {4, 6, 0}, {64, 48, 80}};
    float ab[][2] = {{1.0f, 0.0f}, {0.7f, 0.0f}, {1.0f, 1.0f}, {-0.5f, 0.25f}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        for (int ta = 0; ta < 2; ta++) {
            for (int tb = 0; tb < 2; tb++) {
                for (size_t c = 0; c < sizeof ab / sizeof ab[0]; c++) {
                    float alpha = ab[c][0], beta = ab[c][1];
                    float *A = tu_randn((size_t)M * K, 1), *B = tu_randn((size_t)K * N, 1);
                    /* beta == 0: old contents must be ignored even when NaN */
                    float *C =
                        beta == 0 ? tu_const((size_t)M * N, NAN) : tu_randn((size_t)M * N, 1);
                    double *ref = tu_dalloc((size_t)M * N);
                    for (int i = 0; i < M; i++) {
                        for (int j = 0; j < N; j++) {
                            double acc = 0;
                            for (int k = 0; k < K; k++)
                                acc += mat_at(A, ta, M, K, i, k) * mat_at(B, tb, K, N, k, j);
                            ref[(size_t)i * N + j] =
                                alpha * acc + (beta == 0 ? 0 : beta * (double)C[(size_t)i * N + j]);
                        }
                    }
                    ops_matmul(&tu_ctx, C, A, B, M, N, K, ta, tb, alpha, beta);
                    double err = tu_err(C, ref, (size_t)M * N);
                    if (err > 1e-6)
                        printf("matmul %d %d %d ta %d tb %d: %g\n", M, N, K, ta, tb, err);
                    if (err > tu_worst_fwd) tu_worst_fwd = err;
                    assert_true(err <= 1e-6);
                    free(A);
                    free(B);
                    free(C);
                    free(ref);
                }
            }
        }
    }
    printf("    fwd %-34s max rel err %.2e (tol 1e-6)\n", "matmul (all shapes/transposes)",
           tu_worst_fwd);
}

/* ---- axpy, bias ---- */

static void test_axpy_bias(void **state) {
    (void)state;
    int N = 41, C = 67;
    size_t n = (size_t)N * C;
    float *x = tu_randn(n, 1), *y = tu_randn(n, 1), *y0 = tu_dup(y, n), *bias = tu_randn(C, 1);
    double *ref = tu_dalloc(n);
    ops_add_act(&tu_ctx, y, x, n);
    for (size_t i = 0; i < n; i++) ref[i] = (double)y0[i] + x[i];
    tu_check_fwd("add_act", tu_err(y, ref, n), 1e-6);
    memcpy(y, y0, n * sizeof(float));
    ops_add_bias(&tu_ctx, y, bias, N, C);
    for (size_t i = 0; i < n; i++) ref[i] = (double)y0[i] + bias[i % C];
    tu_check_fwd("add_bias", tu_err(y, ref, n), 1e-6);
    /* bias_bwd accumulates: start from a known non-zero value */
    float *db = tu_const(C, 0.75f);
    ops_bias_bwd(&tu_ctx, db, x, N, C);
    double *rb = tu_dalloc(C);
    for (int c = 0; c < C; c++) {
        rb[c] = 0.75;
        for (int r = 0; r < N; r++) rb[c] += x[(size_t)r * C + c];
    }
    tu_check_fwd("bias_bwd (+= onto 0.75)", tu_err(db, rb, C), 1e-6);
    free(x);
    free(y);
    free(y0);
    free(bias);
    free(ref);
    free(db);
    free(rb);
}

/* ---- embedding ---- */

typedef struct {
    int N, D, V, skip;
    const int32_t *ids;
    float *emb, *bias, *scale, *frozen, *R, *scratch_emb, *scratch_h;
} embed_case;

/* sum_n,c (emb[id] + bias) * scale * R in double; the skip row's embedding is a frozen copy, so its
 * finite-difference gradient is 0 like torch's padding_idx. */
static double embed_ref_loss(void *p) {
    embed_case *c = p;
    double L = 0;
    for (int n = 0; n < c->N; n++) {
        const float *e = (c->ids[n] == c->skip ? c->frozen : c->emb) + (size_t)c->ids[n] * c->D;
        for (int k = 0; k < c->D; k++)
            L += ((double)e[k] + c->bias[k]) * c->scale[k] * c->R[(size_t)n * c->D + k];
    }
    return L;
}

static double embed_op_loss(void *p) {
    embed_case *c = p;
    size_t vd = (size_t)c->V * c->D;
    memcpy(c->scratch_emb, c->emb, vd * sizeof(float));
    if (c->skip >= 0)
        memcpy(c->scratch_emb + (size_t)c->skip * c->D, c->frozen + (size_t)c->skip * c->D,
               (size_t)c->D * sizeof(float));
    ops_embed_fwd(&tu_ctx, c->scratch_h, c->scratch_emb, c->ids, c->bias, c->scale, c->N, c->D);
    return tu_dot(c->scratch_h, c->R, (size_t)c->N * c->D);
}

static void run_embed(int N, int D, int V, int skip) {
    printf("  embed N=%d D=%d V=%d skip_id=%d\n", N, D, V, skip);
    int32_t *ids = malloc((size_t)N * sizeof(int32_t));
    for (int n = 0; n < N; n++) ids[n] = (int32_t)zy_rng_below(&tu_rng, (uint64_t)V);
    ids[0] = ids[N - 1] = ids[N / 2]; /* repeated ids */
    if (skip >= 0) ids[1] = ids[N - 2] = skip;
    size_t vd = (size_t)V * D, nd = (size_t)N * D;
    embed_case c = {N,
                    D,
                    V,
                    skip,
                    ids,
                    tu_randn(vd, 1),
                    tu_randn(D, 0.3f),
                    tu_randu(D, 0.5f, 1.5f),
                    NULL,
                    tu_randn(nd, 1),
                    tu_alloc(vd),
                    tu_alloc(nd)};
    c.frozen = tu_dup(c.emb, vd);
    float *h = tu_const(nd, NAN);
    ops_embed_fwd(&tu_ctx, h, c.emb, ids, c.bias, c.scale, N, D);
    double *ref = tu_dalloc(nd);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < D; k++)
            ref[(size_t)n * D + k] =
                ((double)c.emb[(size_t)ids[n] * D + k] + c.bias[k]) * c.scale[k];
    tu_check_fwd("embed_fwd", tu_err(h, ref, nd), 1e-6);

    float *demb = tu_const(vd, 0), *dbias = tu_const(D, 0), *dscale = tu_const(D, 0);
    ops_embed_bwd(&tu_ctx, demb, dbias, dscale, c.R, c.emb, ids, c.bias, c.scale, N, D, skip);
    tu_check_grad("embed demb", embed_ref_loss, embed_op_loss, &c, c.emb, demb, vd, 0);
    tu_check_grad("embed dbias", embed_ref_loss, embed_op_loss, &c, c.bias, dbias, D, 0);
    tu_check_grad("embed dscale", embed_ref_loss, embed_op_loss, &c, c.scale, dscale, D, 0);
    if (skip >= 0)
        for (int k = 0; k < D; k++) assert_true(demb[(size_t)skip * D + k] == 0.0f);
    /* the three gradients accumulate */
    float *p1 = tu_randn(vd, 1), *p2 = tu_randn(D, 1), *p3 = tu_randn(D, 1);
    float *a1 = tu_dup(p1, vd), *a2 = tu_dup(p2, D), *a3 = tu_dup(p3, D);
    ops_embed_bwd(&tu_ctx, a1, a2, a3, c.R, c.emb, ids, c.bias, c.scale, N, D, skip);
    tu_check_accum("demb", a1, p1, demb, vd);
    tu_check_accum("dbias", a2, p2, dbias, D);
    tu_check_accum("dscale", a3, p3, dscale, D);
    free(ids);
    free(c.emb);
    free(c.bias);
    free(c.scale);
    free(c.frozen);
    free(c.R);
    free(c.scratch_emb);
    free(c.scratch_h);
    free(h);
    free(ref);
    free(demb);
    free(dbias);
    free(dscale);
    free(p1);
    free(p2);
    free(p3);
    free(a1);
    free(a2);
    free(a3);
}

static void test_embed(void **state) {
    (void)state;
    run_embed(23, 37, 7, 3);
    run_embed(9, 5, 4, -1);
    run_embed(1, 70, 3, -1);
}

/* ---- RMSNorm ---- */

typedef struct {
    int N, C;
    float eps;
    float *x, *w, *R, *sy, *sr;
} rms_case;

/* Direct RMSNorm in double. */
static void rms_ref(const rms_case *c, double *y, double *rstd) {
    for (int n = 0; n < c->N; n++) {
        const float *xr = c->x + (size_t)n * c->C;
        double ss = 0;
        for (int k = 0; k < c->C; k++) ss += (double)xr[k] * xr[k];
        double r = 1.0 / sqrt(ss / c->C + c->eps);
        if (rstd) rstd[n] = r;
        for (int k = 0; k < c->C; k++) y[(size_t)n * c->C + k] = xr[k] * r * c->w[k];
    }
}

static double rms_ref_loss(void *p) {
    rms_case *c = p;
    double *y = tu_dalloc((size_t)c->N * c->C);
    rms_ref(c, y, NULL);
    double L = tu_ddot(y, c->R, (size_t)c->N * c->C);
    free(y);
    return L;
}

static double rms_op_loss(void *p) {
    rms_case *c = p;
    ops_rmsnorm_fwd(&tu_ctx, c->sy, c->sr, c->x, ZY_DTYPE_F32, c->w, c->N, c->C, c->eps);
    return tu_dot(c->sy, c->R, (size_t)c->N * c->C);
}

static void run_rmsnorm(int N, int C, float eps) {
    printf("  rmsnorm N=%d C=%d eps=%g\n", N, C, eps);
    size_t nc = (size_t)N * C;
    rms_case c = {
        N,          C, eps, tu_randn(nc, 1), tu_randu(C, 0.5f, 1.5f), tu_randn(nc, 1), tu_alloc(nc),
        tu_alloc(N)};
    if (N > 2)
        for (int k = 0; k < C; k++) c.x[(size_t)1 * C + k] *= 0.05f; /* a small row */
    float *y = tu_const(nc, NAN), *rstd = tu_const(N, NAN);
    ops_rmsnorm_fwd(&tu_ctx, y, rstd, c.x, ZY_DTYPE_F32, c.w, N, C, eps);
    double *ry = tu_dalloc(nc), *rr = tu_dalloc(N);
    rms_ref(&c, ry, rr);
    tu_check_fwd("rmsnorm y", tu_err(y, ry, nc), 1e-6);
    tu_check_fwd("rmsnorm rstd", tu_err(rstd, rr, N), 1e-6);

    float *dx = tu_const(nc, NAN), *dw = tu_const(C, 0);
    ops_rmsnorm_bwd(&tu_ctx, dx, dw, c.R, c.x, ZY_DTYPE_F32, c.w, rstd, N, C, 0);
    tu_check_grad("rmsnorm dx", rms_ref_loss, rms_op_loss, &c, c.x, dx, nc, 0);
    tu_check_grad("rmsnorm dw", rms_ref_loss, rms_op_loss, &c, c.w, dw, C, 0);
    /* accumulate = 0 overwrites dx; accumulate = 1 adds; dw always adds */
    float *p1 = tu_randn(nc, 1), *p2 = tu_randn(C, 1), *a1 = tu_dup(p1, nc), *a2 = tu_dup(p2, C);
    ops_rmsnorm_bwd(&tu_ctx, a1, a2, c.R, c.x, ZY_DTYPE_F32, c.w, rstd, N, C, 0);
    tu_check_same("rmsnorm dx (accumulate=0)", a1, dx, nc);
    tu_check_accum("rmsnorm dw", a2, p2, dw, C);
    memcpy(a1, p1, nc * sizeof(float));
    ops_rmsnorm_bwd(&tu_ctx, a1, a2, c.R, c.x, ZY_DTYPE_F32, c.w, rstd, N, C, 1);
    tu_check_accum("rmsnorm dx (accumulate=1)", a1, p1, dx, nc);
    /* dx may alias dy */
    float *al = tu_dup(c.R, nc), *dw2 = tu_const(C, 0);
    ops_rmsnorm_bwd(&tu_ctx, al, dw2, al, c.x, ZY_DTYPE_F32, c.w, rstd, N, C, 0);
    tu_check_same("rmsnorm dx aliasing dy", al, dx, nc);
    tu_check_same("rmsnorm dw with dx aliasing dy", dw2, dw, C);
    free(al);
    free(dw2);
    free(c.x);
    free(c.w);
    free(c.R);
    free(c.sy);
    free(c.sr);
    free(y);
    free(rstd);
    free(ry);
    free(rr);
    free(dx);
    free(dw);
    free(p1);
    free(p2);
    free(a1);
    free(a2);
}

static void test_rmsnorm(void **state) {
    (void)state;
    run_rmsnorm(9, 45, 1e-5f);
    run_rmsnorm(3, 5, 1e-5f);
    run_rmsnorm(4, 70, 1e-6f);
    /* a zero row: y = 0, rstd = 1/sqrt(eps), finite gradient */
    float x[8] = {0}, w[8] = {1, 1, 1, 1, 1, 1, 1, 1}, y[8], r, dy[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    float dx[8], dw[8] = {0};
    ops_rmsnorm_fwd(&tu_ctx, y, &r, x, ZY_DTYPE_F32, w, 1, 8, 1e-5f);
    assert_true(fabs(r - 1 / sqrt(1e-5)) < 1e-3);
    for (int k = 0; k < 8; k++) assert_true(y[k] == 0.0f);
    ops_rmsnorm_bwd(&tu_ctx, dx, dw, dy, x, ZY_DTYPE_F32, w, &r, 1, 8, 0);
    for (int k = 0; k < 8; k++) assert_true(fabs(dx[k] - r * dy[k]) <= 1e-6 * r * dy[k]);
}

/* ---- residual scaling ---- */

typedef struct {
    int N, D;
    float *o, *h, *ob, *os, *rb, *rs, *R, *sout;
} rs_case;

static double rs_ref_loss(void *p) {
    rs_case *c = p;
    double L = 0;
    for (int n = 0; n < c->N; n++)
        for (int k = 0; k < c->D; k++) {
            size_t i = (size_t)n * c->D + k;
            L += (((double)c->o[i] + c->ob[k]) * c->os[k] +
                  ((double)c->h[i] + c->rb[k]) * c->rs[k]) *
                 c->R[i];
        }
    return L;
}

static double rs_op_loss(void *p) {
    rs_case *c = p;
    ops_resscale_fwd(&tu_ctx, c->sout, c->o, c->h, c->ob, c->os, c->rb, c->rs, c->N, c->D);
    return tu_dot(c->sout, c->R, (size_t)c->N * c->D);
}

static void test_resscale(void **state) {
    (void)state;
    int N = 7, D = 37;
    size_t nd = (size_t)N * D;
    rs_case c = {N,
                 D,
                 tu_randn(nd, 1),
                 tu_randn(nd, 1),
                 tu_randn(D, 0.3f),
                 tu_randu(D, 0.5f, 1.5f),
                 tu_randn(D, 0.3f),
                 tu_randu(D, 0.5f, 1.5f),
                 tu_randn(nd, 1),
                 tu_alloc(nd)};
    float *out = tu_const(nd, NAN);
    ops_resscale_fwd(&tu_ctx, out, c.o, c.h, c.ob, c.os, c.rb, c.rs, N, D);
    double *ref = tu_dalloc(nd);
    for (size_t i = 0; i < nd; i++) {
        int k = (int)(i % D);
        ref[i] = ((double)c.o[i] + c.ob[k]) * c.os[k] + ((double)c.h[i] + c.rb[k]) * c.rs[k];
    }
    tu_check_fwd("resscale", tu_err(out, ref, nd), 1e-6);

    float *d_o = tu_const(nd, NAN), *dh = tu_const(nd, NAN);
    float *g[4];
    for (int i = 0; i < 4; i++) g[i] = tu_const(D, 0);
    ops_resscale_bwd(&tu_ctx, d_o, dh, g[0], g[1], g[2], g[3], c.R, c.o, c.h, c.ob, c.os, c.rb,
                     c.rs, N, D);
    tu_check_grad("resscale d_o", rs_ref_loss, rs_op_loss, &c, c.o, d_o, nd, 0);
    tu_check_grad("resscale dh", rs_ref_loss, rs_op_loss, &c, c.h, dh, nd, 0);
    tu_check_grad("resscale dob", rs_ref_loss, rs_op_loss, &c, c.ob, g[0], D, 0);
    tu_check_grad("resscale dos", rs_ref_loss, rs_op_loss, &c, c.os, g[1], D, 0);
    tu_check_grad("resscale drb", rs_ref_loss, rs_op_loss, &c, c.rb, g[2], D, 0);
    tu_check_grad("resscale drs", rs_ref_loss, rs_op_loss, &c, c.rs, g[3], D, 0);
    /* parameter gradients accumulate; dh may alias dout */
    float *pre[4], *acc[4];
    for (int i = 0; i < 4; i++) {
        pre[i] = tu_randn(D, 1);
        acc[i] = tu_dup(pre[i], D);
    }
    float *dd = tu_dup(c.R, nd), *d_o2 = tu_const(nd, 5.0f);
    ops_resscale_bwd(&tu_ctx, d_o2, dd, acc[0], acc[1], acc[2], acc[3], dd, c.o, c.h, c.ob, c.os,
                     c.rb, c.rs, N, D);
    tu_check_same("resscale d_o", d_o2, d_o, nd);
    tu_check_same("resscale dh aliasing dout", dd, dh, nd);
    for (int i = 0; i < 4; i++) tu_check_accum("resscale param", acc[i], pre[i], g[i], D);
    for (int i = 0; i < 4; i++) {
        free(g[i]);
        free(pre[i]);
        free(acc[i]);
    }
    free(c.o);
    free(c.h);
    free(c.ob);
    free(c.os);
    free(c.rb);
    free(c.rs);
    free(c.R);
    free(c.sout);
    free(out);
    free(ref);
    free(d_o);
    free(dh);
    free(dd);
    free(d_o2);
}

/* ---- thread-count independence of the row reductions ---- */

static void test_threads_deterministic(void **state) {
    (void)state;
    zy_ctx one = {.device = ZY_DEV_CPU, .num_threads = 1},
           two = {.device = ZY_DEV_CPU, .num_threads = 2};
    int N = 700, C = 96, V = 50;
    size_t nc = (size_t)N * C;
    float *x = tu_randn(nc, 1), *dy = tu_randn(nc, 1), *w = tu_randn(C, 1);
    float *emb = tu_randn((size_t)V * C, 1), *bias = tu_randn(C, 1), *scale = tu_randn(C, 1);
    int32_t *ids = malloc((size_t)N * sizeof(int32_t));
    for (int n = 0; n < N; n++) ids[n] = (int32_t)zy_rng_below(&tu_rng, (uint64_t)V);
    zy_ctx *ctxs[2] = {&one, &two};
    int omp_default = omp_get_max_threads();
    float *res[2][6];
    for (int t = 0; t < 2; t++) {
        float *rstd = tu_alloc(N), *y = tu_alloc(nc);
        res[t][0] = tu_const(C, 0);
        ops_bias_bwd(ctxs[t], res[t][0], dy, N, C);
        ops_rmsnorm_fwd(ctxs[t], y, rstd, x, ZY_DTYPE_F32, w, N, C, 1e-5f);
        res[t][1] = tu_const(nc, 0);
        res[t][2] = tu_const(C, 0);
        ops_rmsnorm_bwd(ctxs[t], res[t][1], res[t][2], dy, x, ZY_DTYPE_F32, w, rstd, N, C, 0);
        res[t][3] = tu_const((size_t)V * C, 0);
        res[t][4] = tu_const(C, 0);
        res[t][5] = tu_const(C, 0);
        ops_embed_bwd(ctxs[t], res[t][3], res[t][4], res[t][5], dy, emb, ids, bias, scale, N, C, 7);
        free(rstd);
        free(y);
    }
    /* a matmul on 1 thread must not change the OpenMP default of the rest of the program
     * (OpenBLAS's own thread setter would) */
    float *mc = tu_alloc((size_t)N * N);
    ops_matmul(&one, mc, x, dy, N, N, C, 0, 1, 1.0f, 0.0f);
    assert_int_equal(omp_get_max_threads(), omp_default);
    free(mc);
    size_t sz[6] = {C, nc, C, (size_t)V * C, C, C};
    for (int i = 0; i < 6; i++) {
        assert_memory_equal(res[0][i], res[1][i], sz[i] * sizeof(float));
        free(res[0][i]);
        free(res[1][i]);
    }
    free(x);
    free(dy);
    free(w);
    free(emb);
    free(bias);
    free(scale);
    free(ids);
}

/* Every op accepts zero rows (an empty batch, or a rank whose experts got no tokens) and writes
 * nothing. */
static void test_zero_rows(void **state) {
    (void)state;
    float f[64], g[64], h[64];
    int32_t i32[8] = {0}, counts[4], offsets[5], perm[1];
    for (int i = 0; i < 64; i++) f[i] = g[i] = h[i] = 1.0f;
    zy_ctx *c = &tu_ctx;
    ops_matmul(c, f, g, h, 0, 4, 4, 0, 0, 1, 0);
    ops_add_bias(c, f, g, 0, 8);
    ops_bias_bwd(c, f, g, 0, 8);
    ops_embed_fwd(c, f, g, i32, g, g, 0, 8);
    ops_embed_bwd(c, f, f, f, g, g, i32, g, g, 0, 8, -1);
    ops_rmsnorm_fwd(c, f, f, g, ZY_DTYPE_F32, g, 0, 8, 1e-5f);
    ops_rmsnorm_bwd(c, f, f, g, g, ZY_DTYPE_F32, g, g, 0, 8, 0);
    ops_resscale_fwd(c, f, g, g, g, g, g, g, 0, 8);
    ops_resscale_bwd(c, f, f, f, f, f, f, g, g, g, g, g, g, g, 0, 8);
    ops_cca_conv_fwd(c, f, f, NULL, g, NULL, g, g, g, g, 0, 4, 2, 1, 2, 2, 2);
    ops_cca_conv_fwd(c, f, f, h, g, NULL, g, g, g, g, 1, 0, 2, 1, 2, 2, 2);
    ops_cca_conv_bwd(c, f, f, f, f, f, g, g, g, h, g, g, 1, 0, 2, 1, 2, 2, 2);
    ops_value_delay_fwd(c, f, g, NULL, 0, 4, 2);
    ops_value_delay_bwd(c, f, g, 2, 0, 2);
    ops_qknorm_rope_fwd(c, f, f, f, f, g, g, g, i32, 0, 2, 1, 4, 2, 1e4, 1e-7f);
    ops_qknorm_rope_bwd(c, f, f, f, g, g, g, g, g, i32, 0, 2, 1, 4, 2, 1e4, 1e-7f);
    ops_attention_fwd(c, f, f, g, g, g, 1, 0, 2, 1, 4, 0.5f, 0);
    ops_attention_bwd(c, f, f, f, g, g, g, g, g, g, 0, 5, 2, 1, 4, 0.5f, 0);
    ops_gelu_fwd(c, f, g, 0);
    ops_gelu_bwd(c, f, g, g, 0);
    ops_swiglu_fwd(c, f, g, 0, 4);
    ops_swiglu_bwd(c, f, g, g, 0, 4);
    ops_router_select(c, f, i32, f, g, g, 0, 5);
    ops_router_bwd(c, f, g, g, i32, 0, 5);
    assert_int_equal(ops_moe_dispatch(c, counts, offsets, offsets, perm, i32, 0, 4), 0);
    for (int e = 0; e <= 4; e++) assert_int_equal(offsets[e], 0);
    ops_gather_rows(c, f, g, perm, 0, 8);
    ops_moe_combine(c, f, g, g, perm, 0, 0, 8);
    ops_moe_combine_bwd(c, f, f, g, g, g, perm, 0, 0, 8);
    ops_scatter_add_rows(c, f, g, perm, 0, 8);
    int cnt = -1;
    assert_true(ops_xent_fwd_bwd(c, f, g, i32, 0, 8, -100, 1.0f, &cnt) == 0.0);
    assert_int_equal(cnt, 0);
    for (int i = 0; i < 64; i++) assert_true(f[i] == 1.0f);
}

static void test_summary(void **state) {
    (void)state;
    tu_print_worst("test_ops_dense");
}

int main(void) {
    tu_rng = zy_rng_init(1234, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memory),
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_axpy_bias),
        cmocka_unit_test(test_embed),
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_resscale),
        cmocka_unit_test(test_threads_deterministic),
        cmocka_unit_test(test_zero_rows),
        cmocka_unit_test(test_summary),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
