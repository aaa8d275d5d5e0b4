/* Byte-level BPE training (see tokenizer.h). Texts are pre-tokenized with the GPT-2 pattern and
 * their pieces ("words") counted; each word starts as its bytes. Every step merges the most
 * frequent adjacent pair (ties: the smallest (left, right) ids), rewriting only the words that
 * contain it and updating pair counts incrementally; a lazy max-heap finds the next pair.
 * Ids: the special tokens first, then the 256 bytes in byte order, then merged tokens. */
#include "data/tok_internal.h"
#include "base/err.h"
#include "base/fileio.h"
#include "data/docread.h"

#include <stdlib.h>
#include <string.h>

struct zy_bpe_trainer {
    zy_pretok pretok;
    zy_pretok_matcher m;
    zy_strmap words; /* piece bytes -> count */
};

zy_bpe_trainer *bpe_trainer_new(void) {
    zy_bpe_trainer *tr = zy_calloc(1, sizeof *tr);
    ZY_CHECK(pretok_init(&tr->pretok, NULL) == ZY_OK); /* the built-in pattern always compiles */
    pretok_matcher_init(&tr->m);
    strmap_init(&tr->words);
    return tr;
}

void bpe_trainer_free(zy_bpe_trainer *tr) {
    if (!tr) return;
    pretok_matcher_free(&tr->m);
    pretok_free(&tr->pretok);
    strmap_free(&tr->words);
    free(tr);
}

static int count_piece(const char *piece, size_t len, void *ctx) {
    zy_bpe_trainer *tr = ctx;
    (*strmap_put(&tr->words, piece, len, 0, NULL))++;
    return 0;
}

int bpe_trainer_add(zy_bpe_trainer *tr, const char *text, size_t len) {
    return pretok_split(&tr->pretok, &tr->m, text, len, count_piece, tr);
}

/* ---- the merge loop ---- */

typedef struct {
    int32_t *d;
    int32_t n, cap;
} ivec;

static void ivec_push(ivec *v, int32_t x) {
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 4;
        v->d = zy_realloc(v->d, (size_t)v->cap * sizeof *v->d);
    }
    v->d[v->n++] = x;
}

typedef struct {
    int64_t count;
    int32_t a, b; /* the pair, for deterministic ties */
    int32_t p;    /* pair index */
} heap_ent;

static int ent_before(const heap_ent *x, const heap_ent *y) { /* x comes out first */
    if (x->count != y->count) return x->count > y->count;
    if (x->a != y->a) return x->a < y->a;
    return x->b < y->b;
}

typedef struct {
    heap_ent *d;
    size_t n, cap;
} pair_heap;

