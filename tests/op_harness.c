/* The op test harness (op_harness.h): backends, the buffers and outputs of a run, the measures, and
 * the cmocka driver that runs each case on the reference and on each other backend. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "op_harness.h"

#include "base/err.h"
#include "io/safetensors.h" /* zy_f32_to_bf16, zy_bf16_to_f32 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- backends: [0] is the reference; each later one is compared with it ---- */

static int init_cpu(zy_ctx *ctx) {
    ops_ctx_init_cpu(ctx, 2);
    return 1;
}

/* A CUDA context on GPU 0 with options o: 1, or 0 without a GPU. */
static int init_cuda_opts(zy_ctx *ctx, zy_cuda_opts o) {
    if (ops_cuda_device_count() == 0) return 0;
    if (ops_ctx_init_cuda_opts(ctx, 0, &o) != ZY_OK) {
        print_error("CUDA context: %s\n", zy_errmsg());
        return -1;
    }
    return 1;
}

/* zayac's own kernels everywhere (attention pinned to them: the default, auto, would hand it to
 * cuDNN, and the "cuda+cudnn" row covers that). */
static int init_cuda(zy_ctx *ctx) {
    zy_cuda_opts o = ops_cuda_opts_default();
    o.attention = ZY_ATTN_ZAYAC;
    return init_cuda_opts(ctx, o);
}

/* The expert GEMMs by 256-row blocks (zy_cuda_opts.expert_chunk). */
static int init_cuda_chunk(zy_ctx *ctx) {
    zy_cuda_opts o = ops_cuda_opts_default();
    o.expert_chunk = 1;
    return init_cuda_opts(ctx, o);
}

/* Attention through cuDNN where it loads and takes the shape (cuda.attention = auto): each shape
 * names its backend on stderr; without cuDNN this repeats the "cuda" row. */
static int init_cuda_cudnn(zy_ctx *ctx) {
    zy_cuda_opts o = ops_cuda_opts_default();
    o.attention = ZY_ATTN_AUTO;
    return init_cuda_opts(ctx, o);
}

/* The CPU compared with itself checks the cases (every output written, same inputs per run) where
 * no GPU is present. A HIP backend adds its entry here. */
static const oh_backend oh_backends[] = {{"cpu", init_cpu, NULL},
                                         {"cpu", init_cpu, NULL},
                                         {"cuda", init_cuda, NULL},
                                         {"cuda+chunk", init_cuda_chunk, "expert_matmul"},
                                         {"cuda+cudnn", init_cuda_cudnn, "attention"}};
#define NBACK ((int)(sizeof oh_backends / sizeof oh_backends[0]))

static zy_ctx ctxs[NBACK];
static int ctx_state[NBACK]; /* 0 not tried, 1 ready, 2 absent, 3 failed */

static zy_ctx *backend_ctx(int b) {
    if (ctx_state[b] == 0) {
        int rc = oh_backends[b].init(&ctxs[b]);
        ctx_state[b] = rc > 0 ? 1 : rc == 0 ? 2 : 3;
    }
    if (ctx_state[b] == 3) fail_msg("backend %s: no context", oh_backends[b].name);
    return ctx_state[b] == 1 ? &ctxs[b] : NULL;
}

zy_ctx *oh_cpu(void) {
    static zy_ctx cpu;
    static int ready;
    if (!ready) ops_ctx_init_cpu(&cpu, 2), ready = 1;
    return &cpu;
}

/* ---- measures ---- */

oh_measure oh_bound(double rel, double eps, const double *scale) {
    return (oh_measure){.kind = OH_BOUND, .rel = rel, .eps = eps, .scale = scale};
}
oh_measure oh_bound_abs(double rel, double eps, const double *scale, double abs) {
    return (oh_measure){.kind = OH_BOUND, .rel = rel, .eps = eps, .scale = scale, .abs = abs};
}
oh_measure oh_l2(double tol, double tol_abs) {
    return (oh_measure){.kind = OH_L2, .tol = tol, .tol_abs = tol_abs};
}
oh_measure oh_seg(size_t width, double tol) {
    return (oh_measure){.kind = OH_SEG, .width = width, .tol = tol};
}
oh_measure oh_inc(const float *before, double tol) {
    return (oh_measure){.kind = OH_INC, .before = before, .tol = tol};
}
oh_measure oh_maxrel(double tol, double floor) {
    return (oh_measure){.kind = OH_MAXREL, .tol = tol, .floor = floor};
}
oh_measure oh_rmsrel(double tol, double floor) {
    return (oh_measure){.kind = OH_RMSREL, .tol = tol, .floor = floor};
}
oh_measure oh_exact(void) {
    return (oh_measure){.kind = OH_EXACT};
}
oh_measure oh_none(void) {
    return (oh_measure){.kind = OH_NONE};
}

