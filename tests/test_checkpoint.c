/* Tests of src/io/checkpoint: a save round-trips (weights bit-exact through hf_load_weights, the
 * training-state tensors by name, state.json and tokenizer.json byte for byte, the manifest's sizes
 * and CRC-32C against a bitwise reference); keep-last pruning; a process killed at each stage of a
 * save (ZAYAC_CKPT_CRASH_AFTER) leaves the previous checkpoint the newest usable one; corruption of
 * each kind is caught by ckpt_verify and skipped, with a report, by ckpt_find_latest. The model is
 * the small_a fixture's config (a few thousand parameters), so each save is fast. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/fileio.h"
#include "io/checkpoint.h"
#include "io/hf_checkpoint.h"
#include "io/safetensors.h"
#include "model/model.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define N_OPT 37 /* length of the fake optimiser-moment tensors */

/* Everything one checkpoint holds, built deterministically from a step number. */
typedef struct {
    zy_config cfg;
    zy_param_table table;
    float *params;        /* [table.total] */
    float m[N_OPT];       /* fake Adam first moments */
    int32_t counts[2][3]; /* fake expert-load counters, I32 [2,3] */
    int64_t loader[2];    /* fake loader position, I64 [2] */
    int64_t shape_m[1], shape_c[2], shape_l[1];
    zy_st_write_item items[3];
    char state_json[256];
    char tokenizer[600]; /* path of a tokenizer file in the temporary folder */
    zy_ckpt_content content;
} ckpt_data;

static char tmproot[64]; /* this test's temporary folder */

/* Bitwise CRC-32C (reflected polynomial 0x82F63B78), the reference the manifest is checked
 * against. */
static uint32_t ref_crc32c(const unsigned char *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
    }
    return c ^ 0xFFFFFFFFu;
}

