/* GPU tests of the CCA ops on CUDA (ops/cuda/cca_conv.cu, ops_cca.cu): the convolutions with mean
 * residuals, the value delay, QK norm + temperature + partial RoPE and decoding attention, each
 * against its CPU op (ops.h on a CPU context) fed the same bf16-rounded random inputs and weights.
 * Outputs are filled with NaN first (an element left unwritten fails); parameter gradients start
 * from random values and their increments are compared.
 * Tolerances (errors are max |got - ref| over a head row divided by that row's max |ref|, so a
 * row's own scale sets its bound; printed per case; u = 2^-8 is bf16's largest relative rounding
 * error, half an ulp of its 8-bit significand):
 *  - TOL_OUT u + 1e-4 for bf16 outputs rounded once from fp32 (the rounding is at most u of the
 *    element; the GPU's fp32 sums differ from the CPU's double ones by ~1e-6);
 *  - TOL_OUT2 3u for the conv outputs q, k, which also go through the rounding of mid to bf16:
 *    d*t1 terms each off by up to u of their size add like a random walk, ~u/sqrt(3) of a typical
 *    output, ~4 of those at the worst of a few thousand outputs against a row max of ~3 typical;
 *  - TOL_GRAD 1e-4 of the tensor's largest |increment| for fp32 parameter gradients (fp32 sums of
 *    up to ~10^3 exact products per partial, tensor-core additions truncate: <= 10^3 * 2^-23);
 *  - copies (value delay, the saved q_in/k_in) must be exact.
 * Weight gradients of the conv must also be the same bits on a second run (determinism).
 * Skipped without a GPU. Set CCA_TEST_QUICK=1 to leave out the bench-size timing (which only
 * prints: fwd/bwd milliseconds and TFLOP/s of the grouped-conv GEMMs). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/rng.h"
#include "io/safetensors.h" /* zy_f32_to_bf16, zy_bf16_to_f32 */
#include "ops/ops.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL_OUT  (1.0 / 256 + 1e-4)
#define TOL_OUT2 (3.0 / 256)
#define TOL_GRAD 1e-4
#define TOL_NORM 1e-5 /* saved fp32 norms: fp32 vs double sums of squares */

static zy_rng rng;
static zy_ctx cpu, gpu;
static int have_gpu;
static double worst_out, worst_grad; /* printed at the end */

/* cudart maps memory in ASan's shadow gap; ASan must leave the gap unprotected (SAN=1 builds). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
    return "protect_shadow_gap=0";
}

static int setup(void **state) {
    (void)state;
    rng = zy_rng_init(20261130, 7);
    ops_ctx_init_cpu(&cpu, 0);
    have_gpu = ops_cuda_device_count() > 0;
    if (have_gpu && ops_ctx_init_cuda(&gpu, 0) != ZY_OK) {
        printf("CUDA context: %s\n", zy_errmsg());
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    if (have_gpu) ops_ctx_free(&gpu);
    printf("test_cuda_ops_cca worst: bf16 outputs %.2e (row-relative), fp32 gradients %.2e\n",
           worst_out, worst_grad);
    return 0;
}

/* ---- host/device helpers ---- */

static float bf(float x) {
    return zy_bf16_to_f32(zy_f32_to_bf16(x));
}

static float *halloc(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(p);
    return p;
}

/* n bf16-rounded normal(0, sd) values. */
static float *hrandn(size_t n, float sd) {
    float *p = halloc(n);
    for (size_t i = 0; i < n; i++) p[i] = bf(zy_rng_normal(&rng) * sd);
    return p;
}

static float *hconst(size_t n, float v) {
    float *p = halloc(n);
    for (size_t i = 0; i < n; i++) p[i] = v;
    return p;
}

static float *hdup(const float *x, size_t n) {
    float *p = halloc(n);
    memcpy(p, x, (n ? n : 1) * sizeof(float));
    return p;
}

/* A device fp32 copy of x[n]. */
static float *df32(const float *x, size_t n) {
    float *d = ops_alloc(&gpu, (n ? n : 1) * sizeof(float));
    ops_copy(&gpu, d, x, n * sizeof(float));
    return d;
}

