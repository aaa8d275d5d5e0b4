/* GPU tests of the CUDA router, MoE and EDA ops (ops/cuda/ops_moe.cu) through ops.h: each op on a
 * CUDA context against the same op on a CPU context fed the same bf16-rounded inputs. Every test
 * skips without a GPU. Outputs are poisoned first (NaN, or -7 for indices), so an element the GPU
 * never writes fails.
 * Measures (per element, printed as the worst error / tolerance):
 *  - dispatch (counts, offsets, offsets_host, perm, routed count) and gather: exact;
 *  - router choice: exact wherever the top-2 margin of probs + bias is over 1e-6 (GPU and CPU
 *    probabilities agree to ~1 fp32 ulp), else one of the near-tied experts; exact ties (equal
 *    logits / biases) must pick the first index;
 *  - bf16 outputs: |got - ref| <= 2^-8 |ref| + 2^-20 (|ref| + S), i.e. the output's own bf16
 *    rounding plus a few fp32 roundings of the terms of size S that cancel in it (0 = none);
 *  - fp32 probabilities / gates: 2^-21 |ref|;
 *  - fp32 sums (combine_bwd's dgate over D, eda_bwd's dg over N): (k + 2) 2^-24 sum|terms| +
 *    2^-22 |ref| with k the longest fp32 summation chain of the GPU's order (D; rows per chunk +
 *    8) — bf16 products are exact in fp32, so only the additions round.
 * `test_cuda_ops_moe` also times dispatch + gather + combine (and their backward) at N=16384,
 * E=16, D=1024 (printed, not asserted). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "ops_test_util.h"

#include "base/err.h"
#include "base/timer.h"
#include "io/safetensors.h" /* zy_f32_to_bf16, zy_bf16_to_f32 */

#define BF_REL      0.00390625             /* 2^-8 */
#define F32_SLACK   9.5367431640625e-07    /* 2^-20 */
#define F32_EPS     5.9604644775390625e-08 /* 2^-24 */
#define TIE_GAP     1e-6
#define PERM_POISON (-7)

#ifdef ZY_HAVE_CUDA
/* cudart maps memory in ASan's shadow gap; ASan must leave the gap unprotected (SAN=1 builds). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
    return "protect_shadow_gap=0";
}
#endif

static zy_ctx gpu; /* the CUDA context under test; tu_ctx is the CPU reference */
static int have_gpu;

static int setup(void **state) {
    (void)state;
    tu_rng = zy_rng_init(20261130, 7);
    ops_ctx_init_cpu(&tu_ctx, 2);
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
    return 0;
}

/* ---- buffers of one case (device and host), freed together ---- */

#define MAXBUF 96
static void *dbufs[MAXBUF], *hbufs[MAXBUF];
static int ndb, nhb;

static void *H(void *p) {
    assert_non_null(p);
    assert_true(nhb < MAXBUF);
    hbufs[nhb++] = p;
    return p;
}

static void *dalloc(size_t bytes) {
    assert_true(ndb < MAXBUF);
    void *p = ops_alloc(&gpu, bytes ? bytes : 16);
    dbufs[ndb++] = p;
    return p;
}

static void free_case(void) {
    for (int i = 0; i < ndb; i++) ops_free(&gpu, dbufs[i]);
    for (int i = 0; i < nhb; i++) free(hbufs[i]);
    ndb = nhb = 0;
}

/* x rounded to bf16 in place (what the GPU reads, so the CPU sees the same values). */
static float *bfr(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = zy_bf16_to_f32(zy_f32_to_bf16(x[i]));
    return x;
}

static float *randn_bf(size_t n, float sd) {
    return bfr(H(tu_randn(n, sd)), n);
}

static void *put(const void *x, size_t bytes) {
    void *d = dalloc(bytes);
    if (bytes) ops_copy(&gpu, d, x, bytes);
    return d;
}

static float *put_f32(const float *x, size_t n) {
    return put(x, n * sizeof(float));
}

static int32_t *put_i32(const int32_t *x, size_t n) {
    return put(x, n * sizeof(int32_t));
}

/* A bf16 activation buffer holding x[n] (plus `pad` leading elements when misaligning). */
static zy_act *put_act_at(const float *x, size_t n, size_t pad) {
    zy_act *a = dalloc((n + pad) * ops_act_size(&gpu));
    if (n) ops_cast_to_act(&gpu, ops_act_at(&gpu, a, pad), put_f32(x, n), n);
    return ops_act_at(&gpu, a, pad);
}

static zy_act *put_act(const float *x, size_t n) {
    return put_act_at(x, n, 0);
}

static zy_act *nan_act_at(size_t n, size_t pad) {
    return put_act_at(H(tu_const(n, NAN)), n, pad);
}

static float *get_f32(const float *d, size_t n) {
    float *h = H(tu_alloc(n));
    if (n) ops_copy(&gpu, h, d, n * sizeof(float));
    return h;
}

static int32_t *get_i32(const int32_t *d, size_t n) {
    int32_t *h = H(malloc((n ? n : 1) * sizeof(int32_t)));
    if (n) ops_copy(&gpu, h, d, n * sizeof(int32_t));
    return h;
}

