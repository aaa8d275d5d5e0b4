/* The ZAYA1 model: its parameter table (HF names), weights/gradients as flat buffers carved by that
 * table, initialisation, parameter counts, and the activation arena of one (B, T) shape.
 * The forward and backward passes (forward.c, backward.c) and decoding (generate.c) are written
 * once against ops.h. */
#ifndef ZY_MODEL_H
#define ZY_MODEL_H

#include "model/config.h"
#include "ops/ops.h"
#include "tensor/params.h"

#include <stdint.h>

#define ZY_IGNORE_INDEX (-100)

/* Pointers to one layer's tensors inside a flat buffer (weights or gradients). */
typedef struct {
    float *wqk;               /* [C, D], C = (Hq+Hk)*d: q_proj rows then k_proj rows (packed) */
    float *wvc, *wvd;         /* [Hk*d/2, D] current / delayed value projections (adjacent: one
                                 [Hk*d, D] matrix for the GEMMs) */
    float *conv1_w, *conv1_b; /* [C, t0], [C] depthwise */
    float *conv2_w, *conv2_b; /* [C, d, t1], [C] grouped */
    float *temp;              /* [Hk] key temperature */
    float *wo;                /* [D, Hq*d] */
    float *ln_in, *ln_post;   /* [D] */
    float *pa_hb, *pa_hs, *pa_rb, *pa_rs; /* [D] post-attention residual scaling */
    float *pm_hb, *pm_hs, *pm_rb, *pm_rs; /* [D] post-MLP residual scaling */
    float *r_down_w, *r_down_b;           /* [R, D], [R] */
    float *r_scale;                       /* [R] depth-averaging scale; NULL in layer 0 */
    float *r_norm;                        /* [R] */
    float *r_fc1_w, *r_fc1_b;             /* [R, R], [R] */
    float *r_fc2_w, *r_fc2_b;             /* [R, R], [R] */
    float *r_out;                         /* [E+1, R] */
    float *bal;                           /* [E+1] balancing biases (buffer, no gradient) */
    float *gate_up;                       /* [E, 2F, D] */
    float *down;                          /* [E, D, F] */
} zy_layer_w;

typedef struct {
    float *emb;                /* [V, D] embedding = tied head */
    float *in_bias, *in_scale; /* [D] */
    float *norm_f;             /* [D] final norm */
    zy_layer_w *layers;        /* [L] */
} zy_weights;

/* The weight matrices the GEMMs read, in the activation dtype: on the CPU these are the fp32
 * master weights themselves; on CUDA a bf16 copy that model_sync_compute_weights refreshes. */
typedef struct {
    zy_act *wqk, *wvc, *wo; /* shapes as in zy_layer_w; wvc is [Wvc; Wvd] [Hk*d, D] */
    zy_act *r_down_w, *r_fc1_w, *r_fc2_w, *r_out; /* router */
    zy_act *gate_up, *down;                       /* experts [E, 2F, D], [E, D, F] */
} zy_layer_wc;

typedef struct {
    zy_act *emb;         /* [V, D] the tied head */
    zy_layer_wc *layers; /* [L] */
} zy_weights_c;

