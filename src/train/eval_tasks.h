/* Multiple-choice tasks scored by log-likelihood, as lm-evaluation-harness scores them.
 *
 * A task file is JSON Lines, one question per line: {"context": str, "choices": [str, ...],
 * "label": int} (other keys are ignored; empty lines are allowed). For each choice the model's
 * summed log-probability of the choice's tokens given the context is computed, and
 *   acc      = 1 when the argmax of the sums is the label,
 *   acc_norm = 1 when the argmax of the sums divided by the choice's length in characters (Unicode
 *              code points of the choice string, Python's len(), as lm-eval's acc_norm) is it;
 * ties go to the first choice (numpy's argmax). Each is reported as the mean over the questions
 * with the standard error of that mean (sample standard deviation / sqrt(n), lm-eval's
 * mean_stderr; undefined for one question).
 *
 * Tokenization (lm-eval's HF rule): trailing whitespace of the context (ASCII space, \t, \n, \r,
 * \v, \f) moves to the front of the choice; the context's tokens are encode(context) and the
 * choice's tokens are those of encode(context + choice) after the first len(encode(context));
 * a context empty after the move is the tokenizer's eos token alone, the choice then
 * encode(choice). Special tokens written in the text are matched (HF's encode default); no bos is
 * added. The model reads context + choice without the choice's last token; a request longer than
 * max_len + 1 tokens loses tokens from the left, as lm-eval truncates, and one whose choice alone
 * does not fit is an error. */
#ifndef ZY_TRAIN_EVAL_TASKS_H
#define ZY_TRAIN_EVAL_TASKS_H

#include "data/tokenizer.h"
#include "train/eval_model.h"

#include <stdint.h>

/* One question's scores. */
typedef struct {
    int line;            /* 1-based line of the file */
    int label;           /* the right choice */
    int n_choices;       /* >= 2 */
    double *loglik;      /* [n_choices] summed log p (natural log) of the choice's tokens */
    int *n_tokens;       /* [n_choices] the choice's tokens */
    int *n_chars;        /* [n_choices] code points of the choice (acc_norm's length) */
    int pred, pred_norm; /* argmax of loglik, of loglik / n_chars */
} zy_task_question;

typedef struct {
    char *path, *name; /* the file; its base name without .jsonl */
    int n;             /* questions */
    zy_task_question *q;
    double acc, acc_stderr, acc_norm, acc_norm_stderr; /* stderr NaN when n < 2 */
    int64_t tokens_scored;                             /* choice tokens of every question */
} zy_task_result;

/* Reads and scores the task file at path with em (its device) and tok (whose ids must be within
 * the model's vocabulary); max_len is the longest input the model reads (at most its
 * max_position_embeddings). A malformed line is an error naming the file and line. r is safe to
 * free after a failure. */
int eval_task_run(zy_eval_model *em, const zy_tokenizer *tok, const char *path, int max_len,
                  zy_task_result *r);
void eval_task_result_free(zy_task_result *r);

/* The mean of n 0/1 scores and lm-eval's standard error of it: sqrt(p (1 - p) / (n - 1)), NaN
 * for n < 2. */
void eval_mean_stderr(int64_t hits, int64_t n, double *mean, double *stderr_out);

#endif
