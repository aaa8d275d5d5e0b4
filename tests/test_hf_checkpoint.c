/* Tests of src/io/hf_checkpoint: a sharded checkpoint saved by transformers (tests/fixtures/io/
 * hf_tiny, values in hf_tiny_flat.npy, names and shapes in hf_tiny_names.txt) loads exactly; saving
 * and reloading in F32 and BF16; and the error cases on small hand-made tables. With
 * ZAYAC_IO_EXPORT_DIR set, the saved folders are left there for scripts/make_io_fixtures.py check.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/fileio.h"
#include "io/hf_checkpoint.h"
#include "io/npy.h"
#include "model/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[64];

static void fixture(char *buf, size_t n, const char *name) {
    const char *root = getenv("ZAYAC_ROOT");
    snprintf(buf, n, "%s/tests/fixtures/io/%s", root ? root : ".", name);
}

/* Builds the table from hf_tiny_names.txt ("name d0 d1 ..." per line, sorted by name). */
static void tiny_table(zy_param_table *t) {
    char p[512], line[512];
    fixture(p, sizeof p, "hf_tiny_names.txt");
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    params_init(t);
    while (fgets(line, sizeof line, f)) {
        char *save, *name = strtok_r(line, " \n", &save), *tok;
        int64_t shape[ZY_MAX_DIMS];
        int nd = 0;
        while ((tok = strtok_r(NULL, " \n", &save)) != NULL) shape[nd++] = atoll(tok);
        zy_param_kind kind = strstr(name, "balancing_biases") ? ZY_PARAM_BUFFER : ZY_PARAM_MATRIX;
        params_add(t, name, nd, shape, kind, -1);
    }
    fclose(f);
    assert_true(t->count > 50);
}

/* The flat reference values, in table order (the table's offsets are padded, the file is not). */
static void expect_tiny_values(const zy_param_table *t, const float *buf, int bf16) {
    char p[512];
    fixture(p, sizeof p, "hf_tiny_flat.npy");
    zy_npy ref;
    assert_int_equal(npy_read_as(&ref, p, ZY_NPY_F32), ZY_OK);
    const float *r = ref.data;
    size_t at = 0;
    for (int i = 0; i < t->count; i++) {
        const zy_param *q = &t->items[i];
        int exact = !bf16 || q->kind == ZY_PARAM_BUFFER;
        for (size_t j = 0; j < q->numel; j++) {
            float want = exact ? r[at + j] : zy_bf16_to_f32(zy_f32_to_bf16(r[at + j]));
            if (buf[q->offset + j] != want)
                fail_msg("%s[%zu] = %.9g, expected %.9g", q->name, j, buf[q->offset + j], want);
        }
        at += q->numel;
    }
    assert_int_equal(at, ref.numel);
    npy_free(&ref);
}

static void test_load_transformers_sharded(void **state) {
    (void)state;
    zy_param_table t;
    tiny_table(&t);
    float *buf = calloc(t.total, sizeof *buf);
    char dir[512];
    fixture(dir, sizeof dir, "hf_tiny");
    if (hf_load_weights(dir, &t, buf) != ZY_OK) fail_msg("%s", zy_errmsg());
    expect_tiny_values(&t, buf, 0);
    free(buf);
    params_free(&t);
}

static void test_save_and_reload(void **state) {
    (void)state;
    zy_param_table t;
    tiny_table(&t);
    float *buf = calloc(t.total, sizeof *buf), *back = calloc(t.total, sizeof *back);
    char dir[512];
    fixture(dir, sizeof dir, "hf_tiny");
    assert_int_equal(hf_load_weights(dir, &t, buf), ZY_OK);
    zy_config cfg;
    assert_int_equal(config_load(&cfg, dir), ZY_OK);
    const char *exp = getenv("ZAYAC_IO_EXPORT_DIR");
    for (int bf = 0; bf < 2; bf++) {
        char out[600];
        snprintf(out, sizeof out, "%s/%s", exp && *exp ? exp : tmpdir,
                 bf ? "tiny_bf16" : "tiny_f32");
        assert_int_equal(config_save(&cfg, out), ZY_OK);
        assert_int_equal(hf_save_weights(out, &t, buf, bf ? ZY_ST_BF16 : ZY_ST_F32), ZY_OK);
        memset(back, 0, t.total * sizeof *back);
        if (hf_load_weights(out, &t, back) != ZY_OK) fail_msg("%s", zy_errmsg());
        expect_tiny_values(&t, back, bf);
        char file[700];
        snprintf(file, sizeof file, "%s/model.safetensors", out);
        zy_safetensors f;
        assert_int_equal(safetensors_open(&f, file), ZY_OK);
        assert_string_equal(safetensors_meta_get(&f, "format"), "pt");
        int k = safetensors_find(&f, "model.layers.0.mlp.gate.balancing_biases");
        assert_int_equal(f.tensors[k].dtype, ZY_ST_F32); /* buffers stay fp32 */
        k = safetensors_find(&f, "model.embed_tokens.weight");
        assert_int_equal(f.tensors[k].dtype, bf ? ZY_ST_BF16 : ZY_ST_F32);
        safetensors_close(&f);
    }
    assert_int_equal(hf_save_weights(tmpdir, &t, buf, ZY_ST_F16), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "F32 or BF16"));
    free(buf);
    free(back);
    params_free(&t);
}

