/* The tokenizer's tables, BPE and encoding (see tokenizer.h and tok_internal.h for the order HF
 * encodes in). BPE follows HF exactly: a piece starts as its characters (each a vocabulary token,
 * else its bytes' "<0xXX>" tokens with byte_fallback, else unk), then the lowest-ranked adjacent
 * pair is merged (leftmost on ties) until none is left, as HF's priority queue does. Pieces that
 * come from a ByteLevel pre-tokenizer stay raw bytes until BPE, so the word cache is keyed by them.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/tok_internal.h"
#include "base/err.h"

#include <omp.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const TOK_DEFAULT_SPECIALS[3] = {"<|bos|>", "<|eos|>", "<|pad|>"};

/* Pieces longer than this are not cached (runs of spaces, long symbols). */
#define CACHE_MAX_PIECE 256
/* The word cache is emptied when it holds this many ids. */
#define CACHE_MAX_IDS (1u << 23)
/* Code points below this find their one-character token by table, the rest by the vocab map. */
#define CHAR_TABLE 0x10000

void ids_reserve(zy_ids *v, size_t n) {
    if (v->n + n <= v->cap) return;
    size_t cap = v->cap ? v->cap : 256;
    while (cap < v->n + n) cap *= 2;
    v->data = zy_realloc(v->data, cap * sizeof *v->data);
    v->cap = cap;
}

void ids_push(zy_ids *v, int32_t id) {
    if (v->n == v->cap) ids_reserve(v, 1);
    v->data[v->n++] = id;
}

void ids_free(zy_ids *v) {
    free(v->data);
    memset(v, 0, sizeof *v);
}

/* ---- building ---- */

zy_tokenizer *tok_alloc(const char *origin) {
    zy_tokenizer *t = zy_calloc(1, sizeof *t);
    t->origin = zy_strdup(origin);
    strmap_init(&t->vocab);
    u64map_init(&t->merge_map);
    t->unk_id = t->bos_id = t->eos_id = t->pad_id = -1;
    return t;
}

void tok_free(zy_tokenizer *t) {
    if (!t) return;
    for (int32_t i = 0; i < t->n_ids; i++) {
        free(t->text[i]);
        free(t->dec_text[i]);
    }
    free(t->text);
    free(t->dec_text);
    free(t->flags);
    free(t->char_id);
    strmap_free(&t->vocab);
    free(t->merges);
    u64map_free(&t->merge_map);
    for (int i = 0; i < t->n_added; i++) {
        if (t->added[i].match != t->added[i].content) free(t->added[i].match);
        free(t->added[i].content);
    }
    free(t->added);
    tok_trie_free(&t->trie[0]);
    tok_trie_free(&t->trie[1]);
    tok_pipeline_free(t);
    if (t->word_re.code) pretok_free(&t->word_re);
    free(t->unk_missing);
    free(t->post_processor);
    free(t->source);
    free(t->origin);
    free(t);
}

static void grow_ids(zy_tokenizer *t, int32_t n) {
    if (n <= t->n_ids) return;
    t->text = zy_realloc(t->text, (size_t)n * sizeof *t->text);
    t->dec_text = zy_realloc(t->dec_text, (size_t)n * sizeof *t->dec_text);
    t->flags = zy_realloc(t->flags, (size_t)n);
    for (int32_t i = t->n_ids; i < n; i++) {
        t->text[i] = t->dec_text[i] = NULL;
        t->flags[i] = 0;
    }
    t->n_ids = n;
}

int tok_set_token(zy_tokenizer *t, int32_t id, const char *text, size_t len, int flags) {
    if (id < 0 || id >= (1 << 24)) /* 16.7M ids; 2^30 made tables of 18 GB */
        return zy_fail("%s: token id %d of '%.40s' is out of range", t->origin, id, text);
    grow_ids(t, id + 1);
    if ((flags & TOKF_MODEL) && (t->flags[id] & TOKF_MODEL) &&
        !(strlen(t->text[id]) == len && memcmp(t->text[id], text, len) == 0))
        return zy_fail("%s: id %d is given to two vocabulary tokens ('%.40s' and '%.40s')",
                       t->origin, id, t->text[id], text);
    if (flags & TOKF_MODEL) *strmap_put(&t->vocab, text, len, id, NULL) = id; /* last one wins */
    /* an added token's text is what its id decodes from, as in HF (added vocabulary first) */
    if (!t->text[id] || (flags & TOKF_ADDED)) {
        free(t->text[id]);
        t->text[id] = zy_malloc(len + 1);
        memcpy(t->text[id], text, len);
        t->text[id][len] = 0;
    }
    t->flags[id] |= (uint8_t)flags;
    return ZY_OK;
}

