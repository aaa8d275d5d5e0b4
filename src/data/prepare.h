/* `zayac data prepare`: text files -> token shards. Files are cut into documents, each document is
 * encoded (in parallel, deterministically) and followed by eos, and a document goes to the
 * validation split when a hash of its text falls under val_fraction (so the split depends only on
 * the text, never on the order or the thread count, and identical documents stay together).
 *
 * The output folder holds train_NNNNNN.bin and val_NNNNNN.bin shards (shard.h), a copy of the
 * tokenizer (tokenizer.json) and meta.json (counts, settings, shard names). It is written under a
 * temporary name and renamed into place at the end; an existing folder is replaced only if it is
 * a zayac data folder (it has meta.json of format "zayac-shards"). */
#ifndef ZY_PREPARE_H
#define ZY_PREPARE_H

#include "data/docs.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *tokenizer;     /* tokenizer.json */
    const char *const *inputs; /* files or folders (docs_expand_inputs) */
    int n_inputs;
    const char *out_dir;
    double val_fraction;   /* of documents, in [0, 1); default 0.01 */
    uint64_t shard_tokens; /* tokens per shard at most (a shard ends at a document end when it
                              can); default 100M */
    zy_docsep doc_sep;
} zy_prepare_opts;

typedef struct {
    uint64_t docs[2], tokens[2]; /* [0] train, [1] val */
    int shards[2];
    uint64_t bytes; /* text read */
    int files;
    double seconds;
} zy_prepare_stats;

/* Default options (val_fraction 0.01, shard_tokens 100M, blank-line documents). */
zy_prepare_opts prepare_defaults(void);
/* Writes the shards; any failure leaves out_dir as it was. */
int data_prepare(const zy_prepare_opts *o, zy_prepare_stats *st);
/* 1 if a document's text goes to the validation split under this fraction. */
int prepare_is_val(const char *doc, size_t len, double val_fraction);

#endif
