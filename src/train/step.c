/* The training step (see step.h). */
#include "train/step.h"
#include "base/err.h"
#include "optim/clip.h"
#include "train/zero1.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const phase_names[ZY_STEP_NPHASES] = {"zero_grads",    "forward", "backward",
                                                         "route_counts",  "clip",    "optimizer",
                                                         "share_weights", "balance"};

const char *step_phase_name(zy_step_phase p) {
    return p >= 0 && p < ZY_STEP_NPHASES ? phase_names[p] : "?";
}

int step_init_model(zy_step *s, zy_ctx *ctx, const zy_config *mc, int B, int T, int with_grads) {
    memset(s, 0, sizeof *s);
    s->ctx = ctx;
    s->B = B;
    s->T = T;
    ZY_TRY(model_init(&s->model, mc, ctx, with_grads));
    s->have_model = 1;
    const size_t N = (size_t)B * T;
    const size_t LE1 = (size_t)mc->num_hidden_layers * (mc->num_experts + 1);
    s->ids = zy_malloc(N * sizeof *s->ids);
    s->targets = zy_malloc(N * sizeof *s->targets);
    s->counts = zy_calloc(LE1, sizeof *s->counts);
    s->step_counts = zy_calloc(LE1, sizeof *s->step_counts);
    return ZY_OK;
}

int step_init_acts(zy_step *s, int recompute) {
    s->recompute = recompute != 0;
    ZY_TRY(acts_init(&s->acts, &s->model, s->B, s->T, s->recompute));
    s->have_acts = 1;
    return ZY_OK;
}

int step_reshape(zy_step *s, int B, int T) {
    if (B == s->B && T == s->T) return ZY_OK;
    const int had_acts = s->have_acts;
    if (had_acts) acts_free(&s->acts, &s->model);
    s->have_acts = 0;
    free(s->ids);
    free(s->targets);
    s->B = B;
    s->T = T;
    s->ids = zy_malloc((size_t)B * T * sizeof *s->ids);
    s->targets = zy_malloc((size_t)B * T * sizeof *s->targets);
    return had_acts ? step_init_acts(s, s->recompute) : ZY_OK;
}

int step_overlaps(int wanted, int world) {
    return wanted && world == 1; /* ZeRO-1's ranks share each group's weights instead */
}

static int world_of(const zy_step *s) {
    return s->comm ? s->comm->world : 1;
}

void step_owned(const zy_step *s, int *first, int *last) {
    if (s->have_zero) {
        zero1_owned(&s->zero, first, last);
        return;
    }
    *first = 0;
    *last = s->model.table.count;
}

int step_init_training(zy_step *s, const zy_step_config *cfg, const zy_optim_config *oc,
                       const zy_balance_config *bc) {
    const int L = s->model.cfg.num_hidden_layers, E = s->model.cfg.num_experts;
    if (cfg->grad_accum < 1)
        return zy_fail("grad_accum must be at least 1, got %d", cfg->grad_accum);
    s->cfg = *cfg;
    if (world_of(s) > 1) {
        zero1_init(&s->zero, s->comm, &s->model, oc);
        s->have_zero = 1;
        zero1_release_masters(&s->zero); /* before the optimizer's state takes the memory */
    }
    const zy_param_table *t = &s->model.table;
    if (!s->have_zero) { /* under ZeRO-1 its own groups (zero1.group) order the update */
        s->group = zy_calloc((size_t)t->count + 1, sizeof *s->group);
        for (int i = 0; i < t->count; i++) s->group[i] = model_entry_group(&s->model, i);
    }
    zy_ctx *update_ctx = s->ctx;
    if (step_overlaps(cfg->overlap_optimizer, world_of(s))) {
        ZY_TRY(ops_ctx_init_beside(&s->side, s->ctx));
        s->have_side = 1;
        update_ctx = &s->side;
        s->grads_final = ops_mark_new(s->ctx);
        s->update_done = ops_mark_new(&s->side);
        s->updated = zy_calloc((size_t)L + 2, sizeof *s->updated);
        for (int g = 0; g < L + 2; g++) s->updated[g] = ops_mark_new(&s->side);
    }
    /* one rank: each group's update (Muon's too) is done before the next group's starts, so the
     * forward can start on the first groups while the update works on the later ones */
    ZY_TRY(optim_init_owned(&s->opt, update_ctx, oc, t, s->have_zero ? s->zero.mine : NULL,
                            s->have_zero ? s->zero.range : NULL, s->have_zero ? NULL : s->group));
    s->have_opt = 1;
    optim_set_compute_copy(&s->opt, s->model.cparams); /* bf16 weights refreshed by the update */
    spike_init(&s->spike, &cfg->spike);
    ZY_TRY(balance_init(&s->bal, bc, L, E));
    s->have_bal = 1;
    s->biases = zy_calloc((size_t)L, sizeof *s->biases);
    return balance_find_biases(&s->model.table, s->model.params, L, E, s->biases);
}

