/* zayac eval: a checkpoint's validation loss on prepared data (--data), its accuracy on
 * multiple-choice tasks (--tasks, train/eval_tasks.h) or its perplexity on text files (--text,
 * train/eval_text.h). Tasks and text run on a GPU when one is visible (--device). */
#include "args.h"
#include "base/err.h"
#include "base/fileio.h"
#include "cmds.h"
#include "model_cli.h"
#include "train/eval_tasks.h"
#include "train/eval_text.h"
#include "train/settings.h"
#include "train/train.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FILES 256

static int eval_data(const zy_opt *opts, const char *model, zy_skip_bias_rule rule) {
    long long batches, bs, sl;
    if (args_int_in(opts, "--batches", 16, 1, 1000000, &batches) != 0 ||
        args_int_in(opts, "--batch-size", 8, 1, 65536, &bs) != 0 ||
        args_int_in(opts, "--seq-len", 128, 1, 1 << 24, &sl) != 0)
        return cli_error("eval");
    /* paths travel as JSON string literals, so any character in them is kept exactly */
    char *model_set = settings_string_override("model", model);
    char *data_set = settings_string_override("data", args_get(opts, "--data"));
    char bs_set[64], sl_set[64];
    snprintf(bs_set, sizeof bs_set, "batch_size=%lld", bs);
    snprintf(sl_set, sizeof sl_set, "seq_len=%lld", sl);
    const char *over[4] = {model_set, data_set, bs_set, sl_set};
    zy_train_config *c = malloc(sizeof *c);
    int rc = train_config_build(c, NULL, over, 4, NULL);
    free(model_set);
    free(data_set);
    double loss = 0;
    int64_t tokens = 0;
    if (rc == 0) rc = train_eval(c, model, rule, batches, &loss, &tokens);
    free(c);
    if (rc != 0) return cli_error("eval");
    printf("validation loss %.4f | perplexity %.2f | %lld tokens\n", loss, exp(loss),
           (long long)tokens);
    return 0;
}

/* A number, or null when not finite (one question has no standard error). */
static void json_num(cJSON *o, const char *key, double v) {
    if (isfinite(v))
        cJSON_AddNumberToObject(o, key, v);
    else
        cJSON_AddNullToObject(o, key);
}

static cJSON *task_json(const zy_task_result *r) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "task", r->name);
    cJSON_AddStringToObject(t, "file", r->path);
    cJSON_AddNumberToObject(t, "questions", r->n);
    json_num(t, "acc", r->acc);
    json_num(t, "acc_stderr", r->acc_stderr);
    json_num(t, "acc_norm", r->acc_norm);
    json_num(t, "acc_norm_stderr", r->acc_norm_stderr);
    cJSON_AddNumberToObject(t, "tokens_scored", (double)r->tokens_scored);
    cJSON *qs = cJSON_AddArrayToObject(t, "results");
    for (int i = 0; i < r->n; i++) {
        const zy_task_question *q = &r->q[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "line", q->line);
        cJSON_AddNumberToObject(o, "label", q->label);
        cJSON_AddNumberToObject(o, "pred", q->pred);
        cJSON_AddNumberToObject(o, "pred_norm", q->pred_norm);
        cJSON_AddItemToObject(o, "loglik", cJSON_CreateDoubleArray(q->loglik, q->n_choices));
        cJSON_AddItemToObject(o, "choice_tokens", cJSON_CreateIntArray(q->n_tokens, q->n_choices));
        cJSON_AddItemToObject(o, "choice_chars", cJSON_CreateIntArray(q->n_chars, q->n_choices));
        cJSON_AddItemToArray(qs, o);
    }
    return t;
}

static cJSON *text_json(const char *path, const zy_text_result *r) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "file", path);
    cJSON_AddNumberToObject(t, "tokens", (double)r->tokens);
    cJSON_AddNumberToObject(t, "bytes", (double)r->bytes);
    json_num(t, "nll", r->nll);
    json_num(t, "loss", r->nll / r->tokens);
    json_num(t, "perplexity", exp(r->nll / r->tokens));
    json_num(t, "bits_per_byte", r->nll / (log(2.0) * r->bytes));
    return t;
}

static void text_print(const char *name, const zy_text_result *r) {
    printf("%s: %lld tokens, %lld bytes | loss %.4f | perplexity %.3f | bits per byte %.4f\n", name,
           (long long)r->tokens, (long long)r->bytes, r->nll / r->tokens, exp(r->nll / r->tokens),
           r->nll / (log(2.0) * r->bytes));
}

