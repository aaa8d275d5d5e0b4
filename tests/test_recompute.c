/* Activation recomputation (acts_init's recompute, the `recompute` setting) against keeping every
 * layer's activations, on the CPU: one forward/backward gives the same loss, routing and
 * gradients to the bit, with the data-parallel hooks called in the same order; training steps
 * (with and without gradient accumulation, router balancing on) give the same losses, gradient
 * norms, routed counts (each micro-batch counted once), balancing state and final weights. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/rng.h"
#include "model/model.h"
#include "model_test_util.h"
#include "train/step.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, T = 40, N = B * T, MAXCALLS = 64 };

static zy_config cfg;
static zy_ctx cpu;

static int setup(void **state) {
    (void)state;
    if (config_parse_json(&cfg, mtu_config_all_features, "test config") != ZY_OK)
        fail_msg("%s", zy_errmsg());
    ops_ctx_init_cpu(&cpu, 0);
    return 0;
}

/* Tokens of batch number k, some targets ignored. */
static void fill_batch(int32_t *ids, int32_t *targets, uint64_t k) {
    zy_rng r = zy_rng_init(7, k);
    for (int n = 0; n < N; n++) ids[n] = (int32_t)zy_rng_below(&r, (uint64_t)cfg.vocab_size);
    for (int n = 0; n < N; n++) targets[n] = n % T + 1 < T && n % 9 != 4 ? ids[n + 1] : -100;
}

/* The hooks' calls, in order: weights_needed(l) as l, grads_ready(l) as 1000 + l. */
typedef struct {
    int calls[MAXCALLS];
    int n;
} call_log;

static void log_call(call_log *c, int v) {
    if (c->n < MAXCALLS) c->calls[c->n] = v;
    c->n++;
}
static void on_weights_needed(void *user, int layer) {
    log_call(user, layer);
}
static void on_grads_ready(void *user, int layer) {
    log_call(user, 1000 + layer);
}

typedef struct {
    double loss;
    int count;
    float *grads;      /* [table.total] */
    int64_t *counts;   /* [L, E+1] */
    float *dlogits;    /* [N, V] what the backward left in the logits */
    call_log calls[2]; /* forward + backward in one call; forward, then backward */
} pass;

/* model_forward_backward, then again as model_forward + model_backward (the timed path), with
 * activations recomputed or not. */
static void run_pass(int recompute, pass *p) {
    zy_model m;
    assert_int_equal(model_init(&m, &cfg, &cpu, 1), ZY_OK);
    model_init_weights(&m, 3);
    mtu_perturb_weights(&m);
    zy_acts a;
    assert_int_equal(acts_init(&a, &m, B, T, recompute), ZY_OK);
    assert_int_equal(a.recompute, recompute);
    int32_t ids[N], targets[N];
    fill_batch(ids, targets, 0);
    const size_t total = m.table.total, V = cfg.vocab_size;
    const int LE1 = cfg.num_hidden_layers * (cfg.num_experts + 1);
    memset(p->calls, 0, sizeof p->calls);
    m.weights_needed = on_weights_needed;
    m.grads_ready = on_grads_ready;
    m.weights_needed_user = m.grads_ready_user = &p->calls[0];
    model_zero_grads(&m);
    p->loss = model_forward_backward(&m, &a, ids, targets, 1.0f / 64);
    p->count = a.count;
    p->grads = malloc(total * sizeof *p->grads);
    memcpy(p->grads, m.grads, total * sizeof *p->grads);
    p->counts = calloc((size_t)LE1, sizeof *p->counts);
    model_route_counts(&m, &a, p->counts);
    p->dlogits = malloc(N * V * sizeof *p->dlogits);
    memcpy(p->dlogits, a.logits, N * V * sizeof *p->dlogits);

    /* the two-pass path gives the same as the fused one */
    m.weights_needed_user = m.grads_ready_user = &p->calls[1];
    model_zero_grads(&m);
    double loss = model_forward(&m, &a, ids, targets);
    assert_true(loss == p->loss);
    model_backward(&m, &a, 1.0f / 64);
    assert_memory_equal(m.grads, p->grads, total * sizeof *p->grads);
    assert_memory_equal(a.logits, p->dlogits, N * V * sizeof *p->dlogits);

    if (recompute) { /* one shared set; each layer's own input and router state */
        const int L = cfg.num_hidden_layers;
        for (int l = 1; l < L; l++) {
            const zy_layer_acts *x = &a.layers[l], *x0 = &a.layers[0];
            assert_ptr_equal(x->qk0, x0->qk0);
            assert_ptr_equal(x->xs, x0->xs);
            assert_ptr_equal(x->y, x0->y);
            assert_ptr_equal(x->perm, x0->perm);
            assert_ptr_not_equal(x->h_in, x0->h_in);
            assert_ptr_not_equal(x->a, x0->a);
            assert_ptr_not_equal(x->rstd_a, x0->rstd_a);
            assert_ptr_not_equal(x->z, x0->z);
            assert_ptr_not_equal(x->offsets_host, x0->offsets_host);
        }
    }
    acts_free(&a, &m);
    model_free(&m);
}

