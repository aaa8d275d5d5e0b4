/* Tests of src/bench/gemm.c (no GPU): FLOP counts, the tile/wave quantisation model and the
 * alignment rule against hand-computed values, the preset shapes against the model spec, the
 * sweep's contents, shape parsing, the observations on a synthetic result, the JSON file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/fileio.h"
#include "base/plot.h"
#include "bench/gemm.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char dir[64];

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/zy_gemm_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return zy_remove_tree(dir) == ZY_OK ? 0 : -1;
}

static bench_gemm_shape shape(int m, int n, int k, bench_gemm_layout l) {
    bench_gemm_shape s;
    memset(&s, 0, sizeof s);
    s.m = m, s.n = n, s.k = k, s.layout = l;
    return s;
}

static void test_flops_and_quantisation(void **state) {
    (void)state;
    bench_gemm_shape s = shape(3, 5, 7, GEMM_XWT);
    assert_true(bench_gemm_flops(&s) == 210.0);
    int tiles;
    double waves, we, te;
    /* 4096 x 4096 in 128 x 256 tiles: 32 * 16 = 512 tiles = 3.88 waves on 132 SMs; the last
     * wave is 116/132 full, so 512 / (4 * 132) of the slots do work */
    bench_gemm_quant(4096, 4096, 128, 256, 1, 132, &tiles, &waves, &we, &te);
    assert_int_equal(tiles, 512);
    assert_true(fabs(waves - 512.0 / 132) < 1e-12);
    assert_true(fabs(we - 512.0 / 528) < 1e-12);
    assert_true(te == 1.0);
    /* one row more: 33 tile rows, the last holding 1 of 128 rows */
    bench_gemm_quant(4097, 4096, 128, 256, 1, 132, &tiles, &waves, &we, &te);
    assert_int_equal(tiles, 528);
    assert_true(fabs(we - 1.0) < 1e-12);
    assert_true(fabs(te - 4097.0 / 4224) < 1e-12);
    /* split-K multiplies the work items */
    bench_gemm_quant(1024, 1024, 128, 128, 2, 132, &tiles, &waves, &we, &te);
    assert_int_equal(tiles, 128);
    assert_true(fabs(we - 128.0 / 132) < 1e-12);
}

static void test_alignment_rule(void **state) {
    (void)state;
    bench_gemm_shape s = shape(8192, 4096, 4097, GEMM_XWT); /* rows of X and W are 8194 B */
    assert_true(bench_gemm_misaligned(&s, 2));
    s.k = 4104; /* +8 bf16 elements = +16 bytes */
    assert_false(bench_gemm_misaligned(&s, 2));
    s.k = 4100; /* +4 fp32 elements = +16 bytes, but +8 bytes in bf16 */
    assert_false(bench_gemm_misaligned(&s, 4));
    assert_true(bench_gemm_misaligned(&s, 2));
    s = shape(4097, 4096, 4096, GEMM_XWT); /* M is no leading dimension of X W^T */
    assert_false(bench_gemm_misaligned(&s, 2));
    s.layout = GEMM_XTW; /* ... but X^T W stores X as [K, M] */
    assert_true(bench_gemm_misaligned(&s, 2));
    s = shape(4096, 4097, 4096, GEMM_XW); /* Y's rows */
    assert_true(bench_gemm_misaligned(&s, 4));
}

static const bench_gemm_shape *find_label(const bench_gemm_shape *v, int n, const char *group,
                                          const char *label) {
    for (int i = 0; i < n; i++)
        if (!strcmp(v[i].group, group) && !strcmp(v[i].label, label)) return &v[i];
    return NULL;
}