typedef struct {
    zy_config cfg;
    zy_ctx *ctx;
    zy_param_table table;
    float *params;   /* [table.total] on ctx's device (its pages can be given back in part:
                        model_release_masters) */
    float *grads;    /* [table.total] or NULL when built without gradients */
    zy_weights w;    /* views into params */
    zy_weights g;    /* views into grads (all NULL without gradients) */
    void *cparams;   /* [table.total] activation-dtype copy of params (CUDA), NULL on the CPU */
    zy_weights_c wc; /* the GEMMs' weights: views into cparams, or into params on the CPU */
    /* Gradients the backward writes whole with one GEMM each (the matrices, the experts, the
     * tied embedding's head product) are not cleared by model_zero_grads: their first GEMM after
     * it overwrites (beta = grad_beta = 0), later ones accumulate (grad_beta = 1). That saves a
     * clearing pass and a read of each such gradient per step. zero_ranges are the rest. */
    float grad_beta;
    size_t (*zero_ranges)[2]; /* [nzero] {first element, count} cleared by model_zero_grads */
    int nzero;
    /* After model_release_masters: the entries whose fp32 masters are still on the device, as
     * [nkept] {first element, count} runs, and the bytes of params still backed. NULL: all. */
    size_t (*kept)[2];
    int nkept;
    size_t params_resident;
    /* Called by the backward as soon as gradients are final, so they can be communicated while
     * the rest of the backward runs: grads_ready(user, l) right after layer l's backward, for l
     * from the top layer down to 0, then grads_ready(user, -1) at the end. Which entries each
     * call makes final: model_grads_final_at. The work it describes is queued on ctx's stream,
     * not necessarily done. NULL: not called. */
    void (*grads_ready)(void *user, int layer);
    void *grads_ready_user;
    /* Called by the forward before its first read of a group of weights, in order: -1 (the
     * global entries: embedding, final norm) before the embedding, then l = 0, 1, ... before the
     * first read of layer l's entries (layer l+1's before layer l, whose last norm is layer
     * l+1's input norm). So weights still arriving from other ranks (ZeRO-1's broadcast after the
     * update) are waited for only as they are needed. NULL: not called. */
    void (*weights_needed)(void *user, int layer);
    void *weights_needed_user;
} zy_model;

/* The grads_ready call (its layer argument) after which table entry i's gradient is final: the
 * entry's layer, except each layer's input-norm weight, which the backward of the layer below
 * writes (the norm reads that layer's output): l - 1, and -1 for layer 0's (the embedding's
 * backward); -1 for the global entries (embedding, final norm). */
int model_grads_final_at(const zy_model *m, int i);
/* The weights_needed call (its layer argument) before which the forward first reads table entry
 * i, in the table's order (the forward's): the entry's layer; -1 for the global entries before
 * the layers (the embedding), num_hidden_layers for those after them (the final norm, which the
 * call for the last layer covers). */
int model_entry_group(const zy_model *m, int i);
/* Builds the HF parameter table of a config into t (t is initialised here). */
void model_build_table(zy_param_table *t, const zy_config *cfg);
/* Allocates a model for cfg (weights zeroed; with_grads: also a gradient buffer). */
int model_init(zy_model *m, const zy_config *cfg, zy_ctx *ctx, int with_grads);
void model_free(zy_model *m);
/* Fills fresh weights per the spec's initialisation: normal(0, initializer_range) matrices and
 * embedding, zero biases, unit norms and scales, temp 1, balancing biases 0 with skip -1. */
void model_init_weights(zy_model *m, uint64_t seed);
/* Refreshes the compute copy of the weights from the fp32 master weights (one cast kernel on
 * CUDA; nothing on the CPU). Call after any change of m->params (init, load, optimizer step). */
void model_sync_compute_weights(zy_model *m);
/* Sets every weight from host ([table.total] floats laid out as params; on the CPU it may be
 * params itself): the fp32 masters the model keeps and the whole compute copy. */
void model_set_weights(zy_model *m, const float *host);
/* Gives back the device memory of the fp32 masters of the entries with keep[i] == 0 (ZeRO-1 on
 * GPUs: other ranks' matrices, which only their owners' optimizers read, train/zero1.h). From then
 * on only the kept entries' masters may be read or written (model_sync_compute_weights casts only
 * them; model_set_weights writes only them, and every compute copy). The pages of a released entry
 * that it shares with a kept one stay. Nothing goes back on the CPU, where the fp32 weights are the
 * compute weights. */
void model_release_masters(zy_model *m, const unsigned char *keep);
/* Starts a new gradient sum: clears the gradients the backward accumulates into and lets the
 * next backward overwrite the GEMM-written ones (see grad_beta). Until that backward those hold
 * stale values. */
void model_zero_grads(zy_model *m);
/* model_zero_grads with the clearing issued on ctx (a context beside m->ctx: ops_ctx_init_beside),
 * so that it can run beside m->ctx's work; the caller orders it (ops_mark). */
