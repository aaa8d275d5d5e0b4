/* AdamW and Muon over a parameter table (see optim.h): the plan, the CPU math, and the dispatch
 * to the GPU (optim_cuda.h) for a CUDA context. */
#include "optim/optim.h"
#include "base/err.h"
#include "base/bf16.h"
#include "optim/moments.h"
#ifdef ZY_HAVE_CUDA
#include "optim/optim_cuda.h"
#endif

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Newton-Schulz's normalisation epsilon (the iterations' coefficients: ns_coef.h). */
#define NS_EPS 1e-7

/* Element-wise loops go parallel only when there is enough work to pay for the threads. */
#define PAR_MIN 32768

static size_t align16(size_t n) {
    return (n + 15) & ~(size_t)15;
}

void optim_config_default(zy_optim_config *c) {
    memset(c, 0, sizeof *c);
    c->lr = 3e-4f;
    c->beta1 = 0.9f;
    c->beta2 = 0.95f;
    c->eps = 1e-8f;
    c->weight_decay = 0.1f;
    c->decay_kinds = ZY_DECAY_KINDS_DEFAULT;
    c->use_muon = 1;
    c->muon_momentum = 0.95f;
    c->muon_nesterov = 1;
    c->muon_ns_steps = 5;
    c->muon_ns_coefs = ZY_NS_FIXED;
    c->muon_ns_precond = ZY_NS_PRECOND_FROBENIUS;
    c->muon_scale = ZY_MUON_SCALE_MATCH_ADAMW_RMS;
    c->muon_lr_ratio = 1.0f;
    c->embedding_update = ZY_EMB_SPLIT;
}

const char *const zy_embedding_update_names[] = {"owner", "replicated", "split", NULL};
const char *const zy_adam_moments_names[] = {"float32", "bfloat16", NULL};

/* 1 when lo <= x < hi (or <= hi when closed) and x is finite. */
static int in_range(float x, float lo, float hi, int closed_hi) {
    return isfinite(x) && x >= lo && (closed_hi ? x <= hi : x < hi);
}

int optim_config_check(const zy_optim_config *c) {
    if (!in_range(c->lr, 0, INFINITY, 1))
        return zy_fail("optimizer: lr must be a finite number >= 0, found %g", c->lr);
    if (!in_range(c->beta1, 0, 1, 0))
        return zy_fail("optimizer: beta1 must be in [0, 1), found %g", c->beta1);
    if (!in_range(c->beta2, 0, 1, 0))
        return zy_fail("optimizer: beta2 must be in [0, 1), found %g", c->beta2);
    if (!(isfinite(c->eps) && c->eps > 0))
        return zy_fail("optimizer: eps must be a finite number > 0, found %g", c->eps);
    if (!in_range(c->weight_decay, 0, INFINITY, 1))
        return zy_fail("optimizer: weight_decay must be a finite number >= 0, found %g",
                       c->weight_decay);
    if (c->decay_kinds & ~(unsigned)(ZY_KIND_BIT(ZY_PARAM_BUFFER) - 1))
        return zy_fail("optimizer: decay_kinds may name matrix, embed, vector and conv only, "
                       "found mask 0x%x",
                       c->decay_kinds);
    if (c->use_muon != 0 && c->use_muon != 1)
        return zy_fail("optimizer: use_muon must be 0 or 1, found %d", c->use_muon);
    if (!in_range(c->muon_momentum, 0, 1, 0))
        return zy_fail("optimizer: muon_momentum must be in [0, 1), found %g", c->muon_momentum);
    if (c->embedding_update < ZY_EMB_OWNER || c->embedding_update > ZY_EMB_SPLIT)
        return zy_fail("optimizer: embedding_update must be owner, replicated or split (0-2), "
                       "found %d",
                       c->embedding_update);
    if (c->muon_nesterov != 0 && c->muon_nesterov != 1)
        return zy_fail("optimizer: muon_nesterov must be 0 or 1, found %d", c->muon_nesterov);
    if (c->muon_ns_steps < 1 || c->muon_ns_steps > 100)
        return zy_fail("optimizer: muon_ns_steps must be in [1, 100], found %d", c->muon_ns_steps);
    if (c->muon_ns_coefs != ZY_NS_FIXED && c->muon_ns_coefs != ZY_NS_MINIMAX)
        return zy_fail("optimizer: muon_ns_coefs must be fixed or minimax, found %d",
                       c->muon_ns_coefs);
    if (c->muon_ns_precond != ZY_NS_PRECOND_FROBENIUS && c->muon_ns_precond != ZY_NS_PRECOND_AOL)
        return zy_fail("optimizer: muon_ns_precond must be frobenius or aol, found %d",
                       c->muon_ns_precond);
    if (c->muon_scale != ZY_MUON_SCALE_NONE && c->muon_scale != ZY_MUON_SCALE_MATCH_ADAMW_RMS &&
        c->muon_scale != ZY_MUON_SCALE_SPECTRAL)
        return zy_fail("optimizer: muon_scale must be none, match_adamw_rms or spectral, found %d",
                       (int)c->muon_scale);
    if (!(isfinite(c->muon_lr_ratio) && c->muon_lr_ratio > 0))
        return zy_fail("optimizer: muon_lr_ratio must be a finite number > 0, found %g",
                       c->muon_lr_ratio);
    if (c->adam_moments != ZY_ADAM_MOMENTS_F32 && c->adam_moments != ZY_ADAM_MOMENTS_BF16)
        return zy_fail("optimizer: adam_moments must be float32 or bfloat16 (0-1), found %d",
                       c->adam_moments);
    if (c->muon_momentum_dtype != ZY_ADAM_MOMENTS_F32 &&
        c->muon_momentum_dtype != ZY_ADAM_MOMENTS_BF16)
        return zy_fail("optimizer: muon_momentum_dtype must be float32 or bfloat16 (0-1), found %d",
                       c->muon_momentum_dtype);
    return ZY_OK;
}

