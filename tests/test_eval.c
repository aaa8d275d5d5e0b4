/* Tests of `zayac eval --tasks` and `zayac eval --text` (train/eval_tasks.h, train/eval_text.h),
 * run as the built binary ($ZAYAC_BIN) on the fixtures under $ZAYAC_ROOT. The reference is
 * computed here, independently of the eval code: the token ids from the tokenizer (whose ids are
 * tested against HF `tokenizers` in test_tokenizer.c) split by lm-eval's rule written out again
 * below, the logits from `zayac logits` (tested against transformers in test_cli.c), and our own
 * log-softmax in double. Also: a model trained here on one repeated sentence must choose the
 * continuation it saw (a case whose right answer is forced), malformed task lines are errors
 * naming file:line (exit 2), and on a GPU the GPU scores agree with the CPU's (skipped without
 * one). The training run also checks what `zayac train` logs: samples at each validation, the
 * FLOP rate and MFU, memory and the expert load. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/fileio.h"
#include "data/tokenizer.h"
#include "io/npy.h"
#include "model/config.h"
#include "model/model.h"
#include "ops/ops.h"
#include "spawn_util.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SAN_EXIT 99 /* exit code of a sanitizer report in the child */

static char tmp[64];      /* this test's temporary folder */
static const char *bin;   /* the zayac binary */
static char root[512];    /* the repository */
static char trained[600]; /* tests/fixtures/trained/cpu: a model trained on fortunes */
static char tiny_mc[600]; /* tests/fixtures/tasks/tiny_mc.jsonl */

static run_result run_args(const char *const *args) {
    run_result r = spawn_capture(bin, tmp, args);
    if (r.code == -1000) fail_msg("cannot run %s: %s", bin, r.err);
    return r;
}

#define RUN(...) run_args((const char *const[]){__VA_ARGS__, NULL})

/* Runs zayac, requires exit 0 and returns the JSON it printed. */
static cJSON *run_json(const char *const *args) {
    run_result r = run_args(args);
    if (r.code != 0) fail_msg("zayac %s %s: exit %d, stderr:\n%s", args[0], args[1], r.code, r.err);
    cJSON *j = cJSON_Parse(r.out);
    if (!j) fail_msg("zayac %s: not JSON:\n%s", args[0], r.out);
    result_free(&r);
    return j;
}

#define RUN_JSON(...) run_json((const char *const[]){__VA_ARGS__, NULL})

static void tmp_path(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", tmp, name);
}

static void write_text(const char *path, const char *text) {
    assert_int_equal(zy_write_file_atomic(path, text, strlen(text)), ZY_OK);
}

/* ---------------------------------------------------------------- the reference */

/* Log-probabilities of rows of token ids under the model, from `zayac logits` on one padded
 * [R, T] batch: lp[r][t] = log p(seq_r[t + 1] | seq_r[..t]) for t < len_r - 1 (padding after a
 * row's end cannot reach its earlier positions: the model is causal). */
typedef struct {
    int R, T, V;
    float *logits; /* [R, T, V] */
} ref_logits;

static void ref_run(ref_logits *ref, const char *model, const zy_ids *rows, int R) {
    int T = 1;
    for (int r = 0; r < R; r++)
        if ((int)rows[r].n > T) T = (int)rows[r].n;
    int32_t *ids = calloc((size_t)R * T, sizeof *ids);
    for (int r = 0; r < R; r++) memcpy(ids + (size_t)r * T, rows[r].data, rows[r].n * sizeof *ids);
    char in[256], out[256];
    tmp_path(in, sizeof in, "ref_ids.npy");
    tmp_path(out, sizeof out, "ref_logits.npy");
    int64_t shape[2] = {R, T};
    assert_int_equal(npy_write_i32(in, 2, shape, ids), ZY_OK);
    free(ids);
    run_result res = RUN("logits", "--model", model, "--tokens", in, "--out", out);
    if (res.code != 0) fail_msg("zayac logits: exit %d: %s", res.code, res.err);
    result_free(&res);
    zy_npy a;
    assert_int_equal(npy_read_as(&a, out, ZY_NPY_F32), ZY_OK);
    assert_int_equal(a.ndim, 3);
    ref->R = R, ref->T = T, ref->V = (int)a.shape[2];
    ref->logits = a.data; /* taken over */
}

