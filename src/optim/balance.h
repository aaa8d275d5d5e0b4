/* The router balancing-bias controller (training only, see the spec's "Balancing"): after each
 * step, for every MoE layer, the fraction f_e of the global batch's tokens routed to each of the
 * E+1 classes (the skip class last) drives an Adam-style update of that layer's balancing bias on
 * the "gradient" g_e = f_e - 1/(E+1), so over-used classes go down and the load moves toward
 * uniform. It owns the Adam moments and the step counter; the biases are ZY_PARAM_BUFFER tensors
 * ("model.layers.N.mlp.gate.balancing_biases" [E+1]) in the caller's parameter buffer.
 * Also summarises a layer's load for logging.
 *
 * Canonical form: the choice argmax(p + bias) depends only on the differences between a layer's
 * biases, so after each update every class is shifted by the same amount to put the skip class
 * back at ZY_SKIP_BIAS (-1). The routing is the one the plain update gives; the Adam moments are
 * untouched. This is what makes a trained checkpoint load in transformers as it is: transformers
 * 5.17 resets each layer's skip-class bias to -1 when it loads a checkpoint (see io/hf_model.h).
 *
 * On a CUDA context the biases live in device memory: the controller's math stays on the host
 * (E+1 numbers per layer; the counts arrive on the host anyway) and a small kernel, given the bias
 * changes by value, applies them (and the canonical shift) in place, so nothing waits for the
 * device. */
#ifndef ZY_BALANCE_H
#define ZY_BALANCE_H

#include "model/config.h"
#include "ops/ops.h"
#include "optim/state.h"
#include "tensor/params.h"

#include <stdint.h>

typedef struct {
    float step_size;    /* bias change per step at full confidence, default 1e-3 */
    float beta1, beta2; /* moment decays, default (0.9, 0.999) */
    float eps;          /* default 1e-8 */
} zy_balance_config;

typedef struct {
    zy_balance_config cfg;
    int n_layers;  /* L */
    int n_classes; /* E + 1 */
    int64_t step;  /* controller updates taken (bias correction uses 1 - beta^step) */
    float *m;      /* [L, E+1] first moments */
    float *v;      /* [L, E+1] second moments */
    float *delta;  /* [L, E+1] host scratch: the bias changes of a step (CUDA path) */
} zy_balance;

/* Load of one layer over a batch, for logging. */
typedef struct {
    float max_frac, min_frac; /* largest and smallest fraction among the E experts */
    float skip_frac;          /* fraction sent to the skip class */
    float entropy;            /* nats, of the (E+1)-class distribution; log(E+1) when uniform */
    float entropy_norm;       /* entropy / log(E+1), in [0, 1] */
    int64_t tokens;           /* total routed */
    double max_over_mean;     /* busiest expert's tokens over the E experts' mean (skip class
                                 excluded; exact from the counts): 1 balanced, E all to one; 0
                                 when no token went to an expert */
} zy_load_summary;

/* Fills the defaults (step_size 1e-3, betas (0.9, 0.999), eps 1e-8). */
void balance_config_default(zy_balance_config *c);
/* Checks the fields; an error names the field, the allowed range and the value found. */
int balance_config_check(const zy_balance_config *c);
/* Allocates zeroed moments for n_layers layers of n_experts experts (+1 skip class). */
int balance_init(zy_balance *b, const zy_balance_config *cfg, int n_layers, int n_experts);
void balance_free(zy_balance *b);
/* One controller step: step += 1, then for every layer l, biases[l] ([E+1], in ctx's memory) is
 * updated from counts[l * (E+1) + e] (host: tokens of the global batch routed to class e of layer
 * l, [L, E+1]), then shifted to the canonical form. A layer that routed no tokens keeps its
 * biases (bit for bit when already canonical). Asynchronous on CUDA; the same bits as the CPU. */
void balance_step(zy_balance *b, zy_ctx *ctx, float *const *biases, const int64_t *counts);
/* One layer's biases [n] (host memory): bias -= delta (none when delta is NULL), then the
 * canonical shift: every class moves by the skip class's distance from ZY_SKIP_BIAS and the skip
 * class is set to it exactly (the routing is unchanged). */
void balance_apply(float *bias, const float *delta, int n);
/* Summarises counts [E+1] (skip last). */
void balance_load_summary(const int64_t *counts, int n_experts, zy_load_summary *out);
/* The expert-load measure of `bench train` and the training log, from counts [L, E+1]: per layer
 * the busiest expert over the experts' mean (max_over_mean; 1 for a layer that routed nothing to
 * an expert), averaged over the layers; *worst (may be NULL) gets the largest layer's. */
double balance_load_ratio(const int64_t *counts, int n_layers, int n_experts, double *worst);
/* Finds "model.layers.N.mlp.gate.balancing_biases" for N in [0, L) in t and points biases[N] at
 * it in params (any device: only pointer arithmetic); an error names a missing tensor or a shape
 * other than [n_experts + 1]. */
int balance_find_biases(const zy_param_table *t, float *params, int n_layers, int n_experts,
                        float **biases);
/* Named state: "balance_exp_avg.model.layers.N.mlp.gate.balancing_biases" and
 * "balance_exp_avg_sq.<same>" [E+1] per layer, pointing into b; a heap array (free() it) of
 * *count entries. The step counter is b->step. */
zy_state_tensor *balance_state_tensors(const zy_balance *b, int *count);

#endif
