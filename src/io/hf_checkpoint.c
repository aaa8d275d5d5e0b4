/* HF checkpoint folders: weights in and out of a parameter table (see hf_checkpoint.h). */
#include "io/hf_checkpoint.h"
#include "base/err.h"
#include "base/fileio.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HF_SINGLE "model.safetensors"
#define HF_INDEX  "model.safetensors.index.json"

/* The embedding is the head (tie_word_embeddings is required), so a checkpoint that also stores
 * lm_head.weight carries a copy we do not need: it is skipped, never compared. */
static int hf_ignored(const char *name) {
    return strcmp(name, "lm_head.weight") == 0;
}

typedef struct {
    zy_safetensors *files; /* open shards */
    char **names;          /* their file names (relative to dir) */
    int count;
    int *file_of; /* per table tensor: index into files */
} hf_set;

static void hf_set_free(hf_set *s) {
    for (int i = 0; i < s->count; i++) {
        safetensors_close(&s->files[i]);
        free(s->names[i]);
    }
    free(s->files);
    free(s->names);
    free(s->file_of);
    memset(s, 0, sizeof *s);
}

/* Opens (once) shard `name` of dir; returns its index or -1. */
static int hf_open_shard(hf_set *s, const char *dir, const char *name, const char *index_path) {
    for (int i = 0; i < s->count; i++)
        if (strcmp(s->names[i], name) == 0) return i;
    if (!*name || strchr(name, '/') || strcmp(name, "..") == 0) {
        zy_fail("%s: weight_map names shard '%s', expected a file name inside the folder",
                index_path, name);
        return -1;
    }
    char path[4096];
    if (zy_path_join(path, sizeof path, dir, name) != ZY_OK) return -1;
    s->files = zy_realloc(s->files, (size_t)(s->count + 1) * sizeof *s->files);
    s->names = zy_realloc(s->names, (size_t)(s->count + 1) * sizeof *s->names);
    if (safetensors_open(&s->files[s->count], path) != ZY_OK) {
        if (index_path) zy_fail_ctx("%s: shard listed in the weight_map", index_path);
        return -1;
    }
    s->names[s->count] = zy_strdup(name);
    return s->count++;
}

/* Reads the index and opens every shard a table tensor lives in. */
static int hf_open_sharded(hf_set *s, const char *dir, const zy_param_table *t, const char *ipath) {
    char *text;
    ZY_TRY(zy_read_file(ipath, &text, NULL));
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    int rc = ZY_OK;
    if (!root) {
        rc = zy_fail("%s: not valid JSON (the parser stopped at byte %zu)", ipath,
                     end && end >= text ? (size_t)(end - text) : 0);
        free(text);
        return rc;
    }
    free(text);
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(wm)) rc = zy_fail("%s: no weight_map object", ipath);
    const cJSON *e;
    if (rc == ZY_OK) cJSON_ArrayForEach(e, wm) {
            if (!cJSON_IsString(e)) {
                rc = zy_fail("%s: weight_map entry '%s' is not a file name", ipath, e->string);
                break;
            }
            if (!hf_ignored(e->string) && params_find(t, e->string) < 0) {
                rc = zy_fail("%s: unexpected tensor '%s' (not a parameter of this model)", ipath,
                             e->string);
                break;
            }
        }
    for (int i = 0; i < t->count && rc == ZY_OK; i++) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(wm, t->items[i].name);
        if (!f)
            rc = zy_fail("%s: tensor '%s' is missing from the weight_map", ipath, t->items[i].name);
        else if ((s->file_of[i] = hf_open_shard(s, dir, f->valuestring, ipath)) < 0)
            rc = ZY_ERR;
    }
    cJSON_Delete(root);
    return rc;
}

/* Checks each table tensor exists with its shape and a float dtype, and that no file holds a tensor
 * the table does not know. Touches no output. */
static int hf_check(const hf_set *s, const zy_param_table *t) {
    for (int i = 0; i < t->count; i++) {
        const zy_param *p = &t->items[i];
        const zy_safetensors *f = &s->files[s->file_of[i]];
        int k = safetensors_find(f, p->name);
        char want[160], got[160];
        params_shape_str(p, want, sizeof want);
        if (k < 0) return zy_fail("%s: no tensor '%s' (expected shape %s)", f->path, p->name, want);
        const zy_st_tensor *x = &f->tensors[k];
        int same = x->ndim == p->ndim;
        for (int d = 0; same && d < p->ndim; d++) same = x->shape[d] == p->shape[d];
        if (!same) {
            safetensors_shape_str(x->ndim, x->shape, got, sizeof got);
            return zy_fail("%s: tensor '%s' has shape %s, expected %s", f->path, p->name, got,
                           want);
        }
        if (x->dtype != ZY_ST_F32 && x->dtype != ZY_ST_BF16 && x->dtype != ZY_ST_F16 &&
            x->dtype != ZY_ST_F64)
            return zy_fail("%s: tensor '%s' has dtype %s, expected F32, BF16, F16 or F64", f->path,
                           p->name, safetensors_dtype_name(x->dtype));
    }
    for (int j = 0; j < s->count; j++)
        for (int k = 0; k < s->files[j].count; k++) {
            const char *n = s->files[j].tensors[k].name;
            if (!hf_ignored(n) && params_find(t, n) < 0)
                return zy_fail("%s: unexpected tensor '%s' (not a parameter of this model)",
                               s->files[j].path, n);
        }
    return ZY_OK;
}

