/* JSON Lines documents (see jsonl.h): lines cut from a decompressed stream, each parsed with
 * cJSON. */
#include "data/jsonl.h"
#include "base/err.h"
#include "data/instream.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define READ_CHUNK ((size_t)1 << 20)

struct zy_jsonl {
    zy_instream *in;
    char *path, *field;
    int skip_bad, eof;
    char *buf; /* [cap] decompressed bytes; [pos, len) not yet cut into lines */
    size_t pos, len, cap;
    uint64_t line; /* number of the last line cut (1-based) */
    cJSON *doc;    /* the last record, holding the text handed out */
    zy_jsonl_counts c;
};

int jsonl_open(zy_jsonl **out, const char *path, const char *field, int skip_bad) {
    *out = NULL;
    zy_instream *in;
    ZY_TRY(instream_open(&in, path));
    zy_jsonl *r = zy_calloc(1, sizeof *r);
    r->in = in;
    r->path = zy_strdup(path);
    r->field = zy_strdup(field);
    r->skip_bad = skip_bad;
    r->cap = READ_CHUNK;
    r->buf = zy_malloc(r->cap);
    *out = r;
    return ZY_OK;
}

void jsonl_close(zy_jsonl *r) {
    if (!r) return;
    instream_close(r->in);
    cJSON_Delete(r->doc);
    free(r->buf);
    free(r->path);
    free(r->field);
    free(r);
}

int jsonl_compressed(const zy_jsonl *r) {
    return instream_kind(r->in) != INSTREAM_PLAIN;
}

void jsonl_add_counts(const zy_jsonl *r, zy_jsonl_counts *c) {
    if (!c->first_bad[0] && r->c.first_bad[0])
        snprintf(c->first_bad, sizeof c->first_bad, "%s", r->c.first_bad);
    c->records += r->c.records;
    c->empty += r->c.empty;
    c->bad += r->c.bad;
    c->file_bytes += instream_file_bytes(r->in);
}

/* The next line [*line, *line + *n) without its line ending; 0 at the end of the file. */
static int next_line(zy_jsonl *r, char **line, size_t *n) {
    for (;;) {
        char *nl = memchr(r->buf + r->pos, '\n', r->len - r->pos);
        if (nl || (r->eof && r->pos < r->len)) {
            char *end = nl ? nl : r->buf + r->len;
            *line = r->buf + r->pos;
            *n = (size_t)(end - *line);
            r->pos = nl ? (size_t)(nl - r->buf) + 1 : r->len;
            if (*n && (*line)[*n - 1] == '\r') (*n)--;
            r->line++;
            return 1;
        }
        if (r->eof) return 0;
        memmove(r->buf, r->buf + r->pos, r->len - r->pos); /* keep the partial line */
        r->len -= r->pos;
        r->pos = 0;
        if (r->cap - r->len < READ_CHUNK) { /* a line longer than the buffer */
            r->cap *= 2;
            r->buf = zy_realloc(r->buf, r->cap);
        }
        size_t got;
        ZY_TRY(instream_read(r->in, r->buf + r->len, r->cap - r->len, &got));
        r->len += got;
        if (got == 0) r->eof = 1;
    }
}

/* A bad line: an error, or (skip_bad) counted with its reason kept; returns ZY_OK when skipped. */
static int bad_line(zy_jsonl *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad_line(zy_jsonl *r, const char *fmt, ...) {
    char why[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (!r->skip_bad)
        return zy_fail("%s:%" PRIu64 ": %s (--skip-bad-lines passes over such lines and counts "
                       "them)",
                       r->path, r->line, why);
    if (!r->c.bad)
        snprintf(r->c.first_bad, sizeof r->c.first_bad, "%s:%" PRIu64 ": %s", r->path, r->line,
                 why);
    r->c.bad++;
    return ZY_OK;
}

static int is_blank(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r') return 0;
    return 1;
}

/* 1 if a JSON string escape in the line decodes to NUL (cJSON would cut the text there). */
static int has_nul_escape(const char *p, size_t n) {
    for (size_t i = 0; i + 1 < n; i++) {
        if (p[i] != '\\') continue;
        if (p[i + 1] == 'u' && i + 5 < n && memcmp(p + i + 2, "0000", 4) == 0) return 1;
        i++; /* the escaped character */
    }
    return 0;
}

static const char *json_kind(const cJSON *v) {
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "a string";
}

int jsonl_next(zy_jsonl *r, const char **text, size_t *len) {
    cJSON_Delete(r->doc);
    r->doc = NULL;
    for (;;) {
        char *line;
        size_t n;
        int more = next_line(r, &line, &n);
        if (more <= 0) return more;
        if (is_blank(line, n)) continue;
        const char *end = NULL;
        cJSON *doc = cJSON_ParseWithLengthOpts(line, n, &end, 0);
        if (!doc) {
            ZY_TRY(bad_line(r, "not valid JSON (parsing stopped at byte %ld of the line)",
                            end ? (long)(end - line) + 1 : 0L));
            continue;
        }
        if (!is_blank(end, n - (size_t)(end - line))) {
            cJSON_Delete(doc);
            ZY_TRY(bad_line(r, "more than one JSON value on the line (one record per line)"));
            continue;
        }
        if (!cJSON_IsObject(doc)) {
            int rc = bad_line(r, "%s, expected a JSON object with a \"%s\" field", json_kind(doc),
                              r->field);
            cJSON_Delete(doc);
            ZY_TRY(rc);
            continue;
        }
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(doc, r->field);
        int rc = ZY_OK, skipped = 1;
        if (!f)
            rc = bad_line(r, "no \"%s\" field (--text-field names the field to read)", r->field);
        else if (!cJSON_IsString(f))
            rc = bad_line(r, "\"%s\" is %s, expected a string", r->field, json_kind(f));
        else if (has_nul_escape(line, n))
            rc = bad_line(r, "holds \\u0000 (a NUL character), which a document cannot carry");
        else
            skipped = 0;
        if (rc != ZY_OK || skipped) {
            cJSON_Delete(doc);
            ZY_TRY(rc);
            continue;
        }
        r->c.records++;
        if (!f->valuestring[0]) {
            r->c.empty++;
            cJSON_Delete(doc);
            continue;
        }
        r->doc = doc;
        *text = f->valuestring;
        *len = strlen(f->valuestring);
        return 1;
    }
}
