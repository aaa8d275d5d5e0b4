/* A tokenizer's fingerprint, recorded in token shards and checked before training or evaluating,
 * so data is never read through a different vocabulary than the one that wrote it. It covers
 * what a token id means: every id's token string and whether it is special (so re-saving or
 * re-formatting a tokenizer.json keeps it, and a different vocabulary changes it). */
#ifndef ZY_TOK_HASH_H
#define ZY_TOK_HASH_H

#include "data/tokenizer.h"

#include <stdint.h>

/* The vocabulary hash of t; never 0 (0 means "not recorded" in a shard). */
uint64_t tok_vocab_hash(const zy_tokenizer *t);
/* Loads path and returns its vocabulary hash and size. */
int tok_file_hash(const char *path, uint64_t *hash, int32_t *vocab_size);

#endif
