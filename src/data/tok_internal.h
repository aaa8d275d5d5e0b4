/* The tokenizer's insides, shared by tokenizer.c (tables, BPE, encoding), tok_added.c (added
 * tokens), tok_regex.c (patterns), tok_pipeline.c (normalizers and pre-tokenizers),
 * tok_decode.c (decoders), tok_json.c / tok_json_pipeline.c (tokenizer.json) and bpe_train.c
 * (training). Not for use outside src/data.
 *
 * Encoding follows HF's order: added tokens that are not normalized are cut out of the raw text;
 * each remaining segment is normalized; normalized added tokens are cut out of that; each piece
 * left goes through the pre-tokenizers in turn, and each final piece through BPE. */
#ifndef ZY_TOK_INTERNAL_H
#define ZY_TOK_INTERNAL_H

#include "base/err.h"
#include "data/hashmap.h"
#include "data/pretok.h"
#include "data/tokenizer.h"

#include <string.h>

/* Per-id flags. */
enum { TOKF_MODEL = 1, TOKF_ADDED = 2, TOKF_SPECIAL = 4 };

typedef struct {
    char *content; /* UTF-8 text, as in tokenizer.json */
    size_t len;
    int32_t id;
    uint8_t special, lstrip, rstrip, single_word, normalized;
    char *match; /* what is matched: content, or its normalized form (set by tok_finalize) */
    size_t match_len;
} zy_added_token;

/* A pattern of a Split, a Replace: a literal string (lit) or a regex (re). */
typedef struct {
    char *lit; /* NULL for a regex */
    size_t lit_len;
    zy_pretok re;
} tok_pattern;

/* Iteration over a pattern's matches, as Oniguruma's find_iter (HF's regex engine) goes: an empty
 * match right where the previous match ended is skipped. */
typedef struct {
    size_t pos, last_end;
    int has_last;
} tok_find;

typedef enum { TOKN_REPLACE, TOKN_PREPEND } tok_norm_kind;
typedef struct {
    tok_norm_kind kind;
    tok_pattern pat; /* Replace */
    char *content;   /* Replace: the replacement; Prepend: the prefix */
    size_t content_len;
} tok_norm;

typedef enum { TOKP_BYTELEVEL, TOKP_SPLIT, TOKP_METASPACE } tok_pre_kind;
typedef enum {
    SPLIT_REMOVED,
    SPLIT_ISOLATED,
    SPLIT_MERGED_WITH_PREVIOUS,
    SPLIT_MERGED_WITH_NEXT,
    SPLIT_CONTIGUOUS
} tok_split_behavior;
typedef enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER } tok_prepend_scheme;

typedef struct {
    tok_pre_kind kind;
    tok_pattern pat; /* Split; ByteLevel with use_regex: the GPT-2 pattern */
    tok_split_behavior behavior;
    int invert;                      /* Split */
    int add_prefix_space, use_regex; /* ByteLevel */
    char repl[5];                    /* Metaspace: the replacement character (UTF-8) */
    size_t repl_len;                 /* Metaspace */
    tok_prepend_scheme scheme;       /* Metaspace */
    int split;                       /* Metaspace */
} tok_pre;

typedef enum {
    TOKD_BYTELEVEL,
    TOKD_REPLACE,
    TOKD_BYTEFALLBACK,
    TOKD_FUSE,
    TOKD_STRIP,
    TOKD_METASPACE
} tok_dec_kind;
typedef struct {
    tok_dec_kind kind;
    tok_pattern pat; /* Replace */
    char *content;   /* Replace: the replacement */
    size_t content_len;
    char ch[5]; /* Strip: the character stripped; Metaspace: the replacement */
    size_t ch_len;
    size_t start, stop;        /* Strip: how many at most at each end */
    tok_prepend_scheme scheme; /* Metaspace */
} tok_dec;

/* An added-token matcher: a byte trie of the contents, searched leftmost-longest. */
typedef struct {
    zy_u64map edges; /* (node << 8 | byte) -> child node */
    int32_t *term;   /* [n_nodes] index into added[] of the token ending there, or -1 */
    int32_t n_nodes, cap;
    uint8_t first[256]; /* which bytes start some token */
    int any;            /* holds at least one token */
} tok_trie;