void step_free(zy_step *s) {
    if (s->have_zero && zero1_weights_ready(&s->zero) != ZY_OK) /* nothing left in flight */
        fprintf(stderr, "warning: %s\n", zy_errmsg());
    free(s->ids);
    free(s->targets);
    free(s->counts);
    free(s->step_counts);
    free(s->biases);
    if (s->have_zero) zero1_free(&s->zero);
    if (s->have_bal) balance_free(&s->bal);
    if (s->have_side) ops_sync(&s->side); /* no update left running */
    if (s->have_opt) optim_free(&s->opt);
    if (s->have_side) {
        const int L = s->model.cfg.num_hidden_layers;
        for (int g = 0; g < L + 2; g++) ops_mark_free(&s->side, s->updated[g]);
        free(s->updated);
        ops_mark_free(&s->side, s->update_done);
        ops_mark_free(s->ctx, s->grads_final);
        ops_ctx_free(&s->side);
    }
    free(s->group);
    if (s->have_acts) acts_free(&s->acts, &s->model);
    if (s->have_model) model_free(&s->model);
    memset(s, 0, sizeof *s);
}

void step_set_comm(zy_step *s, zy_comm *comm) {
    s->comm = comm;
}

/* The sums over ranks of the loss and the routed counts (the gradients went to their owners during
 * the backward), in a fixed order. */
static int reduce_over_ranks(zy_step *s, double *loss_sum) {
    zy_model *m = &s->model;
    const size_t LE1 = (size_t)m->cfg.num_hidden_layers * (m->cfg.num_experts + 1);
    ZY_TRY(comm_all_reduce(s->comm, loss_sum, 1, ZY_COMM_F64, ZY_COMM_SUM));
    ZY_TRY(comm_all_reduce(s->comm, &s->stop_agreed, 1, ZY_COMM_I64, ZY_COMM_MAX));
    return comm_all_reduce(s->comm, s->step_counts, LE1, ZY_COMM_I64, ZY_COMM_SUM);
}

/* The global gradient norm and clipping's factor, which the optimizer applies as it reads the
 * gradients; with ranks over the owned gradients (each owner holds its sums). */
static int clip(zy_step *s, double *norm, float *factor) {
    zy_model *m = &s->model;
    double sumsq;
    if (s->have_zero)
        ZY_TRY(zero1_grad_sumsq(&s->zero, &sumsq));
    else
        sumsq = clip_grad_sumsq(s->ctx, &m->table, m->grads);
    *norm = sqrt(sumsq);
    *factor = clip_factor(*norm, s->cfg.grad_clip);
    return ZY_OK;
}

zy_ctx *step_update_ctx(zy_step *s) {
    return s->have_side ? &s->side : s->ctx;
}

int step_master_everywhere(const zy_step *s, int i) {
    return s->have_zero ? zero1_master_everywhere(&s->zero, i) : 1;
}

int step_state_whole(zy_step *s) {
    return s->have_zero ? zero1_gather_split_state(&s->zero, &s->opt) : ZY_OK;
}

/* What the forward's last wait and step_weights_ready do once the update beside it is done:
 * s->ctx's later work comes after it. */
static void update_joined(zy_step *s) {
    ops_wait_mark(s->ctx, s->update_done);
    s->model.weights_needed = NULL;
    s->model.weights_needed_user = NULL;
    s->update_pending = 0;
}

int step_weights_ready(zy_step *s) {
    if (s->update_pending) update_joined(s);
    return s->have_zero ? zero1_weights_ready(&s->zero) : ZY_OK;
}

/* model.weights_needed while the update runs beside the forward: s->ctx waits for group g's
 * mark; the last layer's call waits for the whole update (the final norm and the cleared
 * gradients, which the backward accumulates into). */
static void update_needed(void *user, int group) {
    zy_step *s = user;
    ops_wait_mark(s->ctx, s->updated[group + 1]);
    if (group == s->model.cfg.num_hidden_layers - 1) update_joined(s);
}

/* optim_step_runs' done: group g's weights are updated. */
static void update_group_done(void *user, int group) {
    zy_step *s = user;
    ops_mark(&s->side, s->updated[group + 1]);
}

/* The update beside the next forward (cfg.overlap_optimizer): it starts once the gradients are
 * complete, marks each group, then clears the gradients for the next step; timed (the phase
 * hook), the host waits for it, so the phases and the op profile see it whole. */
static void update_beside(zy_step *s, float lr, float clip_scale, int timed) {
    zy_model *m = &s->model;
    /* what the forward reads is what the update writes: the compute copy, or the fp32 weights
     * where they compute (the CPU) */
    ZY_CHECK(s->opt.compute_copy || !m->cparams);
    ops_mark(s->ctx, s->grads_final);
    ops_wait_mark(&s->side, s->grads_final);
    optim_step_runs(&s->opt, &m->table, m->params, m->grads, lr, clip_scale, s->group,
                    update_group_done, s);
    model_zero_grads_on(m, &s->side);
    s->grads_cleared = 1;
    ops_mark(&s->side, s->update_done);
    s->update_pending = 1;
    m->weights_needed = update_needed;
    m->weights_needed_user = s;
    if (timed) ops_sync(&s->side);
}

