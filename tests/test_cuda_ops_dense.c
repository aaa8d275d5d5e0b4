/* GPU tests of the dense ops of ops.h on a CUDA context (ops/cuda/ops_dense.cu): every op runs
 * through ops.h twice, on the GPU (bf16 activations) and on the CPU (fp32) fed the SAME inputs,
 * activations rounded to bf16 first. Skipped when no GPU is present.
 *
 * Measure: every element must satisfy |got - ref| <= rel |ref| + eps * scale[i]. rel is the
 * rounding of the output: 2^-8 (REL_BF, half a bf16 unit in the last place, relative) for bf16
 * outputs, ~0 for fp32 ones. scale[i] is the size of the terms output i is computed from (sum of
 * |products| for a GEMM or a column sum, |x| for a function of x...), and eps covers fp32
 * arithmetic on them: 1e-6 (~16 units of fp32 rounding) for short elementwise expressions, 4e-6
 * (~67 units) for column sums (fp32 sums of one or two dozen terms per row chunk, then double),
 * 2^-20 per unit of K for GEMMs (16x the worst case of a sequential fp32 sum). A wrong index or a
 * lost chunk errs by O(scale), orders of magnitude above. Each check prints the worst error / bound
 * ratio (<= 1 passes) and the relative L2 error. Attention is measured as in test_cuda_attention
 * (relative L2 < 1e-2: its probabilities are rounded to bf16 before the PV product). Outputs start
 * as NaN, so an element an op fails to write fails.
 *
 * Also: every transA/transB with beta 0 and 1 for both GEMMs (bf16 and fp32 C), zero sizes, the
 * aliasing the contracts allow (resscale dh == dout, xent dlogits == logits, gelu dx == dy),
 * unaligned activation pointers, the profiler's names, and (printed, not asserted; skipped when
 * ZY_SKIP_BENCH is set) the time and bandwidth of rmsnorm_fwd, resscale_fwd/bwd at N = 16384,
 * D = 1024, and of add_act and bias_bwd at bench-small sizes. ZY_TEST_FILTER=pattern runs only the
 * matching tests (scripts/gpu_cudense.sh: racecheck of the column-sum kernels). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "ops_test_util.h"

#include "base/err.h"
#include "io/safetensors.h" /* zy_f32_to_bf16, zy_bf16_to_f32 */

#define REL_BF  (1.0 / 256.0) /* bf16 rounding of an output, relative */
#define REL_F32 (1.0 / 4194304.0)
#define EPS_EW  1e-6
#define EPS_SUM 4e-6
#define EPS_K   (1.0 / 1048576.0) /* GEMM: per unit of K, times sum |a b| */
#define RMS_EPS 1e-5f
#define IGNORE  (-100)

static int have_gpu;
static zy_ctx gpu;
static double worst_ratio, worst_att; /* printed at the end */

#ifdef ZY_HAVE_CUDA
/* cudart maps memory in ASan's shadow gap; ASan must leave the gap unprotected (SAN=1 builds). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
    return "protect_shadow_gap=0";
}
#endif

static int setup(void **state) {
    (void)state;
    tu_rng = zy_rng_init(20261123, 7);
    have_gpu = ops_cuda_device_count() > 0;
    if (have_gpu && ops_ctx_init_cuda(&gpu, 0) != ZY_OK) {
        print_error("CUDA context: %s\n", zy_errmsg());
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    if (have_gpu) {
        printf("test_cuda_ops_dense worst: error/bound %.3f, attention relative L2 %.2e\n",
               worst_ratio, worst_att);
        ops_ctx_free(&gpu);
    }
    return 0;
}

/* ---- buffers of one case (host and device), freed together ---- */

#define MAXBUF 128
static void *hbufs[MAXBUF], *dbufs[MAXBUF];
static int nhb, ndb;

static void *keep_h(void *p) {
    assert_non_null(p);
    assert_true(nhb < MAXBUF);
    hbufs[nhb++] = p;
    return p;
}

static void *keep_d(void *p) {
    assert_true(ndb < MAXBUF);
    dbufs[ndb++] = p;
    return p;
}

static void end_case(void) {
    for (int i = 0; i < ndb; i++) ops_free(&gpu, dbufs[i]);
    for (int i = 0; i < nhb; i++) free(hbufs[i]);
    ndb = nhb = 0;
}

static float *hrandn(size_t n, float sd) {
    return keep_h(tu_randn(n, sd));
}
static float *hrandu(size_t n, float lo, float hi) {
    return keep_h(tu_randu(n, lo, hi));
}
static float *hconst(size_t n, float v) {
    return keep_h(tu_const(n, v));
}
static float *hdup(const float *x, size_t n) {
    return keep_h(tu_dup(x, n));
}
static float *hzero(size_t n) {
    return hconst(n, 0.0f);
}

/* x rounded to bf16 values in place (what the GPU reads from an activation buffer). */
static float *bfr(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = zy_bf16_to_f32(zy_f32_to_bf16(x[i]));
    return x;
}

/* Device fp32 copy of x[n]. */
static float *gf32(const float *x, size_t n) {
    float *d = keep_d(ops_alloc(&gpu, n * sizeof(float)));
    ops_copy(&gpu, d, x, n * sizeof(float));
    return d;
}

/* Device activation (bf16) copy of x[n]. */
static zy_act *gact(const float *x, size_t n) {
    float *t = ops_alloc(&gpu, (n ? n : 1) * sizeof(float));
    ops_copy(&gpu, t, x, n * sizeof(float));
    zy_act *a = keep_d(ops_alloc(&gpu, n * ops_act_size(&gpu)));
    ops_cast_to_act(&gpu, a, t, n);
    ops_free(&gpu, t); /* waits for the cast */
    return a;
}

/* Host fp32 copies of device buffers. */
static float *hf32(const float *d, size_t n) {
    float *h = keep_h(tu_alloc(n));
    ops_copy(&gpu, h, d, n * sizeof(float));
    return h;
}
static float *hact(const zy_act *d, size_t n) {
    float *t = ops_alloc(&gpu, (n ? n : 1) * sizeof(float));
    ops_act_to_f32(&gpu, t, d, n);
    float *h = keep_h(tu_alloc(n));
    ops_copy(&gpu, h, t, n * sizeof(float));
    ops_free(&gpu, t);
    return h;
}

static int32_t *gi32(const int32_t *x, size_t n) {
    int32_t *d = keep_d(ops_alloc(&gpu, n * sizeof(int32_t)));
    ops_copy(&gpu, d, x, n * sizeof(int32_t));
    return d;
}

/* ---- the measure ---- */

