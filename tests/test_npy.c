/* Tests of src/io/npy: numpy-written fixtures (tests/fixtures/io/np_*.npy, values by formula),
 * round trips, and every malformed-file case with its error message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/fileio.h"
#include "io/npy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[64];

static void fixture(char *buf, size_t n, const char *name) {
    const char *root = getenv("ZAYAC_ROOT");
    snprintf(buf, n, "%s/tests/fixtures/io/%s", root ? root : ".", name);
}

static void tmp_path(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", tmpdir, name);
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

/* Reading must fail with a message naming the file and containing `needle`. */
static void expect_fail(const char *path, const char *needle) {
    zy_npy a;
    zy_err_clear();
    assert_int_equal(npy_read(&a, path), ZY_ERR);
    if (!strstr(zy_errmsg(), path) || !strstr(zy_errmsg(), needle))
        fail_msg("error '%s' lacks '%s' or the path", zy_errmsg(), needle);
    assert_null(a.data);
}

static void test_read_numpy_f32(void **state) {
    (void)state;
    char p[512];
    fixture(p, sizeof p, "np_f32.npy");
    zy_npy a;
    assert_int_equal(npy_read(&a, p), ZY_OK);
    assert_int_equal(a.dtype, ZY_NPY_F32);
    assert_int_equal(a.ndim, 3);
    assert_int_equal(a.shape[0], 2);
    assert_int_equal(a.shape[1], 3);
    assert_int_equal(a.shape[2], 4);
    assert_int_equal(a.numel, 24);
    const float *x = a.data;
    for (int i = 0; i < 24; i++) assert_true(x[i] == (float)i / 4 - 2);
    npy_free(&a);
}

static void test_read_numpy_ints(void **state) {
    (void)state;
    char p[512];
    zy_npy a;
    fixture(p, sizeof p, "np_i4.npy");
    assert_int_equal(npy_read_as(&a, p, ZY_NPY_I32), ZY_OK);
    assert_int_equal(a.ndim, 2);
    assert_int_equal(a.shape[0], 3);
    assert_int_equal(a.shape[1], 5);
    for (int i = 0; i < 15; i++) assert_int_equal(((int32_t *)a.data)[i], 7 * i - 20);
    npy_free(&a);
    /* '<i8' converts to int32 */
    fixture(p, sizeof p, "np_i8.npy");
    assert_int_equal(npy_read_as(&a, p, ZY_NPY_I32), ZY_OK);
    const int32_t want[6] = {0, 1, INT32_MAX, INT32_MIN, -7, 42};
    assert_int_equal(a.numel, 6);
    assert_memory_equal(a.data, want, sizeof want);
    npy_free(&a);
}

static void test_read_versions_and_edges(void **state) {
    (void)state;
    char p[512];
    zy_npy a;
    fixture(p, sizeof p, "np_v2.npy"); /* version 2.0 header */
    assert_int_equal(npy_read(&a, p), ZY_OK);
    assert_int_equal(a.ndim, 2);
    assert_int_equal(a.shape[0], 3);
    for (int i = 0; i < 6; i++) assert_true(((float *)a.data)[i] == (float)i);
    npy_free(&a);
    fixture(p, sizeof p, "np_scalar.npy");
    assert_int_equal(npy_read(&a, p), ZY_OK);
    assert_int_equal(a.ndim, 0);
    assert_int_equal(a.numel, 1);
    assert_true(((float *)a.data)[0] == 1.25f);
    npy_free(&a);
    fixture(p, sizeof p, "np_empty.npy");
    assert_int_equal(npy_read(&a, p), ZY_OK);
    assert_int_equal(a.ndim, 2);
    assert_int_equal(a.shape[0], 0);
    assert_int_equal(a.shape[1], 3);
    assert_int_equal(a.numel, 0);
    npy_free(&a);
}

static void test_unsupported_fixtures(void **state) {
    (void)state;
    char p[512];
    fixture(p, sizeof p, "np_fortran.npy");
    expect_fail(p, "fortran_order");
    fixture(p, sizeof p, "np_f8.npy");
    expect_fail(p, "'<f8'");
    fixture(p, sizeof p, "np_big_endian.npy");
    expect_fail(p, "'>f4'");
    fixture(p, sizeof p, "np_i8_big.npy");
    expect_fail(p, "int32 range");
    zy_npy a;
    fixture(p, sizeof p, "np_i4.npy");
    assert_int_equal(npy_read_as(&a, p, ZY_NPY_F32), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "expected float32"));
    assert_null(a.data);
    fixture(p, sizeof p, "np_f32.npy");
    assert_int_equal(npy_read_as(&a, p, ZY_NPY_I32), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "expected int32"));
}