void tok_push_merge(zy_tokenizer *t, int32_t left, int32_t right, int32_t merged) {
    if (t->n_merges == t->merges_cap) {
        t->merges_cap = t->merges_cap ? 2 * t->merges_cap : 1024;
        t->merges = zy_realloc(t->merges, (size_t)t->merges_cap * sizeof *t->merges);
    }
    t->merges[t->n_merges][0] = left;
    t->merges[t->n_merges][1] = right;
    t->merges[t->n_merges][2] = merged;
    t->n_merges++;
}

void tok_push_added(zy_tokenizer *t, const zy_added_token *a) {
    if (t->n_added == t->added_cap) {
        t->added_cap = t->added_cap ? 2 * t->added_cap : 8;
        t->added = zy_realloc(t->added, (size_t)t->added_cap * sizeof *t->added);
    }
    zy_added_token *d = &t->added[t->n_added++];
    *d = *a;
    d->content = zy_malloc(a->len + 1);
    memcpy(d->content, a->content, a->len);
    d->content[a->len] = 0;
    d->match = d->content;
    d->match_len = d->len;
}

int tok_use_gpt2_pipeline(zy_tokenizer *t) {
    tok_pipeline_free(t);
    t->pres = zy_calloc(1, sizeof *t->pres);
    t->pres[0].kind = TOKP_BYTELEVEL;
    t->pres[0].use_regex = 1;
    t->n_pres = 1;
    t->decs = zy_calloc(1, sizeof *t->decs);
    t->decs[0].kind = TOKD_BYTELEVEL;
    t->n_decs = 1;
    t->has_decoder = 1;
    return pretok_init(&t->pres[0].pat.re, NULL);
}

int32_t tok_token_id(const zy_tokenizer *t, const char *text) {
    size_t len = strlen(text);
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].len == len && memcmp(t->added[i].content, text, len) == 0)
            return t->added[i].id;
    int64_t v;
    return strmap_get(&t->vocab, text, len, &v) ? (int32_t)v : -1;
}

static int32_t first_present(const zy_tokenizer *t, const char *const *names) {
    for (; *names; names++) {
        int32_t id = tok_token_id(t, *names);
        if (id >= 0) return id;
    }
    return -1;
}

/* The matched form of normalized added tokens (HF matches them after the normalizers) and the
 * string their ids decode from. */
static int normalize_added(zy_tokenizer *t) {
    if (!t->n_norms) return ZY_OK;
    tok_work w;
    tok_work_init(&w, t);
    int rc = ZY_OK;
    for (int i = 0; i < t->n_added && rc == ZY_OK; i++) {
        zy_added_token *a = &t->added[i];
        const char *s;
        size_t n;
        if (!a->normalized) continue;
        rc = tok_normalize(t, &w, a->content, a->len, &s, &n);
        if (rc != ZY_OK || (n == a->len && !memcmp(s, a->content, n))) continue;
        a->match = zy_malloc(n + 1);
        memcpy(a->match, s, n);
        a->match[n] = 0;
        a->match_len = n;
        free(t->dec_text[a->id]);
        t->dec_text[a->id] = zy_strdup(a->match);
    }
    tok_work_free(&w);
    return rc == ZY_OK ? ZY_OK : zy_fail_ctx("%s: normalizing the added tokens", t->origin);
}