static float *get_act(const zy_act *a, size_t n) {
    float *t = dalloc(n * sizeof(float));
    if (n) ops_act_to_f32(&gpu, t, a, n);
    return get_f32(t, n);
}

static int32_t *i32_const(size_t n, int32_t v) {
    int32_t *p = H(malloc((n ? n : 1) * sizeof(int32_t)));
    for (size_t i = 0; i < n; i++) p[i] = v;
    return p;
}

/* ---- checks ---- */

static double worst_ratio; /* largest error / tolerance over the file, printed at the end */

/* |got[i] - ref[i]| <= tol[i] for every i (NaN in got fails: an unwritten element). */
static void check_tol(const char *what, const float *got, const float *ref, const double *tol,
                      size_t n) {
    double worst = 0, maxerr = 0, maxref = 0;
    size_t bad = 0, first_bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(got[i]) && !isnan(ref[i]))
            fail_msg("%s: element %zu of %zu not written (NaN)", what, i, n);
        double d = fabs((double)got[i] - (double)ref[i]);
        double r = d == 0 ? 0 : (tol[i] > 0 ? d / tol[i] : INFINITY);
        if (r > worst) worst = r;
        if (d > maxerr) maxerr = d;
        if (fabs(ref[i]) > maxref) maxref = fabs(ref[i]);
        if (!(d <= tol[i]) && bad++ == 0) first_bad = i;
    }
    printf("    %-52s max|err| %.3g (%.2e of max|ref|), worst err/tol %.3f\n", what, maxerr,
           maxref > 0 ? maxerr / maxref : 0.0, worst);
    if (worst > worst_ratio) worst_ratio = worst;
    if (bad)
        fail_msg("%s: %zu elements over the tolerance; first %zu: got %.9g want %.9g (tol %.3g)",
                 what, bad, first_bad, got[first_bad], ref[first_bad], tol[first_bad]);
}

/* bf16 output: its own rounding plus a few fp32 roundings of terms of size scale[i] (may be NULL).
 */
static void check_bf16(const char *what, const float *got, const float *ref, const float *scale,
                       size_t n) {
    double *tol = H(tu_dalloc(n));
    for (size_t i = 0; i < n; i++)
        tol[i] = BF_REL * fabs(ref[i]) + F32_SLACK * (fabs(ref[i]) + (scale ? scale[i] : 0));
    check_tol(what, got, ref, tol, n);
}

/* fp32 output equal to the reference up to ~1 ulp (both devices compute it the same way). */
static void check_f32_ulps(const char *what, const float *got, const float *ref, size_t n) {
    double *tol = H(tu_dalloc(n));
    for (size_t i = 0; i < n; i++) tol[i] = 4.0 * 2 * F32_EPS * fabs(ref[i]) + 1e-37;
    check_tol(what, got, ref, tol, n);
}

/* Bit-exact (copies, integer outputs). */
static void check_exact_f(const char *what, const float *got, const float *ref, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &ref[i], sizeof(float)) != 0)
            fail_msg("%s: element %zu of %zu is %.9g, want %.9g", what, i, n, got[i], ref[i]);
    printf("    %-52s exact (%zu elements)\n", what, n);
}

static void check_exact_i(const char *what, const int32_t *got, const int32_t *ref, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (got[i] != ref[i])
            fail_msg("%s: element %zu of %zu is %d, want %d", what, i, n, got[i], ref[i]);
}

/* choice[N] in [0, E] with one of the patterns below (E = skip). */
enum { CH_UNIFORM, CH_ONE, CH_ALL_SKIP, CH_NO_SKIP, CH_SKEW, CH_RUNS, CH_NMODES };
static const char *ch_name[] = {"uniform",      "one expert", "all skipped",
                                "none skipped", "90% one",    "runs"};

static int32_t *make_choice(int N, int E, int mode) {
    int32_t *c = H(calloc(N ? (size_t)N : 1, sizeof(int32_t)));
    int one = (int)zy_rng_below(&tu_rng, (uint64_t)E);
    for (int n = 0; n < N; n++) {
        int v = 0;
        switch (mode) {
        case CH_UNIFORM:
            v = (int)zy_rng_below(&tu_rng, (uint64_t)E + 1);
            break;
        case CH_ONE:
            v = one;
            break;
        case CH_ALL_SKIP:
            v = E;
            break;
        case CH_NO_SKIP:
            v = (int)zy_rng_below(&tu_rng, (uint64_t)E);
            break;
        case CH_SKEW:
            v = zy_rng_uniform(&tu_rng) < 0.9f ? one : (int)zy_rng_below(&tu_rng, (uint64_t)E + 1);
            break;
        default:
            v = (n / 300) % (E + 1);
            break; /* long runs, like sorted input */
        }
        c[n] = v;
    }
    return c;
}

/* A permutation subset as dispatch makes it: the routed rows of a random choice, by expert. */
static int32_t *make_perm(int N, int E, int *nrows) {
    int32_t *c = make_choice(N, E, CH_UNIFORM);
    int32_t *counts = H(malloc((size_t)E * sizeof(int32_t)));
    int32_t *offs = H(malloc(((size_t)E + 1) * sizeof(int32_t)));
    int32_t *perm = H(calloc(N ? (size_t)N : 1, sizeof(int32_t)));
    *nrows = ops_moe_dispatch(&tu_ctx, counts, offs, H(malloc(((size_t)E + 1) * 4)), perm, c, N, E);
    return perm;
}