static void test_preset_shapes(void **state) {
    (void)state;
    bench_gemm_shape v[64];
    int n = bench_gemm_preset_shapes("zaya1-base", 16384, v, 64);
    assert_int_equal(n, 24); /* 8 linear layers x (fwd, bwd-data, bwd-weight) */
    /* lm head: V = 262272, D = 2048 */
    const bench_gemm_shape *s = find_label(v, n, "zaya1-base", "lm_head fwd");
    assert_non_null(s);
    assert_true(s->m == 16384 && s->n == 262272 && s->k == 2048 && s->layout == GEMM_XWT);
    s = find_label(v, n, "zaya1-base", "lm_head bwd-data");
    assert_true(s->m == 16384 && s->n == 2048 && s->k == 262272 && s->layout == GEMM_XW);
    s = find_label(v, n, "zaya1-base", "lm_head bwd-weight");
    assert_true(s->m == 262272 && s->n == 2048 && s->k == 16384 && s->layout == GEMM_XTW);
    /* q (8 x 128) + k (2 x 128) + v current and delayed (2 x 64 each) = 1536 */
    s = find_label(v, n, "zaya1-base", "qkv fwd");
    assert_true(s->m == 16384 && s->n == 1536 && s->k == 2048);
    /* experts: 16384 / 16 = 1024 tokens each, gate and up = 2 x 2048 */
    s = find_label(v, n, "zaya1-base", "expert gate_up fwd");
    assert_true(s->m == 1024 && s->n == 4096 && s->k == 2048);
    s = find_label(v, n, "zaya1-base", "expert down fwd");
    assert_true(s->m == 1024 && s->n == 2048 && s->k == 2048);
    /* router: 256 wide, 16 experts + skip */
    s = find_label(v, n, "zaya1-base", "router out fwd");
    assert_true(s->n == 17 && s->k == 256);
    n = bench_gemm_preset_shapes("bench-small", 16384, v, 64);
    assert_int_equal(n, 24);
    s = find_label(v, n, "bench-small", "lm_head fwd");
    assert_true(s->n == 32768 && s->k == 1024);
    s = find_label(v, n, "bench-small", "o_proj fwd");
    assert_true(s->n == 1024 && s->k == 1024);
    assert_int_equal(bench_gemm_preset_shapes("zaya2", 16384, v, 64), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "zaya2"));
    assert_int_equal(bench_gemm_preset_shapes("bench-small", 16384, v, 10), ZY_ERR);
}

static void test_sweep_contents(void **state) {
    (void)state;
    bench_gemm_opts o;
    bench_gemm_opts_default(&o);
    bench_gemm_shape *v;
    int n;
    assert_int_equal(bench_gemm_sweep(&o, BENCH_BF16, &v, &n), ZY_OK);
    assert_int_equal(n, 7 + 2 + 36 + 48 + 48);
    const bench_gemm_shape *s = find_label(v, n, "align", "N 4096+1");
    assert_non_null(s);
    assert_true(s->m == 8192 && s->n == 4097 && s->k == 4096 && s->dim == 'N' && s->offset == 1);
    s = find_label(v, n, "align", "K 1024-64");
    assert_true(s && s->k == 960 && s->n == 4096);
    s = find_label(v, n, "square", "16384^3");
    assert_true(s && s->m == 16384 && s->k == 16384);
    free(v);
    assert_int_equal(bench_gemm_sweep(&o, BENCH_FP32, &v, &n), ZY_OK);
    assert_int_equal(n, 6); /* squares up to 8192 only */
    free(v);
    o.quick = 1;
    assert_int_equal(bench_gemm_sweep(&o, BENCH_TF32, &v, &n), ZY_OK);
    assert_int_equal(n, 7 + 2 + 48);
    free(v);
    snprintf(o.presets, sizeof o.presets, "bench-small,nope");
    assert_int_equal(bench_gemm_sweep(&o, BENCH_BF16, &v, &n), ZY_ERR);
    bench_gemm_shape one[2];
    assert_int_equal(bench_gemm_parse_shape("128x256x64", &one[0]), ZY_OK);
    assert_true(one[0].m == 128 && one[0].n == 256 && one[0].k == 64 && one[0].layout == GEMM_XWT);
    assert_int_equal(bench_gemm_parse_shape("8x16x32:xtw", &one[1]), ZY_OK);
    assert_int_equal(one[1].layout, GEMM_XTW);
    assert_int_equal(bench_gemm_parse_shape("0x1x1", &one[0]), ZY_ERR);
    assert_int_equal(bench_gemm_parse_shape("12x3", &one[0]), ZY_ERR);
    assert_int_equal(bench_gemm_parse_shape("1x2x3:nt", &one[0]), ZY_ERR);
    assert_int_equal(bench_gemm_parse_shape("1x2x3y", &one[0]), ZY_ERR);
    o.shapes = one;
    o.nshapes = 2;
    assert_int_equal(bench_gemm_sweep(&o, BENCH_BF16, &v, &n), ZY_OK);
    assert_int_equal(n, 2);
    assert_int_equal(v[1].k, 32);
    free(v);
}

