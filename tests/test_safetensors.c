/* Tests of src/io/safetensors: a file written by Python's safetensors (values checked against
 * numpy/torch upcasts), bf16/f16 rounding against torch/numpy bits and direct formulas, write/read
 * round trips, atomic replacement, and every malformed-header case with its error message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/fileio.h"
#include "io/npy.h"
#include "io/safetensors.h"

#include <dirent.h>
#include <math.h>
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

static zy_npy load_npy(const char *name) {
    char p[512];
    fixture(p, sizeof p, name);
    zy_npy a;
    if (npy_read(&a, p) != ZY_OK) fail_msg("%s", zy_errmsg());
    return a;
}

static uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static float bits_f32(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* ---- the Python-written fixture ---- */

static void test_read_python_fixture(void **state) {
    (void)state;
    char p[512];
    fixture(p, sizeof p, "st_mixed.safetensors");
    zy_safetensors f;
    assert_int_equal(safetensors_open(&f, p), ZY_OK);
    assert_int_equal(f.count, 6);
    assert_string_equal(safetensors_meta_get(&f, "format"), "pt");
    assert_string_equal(safetensors_meta_get(&f, "note"), "fx");
    assert_null(safetensors_meta_get(&f, "absent"));
    assert_int_equal(f.tensors[safetensors_find(&f, "b.bf16")].dtype, ZY_ST_BF16);
    assert_int_equal(f.tensors[safetensors_find(&f, "c.f16")].dtype, ZY_ST_F16);
    assert_int_equal(safetensors_find(&f, "nope"), -1);

    const struct {
        const char *tensor, *npy;
    } fl[] = {{"a.f32", "st_a.npy"}, {"b.bf16", "st_b.npy"}, {"c.f16", "st_c.npy"}};
    for (int k = 0; k < 3; k++) {
        zy_npy want = load_npy(fl[k].npy);
        float *got = malloc(want.numel * sizeof *got);
        assert_int_equal(safetensors_read_f32(&f, fl[k].tensor, want.ndim, want.shape, got), ZY_OK);
        for (size_t i = 0; i < want.numel; i++)
            assert_int_equal(f32_bits(got[i]), f32_bits(((float *)want.data)[i]));
        free(got);
        npy_free(&want);
    }
    const struct {
        const char *tensor, *npy;
    } il[] = {{"d.i32", "st_d.npy"}, {"e.i64", "st_e.npy"}};
    for (int k = 0; k < 2; k++) {
        zy_npy want = load_npy(il[k].npy);
        int32_t *got = malloc(want.numel * sizeof *got);
        assert_int_equal(safetensors_read_i32(&f, il[k].tensor, want.ndim, want.shape, got), ZY_OK);
        assert_memory_equal(got, want.data, want.numel * sizeof *got);
        free(got);
        npy_free(&want);
    }
    float s;
    assert_int_equal(safetensors_read_f32(&f, "s.scalar", 0, NULL, &s), ZY_OK);
    assert_true(s == 2.5f);
    safetensors_close(&f);
}

/* ---- conversions ---- */

static void test_rounding_matches_torch_and_numpy(void **state) {
    (void)state;
    zy_npy src = load_npy("conv_src.npy"), bf = load_npy("conv_bf16.npy"),
           hf = load_npy("conv_f16.npy");
    assert_int_equal(src.numel, bf.numel);
    assert_int_equal(src.numel, hf.numel);
    const float *x = src.data;
    for (size_t i = 0; i < src.numel; i++) {
        if (zy_f32_to_bf16(x[i]) != (uint16_t)((int32_t *)bf.data)[i])
            fail_msg("bf16(0x%08x) = 0x%04x, torch gives 0x%04x", f32_bits(x[i]),
                     zy_f32_to_bf16(x[i]), ((int32_t *)bf.data)[i]);
        if (zy_f32_to_f16(x[i]) != (uint16_t)((int32_t *)hf.data)[i])
            fail_msg("f16(0x%08x) = 0x%04x, numpy gives 0x%04x", f32_bits(x[i]),
                     zy_f32_to_f16(x[i]), ((int32_t *)hf.data)[i]);
    }
    npy_free(&src);
    npy_free(&bf);
    npy_free(&hf);
}