/* ---- router select ---- */

/* One case: probs and gates to ~1 ulp, choices exact where the margin is clear. Returns the number
 * of rows whose top-2 margin was clear. */
static int router_case(const float *logits, const float *bias, int N, int E1, const char *tag) {
    size_t ne = (size_t)N * E1;
    float *pr = H(tu_alloc(ne)), *gr = H(tu_alloc(N));
    int32_t *cr = i32_const(N, PERM_POISON);
    ops_router_select(&tu_ctx, pr, cr, gr, logits, bias, N, E1);

    float *dp = put_f32(H(tu_const(ne, NAN)), ne), *dg = put_f32(H(tu_const(N, NAN)), N);
    int32_t *dc = put_i32(i32_const(N, PERM_POISON), N);
    ops_router_select(&gpu, dp, dc, dg, put_act(logits, ne), put_f32(bias, E1), N, E1);
    float *p = get_f32(dp, ne), *g = get_f32(dg, N);
    int32_t *c = get_i32(dc, N);

    char what[128];
    snprintf(what, sizeof what, "router_select %s N=%d E1=%d probs", tag, N, E1);
    check_f32_ulps(what, p, pr, ne);
    int clear = 0;
    for (int n = 0; n < N; n++) {
        const float *q = pr + (size_t)n * E1;
        float best = -INFINITY, second = -INFINITY;
        for (int e = 0; e < E1; e++) {
            float v = q[e] + bias[e];
            if (v > best) {
                second = best;
                best = v;
            } else if (v > second) {
                second = v;
            }
        }
        if (c[n] < 0 || c[n] >= E1) fail_msg("%s: row %d choice %d out of range", what, n, c[n]);
        if (best - second > TIE_GAP) {
            clear++;
            if (c[n] != cr[n]) fail_msg("%s: row %d chose %d, want %d", what, n, c[n], cr[n]);
        } else if (!(q[c[n]] + bias[c[n]] >= best - TIE_GAP)) {
            fail_msg("%s: row %d chose %d, not among the near-tied best (%d)", what, n, c[n],
                     cr[n]);
        }
        float want = c[n] == E1 - 1 ? 0.0f : q[c[n]];
        double tol = 4.0 * 2 * F32_EPS * fabs(want);
        if (!(fabs(g[n] - want) <= tol) || (c[n] == E1 - 1 && g[n] != 0.0f))
            fail_msg("%s: row %d gate %.9g, want %.9g", what, n, g[n], want);
    }
    printf("    %-52s choices: %d of %d rows with a clear margin, all equal; gates ok\n", what,
           clear, N);
    return clear;
}

static void test_router_select(void **state) {
    (void)state;
    if (!have_gpu) skip();
    static const int cases[][2] = {{1, 17}, {1000, 17}, {4097, 129}, {777, 2},
                                   {33, 1}, {500, 40},  {8, 32},     {300, 33}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int N = cases[k][0], E1 = cases[k][1];
        float *logits = randn_bf((size_t)N * E1, 2.0f);
        float *bias = H(tu_randn(E1, 0.02f));
        int clear = router_case(logits, bias, N, E1, "random");
        assert_true(E1 == 1 || clear >= N * 9 / 10); /* the test must mostly test exact choices */
        free_case();
    }
}

/* Exact ties: equal logits (hence bit-equal probabilities on both devices) and equal biases must
 * pick the first index, across lanes (33 on lane 1 vs 64 on lane 0) and within a lane (2 vs 34). */
