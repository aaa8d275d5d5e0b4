/* The op test harness: every op case runs once on the reference backend (the CPU) and once on each
 * other backend of oh_backends[] (CUDA; a later HIP adds itself there) on the same random inputs,
 * and every output the case names is compared with the reference's under the case's measure.
 *
 * A case is a function `void run(oh_run *r, const int *p)` written once against ops.h: it draws its
 * host inputs from the harness's RNG (reseeded per case, so every backend sees the same values),
 * uploads them to oh_ctx(r) with oh_act/oh_f32/oh_i32, calls the ops on oh_ctx(r), and names each
 * output with oh_out_act/oh_out_f32/oh_out_i32/oh_out_host and a measure. Activation inputs are
 * rounded to bf16 on every backend (the CUDA activations are bf16), so the CPU reference computes
 * from the values the GPU reads. Outputs should start poisoned (oh_nan_act/oh_nan_f32): an element
 * an op leaves unwritten then fails. Checks a measure cannot express (near-tied argmax choices,
 * bitwise repeatability) are asserted inside the case on its own downloads (oh_get_*), with the
 * CPU op run on the host (oh_cpu()) where it needs a reference; they run on every backend.
 * A case table (oh_case[]) goes to oh_main, which makes one cmocka test per case and compared
 * backend (OH_SELF=0 leaves out the CPU compared with itself); a backend without a device skips
 * (cmocka skip). Buffers of a run are freed by the harness. Include after <cmocka.h>. */
#ifndef ZY_OP_HARNESS_H
#define ZY_OP_HARNESS_H

#include "base/rng.h"
#include "ops/ops.h"

#include <stddef.h>
#include <stdint.h>

/* A backend: its name, how to make its context (1 ready, 0 no device: skip, -1 failed), and the
 * cases it runs (space-separated op names; NULL: all). A context with options (blocked expert
 * GEMMs) is a backend of its own that runs the cases its options change. */
typedef struct {
    const char *name;
    int (*init)(zy_ctx *ctx);
    const char *ops;
} oh_backend;

/* How an output is compared with the reference's (ref); "n" is its element count. */
typedef enum {
    OH_BOUND,  /* every |got - ref| <= rel |ref| + eps * scale[i] + abs (scale NULL: 1) */
    OH_L2,     /* ||got - ref|| / ||ref|| <= tol, every element finite; when tol_abs > 0 and the
                  reference's RMS is under 1e-4 (zero analytically), RMS(got - ref) <= tol_abs */
    OH_SEG,    /* per segment of `width` elements: max |got - ref| / max |ref| <= tol (absolute
                  where the reference segment is zero) */
    OH_INC,    /* increments over `before`: max |dgot - dref| / max |dref| <= tol */
    OH_MAXREL, /* max |got - ref| / max(max |ref|, floor) <= tol; no NaN where ref has none */
    OH_RMSREL, /* RMS(got - ref) / max(RMS(ref), floor) <= tol; no NaN where ref has none */
    OH_EXACT,  /* the same bits */
    OH_NONE    /* not compared (the case checks it itself) */
} oh_kind;

typedef struct {
    oh_kind kind;
    double rel, eps, abs; /* OH_BOUND */
    const double *scale;  /* OH_BOUND: per element, NULL = 1 (host memory the run keeps) */
    double tol, tol_abs;  /* OH_L2, OH_SEG, OH_INC, OH_MAXREL, OH_RMSREL */
    double floor;         /* OH_MAXREL, OH_RMSREL: the size of terms that cancel (0: none) */
    size_t width;         /* OH_SEG */
    const float *before;  /* OH_INC: the gradient before the op (host, n elements) */
} oh_measure;

oh_measure oh_bound(double rel, double eps, const double *scale);
oh_measure oh_bound_abs(double rel, double eps, const double *scale, double abs);
oh_measure oh_l2(double tol, double tol_abs);
oh_measure oh_seg(size_t width, double tol);
oh_measure oh_inc(const float *before, double tol);
oh_measure oh_maxrel(double tol, double floor);
oh_measure oh_rmsrel(double tol, double floor);
oh_measure oh_exact(void);
oh_measure oh_none(void);

