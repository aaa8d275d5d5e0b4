/* Tests of the training-step benchmark (`zayac bench train`, src/bench/train_bench.h) on the CPU
 * with small models: the result and its JSON have every field with sane values (the per-op
 * breakdown names real ops and fits in the profiled step), the synthetic data are seeded, the
 * model FLOPs match the PyTorch baseline's count, and bad options are one clear error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/fileio.h"
#include "bench/train_bench.h"
#include "spawn_util.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char tmp[64];
static const char *bin;

/* A small model (max_position_embeddings 64) so the steps are fast under the sanitizers. */
static const char *small_json =
    "{\"model_type\": \"zaya\", \"vocab_size\": 320, \"hidden_size\": 32, \"num_hidden_layers\": "
    "2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 8, \"num_experts\": "
    "3, \"moe_intermediate_size\": 16, \"router_hidden_size\": 8, \"max_position_embeddings\": "
    "64, \"pad_token_id\": 2, \"bos_token_id\": 0, \"eos_token_id\": 1}";

static int setup(void **state) {
    (void)state;
    bin = getenv("ZAYAC_BIN");
    snprintf(tmp, sizeof tmp, "/tmp/zy_btrain_XXXXXX");
    if (!mkdtemp(tmp)) return -1;
    char p[128];
    snprintf(p, sizeof p, "%s/small.json", tmp);
    return zy_write_file_atomic(p, small_json, strlen(small_json)) == ZY_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return zy_remove_tree(tmp) == ZY_OK ? 0 : -1;
}

static void small_opts(bench_train_opts *o) {
    bench_train_opts_default(o);
    assert_int_equal(config_parse_json(&o->model, small_json, "small"), ZY_OK);
    assert_int_equal(config_validate(&o->model, "small"), ZY_OK);
    snprintf(o->model_name, sizeof o->model_name, "small");
    o->device = ZY_DEV_CPU;
    o->threads = 1;
    o->batch = 2;
    o->seq = 16;
    o->steps = 3;
    o->warmup = 1;
}

/* The op names a breakdown may hold: lower-case identifiers (the profiler's names). */
static int op_name_ok(const char *s) {
    if (!*s) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_')) return 0;
    return 1;
}

/* Checks a result's numbers against each other. */
static void check_result(const bench_train_opts *o, const bench_train_result *r) {
    assert_int_equal(r->nsteps, o->steps);
    assert_int_equal(r->tokens_per_step, (int64_t)o->batch * o->seq);
    double sum = 0;
    for (int i = 0; i < r->nsteps; i++) {
        assert_true(r->step_ms[i] > 0);
        assert_true(r->step_ms[i] >= r->step_ms_min && r->step_ms[i] <= r->step_ms_max);
        sum += r->step_ms[i];
    }
    /* the mean is the timed loop's (the steps' windows and what runs between them: the next
     * batch drawn, an update still running), so no less than the windows' mean; and of the same
     * order (a clock read at the wrong point, or in other units, would not be) */
    assert_true(r->step_ms_mean >= sum / r->nsteps * (1 - 1e-9));
    assert_true(r->step_ms_mean <= 2 * r->step_ms_max);
    assert_true(fabs(r->tokens_per_s * r->step_ms_mean * 1e-3 / r->tokens_per_step - 1) < 1e-9);
    assert_true(r->model_tflops > 0);
    assert_true(fabs(r->model_tflops * 1e12 / (r->flops_per_token * r->tokens_per_s) - 1) < 1e-9);
    assert_true(r->mem_gib > 0);
    assert_true(r->params_bytes == (double)r->grads_bytes && r->params_bytes > 0);
    /* random ids and small initial weights: the first loss is about ln(V) */
    double lnv = log((double)o->model.vocab_size);
    if (fabs(r->loss_first - lnv) > 0.3) fail_msg("first loss %g, ln V = %g", r->loss_first, lnv);
    assert_true(isfinite(r->loss_last));
    assert_int_equal(r->nonfinite_steps, 0);
    /* busiest expert over the mean: 1 when perfectly balanced, E when one expert takes all */
    const double E = o->model.num_experts;
    assert_true(r->load_ratio_mean >= 1.0 && r->load_ratio_mean <= r->load_ratio_max);
    assert_true(r->load_ratio_max <= E);
}

