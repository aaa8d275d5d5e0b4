/* JSON Lines documents: one JSON object per line, whose text field (a string) is one document.
 * The file may be plain, gzip or zstd (instream.h). Blank lines hold no record and are passed over.
 * A line that is not a JSON object, lacks the field, or holds a non-string there is bad input:
 * an error naming the file and line, or, when the reader is told to skip bad lines, counted and
 * passed over (the first such reason kept for the summary). */
#ifndef ZY_JSONL_H
#define ZY_JSONL_H

#include <stddef.h>
#include <stdint.h>

typedef struct zy_jsonl zy_jsonl;

typedef struct {
    uint64_t records;    /* lines that gave a document (empty texts included) */
    uint64_t empty;      /* records whose text is "" (no document) */
    uint64_t bad;        /* bad lines skipped (skip_bad only) */
    char first_bad[512]; /* "FILE:LINE: reason" of the first bad line skipped */
    uint64_t file_bytes; /* compressed bytes read */
} zy_jsonl_counts;

/* Opens path for reading the string field `field` of each line. */
int jsonl_open(zy_jsonl **out, const char *path, const char *field, int skip_bad);
/* The next document: 1 with *text (valid until the next call) and *len, 0 at the end, ZY_ERR on
 * bad input or a failed read. Empty texts are counted and passed over. */
int jsonl_next(zy_jsonl *r, const char **text, size_t *len);
/* 1 if the file is gzip or zstd. */
int jsonl_compressed(const zy_jsonl *r);
/* Adds this reader's counts to *c. */
void jsonl_add_counts(const zy_jsonl *r, zy_jsonl_counts *c);
void jsonl_close(zy_jsonl *r);

#endif
