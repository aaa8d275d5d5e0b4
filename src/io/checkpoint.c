/* Atomic, checksummed training checkpoints (see checkpoint.h). */
#include "io/checkpoint.h"
#include "base/crc32c.h"
#include "base/err.h"
#include "base/fileio.h"
#include "data/tokenizer.h"
#include "io/hf_checkpoint.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STEP_PREFIX "step_"
#define TMP_PREFIX  ".tmp_step_"
#define DEL_PREFIX  ".deleting_" /* a folder renamed aside to be removed */
#define MAX_FILES   8
#define MAX_EXTRA   4096 /* training-state shards of other ranks */

/* Test hook: ZAYAC_CKPT_CRASH_AFTER=<file> kills the process right after writing that file, so
 * tests can show that a save interrupted at any point leaves earlier checkpoints usable. */
static void maybe_crash(const char *stage) {
    const char *at = getenv("ZAYAC_CKPT_CRASH_AFTER");
    if (at && strcmp(at, stage) == 0) raise(SIGKILL);
}

static int file_crc(const char *path, uint32_t *crc, size_t *bytes) {
    zy_mmap m;
    ZY_TRY(zy_mmap_open(&m, path));
    *crc = zy_crc32c(0, m.data, m.size);
    *bytes = m.size;
    zy_mmap_close(&m);
    return ZY_OK;
}

static int copy_file(const char *src, const char *dst) {
    char *data;
    size_t len;
    ZY_TRY(zy_read_file(src, &data, &len));
    int rc = zy_write_file_atomic(dst, data, len);
    free(data);
    return rc;
}

static int write_manifest(const char *dir, long long step, const char **files, int n) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", "zayac-checkpoint");
    cJSON_AddNumberToObject(root, "version", 2);
    cJSON_AddNumberToObject(root, "step", (double)step);
    cJSON *list = cJSON_AddArrayToObject(root, "files");
    int rc = ZY_OK;
    for (int i = 0; i < n && rc == ZY_OK; i++) {
        char path[4096], hex[16];
        uint32_t crc;
        size_t bytes;
        rc = zy_path_join(path, sizeof path, dir, files[i]);
        if (rc == ZY_OK) rc = file_crc(path, &crc, &bytes);
        if (rc != ZY_OK) break;
        snprintf(hex, sizeof hex, "%08x", crc);
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "name", files[i]);
        cJSON_AddNumberToObject(f, "bytes", (double)bytes);
        cJSON_AddStringToObject(f, "crc32c", hex);
        cJSON_AddItemToArray(list, f);
    }
    if (rc == ZY_OK) {
        char *text = cJSON_Print(root), path[4096];
        rc = zy_path_join(path, sizeof path, dir, "manifest.json");
        if (rc == ZY_OK) rc = zy_write_file_atomic(path, text, strlen(text));
        free(text);
    }
    cJSON_Delete(root);
    return rc;
}

/* The step of a folder name "step_<digits>" (nothing else after the prefix), or -1. */
static long long parse_step_name(const char *name) {
    size_t pre = strlen(STEP_PREFIX), len = strlen(name);
    if (strncmp(name, STEP_PREFIX, pre) != 0 || len == pre || len - pre > 18) return -1;
    long long s = 0;
    for (const char *p = name + pre; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        s = s * 10 + (*p - '0');
    }
    return s;
}

/* Lists step folders (complete names only) under root, sorted by step descending. */
static int list_steps(const char *root, long long **steps, int *n) {
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(root);
    if (!d) return ZY_OK; /* no root: no checkpoints */
    struct dirent *e;
    int cap = 0;
    while ((e = readdir(d)) != NULL) {
        long long s = parse_step_name(e->d_name);
        if (s < 0) continue;
        if (*n == cap)
            *steps = zy_realloc(*steps, (size_t)(cap = cap ? 2 * cap : 16) * sizeof **steps);
        (*steps)[(*n)++] = s;
    }
    closedir(d);
    for (int i = 1; i < *n; i++) /* insertion sort, descending */
        for (int j = i; j > 0 && (*steps)[j] > (*steps)[j - 1]; j--) {
            long long t = (*steps)[j];
            (*steps)[j] = (*steps)[j - 1];
            (*steps)[j - 1] = t;
        }
    return ZY_OK;
}

/* Removes temporary folders left by saves that died and folders a removal renamed aside but did
 * not finish deleting. */
static void remove_stale_tmp(const char *root) {
    DIR *d = opendir(root);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, TMP_PREFIX, strlen(TMP_PREFIX)) != 0 &&
            strncmp(e->d_name, DEL_PREFIX, strlen(DEL_PREFIX)) != 0)
            continue;
        char path[4096];
        if (zy_path_join(path, sizeof path, root, e->d_name) == ZY_OK) zy_remove_tree(path);
    }
    closedir(d);
}