/* Every |got - ref| <= rel |ref| + eps * scale[i] (scale NULL: 1); NaN fails. */
static void cmp(const char *what, const float *got, const float *ref, size_t n, double rel,
                double eps, const float *scale) {
    double worst = 0, num = 0, den = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        double bound = rel * fabs((double)ref[i]) + eps * (scale ? (double)scale[i] : 1.0);
        double r = d / (bound > 0 ? bound : 1e-300);
        if (!(r <= worst)) { /* NaN lands here too */
            worst = isnan(r) ? INFINITY : r;
            at = i;
        }
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    double l2 = den > 0 ? sqrt(num / den) : sqrt(num);
    printf("    %-52s err/bound %.3f  rel L2 %.2e\n", what, worst, l2);
    if (worst > worst_ratio) worst_ratio = worst;
    if (!(worst <= 1.0))
        fail_msg("%s: element %zu of %zu is %.9g, want %.9g (bound %.3g)", what, at, n,
                 (double)got[at], (double)ref[at],
                 rel * fabs((double)ref[at]) + eps * (scale ? (double)scale[at] : 1.0));
}

/* Relative L2 error <= tol, every element finite (attention). */
static void cmp_l2(const char *what, const float *got, const float *ref, size_t n, double tol) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) fail_msg("%s: element %zu is %g", what, i, (double)got[i]);
        double d = (double)got[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    double e = sqrt(num / (den > 0 ? den : 1e-300));
    printf("    %-52s rel L2 %.2e (tol %.0e)\n", what, e, tol);
    if (e > worst_att) worst_att = e;
    if (!(e <= tol)) fail_msg("%s: relative L2 error %.3g over %.0e", what, e, tol);
}

/* |x| elementwise into a new host buffer. */
static float *habs(const float *x, size_t n) {
    float *a = keep_h(tu_alloc(n));
    for (size_t i = 0; i < n; i++) a[i] = fabsf(x[i]);
    return a;
}

#define GPU_ONLY()                                                                                 \
    do {                                                                                           \
        if (!have_gpu) skip();                                                                     \
    } while (0)

/* ---- GEMMs ---- */

/* One GEMM case: C[M,N] (bf16, or fp32 when f32c) = alpha op(A) op(B) + beta C. */
static void matmul_case(int M, int N, int K, int ta, int tb, float alpha, float beta, int f32c) {
    size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
    float *A = bfr(hrandn(na, 1.0f), na), *B = bfr(hrandn(nb, 1.0f), nb);
    float *C0 = beta != 0.0f ? hrandn(nc, 1.0f) : hconst(nc, NAN);
    if (!f32c && beta != 0.0f) bfr(C0, nc); /* fp32 C keeps its low bits: bf16 would lose them */
    float *ref = hdup(C0, nc);
    ops_matmul(&tu_ctx, ref, A, B, M, N, K, ta, tb, alpha, beta);
    /* scale = K |alpha| sum_k |a_ik b_kj| + |beta c_ij| */
    float *scale = hzero(nc);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++) {
                double a = ta ? A[(size_t)k * M + i] : A[(size_t)i * K + k];
                double b = tb ? B[(size_t)j * K + k] : B[(size_t)k * N + j];
                s += fabs(a * b);
            }
            double c = beta != 0.0f ? fabs((double)beta * C0[(size_t)i * N + j]) : 0.0;
            scale[(size_t)i * N + j] = (float)((K > 0 ? K : 1) * fabs((double)alpha) * s + c);
        }
    zy_act *dA = gact(A, na), *dB = gact(B, nb);
    float *got;
    if (f32c) {
        float *dC = gf32(C0, nc);
        ops_matmul_f32(&gpu, dC, dA, dB, M, N, K, ta, tb, alpha, beta);
        got = hf32(dC, nc);
    } else {
        zy_act *dC = gact(C0, nc);
        ops_matmul(&gpu, dC, dA, dB, M, N, K, ta, tb, alpha, beta);
        got = hact(dC, nc);
    }
    char what[128];
    snprintf(what, sizeof what, "matmul%s M=%d N=%d K=%d tA=%d tB=%d a=%g b=%g", f32c ? "_f32" : "",
             M, N, K, ta, tb, (double)alpha, (double)beta);
    if (!f32c && beta != 0.0f) {
        /* bf16 C with beta != 0: cuBLASLt rounds alpha*AB to bf16 before adding beta*C (seen on
         * an H100), so besides the final rounding each addend carries one bf16 rounding */
        for (size_t i = 0; i < nc; i++) {
            double bc = (double)beta * C0[i], ab = (double)ref[i] - bc;
            scale[i] = (float)(EPS_K * scale[i] + REL_BF * (fabs(ab) + fabs(bc)));
        }
        cmp(what, got, ref, nc, REL_BF, 1.0, scale);
    } else {
        cmp(what, got, ref, nc, f32c ? REL_F32 : REL_BF, EPS_K, scale);
    }
    end_case();
}

static void test_matmul(void **state) {
    (void)state;
    GPU_ONLY();
    static const int shapes[][3] = {{37, 19, 45}, {64, 128, 96}, {7, 1024, 1024}, {1, 8, 3}};
    for (int s = 0; s < 4; s++)
        for (int f32c = 0; f32c < 2; f32c++)
            for (int ta = 0; ta < 2; ta++)
                for (int tb = 0; tb < 2; tb++)
                    for (int b = 0; b < 2; b++)
                        matmul_case(shapes[s][0], shapes[s][1], shapes[s][2], ta, tb,
                                    s == 0 ? 0.75f : 1.0f, (float)b, f32c);
    /* accumulation of small products onto large fp32 values (a parameter gradient): bf16
     * rounding of C anywhere would lose them */
    for (int ta = 0; ta < 2; ta++) matmul_case(256, 64, 33, ta, 0, 1e-3f, 1.0f, 1);
}

