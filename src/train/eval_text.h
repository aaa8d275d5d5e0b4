/* Perplexity of a model on text files. Each file is one document: its bytes are encoded with the
 * tokenizer (special tokens written in the text are matched, as HF's encode does) and, as
 * lm-evaluation-harness' rolling log-likelihood does, the tokenizer's eos token is put in front so
 * that the first token is predicted too (without an eos the first token is context only). The
 * tokens are then scored in non-overlapping prediction windows of T tokens: window k predicts
 * tokens [1 + kT, 1 + (k+1)T) from the T tokens before each (the context restarts at each
 * window); the last, shorter window reads the T tokens before the file's end and predicts only
 * its remaining tokens, so every token is predicted exactly once with at most T tokens of
 * context. Windows run B at a time. */
#ifndef ZY_TRAIN_EVAL_TEXT_H
#define ZY_TRAIN_EVAL_TEXT_H

#include "data/tokenizer.h"
#include "train/eval_model.h"

#include <stdint.h>

typedef struct {
    int64_t tokens; /* predicted tokens */
    int64_t bytes;  /* bytes of the text */
    double nll;     /* summed -log p (natural log) of the predicted tokens */
} zy_text_result;

/* Scores the file at path with windows of T tokens, B at a time (em's arena is reshaped to
 * [B, T] as needed; T at most the model's max_position_embeddings). A file with no tokens, or one
 * whose ids pass the model's vocabulary, is an error naming it. */
int eval_text_file(zy_eval_model *em, const zy_tokenizer *tok, const char *path, int B, int T,
                   zy_text_result *r);

#endif