/* --tasks or --text over files[n]: the model and tokenizer loaded once. */
static int eval_files(const zy_opt *opts, const char *model, zy_skip_bias_rule rule, int tasks,
                      const char **files, int n) {
    const char *dev = args_get(opts, "--device") ? args_get(opts, "--device") : "auto";
    const int as_json = args_get(opts, "--json") != NULL;
    long long bs, sl;
    if (args_int_in(opts, "--batch-size", 8, 1, 65536, &bs) != 0 ||
        args_int_in(opts, "--seq-len", 0, 0, 1 << 24, &sl) != 0)
        return cli_error("eval");
    char tok_path[4096];
    const char *tp = args_get(opts, "--tokenizer");
    if (!tp) {
        if (zy_path_join(tok_path, sizeof tok_path, model, "tokenizer.json") != ZY_OK)
            return cli_error("eval");
        if (!zy_path_exists(tok_path)) {
            zy_fail("%s has no tokenizer.json: name one with --tokenizer", model);
            return cli_error("eval");
        }
        tp = tok_path;
    }
    zy_tokenizer *tok = NULL;
    zy_eval_model em;
    memset(&em, 0, sizeof em);
    int rc = tok_load(&tok, tp);
    if (rc == ZY_OK) rc = eval_model_open(&em, model, rule, dev);
    const int max_t = em.model.cfg.max_position_embeddings;
    if (rc == ZY_OK && sl > max_t)
        rc = zy_fail("--seq-len %lld: the model's max_position_embeddings is %d", sl, max_t);
    const int T = sl > 0 ? (int)sl : max_t;
    char desc[128] = "";
    if (rc == ZY_OK) eval_model_describe(&em, desc, sizeof desc);
    cJSON *out = cJSON_CreateObject(), *list = NULL;
    cJSON_AddStringToObject(out, "model", model);
    cJSON_AddStringToObject(out, "device", desc);
    list = cJSON_AddArrayToObject(out, tasks ? "tasks" : "text");
    if (rc == ZY_OK && !as_json) printf("model %s on %s\n", model, desc);
    zy_text_result all = {0};
    for (int i = 0; rc == ZY_OK && i < n; i++) {
        if (tasks) {
            zy_task_result r;
            rc = eval_task_run(&em, tok, files[i], T, &r);
            if (rc == ZY_OK) cJSON_AddItemToArray(list, task_json(&r));
            if (rc == ZY_OK && !as_json)
                printf("%-20s %5d questions | acc %.4f ± %.4f | acc_norm %.4f ± %.4f\n", r.name,
                       r.n, r.acc, r.acc_stderr, r.acc_norm, r.acc_norm_stderr);
            eval_task_result_free(&r);
        } else {
            zy_text_result r;
            rc = eval_text_file(&em, tok, files[i], (int)bs, T, &r);
            if (rc != ZY_OK) break;
            cJSON_AddItemToArray(list, text_json(files[i], &r));
            if (!as_json) text_print(files[i], &r);
            all.tokens += r.tokens, all.bytes += r.bytes, all.nll += r.nll;
        }
    }
    if (rc == ZY_OK && !tasks) {
        cJSON_AddItemToObject(out, "total", text_json("", &all));
        cJSON_DeleteItemFromObject(cJSON_GetObjectItem(out, "total"), "file");
        if (!as_json && n > 1) text_print("total", &all);
    }
    if (rc == ZY_OK && as_json) {
        char *s = cJSON_Print(out);
        printf("%s\n", s);
        free(s);
    }
    cJSON_Delete(out);
    eval_model_free(&em);
    tok_free(tok);
    return rc == ZY_OK ? 0 : cli_error("eval");
}

int cmd_eval(int argc, char **argv) {
    zy_opt opts[] = {
        {"--model", 1, "HF checkpoint folder (or a training checkpoint's step folder)", NULL},
        {"--data", 1, "validation loss on a prepared data folder (zayac data prepare)", NULL},
        {"--tasks", 1,
         "multiple-choice task files (JSONL lines {context, choices, label}; more may follow): "
         "acc and acc_norm by log-likelihood",
         NULL},
        {"--text", 1, "perplexity on text files (more may follow)", NULL},
        {"--tokenizer", 1, "tokenizer.json for --tasks/--text (default: the model folder's)", NULL},
        {"--device", 1, "--tasks/--text: auto (a GPU when one is visible), cpu or cuda", NULL},
        {"--json", 0, "--tasks/--text: print the results as JSON", NULL},
        {"--batches", 1, "--data: validation batches (default 16)", NULL},
        {"--batch-size", 1, "sequences per batch (default 8; --tasks scores one at a time)", NULL},
        {"--seq-len", 1,
         "tokens per sequence (--data: default 128; --tasks/--text: the longest input, default "
         "the model's max_position_embeddings)",
         NULL},
        CLI_SKIP_BIAS_OPT,
        {"--help", 0, "this help", NULL},
        {NULL, 0, NULL, NULL},
    };
    const char *syn = "--model DIR (--data DIR [--batches N] | --tasks FILE.jsonl... | --text "
                      "FILE...) [--batch-size B] [--seq-len T] [--json]";
    char model_buf[4096]; /* --model resolved (cli_model_dir) */
    const char *files[MAX_FILES + 1];
    int nfiles = 0;
    int done = args_cli("eval", syn, opts, argc, argv, files + 1, MAX_FILES, &nfiles);
    if (done != ARGS_RUN) return done;
    const char *data = args_get(opts, "--data"), *tasks = args_get(opts, "--tasks"),
               *text = args_get(opts, "--text");
    const char *model = cli_model_dir(opts, model_buf, sizeof model_buf);
    if (!model || !!data + !!tasks + !!text != 1) {
        zy_fail("--model and one of --data, --tasks or --text are required");
        return args_usage_error("eval", syn, opts);
    }
    if (data && nfiles > 0) {
        zy_fail("unexpected argument '%s'", files[1]);
        return args_usage_error("eval", syn, opts);
    }
    zy_skip_bias_rule rule;
    if (cli_skip_bias(opts, &rule) != 0) return cli_error("eval");
    if (data) return eval_data(opts, model, rule);
    files[0] = tasks ? tasks : text;
    return eval_files(opts, model, rule, tasks != NULL, files, nfiles + 1);
}