static void test_rounding_known_values(void **state) {
    (void)state;
    /* bf16 keeps the top 16 bits; the dropped 16 decide: > half up, < half down, = half to even. */
    assert_int_equal(zy_f32_to_bf16(1.0f), 0x3F80);
    assert_int_equal(zy_f32_to_bf16(bits_f32(0x3F808000)), 0x3F80); /* tie, 0x3F80 even */
    assert_int_equal(zy_f32_to_bf16(bits_f32(0x3F818000)), 0x3F82); /* tie, 0x3F81 odd -> up */
    assert_int_equal(zy_f32_to_bf16(bits_f32(0x3F808001)), 0x3F81); /* above half */
    assert_int_equal(zy_f32_to_bf16(bits_f32(0x3F807FFF)), 0x3F80); /* below half */
    assert_int_equal(zy_f32_to_bf16(bits_f32(0xC0490FDB)), 0xC049); /* -pi */
    assert_int_equal(zy_f32_to_bf16(bits_f32(0x7F7FFFFF)), 0x7F80); /* max float -> inf */
    assert_true(isnan(zy_bf16_to_f32(zy_f32_to_bf16(NAN))));
    assert_true(zy_bf16_to_f32(0x3F81) == 1.0f + 1.0f / 128);
    /* half: 10 mantissa bits; 65504 is the largest finite, 2^-24 the smallest subnormal. */
    assert_int_equal(zy_f32_to_f16(1.0f), 0x3C00);
    assert_int_equal(zy_f32_to_f16(65504.0f), 0x7BFF);
    assert_int_equal(zy_f32_to_f16(65519.0f), 0x7BFF);
    assert_int_equal(zy_f32_to_f16(65520.0f), 0x7C00); /* tie rounds to even = inf */
    assert_int_equal(zy_f32_to_f16(ldexpf(1, -24)), 0x0001);
    assert_int_equal(zy_f32_to_f16(ldexpf(1, -25)), 0x0000); /* tie to even zero */
    assert_int_equal(zy_f32_to_f16(ldexpf(3, -26)), 0x0001); /* 0.75 ulp -> 1 */
    assert_int_equal(zy_f32_to_f16(-2.0f), 0xC000);
    assert_true(isnan(zy_f16_to_f32(zy_f32_to_f16(NAN))));
    /* Every half value against the direct formula, and back. */
    for (uint32_t h = 0; h < 65536; h++) {
        int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
        float v = zy_f16_to_f32((uint16_t)h);
        if (e == 31) {
            assert_true(m ? isnan(v) : isinf(v));
            continue;
        }
        float want = e ? ldexpf(1.0f + m / 1024.0f, e - 15) : ldexpf(m / 1024.0f, -14);
        if (s) want = -want;
        assert_int_equal(f32_bits(v), f32_bits(want));
        assert_int_equal(zy_f32_to_f16(v), h);
    }
}

/* ---- round trips ---- */