/* Rows, columns and count of the matrices in a Muon tensor ([out, in] or [..., out, in]). */
static void matrix_dims(const zy_param *p, int64_t *rows, int64_t *cols, int64_t *count) {
    *rows = p->shape[p->ndim - 2];
    *cols = p->shape[p->ndim - 1];
    *count = (int64_t)p->numel / (*rows * *cols);
}

/* 1 when ctx is a CUDA context (which a build without CUDA cannot have made). */
static int on_cuda(const zy_ctx *ctx) {
    if (ctx->device != ZY_DEV_CUDA) return 0;
#ifndef ZY_HAVE_CUDA
    ZY_CHECKF(0, "optimizer: a CUDA context in a build without CUDA");
#endif
    return 1;
}

size_t optim_state_bytes(const zy_optim_config *cfg, const zy_param *p, int on_gpu) {
    if (p->kind == ZY_PARAM_BUFFER) return 0;
    if (p->kind == ZY_PARAM_MATRIX && cfg->use_muon)
        return align16((size_t)p->numel) *
               (on_gpu && cfg->muon_momentum_dtype == ZY_ADAM_MOMENTS_BF16 ? 2 : 4);
    const size_t moment = on_gpu && cfg->adam_moments == ZY_ADAM_MOMENTS_BF16 ? 2 : 4;
    return 2 * align16((size_t)p->numel) * moment;
}

/* Bytes an update moves per element: AdamW reads weight, gradient and two moments and writes three
 * of them plus the bf16 copy; Muon's elementwise passes (momentum, normalisation, apply) about
 * as much without the second moment. */
#define ADAMW_BYTES_PER_ELEMENT      30.0
#define ADAMW_BF16_BYTES_PER_ELEMENT 22.0 /* the two moments read and written in bf16 */
#define MUON_BYTES_PER_ELEMENT       20.0
#define MUON_BF16_BYTES_PER_ELEMENT  16.0 /* the momentum read and written in bf16 */
double optim_update_cost(const zy_optim_config *cfg, const zy_param *p, double flops_per_byte) {
    if (p->kind == ZY_PARAM_BUFFER) return 0;
    if (!(p->kind == ZY_PARAM_MATRIX && cfg->use_muon))
        return p->numel * (cfg->adam_moments == ZY_ADAM_MOMENTS_BF16 ? ADAMW_BF16_BYTES_PER_ELEMENT
                                                                     : ADAMW_BYTES_PER_ELEMENT);
    int64_t r, c, n;
    matrix_dims(p, &r, &c, &n);
    /* one iteration on the Gram side s = min(r, c), l = max: A = X X^T (2 s^2 l), B = bA + cA^2
     * (2 s^3), X' = aX + B X (2 s^2 l) */
    const double s = (double)(r < c ? r : c), l = (double)(r < c ? c : r);
    const double flops = (double)n * cfg->muon_ns_steps * (4 * s * s * l + 2 * s * s * s);
    return p->numel * (cfg->muon_momentum_dtype == ZY_ADAM_MOMENTS_BF16
                           ? MUON_BF16_BYTES_PER_ELEMENT
                           : MUON_BYTES_PER_ELEMENT) +
           flops / flops_per_byte;
}