static uint64_t mix(uint64_t x) { /* splitmix64 finaliser: test values, nothing more */
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static float value_at(long long step, size_t i) {
    uint64_t r = mix((uint64_t)step * 1000003u + i);
    float v = (float)((double)(r >> 40) / (double)(1ull << 24) - 0.5);
    if (i % 97 == 3) v = -0.0f;    /* the sign of zero must survive */
    if (i % 97 == 5) v = 1e-40f;   /* a subnormal */
    if (i % 97 == 7) v = -3.4e38f; /* near the largest finite */
    return v;
}

static void data_build(ckpt_data *d, long long step) {
    memset(d, 0, sizeof *d);
    char path[600];
    const char *root = getenv("ZAYAC_ROOT");
    snprintf(path, sizeof path, "%s/tests/fixtures/hf/small_a", root ? root : ".");
    if (config_load(&d->cfg, path) != ZY_OK) fail_msg("%s", zy_errmsg());
    model_build_table(&d->table, &d->cfg);
    d->params = calloc(d->table.total, sizeof(float));
    for (int t = 0; t < d->table.count; t++) {
        const zy_param *p = &d->table.items[t];
        for (size_t j = 0; j < p->numel; j++)
            d->params[p->offset + j] = value_at(step, p->offset + j);
    }
    for (int i = 0; i < N_OPT; i++) d->m[i] = value_at(step + 7777, (size_t)i);
    for (int i = 0; i < 6; i++) d->counts[i / 3][i % 3] = (int32_t)(step * 10 + i) - 30;
    d->loader[0] = step * 4096;
    d->loader[1] = -(int64_t)step;
    d->shape_m[0] = N_OPT;
    d->shape_c[0] = 2;
    d->shape_c[1] = 3;
    d->shape_l[0] = 2;
    d->items[0] = (zy_st_write_item){"optim.adam_m", ZY_ST_F32, 1, d->shape_m, d->m};
    d->items[1] = (zy_st_write_item){"router.load_counts", ZY_ST_I32, 2, d->shape_c, d->counts};
    d->items[2] = (zy_st_write_item){"loader.position", ZY_ST_I64, 1, d->shape_l, d->loader};
    snprintf(
        d->state_json, sizeof d->state_json,
        "{\"step\": %lld, \"rng\": {\"seed\": 1234, \"counter\": %lld}, \"note\": \"\\u00e9\"}\n",
        step, step * 3);
    snprintf(d->tokenizer, sizeof d->tokenizer, "%s/tokenizer_src.json", tmproot);
    /* a real tokenizer: the checkpoint also derives tokenizer_config.json from it */
    char fixture[600], *tok;
    size_t n;
    const char *repo = getenv("ZAYAC_ROOT");
    snprintf(fixture, sizeof fixture, "%s/tests/fixtures/tok/hf_gpt2_style.json",
             repo ? repo : ".");
    if (zy_read_file(fixture, &tok, &n) != ZY_OK) fail_msg("%s", zy_errmsg());
    assert_int_equal(zy_write_file_atomic(d->tokenizer, tok, n), ZY_OK);
    free(tok);
    d->content = (zy_ckpt_content){.config = &d->cfg,
                                   .table = &d->table,
                                   .params = d->params,
                                   .state = d->items,
                                   .n_state = 3,
                                   .state_json = d->state_json};
}

static void data_free(ckpt_data *d) {
    free(d->params);
    params_free(&d->table);
}

static void join(char *buf, size_t n, const char *a, const char *b) {
    assert_int_equal(zy_path_join(buf, n, a, b), ZY_OK);
}

static void step_dir(char *buf, size_t n, const char *root, long long step) {
    char name[64];
    snprintf(name, sizeof name, "step_%09lld", step);
    join(buf, n, root, name);
}

/* A fresh, empty checkpoint root under the temporary folder. */
static void fresh_root(char *buf, size_t n, const char *name) {
    join(buf, n, tmproot, name);
    assert_int_equal(zy_remove_tree(buf), ZY_OK);
}

static void save_ok(const char *root, long long step, int keep_last, int with_tokenizer) {
    ckpt_data d;
    data_build(&d, step);
    if (with_tokenizer) d.content.tokenizer_path = d.tokenizer;
    char saved[4096], want[4096];
    if (ckpt_save(root, step, &d.content, keep_last, saved, sizeof saved) != ZY_OK)
        fail_msg("save of step %lld: %s", step, zy_errmsg());
    step_dir(want, sizeof want, root, step);
    assert_string_equal(saved, want);
    data_free(&d);
}

static void read_whole(const char *path, char **text, size_t *len) {
    if (zy_read_file(path, text, len) != ZY_OK) fail_msg("%s", zy_errmsg());
}

static void expect_same_file(const char *a, const char *b) {
    char *x, *y;
    size_t nx, ny;
    read_whole(a, &x, &nx);
    read_whole(b, &y, &ny);
    if (nx != ny || memcmp(x, y, nx) != 0) fail_msg("%s differs from %s", a, b);
    free(x);
    free(y);
}

/* Every check that a checkpoint folder holds exactly what step `step` saved. */
static void expect_checkpoint(const char *dir, long long step, int with_tokenizer) {
    if (ckpt_verify(dir) != ZY_OK) fail_msg("%s", zy_errmsg());
    ckpt_data d;
    data_build(&d, step);
    char path[4096];

    char model_dir[4096]; /* the HF folder inside */
    join(model_dir, sizeof model_dir, dir, "model");
    zy_config cfg; /* config.json: the same config */
    if (config_load(&cfg, model_dir) != ZY_OK) fail_msg("%s", zy_errmsg());
    char *j0 = config_to_json(&d.cfg), *j1 = config_to_json(&cfg);
    assert_string_equal(j0, j1);
    free(j0);
    free(j1);

    float *w = malloc(d.table.total * sizeof *w); /* weights: bit-exact */
    memset(w, 0xA5, d.table.total * sizeof *w);
    if (hf_load_weights(model_dir, &d.table, w) != ZY_OK) fail_msg("%s", zy_errmsg());
    for (int t = 0; t < d.table.count; t++) {
        const zy_param *p = &d.table.items[t];
        if (memcmp(w + p->offset, d.params + p->offset, p->numel * sizeof(float)) != 0)
            fail_msg("%s: %s differs from what was saved", dir, p->name);
    }
    free(w);

    zy_safetensors st; /* training state: every tensor by name */
    join(path, sizeof path, dir, "train/train_state.rank_0.safetensors");
    if (safetensors_open(&st, path) != ZY_OK) fail_msg("%s", zy_errmsg());
    assert_int_equal(st.count, 3);
    float m[N_OPT];
    int32_t counts[6], loader[2];
    assert_int_equal(safetensors_read_f32(&st, "optim.adam_m", 1, d.shape_m, m), ZY_OK);
    assert_memory_equal(m, d.m, sizeof m);
    assert_int_equal(safetensors_read_i32(&st, "router.load_counts", 2, d.shape_c, counts), ZY_OK);
    assert_memory_equal(counts, d.counts, sizeof counts);
    assert_int_equal(safetensors_read_i32(&st, "loader.position", 1, d.shape_l, loader), ZY_OK);
    assert_int_equal(loader[0], d.loader[0]);
    assert_int_equal(loader[1], d.loader[1]);
    assert_int_equal(st.tensors[safetensors_find(&st, "loader.position")].dtype, ZY_ST_I64);
    safetensors_close(&st);

    char *text; /* state.json: byte for byte */
    size_t len;
    join(path, sizeof path, dir, "train/state.json");
    read_whole(path, &text, &len);
    assert_int_equal(len, strlen(d.state_json));
    assert_string_equal(text, d.state_json);
    free(text);

    join(path, sizeof path, dir, "model/tokenizer.json");
    if (with_tokenizer)
        expect_same_file(path, d.tokenizer);
    else
        assert_false(zy_path_exists(path));
    join(path, sizeof path, dir,
         "model/tokenizer_config.json"); /* for transformers' AutoTokenizer */
    if (with_tokenizer) {
        read_whole(path, &text, &len);
        cJSON *tc = cJSON_Parse(text);
        free(text);
        assert_non_null(tc);
        assert_true(cJSON_IsString(cJSON_GetObjectItem(tc, "eos_token")));
        cJSON_Delete(tc);
    } else {
        assert_false(zy_path_exists(path));
    }

    /* manifest: the files, each with its size and the reference CRC-32C */
    const char *names[] = {
        "model/config.json", "model/model.safetensors", "train/train_state.rank_0.safetensors",
        "train/state.json",  "model/tokenizer.json",    "model/tokenizer_config.json"};
    const int n_names = with_tokenizer ? 6 : 4;
    join(path, sizeof path, dir, "manifest.json");
    read_whole(path, &text, &len);
    cJSON *man = cJSON_Parse(text);
    free(text);
    assert_non_null(man);
    assert_int_equal((long long)cJSON_GetObjectItem(man, "step")->valuedouble, step);
    cJSON *files = cJSON_GetObjectItem(man, "files");
    assert_int_equal(cJSON_GetArraySize(files), n_names);
    for (int i = 0; i < n_names; i++) {
        cJSON *f = NULL, *it;
        cJSON_ArrayForEach(it, files) {
            if (!strcmp(cJSON_GetObjectItem(it, "name")->valuestring, names[i])) f = it;
        }
        if (!f) fail_msg("%s: manifest does not list %s", dir, names[i]);
        join(path, sizeof path, dir, names[i]);
        read_whole(path, &text, &len);
        char hex[16];
        snprintf(hex, sizeof hex, "%08x", ref_crc32c((const unsigned char *)text, len));
        free(text);
        assert_int_equal((long long)cJSON_GetObjectItem(f, "bytes")->valuedouble, (long long)len);
        assert_string_equal(cJSON_GetObjectItem(f, "crc32c")->valuestring, hex);
    }
    cJSON_Delete(man);
    data_free(&d);
}

/* Sorted names in a folder, joined by spaces (for exact listings). */
static void list_dir(const char *dir, char *out, size_t n) {
    char names[32][256];
    int count = 0;
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        assert_true(count < 32);
        snprintf(names[count++], sizeof names[0], "%s", e->d_name);
    }
    closedir(d);
    for (int i = 1; i < count; i++) /* insertion sort */
        for (int j = i; j > 0 && strcmp(names[j], names[j - 1]) < 0; j--) {
            char t[256];
            memcpy(t, names[j], sizeof t);
            memcpy(names[j], names[j - 1], sizeof t);
            memcpy(names[j - 1], t, sizeof t);
        }
    out[0] = 0;
    for (int i = 0; i < count; i++) {
        size_t at = strlen(out);
        snprintf(out + at, n - at, "%s%s", i ? " " : "", names[i]);
    }
}

