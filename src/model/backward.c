/* The ZAYA1 backward pass, the mirror of forward.c: every parameter's gradient, accumulated into
 * m->grads. Gradient flow per layer, from the top: post-MLP residual scaling -> experts -> router
 * (through the unbiased gate probability, and the depth-averaging chain to the next layer's
 * router) -> post-attention norm -> post-attention residual scaling -> o_proj -> attention ->
 * QK norm/rope -> value delay / CCA convolutions -> projections -> input norm. */
#include "base/err.h"
#include "model/forward.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

static void router_backward(zy_model *mo, zy_acts *a, int l);

/* dY [N,D] (grad of the MoE output) -> a->dm [N,D] (overwritten: the experts' and the router's
 * input gradients), expert and router grads. The router's backward needs only the gate gradient,
 * so it runs while the down projection's expert GEMMs are still busy on the side streams. */
static void moe_backward(zy_model *mo, zy_acts *a, int l, const zy_act *dY) {
    zy_ctx *ctx = mo->ctx;
    const zy_config *c = &mo->cfg;
    const zy_layer_wc *wc = &mo->wc.layers[l];
    const zy_layer_w *g = &mo->g.layers[l];
    zy_layer_acts *x = &a->layers[l];
    const int N = a->B * a->T, D = c->hidden_size, F = c->moe_intermediate_size;
    const int E = c->num_experts;
    const int32_t *off = x->offsets_host; /* the forward's routing, still on the host */
    ops_moe_combine_bwd(ctx, a->dys, a->dgate, dY, x->ys, x->gate, x->perm, x->nrouted, N, D);
    /* dact = dys @ down[e]; ddown[e] += dys^T act (left running) */
    ops_expert_matmul_bwd(ctx, a->dact, g->down, a->dys, x->act, wc->down, off, x->offsets, E, D, F,
                          mo->grad_beta, 0);
    router_backward(mo, a, l); /* touches none of dact, ddown, dys, act, down; writes dm */
    ops_expert_join(ctx);
    ops_swiglu_bwd(ctx, a->dgu, a->dact, x->gu, x->nrouted, F);
    /* dxs = dgu @ gate_up[e]; dgate_up[e] += dgu^T xs */
    ops_expert_matmul_bwd(ctx, a->dxs, g->gate_up, a->dgu, x->xs, wc->gate_up, off, x->offsets, E,
                          2 * F, D, mo->grad_beta, 1);
    ops_scatter_add_rows(ctx, a->dm, a->dxs, x->perm, x->nrouted, D);
}

/* a->dgate -> router grads; writes the router's input gradient to a->dm (its first write: the
 * experts' are added after); leaves dz (this layer's
 * router state gradient, before depth averaging) and updates a->dz_carry for layer l-1. */
static void router_backward(zy_model *mo, zy_acts *a, int l) {
    zy_ctx *ctx = mo->ctx;
    const float gb = mo->grad_beta; /* 0: first gradient of this sum, overwrite */
    const zy_config *c = &mo->cfg;
    const zy_layer_w *w = &mo->w.layers[l], *g = &mo->g.layers[l];
    const zy_layer_wc *wc = &mo->wc.layers[l];
    zy_layer_acts *x = &a->layers[l];
    const int N = a->B * a->T, D = c->hidden_size, R = c->router_hidden_size;
    const int E1 = c->num_experts + 1;
    ops_router_bwd(ctx, a->dr, a->dgate, x->probs, x->choice, N, E1);
    /* logits = g2 @ out^T */
    ops_matmul_f32(ctx, g->r_out, a->dr, x->g2, E1, R, N, 1, 0, 1.0f, gb);
    ops_matmul(ctx, a->dr2, a->dr, wc->r_out, N, R, E1, 0, 0, 1.0f, 0.0f);
    /* g2 = GELU(f2), f2 = g1 @ fc2^T + b2 */
    ops_gelu_bias_bwd(ctx, a->dr2, g->r_fc2_b, a->dr2, x->f2, N, R);
    ops_matmul_f32(ctx, g->r_fc2_w, a->dr2, x->g1, R, R, N, 1, 0, 1.0f, gb);
    ops_matmul(ctx, a->dr, a->dr2, wc->r_fc2_w, N, R, R, 0, 0, 1.0f, 0.0f);
    /* g1 = GELU(f1), f1 = u0 @ fc1^T + b1 */
    ops_gelu_bias_bwd(ctx, a->dr, g->r_fc1_b, a->dr, x->f1, N, R);
    ops_matmul_f32(ctx, g->r_fc1_w, a->dr, x->u0, R, R, N, 1, 0, 1.0f, gb);
    ops_matmul(ctx, a->dr2, a->dr, wc->r_fc1_w, N, R, R, 0, 0, 1.0f, 0.0f);
    /* z is also the next layer's r_prev: its gradient arrives in dz_carry, and the one for the
     * layer below leaves there (r_prev = its z) */
    ops_router_norm_bwd(ctx, a->dz, g->r_norm, g->r_scale, g->r_down_b, a->dz_carry,
                        l + 1 < c->num_hidden_layers, a->dr2, x->z,
                        l > 0 ? a->layers[l - 1].z : NULL, w->r_norm, x->rstd_z, w->r_scale, N, R);
    /* z = m @ down^T + b */
    ops_matmul_f32(ctx, g->r_down_w, a->dz, x->m, R, D, N, 1, 0, 1.0f, gb);
    ops_matmul(ctx, a->dm, a->dz, wc->r_down_w, N, D, R, 0, 0, 1.0f, 0.0f);
}