static void test_router_ties(void **state) {
    (void)state;
    if (!have_gpu) skip();
    for (int variant = 0; variant < 3; variant++) {
        int E1 = variant == 2 ? 129 : 17, N = 8, S = E1 - 1;
        size_t ne = (size_t)N * E1;
        float *logits = H(tu_const(ne, -1.0f)), *bias = H(tu_const(E1, 0.0f));
        int want[8];
        int ties[8][2];
        if (variant == 0) {
            int t[8][2] = {{-1, -1}, {5, 11}, {7, S}, {S, -1}, {0, S}, {15, 16}, {1, 2}, {9, 10}};
            memcpy(ties, t, sizeof t);
        } else if (variant == 1) { /* biases tie at 3 and 9; equal logits elsewhere */
            bias[3] = bias[9] = 0.25f;
            int t[8][2] = {{-1, -1}, {-1, -1}, {9, -1},  {3, 9},
                           {-1, -1}, {9, S},   {-1, -1}, {S, -1}};
            memcpy(ties, t, sizeof t);
        } else {
            int t[8][2] = {{33, 64}, {2, 34},  {100, S}, {31, 32},
                           {-1, -1}, {127, S}, {64, 96}, {S, -1}};
            memcpy(ties, t, sizeof t);
        }
        for (int n = 0; n < N; n++) {
            float *row = logits + (size_t)n * E1;
            int a = ties[n][0], b = ties[n][1];
            if (a < 0) { /* all logits equal: first index of the largest bias */
                for (int e = 0; e < E1; e++) row[e] = 0.5f;
                want[n] = variant == 1 ? 3 : 0;
                continue;
            }
            row[a] = 2.0f;
            if (b >= 0) row[b] = 2.0f;
            /* with biases 3 and 9 raised, a 2.0 logit still beats them (p gap >> 0.25) */
            want[n] = b >= 0 && b < a ? b : a;
        }
        float *pr = H(tu_alloc(ne)), *gr = H(tu_alloc(N));
        int32_t *cr = i32_const(N, PERM_POISON);
        ops_router_select(&tu_ctx, pr, cr, gr, logits, bias, N, E1);
        float *dp = put_f32(H(tu_const(ne, NAN)), ne), *dg = put_f32(H(tu_const(N, NAN)), N);
        int32_t *dc = put_i32(i32_const(N, PERM_POISON), N);
        ops_router_select(&gpu, dp, dc, dg, put_act(logits, ne), put_f32(bias, E1), N, E1);
        int32_t *c = get_i32(dc, N);
        float *g = get_f32(dg, N);
        for (int n = 0; n < N; n++) {
            if (cr[n] != want[n])
                fail_msg("CPU reference: variant %d row %d chose %d, test expects %d", variant, n,
                         cr[n], want[n]);
            if (c[n] != want[n])
                fail_msg("router ties variant %d row %d: GPU chose %d, want %d (first index)",
                         variant, n, c[n], want[n]);
            if (!(fabs(g[n] - gr[n]) <= 4.0 * 2 * F32_EPS * fabs(gr[n])))
                fail_msg("router ties variant %d row %d: gate %.9g, want %.9g", variant, n, g[n],
                         gr[n]);
        }
        printf("    router ties E1=%d: %d rows pick the first tied index, gates ok\n", E1, N);
        free_case();
    }
}

/* ---- router backward ---- */

static void test_router_bwd(void **state) {
    (void)state;
    if (!have_gpu) skip();
    static const int cases[][2] = {{1, 17}, {1000, 17}, {4097, 129}, {100, 1}, {513, 40}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int N = cases[k][0], E1 = cases[k][1];
        size_t ne = (size_t)N * E1;
        float *logits = randn_bf(ne, 2.0f), *bias = H(tu_randn(E1, 0.02f));
        bias[E1 - 1] += 0.05f; /* more skip rows */
        float *probs = H(tu_alloc(ne)), *gate = H(tu_alloc(N));
        int32_t *choice = i32_const(N, 0);
        ops_router_select(&tu_ctx, probs, choice, gate, logits, bias, N, E1);
        float *dgate = H(tu_randn(N, 1.0f)), *ref = H(tu_alloc(ne)), *scale = H(tu_alloc(ne));
        ops_router_bwd(&tu_ctx, ref, dgate, probs, choice, N, E1);
        int skips = 0;
        for (int n = 0; n < N; n++) {
            int c = choice[n];
            skips += c == E1 - 1;
            float a = c == E1 - 1 ? 0.0f : fabsf(dgate[n] * probs[(size_t)n * E1 + c]);
            for (int e = 0; e < E1; e++) scale[(size_t)n * E1 + e] = a;
        }
        zy_act *dl = nan_act_at(ne, 0);
        ops_router_bwd(&gpu, dl, put_f32(dgate, N), put_f32(probs, ne), put_i32(choice, N), N, E1);
        char what[128];
        snprintf(what, sizeof what, "router_bwd N=%d E1=%d (%d skip rows) dlogits", N, E1, skips);
        check_bf16(what, get_act(dl, ne), ref, scale, ne);
        free_case();
    }
}

/* ---- dispatch ---- */

static void dispatch_case(int N, int E, int mode) {
    int32_t *choice = make_choice(N, E, mode);
    size_t nn = N ? (size_t)N : 1;
    int32_t *cnt_r = i32_const(E, PERM_POISON), *off_r = i32_const(E + 1, PERM_POISON);
    int32_t *perm_r = i32_const(nn, PERM_POISON), *offh_r = i32_const(E + 1, PERM_POISON);
    int routed_r = ops_moe_dispatch(&tu_ctx, cnt_r, off_r, offh_r, perm_r, choice, N, E);

    int32_t *dcnt = put_i32(i32_const(E, PERM_POISON), E);
    int32_t *doff = put_i32(i32_const(E + 1, PERM_POISON), E + 1);
    int32_t *dperm = put_i32(i32_const(nn, PERM_POISON), nn);
    int32_t *offh = i32_const(E + 1, PERM_POISON);
    int routed = ops_moe_dispatch(&gpu, dcnt, doff, offh, dperm, put_i32(choice, nn), N, E);
    char what[128];
    snprintf(what, sizeof what, "dispatch N=%d E=%d %s", N, E, ch_name[mode]);
    if (routed != routed_r) fail_msg("%s: routed %d, want %d", what, routed, routed_r);
    check_exact_i(what, get_i32(dcnt, E), cnt_r, E);
    check_exact_i(what, get_i32(doff, E + 1), off_r, E + 1);
    check_exact_i(what, offh, off_r, E + 1);
    /* the listed rows exactly, and nothing written after them */
    check_exact_i(what, get_i32(dperm, nn), perm_r, nn);
    printf("    %-52s exact (%d routed)\n", what, routed);
}