static int count_tmp(const char *root) {
    int count = 0;
    DIR *d = opendir(root);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) count += strncmp(e->d_name, ".tmp_step_", 10) == 0;
    closedir(d);
    return count;
}

static void expect_latest(const char *root, long long step, int n_skipped) {
    zy_ckpt_found f;
    assert_int_equal(ckpt_find_latest(root, &f), ZY_OK);
    char want[4096];
    step_dir(want, sizeof want, root, step);
    assert_string_equal(f.dir, want);
    assert_int_equal(f.step, step);
    assert_int_equal(f.n_skipped, n_skipped);
}

static void test_round_trip(void **state) {
    (void)state;
    char root[600], dir[4096];
    fresh_root(root, sizeof root, "round_trip/nested"); /* the root's parents are created too */
    save_ok(root, 7, 0, 1);
    step_dir(dir, sizeof dir, root, 7);
    expect_checkpoint(dir, 7, 1);
    save_ok(root, 8, 0, 0); /* without a tokenizer */
    step_dir(dir, sizeof dir, root, 8);
    expect_checkpoint(dir, 8, 0);
    expect_latest(root, 8, 0);
    char listing[2048];
    list_dir(root, listing, sizeof listing);
    assert_string_equal(listing, "step_000000007 step_000000008");
    save_ok(root, 7, 0, 0); /* re-saving a step replaces it */
    step_dir(dir, sizeof dir, root, 7);
    expect_checkpoint(dir, 7, 0);
    list_dir(root, listing, sizeof listing);
    assert_string_equal(listing, "step_000000007 step_000000008");
}