/* log p(next | row r up to position t), by log-softmax in double. */
static double ref_logp(const ref_logits *ref, int r, int t, int32_t next) {
    const float *z = ref->logits + ((size_t)r * ref->T + t) * ref->V;
    double mx = z[0], s = 0;
    for (int v = 1; v < ref->V; v++) mx = z[v] > mx ? z[v] : mx;
    for (int v = 0; v < ref->V; v++) s += exp((double)z[v] - mx);
    return (double)z[next] - mx - log(s);
}

/* The tokenization rule of lm-eval's HF model, written out again: trailing whitespace of the
 * context moves into the continuation; the continuation's tokens are encode(context + choice)
 * after len(encode(context)); an empty context is the eos token. */
static void split_request(const zy_tokenizer *tok, const char *context, const char *choice,
                          zy_ids *seq, int *n_cont) {
    size_t keep = strlen(context);
    while (keep > 0 && strchr(" \t\n\r\v\f", context[keep - 1])) keep--;
    char *whole = malloc(strlen(context) + strlen(choice) + 1);
    sprintf(whole, "%s%s", context, choice);
    memset(seq, 0, sizeof *seq);
    zy_ids ctx = {0};
    if (keep == 0) {
        ids_push(&ctx, tok_eos_id(tok));
        ids_push(seq, tok_eos_id(tok));
        assert_int_equal(tok_encode(tok, whole, strlen(whole), TOK_SPECIAL, seq), ZY_OK);
    } else {
        assert_int_equal(tok_encode(tok, context, keep, TOK_SPECIAL, &ctx), ZY_OK);
        assert_int_equal(tok_encode(tok, whole, strlen(whole), TOK_SPECIAL, seq), ZY_OK);
    }
    *n_cont = (int)seq->n - (int)ctx.n;
    ids_free(&ctx);
    free(whole);
}