static void test_dispatch(void **state) {
    (void)state;
    if (!have_gpu) skip();
    static const int Ns[] = {0, 1, 31, 256, 1000, 4097, 16384, 65536, 65537};
    static const int Es[] = {16, 128};
    for (size_t a = 0; a < sizeof Ns / sizeof Ns[0]; a++)
        for (size_t b = 0; b < sizeof Es / sizeof Es[0]; b++)
            for (int m = 0; m < CH_NMODES; m++) {
                dispatch_case(Ns[a], Es[b], m);
                free_case();
            }
    /* one expert; the largest E the kernels take */
    for (int m = 0; m < CH_NMODES; m++) {
        dispatch_case(3000, 1, m);
        free_case();
        dispatch_case(5000, 512, m);
        free_case();
    }
}

/* ---- gather ---- */

static void test_gather(void **state) {
    (void)state;
    if (!have_gpu) skip();
    static const int Cs[] = {1024, 136, 37, 8, 1};
    static const int Ns[] = {1, 1000, 3001};
    for (size_t a = 0; a < sizeof Ns / sizeof Ns[0]; a++)
        for (size_t b = 0; b < sizeof Cs / sizeof Cs[0]; b++)
            for (int mis = 0; mis < 2; mis++) { /* mis: misaligned by one element (scalar path) */
                int N = Ns[a], C = Cs[b], nrows;
                if (mis && C != 1024) continue;
                int32_t *perm = make_perm(N, 16, &nrows);
                size_t nc = (size_t)N * C, rc = (size_t)nrows * C;
                float *x = randn_bf(nc, 1.0f), *ref = H(tu_alloc(rc));
                ops_gather_rows(&tu_ctx, ref, x, perm, nrows, C);
                zy_act *dxs = nan_act_at(rc, mis);
                ops_gather_rows(&gpu, dxs, put_act_at(x, nc, mis), put_i32(perm, N ? N : 1), nrows,
                                C);
                char what[128];
                snprintf(what, sizeof what, "gather_rows N=%d C=%d rows=%d%s", N, C, nrows,
                         mis ? " misaligned" : "");
                check_exact_f(what, get_act(dxs, rc), ref, rc);
                free_case();
            }
}

/* ---- combine, forward and backward ---- */

static void test_combine(void **state) {
    (void)state;
    if (!have_gpu) skip();
    static const int Ds[] = {1024, 136, 37, 1};
    static const int Ns[] = {1, 1000, 3001};
    for (size_t a = 0; a < sizeof Ns / sizeof Ns[0]; a++)
        for (size_t b = 0; b < sizeof Ds / sizeof Ds[0]; b++)
            for (int mis = 0; mis < 2; mis++) {
                int N = Ns[a], D = Ds[b], nrows;
                if (mis && D != 1024) continue;
                int32_t *perm = make_perm(N, 16, &nrows);
                size_t nd = (size_t)N * D, rd = (size_t)nrows * D;
                float *ys = randn_bf(rd, 1.0f), *gate = H(tu_randu(N, 0.0f, 1.0f));
                float *ref = H(tu_alloc(nd));
                ops_moe_combine(&tu_ctx, ref, ys, gate, perm, nrows, N, D);
                zy_act *dy = nan_act_at(nd, mis);
                int32_t *dperm = put_i32(perm, N ? N : 1);
                float *dgate = put_f32(gate, N);
                ops_moe_combine(&gpu, dy, put_act_at(ys, rd, mis), dgate, dperm, nrows, N, D);
                char what[128];
                snprintf(what, sizeof what, "moe_combine N=%d D=%d rows=%d%s y", N, D, nrows,
                         mis ? " misaligned" : "");
                check_bf16(what, get_act(dy, nd), ref, NULL, nd);

                /* backward: dys = gate dy, dgate = dy . ys */
                float *g = randn_bf(nd, 1.0f), *dys_r = H(tu_alloc(rd)), *dg_r = H(tu_alloc(N));
                ops_moe_combine_bwd(&tu_ctx, dys_r, dg_r, g, ys, gate, perm, nrows, N, D);
                double *tol = H(tu_dalloc(N));
                for (int r = 0; r < nrows; r++) {
                    int n = perm[r];
                    double s = 0;
                    for (int c = 0; c < D; c++)
                        s += fabs((double)g[(size_t)n * D + c] * ys[(size_t)r * D + c]);
                    tol[n] = (D + 2) * F32_EPS * s + 4 * F32_EPS * fabs(dg_r[n]);
                }
                zy_act *ddys = nan_act_at(rd, mis);
                float *ddg = put_f32(H(tu_const(N, NAN)), N);
                ops_moe_combine_bwd(&gpu, ddys, ddg, put_act_at(g, nd, mis),
                                    put_act_at(ys, rd, mis), dgate, dperm, nrows, N, D);
                snprintf(what, sizeof what, "moe_combine_bwd N=%d D=%d rows=%d%s dys", N, D, nrows,
                         mis ? " misaligned" : "");
                check_bf16(what, get_act(ddys, rd), dys_r, NULL, rd);
                snprintf(what, sizeof what, "moe_combine_bwd N=%d D=%d rows=%d%s dgate", N, D,
                         nrows, mis ? " misaligned" : "");
                check_tol(what, get_f32(ddg, N), dg_r, tol, N);
                free_case();
            }
}