/* Renames the complete folder tmp to final. A re-save of an existing step swaps the two atomically
 * (so a crash leaves one complete copy under the final name) and then removes the old one. */
static int install(const char *tmp, const char *final, const char *root) {
    if (zy_path_exists(final)) {
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
            ZY_TRY(zy_fsync_path(root));
            return zy_remove_tree(tmp); /* now the old checkpoint */
        }
        if (errno != EINVAL && errno != ENOSYS)
            return zy_fail_runtime("%s: cannot swap with %s: %s", tmp, final, strerror(errno));
        ZY_TRY(zy_remove_tree(final)); /* a file system without RENAME_EXCHANGE */
    }
    if (rename(tmp, final) != 0)
        return zy_fail_runtime("%s: cannot rename to %s: %s", tmp, final, strerror(errno));
    return zy_fsync_path(root);
}

/* Removes root/name atomically for a reader: first renamed aside (one step: the name is gone, so
 * no half-deleted checkpoint is ever listed or resumed from), then deleted; a crash during the
 * deletion leaves only the renamed folder, which the next save removes. */
static int remove_aside(const char *root, const char *name) {
    char from[4096], to[4096], aside[128];
    snprintf(aside, sizeof aside, DEL_PREFIX "%.64s.%d", name, (int)getpid());
    ZY_TRY(zy_path_join(from, sizeof from, root, name));
    ZY_TRY(zy_path_join(to, sizeof to, root, aside));
    if (rename(from, to) != 0)
        return zy_fail_runtime("%s: cannot rename aside to %s: %s", from, to, strerror(errno));
    ZY_TRY(zy_fsync_path(root));
    return zy_remove_tree(to);
}

/* Records a file written into the folder; the crash hook names it. */
#define WROTE(name_)                                                                               \
    do {                                                                                           \
        files[nf++] = (name_);                                                                     \
        maybe_crash(name_);                                                                        \
    } while (0)