int tok_finalize(zy_tokenizer *t) {
    t->char_id = zy_realloc(t->char_id, CHAR_TABLE * sizeof *t->char_id);
    for (uint32_t c = 0; c < CHAR_TABLE; c++) t->char_id[c] = -1;
    for (size_t i = 0; i < t->vocab.cap; i++) {
        const zy_strmap_slot *sl = &t->vocab.slots[i];
        uint32_t cp;
        if (!sl->hash) continue;
        const uint8_t *k = (const uint8_t *)strmap_key(&t->vocab, sl);
        if (utf8_decode(k, sl->keylen, &cp) == (int)sl->keylen && cp < CHAR_TABLE)
            t->char_id[cp] = (int32_t)sl->value;
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        int64_t v;
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->fallback_id[b] =
            t->byte_fallback && strmap_get(&t->vocab, name, 6, &v) ? (int32_t)v : -1;
    }
    for (int32_t r = 0; r < t->n_merges; r++) {
        uint64_t key = (uint64_t)(uint32_t)t->merges[r][0] << 32 | (uint32_t)t->merges[r][1];
        u64map_set(&t->merge_map, key, (uint64_t)r << 32 | (uint32_t)t->merges[r][2]);
    }
    ZY_TRY(normalize_added(t));
    tok_build_tries(t);
    int need_word_re = 0;
    t->n_plain_added = 0;
    for (int i = 0; i < t->n_added; i++) {
        t->n_plain_added += !t->added[i].special;
        need_word_re |= t->added[i].single_word;
    }
    t->model_bytes = t->n_pres > 0 && t->pres[t->n_pres - 1].kind == TOKP_BYTELEVEL;
    static const char *const eos[] = {"<|eos|>", "<|endoftext|>", "<|end_of_text|>",
                                      "</s>",    "<eos>",         NULL};
    static const char *const bos[] = {"<|bos|>", "<|startoftext|>", "<|begin_of_text|>",
                                      "<s>",     "<bos>",           NULL};
    static const char *const pad[] = {"<|pad|>", "<pad>", NULL};
    t->eos_id = first_present(t, eos);
    t->bos_id = first_present(t, bos);
    t->pad_id = first_present(t, pad);
    if (t->bos_id < 0) t->bos_id = t->eos_id;
    if (t->pad_id < 0) t->pad_id = t->eos_id;
    if (need_word_re && !t->word_re.code &&
        pretok_init(&t->word_re, pretok_word_pattern()) != ZY_OK)
        return zy_fail_ctx("%s", t->origin);
    return ZY_OK;
}

int32_t tok_vocab_size(const zy_tokenizer *t) {
    return t->n_ids;
}
int32_t tok_n_merges(const zy_tokenizer *t) {
    return t->n_merges;
}
int32_t tok_bos_id(const zy_tokenizer *t) {
    return t->bos_id;
}
int32_t tok_eos_id(const zy_tokenizer *t) {
    return t->eos_id;
}
int32_t tok_pad_id(const zy_tokenizer *t) {
    return t->pad_id;
}

const char *tok_token_text(const zy_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_ids ? t->text[id] : NULL;
}

int tok_is_special(const zy_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_ids && (t->flags[id] & TOKF_SPECIAL);
}

/* ---- encoding ---- */

typedef struct {
    uint32_t rank, pos;
    int32_t id;
} merge_cand;

struct tok_encoder {
    const zy_tokenizer *t;
    tok_work work;
    zy_strmap cache; /* piece -> offset into cache_ids of (count, ids...) */
    zy_ids cache_ids;
    zy_ids *out;                /* where pieces' ids go */
    int32_t *sym, *next, *prev; /* [cap] the symbols of the piece being merged */
    merge_cand *heap;           /* [2 cap] */
    size_t cap;
    tok_buf tmp;          /* byte-level strings of pieces */
    int flags;            /* of the encode call in progress */
    int match_added;      /* whether that call looks for added tokens */
    pretok_piece_fn sink; /* tok_pieces: pieces go here instead of BPE */
    void *sink_ctx;
};

tok_encoder *tok_encoder_new(const zy_tokenizer *t) {
    tok_encoder *e = zy_calloc(1, sizeof *e);
    e->t = t;
    tok_work_init(&e->work, t);
    strmap_init(&e->cache);
    return e;
}

void tok_encoder_free(tok_encoder *e) {
    if (!e) return;
    tok_work_free(&e->work);
    strmap_free(&e->cache);
    ids_free(&e->cache_ids);
    free(e->sym);
    free(e->next);
    free(e->prev);
    free(e->heap);
    free(e->tmp.s);
    free(e);
}

static void heap_push(merge_cand *h, size_t *n, merge_cand c) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p].rank < c.rank || (h[p].rank == c.rank && h[p].pos < c.pos)) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
}

static merge_cand heap_pop(merge_cand *h, size_t *n) {
    merge_cand top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n &&
            (h[c + 1].rank < h[c].rank || (h[c + 1].rank == h[c].rank && h[c + 1].pos < h[c].pos)))
            c++;
        if (last.rank < h[c].rank || (last.rank == h[c].rank && last.pos < h[c].pos)) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = last;
    return top;
}