int optim_init(zy_optim *opt, zy_ctx *ctx, const zy_optim_config *cfg, const zy_param_table *t) {
    return optim_init_owned(opt, ctx, cfg, t, NULL, NULL, NULL);
}

int optim_init_owned(zy_optim *opt, zy_ctx *ctx, const zy_optim_config *cfg,
                     const zy_param_table *t, const unsigned char *mine, const size_t *range,
                     const int *runs) {
    memset(opt, 0, sizeof *opt);
    ZY_CHECK(ctx != NULL);
    ZY_TRY(optim_config_check(cfg));
    opt->cfg = *cfg;
    opt->ctx = ctx;
    opt->n_params = t->count;
    opt->method = zy_calloc((size_t)(t->count ? t->count : 1), sizeof *opt->method);
    opt->state_off = zy_calloc((size_t)(t->count ? t->count : 1), sizeof *opt->state_off);
    opt->upd_lo = zy_calloc((size_t)(t->count ? t->count : 1), sizeof *opt->upd_lo);
    opt->upd_hi = zy_calloc((size_t)(t->count ? t->count : 1), sizeof *opt->upd_hi);
    opt->numel = zy_calloc((size_t)(t->count ? t->count : 1), sizeof *opt->numel);
    opt->host_off = zy_calloc((size_t)(t->count ? t->count : 1), sizeof *opt->host_off);
    opt->ns_abc = zy_calloc((size_t)cfg->muon_ns_steps, sizeof *opt->ns_abc);
    ns_coefficients((zy_ns_coefs)cfg->muon_ns_coefs, cfg->muon_ns_steps, opt->ns_abc);
    for (int i = 0; i < t->count; i++) {
        const zy_param *p = &t->items[i];
        opt->numel[i] = p->numel;
        opt->upd_lo[i] = range ? range[2 * i] : 0;
        opt->upd_hi[i] = range ? range[2 * i + 1] : p->numel;
        ZY_CHECKF(opt->upd_lo[i] <= opt->upd_hi[i] && opt->upd_hi[i] <= p->numel,
                  "%s: update range [%zu, %zu) of %zu elements", p->name, opt->upd_lo[i],
                  opt->upd_hi[i], (size_t)p->numel);
        if (p->kind == ZY_PARAM_BUFFER || (mine && !mine[i])) {
            opt->method[i] = ZY_OPT_SKIP; /* a buffer, or another rank's tensor (ZeRO-1) */
        } else if (p->kind == ZY_PARAM_MATRIX && cfg->use_muon) {
            ZY_CHECKF(p->ndim >= 2, "%s: a matrix parameter needs >= 2 dims", p->name);
            ZY_CHECKF(opt->upd_lo[i] == 0 && opt->upd_hi[i] == p->numel,
                      "%s: Muon updates whole matrices", p->name);
            opt->method[i] = ZY_OPT_MUON;
            opt->state_off[i] = opt->host_off[i] = opt->muon_total;
            opt->muon_total += align16(p->numel);
            int64_t r, c, n;
            matrix_dims(p, &r, &c, &n);
            size_t need = (size_t)(r * c) + optim_ns_work_floats(r, c);
            if (need > opt->work_floats) opt->work_floats = need;
        } else {
            opt->method[i] = ZY_OPT_ADAMW;
            ZY_CHECKF(opt->upd_lo[i] % 16 == 0, "%s: a slice must start 16-float aligned", p->name);
            opt->state_off[i] = opt->adam_total; /* the updated elements only */
            opt->adam_total += align16(opt->upd_hi[i] - opt->upd_lo[i]);
            opt->host_off[i] = opt->adam_host_total;
            opt->adam_host_total += align16(p->numel);
            opt->sliced |= opt->upd_hi[i] - opt->upd_lo[i] != p->numel;
        }
    }
    /* bf16 moments take 2 bytes on a GPU; the CPU keeps their values in fp32 (moments.h) */
    opt->moments_bf16 = cfg->adam_moments == ZY_ADAM_MOMENTS_BF16 && on_cuda(ctx);
    ZY_CHECK(!opt->moments_bf16 || ops_act_size(ctx) == 2); /* they move as the context's zy_act */
    const size_t adam_bytes =
        (opt->adam_total ? opt->adam_total : 1) * (opt->moments_bf16 ? 2 : sizeof(float));
    opt->exp_avg = ops_alloc(ctx, adam_bytes);
    opt->exp_avg_sq = ops_alloc(ctx, adam_bytes);
    opt->momentum_bf16 = cfg->muon_momentum_dtype == ZY_ADAM_MOMENTS_BF16 && on_cuda(ctx);
    ZY_CHECK(!opt->momentum_bf16 || ops_act_size(ctx) == 2);
    opt->momentum =
        ops_alloc(ctx, (opt->muon_total ? opt->muon_total : 1) * (opt->momentum_bf16 ? 2 : 4));
    if (on_cuda(ctx)) {
#ifdef ZY_HAVE_CUDA
        if (!runs) opt->cuda = optim_cuda_init(ctx, opt, t, 0, NULL); /* else planned just below */
#endif
    } else {
        opt->work = zy_calloc(opt->work_floats ? opt->work_floats : 1, sizeof(float));
    }
    if (runs) optim_plan_runs(opt, t, runs);
    return ZY_OK;
}