/* Zero sizes: nothing happens, except that K = 0 leaves beta C (0 from NaN when beta = 0). */
static void test_matmul_zero(void **state) {
    (void)state;
    GPU_ONLY();
    const int M = 5, N = 9;
    size_t nc = (size_t)M * N;
    float *C0 = bfr(hrandn(nc, 1.0f), nc), *nan = hconst(nc, NAN), *one = hconst(64, 1.0f);
    zy_act *A = gact(one, 64), *B = gact(one, 64);
    for (int f32c = 0; f32c < 2; f32c++) {
        const float betas[3] = {0.0f, 1.0f, 0.5f};
        for (int b = 0; b < 3; b++) {
            const float *init = betas[b] == 0.0f ? nan : C0;
            float *want = hzero(nc);
            for (size_t i = 0; i < nc; i++) want[i] = betas[b] == 0.0f ? 0.0f : betas[b] * C0[i];
            float *got;
            if (f32c) {
                float *dC = gf32(init, nc);
                ops_matmul_f32(&gpu, dC, A, B, M, N, 0, 0, 1, 1.0f, betas[b]);
                got = hf32(dC, nc);
            } else {
                zy_act *dC = gact(init, nc);
                ops_matmul(&gpu, dC, A, B, M, N, 0, 1, 0, 1.0f, betas[b]);
                got = hact(dC, nc);
            }
            char what[96];
            snprintf(what, sizeof what, "matmul%s K=0 beta=%g", f32c ? "_f32" : "",
                     (double)betas[b]);
            cmp(what, got, want, nc, f32c ? 0.0 : REL_BF, 0.0, NULL);
        }
        /* M = 0 or N = 0: C untouched */
        zy_act *dC = gact(C0, nc);
        ops_matmul(&gpu, dC, A, B, 0, N, 4, 0, 0, 1.0f, 0.0f);
        ops_matmul(&gpu, dC, A, B, M, 0, 4, 0, 0, 1.0f, 0.0f);
        float *dCf = gf32(C0, nc);
        ops_matmul_f32(&gpu, dCf, A, B, 0, N, 4, 0, 0, 1.0f, 0.0f);
        ops_matmul_f32(&gpu, dCf, A, B, M, 0, 4, 0, 0, 1.0f, 0.0f);
        cmp("matmul M=0 / N=0 leave C", hact(dC, nc), C0, nc, 0.0, 0.0, NULL);
        cmp("matmul_f32 M=0 / N=0 leave C", hf32(dCf, nc), C0, nc, 0.0, 0.0, NULL);
    }
    end_case();
}

/* ---- y += x, bias ---- */

static void test_add_act(void **state) {
    (void)state;
    GPU_ONLY();
    static const size_t sizes[] = {1, 7, 1001, 8 * 256, 33 * 1024 + 5};
    static const int offs[3][2] = {{0, 0}, {1, 1}, {0, 3}}; /* element offsets of y, x */
    for (int s = 0; s < 5; s++)
        for (int o = 0; o < 3; o++) {
            size_t n = sizes[s];
            float *y = bfr(hrandn(n, 1.0f), n), *x = bfr(hrandn(n, 1.0f), n);
            float *ref = hdup(y, n), *scale = hzero(n);
            ops_add_act(&tu_ctx, ref, x, n);
            for (size_t i = 0; i < n; i++) scale[i] = fabsf(x[i]) + fabsf(y[i]);
            /* device copies placed at the offsets inside larger buffers */
            float *ypad = hzero(n + 8), *xpad = hzero(n + 8);
            memcpy(ypad + offs[o][0], y, n * sizeof(float));
            memcpy(xpad + offs[o][1], x, n * sizeof(float));
            zy_act *dy = gact(ypad, n + 8), *dx = gact(xpad, n + 8);
            zy_act *py = ops_act_at(&gpu, dy, offs[o][0]), *px = ops_act_at(&gpu, dx, offs[o][1]);
            ops_add_act(&gpu, py, px, n);
            char what[96];
            snprintf(what, sizeof what, "add_act n=%zu offsets %d,%d", n, offs[o][0], offs[o][1]);
            float *all = hact(dy, n + 8);
            cmp(what, all + offs[o][0], ref, n, REL_BF, EPS_EW, scale);
            end_case();
        }
}

static const int NC_SHAPES[][2] = {{1, 3}, {7, 256}, {333, 1024}, {5, 1001}, {1000, 8}};
#define N_NC 5

static void test_add_bias(void **state) {
    (void)state;
    GPU_ONLY();
    for (int s = 0; s < N_NC; s++) {
        int N = NC_SHAPES[s][0], C = NC_SHAPES[s][1];
        size_t n = (size_t)N * C;
        float *y = bfr(hrandn(n, 1.0f), n), *b = hrandn(C, 0.5f);
        float *ref = hdup(y, n), *scale = hzero(n);
        ops_add_bias(&tu_ctx, ref, b, N, C);
        for (size_t i = 0; i < n; i++) scale[i] = fabsf(y[i]) + fabsf(b[i % (size_t)C]);
        zy_act *dy = gact(y, n);
        ops_add_bias(&gpu, dy, gf32(b, C), N, C);
        char what[96];
        snprintf(what, sizeof what, "add_bias N=%d C=%d", N, C);
        cmp(what, hact(dy, n), ref, n, REL_BF, EPS_EW, scale);
        end_case();
    }
}

static void test_bias_bwd(void **state) {
    (void)state;
    GPU_ONLY();
    /* 4099: a last chunk of 3 rows; 20000: more than 256 chunks of 64, so 79-row chunks */
    static const int shapes[][2] = {{1, 3},     {7, 256},   {1000, 256}, {4099, 1024},
                                    {70, 1001}, {20000, 8}, {300, 24}};
    for (int s = 0; s < 7; s++) {
        int N = shapes[s][0], C = shapes[s][1];
        size_t n = (size_t)N * C;
        float *dy = bfr(hrandn(n, 1.0f), n), *db0 = hrandn(C, 1.0f);
        float *ref = hdup(db0, C), *scale = habs(db0, C);
        ops_bias_bwd(&tu_ctx, ref, dy, N, C);
        for (size_t i = 0; i < n; i++) scale[i % (size_t)C] += fabsf(dy[i]);
        float *ddb = gf32(db0, C);
        ops_bias_bwd(&gpu, ddb, gact(dy, n), N, C);
        char what[96];
        snprintf(what, sizeof what, "bias_bwd N=%d C=%d", N, C);
        cmp(what, hf32(ddb, C), ref, C, REL_F32, EPS_SUM, scale);
        end_case();
    }
}

/* ---- embedding ---- */