void model_zero_grads_on(zy_model *m, zy_ctx *ctx);

typedef struct {
    int64_t total;           /* every trained parameter (buffers excluded), embedding included */
    int64_t embedding;       /* V*D */
    int64_t active_no_embed; /* parameters one token uses, without the embedding (top-1 expert) */
} zy_param_counts;
zy_param_counts model_count_params(const zy_config *cfg);
/* Model FLOPs of one trained token (forward + backward) at sequence length T, as
 * /work/shared/bench/BASELINES.md defines them for MFU: 6 x (active parameters without the
 * embedding + V x D for the tied head) + 6 x L x T x Hq x d (causal attention). */
double model_train_flops_per_token(const zy_config *cfg, int T);

/* Per-layer buffers of a training forward pass (saved for backward) on N = B*T rows. zy_act
 * buffers hold the context's activation dtype (bf16 on CUDA); float buffers are always fp32.
 * With activation recomputation (acts_init's recompute) only h_in, a, rstd_a and z are each
 * layer's own: what the previous layer's forward writes (its output, normed) and what the next
 * layer's router reads (z). Every other field of every layer points into one shared set, which
 * the backward refills by running the layer's forward again just before its backward. */
typedef struct {
    float *h_in;         /* [N, D] residual stream entering the layer (kept) */
    zy_act *a;           /* [N, D] input_layernorm output (kept) */
    float *rstd_a;       /* [N] (kept) */
    zy_act *qk0;         /* [N, C] */
    zy_act *mid;         /* [B, T+t1-1, C] depthwise conv output */
    zy_act *q, *k;       /* [N, Hq*d], [N, Hk*d] after norm + rope */
    zy_act *q_in, *k_in; /* [N, Hq*d], [N, Hk*d] before norm */
    float *qn, *kn;      /* [N, Hq], [N, Hk] */
    zy_act *vv;          /* [N, Hk*d]: [vcur | vdel], the two value projections (one GEMM) */
    zy_act *v;           /* [N, Hk*d] */
    zy_act *att;         /* [N, Hq*d] attention output */
    float *lse;          /* [B, Hq, T] */
    zy_act *o;           /* [N, D] o_proj output */
    float *h_mid;        /* [N, D] stream after attention */
    zy_act *m;           /* [N, D] post_attention_layernorm output */
    float *rstd_m;       /* [N] */
    zy_act *z;           /* [N, R] router state after depth averaging (kept: the next r_prev) */
    zy_act *u0;          /* [N, R] router norm output */
    float *rstd_z;       /* [N] */
    zy_act *f1, *g1;     /* [N, R] fc1 pre/post GELU */
    zy_act *f2, *g2;     /* [N, R] fc2 pre/post GELU */
    zy_act *rlogits;     /* [N, E+1] */
    float *probs;        /* [N, E+1] */
    int32_t *choice;     /* [N] class in [0, E] (E = skip) */
    float *gate;         /* [N] unbiased probability of the chosen expert, 0 for skip */
    int32_t *counts, *offsets, *perm; /* [E], [E+1], [N] */
    int32_t *offsets_host;            /* [E+1] host copy of offsets (the expert GEMM loop) */
    int nrouted; /* routed rows; -1 after a forward that did not wait (model_routing_fetch) */
    zy_act *xs;  /* [N, D] rows gathered by expert */
    zy_act *gu;  /* [N, 2F] */
    zy_act *act; /* [N, F] SwiGLU output */
    zy_act *ys;  /* [N, D] expert outputs (sorted rows) */
    zy_act *y;   /* [N, D] MoE output */
} zy_layer_acts;

