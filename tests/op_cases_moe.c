/* Op cases of the router, MoE and EDA ops for the op harness (op_harness.h). Outputs are poisoned
 * first (NaN, or -7 for indices), so an element a backend never writes fails.
 * Measures (per element):
 *  - dispatch (counts, offsets, offsets_host, perm, routed count) and gather: exact;
 *  - router choice: exact wherever the top-2 margin of probs + bias is over 1e-6 (GPU and CPU
 *    probabilities agree to ~1 fp32 ulp), else one of the near-tied experts; exact ties (equal
 *    logits / biases) must pick the first index;
 *  - bf16 outputs: |got - ref| <= 2^-8 |ref| + 2^-20 (|ref| + S), i.e. the output's own bf16
 *    rounding plus a few fp32 roundings of the terms of size S that cancel in it (0 = none);
 *  - fp32 probabilities / gates: 2^-21 |ref|;
 *  - fp32 sums (combine_bwd's dgate over D, eda_bwd's dg over N): (k + 2) 2^-24 sum|terms| +
 *    2^-22 |ref| with k the longest fp32 summation chain of the GPU's order (D; rows per chunk +
 *    8) — bf16 products are exact in fp32, so only the additions round. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "op_cases.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define BF_REL      0.00390625             /* 2^-8 */
#define F32_SLACK   9.5367431640625e-07    /* 2^-20 */
#define F32_EPS     5.9604644775390625e-08 /* 2^-24 */
#define TIE_GAP     1e-6
#define PERM_POISON (-7)

/* bf16 output: its own rounding plus a few fp32 roundings of terms of size scale[i] (NULL: 0). */
static oh_measure m_bf16(oh_run *r, const double *scale, size_t n) {
    double *s = oh_zeros(r, n);
    for (size_t i = 0; i < n && scale; i++) s[i] = scale[i];
    return oh_bound(BF_REL + F32_SLACK, F32_SLACK, s);
}

/* fp32 output equal to the reference up to ~1 ulp (both devices compute it the same way). */
static oh_measure m_ulps(void) {
    return oh_bound_abs(4.0 * 2 * F32_EPS, 0.0, NULL, 1e-37);
}

/* choice[N] in [0, E] with one of the patterns below (E = skip). */
enum { CH_UNIFORM, CH_ONE, CH_ALL_SKIP, CH_NO_SKIP, CH_SKEW, CH_RUNS, CH_NMODES };
static const char *ch_name[] = {"uniform",      "one expert", "all skipped",
                                "none skipped", "90% one",    "runs"};

