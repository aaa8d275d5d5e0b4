/* The ZAYA1 forward pass, written once against ops.h (see model.h and the spec). */
#include "model/forward.h"
#include "base/err.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Routes the rows of m to their experts and combines the weighted expert outputs into y. Where
 * the expert GEMMs read the offsets on the device (ops_experts_grouped), the gather and the
 * combine run over all N rows of perm (the skipped rows last, their gate 0), the activation comes
 * out of the gate_up GEMM for the routed rows, and nothing waits for the dispatch: the routed count
 * reaches the host with the backward (model_routing_fetch). With recomputation the dispatch still
 * waits (the backward's recomputed layer needs its count at once), but the kernels are the same, so
 * the bits are too. */
static void moe_forward(zy_model *mo, zy_acts *a, zy_layer_acts *x, const zy_layer_wc *wc, int N) {
    zy_ctx *ctx = mo->ctx;
    const zy_config *c = &mo->cfg;
    const int D = c->hidden_size, F = c->moe_intermediate_size, E = c->num_experts;
    const int grouped = ops_experts_grouped(ctx, E, 2 * F, D) && ops_experts_grouped(ctx, E, D, F);
    if (grouped && !a->recompute) {
        ops_moe_dispatch_async(ctx, x->counts, x->offsets, x->offsets_host, x->perm, x->choice, N,
                               E);
        ops_mark(ctx, a->routing_mark); /* this layer's offsets are on the host past it */
        x->nrouted = -1;                /* on the host after model_routing_fetch */
    } else {
        x->nrouted =
            ops_moe_dispatch(ctx, x->counts, x->offsets, x->offsets_host, x->perm, x->choice, N, E);
    }
    const int rows = grouped ? N : x->nrouted;
    ops_gather_rows(ctx, x->xs, x->m, x->perm, rows, D);
    /* gu[rows of e] = xs @ gate_up[e]^T; ys[rows of e] = act @ down[e]^T */
    if (grouped) { /* act's rows past the routed ones are not written: nothing reads them */
        ops_expert_swiglu_grouped(ctx, x->gu, x->act, x->xs, wc->gate_up, x->offsets, E, F, D, N);
    } else {
        ops_expert_matmul(ctx, x->gu, x->xs, wc->gate_up, x->offsets_host, E, 2 * F, D, 0);
        ops_swiglu_fwd(ctx, x->act, x->gu, rows, F);
    }
    if (grouped)
        ops_expert_matmul_grouped(ctx, x->ys, x->act, wc->down, x->offsets, E, D, F, N);
    else
        ops_expert_matmul(ctx, x->ys, x->act, wc->down, x->offsets_host, E, D, F, 0);
    ops_moe_combine(ctx, x->y, x->ys, x->gate, x->perm, rows, N, D);
}

void model_routing_fetch(zy_model *m, zy_acts *a) {
    const int L = m->cfg.num_hidden_layers, N = a->B * a->T, E = m->cfg.num_experts;
    int synced = 0;
    for (int l = 0; l < L; l++) {
        zy_layer_acts *x = &a->layers[l];
        if (x->nrouted >= 0) continue;
        /* the last dispatch's copy has landed, and with it the earlier ones (one stream); the
         * host does not wait for the rest of the forward */
        if (!synced) ops_mark_wait_host(m->ctx, a->routing_mark);
        synced = 1;
        x->nrouted = ops_moe_routed(x->offsets_host, N, E);
    }
}

/* Router: z = m Wdown + b (+ r_prev * g), then norm, two GELU layers, logits, biased top-1. */
static void router_forward(zy_model *mo, zy_layer_acts *x, const zy_layer_w *w,
                           const zy_layer_wc *wc, const zy_act *r_prev, int N) {
    zy_ctx *ctx = mo->ctx;
    const zy_config *c = &mo->cfg;
    const int D = c->hidden_size, R = c->router_hidden_size, E1 = c->num_experts + 1;
    ops_matmul(ctx, x->z, x->m, wc->r_down_w, N, R, D, 0, 1, 1.0f, 0.0f);
    ops_router_norm_fwd(ctx, x->z, x->u0, x->rstd_z, w->r_down_b, r_prev, w->r_scale, w->r_norm, N,
                        R, (float)c->rms_norm_eps);
    ops_matmul(ctx, x->f1, x->u0, wc->r_fc1_w, N, R, R, 0, 1, 1.0f, 0.0f);
    ops_bias_gelu_fwd(ctx, x->g1, x->f1, w->r_fc1_b, N, R);
    ops_matmul(ctx, x->f2, x->g1, wc->r_fc2_w, N, R, R, 0, 1, 1.0f, 0.0f);
    ops_bias_gelu_fwd(ctx, x->g2, x->f2, w->r_fc2_b, N, R);
    ops_matmul(ctx, x->rlogits, x->g2, wc->r_out, N, E1, R, 0, 1, 1.0f, 0.0f);
    ops_router_select(ctx, x->probs, x->choice, x->gate, x->rlogits, w->bal, N, E1);
}

/* Keeps the last P rows of [state; chunk] per sequence as the new convolution state. */
static void cache_update_conv(zy_ctx *ctx, zy_layer_cache *cc, const zy_act *qk0, int B, int T,
                              int P, int C) {
    if (P == 0) return;
    size_t row = (size_t)C * ops_act_size(ctx);
    char *tmp = zy_malloc((size_t)(P + T) * row);
    for (int b = 0; b < B; b++) {
        zy_act *st = ops_act_at(ctx, cc->conv_state, (size_t)b * P * C);
        ops_copy(ctx, tmp, st, (size_t)P * row); /* device-to-host copies on the GPU path */
        ops_copy(ctx, tmp + (size_t)P * row, ops_act_at(ctx, qk0, (size_t)b * T * C),
                 (size_t)T * row);
        ops_copy(ctx, st, tmp + (size_t)T * row, (size_t)P * row);
    }
    free(tmp);
}

zy_next_norm next_norm(zy_model *m, zy_acts *a, int l) {
    zy_next_norm n;
    n.last = l + 1 == m->cfg.num_hidden_layers;
    if (n.last) {
        n.h = a->h_final, n.y = a->xf, n.rstd = a->rstd_f, n.w = m->w.norm_f, n.gw = m->g.norm_f;
    } else {
        zy_layer_acts *x = &a->layers[l + 1];
        n.h = x->h_in, n.y = x->a, n.rstd = x->rstd_a, n.w = m->w.layers[l + 1].ln_in;
        n.gw = m->grads ? m->g.layers[l + 1].ln_in : NULL;
    }
    return n;
}

void layer_forward(zy_model *mo, zy_acts *a, int l, zy_layer_cache *cache, int next) {
    zy_ctx *ctx = mo->ctx;
    const zy_config *c = &mo->cfg;
    const zy_layer_w *w = &mo->w.layers[l];
    const zy_layer_wc *wc = &mo->wc.layers[l];
    zy_layer_acts *x = &a->layers[l];
    const int B = a->B, T = a->T, N = B * T, D = c->hidden_size, d = c->head_dim;
    const int Hq = c->num_attention_heads, Hk = c->num_key_value_heads, C = (Hq + Hk) * d;
    const int half = Hk * d / 2, t0 = c->cca_time0, t1 = c->cca_time1, P = t0 - 1 + t1 - 1;
    const int type = c->layer_types[l];
    const int window = type == ZY_LAYER_HYBRID_SLIDING ? c->sliding_window : 0;
    const float eps = (float)c->rms_norm_eps, scale = 1.0f / sqrtf((float)d);
    const zy_act *r_prev = l > 0 ? a->layers[l - 1].z : NULL;

    /* attention block (x->a = input norm of h_in) */
    ops_matmul(ctx, x->qk0, x->a, wc->wqk, N, C, D, 0, 1, 1.0f, 0.0f); /* [q0 | k0] */
    /* the conv's q and k are the QK norm's inputs, which its backward reads */
    ops_cca_conv_fwd(ctx, x->q_in, x->k_in, x->mid, x->qk0, cache ? cache->conv_state : NULL,
                     w->conv1_w, w->conv1_b, w->conv2_w, w->conv2_b, B, T, Hq, Hk, d, t0, t1);
    /* [vcur | vdel] = a [Wvc; Wvd]^T: the two value projections as one GEMM (adjacent weights) */
    ops_matmul(ctx, x->vv, x->a, wc->wvc, N, 2 * half, D, 0, 1, 1.0f, 0.0f);
    ops_value_delay_fwd(ctx, x->v, x->vv, cache ? cache->vprev : NULL, B, T, half);
    ops_qknorm_rope_fwd(ctx, x->q, x->k, x->qn, x->kn, x->q_in, x->k_in, w->temp, a->pos, N, Hq, Hk,
                        d, config_rotary_dim(c, l), c->rope[type].theta, FLT_EPSILON);
    if (cache && cache->len > 0) {
        ZY_CHECKF(T == 1, "decoding after a prefill takes one token at a time (got %d)", T);
        size_t kv = (size_t)Hk * d, kvb = kv * ops_act_size(ctx);
        for (int b = 0; b < B; b++) {
            size_t at = ((size_t)b * cache->Tmax + cache->len) * kv;
            ops_copy(ctx, ops_act_at(ctx, cache->kc, at), ops_act_at(ctx, x->k, b * kv), kvb);
            ops_copy(ctx, ops_act_at(ctx, cache->vc, at), ops_act_at(ctx, x->v, b * kv), kvb);
        }
        ops_attention_decode(ctx, x->att, x->q, cache->kc, cache->vc, B, cache->len + 1,
                             cache->Tmax, Hq, Hk, d, scale, window);
    } else {
        ops_attention_fwd(ctx, x->att, x->lse, x->q, x->k, x->v, B, T, Hq, Hk, d, scale, window);
        if (cache) {
            size_t kv = (size_t)Hk * d;
            for (int b = 0; b < B; b++) {
                size_t at = (size_t)b * cache->Tmax * kv, src = (size_t)b * T * kv;
                size_t bytes = (size_t)T * kv * ops_act_size(ctx);
                ops_copy(ctx, ops_act_at(ctx, cache->kc, at), ops_act_at(ctx, x->k, src), bytes);
                ops_copy(ctx, ops_act_at(ctx, cache->vc, at), ops_act_at(ctx, x->v, src), bytes);
            }
        }
    }
    if (cache) {
        cache_update_conv(ctx, cache, x->qk0, B, T, P, C);
        for (int b = 0; b < B; b++) /* the last token's delayed projection feeds the next token */
            ops_copy(ctx, ops_act_at(ctx, cache->vprev, (size_t)b * half),
                     ops_act_at(ctx, x->vv, ((size_t)b * T + T - 1) * 2 * half + half),
                     (size_t)half * ops_act_size(ctx));
    }
    ops_matmul(ctx, x->o, x->att, wc->wo, N, D, Hq * d, 0, 1, 1.0f, 0.0f);
    ops_resnorm_fwd(ctx, x->h_mid, x->m, x->rstd_m, x->o, x->h_in, w->pa_hb, w->pa_hs, w->pa_rb,
                    w->pa_rs, w->ln_post, N, D, eps);

    /* MoE block (x->m = post-attention norm of h_mid) */
    router_forward(mo, x, w, wc, r_prev, N);
    moe_forward(mo, a, x, wc, N);
    if (!next) return;
    const zy_next_norm nn = next_norm(mo, a, l);
    ops_resnorm_fwd(ctx, nn.h, nn.y, nn.rstd, x->y, x->h_mid, w->pm_hb, w->pm_hs, w->pm_rb,
                    w->pm_rs, nn.w, N, D, eps);
}

static void weights_needed(zy_model *m, int layer) {
    if (m->weights_needed) m->weights_needed(m->weights_needed_user, layer);
}

void trunk_forward(zy_model *m, zy_acts *a, zy_layer_cache *caches) {
    const zy_config *c = &m->cfg;
    const int N = a->B * a->T, D = c->hidden_size, V = c->vocab_size;
    zy_layer_acts *x0 = &a->layers[0];
    weights_needed(m, -1);
    ops_embed_fwd(m->ctx, x0->h_in, m->w.emb, a->ids, m->w.in_bias, m->w.in_scale, N, D);
    weights_needed(m, 0);
    ops_rmsnorm_fwd(m->ctx, x0->a, x0->rstd_a, x0->h_in, ZY_DTYPE_F32, m->w.layers[0].ln_in, N, D,
                    (float)c->rms_norm_eps);
    for (int l = 0; l < c->num_hidden_layers; l++) {
        if (l + 1 < c->num_hidden_layers) weights_needed(m, l + 1); /* its input norm ends l */
        layer_forward(m, a, l, caches ? &caches[l] : NULL, 1);
    }
    ops_matmul(m->ctx, a->logits, a->xf, m->wc.emb, N, V, D, 0, 1, 1.0f, 0.0f); /* tied head */
}

/* Fills positions 0..T-1 per sequence (host-built, copied to the device). */
static void fill_positions(zy_model *m, zy_acts *a, int offset) {
    int N = a->B * a->T;
    int32_t *pos = zy_malloc((size_t)N * sizeof *pos);
    for (int n = 0; n < N; n++) pos[n] = offset + n % a->T;
    ops_copy(m->ctx, a->pos, pos, (size_t)N * sizeof *pos);
    free(pos);
}

double model_forward(zy_model *m, zy_acts *a, const int32_t *ids, const int32_t *targets) {
    return model_forward_loss(m, a, ids, targets, 0.0f);
}

void model_forward_loss_queued(zy_model *m, zy_acts *a, const int32_t *ids, const int32_t *targets,
                               float grad_scale) {
    const zy_config *c = &m->cfg;
    const int N = a->B * a->T;
    ops_copy(m->ctx, a->ids, ids, (size_t)N * sizeof *ids);
    if (targets) ops_copy(m->ctx, a->targets, targets, (size_t)N * sizeof *targets);
    fill_positions(m, a, 0);
    trunk_forward(m, a, NULL);
    a->count = 0;
    if (!targets) return;
    /* with a gradient scale the same pass leaves dlogits in place of the logits */
    ops_xent_fwd_bwd_queued(m->ctx, grad_scale != 0.0f ? a->logits : NULL, a->logits, a->targets, N,
                            c->vocab_size, ZY_IGNORE_INDEX, grad_scale != 0.0f ? grad_scale : 1.0f,
                            a->loss_host);
    ops_mark(m->ctx, a->loss_mark);
}

double model_loss_wait(zy_model *m, zy_acts *a) {
    ops_mark_wait_host(m->ctx, a->loss_mark);
    a->count = a->loss_host->count;
    return a->loss_host->sum;
}

double model_forward_loss(zy_model *m, zy_acts *a, const int32_t *ids, const int32_t *targets,
                          float grad_scale) {
    model_forward_loss_queued(m, a, ids, targets, grad_scale);
    return targets ? model_loss_wait(m, a) : 0.0;
}

void model_route_counts(zy_model *m, zy_acts *a, int64_t *out) {
    const int N = a->B * a->T, E = m->cfg.num_experts, E1 = E + 1;
    model_routing_fetch(m, a); /* a forward that did not wait: its counts, checked */
    for (int l = 0; l < m->cfg.num_hidden_layers; l++) { /* from the host copy of the offsets */
        const int32_t *off = a->layers[l].offsets_host;
        for (int e = 0; e < E; e++) out[(size_t)l * E1 + e] = off[e + 1] - off[e];
        out[(size_t)l * E1 + E] = N - a->layers[l].nrouted;
    }
}