struct zy_tokenizer {
    char *origin; /* file it came from (for messages), or "<trained>" */
    char *source; /* the file's text, written back by tok_save (NULL when trained) */
    size_t source_len;
    int32_t n_ids;   /* ids are 0 .. n_ids-1; some may be unused */
    char **text;     /* [n_ids] token string as in tokenizer.json, NULL when unused */
    char **dec_text; /* [n_ids] the string handed to the decoder (a normalized added token's
                        normalized form), NULL when the same as text */
    uint8_t *flags;  /* [n_ids] TOKF_* */

    zy_strmap vocab;          /* model vocab: token string -> id */
    int32_t *char_id;         /* [0x10000] id of each one-character token of the BMP, or -1 */
    int32_t fallback_id[256]; /* byte_fallback: id of "<0xXX>", or -1 */
    int32_t (*merges)[3];     /* [n_merges] (left, right, merged) ids in rank order */
    int32_t n_merges, merges_cap;
    zy_u64map merge_map; /* (left << 32 | right) -> (rank << 32 | merged id) */

    zy_added_token *added; /* [n_added] */
    int n_added, added_cap;
    int n_plain_added; /* added tokens that are not special (matched even in plain encoding) */
    tok_trie trie[2];  /* [0]: tokens matched in the raw text, [1]: in the normalized text */

    int ignore_merges, fuse_unk, byte_fallback;
    int32_t unk_id;    /* -1: unknown characters are dropped, as HF does without unk_token */
    char *unk_missing; /* unk_token named but not in the vocabulary (an error when needed) */
    int32_t bos_id, eos_id, pad_id;

    tok_norm *norms; /* [n_norms] normalizers, in order (Sequences flattened) */
    int n_norms;
    tok_pre *pres; /* [n_pres] pre-tokenizers, in order */
    int n_pres;
    tok_dec *decs; /* [n_decs] decoders, in order */
    int n_decs, has_decoder;
    int model_bytes;      /* the last pre-tokenizer is ByteLevel: pieces reach BPE as raw bytes */
    char *post_processor; /* its type, for `tokenizer info` (zayac never applies it) */

    zy_pretok word_re; /* "\w" for single_word added tokens (compiled only when needed) */
};

/* An empty tokenizer named by origin (ids are added with tok_set_token). */
zy_tokenizer *tok_alloc(const char *origin);
/* Gives id its token string (from tokenizer.json or built by training) and flags. A model token
 * whose id is already taken is an error. */
int tok_set_token(zy_tokenizer *t, int32_t id, const char *text, size_t len, int flags);
/* Appends a merge of two ids into a third (rank = its position); a later duplicate of a pair
 * takes over its rank, as in HF. */
void tok_push_merge(zy_tokenizer *t, int32_t left, int32_t right, int32_t merged);
/* Appends an added token (its id must be set with tok_set_token too). */
void tok_push_added(zy_tokenizer *t, const zy_added_token *a);
/* Gives a tokenizer GPT-2's pipeline: one ByteLevel pre-tokenizer (no prefix space, the GPT-2
 * split) and the ByteLevel decoder (what training writes). */
int tok_use_gpt2_pipeline(zy_tokenizer *t);
/* Builds the lookup tables (character ids, merge map, special ids, added-token tries, the
 * normalized forms of normalized added tokens). Errors name t->origin. */
int tok_finalize(zy_tokenizer *t);

/* ---- patterns (tok_regex.c) ---- */

/* Rewrites a pattern written for Oniguruma (HF's engine) as PCRE2 that matches the same: \p{L},
 * \p{N}, \s, \S as HF's tables, \h as a hex digit, \uHHHH, {,n}, (?m) as dot-all. A construct it
 * cannot rewrite faithfully (\w, \b, nested classes) is an error naming it. *out is malloc'd. */