static int utf8_chars(const char *s) {
    int n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* Checks eval's JSON for task_path against the reference: every choice's log-likelihood and
 * token count, the predictions by sum and by sum per character, the accuracies and their
 * standard errors (lm-eval's sqrt(p (1 - p) / (n - 1))). Returns the reference acc. */
static double check_task(const char *model, const char *task_path, const cJSON *task, double tol) {
    char tok_path[700], *text;
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", model);
    zy_tokenizer *tok;
    assert_int_equal(tok_load(&tok, tok_path), ZY_OK);
    assert_int_equal(zy_read_file(task_path, &text, NULL), ZY_OK);
    cJSON *qs[64];
    zy_ids rows[256];
    int n_cont[256], nq = 0, R = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        qs[nq] = cJSON_Parse(line);
        assert_non_null(qs[nq]);
        const cJSON *ch = cJSON_GetObjectItem(qs[nq], "choices");
        const char *ctx = cJSON_GetObjectItem(qs[nq], "context")->valuestring;
        for (int c = 0; c < cJSON_GetArraySize(ch); c++, R++)
            split_request(tok, ctx, cJSON_GetArrayItem(ch, c)->valuestring, &rows[R], &n_cont[R]);
        nq++;
    }
    free(text);
    ref_logits ref;
    ref_run(&ref, model, rows, R);
    const cJSON *results = cJSON_GetObjectItem(task, "results");
    assert_int_equal(cJSON_GetArraySize(results), nq);
    int hits = 0, hits_norm = 0;
    for (int q = 0, r = 0; q < nq; q++) {
        const cJSON *ch = cJSON_GetObjectItem(qs[q], "choices");
        const cJSON *got = cJSON_GetArrayItem(results, q);
        const int n = cJSON_GetArraySize(ch), label = cJSON_GetObjectItem(qs[q], "label")->valueint;
        int best = 0, best_norm = 0;
        double ll[16], norm[16];
        for (int c = 0; c < n; c++, r++) {
            ll[c] = 0;
            const int len = (int)rows[r].n;
            for (int t = len - 1 - n_cont[r]; t < len - 1; t++)
                ll[c] += ref_logp(&ref, r, t, rows[r].data[t + 1]);
            norm[c] = ll[c] / utf8_chars(cJSON_GetArrayItem(ch, c)->valuestring);
            const double g = cJSON_GetArrayItem(cJSON_GetObjectItem(got, "loglik"), c)->valuedouble;
            if (fabs(g - ll[c]) > tol * (1 + fabs(ll[c])))
                fail_msg("%s question %d choice %d: eval's log-likelihood %.6f, reference %.6f",
                         task_path, q, c, g, ll[c]);
            assert_int_equal(
                cJSON_GetArrayItem(cJSON_GetObjectItem(got, "choice_tokens"), c)->valueint,
                n_cont[r]);
            if (ll[c] > ll[best]) best = c;
            if (norm[c] > norm[best_norm]) best_norm = c;
            ids_free(&rows[r]);
        }
        /* a near tie may fall either way between two computations; otherwise they must agree */
        if (fabs(ll[best] - ll[cJSON_GetObjectItem(got, "pred")->valueint]) > tol * 10)
            assert_int_equal(cJSON_GetObjectItem(got, "pred")->valueint, best);
        if (fabs(norm[best_norm] - norm[cJSON_GetObjectItem(got, "pred_norm")->valueint]) >
            tol * 10)
            assert_int_equal(cJSON_GetObjectItem(got, "pred_norm")->valueint, best_norm);
        hits += best == label;
        hits_norm += best_norm == label;
        cJSON_Delete(qs[q]);
    }
    const double acc = (double)hits / nq, acc_norm = (double)hits_norm / nq;
    assert_int_equal(cJSON_GetObjectItem(task, "questions")->valueint, nq);
    assert_float_equal(cJSON_GetObjectItem(task, "acc")->valuedouble, acc, 1e-12);
    assert_float_equal(cJSON_GetObjectItem(task, "acc_norm")->valuedouble, acc_norm, 1e-12);
    assert_float_equal(cJSON_GetObjectItem(task, "acc_stderr")->valuedouble,
                       sqrt(acc * (1 - acc) / (nq - 1)), 1e-12);
    assert_float_equal(cJSON_GetObjectItem(task, "acc_norm_stderr")->valuedouble,
                       sqrt(acc_norm * (1 - acc_norm) / (nq - 1)), 1e-12);
    free(ref.logits);
    tok_free(tok);
    return acc;
}

/* ---------------------------------------------------------------- tests */

/* The example task on the fortunes model: every log-likelihood as the reference computes it. */
static void test_tasks_match_reference(void **state) {
    (void)state;
    cJSON *j =
        RUN_JSON("eval", "--model", trained, "--tasks", tiny_mc, "--device", "cpu", "--json");
    const cJSON *tasks = cJSON_GetObjectItem(j, "tasks");
    assert_int_equal(cJSON_GetArraySize(tasks), 1);
    const cJSON *t = cJSON_GetArrayItem(tasks, 0);
    assert_string_equal(cJSON_GetObjectItem(t, "task")->valuestring, "tiny_mc");
    check_task(trained, tiny_mc, t, 1e-4);
    cJSON_Delete(j);
}

/* The same file twice (two tasks) and the human output: one line per task with both accuracies. */
static void test_tasks_table(void **state) {
    (void)state;
    run_result r = RUN("eval", "--model", trained, "--tasks", tiny_mc, tiny_mc, "--device", "cpu");
    if (r.code != 0) fail_msg("exit %d: %s", r.code, r.err);
    const char *p = strstr(r.out, "tiny_mc");
    assert_non_null(p);
    assert_non_null(strstr(p + 1, "tiny_mc"));
    assert_non_null(strstr(r.out, "acc_norm"));
    result_free(&r);
}

/* The model config of the run trained here on one repeated sentence. */
static const char *fox_model =
    "{\"model_type\": \"zaya\", \"vocab_size\": 320, \"hidden_size\": 32,"
    " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
    " \"head_dim\": 16, \"num_experts\": 2, \"moe_intermediate_size\": 16,"
    " \"router_hidden_size\": 8, \"max_position_embeddings\": 64, \"pad_token_id\": 2,"
    " \"bos_token_id\": 0, \"eos_token_id\": 1}";

/* The metrics line of a step from metrics.jsonl text (NULL when absent). */
static cJSON *metrics_at(const char *jsonl, int step) {
    char key[32];
    snprintf(key, sizeof key, "{\"step\":%d,", step);
    const char *p = strstr(jsonl, key);
    if (!p) return NULL;
    const char *nl = strchr(p, '\n');
    char *line = strndup(p, nl ? (size_t)(nl - p) : strlen(p));
    cJSON *j = cJSON_Parse(line);
    free(line);
    return j;
}

static double num(const cJSON *j, const char *key) {
    const cJSON *v = cJSON_GetObjectItem(j, key);
    if (!cJSON_IsNumber(v)) fail_msg("metrics have no number %s", key);
    return v->valuedouble;
}

/* Trains 40 steps on one sentence repeated 1-12 times per document, validating every 20 with a
 * sample prompt: samples follow each validation (not only the end); the log line and the metrics
 * carry the model FLOP rate and MFU (against mfu_peak_tflops, with the FLOPs of the bench's
 * definition), memory, and the expert load of `bench train` (busiest expert / mean), which must
 * agree with the logged fractions: busiest / mean = max_frac x E / (1 - skip_frac). */
static void test_train_log_and_samples(void **state) {
    (void)state;
    char corpus[256], tok[256], data[256], cfg[256], out[256], path[300];
    tmp_path(corpus, sizeof corpus, "fox.txt");
    tmp_path(tok, sizeof tok, "fox_tok.json");
    tmp_path(data, sizeof data, "fox_data");
    tmp_path(cfg, sizeof cfg, "fox_train.json");
    tmp_path(out, sizeof out, "fox_run");
    FILE *f = fopen(corpus, "w");
    for (int i = 0; i < 300; i++) {
        for (int k = 0; k <= i % 12; k++)
            fprintf(f, "%sthe quick brown fox jumps over the lazy dog.", k ? " " : "");
        fprintf(f, "\n\n");
    }
    fclose(f);
    run_result r =
        RUN("tokenizer", "train", "--input", corpus, "--vocab-size", "300", "--out", tok);
    if (r.code != 0) fail_msg("tokenizer train: %s", r.err);
    result_free(&r);
    r = RUN("data", "prepare", "--tokenizer", tok, "--input", corpus, "--out", data,
            "--val-fraction", "0.2");
    if (r.code != 0) fail_msg("data prepare: %s", r.err);
    result_free(&r);
    char text[4096];
    snprintf(
        text, sizeof text,
        "{\"model\": %s, \"tokenizer\": \"%s\", \"data\": \"%s\", \"batch_size\": 4,"
        " \"seq_len\": 32, \"steps\": 40, \"eval_interval\": 20, \"eval_batches\": 1,"
        " \"checkpoint_interval\": 0, \"seed\": 3, \"log_interval\": 10,"
        " \"mfu_peak_tflops\": 0.5, \"samples\": {\"prompts\": [\"the quick\"], \"tokens\": 6},"
        " \"optimizer\": {\"name\": \"adamw\", \"lr\": 0.01}, \"schedule\": {\"warmup\": 4},"
        " \"out_dir\": \"%s\", \"device\": \"cpu\"}",
        fox_model, tok, data, out);
    write_text(cfg, text);
    r = RUN("train", "--config", cfg);
    if (r.code != 0) fail_msg("train: exit %d: %s", r.code, r.err);
    const char *s20 = strstr(r.out, "samples at step 20 "),
               *s40 = strstr(r.out, "samples at step 40 ");
    if (!s20 || !s40 || s40 < s20 || strstr(s40 + 1, "samples at step"))
        fail_msg("expected samples after the validations at steps 20 and 40, once each:\n%s",
                 r.out);
    const char *line10 = strstr(r.out, "step 10/40");
    assert_non_null(line10);
    const char *eol = strchr(line10, '\n');
    char *l10 = strndup(line10, (size_t)(eol - line10));
    if (!strstr(l10, "TFLOP/s (MFU ") || !strstr(l10, "| mem ") || !strstr(l10, " load "))
        fail_msg("the log line lacks the FLOP rate, MFU, memory or expert load:\n%s", l10);
    free(l10);
    result_free(&r);

    zy_config mc;
    assert_int_equal(config_parse_json(&mc, fox_model, "test"), ZY_OK);
    const double flops = model_train_flops_per_token(&mc, 32);
    char *jsonl;
    snprintf(path, sizeof path, "%s/metrics.jsonl", out);
    assert_int_equal(zy_read_file(path, &jsonl, NULL), ZY_OK);
    for (int step = 1; step <= 40; step++) {
        cJSON *m = metrics_at(jsonl, step);
        if (!m) fail_msg("metrics.jsonl has no step %d", step);
        const double tflops = num(m, "model_tflops");
        assert_float_equal(tflops, flops * num(m, "tokens_per_s") / 1e12, 1e-9 * tflops);
        assert_float_equal(num(m, "mfu"), tflops / 0.5, 1e-9 * tflops);
        const double mem = num(m, "mem_gib");
        assert_true(mem > 0 && mem < 64);
        double sum = 0, worst = 0;
        for (int l = 0; l < 2; l++) {
            char k[96];
            snprintf(k, sizeof k, "router/layer%02d/busiest_over_mean", l);
            const double ratio = num(m, k);
            snprintf(k, sizeof k, "router/layer%02d/expert_max_frac", l);
            const double mx = num(m, k);
            snprintf(k, sizeof k, "router/layer%02d/skip_frac", l);
            const double skip = num(m, k);
            if (skip < 1) assert_float_equal(ratio, mx * 2 / (1 - skip), 1e-5 * ratio);
            assert_true(ratio >= 1 - 1e-9 && ratio <= 2 + 1e-9);
            sum += ratio;
            worst = ratio > worst ? ratio : worst;
        }
        assert_float_equal(num(m, "expert_load"), sum / 2, 1e-12);
        assert_float_equal(num(m, "expert_load_worst"), worst, 1e-12);
        cJSON_Delete(m);
    }
    free(jsonl);
}

/* A model trained a few steps on one repeated sentence (test_train_log_and_samples) chooses the
 * continuation it saw. */
static void test_tasks_forced_choice(void **state) {
    (void)state;
    char task[256], step[300], model[320];
    tmp_path(task, sizeof task, "fox_task.jsonl");
    /* eval takes the training checkpoint's folder; the reference reads its HF folder */
    snprintf(step, sizeof step, "%s/fox_run/checkpoints/step_000000040", tmp);
    snprintf(model, sizeof model, "%s/model", step);
    write_text(task,
               "{\"context\": \"the quick brown fox jumps over the lazy\", \"choices\": "
               "[\" cat.\", \" dog.\", \" fox.\"], \"label\": 1}\n"
               "{\"context\": \"the quick brown\", \"choices\": [\" fox jumps\", \" dog jumps\"], "
               "\"label\": 0}\n"
               "{\"context\": \"the quick brown fox jumps over the \", \"choices\": "
               "[\"quick dog.\", \"lazy cat.\", \"lazy dog.\"], \"label\": 2}\n"
               "{\"context\": \"\", \"choices\": [\"the lazy fox\", \"the quick brown\"], "
               "\"label\": 1}\n");
    cJSON *j = RUN_JSON("eval", "--model", step, "--tasks", task, "--device", "cpu", "--json");
    const cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "tasks"), 0);
    assert_float_equal(check_task(model, task, t, 1e-4), 1.0, 0);
    cJSON_Delete(j);
}

