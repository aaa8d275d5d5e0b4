/* Decoding: ids to token strings, then the tokenizer.json decoders in turn, each turning a list of
 * strings into another as HF's decode_chain does, then the list joined. One difference from HF,
 * on purpose: where HF would put U+FFFD for bytes that are not valid UTF-8 (ByteLevel,
 * ByteFallback), zayac keeps the bytes, so any encoded bytes decode back to themselves. */
#include "base/err.h"
#include "data/tok_internal.h"

#include <stdlib.h>
#include <string.h>

/* A list of byte strings in one buffer. */
typedef struct {
    tok_buf buf;
    size_t used;
    size_t *off, *len; /* [n] */
    size_t n, cap;
} strlist;

static void sl_free(strlist *l) {
    free(l->buf.s);
    free(l->off);
    free(l->len);
    memset(l, 0, sizeof *l);
}

static void sl_reset(strlist *l) {
    l->used = 0;
    l->n = 0;
}

/* Starts a new (empty) item. */
static void sl_new(strlist *l) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->off = zy_realloc(l->off, l->cap * sizeof *l->off);
        l->len = zy_realloc(l->len, l->cap * sizeof *l->len);
    }
    l->off[l->n] = l->used;
    l->len[l->n++] = 0;
}

/* Appends bytes to the last item. */
static void sl_add(strlist *l, const char *s, size_t n) {
    tok_buf_reserve(&l->buf, l->used + n + 1);
    if (n) memcpy(l->buf.s + l->used, s, n);
    l->used += n;
    l->len[l->n - 1] += n;
}

static void sl_push(strlist *l, const char *s, size_t n) {
    sl_new(l);
    sl_add(l, s, n);
}

static const char *sl_at(const strlist *l, size_t i) {
    return l->buf.s + l->off[i];
}

static int valid_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int l = utf8_decode((const uint8_t *)s + i, n - i, &cp);
        if (!l) return 0;
        i += (size_t)l;
    }
    return 1;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* "<0xAB>" as HF's ByteFallback reads it (Rust's u8::from_str_radix: "+F" is 15 too). */
static int byte_token(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int hi = hex_digit(s[3]), lo = hex_digit(s[4]);
    if (s[3] == '+' && lo >= 0) return lo;
    return hi >= 0 && lo >= 0 ? hi * 16 + lo : -1;
}

static void flush_bytes(strlist *dst, const char *bytes, size_t n) {
    if (n == 0) return;
    if (valid_utf8(bytes, n)) {
        sl_push(dst, bytes, n);
    } else { /* HF: one U+FFFD per byte; zayac keeps each byte */
        for (size_t i = 0; i < n; i++) sl_push(dst, bytes + i, 1);
    }
}

