/* Conformance of the CPU ops with Hugging Face transformers' zaya model: runs each op on the inputs
 * stored in tests/fixtures/ops_hf_zaya.bin (written by scripts/gen_ops_fixture.py from HF's own
 * modules in fp32 on the CPU) and compares outputs and autograd gradients. Both sides are fp32
 * computations that differ only in summation order and in transcendental rounding (~1e-7
 * relative), so forward outputs must agree to TOL_FWD = 1e-5 of their largest magnitude and
 * gradients to TOL_BWD = 1e-5 relative L2 (10x below the 1e-4 the model must reach). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/fileio.h"
#include "ops_test_util.h"

#include <float.h>
#include <stdint.h>

#define TOL_FWD 1e-5
#define TOL_BWD 1e-5

/* ---- fixture reader ---- */

typedef struct {
    char name[64];
    int dtype; /* 0 f32, 1 i32 */
    size_t n;
    void *data; /* own copy, 4-byte aligned */
} fx_tensor;

static fx_tensor fx[256];
static int fx_count;
static double worst_fwd, worst_bwd;

static uint32_t rd_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Parses the fixture; returns ZY_ERR naming the file and the problem when it is malformed. */
static int fx_load(const char *path) {
    char *buf;
    size_t len;
    ZY_TRY(zy_read_file(path, &buf, &len));
    const unsigned char *p = (const unsigned char *)buf, *end = p + len;
    int rc = ZY_ERR;
    if (len < 8 || memcmp(p, "ZYF1", 4) != 0) {
        zy_fail("%s: expected a ZYF1 fixture, found another header", path);
        goto done;
    }
    uint32_t count = rd_u32(p + 4);
    p += 8;
    if (count > sizeof fx / sizeof fx[0]) {
        zy_fail("%s: %u tensors, at most %zu supported", path, count, sizeof fx / sizeof fx[0]);
        goto done;
    }
    for (uint32_t i = 0; i < count; i++) {
        if (end - p < 4 || rd_u32(p) >= sizeof fx[i].name || end - p < 4 + (long)rd_u32(p) + 8) {
            zy_fail("%s: tensor %u: truncated or bad name", path, i);
            goto done;
        }
        uint32_t nl = rd_u32(p);
        memcpy(fx[i].name, p + 4, nl);
        fx[i].name[nl] = 0;
        p += 4 + nl;
        fx[i].dtype = (int)rd_u32(p);
        uint32_t ndim = rd_u32(p + 4);
        p += 8;
        if (ndim > 8 || end - p < 4 * (long)ndim) {
            zy_fail("%s: %s: bad rank %u", path, fx[i].name, ndim);
            goto done;
        }
        size_t n = 1;
        for (uint32_t k = 0; k < ndim; k++) n *= rd_u32(p + 4 * k);
        p += 4 * ndim;
        if ((size_t)(end - p) < n * 4) {
            zy_fail("%s: %s: %zu elements expected, file truncated", path, fx[i].name, n);
            goto done;
        }
        fx[i].n = n;
        fx[i].data = malloc(n * 4 + 4);
        memcpy(fx[i].data, p, n * 4);
        p += n * 4;
        fx_count = (int)i + 1;
    }
    rc = ZY_OK;
done:
    free(buf);
    return rc;
}

static const fx_tensor *fx_find(const char *name) {
    for (int i = 0; i < fx_count; i++)
        if (strcmp(fx[i].name, name) == 0) return &fx[i];
    printf("fixture has no tensor %s\n", name);
    fail();
    return NULL;
}

/* A copy of a float tensor (callers may modify it), checking its element count when n > 0. */
static float *fx_f(const char *name, size_t n) {
    const fx_tensor *t = fx_find(name);
    assert_int_equal(t->dtype, 0);
    if (n) assert_int_equal(t->n, n);
    return tu_dup(t->data, t->n);
}

static const int32_t *fx_i(const char *name, size_t n) {
    const fx_tensor *t = fx_find(name);
    assert_int_equal(t->dtype, 1);
    if (n) assert_int_equal(t->n, n);
    return t->data;
}

static int fx_setup(void **state) {
    (void)state;
    const char *root = getenv("ZAYAC_ROOT");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fixtures/ops_hf_zaya.bin", root ? root : ".");
    if (fx_load(path) != ZY_OK) {
        printf("%s\n", zy_errmsg());
        return -1;
    }
    return 0;
}