int hf_load_weights(const char *dir, const zy_param_table *t, float *buf) {
    char single[4096], index[4096];
    ZY_TRY(zy_path_join(single, sizeof single, dir, HF_SINGLE));
    ZY_TRY(zy_path_join(index, sizeof index, dir, HF_INDEX));
    hf_set s = {0};
    s.file_of = zy_calloc((size_t)t->count + 1, sizeof *s.file_of);
    int rc = ZY_OK;
    /* Like transformers: a single model.safetensors wins over an index. */
    if (zy_path_exists(single))
        rc = hf_open_shard(&s, dir, HF_SINGLE, NULL) < 0 ? ZY_ERR : ZY_OK;
    else if (zy_path_exists(index))
        rc = hf_open_sharded(&s, dir, t, index);
    else
        rc = zy_fail("%s: no %s or %s in this folder", dir, HF_SINGLE, HF_INDEX);
    if (rc == ZY_OK) rc = hf_check(&s, t);
    for (int i = 0; i < t->count && rc == ZY_OK; i++) {
        const zy_param *p = &t->items[i];
        rc = safetensors_read_f32(&s.files[s.file_of[i]], p->name, p->ndim, p->shape,
                                  buf + p->offset);
    }
    hf_set_free(&s);
    return rc;
}

/* Bytes of a table tensor saved in dtype (balancing biases stay F32). */
static zy_st_dtype saved_dtype(const zy_param *p, zy_st_dtype dtype) {
    /* Balancing biases are an fp32 buffer in HF; bf16 would move the routing decision. */
    return p->kind == ZY_PARAM_BUFFER ? ZY_ST_F32 : dtype;
}

static uint64_t saved_bytes(const zy_param *p, zy_st_dtype dtype) {
    return (uint64_t)p->numel * (saved_dtype(p, dtype) == ZY_ST_BF16 ? 2u : 4u);
}

/* Writes tensors [first, last) of t as one safetensors file. */
static int write_shard(const char *path, const zy_param_table *t, const float *buf,
                       zy_st_dtype dtype, int first, int last) {
    zy_st_write_item *items = zy_calloc((size_t)(last - first) + 1, sizeof *items);
    for (int i = first; i < last; i++) {
        const zy_param *p = &t->items[i];
        items[i - first] =
            (zy_st_write_item){p->name, saved_dtype(p, dtype), p->ndim, p->shape, buf + p->offset};
    }
    const char *meta[] = {"format", "pt"};
    int rc = safetensors_write(path, items, last - first, meta, 1);
    free(items);
    return rc;
}

int hf_save_weights_range(const char *path, const zy_param_table *t, const float *buf,
                          zy_st_dtype dtype, int first, int last) {
    return write_shard(path, t, buf, dtype, first, last);
}

char *hf_index_json(const zy_param_table *t, zy_st_dtype dtype, const int *shard_of,
                    const char *const *files) {
    cJSON *index = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(index, "metadata");
    uint64_t total = 0;
    for (int i = 0; i < t->count; i++) total += saved_bytes(&t->items[i], dtype);
    cJSON_AddNumberToObject(meta, "total_size", (double)total);
    cJSON *map = cJSON_AddObjectToObject(index, "weight_map");
    for (int i = 0; i < t->count; i++)
        cJSON_AddStringToObject(map, t->items[i].name, files[shard_of[i]]);
    char *text = cJSON_Print(index);
    cJSON_Delete(index);
    return text;
}

int hf_save_weights(const char *dir, const zy_param_table *t, const float *buf, zy_st_dtype dtype) {
    return hf_save_weights_sharded(dir, t, buf, dtype, 0, NULL);
}

int hf_save_weights_sharded(const char *dir, const zy_param_table *t, const float *buf,
                            zy_st_dtype dtype, uint64_t shard_bytes, int *n_files) {
    if (dtype != ZY_ST_F32 && dtype != ZY_ST_BF16)
        return zy_fail("%s: weights can be saved as F32 or BF16, not %s", dir,
                       safetensors_dtype_name(dtype));
    ZY_TRY(zy_mkdirs(dir));
    uint64_t total = 0;
    for (int i = 0; i < t->count; i++) total += saved_bytes(&t->items[i], dtype);
    char path[4096];
    if (shard_bytes == 0 || total <= shard_bytes) {
        if (n_files) *n_files = 1;
        ZY_TRY(zy_path_join(path, sizeof path, dir, HF_SINGLE));
        return write_shard(path, t, buf, dtype, 0, t->count);
    }
    /* shard boundaries: start[k] is the first tensor of shard k */
    int *start = zy_calloc((size_t)t->count + 2, sizeof *start), n = 0;
    uint64_t used = 0;
    for (int i = 0; i < t->count; i++) {
        uint64_t b = saved_bytes(&t->items[i], dtype);
        if (i == 0 || (used > 0 && used + b > shard_bytes)) {
            start[n++] = i;
            used = 0;
        }
        used += b;
    }
    start[n] = t->count;
    cJSON *index = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(index, "metadata");
    cJSON_AddNumberToObject(meta, "total_size", (double)total);
    cJSON *map = cJSON_AddObjectToObject(index, "weight_map");
    int rc = ZY_OK;
    for (int k = 0; k < n && rc == ZY_OK; k++) {
        char name[64];
        snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", k + 1, n);
        rc = zy_path_join(path, sizeof path, dir, name);
        if (rc == ZY_OK) rc = write_shard(path, t, buf, dtype, start[k], start[k + 1]);
        for (int i = start[k]; i < start[k + 1]; i++)
            cJSON_AddStringToObject(map, t->items[i].name, name);
    }
    char *text = rc == ZY_OK ? cJSON_Print(index) : NULL;
    if (rc == ZY_OK) rc = zy_path_join(path, sizeof path, dir, HF_INDEX);
    if (rc == ZY_OK) rc = zy_write_file_atomic(path, text, strlen(text));
    free(text);
    cJSON_Delete(index);
    free(start);
    if (n_files) *n_files = n;
    return rc;
}