static void check_breakdown(const bench_train_result *r) {
    assert_true(r->prof_step_ms > 0);
    assert_true(r->nops > 0);
    double sum = 0, pct = 0;
    int matmul = 0, xent = 0;
    for (int i = 0; i < r->nops; i++) {
        const bench_train_op *x = &r->ops[i];
        if (!op_name_ok(x->op)) fail_msg("op name '%s'", x->op);
        assert_true(x->calls >= 1);
        assert_true(x->ms_per_step >= 0);
        if (i > 0) assert_true(x->ms_per_step <= r->ops[i - 1].ms_per_step);
        for (int j = 0; j < i; j++) assert_string_not_equal(x->op, r->ops[j].op);
        matmul |= !strcmp(x->op, "matmul");
        /* one pass for the loss and dlogits, as in the untimed step (not a loss pass, then another)
         */
        xent |= !strcmp(x->op, "xent_fwd_bwd") && x->calls == 1;
        sum += x->ms_per_step;
        pct += x->pct;
    }
    assert_true(matmul && xent);
    if (sum > r->prof_step_ms) fail_msg("ops sum to %g ms > step %g ms", sum, r->prof_step_ms);
    assert_true(pct <= 100.0 + 1e-9);
    double phases = 0;
    for (int p = 0; p < ZY_STEP_NPHASES; p++) {
        assert_true(r->phase_ms[p] >= 0);
        phases += r->phase_ms[p];
    }
    assert_true(phases > 0 && phases <= r->prof_step_ms * (1 + 1e-9));
    assert_true(r->phase_ms[ZY_PHASE_FORWARD] > 0 && r->phase_ms[ZY_PHASE_BACKWARD] > 0);
}

static void test_flops_match_baseline(void **state) {
    (void)state;
    zy_config c;
    assert_int_equal(config_preset(&c, "bench-small"), ZY_OK);
    /* BASELINES.md: 112M active parameters (embedding included) with the tied head counted once
     * more as V x D in place of the embedding, plus causal attention 6 L T Hq d. */
    double want = 6.0 * 112e6 + 6.0 * 12 * 2048 * 8 * 128;
    double got = model_train_flops_per_token(&c, 2048);
    if (fabs(got / want - 1) > 0.01) fail_msg("bench-small: %g FLOP/token, want ~%g", got, want);
    /* the attention term grows with T: 6 L Hq d per extra token */
    double d = model_train_flops_per_token(&c, 2049) - got;
    assert_true(fabs(d - 6.0 * 12 * 8 * 128) < 1e-3);
}

