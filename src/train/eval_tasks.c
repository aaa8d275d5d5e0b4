/* Multiple-choice tasks by log-likelihood (see eval_tasks.h): reading the JSONL questions, the
 * tokenization rule, one forward per (question, choice) and the accuracies. */
#include "train/eval_tasks.h"
#include "base/err.h"
#include "base/fileio.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A question as read: the context with its trailing whitespace moved into each choice. */
typedef struct {
    char *context;  /* without trailing whitespace */
    char **choices; /* [n] the moved whitespace + the choice */
    int n;
} question_text;

static void question_text_free(question_text *q) {
    free(q->context);
    for (int i = 0; i < q->n; i++) free(q->choices[i]);
    free(q->choices);
    memset(q, 0, sizeof *q);
}

static int is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Unicode code points of a UTF-8 string: the bytes that do not continue a sequence. */
static int utf8_chars(const char *s) {
    int n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) n += (*p & 0xC0) != 0x80;
    return n;
}

static char *concat(const char *a, size_t na, const char *b) {
    size_t nb = strlen(b);
    char *s = zy_malloc(na + nb + 1);
    memcpy(s, a, na);
    memcpy(s + na, b, nb + 1);
    return s;
}

/* Parses one line into q and the question's label fields of out; errors name path:line. */
static int parse_line(const char *path, int line, const char *text, question_text *q,
                      zy_task_question *out) {
    memset(q, 0, sizeof *q);
    cJSON *j = cJSON_Parse(text);
    if (!j) return zy_fail("%s:%d: not a JSON object", path, line);
    int rc = ZY_OK;
    const cJSON *ctx = cJSON_GetObjectItemCaseSensitive(j, "context");
    const cJSON *ch = cJSON_GetObjectItemCaseSensitive(j, "choices");
    const cJSON *lab = cJSON_GetObjectItemCaseSensitive(j, "label");
    const int n = cJSON_IsArray(ch) ? cJSON_GetArraySize(ch) : 0;
    if (!cJSON_IsObject(j))
        rc = zy_fail("%s:%d: not a JSON object", path, line);
    else if (!cJSON_IsString(ctx))
        rc = zy_fail("%s:%d: \"context\" must be a string", path, line);
    else if (!cJSON_IsArray(ch) || n < 2)
        rc = zy_fail("%s:%d: \"choices\" must be a list of at least 2 strings", path, line);
    else if (!cJSON_IsNumber(lab) || lab->valuedouble != floor(lab->valuedouble) ||
             lab->valuedouble < 0 || lab->valuedouble >= n)
        rc =
            zy_fail("%s:%d: \"label\" must be an integer index into the %d choices", path, line, n);
    for (int i = 0; rc == ZY_OK && i < n; i++) {
        const cJSON *c = cJSON_GetArrayItem(ch, i);
        if (!cJSON_IsString(c) || !c->valuestring[0])
            rc = zy_fail("%s:%d: choice %d must be a non-empty string", path, line, i);
    }
    if (rc != ZY_OK) {
        cJSON_Delete(j);
        return rc;
    }
    const char *c = ctx->valuestring;
    size_t keep = strlen(c);
    while (keep > 0 && is_space(c[keep - 1])) keep--;
    q->context = concat(c, keep, "");
    q->n = n;
    q->choices = zy_calloc((size_t)n, sizeof *q->choices);
    out->line = line;
    out->label = (int)lab->valuedouble;
    out->n_choices = n;
    out->loglik = zy_calloc((size_t)n, sizeof *out->loglik);
    out->n_tokens = zy_calloc((size_t)n, sizeof *out->n_tokens);
    out->n_chars = zy_calloc((size_t)n, sizeof *out->n_chars);
    for (int i = 0; i < n; i++) {
        const char *choice = cJSON_GetArrayItem(ch, i)->valuestring;
        q->choices[i] = concat(c + keep, strlen(c) - keep, choice);
        out->n_chars[i] = utf8_chars(choice);
    }
    cJSON_Delete(j);
    return ZY_OK;
}

