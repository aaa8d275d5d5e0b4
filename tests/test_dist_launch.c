/* Tests of src/dist/launch.c and `zayac launch`: the rank variables each process sees, and the
 * failure handling (a failing or killed rank stops the others and its exit code is returned;
 * a rank that ignores SIGTERM is killed after the grace period; a stop request stops all). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/fileio.h"
#include "base/timer.h"
#include "dist/launch.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char dir[64];

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/zy_launch_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return zy_remove_tree(dir) == ZY_OK ? 0 : -1;
}

/* Runs `sh -c script` as n ranks; returns the launcher's exit code. */
static int launch_sh(int n, const char *script, double grace, volatile sig_atomic_t *stop,
                     double *elapsed) {
    dist_launch_opts o;
    memset(&o, 0, sizeof o);
    o.nprocs = n;
    o.master_port = 4321;
    o.grace_s = grace;
    o.stop_signal = stop;
    char *argv[] = {"sh", "-c", (char *)script, NULL};
    int code = -1;
    double t0 = zy_now();
    assert_int_equal(dist_launch(&o, argv, &code), ZY_OK);
    if (elapsed) *elapsed = zy_now() - t0;
    return code;
}

static void test_rank_variables(void **state) {
    (void)state;
    char script[512];
    snprintf(script, sizeof script,
             "echo \"$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT\" "
             "> %s/out.$RANK",
             dir);
    assert_int_equal(launch_sh(3, script, 5, NULL, NULL), 0);
    for (int r = 0; r < 3; r++) {
        char path[128], want[128], *text;
        snprintf(path, sizeof path, "%s/out.%d", dir, r);
        assert_int_equal(zy_read_file(path, &text, NULL), ZY_OK);
        snprintf(want, sizeof want, "%d 3 %d 3 127.0.0.1 4321\n", r, r);
        assert_string_equal(text, want);
        free(text);
    }
}

static void test_failing_rank_stops_the_others(void **state) {
    (void)state;
    char script[512];
    /* rank 1 fails after 0.2 s; the others would write a file after 20 s */
    snprintf(script, sizeof script,
             "if [ $RANK = 1 ]; then sleep 0.2; exit 7; fi; sleep 20; touch %s/late.$RANK", dir);
    double t;
    assert_int_equal(launch_sh(3, script, 5, NULL, &t), 7);
    assert_true(t < 10);
    char path[128];
    snprintf(path, sizeof path, "%s/late.0", dir);
    assert_false(zy_path_exists(path));
}

static void test_killed_rank_reports_its_signal(void **state) {
    (void)state;
    double t;
    assert_int_equal(launch_sh(2, "if [ $RANK = 0 ]; then kill -9 $$; fi; sleep 20", 5, NULL, &t),
                     128 + 9);
    assert_true(t < 10);
}

static void test_rank_ignoring_sigterm_is_killed_after_grace(void **state) {
    (void)state;
    double t;
    /* rank 0 fails after 0.5 s, once rank 1 surely ignores SIGTERM; rank 1 then needs SIGKILL,
     * which comes after the 1 s grace */
    int code = launch_sh(2, "if [ $RANK = 0 ]; then sleep 0.5; exit 4; fi; trap '' TERM; sleep 20",
                         1, NULL, &t);
    assert_int_equal(code, 4);
    assert_true(t >= 1.4 && t < 8);
}

static void test_stop_request_stops_all(void **state) {
    (void)state;
    volatile sig_atomic_t stop = SIGTERM; /* as if the launcher had received SIGTERM */
    double t;
    assert_int_equal(launch_sh(2, "sleep 20", 5, &stop, &t), 128 + SIGTERM);
    assert_true(t < 10);
}

static volatile sig_atomic_t late_stop;

/* The launcher's signal handler, 0.5 s after the ranks started (they have set their traps). */
static void *raise_stop_later(void *arg) {
    (void)arg;
    struct timespec ts = {0, 500 * 1000000L};
    nanosleep(&ts, NULL);
    late_stop = SIGTERM;
    return NULL;
}

/* The launcher's stop signal reaches every rank, which (like zayac train) finish, save and exit 3:
 * none is killed for it, and the launcher exits 3. */
static void test_stop_request_lets_ranks_save(void **state) {
    (void)state;
    late_stop = 0;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, raise_stop_later, NULL), 0);
    char script[512];
    snprintf(script, sizeof script,
             "trap 'sleep 1; touch %s/saved.$RANK; exit 3' TERM; sleep 20 & wait", dir);
    double t;
    assert_int_equal(launch_sh(2, script, 0.2, &late_stop, &t), 3);
    pthread_join(th, NULL);
    assert_true(t >= 1.4 && t < 10);
    for (int r = 0; r < 2; r++) {
        char path[128];
        snprintf(path, sizeof path, "%s/saved.%d", dir, r);
        assert_true(zy_path_exists(path));
    }
}

