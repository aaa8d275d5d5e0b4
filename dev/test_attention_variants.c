/* GPU tests of the attention kernel shapes kept for tuning (dev/attention_variants.h; built by
 * `make dev`, skipped without a GPU), against the CPU reference op (ops_attention_fwd/bwd, fp32)
 * on the same bf16-rounded random inputs: relative L2 error of out, dq, dk, dv under 1e-2 (bf16
 * operands of the matrix products and bf16 outputs put it near 3e-3), lse within 1e-3, every
 * output element written (outputs are poisoned with NaN first). Shapes cover every kernel shape
 * and both dq paths (stored dS tiles, recomputing), peaked softmax rows, and a small set for the
 * compute-sanitizer runs (ATTN_FILTER=test_sanitize). The shipped shapes' tests are
 * tests/test_cuda_attention.c and tests/op_cases_attention.c.
 * `test_attention_variants --bench` instead times every shape on the ZAYA1 shapes (CUDA events,
 * median) and prints one RESULT line per measurement (dev/scripts/gpu_attention.sh compares them
 * with torch), the backward on both dq paths.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "io/safetensors.h" /* zy_f32_to_bf16, zy_bf16_to_f32 */
#include "base/rng.h"
#include "ops/ops.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_variants.h"
#include "ops/cuda/attention.h"

#include <cuda_runtime_api.h>

static zy_rng rng;
static zy_ctx cpu_ctx = {.device = ZY_DEV_CPU, .num_threads = 0};
static double worst_rel[4], worst_lse; /* out, dq, dk, dv; printed at the end */

#include "attention_test_util.h"

