/* Normalizers (Replace, Prepend) and pre-tokenizers (ByteLevel, Split, Metaspace) of a
 * tokenizer.json, run as HF runs them (see tok_internal.h). Pre-tokenizers are stages: each one
 * cuts or rewrites the pieces the previous one made; empty pieces are dropped between stages, as
 * HF drops them. Each stage has its own buffers in tok_work, so a stage's piece stays valid while
 * the later stages work on its parts. */
#include "base/err.h"
#include "data/tok_internal.h"

#include <stdlib.h>
#include <string.h>

char *tok_buf_reserve(tok_buf *b, size_t n) {
    if (n > b->cap) {
        b->cap = n < 256 ? 256 : 2 * n;
        b->s = zy_realloc(b->s, b->cap);
    }
    return b->s;
}

void tok_work_init(tok_work *w, const zy_tokenizer *t) {
    memset(w, 0, sizeof *w);
    pretok_matcher_init(&w->m);
    w->n_stages = t->n_pres;
    if (t->n_pres) {
        w->stage_in = zy_calloc((size_t)t->n_pres, sizeof *w->stage_in);
        w->stage_out = zy_calloc((size_t)t->n_pres, sizeof *w->stage_out);
        w->stage_spans = zy_calloc((size_t)t->n_pres, sizeof *w->stage_spans);
    }
}

void tok_work_free(tok_work *w) {
    pretok_matcher_free(&w->m);
    free(w->norm[0].s);
    free(w->norm[1].s);
    for (int k = 0; k < w->n_stages; k++) {
        free(w->stage_in[k].s);
        free(w->stage_out[k].s);
        free(w->stage_spans[k].v);
    }
    free(w->stage_in);
    free(w->stage_out);
    free(w->stage_spans);
    memset(w, 0, sizeof *w);
}

/* ---- normalizers ---- */

static void append(tok_buf *b, size_t *used, const char *s, size_t n) {
    tok_buf_reserve(b, *used + n + 1);
    if (n) memcpy(b->s + *used, s, n);
    *used += n;
}

int tok_normalize(const zy_tokenizer *t, tok_work *w, const char *text, size_t len,
                  const char **out, size_t *out_len) {
    const char *cur = text;
    size_t n = len;
    int which = 0;
    for (int k = 0; k < t->n_norms; k++) {
        const tok_norm *nm = &t->norms[k];
        if (n == 0) break; /* both leave an empty string empty */
        tok_buf *dst = &w->norm[which];
        size_t used = 0;
        if (nm->kind == TOKN_PREPEND) {
            append(dst, &used, nm->content, nm->content_len);
            append(dst, &used, cur, n);
        } else {
            tok_find it = {0};
            size_t s, e, done = 0;
            int rc;
            while ((rc = tok_pattern_next(&nm->pat, &w->m, cur, n, &it, &s, &e)) == 1) {
                append(dst, &used, cur + done, s - done);
                append(dst, &used, nm->content, nm->content_len);
                done = e;
            }
            if (rc != 0) return zy_fail_ctx("normalizer Replace");
            append(dst, &used, cur + done, n - done);
        }
        cur = dst->s;
        n = used;
        which ^= 1;
    }
    *out = cur;
    *out_len = n;
    return ZY_OK;
}

/* ---- pre-tokenizers ---- */

typedef struct {
    const zy_tokenizer *t;
    tok_work *w;
    pretok_piece_fn fn;
    void *ctx;
} run_ctx;

static int run_stage(run_ctx *r, int k, const char *text, size_t len, int at_start);

static void push_span(tok_spans *sp, size_t s, size_t e, int match) {
    if (sp->n == sp->cap) {
        sp->cap = sp->cap ? 2 * sp->cap : 64;
        sp->v = zy_realloc(sp->v, sp->cap * sizeof *sp->v);
    }
    sp->v[sp->n++] = (tok_span){s, e, match};
}

/* Applies a split behaviour to spans that cover the text (match flags as found), as HF's
 * NormalizedString::split folds them; leaves the pieces to keep (match = 0 for all). */
static void apply_behavior(tok_spans *sp, tok_split_behavior b) {
    size_t n = sp->n, j = 0;
    tok_span *v = sp->v;
    int prev = 0;
    switch (b) {
    case SPLIT_ISOLATED:
        for (size_t i = 0; i < n; i++) v[i].match = 0;
        return;
    case SPLIT_REMOVED:
        for (size_t i = 0; i < n; i++)
            if (!v[i].match) v[j++] = v[i];
        break;
    case SPLIT_CONTIGUOUS:
    case SPLIT_MERGED_WITH_PREVIOUS:
        for (size_t i = 0; i < n; i++) {
            int m = v[i].match;
            int merge = b == SPLIT_CONTIGUOUS ? m == prev : m && !prev;
            if (merge && j > 0)
                v[j - 1].e = v[i].e;
            else
                v[j++] = (tok_span){v[i].s, v[i].e, 0};
            prev = m;
        }
        break;
    case SPLIT_MERGED_WITH_NEXT: { /* folds from the end: a match joins the piece after it */
        size_t w = n;
        for (size_t i = n; i-- > 0;) {
            int m = v[i].match;
            if (m && !prev && w < n)
                v[w].s = v[i].s;
            else
                v[--w] = (tok_span){v[i].s, v[i].e, 0};
            prev = m;
        }
        memmove(v, v + w, (n - w) * sizeof *v);
        j = n - w;
        break;
    }
    }
    sp->n = j;
    for (size_t i = 0; i < j; i++) v[i].match = 0;
}