/* ---- a small table by hand ---- */

static void small_table(zy_param_table *t) {
    params_init(t);
    params_add(t, "model.embed_tokens.weight", 2, (int64_t[]){4, 3}, ZY_PARAM_EMBED, -1);
    params_add(t, "model.norm.weight", 1, (int64_t[]){3}, ZY_PARAM_VECTOR, -1);
    params_add(t, "model.layers.0.mlp.gate.balancing_biases", 1, (int64_t[]){5}, ZY_PARAM_BUFFER,
               0);
}

static float small_vals[12 + 3 + 5];

/* Writes DIR/name with the given tensors (name, shape, dtype), values from small_vals. */
static void write_file(const char *dir, const char *name, int n, const char *const *names,
                       const int64_t (*shapes)[2], const int *ndims, const zy_st_dtype *dts) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    zy_st_write_item items[8];
    int32_t ints[32] = {0};
    for (int i = 0; i < n; i++)
        items[i] = (zy_st_write_item){names[i], dts[i], ndims[i], shapes[i],
                                      dts[i] == ZY_ST_I32 ? (const void *)ints : small_vals};
    assert_int_equal(safetensors_write(p, items, n, NULL, 0), ZY_OK);
}

static void fresh_dir(char *dir, size_t n, const char *name) {
    snprintf(dir, n, "%s/%s", tmpdir, name);
    assert_int_equal(zy_remove_tree(dir), ZY_OK);
    assert_int_equal(zy_mkdirs(dir), ZY_OK);
}

static const char *const NAMES[] = {"model.embed_tokens.weight", "model.norm.weight",
                                    "model.layers.0.mlp.gate.balancing_biases", "lm_head.weight",
                                    "model.extra"};
static const int64_t SHAPES[][2] = {{4, 3}, {3, 0}, {5, 0}, {4, 3}, {2, 0}};
static const int NDIMS[] = {2, 1, 1, 2, 1};
static const zy_st_dtype F32S[] = {ZY_ST_F32, ZY_ST_F32, ZY_ST_F32, ZY_ST_F32, ZY_ST_F32};

/* Loading must fail, name `needle`, and leave buf untouched. */
static void expect_load_fail(const char *dir, const zy_param_table *t, const char *needle) {
    float *buf = malloc(t->total * sizeof *buf);
    for (size_t i = 0; i < t->total; i++) buf[i] = 42.0f;
    zy_err_clear();
    assert_int_equal(hf_load_weights(dir, t, buf), ZY_ERR);
    if (!strstr(zy_errmsg(), needle)) fail_msg("error '%s' lacks '%s'", zy_errmsg(), needle);
    for (size_t i = 0; i < t->total; i++) assert_true(buf[i] == 42.0f);
    free(buf);
}

static void test_single_file_cases(void **state) {
    (void)state;
    for (int i = 0; i < 20; i++) small_vals[i] = (float)i * 0.5f - 3;
    zy_param_table t;
    small_table(&t);
    float buf[64];
    char dir[512];

    fresh_dir(dir, sizeof dir, "ok_with_head"); /* lm_head.weight is ignored */
    write_file(dir, "model.safetensors", 4, NAMES, SHAPES, NDIMS, F32S);
    assert_int_equal(hf_load_weights(dir, &t, buf), ZY_OK);
    for (int i = 0; i < t.count; i++)
        assert_memory_equal(buf + t.items[i].offset, small_vals, t.items[i].numel * sizeof(float));

    fresh_dir(dir, sizeof dir, "extra");
    write_file(dir, "model.safetensors", 5, NAMES, SHAPES, NDIMS, F32S);
    expect_load_fail(dir, &t, "unexpected tensor 'model.extra'");

    fresh_dir(dir, sizeof dir, "missing");
    write_file(dir, "model.safetensors", 2, NAMES, SHAPES, NDIMS, F32S);
    expect_load_fail(dir, &t,
                     "no tensor 'model.layers.0.mlp.gate.balancing_biases' (expected shape [5])");
    expect_load_fail(dir, &t, "missing/model.safetensors");

    fresh_dir(dir, sizeof dir, "shape");
    const int64_t bad_shapes[][2] = {{3, 4}, {3, 0}, {5, 0}};
    write_file(dir, "model.safetensors", 3, NAMES, bad_shapes, NDIMS, F32S);
    expect_load_fail(dir, &t,
                     "shape/model.safetensors: tensor 'model.embed_tokens.weight' has shape [3, "
                     "4], expected [4, 3]");

    fresh_dir(dir, sizeof dir, "dtype");
    const zy_st_dtype dts[] = {ZY_ST_F32, ZY_ST_I32, ZY_ST_F32};
    write_file(dir, "model.safetensors", 3, NAMES, SHAPES, NDIMS, dts);
    expect_load_fail(dir, &t, "tensor 'model.norm.weight' has dtype I32");

    fresh_dir(dir, sizeof dir, "empty");
    expect_load_fail(dir, &t, "no model.safetensors or model.safetensors.index.json");

    fresh_dir(dir, sizeof dir, "corrupt");
    char p[600];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    assert_int_equal(zy_write_file_atomic(p, "\x10\0\0\0\0\0\0\0{", 9), ZY_OK);
    expect_load_fail(dir, &t, "corrupt/model.safetensors: header length 16 runs past");

    /* A failed save leaves the good file. */
    fresh_dir(dir, sizeof dir, "keep");
    write_file(dir, "model.safetensors", 3, NAMES, SHAPES, NDIMS, F32S);
    float zeros[64] = {0};
    assert_int_equal(hf_save_weights(dir, &t, zeros, ZY_ST_I32), ZY_ERR);
    assert_int_equal(hf_load_weights(dir, &t, buf), ZY_OK);
    assert_memory_equal(buf, small_vals, 12 * sizeof(float));
    params_free(&t);
}

