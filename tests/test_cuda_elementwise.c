/* GPU tests of what the op harness cannot see of the CUDA memory-bound kernels
 * (ops/cuda/kernels.h): the bf16 fused cross-entropy's per-row losses and its loss-only mode (no
 * dlogits), against the CPU op on the same fresh random logits (rounded to bf16 first); and the
 * embedding backward's repeatability with a poisoned workspace. Everything ops.h reaches is
 * compared with the CPU ops through ops.h by tests/op_cases_elem.c and op_cases_dense.c
 * (test_ops_backends). Skipped when no GPU is present.
 * Measures: fp32 outputs max|got - ref| / max(max|ref|, S) < 1e-5; bf16 outputs
 * rms(got - ref) / max(rms(ref), S) < 1e-2, where S is the size of the terms an output is the
 * difference of (0 where nothing cancels; the loss is max + log(sum) - logit). Outputs are filled
 * with NaN before each run, so an element left unwritten fails. Parameter gradients start from
 * random values; their increments (after - before) are compared in fp32. The embedding backward
 * must be bitwise repeatable (two runs, memcmp). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "op_cases.h"
#include "ops_test_util.h"

#ifdef ZY_HAVE_CUDA
#include "base/err.h"
#include "io/safetensors.h" /* zy_f32_to_bf16, zy_bf16_to_f32 */
#include "ops/cuda/kernels.h"

#include <cuda_runtime.h>
#endif

#define TOL_F32  1e-5
#define TOL_BF16 1e-2
#define IGNORE   (-100)

static int have_gpu;

static int setup(void **state) {
    (void)state;
    tu_rng = zy_rng_init(20261122, 4);
    (void)tu_ctx; /* the CPU ops run only in CUDA builds */
#ifdef ZY_HAVE_CUDA
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        n = 0;
        (void)cudaGetLastError();
    }
    have_gpu = n > 0;
#endif
    return 0;
}

#ifdef ZY_HAVE_CUDA

static const int ROWS[] = {1, 7, 1000};
#define NROWS 3

/* cudart maps memory in ASan's shadow gap; ASan must leave the gap unprotected (SAN=1 builds). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
    return "protect_shadow_gap=0";
}

#define CK(expr)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (expr);                                                                   \
        if (e_ != cudaSuccess) fail_msg("%s: %s", #expr, cudaGetErrorString(e_));                  \
    } while (0)
#define OKZ(expr)                                                                                  \
    do {                                                                                           \
        if ((expr) != ZY_OK) fail_msg("%s: %s", #expr, zy_errmsg());                               \
    } while (0)

static double worst_f32, worst_bf16; /* printed at the end */

/* Device and host buffers of one case, freed together. */
static void *dbufs[64], *hbufs[64];
static int ndb, nhb;

static float *H(float *p) {
    assert_true(nhb < 64);
    hbufs[nhb++] = p;
    return p;
}

static void free_case(void) {
    for (int i = 0; i < ndb; i++) CK(cudaFree(dbufs[i]));
    for (int i = 0; i < nhb; i++) free(hbufs[i]);
    ndb = nhb = 0;
}

static void *dalloc(size_t bytes) {
    void *d = NULL;
    CK(cudaMalloc(&d, bytes ? bytes : 16));
    assert_true(ndb < 64);
    dbufs[ndb++] = d;
    return d;
}

/* x rounded to bf16 values in place when bf (the CPU then sees what the kernel reads). */
static float *rnd(float *x, size_t n, int bf) {
    if (bf)
        for (size_t i = 0; i < n; i++) x[i] = zy_bf16_to_f32(zy_f32_to_bf16(x[i]));
    return x;
}

/* Device copy of x[n] as fp32 or bf16. */
static void *dput(const float *x, size_t n, int bf) {
    void *d = dalloc(n * (bf ? 2 : 4));
    if (bf) {
        uint16_t *t = malloc((n ? n : 1) * 2);
        assert_non_null(t);
        for (size_t i = 0; i < n; i++) t[i] = zy_f32_to_bf16(x[i]);
        CK(cudaMemcpy(d, t, n * 2, cudaMemcpyHostToDevice));
        free(t);
    } else {
        CK(cudaMemcpy(d, x, n * 4, cudaMemcpyHostToDevice));
    }
    return d;
}