static void pass_free(pass *p) {
    free(p->grads);
    free(p->counts);
    free(p->dlogits);
}

static void test_one_pass_bitwise(void **state) {
    (void)state;
    pass keep, rec;
    run_pass(0, &keep);
    run_pass(1, &rec);
    print_message("loss %.9g over %d tokens, either way\n", keep.loss / keep.count, keep.count);
    assert_true(rec.loss == keep.loss);
    assert_int_equal(rec.count, keep.count);
    zy_param_table t;
    model_build_table(&t, &cfg);
    const int LE1 = cfg.num_hidden_layers * (cfg.num_experts + 1);
    assert_memory_equal(rec.counts, keep.counts, (size_t)LE1 * sizeof *keep.counts);
    assert_memory_equal(rec.dlogits, keep.dlogits, (size_t)N * cfg.vocab_size * sizeof(float));
    for (int i = 0; i < t.count; i++) { /* per tensor, to name the first one that differs */
        const zy_param *p = &t.items[i];
        if (memcmp(rec.grads + p->offset, keep.grads + p->offset, p->numel * sizeof(float)))
            fail_msg("gradient of %s differs with recomputation", p->name);
    }
    double sumsq = 0;
    for (size_t j = 0; j < t.total; j++) sumsq += (double)keep.grads[j] * keep.grads[j];
    assert_true(sumsq > 0);
    params_free(&t);
    /* the hooks: weights_needed -1, 0, 1, 2 in the forward only; grads_ready 2, 1, 0, -1 */
    const int L = cfg.num_hidden_layers;
    int want[2 * 16], nw = 0;
    for (int l = -1; l < L; l++) want[nw++] = l;
    for (int l = L - 1; l >= -1; l--) want[nw++] = 1000 + l;
    for (int k = 0; k < 2; k++) {
        assert_int_equal(keep.calls[k].n, nw);
        assert_int_equal(rec.calls[k].n, nw);
        assert_memory_equal(keep.calls[k].calls, want, (size_t)nw * sizeof *want);
        assert_memory_equal(rec.calls[k].calls, want, (size_t)nw * sizeof *want);
    }
    pass_free(&keep);
    pass_free(&rec);
}

/* ---- training steps ---- */

typedef struct {
    uint64_t next; /* batch number */
    int phases;    /* phase_end calls */
} feeder;

static int next_batch(void *user, int32_t *ids, int32_t *targets) {
    feeder *f = user;
    fill_batch(ids, targets, 1 + f->next++);
    return ZY_OK;
}

static void count_phase(void *user, zy_step_phase p) {
    (void)p;
    ((feeder *)user)->phases++;
}

enum { STEPS = 4 };

typedef struct {
    double loss[STEPS], gnorm[STEPS];
    int64_t *counts; /* [STEPS, L, E+1] each step's routed counts */
    float *params;   /* [table.total] after the steps (balancing biases included) */
    float *bal_m, *bal_v;
    int64_t bal_step;
} run;

/* STEPS training steps (Muon + AdamW, balancing on) of grad_accum micro-batches each; timed:
 * with the phase hook, so forward and backward run as two passes; overlap: the update on a
 * context beside the step's (cuda.overlap_optimizer), clearing the gradients for the next step
 * itself. */
static void train(int recompute, int overlap, int grad_accum, int timed, run *r) {
    zy_step s;
    assert_int_equal(step_init_model(&s, &cpu, &cfg, B, T, 1), ZY_OK);
    model_init_weights(&s.model, 5);
    mtu_perturb_weights(&s.model);
    assert_int_equal(step_init_acts(&s, recompute), ZY_OK);
    zy_optim_config oc;
    optim_config_default(&oc);
    oc.lr = 1e-2f;
    zy_balance_config bc;
    balance_config_default(&bc);
    bc.step_size = 1e-2f; /* biases that move enough to change routing within the run */
    zy_step_config sc = {
        .grad_accum = grad_accum, .grad_clip = 1, .balance = 1, .overlap_optimizer = overlap};
    assert_int_equal(step_init_training(&s, &sc, &oc, &bc), ZY_OK);
    assert_int_equal(step_update_ctx(&s) != s.ctx, overlap);
    feeder f = {0, 0};
    zy_step_hooks h = {
        .next_batch = next_batch, .phase_end = timed ? count_phase : NULL, .user = &f};
    const int L = cfg.num_hidden_layers, E1 = cfg.num_experts + 1;
    r->counts = calloc((size_t)STEPS * L * E1, sizeof *r->counts);
    for (int i = 0; i < STEPS; i++) {
        assert_int_equal(step_run(&s, &h, 1e-2f, &r->loss[i], &r->gnorm[i]), ZY_OK);
        memcpy(r->counts + (size_t)i * L * E1, s.step_counts, (size_t)L * E1 * sizeof(int64_t));
        for (int l = 0; l < L; l++) { /* every token of every micro-batch, once */
            int64_t sum = 0;
            for (int e = 0; e < E1; e++) sum += s.step_counts[(size_t)l * E1 + e];
            assert_int_equal(sum, (int64_t)N * grad_accum);
        }
    }
    assert_int_equal(f.next, (uint64_t)STEPS * grad_accum);
    if (timed) assert_true(f.phases > 0);
    const size_t total = s.model.table.total, LE1 = (size_t)L * E1;
    r->params = malloc(total * sizeof *r->params);
    memcpy(r->params, s.model.params, total * sizeof *r->params);
    r->bal_m = malloc(LE1 * sizeof(float));
    r->bal_v = malloc(LE1 * sizeof(float));
    memcpy(r->bal_m, s.bal.m, LE1 * sizeof(float));
    memcpy(r->bal_v, s.bal.v, LE1 * sizeof(float));
    r->bal_step = s.bal.step;
    step_free(&s);
}