void optim_free(zy_optim *opt) {
    if (opt->ctx) {
#ifdef ZY_HAVE_CUDA
        if (opt->cuda) optim_cuda_free(opt->ctx, opt->cuda);
#endif
        ops_free(opt->ctx, opt->exp_avg);
        ops_free(opt->ctx, opt->exp_avg_sq);
        ops_free(opt->ctx, opt->momentum);
        if (opt->stage) ops_free(opt->ctx, opt->stage);
    }
    free(opt->method);
    free(opt->state_off);
    free(opt->upd_lo);
    free(opt->upd_hi);
    free(opt->numel);
    free(opt->host_off);
    free(opt->ns_abc);
    free(opt->work);
    if (opt->host_state) ops_host_free(opt->ctx, opt->host_state);
    memset(opt, 0, sizeof *opt);
}

double optim_bytes(const zy_optim *opt) {
    const double moment = opt->moments_bf16 ? 2 : sizeof(float);
    return 2.0 * (double)opt->adam_total * moment +
           (double)opt->muon_total * (opt->momentum_bf16 ? 2 : sizeof(float)) +
           (double)opt->work_floats * sizeof(float);
}

void optim_adamw_update(float *p, const float *g, float *m, float *v, size_t n, float lr,
                        float beta1, float beta2, float eps, float wd, double bc1, double bc2,
                        float gscale, int64_t round_step, uint64_t first) {
    const float step = (float)(lr / bc1), inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
    const float decay = lr * wd;
    const uint32_t hi0 = (uint32_t)(first >> 32);
    const uint32_t key = round_step > 0 ? zy_moment_key((uint64_t)round_step, hi0) : 0;
#pragma omp parallel for simd if (n >= PAR_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * gscale;
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        if (round_step > 0) {
            const uint32_t r = zy_moment_bits_at(first + i, (uint64_t)round_step, key, hi0);
            mi = zy_round_moment(mi, r & 0xffffu);
            vi = zy_round_moment(vi, r >> 16);
        }
        m[i] = mi;
        v[i] = vi;
        p[i] -= step * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps) + decay * p[i];
    }
}

void optim_muon_momentum(float *u, const float *g, float *mom, size_t n, float mu, int nesterov,
                         float gscale, int64_t round_step, uint64_t first) {
    const uint32_t hi0 = (uint32_t)(first >> 32);
    const uint32_t key = round_step > 0 ? zy_moment_key((uint64_t)round_step, hi0) : 0;
#pragma omp parallel for simd if (n >= PAR_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) {
        const float gi = g[i] * gscale;
        float mi = mu * mom[i] + gi;
        if (round_step > 0)
            mi = zy_round_moment(mi, zy_moment_bits_at(first + i, (uint64_t)round_step, key, hi0) &
                                         0xffffu);
        mom[i] = mi;
        u[i] = nesterov ? gi + mu * mi : mi;
    }
}

size_t optim_ns_work_floats(int64_t rows, int64_t cols) {
    int64_t s = rows < cols ? rows : cols;
    return (size_t)(rows * cols + 2 * s * s); /* the next iterate, A, and B */
}

/* AOL on the Gram side s of x [r, c] and its Gram matrix A [s, s] (ns_coef.h): d_i = (sum_j
 * |A_ij|)^-1/2 (0 for an all-zero row, which stays zero), x's rows (wide) or columns (tall) times
 * d, A_ij times d_i d_j. d: s floats of scratch. */
static void ns_aol(float *x, int r, int c, int wide, float *A, int s, float *d) {
    for (int i = 0; i < s; i++) {
        double sum = 0;
        for (int j = 0; j < s; j++) sum += fabsf(A[(size_t)i * s + j]);
        d[i] = sum > 0 ? (float)(1.0 / sqrt(sum)) : 0.0f;
    }
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++) x[(size_t)i * c + j] *= d[wide ? i : j];
    for (int i = 0; i < s; i++)
        for (int j = 0; j < s; j++) A[(size_t)i * s + j] *= d[i] * d[j];
}