static void test_keep_last(void **state) {
    (void)state;
    char root[600], listing[2048];
    fresh_root(root, sizeof root, "keep_last");
    for (long long s = 1; s <= 5; s++) save_ok(root, s * 100, 2, 0);
    list_dir(root, listing, sizeof listing);
    assert_string_equal(listing, "step_000000400 step_000000500");
    expect_latest(root, 500, 0);
    save_ok(root, 600, 0, 0); /* keep_last 0 keeps everything */
    list_dir(root, listing, sizeof listing);
    assert_string_equal(listing, "step_000000400 step_000000500 step_000000600");
    save_ok(root, 700, 1, 0);
    list_dir(root, listing, sizeof listing);
    assert_string_equal(listing, "step_000000700");
    char dir[4096];
    step_dir(dir, sizeof dir, root, 700);
    expect_checkpoint(dir, 700, 0);

    /* A newer folder that does not verify (a run resumed from an older step after a corrupt save)
     * must not push the checkpoint just written out of the kept set. */
    step_dir(dir, sizeof dir, root, 900);
    assert_int_equal(zy_mkdirs(dir), ZY_OK);
    save_ok(root, 800, 1, 0);
    step_dir(dir, sizeof dir, root, 800);
    expect_checkpoint(dir, 800, 0);
    expect_latest(root, 800, 1);
    list_dir(root, listing, sizeof listing);
    assert_string_equal(listing, "step_000000800 step_000000900");
}

/* Forks a child that saves `step` over root with ZAYAC_CKPT_CRASH_AFTER=stage; it must die by
 * SIGKILL. */
static void save_and_crash(const char *root, long long step, const char *stage) {
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setenv("ZAYAC_CKPT_CRASH_AFTER", stage, 1);
        ckpt_data d;
        data_build(&d, step);
        d.content.tokenizer_path = d.tokenizer;
        ckpt_save(root, step, &d.content, 1, NULL, 0);
        _exit(3); /* reached only when the hook did not fire */
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
        fail_msg("crash after %s: the child was not killed (status %d)", stage, status);
}