/* A device activation (bf16) holding x[n] (x already bf16 values, or rounded on the way). */
static void *dact(const float *x, size_t n) {
    float *t = df32(x, n);
    void *d = ops_alloc(&gpu, (n ? n : 1) * ops_act_size(&gpu));
    ops_cast_to_act(&gpu, d, t, n);
    ops_free(&gpu, t);
    return d;
}

/* A device activation of n NaNs (an output that must be overwritten). */
static void *dnan(size_t n) {
    float *h = hconst(n, NAN);
    void *d = dact(h, n);
    free(h);
    return d;
}

/* Host fp32 copy of a device fp32 buffer. */
static float *hf32(const float *d, size_t n) {
    float *h = halloc(n);
    ops_copy(&gpu, h, d, n * sizeof(float));
    return h;
}

/* Host fp32 copy of a device activation buffer. */
static float *hact(const void *d, size_t n) {
    float *t = ops_alloc(&gpu, (n ? n : 1) * sizeof(float));
    ops_act_to_f32(&gpu, t, d, n);
    float *h = hf32(t, n);
    ops_free(&gpu, t);
    return h;
}

/* max over segments of width w of max|got - ref| / max|ref| of the segment (absolute where the
 * reference segment is zero); +inf on NaN. */
static double err_seg(const float *got, const float *ref, size_t nseg, size_t w) {
    double worst = 0;
    for (size_t s = 0; s < nseg; s++) {
        double e = 0, m = 0;
        for (size_t i = s * w; i < (s + 1) * w; i++) {
            double dd = fabs((double)got[i] - ref[i]);
            if (isnan(dd)) return INFINITY;
            if (dd > e) e = dd;
            if (fabs(ref[i]) > m) m = fabs(ref[i]);
        }
        double r = m > 0 ? e / m : e;
        if (r > worst) worst = r;
    }
    return worst;
}

/* Increments (after - before) of a gradient on both sides: max |diff| / max |ref increment|. */
static double err_inc(const float *got, const float *ref, const float *before, size_t n) {
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double gi = (double)got[i] - before[i], ri = (double)ref[i] - before[i];
        double dd = fabs(gi - ri);
        if (isnan(dd)) return INFINITY;
        if (dd > e) e = dd;
        if (fabs(ri) > m) m = fabs(ri);
    }
    return m > 0 ? e / m : e;
}

static void check(const char *what, double err, double tol, int grad) {
    printf("    %-10s err %.2e (tol %.1e)\n", what, err, tol);
    if (grad && err > worst_grad) worst_grad = err;
    if (!grad && err > worst_out) worst_out = err;
    assert_true(err <= tol);
}

static void check_exact(const char *what, const float *got, const float *ref, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&got[i], &ref[i], sizeof(float)) != 0) {
            printf("    %s: element %zu is %.9g, want %.9g\n", what, i, got[i], ref[i]);
            fail();
        }
    }
    printf("    %-10s exact (%zu elements)\n", what, n);
}

/* ---- convolutions + mean residuals ---- */

typedef struct {
    int B, T, Hq, Hk, d, t0, t1;
} conv_shape;