/* A scoring request: context + choice tokens; the choice's are the last n_cont. */
typedef struct {
    zy_ids seq;
    int n_cont;
} request;

/* Builds the requests of question q (one per choice) by the tokenization rule. */
static int tokenize_question(const zy_tokenizer *tok, const char *path, int line,
                             const question_text *q, int vocab, request *req) {
    zy_ids ctx = {0};
    int rc = ZY_OK;
    const int empty = q->context[0] == 0;
    if (empty) {
        if (tok_eos_id(tok) < 0)
            rc = zy_fail("%s:%d: the context is empty and the tokenizer has no eos token to "
                         "stand for it",
                         path, line);
        else
            ids_push(&ctx, tok_eos_id(tok));
    } else {
        rc = tok_encode(tok, q->context, strlen(q->context), TOK_SPECIAL, &ctx);
    }
    for (int i = 0; rc == ZY_OK && i < q->n; i++) {
        request *r = &req[i];
        if (empty) {
            ids_push(&r->seq, ctx.data[0]);
            rc = tok_encode(tok, q->choices[i], strlen(q->choices[i]), TOK_SPECIAL, &r->seq);
        } else {
            char *whole = concat(q->context, strlen(q->context), q->choices[i]);
            rc = tok_encode(tok, whole, strlen(whole), TOK_SPECIAL, &r->seq);
            free(whole);
        }
        if (rc != ZY_OK) break;
        r->n_cont = (int)r->seq.n - (int)ctx.n;
        if (r->n_cont < 1)
            rc = zy_fail("%s:%d: choice %d adds no tokens to the context's %zu", path, line, i,
                         ctx.n);
        for (size_t k = 0; rc == ZY_OK && k < r->seq.n; k++)
            if (r->seq.data[k] < 0 || r->seq.data[k] >= vocab)
                rc = zy_fail("%s:%d: the tokenizer gives id %d, outside the model's vocabulary "
                             "of %d",
                             path, line, r->seq.data[k], vocab);
    }
    ids_free(&ctx);
    return rc;
}

/* Summed log p of the request's last n_cont tokens: one forward of [1, em->T]. */
static int score_request(zy_eval_model *em, const request *r, const char *path, int line,
                         double *loglik) {
    const int n = (int)r->seq.n, W = em->T;
    const int first_scored = n - r->n_cont;      /* index in seq of the choice's first token */
    const int start = n - 1 > W ? n - 1 - W : 0; /* left truncation of the input */
    if (first_scored - 1 < start)
        return zy_fail("%s:%d: a choice of %d tokens does not fit the model's input of %d tokens",
                       path, line, r->n_cont, W);
    eval_model_clear(em);
    for (int k = start; k < n - 1; k++) {
        em->ids[k - start] = r->seq.data[k];
        if (k + 1 >= first_scored) em->targets[k - start] = r->seq.data[k + 1];
    }
    int64_t count;
    double nll = eval_model_nll(em, &count);
    if (count != r->n_cont)
        return zy_fail_runtime("%s:%d: scored %lld tokens of %d", path, line, (long long)count,
                               r->n_cont);
    *loglik = -nll;
    return ZY_OK;
}