static void test_crash_during_save(void **state) {
    (void)state;
    const char *stages[] = {
        "model/config.json", "model/model.safetensors", "train/train_state.rank_0.safetensors",
        "train/state.json",  "model/tokenizer.json",    "manifest.json"};
    for (size_t i = 0; i < sizeof stages / sizeof stages[0]; i++) {
        char root[600], dir[4096], listing[2048];
        fresh_root(root, sizeof root, "crash");
        save_ok(root, 10, 1, 1);
        save_and_crash(root, 11, stages[i]);
        /* the killed save left its temporary folder, and nothing else changed */
        assert_int_equal(count_tmp(root), 1);
        step_dir(dir, sizeof dir, root, 11);
        if (zy_path_exists(dir)) fail_msg("crash after %s: %s exists", stages[i], dir);
        expect_latest(root, 10, 0);
        step_dir(dir, sizeof dir, root, 10);
        expect_checkpoint(dir, 10, 1);
        /* the next save succeeds, removes the stale temporary folder and prunes as asked */
        save_ok(root, 11, 1, 1);
        assert_int_equal(count_tmp(root), 0);
        list_dir(root, listing, sizeof listing);
        assert_string_equal(listing, "step_000000011");
        step_dir(dir, sizeof dir, root, 11);
        expect_checkpoint(dir, 11, 1);
    }
}

/* Rewrites dir/manifest.json through an edit of its parsed JSON. */
typedef void (*manifest_edit)(cJSON *man);

static void edit_manifest(const char *dir, manifest_edit edit) {
    char path[4096], *text;
    join(path, sizeof path, dir, "manifest.json");
    read_whole(path, &text, NULL);
    cJSON *man = cJSON_Parse(text);
    free(text);
    assert_non_null(man);
    edit(man);
    text = cJSON_Print(man);
    assert_int_equal(zy_write_file_atomic(path, text, strlen(text)), ZY_OK);
    free(text);
    cJSON_Delete(man);
}

static cJSON *entry(cJSON *man, const char *name) {
    cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(man, "files")) {
        if (!strcmp(cJSON_GetObjectItem(it, "name")->valuestring, name)) return it;
    }
    fail_msg("manifest has no entry %s", name);
    return NULL;
}

static void edit_slash(cJSON *man) {
    cJSON_SetValuestring(cJSON_GetObjectItem(entry(man, "model/config.json"), "name"),
                         "../step_000000001/config.json");
}
static void edit_add_missing(cJSON *man) {
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "name", "optimizer_extra.bin");
    cJSON_AddNumberToObject(f, "bytes", 12);
    cJSON_AddStringToObject(f, "crc32c", "00000000");
    cJSON_AddItemToArray(cJSON_GetObjectItem(man, "files"), f);
}
static void edit_drop_model(cJSON *man) {
    cJSON *files = cJSON_GetObjectItem(man, "files");
    int i = 0;
    cJSON *it;
    cJSON_ArrayForEach(it, files) {
        if (!strcmp(cJSON_GetObjectItem(it, "name")->valuestring, "model/model.safetensors")) break;
        i++;
    }
    cJSON_DeleteItemFromArray(files, i);
}
static void edit_no_files(cJSON *man) {
    cJSON_ReplaceItemInObject(man, "files", cJSON_CreateArray());
}
static void edit_bytes_string(cJSON *man) {
    cJSON_ReplaceItemInObject(entry(man, "train/state.json"), "bytes", cJSON_CreateString("12"));
}
static void edit_crc(cJSON *man) {
    cJSON_SetValuestring(cJSON_GetObjectItem(entry(man, "train/state.json"), "crc32c"), "deadbeef");
}
static void edit_dotdot(cJSON *man) {
    cJSON_SetValuestring(cJSON_GetObjectItem(entry(man, "train/state.json"), "name"), "..");
}

typedef enum {
    FLIP_MODEL,
    TRUNCATE_STATE,
    DELETE_MANIFEST,
    MALFORMED_MANIFEST,
    MANIFEST_NOT_OBJECT,
    DELETE_FILE,
    MANIFEST_EDIT,
} corruption;

typedef struct {
    const char *what;
    corruption kind;
    manifest_edit edit;
    const char *file; /* the name the error must carry */
} corruption_case;

