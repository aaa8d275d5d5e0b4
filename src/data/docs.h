/* Text inputs for the tokenizer trainer and the data pipeline: expanding input paths (a directory
 * means its text and compressed files), telling a file's format by its name, and cutting a file's
 * text into documents by a separator rule. */
#ifndef ZY_DOCS_H
#define ZY_DOCS_H

#include <stddef.h>

/* How a file is cut into documents. */
typedef enum {
    DOCSEP_BLANK_LINE = 0, /* runs of lines holding only whitespace separate documents */
    DOCSEP_FILE = 1,       /* the whole file is one document */
    DOCSEP_LINE = 2,       /* every non-blank line is a document */
    DOCSEP_FORTUNE = 3,    /* a line holding only "%" separates entries (fortune files) */
} zy_docsep;

/* Parses "blank-line", "file", "line" or "fortune". */
int docsep_parse(const char *s, zy_docsep *out);
const char *docsep_name(zy_docsep sep);

typedef struct {
    const char *text; /* points into the file's text */
    size_t len;
} zy_span;

typedef struct {
    zy_span *d; /* [n] */
    size_t n, cap;
} zy_spans;

/* Appends the documents of text to docs: lines keep their newlines inside a document, the last
 * line of a document loses its line ending, and documents empty after that are skipped. */
void docs_split(const char *text, size_t len, zy_docsep sep, zy_spans *docs);
void spans_free(zy_spans *s);

/* Why a directory entry was left out of the inputs. */
typedef enum {
    SKIP_BINARY = 0, /* a NUL byte in the first 4 KiB and no gzip/zstd magic (fortune's .dat) */
    SKIP_SYMLINK,    /* not followed: name it (or its target) to read it */
    SKIP_SUBDIR,     /* directories are not searched recursively */
    SKIP_HIDDEN,     /* a name starting with '.' */
    SKIP_OTHER,      /* a socket, fifo or device */
    SKIP_KINDS
} zy_skip_kind;

#define ZY_SKIP_EXAMPLES 3

/* What input expansion left out, by kind, with the first few paths of each. */
typedef struct {
    int count[SKIP_KINDS];
    char example[SKIP_KINDS][ZY_SKIP_EXAMPLES][256];
} zy_skipped;

/* One line describing s ("43 binary files (a.dat, b.dat, c.dat, ...); 43 symlinks (...)") into
 * buf [n]; "" when nothing was left out. */
void docs_skipped_describe(const zy_skipped *s, char *buf, size_t n);

/* Expands input paths into files: a regular file stays as it is; a directory gives its regular
 * files in name order, leaving out binary files (gzip and zstd files are kept), symlinks,
 * subdirectories and hidden names, each counted in *skipped (may be NULL). A missing path or an
 * empty result is an error. *out is a heap array of heap strings (free with docs_free_paths). */
int docs_expand_inputs(const char *const *in, int n, char ***out, int *nout, zy_skipped *skipped);
void docs_free_paths(char **paths, int n);

/* How an input file is read. */
typedef enum {
    DOCFMT_AUTO = 0, /* by the name: *.jsonl and *.ndjson (also .gz, .zst) are JSONL, else text */
    DOCFMT_TEXT = 1, /* text cut into documents by the separator rule */
    DOCFMT_JSONL = 2 /* one JSON object per line; its text field is a document (data/jsonl.h) */
} zy_docfmt;

/* The format a file is read in: fmt itself unless it is DOCFMT_AUTO. */
zy_docfmt docfmt_of(const char *path, zy_docfmt fmt);

#endif