void optim_newton_schulz(float *x, int64_t rows, int64_t cols, int steps, const float (*abc)[3],
                         int precond, float *work) {
    const size_t n = (size_t)(rows * cols);
    const int wide = rows <= cols; /* Gram on the smaller side */
    const int s = (int)(wide ? rows : cols);
    const int r = (int)rows, c = (int)cols;
    float *y = work, *A = work + n, *B = A + (size_t)s * s;

    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const float inv = (float)(1.0 / (sqrt(ss) + NS_EPS));
    for (size_t i = 0; i < n; i++) x[i] *= inv;

    float *cur = x, *nxt = y;
    for (int it = 0; it < steps; it++) {
        const float ka = abc[it][0], kb = abc[it][1], kc = abc[it][2];
        if (wide) { /* A = X X^T [r, r]; B = b A + c A A; X' = a X + B X */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r, r, c, 1.0f, cur, c, cur, c,
                        0.0f, A, s);
        } else { /* A = X^T X [c, c]; B = b A + c A A; X' = a X + X B */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, c, c, r, 1.0f, cur, c, cur, c,
                        0.0f, A, s);
        }
        if (it == 0 && precond == ZY_NS_PRECOND_AOL) ns_aol(cur, r, c, wide, A, s, B);
        memcpy(B, A, (size_t)s * s * sizeof *B);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s, s, s, kc, A, s, A, s, kb, B, s);
        memcpy(nxt, cur, n * sizeof *nxt);
        if (wide)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r, c, r, 1.0f, B, s, cur, c, ka,
                        nxt, c);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r, c, c, 1.0f, cur, c, B, s, ka,
                        nxt, c);
        float *tmp = cur;
        cur = nxt;
        nxt = tmp;
    }
    if (cur != x) memcpy(x, cur, n * sizeof *x);
}

float optim_muon_scale(zy_muon_scale rule, int64_t out, int64_t in) {
    switch (rule) {
    case ZY_MUON_SCALE_MATCH_ADAMW_RMS:
        return 0.2f * sqrtf((float)(out > in ? out : in));
    case ZY_MUON_SCALE_SPECTRAL:
        return out > in ? sqrtf((float)out / (float)in) : 1.0f;
    case ZY_MUON_SCALE_NONE:
        return 1.0f;
    }
    return 1.0f;
}

void optim_apply_update(float *p, const float *u, size_t n, float lr, float scale, float wd) {
    const float su = lr * scale, decay = lr * wd;
#pragma omp parallel for simd if (n >= PAR_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) p[i] -= su * u[i] + decay * p[i];
}

/* Muon on one tensor: momentum over the whole stack, then each [rows, cols] matrix on its own. */
static void muon_tensor(zy_optim *opt, const zy_param *p, float *param, const float *grad,
                        float *mom, float lr, float wd, float gscale) {
    /* the CPU's momentum is an fp32 buffer (bf16 values under a bf16 muon_momentum_dtype) */
    const zy_optim_config *c = &opt->cfg;
    const int64_t round_step = c->muon_momentum_dtype == ZY_ADAM_MOMENTS_BF16 ? opt->step : 0;
    int64_t rows, cols, count;
    matrix_dims(p, &rows, &cols, &count);
    const size_t mn = (size_t)(rows * cols);
    const float scale = optim_muon_scale(c->muon_scale, rows, cols);
    float *u = opt->work, *ns_work = opt->work + mn;
    for (int64_t e = 0; e < count; e++) {
        size_t off = (size_t)e * mn;
        optim_muon_momentum(u, grad + off, mom + off, mn, c->muon_momentum, c->muon_nesterov,
                            gscale, round_step, (uint64_t)p->offset + off);
        optim_newton_schulz(u, rows, cols, c->muon_ns_steps, opt->ns_abc, c->muon_ns_precond,
                            ns_work);
        optim_apply_update(param + off, u, mn, lr, scale, wd);
    }
}