static void test_embed(void **state) {
    (void)state;
    GPU_ONLY();
    const int V = 50;
    static const int shapes[][2] = {{1, 3}, {7, 1024}, {1000, 24}, {33, 1001}};
    for (int s = 0; s < 4; s++) {
        int N = shapes[s][0], D = shapes[s][1];
        size_t nd = (size_t)N * D, vd = (size_t)V * D;
        float *emb = hrandn(vd, 1.0f), *bias = hrandn(D, 0.2f), *sc = hrandu(D, 0.5f, 1.5f);
        int32_t *ids = keep_h(malloc((size_t)N * sizeof(int32_t)));
        for (int n = 0; n < N; n++) ids[n] = (int32_t)zy_rng_below(&tu_rng, (uint64_t)V);
        int skip = N > 1 ? ids[1] : -1;
        float *hr = hzero(nd), *hsc = hzero(nd);
        ops_embed_fwd(&tu_ctx, hr, emb, ids, bias, sc, N, D);
        for (size_t i = 0; i < nd; i++) {
            size_t c = i % (size_t)D;
            hsc[i] = (fabsf(emb[(size_t)ids[i / (size_t)D] * D + c]) + fabsf(bias[c])) * sc[c];
        }
        float *demb = gf32(emb, vd), *dbias = gf32(bias, D), *dsc = gf32(sc, D);
        int32_t *dids = gi32(ids, N);
        float *dh = gf32(hconst(nd, NAN), nd);
        ops_embed_fwd(&gpu, dh, demb, dids, dbias, dsc, N, D);
        char what[96];
        snprintf(what, sizeof what, "embed_fwd N=%d D=%d", N, D);
        cmp(what, hf32(dh, nd), hr, nd, 0.0, EPS_EW, hsc);

        float *g = hrandn(nd, 1.0f);
        float *ge0 = hrandn(vd, 0.1f), *gb0 = hrandn(D, 0.1f), *gs0 = hrandn(D, 0.1f);
        float *ger = hdup(ge0, vd), *gbr = hdup(gb0, D), *gsr = hdup(gs0, D);
        ops_embed_bwd(&tu_ctx, ger, gbr, gsr, g, emb, ids, bias, sc, N, D, skip);
        float *se = habs(ge0, vd), *sb = habs(gb0, D), *ss = habs(gs0, D);
        for (size_t i = 0; i < nd; i++) {
            size_t n = i / (size_t)D, c = i % (size_t)D, e = (size_t)ids[n] * D + c;
            se[e] += fabsf(g[i] * sc[c]);
            sb[c] += fabsf(g[i] * sc[c]);
            ss[c] += fabsf(g[i]) * (fabsf(emb[e]) + fabsf(bias[c]));
        }
        float *dge = gf32(ge0, vd), *dgb = gf32(gb0, D), *dgs = gf32(gs0, D);
        ops_embed_bwd(&gpu, dge, dgb, dgs, gf32(g, nd), demb, dids, dbias, dsc, N, D, skip);
        float *ge = hf32(dge, vd);
        snprintf(what, sizeof what, "embed_bwd N=%d D=%d skip=%d demb", N, D, skip);
        cmp(what, ge, ger, vd, REL_F32, EPS_SUM, se);
        if (skip >= 0)
            assert_memory_equal(ge + (size_t)skip * D, ge0 + (size_t)skip * D,
                                (size_t)D * sizeof(float));
        snprintf(what, sizeof what, "embed_bwd N=%d D=%d dbias", N, D);
        cmp(what, hf32(dgb, D), gbr, D, REL_F32, EPS_SUM, sb);
        snprintf(what, sizeof what, "embed_bwd N=%d D=%d dscale", N, D);
        cmp(what, hf32(dgs, D), gsr, D, REL_F32, EPS_SUM, ss);
        end_case();
    }
}

/* ---- RMSNorm ---- */

static void test_rmsnorm(void **state) {
    (void)state;
    GPU_ONLY();
    static const int shapes[][2] = {{1, 3}, {7, 256}, {333, 1024}, {5, 1001}, {64, 8}, {70, 1024}};
    int cases = 0;
    for (int xbf = 0; xbf < 2; xbf++)
        for (int s = 0; s < 6; s++, cases++) {
            int N = shapes[s][0], C = shapes[s][1], acc = cases % 2;
            zy_dtype xt = xbf ? ZY_DTYPE_BF16 : ZY_DTYPE_F32;
            const char *tn = xbf ? "bf16" : "f32";
            size_t n = (size_t)N * C;
            float *x = hrandn(n, 1.5f), *w = hrandu(C, 0.5f, 1.5f);
            if (xbf) bfr(x, n);
            float *yr = hzero(n), *rr = hzero(N);
            ops_rmsnorm_fwd(&tu_ctx, yr, rr, x, ZY_DTYPE_F32, w, N, C, RMS_EPS);
            float *ysc = hzero(n);
            for (size_t i = 0; i < n; i++)
                ysc[i] = fabsf(x[i]) * rr[i / (size_t)C] * w[i % (size_t)C];
            void *dx = xbf ? (void *)gact(x, n) : (void *)gf32(x, n);
            float *dw = gf32(w, C), *drstd = gf32(hconst(N, NAN), N);
            zy_act *dy = gact(hconst(n, NAN), n);
            ops_rmsnorm_fwd(&gpu, dy, drstd, dx, xt, dw, N, C, RMS_EPS);
            char what[128];
            snprintf(what, sizeof what, "rmsnorm_fwd x=%s N=%d C=%d y", tn, N, C);
            cmp(what, hact(dy, n), yr, n, REL_BF, EPS_EW, ysc);
            snprintf(what, sizeof what, "rmsnorm_fwd x=%s N=%d C=%d rstd", tn, N, C);
            cmp(what, hf32(drstd, N), rr, N, EPS_EW, 0.0, NULL);

            /* backward from the CPU's rstd, onto random dx (accumulate) and dw */
            float *g = bfr(hrandn(n, 1.0f), n), *dw0 = hrandn(C, 0.1f);
            float *dx0 = acc ? hrandn(n, 1.0f) : hconst(n, NAN);
            if (xbf && acc) bfr(dx0, n);
            float *dxr = acc ? hdup(dx0, n) : hzero(n), *dwr = hdup(dw0, C);
            ops_rmsnorm_bwd(&tu_ctx, dxr, dwr, g, x, ZY_DTYPE_F32, w, rr, N, C, acc);
            /* dx = r g w - (r^3 dot / C) x (+ dx0): scale = |r g w| + r^3 sum|g w x| / C |x| */
            float *dxsc = hzero(n), *dwsc = habs(dw0, C);
            for (int r = 0; r < N; r++) {
                double t = 0, rs = rr[r];
                for (int c = 0; c < C; c++) {
                    size_t i = (size_t)r * C + c;
                    t += fabs((double)g[i] * w[c] * x[i]);
                    dwsc[c] += (float)fabs((double)g[i] * x[i] * rs);
                }
                t *= rs * rs * rs / C;
                for (int c = 0; c < C; c++) {
                    size_t i = (size_t)r * C + c;
                    dxsc[i] = (float)(rs * fabs((double)g[i] * w[c]) + t * fabs((double)x[i]) +
                                      (acc ? fabs((double)dx0[i]) : 0.0));
                }
            }
            void *ddx = xbf ? (void *)gact(dx0, n) : (void *)gf32(dx0, n);
            float *ddw = gf32(dw0, C);
            ops_rmsnorm_bwd(&gpu, ddx, ddw, gact(g, n), dx, xt, dw, gf32(rr, N), N, C, acc);
            snprintf(what, sizeof what, "rmsnorm_bwd x=%s N=%d C=%d acc=%d dx", tn, N, C, acc);
            cmp(what, xbf ? hact(ddx, n) : hf32(ddx, n), dxr, n, xbf ? REL_BF : REL_F32, 1e-5,
                dxsc);
            snprintf(what, sizeof what, "rmsnorm_bwd x=%s N=%d C=%d dw", tn, N, C);
            cmp(what, hf32(ddw, C), dwr, C, REL_F32, EPS_SUM, dwsc);
            end_case();
        }
}