int ckpt_save(const char *root, long long step, const zy_ckpt_content *c, int keep_last,
              char *saved_dir, size_t n) {
    char tmp[4096], final[4096], name[64], path[4096], sub[4096];
    if (step < 0)
        return zy_fail("%s: cannot save checkpoint step %lld (steps are >= 0)", root, step);
    ZY_TRY(zy_mkdirs(root));
    remove_stale_tmp(root);
    snprintf(name, sizeof name, TMP_PREFIX "%09lld.%d", step, (int)getpid());
    ZY_TRY(zy_path_join(tmp, sizeof tmp, root, name));
    snprintf(name, sizeof name, STEP_PREFIX "%09lld", step);
    ZY_TRY(zy_path_join(final, sizeof final, root, name));
    if (c->n_extra < 0 || c->n_extra > MAX_EXTRA)
        return zy_fail("%s: %d extra checkpoint files (at most %d)", root, c->n_extra, MAX_EXTRA);
    char model_file[256];
    snprintf(model_file, sizeof model_file, "model/%s",
             c->model_file ? c->model_file : "model.safetensors");
    const char **files = zy_calloc(MAX_FILES + (size_t)c->n_extra, sizeof *files);
    int nf = 0;
    int rc = zy_path_join(sub, sizeof sub, tmp, "model");
    if (rc == ZY_OK) rc = zy_mkdirs(sub);
    if (rc == ZY_OK) rc = config_save(c->config, sub);
    WROTE("model/config.json");
    const int last = c->first == 0 && c->last == 0 ? c->table->count : c->last;
    if (rc == ZY_OK) rc = zy_path_join(path, sizeof path, tmp, model_file);
    if (rc == ZY_OK)
        rc = hf_save_weights_range(path, c->table, c->params, ZY_ST_F32, c->first, last);
    WROTE(model_file);
    if (rc == ZY_OK && c->model_index) {
        rc = zy_path_join(path, sizeof path, sub, "model.safetensors.index.json");
        if (rc == ZY_OK) rc = zy_write_file_atomic(path, c->model_index, strlen(c->model_index));
        WROTE("model/model.safetensors.index.json");
    }
    if (rc == ZY_OK && c->tokenizer_path) {
        rc = zy_path_join(path, sizeof path, sub, "tokenizer.json");
        if (rc == ZY_OK) rc = copy_file(c->tokenizer_path, path);
        WROTE("model/tokenizer.json");
        /* tokenizer_config.json names bos/eos/pad so transformers' AutoTokenizer loads the folder
         */
        zy_tokenizer *tok = NULL;
        if (rc == ZY_OK) rc = tok_load(&tok, c->tokenizer_path);
        if (rc == ZY_OK) rc = zy_path_join(path, sizeof path, sub, "tokenizer_config.json");
        if (rc == ZY_OK) rc = tok_save_hf_config(tok, path, c->config->max_position_embeddings);
        tok_free(tok);
        files[nf++] = "model/tokenizer_config.json";
    }
    if (rc == ZY_OK) rc = zy_path_join(sub, sizeof sub, tmp, "train");
    if (rc == ZY_OK) rc = zy_mkdirs(sub);
    if (rc == ZY_OK) rc = zy_path_join(path, sizeof path, sub, "train_state.rank_0.safetensors");
    if (rc == ZY_OK) {
        const char *meta[2] = {"format", "zayac-train-state"};
        rc = safetensors_write(path, c->state, c->n_state, meta, 1);
    }
    WROTE("train/train_state.rank_0.safetensors");
    if (rc == ZY_OK) rc = zy_path_join(path, sizeof path, sub, "state.json");
    if (rc == ZY_OK) rc = zy_write_file_atomic(path, c->state_json, strlen(c->state_json));
    WROTE("train/state.json");
    for (int i = 0; rc == ZY_OK && i < c->n_extra; i++) {
        rc = zy_path_join(path, sizeof path, tmp, c->extra_names[i]);
        if (rc == ZY_OK && rename(c->extra_files[i], path) != 0)
            rc = zy_fail_runtime("moving %s into %s: %s", c->extra_files[i], path, strerror(errno));
        files[nf++] = c->extra_names[i];
    }
    if (rc == ZY_OK) rc = zy_fsync_path(sub); /* train/ */
    if (rc == ZY_OK) rc = zy_path_join(sub, sizeof sub, tmp, "model");
    if (rc == ZY_OK) rc = zy_fsync_path(sub);
    if (rc == ZY_OK) rc = write_manifest(tmp, step, files, nf);
    free(files);
    maybe_crash("manifest.json");
    if (rc == ZY_OK) rc = zy_fsync_path(tmp);
    if (rc == ZY_OK) rc = install(tmp, final, root);
    if (rc != ZY_OK) {
        zy_fail_ctx("saving checkpoint step %lld under %s", step, root);
        zy_remove_tree(tmp);
        return ZY_ERR;
    }
    if (saved_dir) snprintf(saved_dir, n, "%s", final);
    if (keep_last > 0) { /* prune the oldest; a failure here loses nothing */
        /* Only this step and older ones count: folders of higher steps are left by a run that
         * resumed from an older checkpoint (the newer one was corrupt), and must neither be
         * deleted silently nor push the checkpoint just written out of the kept set. */
        long long *steps;
        int count, kept = 0;
        list_steps(root, &steps, &count);
        for (int i = 0; i < count; i++) {
            if (steps[i] > step || kept++ < keep_last) continue;
            snprintf(name, sizeof name, STEP_PREFIX "%09lld", steps[i]);
            if (remove_aside(root, name) != ZY_OK)
                fprintf(stderr, "warning: pruning an old checkpoint: %s\n", zy_errmsg());
        }
        free(steps);
    }
    return ZY_OK;
}

/* Files every checkpoint has; a manifest that leaves one out describes no usable checkpoint (the
 * weights: model/model.safetensors or the index of their shards). The first layout had every
 * file at the top (manifest version 1). */
static const char *const required[] = {"model/config.json", "train/state.json",
                                       "train/train_state.rank_0.safetensors"};
static const char *const required_v1[] = {"config.json", "model.safetensors",
                                          "train_state.safetensors", "state.json"};

/* A manifest's file name: a plain name, or one under model/ or train/ (never "..", never
 * absolute). */
static int safe_name(const char *nm) {
    if (!strncmp(nm, "model/", 6) || !strncmp(nm, "train/", 6)) nm += 6;
    return *nm && !strchr(nm, '/') && strcmp(nm, ".") && strcmp(nm, "..");
}

static int listed(const cJSON *files, const char *name) {
    const cJSON *g;
    cJSON_ArrayForEach(g, files) {
        const cJSON *nm = cJSON_GetObjectItem(g, "name");
        if (cJSON_IsString(nm) && !strcmp(nm->valuestring, name)) return 1;
    }
    return 0;
}

int ckpt_path(const char *dir, const char *file, char *buf, size_t n) {
    char model[4096];
    ZY_TRY(zy_path_join(model, sizeof model, dir, "model"));
    if (zy_path_exists(model)) return zy_path_join(buf, n, dir, file);
    const char *slash = strchr(file, '/'); /* the first layout: everything at the top */
    if (!slash) return zy_path_join(buf, n, dir, ".");
    return zy_path_join(buf, n, dir, slash + 1);
}