/* ---- scatter-add ---- */

static void test_scatter_add(void **state) {
    (void)state;
    if (!have_gpu) skip();
    static const int Cs[] = {1024, 136, 37, 1};
    static const int Ns[] = {1, 1000, 3001};
    for (size_t a = 0; a < sizeof Ns / sizeof Ns[0]; a++)
        for (size_t b = 0; b < sizeof Cs / sizeof Cs[0]; b++)
            for (int mis = 0; mis < 2; mis++) {
                int N = Ns[a], C = Cs[b], nrows;
                if (mis && C != 1024) continue;
                int32_t *perm = make_perm(N, 16, &nrows);
                size_t nc = (size_t)N * C, rc = (size_t)nrows * C;
                float *dx = randn_bf(nc, 1.0f), *dxs = randn_bf(rc, 1.0f);
                float *ref = H(tu_dup(dx, nc)), *scale = H(tu_alloc(nc));
                ops_scatter_add_rows(&tu_ctx, ref, dxs, perm, nrows, C);
                for (size_t i = 0; i < nc; i++) scale[i] = fabsf(dx[i]) + fabsf(ref[i] - dx[i]);
                zy_act *ddx = put_act_at(dx, nc, mis);
                ops_scatter_add_rows(&gpu, ddx, put_act_at(dxs, rc, mis), put_i32(perm, N ? N : 1),
                                     nrows, C);
                char what[128];
                snprintf(what, sizeof what, "scatter_add_rows N=%d C=%d rows=%d%s dx", N, C, nrows,
                         mis ? " misaligned" : "");
                check_bf16(what, get_act(ddx, nc), ref, scale, nc);
                free_case();
            }
}

/* ---- expert GEMMs ---- */

static float *absdup(const float *x, size_t n) {
    float *a = H(tu_alloc(n));
    for (size_t i = 0; i < n; i++) a[i] = fabsf(x[i]);
    return a;
}

/* fp32 sums of bf16 products (exact in fp32): (k + 2) 2^-24 sum|terms| + 2^-22 |ref|. */
static void check_f32_sum(const char *what, const float *got, const float *ref, const float *sabs,
                          int k, size_t n) {
    double *tol = H(tu_dalloc(n));
    for (size_t i = 0; i < n; i++)
        tol[i] = (k + 2) * F32_EPS * sabs[i] + 4 * F32_EPS * fabs(ref[i]) + 1e-37;
    check_tol(what, got, ref, tol, n);
}

/* ops_expert_matmul (forward and data gradient), ops_expert_matmul_wgrad and ops_expert_matmul_bwd
 * (both gradients at once) with beta 0 and 1,
 * on experts of 0, 1 and many rows, against the CPU op. With beta = 0 the old gradient is NaN:
 * every expert's block must be overwritten, the empty expert's with zeros. Experts 3 (exactly two
 * blocks of CUDA_GEMM_CHUNK_ROWS = 256) and 5 (one block and 160 rows) take the blocked GEMMs
 * with cuda.expert_chunk on; the test runs both ways. */