int tok_regex_translate(const char *pat, char **out);
/* A literal pattern (len > 0) or a regex (translated, compiled); errors name `where`. */
int tok_pattern_init(tok_pattern *p, const char *text, size_t len, int is_regex, const char *where);
void tok_pattern_free(tok_pattern *p);
/* The next match at or after the iteration's position: 1 with [*s, *e), 0 when none, ZY_ERR on a
 * PCRE2 failure. */
int tok_pattern_next(const tok_pattern *p, zy_pretok_matcher *m, const char *text, size_t len,
                     tok_find *it, size_t *s, size_t *e);

/* ---- normalizers and pre-tokenizers (tok_pipeline.c) ---- */

typedef struct {
    char *s;
    size_t cap;
} tok_buf;

typedef struct {
    size_t s, e;
    int match;
} tok_span;

typedef struct {
    tok_span *v;
    size_t n, cap;
} tok_spans;

/* Scratch of one thread running the pipeline: a matcher and buffers per pre-tokenizer stage. */
typedef struct {
    zy_pretok_matcher m;
    tok_buf norm[2];
    tok_buf *stage_in, *stage_out; /* [n_pres] */
    tok_spans *stage_spans;        /* [n_pres] */
    int n_stages;
    int no_prefix; /* a parallel chunk after the first: ByteLevel adds no prefix space */
} tok_work;

void tok_work_init(tok_work *w, const zy_tokenizer *t);
void tok_work_free(tok_work *w);
/* Grows a buffer to hold n bytes; returns its data. */
char *tok_buf_reserve(tok_buf *b, size_t n);

/* Runs the normalizers on text: *out is text itself (none apply) or a buffer of w. */
int tok_normalize(const zy_tokenizer *t, tok_work *w, const char *text, size_t len,
                  const char **out, size_t *out_len);
/* Pre-tokenizes text (at_start: it begins the input, for Metaspace's "first") and hands each
 * piece to fn: raw bytes when t->model_bytes, else the piece's string. */
int tok_pretokenize(const zy_tokenizer *t, tok_work *w, const char *text, size_t len, int at_start,
                    pretok_piece_fn fn, void *ctx);

/* ---- added tokens (tok_added.c) ---- */

void tok_trie_free(tok_trie *tr);
/* Builds trie[0] (non-normalized tokens) and trie[1] (normalized ones) from t->added. */
void tok_build_tries(zy_tokenizer *t);
/* Called for the text between added tokens (start: its offset in the text searched). */
typedef int (*tok_gap_fn)(const char *text, size_t len, size_t start, void *ctx);
/* Cuts the added tokens of trie[pass] out of text leftmost-longest with HF's single_word, lstrip
 * and rstrip rules (special ones only with TOK_SPECIAL); their ids go to out, the text between
 * them to gap. */
int tok_split_added(const zy_tokenizer *t, int pass, int flags, const char *text, size_t len,
                    zy_ids *out, tok_gap_fn gap, void *ctx);

/* ---- decoding (tok_decode.c) ---- */

/* Decodes token strings through the decoders (joined by spaces without a decoder, as HF). */
int tok_decode_tokens(const zy_tokenizer *t, const char *const *tokens, const size_t *lens,
                      size_t n, char **out, size_t *out_len);

/* ---- tokenizer.json components (tok_json_pipeline.c) ---- */

struct cJSON;
int tok_parse_normalizer(const char *path, const struct cJSON *j, zy_tokenizer *t);
int tok_parse_pre_tokenizer(const char *path, const struct cJSON *j, zy_tokenizer *t);
int tok_parse_decoder(const char *path, const struct cJSON *j, zy_tokenizer *t);
/* Frees the components of the pipeline. */
void tok_pipeline_free(zy_tokenizer *t);

/* A growable NUL-terminated string (the regex rewriter and the pre-tokenizer build text). */
typedef struct {
    char *s;
    size_t n, cap;
} tok_sbuf;

static inline void tok_sbuf_add(tok_sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = 2 * (b->n + n + 1);
        b->s = zy_realloc(b->s, b->cap);
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

#endif