/* ---- residual scaling ---- */

static void test_resscale(void **state) {
    (void)state;
    GPU_ONLY();
    static const int shapes[][2] = {{1, 3},     {7, 1024}, {333, 1024}, {5, 1001},
                                    {20000, 8}, {64, 12},  {4099, 256}};
    for (int s = 0; s < 7; s++)
        for (int alias = 0; alias < 2; alias++) {
            int N = shapes[s][0], D = shapes[s][1];
            size_t nd = (size_t)N * D;
            float *o = bfr(hrandn(nd, 1.0f), nd), *h = hrandn(nd, 1.0f);
            float *ob = hrandn(D, 0.3f), *os = hrandu(D, 0.5f, 1.5f);
            float *rb = hrandn(D, 0.3f), *rs = hrandu(D, 0.5f, 1.5f);
            float *outr = hzero(nd), *osc = hzero(nd);
            ops_resscale_fwd(&tu_ctx, outr, o, h, ob, os, rb, rs, N, D);
            for (size_t i = 0; i < nd; i++) {
                size_t c = i % (size_t)D;
                osc[i] =
                    (fabsf(o[i]) + fabsf(ob[c])) * os[c] + (fabsf(h[i]) + fabsf(rb[c])) * rs[c];
            }
            zy_act *d_o = gact(o, nd);
            float *dh = gf32(h, nd), *dob = gf32(ob, D), *dos = gf32(os, D);
            float *drb = gf32(rb, D), *drs = gf32(rs, D), *dout = gf32(hconst(nd, NAN), nd);
            char what[128];
            if (!alias) {
                ops_resscale_fwd(&gpu, dout, d_o, dh, dob, dos, drb, drs, N, D);
                snprintf(what, sizeof what, "resscale_fwd N=%d D=%d", N, D);
                cmp(what, hf32(dout, nd), outr, nd, 0.0, EPS_EW, osc);
            }

            /* backward: parameter gradients start random; alias: dh is dout's buffer */
            float *g = hrandn(nd, 1.0f), *p0[4], *pr[4], *psc[4];
            float *pd[4];
            for (int k = 0; k < 4; k++) {
                p0[k] = hrandn(D, 0.1f);
                pr[k] = hdup(p0[k], D);
                psc[k] = habs(p0[k], D);
                pd[k] = gf32(p0[k], D);
            }
            float *d_or = hzero(nd), *dhr = hzero(nd);
            ops_resscale_bwd(&tu_ctx, d_or, dhr, pr[0], pr[1], pr[2], pr[3], g, o, h, ob, os, rb,
                             rs, N, D);
            float *dosc = hzero(nd), *dhsc = hzero(nd);
            for (size_t i = 0; i < nd; i++) {
                size_t c = i % (size_t)D;
                float ag = fabsf(g[i]);
                dosc[i] = ag * os[c];
                dhsc[i] = ag * rs[c];
                psc[0][c] += ag * os[c];
                psc[1][c] += ag * (fabsf(o[i]) + fabsf(ob[c]));
                psc[2][c] += ag * rs[c];
                psc[3][c] += ag * (fabsf(h[i]) + fabsf(rb[c]));
            }
            float *dg = gf32(g, nd), *ddh = alias ? dg : gf32(hconst(nd, NAN), nd);
            zy_act *dd_o = gact(hconst(nd, NAN), nd);
            ops_resscale_bwd(&gpu, dd_o, ddh, pd[0], pd[1], pd[2], pd[3], dg, d_o, dh, dob, dos,
                             drb, drs, N, D);
            snprintf(what, sizeof what, "resscale_bwd N=%d D=%d%s d_o", N, D,
                     alias ? " dh=dout" : "");
            cmp(what, hact(dd_o, nd), d_or, nd, REL_BF, EPS_EW, dosc);
            snprintf(what, sizeof what, "resscale_bwd N=%d D=%d%s dh", N, D,
                     alias ? " dh=dout" : "");
            cmp(what, hf32(ddh, nd), dhr, nd, REL_F32, EPS_EW, dhsc);
            static const char *pn[4] = {"dob", "dos", "drb", "drs"};
            for (int k = 0; k < 4; k++) {
                snprintf(what, sizeof what, "resscale_bwd N=%d D=%d%s %s", N, D,
                         alias ? " dh=dout" : "", pn[k]);
                cmp(what, hf32(pd[k], D), pr[k], D, REL_F32, EPS_SUM, psc[k]);
            }
            end_case();
        }
}

/* ---- GELU, SwiGLU ---- */

static void test_gelu(void **state) {
    (void)state;
    GPU_ONLY();
    static const size_t sizes[] = {1, 7, 1001, 8 * 256, 16 * 2048 + 3};
    for (int s = 0; s < 5; s++)
        for (int mode = 0; mode < 3; mode++) { /* 0 plain, 1 dx aliasing dy, 2 offset pointers */
            size_t n = sizes[s], off = mode == 2 ? 1 : 0;
            float *x = bfr(hrandn(n, 2.0f), n), *g = bfr(hrandn(n, 1.0f), n);
            float *yr = hzero(n), *dxr = hzero(n), *ysc = habs(x, n), *dsc = hzero(n);
            ops_gelu_fwd(&tu_ctx, yr, x, n);
            ops_gelu_bwd(&tu_ctx, dxr, g, x, n);
            for (size_t i = 0; i < n; i++) dsc[i] = fabsf(g[i]) * (1.0f + fabsf(x[i]));
            float *xp = hzero(n + 1), *gp = hzero(n + 1);
            memcpy(xp + off, x, n * sizeof(float));
            memcpy(gp + off, g, n * sizeof(float));
            zy_act *dx = gact(xp, n + 1), *dg = gact(gp, n + 1);
            zy_act *px = ops_act_at(&gpu, dx, off), *pg = ops_act_at(&gpu, dg, off);
            zy_act *dy = gact(hconst(n + 1, NAN), n + 1), *py = ops_act_at(&gpu, dy, off);
            zy_act *ddx = mode == 1 ? dg : gact(hconst(n + 1, NAN), n + 1);
            zy_act *pdx = ops_act_at(&gpu, ddx, off);
            ops_gelu_fwd(&gpu, py, px, n);
            ops_gelu_bwd(&gpu, pdx, pg, px, n);
            static const char *mn[3] = {"", " dx=dy", " offset"};
            char what[96];
            snprintf(what, sizeof what, "gelu_fwd n=%zu%s", n, mn[mode]);
            cmp(what, hact(dy, n + 1) + off, yr, n, REL_BF, EPS_EW, ysc);
            snprintf(what, sizeof what, "gelu_bwd n=%zu%s", n, mn[mode]);
            cmp(what, hact(ddx, n + 1) + off, dxr, n, REL_BF, EPS_EW, dsc);
            end_case();
        }
}