/* Forward (with and without the decoding state) and backward of one shape against the CPU. */
static void conv_case(conv_shape s) {
    const int B = s.B, T = s.T, Hq = s.Hq, Hk = s.Hk, d = s.d, t0 = s.t0, t1 = s.t1;
    const int C = (Hq + Hk) * d, P = t0 - 1 + t1 - 1, Tm = T + t1 - 1, N = B * T;
    const size_t nq = (size_t)N * Hq * d, nk = (size_t)N * Hk * d, nx = (size_t)N * C;
    const size_t nm = (size_t)B * Tm * C, ns = (size_t)B * P * C, nw1 = (size_t)C * t0,
                 nw2 = (size_t)C * d * t1;
    printf("  conv B=%d T=%d Hq=%d Hk=%d d=%d t0=%d t1=%d\n", B, T, Hq, Hk, d, t0, t1);
    float *qk0 = hrandn(nx, 1.0f), *w1 = hrandn(nw1, 0.5f), *b1 = hrandn(C, 0.1f);
    float *w2 = hrandn(nw2, 1.0f / sqrtf((float)(d * t1))), *b2 = hrandn(C, 0.1f);
    float *gw1 = df32(w1, nw1), *gb1 = df32(b1, C), *gw2 = df32(w2, nw2), *gb2 = df32(b2, C);
    void *gqk0 = dact(qk0, nx);
    float *cq = halloc(nq), *ck = halloc(nk), *cmid = halloc(nm);
    float *hmid = NULL;

    for (int with_state = 0; with_state < 2; with_state++) {
        if (with_state && P == 0) continue;
        float *state = with_state ? hrandn(ns, 1.0f) : NULL;
        void *gstate = with_state ? dact(state, ns) : NULL;
        ops_cca_conv_fwd(&cpu, cq, ck, cmid, qk0, state, w1, b1, w2, b2, B, T, Hq, Hk, d, t0, t1);
        void *gq = dnan(nq), *gk = dnan(nk), *gmid = dnan(nm);
        ops_cca_conv_fwd(&gpu, gq, gk, gmid, gqk0, gstate, gw1, gb1, gw2, gb2, B, T, Hq, Hk, d, t0,
                         t1);
        float *hq = hact(gq, nq), *hk = hact(gk, nk), *hm = hact(gmid, nm);
        printf("   forward%s\n", with_state ? " with state" : "");
        check("mid", err_seg(hm, cmid, (size_t)B * Tm * (Hq + Hk), d), TOL_OUT, 0);
        check("q", err_seg(hq, cq, (size_t)N * Hq, d), TOL_OUT2, 0);
        check("k", err_seg(hk, ck, (size_t)N * Hk, d), TOL_OUT2, 0);
        if (!with_state) {
            hmid = hm; /* the backward of both sides reads the GPU's bf16 mid */
        } else {
            free(hm);
        }
        free(hq), free(hk), free(state);
        ops_free(&gpu, gq), ops_free(&gpu, gk), ops_free(&gpu, gmid), ops_free(&gpu, gstate);
    }

    /* backward: CPU and GPU from the same dq, dk, qk0, mid and random gradient starts */
    float *dq = hrandn(nq, 1.0f), *dk = hrandn(nk, 1.0f);
    float *dw1_0 = hrandn(nw1, 1.0f), *db1_0 = hrandn(C, 1.0f), *dw2_0 = hrandn(nw2, 1.0f),
          *db2_0 = hrandn(C, 1.0f);
    float *cdqk0 = halloc(nx), *cdw1 = hdup(dw1_0, nw1), *cdb1 = hdup(db1_0, C),
          *cdw2 = hdup(dw2_0, nw2), *cdb2 = hdup(db2_0, C);
    ops_cca_conv_bwd(&cpu, cdqk0, cdw1, cdb1, cdw2, cdb2, dq, dk, qk0, hmid, w1, w2, B, T, Hq, Hk,
                     d, t0, t1);
    void *gdq = dact(dq, nq), *gdk = dact(dk, nk), *gmid = dact(hmid, nm), *gdqk0 = dnan(nx);
    float *gdw1 = df32(dw1_0, nw1), *gdb1 = df32(db1_0, C), *gdw2 = df32(dw2_0, nw2),
          *gdb2 = df32(db2_0, C);
    ops_cca_conv_bwd(&gpu, gdqk0, gdw1, gdb1, gdw2, gdb2, gdq, gdk, gqk0, gmid, gw1, gw2, B, T, Hq,
                     Hk, d, t0, t1);
    float *hdqk0 = hact(gdqk0, nx), *hdw1 = hf32(gdw1, nw1), *hdb1 = hf32(gdb1, C),
          *hdw2 = hf32(gdw2, nw2), *hdb2 = hf32(gdb2, C);
    printf("   backward\n");
    check("dqk0", err_seg(hdqk0, cdqk0, (size_t)N * (Hq + Hk), d), TOL_OUT, 0);
    check("dw1", err_inc(hdw1, cdw1, dw1_0, nw1), TOL_GRAD, 1);
    check("db1", err_inc(hdb1, cdb1, db1_0, C), TOL_GRAD, 1);
    check("dw2", err_inc(hdw2, cdw2, dw2_0, nw2), TOL_GRAD, 1);
    check("db2", err_inc(hdb2, cdb2, db2_0, C), TOL_GRAD, 1);

    /* determinism: two runs from zeroed gradients give the same bits */
    float *runs[2][5];
    for (int r = 0; r < 2; r++) {
        ops_zero(&gpu, gdw1, nw1 * sizeof(float));
        ops_zero(&gpu, gdb1, C * sizeof(float));
        ops_zero(&gpu, gdw2, nw2 * sizeof(float));
        ops_zero(&gpu, gdb2, C * sizeof(float));
        ops_cca_conv_bwd(&gpu, gdqk0, gdw1, gdb1, gdw2, gdb2, gdq, gdk, gqk0, gmid, gw1, gw2, B, T,
                         Hq, Hk, d, t0, t1);
        runs[r][0] = hf32(gdw1, nw1), runs[r][1] = hf32(gdb1, C), runs[r][2] = hf32(gdw2, nw2);
        runs[r][3] = hf32(gdb2, C), runs[r][4] = hact(gdqk0, nx);
    }
    const size_t sizes[5] = {nw1, (size_t)C, nw2, (size_t)C, nx};
    for (int i = 0; i < 5; i++) {
        assert_memory_equal(runs[0][i], runs[1][i], sizes[i] * sizeof(float));
        free(runs[0][i]), free(runs[1][i]);
    }
    printf("    second run: identical bits\n");

    free(dq), free(dk), free(dw1_0), free(db1_0), free(dw2_0), free(db2_0);
    free(cdqk0), free(cdw1), free(cdb1), free(cdw2), free(cdb2);
    free(hdqk0), free(hdw1), free(hdb1), free(hdw2), free(hdb2);
    ops_free(&gpu, gdq), ops_free(&gpu, gdk), ops_free(&gpu, gmid), ops_free(&gpu, gdqk0);
    ops_free(&gpu, gdw1), ops_free(&gpu, gdb1), ops_free(&gpu, gdw2), ops_free(&gpu, gdb2);
    free(qk0), free(w1), free(b1), free(w2), free(b2), free(cq), free(ck), free(cmid), free(hmid);
    ops_free(&gpu, gw1), ops_free(&gpu, gb1), ops_free(&gpu, gw2), ops_free(&gpu, gb2);
    ops_free(&gpu, gqk0);
}

