/* Perplexity on text files (see eval_text.h): the windows and their batches. */
#include "train/eval_text.h"
#include "base/err.h"
#include "base/fileio.h"

#include <stdlib.h>
#include <string.h>

/* Window k of the prediction windows of x [n]: the input start and the first predicted index. */
static void window(int64_t k, int64_t n, int T, int64_t *in_start, int64_t *first) {
    *first = 1 + k * T;
    *in_start = *first - 1;
    if (*first + T > n) /* the last window: as much context as fits before the end */
        *in_start = n - 1 - T > 0 ? n - 1 - T : 0;
}

int eval_text_file(zy_eval_model *em, const zy_tokenizer *tok, const char *path, int B, int T,
                   zy_text_result *r) {
    memset(r, 0, sizeof *r);
    char *text;
    size_t len;
    ZY_TRY(zy_read_file(path, &text, &len));
    zy_ids x = {0};
    if (tok_eos_id(tok) >= 0) ids_push(&x, tok_eos_id(tok));
    const size_t prefix = x.n;
    int rc = tok_encode(tok, text, len, TOK_SPECIAL, &x);
    free(text);
    r->bytes = (int64_t)len;
    if (rc == ZY_OK && x.n - prefix == 0) rc = zy_fail("%s: no tokens (an empty file)", path);
    if (rc == ZY_OK && x.n < 2)
        rc = zy_fail("%s: one token and no eos to predict it from: nothing to score", path);
    const int V = em->model.cfg.vocab_size;
    for (size_t i = 0; rc == ZY_OK && i < x.n; i++)
        if (x.data[i] >= V)
            rc = zy_fail("%s: the tokenizer gives id %d, outside the model's vocabulary of %d",
                         path, x.data[i], V);
    const int64_t n = (int64_t)x.n, windows = (n - 1 + T - 1) / T;
    if (rc == ZY_OK) {
        /* no wider than the text needs */
        const int rows = windows < B ? (int)windows : B, cols = n - 1 < T ? (int)(n - 1) : T;
        rc = eval_model_shape(em, rows, cols);
    }
    const int cols = em->T;
    for (int64_t k0 = 0; rc == ZY_OK && k0 < windows; k0 += em->B) {
        eval_model_clear(em);
        for (int b = 0; b < em->B && k0 + b < windows; b++) {
            int64_t in_start, first;
            window(k0 + b, n, cols, &in_start, &first);
            int32_t *ids = em->ids + (size_t)b * cols, *tg = em->targets + (size_t)b * cols;
            for (int t = 0; t < cols && in_start + t + 1 < n; t++) {
                ids[t] = x.data[in_start + t];
                if (in_start + t + 1 >= first) tg[t] = x.data[in_start + t + 1];
            }
        }
        int64_t count;
        r->nll += eval_model_nll(em, &count);
        r->tokens += count;
    }
    if (rc == ZY_OK && r->tokens != n - 1)
        rc = zy_fail_runtime("%s: scored %lld tokens of %lld", path, (long long)r->tokens,
                             (long long)(n - 1));
    ids_free(&x);
    return rc;
}
