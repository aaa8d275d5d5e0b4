/* Text inputs for the tokenizer trainer and the data pipeline: expanding input paths (a directory
 * means its text files) and cutting a file's text into documents by a separator rule. */
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

/* Expands input paths into files: a regular file stays as it is; a directory gives its regular
 * files (not symlinks, not subdirectories) in name order, leaving out binary ones (a NUL byte in
 * the first 4 KiB, such as fortune's .dat indexes). A missing path or an empty result is an error.
 * *out is a heap array of heap strings (free with docs_free_paths). */
int docs_expand_inputs(const char *const *in, int n, char ***out, int *nout);
void docs_free_paths(char **paths, int n);

#endif
