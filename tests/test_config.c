/* Tests of src/model/config: transformers' defaults, an HF-written config.json
 * (tests/fixtures/io/hf_tiny, made by ZayaConfig(...).save_pretrained with the values repeated
 * here), the rope_parameters forms, write/read round trips, presets, and every invalid field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/fileio.h"
#include "model/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[64];

static void fixture(char *buf, size_t n, const char *name) {
    const char *root = getenv("ZAYAC_ROOT");
    snprintf(buf, n, "%s/tests/fixtures/io/%s", root ? root : ".", name);
}

static void test_defaults_are_hf_defaults(void **state) {
    (void)state;
    /* transformers 5.17 configuration_zaya.py */
    zy_config c;
    config_defaults(&c);
    assert_int_equal(c.vocab_size, 262272);
    assert_int_equal(c.hidden_size, 2048);
    assert_int_equal(c.num_hidden_layers, 40);
    assert_int_equal(c.num_attention_heads, 8);
    assert_int_equal(c.num_key_value_heads, 2);
    assert_int_equal(c.head_dim, 128);
    assert_int_equal(c.num_experts, 16);
    assert_int_equal(c.moe_intermediate_size, 2048);
    assert_int_equal(c.router_hidden_size, 256);
    assert_int_equal(c.max_position_embeddings, 131072);
    assert_int_equal(c.pad_token_id, 0);
    assert_int_equal(c.bos_token_id, 2);
    assert_int_equal(c.n_eos, 1);
    assert_int_equal(c.eos_token_ids[0], 106);
    assert_true(c.rope[ZY_LAYER_HYBRID].theta == 5e6);
    assert_true(c.rope[ZY_LAYER_HYBRID_SLIDING].theta == 1e4);
    assert_true(c.rope[0].partial_rotary_factor == 0.5 && c.rope[1].partial_rotary_factor == 0.5);
    assert_int_equal(config_validate(&c, "defaults"), ZY_OK);
    /* An empty object means the defaults, as in HF. */
    zy_config d;
    assert_int_equal(config_parse_json(&d, "{}", "empty"), ZY_OK);
    assert_memory_equal(&c, &d, sizeof c);
}

/* The values scripts/make_io_fixtures.py passed to ZayaConfig for hf_tiny. */
static void check_hf_tiny(const zy_config *c) {
    assert_int_equal(c->vocab_size, 64);
    assert_int_equal(c->hidden_size, 16);
    assert_int_equal(c->num_hidden_layers, 3);
    assert_int_equal(c->num_attention_heads, 4);
    assert_int_equal(c->num_key_value_heads, 2);
    assert_int_equal(c->head_dim, 8);
    assert_int_equal(c->num_experts, 3);
    assert_int_equal(c->num_experts_per_tok, 1);
    assert_int_equal(c->moe_intermediate_size, 8);
    assert_int_equal(c->router_hidden_size, 8);
    assert_int_equal(c->max_position_embeddings, 256);
    assert_int_equal(c->cca_time0, 3);
    assert_int_equal(c->cca_time1, 2);
    assert_int_equal(c->sliding_window, 32);
    assert_int_equal(c->layer_types[0], ZY_LAYER_HYBRID);
    assert_int_equal(c->layer_types[1], ZY_LAYER_HYBRID_SLIDING);
    assert_int_equal(c->layer_types[2], ZY_LAYER_HYBRID);
    assert_true(c->rope[ZY_LAYER_HYBRID].theta == 20000.0);
    assert_true(c->rope[ZY_LAYER_HYBRID].partial_rotary_factor == 0.5);
    assert_true(c->rope[ZY_LAYER_HYBRID_SLIDING].theta == 5000.0);
    assert_true(c->rope[ZY_LAYER_HYBRID_SLIDING].partial_rotary_factor == 0.25);
    assert_true(c->rms_norm_eps == 1e-6);
    assert_true(c->initializer_range == 0.01);
    assert_int_equal(c->pad_token_id, 3);
    assert_int_equal(c->bos_token_id, 4);
    assert_int_equal(c->n_eos, 2); /* [5, 7]: both kept, in order */
    assert_int_equal(c->eos_token_ids[0], 5);
    assert_int_equal(c->eos_token_ids[1], 7);
    assert_true(config_is_eos(c, 7) && config_is_eos(c, 5) && !config_is_eos(c, 6));
    assert_int_equal(c->tie_word_embeddings, 1);
    assert_string_equal(c->hidden_act, "silu");
    assert_int_equal(config_rotary_dim(c, 0), 4);
    assert_int_equal(config_rotary_dim(c, 1), 2);
}