static void test_run_adamw_and_muon(void **state) {
    (void)state;
    bench_train_opts o;
    small_opts(&o);
    o.profile = 1;
    o.peak_tflops = 0.5; /* given: MFU is computed against it */
    bench_train_result a, m, ns2, mm, again, other, rec;
    assert_int_equal(bench_train_run(&o, &a), ZY_OK);
    check_result(&o, &a);
    check_breakdown(&a);
    assert_true(fabs(a.mfu - a.model_tflops / 0.5) < 1e-12);
    assert_false(a.peak_measured);
    /* AdamW holds two moments per trained parameter, each tensor's padded to 16 floats */
    zy_param_table t;
    model_build_table(&t, &o.model);
    double lo = 2.0 * 4 * (double)a.counts.total, hi = lo + 2.0 * 4 * 16 * t.count;
    params_free(&t);
    if (!(a.optim_bytes >= lo && a.optim_bytes <= hi))
        fail_msg("AdamW state %g bytes, expected %g..%g", a.optim_bytes, lo, hi);
    assert_true(isnan(a.acts_bytes) && isnan(a.device_used_gib));

    o.use_muon = 1;
    o.profile = 0;
    o.peak_tflops = 0;
    assert_int_equal(bench_train_run(&o, &m), ZY_OK);
    check_result(&o, &m);
    assert_true(isnan(m.mfu) && isnan(m.peak_tflops) && isnan(m.prof_step_ms));
    assert_int_equal(m.nops, 0);
    /* Muon keeps one momentum per matrix element instead of two moments */
    assert_true(m.optim_bytes < a.optim_bytes);
    /* --ns-steps reaches the optimizer: the same first loss, other updates */
    o.ns_steps = 2;
    assert_int_equal(bench_train_run(&o, &ns2), ZY_OK);
    assert_true(ns2.loss_first == m.loss_first && ns2.loss_last != m.loss_last);
    o.ns_steps = 5;
    /* --ns-coefficients too */
    o.ns_coefs = ZY_NS_MINIMAX;
    assert_int_equal(bench_train_run(&o, &mm), ZY_OK);
    assert_true(mm.loss_first == m.loss_first && mm.loss_last != m.loss_last &&
                mm.loss_last != ns2.loss_last);
    o.ns_coefs = ZY_NS_FIXED;
    /* a bf16 momentum reaches the optimizer: the same first loss, other updates (its rounding) */
    bench_train_result mb;
    o.muon_momentum_dtype = ZY_ADAM_MOMENTS_BF16;
    assert_int_equal(bench_train_run(&o, &mb), ZY_OK);
    assert_true(mb.loss_first == m.loss_first && mb.loss_last != m.loss_last);
    bench_train_result_free(&mb);
    o.muon_momentum_dtype = ZY_ADAM_MOMENTS_F32;
    /* the same seed draws the same weights and tokens: same first loss, and AdamW's run replays */
    assert_true(m.loss_first == a.loss_first);
    o.use_muon = 0;
    assert_int_equal(bench_train_run(&o, &again), ZY_OK);
    assert_true(again.loss_last == a.loss_last);
    /* activation recomputation: the same steps to the bit in a smaller activation estimate */
    assert_true(isfinite(a.acts_estimate) && a.acts_estimate > 0);
    o.recompute = 1;
    assert_int_equal(bench_train_run(&o, &rec), ZY_OK);
    assert_true(rec.loss_first == a.loss_first && rec.loss_last == a.loss_last);
    assert_true(rec.acts_estimate < a.acts_estimate);
    o.recompute = 0;
    o.seed = 2;
    assert_int_equal(bench_train_run(&o, &other), ZY_OK);
    assert_true(other.loss_first != a.loss_first);
    bench_train_result_free(&a);
    bench_train_result_free(&m);
    bench_train_result_free(&ns2);
    bench_train_result_free(&mm);
    bench_train_result_free(&again);
    bench_train_result_free(&other);
    bench_train_result_free(&rec);
}