static void test_conv(void **state) {
    (void)state;
    if (!have_gpu) skip();
    static const conv_shape shapes[] = {
        {2, 67, 8, 2, 128, 2, 2}, /* bench-small heads, short sequences */
        {3, 130, 4, 4, 64, 1, 3}, /* G = 1, two forward tiles */
        {1, 300, 4, 2, 32, 4, 1}, /* t1 = 1: no grouped-conv halo */
        {2, 5, 2, 1, 64, 3, 4},   /* T shorter than the padding */
        {3, 1, 4, 1, 128, 2, 2},  /* one decoding step */
        {2, 257, 2, 2, 32, 4, 4}, /* widest kernels, three backward tiles */
        {1, 129, 2, 2, 64, 2, 3}, /* one row past a forward tile */
        {2, 700, 2, 1, 32, 2, 2}, /* several sequences per dw2 chunk */
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) conv_case(shapes[i]);
}

/* ---- value delay ---- */

static void vdelay_case(int B, int T, int half, int with_prev) {
    printf("  value_delay B=%d T=%d half=%d%s\n", B, T, half, with_prev ? " prev" : "");
    size_t nh = (size_t)B * T * half, nv = 2 * nh, np = (size_t)B * half;
    float *vcur = hrandn(nh, 1.0f), *vdel = hrandn(nh, 1.0f), *prev = hrandn(np, 1.0f);
    float *cv = halloc(nv);
    ops_value_delay_fwd(&cpu, cv, vcur, vdel, with_prev ? prev : NULL, B, T, half);
    void *gcur = dact(vcur, nh), *gdel = dact(vdel, nh), *gprev = dact(prev, np), *gv = dnan(nv);
    ops_value_delay_fwd(&gpu, gv, gcur, gdel, with_prev ? gprev : NULL, B, T, half);
    float *hv = hact(gv, nv);
    check_exact("v", hv, cv, nv);
    float *dv = hrandn(nv, 1.0f), *cdc = halloc(nh), *cdd = halloc(nh);
    ops_value_delay_bwd(&cpu, cdc, cdd, dv, B, T, half);
    void *gdv = dact(dv, nv), *gdc = dnan(nh), *gdd = dnan(nh);
    ops_value_delay_bwd(&gpu, gdc, gdd, gdv, B, T, half);
    float *hdc = hact(gdc, nh), *hdd = hact(gdd, nh);
    check_exact("dvcur", hdc, cdc, nh);
    check_exact("dvdel", hdd, cdd, nh);
    free(vcur), free(vdel), free(prev), free(cv), free(hv), free(dv), free(cdc), free(cdd);
    free(hdc), free(hdd);
    ops_free(&gpu, gcur), ops_free(&gpu, gdel), ops_free(&gpu, gprev), ops_free(&gpu, gv);
    ops_free(&gpu, gdv), ops_free(&gpu, gdc), ops_free(&gpu, gdd);
}