/* Perplexity: the summed log-likelihood of every token after an eos prefix, in non-overlapping
 * windows of T tokens (the last reading the T tokens before the end), against the reference. */
static void test_text_matches_reference(void **state) {
    (void)state;
    char path[256], tok_path[700];
    tmp_path(path, sizeof path, "text.txt");
    write_text(path, "Questions are never indiscreet; answers sometimes are.\n"
                     "A fool and his money are soon parted, but a wise man keeps both.\n");
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", trained);
    zy_tokenizer *tok;
    assert_int_equal(tok_load(&tok, tok_path), ZY_OK);
    char *text;
    size_t len;
    assert_int_equal(zy_read_file(path, &text, &len), ZY_OK);
    zy_ids x = {0};
    ids_push(&x, tok_eos_id(tok));
    assert_int_equal(tok_encode(tok, text, len, TOK_SPECIAL, &x), ZY_OK);
    free(text);
    const int T = 16, n = (int)x.n, windows = (n - 1 + T - 1) / T;
    assert_true(windows >= 3); /* the text is long enough for a last, partial window */
    zy_ids rows[64];
    int start[64], first[64];
    for (int k = 0; k < windows; k++) {
        first[k] = 1 + k * T;
        start[k] = first[k] + T > n ? (n - 1 - T > 0 ? n - 1 - T : 0) : first[k] - 1;
        memset(&rows[k], 0, sizeof rows[k]);
        for (int i = start[k]; i < n && i <= start[k] + T; i++) ids_push(&rows[k], x.data[i]);
    }
    ref_logits ref;
    ref_run(&ref, trained, rows, windows);
    double nll = 0;
    int counted = 0;
    for (int k = 0; k < windows; k++) {
        for (int t = 0; t + 1 < (int)rows[k].n; t++)
            if (start[k] + t + 1 >= first[k]) {
                nll -= ref_logp(&ref, k, t, rows[k].data[t + 1]);
                counted++;
            }
        ids_free(&rows[k]);
    }
    assert_int_equal(counted, n - 1);
    cJSON *j = RUN_JSON("eval", "--model", trained, "--text", path, "--seq-len", "16",
                        "--batch-size", "2", "--device", "cpu", "--json");
    const cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "text"), 0);
    assert_int_equal(cJSON_GetObjectItem(t, "tokens")->valueint, n - 1);
    assert_int_equal(cJSON_GetObjectItem(t, "bytes")->valueint, (int)len);
    const double got = cJSON_GetObjectItem(t, "nll")->valuedouble;
    if (fabs(got - nll) > 1e-4 * nll) fail_msg("eval's nll %.6f, reference %.6f", got, nll);
    assert_float_equal(cJSON_GetObjectItem(t, "perplexity")->valuedouble, exp(got / (n - 1)),
                       1e-9 * exp(got / (n - 1)));
    assert_float_equal(cJSON_GetObjectItem(t, "bits_per_byte")->valuedouble,
                       got / (log(2.0) * (double)len), 1e-12);
    cJSON_Delete(j);
    free(ref.logits);
    ids_free(&x);
    tok_free(tok);
}