static void test_write_read_round_trip(void **state) {
    (void)state;
    char p[512];
    tmp_path(p, sizeof p, "rt.safetensors");
    float a[6], b[5] = {1.0f, bits_f32(0x3F808001), -3.14159f, 1e-30f, 70000.0f};
    for (int i = 0; i < 6; i++) a[i] = (float)i / 3 - 1;
    int32_t c[3] = {INT32_MIN, 0, INT32_MAX};
    int64_t d[2] = {-5, 1234567};
    int64_t sa[2] = {2, 3}, sb[1] = {5}, sc[1] = {3}, sd[2] = {1, 2};
    zy_st_write_item items[] = {
        {"a", ZY_ST_F32, 2, sa, a},   {"b16", ZY_ST_BF16, 1, sb, b},
        {"h16", ZY_ST_F16, 1, sb, b}, {"c", ZY_ST_I32, 1, sc, c},
        {"d", ZY_ST_I64, 2, sd, d},   {"empty", ZY_ST_F32, 1, (int64_t[]){0}, a},
    };
    const char *meta[] = {"format", "pt", "k\"q", "v\\n"};
    assert_int_equal(safetensors_write(p, items, 6, meta, 2), ZY_OK);

    zy_safetensors f;
    assert_int_equal(safetensors_open(&f, p), ZY_OK);
    assert_int_equal(f.count, 6);
    assert_string_equal(safetensors_meta_get(&f, "format"), "pt");
    assert_string_equal(safetensors_meta_get(&f, "k\"q"), "v\\n");
    assert_int_equal((f.data - (const uint8_t *)f.map.data) % 8, 0); /* aligned data region */
    float ga[6], gb[5];
    assert_int_equal(safetensors_read_f32(&f, "a", 2, sa, ga), ZY_OK);
    assert_memory_equal(ga, a, sizeof a);
    assert_int_equal(safetensors_read_f32(&f, "b16", 1, sb, gb), ZY_OK);
    for (int i = 0; i < 5; i++) assert_true(gb[i] == zy_bf16_to_f32(zy_f32_to_bf16(b[i])));
    assert_true(gb[1] == 1.0f + 1.0f / 128); /* rounded up, not truncated */
    assert_int_equal(safetensors_read_f32(&f, "h16", 1, sb, gb), ZY_OK);
    for (int i = 0; i < 5; i++) assert_true(gb[i] == zy_f16_to_f32(zy_f32_to_f16(b[i])));
    assert_true(isinf(gb[4]));
    int32_t gc[3], gd[2];
    assert_int_equal(safetensors_read_i32(&f, "c", 1, sc, gc), ZY_OK);
    assert_memory_equal(gc, c, sizeof c);
    assert_int_equal(safetensors_read_i32(&f, "d", 2, sd, gd), ZY_OK);
    assert_int_equal(gd[0], -5);
    assert_int_equal(gd[1], 1234567);
    assert_int_equal(f.tensors[safetensors_find(&f, "empty")].numel, 0);
    safetensors_close(&f);
    safetensors_close(&f); /* closing twice is harmless */
}

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static void test_atomic_replace(void **state) {
    (void)state;
    char sub[512], p[600];
    tmp_path(sub, sizeof sub, "atomic");
    assert_int_equal(zy_mkdirs(sub), ZY_OK);
    snprintf(p, sizeof p, "%s/w.safetensors", sub);
    float v[2] = {1, 2};
    int64_t s[1] = {2};
    zy_st_write_item good = {"x", ZY_ST_F32, 1, s, v};
    assert_int_equal(safetensors_write(p, &good, 1, NULL, 0), ZY_OK);
    /* A failing write (duplicate name, unwritable dtype) leaves the old file and no temporary. */
    zy_st_write_item dup[2] = {good, good};
    assert_int_equal(safetensors_write(p, dup, 2, NULL, 0), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "'x'"));
    zy_st_write_item bad = {"y", ZY_ST_F64, 1, s, v};
    assert_int_equal(safetensors_write(p, &bad, 1, NULL, 0), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "F64"));
    assert_int_equal(count_entries(sub), 1);
    zy_safetensors f;
    assert_int_equal(safetensors_open(&f, p), ZY_OK);
    float g[2];
    assert_int_equal(safetensors_read_f32(&f, "x", 1, s, g), ZY_OK);
    assert_true(g[0] == 1 && g[1] == 2);
    safetensors_close(&f);
    /* Writing into a missing folder fails with the path and creates nothing. */
    snprintf(p, sizeof p, "%s/nodir/w.safetensors", sub);
    assert_int_equal(safetensors_write(p, &good, 1, NULL, 0), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "nodir"));
    assert_int_equal(count_entries(sub), 1);
}