/* Copies n bf16 from the device and widens them; returns how many are NaN (never written). */
static size_t fetch_bf16(float *dst, const void *src, size_t n) {
    uint16_t *b = malloc((n ? n : 1) * sizeof(uint16_t));
    assert_non_null(b);
    CK(cudaMemcpy(b, src, n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
    size_t nan = 0;
    for (size_t i = 0; i < n; i++) {
        dst[i] = zy_bf16_to_f32(b[i]);
        if (isnan(dst[i])) nan++;
    }
    free(b);
    return nan;
}

/* ||a - ref|| / ||ref|| (inf when a has NaN); *maxrel = max |a - ref| / max |ref|. A reference
 * whose RMS is under 1e-4 is a gradient that is zero analytically (T = 1, or a window of 1: dq and
 * dk vanish, and both sides hold rounding noise ~1e-7 of the scores' scale); then both measures
 * are absolute (RMS and max of a - ref). */
static double rel_l2(const float *a, const float *ref, size_t n, double *maxrel, int *absolute) {
    double num = 0, den = 0, emax = 0, rmax = 0;
    *absolute = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - ref[i];
        if (isnan(d)) {
            *maxrel = INFINITY;
            return INFINITY;
        }
        num += d * d;
        den += (double)ref[i] * ref[i];
        if (fabs(d) > emax) emax = fabs(d);
        if (fabs(ref[i]) > rmax) rmax = fabs(ref[i]);
    }
    if (n == 0 || den < 1e-8 * (double)n) {
        *absolute = 1;
        *maxrel = emax;
        return n ? sqrt(num / (double)n) : 0;
    }
    *maxrel = emax / rmax;
    return sqrt(num / den);
}

typedef struct {
    int B, T, Hq, Hk, d, window;
    float sd; /* input standard deviation: scores have standard deviation about sd^2 */
    dev_attention_cfg cfg;
} att_shape;

/* One shape: CPU reference and GPU forward + backward on the same inputs, compared. */
static void run_case(const att_shape *c) {
    const int B = c->B, T = c->T, Hq = c->Hq, Hk = c->Hk, d = c->d, W = c->window;
    const size_t nq = (size_t)B * T * Hq * d, nk = (size_t)B * T * Hk * d, nl = (size_t)B * Hq * T;
    const float scale = 1.0f / sqrtf((float)d);
    uint16_t *bq, *bk, *bv, *bdo;
    float *q = rand_bf16(nq, c->sd, &bq), *k = rand_bf16(nk, c->sd, &bk);
    float *v = rand_bf16(nk, 1.0f, &bv), *dout = rand_bf16(nq, 1.0f, &bdo);

    /* reference: fp32 CPU op on the rounded inputs */
    float *ro = malloc(nq * sizeof(float)), *rl = malloc(nl * sizeof(float));
    float *rdq = malloc(nq * sizeof(float)), *rdk = malloc(nk * sizeof(float));
    float *rdv = malloc(nk * sizeof(float));
    assert_true(ro && rl && rdq && rdk && rdv);
    ops_attention_fwd(&cpu_ctx, ro, rl, q, k, v, B, T, Hq, Hk, d, scale, W);
    ops_attention_bwd(&cpu_ctx, rdq, rdk, rdv, dout, ro, rl, q, k, v, B, T, Hq, Hk, d, scale, W);

    void *gq, *gk, *gv, *gdo, *go, *gdq, *gdk, *gdv, *gs;
    float *gl;
    size_t sb = dev_attention_bwd_scratch_bytes_cfg(B, T, Hq, d, &c->cfg);
    CK(cudaMalloc(&gq, nq * 2));
    CK(cudaMalloc(&gk, nk * 2));
    CK(cudaMalloc(&gv, nk * 2));
    CK(cudaMalloc(&gdo, nq * 2));
    CK(cudaMalloc(&go, nq * 2));
    CK(cudaMalloc(&gdq, nq * 2));
    CK(cudaMalloc(&gdk, nk * 2));
    CK(cudaMalloc(&gdv, nk * 2));
    CK(cudaMalloc((void **)&gl, nl * sizeof(float)));
    CK(cudaMalloc(&gs, sb));
    CK(cudaMemcpy(gq, bq, nq * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(gk, bk, nk * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(gv, bv, nk * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(gdo, bdo, nq * 2, cudaMemcpyHostToDevice));
    /* poison: 0xff.. is NaN in bf16 and fp32, so an unwritten element shows */
    CK(cudaMemset(go, 0xff, nq * 2));
    CK(cudaMemset(gl, 0xff, nl * sizeof(float)));
    CK(cudaMemset(gdq, 0xff, nq * 2));
    CK(cudaMemset(gdk, 0xff, nk * 2));
    CK(cudaMemset(gdv, 0xff, nk * 2));
    CK(cudaMemset(gs, 0xff, sb));

    int rc = dev_attention_fwd_cfg(gq, gk, gv, go, gl, B, T, Hq, Hk, d, scale, W, &c->cfg, 0);
    if (rc != ZY_OK) fail_msg("forward: %s", zy_errmsg());
    CK(cudaDeviceSynchronize());
    rc = dev_attention_bwd_cfg(gdo, gq, gk, gv, go, gl, gdq, gdk, gdv, gs, sb, B, T, Hq, Hk, d,
                               scale, W, &c->cfg, 0);
    if (rc != ZY_OK) fail_msg("backward: %s", zy_errmsg());
    CK(cudaDeviceSynchronize());

    float *o = malloc(nq * sizeof(float)), *l = malloc(nl * sizeof(float));
    float *dq = malloc(nq * sizeof(float)), *dk = malloc(nk * sizeof(float));
    float *dv = malloc(nk * sizeof(float));
    assert_true(o && l && dq && dk && dv);
    size_t unwritten = fetch_bf16(o, go, nq) + fetch_bf16(dq, gdq, nq) + fetch_bf16(dk, gdk, nk) +
                       fetch_bf16(dv, gdv, nk);
    CK(cudaMemcpy(l, gl, nl * sizeof(float), cudaMemcpyDeviceToHost));
    double lse_err = 0;
    for (size_t i = 0; i < nl; i++) {
        if (isnan(l[i])) unwritten++;
        double e = fabs((double)l[i] - rl[i]);
        if (!(e <= lse_err)) lse_err = e; /* NaN propagates */
    }
    double mx[4];
    int ab[4];
    double rel[4] = {rel_l2(o, ro, nq, &mx[0], &ab[0]), rel_l2(dq, rdq, nq, &mx[1], &ab[1]),
                     rel_l2(dk, rdk, nk, &mx[2], &ab[2]), rel_l2(dv, rdv, nk, &mx[3], &ab[3])};
    printf("    B=%d T=%-5d Hq=%d Hk=%d d=%-3d win=%-4d sd=%.1f cfg=%d/%d/%d/%d/%d | "
           "rel L2 out %.2e dq %.2e dk %.2e dv %.2e | max out %.1e dq %.1e dk %.1e dv %.1e | "
           "lse %.1e | unwritten %zu%s\n",
           B, T, Hq, Hk, d, W, (double)c->sd, c->cfg.fwd_warps, c->cfg.fwd_mtiles, c->cfg.bwd_warps,
           c->cfg.bwd_rows, c->cfg.dq_recompute, rel[0], rel[1], rel[2], rel[3], mx[0], mx[1],
           mx[2], mx[3], lse_err, unwritten,
           ab[1] || ab[2] ? " (dq/dk zero analytically: absolute errors)" : "");
    fflush(stdout);
    for (int i = 0; i < 4; i++)
        if (!ab[i] && !(rel[i] <= worst_rel[i])) worst_rel[i] = rel[i];
    if (!(lse_err <= worst_lse)) worst_lse = lse_err;

    void *dev[10] = {gq, gk, gv, gdo, go, gdq, gdk, gdv, gl, gs};
    for (int i = 0; i < 10; i++) CK(cudaFree(dev[i]));
    void *host[18] = {q, k, v, dout, bq, bk, bv, bdo, ro, rl, rdq, rdk, rdv, o, l, dq, dk, dv};
    for (int i = 0; i < 18; i++) free(host[i]);

    assert_int_equal(unwritten, 0);
    for (int i = 0; i < 4; i++) assert_true(rel[i] < (ab[i] ? 1e-4 : 1e-2));
    assert_true(lse_err < 1e-3);
}

static void run_cases(const att_shape *cs, int n) {
    if (!have_gpu()) skip();
    for (int i = 0; i < n; i++) run_case(&cs[i]);
}

/* Every kernel shape at d = 128 and 64, with and without a window, on the stored-dS dq path, then
 * two on the recomputing one; the recomputing dq at d = 32 and 16; and peaked softmax rows (scores
 * with standard deviation ~4) on both dq paths. */
static void test_variants(void **state) {
    (void)state;
    static const dev_attention_cfg v4[6] = {{4, 1, 4, 32, 0}, {8, 1, 4, 64, 0}, {4, 2, 8, 32, 0},
                                            {4, 2, 8, 64, 0}, {0, 0, 4, 32, 1}, {0, 0, 8, 64, 1}};
    att_shape cs[32];
    int n = 0;
    for (int dd = 0; dd < 2; dd++)
        for (int v = 0; v < 6; v++) {
            att_shape s = {1, 450, 8, 2, dd ? 64 : 128, 0, 1.0f, v4[v]};
            cs[n++] = s;
            s.window = 97;
            s.T = 311;
            cs[n++] = s;
        }
    const att_shape recompute_small[2] = {{2, 130, 4, 1, 32, 0, 1.0f, {0, 0, 0, 0, 1}},
                                          {1, 333, 4, 4, 16, 17, 1.0f, {0, 0, 0, 0, 1}}};
    cs[n++] = recompute_small[0];
    cs[n++] = recompute_small[1];
    att_shape peak = {2, 200, 4, 2, 128, 0, 2.0f, {0, 0, 0, 0, 0}};
    cs[n++] = peak;
    peak.cfg.dq_recompute = 1;
    cs[n++] = peak;
    run_cases(cs, n);
}

/* A few small shapes for the compute-sanitizer runs (memcheck, racecheck): every kernel shape of
 * d = 128 on the stored-dS dq path, one recomputing, a window (also with 32-row steps) and d = 64,
 * 32 and 16. */
static void test_sanitize(void **state) {
    (void)state;
    static const att_shape cs[] = {
        {1, 150, 2, 1, 128, 0, 1.0f, {4, 1, 8, 64, 0}},
        {1, 150, 2, 1, 128, 0, 1.0f, {8, 1, 4, 32, 0}},
        {1, 150, 2, 1, 128, 0, 1.0f, {4, 2, 4, 64, 0}},
        {1, 150, 2, 1, 128, 0, 1.0f, {4, 2, 8, 32, 0}},
        {1, 150, 2, 1, 128, 0, 1.0f, {0, 0, 8, 64, 1}},
        {1, 150, 2, 1, 128, 40, 1.0f, {0, 0, 8, 32, 0}},
        {1, 90, 2, 2, 64, 33, 1.0f, {0, 0, 0, 0, 0}},
        {1, 100, 2, 1, 32, 0, 1.0f, {0, 0, 0, 0, 0}},
        {1, 70, 2, 2, 16, 20, 1.0f, {0, 0, 0, 0, 0}},
    };
    run_cases(cs, (int)(sizeof(cs) / sizeof(cs[0])));
}

/* Bad kernel shapes are refused with a message naming the choice, before touching the GPU; the
 * recomputing path's scratch is the row sums alone. */
static void test_bad_args(void **state) {
    (void)state;
    static _Alignas(16) char buf[64]; /* never read: each call fails its checks first */
    char *p = buf;
    float *l = (float *)(buf + 32);
    dev_attention_cfg bad = {5, 0, 0, 0, 0};
    assert_int_equal(dev_attention_fwd_cfg(p + 16, p, p, p, l, 1, 8, 8, 2, 64, 0.1f, 0, &bad, 0),
                     ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "fwd_warps"));
    const size_t need = cuda_attention_bwd_scratch_bytes(2, 8, 8, 64);
    dev_attention_cfg recompute = {0, 0, 0, 0, 1};
    assert_int_equal(dev_attention_bwd_scratch_bytes_cfg(2, 8, 8, 64, &recompute),
                     2 * 8 * 8 * sizeof(float));
    assert_int_equal(dev_attention_bwd_scratch_bytes_cfg(2, 8, 8, 64, NULL), need);
    dev_attention_cfg bad_rows = {0, 0, 4, 48, 0};
    assert_int_equal(dev_attention_bwd_cfg(p, p, p, p, p, l, p, p, p, p + 16, need, 2, 8, 8, 2, 64,
                                           0.1f, 0, &bad_rows, 0),
                     ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "bwd_rows"));
    dev_attention_cfg bad_rc = {0, 0, 0, 0, 3};
    assert_int_equal(dev_attention_bwd_cfg(p, p, p, p, p, l, p, p, p, p + 16, need, 2, 8, 8, 2, 64,
                                           0.1f, 0, &bad_rc, 0),
                     ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "dq_recompute"));
}

/* ---- timing mode ---- */

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

typedef struct {
    int B, T, Hq, Hk, d;
    void *q, *k, *v, *o, *dout, *dq, *dk, *dv, *scratch;
    float *lse;
    size_t sb;
} bench_bufs;

/* what: 0 forward, 1 backward, 2 both. Returns ZY_OK or the failure. */
static int bench_run(const bench_bufs *x, int what, const dev_attention_cfg *cfg) {
    float scale = 1.0f / sqrtf((float)x->d);
    if (what != 1)
        ZY_TRY(dev_attention_fwd_cfg(x->q, x->k, x->v, x->o, x->lse, x->B, x->T, x->Hq, x->Hk, x->d,
                                     scale, 0, cfg, 0));
    if (what != 0)
        ZY_TRY(dev_attention_bwd_cfg(x->dout, x->q, x->k, x->v, x->o, x->lse, x->dq, x->dk, x->dv,
                                     x->scratch, x->sb, x->B, x->T, x->Hq, x->Hk, x->d, scale, 0,
                                     cfg, 0));
    return ZY_OK;
}

/* Median milliseconds of `reps` timed runs after `warm` untimed ones; -1 on failure. */
static float bench_time(const bench_bufs *x, int what, const dev_attention_cfg *cfg, int warm,
                        int reps) {
    cudaEvent_t e0, e1;
    float ms[200];
    if (reps > 200) reps = 200;
    if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) return -1;
    for (int i = 0; i < warm; i++)
        if (bench_run(x, what, cfg) != ZY_OK) return -1;
    for (int i = 0; i < reps; i++) {
        cudaEventRecord(e0, 0);
        if (bench_run(x, what, cfg) != ZY_OK) return -1;
        cudaEventRecord(e1, 0);
        if (cudaEventSynchronize(e1) != cudaSuccess) return -1;
        cudaEventElapsedTime(&ms[i], e0, e1);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (cudaDeviceSynchronize() != cudaSuccess) return -1;
    qsort(ms, (size_t)reps, sizeof(float), cmp_float);
    return ms[reps / 2];
}

/* Times every shape on (B=8, T=2048) and (B=4, T=4096), Hq=8, Hk=2, d=128; the backward on each
 * dq path (stored dS, the default; recompute). bwd/best is the best stored-path shape. */
static int bench_main(void) {
    if (!have_gpu()) {
        printf("no GPU: nothing to time\n");
        return 0;
    }
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
        printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
    static const int shapes[2][2] = {{8, 2048}, {4, 4096}};
    static const dev_attention_cfg fcfg[3] = {{4, 1, 0, 0, 0}, {8, 1, 0, 0, 0}, {4, 2, 0, 0, 0}};
    static const dev_attention_cfg bcfg[8] = {{0, 0, 4, 32, 0}, {0, 0, 4, 64, 0}, {0, 0, 8, 32, 0},
                                              {0, 0, 8, 64, 0}, {0, 0, 4, 32, 1}, {0, 0, 4, 64, 1},
                                              {0, 0, 8, 32, 1}, {0, 0, 8, 64, 1}};
    printf("%-6s %-5s %-16s %10s %10s\n", "B", "T", "what", "ms", "TFLOP/s");
    for (int si = 0; si < 2; si++) {
        bench_bufs x;
        memset(&x, 0, sizeof x);
        x.B = shapes[si][0], x.T = shapes[si][1], x.Hq = 8, x.Hk = 2, x.d = 128;
        size_t nq = (size_t)x.B * x.T * x.Hq * x.d, nk = (size_t)x.B * x.T * x.Hk * x.d;
        size_t nl = (size_t)x.B * x.Hq * x.T;
        x.sb = 0; /* the largest scratch of every variant */
        for (int v = 0; v < 8; v++) {
            size_t sb = dev_attention_bwd_scratch_bytes_cfg(x.B, x.T, x.Hq, x.d, &bcfg[v]);
            if (sb > x.sb) x.sb = sb;
        }
        void **bufs[8] = {&x.q, &x.k, &x.v, &x.o, &x.dout, &x.dq, &x.dk, &x.dv};
        size_t sizes[8] = {nq, nk, nk, nq, nq, nq, nk, nk};
        for (int i = 0; i < 8; i++) {
            if (cudaMalloc(bufs[i], sizes[i] * 2) != cudaSuccess) return 1;
            uint16_t *h = malloc(sizes[i] * 2);
            for (size_t j = 0; j < sizes[i]; j++) h[j] = zy_f32_to_bf16(zy_rng_normal(&rng));
            cudaMemcpy(*bufs[i], h, sizes[i] * 2, cudaMemcpyHostToDevice);
            free(h);
        }
        if (cudaMalloc((void **)&x.lse, nl * 4) != cudaSuccess) return 1;
        if (cudaMalloc(&x.scratch, x.sb) != cudaSuccess) return 1;
        double fl = 4.0 * x.B * (double)x.T * x.T * x.Hq * x.d / 2; /* causal forward */
        char name[64];
        float best_f = 1e30f, best_b = 1e30f, best_r = 1e30f, def_path[2] = {0, 0};
        for (int v = 0; v < 3; v++) {
            float ms = bench_time(&x, 0, &fcfg[v], 5, 30);
            if (ms < 0) return printf("failed: %s\n", zy_errmsg()), 1;
            snprintf(name, sizeof name, "fwd/w%d/m%d", fcfg[v].fwd_warps, fcfg[v].fwd_mtiles);
            printf("%-6d %-5d %-16s %10.3f %10.1f\n", x.B, x.T, name, ms, fl / ms / 1e9);
            printf("RESULT ours %s %d %d %.4f %.2f\n", name, x.B, x.T, ms, fl / ms / 1e9);
            if (ms < best_f) best_f = ms;
        }
        bench_run(&x, 0, NULL); /* out and lse for the backward */
        for (int v = 0; v < 8; v++) {
            float ms = bench_time(&x, 1, &bcfg[v], 5, 30);
            if (ms < 0) return printf("failed: %s\n", zy_errmsg()), 1;
            snprintf(name, sizeof name, "bwd/w%d/r%d%s", bcfg[v].bwd_warps, bcfg[v].bwd_rows,
                     bcfg[v].dq_recompute ? "/recompute" : "");
            printf("%-6d %-5d %-16s %10.3f %10.1f\n", x.B, x.T, name, ms, 2.5 * fl / ms / 1e9);
            printf("RESULT ours %s %d %d %.4f %.2f\n", name, x.B, x.T, ms, 2.5 * fl / ms / 1e9);
            const int path = bcfg[v].dq_recompute;
            float *best = path ? &best_r : &best_b;
            if (ms < *best) *best = ms;
            if (bcfg[v].bwd_warps == (path == 0 ? 4 : 8) && bcfg[v].bwd_rows == 64)
                def_path[path] = ms; /* each path at its default shape */
        }
        /* the two dq paths at the default warps/rows, side by side; TFLOP/s by the same 2.5x
         * count for both (the recomputing path does 7 T x T x d products, not 5) */
        printf("bwd dq paths B=%d T=%d (64 rows; 4 warps stored, 8 recomputing): stored dS %.3f "
               "ms, recompute %.3f ms; recompute / stored %.3f\n",
               x.B, x.T, def_path[0], def_path[1], def_path[1] / def_path[0]);
        float ms = bench_time(&x, 2, NULL, 5, 30);
        if (ms < 0) return printf("failed: %s\n", zy_errmsg()), 1;
        printf("%-6d %-5d %-16s %10.3f %10.1f\n", x.B, x.T, "fwd+bwd/default", ms,
               3.5 * fl / ms / 1e9);
        printf("RESULT ours fwd+bwd/default %d %d %.4f %.2f\n", x.B, x.T, ms, 3.5 * fl / ms / 1e9);
        printf("RESULT ours fwd/best %d %d %.4f %.2f\n", x.B, x.T, best_f, fl / best_f / 1e9);
        printf("RESULT ours bwd/best %d %d %.4f %.2f\n", x.B, x.T, best_b, 2.5 * fl / best_b / 1e9);
        printf("RESULT ours bwd/best-recompute %d %d %.4f %.2f\n", x.B, x.T, best_r,
               2.5 * fl / best_r / 1e9);
        for (int i = 0; i < 8; i++) cudaFree(*bufs[i]);
        cudaFree(x.lse);
        cudaFree(x.scratch);
    }
    return 0;
}

int main(int argc, char **argv) {
    rng = zy_rng_init(20261122, 7);
    if (argc > 1 && strcmp(argv[1], "--bench") == 0) return bench_main();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_variants),
        cmocka_unit_test(test_sanitize),
    };
    /* ATTN_FILTER=test_sanitize runs one test (the compute-sanitizer runs use that one) */
    if (getenv("ATTN_FILTER")) cmocka_set_test_filter(getenv("ATTN_FILTER"));
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (have_gpu())
        printf("worst rel L2: out %.2e dq %.2e dk %.2e dv %.2e; worst lse abs err %.2e\n",
               worst_rel[0], worst_rel[1], worst_rel[2], worst_rel[3], worst_lse);
    return rc;
}