static void expert_matmul_case(void) {
    enum { E = 6, N = 48, K = 40, ROWS = 999 };
    const int32_t off[E + 1] = {0, 30, 30, 70, 582, 583, ROWS};
    const size_t nw = (size_t)E * N * K;
    float *W = randn_bf(nw, 0.5f), *X = randn_bf((size_t)ROWS * K, 1.0f);
    float *dY = randn_bf((size_t)ROWS * N, 1.0f);
    zy_act *dW_ = put_act(W, nw), *dX_ = put_act(X, (size_t)ROWS * K);
    zy_act *ddY = put_act(dY, (size_t)ROWS * N);
    char what[128];
    float *ref_dx = NULL;
    double *tol_dx = NULL;
    for (int data_grad = 0; data_grad < 2; data_grad++) {
        const int in_w = data_grad ? N : K, out_w = data_grad ? K : N;
        const float *in = data_grad ? dY : X;
        const size_t no = (size_t)ROWS * out_w;
        float *ref = H(tu_const(no, 0.0f)), *sabs = H(tu_const(no, 0.0f));
        ops_expert_matmul(&tu_ctx, ref, in, W, off, E, N, K, data_grad);
        ops_expert_matmul(&tu_ctx, sabs, absdup(in, (size_t)ROWS * in_w), absdup(W, nw), off, E, N,
                          K, data_grad);
        zy_act *dout = nan_act_at(no, 0);
        ops_expert_matmul(&gpu, dout, data_grad ? ddY : dX_, dW_, off, E, N, K, data_grad);
        snprintf(what, sizeof what, "expert_matmul %s E=%d N=%d K=%d", data_grad ? "data" : "fwd",
                 E, N, K);
        double *tol = H(tu_dalloc(no)); /* bf16 rounding of the output + fp32 sums over in_w */
        for (size_t i = 0; i < no; i++)
            tol[i] = BF_REL * fabs(ref[i]) + (in_w + 2) * F32_EPS * sabs[i] + 1e-37;
        check_tol(what, get_act(dout, no), ref, tol, no);
        ref_dx = ref, tol_dx = tol; /* the data gradient's, for expert_matmul_bwd below */
    }
    for (int beta = 0; beta < 2; beta++) {
        float *old = beta ? randn_bf(nw, 1.0f) : H(tu_const(nw, NAN));
        float *ref = H(tu_dup(old, nw)), *sabs = H(tu_const(nw, 0.0f));
        ops_expert_matmul_wgrad(&tu_ctx, ref, dY, X, off, E, N, K, (float)beta);
        ops_expert_matmul_wgrad(&tu_ctx, sabs, absdup(dY, (size_t)ROWS * N),
                                absdup(X, (size_t)ROWS * K), off, E, N, K, 0.0f);
        if (beta)
            for (size_t i = 0; i < nw; i++) sabs[i] += fabsf(old[i]);
        float *ddW = put_f32(old, nw);
        ops_expert_matmul_wgrad(&gpu, ddW, ddY, dX_, off, E, N, K, (float)beta);
        float *got = get_f32(ddW, nw);
        snprintf(what, sizeof what, "expert_matmul_wgrad beta=%d E=%d N=%d K=%d", beta, E, N, K);
        check_f32_sum(what, got, ref, sabs, off[3] - off[2], nw);
        if (!beta)
            for (size_t i = (size_t)N * K; i < 2 * (size_t)N * K; i++)
                if (got[i] != 0.0f) fail_msg("%s: empty expert element %zu is %g", what, i, got[i]);
        /* the same gradients from expert_matmul_bwd */
        zy_act *dxo = nan_act_at((size_t)ROWS * K, 0);
        float *ddW2 = put_f32(old, nw);
        /* beta 1 leaves the GEMMs running and joins them after */
        ops_expert_matmul_bwd(&gpu, dxo, ddW2, ddY, dX_, dW_, off, E, N, K, (float)beta, !beta);
        if (beta) ops_expert_join(&gpu);
        snprintf(what, sizeof what, "expert_matmul_bwd beta=%d E=%d N=%d K=%d dX", beta, E, N, K);
        check_tol(what, get_act(dxo, (size_t)ROWS * K), ref_dx, tol_dx, (size_t)ROWS * K);
        snprintf(what, sizeof what, "expert_matmul_bwd beta=%d E=%d N=%d K=%d dW", beta, E, N, K);
        check_f32_sum(what, get_f32(ddW2, nw), ref, sabs, off[3] - off[2], nw);
    }
    free_case();
}

static void test_expert_matmul(void **state) {
    (void)state;
    if (!have_gpu) skip();
    for (int chunks = 0; chunks < 2; chunks++) { /* per-expert calls, then by blocks */
        zy_cuda_opts o = ops_cuda_opts_default();
        o.expert_chunk = chunks;
        ops_ctx_free(&gpu);
        if (ops_ctx_init_cuda_opts(&gpu, 0, &o) != ZY_OK) fail_msg("%s", zy_errmsg());
        expert_matmul_case();
    }
    ops_ctx_free(&gpu); /* the default context again for the tests after this one */
    if (ops_ctx_init_cuda(&gpu, 0) != ZY_OK) fail_msg("%s", zy_errmsg());
}

/* ---- EDA ---- */

static void test_eda(void **state) {
    (void)state;
    if (!have_gpu) skip();
    static const int Rs[] = {256, 37, 8};
    static const int Ns[] = {1, 1000, 16384};
    for (size_t a = 0; a < sizeof Ns / sizeof Ns[0]; a++)
        for (size_t b = 0; b < sizeof Rs / sizeof Rs[0]; b++) {
            int N = Ns[a], R = Rs[b];
            size_t nr = (size_t)N * R;
            float *z = randn_bf(nr, 1.0f), *rp = randn_bf(nr, 1.0f), *g = H(tu_randn(R, 0.5f));
            float *ref = H(tu_dup(z, nr)), *scale = H(tu_alloc(nr));
            ops_eda_fwd(&tu_ctx, ref, rp, g, N, R);
            for (size_t i = 0; i < nr; i++) scale[i] = fabsf(z[i]) + fabsf(rp[i] * g[i % R]);
            zy_act *dz = put_act(z, nr), *drp = put_act(rp, nr);
            float *dgv = put_f32(g, R);
            ops_eda_fwd(&gpu, dz, drp, dgv, N, R);
            char what[128];
            snprintf(what, sizeof what, "eda_fwd N=%d R=%d z", N, R);
            check_bf16(what, get_act(dz, nr), ref, scale, nr);

            /* backward onto a random dg (accumulates) */
            float *gz = randn_bf(nr, 1.0f), *dg0 = H(tu_randn(R, 1.0f));
            float *dr_r = H(tu_alloc(nr)), *dg_r = H(tu_dup(dg0, R));
            ops_eda_bwd(&tu_ctx, dr_r, dg_r, gz, rp, g, N, R);
            int chunk = N / 256 + (N % 256 != 0); /* rows per chunk of the GPU's column sums */
            if (chunk < 64) chunk = 64;
            double *tol = H(tu_dalloc(R));
            for (int c = 0; c < R; c++) {
                double s = 0;
                for (int n = 0; n < N; n++)
                    s += fabs((double)gz[(size_t)n * R + c] * rp[(size_t)n * R + c]);
                tol[c] =
                    (chunk + 8 + 2) * F32_EPS * s + 4 * F32_EPS * (fabs(dg_r[c]) + fabs(dg0[c]));
            }
            zy_act *ddr = nan_act_at(nr, 0);
            float *ddg = put_f32(dg0, R);
            ops_eda_bwd(&gpu, ddr, ddg, put_act(gz, nr), drp, dgv, N, R);
            snprintf(what, sizeof what, "eda_bwd N=%d R=%d dr_prev", N, R);
            check_bf16(what, get_act(ddr, nr), dr_r, NULL, nr);
            snprintf(what, sizeof what, "eda_bwd N=%d R=%d dg (+=)", N, R);
            check_tol(what, get_f32(ddg, R), dg_r, tol, R);
            free_case();
        }
}

