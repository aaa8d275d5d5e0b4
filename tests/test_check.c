/* The error contract: the kinds of recorded errors and the exit statuses they call for, the TRY /
 * CHECK / NOTE tiers of base/check.h (a CHECK failure ends the process with status 1 and a message
 * naming the call, rank and step; ZY_CHECK aborts), and the kinds file writes report. */
#include "base/check.h"
#include "base/err.h"
#include "base/fileio.h"

#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#ifdef ZY_HAVE_CUDA
#include <cuda_runtime.h>
#endif

/* A stand-in library: status 0 is success, anything else a failure with a description. */
static int fake_call(int status) {
    return status;
}
static const char *fake_describe(int status) {
    return status == 7 ? "the fake device was lost" : "some other fake failure";
}
#define FAKE_TRY(expr)      ZY_LIB_TRY(int, 0, fake_describe, #expr, expr)
#define FAKE_CHECK(expr)    ZY_LIB_CHECK(int, 0, fake_describe, #expr, expr)
#define FAKE_NOTE(st, expr) ZY_LIB_NOTE(st, int, 0, fake_describe, #expr, expr)

static int try_fake(int status) {
    FAKE_TRY(fake_call(status));
    return ZY_OK;
}

/* Runs fn in a child whose stderr goes to a file and asserts that the child ended with code (an
 * exit status, or -signal) and that its stderr holds every string of the NULL-terminated list. */
static void assert_child_ends(void (*fn)(void), int code, ...) {
    char path[] = "/tmp/zy_check_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fd, 2);
        signal(SIGABRT, SIG_DFL); /* the test runner's handlers must not hide the abort */
        fn();
        _exit(99); /* fn returned: the check did not end the process */
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_int_equal(WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status), code);
    char *err = NULL;
    assert_int_equal(zy_read_file(path, &err, NULL), ZY_OK);
    close(fd);
    unlink(path);
    va_list ap;
    va_start(ap, code);
    for (const char *want; (want = va_arg(ap, const char *)) != NULL;) {
        if (!strstr(err, want)) fail_msg("stderr \"%s\" lacks \"%s\"", err, want);
    }
    va_end(ap);
    free(err);
}

/* Each child names rank 3, step 12, then fails one check. */
static void child_lib_check(void) {
    zy_err_set_rank(3);
    zy_err_set_step(12);
    FAKE_CHECK(fake_call(7));
}
static void child_status_check(void) {
    zy_err_set_rank(3);
    zy_err_set_step(12);
    ZY_STATUS_CHECK(zy_fail_runtime("gemm plan: no algorithm"));
}
static void child_invariant(void) {
    zy_err_set_rank(3);
    zy_err_set_step(12);
    int rows = 2;
    ZY_CHECK(rows == 5);
}

static void test_check_tier_exits_runtime_naming_call_rank_step(void **state) {
    assert_child_ends(child_lib_check, ZY_EXIT_RUNTIME, "fake_call(7)", "the fake device was lost",
                      "rank 3", "step 12", "test_check.c:", NULL);
}

static void test_status_check_exits_runtime_with_recorded_message(void **state) {
    assert_child_ends(child_status_check, ZY_EXIT_RUNTIME, "zy_fail_runtime(",
                      "gemm plan: no algorithm", "rank 3", "step 12", NULL);
}

static void test_zy_check_aborts_naming_rank_step(void **state) {
    assert_child_ends(child_invariant, -SIGABRT, "rows == 5", "rank 3", "step 12", NULL);
}

static void test_try_tier_records_runtime(void **state) {
    zy_err_clear();
    assert_int_equal(try_fake(0), ZY_OK);
    assert_int_equal(try_fake(7), ZY_ERR);
    assert_int_equal(zy_err_exit_status(), ZY_EXIT_RUNTIME);
    assert_non_null(strstr(zy_errmsg(), "test_check.c:"));
    assert_non_null(strstr(zy_errmsg(), "fake_call(status) failed: the fake device was lost"));
}

static void test_note_keeps_first_failure(void **state) {
    zy_err_clear();
    int st = ZY_OK;
    FAKE_NOTE(st, fake_call(0));
    assert_int_equal(st, ZY_OK);
    FAKE_NOTE(st, fake_call(7));
    FAKE_NOTE(st, fake_call(8));
    assert_int_equal(st, ZY_ERR);
    assert_int_equal(zy_err_exit_status(), ZY_EXIT_RUNTIME);
    assert_non_null(strstr(zy_errmsg(), "fake_call(7)"));
    assert_null(strstr(zy_errmsg(), "fake_call(8)"));
}