static void test_swiglu(void **state) {
    (void)state;
    GPU_ONLY();
    static const int shapes[][2] = {{1, 3}, {7, 1024}, {33, 1001}, {5, 8}};
    for (int s = 0; s < 4; s++) {
        int N = shapes[s][0], F = shapes[s][1];
        size_t nf = (size_t)N * F;
        float *gu = bfr(hrandn(2 * nf, 2.0f), 2 * nf), *dy = bfr(hrandn(nf, 1.0f), nf);
        float *yr = hzero(nf), *dgur = hzero(2 * nf);
        ops_swiglu_fwd(&tu_ctx, yr, gu, N, F);
        ops_swiglu_bwd(&tu_ctx, dgur, dy, gu, N, F);
        float *ysc = hzero(nf), *dsc = hzero(2 * nf);
        for (int n = 0; n < N; n++)
            for (int f = 0; f < F; f++) {
                size_t i = (size_t)n * F + f, r = (size_t)n * 2 * F + f;
                float a = fabsf(gu[r]), u = fabsf(gu[r + F]), d = fabsf(dy[i]);
                ysc[i] = a * u;
                dsc[r] = d * u * (1.0f + a);
                dsc[r + F] = d * a;
            }
        zy_act *dgu = gact(gu, 2 * nf), *ddy = gact(dy, nf);
        zy_act *y = gact(hconst(nf, NAN), nf), *dd = gact(hconst(2 * nf, NAN), 2 * nf);
        ops_swiglu_fwd(&gpu, y, dgu, N, F);
        ops_swiglu_bwd(&gpu, dd, ddy, dgu, N, F);
        char what[96];
        snprintf(what, sizeof what, "swiglu_fwd N=%d F=%d", N, F);
        cmp(what, hact(y, nf), yr, nf, REL_BF, EPS_EW, ysc);
        snprintf(what, sizeof what, "swiglu_bwd N=%d F=%d", N, F);
        cmp(what, hact(dd, 2 * nf), dgur, 2 * nf, REL_BF, EPS_EW, dsc);
        end_case();
    }
}

/* ---- cross-entropy ---- */

static void test_xent(void **state) {
    (void)state;
    GPU_ONLY();
    /* vectorised rows (V % 8 == 0) and element rows, bench-small's vocabulary and larger */
    static const int shapes[][2] = {{1, 50}, {7, 1001},  {33, 32768},
                                    {5, 8},  {3, 12296}, {2, 40000}};
    const float gs = 0.37f;
    for (int s = 0; s < 6; s++)
        for (int mode = 0; mode < 3; mode++) { /* 0 loss only, 1 separate dlogits, 2 in place */
            int N = shapes[s][0], V = shapes[s][1];
            size_t nv = (size_t)N * V;
            float *x = bfr(hrandn(nv, 2.0f), nv);
            int32_t *t = keep_h(malloc((size_t)N * sizeof(int32_t)));
            for (int n = 0; n < N; n++)
                t[n] = n % 4 == 3 ? IGNORE : (int32_t)zy_rng_below(&tu_rng, (uint64_t)V);
            float *dlr = hzero(nv);
            int cnt_ref = -1;
            double sum_ref = ops_xent_fwd_bwd(&tu_ctx, dlr, x, t, N, V, IGNORE, gs, &cnt_ref);
            /* bound of the sum: 2e-5 per counted row times (|max| + |target logit| + 1) */
            double sum_bound = 0;
            float *dsc = hzero(nv);
            for (int n = 0; n < N; n++) {
                if (t[n] == IGNORE) continue;
                const float *row = x + (size_t)n * V;
                double mx = 0;
                for (int v = 0; v < V; v++) mx = fmax(mx, fabs((double)row[v]));
                sum_bound += 2e-5 * (mx + fabs((double)row[t[n]]) + 1.0);
                for (int v = 0; v < V; v++) { /* p + onehot = dlogits/gs + 2 onehot */
                    size_t i = (size_t)n * V + v;
                    dsc[i] = fabsf(dlr[i]) / gs + (v == t[n] ? 2.0f : 0.0f);
                    dsc[i] *= gs;
                }
            }
            zy_act *dx = gact(x, nv);
            int32_t *dt = gi32(t, N);
            zy_act *ddl = mode == 0 ? NULL : mode == 2 ? dx : gact(hconst(nv, NAN), nv);
            int cnt = -1;
            double sum = ops_xent_fwd_bwd(&gpu, ddl, dx, dt, N, V, IGNORE, gs, &cnt);
            static const char *mn[3] = {"loss only", "dlogits", "dlogits=logits"};
            printf("    xent N=%d V=%d %-16s loss sum %.9g (CPU %.9g, bound %.2g) count %d\n", N, V,
                   mn[mode], sum, sum_ref, sum_bound, cnt);
            assert_int_equal(cnt, cnt_ref);
            if (!(fabs(sum - sum_ref) <= sum_bound))
                fail_msg("xent N=%d V=%d %s: loss sum %.9g, CPU %.9g", N, V, mn[mode], sum,
                         sum_ref);
            if (mode > 0) {
                float *dl = hact(ddl, nv);
                char what[96];
                snprintf(what, sizeof what, "xent N=%d V=%d %s", N, V, mn[mode]);
                cmp(what, dl, dlr, nv, REL_BF, 2e-5, dsc);
                for (int n = 0; n < N; n++)
                    if (t[n] == IGNORE)
                        for (int v = 0; v < V; v++)
                            if (dl[(size_t)n * V + v] != 0.0f)
                                fail_msg("%s: ignored row %d has %g at %d", what, n,
                                         (double)dl[(size_t)n * V + v], v);
            } else {
                /* the logits are untouched when no gradient is asked for */
                cmp("xent loss only leaves the logits", hact(dx, nv), x, nv, 0.0, 0.0, NULL);
            }
            end_case();
        }
    int cnt = -1;
    assert_true(ops_xent_fwd_bwd(&gpu, NULL, NULL, NULL, 0, 16, IGNORE, 1.0f, &cnt) == 0.0);
    assert_int_equal(cnt, 0);
}

