/* The training step on a GPU with the optimizer update beside the next step's forward
 * (cuda.overlap_optimizer, train/step.h) against the update after the step: the same losses,
 * gradient norms, weights, bf16 compute copy and optimizer state to the bit, AdamW and Muon, and
 * AdamW with two micro-batches a step and recomputation, with a forward of its own (an
 * evaluation) and a read of the weights (a checkpoint) between steps; and every trained tensor
 * changed.
 * The model is large enough that each group's update takes longer than a launch, so a forward
 * that did not wait for a group would read some weights before their update. Skips without a
 * GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/rng.h"
#include "train/step.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *config_json =
    "{\"model_type\": \"zaya\", \"vocab_size\": 32768, \"hidden_size\": 512,"
    " \"num_hidden_layers\": 4, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
    " \"head_dim\": 128, \"num_experts\": 8, \"moe_intermediate_size\": 1024,"
    " \"router_hidden_size\": 64, \"max_position_embeddings\": 512, \"cca_time0\": 2,"
    " \"cca_time1\": 2, \"pad_token_id\": 2, \"bos_token_id\": 0, \"eos_token_id\": 1}";

enum { B = 4, T = 512, STEPS = 5, EVAL_AFTER = 2 };

static int next_batch(void *user, int32_t *ids, int32_t *targets) {
    uint64_t *k = user;
    zy_rng r = zy_rng_init(77, (*k)++);
    for (int n = 0; n < B * T; n++) ids[n] = (int32_t)zy_rng_below(&r, 32768);
    for (int n = 0; n < B * T; n++) targets[n] = n % T + 1 < T ? ids[n + 1] : -100;
    return ZY_OK;
}

typedef struct {
    double loss[STEPS], gnorm[STEPS], eval_loss;
    float *init;    /* [total] fp32 weights before the first step */
    float *mid;     /* [total] fp32 weights after step EVAL_AFTER, read between steps */
    float *params;  /* [total] fp32 weights at the end */
    uint16_t *copy; /* [total] the bf16 compute copy at the end */
    float *state;   /* the optimizer state at the end, as checkpoints read it */
    size_t state_floats;
} run;

/* What a pair of runs trains with. */
typedef struct {
    int use_muon, grad_accum, recompute;
} variant;

static void train(const variant *v, int overlap, run *r) {
    zy_config cfg;
    if (config_parse_json(&cfg, config_json, "test config") != ZY_OK) fail_msg("%s", zy_errmsg());
    zy_ctx gpu;
    zy_cuda_opts co = ops_cuda_opts_default();
    co.overlap_optimizer = overlap;
    if (ops_ctx_init_cuda_opts(&gpu, 0, &co) != ZY_OK) fail_msg("%s", zy_errmsg());
    zy_step s;
    assert_int_equal(step_init_model(&s, &gpu, &cfg, B, T, 1), ZY_OK);
    model_init_weights(&s.model, 3);
    assert_int_equal(step_init_acts(&s, v->recompute), ZY_OK);
    zy_optim_config oc;
    optim_config_default(&oc);
    oc.use_muon = v->use_muon;
    zy_balance_config bc;
    balance_config_default(&bc);
    zy_step_config sc = {
        .grad_accum = v->grad_accum, .grad_clip = 1, .balance = 1, .overlap_optimizer = overlap};
    assert_int_equal(step_init_training(&s, &sc, &oc, &bc), ZY_OK);
    assert_int_equal(step_update_ctx(&s) != &gpu, overlap);
    uint64_t k = 0;
    zy_step_hooks h = {.next_batch = next_batch, .user = &k};
    const size_t total = s.model.table.total;
    r->init = malloc(total * sizeof(float));
    ops_copy(&gpu, r->init, s.model.params, total * sizeof(float));
    for (int i = 0; i < STEPS; i++) {
        assert_int_equal(step_run(&s, &h, 1e-3f, &r->loss[i], &r->gnorm[i]), ZY_OK);
        if (i + 1 == EVAL_AFTER) {
            /* an evaluation: a forward alone, on the next batch, right after the step */
            assert_int_equal(next_batch(&k, s.ids, s.targets), ZY_OK);
            r->eval_loss = model_forward(&s.model, &s.acts, s.ids, s.targets);
            /* a checkpoint's read of the weights */
            assert_int_equal(step_weights_ready(&s), ZY_OK);
            r->mid = malloc(total * sizeof(float));
            ops_copy(&gpu, r->mid, s.model.params, total * sizeof(float));
        }
    }
    assert_int_equal(step_weights_ready(&s), ZY_OK);
    r->params = malloc(total * sizeof(float));
    ops_copy(&gpu, r->params, s.model.params, total * sizeof(float));
    r->copy = malloc(total * sizeof(uint16_t));
    ops_copy(&gpu, r->copy, s.model.cparams, total * sizeof(uint16_t));
    optim_state_to_host(&s.opt);
    r->state_floats = 2 * s.opt.adam_host_total + s.opt.muon_total;
    r->state = malloc(r->state_floats * sizeof(float));
    memcpy(r->state, s.opt.host_state, r->state_floats * sizeof(float));
    step_free(&s);
    ops_ctx_free(&gpu);
}