static void test_hf_written_config(void **state) {
    (void)state;
    char dir[512], file[600];
    fixture(dir, sizeof dir, "hf_tiny");
    zy_config c, d;
    assert_int_equal(config_load(&c, dir), ZY_OK); /* a folder */
    check_hf_tiny(&c);
    snprintf(file, sizeof file, "%s/config.json", dir);
    assert_int_equal(config_load(&d, file), ZY_OK); /* or the file itself */
    assert_memory_equal(&c, &d, sizeof c);
}

static void test_round_trip(void **state) {
    (void)state;
    char dir[512], out[600];
    fixture(dir, sizeof dir, "hf_tiny");
    zy_config c, d;
    assert_int_equal(config_load(&c, dir), ZY_OK);
    char *text = config_to_json(&c);
    assert_int_equal(config_parse_json(&d, text, "written"), ZY_OK);
    assert_memory_equal(&c, &d, sizeof c);
    assert_non_null(strstr(text, "\"architectures\": [\n    \"ZayaForCausalLM\"\n  ]"));
    assert_non_null(strstr(text, "\"dtype\": \"float32\""));
    assert_non_null(strstr(text, "\"rms_norm_eps\": 1e-06"));
    assert_non_null(strstr(text, "\"rope_theta\": 20000.0"));
    assert_non_null(strstr(text, "\"sliding_window\": 32"));
    free(text);
    snprintf(out, sizeof out, "%s/saved/sub", tmpdir);
    assert_int_equal(config_save(&c, out), ZY_OK); /* creates the folder */
    assert_int_equal(config_load(&d, out), ZY_OK);
    assert_memory_equal(&c, &d, sizeof c);
    /* An invalid config is not written over a good one. */
    zy_config bad = c;
    bad.num_experts_per_tok = 2;
    assert_int_equal(config_save(&bad, out), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "num_experts_per_tok"));
    assert_int_equal(config_load(&d, out), ZY_OK);
    assert_memory_equal(&c, &d, sizeof c);
    /* null tokens and no sliding window survive too */
    c.pad_token_id = -1;
    config_set_eos(&c, -1);
    c.layer_types[1] = ZY_LAYER_HYBRID;
    c.sliding_window = 0;
    text = config_to_json(&c);
    assert_non_null(strstr(text, "\"pad_token_id\": null"));
    assert_non_null(strstr(text, "\"sliding_window\": null"));
    assert_int_equal(config_parse_json(&d, text, "written"), ZY_OK);
    assert_memory_equal(&c, &d, sizeof c);
    free(text);
}

static const char *BASE =
    "{\"model_type\": \"zaya\", \"num_hidden_layers\": 2, \"vocab_size\": 100, "
    "\"hidden_size\": 32, \"head_dim\": 8, \"router_hidden_size\": 8";

/* Parses BASE + extra + "}" and validates. */
static int parse_with(zy_config *c, const char *extra) {
    char json[2048];
    snprintf(json, sizeof json, "%s%s%s}", BASE, *extra ? ", " : "", extra);
    if (config_parse_json(c, json, "case.json") != ZY_OK) return ZY_ERR;
    return config_validate(c, "case.json");
}

static void test_rope_forms(void **state) {
    (void)state;
    zy_config c;
    /* absent: HF defaults per layer type */
    assert_int_equal(parse_with(&c, ""), ZY_OK);
    assert_true(c.rope[0].theta == 5e6 && c.rope[1].theta == 1e4 && c.rope[0].present);
    /* flat: applies to both types */
    assert_int_equal(
        parse_with(
            &c, "\"rope_parameters\": {\"rope_theta\": 1234.0, \"partial_rotary_factor\": 0.25}"),
        ZY_OK);
    for (int t = 0; t < 2; t++)
        assert_true(c.rope[t].theta == 1234 && c.rope[t].partial_rotary_factor == 0.25 &&
                    c.rope[t].present);
    /* legacy top-level keys */
    assert_int_equal(parse_with(&c, "\"rope_theta\": 777, \"partial_rotary_factor\": 0.75"), ZY_OK);
    for (int t = 0; t < 2; t++)
        assert_true(c.rope[t].theta == 777 && c.rope[t].partial_rotary_factor == 0.75);
    /* nested with the hub's stray top-level rope_type; only one type; factor defaults to 1.0 */
    assert_int_equal(parse_with(&c, "\"rope_parameters\": {\"rope_type\": \"default\", \"hybrid\": "
                                    "{\"rope_type\": \"default\", \"rope_theta\": 99.0}}"),
                     ZY_OK);
    assert_true(c.rope[0].theta == 99 && c.rope[0].partial_rotary_factor == 1.0);
    assert_int_equal(c.rope[1].present, 0);
    assert_int_equal(config_rotary_dim(&c, 0), 8);
    char *text = config_to_json(&c); /* only the present type is written */
    assert_null(strstr(text, "hybrid_sliding"));
    zy_config d;
    assert_int_equal(config_parse_json(&d, text, "w"), ZY_OK);
    assert_memory_equal(&c, &d, sizeof c);
    free(text);
}