static void test_value_delay(void **state) {
    (void)state;
    if (!have_gpu) skip();
    vdelay_case(3, 5, 128, 0);
    vdelay_case(3, 5, 128, 1);
    vdelay_case(2, 1, 64, 1);
    vdelay_case(2, 7, 3, 1); /* element path */
    vdelay_case(1, 4, 3, 0);
}

/* ---- QK norm + temperature + partial RoPE ---- */

typedef struct {
    int N, Hq, Hk, d, rot;
    double theta;
} qk_shape;

static void qk_case(qk_shape s) {
    const int N = s.N, Hq = s.Hq, Hk = s.Hk, d = s.d, rot = s.rot;
    const float eps = 1e-6f;
    printf("  qknorm_rope N=%d Hq=%d Hk=%d d=%d rot=%d theta=%g\n", N, Hq, Hk, d, rot, s.theta);
    size_t nq = (size_t)N * Hq * d, nk = (size_t)N * Hk * d;
    float *q = hrandn(nq, 3.0f), *k = hrandn(nk, 0.5f), *temp = halloc(Hk);
    for (int j = 0; j < Hk; j++) temp[j] = 0.5f + 1.5f * zy_rng_uniform(&rng);
    /* one zero head of each kind: the norm clamp */
    if (N > 3) {
        memset(q + (size_t)2 * Hq * d, 0, (size_t)d * sizeof(float));
        memset(k + (size_t)3 * Hk * d, 0, (size_t)d * sizeof(float));
    }
    int32_t *pos = malloc((size_t)N * sizeof(int32_t));
    assert_non_null(pos);
    for (int n = 0; n < N; n++) pos[n] = (int32_t)zy_rng_below(&rng, 4096);
    pos[0] = 4095;
    if (N > 1) pos[1] = 0;

    /* forward */
    float *cq = hdup(q, nq), *ck = hdup(k, nk), *cqn = halloc(N * Hq), *ckn = halloc(N * Hk);
    float *cqi = halloc(nq), *cki = halloc(nk);
    ops_qknorm_rope_fwd(&cpu, cq, ck, cqn, ckn, cqi, cki, temp, pos, N, Hq, Hk, d, rot, s.theta,
                        eps);
    void *gq = dact(q, nq), *gk = dact(k, nk), *gqi = dnan(nq), *gki = dnan(nk);
    float *gtemp = df32(temp, Hk), *gqn = ops_alloc(&gpu, (size_t)N * Hq * sizeof(float));
    float *gkn = ops_alloc(&gpu, (size_t)N * Hk * sizeof(float));
    int32_t *gpos = ops_alloc(&gpu, (size_t)N * sizeof(int32_t));
    ops_copy(&gpu, gpos, pos, (size_t)N * sizeof(int32_t));
    ops_qknorm_rope_fwd(&gpu, gq, gk, gqn, gkn, gqi, gki, gtemp, gpos, N, Hq, Hk, d, rot, s.theta,
                        eps);
    float *hq = hact(gq, nq), *hk = hact(gk, nk), *hqi = hact(gqi, nq), *hki = hact(gki, nk);
    float *hqn = hf32(gqn, (size_t)N * Hq), *hkn = hf32(gkn, (size_t)N * Hk);
    check("q", err_seg(hq, cq, (size_t)N * Hq, d), TOL_OUT, 0);
    check("k", err_seg(hk, ck, (size_t)N * Hk, d), TOL_OUT, 0);
    check("qn", err_seg(hqn, cqn, (size_t)N * Hq, 1), TOL_NORM, 0);
    check("kn", err_seg(hkn, ckn, (size_t)N * Hk, 1), TOL_NORM, 0);
    check_exact("q_in", hqi, q, nq);
    check_exact("k_in", hki, k, nk);

    /* backward, each side from its own forward's saved tensors */
    float *dq = hrandn(nq, 1.0f), *dk = hrandn(nk, 1.0f), *dt0 = hrandn(Hk, 1.0f);
    float *cdq = hdup(dq, nq), *cdk = hdup(dk, nk), *cdt = hdup(dt0, Hk);
    ops_qknorm_rope_bwd(&cpu, cdq, cdk, cdt, cqi, cki, cqn, ckn, temp, pos, N, Hq, Hk, d, rot,
                        s.theta, eps);
    void *gdq = dact(dq, nq), *gdk = dact(dk, nk);
    float *gdt = df32(dt0, Hk);
    ops_qknorm_rope_bwd(&gpu, gdq, gdk, gdt, gqi, gki, gqn, gkn, gtemp, gpos, N, Hq, Hk, d, rot,
                        s.theta, eps);
    float *hdq = hact(gdq, nq), *hdk = hact(gdk, nk), *hdt = hf32(gdt, Hk);
    check("dq", err_seg(hdq, cdq, (size_t)N * Hq, d), TOL_OUT, 0);
    check("dk", err_seg(hdk, cdk, (size_t)N * Hk, d), TOL_OUT, 0);
    check("dtemp", err_inc(hdt, cdt, dt0, Hk), TOL_GRAD, 1);

    free(q), free(k), free(temp), free(pos), free(cq), free(ck), free(cqn), free(ckn), free(cqi);
    free(cki), free(hq), free(hk), free(hqi), free(hki), free(hqn), free(hkn);
    free(dq), free(dk), free(dt0), free(cdq), free(cdk), free(cdt), free(hdq), free(hdk), free(hdt);
    ops_free(&gpu, gq), ops_free(&gpu, gk), ops_free(&gpu, gqi), ops_free(&gpu, gki);
    ops_free(&gpu, gqn), ops_free(&gpu, gkn), ops_free(&gpu, gtemp), ops_free(&gpu, gpos);
    ops_free(&gpu, gdq), ops_free(&gpu, gdk), ops_free(&gpu, gdt);
}

