/* The training data loader: mmapped token shards served as [B, T+1] int32 windows.
 *
 * A source is a set of shards (a folder's <split>_*.bin, or one shard file, or a Megatron dataset
 * named by its PREFIX.idx: data/megatron.h; a file serves both splits); its windows are the
 * non-overlapping stretches [k*T, k*T + T+1) of each shard (they share one boundary token, so each
 * token is predicted once per epoch; a window never crosses shards). Source s's c-th draw is window
 * perm_e(c mod W_s) of epoch e = c / W_s, where perm_e is a bijection of [0, W_s) keyed by
 * (seed, s, e) (a Feistel network with cycle walking): nothing is stored, any position is computed.
 * With several sources, global row j of step k comes from the source that a uniform draw at
 * (seed, k*G + j) picks by weight (G = B * world rows per step).
 *
 * The whole position is the small zy_loader_state (the step and each source's draw count):
 * restoring it into a loader opened on the same sources continues the exact same stream. */
#ifndef ZY_LOADER_H
#define ZY_LOADER_H

#include <stdint.h>

#define ZY_LOADER_MAX_SOURCES   16
#define ZY_LOADER_STATE_VERSION 1

typedef struct {
    const char *path;  /* a shard file, or a folder of shards */
    const char *split; /* in a folder: the files <split>_*.bin; NULL means "train" */
    double weight;     /* relative share of rows, > 0 */
} zy_loader_source;

typedef struct {
    int B, T; /* rows per rank per step, tokens predicted per row (a row holds T+1) */
    uint64_t seed;
    int shuffle;     /* 1: a fresh permutation of windows each epoch; 0: windows in order */
    int rank, world; /* this rank takes rows [rank*B, rank*B + B) of each step's G = B*world */
    int verify;      /* check every shard's checksum when opening */
} zy_loader_opts;

/* The position of a loader: only uint64 words, so it is saved as ZY_LOADER_STATE_WORDS
 * little-endian integers (a uint64 tensor in a checkpoint). */
typedef struct {
    uint64_t version; /* ZY_LOADER_STATE_VERSION */
    uint64_t seed;
    uint64_t step; /* steps served */
    uint64_t nsrc;
    uint64_t drawn[ZY_LOADER_MAX_SOURCES]; /* windows taken from each source so far */
} zy_loader_state;

#define ZY_LOADER_STATE_WORDS (sizeof(zy_loader_state) / sizeof(uint64_t))

/* Where a served row came from. */
typedef struct {
    int source, shard;
    uint64_t offset; /* first token of the window in that shard */
    uint64_t epoch;  /* of that source */
} zy_loader_row;

typedef struct zy_loader zy_loader;

/* Options with defaults: B 8, T 256, seed 0, shuffle 1, rank 0 of 1, verify 1. */
zy_loader_opts loader_defaults(void);
/* Opens sources [n]; every shard must share one vocabulary and tokenizer (among those that record
 * them) and hold a full window somewhere. */
int loader_open(zy_loader **out, const zy_loader_source *src, int n, const zy_loader_opts *o);
void loader_free(zy_loader *l);
/* Fills batch [B, T+1] with this rank's next rows and advances one step; rows [B] (may be NULL)
 * says where each came from. */
void loader_next(zy_loader *l, int32_t *batch, zy_loader_row *rows);
/* The current position. */
void loader_get_state(const zy_loader *l, zy_loader_state *st);
/* Continues from a saved position; a state of another version, seed or source count is an
 * error. */
int loader_set_state(zy_loader *l, const zy_loader_state *st);
/* Windows per epoch of source s, and the shards' vocabulary size and eos id (0 and 0 when no
 * shard records them: Megatron data). */
uint64_t loader_windows(const zy_loader *l, int s);
uint32_t loader_vocab_size(const zy_loader *l);
uint32_t loader_eos_id(const zy_loader *l);
/* The hash of the tokenizer the shards were written with (data/tok_hash.h), 0 when none records
 * one; *from (may be NULL) gets the first shard that does. */
uint64_t loader_tokenizer_hash(const zy_loader *l, const char **from);
/* The largest token id in all the loader's shards (one pass over them). */
int32_t loader_max_token(const zy_loader *l);
/* A bijection of [0, n) keyed by key (exposed for tests). */
uint64_t loader_permute(uint64_t i, uint64_t n, uint64_t key);

#endif