static void test_token_id_forms(void **state) {
    (void)state;
    zy_config c;
    assert_int_equal(
        parse_with(&c, "\"eos_token_id\": 9, \"bos_token_id\": null, \"pad_token_id\": null"),
        ZY_OK);
    assert_int_equal(c.n_eos, 1);
    assert_int_equal(c.eos_token_ids[0], 9);
    assert_int_equal(c.bos_token_id, -1);
    assert_int_equal(c.pad_token_id, -1);
    assert_int_equal(parse_with(&c, "\"eos_token_id\": [11, 12, 106]"), ZY_OK);
    assert_int_equal(c.n_eos, 3);
    assert_true(config_is_eos(&c, 11) && config_is_eos(&c, 12) && config_is_eos(&c, 106));
    /* written back as the same list, and read back whole */
    char *text = config_to_json(&c);
    assert_non_null(strstr(text, "\"eos_token_id\": [11, 12, 106]"));
    zy_config d;
    assert_int_equal(config_parse_json(&d, text, "written"), ZY_OK);
    assert_memory_equal(&c, &d, sizeof c);
    free(text);
    assert_int_equal(parse_with(&c, "\"eos_token_id\": null"), ZY_OK);
    assert_int_equal(c.n_eos, 0);
    assert_false(config_is_eos(&c, 0));
    /* attention_dropout is read and written back (training refuses it, see test_train_config) */
    assert_int_equal(parse_with(&c, "\"attention_dropout\": 0.1"), ZY_OK);
    assert_true(c.attention_dropout == 0.1);
    text = config_to_json(&c);
    assert_non_null(strstr(text, "\"attention_dropout\": 0.1,"));
    free(text);
}

/* The config must be refused with an error naming the source and containing `needle`. */
static void expect_bad(const char *extra, const char *needle) {
    zy_config c;
    zy_err_clear();
    if (parse_with(&c, extra) != ZY_ERR) fail_msg("case {%s} was accepted", extra);
    if (!strstr(zy_errmsg(), "case.json") || !strstr(zy_errmsg(), needle))
        fail_msg("case {%s}: error '%s' lacks '%s' or the source", extra, zy_errmsg(), needle);
}

