/* The exit-status contract of the zayac CLI (README "Exit statuses"), through the built binary
 * ($ZAYAC_BIN) in a child process: --help and -h on every command and subcommand print the usage to
 * stdout and exit 0; --version exits 0; a usage error (unknown option or command, missing value,
 * stray argument) prints the error and the usage to stderr and exits 2; a bad option value, a
 * missing or malformed file, an impossible shape and data that does not fit the model exit 2 with
 * one line naming the option or file; a write that fails at run time (the file-size limit, as a
 * full disk would) exits 1; launch returns its failed rank's status. Cases across the commands. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/fileio.h"
#include "spawn_util.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static char tmp[64];      /* this test's temporary folder */
static const char *bin;   /* the zayac binary */
static char small_a[600]; /* tests/fixtures/hf/small_a: vocab_size 97 */
static char data[256];    /* prepared in setup: token ids up to 299 */

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

static void print_args(const char *const *args) {
    fprintf(stderr, "command: zayac");
    for (; *args; args++) fprintf(stderr, " %s", *args);
    fprintf(stderr, "\n");
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* Runs zayac args; requires exit status `want`, nothing on stdout, and a first stderr line
 * "zayac ...: ..." holding `needle` (and `needle2` unless NULL). usage: 1 when the usage must
 * follow the error, 0 when the error must be the only line. */
static void expect_status(const char *const *args, int want, const char *needle,
                          const char *needle2, int usage) {
    run_result r = spawn_capture(bin, tmp, args);
    const char *nl = strchr(r.err, '\n');
    size_t first_len = nl ? (size_t)(nl - r.err) : strlen(r.err);
    char *first = strndup(r.err, first_len);
    int bad = r.code != want || *r.out || strncmp(first, "zayac", 5) != 0;
    bad |= !strstr(first, needle) || (needle2 && !strstr(first, needle2));
    bad |= usage ? !strstr(r.err, "\nusage: zayac") : count_lines(r.err) != 1;
    if (bad) {
        print_args(args);
        fail_msg("expected exit %d, '%s'%s%s in the first stderr line%s; got exit %d, stdout:\n%s\n"
                 "stderr:\n%s",
                 want, needle, needle2 ? " and " : "", needle2 ? needle2 : "",
                 usage ? " and the usage after it" : " and no other line", r.code, r.out, r.err);
    }
    free(first);
    result_free(&r);
}

#define EXPECT_USAGE_ERROR(needle, ...) expect_status(ARGS(__VA_ARGS__), 2, needle, NULL, 1)
#define EXPECT_BAD_INPUT(needle, needle2, ...)                                                     \
    expect_status(ARGS(__VA_ARGS__), 2, needle, needle2, 0)

/* Every command and subcommand, as argv words (NULL-terminated, at most 3 words). */
static const char *const commands[][3] = {
    {"info", NULL},
    {"init", NULL},
    {"export", NULL},
    {"logits", NULL},
    {"generate", NULL},
    {"train", NULL},
    {"eval", NULL},
    {"version", NULL},
    {"launch", NULL},
    {"tokenizer", "train", NULL},
    {"tokenizer", "encode", NULL},
    {"tokenizer", "decode", NULL},
    {"tokenizer", "info", NULL},
    {"data", "prepare", NULL},
    {"data", "check", NULL},
    {"bench", "collectives", NULL},
    {"bench", "gemm", NULL},
    {"bench", "membw", NULL},
    {"bench", "train", NULL},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

/* args = the command's words + extra (NULL-terminated). */
static void command_args(const char **args, const char *const *words, const char *const *extra) {
    int n = 0;
    for (; *words; words++) args[n++] = *words;
    for (; *extra; extra++) args[n++] = *extra;
    args[n] = NULL;
}

static void expect_help(const char *const *args) {
    run_result r = spawn_capture(bin, tmp, args);
    if (r.code != 0 || strncmp(r.out, "usage: zayac", 12) != 0 || *r.err) {
        print_args(args);
        fail_msg("expected the usage on stdout and exit 0; exit %d, stdout:\n%s\nstderr:\n%s",
                 r.code, r.out, r.err);
    }
    result_free(&r);
}

static void test_help_on_every_command(void **state) {
    (void)state;
    const char *args[8];
    for (size_t i = 0; i < N_COMMANDS; i++) {
        command_args(args, commands[i], ARGS("--help"));
        expect_help(args);
        command_args(args, commands[i], ARGS("-h"));
        expect_help(args);
    }
    /* the lists of commands */
    const char *const lists[][3] = {{"--help", NULL},
                                    {"-h", NULL},
                                    {"help", NULL},
                                    {"data", "-h", NULL},
                                    {"tokenizer", "--help", NULL},
                                    {"bench", "--help", NULL}};
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++) expect_help(lists[i]);
    /* --help after other options still wins over a missing required option */
    expect_help(ARGS("logits", "--model", small_a, "--help"));
}

static void test_version(void **state) {
    (void)state;
    const char *const forms[][2] = {{"--version", NULL}, {"version", NULL}};
    for (int i = 0; i < 2; i++) {
        run_result r = spawn_capture(bin, tmp, forms[i]);
        if (r.code != 0 || strncmp(r.out, "zayac ", 6) != 0 || !strstr(r.out, "CUDA") ||
            count_lines(r.out) != 1 || *r.err)
            fail_msg("zayac %s: exit %d, stdout '%s', stderr '%s'", forms[i][0], r.code, r.out,
                     r.err);
        result_free(&r);
    }
}

static void test_usage_errors(void **state) {
    (void)state;
    const char *args[8];
    for (size_t i = 0; i < N_COMMANDS; i++) {
        if (!strcmp(commands[i][0], "launch")) continue; /* its own parser: below */
        command_args(args, commands[i], ARGS("--bogus"));
        expect_status(args, 2, "unknown option '--bogus'", NULL, 1);
        command_args(args, commands[i], ARGS("-q"));
        expect_status(args, 2, "unknown option '-q'", NULL, 1);
    }
    EXPECT_USAGE_ERROR("unknown option '--bogus'", "launch", "--bogus", "--", "true");
    EXPECT_USAGE_ERROR("-n", "launch", "--", "true");
    EXPECT_USAGE_ERROR("no command", "launch", "-n", "2");
    EXPECT_USAGE_ERROR("name a command", "data");
    EXPECT_USAGE_ERROR("unknown command 'nope'", "nope");
    EXPECT_USAGE_ERROR("unknown command 'nope'", "data", "nope");
    EXPECT_USAGE_ERROR("unknown command 'nope'", "tokenizer", "nope");
    EXPECT_USAGE_ERROR("unknown command 'nope'", "bench", "nope");
    EXPECT_USAGE_ERROR("--preset needs a value", "info", "--preset");
    EXPECT_USAGE_ERROR("--json takes no value", "info", "--preset", "tiny", "--json=1");
    EXPECT_USAGE_ERROR("unexpected argument 'stray'", "info", "--preset", "tiny", "stray");
    EXPECT_USAGE_ERROR("--out is required", "init", "--preset", "tiny");
    EXPECT_USAGE_ERROR("--data", "eval", "--model", small_a);
    EXPECT_USAGE_ERROR("name the shards", "data", "check");
    EXPECT_USAGE_ERROR("--tokenizer", "tokenizer", "info");
    run_result r = spawn_capture(bin, tmp, (const char *const[]){NULL});
    if (r.code != 2 || *r.out || !strstr(r.err, "usage: zayac"))
        fail_msg("zayac alone: exit %d, stderr '%s'", r.code, r.err);
    result_free(&r);
}

static void test_bad_option_values(void **state) {
    (void)state;
    char out[256];
    snprintf(out, sizeof out, "%s/never_written", tmp);
    const char *M = small_a;
    EXPECT_BAD_INPUT("--seq-len", "3x", "eval", "--model", M, "--data", tmp, "--seq-len", "3x");
    EXPECT_BAD_INPUT("--batches", "0", "eval", "--model", M, "--data", tmp, "--batches", "0");
    EXPECT_BAD_INPUT("--batch-size", " 8", "eval", "--model", M, "--data", tmp, "--batch-size",
                     " 8");
    EXPECT_BAD_INPUT("--skip-bias", "maybe", "eval", "--model", M, "--data", tmp, "--skip-bias",
                     "maybe");
    EXPECT_BAD_INPUT("--seed", "-1", "init", "--preset", "tiny", "--out", out, "--seed", "-1");
    EXPECT_BAD_INPUT("--dtype", "fp16", "init", "--preset", "tiny", "--out", out, "--dtype",
                     "fp16");
    EXPECT_BAD_INPUT("--dtype", "f32", "export", "--model", M, "--out", out, "--dtype", "f32");
    EXPECT_BAD_INPUT("--shard-size", "5XB", "export", "--model", M, "--out", out, "--shard-size",
                     "5XB");
    EXPECT_BAD_INPUT("--max-new", "1e3", "generate", "--model", M, "--prompt", "a", "--max-new",
                     "1e3");
    EXPECT_BAD_INPUT("--top-p", "2", "generate", "--model", M, "--prompt", "a", "--top-p", "2");
    EXPECT_BAD_INPUT("--seed", "9223372036854775808", "generate", "--model", M, "--prompt", "a",
                     "--seed", "9223372036854775808");
    EXPECT_BAD_INPUT("--val-fraction", "1", "data", "prepare", "--tokenizer", "t", "--input", "i",
                     "--out", out, "--val-fraction", "1");
    EXPECT_BAD_INPUT("--shard-tokens", "0", "data", "prepare", "--tokenizer", "t", "--input", "i",
                     "--out", out, "--shard-tokens", "0");
    EXPECT_BAD_INPUT("--doc-sep", "paragraph", "data", "prepare", "--tokenizer", "t", "--input",
                     "i", "--out", out, "--doc-sep", "paragraph");
    EXPECT_BAD_INPUT("--vocab-size", "0", "tokenizer", "train", "--input", "i", "--out", out,
                     "--vocab-size", "0");
    EXPECT_BAD_INPUT("--min-frequency", "x", "tokenizer", "train", "--input", "i", "--out", out,
                     "--min-frequency", "x");
    EXPECT_BAD_INPUT("--algos", "9", "bench", "gemm", "--algos", "9");
    EXPECT_BAD_INPUT("--target-ms", "0", "bench", "membw", "--target-ms", "0");
    EXPECT_BAD_INPUT("--timeout", "inf", "bench", "collectives", "--timeout", "inf");
    EXPECT_BAD_INPUT("--optim", "sgd", "bench", "train", "--preset", "tiny", "--optim", "sgd");
    EXPECT_USAGE_ERROR("-n", "launch", "-n", "0", "--", "true");
    EXPECT_USAGE_ERROR("--port", "launch", "-n", "1", "--port", "70000", "--", "true");
    assert_false(zy_path_exists(out));
}

/* Writes text to tmp/name; returns the path in buf. */
static const char *write_tmp(char *buf, size_t n, const char *name, const char *text) {
    snprintf(buf, n, "%s/%s", tmp, name);
    assert_int_equal(zy_write_file_atomic(buf, text, strlen(text)), ZY_OK);
    return buf;
}

/* small_a's config.json with one line replaced, in a model folder tmp/name (weights copied). */
static const char *model_with(char *dir, size_t n, const char *name, const char *from,
                              const char *to) {
    char path[1200], *text, *w;
    size_t len;
    snprintf(dir, n, "%s/%s", tmp, name);
    assert_int_equal(zy_mkdirs(dir), ZY_OK);
    snprintf(path, sizeof path, "%s/config.json", small_a);
    assert_int_equal(zy_read_file(path, &text, NULL), ZY_OK);
    char *at = strstr(text, from);
    assert_non_null(at);
    char *cfg = zy_malloc(strlen(text) + strlen(to) + 1);
    snprintf(cfg, strlen(text) + strlen(to) + 1, "%.*s%s%s", (int)(at - text), text, to,
             at + strlen(from));
    snprintf(path, sizeof path, "%s/config.json", dir);
    assert_int_equal(zy_write_file_atomic(path, cfg, strlen(cfg)), ZY_OK);
    snprintf(path, sizeof path, "%s/model.safetensors", small_a);
    assert_int_equal(zy_read_file(path, &w, &len), ZY_OK);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(zy_write_file_atomic(path, w, len), ZY_OK);
    free(text), free(cfg), free(w);
    return dir;
}

static void test_bad_files(void **state) {
    (void)state;
    char missing[256], bad_json[256], shape[256], out[256], tokens[700], prompt[700], cfg[300];
    snprintf(missing, sizeof missing, "%s/no_such_file.json", tmp);
    snprintf(out, sizeof out, "%s/never_written", tmp);
    snprintf(tokens, sizeof tokens, "%s/tokens.npy", small_a);
    snprintf(prompt, sizeof prompt, "%s/prompt.npy", small_a);
    write_tmp(bad_json, sizeof bad_json, "bad.json", "{\"vocab_size\": 97,");
    /* a missing file, named */
    EXPECT_BAD_INPUT(missing, NULL, "info", "--config", missing);
    EXPECT_BAD_INPUT(missing, NULL, "init", "--config", missing, "--out", out);
    EXPECT_BAD_INPUT(missing, NULL, "logits", "--model", missing, "--tokens", tokens, "--out", out);
    EXPECT_BAD_INPUT(missing, NULL, "export", "--model", missing, "--out", out);
    EXPECT_BAD_INPUT(missing, NULL, "eval", "--model", small_a, "--data", missing);
    EXPECT_BAD_INPUT(missing, NULL, "train", "--config", missing);
    EXPECT_BAD_INPUT(missing, NULL, "tokenizer", "info", "--tokenizer", missing);
    EXPECT_BAD_INPUT(missing, NULL, "tokenizer", "encode", "--tokenizer", missing, "--text", "a");
    EXPECT_BAD_INPUT(missing, NULL, "data", "check", missing);
    EXPECT_BAD_INPUT(missing, NULL, "bench", "train", "--config", missing);
    /* malformed JSON */
    EXPECT_BAD_INPUT(bad_json, "JSON", "info", "--config", bad_json);
    EXPECT_BAD_INPUT(bad_json, "JSON", "init", "--config", bad_json, "--out", out);
    EXPECT_BAD_INPUT(bad_json, NULL, "train", "--config", bad_json);
    EXPECT_BAD_INPUT(bad_json, NULL, "bench", "train", "--config", bad_json);
    EXPECT_BAD_INPUT(bad_json, NULL, "tokenizer", "info", "--tokenizer", bad_json);
    /* an impossible shape: 4 query heads cannot share 3 key heads */
    model_with(shape, sizeof shape, "odd_heads", "\"num_key_value_heads\": 2",
               "\"num_key_value_heads\": 3");
    EXPECT_BAD_INPUT("num_key_value_heads", NULL, "info", "--model", shape);
    EXPECT_BAD_INPUT("num_key_value_heads", NULL, "logits", "--model", shape, "--tokens", tokens,
                     "--out", out);
    EXPECT_BAD_INPUT("num_key_value_heads", NULL, "generate", "--model", shape, "--prompt-tokens",
                     prompt, "--out", out);
    EXPECT_BAD_INPUT("num_key_value_heads", NULL, "export", "--model", shape, "--out", out);
    snprintf(cfg, sizeof cfg, "%s/config.json", shape);
    EXPECT_BAD_INPUT("num_key_value_heads", NULL, "bench", "train", "--config", cfg, "--device",
                     "cpu");
    assert_false(zy_path_exists(out));
}

/* A tokenizer with 300 ids under tmp and data prepared with it in tmp/data (the global data). */
static int prepare_data(void) {
    char corpus[256], tok[256], text[4096] = "";
    for (int i = 0; i < 60; i++) {
        size_t len = strlen(text);
        snprintf(text + len, sizeof text - len, "line %d of the corpus, word %d and %d\n\n", i,
                 i * 7, i * 13);
    }
    snprintf(corpus, sizeof corpus, "%s/corpus.txt", tmp);
    snprintf(tok, sizeof tok, "%s/tok.json", tmp);
    snprintf(data, sizeof data, "%s/data", tmp);
    if (zy_write_file_atomic(corpus, text, strlen(text)) != ZY_OK) return -1;
    const char *const steps[][16] = {{"tokenizer", "train", "--input", corpus, "--vocab-size",
                                      "300", "--min-frequency", "1", "--out", tok, NULL},
                                     {"data", "prepare", "--tokenizer", tok, "--input", corpus,
                                      "--out", data, "--val-fraction", "0.2", NULL}};
    for (int i = 0; i < 2; i++) {
        run_result r = spawn_capture(bin, tmp, steps[i]);
        if (r.code != 0)
            fprintf(stderr, "zayac %s %s: exit %d: %s\n", steps[i][0], steps[i][1], r.code, r.err);
        int code = r.code;
        result_free(&r);
        if (code != 0) return -1;
    }
    return 0;
}

/* A training config for a 2-layer model with vocab_size V on data, written to tmp/name. */
static const char *train_config(char *buf, size_t n, const char *name, int V, const char *data_dir,
                                const char *out_dir) {
    char text[2048];
    snprintf(text, sizeof text,
             "{\"model\": {\"model_type\": \"zaya\", \"vocab_size\": %d, \"hidden_size\": 32,"
             " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
             " \"head_dim\": 32, \"num_experts\": 3, \"moe_intermediate_size\": 16,"
             " \"router_hidden_size\": 8, \"max_position_embeddings\": 64, \"pad_token_id\": 2,"
             " \"bos_token_id\": 0, \"eos_token_id\": 1},"
             " \"data\": \"%s\", \"batch_size\": 2, \"seq_len\": 16, \"steps\": 2,"
             " \"eval_interval\": 0, \"checkpoint_interval\": 2, \"out_dir\": \"%s\","
             " \"schedule\": {\"warmup\": 1}, \"device\": \"cpu\"}",
             V, data_dir, out_dir);
    return write_tmp(buf, n, name, text);
}

static void test_train_data_that_does_not_fit(void **state) {
    (void)state;
    char cfg[256], run[256];
    snprintf(run, sizeof run, "%s/run_small_vocab", tmp);
    train_config(cfg, sizeof cfg, "small_vocab.json", 64, data, run);
    EXPECT_BAD_INPUT("64", NULL, "train", "--config", cfg);
    /* the same config with a vocabulary that fits trains */
    train_config(cfg, sizeof cfg, "fits.json", 320, data, run);
    run_result r = spawn_capture(bin, tmp, ARGS("train", "--config", cfg));
    if (r.code != 0) fail_msg("train with data that fits: exit %d: %s", r.code, r.err);
    result_free(&r);
}

static void test_eval_data_that_does_not_fit(void **state) {
    (void)state;
    /* small_a has 97 ids */
    EXPECT_BAD_INPUT("97", NULL, "eval", "--model", small_a, "--data", data, "--batches", "1",
                     "--seq-len", "16");
}

/* launch returns the status of the rank that failed, so a supervisor reads it as the rank said */
static void test_launch_passes_status(void **state) {
    (void)state;
    for (int want = 1; want <= 3; want++) {
        char script[64];
        snprintf(script, sizeof script, "exit %d", want);
        run_result r = spawn_capture(bin, tmp, ARGS("launch", "-n", "2", "--", "sh", "-c", script));
        if (r.code != want) fail_msg("launch -- sh -c '%s': exit %d: %s", script, r.code, r.err);
        result_free(&r);
    }
}

/* Runs args with writes limited to `limit` bytes per file (SIGXFSZ ignored, so a write past it
 * fails with EFBIG as on a full disk, instead of killing the process). */
static run_result run_with_file_limit(const char *const *args, rlim_t limit) {
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = limit;
    struct sigaction ign = {.sa_handler = SIG_IGN}, prev;
    sigaction(SIGXFSZ, &ign, &prev);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    run_result r = spawn_capture(bin, tmp, args); /* the child inherits both */
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    sigaction(SIGXFSZ, &prev, NULL);
    return r;
}

static void expect_runtime_failure(const char *const *args, rlim_t limit) {
    run_result r = run_with_file_limit(args, limit);
    if (r.code != 1 || count_lines(r.err) != 1 || strncmp(r.err, "zayac ", 6) != 0 ||
        !strstr(r.err, "File too large")) {
        print_args(args);
        fail_msg("expected exit 1 and one line naming the failed write; exit %d, stderr:\n%s",
                 r.code, r.err);
    }
    result_free(&r);
}

static void test_failed_write_is_runtime(void **state) {
    (void)state;
    char out[256], cfg[256], run[256];
    snprintf(out, sizeof out, "%s/init_full_disk", tmp);
    expect_runtime_failure(ARGS("init", "--preset", "tiny", "--out", out), 4096);
    /* training whose checkpoint cannot be written (the small files before it fit) */
    snprintf(run, sizeof run, "%s/run_full_disk", tmp);
    train_config(cfg, sizeof cfg, "full_disk.json", 320, data, run);
    expect_runtime_failure(ARGS("train", "--config", cfg), 32768);
}

static int setup(void **state) {
    (void)state;
    bin = getenv("ZAYAC_BIN");
    const char *root = getenv("ZAYAC_ROOT");
    if (!bin || !root) {
        fprintf(stderr, "test_cli_exit: set ZAYAC_BIN and ZAYAC_ROOT (make test does)\n");
        return -1;
    }
    snprintf(small_a, sizeof small_a, "%s/tests/fixtures/hf/small_a", root);
    snprintf(tmp, sizeof tmp, "/tmp/zy_cli_exit_XXXXXX");
    if (!mkdtemp(tmp)) return -1;
    spawn_sanitizer_exit(99); /* a sanitizer report is none of the statuses checked */
    return prepare_data();
}

static int teardown(void **state) {
    (void)state;
    return zy_remove_tree(tmp) == ZY_OK ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help_on_every_command),
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_usage_errors),
        cmocka_unit_test(test_bad_option_values),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_train_data_that_does_not_fit),
        cmocka_unit_test(test_eval_data_that_does_not_fit),
        cmocka_unit_test(test_failed_write_is_runtime),
        cmocka_unit_test(test_launch_passes_status),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
