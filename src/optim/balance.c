/* Router balancing-bias controller and load summaries (see balance.h). */
#include "optim/balance.h"
#include "base/err.h"
#ifdef ZY_HAVE_CUDA
#include "optim/optim_cuda.h"
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BIAS_NAME "model.layers.%d.mlp.gate.balancing_biases"

void balance_config_default(zy_balance_config *c) {
    c->step_size = 1e-3f;
    c->beta1 = 0.9f;
    c->beta2 = 0.999f;
    c->eps = 1e-8f;
}

int balance_config_check(const zy_balance_config *c) {
    if (!(isfinite(c->step_size) && c->step_size >= 0))
        return zy_fail("balancing: step_size must be a finite number >= 0, found %g", c->step_size);
    if (!(c->beta1 >= 0 && c->beta1 < 1))
        return zy_fail("balancing: beta1 must be in [0, 1), found %g", c->beta1);
    if (!(c->beta2 >= 0 && c->beta2 < 1))
        return zy_fail("balancing: beta2 must be in [0, 1), found %g", c->beta2);
    if (!(isfinite(c->eps) && c->eps > 0))
        return zy_fail("balancing: eps must be a finite number > 0, found %g", c->eps);
    return ZY_OK;
}

int balance_init(zy_balance *b, const zy_balance_config *cfg, int n_layers, int n_experts) {
    memset(b, 0, sizeof *b);
    ZY_TRY(balance_config_check(cfg));
    if (n_layers < 0 || n_experts < 1)
        return zy_fail("balancing: need >= 0 layers and >= 1 expert, found %d layers, %d experts",
                       n_layers, n_experts);
    b->cfg = *cfg;
    b->n_layers = n_layers;
    b->n_classes = n_experts + 1;
    size_t n = (size_t)n_layers * (size_t)b->n_classes;
    b->m = zy_calloc(n ? n : 1, sizeof *b->m);
    b->v = zy_calloc(n ? n : 1, sizeof *b->v);
    b->delta = zy_calloc(n ? n : 1, sizeof *b->delta);
    return ZY_OK;
}

void balance_free(zy_balance *b) {
    free(b->m);
    free(b->v);
    free(b->delta);
    memset(b, 0, sizeof *b);
}

/* The Adam step of one layer: advances m, v and writes each class's bias change to delta[e]
 * (all zero when the layer routed no tokens). */
static void layer_delta(float *delta, float *m, float *v, const int64_t *counts, int n,
                        const zy_balance_config *cfg, int64_t t) {
    memset(delta, 0, (size_t)n * sizeof *delta);
    int64_t total = 0;
    for (int e = 0; e < n; e++) total += counts[e];
    if (total <= 0) return;
    const double bc1 = 1.0 - pow((double)cfg->beta1, (double)t);
    const double bc2 = 1.0 - pow((double)cfg->beta2, (double)t);
    const float target = 1.0f / (float)n;
    for (int e = 0; e < n; e++) {
        float g = (float)((double)counts[e] / (double)total) - target;
        m[e] = cfg->beta1 * m[e] + (1.0f - cfg->beta1) * g;
        v[e] = cfg->beta2 * v[e] + (1.0f - cfg->beta2) * g * g;
        float mhat = (float)(m[e] / bc1), vhat = (float)(v[e] / bc2);
        delta[e] = cfg->step_size * mhat / (sqrtf(vhat) + cfg->eps);
    }
}

/* optim_cuda_bias_sub does the same float operations in the same order, so both devices hold the
 * same bits. */
void balance_apply(float *bias, const float *delta, int n) {
    const float skip = delta ? bias[n - 1] - delta[n - 1] : bias[n - 1];
    const float shift = skip + 1.0f; /* skip - (-1) */
    for (int e = 0; e < n - 1; e++) bias[e] = (delta ? bias[e] - delta[e] : bias[e]) - shift;
    bias[n - 1] = ZY_SKIP_BIAS;
}