/* ---- attention ---- */

static void test_attention(void **state) {
    (void)state;
    GPU_ONLY();
    const int B = 2, Hq = 8, Hk = 2;
    static const int cfg[][3] = {{37, 64, 0}, {128, 128, 0}, {128, 128, 16}, {1, 128, 0}};
    for (int s = 0; s < 4; s++) {
        int T = cfg[s][0], d = cfg[s][1], window = cfg[s][2], N = B * T;
        size_t nq = (size_t)N * Hq * d, nk = (size_t)N * Hk * d, nl = (size_t)B * Hq * T;
        float scale = 1.0f / sqrtf((float)d);
        float *q = bfr(hrandn(nq, 1.0f), nq), *k = bfr(hrandn(nk, 1.0f), nk);
        float *v = bfr(hrandn(nk, 1.0f), nk), *dout = bfr(hrandn(nq, 1.0f), nq);
        float *outr = hzero(nq), *lser = hzero(nl);
        float *dqr = hzero(nq), *dkr = hzero(nk), *dvr = hzero(nk);
        ops_attention_fwd(&tu_ctx, outr, lser, q, k, v, B, T, Hq, Hk, d, scale, window);
        ops_attention_bwd(&tu_ctx, dqr, dkr, dvr, dout, outr, lser, q, k, v, B, T, Hq, Hk, d, scale,
                          window);
        zy_act *gq = gact(q, nq), *gk = gact(k, nk), *gv = gact(v, nk), *gdo = gact(dout, nq);
        zy_act *go = gact(hconst(nq, NAN), nq);
        float *glse = gf32(hconst(nl, NAN), nl);
        ops_attention_fwd(&gpu, go, glse, gq, gk, gv, B, T, Hq, Hk, d, scale, window);
        zy_act *gdq = gact(hconst(nq, NAN), nq), *gdk = gact(hconst(nk, NAN), nk);
        zy_act *gdv = gact(hconst(nk, NAN), nk);
        ops_attention_bwd(&gpu, gdq, gdk, gdv, gdo, go, glse, gq, gk, gv, B, T, Hq, Hk, d, scale,
                          window);
        char what[96];
        snprintf(what, sizeof what, "attention T=%d d=%d window=%d out", T, d, window);
        cmp_l2(what, hact(go, nq), outr, nq, 1e-2);
        snprintf(what, sizeof what, "attention T=%d d=%d window=%d lse", T, d, window);
        cmp(what, hf32(glse, nl), lser, nl, 0.0, 1e-3, NULL);
        snprintf(what, sizeof what, "attention T=%d d=%d window=%d dq", T, d, window);
        if (T == 1) /* one visible key: dq and dk are zero analytically, both sides leave rounding
                     * residue, so the bound is absolute */
            cmp(what, hact(gdq, nq), dqr, nq, 0.0, 1e-5, NULL);
        else
            cmp_l2(what, hact(gdq, nq), dqr, nq, 1e-2);
        snprintf(what, sizeof what, "attention T=%d d=%d window=%d dk", T, d, window);
        if (T == 1)
            cmp(what, hact(gdk, nk), dkr, nk, 0.0, 1e-5, NULL);
        else
            cmp_l2(what, hact(gdk, nk), dkr, nk, 1e-2);
        snprintf(what, sizeof what, "attention T=%d d=%d window=%d dv", T, d, window);
        cmp_l2(what, hact(gdv, nk), dvr, nk, 1e-2);
        end_case();
    }
}

/* ---- zero rows: every op is a no-op ---- */

static void test_zero_rows(void **state) {
    (void)state;
    GPU_ONLY();
    float *one = hconst(64, 1.0f);
    zy_act *a = gact(one, 64), *b = gact(one, 64);
    float *f = gf32(one, 64), *f2 = gf32(one, 64), *f3 = gf32(one, 64), *f4 = gf32(one, 64);
    int32_t zero_ids[1] = {0};
    int32_t *ids = gi32(zero_ids, 1);
    ops_add_act(&gpu, a, b, 0);
    ops_add_bias(&gpu, a, f, 0, 8);
    ops_bias_bwd(&gpu, f, a, 0, 8);
    ops_embed_fwd(&gpu, f2, f, ids, f, f, 0, 8);
    ops_embed_bwd(&gpu, f2, f3, f4, f, f, ids, f, f, 0, 8, -1);
    ops_rmsnorm_fwd(&gpu, a, f2, f, ZY_DTYPE_F32, f, 0, 8, RMS_EPS);
    ops_rmsnorm_bwd(&gpu, f2, f3, a, f, ZY_DTYPE_F32, f, f, 0, 8, 0);
    ops_rmsnorm_bwd(&gpu, b, f3, a, a, ZY_DTYPE_BF16, f, f, 0, 8, 1);
    ops_resscale_fwd(&gpu, f2, a, f, f, f, f, f, 0, 8);
    ops_resscale_bwd(&gpu, a, f2, f3, f3, f3, f3, f, a, f, f, f, f, f, 0, 8);
    ops_gelu_fwd(&gpu, a, b, 0);
    ops_gelu_bwd(&gpu, a, b, b, 0);
    ops_swiglu_fwd(&gpu, a, b, 0, 8);
    ops_swiglu_bwd(&gpu, a, b, b, 0, 8);
    ops_attention_fwd(&gpu, a, f2, a, b, b, 0, 16, 2, 1, 16, 0.25f, 0);
    ops_attention_bwd(&gpu, a, b, b, a, a, f, a, b, b, 1, 0, 2, 1, 16, 0.25f, 0);
    ops_sync(&gpu);
    /* nothing above may have written anything */
    cmp("zero rows: activations untouched", hact(a, 64), one, 64, 0.0, 0.0, NULL);
    cmp("zero rows: activations untouched", hact(b, 64), one, 64, 0.0, 0.0, NULL);
    cmp("zero rows: fp32 untouched", hf32(f, 64), one, 64, 0.0, 0.0, NULL);
    cmp("zero rows: fp32 untouched", hf32(f2, 64), one, 64, 0.0, 0.0, NULL);
    cmp("zero rows: fp32 untouched", hf32(f3, 64), one, 64, 0.0, 0.0, NULL);
    cmp("zero rows: fp32 untouched", hf32(f4, 64), one, 64, 0.0, 0.0, NULL);
    end_case();
}