static void test_invalid_fields(void **state) {
    (void)state;
    expect_bad("\"num_experts_per_tok\": 2", "num_experts_per_tok = 2");
    expect_bad("\"num_attention_heads\": 6, \"num_key_value_heads\": 4",
               "num_attention_heads = 6 is not a multiple of num_key_value_heads = 4");
    expect_bad("\"head_dim\": 9", "head_dim = 9 is odd");
    /* int(10 * 0.5) = 5 rotary channels: odd */
    expect_bad("\"head_dim\": 10, \"rope_parameters\": {\"rope_theta\": 1e4, "
               "\"partial_rotary_factor\": 0.5}",
               "rotary width");
    expect_bad("\"rope_parameters\": {\"rope_theta\": 1e4, \"partial_rotary_factor\": 0.1}",
               "rotary width"); /* int(0.8) = 0 */
    expect_bad("\"rope_parameters\": {\"rope_theta\": 1e4, \"partial_rotary_factor\": 1.5}",
               "partial_rotary_factor = 1.5");
    expect_bad("\"rope_parameters\": {\"rope_theta\": -1}", "rope_theta = -1");
    expect_bad("\"rope_parameters\": {\"partial_rotary_factor\": 0.5}", "no rope_theta");
    expect_bad("\"rope_parameters\": {\"rope_type\": \"yarn\", \"rope_theta\": 10}",
               "rope_type = \"yarn\"");
    expect_bad("\"rope_parameters\": {\"hybrid\": {\"rope_theta\": \"big\"}}",
               "rope_parameters.hybrid.rope_theta: expected a number, found a string");
    expect_bad("\"rope_parameters\": [1]", "rope_parameters: expected an object");
    expect_bad("\"cca_time0\": 0", "cca_time0 = 0");
    expect_bad("\"cca_time1\": -3", "cca_time1 = -3");
    expect_bad("\"hidden_size\": 0", "hidden_size = 0");
    expect_bad("\"num_experts\": -1", "num_experts = -1");
    expect_bad("\"tie_word_embeddings\": false", "tie_word_embeddings = false");
    expect_bad("\"tie_word_embeddings\": 1", "tie_word_embeddings: expected true or false");
    expect_bad("\"attention_bias\": true", "attention_bias = true");
    expect_bad("\"lm_head_bias\": true", "lm_head_bias = true");
    expect_bad("\"hidden_act\": \"gelu\"", "hidden_act = \"gelu\"");
    expect_bad("\"hidden_act\": \"a_very_long_activation_name\"", "hidden_act");
    expect_bad("\"hidden_act\": 3", "hidden_act: expected a string");
    expect_bad("\"num_hidden_layers\": 300", "num_hidden_layers = 300");
    expect_bad("\"layer_types\": [\"hybrid\", \"hybrid_sliding\"]",
               "\"hybrid_sliding\" layers but sliding_window is not set");
    expect_bad("\"layer_types\": [\"hybrid\"]",
               "layer_types has 1 entries but num_hidden_layers = 2");
    expect_bad("\"layer_types\": [\"hybrid\", \"full\"]", "layer_types[1] = \"full\"");
    expect_bad("\"layer_types\": [\"hybrid\", 1]", "layer_types[1]: expected a string");
    expect_bad("\"layer_types\": [\"hybrid\", \"hybrid_sliding\"], \"sliding_window\": 0",
               "sliding_window = 0");
    expect_bad("\"layer_types\": [\"hybrid\", \"hybrid_sliding\"], \"sliding_window\": 8, "
               "\"rope_parameters\": {\"hybrid\": {\"rope_theta\": 10}}",
               "no \"hybrid_sliding\" entry");
    expect_bad("\"moe_intermediate_size\": \"2048\"",
               "moe_intermediate_size: expected an integer, found a string");
    expect_bad("\"max_position_embeddings\": 2048.5",
               "max_position_embeddings = 2048.5 is not an integer");
    expect_bad("\"vocab_size\": 1e12", "vocab_size");
    expect_bad("\"rms_norm_eps\": \"small\"", "rms_norm_eps: expected a number, found a string");
    expect_bad("\"rms_norm_eps\": 0", "rms_norm_eps = 0");
    expect_bad("\"pad_token_id\": 100", "pad_token_id = 100 is outside the vocabulary");
    expect_bad("\"pad_token_id\": -1", "pad_token_id: expected a non-negative integer or null");
    expect_bad("\"eos_token_id\": [1, \"x\"]", "eos_token_id[1]");
    expect_bad("\"eos_token_id\": {}",
               "eos_token_id: expected a non-negative integer or null, found an object");
    expect_bad("\"model_type\": \"llama\"", "model_type = \"llama\", expected \"zaya\"");
    zy_config c;
    /* A repeated key: the last wins, as in Python's json (BASE sets hidden_size 32 first). */
    assert_int_equal(parse_with(&c, "\"hidden_size\": 64"), ZY_OK);
    assert_int_equal(c.hidden_size, 64);
    assert_int_equal(config_parse_json(&c, "{\"model_type\": \"llama\"}", "mt.json"), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "mt.json: model_type = \"llama\""));
    assert_int_equal(config_parse_json(&c, "[1, 2]", "arr.json"), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "arr.json: expected a JSON object, found a list"));
}

static void test_malformed_json(void **state) {
    (void)state;
    zy_config c;
    assert_int_equal(
        config_parse_json(&c, "{\n  \"hidden_size\": 12,\n  \"vocab_size\": ,\n}", "m.json"),
        ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "m.json: not valid JSON"));
    assert_non_null(strstr(zy_errmsg(), "line 3"));
    assert_int_equal(config_parse_json(&c, "{\"a\": 1} trailing", "t.json"), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "t.json: not valid JSON"));
    assert_int_equal(config_parse_json(&c, "", "e.json"), ZY_ERR);
    char p[600];
    snprintf(p, sizeof p, "%s/absent/config.json", tmpdir);
    assert_int_equal(config_load(&c, p), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), p));
    snprintf(p, sizeof p, "%s/garbage.json", tmpdir);
    assert_int_equal(zy_write_file_atomic(p, "{\"hidden_size\": 8,", 17), ZY_OK);
    assert_int_equal(config_load(&c, p), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), p));
}