/* One step of table entry i (p) on the CPU. */
static void update_entry(zy_optim *opt, const zy_param *p, int i, float *params, const float *grads,
                         float lr_now, float grad_scale, double bc1, double bc2) {
    const zy_optim_config *c = &opt->cfg;
    const float wd = (c->decay_kinds & ZY_KIND_BIT(p->kind)) ? c->weight_decay : 0.0f;
    float *param = params + p->offset;
    const float *grad = grads + p->offset;
    const size_t so = opt->state_off[i];
    switch ((zy_opt_method)opt->method[i]) {
    case ZY_OPT_ADAMW: {
        const size_t lo = opt->upd_lo[i];
        /* the CPU's moments are fp32 buffers (bf16 values under ZY_ADAM_MOMENTS_BF16) */
        optim_adamw_update(
            param + lo, grad + lo, (float *)opt->exp_avg + so, (float *)opt->exp_avg_sq + so,
            opt->upd_hi[i] - lo, lr_now, c->beta1, c->beta2, c->eps, wd, bc1, bc2, grad_scale,
            c->adam_moments == ZY_ADAM_MOMENTS_BF16 ? opt->step : 0, (uint64_t)p->offset + lo);
        break;
    }
    case ZY_OPT_MUON:
        muon_tensor(opt, p, param, grad, (float *)opt->momentum + so, lr_now * c->muon_lr_ratio, wd,
                    grad_scale);
        break;
    case ZY_OPT_SKIP:
        break;
    }
}

#ifdef ZY_HAVE_CUDA
/* The Muon key of run r under the GPU's plan by runs: run 0 (the global tensors before the
 * layers) alone, then OPTIM_RUNS_PER_KEY runs a key, so the layers pair from the first one. */
static int run_key(int r) {
    return (r + OPTIM_RUNS_PER_KEY - 1) / OPTIM_RUNS_PER_KEY;
}
#endif

/* The end of the run of equal group values starting at a (the whole table without groups). */
static int run_end(const int *group, int a, int n) {
    int b = a + 1;
    while (b < n && (!group || group[b] == group[a])) b++;
    return b;
}

void optim_plan_runs(zy_optim *opt, const zy_param_table *t, const int *group) {
    ZY_CHECKF(t->count == opt->n_params, "table has %d tensors, the optimiser was planned for %d",
              t->count, opt->n_params);
    opt->runs_planned = group;
#ifdef ZY_HAVE_CUDA
    if (!on_cuda(opt->ctx)) return;
    /* a small matrix goes with the first run: its Newton-Schulz, batched with its shape's
     * matrices of every run, costs less there than alone in its run (bench-small's attention
     * and router matrices alone: Muon's step 90.8 ms on one H100, batched 85.8 on another;
     * results/one-gpu-limit/README.md) */
    int *key = zy_calloc((size_t)t->count + 1, sizeof *key);
    for (int a = 0, b, r = 0; a < t->count; a = b, r++) {
        b = run_end(group, a, t->count);
        for (int i = a; i < b; i++)
            key[i] = t->items[i].numel >= OPTIM_RUN_MIN_ELEMS ? run_key(r) : 0;
    }
    optim_cuda_free(opt->ctx, opt->cuda);
    opt->cuda = optim_cuda_init(opt->ctx, opt, t, 0, key);
    free(key);
#endif
}

void optim_step_runs(zy_optim *opt, const zy_param_table *t, float *params, const float *grads,
                     float lr_now, float grad_scale, const int *group,
                     void (*done)(void *user, int group), void *user) {
    ZY_CHECKF(t->count == opt->n_params, "table has %d tensors, the optimiser was planned for %d",
              t->count, opt->n_params);
    const zy_optim_config *c = &opt->cfg;
    opt->step++;
    const double bc1 = 1.0 - pow((double)c->beta1, (double)opt->step);
    const double bc2 = 1.0 - pow((double)c->beta2, (double)opt->step);
    /* On the GPU each run is one AdamW launch and, planned by these runs (optim_plan_runs), its
     * Muon matrices' Newton-Schulz calls; else those batch same-shape matrices over the runs, so
     * every update comes first. */
    const int gpu = on_cuda(opt->ctx);
#ifdef ZY_HAVE_CUDA
    const int by_run = gpu && optim_cuda_keyed(opt->cuda);
    ZY_CHECK(!by_run || group == opt->runs_planned);
    int whole = 0;
    if (gpu && !by_run && (whole = optim_cuda_has_muon(opt->cuda)))
        optim_cuda_step(opt->ctx, opt->cuda, opt, params, grads, lr_now, grad_scale, bc1, bc2);
#endif
    /* the groups whose done waits for their key's Muon calls (by_run: a key spans
     * OPTIM_RUNS_PER_KEY runs) */
    int pending[OPTIM_RUNS_PER_KEY], npending = 0;
    for (int a = 0, b, r = 0; a < t->count; a = b, r++) {
        b = run_end(group, a, t->count);
        int key_done = 1;
        if (!gpu)
            for (int i = a; i < b; i++)
                update_entry(opt, &t->items[i], i, params, grads, lr_now, grad_scale, bc1, bc2);
#ifdef ZY_HAVE_CUDA
        else if (!whole) {
            optim_cuda_adamw(opt->ctx, opt->cuda, opt, params, grads, lr_now, grad_scale, bc1, bc2,
                             a, b);
            key_done = !by_run || b == t->count || run_key(r + 1) != run_key(r);
            if (by_run && key_done)
                optim_cuda_muon_key(opt->ctx, opt->cuda, opt, params, grads, lr_now, grad_scale,
                                    run_key(r));
        }
#endif
        if (done) pending[npending++] = group[a];
        if (!key_done) continue;
        for (int k = 0; k < npending; k++) done(user, pending[k]);
        npending = 0;
    }
}