static void test_check_rejects(void **state) {
    (void)state;
    bench_train_opts o;
    small_opts(&o);
    assert_int_equal(bench_train_check(&o), ZY_OK);
    struct {
        int field, value;
        const char *want;
    } cases[] = {{0, 0, "--batch"},
                 {1, 65, "max_position_embeddings"},
                 {1, 0, "--seq"},
                 {2, 0, "--steps"},
                 {3, -1, "--warmup"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bench_train_opts b = o;
        int *f[] = {&b.batch, &b.seq, &b.steps, &b.warmup};
        *f[cases[i].field] = cases[i].value;
        assert_int_equal(bench_train_check(&b), ZY_ERR);
        if (!strstr(zy_errmsg(), cases[i].want))
            fail_msg("case %zu: '%s' lacks '%s'", i, zy_errmsg(), cases[i].want);
        bench_train_result r;
        assert_int_equal(bench_train_run(&b, &r), ZY_ERR); /* before any work */
        bench_train_result_free(&r);
    }
    bench_train_opts b = o;
    b.lr = 0;
    assert_int_equal(bench_train_check(&b), ZY_ERR);
    b = o;
    b.model.num_experts_per_tok = 2;
    assert_int_equal(bench_train_check(&b), ZY_ERR);
}

/* Splits "a b c" (no quoting) into args and runs zayac bench train with them. */
static run_result bench_train_cli(const char *line) {
    static char buf[1024];
    const char *args[40];
    int n = 0;
    args[n++] = "bench";
    args[n++] = "train";
    snprintf(buf, sizeof buf, "%s", line);
    for (char *t = strtok(buf, " "); t && n < 39; t = strtok(NULL, " ")) args[n++] = t;
    args[n] = NULL;
    return spawn_capture(bin, tmp, args);
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

static const cJSON *get(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!v) fail_msg("JSON lacks \"%s\"", k);
    return v;
}

static double num(const cJSON *o, const char *k) {
    const cJSON *v = get(o, k);
    if (!cJSON_IsNumber(v)) fail_msg("JSON \"%s\" is not a number", k);
    return v->valuedouble;
}

static void test_cli_json(void **state) {
    (void)state;
    if (!bin) skip();
    char line[512], path[128];
    snprintf(path, sizeof path, "%s/out/r.json", tmp);
    snprintf(line, sizeof line,
             "--config %s/small.json --device cpu --threads 1 --batch 2 --seq 16 --steps 2 "
             "--warmup 1 --profile --attention-workspace-gib 0.5 --json %s",
             tmp, path);
    run_result r = bench_train_cli(line);
    if (r.code != 0) fail_msg("exit %d:\n%s\n%s", r.code, r.out, r.err);
    const char *want[] = {"warmup 1/1", "step 2/2", "tokens/s", "MFU", "matmul", "# wrote"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(r.out, want[i])) fail_msg("stdout lacks '%s':\n%s", want[i], r.out);
    result_free(&r);

    char *text;
    assert_int_equal(zy_read_file(path, &text, NULL), ZY_OK);
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    char cfg[128];
    snprintf(cfg, sizeof cfg, "%s/small.json", tmp);
    assert_string_equal(get(j, "config")->valuestring, cfg);
    assert_string_equal(get(j, "device")->valuestring, "cpu");
    assert_string_equal(get(j, "optim")->valuestring, "adamw");
    assert_true(cJSON_IsFalse(get(j, "recompute")));
    assert_true(num(get(j, "memory"), "activations_estimate_bytes") > 0);
    assert_string_equal(get(j, "attention")->valuestring, "auto");
    assert_true(num(j, "attention_workspace_gib") == 0.5);
    assert_true(num(j, "batch") == 2 && num(j, "seq") == 16 && num(j, "steps") == 2);
    const cJSON *sm = get(j, "step_ms");
    double mean = num(sm, "mean"), mn = num(sm, "min");
    assert_true(mn > 0 && mn <= mean);
    assert_int_equal(cJSON_GetArraySize(get(sm, "all")), 2);
    double tps = num(j, "tokens_per_s");
    assert_true(tps > 0 && fabs(tps * mean * 1e-3 / 32 - 1) < 1e-9);
    assert_true(num(j, "model_tflops") > 0);
    assert_true(cJSON_IsNull(get(j, "mfu")) && cJSON_IsNull(get(j, "peak_tflops")));
    assert_true(num(j, "mem_gib") > 0);
    const cJSON *loss = get(j, "loss");
    assert_true(fabs(num(loss, "first") - log(320.0)) < 0.3);
    const cJSON *load = get(j, "expert_load");
    assert_true(num(load, "busiest_over_mean") >= 1.0 &&
                num(load, "busiest_over_mean") <= num(load, "busiest_over_mean_worst"));
    double prof = num(j, "profiled_step_ms"), sum = 0;
    const cJSON *bd = get(j, "breakdown"), *x;
    assert_true(cJSON_IsArray(bd) && cJSON_GetArraySize(bd) > 0);
    int matmul = 0;
    cJSON_ArrayForEach(x, bd) {
        const char *op = get(x, "op")->valuestring;
        assert_true(op && op_name_ok(op));
        matmul |= !strcmp(op, "matmul");
        assert_true(num(x, "calls") >= 1);
        double ms = num(x, "ms_per_step"), pct = num(x, "pct");
        assert_true(ms >= 0 && pct >= 0 && pct <= 100);
        assert_true(fabs(pct - 100 * ms / prof) < 1e-6);
        sum += ms;
    }
    assert_true(matmul);
    if (sum > prof) fail_msg("breakdown sums to %g ms, profiled step %g ms", sum, prof);
    assert_true(num(get(j, "phases_ms"), "forward") > 0);
    assert_true(num(get(j, "memory"), "params_bytes") > 0);
    cJSON_Delete(j);

    /* a preset with a given peak (the MFU is reported against it), activations recomputed */
    snprintf(path, sizeof path, "%s/p.json", tmp);
    snprintf(line, sizeof line,
             "--preset tiny --device cpu --threads 1 --batch 1 --seq 8 --steps 1 --warmup 0 "
             "--optim muon --peak-tflops 2 --recompute --attention-workspace-gib 0.5 "
             "--attention-workspace-gib auto --json %s",
             path);
    r = bench_train_cli(line);
    if (r.code != 0) fail_msg("exit %d:\n%s\n%s", r.code, r.out, r.err);
    result_free(&r);
    assert_int_equal(zy_read_file(path, &text, NULL), ZY_OK);
    j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    assert_string_equal(get(j, "config")->valuestring, "tiny");
    assert_string_equal(get(j, "optim")->valuestring, "muon");
    assert_true(cJSON_IsTrue(get(j, "recompute")));
    /* the workspace cap given as auto (the last of the two flags) */
    assert_string_equal(get(j, "attention_workspace_gib")->valuestring, "auto");
    assert_true(fabs(num(j, "mfu") - num(j, "model_tflops") / 2) < 1e-12);
    assert_true(num(j, "peak_tflops") == 2);
    assert_int_equal(cJSON_GetArraySize(get(j, "breakdown")), 0);
    cJSON_Delete(j);
}

static void test_cli_errors(void **state) {
    (void)state;
    if (!bin) skip();
    char small[128], many[160];
    snprintf(small, sizeof small, "--config %s/small.json --device cpu", tmp);
    struct {
        const char *args, *want;
    } cases[] = {
        {"--device cpu", "--preset"},
        {"--preset nope --device cpu", "nope"},
        {"--preset tiny --config configs/tiny.json", "not both"},
        {"--config /nonexistent/zy/config.json", "/nonexistent/zy/config.json"},
        {"--preset tiny --device cpu --batch 0", "--batch"},
        {"--preset tiny --device cpu --batch x", "not an integer"},
        {"--preset tiny --device cpu --seq 4096", "max_position_embeddings"},
        {"--preset tiny --device cpu --batch 65536", "at most"},
        {"--preset tiny --device cpu --steps 0", "--steps"},
        {"--preset tiny --device cpu --warmup -1", "--warmup"},
        {"--preset tiny --device cpu --optim sgd", "sgd"},
        {"--preset tiny --device tpu", "tpu"},
        {"--preset tiny --device cuda:x", "cuda:x"},
        {"--preset tiny --device cpu --lr 0", "--lr"},
        {"--preset tiny --device cpu --optim muon --ns-steps 0", "--ns-steps"},
        {"--preset tiny --device cpu --ns-steps 4", "needs --optim muon"},
        {"--preset tiny --device cpu --ns-coefficients minimax", "needs --optim muon"},
        {"--preset tiny --device cpu --muon-momentum-dtype bfloat16", "needs --optim muon"},
        {"--preset tiny --device cpu --optim muon --muon-momentum-dtype half", "half"},
        {"--preset tiny --device cpu --optim muon --ns-coefficients best", "best"},
        {"--preset tiny --device cpu --peak-tflops -5", "--peak-tflops"},
        {"--preset tiny --device cpu --seed -1", "--seed"},
        {"--preset tiny --device cpu --attention-workspace-gib 0.01", "--attention-workspace-gib"},
        {"--preset tiny --device cpu --attention-workspace-gib automatic", "'automatic'"},
        {small, NULL}, /* filled below: the small model's sequence limit */
    };
    snprintf(many, sizeof many, "%s --seq 65", small);
    cases[sizeof cases / sizeof cases[0] - 1].args = many;
    cases[sizeof cases / sizeof cases[0] - 1].want = "max_position_embeddings 64";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_result r = bench_train_cli(cases[i].args);
        if (r.code != 2 || !strstr(r.err, cases[i].want) || count_lines(r.err) != 1 || *r.out)
            fail_msg("'%s': exit %d, stdout '%s', stderr: %s", cases[i].args, r.code, r.out, r.err);
        result_free(&r);
    }
    run_result r = bench_train_cli("--preset tiny --bogus");
    assert_int_equal(r.code, 2);
    assert_non_null(strstr(r.err, "--bogus"));
    result_free(&r);
    r = bench_train_cli("--help");
    assert_int_equal(r.code, 0);
    assert_non_null(strstr(r.out, "--peak-tflops")); /* --help prints to stdout */
    result_free(&r);
    if (ops_cuda_device_count() == 0) {
        /* no GPU where a CUDA build expects one: a device failure (exit 1, another machine may
         * have it); a build without CUDA can never run it: bad input (exit 2) */
#ifdef ZY_HAVE_CUDA
        const int want = 1;
#else
        const int want = 2;
#endif
        r = bench_train_cli("--preset tiny --device cuda --steps 1");
        if (r.code != want || count_lines(r.err) != 1 || !strstr(r.err, "CUDA"))
            fail_msg("--device cuda without a GPU: exit %d, stderr: %s", r.code, r.err);
        result_free(&r);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flops_match_baseline), cmocka_unit_test(test_run_adamw_and_muon),
        cmocka_unit_test(test_check_rejects),        cmocka_unit_test(test_cli_json),
        cmocka_unit_test(test_cli_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