static void pheap_push(pair_heap *h, heap_ent e) {
    if (h->n == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 1024;
        h->d = zy_realloc(h->d, h->cap * sizeof *h->d);
    }
    size_t i = h->n++;
    while (i > 0 && ent_before(&e, &h->d[(i - 1) / 2])) {
        h->d[i] = h->d[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->d[i] = e;
}

static heap_ent pheap_pop(pair_heap *h) {
    heap_ent top = h->d[0], last = h->d[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && ent_before(&h->d[c + 1], &h->d[c])) c++;
        if (!ent_before(&h->d[c], &last)) break;
        h->d[i] = h->d[c];
        i = c;
    }
    h->d[i] = last;
    return top;
}

typedef struct {
    /* words */
    int32_t nw;
    int32_t *syms;  /* all words' symbols back to back */
    int64_t *woff;  /* [nw] */
    int32_t *wlen;  /* [nw] current length */
    int64_t *wcnt;  /* [nw] occurrences */
    int64_t *stamp; /* [nw] last merge step that rewrote the word */
    /* pairs */
    zy_u64map index;  /* (a << 32 | b) -> pair index */
    int64_t *pcount;  /* [np] occurrences, weighted by word counts */
    uint8_t *pbanned; /* [np] 1: never merged (already merged, or it would spell a special) */
    int32_t (*pab)[2];
    ivec *pocc;      /* [np] words that may contain the pair (with repeats, possibly stale) */
    int32_t *ptouch; /* [np] last step the pair was touched */
    int32_t np, pcap;
} train_state;

static uint64_t pkey(int32_t a, int32_t b) {
    return (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
}

static int32_t pair_index(train_state *s, int32_t a, int32_t b) {
    uint64_t *slot = u64map_slot(&s->index, pkey(a, b), UINT64_MAX);
    if (*slot != UINT64_MAX) return (int32_t)*slot;
    if (s->np == s->pcap) {
        s->pcap = s->pcap ? 2 * s->pcap : 4096;
        s->pcount = zy_realloc(s->pcount, (size_t)s->pcap * sizeof *s->pcount);
        s->pbanned = zy_realloc(s->pbanned, (size_t)s->pcap);
        s->pab = zy_realloc(s->pab, (size_t)s->pcap * sizeof *s->pab);
        s->pocc = zy_realloc(s->pocc, (size_t)s->pcap * sizeof *s->pocc);
        s->ptouch = zy_realloc(s->ptouch, (size_t)s->pcap * sizeof *s->ptouch);
    }
    int32_t p = s->np++;
    s->pcount[p] = 0;
    s->pbanned[p] = 0;
    s->pab[p][0] = a;
    s->pab[p][1] = b;
    memset(&s->pocc[p], 0, sizeof s->pocc[p]);
    s->ptouch[p] = -1;
    *slot = (uint64_t)p;
    return p;
}

static void note_word(train_state *s, int32_t p, int32_t w) {
    ivec *v = &s->pocc[p];
    if (v->n == 0 || v->d[v->n - 1] != w) ivec_push(v, w);
}

static void free_state(train_state *s) {
    free(s->syms);
    free(s->woff);
    free(s->wlen);
    free(s->wcnt);
    free(s->stamp);
    u64map_free(&s->index);
    for (int32_t p = 0; p < s->np; p++) free(s->pocc[p].d);
    free(s->pcount);
    free(s->pbanned);
    free(s->pab);
    free(s->pocc);
    free(s->ptouch);
}

/* Token strings grow as merges are made: one growable list of heap strings. */
typedef struct {
    char **text;
    int32_t n, cap;
} str_list;

static void str_push(str_list *l, char *s) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 1024;
        l->text = zy_realloc(l->text, (size_t)l->cap * sizeof *l->text);
    }
    l->text[l->n++] = s;
}

/* Rewrites word w with (a, b) -> x; updates pair counts and notes pairs touching x. */
static void rewrite_word(train_state *s, int32_t w, int32_t a, int32_t b, int32_t x, int32_t step,
                         ivec *touched) {
    int32_t *q = s->syms + s->woff[w];
    int32_t len = s->wlen[w];
    int found = 0;
    for (int32_t i = 0; i + 1 < len && !found; i++) found = q[i] == a && q[i + 1] == b;
    if (!found) return; /* a stale occurrence */
    int64_t c = s->wcnt[w];
    for (int32_t i = 0; i + 1 < len; i++) s->pcount[pair_index(s, q[i], q[i + 1])] -= c;
    int32_t j = 0;
    for (int32_t i = 0; i < len; j++) {
        if (i + 1 < len && q[i] == a && q[i + 1] == b) {
            q[j] = x;
            i += 2;
        } else {
            q[j] = q[i++];
        }
    }
    s->wlen[w] = len = j;
    for (int32_t i = 0; i + 1 < len; i++) {
        int32_t p = pair_index(s, q[i], q[i + 1]);
        s->pcount[p] += c;
        if (q[i] == x || q[i + 1] == x) {
            note_word(s, p, w);
            if (s->ptouch[p] != step) {
                s->ptouch[p] = step;
                ivec_push(touched, p);
            }
        }
    }
}