static void corrupt(const char *dir, const corruption_case *c) {
    char path[4096];
    struct stat st;
    switch (c->kind) {
    case FLIP_MODEL: { /* one byte in the middle of the tensor data, in place */
        join(path, sizeof path, dir, "model/model.safetensors");
        assert_int_equal(stat(path, &st), 0);
        FILE *f = fopen(path, "r+b");
        assert_non_null(f);
        long at = (long)st.st_size - 11;
        fseek(f, at, SEEK_SET);
        int b = fgetc(f);
        fseek(f, at, SEEK_SET);
        fputc(b ^ 0x10, f);
        fclose(f);
        break;
    }
    case TRUNCATE_STATE:
        join(path, sizeof path, dir, "train/train_state.rank_0.safetensors");
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(truncate(path, st.st_size / 2), 0);
        break;
    case DELETE_MANIFEST:
        join(path, sizeof path, dir, "manifest.json");
        assert_int_equal(unlink(path), 0);
        break;
    case MALFORMED_MANIFEST:
        join(path, sizeof path, dir, "manifest.json");
        assert_int_equal(zy_write_file_atomic(path, "{\"files\": [{\"name\": ", 20), ZY_OK);
        break;
    case MANIFEST_NOT_OBJECT:
        join(path, sizeof path, dir, "manifest.json");
        assert_int_equal(zy_write_file_atomic(path, "[1, 2, 3]", 9), ZY_OK);
        break;
    case DELETE_FILE:
        join(path, sizeof path, dir, c->file);
        assert_int_equal(unlink(path), 0);
        break;
    case MANIFEST_EDIT:
        edit_manifest(dir, c->edit);
        break;
    }
}

static void test_corruption_detected(void **state) {
    (void)state;
    const corruption_case cases[] = {
        {"a flipped byte in model.safetensors", FLIP_MODEL, NULL, "model/model.safetensors"},
        {"a truncated train_state.safetensors", TRUNCATE_STATE, NULL,
         "train/train_state.rank_0.safetensors"},
        {"no manifest.json", DELETE_MANIFEST, NULL, "manifest.json"},
        {"a manifest that is not JSON", MALFORMED_MANIFEST, NULL, "manifest.json"},
        {"a manifest that is not an object", MANIFEST_NOT_OBJECT, NULL, "manifest.json"},
        {"a listed file deleted", DELETE_FILE, NULL, "train/state.json"},
        {"a manifest listing a file that is not there", MANIFEST_EDIT, edit_add_missing,
         "optimizer_extra.bin"},
        {"a file name with '/'", MANIFEST_EDIT, edit_slash, "../step_000000001/config.json"},
        {"a file name '..'", MANIFEST_EDIT, edit_dotdot, ".."},
        {"a manifest without model.safetensors", MANIFEST_EDIT, edit_drop_model,
         "model/model.safetensors"},
        {"a manifest listing no files", MANIFEST_EDIT, edit_no_files, "manifest.json"},
        {"a size that is not a number", MANIFEST_EDIT, edit_bytes_string, "train/state.json"},
        {"a wrong CRC in the manifest", MANIFEST_EDIT, edit_crc, "train/state.json"},
    };
    char root[600], dir1[4096], dir2[4096];
    fresh_root(root, sizeof root, "corrupt");
    save_ok(root, 1, 0, 0);
    step_dir(dir1, sizeof dir1, root, 1);
    step_dir(dir2, sizeof dir2, root, 2);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const corruption_case *c = &cases[i];
        save_ok(root, 2, 0, 0); /* a good step 2, then damage it */
        assert_int_equal(ckpt_verify(dir2), ZY_OK);
        corrupt(dir2, c);
        zy_err_clear();
        if (ckpt_verify(dir2) == ZY_OK) fail_msg("%s: not detected", c->what);
        const char *msg = zy_errmsg();
        if (!strstr(msg, dir2) || !strstr(msg, c->file))
            fail_msg("%s: the error does not name %s and %s: %s", c->what, dir2, c->file, msg);
        if (strchr(msg, '\n')) fail_msg("%s: the error is not one line: %s", c->what, msg);
        zy_ckpt_found f;
        assert_int_equal(ckpt_find_latest(root, &f), ZY_OK);
        assert_string_equal(f.dir, dir1);
        assert_int_equal(f.step, 1);
        assert_int_equal(f.n_skipped, 1);
        if (!strstr(f.skipped[0], dir2) || !strstr(f.skipped[0], c->file))
            fail_msg("%s: the skip report does not name the folder and file: %s", c->what,
                     f.skipped[0]);
        assert_int_equal(ckpt_verify(dir1), ZY_OK); /* the previous step is untouched */
    }
    expect_checkpoint(dir1, 1, 0);
}