static int run_decoder(const tok_dec *d, zy_pretok_matcher *m, const strlist *src, strlist *dst) {
    sl_reset(dst);
    switch (d->kind) {
    case TOKD_BYTELEVEL: /* every token's bytes, as one string */
        sl_new(dst);
        for (size_t i = 0; i < src->n; i++) {
            tok_buf_reserve(&dst->buf, dst->used + src->len[i] + 1);
            size_t k =
                bytelevel_decode(sl_at(src, i), src->len[i], (uint8_t *)dst->buf.s + dst->used);
            dst->used += k;
            dst->len[0] += k;
        }
        return ZY_OK;
    case TOKD_FUSE:
        sl_new(dst);
        for (size_t i = 0; i < src->n; i++) sl_add(dst, sl_at(src, i), src->len[i]);
        return ZY_OK;
    case TOKD_REPLACE:
        for (size_t i = 0; i < src->n; i++) {
            const char *s = sl_at(src, i);
            size_t n = src->len[i], a, b, done = 0;
            tok_find it = {0};
            int rc = 0;
            sl_new(dst);
            while (n && (rc = tok_pattern_next(&d->pat, m, s, n, &it, &a, &b)) == 1) {
                sl_add(dst, s + done, a - done);
                sl_add(dst, d->content, d->content_len);
                done = b;
            }
            if (n && rc != 0) return zy_fail_ctx("decoder Replace");
            s = sl_at(src, i); /* dst and src are different lists: s stays valid */
            sl_add(dst, s + done, n - done);
        }
        return ZY_OK;
    case TOKD_BYTEFALLBACK: {
        char *bytes = zy_malloc(src->n + 1);
        size_t nb = 0;
        for (size_t i = 0; i < src->n; i++) {
            int b = byte_token(sl_at(src, i), src->len[i]);
            if (b >= 0) {
                bytes[nb++] = (char)b;
                continue;
            }
            flush_bytes(dst, bytes, nb);
            nb = 0;
            sl_push(dst, sl_at(src, i), src->len[i]);
        }
        flush_bytes(dst, bytes, nb);
        free(bytes);
        return ZY_OK;
    }
    case TOKD_STRIP:
        for (size_t i = 0; i < src->n; i++) {
            const char *s = sl_at(src, i);
            size_t a = 0, b = src->len[i], c = d->ch_len;
            for (size_t k = 0; k < d->start && b - a >= c && !memcmp(s + a, d->ch, c); k++) a += c;
            for (size_t k = 0; k < d->stop && b - a >= c && !memcmp(s + b - c, d->ch, c); k++)
                b -= c;
            sl_push(dst, s + a, b - a);
        }
        return ZY_OK;
    case TOKD_METASPACE:
        for (size_t i = 0; i < src->n; i++) {
            const char *s = sl_at(src, i);
            size_t n = src->len[i], c = d->ch_len;
            int drop = i == 0 && d->scheme != PREPEND_NEVER; /* HF drops them all in token 0 */
            sl_new(dst);
            for (size_t k = 0; k < n;) {
                if (k + c <= n && !memcmp(s + k, d->ch, c)) {
                    if (!drop) sl_add(dst, " ", 1);
                    k += c;
                } else {
                    sl_add(dst, s + k, 1);
                    k++;
                }
            }
        }
        return ZY_OK;
    }
    return ZY_OK;
}

int tok_decode_tokens(const zy_tokenizer *t, const char *const *tokens, const size_t *lens,
                      size_t n, char **out, size_t *out_len) {
    strlist a = {0}, b = {0};
    for (size_t i = 0; i < n; i++) sl_push(&a, tokens[i], lens[i]);
    int rc = ZY_OK;
    if (t->has_decoder) {
        zy_pretok_matcher m;
        pretok_matcher_init(&m);
        for (int k = 0; k < t->n_decs && rc == ZY_OK; k++) {
            rc = run_decoder(&t->decs[k], &m, &a, &b);
            strlist tmp = a;
            a = b;
            b = tmp;
        }
        pretok_matcher_free(&m);
    }
    if (rc != ZY_OK) {
        sl_free(&a);
        sl_free(&b);
        return ZY_ERR;
    }
    size_t total = 0;
    for (size_t i = 0; i < a.n; i++) total += a.len[i] + 1;
    char *buf = zy_malloc(total + 1), *p = buf;
    for (size_t i = 0; i < a.n; i++) {
        if (i && !t->has_decoder) *p++ = ' '; /* HF joins with spaces when there is no decoder */
        if (a.len[i]) memcpy(p, sl_at(&a, i), a.len[i]); /* an empty list has no buffer */
        p += a.len[i];
    }
    *p = 0;
    *out = buf;
    if (out_len) *out_len = (size_t)(p - buf);
    sl_free(&a);
    sl_free(&b);
    return ZY_OK;
}

int tok_decode(const zy_tokenizer *t, const int32_t *ids, size_t n, int flags, char **out,
               size_t *out_len) {
    *out = NULL;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->n_ids || !t->text[id])
            return zy_fail("decode: id %d at position %zu is not in the vocabulary of %s (%d ids)",
                           id, i, t->origin, t->n_ids);
    }
    const char **toks = zy_malloc((n ? n : 1) * sizeof *toks);
    size_t *lens = zy_malloc((n ? n : 1) * sizeof *lens), k = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if ((flags & TOK_SKIP_SPECIAL) && (t->flags[id] & TOKF_SPECIAL)) continue;
        toks[k] = t->dec_text[id] ? t->dec_text[id] : t->text[id];
        lens[k] = strlen(toks[k]);
        k++;
    }
    int rc = tok_decode_tokens(t, toks, lens, k, out, out_len);
    free(toks);
    free(lens);
    return rc;
}