static void test_qknorm_rope(void **state) {
    (void)state;
    if (!have_gpu) skip();
    static const qk_shape shapes[] = {
        {134, 8, 2, 128, 64, 1e4},  /* bench-small: partial rotary 0.5 */
        {134, 8, 2, 128, 64, 5e6},  /* ZAYA1-8B's theta */
        {134, 8, 2, 128, 128, 5e6}, /* full rotation */
        {50, 2, 2, 64, 32, 1e4},    /* G = 1 */
        {50, 4, 1, 32, 32, 1e6},    /* full rotation, d = 32 */
        {20, 2, 1, 24, 8, 1e4},     /* d % 8 != 0: element path */
        {20, 2, 2, 64, 0, 1e4},     /* no rotation */
        /* the warp-per-row kernels take the shapes above but for d = 24; these two take the
         * block-per-row kernels: rot / 2 not a multiple of 8, a row wider than 2048 */
        {30, 4, 2, 64, 8, 1e4},
        {10, 16, 2, 128, 64, 1e4},
        {1001, 8, 2, 128, 64, 1e4}, /* rows not a multiple of the 8 per block */
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) qk_case(shapes[i]);
}

/* ---- decoding attention ---- */

typedef struct {
    int B, Tk, Tmax, Hq, Hk, d, window;
} dec_shape;