/* Device buffer of n NaNs (an output to be overwritten). */
static void *dnan(size_t n, int bf) {
    float *t = tu_const(n, NAN);
    void *d = dput(t, n, bf);
    free(t);
    return d;
}

/* Host fp32 copy of a device buffer (after the queued kernels finish). */
static float *dget(const void *d, size_t n, int bf) {
    CK(cudaDeviceSynchronize());
    float *h = H(tu_alloc(n));
    if (bf) {
        uint16_t *t = malloc((n ? n : 1) * 2);
        assert_non_null(t);
        CK(cudaMemcpy(t, d, n * 2, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++) h[i] = zy_bf16_to_f32(t[i]);
        free(t);
    } else {
        CK(cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost));
    }
    return h;
}

/* got against ref with the measure of the output's type; every element must have been written. */
static void check(const char *what, const float *got, const float *ref, size_t n, int bf,
                  double floor) {
    double num = 0, den = 0, mx = 0, mref = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(got[i]) && !isnan(ref[i]))
            fail_msg("%s: element %zu of %zu not written (still NaN)", what, i, n);
        double d = fabs((double)got[i] - (double)ref[i]);
        num += d * d;
        den += (double)ref[i] * ref[i];
        if (!(d <= mx)) mx = d;
        if (fabs(ref[i]) > mref) mref = fabs(ref[i]);
    }
    double rn = n ? (double)n : 1.0;
    double err = bf ? sqrt(num / rn) / fmax(fmax(sqrt(den / rn), floor), 1e-30)
                    : mx / fmax(fmax(mref, floor), 1e-30);
    double tol = bf ? TOL_BF16 : TOL_F32;
    if (bf && err > worst_bf16) worst_bf16 = err;
    if (!bf && err > worst_f32) worst_f32 = err;
    if (!(err <= tol)) fail_msg("%s: error %.3g over the tolerance %.0e", what, err, tol);
}

/* Increments of an accumulated fp32 gradient: (got - before) against (ref - before). */
static void check_accum(const char *what, const float *got, const float *ref, const float *before,
                        size_t n) {
    float *a = H(tu_alloc(n)), *b = H(tu_alloc(n));
    for (size_t i = 0; i < n; i++) {
        a[i] = got[i] - before[i];
        b[i] = ref[i] - before[i];
    }
    check(what, a, b, n, 0, 0);
}

/* ---- embedding table gradient: repeatability ----
 * Many rows per id (the sorted segments cross many row chunks): the backward runs twice from the
 * same starting gradients and demb, dbias, dscale must match bit for bit; the first run is also
 * checked against the CPU op. Cases: 16384 rows over 50 ids at D = 1024 (16-byte path, one id
 * skipped) and D = 130 (element path); 20000 rows (longer chunks) with 30% of them on one id;
 * 3000 rows all of one id (one segment over every chunk). */