void optim_step(zy_optim *opt, const zy_param_table *t, float *params, const float *grads,
                float lr_now, float grad_scale) {
    optim_step_runs(opt, t, params, grads, lr_now, grad_scale, NULL, NULL, NULL);
}

/* Fills one state entry named prefix + the param's name, pointing at data. */
static void state_entry(zy_state_tensor *s, const char *prefix, const zy_param *p, float *data) {
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s%s", prefix, p->name);
    s->data = data;
    s->ndim = p->ndim;
    for (int d = 0; d < p->ndim; d++) s->shape[d] = p->shape[d];
    s->numel = p->numel;
}

int optim_state_mirrored(const zy_optim *opt) {
    return opt->ctx && (on_cuda(opt->ctx) || opt->sliced);
}

void optim_state_mirror(zy_optim *opt) {
    if (opt->host_state || !optim_state_mirrored(opt)) return;
    const size_t n = 2 * opt->adam_host_total + opt->muon_total + 1;
    opt->host_state = ops_host_alloc(opt->ctx, n * sizeof(float));
    memset(opt->host_state, 0, n * sizeof(float));
}

/* Host addresses of the three state arrays: the mirror where there is one (made at first use),
 * else the state itself. */
static void host_views(zy_optim *opt, float **m, float **v, float **mom) {
    optim_state_mirror(opt);
    if (opt->host_state) {
        *m = opt->host_state;
        *v = opt->host_state + opt->adam_host_total;
        *mom = opt->host_state + 2 * opt->adam_host_total;
    } else {
        *m = opt->exp_avg; /* no mirror: the CPU, whose moments are fp32 */
        *v = opt->exp_avg_sq;
        *mom = opt->momentum;
    }
}

void optim_adam_live_to(zy_optim *opt, int i, int which, float *dst) {
    ZY_CHECK(0 <= i && i < opt->n_params && opt->method[i] == ZY_OPT_ADAMW);
    const size_t n = opt->upd_hi[i] - opt->upd_lo[i];
    void *live = which ? opt->exp_avg_sq : opt->exp_avg;
    if (opt->moments_bf16) {
        ops_act_to_f32(opt->ctx, dst, (const zy_act *)((uint16_t *)live + opt->state_off[i]), n);
        ops_sync(opt->ctx);
    } else {
        ops_copy(opt->ctx, dst, (float *)live + opt->state_off[i], n * sizeof(float));
    }
}

float *optim_adam_host(zy_optim *opt, int i, int which) {
    ZY_CHECK(0 <= i && i < opt->n_params && opt->method[i] == ZY_OPT_ADAMW);
    float *hm, *hv, *hmom;
    host_views(opt, &hm, &hv, &hmom);
    return (which ? hv : hm) + opt->host_off[i];
}

void optim_set_compute_copy(zy_optim *opt, void *bf16_params) {
    opt->compute_copy = opt->ctx && opt->ctx->device == ZY_DEV_CUDA ? bf16_params : NULL;
}

zy_state_tensor *optim_state_tensors(zy_optim *opt, const zy_param_table *t, int *count) {
    return optim_state_tensors_of(opt, t, 0, t->count, count);
}

zy_state_tensor *optim_state_tensors_of(zy_optim *opt, const zy_param_table *t, int first, int last,
                                        int *count) {
    ZY_CHECK(t->count == opt->n_params && 0 <= first && first <= last && last <= t->count);
    zy_state_tensor *s = zy_calloc((size_t)(2 * t->count + 1), sizeof *s);
    float *hm, *hv, *hmom;
    host_views(opt, &hm, &hv, &hmom);
    int n = 0;
    for (int i = first; i < last; i++) {
        const zy_param *p = &t->items[i];
        size_t so = opt->host_off[i];
        if (opt->method[i] == ZY_OPT_ADAMW) {
            state_entry(&s[n++], "exp_avg.", p, hm + so);
            state_entry(&s[n++], "exp_avg_sq.", p, hv + so);
        } else if (opt->method[i] == ZY_OPT_MUON) {
            state_entry(&s[n++], "muon_momentum.", p, hmom + so);
        }
    }
    *count = n;
    return s;
}