int ckpt_verify(const char *dir) {
    char path[4096], *text;
    ZY_TRY(zy_path_join(path, sizeof path, dir, "manifest.json"));
    if (!zy_path_exists(path)) return zy_fail("%s: no manifest.json (incomplete save)", dir);
    ZY_TRY(zy_read_file(path, &text, NULL));
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root) return zy_fail("%s: manifest.json is not valid JSON", dir);
    int rc = ZY_OK;
    cJSON *files = cJSON_IsObject(root) ? cJSON_GetObjectItem(root, "files") : NULL;
    if (!cJSON_IsArray(files) || cJSON_GetArraySize(files) == 0)
        rc = zy_fail("%s: manifest.json lists no files", dir);
    cJSON *f;
    cJSON_ArrayForEach(f, files) {
        if (rc != ZY_OK) break;
        cJSON *nm = cJSON_GetObjectItem(f, "name"), *by = cJSON_GetObjectItem(f, "bytes");
        cJSON *cr = cJSON_GetObjectItem(f, "crc32c");
        if (!cJSON_IsString(nm)) {
            rc = zy_fail("%s: manifest.json has a file entry without a name", dir);
            break;
        }
        if (!cJSON_IsNumber(by) || !cJSON_IsString(cr) || !safe_name(nm->valuestring)) {
            rc = zy_fail("%s: manifest.json has a malformed entry for '%s'", dir, nm->valuestring);
            break;
        }
        uint32_t crc;
        size_t bytes;
        rc = zy_path_join(path, sizeof path, dir, nm->valuestring);
        if (rc == ZY_OK && !zy_path_exists(path))
            rc = zy_fail("%s: %s is listed in the manifest but missing", dir, nm->valuestring);
        if (rc == ZY_OK) rc = file_crc(path, &crc, &bytes);
        if (rc != ZY_OK) break;
        char hex[16];
        snprintf(hex, sizeof hex, "%08x", crc);
        if ((double)bytes != by->valuedouble)
            rc = zy_fail("%s: %s has %zu bytes, the manifest says %.0f", dir, nm->valuestring,
                         bytes, by->valuedouble);
        else if (strcmp(hex, cr->valuestring) != 0)
            rc = zy_fail("%s: %s is corrupt (CRC-32C %s, the manifest says %s)", dir,
                         nm->valuestring, hex, cr->valuestring);
    }
    const cJSON *ver = cJSON_IsObject(root) ? cJSON_GetObjectItem(root, "version") : NULL;
    const int v1 = cJSON_IsNumber(ver) && ver->valuedouble == 1;
    const char *const *req = v1 ? required_v1 : required;
    const int nreq = v1 ? 4 : 3;
    for (int i = 0; i < nreq && rc == ZY_OK; i++)
        if (!listed(files, req[i])) rc = zy_fail("%s: manifest.json does not list %s", dir, req[i]);
    if (rc == ZY_OK && !v1 && !listed(files, "model/model.safetensors") &&
        !listed(files, "model/model.safetensors.index.json"))
        rc = zy_fail("%s: manifest.json lists no model weights (model/model.safetensors or its "
                     "index)",
                     dir);
    cJSON_Delete(root);
    return rc;
}

int ckpt_list(const char *root, long long *newest) {
    long long *steps;
    int count;
    ZY_TRY(list_steps(root, &steps, &count));
    if (newest) *newest = count ? steps[0] : -1;
    free(steps);
    return count;
}

int ckpt_remove_all(const char *root) {
    long long *steps;
    int count, rc = ZY_OK;
    ZY_TRY(list_steps(root, &steps, &count));
    for (int i = 0; i < count && rc == ZY_OK; i++) {
        char name[64];
        snprintf(name, sizeof name, STEP_PREFIX "%09lld", steps[i]);
        rc = remove_aside(root, name);
    }
    free(steps);
    if (rc == ZY_OK) remove_stale_tmp(root);
    return rc;
}

long long ckpt_step_of(const char *dir) {
    const char *base = strrchr(dir, '/');
    return parse_step_name(base ? base + 1 : dir);
}

int ckpt_find_latest(const char *root, zy_ckpt_found *f) {
    memset(f, 0, sizeof *f);
    long long *steps;
    int count;
    ZY_TRY(list_steps(root, &steps, &count));
    for (int i = 0; i < count; i++) {
        char name[64], dir[4096];
        snprintf(name, sizeof name, STEP_PREFIX "%09lld", steps[i]);
        if (zy_path_join(dir, sizeof dir, root, name) != ZY_OK) continue;
        if (ckpt_verify(dir) == ZY_OK) {
            snprintf(f->dir, sizeof f->dir, "%s", dir);
            f->step = steps[i];
            break;
        }
        if (f->n_skipped < 4)
            snprintf(f->skipped[f->n_skipped], sizeof f->skipped[0], "%s", zy_errmsg());
        f->n_skipped++;
    }
    free(steps);
    return ZY_OK;
}