static bench_gemm_row grow(const char *group, const char *label, int m, int n, int k,
                           double tflops) {
    bench_gemm_row r;
    memset(&r, 0, sizeof r);
    r.s = shape(m, n, k, GEMM_XWT);
    snprintf(r.s.group, sizeof r.s.group, "%s", group);
    snprintf(r.s.label, sizeof r.s.label, "%s", label);
    r.dtype = BENCH_BF16;
    r.tflops = tflops;
    r.time_us = bench_gemm_flops(&r.s) / tflops / 1e6;
    r.tile_m = 128, r.tile_n = 256, r.check_bad = 0;
    bench_gemm_quant(m, n, 128, 256, 1, 132, &r.tiles, &r.waves, &r.wave_eff, &r.tile_eff);
    return r;
}

static void synthetic(bench_gemm_result *res) {
    bench_gemm_result_init(res);
    res->machine.sm_count = 132;
    const int sq[] = {256, 512, 1024, 2048, 4096, 8192, 16384};
    const double rate[] = {20, 90, 300, 600, 720, 800, 790};
    for (int i = 0; i < 7; i++) {
        char l[32];
        snprintf(l, sizeof l, "%d^3", sq[i]);
        bench_gemm_row r = grow("square", l, sq[i], sq[i], sq[i], rate[i]);
        bench_gemm_result_add(res, &r);
    }
    /* the N family at 4096: +1 is misaligned and slow; +64 is fine */
    const int off[] = {0, 1, 64};
    const double ar[] = {700, 350, 690};
    for (int i = 0; i < 3; i++) {
        char l[32];
        snprintf(l, sizeof l, "N 4096%+d", off[i]);
        bench_gemm_row r = grow("align", l, 8192, 4096 + off[i], 4096, ar[i]);
        r.s.dim = 'N', r.s.base = 4096, r.s.offset = off[i];
        r.misaligned = bench_gemm_misaligned(&r.s, 2);
        bench_gemm_result_add(res, &r);
    }
    /* the M family at 1024 with 128-row tiles: M = 1024+256 = 10 x 16 = 160 tiles on 132 SMs is
     * 2 waves, the second 28/132 full: slow, and aligned */
    bench_gemm_row b = grow("align", "M 1024+0", 1024, 4096, 4096, 600);
    b.s.dim = 'M', b.s.base = 1024, b.s.offset = 0;
    bench_gemm_row q = grow("align", "M 1024+256", 1280, 4096, 4096, 400);
    q.s.dim = 'M', q.s.base = 1024, q.s.offset = 256;
    bench_gemm_result_add(res, &b);
    bench_gemm_result_add(res, &q);
    bench_gemm_row p = grow("zaya1-base", "router out fwd", 16384, 17, 256, 8);
    p.misaligned = 1;
    bench_gemm_result_add(res, &p);
    bench_gemm_row p2 = grow("zaya1-base", "lm_head fwd", 16384, 262272, 2048, 760);
    bench_gemm_result_add(res, &p2);
    bench_gemm_finish(res);
}