static int argmax(const double *v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

void eval_mean_stderr(int64_t hits, int64_t n, double *mean, double *stderr_out) {
    const double p = n > 0 ? (double)hits / (double)n : NAN;
    *mean = p;
    *stderr_out = n > 1 ? sqrt(p * (1 - p) / (double)(n - 1)) : NAN;
}

/* Splits the file into lines and parses the non-empty ones into questions. */
static int read_questions(const char *path, zy_task_result *r, question_text **texts) {
    char *buf;
    size_t len;
    ZY_TRY(zy_read_file(path, &buf, &len));
    int cap = 0, rc = ZY_OK, line = 0;
    *texts = NULL;
    for (char *p = buf; rc == ZY_OK && p < buf + len;) {
        char *nl = memchr(p, '\n', (size_t)(buf + len - p));
        char *end = nl ? nl : buf + len;
        line++;
        if (memchr(p, 0, (size_t)(end - p)))
            rc = zy_fail("%s:%d: a NUL byte (not text)", path, line);
        *end = 0;
        char *s = p;
        while (*s && is_space(*s)) s++;
        if (rc == ZY_OK && *s) {
            if (r->n == cap) {
                cap = cap ? 2 * cap : 64;
                r->q = zy_realloc(r->q, (size_t)cap * sizeof *r->q);
                *texts = zy_realloc(*texts, (size_t)cap * sizeof **texts);
            }
            memset(&r->q[r->n], 0, sizeof r->q[r->n]);
            rc = parse_line(path, line, s, &(*texts)[r->n], &r->q[r->n]);
            r->n++; /* counted even when it failed, so its memory is freed */
        }
        p = end + 1;
    }
    free(buf);
    if (rc == ZY_OK && r->n == 0) rc = zy_fail("%s: no questions (an empty task file)", path);
    return rc;
}

int eval_task_run(zy_eval_model *em, const zy_tokenizer *tok, const char *path, int max_len,
                  zy_task_result *r) {
    memset(r, 0, sizeof *r);
    r->path = zy_strdup(path);
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    r->name = zy_strdup(base);
    char *dot = strstr(r->name, ".jsonl");
    if (dot && dot != r->name) *dot = 0;
    question_text *texts = NULL;
    int rc = read_questions(path, r, &texts);
    int n_req = 0;
    for (int i = 0; i < r->n; i++) n_req += texts[i].n;
    request *req = zy_calloc((size_t)n_req + 1, sizeof *req);
    int longest = 1;
    for (int i = 0, k = 0; rc == ZY_OK && i < r->n; k += texts[i].n, i++) {
        rc = tokenize_question(tok, path, r->q[i].line, &texts[i], em->model.cfg.vocab_size,
                               &req[k]);
        for (int c = 0; rc == ZY_OK && c < texts[i].n; c++) {
            r->q[i].n_tokens[c] = req[k + c].n_cont;
            if ((int)req[k + c].seq.n - 1 > longest) longest = (int)req[k + c].seq.n - 1;
        }
    }
    /* one arena as long as the longest input (causal: shorter ones are padded at the end) */
    if (rc == ZY_OK) rc = eval_model_shape(em, 1, longest < max_len ? longest : max_len);
    int64_t hits = 0, hits_norm = 0;
    for (int i = 0, k = 0; rc == ZY_OK && i < r->n; k += texts[i].n, i++) {
        zy_task_question *q = &r->q[i];
        double *norm = zy_malloc((size_t)q->n_choices * sizeof *norm);
        for (int c = 0; rc == ZY_OK && c < q->n_choices; c++) {
            rc = score_request(em, &req[k + c], path, q->line, &q->loglik[c]);
            norm[c] = q->loglik[c] / q->n_chars[c];
            r->tokens_scored += q->n_tokens[c];
        }
        q->pred = argmax(q->loglik, q->n_choices);
        q->pred_norm = argmax(norm, q->n_choices);
        free(norm);
        hits += q->pred == q->label;
        hits_norm += q->pred_norm == q->label;
    }
    if (rc == ZY_OK) {
        eval_mean_stderr(hits, r->n, &r->acc, &r->acc_stderr);
        eval_mean_stderr(hits_norm, r->n, &r->acc_norm, &r->acc_norm_stderr);
    }
    for (int i = 0; i < n_req; i++) ids_free(&req[i].seq);
    free(req);
    for (int i = 0; i < r->n; i++) question_text_free(&texts[i]);
    free(texts);
    return rc;
}

void eval_task_result_free(zy_task_result *r) {
    for (int i = 0; i < r->n; i++) {
        free(r->q[i].loglik);
        free(r->q[i].n_tokens);
        free(r->q[i].n_chars);
    }
    free(r->q);
    free(r->path);
    free(r->name);
    memset(r, 0, sizeof *r);
}
