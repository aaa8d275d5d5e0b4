/* The table of training settings: every default is accepted by its own entry, unknown keys get a
 * did-you-mean, range errors name the key, value and range, and through the CLI: --print-config
 * round-trips, the README's list of keys is the --list-settings output, option values are checked
 * (not pasted into JSON), and a warmup longer than the run is shortened with a warning. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/fileio.h"
#include "spawn_util.h"
#include "train/settings.h"
#include "train/train_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmp[64];
static const char *bin;
static const char *root; /* the repository: README.md */

static const char *write_cfg(const char *name, const char *text) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    assert_int_equal(zy_write_file_atomic(path, text, strlen(text)), ZY_OK);
    return path;
}

static run_result run_args(const char *const *args) {
    run_result r = spawn_capture(bin, tmp, args);
    if (r.code == -1000) fail_msg("cannot run %s: %s", bin, r.err);
    return r;
}
#define RUN(...) run_args((const char *const[]){__VA_ARGS__, NULL})

/* The build of text must fail with every needle in the message. */
static void expect_error(const char *text, const char *override, const char *n1, const char *n2) {
    const char *p = write_cfg("bad.json", text);
    zy_train_config c;
    const char *over[1] = {override};
    if (train_config_build(&c, p, over, override ? 1 : 0, NULL) == ZY_OK)
        fail_msg("accepted: %s %s", text, override ? override : "");
    if (!strstr(zy_errmsg(), n1) || (n2 && !strstr(zy_errmsg(), n2)))
        fail_msg("error '%s' lacks '%s' or '%s'", zy_errmsg(), n1, n2 ? n2 : "");
}

static void test_defaults_in_range(void **state) {
    (void)state;
    zy_train_config c;
    train_config_defaults(&c); /* aborts when the table refuses one of its defaults */
    for (int i = 0; i < zy_settings_count; i++) {
        const zy_setting *s = &zy_settings[i];
        assert_non_null(s->doc);
        assert_ptr_equal(settings_find(s->key), s); /* keys are unique */
        /* the field's size fits the type (an enum field is stored as an int) */
        static const size_t sizes[] = {sizeof(int), sizeof(int64_t), sizeof(uint64_t),
                                       sizeof(float), sizeof(int)};
        if (s->type <= ZY_SET_BOOL || s->type == ZY_SET_ENUM) {
            size_t want = s->type == ZY_SET_ENUM ? sizeof(int) : sizes[s->type];
            if (s->size != want) fail_msg("%s: field of %zu bytes", s->key, s->size);
        }
        cJSON *v = cJSON_Parse(s->def);
        if (!v) fail_msg("%s: default %s is not JSON", s->key, s->def);
        if (s->type <= ZY_SET_FLOAT && !(v->valuedouble >= s->lo && v->valuedouble <= s->hi))
            fail_msg("%s: default %s outside [%g, %g]", s->key, s->def, s->lo, s->hi);
        cJSON_Delete(v);
    }
    /* the table's defaults are the modules' own (optimiser, balancing, CUDA context) */
    zy_optim_config o;
    optim_config_default(&o);
    assert_memory_equal(&o, &c.optim, sizeof o);
    zy_balance_config b;
    balance_config_default(&b);
    assert_memory_equal(&b, &c.balance, sizeof b);
    zy_cuda_opts k = ops_cuda_opts_default();
    assert_memory_equal(&k, &c.cuda, sizeof k);
    assert_int_equal(c.schedule.kind, ZY_SCHED_COSINE);
    assert_string_equal(c.device, "auto");
}