static void try_pair(const zy_tokenizer *t, merge_cand *h, size_t *n, int32_t pos, int32_t a,
                     int32_t b) {
    uint64_t v;
    if (u64map_get(&t->merge_map, (uint64_t)(uint32_t)a << 32 | (uint32_t)b, &v)) {
        merge_cand c = {(uint32_t)(v >> 32), (uint32_t)pos, (int32_t)(uint32_t)v};
        heap_push(h, n, c);
    }
}

/* The model token of one character (n bytes at s), or -1. */
static int32_t char_token(const zy_tokenizer *t, const char *s, size_t n, uint32_t cp, int valid) {
    if (valid && cp < CHAR_TABLE) return t->char_id[cp];
    int64_t v;
    return strmap_get(&t->vocab, s, n, &v) ? (int32_t)v : -1;
}

/* A piece's first symbols, as HF's merge_word makes them: each character's token, else (with
 * byte_fallback) its bytes' tokens when all exist, else unk (consecutive unknowns fused with
 * fuse_unk; a pending unk is written when the next known character comes, or at the end).
 * Returns the count in e->sym, or -1 when unk is needed but missing from the vocabulary. */
static int32_t first_symbols(tok_encoder *e, const char *s, size_t n) {
    const zy_tokenizer *t = e->t;
    int32_t k = 0;
    int unk_pending = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp = 0;
        int l = utf8_decode((const uint8_t *)s + i, n - i, &cp), valid = l > 0;
        size_t cl = valid ? (size_t)l : 1; /* a byte that is not UTF-8 counts as a character */
        int32_t id = char_token(t, s + i, cl, cp, valid);
        if (id >= 0) {
            if (unk_pending) e->sym[k++] = t->unk_id, unk_pending = 0;
            e->sym[k++] = id;
        } else {
            int all = t->byte_fallback;
            for (size_t b = 0; all && b < cl; b++) all = t->fallback_id[(uint8_t)s[i + b]] >= 0;
            if (all) {
                for (size_t b = 0; b < cl; b++) e->sym[k++] = t->fallback_id[(uint8_t)s[i + b]];
            } else if (t->unk_id >= 0) {
                if (unk_pending && !t->fuse_unk) e->sym[k++] = t->unk_id;
                unk_pending = 1;
            } else if (t->unk_missing) {
                return -1;
            } /* else dropped: HF without an unk_token */
        }
        i += cl;
    }
    if (unk_pending) e->sym[k++] = t->unk_id;
    return k;
}

/* BPE on one piece (raw bytes when the pieces come from ByteLevel); appends its ids to out. */
static int bpe_piece(tok_encoder *e, const char *p, size_t n, zy_ids *out) {
    const zy_tokenizer *t = e->t;
    if (t->model_bytes) { /* the byte-level string the vocabulary is written in */
        char *s = tok_buf_reserve(&e->tmp, 2 * n + 1);
        n = bytelevel_encode((const uint8_t *)p, n, s);
        p = s;
    }
    if (t->ignore_merges) { /* a piece that is itself a token is emitted whole */
        int64_t v;
        if (strmap_get(&t->vocab, p, n, &v)) {
            ids_push(out, (int32_t)v);
            return ZY_OK;
        }
    }
    if (n > e->cap) { /* at most one symbol per byte */
        e->cap = n < 64 ? 64 : 2 * n;
        e->sym = zy_realloc(e->sym, e->cap * sizeof *e->sym);
        e->next = zy_realloc(e->next, e->cap * sizeof *e->next);
        e->prev = zy_realloc(e->prev, e->cap * sizeof *e->prev);
        e->heap = zy_realloc(e->heap, 2 * e->cap * sizeof *e->heap);
    }
    int32_t k = first_symbols(e, p, n);
    if (k < 0)
        return zy_fail("%s: a character is not in the vocabulary and its unk_token \"%s\" is not "
                       "either",
                       t->origin, t->unk_missing);
    if (k == 0) return ZY_OK;
    for (int32_t i = 0; i < k; i++) {
        e->next[i] = i + 1 < k ? i + 1 : -1;
        e->prev[i] = i - 1;
    }
    size_t hn = 0;
    for (int32_t i = 0; i + 1 < k; i++) try_pair(t, e->heap, &hn, i, e->sym[i], e->sym[i + 1]);
    while (hn) {
        merge_cand c = heap_pop(e->heap, &hn);
        int32_t pos = (int32_t)c.pos, nx = e->next[pos];
        if (e->sym[pos] < 0 || nx < 0) continue; /* stale: merged away or at the end */
        uint64_t v;
        uint64_t key = (uint64_t)(uint32_t)e->sym[pos] << 32 | (uint32_t)e->sym[nx];
        if (!u64map_get(&t->merge_map, key, &v) || (int32_t)(uint32_t)v != c.id) continue;
        e->sym[pos] = c.id;
        e->sym[nx] = -1;
        e->next[pos] = e->next[nx];
        if (e->next[nx] >= 0) e->prev[e->next[nx]] = pos;
        int32_t pv = e->prev[pos];
        if (pv >= 0) try_pair(t, e->heap, &hn, pv, e->sym[pv], e->sym[pos]);
        if (e->next[pos] >= 0) try_pair(t, e->heap, &hn, pos, e->sym[pos], e->sym[e->next[pos]]);
    } /* the heap never exceeds 2k: k-1 pairs at first, then at most one more per merge */
    for (int32_t i = 0; i >= 0; i = e->next[i]) ids_push(out, e->sym[i]);
    return ZY_OK;
}

