/* Input expansion and document splitting (see docs.h). */
#include "data/docs.h"
#include "base/err.h"
#include "base/fileio.h"
#include "data/instream.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int docsep_parse(const char *s, zy_docsep *out) {
    static const char *const names[] = {"blank-line", "file", "line", "fortune"};
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = (zy_docsep)i;
            return ZY_OK;
        }
    return zy_fail("document separator '%s': expected blank-line, file, line or fortune", s);
}

const char *docsep_name(zy_docsep sep) {
    static const char *const names[] = {"blank-line", "file", "line", "fortune"};
    return (unsigned)sep < 4 ? names[sep] : "?";
}

static void spans_push(zy_spans *s, const char *text, size_t len) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 256;
        s->d = zy_realloc(s->d, s->cap * sizeof *s->d);
    }
    s->d[s->n].text = text;
    s->d[s->n].len = len;
    s->n++;
}

void spans_free(zy_spans *s) {
    free(s->d);
    memset(s, 0, sizeof *s);
}

static int is_blank(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r' && p[i] != '\v' && p[i] != '\f') return 0;
    return 1;
}

static int is_percent(const char *p, size_t n) {
    return (n == 1 && p[0] == '%') || (n == 2 && p[0] == '%' && p[1] == '\r');
}

/* Adds [start, end) without its final line ending, if anything is left. */
static void push_doc(zy_spans *docs, const char *start, const char *end) {
    if (end > start && end[-1] == '\n') end--;
    if (end > start && end[-1] == '\r') end--;
    if (end > start) spans_push(docs, start, (size_t)(end - start));
}

void docs_split(const char *text, size_t len, zy_docsep sep, zy_spans *docs) {
    if (sep == DOCSEP_FILE) {
        if (len) spans_push(docs, text, len);
        return;
    }
    const char *p = text, *end = text + len, *doc = NULL; /* doc: start of the open document */
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *line_end = nl ? nl : end; /* without the newline */
        const char *next = nl ? nl + 1 : end; /* start of the next line */
        size_t n = (size_t)(line_end - p);
        int separator = sep == DOCSEP_FORTUNE ? is_percent(p, n) : is_blank(p, n);
        if (sep == DOCSEP_LINE) {
            if (!separator) push_doc(docs, p, next);
        } else if (separator) {
            if (doc) push_doc(docs, doc, p);
            doc = NULL;
        } else if (!doc) {
            doc = p;
        }
        p = next;
    }
    if (doc) push_doc(docs, doc, end);
}

/* ---- inputs ---- */

typedef struct {
    char **d;
    int n, cap;
} path_list;

static void paths_push(path_list *l, const char *s) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->d = zy_realloc(l->d, (size_t)l->cap * sizeof *l->d);
    }
    l->d[l->n++] = zy_strdup(s);
}