/* On entry a->dx is the gradient w.r.t. the output of the norm that reads this layer's output
 * (the next layer's input norm, or the final norm) and a->dh the gradient w.r.t. the output
 * through the next layer's residual (ignored for the last layer). On exit a->dx is the gradient
 * w.r.t. this layer's input norm output x->a and a->dh w.r.t. h_in through the residual. */
static void layer_backward(zy_model *mo, zy_acts *a, int l) {
    zy_ctx *ctx = mo->ctx;
    const float gb = mo->grad_beta;
    const zy_config *c = &mo->cfg;
    const zy_layer_w *w = &mo->w.layers[l], *g = &mo->g.layers[l];
    const zy_layer_wc *wc = &mo->wc.layers[l];
    zy_layer_acts *x = &a->layers[l];
    const int B = a->B, T = a->T, N = B * T, D = c->hidden_size, d = c->head_dim;
    const int Hq = c->num_attention_heads, Hk = c->num_key_value_heads, C = (Hq + Hk) * d;
    const int half = Hk * d / 2, type = c->layer_types[l];
    const int window = type == ZY_LAYER_HYBRID_SLIDING ? c->sliding_window : 0;
    const float scale = 1.0f / sqrtf((float)d);

    const zy_next_norm nn = next_norm(mo, a, l);

    /* next norm of h_out = (y + hb) * hs + (h_mid + rb) * rs: dY -> a->dx, dh_mid -> a->dh2 */
    ops_resnorm_bwd(ctx, a->dx, a->dh2, nn.gw, g->pm_hb, g->pm_hs, g->pm_rb, g->pm_rs, a->dx,
                    nn.last ? NULL : a->dh, nn.h, nn.rstd, nn.w, x->y, x->h_mid, w->pm_hb, w->pm_hs,
                    w->pm_rb, w->pm_rs, N, D);
    moe_backward(mo, a, l, a->dx);

    /* post-attention norm of h_mid = (o + hb) * hs + (h_in + rb) * rs: do -> a->dm, dh_in -> a->dh
     */
    ops_resnorm_bwd(ctx, a->dm, a->dh, g->ln_post, g->pa_hb, g->pa_hs, g->pa_rb, g->pa_rs, a->dm,
                    a->dh2, x->h_mid, x->rstd_m, w->ln_post, x->o, x->h_in, w->pa_hb, w->pa_hs,
                    w->pa_rb, w->pa_rs, N, D);
    ops_matmul_f32(ctx, g->wo, a->dm, x->att, D, Hq * d, N, 1, 0, 1.0f, gb);
    ops_matmul(ctx, a->datt, a->dm, wc->wo, N, Hq * d, D, 0, 0, 1.0f, 0.0f);
    ops_attention_bwd(ctx, a->dq, a->dk, a->dv, a->datt, x->att, x->lse, x->q, x->k, x->v, B, T, Hq,
                      Hk, d, scale, window);
    ops_qknorm_rope_bwd(ctx, a->dq, a->dk, g->temp, x->q_in, x->k_in, x->qn, x->kn, w->temp, a->pos,
                        N, Hq, Hk, d, config_rotary_dim(c, l), c->rope[type].theta, FLT_EPSILON);
    ops_value_delay_bwd(ctx, a->dvv, a->dv, B, T, half);
    ops_cca_conv_bwd(ctx, a->dqk, g->conv1_w, g->conv1_b, g->conv2_w, g->conv2_b, a->dq, a->dk,
                     x->qk0, x->mid, w->conv1_w, w->conv2_w, B, T, Hq, Hk, d, c->cca_time0,
                     c->cca_time1);
    /* projections from a: [q0|k0] = a Wqk^T, [vcur|vdel] = a [Wvc; Wvd]^T */
    ops_matmul_f32(ctx, g->wqk, a->dqk, x->a, C, D, N, 1, 0, 1.0f, gb);
    ops_matmul_f32(ctx, g->wvc, a->dvv, x->a, 2 * half, D, N, 1, 0, 1.0f, gb);
    ops_matmul(ctx, a->dx, a->dqk, wc->wqk, N, D, C, 0, 0, 1.0f, 0.0f);
    ops_matmul(ctx, a->dx, a->dvv, wc->wvc, N, D, 2 * half, 0, 0, 1.0f, 1.0f);
}