/* ---- timing (printed, not asserted) ---- */

static void test_timing(void **state) {
    (void)state;
    if (!have_gpu) skip();
    const int N = 16384, E = 16, D = 1024, iters = 20;
    size_t nd = (size_t)N * D;
    int32_t *choice = make_choice(N, E, CH_UNIFORM);
    int32_t *dchoice = put_i32(choice, N), *dcnt = dalloc(E * 4), *doff = dalloc((E + 1) * 4);
    int32_t *dperm = dalloc((size_t)N * 4);
    int32_t offh[16 + 1]; /* E + 1 */
    size_t ab = nd * ops_act_size(&gpu);
    zy_act *x = put_act(H(tu_randn(nd, 1.0f)), nd), *xs = dalloc(ab), *y = dalloc(ab);
    zy_act *dys = dalloc(ab), *dx = dalloc(ab);
    float *gate = put_f32(H(tu_randu(N, 0.0f, 1.0f)), N), *dgate = dalloc((size_t)N * 4);
    int routed = 0;
    double wall[2] = {0, 0};
    for (int phase = 0; phase < 2; phase++) { /* 0: warm-up (workspace growth, first launches) */
        if (phase == 1) {
            ops_prof_reset(&gpu);
            gpu.prof = 1;
        }
        int n_it = phase ? iters : 3;
        double t0 = zy_now();
        for (int it = 0; it < n_it; it++) {
            routed = ops_moe_dispatch(&gpu, dcnt, doff, offh, dperm, dchoice, N, E);
            ops_gather_rows(&gpu, xs, x, dperm, routed, D);
            ops_moe_combine(&gpu, y, xs, gate, dperm, routed, N, D);
        }
        ops_sync(&gpu);
        double t1 = zy_now();
        for (int it = 0; it < n_it; it++) {
            ops_moe_combine_bwd(&gpu, dys, dgate, y, xs, gate, dperm, routed, N, D);
            ops_scatter_add_rows(&gpu, dx, dys, dperm, routed, D);
        }
        ops_sync(&gpu);
        wall[0] = (t1 - t0) / n_it;
        wall[1] = (zy_now() - t1) / n_it;
    }
    gpu.prof = 0;
    zy_op_time t[16];
    int nt = ops_prof_read(&gpu, t, 16);
    double row = (double)D * ops_act_size(&gpu); /* bytes of one activation row */
    printf("    timing N=%d E=%d D=%d, %d routed rows, mean of %d iterations:\n", N, E, D, routed,
           iters);
    for (int i = 0; i < nt; i++) {
        double us = t[i].ms * 1e3 / (double)t[i].calls, bytes = 0;
        if (!strcmp(t[i].name, "gather_rows")) bytes = 2.0 * routed * row;
        if (!strcmp(t[i].name, "moe_combine")) bytes = ((double)N + routed) * row;
        if (!strcmp(t[i].name, "moe_combine_bwd")) bytes = 3.0 * routed * row;
        if (!strcmp(t[i].name, "scatter_add_rows")) bytes = 3.0 * routed * row;
        printf("      %-18s %8.1f us device", t[i].name, us);
        if (bytes > 0) printf("  (%.0f GB/s of row traffic)", bytes / (us * 1e-6) / 1e9);
        printf("\n");
    }
    printf("      wall per iteration: dispatch+gather+combine %.1f us (dispatch waits for the host "
           "copy), combine_bwd+scatter_add %.1f us\n",
           wall[0] * 1e6, wall[1] * 1e6);
    free_case();
}

static void test_summary(void **state) {
    (void)state;
    if (!have_gpu) skip();
    printf("test_cuda_ops_moe worst error/tolerance over all checks: %.3f\n", worst_ratio);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_router_select), cmocka_unit_test(test_router_ties),
        cmocka_unit_test(test_router_bwd),    cmocka_unit_test(test_dispatch),
        cmocka_unit_test(test_gather),        cmocka_unit_test(test_combine),
        cmocka_unit_test(test_scatter_add),   cmocka_unit_test(test_expert_matmul),
        cmocka_unit_test(test_eda),           cmocka_unit_test(test_timing),
        cmocka_unit_test(test_summary),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