/* One run of a case on one backend. */
typedef struct oh_run oh_run;

/* A case of the table: op names the test; run reads its shape and flags from p. */
typedef struct {
    const char *op;
    void (*run)(oh_run *r, const int *p);
    int p[8];
} oh_case;

/* The run's context (the backend under test, or the CPU reference). */
zy_ctx *oh_ctx(oh_run *r);
/* 1 on the reference run. */
int oh_is_ref(const oh_run *r);
/* A CPU context for host-side computations of a case (scales, derived inputs, references). */
zy_ctx *oh_cpu(void);

/* ---- host inputs (freed with the run) ---- */
zy_rng *oh_rng(void);                              /* reseeded for every run of a case */
float *oh_randn(oh_run *r, size_t n, float sd);    /* normal(0, sd) */
float *oh_randn_bf(oh_run *r, size_t n, float sd); /* the same rounded to bf16 */
float *oh_randu(oh_run *r, size_t n, float lo, float hi);
float *oh_const(oh_run *r, size_t n, float v);
float *oh_dup(oh_run *r, const float *x, size_t n);
float *oh_abs(oh_run *r, const float *x, size_t n); /* |x| */
double *oh_zeros(oh_run *r, size_t n);              /* for scales */
int32_t *oh_ints(oh_run *r, size_t n, int32_t v);
void *oh_keep(oh_run *r, void *host); /* frees host memory with the run */
float *oh_bf(float *x, size_t n);     /* rounds x to bf16 values in place */

/* ---- device buffers on oh_ctx(r) (freed with the run) ---- */
/* An activation buffer holding bf16(x[n]); x NULL: NaN. oh_act_at places it `pad` elements into
 * a larger buffer (unaligned pointers) and returns the pointer to its first element. */
zy_act *oh_act(oh_run *r, const float *x, size_t n);
zy_act *oh_act_at(oh_run *r, const float *x, size_t n, size_t pad);
zy_act *oh_nan_act(oh_run *r, size_t n);
float *oh_f32(oh_run *r, const float *x, size_t n); /* x NULL: NaN */
float *oh_nan_f32(oh_run *r, size_t n);
int32_t *oh_i32(oh_run *r, const int32_t *x, size_t n);
void *oh_alloc(oh_run *r, size_t bytes); /* zeroed */

/* ---- downloads (host fp32 / int32 copies, freed with the run) ---- */
float *oh_get_act(oh_run *r, const zy_act *d, size_t n);
float *oh_get_f32(oh_run *r, const float *d, size_t n);
int32_t *oh_get_i32(oh_run *r, const int32_t *d, size_t n);

/* ---- outputs compared with the reference's; the name is printf-formatted ---- */
void oh_out_act(oh_run *r, oh_measure m, const zy_act *d, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
void oh_out_f32(oh_run *r, oh_measure m, const float *d, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* int32 device outputs: always exact. */
void oh_out_i32(oh_run *r, const int32_t *d, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Host values (a loss sum in double, a host-side copy of offsets). */
void oh_out_host(oh_run *r, oh_measure m, const double *h, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
void oh_out_host_i32(oh_run *r, const int32_t *h, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Compares host arrays under a measure, as outputs are compared (for analytic expectations that a
 * case asserts on every backend: zero sizes leave buffers alone, ignored rows are zero). */
void oh_expect(oh_measure m, const float *got, const float *want, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* ---- tests outside the table (GPU-only timing, the profiler) on the same helpers ---- */
/* The context of backend `name` ("cuda"), NULL when it has no device (the test skips). */
zy_ctx *oh_backend_ctx(const char *name);
/* A run on ctx outside the table; oh_run_end frees its buffers. */
oh_run *oh_run_begin(zy_ctx *ctx);
void oh_run_end(oh_run *r);
/* Frees the backends' contexts (a cmocka group teardown; oh_main calls it itself). */
int oh_teardown(void **state);

/* Runs the table: one cmocka test per case and backend compared with the reference, in group
 * `group`; OH_FILTER=pattern runs the matching tests only. Returns cmocka's status. */
int oh_main(const char *group, const oh_case *cases, int ncases);

#endif