static void phase_end(const zy_step_hooks *h, zy_step_phase p) {
    if (h && h->phase_end) h->phase_end(h->user, p);
}

int step_run(zy_step *s, const zy_step_hooks *hooks, float lr, double *loss, double *grad_norm) {
    zy_model *m = &s->model;
    const int LE1 = m->cfg.num_hidden_layers * (m->cfg.num_experts + 1);
    const double tokens = (double)s->B * s->T * s->cfg.grad_accum * world_of(s); /* of all ranks */
    const int timed = hooks && hooks->phase_end;
    zy_err_set_step(s->step + 1);                  /* fatal messages name the step being computed */
    if (timed && s->have_side) ops_sync(&s->side); /* the phases time this step's work alone */
    if (!s->grads_cleared) {                       /* else the update beside did, after its read */
        if (s->update_pending) update_joined(s);   /* a step retried: it may still read them */
        model_zero_grads(m);
    }
    s->grads_cleared = 0;
    phase_end(hooks, ZY_PHASE_ZERO);
    memset(s->step_counts, 0, (size_t)LE1 * sizeof *s->step_counts);
    double sum = 0;
    for (int micro = 0; micro < s->cfg.grad_accum; micro++) {
        if (hooks && hooks->next_batch) ZY_TRY(hooks->next_batch(hooks->user, s->ids, s->targets));
        /* the last micro-batch's backward completes each gradient: reduce them as it goes */
        const int reduce = s->have_zero && micro == s->cfg.grad_accum - 1;
        if (reduce) zero1_reduce_in_backward(&s->zero);
        if (timed) { /* the same ops as below, split between the phases: the loss pass writes
                      * dlogits in the forward's phase, as the untimed step's does */
            sum += model_forward_loss(m, &s->acts, s->ids, s->targets, (float)(1.0 / tokens));
            phase_end(hooks, ZY_PHASE_FORWARD);
            model_backward_from_dlogits(m, &s->acts);
        } else {
            sum += model_forward_backward(m, &s->acts, s->ids, s->targets, (float)(1.0 / tokens));
        }
        if (reduce) ZY_TRY(zero1_grads_done(&s->zero));
        if (timed) phase_end(hooks, ZY_PHASE_BACKWARD);
        model_route_counts(m, &s->acts, s->counts);
        for (int i = 0; i < LE1; i++) s->step_counts[i] += s->counts[i];
        phase_end(hooks, ZY_PHASE_ROUTE);
    }
    s->stop_agreed = hooks && hooks->stop_vote ? hooks->stop_vote(hooks->user) : 0;
    if (s->fault_loss_scale > 0) { /* an injected spike, as one rank's bad batch would give */
        sum *= s->fault_loss_scale;
        s->fault_loss_scale = 0;
    }
    if (world_of(s) > 1) ZY_TRY(reduce_over_ranks(s, &sum));
    *loss = sum / tokens;
    float clip_scale;
    ZY_TRY(clip(s, grad_norm, &clip_scale));
    phase_end(hooks, ZY_PHASE_CLIP);
    if (s->cfg.stop_on_nonfinite && (!isfinite(*loss) || !isfinite(*grad_norm)))
        return zy_fail_runtime("loss %g, gradient norm %g: training diverged", *loss, *grad_norm);
    char spike[160];
    if (spike_check(&s->spike, *loss, spike, sizeof spike))
        return zy_fail_runtime("%s: training diverged", spike);
    if (s->have_zero) { /* each group's weights go to every rank as soon as they are updated */
        ZY_TRY(zero1_share_begin(&s->zero));
        optim_step_runs(&s->opt, &m->table, m->params, m->grads, lr, clip_scale, s->zero.group,
                        zero1_share_group, &s->zero);
        phase_end(hooks, ZY_PHASE_OPTIM);
        ZY_TRY(zero1_share_end(&s->zero));
    } else if (s->have_side) {
        update_beside(s, lr, clip_scale, timed);
        phase_end(hooks, ZY_PHASE_OPTIM);
    } else {
        optim_step_runs(&s->opt, &m->table, m->params, m->grads, lr, clip_scale, s->group, NULL,
                        NULL);
        if (!s->opt.compute_copy) model_sync_compute_weights(m);
        phase_end(hooks, ZY_PHASE_OPTIM);
    }
    phase_end(hooks, ZY_PHASE_SHARE);
    if (s->cfg.balance) balance_step(&s->bal, s->ctx, s->biases, s->step_counts);
    phase_end(hooks, ZY_PHASE_BALANCE);
    s->step++;
    return ZY_OK;
}
