/* The tokenizer's tables, encoding and decoding (see tokenizer.h). Encoding follows HF exactly:
 * added tokens are cut out first (when asked), each remaining segment gets the optional prefix
 * space, the split pattern cuts it into pieces, and each piece's bytes are merged by BPE, always
 * taking the lowest-ranked adjacent pair (leftmost on ties), as HF's priority queue does. */
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
    t->use_regex = 1;
    t->trim_offsets = 1;
    return t;
}

void tok_free(zy_tokenizer *t) {
    if (!t) return;
    for (int32_t i = 0; i < t->n_ids; i++) {
        free(t->text[i]);
        free(t->bytes[i]);
    }
    free(t->text);
    free(t->bytes);
    free(t->bytes_len);
    free(t->flags);
    strmap_free(&t->vocab);
    free(t->merges);
    u64map_free(&t->merge_map);
    for (int i = 0; i < t->n_added; i++) free(t->added[i].content);
    free(t->added);
    if (t->pretok.code) pretok_free(&t->pretok);
    if (t->word_re.code) pretok_free(&t->word_re);
    free(t->origin);
    free(t);
}

static void grow_ids(zy_tokenizer *t, int32_t n) {
    if (n <= t->n_ids) return;
    t->text = zy_realloc(t->text, (size_t)n * sizeof *t->text);
    t->bytes = zy_realloc(t->bytes, (size_t)n * sizeof *t->bytes);
    t->bytes_len = zy_realloc(t->bytes_len, (size_t)n * sizeof *t->bytes_len);
    t->flags = zy_realloc(t->flags, (size_t)n);
    for (int32_t i = t->n_ids; i < n; i++) {
        t->text[i] = t->bytes[i] = NULL;
        t->bytes_len[i] = 0;
        t->flags[i] = 0;
    }
    t->n_ids = n;
}