static void dec_case(dec_shape s) {
    const int B = s.B, Tk = s.Tk, Tmax = s.Tmax, Hq = s.Hq, Hk = s.Hk, d = s.d;
    printf("  attention_decode B=%d Tk=%d Tmax=%d Hq=%d Hk=%d d=%d window=%d\n", B, Tk, Tmax, Hq,
           Hk, d, s.window);
    size_t nq = (size_t)B * Hq * d, nc = (size_t)B * Tmax * Hk * d;
    float *q = hrandn(nq, 1.0f), *kc = hrandn(nc, 1.0f), *vc = hrandn(nc, 1.0f);
    /* cache rows the query must not see are NaN on both sides */
    int lo = (s.window > 0 && Tk - s.window > 0) ? Tk - s.window : 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tmax; t++)
            if (t < lo || t >= Tk)
                for (int e = 0; e < Hk * d; e++) {
                    kc[((size_t)b * Tmax + t) * Hk * d + e] = NAN;
                    vc[((size_t)b * Tmax + t) * Hk * d + e] = NAN;
                }
    float scale = 1.0f / sqrtf((float)d), *co = halloc(nq);
    ops_attention_decode(&cpu, co, q, kc, vc, B, Tk, Tmax, Hq, Hk, d, scale, s.window);
    void *gq = dact(q, nq), *gk = dact(kc, nc), *gv = dact(vc, nc), *go = dnan(nq);
    ops_attention_decode(&gpu, go, gq, gk, gv, B, Tk, Tmax, Hq, Hk, d, scale, s.window);
    float *ho = hact(go, nq);
    check("out", err_seg(ho, co, (size_t)B * Hq, d), TOL_OUT, 0);
    free(q), free(kc), free(vc), free(co), free(ho);
    ops_free(&gpu, gq), ops_free(&gpu, gk), ops_free(&gpu, gv), ops_free(&gpu, go);
}

static void test_attention_decode(void **state) {
    (void)state;
    if (!have_gpu) skip();
    static const dec_shape shapes[] = {
        {2, 1, 4, 8, 2, 128, 0},       {2, 37, 40, 8, 2, 128, 0}, {2, 300, 300, 8, 2, 128, 16},
        {3, 100, 128, 4, 4, 64, 0},    {1, 50, 60, 2, 1, 32, 7},  {2, 20, 20, 2, 2, 40, 0},
        {1, 1000, 1024, 8, 2, 128, 0},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) dec_case(shapes[i]);
}

/* ---- timing at bench-small size (printed, not asserted) ---- */

/* ms per call of op `name` from the profiler's table (0 when absent). */
static double prof_ms(const zy_op_time *t, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(t[i].name, name) == 0) return t[i].calls ? t[i].ms / t[i].calls : 0;
    return 0;
}

