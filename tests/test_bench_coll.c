/* Tests of src/bench/coll.c and util.c (no GPU): nccl-tests' size conventions and bandwidth
 * definitions against hand-computed values, size parsing and sweeps, the table, the result
 * files (round trip, and a clear error for each kind of bad file), and the plot series. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/fileio.h"
#include "bench/coll.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char dir[64];

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/zy_coll_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return zy_remove_tree(dir) == ZY_OK ? 0 : -1;
}

static void test_bus_factors(void **state) {
    (void)state;
    /* 2(n-1)/n, (n-1)/n and 1, written out for n = 1, 2, 4, 8 */
    const double ar[] = {0, 1, 1.5, 1.75}, part[] = {0, 0.5, 0.75, 0.875};
    const int ns[] = {1, 2, 4, 8};
    for (int i = 0; i < 4; i++) {
        assert_true(bench_coll_bus_factor(COLL_ALL_REDUCE, ns[i]) == ar[i]);
        assert_true(bench_coll_bus_factor(COLL_REDUCE_SCATTER, ns[i]) == part[i]);
        assert_true(bench_coll_bus_factor(COLL_ALL_GATHER, ns[i]) == part[i]);
        assert_true(bench_coll_bus_factor(COLL_ALL_TO_ALL, ns[i]) == part[i]);
        assert_true(bench_coll_bus_factor(COLL_BROADCAST, ns[i]) == 1.0);
    }
}

static void test_counts_follow_nccl_tests(void **state) {
    (void)state;
    bench_coll_counts c;
    /* all-gather, 1000 B of fp32 on 3 ranks: 250 elements, 83 per rank, rounded down to a
     * multiple of 4 (16 bytes) = 80; receive 240; printed size 960 B */
    bench_coll_counts_for(COLL_ALL_GATHER, 1000, 4, 3, &c);
    assert_int_equal(c.count, 80);
    assert_int_equal(c.send_count, 80);
    assert_int_equal(c.recv_count, 240);
    assert_int_equal(c.send_inplace_off, 80);
    assert_int_equal(c.recv_inplace_off, 0);
    assert_int_equal(c.size_bytes, 960);
    /* reduce-scatter, 1 MiB of bf16 on 4 ranks: 131072 out of 524288 */
    bench_coll_counts_for(COLL_REDUCE_SCATTER, 1 << 20, 2, 4, &c);
    assert_int_equal(c.count, 131072);
    assert_int_equal(c.send_count, 524288);
    assert_int_equal(c.recv_count, 131072);
    assert_int_equal(c.recv_inplace_off, 131072);
    assert_int_equal(c.size_bytes, 1 << 20);
    /* 8 B of bf16 split over 2 ranks: 2 elements each, rounded down to 8 = 0 */
    bench_coll_counts_for(COLL_ALL_GATHER, 8, 2, 2, &c);
    assert_int_equal(c.count, 0);
    assert_int_equal(c.size_bytes, 0);
    /* all-reduce and broadcast keep the whole count */
    bench_coll_counts_for(COLL_ALL_REDUCE, 8, 4, 8, &c);
    assert_int_equal(c.count, 2);
    assert_int_equal(c.size_bytes, 8);
    bench_coll_counts_for(COLL_BROADCAST, 6, 2, 8, &c);
    assert_int_equal(c.count, 3);
    assert_int_equal(c.size_bytes, 6);
    /* all-to-all, 96 B fp32 on 2 ranks: 12 per peer, 24 sent and received */
    bench_coll_counts_for(COLL_ALL_TO_ALL, 96, 4, 2, &c);
    assert_int_equal(c.count, 12);
    assert_int_equal(c.send_count, 24);
    assert_int_equal(c.recv_count, 24);
    assert_int_equal(c.size_bytes, 96);
}

static void test_bandwidths(void **state) {
    (void)state;
    double alg, bus;
    /* all-reduce of 2^20 fp32 in 1 ms on 2 ranks: 4194304 B / 1e9 / 1e-3 = 4.194304 GB/s */
    bench_coll_bw(COLL_ALL_REDUCE, 1 << 20, 4, 1e-3, 2, &alg, &bus);
    assert_true(fabs(alg - 4.194304) < 1e-9);
    assert_true(fabs(bus - 4.194304) < 1e-9);
    /* all-gather of 1000 bf16 per rank on 4 ranks in 1 us: 8000 B -> 8 GB/s, bus 6 GB/s */
    bench_coll_bw(COLL_ALL_GATHER, 1000, 2, 1e-6, 4, &alg, &bus);
    assert_true(fabs(alg - 8.0) < 1e-9);
    assert_true(fabs(bus - 6.0) < 1e-9);
    /* broadcast: bus = alg; all-reduce on 1 rank: bus = 0 (as nccl-tests prints) */
    bench_coll_bw(COLL_BROADCAST, 500, 4, 1e-6, 8, &alg, &bus);
    assert_true(fabs(alg - 2.0) < 1e-9 && fabs(bus - 2.0) < 1e-9);
    bench_coll_bw(COLL_ALL_REDUCE, 500, 4, 1e-6, 1, &alg, &bus);
    assert_true(fabs(alg - 2.0) < 1e-9 && bus == 0);
}