int tok_set_token(zy_tokenizer *t, int32_t id, const char *text, size_t len, int flags) {
    if (id < 0 || id > (1 << 30))
        return zy_fail("%s: token id %d of '%.40s' is out of range", t->origin, id, text);
    grow_ids(t, id + 1);
    if ((flags & TOKF_MODEL) && (t->flags[id] & TOKF_MODEL) &&
        !(strlen(t->text[id]) == len && memcmp(t->text[id], text, len) == 0))
        return zy_fail("%s: id %d is given to two vocabulary tokens ('%.40s' and '%.40s')",
                       t->origin, id, t->text[id], text);
    if (flags & TOKF_MODEL) *strmap_put(&t->vocab, text, len, id, NULL) = id; /* last one wins */
    /* an added token's text is what its id decodes to, as in HF (added vocabulary first) */
    if (!t->text[id] || (flags & TOKF_ADDED)) {
        free(t->text[id]);
        free(t->bytes[id]);
        t->text[id] = zy_malloc(len + 1);
        memcpy(t->text[id], text, len);
        t->text[id][len] = 0;
        t->bytes[id] = zy_malloc(len + 1);
        t->bytes_len[id] = (uint32_t)bytelevel_decode(text, len, (uint8_t *)t->bytes[id]);
        t->bytes[id][t->bytes_len[id]] = 0;
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

int tok_finalize(zy_tokenizer *t) {
    for (int b = 0; b < 256; b++) {
        char s[4];
        uint8_t byte = (uint8_t)b;
        size_t n = bytelevel_encode(&byte, 1, s);
        int64_t v;
        t->byte_id[b] = strmap_get(&t->vocab, s, n, &v) ? (int32_t)v : -1;
    }
    for (int32_t r = 0; r < t->n_merges; r++) {
        uint64_t key = (uint64_t)(uint32_t)t->merges[r][0] << 32 | (uint32_t)t->merges[r][1];
        u64map_set(&t->merge_map, key, (uint64_t)r << 32 | (uint32_t)t->merges[r][2]);
    }
    memset(t->added_first, 0, sizeof t->added_first);
    int need_word_re = 0;
    t->n_plain_added = 0;
    for (int i = 0; i < t->n_added; i++) {
        if (t->added[i].len) t->added_first[(uint8_t)t->added[i].content[0]] = 1;
        t->n_plain_added += !t->added[i].special;
        need_word_re |= t->added[i].single_word;
    }
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
    if (pretok_init(&t->pretok, NULL) != ZY_OK) return zy_fail_ctx("%s", t->origin);
    if (need_word_re && pretok_init(&t->word_re, pretok_word_pattern()) != ZY_OK)
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

const char *tok_token_bytes(const zy_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_ids || !t->text[id]) return NULL;
    if (len) *len = t->bytes_len[id];
    return t->bytes[id];
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
    zy_pretok_matcher m;
    zy_strmap cache; /* piece bytes -> offset into cache_ids of (count, ids...) */
    zy_ids cache_ids;
    zy_ids *out;                /* where pieces' ids go during a split */
    int32_t *sym, *next, *prev; /* [cap] the symbols of the piece being merged */
    merge_cand *heap;           /* [cap] */
    size_t cap;
    char *tmp; /* byte-level strings of pieces */
    size_t tmp_cap;
    char *pfx; /* a segment with its prefix space */
    size_t pfx_cap;
    int flags; /* of the encode call in progress */
};

tok_encoder *tok_encoder_new(const zy_tokenizer *t) {
    tok_encoder *e = zy_calloc(1, sizeof *e);
    e->t = t;
    pretok_matcher_init(&e->m, &t->pretok);
    strmap_init(&e->cache);
    return e;
}

void tok_encoder_free(tok_encoder *e) {
    if (!e) return;
    pretok_matcher_free(&e->m);
    strmap_free(&e->cache);
    ids_free(&e->cache_ids);
    free(e->sym);
    free(e->next);
    free(e->prev);
    free(e->heap);
    free(e->tmp);
    free(e->pfx);
    free(e);
}

static char *tmp_buf(tok_encoder *e, size_t n) {
    if (n > e->tmp_cap) {
        e->tmp_cap = n < 4096 ? 4096 : n;
        free(e->tmp);
        e->tmp = zy_malloc(e->tmp_cap);
    }
    return e->tmp;
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

/* BPE on one piece's bytes; appends its ids to out. */
static void bpe_piece(tok_encoder *e, const uint8_t *p, size_t n, zy_ids *out) {
    const zy_tokenizer *t = e->t;
    if (t->ignore_merges) { /* a piece that is itself a token is emitted whole */
        char *s = tmp_buf(e, 2 * n + 1);
        size_t sl = bytelevel_encode(p, n, s);
        int64_t v;
        if (strmap_get(&t->vocab, s, sl, &v)) {
            ids_push(out, (int32_t)v);
            return;
        }
    }
    if (n > e->cap) {
        e->cap = n < 64 ? 64 : 2 * n;
        e->sym = zy_realloc(e->sym, e->cap * sizeof *e->sym);
        e->next = zy_realloc(e->next, e->cap * sizeof *e->next);
        e->prev = zy_realloc(e->prev, e->cap * sizeof *e->prev);
        e->heap = zy_realloc(e->heap, 2 * e->cap * sizeof *e->heap);
    }
    int32_t k = 0;
    int last_unk = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_id[p[i]];
        if (id >= 0) {
            e->sym[k++] = id;
            last_unk = 0;
        } else if (t->unk_id >= 0 && !(t->fuse_unk && last_unk)) {
            e->sym[k++] = t->unk_id;
            last_unk = 1;
        } /* else: dropped (fused into the previous unk, or no unk token at all) */
    }
    if (k == 0) return;
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
}

/* Split callback: one piece through the cache or BPE. */
static int on_piece(const char *piece, size_t n, void *ctx) {
    tok_encoder *e = ctx;
    zy_ids *out = e->out;
    if (n > CACHE_MAX_PIECE) {
        bpe_piece(e, (const uint8_t *)piece, n, out);
        return 0;
    }
    int64_t off;
    if (strmap_get(&e->cache, piece, n, &off)) {
        int32_t cnt = e->cache_ids.data[off];
        ids_reserve(out, (size_t)cnt);
        memcpy(out->data + out->n, e->cache_ids.data + off + 1, (size_t)cnt * sizeof(int32_t));
        out->n += (size_t)cnt;
        return 0;
    }
    size_t start = out->n;
    bpe_piece(e, (const uint8_t *)piece, n, out);
    size_t cnt = out->n - start;
    if (e->cache_ids.n + cnt + 1 > CACHE_MAX_IDS) { /* bounded memory: start over */
        strmap_clear(&e->cache);
        e->cache_ids.n = 0;
    }
    *strmap_put(&e->cache, piece, n, (int64_t)e->cache_ids.n, NULL) = (int64_t)e->cache_ids.n;
    ids_push(&e->cache_ids, (int32_t)cnt);
    ids_reserve(&e->cache_ids, cnt);
    memcpy(e->cache_ids.data + e->cache_ids.n, out->data + start, cnt * sizeof(int32_t));
    e->cache_ids.n += cnt;
    return 0;
}

/* A segment of ordinary text: optional prefix space, split, BPE. */
static int encode_segment(tok_encoder *e, const char *text, size_t len, int may_prefix,
                          zy_ids *out) {
    const zy_tokenizer *t = e->t;
    if (len == 0) return ZY_OK;
    if (may_prefix && t->add_prefix_space && text[0] != ' ') {
        if (len + 1 > e->pfx_cap) {
            e->pfx_cap = 2 * (len + 1);
            free(e->pfx);
            e->pfx = zy_malloc(e->pfx_cap);
        }
        e->pfx[0] = ' ';
        memcpy(e->pfx + 1, text, len);
        text = e->pfx;
        len++;
    }
    e->out = out;
    if (!t->use_regex) return on_piece(text, len, e) ? ZY_ERR : ZY_OK;
    return pretok_split(&t->pretok, &e->m, text, len, on_piece, e);
}

/* ---- added tokens ---- */

static int is_white_space(uint32_t c) { /* Unicode White_Space (Rust's \s) */
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

/* Start of the character that ends at text[end] (exclusive); walks back over continuations. */
static size_t char_start_before(const char *text, size_t end) {
    size_t i = end - 1;
    while (i > 0 && end - i < 4 && ((uint8_t)text[i] & 0xC0) == 0x80) i--;
    return i;
}

static int is_word_at(const zy_tokenizer *t, const char *s, size_t n) {
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    int rc = pcre2_match((pcre2_code *)t->word_re.code, (PCRE2_SPTR)s, n, 0, 0, md, NULL);
    pcre2_match_data_free(md);
    return rc > 0;
}

static int encode_added(tok_encoder *e, const char *text, size_t len, int pass, zy_ids *out);

/* Encodes a piece between added tokens: the next pass, or ordinary text after the last. */
static int encode_gap(tok_encoder *e, const char *text, size_t len, int pass, zy_ids *out) {
    if (pass == 0) return encode_added(e, text, len, 1, out);
    return encode_segment(e, text, len, 1, out);
}

/* Cuts out added tokens with normalized == pass (pass 0: the non-normalized ones, matched
 * first), leftmost-longest, with HF's single_word/lstrip/rstrip rules. */
static int encode_added(tok_encoder *e, const char *text, size_t len, int pass, zy_ids *out) {
    const zy_tokenizer *t = e->t;
    size_t i = 0, done = 0;
    while (i < len) {
        size_t s = len, best_len = 0;
        const zy_added_token *best = NULL;
        for (size_t j = i; j < len && !best; j++) {
            if (!t->added_first[(uint8_t)text[j]]) continue;
            for (int k = 0; k < t->n_added; k++) {
                const zy_added_token *a = &t->added[k];
                if (a->normalized != pass || a->len == 0 || a->len > len - j) continue;
                if (a->len > best_len && memcmp(text + j, a->content, a->len) == 0) {
                    best = a;
                    best_len = a->len;
                    s = j;
                }
            }
        }
        if (!best) break;
        size_t stop = s + best_len, start = s;
        i = stop;
        if (best->special && !(e->flags & TOK_SPECIAL)) continue; /* HF encode_special_tokens */
        if (best->single_word) {
            int left_word = s > 0 && is_word_at(t, text + char_start_before(text, s),
                                                s - char_start_before(text, s));
            int right_word = stop < len && is_word_at(t, text + stop, len - stop);
            if (left_word || right_word) continue; /* not a whole word: skipped */
        }
        if (best->lstrip) {
            while (start > done) {
                size_t cs = char_start_before(text, start);
                uint32_t cp;
                if (!utf8_decode((const uint8_t *)text + cs, start - cs, &cp) ||
                    !is_white_space(cp))
                    break;
                start = cs;
            }
        }
        if (best->rstrip) {
            uint32_t cp;
            int l;
            while (stop < len && (l = utf8_decode((const uint8_t *)text + stop, len - stop, &cp)) &&
                   is_white_space(cp))
                stop += (size_t)l;
            i = stop;
        }
        if (start > done) ZY_TRY(encode_gap(e, text + done, start - done, pass, out));
        ids_push(out, best->id);
        done = stop;
    }
    if (done < len) ZY_TRY(encode_gap(e, text + done, len - done, pass, out));
    return ZY_OK;
}

/* Whether an encode with these flags looks for added tokens at all. */
static int matches_added(const zy_tokenizer *t, int flags) {
    return (flags & TOK_SPECIAL) ? t->n_added > 0 : t->n_plain_added > 0;
}

int tok_encoder_encode(tok_encoder *e, const char *text, size_t len, int flags, zy_ids *out) {
    e->flags = flags;
    if (matches_added(e->t, flags)) return encode_added(e, text, len, 0, out);
    return encode_segment(e, text, len, 1, out);
}

/* A safe place to cut plain text for parallel encoding: just after a newline that is followed by
 * an ASCII non-space character, where no piece of the split pattern can straddle. */
static size_t next_cut(const char *text, size_t len, size_t from) {
    for (size_t i = from; i + 1 < len; i++) {
        if (text[i] != '\n') continue;
        unsigned char c = (unsigned char)text[i + 1];
        if (c > ' ' && c < 0x7F) return i + 1;
    }
    return len;
}

int tok_encode(const zy_tokenizer *t, const char *text, size_t len, int flags, zy_ids *out) {
    int nt = omp_get_max_threads();
    const size_t min_chunk = 1u << 18;
    if (matches_added(t, flags) || nt == 1 || len < 4 * min_chunk) {
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
        /* only the text's first segment may get the prefix space */
        if (encode_segment(enc[tid], text + cuts[c], cuts[c + 1] - cuts[c], c == 0, &parts[c]) !=
            ZY_OK) {
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
        memcpy(out->data + out->n, parts[c].data, parts[c].n * sizeof(int32_t));
        out->n += parts[c].n;
        ids_free(&parts[c]);
    }
    for (int i = 0; i < nt; i++) tok_encoder_free(enc[i]);
    free(enc);
    free(parts);
    free(cuts);
    return failed ? zy_fail("%s", msg) : ZY_OK;
}

/* ---- decoding ---- */

int tok_decode(const zy_tokenizer *t, const int32_t *ids, size_t n, int flags, char **out,
               size_t *out_len) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->n_ids || !t->text[id])
            return zy_fail("decode: id %d at position %zu is not in the vocabulary of %s (%d ids)",
                           id, i, t->origin, t->n_ids);
        total += t->bytes_len[id];
    }
    char *buf = zy_malloc(total + 1), *p = buf;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if ((flags & TOK_SKIP_SPECIAL) && (t->flags[id] & TOKF_SPECIAL)) continue;
        memcpy(p, t->bytes[id], t->bytes_len[id]);
        p += t->bytes_len[id];
    }
    *p = 0;
    *out = buf;
    if (out_len) *out_len = (size_t)(p - buf);
    return ZY_OK;
}