static void write_index(const char *dir, const char *json) {
    char p[600];
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    assert_int_equal(zy_write_file_atomic(p, json, strlen(json)), ZY_OK);
}

static void test_sharded_cases(void **state) {
    (void)state;
    for (int i = 0; i < 20; i++) small_vals[i] = (float)i * 0.25f + 1;
    zy_param_table t;
    small_table(&t);
    float buf[64];
    char dir[512];
    fresh_dir(dir, sizeof dir, "sharded");
    write_file(dir, "a.safetensors", 1, NAMES, SHAPES, NDIMS, F32S);
    write_file(dir, "b.safetensors", 3, NAMES + 1, SHAPES + 1, NDIMS + 1, F32S);
    const char *good = "{\"metadata\": {\"total_size\": 80}, \"weight_map\": {"
                       "\"model.embed_tokens.weight\": \"a.safetensors\", "
                       "\"model.norm.weight\": \"b.safetensors\", "
                       "\"model.layers.0.mlp.gate.balancing_biases\": \"b.safetensors\", "
                       "\"lm_head.weight\": \"b.safetensors\"}}";
    write_index(dir, good);
    if (hf_load_weights(dir, &t, buf) != ZY_OK) fail_msg("%s", zy_errmsg());
    for (int i = 0; i < t.count; i++)
        assert_memory_equal(buf + t.items[i].offset, small_vals, t.items[i].numel * sizeof(float));

    write_index(dir, "{\"weight_map\": {\"model.embed_tokens.weight\": \"a.safetensors\", "
                     "\"model.norm.weight\": \"b.safetensors\"}}");
    expect_load_fail(dir, &t,
                     "'model.layers.0.mlp.gate.balancing_biases' is missing from the weight_map");
    write_index(dir, "{\"weight_map\": {\"model.embed_tokens.weight\": \"gone.safetensors\", "
                     "\"model.norm.weight\": \"b.safetensors\", "
                     "\"model.layers.0.mlp.gate.balancing_biases\": \"b.safetensors\"}}");
    expect_load_fail(dir, &t, "gone.safetensors: cannot open");
    write_index(dir, "{\"weight_map\": {\"model.embed_tokens.weight\": \"../a.safetensors\", "
                     "\"model.norm.weight\": \"b.safetensors\", "
                     "\"model.layers.0.mlp.gate.balancing_biases\": \"b.safetensors\"}}");
    expect_load_fail(dir, &t, "expected a file name inside the folder");
    write_index(dir, "{\"weight_map\": {\"model.embed_tokens.weight\": \"b.safetensors\", "
                     "\"model.norm.weight\": \"b.safetensors\", "
                     "\"model.layers.0.mlp.gate.balancing_biases\": \"b.safetensors\"}}");
    expect_load_fail(dir, &t, "b.safetensors: no tensor 'model.embed_tokens.weight'");
    write_index(dir, "{\"weight_map\": {\"model.mystery\": \"a.safetensors\"}}");
    expect_load_fail(dir, &t, "model.safetensors.index.json: unexpected tensor 'model.mystery'");
    write_index(dir, "{\"weight_map\": [}");
    expect_load_fail(dir, &t, "model.safetensors.index.json: not valid JSON");
    write_index(dir, "{\"metadata\": {}}");
    expect_load_fail(dir, &t, "no weight_map");
    /* a shard holding a tensor the table does not know */
    write_file(dir, "a.safetensors", 2, (const char *const[]){NAMES[0], NAMES[4]},
               (const int64_t[][2]){{4, 3}, {2, 0}}, (const int[]){2, 1}, F32S);
    write_index(dir, good);
    expect_load_fail(dir, &t, "a.safetensors: unexpected tensor 'model.extra'");
    params_free(&t);
}

static int setup(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/zy_hf_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return zy_remove_tree(tmpdir) == ZY_OK ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_transformers_sharded),
        cmocka_unit_test(test_save_and_reload),
        cmocka_unit_test(test_single_file_cases),
        cmocka_unit_test(test_sharded_cases),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