/* A rank that stops on request (exit 3) is not a failure: the others go on to their own stop. */
static void test_rank_stopping_first_is_not_a_failure(void **state) {
    (void)state;
    char script[512];
    snprintf(script, sizeof script,
             "if [ $RANK = 1 ]; then sleep 1; touch %s/late.$RANK; fi; exit 3", dir);
    assert_int_equal(launch_sh(2, script, 0.2, NULL, NULL), 3);
    char path[128];
    snprintf(path, sizeof path, "%s/late.1", dir);
    assert_true(zy_path_exists(path));
}

static void test_success_and_missing_program(void **state) {
    (void)state;
    assert_int_equal(launch_sh(4, "exit 0", 5, NULL, NULL), 0);
    dist_launch_opts o;
    memset(&o, 0, sizeof o);
    o.nprocs = 2;
    char *argv[] = {"/nonexistent/zayac-test-program", NULL};
    int code;
    assert_int_equal(dist_launch(&o, argv, &code), ZY_OK);
    assert_int_equal(code, 127);
    o.nprocs = 0;
    assert_int_equal(dist_launch(&o, argv, &code), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "at least 1"));
}

/* Runs a shell command line, returning its exit code. */
static int run(const char *cmd) {
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Two hosts' launchers (here both on this one): node 0 and node 1 of 2, 2 ranks each, make ranks
 * 0..3 of a world of 4 with local ranks 0..1; --nnodes without the rendezvous address is refused.
 */
static void test_two_nodes(void **state) {
    (void)state;
    const char *bin = getenv("ZAYAC_BIN");
    if (!bin) skip();
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "(%s launch -n 2 --nnodes 2 --node-rank 0 --master-addr 127.0.0.1 --master-port 4777 "
             "-- sh -c 'echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE > %s/node.$RANK' & "
             "%s launch -n 2 --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 --master-port 4777 "
             "-- sh -c 'echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE > %s/node.$RANK'; "
             "wait)",
             bin, dir, bin, dir);
    assert_int_equal(run(cmd), 0);
    for (int r = 0; r < 4; r++) {
        char path[128], want[64], *text;
        snprintf(path, sizeof path, "%s/node.%d", dir, r);
        assert_int_equal(zy_read_file(path, &text, NULL), ZY_OK);
        snprintf(want, sizeof want, "%d 4 %d 2\n", r, r % 2);
        assert_string_equal(text, want);
        free(text);
    }
    snprintf(cmd, sizeof cmd, "%s launch -n 2 --nnodes 2 --node-rank 0 -- true 2>/dev/null", bin);
    assert_int_equal(run(cmd), 2);
    snprintf(cmd, sizeof cmd,
             "%s launch -n 2 --nnodes 2 --node-rank 2 --master-addr h --master-port 1 -- true "
             "2>/dev/null",
             bin);
    assert_int_equal(run(cmd), 2);
}

static void test_cli(void **state) {
    (void)state;
    const char *bin = getenv("ZAYAC_BIN");
    if (!bin) skip();
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s launch -n 2 -- sh -c 'exit $((RANK + 4))' 2>/dev/null", bin);
    int code = run(cmd);
    assert_true(code == 4 || code == 5); /* whichever rank exits first */
    snprintf(cmd, sizeof cmd, "%s launch -n 3 --port 5555 -- sh -c 'test $MASTER_PORT = 5555'",
             bin);
    assert_int_equal(run(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s launch -- true 2>%s/err", bin, dir);
    assert_int_equal(run(cmd), 2);
    char path[128], *text;
    snprintf(path, sizeof path, "%s/err", dir);
    assert_int_equal(zy_read_file(path, &text, NULL), ZY_OK);
    assert_non_null(strstr(text, "-n N"));
    free(text);
    snprintf(cmd, sizeof cmd, "%s launch -n 2 2>/dev/null", bin);
    assert_int_equal(run(cmd), 2);
    snprintf(cmd, sizeof cmd, "%s launch -n zero -- true 2>/dev/null", bin);
    assert_int_equal(run(cmd), 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rank_variables),
        cmocka_unit_test(test_two_nodes),
        cmocka_unit_test(test_failing_rank_stops_the_others),
        cmocka_unit_test(test_killed_rank_reports_its_signal),
        cmocka_unit_test(test_rank_ignoring_sigterm_is_killed_after_grace),
        cmocka_unit_test(test_stop_request_stops_all),
        cmocka_unit_test(test_stop_request_lets_ranks_save),
        cmocka_unit_test(test_rank_stopping_first_is_not_a_failure),
        cmocka_unit_test(test_success_and_missing_program),
        cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