/* ---- profiler ---- */

static const zy_op_time *find_op(const zy_op_time *t, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(t[i].name, name) == 0) return &t[i];
    return NULL;
}

static void test_profiler(void **state) {
    (void)state;
    GPU_ONLY();
    const int M = 64, N = 32, K = 48;
    zy_act *A = gact(hrandn((size_t)M * K, 1.0f), (size_t)M * K);
    zy_act *B = gact(hrandn((size_t)K * N, 1.0f), (size_t)K * N);
    zy_act *C = gact(hzero((size_t)M * N), (size_t)M * N);
    gpu.prof = 1;
    ops_prof_reset(&gpu);
    ops_matmul(&gpu, C, A, B, M, N, K, 0, 0, 1.0f, 0.0f);
    ops_matmul(&gpu, C, A, B, M, N, K, 0, 0, 1.0f, 1.0f);
    ops_add_act(&gpu, C, C, (size_t)M * N);
    zy_op_time t[16];
    int n = ops_prof_read(&gpu, t, 16);
    gpu.prof = 0;
    for (int i = 0; i < n; i++)
        printf("    profiler: %-12s calls %ld  %.4f ms\n", t[i].name, t[i].calls, t[i].ms);
    const zy_op_time *mm = find_op(t, n, "matmul"), *ad = find_op(t, n, "add_act");
    assert_non_null(mm);
    assert_non_null(ad);
    assert_int_equal(mm->calls, 2);
    assert_int_equal(ad->calls, 1);
    assert_true(mm->ms >= 0.0 && ad->ms >= 0.0);
    end_case();
}

/* ---- bandwidth (printed, not asserted) ---- */

/* Average ms per call of op `name` over the profiler's record. */
static double prof_ms(const char *name) {
    zy_op_time t[32];
    int n = ops_prof_read(&gpu, t, 32);
    const zy_op_time *e = find_op(t, n, name);
    assert_non_null(e);
    return e->ms / (double)e->calls;
}

static void report(const char *name, const char *shape, double ms, double bytes) {
    printf("BENCH %-14s %-16s %8.1f us  %7.0f GB/s  (%.0f MB moved)\n", name, shape, ms * 1e3,
           bytes / (ms * 1e-3) / 1e9, bytes / 1e6);
}

static void test_bench(void **state) {
    (void)state;
    GPU_ONLY();
    if (getenv("ZY_SKIP_BENCH")) skip();
    const int N = 16384, Dm = 1024, R = 256, IT = 20;
    size_t nd = (size_t)N * Dm;
    float *x = keep_d(ops_alloc(&gpu, nd * 4)), *h = keep_d(ops_alloc(&gpu, nd * 4));
    float *out = keep_d(ops_alloc(&gpu, nd * 4)), *dh = keep_d(ops_alloc(&gpu, nd * 4));
    size_t as = ops_act_size(&gpu);
    zy_act *y = keep_d(ops_alloc(&gpu, nd * as)), *o = keep_d(ops_alloc(&gpu, nd * as));
    zy_act *d_o = keep_d(ops_alloc(&gpu, nd * as));
    float *rstd = keep_d(ops_alloc(&gpu, (size_t)N * 4)), *vec[8];
    for (int k = 0; k < 8; k++) {
        vec[k] = keep_d(ops_alloc(&gpu, (size_t)Dm * 4));
        ops_fill(&gpu, vec[k], 1.0f, Dm);
    }
    ops_fill(&gpu, x, 0.5f, nd);
    ops_fill(&gpu, h, 0.25f, nd);
    ops_cast_to_act(&gpu, o, h, nd);
    ops_fill(&gpu, dh, 0.125f, nd); /* the incoming dout */
    char shape[32];
    snprintf(shape, sizeof shape, "N=%d D=%d", N, Dm);
    for (int pass = 0; pass < 2; pass++) { /* pass 0 warms up (plans, workspace growth) */
        gpu.prof = 1;
        ops_prof_reset(&gpu);
        int it = pass ? IT : 2;
        for (int i = 0; i < it; i++)
            ops_rmsnorm_fwd(&gpu, y, rstd, x, ZY_DTYPE_F32, vec[0], N, Dm, RMS_EPS);
        for (int i = 0; i < it; i++)
            ops_resscale_fwd(&gpu, out, o, h, vec[0], vec[1], vec[2], vec[3], N, Dm);
        for (int i = 0; i < it; i++) /* dh aliases dout, as the model may call it */
            ops_resscale_bwd(&gpu, d_o, dh, vec[4], vec[5], vec[6], vec[7], dh, o, h, vec[0],
                             vec[1], vec[2], vec[3], N, Dm);
        for (int i = 0; i < it; i++) ops_add_act(&gpu, y, o, nd);
        for (int i = 0; i < it; i++) ops_bias_bwd(&gpu, vec[4], y, N, R);
        ops_sync(&gpu);
    }
    report("rmsnorm_fwd", shape, prof_ms("rmsnorm_fwd"), nd * (4.0 + 2.0) + N * 4.0);
    report("resscale_fwd", shape, prof_ms("resscale_fwd"), nd * (2.0 + 4.0 + 4.0));
    report("resscale_bwd", shape, prof_ms("resscale_bwd"), nd * (4.0 + 2.0 + 4.0 + 2.0 + 4.0));
    report("add_act", shape, prof_ms("add_act"), nd * 6.0);
    snprintf(shape, sizeof shape, "N=%d C=%d", N, R);
    report("bias_bwd", shape, prof_ms("bias_bwd"), (double)N * R * 2.0);
    gpu.prof = 0;
    end_case();
}

int main(void) {
    const char *filter = getenv("ZY_TEST_FILTER"); /* one cmocka pattern, e.g. for racecheck */
    if (filter && *filter) cmocka_set_test_filter(filter);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul),    cmocka_unit_test(test_matmul_zero),
        cmocka_unit_test(test_add_act),   cmocka_unit_test(test_add_bias),
        cmocka_unit_test(test_bias_bwd),  cmocka_unit_test(test_embed),
        cmocka_unit_test(test_rmsnorm),   cmocka_unit_test(test_resscale),
        cmocka_unit_test(test_gelu),      cmocka_unit_test(test_swiglu),
        cmocka_unit_test(test_xent),      cmocka_unit_test(test_attention),
        cmocka_unit_test(test_zero_rows), cmocka_unit_test(test_profiler),
        cmocka_unit_test(test_bench),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