static void test_observations(void **state) {
    (void)state;
    bench_gemm_result res;
    synthetic(&res);
    assert_true(res.peak[BENCH_BF16] == 800);
    assert_true(fabs(res.rows[4].frac_peak - 0.9) < 1e-12);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    bench_gemm_observations(f, &res);
    fclose(f);
    assert_non_null(strstr(buf, "measured peak 800.0 TFLOP/s at M=8192 N=8192 K=8192"));
    assert_non_null(strstr(buf, "near peak (>= 90%) from M=N=K=4096"));
    assert_non_null(strstr(buf, "N = 4097 (4096+1): 350 TFLOP/s, 50% of N = 4096: a leading "
                                "dimension is not a multiple of 16 bytes"));
    assert_null(strstr(buf, "N = 4160")); /* +64 keeps 99%: not reported */
    assert_non_null(strstr(buf, "M = 1280 (1024+256)"));
    assert_non_null(strstr(buf, "quantisation: 160 tiles of 128x256"));
    assert_non_null(strstr(buf, "+1 LOSES"));
    assert_non_null(strstr(buf, "+64 ok"));
    assert_non_null(strstr(buf, "router out fwd"));
    assert_null(strstr(buf, "lm_head fwd")); /* 95% of peak is not slow */
    free(buf);
    bench_gemm_result_free(&res);
}

static void test_json_and_grid(void **state) {
    (void)state;
    bench_gemm_result res;
    synthetic(&res);
    bench_gemm_row g = grow("grid", "512x1024 K=4096", 512, 1024, 4096, 123);
    bench_gemm_result_add(&res, &g);
    bench_gemm_finish(&res);
    double v[64];
    int ms[8], ns[8], rows, cols;
    bench_gemm_grid(&res, BENCH_BF16, v, ms, ns, &rows, &cols);
    assert_int_equal(rows, 6);
    assert_int_equal(ms[0], 512);
    assert_int_equal(ns[1], 1024);
    assert_true(v[0 * cols + 1] == 123);
    assert_true(isnan(v[1 * cols + 0]));
    char path[160];
    snprintf(path, sizeof path, "%s/out", dir);
    assert_int_equal(bench_gemm_write(path, &res), ZY_OK);
    snprintf(path, sizeof path, "%s/out/gemm.json", dir);
    char *text;
    assert_int_equal(zy_read_file(path, &text, NULL), ZY_OK);
    cJSON *root = cJSON_Parse(text);
    free(text);
    assert_non_null(root);
    const cJSON *rows_j = cJSON_GetObjectItem(root, "rows");
    assert_int_equal(cJSON_GetArraySize(rows_j), res.nrows);
    const cJSON *pk = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "peak_tflops"), "bf16");
    assert_true(pk && pk->valuedouble == 800);
    const cJSON *r0 = cJSON_GetArrayItem(rows_j, 0);
    assert_string_equal(cJSON_GetObjectItem(r0, "layout")->valuestring, "XW^T");
    assert_int_equal(cJSON_GetObjectItem(r0, "M")->valueint, 256);
    cJSON_Delete(root);
    bench_gemm_result_free(&res);
}

static void test_plots(void **state) {
    (void)state;
    char path[200];
    bench_gemm_result res;
    synthetic(&res);
    bench_gemm_row g = grow("grid", "512x1024 K=4096", 512, 1024, 4096, 123);
    bench_gemm_result_add(&res, &g);
    snprintf(path, sizeof path, "%s/plots", dir);
    assert_int_equal(bench_gemm_plot(path, &res), ZY_OK);
    const char *want[] = {"gemm_grid_bf16.png", "gemm_align_bf16.png", "gemm_square.png"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/plots/%s", dir, want[i]);
        assert_true(zy_path_exists(path));
    }
    snprintf(path, sizeof path, "%s/plots/gemm_grid_tf32.png", dir);
    assert_false(zy_path_exists(path));
    bench_gemm_result_free(&res);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flops_and_quantisation),
        cmocka_unit_test(test_alignment_rule),
        cmocka_unit_test(test_preset_shapes),
        cmocka_unit_test(test_sweep_contents),
        cmocka_unit_test(test_observations),
        cmocka_unit_test(test_json_and_grid),
        cmocka_unit_test(test_plots),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