static void run_free(run *r) {
    free(r->counts);
    free(r->params);
    free(r->bal_m);
    free(r->bal_v);
}

/* Training with recomputation (overlap 0), or with the update beside the step (overlap 1),
 * against without. */
static void same_training_as(int overlap, int grad_accum, int timed) {
    run keep, rec;
    train(0, 0, grad_accum, timed, &keep);
    train(!overlap, overlap, grad_accum, timed, &rec);
    const char *what = overlap ? "the update beside the step" : "recomputation";
    print_message("grad_accum %d%s: loss %.6f -> %.6f, with and without %s\n", grad_accum,
                  timed ? " (forward and backward as two passes)" : "", keep.loss[0],
                  keep.loss[STEPS - 1], what);
    assert_memory_equal(rec.loss, keep.loss, sizeof keep.loss);
    assert_memory_equal(rec.gnorm, keep.gnorm, sizeof keep.gnorm);
    const int L = cfg.num_hidden_layers, E1 = cfg.num_experts + 1;
    assert_memory_equal(rec.counts, keep.counts, (size_t)STEPS * L * E1 * sizeof(int64_t));
    /* the routing changed over the run (the balancing biases moved it) */
    assert_true(memcmp(keep.counts, keep.counts + (size_t)(STEPS - 1) * L * E1,
                       (size_t)L * E1 * sizeof(int64_t)) != 0);
    zy_param_table t;
    model_build_table(&t, &cfg);
    for (int i = 0; i < t.count; i++) { /* the balancing biases are table entries too */
        const zy_param *p = &t.items[i];
        if (memcmp(rec.params + p->offset, keep.params + p->offset, p->numel * sizeof(float)))
            fail_msg("grad_accum %d: %s differs after %d steps with %s", grad_accum, p->name, STEPS,
                     what);
    }
    params_free(&t);
    assert_int_equal(rec.bal_step, keep.bal_step);
    assert_memory_equal(rec.bal_m, keep.bal_m, (size_t)L * E1 * sizeof(float));
    assert_memory_equal(rec.bal_v, keep.bal_v, (size_t)L * E1 * sizeof(float));
    run_free(&keep);
    run_free(&rec);
}

static void same_training(int grad_accum, int timed) {
    same_training_as(0, grad_accum, timed);
}

static void test_training_bitwise(void **state) {
    (void)state;
    same_training(1, 0);
}

static void test_training_grad_accum_bitwise(void **state) {
    (void)state;
    same_training(2, 0);
    same_training(2, 1);
}

/* The update beside the step: the gradients it clears after reading them are the next step's
 * start (a step that did not clear them would add to the last step's), with and without
 * accumulation and the phase hook (which waits for the update). */
static void test_training_update_beside_bitwise(void **state) {
    (void)state;
    same_training_as(1, 1, 0);
    same_training_as(1, 2, 0);
    same_training_as(1, 2, 1);
}

/* A new shape keeps the choice (training phases reshape the step). */
static void test_reshape_keeps_recompute(void **state) {
    (void)state;
    zy_step s;
    assert_int_equal(step_init_model(&s, &cpu, &cfg, B, T, 1), ZY_OK);
    assert_int_equal(step_init_acts(&s, 1), ZY_OK);
    assert_int_equal(step_reshape(&s, 1, 2 * T), ZY_OK);
    assert_int_equal(s.acts.recompute, 1);
    assert_ptr_equal(s.acts.layers[2].gu, s.acts.layers[0].gu);
    step_free(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_pass_bitwise),
        cmocka_unit_test(test_training_bitwise),
        cmocka_unit_test(test_training_grad_accum_bitwise),
        cmocka_unit_test(test_training_update_beside_bitwise),
        cmocka_unit_test(test_reshape_keeps_recompute),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