int bpe_trainer_finish(zy_bpe_trainer *tr, int32_t vocab_size, const char *const *specials,
                       int n_specials, int min_frequency, zy_tokenizer **out) {
    *out = NULL;
    if (!specials) {
        specials = TOK_DEFAULT_SPECIALS;
        n_specials = 3;
    }
    if (vocab_size < n_specials + 256)
        return zy_fail("tokenizer training: vocab size %d is below %d (%d special tokens + 256 "
                       "bytes)",
                       vocab_size, n_specials + 256, n_specials);
    if (min_frequency < 1) min_frequency = 1;
    zy_strmap names; /* every token string made so far -> id */
    strmap_init(&names);
    str_list toks = {0};
    for (int i = 0; i < n_specials; i++) {
        int ins;
        if (!specials[i][0]) {
            strmap_free(&names);
            free(toks.text);
            return zy_fail("tokenizer training: a special token is empty");
        }
        strmap_put(&names, specials[i], strlen(specials[i]), i, &ins);
        if (!ins) {
            for (int32_t k = 0; k < toks.n; k++) free(toks.text[k]);
            free(toks.text);
            strmap_free(&names);
            return zy_fail("tokenizer training: special token '%s' is given twice", specials[i]);
        }
        str_push(&toks, zy_strdup(specials[i]));
    }
    for (int b = 0; b < 256; b++) {
        char buf[4];
        uint8_t byte = (uint8_t)b;
        size_t n = bytelevel_encode(&byte, 1, buf);
        int ins;
        strmap_put(&names, buf, n, toks.n, &ins);
        if (!ins) {
            for (int32_t k = 0; k < toks.n; k++) free(toks.text[k]);
            free(toks.text);
            strmap_free(&names);
            return zy_fail("tokenizer training: special token '%s' is also a byte token", buf);
        }
        str_push(&toks, zy_strdup(buf));
    }

    /* the words, as symbol ids */
    train_state s = {0};
    u64map_init(&s.index);
    s.nw = (int32_t)tr->words.count;
    size_t total = 0;
    for (size_t i = 0; i < tr->words.cap; i++)
        if (tr->words.slots[i].hash) total += tr->words.slots[i].keylen;
    s.syms = zy_malloc((total ? total : 1) * sizeof *s.syms);
    s.woff = zy_malloc((size_t)(s.nw ? s.nw : 1) * sizeof *s.woff);
    s.wlen = zy_malloc((size_t)(s.nw ? s.nw : 1) * sizeof *s.wlen);
    s.wcnt = zy_malloc((size_t)(s.nw ? s.nw : 1) * sizeof *s.wcnt);
    s.stamp = zy_malloc((size_t)(s.nw ? s.nw : 1) * sizeof *s.stamp);
    int32_t w = 0;
    size_t off = 0;
    for (size_t i = 0; i < tr->words.cap; i++) {
        const zy_strmap_slot *sl = &tr->words.slots[i];
        if (!sl->hash) continue;
        const uint8_t *k = (const uint8_t *)strmap_key(&tr->words, sl);
        s.woff[w] = (int64_t)off;
        s.wlen[w] = (int32_t)sl->keylen;
        s.wcnt[w] = sl->value;
        s.stamp[w] = -1;
        for (uint32_t j = 0; j < sl->keylen; j++) s.syms[off + j] = n_specials + k[j];
        off += sl->keylen;
        w++;
    }
    for (w = 0; w < s.nw; w++) {
        const int32_t *q = s.syms + s.woff[w];
        for (int32_t i = 0; i + 1 < s.wlen[w]; i++) {
            int32_t p = pair_index(&s, q[i], q[i + 1]);
            s.pcount[p] += s.wcnt[w];
            note_word(&s, p, w);
        }
    }
    pair_heap heap = {0};
    for (int32_t p = 0; p < s.np; p++) {
        heap_ent e = {s.pcount[p], s.pab[p][0], s.pab[p][1], p};
        pheap_push(&heap, e);
    }

    /* merges */
    int32_t(*merges)[3] = NULL;
    int32_t n_merges = 0, step = 0;
    ivec touched = {0};
    char *buf = NULL;
    size_t buf_cap = 0;
    while (toks.n < vocab_size && heap.n) {
        heap_ent top = pheap_pop(&heap);
        if (s.pbanned[top.p]) continue;
        int64_t cur = s.pcount[top.p];
        if (cur != top.count) { /* stale: counts only fall until a pair is touched again */
            if (cur > 0) {
                top.count = cur;
                pheap_push(&heap, top);
            }
            continue;
        }
        if (cur < min_frequency) break;
        int32_t a = top.a, b = top.b;
        size_t la = strlen(toks.text[a]), lb = strlen(toks.text[b]);
        if (la + lb + 1 > buf_cap) {
            buf_cap = 2 * (la + lb + 1);
            buf = zy_realloc(buf, buf_cap);
        }
        memcpy(buf, toks.text[a], la);
        memcpy(buf + la, toks.text[b], lb);
        buf[la + lb] = 0;
        int ins;
        int64_t *slot = strmap_put(&names, buf, la + lb, toks.n, &ins);
        s.pbanned[top.p] = 1;
        if (!ins && *slot < n_specials) continue; /* it would spell a special token */
        int32_t x = (int32_t)*slot; /* an existing token when another merge already made it */
        if (ins) str_push(&toks, zy_strdup(buf));
        merges = zy_realloc(merges, (size_t)(n_merges + 1) * sizeof *merges);
        merges[n_merges][0] = a;
        merges[n_merges][1] = b;
        merges[n_merges][2] = x;
        n_merges++;
        touched.n = 0;
        ivec occ = s.pocc[top.p];
        memset(&s.pocc[top.p], 0, sizeof occ);
        for (int32_t i = 0; i < occ.n; i++) {
            int32_t wi = occ.d[i];
            if (s.stamp[wi] == step) continue;
            s.stamp[wi] = step;
            rewrite_word(&s, wi, a, b, x, step, &touched);
        }
        free(occ.d);
        for (int32_t i = 0; i < touched.n; i++) {
            int32_t p = touched.d[i];
            if (s.pcount[p] > 0 && !s.pbanned[p]) {
                heap_ent e = {s.pcount[p], s.pab[p][0], s.pab[p][1], p};
                pheap_push(&heap, e);
            }
        }
        step++;
    }
    free(buf);
    free(touched.d);
    free(heap.d);
    free_state(&s);
    strmap_free(&names);

    zy_tokenizer *t = tok_alloc("<trained tokenizer>");
    int rc = tok_use_gpt2_pipeline(t);
    for (int32_t id = 0; id < toks.n && rc == ZY_OK; id++) {
        int flags = TOKF_MODEL | (id < n_specials ? TOKF_ADDED | TOKF_SPECIAL : 0);
        rc = tok_set_token(t, id, toks.text[id], strlen(toks.text[id]), flags);
    }
    for (int i = 0; i < n_specials; i++) {
        zy_added_token a = {
            .content = (char *)specials[i], .len = strlen(specials[i]), .id = i, .special = 1};
        tok_push_added(t, &a);
    }
    for (int32_t r = 0; r < n_merges; r++)
        tok_push_merge(t, merges[r][0], merges[r][1], merges[r][2]);
    free(merges);
    for (int32_t k = 0; k < toks.n; k++) free(toks.text[k]);
    free(toks.text);
    if (rc == ZY_OK) rc = tok_finalize(t);
    if (rc != ZY_OK) {
        tok_free(t);
        return ZY_ERR;
    }
    *out = t;
    return ZY_OK;
}

static int add_doc_cb(void *trainer, const char *text, size_t len) {
    return bpe_trainer_add(trainer, text, len);
}

int tok_train_files(const char *const *paths, int n_paths, zy_docsep sep, int32_t vocab_size,
                    const char *const *specials, int n_specials, int min_frequency,
                    zy_tokenizer **out, size_t *bytes_read) {
    *out = NULL;
    zy_bpe_trainer *tr = bpe_trainer_new();
    zy_docread_opts o = docread_defaults(sep); /* JSONL and compressed files by their names */
    zy_docread_stats st = {0};
    for (int i = 0; i < n_paths; i++)
        if (docread_file(paths[i], &o, add_doc_cb, tr, &st) != ZY_OK) { /* names the file */
            bpe_trainer_free(tr);
            return ZY_ERR;
        }
    int rc = bpe_trainer_finish(tr, vocab_size, specials, n_specials, min_frequency, out);
    bpe_trainer_free(tr);
    if (bytes_read) *bytes_read = st.bytes;
    return rc;
}