static void test_presets(void **state) {
    (void)state;
    const char *names[] = {"tiny", "bench-small", "zaya1-base", "bench-base"};
    for (int i = 0; i < 4; i++) {
        assert_string_equal(config_preset_name(i), names[i]);
        zy_config a, b;
        assert_int_equal(config_preset(&a, names[i]), ZY_OK);
        assert_int_equal(config_preset_builtin(&b, names[i]), ZY_OK);
        /* The built-in copy equals configs/<name>.json. */
        char path[4096];
        assert_true(config_preset_path(names[i], path, sizeof path));
        zy_config f;
        if (config_load(&f, path) != ZY_OK) fail_msg("%s", zy_errmsg());
        assert_memory_equal(&f, &b, sizeof f);
        assert_memory_equal(&a, &b, sizeof a);
        assert_int_equal(config_validate(&a, names[i]), ZY_OK);
    }
    assert_null(config_preset_name(4));
    zy_config c;
    assert_int_equal(config_preset(&c, "tiny"), ZY_OK);
    assert_int_equal(c.hidden_size, 128);
    assert_int_equal(c.num_hidden_layers, 4);
    assert_int_equal(c.num_attention_heads, 4);
    assert_int_equal(c.num_key_value_heads, 2);
    assert_int_equal(c.head_dim, 32);
    assert_int_equal(c.num_experts, 4);
    assert_int_equal(c.moe_intermediate_size, 128);
    assert_int_equal(c.router_hidden_size, 32);
    assert_int_equal(c.vocab_size, 4096);
    assert_int_equal(config_rotary_dim(&c, 3), 16);
    assert_int_equal(config_preset(&c, "bench-small"), ZY_OK); /* BASELINES.md's config */
    assert_int_equal(c.hidden_size, 1024);
    assert_int_equal(c.num_hidden_layers, 12);
    assert_int_equal(c.moe_intermediate_size, 1024);
    assert_int_equal(c.vocab_size, 32768);
    assert_int_equal(c.max_position_embeddings, 2048);
    assert_int_equal(config_preset(&c, "zaya1-base"), ZY_OK); /* spec/zaya1-model.md */
    assert_int_equal(c.vocab_size, 262272);
    assert_int_equal(c.hidden_size, 2048);
    assert_int_equal(c.num_hidden_layers, 40);
    assert_int_equal(c.moe_intermediate_size, 2048);
    assert_true(c.rope[0].theta == 1e4 && c.rope[0].partial_rotary_factor == 0.5);
    zy_config base = c; /* bench-base: zaya1-base with 8 layers, nothing else changed */
    assert_int_equal(config_preset(&c, "bench-base"), ZY_OK);
    assert_int_equal(c.num_hidden_layers, 8);
    base.num_hidden_layers = 8;
    assert_memory_equal(&c, &base, sizeof c);
    assert_int_equal(config_preset(&c, "nope"), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "preset 'nope'"));
    assert_int_equal(config_preset(&c, "../etc/x"), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "a preset name has only"));
}

static void test_preset_from_anywhere(void **state) {
    (void)state;
    /* No ZAYAC_ROOT and another working directory: found next to the executable or built in. */
    char cwd[4096];
    assert_non_null(getcwd(cwd, sizeof cwd));
    const char *root = getenv("ZAYAC_ROOT");
    char *saved = root ? strdup(root) : NULL;
    unsetenv("ZAYAC_ROOT");
    assert_int_equal(chdir(tmpdir), 0);
    zy_config a, b;
    assert_int_equal(config_preset(&a, "zaya1-base"), ZY_OK);
    assert_int_equal(config_preset_builtin(&b, "zaya1-base"), ZY_OK);
    assert_memory_equal(&a, &b, sizeof a);
    /* A broken preset file found first is an error naming it, not a silent fallback. */
    assert_int_equal(zy_mkdirs("configs"), ZY_OK);
    assert_int_equal(zy_write_file_atomic("configs/tiny.json", "{\"head_dim\": 7}", 15), ZY_OK);
    assert_int_equal(config_preset(&a, "tiny"), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "configs/tiny.json: head_dim = 7"));
    assert_int_equal(chdir(cwd), 0);
    if (saved) setenv("ZAYAC_ROOT", saved, 1);
    free(saved);
}

static int setup(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/zy_cfg_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return zy_remove_tree(tmpdir) == ZY_OK ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_are_hf_defaults),
        cmocka_unit_test(test_hf_written_config),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_rope_forms),
        cmocka_unit_test(test_token_id_forms),
        cmocka_unit_test(test_invalid_fields),
        cmocka_unit_test(test_malformed_json),
        cmocka_unit_test(test_presets),
        cmocka_unit_test(test_preset_from_anywhere),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
