/* A file's documents, whatever its format: text cut by the separator rule or JSON Lines records
 * (data/jsonl.h), either one plain, gzip or zstd (data/instream.h). The one reader behind
 * `data prepare` and `tokenizer train`, so both see the same documents. */
#ifndef ZY_DOCREAD_H
#define ZY_DOCREAD_H

#include "data/docs.h"
#include "data/jsonl.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    zy_docsep sep;          /* text files */
    zy_docfmt format;       /* DOCFMT_AUTO: by the file's name */
    const char *text_field; /* JSONL: the string field holding a document */
    int skip_bad_lines;     /* JSONL: count and pass over bad lines instead of failing */
} zy_docread_opts;

typedef struct {
    uint64_t bytes;      /* document text read (decompressed) */
    uint64_t file_bytes; /* bytes read from disk */
    int files, jsonl_files, compressed_files;
    zy_jsonl_counts jsonl; /* records, empty texts, bad lines skipped */
} zy_docread_stats;

/* Called with each document in file order; a failure stops the reading. */
typedef int (*zy_doc_fn)(void *ctx, const char *text, size_t len);

/* Text files, separator rule sep, JSONL field "text", bad lines failing. */
zy_docread_opts docread_defaults(zy_docsep sep);
/* Reads path's documents and hands each to fn; adds to *st. */
int docread_file(const char *path, const zy_docread_opts *o, zy_doc_fn fn, void *ctx,
                 zy_docread_stats *st);

#endif
