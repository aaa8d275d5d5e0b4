/* Tests of `zayac bench` as a program (through ZAYAC_BIN): without a GPU each benchmark says so
 * in one line and exits non-zero; bad options are one clear error; result files are combined
 * into plots without a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/fileio.h"
#include "base/plot.h"
#include "bench/coll.h"
#include "bench/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static char dir[64];
static const char *bin;

static int setup(void **state) {
    (void)state;
    bin = getenv("ZAYAC_BIN");
    snprintf(dir, sizeof dir, "/tmp/zy_bcli_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return zy_remove_tree(dir) == ZY_OK ? 0 : -1;
}

/* Runs "zayac ARGS" with stdout and stderr captured; returns the exit code. */
static int zayac(const char *args, char **out, char **err) {
    char cmd[2048], po[128], pe[128];
    snprintf(po, sizeof po, "%s/stdout", dir);
    snprintf(pe, sizeof pe, "%s/stderr", dir);
    snprintf(cmd, sizeof cmd, "%s %s >%s 2>%s", bin, args, po, pe);
    int st = system(cmd);
    assert_int_equal(zy_read_file(po, out, NULL), ZY_OK);
    assert_int_equal(zy_read_file(pe, err, NULL), ZY_OK);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

static void test_no_gpu_is_one_line(void **state) {
    (void)state;
    if (!bin) skip();
    int n;
    if (bench_gpu_count(&n) == ZY_OK) skip(); /* a GPU is here: the GPU tests cover this */
    const char *cmds[] = {"bench collectives", "bench gemm", "bench membw",
                          "bench collectives -b 1M -e 4M"};
    for (int i = 0; i < 4; i++) {
        char *out, *err;
        int code = zayac(cmds[i], &out, &err);
        assert_true(code != 0);
        assert_string_equal(out, "");
        assert_int_equal(count_lines(err), 1);
        assert_non_null(strstr(err, "no CUDA GPU"));
        free(out);
        free(err);
    }
}

static void test_bad_options(void **state) {
    (void)state;
    if (!bin) skip();
    struct {
        const char *args, *want;
    } cases[] = {
        {"bench collectives -b 64 -e 8", "larger than"},
        {"bench collectives -f 1", "--factor"},
        {"bench collectives --ops all_reduce,gossip", "gossip"},
        {"bench collectives --dtypes fp16", "fp16"},
        {"bench collectives --placement sideways", "sideways"},
        {"bench collectives -b 4Q", "4Q"},
        {"bench collectives stray.json", "--combine"},
        {"bench gemm --presets zaya9", "zaya9"},
        {"bench gemm --shapes 12x3", "12x3"},
        {"bench gemm --algos 0", "--algos"},
        {"bench membw -b 3", "multiples of 16"},
        {"bench membw --bogus", "--bogus"},
        {"bench nope", "nope"},
        {"bench train", "--preset"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out, *err;
        int code = zayac(cases[i].args, &out, &err);
        if (code != 2 || !strstr(err, cases[i].want))
            fail_msg("'%s': exit %d, stderr: %s", cases[i].args, code, err);
        free(out);
        free(err);
    }
    char *out, *err;
    assert_int_equal(zayac("bench collectives --help", &out, &err), 0);
    assert_non_null(strstr(out, "--min-bytes")); /* --help prints to stdout */
    free(out);
    free(err);
}

static void test_combine_result_files(void **state) {
    (void)state;
    if (!bin) skip();
    char sub[128];
    snprintf(sub, sizeof sub, "%s/runs", dir);
    for (int n = 1; n <= 2; n++) {
        bench_coll_result r;
        bench_coll_result_init(&r);
        r.nranks = n;
        r.nnodes = 1;
        for (int s = 0; s < 4; s++) {
            bench_coll_row w;
            memset(&w, 0, sizeof w);
            w.coll = COLL_ALL_REDUCE, w.dtype = BENCH_BF16, w.size_bytes = (size_t)1024 << s;
            w.count = w.size_bytes / 2, w.time_us = 10, w.algbw = 1.0 * (s + 1);
            w.busbw = w.algbw * bench_coll_bus_factor(COLL_ALL_REDUCE, n), w.wrong = 0;
            bench_coll_result_add(&r, &w);
        }
        assert_int_equal(bench_coll_write(sub, &r), ZY_OK);
        bench_coll_result_free(&r);
    }
    char args[512], *out, *err;
    snprintf(args, sizeof args,
             "bench collectives --combine -o %s/plots %s/collectives_n1.json "
             "%s/collectives_n2.json",
             dir, sub, sub);
    int code = zayac(args, &out, &err);
    assert_non_null(strstr(out, "peak bus bandwidth, 2 rank(s)"));
    char path[200];
    snprintf(path, sizeof path, "%s/plots/busbw_all_reduce_bf16.png", dir);
    assert_int_equal(code, 0);
    assert_true(zy_path_exists(path));
    free(out);
    free(err);
    snprintf(args, sizeof args, "bench collectives --combine %s/missing.json", dir);
    assert_int_equal(zayac(args, &out, &err), 2); /* a missing input file: bad input */
    assert_non_null(strstr(err, "missing.json"));
    free(out);
    free(err);
    assert_int_equal(zayac("bench collectives --combine", &out, &err), 2);
    assert_non_null(strstr(err, "needs result files"));
    free(out);
    free(err);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_gpu_is_one_line),
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test(test_combine_result_files),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