/* Runs eval on a task file holding `content` and requires exit 2 with needle on stderr's first
 * line (which names the file). */
static void expect_task_error(const char *content, const char *needle) {
    char path[256];
    tmp_path(path, sizeof path, "bad.jsonl");
    write_text(path, content);
    run_result r = RUN("eval", "--model", trained, "--tasks", path, "--device", "cpu");
    if (r.code != 2 || !strstr(r.err, needle) || strstr(r.err, "Sanitizer"))
        fail_msg("task file:\n%s\nexpected exit 2 naming '%s'; exit %d, stderr:\n%s", content,
                 needle, r.code, r.err);
    result_free(&r);
}

static void test_bad_input(void **state) {
    (void)state;
    const char *good = "{\"context\": \"a\", \"choices\": [\" b\", \" c\"], \"label\": 0}\n";
    char two[512];
    snprintf(two, sizeof two, "%s\n%s{\"context\": \"a\", \"choices\": [\" b\"", good, good);
    expect_task_error(two, "bad.jsonl:4: not a JSON object");
    expect_task_error("[1, 2]\n", "bad.jsonl:1: not a JSON object");
    expect_task_error("{\"choices\": [\"a\", \"b\"], \"label\": 0}\n", "bad.jsonl:1: \"context\"");
    expect_task_error("{\"context\": \"a\", \"choices\": \"b\", \"label\": 0}\n",
                      "bad.jsonl:1: \"choices\"");
    expect_task_error("{\"context\": \"a\", \"choices\": [\"b\"], \"label\": 0}\n",
                      "bad.jsonl:1: \"choices\"");
    expect_task_error("{\"context\": \"a\", \"choices\": [\"b\", 3], \"label\": 0}\n",
                      "bad.jsonl:1: choice 1");
    expect_task_error("{\"context\": \"a\", \"choices\": [\"b\", \"\"], \"label\": 0}\n",
                      "bad.jsonl:1: choice 1");
    expect_task_error("{\"context\": \"a\", \"choices\": [\"b\", \"c\"], \"label\": 2}\n",
                      "bad.jsonl:1: \"label\"");
    expect_task_error("{\"context\": \"a\", \"choices\": [\"b\", \"c\"], \"label\": 0.5}\n",
                      "bad.jsonl:1: \"label\"");
    expect_task_error("{\"context\": \"a\", \"choices\": [\"b\", \"c\"]}\n",
                      "bad.jsonl:1: \"label\"");
    expect_task_error("\n\n", "bad.jsonl: no questions");
    const char *const cases[][2] = {
        {"/nonexistent/tasks.jsonl", "/nonexistent/tasks.jsonl"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_result r = RUN("eval", "--model", trained, "--tasks", cases[i][0]);
        if (r.code != 2 || !strstr(r.err, cases[i][1]))
            fail_msg("missing file: exit %d, stderr:\n%s", r.code, r.err);
        result_free(&r);
    }
    /* one mode at a time; a device that is not one */
    run_result r = RUN("eval", "--model", trained, "--tasks", tiny_mc, "--text", tiny_mc);
    assert_int_equal(r.code, 2);
    result_free(&r);
    r = RUN("eval", "--model", trained, "--tasks", tiny_mc, "--device", "tpu");
    assert_int_equal(r.code, 2);
    assert_non_null(strstr(r.err, "--device"));
    result_free(&r);
    r = RUN("eval", "--model", trained, "--text", tiny_mc, "--seq-len", "100000");
    assert_int_equal(r.code, 2);
    assert_non_null(strstr(r.err, "max_position_embeddings"));
    result_free(&r);
    char empty[256];
    tmp_path(empty, sizeof empty, "empty.txt");
    write_text(empty, "");
    r = RUN("eval", "--model", trained, "--text", empty);
    assert_int_equal(r.code, 2);
    assert_non_null(strstr(r.err, "empty.txt: no tokens"));
    result_free(&r);
}

/* On a GPU (bf16 activations) the scores follow the CPU's: the same choices win where the CPU's
 * margin is clear, log-likelihoods and the perplexity within bf16's error. */
static void test_gpu_matches_cpu(void **state) {
    (void)state;
    if (ops_cuda_device_count() == 0) skip();
    cJSON *c =
        RUN_JSON("eval", "--model", trained, "--tasks", tiny_mc, "--device", "cpu", "--json");
    cJSON *g =
        RUN_JSON("eval", "--model", trained, "--tasks", tiny_mc, "--device", "cuda", "--json");
    const cJSON *rc =
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(c, "tasks"), 0), "results");
    const cJSON *rg =
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(g, "tasks"), 0), "results");
    for (int q = 0; q < cJSON_GetArraySize(rc); q++) {
        const cJSON *lc = cJSON_GetObjectItem(cJSON_GetArrayItem(rc, q), "loglik");
        const cJSON *lg = cJSON_GetObjectItem(cJSON_GetArrayItem(rg, q), "loglik");
        for (int i = 0; i < cJSON_GetArraySize(lc); i++) {
            const double a = cJSON_GetArrayItem(lc, i)->valuedouble;
            const double b = cJSON_GetArrayItem(lg, i)->valuedouble;
            if (fabs(a - b) > 0.05 * fabs(a) + 0.2)
                fail_msg("question %d choice %d: CPU %.4f, GPU %.4f", q, i, a, b);
        }
    }
    cJSON_Delete(c);
    cJSON_Delete(g);
    char path[256];
    tmp_path(path, sizeof path, "gpu_text.txt");
    write_text(path, "Questions are never indiscreet; answers sometimes are.\n");
    c = RUN_JSON("eval", "--model", trained, "--text", path, "--device", "cpu", "--json");
    g = RUN_JSON("eval", "--model", trained, "--text", path, "--device", "cuda", "--json");
    const double pc =
        cJSON_GetObjectItem(cJSON_GetObjectItem(c, "total"), "perplexity")->valuedouble;
    const double pg =
        cJSON_GetObjectItem(cJSON_GetObjectItem(g, "total"), "perplexity")->valuedouble;
    if (fabs(pc - pg) > 0.03 * pc) fail_msg("perplexity: CPU %.4f, GPU %.4f", pc, pg);
    cJSON_Delete(c);
    cJSON_Delete(g);
}

static int setup(void **state) {
    (void)state;
    bin = getenv("ZAYAC_BIN");
    const char *r = getenv("ZAYAC_ROOT");
    if (!bin || !r) {
        fprintf(stderr, "test_eval: set ZAYAC_BIN and ZAYAC_ROOT (make test does)\n");
        return -1;
    }
    snprintf(root, sizeof root, "%s", r);
    snprintf(trained, sizeof trained, "%s/tests/fixtures/trained/cpu", root);
    snprintf(tiny_mc, sizeof tiny_mc, "%s/tests/fixtures/tasks/tiny_mc.jsonl", root);
    snprintf(tmp, sizeof tmp, "/tmp/zy_eval_XXXXXX");
    if (!mkdtemp(tmp)) return -1;
    spawn_sanitizer_exit(SAN_EXIT);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    return zy_remove_tree(tmp) == ZY_OK ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tasks_match_reference),  cmocka_unit_test(test_tasks_table),
        cmocka_unit_test(test_train_log_and_samples),  cmocka_unit_test(test_tasks_forced_choice),
        cmocka_unit_test(test_text_matches_reference), cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_gpu_matches_cpu),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