static void run_free(run *r) {
    free(r->init);
    free(r->mid);
    free(r->params);
    free(r->copy);
    free(r->state);
}

static void same_bits(const variant *v) {
    if (ops_cuda_device_count() == 0) skip();
    run after, beside;
    train(v, 0, &after);
    train(v, 1, &beside);
    print_message("%s, %d micro-batches a step%s: loss %.6f -> %.6f (eval %.6f), the update after "
                  "the step and beside the next forward\n",
                  v->use_muon ? "Muon" : "AdamW", v->grad_accum,
                  v->recompute ? ", recomputation" : "", after.loss[0], after.loss[STEPS - 1],
                  after.eval_loss);
    assert_true(after.loss[STEPS - 1] != after.loss[0]); /* the weights moved */
    assert_memory_equal(beside.loss, after.loss, sizeof after.loss);
    assert_memory_equal(beside.gnorm, after.gnorm, sizeof after.gnorm);
    assert_true(beside.eval_loss == after.eval_loss);
    zy_config cfg;
    if (config_parse_json(&cfg, config_json, "test config") != ZY_OK) fail_msg("%s", zy_errmsg());
    zy_param_table t;
    model_build_table(&t, &cfg);
    for (int i = 0; i < t.count; i++) {
        const zy_param *p = &t.items[i];
        if (memcmp(beside.mid + p->offset, after.mid + p->offset, p->numel * sizeof(float)))
            fail_msg("%s differs after step %d", p->name, EVAL_AFTER);
        if (memcmp(beside.params + p->offset, after.params + p->offset, p->numel * sizeof(float)))
            fail_msg("%s differs after %d steps", p->name, STEPS);
        if (memcmp(beside.copy + p->offset, after.copy + p->offset, p->numel * sizeof(uint16_t)))
            fail_msg("the compute copy of %s differs after %d steps", p->name, STEPS);
        /* every trained entry was updated (both ways could skip one alike) */
        if (p->kind != ZY_PARAM_BUFFER &&
            !memcmp(after.params + p->offset, after.init + p->offset, p->numel * sizeof(float)))
            fail_msg("%s did not change in %d steps", p->name, STEPS);
    }
    params_free(&t);
    assert_int_equal(beside.state_floats, after.state_floats);
    assert_memory_equal(beside.state, after.state, after.state_floats * sizeof(float));
    run_free(&after);
    run_free(&beside);
}

static void test_adamw_beside_same_bits(void **state) {
    (void)state;
    same_bits(&(variant){.use_muon = 0, .grad_accum = 1});
}

static void test_muon_beside_same_bits(void **state) {
    (void)state;
    same_bits(&(variant){.use_muon = 1, .grad_accum = 1});
}

/* Paths the two above do not take: several micro-batches a step (the gradients accumulate, only
 * the last backward's are final) and recomputation (each layer's forward again in the backward,
 * in buffers the layers share). */
static void test_adamw_beside_accum_recompute_same_bits(void **state) {
    (void)state;
    same_bits(&(variant){.use_muon = 0, .grad_accum = 2, .recompute = 1});
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adamw_beside_same_bits), cmocka_unit_test(test_muon_beside_same_bits),
        cmocka_unit_test(test_adamw_beside_accum_recompute_same_bits)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