static void grads_ready(zy_model *m, int layer) {
    if (m->grads_ready) m->grads_ready(m->grads_ready_user, layer);
}

/* The backward from dlogits (in a->logits) down to the embedding. Layer l's gradients are final
 * right after its backward, all but its input-norm weight's, which layer l-1's backward writes
 * (the norm reading layer l-1's output; model_grads_final_at). With recomputation each layer but
 * the last (whose activations the forward left in the shared set) first runs its forward again from
 * what it kept; its weights are there since the forward, so weights_needed is not called. */
void model_backward_from_dlogits(zy_model *m, zy_acts *a) {
    ZY_CHECKF(m->grads != NULL, "model built without gradients");
    zy_ctx *ctx = m->ctx;
    const zy_config *c = &m->cfg;
    const int N = a->B * a->T, D = c->hidden_size, V = c->vocab_size;
    const float gb = m->grad_beta; /* the head's product comes before embed_bwd's sums */
    model_routing_fetch(m, a);     /* the layers' routed counts, for their MoE backward */
    ops_matmul_f32(ctx, m->g.emb, a->logits, a->xf, V, D, N, 1, 0, 1.0f, gb); /* tied head */
    ops_matmul(ctx, a->dx, a->logits, m->wc.emb, N, D, V, 0, 0, 1.0f, 0.0f);
    for (int l = c->num_hidden_layers - 1; l >= 0; l--) {
        if (a->recompute && l + 1 < c->num_hidden_layers) layer_forward(m, a, l, NULL, 0);
        layer_backward(m, a, l);
        grads_ready(m, l);
    }
    /* layer 0's input norm reads the embedding's output */
    const zy_layer_acts *x0 = &a->layers[0];
    ops_rmsnorm_bwd(ctx, a->dh, m->g.layers[0].ln_in, a->dx, x0->h_in, ZY_DTYPE_F32,
                    m->w.layers[0].ln_in, x0->rstd_a, N, D, 1);
    ops_embed_bwd(ctx, m->g.emb, m->g.in_bias, m->g.in_scale, a->dh, m->w.emb, a->ids, m->w.in_bias,
                  m->w.in_scale, N, D, c->pad_token_id);
    grads_ready(m, -1);
    m->grad_beta = 1.0f; /* every GEMM-written gradient holds a value now: accumulate */
}

void model_backward(zy_model *m, zy_acts *a, float loss_scale) {
    const int N = a->B * a->T;
    int count;
    /* logits -> dlogits in place */
    ops_xent_fwd_bwd(m->ctx, a->logits, a->logits, a->targets, N, m->cfg.vocab_size,
                     ZY_IGNORE_INDEX, loss_scale, &count);
    model_backward_from_dlogits(m, a);
}

double model_forward_backward(zy_model *m, zy_acts *a, const int32_t *ids, const int32_t *targets,
                              float loss_scale) {
    /* the loss is read once the backward is issued: the host does not stop between the two */
    model_forward_loss_queued(m, a, ids, targets, loss_scale);
    model_backward_from_dlogits(m, a);
    return targets ? model_loss_wait(m, a) : 0.0;
}
