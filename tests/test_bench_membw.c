/* Tests of src/bench/membw.c (no GPU): the bytes each kind moves, the JSON file and the plots. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/fileio.h"
#include "base/plot.h"
#include "bench/membw.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char dir[64];

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/zy_membw_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return zy_remove_tree(dir) == ZY_OK ? 0 : -1;
}

static void test_bytes_moved(void **state) {
    (void)state;
    /* copy and scale read one array and write one; triad reads two and writes one; a host copy
     * crosses the link once */
    assert_true(bench_membw_moved(MEMBW_COPY, 1000) == 2000);
    assert_true(bench_membw_moved(MEMBW_SCALE, 1000) == 2000);
    assert_true(bench_membw_moved(MEMBW_MEMCPY, 1000) == 2000);
    assert_true(bench_membw_moved(MEMBW_TRIAD, 1000) == 3000);
    assert_true(bench_membw_moved(MEMBW_H2D_PINNED, 1000) == 1000);
    assert_true(bench_membw_moved(MEMBW_D2H_PAGEABLE, 1000) == 1000);
    assert_false(bench_membw_is_host(MEMBW_MEMCPY));
    assert_true(bench_membw_is_host(MEMBW_H2D_PAGEABLE));
    assert_string_equal(bench_membw_name(MEMBW_D2H_PINNED), "d2h_pinned");
    bench_membw_opts o;
    bench_membw_opts_default(&o);
    assert_true(o.min_bytes < (size_t)50 << 20); /* starts inside a 50 MB L2 */
    assert_true(o.max_bytes >= (size_t)4 << 30); /* and reaches several GB */
}

static void fill(bench_membw_result *r) {
    bench_membw_result_init(r);
    for (int k = 0; k < MEMBW_NKINDS; k++)
        for (int i = 0; i < 3; i++) {
            bench_membw_row w = {(bench_membw_kind)k,
                                 (size_t)1 << (20 + i),
                                 10.0 * (i + 1),
                                 0,
                                 k <= MEMBW_MEMCPY ? 0 : -1,
                                 0};
            w.gbps = bench_membw_moved(w.kind, w.bytes) / (w.time_us * 1e-6) / 1e9;
            bench_membw_result_add(r, &w);
        }
}

static void test_json(void **state) {
    (void)state;
    bench_membw_result r;
    fill(&r);
    char sub[128], path[160];
    snprintf(sub, sizeof sub, "%s/j", dir);
    assert_int_equal(bench_membw_write(sub, &r), ZY_OK);
    snprintf(path, sizeof path, "%s/membw.json", sub);
    char *text;
    assert_int_equal(zy_read_file(path, &text, NULL), ZY_OK);
    cJSON *root = cJSON_Parse(text);
    free(text);
    assert_non_null(root);
    const cJSON *rows = cJSON_GetObjectItem(root, "rows");
    assert_int_equal(cJSON_GetArraySize(rows), MEMBW_NKINDS * 3);
    const cJSON *t = cJSON_GetArrayItem(rows, 2 * 3 + 1); /* triad, 2 MiB, 20 us */
    assert_string_equal(cJSON_GetObjectItem(t, "kind")->valuestring, "triad");
    assert_true(cJSON_GetObjectItem(t, "moved_bytes")->valuedouble == 3.0 * (2 << 20));
    assert_true(cJSON_GetObjectItem(t, "GBps")->valuedouble == 3.0 * (2 << 20) / 20e-6 / 1e9);
    cJSON_Delete(root);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    bench_membw_print(f, &r);
    fclose(f);
    assert_non_null(strstr(buf, "h2d_pageable"));
    assert_non_null(strstr(buf, "# best: copy"));
    free(buf);
    bench_membw_result_free(&r);
}

static void test_plots(void **state) {
    (void)state;
    char path[200];
    bench_membw_result r;
    fill(&r);
    snprintf(path, sizeof path, "%s/p", dir);
    assert_int_equal(bench_membw_plot(path, &r), ZY_OK);
    snprintf(path, sizeof path, "%s/p/membw_device.png", dir);
    assert_true(zy_path_exists(path));
    snprintf(path, sizeof path, "%s/p/membw_host.png", dir);
    assert_true(zy_path_exists(path));
    bench_membw_result_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bytes_moved),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_plots),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