static void test_sizes_and_parsing(void **state) {
    (void)state;
    size_t *v, b;
    int n;
    assert_int_equal(bench_sizes(8, 64, 2, &v, &n), ZY_OK);
    assert_int_equal(n, 4);
    assert_int_equal(v[0], 8);
    assert_int_equal(v[3], 64);
    free(v);
    assert_int_equal(bench_sizes(8, 100, 4, &v, &n), ZY_OK);
    assert_int_equal(n, 2);
    assert_int_equal(v[1], 32);
    free(v);
    assert_int_equal(bench_sizes(8, (size_t)4 << 30, 2, &v, &n), ZY_OK);
    assert_int_equal(n, 30); /* 8 B .. 4 GB, the sweep */
    assert_int_equal(v[29], (size_t)4 << 30);
    free(v);
    assert_int_equal(bench_sizes(64, 8, 2, &v, &n), ZY_ERR);
    assert_int_equal(bench_sizes(8, 64, 1, &v, &n), ZY_ERR);
    assert_int_equal(bench_sizes(0, 64, 2, &v, &n), ZY_ERR);
    assert_int_equal(bench_parse_bytes("8", &b), ZY_OK);
    assert_int_equal(b, 8);
    assert_int_equal(bench_parse_bytes("64K", &b), ZY_OK);
    assert_int_equal(b, 65536);
    assert_int_equal(bench_parse_bytes("1MB", &b), ZY_OK);
    assert_int_equal(b, 1048576);
    assert_int_equal(bench_parse_bytes("4G", &b), ZY_OK);
    assert_int_equal(b, (size_t)4294967296ull);
    assert_int_equal(bench_parse_bytes("x", &b), ZY_ERR);
    assert_int_equal(bench_parse_bytes("4Q", &b), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "4Q"));
    assert_int_equal(bench_parse_bytes("-1", &b), ZY_ERR);
    char buf[32];
    bench_format_bytes((size_t)4 << 30, buf, sizeof buf);
    assert_string_equal(buf, "4G");
    bench_format_bytes(1536, buf, sizeof buf);
    assert_string_equal(buf, "1536B");
    bench_coll_kind k;
    assert_int_equal(bench_coll_parse("all-reduce", &k), ZY_OK);
    assert_int_equal(k, COLL_ALL_REDUCE);
    assert_int_equal(bench_coll_parse("allgather", &k), ZY_OK);
    assert_int_equal(k, COLL_ALL_GATHER);
    assert_int_equal(bench_coll_parse("all_to_all", &k), ZY_OK);
    assert_int_equal(k, COLL_ALL_TO_ALL);
    assert_int_equal(bench_coll_parse("reduce", &k), ZY_ERR);
    bench_dtype t;
    assert_int_equal(bench_dtype_parse("bfloat16", &t), ZY_OK);
    assert_int_equal(t, BENCH_BF16);
    assert_int_equal(bench_dtype_parse("fp16", &t), ZY_ERR);
}

static bench_coll_row row(bench_coll_kind k, bench_dtype t, int inplace, size_t size, double busbw,
                          int64_t wrong) {
    bench_coll_row w;
    memset(&w, 0, sizeof w);
    w.coll = k, w.dtype = t, w.inplace = inplace, w.size_bytes = size, w.count = size / 2;
    w.time_us = 1.25, w.algbw = busbw / 2, w.busbw = busbw, w.wrong = wrong;
    return w;
}