static int fx_teardown(void **state) {
    (void)state;
    for (int i = 0; i < fx_count; i++) free(fx[i].data);
    printf("test_ops_hf worst: fwd %.2e (max rel), bwd %.2e (rel L2)\n", worst_fwd, worst_bwd);
    return 0;
}

/* ---- comparisons ---- */

static void cmp_fwd(const char *what, const float *a, const char *ref_name) {
    const fx_tensor *r = fx_find(ref_name);
    const float *b = r->data;
    double e = 0, m = 0;
    for (size_t i = 0; i < r->n; i++) {
        double d = fabs((double)a[i] - b[i]);
        e = isnan(d) ? INFINITY : (d > e ? d : e);
        m = fabs(b[i]) > m ? fabs(b[i]) : m;
    }
    double rel = m > 0 ? e / m : e;
    printf("    fwd %-28s vs HF: max rel err %.2e (tol %.0e)\n", what, rel, TOL_FWD);
    if (rel > worst_fwd) worst_fwd = rel;
    assert_true(rel <= TOL_FWD);
}

static void cmp_bwd(const char *what, const float *a, const char *ref_name) {
    const fx_tensor *r = fx_find(ref_name);
    const float *b = r->data;
    double num = 0, den = 0;
    for (size_t i = 0; i < r->n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    if (isnan(rel)) rel = INFINITY;
    printf("    bwd %-28s vs HF: rel L2 err %.2e (tol %.0e)\n", what, rel, TOL_BWD);
    if (rel > worst_bwd) worst_bwd = rel;
    assert_true(rel <= TOL_BWD);
}

/* Fixture shapes (scripts/gen_ops_fixture.py). */
enum { B = 2, T = 11, HQ = 4, HK = 2, HD = 8, N = B * T, C = (HQ + HK) * HD };

/* ---- tests ---- */

static void test_hf_cca(void **state) {
    (void)state;
    float *qk0 = fx_f("cca.qk0", (size_t)N * C), *w1 = fx_f("cca.w1", C * 2);
    float *b1 = fx_f("cca.b1", C), *w2 = fx_f("cca.w2", (size_t)C * HD * 2),
          *b2 = fx_f("cca.b2", C);
    float *q = tu_alloc((size_t)N * HQ * HD), *k = tu_alloc((size_t)N * HK * HD);
    float *mid = tu_alloc((size_t)B * (T + 1) * C);
    ops_cca_conv_fwd(&tu_ctx, q, k, mid, qk0, NULL, w1, b1, w2, b2, B, T, HQ, HK, HD, 2, 2);
    cmp_fwd("cca q", q, "cca.q");
    cmp_fwd("cca k", k, "cca.k");
    float *dq = fx_f("cca.dq", 0), *dk = fx_f("cca.dk", 0), *dqk0 = tu_alloc((size_t)N * C);
    float *dw1 = tu_const(C * 2, 0), *db1 = tu_const(C, 0), *dw2 = tu_const((size_t)C * HD * 2, 0);
    float *db2 = tu_const(C, 0);
    ops_cca_conv_bwd(&tu_ctx, dqk0, dw1, db1, dw2, db2, dq, dk, qk0, mid, w1, w2, B, T, HQ, HK, HD,
                     2, 2);
    cmp_bwd("cca dqk0", dqk0, "cca.dqk0");
    cmp_bwd("cca dw1", dw1, "cca.dw1");
    cmp_bwd("cca db1", db1, "cca.db1");
    cmp_bwd("cca dw2", dw2, "cca.dw2");
    cmp_bwd("cca db2", db2, "cca.db2");
    const int half = HK * HD / 2;
    float *vcur = fx_f("cca.vcur", 0), *vdel = fx_f("cca.vdel", 0);
    float *vv = tu_alloc((size_t)N * 2 * half), *v = tu_alloc((size_t)N * HK * HD);
    for (size_t n = 0; n < (size_t)N; n++) { /* the one GEMM's [vcur | vdel] rows */
        memcpy(vv + n * 2 * half, vcur + n * half, (size_t)half * sizeof(float));
        memcpy(vv + n * 2 * half + half, vdel + n * half, (size_t)half * sizeof(float));
    }
    ops_value_delay_fwd(&tu_ctx, v, vv, NULL, B, T, half);
    cmp_fwd("value_delay v", v, "cca.v");
    float *bufs[] = {qk0,  w1,  b1,  w2,  b2,  q,    k,    mid, dq, dk,
                     dqk0, dw1, db1, dw2, db2, vcur, vdel, vv,  v};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
}

static void run_hf_rope(const char *tag) {
    char nm[64];
#define NM(s) (snprintf(nm, sizeof nm, "%s.%s", tag, s), nm)
    size_t nq = (size_t)N * HQ * HD, nk = (size_t)N * HK * HD;
    float *theta = fx_f(NM("theta"), 1);
    int rot = fx_i(NM("rot"), 1)[0];
    const int32_t *pos = fx_i(NM("pos"), N);
    float *temp = fx_f(NM("temp"), HK);
    float *q = fx_f(NM("q_in"), nq), *k = fx_f(NM("k_in"), nk);
    float *qin = tu_alloc(nq), *kin = tu_alloc(nk), *qn = tu_alloc((size_t)N * HQ),
          *kn = tu_alloc((size_t)N * HK);
    printf("  %s: rot %d of %d, theta %g\n", tag, rot, HD, theta[0]);
    memcpy(qin, q, nq * sizeof(float)); /* the inputs, kept for the backward; q, k the outputs */
    memcpy(kin, k, nk * sizeof(float));
    ops_qknorm_rope_fwd(&tu_ctx, q, k, qn, kn, qin, kin, temp, pos, N, HQ, HK, HD, rot, theta[0],
                        FLT_EPSILON);
    cmp_fwd("qknorm_rope q", q, NM("q"));
    cmp_fwd("qknorm_rope k", k, NM("k"));
    float *dq = fx_f(NM("gq"), nq), *dk = fx_f(NM("gk"), nk), *dtemp = tu_const(HK, 0);
    ops_qknorm_rope_bwd(&tu_ctx, dq, dk, dtemp, qin, kin, qn, kn, temp, pos, N, HQ, HK, HD, rot,
                        theta[0], FLT_EPSILON);
    cmp_bwd("qknorm_rope dq", dq, NM("dq"));
    cmp_bwd("qknorm_rope dk", dk, NM("dk"));
    cmp_bwd("qknorm_rope dtemp", dtemp, NM("dtemp"));
#undef NM
    float *bufs[] = {theta, temp, q, k, qin, kin, qn, kn, dq, dk, dtemp};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
}

static void test_hf_qknorm_rope(void **state) {
    (void)state;
    run_hf_rope("rope_a"); /* "hybrid": theta 1e4, partial rotary 0.5, positions 3000.. */
    run_hf_rope("rope_b"); /* "hybrid_sliding": theta 5e6, partial rotary 0.25 */
    run_hf_rope("rope_c"); /* every query norm below the clamp (FLT_EPSILON) */
}

static void run_hf_attention(const char *tag) {
    char nm[64];
#define NM(s) (snprintf(nm, sizeof nm, "%s.%s", tag, s), nm)
    size_t nq = (size_t)N * HQ * HD, nk = (size_t)N * HK * HD;
    int window = fx_i(NM("window"), 1)[0];
    printf("  %s: window %d\n", tag, window);
    float *q = fx_f(NM("q"), nq), *k = fx_f(NM("k"), nk), *v = fx_f(NM("v"), nk);
    float *out = tu_alloc(nq), *lse = tu_alloc((size_t)B * HQ * T);
    float scale = (float)(1.0 / sqrt((double)HD));
    ops_attention_fwd(&tu_ctx, out, lse, q, k, v, B, T, HQ, HK, HD, scale, window);
    cmp_fwd("attention out", out, NM("out"));
    float *dout = fx_f(NM("dout"), nq), *dq = tu_alloc(nq), *dk = tu_alloc(nk), *dv = tu_alloc(nk);
    ops_attention_bwd(&tu_ctx, dq, dk, dv, dout, out, lse, q, k, v, B, T, HQ, HK, HD, scale,
                      window);
    cmp_bwd("attention dq", dq, NM("dq"));
    cmp_bwd("attention dk", dk, NM("dk"));
    cmp_bwd("attention dv", dv, NM("dv"));
#undef NM
    float *bufs[] = {q, k, v, out, lse, dout, dq, dk, dv};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
}

static void test_hf_attention(void **state) {
    (void)state;
    run_hf_attention("att_full");  /* create_causal_mask */
    run_hf_attention("att_slide"); /* create_sliding_window_causal_mask, sliding_window 4 */
}

static void test_hf_router(void **state) {
    (void)state;
    enum { E1 = 7 };
    float *logits = fx_f("router.logits", (size_t)N * E1), *bias = fx_f("router.bias", E1);
    const int32_t *index = fx_i("router.index", N);
    float *probs = tu_alloc((size_t)N * E1), *gate = tu_alloc(N);
    int32_t choice[N];
    ops_router_select(&tu_ctx, probs, choice, gate, logits, bias, N, E1);
    cmp_fwd("router gate", gate, "router.gate");
    int skipped = 0;
    for (int n = 0; n < N; n++) {
        if (choice[n] == E1 - 1) { /* HF reports skip rows as index 0 with gate 0 */
            skipped++;
            assert_int_equal(index[n], 0);
            assert_true(gate[n] == 0.0f);
        } else {
            assert_int_equal(choice[n], index[n]);
        }
    }
    assert_true(skipped >= 2);
    float *dgate = fx_f("router.dgate", N), *dl = tu_alloc((size_t)N * E1);
    ops_router_bwd(&tu_ctx, dl, dgate, probs, choice, N, E1);
    cmp_bwd("router dlogits", dl, "router.dlogits");
    float *bufs[] = {logits, bias, probs, gate, dgate, dl};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
}

static void test_hf_small_ops(void **state) {
    (void)state;
    /* RMSNorm */
    {
        int Cn = 24;
        float *x = fx_f("rmsnorm.x", (size_t)N * Cn), *w = fx_f("rmsnorm.w", Cn);
        float *y = tu_alloc((size_t)N * Cn), *r = tu_alloc(N);
        ops_rmsnorm_fwd(&tu_ctx, y, r, x, ZY_DTYPE_F32, w, N, Cn, 1e-5f);
        cmp_fwd("rmsnorm y", y, "rmsnorm.y");
        float *dy = fx_f("rmsnorm.dy", 0), *dx = tu_alloc((size_t)N * Cn), *dw = tu_const(Cn, 0);
        ops_rmsnorm_bwd(&tu_ctx, dx, dw, dy, x, ZY_DTYPE_F32, w, r, N, Cn, 0);
        cmp_bwd("rmsnorm dx", dx, "rmsnorm.dx");
        cmp_bwd("rmsnorm dw", dw, "rmsnorm.dw");
        float *bufs[] = {x, w, y, r, dy, dx, dw};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    }
    /* residual scaling */
    {
        int D = 24;
        size_t nd = (size_t)N * D;
        float *o = fx_f("resscale.o", nd), *h = fx_f("resscale.h", nd);
        float *ob = fx_f("resscale.ob", D), *os = fx_f("resscale.os", D);
        float *rb = fx_f("resscale.rb", D), *rs = fx_f("resscale.rs", D);
        float *out = tu_alloc(nd);
        ops_resscale_fwd(&tu_ctx, out, o, h, ob, os, rb, rs, N, D);
        cmp_fwd("resscale out", out, "resscale.out");
        float *dout = fx_f("resscale.dout", nd), *d_o = tu_alloc(nd), *dh = tu_alloc(nd);
        float *g[4];
        for (int i = 0; i < 4; i++) g[i] = tu_const(D, 0);
        ops_resscale_bwd(&tu_ctx, d_o, dh, g[0], g[1], g[2], g[3], dout, o, h, ob, os, rb, rs, N,
                         D);
        cmp_bwd("resscale d_o", d_o, "resscale.d_o");
        cmp_bwd("resscale dh", dh, "resscale.dh");
        cmp_bwd("resscale dob", g[0], "resscale.dob");
        cmp_bwd("resscale dos", g[1], "resscale.dos");
        cmp_bwd("resscale drb", g[2], "resscale.drb");
        cmp_bwd("resscale drs", g[3], "resscale.drs");
        float *bufs[] = {o, h, ob, os, rb, rs, out, dout, d_o, dh, g[0], g[1], g[2], g[3]};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    }
    /* embedding (padding_idx 0) and input affine */
    {
        int V = 9, D = 10;
        float *emb = fx_f("embed.emb", (size_t)V * D), *bias = fx_f("embed.bias", D);
        float *scale = fx_f("embed.scale", D);
        const int32_t *ids = fx_i("embed.ids", N);
        float *h = tu_alloc((size_t)N * D);
        ops_embed_fwd(&tu_ctx, h, emb, ids, bias, scale, N, D);
        cmp_fwd("embed h", h, "embed.h");
        float *dh = fx_f("embed.dh", 0), *demb = tu_const((size_t)V * D, 0);
        float *dbias = tu_const(D, 0), *dscale = tu_const(D, 0);
        ops_embed_bwd(&tu_ctx, demb, dbias, dscale, dh, emb, ids, bias, scale, N, D, 0);
        cmp_bwd("embed demb (padding_idx 0)", demb, "embed.demb");
        cmp_bwd("embed dbias", dbias, "embed.dbias");
        cmp_bwd("embed dscale", dscale, "embed.dscale");
        float *bufs[] = {emb, bias, scale, h, dh, demb, dbias, dscale};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    }
    /* cross-entropy (sum, ignore_index -100, gradient of 0.37 * loss) */
    {
        int V = 19, cnt;
        float *logits = fx_f("xent.logits", (size_t)N * V), *loss = fx_f("xent.loss", 1);
        const int32_t *tg = fx_i("xent.targets", N);
        float *dl = tu_alloc((size_t)N * V);
        double L = ops_xent_fwd_bwd(&tu_ctx, dl, logits, tg, N, V, -100, 0.37f, &cnt);
        assert_int_equal(cnt, N - 2);
        double rel = fabs(L - loss[0]) / fabs(loss[0]);
        printf("    fwd %-28s vs HF: rel err %.2e (tol %.0e)\n", "xent loss", rel, TOL_FWD);
        assert_true(rel <= TOL_FWD);
        cmp_bwd("xent dlogits", dl, "xent.dlogits");
        free(logits);
        free(loss);
        free(dl);
    }
    /* GELU, SwiGLU */
    {
        size_t n = (size_t)N * 16;
        float *x = fx_f("gelu.x", n), *y = tu_alloc(n), *dy = fx_f("gelu.dy", n), *dx = tu_alloc(n);
        ops_gelu_fwd(&tu_ctx, y, x, n);
        cmp_fwd("gelu y", y, "gelu.y");
        ops_gelu_bwd(&tu_ctx, dx, dy, x, n);
        cmp_bwd("gelu dx", dx, "gelu.dx");
        int F = 8;
        float *gu = fx_f("swiglu.gu", (size_t)N * 2 * F), *sy = tu_alloc((size_t)N * F);
        float *sdy = fx_f("swiglu.dy", (size_t)N * F), *dgu = tu_alloc((size_t)N * 2 * F);
        ops_swiglu_fwd(&tu_ctx, sy, gu, N, F);
        cmp_fwd("swiglu y", sy, "swiglu.y");
        ops_swiglu_bwd(&tu_ctx, dgu, sdy, gu, N, F);
        cmp_bwd("swiglu dgu", dgu, "swiglu.dgu");
        float *bufs[] = {x, y, dy, dx, gu, sy, sdy, dgu};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    }
}

/* A truncated or foreign fixture gives one clear error naming the file. */
static void test_fixture_errors(void **state) {
    (void)state;
    char dir[] = "/tmp/zy_ops_fx_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/bad.bin", dir);
    assert_int_equal(zy_write_file_atomic(path, "NOPE....", 8), ZY_OK);
    int saved = fx_count;
    fx_count = 0;
    assert_int_equal(fx_load(path), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), path));
    unsigned char trunc[] = {'Z', 'Y', 'F', '1', 1, 0, 0, 0, 3, 0, 0, 0, 'a', 'b'};
    assert_int_equal(zy_write_file_atomic(path, trunc, sizeof trunc), ZY_OK);
    assert_int_equal(fx_load(path), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "truncated"));
    fx_count = saved;
    assert_int_equal(zy_remove_tree(dir), ZY_OK);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hf_cca),       cmocka_unit_test(test_hf_qknorm_rope),
        cmocka_unit_test(test_hf_attention), cmocka_unit_test(test_hf_router),
        cmocka_unit_test(test_hf_small_ops), cmocka_unit_test(test_fixture_errors),
    };
    return cmocka_run_group_tests(tests, fx_setup, fx_teardown);
}