static void test_timing(void **state) {
    (void)state;
    if (!have_gpu) skip();
    const char *quick = getenv("CCA_TEST_QUICK");
    if (quick && *quick && strcmp(quick, "0") != 0) skip();
    const int B = 8, T = 2048, Hq = 8, Hk = 2, d = 128, t0 = 2, t1 = 2, rot = 64, iters = 20;
    const int C = (Hq + Hk) * d, N = B * T, Tm = T + t1 - 1;
    const size_t nx = (size_t)N * C, nq = (size_t)N * Hq * d, nk = (size_t)N * Hk * d;
    /* uniform values from a cheap generator: timing only */
    float *h = halloc(nx);
    for (size_t i = 0; i < nx; i++) h[i] = zy_rng_uniform(&rng) - 0.5f;
    void *qk0 = dact(h, nx), *dq = dact(h, nq), *dk = dact(h + nq, nk);
    void *q = ops_alloc(&gpu, nq * 2), *k = ops_alloc(&gpu, nk * 2);
    void *mid = ops_alloc(&gpu, (size_t)B * Tm * C * 2), *dqk0 = ops_alloc(&gpu, nx * 2);
    void *qi = ops_alloc(&gpu, nq * 2), *ki = ops_alloc(&gpu, nk * 2);
    float *w1 = df32(h, (size_t)C * t0), *b1 = df32(h + 7, C),
          *w2 = df32(h + 11, (size_t)C * d * t1);
    float *b2 = df32(h + 13, C), *dw1 = ops_alloc(&gpu, (size_t)C * t0 * 4);
    float *db1 = ops_alloc(&gpu, C * 4), *dw2 = ops_alloc(&gpu, (size_t)C * d * t1 * 4);
    float *db2 = ops_alloc(&gpu, C * 4), *qn = ops_alloc(&gpu, (size_t)N * Hq * 4);
    float *kn = ops_alloc(&gpu, (size_t)N * Hk * 4), *temp = ops_alloc(&gpu, Hk * 4);
    float *dtemp = ops_alloc(&gpu, Hk * 4);
    ops_fill(&gpu, temp, 1.0f, Hk);
    int32_t *hpos = malloc((size_t)N * sizeof(int32_t));
    assert_non_null(hpos);
    for (int n = 0; n < N; n++) hpos[n] = n % T;
    int32_t *pos = ops_alloc(&gpu, (size_t)N * sizeof(int32_t));
    ops_copy(&gpu, pos, hpos, (size_t)N * sizeof(int32_t));
    free(hpos), free(h);

    for (int it = 0; it <= iters; it++) {
        if (it == 1) { /* the first round grows the workspace */
            ops_sync(&gpu);
            gpu.prof = 1;
            ops_prof_reset(&gpu);
        }
        ops_cca_conv_fwd(&gpu, q, k, mid, qk0, NULL, w1, b1, w2, b2, B, T, Hq, Hk, d, t0, t1);
        ops_qknorm_rope_fwd(&gpu, q, k, qn, kn, qi, ki, temp, pos, N, Hq, Hk, d, rot, 1e4, 1e-6f);
        ops_qknorm_rope_bwd(&gpu, dq, dk, dtemp, qi, ki, qn, kn, temp, pos, N, Hq, Hk, d, rot, 1e4,
                            1e-6f);
        ops_cca_conv_bwd(&gpu, dqk0, dw1, db1, dw2, db2, dq, dk, qk0, mid, w1, w2, B, T, Hq, Hk, d,
                         t0, t1);
    }
    zy_op_time t[16];
    int n = ops_prof_read(&gpu, t, 16);
    gpu.prof = 0;
    double fl = 2.0 * N * C * d * t1; /* grouped-conv GEMM flops of the forward */
    double f = prof_ms(t, n, "cca_conv_fwd"), b = prof_ms(t, n, "cca_conv_bwd");
    printf("  timing B=%d T=%d Hq=%d Hk=%d d=%d t0=%d t1=%d (%d iterations)\n", B, T, Hq, Hk, d, t0,
           t1, iters);
    printf("    cca_conv_fwd    %.3f ms  %.1f TFLOP/s (%.1f GFLOP)\n", f, fl / (f * 1e9), fl / 1e9);
    printf("    cca_conv_bwd    %.3f ms  %.1f TFLOP/s (%.1f GFLOP)\n", b, 2 * fl / (b * 1e9),
           2 * fl / 1e9);
    printf("    cca_conv fwd+bwd %.3f ms  %.1f TFLOP/s\n", f + b, 3 * fl / ((f + b) * 1e9));
    double qf = prof_ms(t, n, "qknorm_rope_fwd"), qb = prof_ms(t, n, "qknorm_rope_bwd");
    double qbytes = (double)(nq + nk) * 2;
    printf("    qknorm_rope_fwd %.3f ms  %.0f GB/s\n", qf, 3 * qbytes / (qf * 1e6));
    printf("    qknorm_rope_bwd %.3f ms  %.0f GB/s\n", qb, 3 * qbytes / (qb * 1e6));
    void *bufs[] = {qk0, dq, dk,  q,   k,   mid, dqk0, qi, ki,   w1,    b1,
                    w2,  b2, dw1, db1, dw2, db2, qn,   kn, temp, dtemp, pos};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ops_free(&gpu, bufs[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv),        cmocka_unit_test(test_value_delay),
        cmocka_unit_test(test_qknorm_rope), cmocka_unit_test(test_attention_decode),
        cmocka_unit_test(test_timing),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