static void run_embed_repeat(void) {
    static const struct {
        int N, D, hot_pct, one_id, skip_row;
    } cs[] = {{16384, 1024, 0, 0, 1},
              {16384, 130, 0, 0, -1},
              {20000, 256, 30, 0, -1},
              {3000, 64, 0, 1, -1}};
    const int V = 50;
    for (size_t ci = 0; ci < sizeof(cs) / sizeof(cs[0]); ci++) {
        const int N = cs[ci].N, D = cs[ci].D;
        size_t nd = (size_t)N * D, vd = (size_t)V * D;
        char what[160];
        float *emb = H(tu_randn(vd, 1.0f)), *bias = H(tu_randn(D, 0.2f));
        float *scale = H(tu_randu(D, 0.5f, 1.5f));
        int32_t *ids = malloc((size_t)N * sizeof(int32_t));
        assert_non_null(ids);
        H((float *)ids);
        for (int n = 0; n < N; n++) {
            int hot = (int)zy_rng_below(&tu_rng, 100) < cs[ci].hot_pct;
            ids[n] = cs[ci].one_id ? 3 : hot ? 7 : (int32_t)zy_rng_below(&tu_rng, (uint64_t)V);
        }
        int skip = cs[ci].skip_row >= 0 ? ids[cs[ci].skip_row] : -1;
        float *g = H(tu_randn(nd, 1.0f));
        float *ge0 = H(tu_randn(vd, 0.1f)), *gb0 = H(tu_randn(D, 0.1f)),
              *gs0 = H(tu_randn(D, 0.1f));
        float *ger = H(tu_dup(ge0, vd)), *gbr = H(tu_dup(gb0, D)), *gsr = H(tu_dup(gs0, D));
        ops_embed_bwd(&tu_ctx, ger, gbr, gsr, g, emb, ids, bias, scale, N, D, skip);
        float *demb = dput(emb, vd, 0), *dbias = dput(bias, D, 0), *dscale = dput(scale, D, 0);
        float *dg = dput(g, nd, 0), *ws = dalloc(cuda_ops_ws_bytes(N, D));
        int32_t *dids = dalloc((size_t)N * sizeof(int32_t));
        CK(cudaMemcpy(dids, ids, (size_t)N * sizeof(int32_t), cudaMemcpyHostToDevice));
        float *got[2][3];
        for (int run = 0; run < 2; run++) {
            float *dge = dput(ge0, vd, 0), *dgb = dput(gb0, D, 0), *dgs = dput(gs0, D, 0);
            CK(cudaMemset(ws, 0xff, cuda_ops_ws_bytes(N, D))); /* stale workspace must not matter */
            OKZ(cuda_embed_bwd_f32(dge, dgb, dgs, ws, dg, demb, dids, dbias, dscale, N, D, skip,
                                   NULL));
            got[run][0] = dget(dge, vd, 0);
            got[run][1] = dget(dgb, D, 0);
            got[run][2] = dget(dgs, D, 0);
        }
        snprintf(what, sizeof what, "embed_bwd repeat N=%d D=%d skip=%d demb", N, D, skip);
        check_accum(what, got[0][0], ger, ge0, vd);
        if (skip >= 0 && memcmp(got[0][0] + (size_t)skip * D, ge0 + (size_t)skip * D,
                                (size_t)D * sizeof(float)) != 0)
            fail_msg("%s: row skip_id=%d changed", what, skip);
        snprintf(what, sizeof what, "embed_bwd repeat N=%d D=%d dbias", N, D);
        check_accum(what, got[0][1], gbr, gb0, D);
        snprintf(what, sizeof what, "embed_bwd repeat N=%d D=%d dscale", N, D);
        check_accum(what, got[0][2], gsr, gs0, D);
        static const char *names[3] = {"demb", "dbias", "dscale"};
        const size_t sizes[3] = {vd, (size_t)D, (size_t)D};
        size_t ndiff[3] = {0, 0, 0};
        for (int k = 0; k < 3; k++)
            for (size_t i = 0; i < sizes[k]; i++)
                ndiff[k] += memcmp(&got[0][k][i], &got[1][k][i], sizeof(float)) != 0;
        printf("    embed_bwd repeat N=%d D=%d skip=%d: elements differing between two runs: "
               "demb %zu dbias %zu dscale %zu\n",
               N, D, skip, ndiff[0], ndiff[1], ndiff[2]);
        for (int k = 0; k < 3; k++)
            if (ndiff[k] != 0)
                fail_msg("embed_bwd repeat N=%d D=%d: %s differs between two runs in %zu of %zu "
                         "elements",
                         N, D, names[k], ndiff[k], sizes[k]);
        free_case();
    }
}

/* ---- cross-entropy ---- */

/* Vocabularies: 50 (not whole 16-byte vectors: element loads), 32768 (bench-small's), 100,003
 * (odd) and 262,272 (zaya1's). */
static const int XENT_VOCABS[] = {50, 32768, 100003, 262272};
#define XENT_NV 4