void balance_step(zy_balance *b, zy_ctx *ctx, float *const *biases, const int64_t *counts) {
    b->step++;
    const int n = b->n_classes;
    for (int l = 0; l < b->n_layers; l++) {
        size_t o = (size_t)l * (size_t)n;
        layer_delta(b->delta + o, b->m + o, b->v + o, counts + o, n, &b->cfg, b->step);
    }
    if (ctx->device == ZY_DEV_CUDA) {
#ifdef ZY_HAVE_CUDA
        optim_cuda_bias_sub(ctx, biases, b->delta, b->n_layers, n);
#else
        ZY_CHECKF(0, "balancing: a CUDA context in a build without CUDA");
#endif
        return;
    }
    for (int l = 0; l < b->n_layers; l++) balance_apply(biases[l], b->delta + (size_t)l * n, n);
}

void balance_load_summary(const int64_t *counts, int n_experts, zy_load_summary *out) {
    memset(out, 0, sizeof *out);
    int64_t total = 0;
    for (int e = 0; e <= n_experts; e++) total += counts[e];
    out->tokens = total;
    if (total <= 0) return;
    double mx = 0, mn = 1, h = 0;
    for (int e = 0; e <= n_experts; e++) {
        double f = (double)counts[e] / (double)total;
        if (e < n_experts) {
            if (f > mx) mx = f;
            if (f < mn) mn = f;
        }
        if (f > 0) h -= f * log(f);
    }
    out->max_frac = (float)mx;
    out->min_frac = (float)mn;
    out->skip_frac = (float)((double)counts[n_experts] / (double)total);
    out->entropy = (float)h;
    out->entropy_norm = (float)(h / log((double)(n_experts + 1)));
    int64_t busiest = 0, routed = total - counts[n_experts];
    for (int e = 0; e < n_experts; e++) busiest = counts[e] > busiest ? counts[e] : busiest;
    out->max_over_mean = routed > 0 ? (double)busiest * n_experts / (double)routed : 0.0;
}

double balance_load_ratio(const int64_t *counts, int n_layers, int n_experts, double *worst) {
    double sum = 0, mx = 0;
    for (int l = 0; l < n_layers; l++) {
        zy_load_summary s;
        balance_load_summary(counts + (size_t)l * (n_experts + 1), n_experts, &s);
        const double ratio = s.max_over_mean > 0 ? s.max_over_mean : 1.0; /* none routed */
        sum += ratio;
        mx = ratio > mx ? ratio : mx;
    }
    if (worst) *worst = mx;
    return n_layers > 0 ? sum / n_layers : 1.0;
}

int balance_find_biases(const zy_param_table *t, float *params, int n_layers, int n_experts,
                        float **biases) {
    char name[ZY_PARAM_NAME_MAX];
    for (int l = 0; l < n_layers; l++) {
        snprintf(name, sizeof name, BIAS_NAME, l);
        int i = params_find(t, name);
        if (i < 0) return zy_fail("balancing: the parameter table has no %s", name);
        const zy_param *p = &t->items[i];
        if (p->ndim != 1 || p->shape[0] != n_experts + 1) {
            char shape[64];
            params_shape_str(p, shape, sizeof shape);
            return zy_fail("balancing: %s should have shape [%d], found %s", name, n_experts + 1,
                           shape);
        }
        biases[l] = params + p->offset;
    }
    return ZY_OK;
}

zy_state_tensor *balance_state_tensors(const zy_balance *b, int *count) {
    zy_state_tensor *s = zy_calloc((size_t)(2 * b->n_layers + 1), sizeof *s);
    int n = 0;
    for (int l = 0; l < b->n_layers; l++) {
        for (int k = 0; k < 2; k++) {
            zy_state_tensor *e = &s[n++];
            snprintf(e->name, sizeof e->name, "%s" BIAS_NAME,
                     k ? "balance_exp_avg_sq." : "balance_exp_avg.", l);
            e->data = (k ? b->v : b->m) + (size_t)l * (size_t)b->n_classes;
            e->ndim = 1;
            e->shape[0] = b->n_classes;
            e->numel = (size_t)b->n_classes;
        }
    }
    *count = n;
    return s;
}