static void make_result(bench_coll_result *r, int nranks) {
    bench_coll_result_init(r);
    r->nranks = nranks;
    r->nnodes = 1;
    r->iters = 20, r->warmup = 5;
    snprintf(r->machine.gpu, sizeof r->machine.gpu, "NVIDIA H200");
    r->machine.sm_count = 132;
    bench_coll_row rows[] = {
        row(COLL_ALL_REDUCE, BENCH_BF16, 0, 0, 0, 0),
        row(COLL_ALL_REDUCE, BENCH_BF16, 0, 1024, 10.5 * nranks, 0),
        row(COLL_ALL_REDUCE, BENCH_BF16, 1, 1024, 11.0 * nranks, 0),
        row(COLL_ALL_REDUCE, BENCH_BF16, 0, 2048, 20.25 * nranks, 0),
        row(COLL_ALL_GATHER, BENCH_FP32, 0, 4096, 33.0, -1),
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) bench_coll_result_add(r, &rows[i]);
}

static void test_result_round_trip(void **state) {
    (void)state;
    bench_coll_result a, b;
    make_result(&a, 2);
    char sub[128], path[160];
    snprintf(sub, sizeof sub, "%s/rt", dir);
    assert_int_equal(bench_coll_write(sub, &a), ZY_OK);
    snprintf(path, sizeof path, "%s/collectives_n2.json", sub);
    assert_int_equal(bench_coll_read(path, &b), ZY_OK);
    assert_int_equal(b.nranks, 2);
    assert_int_equal(b.iters, 20);
    assert_int_equal(b.nrows, a.nrows);
    assert_string_equal(b.machine.gpu, "NVIDIA H200");
    assert_int_equal(b.machine.sm_count, 132);
    for (int i = 0; i < a.nrows; i++) {
        assert_int_equal(b.rows[i].coll, a.rows[i].coll);
        assert_int_equal(b.rows[i].dtype, a.rows[i].dtype);
        assert_int_equal(b.rows[i].inplace, a.rows[i].inplace);
        assert_int_equal(b.rows[i].size_bytes, a.rows[i].size_bytes);
        assert_true(b.rows[i].busbw == a.rows[i].busbw);
        assert_int_equal(b.rows[i].wrong, a.rows[i].wrong);
    }
    /* CSV: a header and one line per row */
    char *csv;
    snprintf(path, sizeof path, "%s/collectives_n2.csv", sub);
    assert_int_equal(zy_read_file(path, &csv, NULL), ZY_OK);
    int lines = 0;
    for (char *p = csv; *p; p++) lines += *p == '\n';
    assert_int_equal(lines, a.nrows + 1);
    assert_non_null(strstr(csv, "all_reduce,bf16,2,1,in-place,1024,512,1.250,11.0000,22.0000,0"));
    free(csv);
    bench_coll_result_free(&a);
    bench_coll_result_free(&b);
}

/* Writes text to dir/name and returns bench_coll_read's status on it. */
static int read_text(const char *name, const char *text) {
    char path[160];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    assert_int_equal(zy_write_file_atomic(path, text, strlen(text)), ZY_OK);
    bench_coll_result r;
    int rc = bench_coll_read(path, &r);
    if (rc == ZY_OK)
        bench_coll_result_free(&r);
    else
        assert_non_null(strstr(zy_errmsg(), name)); /* the message names the file */
    return rc;
}

static void test_bad_result_files(void **state) {
    (void)state;
    bench_coll_result r;
    assert_int_equal(bench_coll_read("/nonexistent/c.json", &r), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "/nonexistent/c.json"));
    assert_int_equal(read_text("notjson.json", "rows: 1"), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "not valid JSON"));
    assert_int_equal(read_text("trunc.json", "{\"bench\": \"collectives\", \"nranks\": 2, \"ro"),
                     ZY_ERR);
    assert_int_equal(read_text("kind.json", "{\"bench\": \"gemm\", \"nranks\": 2, \"rows\": []}"),
                     ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "not a collectives result"));
    assert_int_equal(read_text("norows.json", "{\"bench\": \"collectives\", \"nranks\": 2}"),
                     ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "rows"));
    assert_int_equal(read_text("ranks.json", "{\"bench\": \"collectives\", \"nranks\": 0, "
                                             "\"rows\": []}"),
                     ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "nranks"));
    const char *badrow =
        "{\"bench\": \"collectives\", \"nranks\": 2, \"rows\": ["
        "{\"collective\": \"all_reduce\", \"dtype\": \"bf16\", \"placement\": \"in-place\", "
        "\"size_bytes\": 8, \"count\": 4, \"time_us\": 1, \"algbw_GBps\": 1, \"busbw_GBps\": 1, "
        "\"wrong\": 0},"
        "{\"collective\": \"all_reduce\", \"dtype\": \"bf16\", \"placement\": \"in-place\", "
        "\"size_bytes\": 8, \"count\": 4, \"time_us\": 1, \"algbw_GBps\": 1, \"busbw_GBps\": "
        "\"x\", "
        "\"wrong\": 0}]}";
    assert_int_equal(read_text("badrow.json", badrow), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "rows[1].busbw_GBps"));
    const char *badcoll = "{\"bench\": \"collectives\", \"nranks\": 2, \"rows\": ["
                          "{\"collective\": \"reduce\", \"dtype\": \"bf16\"}]}";
    assert_int_equal(read_text("badcoll.json", badcoll), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "rows[0]"));
    assert_non_null(strstr(zy_errmsg(), "reduce"));
    const char *good = "{\"bench\": \"collectives\", \"nranks\": 1, \"rows\": []}";
    assert_int_equal(read_text("empty.json", good), ZY_OK);
}