/* n moments (or momenta) between the host mirror (fp32) and the live state from element `at` on.
 * fp32 ones (bf16 0): one queued copy. bf16 ones go through the fp32 staging buffer in pieces,
 * widened or rounded (to nearest: a mirror of bf16 moments holds bf16 values, exact both ways) on
 * the device; each piece's copy is queued on the stream before the next piece's kernel reuses the
 * buffer. */
static void moment_copy(zy_optim *opt, float *host, void *live, size_t at, size_t n, int to_host,
                        int bf16) {
    if (!n) return;
    if (!bf16) {
        float *l = (float *)live + at;
        ops_copy_async(opt->ctx, to_host ? host : l, to_host ? l : host, n * sizeof(float));
        return;
    }
    if (!opt->stage) opt->stage = ops_alloc(opt->ctx, OPTIM_STAGE_FLOATS * sizeof(float));
    for (size_t k = 0; k < n; k += OPTIM_STAGE_FLOATS) {
        const size_t len = n - k < OPTIM_STAGE_FLOATS ? n - k : OPTIM_STAGE_FLOATS;
        zy_act *lk = (zy_act *)((uint16_t *)live + at + k);
        if (to_host) {
            ops_act_to_f32(opt->ctx, opt->stage, lk, len);
            ops_copy_async(opt->ctx, host + k, opt->stage, len * sizeof(float));
        } else {
            ops_copy_async(opt->ctx, opt->stage, host + k, len * sizeof(float));
            ops_cast_to_act(opt->ctx, lk, opt->stage, len);
        }
    }
}

/* The AdamW moments between the live layout (a sliced entry holds its slice) and the mirror's
 * (every entry whole): the whole entries between two sliced ones in one copy (the layouts agree
 * there, alignment padding included), each slice on its own. Queued. */
static void adam_copy(zy_optim *opt, float *host, void *live, int to_host) {
    size_t run_live = 0, run_host = 0; /* where the current run of whole entries starts */
    for (int i = 0; i <= opt->n_params; i++) {
        const int end = i == opt->n_params;
        if (!end &&
            (opt->method[i] != ZY_OPT_ADAMW || opt->upd_hi[i] - opt->upd_lo[i] == opt->numel[i]))
            continue;
        const size_t stop = end ? opt->adam_total : opt->state_off[i], n = stop - run_live;
        moment_copy(opt, host + run_host, live, run_live, n, to_host, opt->moments_bf16);
        if (end) break;
        const size_t len = opt->upd_hi[i] - opt->upd_lo[i];
        moment_copy(opt, host + opt->host_off[i] + opt->upd_lo[i], live, opt->state_off[i], len,
                    to_host, opt->moments_bf16);
        run_live = opt->state_off[i] + align16(len);
        run_host = opt->host_off[i] + align16(opt->numel[i]);
    }
}

/* x[0, n) rounded to bf16 values (to nearest) in place. */
static void round_to_bf16(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = zy_bf16_to_f32(zy_f32_to_bf16(x[i]));
}

/* The whole state between the live arrays and the mirror (pinned memory on CUDA): the copies
 * queued, then one wait, so the time is the transfer alone. */
static void mirror_copy(zy_optim *opt, int to_host) {
    float *hm, *hv, *hmom;
    host_views(opt, &hm, &hv, &hmom);
    adam_copy(opt, hm, opt->exp_avg, to_host);
    adam_copy(opt, hv, opt->exp_avg_sq, to_host);
    moment_copy(opt, hmom, opt->momentum, 0, opt->muon_total, to_host, opt->momentum_bf16);
    ops_sync(opt->ctx);
}

void optim_state_to_host(zy_optim *opt) {
    if (optim_state_mirrored(opt)) mirror_copy(opt, 1);
}

void optim_state_from_host(zy_optim *opt) {
    if (optim_state_mirrored(opt)) mirror_copy(opt, 0);
    /* bf16 moments kept in fp32 buffers (the CPU): a loaded fp32 state rounded to nearest, as
     * the GPU's narrowing does, so both continue from the same values (exact for bf16 ones) */
    if (opt->cfg.adam_moments == ZY_ADAM_MOMENTS_BF16 && !opt->moments_bf16) {
        float *live[2] = {opt->exp_avg, opt->exp_avg_sq};
        for (int k = 0; k < 2; k++) round_to_bf16(live[k], opt->adam_total);
    }
    if (opt->cfg.muon_momentum_dtype == ZY_ADAM_MOMENTS_BF16 && !opt->momentum_bf16)
        round_to_bf16(opt->momentum, opt->muon_total);
}