void docs_free_paths(char **paths, int n) {
    for (int i = 0; i < n; i++) free(paths[i]);
    free(paths);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A NUL byte in the first 4 KiB, unless the file is gzip or zstd (binary, but text inside). */
static int looks_binary(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0; /* let the reader report it */
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    return instream_sniff((const uint8_t *)buf, n) == INSTREAM_PLAIN && memchr(buf, 0, n) != NULL;
}

static void note_skip(zy_skipped *s, zy_skip_kind k, const char *path) {
    if (!s) return;
    if (s->count[k] < ZY_SKIP_EXAMPLES) snprintf(s->example[k][s->count[k]], 256, "%s", path);
    s->count[k]++;
}

void docs_skipped_describe(const zy_skipped *s, char *buf, size_t n) {
    static const char *const what[SKIP_KINDS] = {"binary files", "symlinks, not followed",
                                                 "subdirectories, not searched", "hidden files",
                                                 "special files"};
    size_t at = 0;
    buf[0] = 0;
    for (int k = 0; k < SKIP_KINDS; k++) {
        if (!s->count[k]) continue;
        at += (size_t)snprintf(buf + at, at < n ? n - at : 0, "%s%d %s (", at ? "; " : "",
                               s->count[k], what[k]);
        for (int e = 0; e < s->count[k] && e < ZY_SKIP_EXAMPLES; e++)
            at += (size_t)snprintf(buf + at, at < n ? n - at : 0, "%s%s", e ? ", " : "",
                                   s->example[k][e]);
        at += (size_t)snprintf(buf + at, at < n ? n - at : 0, "%s)",
                               s->count[k] > ZY_SKIP_EXAMPLES ? ", ..." : "");
    }
}

static int expand_dir(const char *dir, path_list *out, zy_skipped *skipped) {
    DIR *d = opendir(dir);
    if (!d) return zy_fail("%s: cannot open directory: %s", dir, strerror(errno));
    path_list names = {0};
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) paths_push(&names, e->d_name);
    closedir(d);
    if (names.n) qsort(names.d, (size_t)names.n, sizeof *names.d, cmp_str);
    for (int i = 0; i < names.n; i++) {
        size_t n = strlen(dir) + strlen(names.d[i]) + 2;
        char *full = zy_malloc(n);
        snprintf(full, n, "%s/%s", dir, names.d[i]);
        struct stat st;
        if (lstat(full, &st) != 0) {
            int rc = zy_fail_errno(full, "cannot read", errno);
            free(full);
            docs_free_paths(names.d, names.n);
            return rc;
        }
        if (names.d[i][0] == '.')
            note_skip(skipped, SKIP_HIDDEN, full);
        else if (S_ISLNK(st.st_mode))
            note_skip(skipped, SKIP_SYMLINK, full);
        else if (S_ISDIR(st.st_mode))
            note_skip(skipped, SKIP_SUBDIR, full);
        else if (!S_ISREG(st.st_mode))
            note_skip(skipped, SKIP_OTHER, full);
        else if (looks_binary(full))
            note_skip(skipped, SKIP_BINARY, full);
        else
            paths_push(out, full);
        free(full);
    }
    docs_free_paths(names.d, names.n);
    return ZY_OK;
}

int docs_expand_inputs(const char *const *in, int n, char ***out, int *nout, zy_skipped *skipped) {
    path_list l = {0};
    *out = NULL;
    *nout = 0;
    for (int i = 0; i < n; i++) {
        struct stat st;
        if (stat(in[i], &st) != 0) {
            docs_free_paths(l.d, l.n);
            return zy_fail("%s: cannot read input: %s", in[i], strerror(errno));
        }
        if (S_ISDIR(st.st_mode)) {
            int before = l.n;
            zy_skipped here = {0};
            if (expand_dir(in[i], &l, &here) != ZY_OK) {
                docs_free_paths(l.d, l.n);
                return ZY_ERR;
            }
            if (l.n == before) {
                char what[1024];
                docs_skipped_describe(&here, what, sizeof what);
                docs_free_paths(l.d, l.n);
                return zy_fail("%s: the directory has no text files%s%s", in[i],
                               what[0] ? "; left out: " : "", what);
            }
            for (int k = 0; skipped && k < SKIP_KINDS; k++)
                for (int e = 0; e < here.count[k]; e++)
                    note_skip(skipped, (zy_skip_kind)k,
                              here.example[k][e < ZY_SKIP_EXAMPLES ? e : 0]);
        } else {
            paths_push(&l, in[i]);
        }
    }
    if (l.n == 0) return zy_fail("no input files");
    *out = l.d;
    *nout = l.n;
    return ZY_OK;
}

static int has_suffix(const char *s, size_t n, const char *tail) {
    size_t t = strlen(tail);
    return n >= t && memcmp(s + n - t, tail, t) == 0;
}

zy_docfmt docfmt_of(const char *path, zy_docfmt fmt) {
    if (fmt != DOCFMT_AUTO) return fmt;
    size_t n = strlen(path);
    if (has_suffix(path, n, ".gz"))
        n -= 3;
    else if (has_suffix(path, n, ".zst"))
        n -= 4;
    else if (has_suffix(path, n, ".zstd"))
        n -= 5;
    return has_suffix(path, n, ".jsonl") || has_suffix(path, n, ".ndjson") ? DOCFMT_JSONL
                                                                           : DOCFMT_TEXT;
}
