/* The trainer's view of the data: [B, T+1] token windows from a weighted mixture of prepared
 * sources, in a deterministic order, with a position that checkpoints save and restore. */
#ifndef ZY_BATCHES_H
#define ZY_BATCHES_H

#include "train/train_config.h"

#include <stdint.h>

typedef struct zy_batches zy_batches;

/* Opens the train (val = 0) or validation (val = 1) split of the config's sources. */
int batches_open(zy_batches **b, const zy_train_config *c, int val, uint64_t seed);
void batches_close(zy_batches *b);
/* Data parallel: this rank's part of every batch is rows [rank*B/world, (rank+1)*B/world) of the
 * batch a single rank would read (world must divide B). Every rank draws the same batches. */
int batches_set_slice(zy_batches *b, int rank, int world);
/* Fills ids [b,T] and targets [b,T] (the window shifted by one) with this rank's rows of the next
 * batch (b = B / world; B without a slice). */
int batches_next(zy_batches *b, int32_t *ids, int32_t *targets);
/* The position as JSON text (heap) / restored from it; `source` names the file in errors. */
char *batches_state_json(const zy_batches *b);
int batches_restore(zy_batches *b, const char *json, const char *source);
/* Where the stream stands, for a phase switch (train/phases.h): *rows = the rows drawn so far
 * (steps served x B), drawn[n_sources] = the windows (of T+1 tokens) each source gave so far. */
void batches_position(const zy_batches *b, uint64_t *rows, uint64_t *drawn);
/* Continues a stream of other sources or another shape: the next mixture draw is at row `rows` or
 * later (rounded up to a whole batch, so no draw of the mixture repeats), and source s continues
 * at its window drawn[s]. */
int batches_seek(zy_batches *b, uint64_t rows, const uint64_t *drawn);
/* Largest token id in the data (checked against the vocabulary before training). */
int32_t batches_max_token(const zy_batches *b);
/* Bad input unless every token id is below vocab_size, the model's (model names it; split is
 * "training" or "validation"). One pass over the data. */
int batches_check_vocab(const zy_batches *b, const char *split, int vocab_size, const char *model);
/* Bad input when tokenizer_path (a tokenizer.json; role says whose: "tokenizer", "the model's
 * tokenizer") is not the tokenizer the shards record (data/tok_hash.h); data that records none
 * (older shards, Megatron) passes. */
int batches_check_tokenizer(const zy_batches *b, const char *tokenizer_path, const char *role);

#endif