static void test_round_trip(void **state) {
    (void)state;
    char p[512];
    tmp_path(p, sizeof p, "rt_f32.npy");
    float x[2 * 3];
    for (int i = 0; i < 6; i++) x[i] = (float)i * -1.5f + 0.1f;
    int64_t s2[2] = {2, 3};
    assert_int_equal(npy_write_f32(p, 2, s2, x), ZY_OK);
    zy_npy a;
    assert_int_equal(npy_read_as(&a, p, ZY_NPY_F32), ZY_OK);
    assert_int_equal(a.ndim, 2);
    assert_int_equal(a.shape[1], 3);
    assert_memory_equal(a.data, x, sizeof x);
    npy_free(&a);
    /* numpy's layout: version 1.0, data aligned to 64 bytes, exact size */
    char *raw;
    size_t len;
    assert_int_equal(zy_read_file(p, &raw, &len), ZY_OK);
    unsigned hlen = (unsigned char)raw[8] | (unsigned char)raw[9] << 8;
    assert_int_equal(raw[6], 1);
    assert_int_equal((10 + hlen) % 64, 0);
    assert_int_equal(len, 10 + hlen + sizeof x);
    assert_int_equal(raw[10 + hlen - 1], '\n');
    assert_non_null(strstr(raw + 10, "'shape': (2, 3)"));
    free(raw);

    tmp_path(p, sizeof p, "rt_i32.npy");
    int32_t t[5] = {1, -2, 3, INT32_MAX, INT32_MIN};
    int64_t s1[1] = {5};
    assert_int_equal(npy_write_i32(p, 1, s1, t), ZY_OK);
    assert_int_equal(npy_read_as(&a, p, ZY_NPY_I32), ZY_OK);
    assert_int_equal(a.ndim, 1);
    assert_int_equal(a.shape[0], 5);
    assert_memory_equal(a.data, t, sizeof t);
    npy_free(&a);
    assert_int_equal(zy_read_file(p, &raw, &len), ZY_OK);
    assert_non_null(strstr(raw + 10, "'shape': (5,)"));
    free(raw);

    tmp_path(p, sizeof p, "rt_scalar.npy");
    float one = 3.0f;
    assert_int_equal(npy_write_f32(p, 0, NULL, &one), ZY_OK);
    assert_int_equal(npy_read(&a, p), ZY_OK);
    assert_int_equal(a.ndim, 0);
    assert_true(((float *)a.data)[0] == 3.0f);
    npy_free(&a);
}

static void test_malformed(void **state) {
    (void)state;
    char good[512], p[512];
    tmp_path(good, sizeof good, "good.npy");
    float x[4] = {1, 2, 3, 4};
    int64_t s[1] = {4};
    assert_int_equal(npy_write_f32(good, 1, s, x), ZY_OK);
    char *raw;
    size_t len;
    assert_int_equal(zy_read_file(good, &raw, &len), ZY_OK);

    tmp_path(p, sizeof p, "missing.npy");
    expect_fail(p, "cannot open");
    tmp_path(p, sizeof p, "trunc.npy");
    write_bytes(p, raw, len - 3);
    expect_fail(p, "truncated");
    write_bytes(p, raw, 7);
    expect_fail(p, "not a .npy");
    tmp_path(p, sizeof p, "trail.npy");
    char *more = malloc(len + 4);
    memcpy(more, raw, len);
    memset(more + len, 0, 4);
    write_bytes(p, more, len + 4);
    expect_fail(p, "trailing");
    tmp_path(p, sizeof p, "magic.npy");
    memcpy(more, raw, len);
    more[1] = 'X';
    write_bytes(p, more, len);
    expect_fail(p, "magic");
    tmp_path(p, sizeof p, "hlen.npy");
    memcpy(more, raw, len);
    more[8] = (char)0xff;
    more[9] = (char)0xff;
    write_bytes(p, more, len);
    expect_fail(p, "header length");
    tmp_path(p, sizeof p, "version.npy");
    memcpy(more, raw, len);
    more[6] = 9;
    write_bytes(p, more, len);
    expect_fail(p, "version 9");
    tmp_path(p, sizeof p, "dict.npy");
    memcpy(more, raw, len);
    char *brace = memchr(more, '{', len);
    *brace = '[';
    write_bytes(p, more, len);
    expect_fail(p, "not a dict");
    tmp_path(p, sizeof p, "shape.npy");
    memcpy(more, raw, len);
    char *sh = strstr(more + 10, "(4,)");
    memcpy(sh, "(x,)", 4);
    write_bytes(p, more, len);
    expect_fail(p, "shape");
    free(more);
    free(raw);
}

static int setup(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/zy_npy_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return zy_remove_tree(tmpdir) == ZY_OK ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_numpy_f32),
        cmocka_unit_test(test_read_numpy_ints),
        cmocka_unit_test(test_read_versions_and_edges),
        cmocka_unit_test(test_unsupported_fixtures),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_malformed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
