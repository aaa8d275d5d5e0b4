/* The tokenizer's insides, shared by tokenizer.c (encode/decode), tok_json.c (tokenizer.json) and
 * bpe_train.c (training). Not for use outside src/data. */
#ifndef ZY_TOK_INTERNAL_H
#define ZY_TOK_INTERNAL_H

#include "data/hashmap.h"
#include "data/pretok.h"
#include "data/tokenizer.h"

/* Per-id flags. */
enum { TOKF_MODEL = 1, TOKF_ADDED = 2, TOKF_SPECIAL = 4 };

typedef struct {
    char *content; /* UTF-8 text matched in the input */
    size_t len;
    int32_t id;
    uint8_t special, lstrip, rstrip, single_word, normalized;
} zy_added_token;

struct zy_tokenizer {
    char *origin;        /* file it came from (for messages), or "<trained>" */
    int32_t n_ids;       /* ids are 0 .. n_ids-1; some may be unused */
    char **text;         /* [n_ids] token string as in tokenizer.json, NULL when unused */
    char **bytes;        /* [n_ids] what the id decodes to */
    uint32_t *bytes_len; /* [n_ids] */
    uint8_t *flags;      /* [n_ids] TOKF_* */

    zy_strmap vocab;      /* model vocab: token string -> id */
    int32_t byte_id[256]; /* id of each single byte's token, -1 when the vocab lacks it */
    int32_t (*merges)[3]; /* [n_merges] (left, right, merged) ids in rank order */
    int32_t n_merges, merges_cap;
    zy_u64map merge_map; /* (left << 32 | right) -> (rank << 32 | merged id) */

    zy_added_token *added; /* [n_added] */
    int n_added, added_cap;
    int n_plain_added; /* added tokens that are not special (matched even in plain encoding) */
    uint8_t added_first[256]; /* which bytes start some added token */

    int add_prefix_space, trim_offsets, use_regex, ignore_merges, fuse_unk;
    int32_t unk_id; /* -1: unknown bytes are dropped, as HF does without unk_token */
    int32_t bos_id, eos_id, pad_id;

    zy_pretok pretok;
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
/* Builds the lookup tables (byte ids, merge map, special ids, the patterns). Errors name
 * t->origin. */
int tok_finalize(zy_tokenizer *t);

#endif
