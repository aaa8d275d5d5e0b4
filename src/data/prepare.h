/* `zayac data prepare`: text or JSON Lines files (plain, gzip or zstd) -> token shards. Files are
 * read one after another and cut into documents (text by the separator rule, JSONL one record a
 * document), each document is encoded (in parallel, deterministically) and followed by eos, and a
 * document goes to the validation split when a hash of its text falls under val_fraction (so the
 * split depends only on the text, never on the order or the thread count, and identical documents
 * stay together). A corpus too small to draw any validation document gives its document of
 * smallest hash to validation (with two documents or more); an empty split is reported.
 * Documents stream through in batches, so memory holds one batch and the largest text file, not
 * the corpus.
 *
 * The output folder holds train_NNNNNN.bin and val_NNNNNN.bin shards (shard.h, each recording
 * the tokenizer's hash), a copy of the tokenizer (tokenizer.json) and meta.json (counts, settings,
 * tokenizer hash, shard names). It is written under a temporary name and renamed into place at
 * the end; an existing folder is replaced only with force and only if it is a zayac data folder
 * (it has meta.json of format "zayac-shards"). */
#ifndef ZY_PREPARE_H
#define ZY_PREPARE_H

#include "data/docread.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *tokenizer;     /* tokenizer.json */
    const char *const *inputs; /* files or folders (docs_expand_inputs) */
    int n_inputs;
    const char *out_dir;
    double val_fraction;    /* of documents, in [0, 1); default 0.01 */
    uint64_t shard_tokens;  /* tokens per shard at most (a shard ends at a document end when it
                               can); default 100M */
    zy_docsep doc_sep;      /* text files */
    zy_docfmt format;       /* DOCFMT_AUTO: by each file's name */
    const char *text_field; /* JSONL: the field holding the text; default "text" */
    int skip_bad_lines;     /* JSONL: count and pass over bad lines instead of failing */
    int force;              /* replace an existing output folder (a zayac data folder only) */
} zy_prepare_opts;

typedef struct {
    uint64_t docs[2], tokens[2]; /* [0] train, [1] val */
    int shards[2];
    char empty_why[2][160]; /* why a split came out empty ("" when it did not) */
    zy_docread_stats read;  /* files, bytes, JSONL records and bad lines */
    zy_skipped skipped;     /* what the input folders left out */
    uint64_t tokenizer_hash;
    double seconds;
} zy_prepare_stats;

/* Default options (val_fraction 0.01, shard_tokens 100M, blank-line documents, format by name,
 * JSONL field "text"). */
zy_prepare_opts prepare_defaults(void);
/* Writes the shards; any failure leaves out_dir as it was. */
int data_prepare(const zy_prepare_opts *o, zy_prepare_stats *st);
/* 1 if a document's text goes to the validation split under this fraction. */
int prepare_is_val(const char *doc, size_t len, double val_fraction);

#endif