static void run_xent(void) {
    const float scale = 0.37f;
    const int bf = 1; /* bf16 logits: the kernel ops.h calls */
    for (int a = 0; a < NROWS; a++)
        for (int b = 0; b < XENT_NV; b++) {
            int N = ROWS[a], V = XENT_VOCABS[b], inplace = (a + b + bf) % 2;
            if ((size_t)N * V > 40000000) continue; /* the CPU reference's memory */
            size_t nv = (size_t)N * V;
            char what[128];
            float *x = H(rnd(tu_randn(nv, 2.0f), nv, bf));
            int32_t *t = malloc((size_t)N * sizeof(int32_t));
            assert_non_null(t);
            H((float *)t);
            for (int n = 0; n < N; n++)
                t[n] = n % 4 == 3 ? IGNORE : (int32_t)zy_rng_below(&tu_rng, (uint64_t)V);
            float *dlr = H(tu_alloc(nv)), *lr = H(tu_alloc(N));
            int cnt_ref = -1;
            double sum_ref = ops_xent_fwd_bwd(&tu_ctx, dlr, x, t, N, V, IGNORE, scale, &cnt_ref);
            for (int n = 0; n < N; n++) {
                int c1;
                lr[n] = (float)ops_xent_fwd_bwd(&tu_ctx, NULL, x + (size_t)n * V, t + n, 1, V,
                                                IGNORE, 1.0f, &c1);
            }
            /* the loss is max + log(sum) - logit: terms of the size of the logits */
            double xmax = oh_maxabs(x, nv);
            void *dx = dput(x, nv, bf);
            int32_t *dt = dalloc((size_t)N * sizeof(int32_t));
            CK(cudaMemcpy(dt, t, (size_t)N * sizeof(int32_t), cudaMemcpyHostToDevice));
            /* loss only */
            float *dloss = dnan(N, 0);
            OKZ(cuda_xent_fwd_bwd_bf16(NULL, dloss, NULL, NULL, dx, dt, N, V, IGNORE, scale, NULL));
            snprintf(what, sizeof what, "xent_bf16 N=%d V=%d loss only", N, V);
            check(what, dget(dloss, N, 0), lr, N, 0, xmax);
            /* loss and gradient, in place or not */
            void *ddl = inplace ? dx : dnan(nv, bf);
            double *dsum = dalloc(sizeof(double)), nanv = NAN;
            int *dcnt = dalloc(sizeof(int)), minus1 = -1, cnt = 0;
            CK(cudaMemcpy(dsum, &nanv, sizeof nanv, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(dcnt, &minus1, sizeof minus1, cudaMemcpyHostToDevice));
            float *dloss2 = dnan(N, 0);
            OKZ(cuda_xent_fwd_bwd_bf16(ddl, dloss2, dsum, dcnt, dx, dt, N, V, IGNORE, scale, NULL));
            snprintf(what, sizeof what, "xent_bf16 N=%d V=%d inplace=%d loss", N, V, inplace);
            check(what, dget(dloss2, N, 0), lr, N, 0, xmax);
            float *dl = dget(ddl, nv, bf);
            snprintf(what, sizeof what, "xent_bf16 N=%d V=%d inplace=%d dlogits", N, V, inplace);
            check(what, dl, dlr, nv, bf, 0);
            for (int n = 0; n < N; n++)
                if (t[n] == IGNORE)
                    for (int v = 0; v < V; v++)
                        if (dl[(size_t)n * V + v] != 0.0f)
                            fail_msg("%s: ignored row %d has %g at %d", what, n,
                                     dl[(size_t)n * V + v], v);
            double sum = 0;
            CK(cudaMemcpy(&sum, dsum, sizeof sum, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(&cnt, dcnt, sizeof cnt, cudaMemcpyDeviceToHost));
            assert_int_equal(cnt, cnt_ref);
            double rel = fabs(sum - sum_ref) / fmax(fabs(sum_ref), xmax * cnt_ref + 1e-30);
            if (!(rel <= TOL_F32))
                fail_msg("xent_bf16 N=%d V=%d: loss sum %.9g, CPU %.9g", N, V, sum, sum_ref);
            free_case();
        }
}

#define GPU_RUN(f) f()
#else
#define GPU_RUN(f) ((void)0)
#endif

static void test_embed_repeat(void **state) {
    (void)state;
    if (!have_gpu) skip();
    GPU_RUN(run_embed_repeat);
}

static void test_xent(void **state) {
    (void)state;
    if (!have_gpu) skip();
    GPU_RUN(run_xent);
}

static int teardown(void **state) {
    (void)state;
#ifdef ZY_HAVE_CUDA
    if (have_gpu)
        printf("test_cuda_elementwise worst: fp32 max-relative %.2e, bf16 relative L2 %.2e\n",
               worst_f32, worst_bf16);
#endif
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_xent),
        cmocka_unit_test(test_embed_repeat),
    };
    /* ELEM_FILTER=test_embed* runs the matching tests only (the compute-sanitizer runs) */
    if (getenv("ELEM_FILTER")) cmocka_set_test_filter(getenv("ELEM_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
