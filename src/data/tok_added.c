/* Added tokens, cut out of the text before pre-tokenization as HF's AddedVocabulary does: a byte
 * trie searched leftmost-longest (HF's Aho-Corasick automaton), then the single_word, lstrip and
 * rstrip rules, with HF's iteration order (the search goes on from the end of the match itself,
 * not from the end of what rstrip took). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "base/err.h"
#include "data/tok_internal.h"

#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

void tok_trie_free(tok_trie *tr) {
    u64map_free(&tr->edges);
    free(tr->term);
    memset(tr, 0, sizeof *tr);
}

static int32_t trie_new_node(tok_trie *tr) {
    if (tr->n_nodes == tr->cap) {
        tr->cap = tr->cap ? 2 * tr->cap : 64;
        tr->term = zy_realloc(tr->term, (size_t)tr->cap * sizeof *tr->term);
    }
    tr->term[tr->n_nodes] = -1;
    return tr->n_nodes++;
}

static void trie_add(tok_trie *tr, const char *s, size_t n, int32_t index) {
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t key = (uint64_t)node << 8 | (uint8_t)s[i], v;
        if (!u64map_get(&tr->edges, key, &v)) {
            v = (uint64_t)trie_new_node(tr);
            u64map_set(&tr->edges, key, v);
        }
        node = (int32_t)v;
    }
    if (tr->term[node] < 0) tr->term[node] = index; /* the first of two equal contents wins */
    tr->first[(uint8_t)s[0]] = 1;
    tr->any = 1;
}

void tok_build_tries(zy_tokenizer *t) {
    for (int pass = 0; pass < 2; pass++) {
        tok_trie_free(&t->trie[pass]);
        u64map_init(&t->trie[pass].edges);
        trie_new_node(&t->trie[pass]);
    }
    for (int i = 0; i < t->n_added; i++) {
        const zy_added_token *a = &t->added[i];
        if (a->match_len) trie_add(&t->trie[a->normalized ? 1 : 0], a->match, a->match_len, i);
    }
}

/* The leftmost start at or after `from` where a token matches, its longest match there: the
 * token's index (or -1 when none) and *s, *e. */
static int32_t trie_find(const tok_trie *tr, const char *text, size_t len, size_t from, size_t *s,
                         size_t *e) {
    for (size_t j = from; j < len; j++) {
        if (!tr->first[(uint8_t)text[j]]) continue;
        int32_t node = 0, best = -1;
        for (size_t p = j; p < len; p++) {
            uint64_t v;
            if (!u64map_get(&tr->edges, (uint64_t)node << 8 | (uint8_t)text[p], &v)) break;
            node = (int32_t)v;
            if (tr->term[node] >= 0) best = tr->term[node], *e = p + 1;
        }
        if (best >= 0) {
            *s = j;
            return best;
        }
    }
    return -1;
}

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
    return rc >= 0;
}

int tok_split_added(const zy_tokenizer *t, int pass, int flags, const char *text, size_t len,
                    zy_ids *out, tok_gap_fn gap, void *ctx) {
    const tok_trie *tr = &t->trie[pass];
    size_t from = 0, done = 0, s = 0, e = 0;
    int32_t k;
    while (tr->any && (k = trie_find(tr, text, len, from, &s, &e)) >= 0) {
        const zy_added_token *a = &t->added[k];
        size_t start = s, stop = e;
        from = e;
        if (a->special && !(flags & TOK_SPECIAL)) continue; /* HF's encode_special_tokens */
        if (a->single_word) {
            int left_word = s > 0 && is_word_at(t, text + char_start_before(text, s),
                                                s - char_start_before(text, s));
            int right_word = e < len && is_word_at(t, text + e, len - e);
            if (left_word || right_word) continue; /* not a whole word: left as text */
        }
        if (a->lstrip) {
            while (start > 0) {
                size_t cs = char_start_before(text, start);
                uint32_t cp;
                if (!utf8_decode((const uint8_t *)text + cs, start - cs, &cp) ||
                    !is_white_space(cp))
                    break;
                start = cs;
            }
            if (start < done) start = done; /* spaces an earlier token already took */
        }
        if (a->rstrip) {
            uint32_t cp;
            int l;
            while (stop < len && (l = utf8_decode((const uint8_t *)text + stop, len - stop, &cp)) &&
                   is_white_space(cp))
                stop += (size_t)l;
        }
        if (done < start) ZY_TRY(gap(text + done, start - done, done, ctx));
        ids_push(out, a->id);
        done = stop;
    }
    if (done < len) ZY_TRY(gap(text + done, len - done, done, ctx));
    return ZY_OK;
}