static void test_find_latest_edge_cases(void **state) {
    (void)state;
    char root[600], dir[4096], path[4096];
    zy_ckpt_found f;
    /* no root at all: nothing found, no error */
    fresh_root(root, sizeof root, "edge");
    assert_int_equal(ckpt_find_latest(root, &f), ZY_OK);
    assert_string_equal(f.dir, "");
    assert_int_equal(f.n_skipped, 0);
    /* only broken folders: nothing found, each one reported (the first four by message) */
    assert_int_equal(zy_mkdirs(root), ZY_OK);
    for (long long s = 3; s <= 8; s++) {
        step_dir(dir, sizeof dir, root, s);
        assert_int_equal(zy_mkdirs(dir), ZY_OK);
    }
    assert_int_equal(ckpt_find_latest(root, &f), ZY_OK);
    assert_string_equal(f.dir, "");
    assert_int_equal(f.n_skipped, 6);
    step_dir(dir, sizeof dir, root, 5);
    assert_non_null(strstr(f.skipped[3], dir));
    /* names that are not step folders are ignored; a plain file named like one is skipped */
    join(path, sizeof path, root, "step_000000099");
    assert_int_equal(zy_write_file_atomic(path, "x", 1), ZY_OK);
    join(path, sizeof path, root, "step_00000009x");
    assert_int_equal(zy_mkdirs(path), ZY_OK);
    join(path, sizeof path, root, "notes");
    assert_int_equal(zy_mkdirs(path), ZY_OK);
    save_ok(root, 2, 0, 0);
    expect_latest(root, 2, 7);
    /* a stale temporary folder with a higher step is never taken for a checkpoint */
    join(path, sizeof path, root, ".tmp_step_000000050.1");
    assert_int_equal(zy_mkdirs(path), ZY_OK);
    expect_latest(root, 2, 7);
}

static void test_save_errors(void **state) {
    (void)state;
    char root[600], dir[4096], listing[2048];
    fresh_root(root, sizeof root, "errors");
    save_ok(root, 1, 0, 0);
    /* a tokenizer that does not exist: the save fails naming it; nothing is left behind */
    ckpt_data d;
    data_build(&d, 2);
    char missing[700];
    snprintf(missing, sizeof missing, "%s/no_such_tokenizer.json", tmproot);
    d.content.tokenizer_path = missing;
    zy_err_clear();
    assert_int_equal(ckpt_save(root, 2, &d.content, 1, NULL, 0), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "no_such_tokenizer.json"));
    list_dir(root, listing, sizeof listing);
    assert_string_equal(listing, "step_000000001");
    step_dir(dir, sizeof dir, root, 1);
    expect_checkpoint(dir, 1, 0);
    /* a root that is a plain file */
    char file_root[700];
    snprintf(file_root, sizeof file_root, "%s/a_file", tmproot);
    assert_int_equal(zy_write_file_atomic(file_root, "x", 1), ZY_OK);
    d.content.tokenizer_path = NULL;
    zy_err_clear();
    assert_int_equal(ckpt_save(file_root, 2, &d.content, 1, NULL, 0), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "a_file: exists and is not a directory"));
    /* a negative step is refused */
    zy_err_clear();
    assert_int_equal(ckpt_save(root, -1, &d.content, 1, NULL, 0), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "-1"));
    list_dir(root, listing, sizeof listing);
    assert_string_equal(listing, "step_000000001");
    data_free(&d);
}

static int setup(void **state) {
    (void)state;
    snprintf(tmproot, sizeof tmproot, "/tmp/zy_ckpt_XXXXXX");
    return mkdtemp(tmproot) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return zy_remove_tree(tmproot) == ZY_OK ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_keep_last),
        cmocka_unit_test(test_crash_during_save),
        cmocka_unit_test(test_corruption_detected),
        cmocka_unit_test(test_find_latest_edge_cases),
        cmocka_unit_test(test_save_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
