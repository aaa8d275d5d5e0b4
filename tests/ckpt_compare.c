/* Checkpoint folders compared tensor by tensor (see ckpt_compare.h). */
#include "ckpt_compare.h"
#include "base/err.h"
#include "base/fileio.h"
#include "io/safetensors.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_FILES = 64 };

/* The .safetensors files of one subfolder, open. */
typedef struct {
    zy_safetensors f[MAX_FILES];
    int n;
} st_set;

typedef struct {
    int diffs;
    char *why;
    size_t n, used;
} report;

static void note(report *r, const char *fmt, ...) {
    r->diffs++;
    if (r->diffs > 6 || r->used + 2 >= r->n) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(r->why + r->used, r->n - r->used, fmt, ap);
    va_end(ap);
    if (k > 0) r->used += (size_t)k < r->n - r->used ? (size_t)k : r->n - r->used - 1;
    if (r->used + 2 < r->n) r->why[r->used++] = '\n', r->why[r->used] = 0;
}

static void set_close(st_set *s) {
    for (int i = 0; i < s->n; i++) safetensors_close(&s->f[i]);
    s->n = 0;
}

static int set_open(st_set *s, const char *dir, const char *sub, report *r) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, sub);
    s->n = 0;
    DIR *d = opendir(path);
    if (!d) {
        snprintf(r->why, r->n, "%s: cannot open", path);
        return -1;
    }
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        const size_t len = strlen(e->d_name), ext = strlen(".safetensors");
        if (len <= ext || strcmp(e->d_name + len - ext, ".safetensors")) continue;
        char file[1400];
        snprintf(file, sizeof file, "%s/%s", path, e->d_name);
        if (s->n == MAX_FILES || safetensors_open(&s->f[s->n], file) != ZY_OK) {
            snprintf(r->why, r->n, "%s: %s", file, s->n == MAX_FILES ? "too many" : zy_errmsg());
            rc = -1;
        } else {
            s->n++;
        }
    }
    closedir(d);
    if (rc == 0 && s->n == 0) {
        snprintf(r->why, r->n, "%s: no .safetensors file", path);
        rc = -1;
    }
    if (rc) set_close(s);
    return rc;
}

/* The one tensor of the set named name: its file in *file; -1 when none (or several: noted). */
static int find(const st_set *s, const char *name, const char *side, int *file, report *r) {
    int found = -1, count = 0;
    for (int k = 0; k < s->n; k++) {
        int i = safetensors_find(&s->f[k], name);
        if (i >= 0) found = i, *file = k, count++;
    }
    if (count > 1) note(r, "%s: %s is in %d files", side, name, count);
    return found;
}

static void compare_tensor(const zy_safetensors *fa, int ia, const zy_safetensors *fb, int ib,
                           report *r) {
    const zy_st_tensor *a = &fa->tensors[ia], *b = &fb->tensors[ib];
    int same = a->dtype == b->dtype && a->ndim == b->ndim && a->end - a->begin == b->end - b->begin;
    for (int d = 0; same && d < a->ndim; d++) same = a->shape[d] == b->shape[d];
    if (!same) {
        note(r, "%s: dtype or shape differs (%s vs %s)", a->name, fa->path, fb->path);
        return;
    }
    if (memcmp(fa->data + a->begin, fb->data + b->begin, a->end - a->begin))
        note(r, "%s: values differ (%s vs %s)", a->name, fa->path, fb->path);
}

/* Every tensor of subfolder sub, both ways. */
static int compare_sub(const char *a, const char *b, const char *sub, int *tensors, report *r) {
    st_set *sa = zy_calloc(1, sizeof *sa), *sb = zy_calloc(1, sizeof *sb);
    int rc = set_open(sa, a, sub, r);
    if (rc == 0 && (rc = set_open(sb, b, sub, r)) != 0) set_close(sa);
    for (int k = 0; rc == 0 && k < sa->n; k++)
        for (int i = 0; i < sa->f[k].count; i++) {
            const char *name = sa->f[k].tensors[i].name;
            int ka = 0, kb = 0;
            find(sa, name, a, &ka, r);
            if (ka != k) continue; /* counted at its first file */
            (*tensors)++;
            const int ib = find(sb, name, b, &kb, r);
            if (ib < 0)
                note(r, "%s/%s: %s is missing", b, sub, name);
            else
                compare_tensor(&sa->f[k], i, &sb->f[kb], ib, r);
        }
    for (int k = 0; rc == 0 && k < sb->n; k++)
        for (int i = 0; i < sb->f[k].count; i++) {
            int ka = 0;
            if (find(sa, sb->f[k].tensors[i].name, a, &ka, r) < 0)
                note(r, "%s/%s: %s is missing", a, sub, sb->f[k].tensors[i].name);
        }
    if (rc == 0) set_close(sa), set_close(sb);
    free(sa);
    free(sb);
    return rc;
}

static int compare_json(const char *a, const char *b, const char *file, report *r) {
    char pa[1024], pb[1024], *ta = NULL, *tb = NULL;
    snprintf(pa, sizeof pa, "%s/%s", a, file);
    snprintf(pb, sizeof pb, "%s/%s", b, file);
    if (zy_read_file(pa, &ta, NULL) != ZY_OK || zy_read_file(pb, &tb, NULL) != ZY_OK) {
        snprintf(r->why, r->n, "%s", zy_errmsg());
        free(ta);
        return -1;
    }
    cJSON *ja = cJSON_Parse(ta), *jb = cJSON_Parse(tb);
    if (!ja || !jb || !cJSON_Compare(ja, jb, 1)) note(r, "%s: %s and %s differ", file, pa, pb);
    cJSON_Delete(ja);
    cJSON_Delete(jb);
    free(ta);
    free(tb);
    return 0;
}

int ckpt_compare(const char *a, const char *b, int *tensors, char *why, size_t n) {
    report r = {0, why, n, 0};
    why[0] = 0;
    *tensors = 0;
    if (compare_sub(a, b, "model", tensors, &r) || compare_sub(a, b, "train", tensors, &r) ||
        compare_json(a, b, "model/config.json", &r) || compare_json(a, b, "train/state.json", &r))
        return -1;
    return r.diffs;
}