static void test_unknown_key_suggestion(void **state) {
    (void)state;
    expect_error("{\"data\": \"x\", \"stepz\": 5}", NULL, "unknown key stepz (did you mean steps?)",
                 "bad.json");
    expect_error("{\"data\": \"x\", \"optimizer\": {\"lrr\": 1}}", NULL,
                 "unknown key optimizer.lrr (did you mean optimizer.lr?)", NULL);
    expect_error("{\"data\": \"x\", \"warmup\": 5}", NULL,
                 "unknown key warmup (did you mean schedule.warmup?)", NULL);
    expect_error("{\"data\": \"x\", \"cuda\": {\"expert_stream\": 4}}", NULL,
                 "did you mean cuda.expert_streams?", NULL);
    expect_error("{\"data\": \"x\", \"xyzzy_frobnicate\": 5}", NULL,
                 "unknown key xyzzy_frobnicate (zayac train --list-settings", NULL);
    expect_error("{\"data\": \"x\"}", "optimzer.lr=0.1", "--set optimzer.lr=0.1",
                 "did you mean optimizer.lr?");
    expect_error("{\"data\": \"x\", \"optimizer\": 3}", NULL, "optimizer must be an object", NULL);
    /* a replaced key names what replaced it */
    expect_error("{\"data\": \"x\", \"dist\": {\"replicate_embedding\": true}}", NULL,
                 "dist.replicate_embedding was replaced by dist.embedding_update", "replicated");
    expect_error("{\"data\": \"x\"}", "dist.embedding_update=everywhere", "dist.embedding_update",
                 "split");
}

static void test_range_errors(void **state) {
    (void)state;
    expect_error("{\"data\": \"x\", \"steps\": 0}", NULL, "steps = 0 is outside [1, 1e+15]",
                 "bad.json");
    expect_error("{\"data\": \"x\", \"optimizer\": {\"beta1\": 1.5}}", NULL,
                 "optimizer.beta1 = 1.5 is outside [0, 0.999999]", NULL);
    expect_error("{\"data\": \"x\", \"cuda\": {\"expert_streams\": 17}}", NULL,
                 "cuda.expert_streams = 17 is outside [1, 16]", NULL);
    expect_error("{\"data\": \"x\", \"batch_size\": 2.5}", NULL,
                 "batch_size = 2.5 must be an integer", NULL);
    expect_error("{\"data\": \"x\", \"schedule\": {\"kind\": \"linear\"}}", NULL,
                 "schedule.kind = \"linear\" is not one of: constant, cosine, wsd", NULL);
    expect_error("{\"data\": \"x\", \"device\": \"tpu\"}", NULL,
                 "device = \"tpu\" is not one of: auto, cpu, cuda", NULL);
    expect_error("{\"data\": \"x\", \"cuda\": {\"attention\": \"flash\"}}", NULL,
                 "cuda.attention = \"flash\" is not one of: auto, zayac, cudnn", NULL);
    expect_error("{\"data\": \"x\", \"cuda\": {\"attention_workspace_gib\": 0.01}}", NULL,
                 "cuda.attention_workspace_gib = 0.01 is outside [0.0625, 64]", NULL);
    expect_error("{\"data\": \"x\"}", "cuda.attention_workspace_gib=65",
                 "cuda.attention_workspace_gib = 65 is outside [0.0625, 64]", NULL);
    expect_error("{\"data\": \"x\", \"cuda\": {\"attention_workspace_gib\": 0}}", NULL,
                 "cuda.attention_workspace_gib = 0 is outside [0.0625, 64] (or \"auto\")", NULL);
    expect_error("{\"data\": \"x\"}", "cuda.attention_workspace_gib=big",
                 "cuda.attention_workspace_gib must be \"auto\" or a number of GiB", NULL);
    expect_error("{\"data\": \"x\", \"balance\": {\"enabled\": 2}}", NULL,
                 "balance.enabled must be true or false, found 2", NULL);
    expect_error("{\"data\": \"x\", \"out_dir\": 7}", NULL, "out_dir must be a string, found 7",
                 NULL);
    /* cross-field: names both values and the way out */
    expect_error("{\"data\": \"x\", \"seq_len\": 100000}", NULL,
                 "seq_len = 100000 exceeds the model's max_position_embeddings", "lower seq_len");
    expect_error("{\"data\": \"x\", \"optimizer\": {\"muon_lr_ratio\": 0}}", NULL, "muon_lr_ratio",
                 "bad.json");
    /* --set values are parsed by the key's type */
    expect_error("{\"data\": \"x\"}", "optimizer.lr=0.5e", "optimizer.lr", "'0.5e'");
    expect_error("{\"data\": \"x\"}", "optimizer.lr=\"fast\"", "optimizer.lr must be a number",
                 NULL);
    expect_error("{\"data\": \"x\"}", "optimizer.nesterov=yes", "optimizer.nesterov",
                 "true or false");
    expect_error("{\"data\": \"x\"}", "steps", "not of the form key=value", NULL);
    expect_error("{\"data\": \"x\"}", "optimizer=3", "optimizer is a group of settings", NULL);
    expect_error("{\"data\": \"\"}", NULL, "data is empty", NULL);
    expect_error("{\"data\": \"x\", \"model\": \"tiny\"}", "model.hidden_size=3",
                 "model is not an object", NULL);
}

