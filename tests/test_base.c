/* Tests of src/base: RNG replay and statistics, atomic writes, error messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/crc32c.h"
#include "base/err.h"
#include "base/fileio.h"
#include "base/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void test_rng_replay(void **state) {
    (void)state;
    zy_rng a = zy_rng_init(42, 7);
    for (int i = 0; i < 100; i++) zy_rng_u64(&a);
    zy_rng b = a; /* restoring (seed, stream, counter) replays the same values */
    for (int i = 0; i < 10; i++) assert_true(zy_rng_u64(&a) == zy_rng_u64(&b));
    assert_true(zy_rng_at(42, 7, 5) != zy_rng_at(42, 8, 5));
    assert_true(zy_rng_at(42, 7, 5) != zy_rng_at(43, 7, 5));
}

static void test_rng_normal_moments(void **state) {
    (void)state;
    zy_rng r = zy_rng_init(1, 0);
    double s = 0, s2 = 0;
    int n = 200000;
    for (int i = 0; i < n; i++) {
        double x = zy_rng_normal(&r);
        s += x;
        s2 += x * x;
    }
    double mean = s / n, var = s2 / n - mean * mean;
    assert_true(fabs(mean) < 0.01);
    assert_true(fabs(var - 1.0) < 0.02);
    int hist[10] = {0};
    for (int i = 0; i < n; i++) hist[zy_rng_below(&r, 10)]++;
    for (int i = 0; i < 10; i++) assert_true(abs(hist[i] - n / 10) < n / 100);
}

/* Bit-at-a-time CRC-32C (reflected Castagnoli polynomial), the definition. */
static uint32_t crc_by_bits(uint32_t crc, const uint8_t *p, size_t n) {
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
    }
    return ~crc;
}

/* zy_crc32c (the SSE4.2 instruction on x86-64) and its table form agree with the definition on
 * every length and alignment, continued across pieces, and give the standard check value. */
static void test_crc32c(void **state) {
    (void)state;
    assert_int_equal(zy_crc32c(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(zy_crc32c_portable(0, "123456789", 9), 0xE3069283u);
    uint8_t buf[600];
    zy_rng r = zy_rng_init(3, 0);
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)zy_rng_below(&r, 256);
    for (size_t off = 0; off < 9; off++)
        for (size_t n = 0; n + off <= sizeof buf; n += 1 + n / 8) {
            const uint32_t want = crc_by_bits(0, buf + off, n);
            assert_int_equal(zy_crc32c(0, buf + off, n), want);
            assert_int_equal(zy_crc32c_portable(0, buf + off, n), want);
            const size_t half = n / 3;
            assert_int_equal(zy_crc32c(zy_crc32c(0, buf + off, half), buf + off + half, n - half),
                             want);
        }
}

static void test_atomic_write_and_read(void **state) {
    (void)state;
    char dir[] = "/tmp/zy_test_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/a/b/file.txt", dir);
    char sub[256];
    snprintf(sub, sizeof sub, "%s/a/b", dir);
    assert_int_equal(zy_mkdirs(sub), ZY_OK);
    assert_int_equal(zy_write_file_atomic(path, "hello", 5), ZY_OK);
    assert_int_equal(zy_write_file_atomic(path, "world!", 6), ZY_OK);
    char *text;
    size_t len;
    assert_int_equal(zy_read_file(path, &text, &len), ZY_OK);
    assert_int_equal(len, 6);
    assert_string_equal(text, "world!");
    free(text);
    assert_int_equal(zy_remove_tree(dir), ZY_OK);
    assert_false(zy_path_exists(dir));
}

static void test_missing_file_error_names_path(void **state) {
    (void)state;
    char *text;
    assert_int_equal(zy_read_file("/nonexistent/zy.json", &text, NULL), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "/nonexistent/zy.json"));
    zy_fail_ctx("loading model");
    assert_true(strncmp(zy_errmsg(), "loading model: /nonexistent", 27) == 0);
}

/* The two fatal ends, in a child each: the message on stderr with the call's name, and the exit
 * status that tells a supervisor whether to retry (1) or not (2). */
static int fatal_child_status(int input, const char *err_path) {
    const pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(err_path, "w", stderr)) _exit(99);
        zy_err_set_step(7);
        if (input) zy_fatal_input_at("here.c", 12, "cuda.attention = cudnn", "shape %d", 3);
        zy_fatal_runtime_at("here.c", 12, "cudaMalloc", "out of %s", "memory");
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    return WEXITSTATUS(st);
}

static void test_fatal_exit_statuses(void **state) {
    (void)state;
    char path[] = "/tmp/zy_fatal_XXXXXX";
    const int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char *text;
    assert_int_equal(fatal_child_status(1, path), ZY_EXIT_INPUT);
    assert_int_equal(zy_read_file(path, &text, NULL), ZY_OK);
    assert_non_null(strstr(text, "step 7"));
    assert_non_null(strstr(text, "here.c:12: cuda.attention = cudnn: shape 3"));
    free(text);
    assert_int_equal(fatal_child_status(0, path), ZY_EXIT_RUNTIME);
    assert_int_equal(zy_read_file(path, &text, NULL), ZY_OK);
    assert_non_null(strstr(text, "cudaMalloc: out of memory"));
    free(text);
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rng_replay),
        cmocka_unit_test(test_rng_normal_moments),
        cmocka_unit_test(test_crc32c),
        cmocka_unit_test(test_atomic_write_and_read),
        cmocka_unit_test(test_missing_file_error_names_path),
        cmocka_unit_test(test_fatal_exit_statuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