static void test_kinds_and_exit_statuses(void **state) {
    assert_int_equal(zy_fail("config.json: bad"), ZY_ERR);
    assert_int_equal(zy_err_exit_status(), ZY_EXIT_INPUT);
    assert_int_equal(zy_fail_ctx("loading"), ZY_ERR);
    assert_int_equal(zy_err_exit_status(), ZY_EXIT_INPUT);
    assert_string_equal(zy_errmsg(), "loading: config.json: bad");

    assert_int_equal(zy_fail_runtime("write failed"), ZY_ERR);
    assert_int_equal(zy_err_exit_status(), ZY_EXIT_RUNTIME);
    assert_int_equal(zy_fail_ctx("saving step %d", 4), ZY_ERR);
    assert_int_equal(zy_err_exit_status(), ZY_EXIT_RUNTIME);
    assert_string_equal(zy_errmsg(), "saving step 4: write failed");

    zy_err_clear();
    assert_string_equal(zy_errmsg(), "");
    assert_int_equal(zy_err_exit_status(), ZY_EXIT_INPUT);
}

/* A scratch folder holding a regular file "plain". */
static void scratch(char *dir, char *plain, size_t n) {
    strcpy(dir, "/tmp/zy_check_XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(plain, n, "%s/plain", dir);
    assert_int_equal(zy_write_file_atomic(plain, "x", 1), ZY_OK);
}

static void test_file_kinds(void **state) {
    char dir[64], plain[128], path[256];
    scratch(dir, plain, sizeof plain);

    /* a missing input file: bad input */
    char *text = NULL;
    snprintf(path, sizeof path, "%s/missing.json", dir);
    assert_int_equal(zy_read_file(path, &text, NULL), ZY_ERR);
    assert_int_equal(zy_err_exit_status(), ZY_EXIT_INPUT);

    /* a path through a regular file: the path is wrong, retrying cannot help */
    snprintf(path, sizeof path, "%s/sub/out.bin", plain);
    assert_int_equal(zy_write_file_atomic(path, "y", 1), ZY_ERR);
    assert_int_equal(zy_err_exit_status(), ZY_EXIT_INPUT);
    assert_non_null(strstr(zy_errmsg(), plain));
    assert_int_equal(zy_mkdirs(path), ZY_ERR);
    assert_int_equal(zy_err_exit_status(), ZY_EXIT_INPUT);

    /* a write that runs out of space (/dev/full answers every write with ENOSPC): runtime */
    zy_atomic_file f;
    f.fd = open("/dev/full", O_WRONLY);
    assert_true(f.fd >= 0);
    snprintf(f.path, sizeof f.path, "%s/full.bin", dir);
    snprintf(f.tmp, sizeof f.tmp, "%s/full.bin.tmp", dir); /* never created: abort's unlink fails */
    assert_int_equal(zy_atomic_write(&f, "z", 1), ZY_ERR);
    assert_int_equal(zy_err_exit_status(), ZY_EXIT_RUNTIME);
    assert_non_null(strstr(zy_errmsg(), "write failed"));

    assert_int_equal(zy_remove_tree(dir), ZY_OK);
}

#ifdef ZY_HAVE_CUDA
static int set_bad_device(void) {
    ZY_CUDA_TRY(cudaSetDevice(99999)); /* no such device, with or without a GPU */
    return ZY_OK;
}

static void test_cuda_try_records_runtime(void **state) {
    zy_err_clear();
    assert_int_equal(set_bad_device(), ZY_ERR);
    assert_int_equal(zy_err_exit_status(), ZY_EXIT_RUNTIME);
    assert_non_null(strstr(zy_errmsg(), "cudaSetDevice(99999) failed: "));
}
#endif

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_tier_exits_runtime_naming_call_rank_step),
        cmocka_unit_test(test_status_check_exits_runtime_with_recorded_message),
        cmocka_unit_test(test_zy_check_aborts_naming_rank_step),
        cmocka_unit_test(test_try_tier_records_runtime),
        cmocka_unit_test(test_note_keeps_first_failure),
        cmocka_unit_test(test_kinds_and_exit_statuses),
        cmocka_unit_test(test_file_kinds),
#ifdef ZY_HAVE_CUDA
        cmocka_unit_test(test_cuda_try_records_runtime),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