/* Each --set value kind lands in its field as typed. */
static void test_set_types(void **state) {
    (void)state;
    const char *p = write_cfg("ok.json", "{\"data\": \"x\"}");
    const char *over[] = {"optimizer.lr=1e-3",
                          "optimizer.nesterov=false",
                          "out_dir=\"quoted\\\"dir\"",
                          "tokenizer=plain \"text\"",
                          "device=cpu",
                          "data=[{\"path\": \"a\", \"weight\": 2}, {\"path\": \"b\"}]",
                          "samples.prompts=[\"x\", \"y\"]",
                          "cuda.expert_chunk=true",
                          "cuda.attention=cudnn",
                          "cuda.attention_workspace_gib=0.5",
                          "seed=9007199254740992"};
    zy_train_config c;
    if (train_config_build(&c, p, over, 11, NULL) != ZY_OK) fail_msg("%s", zy_errmsg());
    assert_true(c.optim.lr == 1e-3f);
    assert_int_equal(c.optim.muon_nesterov, 0);
    assert_string_equal(c.out_dir, "quoted\"dir");
    assert_string_equal(c.tokenizer, "plain \"text\"");
    assert_string_equal(c.device, "cpu");
    assert_int_equal(c.n_sources, 2);
    assert_true(c.sources[0].weight == 2.0 && c.sources[1].weight == 1.0);
    assert_int_equal(c.n_prompts, 2);
    assert_string_equal(c.prompts[1], "y");
    assert_int_equal(c.cuda.expert_chunk, 1);
    assert_int_equal(c.cuda.attention, ZY_ATTN_CUDNN);
    assert_true(c.cuda.attention_workspace_gib == 0.5f);
    assert_true(c.seed == 9007199254740992ull);
    /* "auto" as --set writes it (bare) and as a config does (a JSON string), over a number */
    const char *to_auto[] = {"cuda.attention_workspace_gib=0.5",
                             "cuda.attention_workspace_gib=auto"};
    if (train_config_build(&c, p, to_auto, 2, NULL) != ZY_OK) fail_msg("%s", zy_errmsg());
    assert_true(c.cuda.attention_workspace_gib == ZY_ATTN_WORKSPACE_AUTO);
    const char *q = write_cfg(
        "ws.json", "{\"data\": \"x\", \"cuda\": {\"attention_workspace_gib\": \"auto\"}}");
    if (train_config_build(&c, q, NULL, 0, NULL) != ZY_OK) fail_msg("%s", zy_errmsg());
    assert_true(c.cuda.attention_workspace_gib == ZY_ATTN_WORKSPACE_AUTO);
}