/* A final piece of the pre-tokenizers: through the cache or BPE (or to the sink). */
static int on_piece(const char *piece, size_t n, void *ctx) {
    tok_encoder *e = ctx;
    zy_ids *out = e->out;
    if (e->sink) {
        if (!e->t->model_bytes) return e->sink(piece, n, e->sink_ctx);
        char *s = tok_buf_reserve(&e->tmp, 2 * n + 1);
        return e->sink(s, bytelevel_encode((const uint8_t *)piece, n, s), e->sink_ctx);
    }
    if (n > CACHE_MAX_PIECE) return bpe_piece(e, piece, n, out);
    int64_t off;
    if (strmap_get(&e->cache, piece, n, &off)) {
        size_t cnt = (size_t)e->cache_ids.data[off];
        if (cnt) { /* a piece may give no ids at all (unknown bytes without unk) */
            ids_reserve(out, cnt);
            memcpy(out->data + out->n, e->cache_ids.data + off + 1, cnt * sizeof(int32_t));
            out->n += cnt;
        }
        return ZY_OK;
    }
    size_t start = out->n;
    ZY_TRY(bpe_piece(e, piece, n, out));
    size_t cnt = out->n - start;
    if (e->cache_ids.n + cnt + 1 > CACHE_MAX_IDS) { /* bounded memory: start over */
        strmap_clear(&e->cache);
        e->cache_ids.n = 0;
    }
    *strmap_put(&e->cache, piece, n, (int64_t)e->cache_ids.n, NULL) = (int64_t)e->cache_ids.n;
    ids_push(&e->cache_ids, (int32_t)cnt);
    if (cnt) {
        ids_reserve(&e->cache_ids, cnt);
        memcpy(e->cache_ids.data + e->cache_ids.n, out->data + start, cnt * sizeof(int32_t));
        e->cache_ids.n += cnt;
    }
    return ZY_OK;
}

/* Text between normalized added tokens: pre-tokenizers, then BPE. */
typedef struct {
    tok_encoder *e;
    int at_start; /* the segment begins the input */
} segment_ctx;

static int encode_piece(const char *text, size_t len, size_t start, void *ctx) {
    segment_ctx *c = ctx;
    return tok_pretokenize(c->e->t, &c->e->work, text, len, c->at_start && start == 0, on_piece,
                           c->e);
}

/* Text between added tokens that are not normalized: normalizers, then the normalized added
 * tokens, then the pieces between them. */
static int encode_segment(const char *text, size_t len, size_t start, void *ctx) {
    tok_encoder *e = ctx;
    const zy_tokenizer *t = e->t;
    const char *s;
    size_t n;
    ZY_TRY(tok_normalize(t, &e->work, text, len, &s, &n));
    segment_ctx c = {e, start == 0};
    if (!e->match_added || !t->trie[1].any) return encode_piece(s, n, 0, &c);
    return tok_split_added(t, 1, e->flags, s, n, e->out, encode_piece, &c);
}

/* Whether an encode with these flags looks for added tokens at all. */
static int matches_added(const zy_tokenizer *t, int flags) {
    return (flags & TOK_SPECIAL) ? t->n_added > 0 : t->n_plain_added > 0;
}