/* ---- malformed files ---- */

/* Writes 8-byte length + header + `data_len` zero bytes (length field overridable). */
static void write_st(const char *path, const char *header, size_t data_len, int64_t len_override) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t n = len_override >= 0 ? (uint64_t)len_override : strlen(header);
    fwrite(&n, 8, 1, f);
    fwrite(header, 1, strlen(header), f);
    for (size_t i = 0; i < data_len; i++) fputc(0, f);
    fclose(f);
}

static void expect_open_fail(const char *header, size_t data_len, int64_t len_override,
                             const char *needle) {
    char p[512];
    tmp_path(p, sizeof p, "bad.safetensors");
    write_st(p, header, data_len, len_override);
    zy_safetensors f;
    zy_err_clear();
    assert_int_equal(safetensors_open(&f, p), ZY_ERR);
    if (!strstr(zy_errmsg(), p) || !strstr(zy_errmsg(), needle))
        fail_msg("header %s: error '%s' lacks '%s' or the path", header, zy_errmsg(), needle);
    assert_null(f.tensors);
    assert_null(f.map.data);
}

#define T1 "\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"

static void test_malformed_headers(void **state) {
    (void)state;
    char p[512];
    tmp_path(p, sizeof p, "short.safetensors");
    FILE *fp = fopen(p, "wb");
    fwrite("abcde", 1, 5, fp);
    fclose(fp);
    zy_safetensors f;
    assert_int_equal(safetensors_open(&f, p), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "shorter than the 8-byte"));
    tmp_path(p, sizeof p, "absent.safetensors");
    assert_int_equal(safetensors_open(&f, p), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), p));

    expect_open_fail("{" T1 "}", 8, 0, "not valid JSON"); /* empty header */
    expect_open_fail("{" T1 "}", 8, (int64_t)1 << 40, "runs past the end");
    expect_open_fail("{" T1 "}", 0, 200, "runs past the end");
    expect_open_fail("{\"t\":{\"dtype\":\"F32\",", 8, -1, "not valid JSON");
    expect_open_fail("[1, 2]", 0, -1, "not an object");
    expect_open_fail("{" T1 "} x", 8, -1, "extra bytes");
    expect_open_fail("{\"t\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, -1, "no dtype");
    expect_open_fail("{\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, -1, "no shape");
    expect_open_fail("{\"t\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, -1, "no data_offsets");
    expect_open_fail("{\"t\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, -1,
                     "unknown dtype 'Q7'");
    expect_open_fail("{\"t\":{\"dtype\":7,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, -1,
                     "dtype is not a string");
    expect_open_fail("{\"t\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, -1,
                     "shape entry 0");
    expect_open_fail("{\"t\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", 8, -1,
                     "shape entry 0");
    expect_open_fail("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, -1,
                     "end before they begin");
    expect_open_fail("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, -1,
                     "pair");
    expect_open_fail("{\"t\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, -1,
                     "needs 3 elements x 4 bytes");
    expect_open_fail("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 8, -1,
                     "run past the data region");
    /* overlap: u starts inside t */
    expect_open_fail("{" T1 ",\"u\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
                     -1, "overlaps");
    /* a hole between t and u */
    expect_open_fail("{" T1 ",\"u\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}",
                     16, -1, "unused bytes");
    /* a hole at the start */
    expect_open_fail("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, -1,
                     "unused bytes");
    /* bytes after the last tensor (or a file cut short of what the header promises) */
    expect_open_fail("{" T1 "}", 12, -1, "trailing");
    expect_open_fail("{" T1 ",\"u\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 12,
                     -1, "run past the data region");
    expect_open_fail("{" T1 "," T1 "}", 8, -1, "listed twice");
    expect_open_fail("{\"__metadata__\":{\"a\":1}," T1 "}", 8, -1, "not a string");
    expect_open_fail("{\"__metadata__\":[]," T1 "}", 8, -1, "__metadata__ is not an object");
    expect_open_fail("{\"t\":[]}", 0, -1, "not an object");
    expect_open_fail("{}", 4, -1, "no tensor");

    /* An F8/U8 tensor opens (the layout is valid) but cannot be read as floats. */
    tmp_path(p, sizeof p, "u8.safetensors");
    write_st(p, "{\"t\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]}}", 3, -1);
    assert_int_equal(safetensors_open(&f, p), ZY_OK);
    float out[3];
    int64_t s3[1] = {3};
    assert_int_equal(safetensors_read_f32(&f, "t", 1, s3, out), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "'t' has dtype U8"));
    assert_non_null(strstr(zy_errmsg(), p));
    safetensors_close(&f);
}

static void test_truncated_real_file(void **state) {
    (void)state;
    char src[512], p[512];
    fixture(src, sizeof src, "st_mixed.safetensors");
    char *raw;
    size_t len;
    assert_int_equal(zy_read_file(src, &raw, &len), ZY_OK);
    tmp_path(p, sizeof p, "cut.safetensors");
    size_t cuts[] = {len - 1, len - 40, 20, 9};
    for (int k = 0; k < 4; k++) {
        FILE *f = fopen(p, "wb");
        fwrite(raw, 1, cuts[k], f);
        fclose(f);
        zy_safetensors st;
        assert_int_equal(safetensors_open(&st, p), ZY_ERR);
        assert_non_null(strstr(zy_errmsg(), p));
    }
    free(raw);
}

static void test_wrong_shape_and_dtype_for_named_tensor(void **state) {
    (void)state;
    char p[512];
    fixture(p, sizeof p, "st_mixed.safetensors");
    zy_safetensors f;
    assert_int_equal(safetensors_open(&f, p), ZY_OK);
    float buf[64];
    int32_t ib[64];
    int64_t s32[2] = {3, 2}, s5[1] = {5}, s22[2] = {2, 2};
    assert_int_equal(safetensors_read_f32(&f, "a.f32", 2, s32, buf), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "'a.f32' has shape [2, 3], expected [3, 2]"));
    assert_non_null(strstr(zy_errmsg(), p));
    assert_int_equal(safetensors_read_f32(&f, "d.i32", 2, s22, buf), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "'d.i32' has dtype I32"));
    assert_int_equal(safetensors_read_i32(&f, "a.f32", 2, (int64_t[]){2, 3}, ib), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "expected I32 or I64"));
    assert_int_equal(safetensors_read_f32(&f, "missing", 1, s5, buf), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "no tensor 'missing' (expected shape [5])"));
    safetensors_close(&f);

    /* I64 values outside int32 */
    char q[512];
    tmp_path(q, sizeof q, "i64.safetensors");
    int64_t big[2] = {1, (int64_t)1 << 40}, s2[1] = {2};
    zy_st_write_item it = {"big", ZY_ST_I64, 1, s2, big};
    assert_int_equal(safetensors_write(q, &it, 1, NULL, 0), ZY_OK);
    assert_int_equal(safetensors_open(&f, q), ZY_OK);
    assert_int_equal(safetensors_read_i32(&f, "big", 1, s2, ib), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "int32 range"));
    safetensors_close(&f);
}

static int setup(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/zy_st_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return zy_remove_tree(tmpdir) == ZY_OK ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_python_fixture),
        cmocka_unit_test(test_rounding_matches_torch_and_numpy),
        cmocka_unit_test(test_rounding_known_values),
        cmocka_unit_test(test_write_read_round_trip),
        cmocka_unit_test(test_atomic_replace),
        cmocka_unit_test(test_malformed_headers),
        cmocka_unit_test(test_truncated_real_file),
        cmocka_unit_test(test_wrong_shape_and_dtype_for_named_tensor),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