typedef struct {
    int B, T;
    int32_t *ids;     /* [N] device ids */
    int32_t *targets; /* [N] */
    int32_t *pos;     /* [N] positions t */
    zy_layer_acts *layers;
    float *h_final; /* [N, D] stream after the last layer */
    zy_act *xf;     /* [N, D] final norm output */
    float *rstd_f;  /* [N] */
    zy_act *logits; /* [N, V] (overwritten by dlogits in backward) */
    /* backward scratch: dh, dh2 follow the fp32 residual stream; the rest are activation grads */
    float *dh, *dh2;
    zy_act *dx, *dm, *dz, *dz_carry, *dr, *dr2, *dqk, *dq, *dk, *dv, *dvv, *datt, *dys, *dgu, *dact,
        *dxs;
    float *dgate;
    int count;     /* counted targets of the last forward */
    int recompute; /* 1: layers share their buffers but h_in, a, rstd_a, z (see zy_layer_acts) */
    void *arena;
    int32_t *host_offsets;   /* [L, E+1] backing of the layers' offsets_host */
    zy_loss_host *loss_host; /* page-locked: the queued loss of the last forward */
    zy_mark *loss_mark;      /* after the loss's copy (model_forward_loss_queued) */
    zy_mark *routing_mark;   /* after the last dispatch that did not wait (moe_forward) */
} zy_acts;

/* Bytes of the arena acts_init allocates for [B, T] on ctx; SIZE_MAX when that is past size_t. */
size_t acts_bytes(const zy_config *cfg, zy_ctx *ctx, int B, int T, int recompute);
/* Allocates activations for batch B of length T (one arena). recompute 1: activation
 * recomputation, each layer keeps only its input (h_in, a, rstd_a) and router state z, the rest
 * is one layer's set that the backward refills per layer (one more forward of each layer but the
 * last; the same results to the bit, as every op is deterministic). */
int acts_init(zy_acts *a, const zy_model *m, int B, int T, int recompute);
void acts_free(zy_acts *a, const zy_model *m);

/* Training/eval forward on ids [B,T] (device memory) with targets [B,T] (ZY_IGNORE_INDEX to skip;
 * NULL: no loss). Returns the SUM of token losses; a->count gets the counted tokens; a->logits
 * holds [N,V] logits. */
double model_forward(zy_model *m, zy_acts *a, const int32_t *ids, const int32_t *targets);
/* Backward of the last forward: adds d(loss_sum * loss_scale)/dparam into m->grads. With
 * recomputation it runs each layer's forward again first (not the last layer's: the shared set
 * still holds it), without calling weights_needed: the forward had every weight. */
void model_backward(zy_model *m, zy_acts *a, float loss_scale);
/* model_forward; when grad_scale != 0 the loss pass also writes dlogits (scaled) over a->logits,
 * the first step of the backward. */
double model_forward_loss(zy_model *m, zy_acts *a, const int32_t *ids, const int32_t *targets,
                          float grad_scale);
/* The backward once a->logits holds dlogits (model_forward_loss with a gradient scale): what
 * model_backward runs after its loss pass. */
void model_backward_from_dlogits(zy_model *m, zy_acts *a);
/* model_forward_loss without waiting for the loss: it arrives in a->loss_host, read by
 * model_loss_wait (which also sets a->count), so the host can issue more work first. */
void model_forward_loss_queued(zy_model *m, zy_acts *a, const int32_t *ids, const int32_t *targets,
                               float grad_scale);
double model_loss_wait(zy_model *m, zy_acts *a);
/* model_forward then model_backward, with the loss and dlogits computed in one pass over the
 * logits. Returns the summed loss like model_forward, read after the backward is issued. */
double model_forward_backward(zy_model *m, zy_acts *a, const int32_t *ids, const int32_t *targets,
                              float loss_scale);
/* Per-layer routed class counts of the last forward: out [L, E+1] (host); fetches the routing of a
 * forward that did not wait for it first (model_routing_fetch). */
void model_route_counts(zy_model *m, zy_acts *a, int64_t *out);
/* After a forward whose MoE did not wait for its dispatches (moe_forward in forward.c): waits for
 * the device and reads each such layer's routed row count from its host offsets (nrouted). The
 * backward calls it first; nothing to do after a forward that waited. */
void model_routing_fetch(zy_model *m, zy_acts *a);

#endif