int tok_encoder_encode(tok_encoder *e, const char *text, size_t len, int flags, zy_ids *out) {
    e->flags = flags;
    e->match_added = matches_added(e->t, flags);
    e->out = out;
    if (len == 0) return ZY_OK;
    if (!e->match_added || !e->t->trie[0].any) return encode_segment(text, len, 0, e);
    return tok_split_added(e->t, 0, e->flags, text, len, out, encode_segment, e);
}

int tok_pieces(const zy_tokenizer *t, const char *text, size_t len, int flags, pretok_piece_fn fn,
               void *ctx) {
    tok_encoder *e = tok_encoder_new(t);
    zy_ids ids = {0};
    e->sink = fn;
    e->sink_ctx = ctx;
    int rc = tok_encoder_encode(e, text, len, flags, &ids);
    ids_free(&ids);
    tok_encoder_free(e);
    return rc;
}

/* A safe place to cut plain text for parallel encoding: just after a newline that is followed by
 * an ASCII non-space character, where no piece of the GPT-2 split pattern can straddle. */
static size_t next_cut(const char *text, size_t len, size_t from) {
    for (size_t i = from; i + 1 < len; i++) {
        if (text[i] != '\n') continue;
        unsigned char c = (unsigned char)text[i + 1];
        if (c > ' ' && c < 0x7F) return i + 1;
    }
    return len;
}

/* Whether cutting at next_cut gives the same ids: only the GPT-2 pipeline (a lone ByteLevel
 * pre-tokenizer with its split, no normalizer) promises that pieces never cross such a cut. */
static int cuts_at_lines(const zy_tokenizer *t) {
    return t->n_norms == 0 && t->n_pres == 1 && t->pres[0].kind == TOKP_BYTELEVEL &&
           t->pres[0].use_regex;
}

int tok_encode(const zy_tokenizer *t, const char *text, size_t len, int flags, zy_ids *out) {
    int nt = omp_get_max_threads();
    const size_t min_chunk = 1u << 18;
    if (matches_added(t, flags) || !cuts_at_lines(t) || nt == 1 || len < 4 * min_chunk) {
        tok_encoder *e = tok_encoder_new(t);
        int rc = tok_encoder_encode(e, text, len, flags, out);
        tok_encoder_free(e);
        return rc;
    }
    size_t want = len / (size_t)(8 * nt);
    if (want < min_chunk) want = min_chunk;
    size_t nc = 0, cap = len / want + 2;
    size_t *cuts = zy_malloc((cap + 1) * sizeof *cuts);
    cuts[nc++] = 0;
    while (cuts[nc - 1] < len) {
        size_t c = next_cut(text, len, cuts[nc - 1] + want);
        if (nc == cap + 1) break;
        cuts[nc++] = c;
    }
    cuts[nc - 1] = len;
    int nchunks = (int)nc - 1;
    zy_ids *parts = zy_calloc((size_t)nchunks, sizeof *parts);
    tok_encoder **enc = zy_calloc((size_t)nt, sizeof *enc);
    int failed = 0;
    char msg[512] = "";
#pragma omp parallel for schedule(dynamic, 1)
    for (int c = 0; c < nchunks; c++) {
        int tid = omp_get_thread_num();
        if (!enc[tid]) enc[tid] = tok_encoder_new(t);
        tok_encoder *e = enc[tid];
        e->out = &parts[c];
        e->flags = 0;
        e->match_added = 0;
        e->work.no_prefix = c > 0; /* only the text's start may get the prefix space */
        if (tok_pretokenize(t, &e->work, text + cuts[c], cuts[c + 1] - cuts[c], c == 0, on_piece,
                            e) != ZY_OK) {
#pragma omp critical(tok_encode_err)
            {
                if (!failed) snprintf(msg, sizeof msg, "%s", zy_errmsg());
                failed = 1;
            }
        }
    }
    size_t total = 0;
    for (int c = 0; c < nchunks; c++) total += parts[c].n;
    ids_reserve(out, total);
    for (int c = 0; c < nchunks; c++) {
        if (parts[c].n) memcpy(out->data + out->n, parts[c].data, parts[c].n * sizeof(int32_t));
        out->n += parts[c].n;
        ids_free(&parts[c]);
    }
    for (int i = 0; i < nt; i++) tok_encoder_free(enc[i]);
    free(enc);
    free(parts);
    free(cuts);
    return failed ? zy_fail("%s", msg) : ZY_OK;
}