static void test_series_one_line_per_gpu_count(void **state) {
    (void)state;
    bench_coll_result res[2];
    make_result(&res[0], 1);
    make_result(&res[1], 8);
    res[1].nnodes = 2;
    zy_series s[2];
    char labels[2][64];
    int ns = bench_coll_series(res, 2, COLL_ALL_REDUCE, BENCH_BF16, 0, s, labels);
    assert_int_equal(ns, 2);
    assert_string_equal(s[0].label, "1 GPU");
    assert_string_equal(s[1].label, "8 GPUs, 2 nodes");
    assert_int_equal(s[0].n, 2); /* the 0-byte row is left out; in-place is another series */
    assert_true(s[0].x[0] == 1024 && s[0].x[1] == 2048);
    assert_true(s[1].y[0] == 10.5 * 8 && s[1].y[1] == 20.25 * 8);
    bench_coll_series_free(s, ns);
    assert_int_equal(bench_coll_series(res, 2, COLL_BROADCAST, BENCH_BF16, 0, s, labels), 0);
    bench_coll_result_free(&res[0]);
    bench_coll_result_free(&res[1]);
}

static void test_plot_files(void **state) {
    (void)state;
    bench_coll_result res[2];
    make_result(&res[0], 1);
    make_result(&res[1], 2);
    char sub[128], path[200];
    snprintf(sub, sizeof sub, "%s/plots", dir);
    assert_int_equal(bench_coll_plot(sub, res, 2), ZY_OK);
    const char *want[] = {"busbw_all_reduce_bf16.png", "busbw_all_gather_fp32.png"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", sub, want[i]);
        char *png;
        size_t len;
        assert_int_equal(zy_read_file(path, &png, &len), ZY_OK);
        assert_true(len > 8 && memcmp(png, "\x89PNG\r\n\x1a\n", 8) == 0);
        free(png);
    }
    snprintf(path, sizeof path, "%s/busbw_broadcast_bf16.png", sub);
    assert_false(zy_path_exists(path)); /* no data, no plot */
    bench_coll_result_free(&res[0]);
    bench_coll_result_free(&res[1]);
}

static void test_table_lines(void **state) {
    (void)state;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    bench_coll_row out = row(COLL_ALL_REDUCE, BENCH_BF16, 0, 1048576, 123.456, 0);
    bench_coll_row in = row(COLL_ALL_REDUCE, BENCH_BF16, 1, 1048576, 120.0, -1);
    bench_coll_print_header(f, COLL_ALL_REDUCE, BENCH_BF16, 2);
    bench_coll_print_line(f, &out, &in);
    bench_coll_print_line(f, NULL, &in);
    bench_coll_result r;
    make_result(&r, 2);
    bench_coll_print_summary(f, &r);
    fclose(f);
    assert_non_null(strstr(buf, "out-of-place"));
    assert_non_null(strstr(buf, "1048576"));
    assert_non_null(strstr(buf, "bfloat16"));
    assert_non_null(strstr(buf, "sum"));
    assert_non_null(strstr(buf, "123.46"));
    assert_non_null(strstr(buf, "N/A"));
    assert_non_null(strstr(buf, "40.50 GB/s at 2K")); /* the all-reduce peak of make_result */
    free(buf);
    bench_coll_result_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bus_factors),
        cmocka_unit_test(test_counts_follow_nccl_tests),
        cmocka_unit_test(test_bandwidths),
        cmocka_unit_test(test_sizes_and_parsing),
        cmocka_unit_test(test_result_round_trip),
        cmocka_unit_test(test_bad_result_files),
        cmocka_unit_test(test_series_one_line_per_gpu_count),
        cmocka_unit_test(test_plot_files),
        cmocka_unit_test(test_table_lines),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