/* Hands the kept, non-empty spans of text to stage k + 1. */
static int emit_spans(run_ctx *r, int k, const char *text, int at_start) {
    const tok_spans *sp = &r->w->stage_spans[k];
    for (size_t i = 0; i < sp->n; i++) {
        size_t s = sp->v[i].s, e = sp->v[i].e;
        if (e > s) ZY_TRY(run_stage(r, k + 1, text + s, e - s, at_start && s == 0));
    }
    return ZY_OK;
}

static int split_stage(run_ctx *r, int k, const char *text, size_t len, int at_start) {
    const tok_pre *p = &r->t->pres[k];
    tok_spans *sp = &r->w->stage_spans[k];
    sp->n = 0;
    tok_find it = {0};
    size_t prev = 0, s, e;
    int rc;
    while ((rc = tok_pattern_next(&p->pat, &r->w->m, text, len, &it, &s, &e)) == 1) {
        if (s != prev) push_span(sp, prev, s, 0);
        push_span(sp, s, e, 1);
        prev = e;
    }
    if (rc != 0) return zy_fail_ctx("pre-tokenizer Split");
    if (prev != len) push_span(sp, prev, len, 0);
    if (p->invert)
        for (size_t i = 0; i < sp->n; i++) sp->v[i].match = !sp->v[i].match;
    apply_behavior(sp, p->behavior);
    return emit_spans(r, k, text, at_start);
}

static int metaspace_stage(run_ctx *r, int k, const char *text, size_t len, int at_start) {
    const tok_pre *p = &r->t->pres[k];
    size_t spaces = 0;
    for (size_t i = 0; i < len; i++) spaces += text[i] == ' ';
    /* after the spaces become the replacement, does the piece start with it? */
    int starts = text[0] == ' ' || (len >= p->repl_len && !memcmp(text, p->repl, p->repl_len));
    int prepend = p->scheme == PREPEND_ALWAYS  ? !starts
                  : p->scheme == PREPEND_FIRST ? !starts && at_start
                                               : 0;
    char *buf = tok_buf_reserve(&r->w->stage_in[k], (spaces + 1) * p->repl_len + len + 1);
    size_t n = 0;
    if (prepend) memcpy(buf, p->repl, p->repl_len), n = p->repl_len;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(buf + n, p->repl, p->repl_len);
            n += p->repl_len;
        } else {
            buf[n++] = text[i];
        }
    }
    if (!p->split) return run_stage(r, k + 1, buf, n, at_start);
    tok_spans *sp = &r->w->stage_spans[k];
    sp->n = 0;
    size_t prev = 0;
    for (size_t i = 0; i + p->repl_len <= n;) {
        if (memcmp(buf + i, p->repl, p->repl_len) == 0) {
            if (i != prev) push_span(sp, prev, i, 0);
            push_span(sp, i, i + p->repl_len, 1);
            i += p->repl_len;
            prev = i;
        } else {
            i++;
        }
    }
    if (prev != n) push_span(sp, prev, n, 0);
    apply_behavior(sp, SPLIT_MERGED_WITH_NEXT);
    return emit_spans(r, k, buf, at_start);
}

typedef struct {
    run_ctx *r;
    int k;
    const char *base;
    int at_start;
} bytelevel_ctx;

/* One piece of a ByteLevel stage: raw bytes to the model when it is the last stage, else its
 * byte-level string to the next stage. */
static int bytelevel_piece(const char *piece, size_t len, void *ctx) {
    bytelevel_ctx *c = ctx;
    run_ctx *r = c->r;
    if (len == 0) return 0;
    if (c->k + 1 == r->t->n_pres) return r->fn(piece, len, r->ctx) ? ZY_ERR : ZY_OK;
    char *s = tok_buf_reserve(&r->w->stage_out[c->k], 2 * len + 1);
    size_t n = bytelevel_encode((const uint8_t *)piece, len, s);
    return run_stage(r, c->k + 1, s, n, c->at_start && piece == c->base);
}

static int bytelevel_stage(run_ctx *r, int k, const char *text, size_t len, int at_start) {
    const tok_pre *p = &r->t->pres[k];
    if (p->add_prefix_space && !(k == 0 && r->w->no_prefix) && text[0] != ' ') {
        char *buf = tok_buf_reserve(&r->w->stage_in[k], len + 1);
        buf[0] = ' ';
        memcpy(buf + 1, text, len);
        text = buf;
        len++;
    }
    bytelevel_ctx c = {r, k, text, at_start};
    if (!p->use_regex) return bytelevel_piece(text, len, &c);
    return pretok_split(&p->pat.re, &r->w->m, text, len, bytelevel_piece, &c);
}

static int run_stage(run_ctx *r, int k, const char *text, size_t len, int at_start) {
    if (len == 0) return ZY_OK;
    if (k == r->t->n_pres) return r->fn(text, len, r->ctx) ? ZY_ERR : ZY_OK;
    switch (r->t->pres[k].kind) {
    case TOKP_BYTELEVEL:
        return bytelevel_stage(r, k, text, len, at_start);
    case TOKP_SPLIT:
        return split_stage(r, k, text, len, at_start);
    case TOKP_METASPACE:
        return metaspace_stage(r, k, text, len, at_start);
    }
    return ZY_OK;
}

int tok_pretokenize(const zy_tokenizer *t, tok_work *w, const char *text, size_t len, int at_start,
                    pretok_piece_fn fn, void *ctx) {
    run_ctx r = {t, w, fn, ctx};
    return run_stage(&r, 0, text, len, at_start);
}