static int32_t *make_choice(oh_run *r, int N, int E, int mode) {
    zy_rng *g = oh_rng();
    int32_t *c = oh_ints(r, N ? (size_t)N : 1, 0);
    int one = (int)zy_rng_below(g, (uint64_t)E);
    for (int n = 0; n < N; n++) {
        int v = 0;
        switch (mode) {
        case CH_UNIFORM:
            v = (int)zy_rng_below(g, (uint64_t)E + 1);
            break;
        case CH_ONE:
            v = one;
            break;
        case CH_ALL_SKIP:
            v = E;
            break;
        case CH_NO_SKIP:
            v = (int)zy_rng_below(g, (uint64_t)E);
            break;
        case CH_SKEW:
            v = zy_rng_uniform(g) < 0.9f ? one : (int)zy_rng_below(g, (uint64_t)E + 1);
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
static int32_t *make_perm(oh_run *r, int N, int E, int *nrows) {
    int32_t *c = make_choice(r, N, E, CH_UNIFORM);
    int32_t *counts = oh_ints(r, E, 0), *offs = oh_ints(r, E + 1, 0);
    int32_t *perm = oh_ints(r, N ? (size_t)N : 1, 0);
    *nrows = ops_moe_dispatch(oh_cpu(), counts, offs, oh_ints(r, E + 1, 0), perm, c, N, E);
    return perm;
}

/* ---- router select ---- */

/* Router select on the CPU (pr, cr, gr) and on the run's backend (p, c, g), host copies of
 * [N,E1], [N], [N]. */
typedef struct {
    float *pr, *gr, *p, *g;
    int32_t *cr, *c;
} router_out;

static router_out router_both(oh_run *r, const float *logits, const float *bias, int N, int E1) {
    size_t ne = (size_t)N * E1;
    router_out o = {.pr = oh_const(r, ne, 0.0f), .gr = oh_const(r, N, 0.0f)};
    o.cr = oh_ints(r, N, PERM_POISON);
    ops_router_select(oh_cpu(), o.pr, o.cr, o.gr, logits, bias, N, E1);
    float *dp = oh_nan_f32(r, ne), *dg = oh_nan_f32(r, N);
    int32_t *dc = oh_i32(r, oh_ints(r, N, PERM_POISON), N);
    ops_router_select(oh_ctx(r), dp, dc, dg, oh_act(r, logits, ne), oh_f32(r, bias, E1), N, E1);
    o.p = oh_get_f32(r, dp, ne), o.g = oh_get_f32(r, dg, N), o.c = oh_get_i32(r, dc, N);
    return o;
}

/* Probabilities to ~1 ulp, choices equal where the margin is clear (else among the near-tied),
 * gates from the chosen probabilities. Returns the number of rows with a clear margin. */
static int router_one(oh_run *r, const float *logits, const float *bias, int N, int E1,
                      const char *tag) {
    router_out o = router_both(r, logits, bias, N, E1);
    const float *pr = o.pr, *g = o.g;
    const int32_t *cr = o.cr, *c = o.c;
    char what[128];
    snprintf(what, sizeof what, "router_select %s N=%d E1=%d probs", tag, N, E1);
    oh_expect(m_ulps(), o.p, pr, (size_t)N * E1, "%s", what);
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
    printf("    %-60s choices: %d of %d rows with a clear margin, all equal; gates ok\n", what,
           clear, N);
    return clear;
}

/* p: N, E1 */
static void case_router_select(oh_run *r, const int *p) {
    int N = p[0], E1 = p[1];
    float *logits = oh_randn_bf(r, (size_t)N * E1, 2.0f), *bias = oh_randn(r, E1, 0.02f);
    int clear = router_one(r, logits, bias, N, E1, "random");
    assert_true(E1 == 1 || clear >= N * 9 / 10); /* the test must mostly test exact choices */
}

/* Exact ties: equal logits (hence bit-equal probabilities on both devices) and equal biases must
 * pick the first index, across lanes (33 on lane 1 vs 64 on lane 0) and within a lane (2 vs 34).
 * p: variant */
static void case_router_ties(oh_run *r, const int *p) {
    int variant = p[0], E1 = variant == 2 ? 129 : 17, N = 8, S = E1 - 1;
    size_t ne = (size_t)N * E1;
    float *logits = oh_const(r, ne, -1.0f), *bias = oh_const(r, E1, 0.0f);
    int want[8], ties[8][2];
    if (variant == 0) {
        int t[8][2] = {{-1, -1}, {5, 11}, {7, S}, {S, -1}, {0, S}, {15, 16}, {1, 2}, {9, 10}};
        memcpy(ties, t, sizeof t);
    } else if (variant == 1) { /* biases tie at 3 and 9; equal logits elsewhere */
        bias[3] = bias[9] = 0.25f;
        int t[8][2] = {{-1, -1}, {-1, -1}, {9, -1}, {3, 9}, {-1, -1}, {9, S}, {-1, -1}, {S, -1}};
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
    router_out o = router_both(r, logits, bias, N, E1);
    const float *gr = o.gr, *g = o.g;
    const int32_t *cr = o.cr, *c = o.c;
    for (int n = 0; n < N; n++) {
        if (cr[n] != want[n])
            fail_msg("CPU reference: variant %d row %d chose %d, test expects %d", variant, n,
                     cr[n], want[n]);
        if (c[n] != want[n])
            fail_msg("router ties variant %d row %d: chose %d, want %d (first index)", variant, n,
                     c[n], want[n]);
        if (!(fabs(g[n] - gr[n]) <= 4.0 * 2 * F32_EPS * fabs(gr[n])))
            fail_msg("router ties variant %d row %d: gate %.9g, want %.9g", variant, n, g[n],
                     gr[n]);
    }
    printf("    router ties E1=%d: %d rows pick the first tied index, gates ok\n", E1, N);
}

/* ---- router backward ---- */

/* p: N, E1 */
static void case_router_bwd(oh_run *r, const int *p) {
    int N = p[0], E1 = p[1];
    size_t ne = (size_t)N * E1;
    float *logits = oh_randn_bf(r, ne, 2.0f), *bias = oh_randn(r, E1, 0.02f);
    bias[E1 - 1] += 0.05f; /* more skip rows */
    float *probs = oh_const(r, ne, 0.0f), *gate = oh_const(r, N, 0.0f);
    int32_t *choice = oh_ints(r, N, 0);
    ops_router_select(oh_cpu(), probs, choice, gate, logits, bias, N, E1);
    float *dgate = oh_randn(r, N, 1.0f);
    double *scale = oh_zeros(r, ne);
    int skips = 0;
    for (int n = 0; n < N; n++) {
        int c = choice[n];
        skips += c == E1 - 1;
        float a = c == E1 - 1 ? 0.0f : fabsf(dgate[n] * probs[(size_t)n * E1 + c]);
        for (int e = 0; e < E1; e++) scale[(size_t)n * E1 + e] = a;
    }
    zy_act *dl = oh_nan_act(r, ne);
    ops_router_bwd(oh_ctx(r), dl, oh_f32(r, dgate, N), oh_f32(r, probs, ne), oh_i32(r, choice, N),
                   N, E1);
    oh_out_act(r, m_bf16(r, scale, ne), dl, ne, "router_bwd N=%d E1=%d (%d skip rows) dlogits", N,
               E1, skips);
}

/* ---- dispatch ---- */

/* p: N, E; every choice pattern */
static void case_dispatch(oh_run *r, const int *p) {
    int N = p[0], E = p[1];
    size_t nn = N ? (size_t)N : 1;
    for (int mode = 0; mode < CH_NMODES; mode++) {
        int32_t *choice = make_choice(r, N, E, mode);
        int32_t *dcnt = oh_i32(r, oh_ints(r, E, PERM_POISON), E);
        int32_t *doff = oh_i32(r, oh_ints(r, E + 1, PERM_POISON), E + 1);
        int32_t *dperm = oh_i32(r, oh_ints(r, nn, PERM_POISON), nn);
        int32_t *offh = oh_ints(r, E + 1, PERM_POISON);
        int routed =
            ops_moe_dispatch(oh_ctx(r), dcnt, doff, offh, dperm, oh_i32(r, choice, nn), N, E);
        const char *fmt = "dispatch N=%d E=%d %s %s";
        oh_out_host_i32(r, &routed, 1, fmt, N, E, ch_name[mode], "routed");
        oh_out_i32(r, dcnt, E, fmt, N, E, ch_name[mode], "counts");
        oh_out_i32(r, doff, E + 1, fmt, N, E, ch_name[mode], "offsets");
        oh_out_host_i32(r, offh, E + 1, fmt, N, E, ch_name[mode], "offsets_host");
        /* the routed rows by expert, then the skipped ones: all N exactly */
        oh_out_i32(r, dperm, nn, fmt, N, E, ch_name[mode], "perm");
    }
}

/* ---- gather ---- */

/* p: N, C, misaligned by one element (scalar path) */
static void case_gather(oh_run *r, const int *p) {
    int N = p[0], C = p[1], mis = p[2], nrows;
    int32_t *perm = make_perm(r, N, 16, &nrows);
    size_t nc = (size_t)N * C, rc = (size_t)nrows * C;
    zy_act *dxs = oh_act_at(r, NULL, rc, mis);
    ops_gather_rows(oh_ctx(r), dxs, oh_act_at(r, oh_randn(r, nc, 1.0f), nc, mis),
                    oh_i32(r, perm, N ? N : 1), nrows, C);
    oh_out_act(r, oh_exact(), dxs, rc, "gather_rows N=%d C=%d rows=%d%s", N, C, nrows,
               mis ? " misaligned" : "");
}

/* ---- combine, forward and backward ---- */

/* p: N, D, misaligned */
static void case_combine(oh_run *r, const int *p) {
    zy_ctx *c = oh_ctx(r);
    int N = p[0], D = p[1], mis = p[2], nrows;
    int32_t *perm = make_perm(r, N, 16, &nrows);
    size_t nd = (size_t)N * D, rd = (size_t)nrows * D;
    float *ys = oh_randn_bf(r, rd, 1.0f), *gate = oh_randu(r, N, 0.0f, 1.0f);
    zy_act *dy = oh_act_at(r, NULL, nd, mis);
    int32_t *dperm = oh_i32(r, perm, N ? N : 1);
    float *dgate = oh_f32(r, gate, N);
    ops_moe_combine(c, dy, oh_act_at(r, ys, rd, mis), dgate, dperm, nrows, N, D);
    const char *mn = mis ? " misaligned" : "";
    oh_out_act(r, m_bf16(r, NULL, nd), dy, nd, "moe_combine N=%d D=%d rows=%d%s y", N, D, nrows,
               mn);

    /* backward: dys = gate dy, dgate = dy . ys */
    float *g = oh_randn_bf(r, nd, 1.0f);
    float *dys_r = oh_const(r, rd, 0.0f), *dg_r = oh_const(r, N, 0.0f);
    ops_moe_combine_bwd(oh_cpu(), dys_r, dg_r, g, ys, gate, perm, nrows, N, D);
    double *s = oh_zeros(r, N);
    for (int k = 0; k < nrows; k++) {
        int n = perm[k];
        for (int j = 0; j < D; j++)
            s[n] += fabs((double)g[(size_t)n * D + j] * ys[(size_t)k * D + j]);
    }
    zy_act *ddys = oh_act_at(r, NULL, rd, mis);
    float *ddg = oh_nan_f32(r, N);
    ops_moe_combine_bwd(c, ddys, ddg, oh_act_at(r, g, nd, mis), oh_act_at(r, ys, rd, mis), dgate,
                        dperm, nrows, N, D);
    oh_out_act(r, m_bf16(r, NULL, rd), ddys, rd, "moe_combine_bwd N=%d D=%d rows=%d%s dys", N, D,
               nrows, mn);
    /* tol = (D + 2) 2^-24 sum|dy ys| + 2^-22 |ref| */
    oh_out_f32(r, oh_bound(4 * F32_EPS, (D + 2) * F32_EPS, s), ddg, N,
               "moe_combine_bwd N=%d D=%d rows=%d%s dgate", N, D, nrows, mn);
}

/* ---- scatter-add ---- */

/* p: N, C, misaligned */
static void case_scatter_add(oh_run *r, const int *p) {
    int N = p[0], C = p[1], mis = p[2], nrows;
    int32_t *perm = make_perm(r, N, 16, &nrows);
    size_t nc = (size_t)N * C, rc = (size_t)nrows * C;
    float *dx = oh_randn_bf(r, nc, 1.0f), *dxs = oh_randn_bf(r, rc, 1.0f);
    float *ref = oh_dup(r, dx, nc);
    ops_scatter_add_rows(oh_cpu(), ref, dxs, perm, nrows, C);
    double *scale = oh_zeros(r, nc);
    for (size_t i = 0; i < nc; i++) scale[i] = fabsf(dx[i]) + fabsf(ref[i] - dx[i]);
    zy_act *ddx = oh_act_at(r, dx, nc, mis);
    ops_scatter_add_rows(oh_ctx(r), ddx, oh_act_at(r, dxs, rc, mis), oh_i32(r, perm, N ? N : 1),
                         nrows, C);
    oh_out_act(r, m_bf16(r, scale, nc), ddx, nc, "scatter_add_rows N=%d C=%d rows=%d%s dx", N, C,
               nrows, mis ? " misaligned" : "");
}

/* ---- expert GEMMs ---- */

/* fp32 sums of bf16 products (exact in fp32): (k + 2) 2^-24 sum|terms| + 2^-22 |ref|. */
static oh_measure m_f32_sum(oh_run *r, const float *sabs, int k, size_t n) {
    double *s = oh_zeros(r, n);
    for (size_t i = 0; i < n; i++) s[i] = (k + 2) * (double)sabs[i];
    return oh_bound_abs(4 * F32_EPS, F32_EPS, s, 1e-37);
}

/* ops_expert_matmul (forward and data gradient), ops_expert_matmul_wgrad and ops_expert_matmul_bwd
 * (both gradients at once) with beta 0 and 1, on experts of 0, 1 and many rows. With beta = 0 the
 * old gradient is NaN: every expert's block must be overwritten, the empty expert's with zeros.
 * Experts 3 (exactly two blocks of CUDA_GEMM_CHUNK_ROWS = 256) and 5 (one block and 160 rows)
 * take the blocked GEMMs on a context with expert_chunk on (the "cuda+chunk" backend). */
static void case_expert_matmul(oh_run *r, const int *p) {
    (void)p;
    zy_ctx *c = oh_ctx(r);
    enum { E = 6, N = 48, K = 40, ROWS = 999 };
    const int32_t off[E + 1] = {0, 30, 30, 70, 582, 583, ROWS};
    const size_t nw = (size_t)E * N * K;
    float *W = oh_randn_bf(r, nw, 0.5f), *X = oh_randn_bf(r, (size_t)ROWS * K, 1.0f);
    float *dY = oh_randn_bf(r, (size_t)ROWS * N, 1.0f);
    zy_act *dW_ = oh_act(r, W, nw), *dX_ = oh_act(r, X, (size_t)ROWS * K);
    zy_act *ddY = oh_act(r, dY, (size_t)ROWS * N);
    oh_measure m_dx = oh_none();
    for (int data_grad = 0; data_grad < 2; data_grad++) {
        const int in_w = data_grad ? N : K, out_w = data_grad ? K : N;
        const float *in = data_grad ? dY : X;
        const size_t no = (size_t)ROWS * out_w;
        float *sabs = oh_const(r, no, 0.0f);
        ops_expert_matmul(oh_cpu(), sabs, oh_abs(r, in, (size_t)ROWS * in_w), oh_abs(r, W, nw), off,
                          E, N, K, data_grad);
        /* bf16 rounding of the output + fp32 sums over in_w */
        double *s = oh_zeros(r, no);
        for (size_t i = 0; i < no; i++) s[i] = (in_w + 2) * (double)sabs[i];
        oh_measure m = oh_bound_abs(BF_REL, F32_EPS, s, 1e-37);
        zy_act *dout = oh_nan_act(r, no);
        ops_expert_matmul(c, dout, data_grad ? ddY : dX_, dW_, off, E, N, K, data_grad);
        oh_out_act(r, m, dout, no, "expert_matmul %s E=%d N=%d K=%d", data_grad ? "data" : "fwd", E,
                   N, K);
        m_dx = m; /* the data gradient's, for expert_matmul_bwd below */
    }
    for (int beta = 0; beta < 2; beta++) {
        float *old = beta ? oh_randn_bf(r, nw, 1.0f) : oh_const(r, nw, NAN);
        float *sabs = oh_const(r, nw, 0.0f);
        ops_expert_matmul_wgrad(oh_cpu(), sabs, oh_abs(r, dY, (size_t)ROWS * N),
                                oh_abs(r, X, (size_t)ROWS * K), off, E, N, K, 0.0f);
        if (beta)
            for (size_t i = 0; i < nw; i++) sabs[i] += fabsf(old[i]);
        oh_measure m = m_f32_sum(r, sabs, off[3] - off[2], nw);
        float *ddW = oh_f32(r, old, nw);
        ops_expert_matmul_wgrad(c, ddW, ddY, dX_, off, E, N, K, (float)beta);
        oh_out_f32(r, m, ddW, nw, "expert_matmul_wgrad beta=%d E=%d N=%d K=%d", beta, E, N, K);
        if (!beta) {
            float *got = oh_get_f32(r, ddW, nw);
            for (size_t i = (size_t)N * K; i < 2 * (size_t)N * K; i++)
                if (got[i] != 0.0f)
                    fail_msg("expert_matmul_wgrad: empty expert element %zu is %g", i,
                             (double)got[i]);
        }
        /* the same gradients from expert_matmul_bwd; beta 1 leaves the GEMMs running and joins
         * them after */
        zy_act *dxo = oh_nan_act(r, (size_t)ROWS * K);
        float *ddW2 = oh_f32(r, old, nw);
        ops_expert_matmul_bwd(c, dxo, ddW2, ddY, dX_, dW_, off, NULL, E, N, K, (float)beta, !beta);
        if (beta) ops_expert_join(c);
        oh_out_act(r, m_dx, dxo, (size_t)ROWS * K, "expert_matmul_bwd beta=%d E=%d N=%d K=%d dX",
                   beta, E, N, K);
        oh_out_f32(r, m, ddW2, nw, "expert_matmul_bwd beta=%d E=%d N=%d K=%d dW", beta, E, N, K);
    }
}

/* ---- the forward MoE without waiting (forward.c, where ops_experts_grouped) ---- */

/* The backend's chain: dispatch_async, the gather of all N rows, the expert GEMM from the device
 * offsets (ops_expert_matmul_grouped; where the device has no grouped kernel, the per-expert GEMM
 * after a wait stands in), combine over all N rows (skipped rows' gate is 0 and their ys rows,
 * never written, are NaN); the CPU runs the same chain, waiting at nothing. Then the input
 * gradient of the expert GEMM from the device offsets (ops_expert_matmul_bwd; grouped where the
 * device has the kernel). p: N, E. */
static void case_moe_grouped(oh_run *r, const int *p) {
    zy_ctx *c = oh_ctx(r);
    const int N = p[0], E = p[1], D = 64, F = 128;
    const size_t nn = N ? (size_t)N : 1, nd = nn * D, nf = nn * F, nw = (size_t)E * F * D;
    int32_t *choice = make_choice(r, N, E, CH_UNIFORM);
    float *x = oh_randn_bf(r, nd, 1.0f), *W = oh_randn_bf(r, nw, 0.5f);
    float *gate = oh_randu(r, nn, 0.1f, 1.0f);
    for (int n = 0; n < N; n++)
        if (choice[n] == E) gate[n] = 0.0f; /* router_select's skip */
    /* the |terms| sums of the routed rows' products, for the bound */
    int32_t *cnt = oh_ints(r, E, 0), *off = oh_ints(r, E + 1, 0), *perm = oh_ints(r, nn, 0);
    const int routed =
        ops_moe_dispatch(oh_cpu(), cnt, off, oh_ints(r, E + 1, 0), perm, choice, N, E);
    float *xs = oh_const(r, nd, 0.0f), *sabs = oh_const(r, nf, 0.0f);
    ops_gather_rows(oh_cpu(), xs, x, perm, routed, D);
    ops_expert_matmul(oh_cpu(), sabs, oh_abs(r, xs, nd), oh_abs(r, W, nw), off, E, F, D, 0);
    double *s = oh_zeros(r, nf); /* ys rounded, then y: two bf16 roundings, fp32 sums over D */
    for (int k = 0; k < routed; k++)
        for (int j = 0; j < F; j++)
            s[(size_t)perm[k] * F + j] = (D + 2) * (double)gate[perm[k]] * sabs[(size_t)k * F + j];
    /* the backend's chain without waiting */
    int32_t *dcnt = oh_i32(r, oh_ints(r, E, PERM_POISON), E);
    int32_t *doff = oh_i32(r, oh_ints(r, E + 1, PERM_POISON), E + 1);
    int32_t *dperm = oh_i32(r, oh_ints(r, nn, PERM_POISON), nn);
    int32_t *offh = oh_ints(r, E + 1, PERM_POISON);
    ops_moe_dispatch_async(c, dcnt, doff, offh, dperm, oh_i32(r, choice, nn), N, E);
    zy_act *dxs = oh_nan_act(r, nd), *dys = oh_nan_act(r, nf), *dy = oh_nan_act(r, nf);
    zy_act *dW = oh_act(r, W, nw);
    ops_gather_rows(c, dxs, oh_act(r, x, nd), dperm, N, D);
    if (ops_experts_grouped(c, E, F, D)) {
        ops_expert_matmul_grouped(c, dys, dxs, dW, doff, E, F, D, N);
    } else {
        ops_sync(c);
        ops_expert_matmul(c, dys, dxs, dW, offh, E, F, D, 0);
    }
    ops_moe_combine(c, dy, dys, oh_f32(r, gate, nn), dperm, N, N, F);
    ops_sync(c);
    oh_out_host_i32(r, offh, E + 1, "moe grouped N=%d E=%d offsets_host", N, E);
    oh_out_act(r, oh_bound_abs(2 * BF_REL, F32_EPS, s, 1e-37), dy, nf, "moe grouped N=%d E=%d y", N,
               E);
    /* dxs = g W_e over the routed rows, from the device offsets */
    float *g = oh_randn_bf(r, nf, 1.0f), *gabs = oh_const(r, nd, 0.0f);
    ops_expert_matmul(oh_cpu(), gabs, oh_abs(r, g, nf), oh_abs(r, W, nw), off, E, F, D, 1);
    double *sg = oh_zeros(r, nd);
    for (int k = 0; k < routed * D; k++) sg[k] = (F + 2) * (double)gabs[k];
    zy_act *ddx = oh_nan_act(r, nd);
    float *ddw = oh_nan_f32(r, nw);
    ops_expert_matmul_bwd(c, ddx, ddw, oh_act(r, g, nf), dxs, dW, offh, doff, E, F, D, 0.0f, 1);
    oh_out_act(r, oh_bound_abs(BF_REL, F32_EPS, sg, 1e-37), ddx, (size_t)routed * D,
               "moe grouped N=%d E=%d dx", N, E);
}

/* ---- EDA ---- */

/* p: N, R */
static void case_eda(oh_run *r, const int *p) {
    zy_ctx *c = oh_ctx(r);
    int N = p[0], R = p[1];
    size_t nr = (size_t)N * R;
    float *z = oh_randn_bf(r, nr, 1.0f), *rp = oh_randn_bf(r, nr, 1.0f), *g = oh_randn(r, R, 0.5f);
    double *scale = oh_zeros(r, nr);
    for (size_t i = 0; i < nr; i++) scale[i] = fabsf(z[i]) + fabsf(rp[i] * g[i % R]);
    zy_act *dz = oh_act(r, z, nr), *drp = oh_act(r, rp, nr);
    float *dgv = oh_f32(r, g, R);
    ops_eda_fwd(c, dz, drp, dgv, N, R);
    oh_out_act(r, m_bf16(r, scale, nr), dz, nr, "eda_fwd N=%d R=%d z", N, R);

    /* backward onto a random dg (accumulates) */
    float *gz = oh_randn_bf(r, nr, 1.0f), *dg0 = oh_randn(r, R, 1.0f);
    int chunk = N / 256 + (N % 256 != 0); /* rows per chunk of the GPU's column sums */
    if (chunk < 64) chunk = 64;
    /* tol = (chunk + 8 + 2) 2^-24 sum|dz r| + 2^-22 (|ref| + |dg0|) */
    double *s = oh_zeros(r, R);
    for (int k = 0; k < R; k++) {
        double t = 0;
        for (int n = 0; n < N; n++)
            t += fabs((double)gz[(size_t)n * R + k] * rp[(size_t)n * R + k]);
        s[k] = (chunk + 8 + 2) * t + 4 * fabs((double)dg0[k]);
    }
    zy_act *ddr = oh_nan_act(r, nr);
    float *ddg = oh_f32(r, dg0, R);
    ops_eda_bwd(c, ddr, ddg, oh_act(r, gz, nr), drp, dgv, N, R);
    oh_out_act(r, m_bf16(r, NULL, nr), ddr, nr, "eda_bwd N=%d R=%d dr_prev", N, R);
    oh_out_f32(r, oh_bound(4 * F32_EPS, F32_EPS, s), ddg, R, "eda_bwd N=%d R=%d dg (+=)", N, R);
}

#define ROWS3(name, fn, a, b)                                                                      \
    {name, fn, {1, a, b}}, {name, fn, {1000, a, b}}, {                                             \
        name, fn, {                                                                                \
            3001, a, b                                                                             \
        }                                                                                          \
    }
#define DISPATCH(n)                                                                                \
    {"moe_dispatch", case_dispatch, {n, 16}}, {                                                    \
        "moe_dispatch", case_dispatch, {                                                           \
            n, 128                                                                                 \
        }                                                                                          \
    }

const oh_case oh_cases_moe[] = {
    {"router_select", case_router_select, {1, 17}},
    {"router_select", case_router_select, {1000, 17}},
    {"router_select", case_router_select, {4097, 129}},
    {"router_select", case_router_select, {777, 2}},
    {"router_select", case_router_select, {33, 1}},
    {"router_select", case_router_select, {500, 40}},
    {"router_select", case_router_select, {8, 32}},
    {"router_select", case_router_select, {300, 33}},
    {"router_ties", case_router_ties, {0}},
    {"router_ties", case_router_ties, {1}},
    {"router_ties", case_router_ties, {2}},
    {"router_bwd", case_router_bwd, {1, 17}},
    {"router_bwd", case_router_bwd, {1000, 17}},
    {"router_bwd", case_router_bwd, {4097, 129}},
    {"router_bwd", case_router_bwd, {100, 1}},
    {"router_bwd", case_router_bwd, {513, 40}},
    DISPATCH(0),
    DISPATCH(1),
    DISPATCH(31),
    DISPATCH(256),
    DISPATCH(1000),
    DISPATCH(4097),
    DISPATCH(16384),
    DISPATCH(65536),
    DISPATCH(65537),
    {"moe_dispatch", case_dispatch, {3000, 1}},   /* one expert */
    {"moe_dispatch", case_dispatch, {5000, 512}}, /* the largest E the kernels take */
    {"moe_grouped", case_moe_grouped, {1000, 16}},
    {"moe_grouped", case_moe_grouped, {3001, 6}},
    {"moe_grouped", case_moe_grouped, {1, 4}},
    ROWS3("gather_rows", case_gather, 1024, 0),
    ROWS3("gather_rows", case_gather, 1024, 1),
    ROWS3("gather_rows", case_gather, 136, 0),
    ROWS3("gather_rows", case_gather, 37, 0),
    ROWS3("gather_rows", case_gather, 8, 0),
    ROWS3("gather_rows", case_gather, 1, 0),
    ROWS3("moe_combine", case_combine, 1024, 0),
    ROWS3("moe_combine", case_combine, 1024, 1),
    ROWS3("moe_combine", case_combine, 136, 0),
    ROWS3("moe_combine", case_combine, 37, 0),
    ROWS3("moe_combine", case_combine, 1, 0),
    ROWS3("scatter_add", case_scatter_add, 1024, 0),
    ROWS3("scatter_add", case_scatter_add, 1024, 1),
    ROWS3("scatter_add", case_scatter_add, 136, 0),
    ROWS3("scatter_add", case_scatter_add, 37, 0),
    ROWS3("scatter_add", case_scatter_add, 1, 0),
    {"expert_matmul", case_expert_matmul, {0}},
    {"eda", case_eda, {1, 256}},
    {"eda", case_eda, {1, 37}},
    {"eda", case_eda, {1, 8}},
    {"eda", case_eda, {1000, 256}},
    {"eda", case_eda, {1000, 37}},
    {"eda", case_eda, {1000, 8}},
    {"eda", case_eda, {16384, 256}},
    {"eda", case_eda, {16384, 37}},
    {"eda", case_eda, {16384, 8}},
};
const int oh_ncases_moe = (int)(sizeof oh_cases_moe / sizeof oh_cases_moe[0]);