static void test_warmup_clamp(void **state) {
    (void)state;
    const char *p = write_cfg("short.json", "{\"data\": \"x\", \"steps\": 1}");
    zy_train_config c;
    if (train_config_build(&c, p, NULL, 0, NULL) != ZY_OK) fail_msg("%s", zy_errmsg());
    assert_int_equal(c.schedule.warmup_steps, 1);
    assert_int_equal(c.schedule.total_steps, 1);
    run_result r = RUN("train", "--config", p, "--print-config");
    if (r.code != 0) fail_msg("exit %d: %s", r.code, r.err);
    if (!strstr(r.err, "schedule.warmup = 100") || !strstr(r.err, "steps = 1"))
        fail_msg("no warning naming both values: %s", r.err);
    result_free(&r);
}

/* The resolved config as the CLI prints it (stdout; exit 0 required). */
static char *print_config(const char *cfg, const char *const *extra) {
    const char *args[32] = {"train", "--config", cfg, "--print-config"};
    int n = 4;
    for (; extra && *extra; extra++) args[n++] = *extra;
    args[n] = NULL;
    run_result r = run_args(args);
    if (r.code != 0) fail_msg("--print-config exit %d: %s", r.code, r.err);
    free(r.err);
    return r.out;
}

static void test_print_config_round_trip(void **state) {
    (void)state;
    const char *p = write_cfg(
        "rt.json",
        "{\"model\": {\"model_type\": \"zaya\", \"vocab_size\": 320, \"hidden_size\": 32,"
        " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
        " \"head_dim\": 32, \"num_experts\": 3, \"moe_intermediate_size\": 16,"
        " \"router_hidden_size\": 8, \"max_position_embeddings\": 64},"
        " \"data\": [{\"path\": \"d1\", \"weight\": 0.3}, {\"path\": \"d2\"}], \"seq_len\": 16,"
        " \"optimizer\": {\"name\": \"adamw\", \"lr\": 0.1, \"beta2\": 0.987654321},"
        " \"samples\": {\"prompts\": [\"a \\\"q\\\"\"]}, \"seed\": 12345678901}");
    const char *extra[] = {"--set", "schedule.kind=wsd", "--steps", "77", NULL};
    char *first = print_config(p, extra);
    cJSON *j = cJSON_Parse(first);
    if (!j) fail_msg("not JSON:\n%s", first);
    /* every key of the table is there: defaults included */
    for (int i = 0; i < zy_settings_count; i++) {
        char key[128];
        snprintf(key, sizeof key, "%s", zy_settings[i].key);
        const cJSON *o = j;
        char *dot = strchr(key, '.');
        if (dot) *dot = 0, o = cJSON_GetObjectItemCaseSensitive(o, key);
        if (!cJSON_GetObjectItemCaseSensitive(o, dot ? dot + 1 : key))
            fail_msg("%s missing from --print-config", zy_settings[i].key);
    }
    assert_int_equal(cJSON_GetObjectItem(j, "steps")->valueint, 77);
    cJSON_Delete(j);
    const char *again = write_cfg("rt2.json", first);
    char *second = print_config(again, NULL);
    assert_string_equal(first, second);
    /* and read back it is the same config, field for field */
    zy_train_config a, b;
    const char *over[] = {"schedule.kind=wsd", "steps=77"};
    if (train_config_build(&a, p, over, 2, NULL) != ZY_OK) fail_msg("%s", zy_errmsg());
    if (train_config_build(&b, again, NULL, 0, NULL) != ZY_OK) fail_msg("%s", zy_errmsg());
    assert_memory_equal(&a.model, &b.model, sizeof a.model);
    assert_memory_equal(&a.optim, &b.optim, sizeof a.optim);
    assert_memory_equal(&a.schedule, &b.schedule, sizeof a.schedule);
    assert_memory_equal(a.sources, b.sources, sizeof a.sources);
    assert_true(a.seed == b.seed && a.seed == 12345678901ull);
    assert_string_equal(a.prompts[0], b.prompts[0]);
    free(first);
    free(second);
    /* a bad config: exit 2, nothing on stdout */
    run_result r = RUN("train", "--config", p, "--set", "steps=0", "--print-config");
    assert_int_equal(r.code, 2);
    assert_string_equal(r.out, "");
    assert_non_null(strstr(r.err, "steps = 0"));
    result_free(&r);
}