/* ---- a run: its buffers and outputs ---- */

typedef enum { T_F32, T_I32, T_F64 } out_type;

typedef struct {
    char name[160];
    out_type type;
    size_t n;
    void *data; /* host copy */
    oh_measure m;
} output;

struct oh_run {
    zy_ctx *ctx;
    int is_ref;
    void **host, **dev;
    int nhost, ndev, caphost, capdev;
    output *outs;
    int nouts, capouts;
};

static zy_rng rng;

zy_ctx *oh_ctx(oh_run *r) {
    return r->ctx;
}
int oh_is_ref(const oh_run *r) {
    return r->is_ref;
}
zy_rng *oh_rng(void) {
    return &rng;
}

static void grow(void ***v, int *cap, int n) {
    if (n < *cap) return;
    *cap = *cap ? 2 * *cap : 64;
    *v = realloc(*v, (size_t)*cap * sizeof **v);
    assert_non_null(*v);
}

void *oh_keep(oh_run *r, void *host) {
    assert_non_null(host);
    grow(&r->host, &r->caphost, r->nhost);
    r->host[r->nhost++] = host;
    return host;
}

static void *hmalloc(oh_run *r, size_t bytes) {
    return oh_keep(r, malloc(bytes ? bytes : 1));
}

float *oh_randn(oh_run *r, size_t n, float sd) {
    float *p = hmalloc(r, n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = zy_rng_normal(&rng) * sd;
    return p;
}
float *oh_randn_bf(oh_run *r, size_t n, float sd) {
    return oh_bf(oh_randn(r, n, sd), n);
}
float *oh_randu(oh_run *r, size_t n, float lo, float hi) {
    float *p = hmalloc(r, n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * zy_rng_uniform(&rng);
    return p;
}
float *oh_const(oh_run *r, size_t n, float v) {
    float *p = hmalloc(r, n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = v;
    return p;
}
float *oh_dup(oh_run *r, const float *x, size_t n) {
    float *p = hmalloc(r, n * sizeof(float));
    if (n) memcpy(p, x, n * sizeof(float));
    return p;
}
float *oh_abs(oh_run *r, const float *x, size_t n) {
    float *p = hmalloc(r, n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = fabsf(x[i]);
    return p;
}
double *oh_zeros(oh_run *r, size_t n) {
    return oh_keep(r, calloc(n ? n : 1, sizeof(double)));
}
int32_t *oh_ints(oh_run *r, size_t n, int32_t v) {
    int32_t *p = hmalloc(r, n * sizeof(int32_t));
    for (size_t i = 0; i < n; i++) p[i] = v;
    return p;
}
float *oh_bf(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = zy_bf16_to_f32(zy_f32_to_bf16(x[i]));
    return x;
}

void *oh_alloc(oh_run *r, size_t bytes) {
    grow(&r->dev, &r->capdev, r->ndev);
    void *d = ops_alloc(r->ctx, bytes ? bytes : 16);
    r->dev[r->ndev++] = d;
    return d;
}

float *oh_f32(oh_run *r, const float *x, size_t n) {
    float *d = oh_alloc(r, n * sizeof(float));
    if (!x) {
        ops_fill(r->ctx, d, NAN, n);
    } else if (n) {
        ops_copy(r->ctx, d, x, n * sizeof(float));
    }
    return d;
}
float *oh_nan_f32(oh_run *r, size_t n) {
    return oh_f32(r, NULL, n);
}

zy_act *oh_act_at(oh_run *r, const float *x, size_t n, size_t pad) {
    zy_act *a = oh_alloc(r, (n + pad) * ops_act_size(r->ctx));
    zy_act *p = ops_act_at(r->ctx, a, pad);
    if (n == 0) return p;
    float *t = malloc(n * sizeof(float)); /* bf16 values on every backend */
    assert_non_null(t);
    for (size_t i = 0; i < n; i++) t[i] = x ? x[i] : NAN;
    oh_bf(t, n);
    float *d = ops_alloc(r->ctx, n * sizeof(float));
    ops_copy(r->ctx, d, t, n * sizeof(float));
    ops_cast_to_act(r->ctx, p, d, n);
    ops_free(r->ctx, d); /* waits for the cast */
    free(t);
    return p;
}
zy_act *oh_act(oh_run *r, const float *x, size_t n) {
    return oh_act_at(r, x, n, 0);
}
zy_act *oh_nan_act(oh_run *r, size_t n) {
    return oh_act_at(r, NULL, n, 0);
}

int32_t *oh_i32(oh_run *r, const int32_t *x, size_t n) {
    int32_t *d = oh_alloc(r, n * sizeof(int32_t));
    if (n) ops_copy(r->ctx, d, x, n * sizeof(int32_t));
    return d;
}

float *oh_get_f32(oh_run *r, const float *d, size_t n) {
    float *h = hmalloc(r, n * sizeof(float));
    if (n) ops_copy(r->ctx, h, d, n * sizeof(float));
    return h;
}
float *oh_get_act(oh_run *r, const zy_act *d, size_t n) {
    float *h = hmalloc(r, n * sizeof(float));
    if (n == 0) return h;
    float *t = ops_alloc(r->ctx, n * sizeof(float));
    ops_act_to_f32(r->ctx, t, d, n);
    ops_copy(r->ctx, h, t, n * sizeof(float));
    ops_free(r->ctx, t);
    return h;
}
int32_t *oh_get_i32(oh_run *r, const int32_t *d, size_t n) {
    int32_t *h = hmalloc(r, n * sizeof(int32_t));
    if (n) ops_copy(r->ctx, h, d, n * sizeof(int32_t));
    return h;
}

/* Records output `data` (host memory the run owns) under a formatted name. */
static void add_out(oh_run *r, oh_measure m, out_type t, void *data, size_t n, const char *fmt,
                    va_list ap) {
    if (r->nouts == r->capouts) {
        r->capouts = r->capouts ? 2 * r->capouts : 32;
        r->outs = realloc(r->outs, (size_t)r->capouts * sizeof *r->outs);
        assert_non_null(r->outs);
    }
    output *o = &r->outs[r->nouts++];
    vsnprintf(o->name, sizeof o->name, fmt, ap);
    o->type = t, o->data = data, o->n = n, o->m = m;
}

void oh_out_act(oh_run *r, oh_measure m, const zy_act *d, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    add_out(r, m, T_F32, oh_get_act(r, d, n), n, fmt, ap);
    va_end(ap);
}
void oh_out_f32(oh_run *r, oh_measure m, const float *d, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    add_out(r, m, T_F32, oh_get_f32(r, d, n), n, fmt, ap);
    va_end(ap);
}
void oh_out_i32(oh_run *r, const int32_t *d, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    add_out(r, oh_exact(), T_I32, oh_get_i32(r, d, n), n, fmt, ap);
    va_end(ap);
}
void oh_out_host(oh_run *r, oh_measure m, const double *h, size_t n, const char *fmt, ...) {
    double *c = hmalloc(r, n * sizeof(double));
    if (n) memcpy(c, h, n * sizeof(double));
    va_list ap;
    va_start(ap, fmt);
    add_out(r, m, T_F64, c, n, fmt, ap);
    va_end(ap);
}
void oh_out_host_i32(oh_run *r, const int32_t *h, size_t n, const char *fmt, ...) {
    int32_t *c = hmalloc(r, n * sizeof(int32_t));
    if (n) memcpy(c, h, n * sizeof(int32_t));
    va_list ap;
    va_start(ap, fmt);
    add_out(r, oh_exact(), T_I32, c, n, fmt, ap);
    va_end(ap);
}

static void run_free(oh_run *r) {
    for (int i = 0; i < r->ndev; i++) ops_free(r->ctx, r->dev[i]);
    for (int i = 0; i < r->nhost; i++) free(r->host[i]);
    free(r->dev), free(r->host), free(r->outs);
    memset(r, 0, sizeof *r);
}

/* ---- comparison ---- */

static double worst_bound, worst_l2, worst_seg, worst_inc, worst_rel; /* printed at the end */

static double val(const output *o, size_t i) {
    switch (o->type) {
    case T_F32:
        return ((const float *)o->data)[i];
    case T_I32:
        return ((const int32_t *)o->data)[i];
    default:
        return ((const double *)o->data)[i];
    }
}

static size_t elem_size(out_type t) {
    return t == T_F64 ? 8 : 4;
}

static void cmp_exact(const output *g, const output *f) {
    size_t es = elem_size(g->type);
    for (size_t i = 0; i < g->n; i++)
        if (memcmp((const char *)g->data + i * es, (const char *)f->data + i * es, es) != 0)
            fail_msg("%s: element %zu of %zu is %.9g, want %.9g", g->name, i, g->n, val(g, i),
                     val(f, i));
    printf("    %-60s exact (%zu elements)\n", g->name, g->n);
}

static void cmp_bound(const output *g, const output *f) {
    const oh_measure *m = &f->m;
    double worst = 0, num = 0, den = 0;
    size_t at = 0;
    for (size_t i = 0; i < g->n; i++) {
        double got = val(g, i), ref = val(f, i), d = fabs(got - ref);
        double bound = m->rel * fabs(ref) + m->eps * (m->scale ? m->scale[i] : 1.0) + m->abs;
        double q = d / (bound > 0 ? bound : 1e-300);
        if (!(q <= worst)) { /* NaN lands here too */
            worst = isnan(q) ? INFINITY : q;
            at = i;
        }
        num += d * d;
        den += ref * ref;
    }
    double l2 = den > 0 ? sqrt(num / den) : sqrt(num);
    printf("    %-60s err/bound %.3f  rel L2 %.2e\n", g->name, worst, l2);
    if (worst > worst_bound) worst_bound = worst;
    if (!(worst <= 1.0))
        fail_msg("%s: element %zu of %zu is %.9g, want %.9g (bound %.3g)", g->name, at, g->n,
                 val(g, at), val(f, at),
                 m->rel * fabs(val(f, at)) + m->eps * (m->scale ? m->scale[at] : 1.0) + m->abs);
}

static void cmp_l2(const output *g, const output *f) {
    double num = 0, den = 0;
    for (size_t i = 0; i < g->n; i++) {
        if (!isfinite(val(g, i))) fail_msg("%s: element %zu is %g", g->name, i, val(g, i));
        double d = val(g, i) - val(f, i);
        num += d * d;
        den += val(f, i) * val(f, i);
    }
    double n = (double)g->n;
    if (f->m.tol_abs > 0 && (g->n == 0 || den < 1e-8 * n)) { /* zero analytically: absolute */
        double e = g->n ? sqrt(num / n) : 0;
        printf("    %-60s RMS err %.2e (tol %.0e, zero analytically)\n", g->name, e, f->m.tol_abs);
        if (!(e <= f->m.tol_abs))
            fail_msg("%s: RMS error %.3g over %.0e", g->name, e, f->m.tol_abs);
        return;
    }
    double e = sqrt(num / (den > 0 ? den : 1e-300));
    printf("    %-60s rel L2 %.2e (tol %.0e)\n", g->name, e, f->m.tol);
    if (e > worst_l2) worst_l2 = e;
    if (!(e <= f->m.tol)) fail_msg("%s: relative L2 error %.3g over %.0e", g->name, e, f->m.tol);
}

static void cmp_seg(const output *g, const output *f) {
    size_t w = f->m.width;
    assert_true(w > 0 && g->n % w == 0);
    double worst = 0;
    for (size_t s = 0; s < g->n / w && !isinf(worst); s++) {
        double e = 0, mx = 0;
        for (size_t i = s * w; i < (s + 1) * w; i++) {
            double d = fabs(val(g, i) - val(f, i));
            if (isnan(d)) {
                e = INFINITY;
                break;
            }
            if (d > e) e = d;
            if (fabs(val(f, i)) > mx) mx = fabs(val(f, i));
        }
        double q = isinf(e) ? e : mx > 0 ? e / mx : e;
        if (q > worst) worst = q;
    }
    printf("    %-60s err %.2e (tol %.1e, per segment of %zu)\n", g->name, worst, f->m.tol, w);
    if (worst > worst_seg) worst_seg = worst;
    if (!(worst <= f->m.tol)) fail_msg("%s: error %.3g over %.1e", g->name, worst, f->m.tol);
}

static void cmp_inc(const output *g, const output *f) {
    const float *b = f->m.before;
    double e = 0, mx = 0;
    for (size_t i = 0; i < g->n; i++) {
        double gi = val(g, i) - b[i], ri = val(f, i) - b[i], d = fabs(gi - ri);
        if (isnan(d)) {
            e = INFINITY;
            break;
        }
        if (d > e) e = d;
        if (fabs(ri) > mx) mx = fabs(ri);
    }
    double q = isinf(e) ? e : mx > 0 ? e / mx : e;
    printf("    %-60s increment err %.2e (tol %.1e)\n", g->name, q, f->m.tol);
    if (q > worst_inc) worst_inc = q;
    if (!(q <= f->m.tol)) fail_msg("%s: increment error %.3g over %.1e", g->name, q, f->m.tol);
}

/* OH_MAXREL (max error over max |ref|) or OH_RMSREL (RMS error over RMS ref), each denominator
 * at least the floor; an element NaN where the reference is not was never written. */
static void cmp_rel(const output *g, const output *f, int rms) {
    double num = 0, den = 0, mx = 0, mref = 0;
    for (size_t i = 0; i < g->n; i++) {
        double a = val(g, i), b = val(f, i), d = fabs(a - b);
        if (isnan(a) && !isnan(b))
            fail_msg("%s: element %zu of %zu not written (still NaN)", g->name, i, g->n);
        num += d * d;
        den += b * b;
        if (!(d <= mx)) mx = d;
        if (fabs(b) > mref) mref = fabs(b);
    }
    double n = g->n ? (double)g->n : 1.0, fl = f->m.floor;
    double e = rms ? sqrt(num / n) / fmax(fmax(sqrt(den / n), fl), 1e-30)
                   : mx / fmax(fmax(mref, fl), 1e-30);
    printf("    %-60s %s err %.2e (tol %.0e)\n", g->name, rms ? "RMS-relative" : "max-relative", e,
           f->m.tol);
    if (e > worst_rel) worst_rel = e;
    if (!(e <= f->m.tol)) fail_msg("%s: error %.3g over the tolerance %.0e", g->name, e, f->m.tol);
}

/* Every output of run g against the same output of the reference run f. */
static void compare(const oh_run *g, const oh_run *f) {
    if (g->nouts != f->nouts)
        fail_msg("the case named %d outputs on the backend, %d on the reference", g->nouts,
                 f->nouts);
    for (int i = 0; i < g->nouts; i++) {
        const output *go = &g->outs[i], *fo = &f->outs[i];
        if (strcmp(go->name, fo->name) != 0 || go->n != fo->n || go->type != fo->type)
            fail_msg("output %d: %s [%zu] on the backend, %s [%zu] on the reference", i, go->name,
                     go->n, fo->name, fo->n);
        switch (fo->m.kind) {
        case OH_BOUND:
            cmp_bound(go, fo);
            break;
        case OH_L2:
            cmp_l2(go, fo);
            break;
        case OH_SEG:
            cmp_seg(go, fo);
            break;
        case OH_INC:
            cmp_inc(go, fo);
            break;
        case OH_MAXREL:
        case OH_RMSREL:
            cmp_rel(go, fo, fo->m.kind == OH_RMSREL);
            break;
        case OH_EXACT:
            cmp_exact(go, fo);
            break;
        case OH_NONE:
            break;
        }
    }
}

void oh_expect(oh_measure m, const float *got, const float *want, size_t n, const char *fmt, ...) {
    output g = {.type = T_F32, .n = n, .data = (void *)got, .m = m};
    output f = {.type = T_F32, .n = n, .data = (void *)want, .m = m};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g.name, sizeof g.name, fmt, ap);
    va_end(ap);
    memcpy(f.name, g.name, sizeof f.name);
    compare(&(oh_run){.outs = &g, .nouts = 1}, &(oh_run){.outs = &f, .nouts = 1});
}

/* ---- the driver ---- */

typedef struct {
    const oh_case *c;
    int index, backend;
    char name[160];
} test_slot;

static void run_case(oh_run *r, const test_slot *t, zy_ctx *ctx, int is_ref) {
    memset(r, 0, sizeof *r);
    r->ctx = ctx, r->is_ref = is_ref;
    rng = zy_rng_init(20261125, (uint64_t)t->index); /* the same inputs on every backend */
    t->c->run(r, t->c->p);
    ops_sync(ctx);
}

static void run_slot(void **state) {
    const test_slot *t = *state;
    zy_ctx *ctx = backend_ctx(t->backend);
    if (!ctx) skip();
    oh_run ref, got;
    printf("  %s\n", t->name);
    run_case(&ref, t, backend_ctx(0), 1);
    run_case(&got, t, ctx, 0);
    compare(&got, &ref);
    run_free(&got);
    run_free(&ref);
}

zy_ctx *oh_backend_ctx(const char *name) {
    for (int b = 1; b < NBACK; b++)
        if (strcmp(oh_backends[b].name, name) == 0) return backend_ctx(b);
    return NULL;
}

oh_run *oh_run_begin(zy_ctx *ctx) {
    oh_run *r = calloc(1, sizeof *r);
    assert_non_null(r);
    r->ctx = ctx;
    return r;
}

void oh_run_end(oh_run *r) {
    ops_sync(r->ctx);
    run_free(r);
    free(r);
}

int oh_teardown(void **state) {
    (void)state;
    for (int b = 0; b < NBACK; b++)
        if (ctx_state[b] == 1) ops_ctx_free(&ctxs[b]);
    memset(ctx_state, 0, sizeof ctx_state);
    if (worst_bound + worst_l2 + worst_seg + worst_inc + worst_rel > 0)
        printf("worst: err/bound %.3f, rel L2 %.2e, per-segment %.2e, increments %.2e, "
               "relative %.2e\n",
               worst_bound, worst_l2, worst_seg, worst_inc, worst_rel);
    return 0;
}

/* 1 when backend b runs op (its list names it, or it has none). */
static int runs_op(int b, const char *op) {
    const char *l = oh_backends[b].ops;
    size_t n = strlen(op);
    if (!l) return 1;
    for (const char *s = strstr(l, op); s; s = strstr(s + 1, op))
        if ((s == l || s[-1] == ' ') && (s[n] == ' ' || s[n] == 0)) return 1;
    return 0;
}

int oh_main(const char *group, const oh_case *cases, int ncases) {
    int n = ncases * (NBACK - 1), k = 0;
    test_slot *slots = calloc((size_t)n, sizeof *slots);
    struct CMUnitTest *tests = calloc((size_t)n, sizeof *tests);
    assert_true(slots && tests);
    const char *self = getenv("OH_SELF"); /* OH_SELF=0: no CPU-against-itself tests */
    for (int b = self && strcmp(self, "0") == 0 ? 2 : 1; b < NBACK; b++)
        for (int i = 0; i < ncases; i++) {
            if (!runs_op(b, cases[i].op)) continue;
            test_slot *t = &slots[k];
            t->c = &cases[i], t->index = i, t->backend = b;
            int len = snprintf(t->name, sizeof t->name, "%s%s %s(", oh_backends[b].name,
                               b == 1 ? "(self)" : "", cases[i].op);
            int np = 8;
            while (np > 1 && cases[i].p[np - 1] == 0) np--;
            for (int j = 0; j < np && len < (int)sizeof t->name; j++)
                len += snprintf(t->name + len, sizeof t->name - (size_t)len, "%s%d", j ? "," : "",
                                cases[i].p[j]);
            if (len < (int)sizeof t->name)
                snprintf(t->name + len, sizeof t->name - (size_t)len, ")");
            tests[k++] = (struct CMUnitTest){t->name, run_slot, NULL, NULL, t};
        }
    const char *filter = getenv("OH_FILTER");
    if (filter && *filter) cmocka_set_test_filter(filter);
    int rc = _cmocka_run_group_tests(group, tests, (size_t)k, NULL, oh_teardown);
    free(tests);
    free(slots);
    return rc;
}