/* The README's list of keys is the command's output, byte for byte. */
static void test_readme_matches(void **state) {
    (void)state;
    char path[600], *text;
    snprintf(path, sizeof path, "%s/README.md", root);
    if (zy_read_file(path, &text, NULL) != ZY_OK) fail_msg("%s", zy_errmsg());
    const char *begin = strstr(text, "<!-- settings:begin -->\n");
    const char *end = strstr(text, "<!-- settings:end -->");
    if (!begin || !end || end < begin) fail_msg("%s: no settings:begin/end markers", path);
    begin += strlen("<!-- settings:begin -->\n");
    run_result r = RUN("train", "--list-settings");
    assert_int_equal(r.code, 0);
    char *md = settings_markdown();
    assert_string_equal(r.out, md);
    if (strlen(r.out) != (size_t)(end - begin) || memcmp(r.out, begin, strlen(r.out)))
        fail_msg("README.md between the settings markers differs from `zayac train "
                 "--list-settings`: paste its output there");
    free(md);
    result_free(&r);
    free(text);
}

/* Option values are checked, not pasted into JSON text. */
static void test_option_values(void **state) {
    (void)state;
    const char *p = write_cfg("opt.json", "{\"data\": \"x\"}");
    run_result r = RUN("train", "--config", p, "--steps", "3x");
    assert_int_equal(r.code, 2);
    assert_non_null(strstr(r.err, "--steps"));
    assert_non_null(strstr(r.err, "3x"));
    result_free(&r);
    r = RUN("train", "--config", p, "--set", "optimizer.lr=0.5e");
    assert_int_equal(r.code, 2);
    assert_non_null(strstr(r.err, "optimizer.lr"));
    assert_non_null(strstr(r.err, "0.5e"));
    result_free(&r);
    r = RUN("train", "--config", p, "--device", "tpu");
    assert_int_equal(r.code, 2);
    assert_non_null(strstr(r.err, "--device"));
    result_free(&r);
    /* the exact path, quotes and backslashes included */
    const char *odd = "a\"b\\c 'd'";
    char *out = print_config(p, (const char *const[]){"--out", odd, "--seed", "9", NULL});
    cJSON *j = cJSON_Parse(out);
    assert_non_null(j);
    assert_string_equal(cJSON_GetObjectItem(j, "out_dir")->valuestring, odd);
    assert_int_equal(cJSON_GetObjectItem(j, "seed")->valueint, 9);
    cJSON_Delete(j);
    free(out);
    /* the flags win over --set, which wins over the file */
    out = print_config(p, (const char *const[]){"--set", "steps=5", "--steps", "6", NULL});
    j = cJSON_Parse(out);
    assert_int_equal(cJSON_GetObjectItem(j, "steps")->valueint, 6);
    cJSON_Delete(j);
    free(out);
}

static int setup(void **state) {
    (void)state;
    bin = getenv("ZAYAC_BIN");
    root = getenv("ZAYAC_ROOT");
    if (!bin || !root) {
        fprintf(stderr, "test_settings: set ZAYAC_BIN and ZAYAC_ROOT (make test does)\n");
        return -1;
    }
    snprintf(tmp, sizeof tmp, "/tmp/zy_settings_XXXXXX");
    return mkdtemp(tmp) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    zy_remove_tree(tmp);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_in_range), cmocka_unit_test(test_unknown_key_suggestion),
        cmocka_unit_test(test_range_errors),      cmocka_unit_test(test_set_types),
        cmocka_unit_test(test_warmup_clamp),      cmocka_unit_test(test_print_config_round_trip),
        cmocka_unit_test(test_readme_matches),    cmocka_unit_test(test_option_values),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
