/* Tests of src/dist/watchdog.c: a guarded call that outlives its deadline is reported, a peer that
 * dies during a guarded call is reported, and nothing is reported outside guarded calls. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/timer.h"
#include "dist/launch.h"
#include "dist/rdv.h"
#include "dist/watchdog.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    char msg[1200];
    double at;
    int calls;
} report;

static void on_stuck(const char *msg, void *ctx) {
    report *r = ctx;
    snprintf(r->msg, sizeof r->msg, "%s", msg);
    r->at = zy_now();
    r->calls++;
}

static void test_deadline(void **state) {
    (void)state;
    report rep = {{0}, 0, 0};
    dist_watchdog w;
    assert_int_equal(dist_watchdog_start(&w, NULL, 0.3, on_stuck, &rep), ZY_OK);
    usleep(500000); /* not inside a guarded call: nothing to report */
    assert_int_equal(rep.calls, 0);
    dist_watchdog_enter(&w, "ncclAllReduce(fake)");
    usleep(100000);
    dist_watchdog_leave(&w); /* returned in time */
    usleep(400000);
    assert_int_equal(rep.calls, 0);
    double t0 = zy_now();
    dist_watchdog_enter(&w, "ncclAllReduce(fake)");
    while (!rep.calls && zy_now() - t0 < 5) usleep(10000);
    dist_watchdog_leave(&w);
    dist_watchdog_stop(&w);
    assert_int_equal(rep.calls, 1);
    assert_true(rep.at - t0 >= 0.3 && rep.at - t0 < 2);
    assert_non_null(strstr(rep.msg, "ncclAllReduce(fake) did not return within 0 s"));
}

typedef struct {
    int port;
    int rc;
} peer_arg;

static void *short_lived_peer(void *p) {
    peer_arg *a = p;
    dist_rdv r;
    a->rc = dist_rdv_init(&r, 1, 2, "127.0.0.1", a->port, 10);
    usleep(200000);
    if (a->rc == ZY_OK) dist_rdv_free(&r); /* like a crash: the socket closes */
    return NULL;
}

static void test_dead_peer_during_guarded_call(void **state) {
    (void)state;
    int port;
    assert_int_equal(dist_free_port(&port), ZY_OK);
    peer_arg pa = {port, 0};
    pthread_t th;
    pthread_create(&th, NULL, short_lived_peer, &pa);
    dist_rdv r;
    assert_int_equal(dist_rdv_init(&r, 0, 2, "127.0.0.1", port, 10), ZY_OK);
    report rep = {{0}, 0, 0};
    dist_watchdog w;
    assert_int_equal(dist_watchdog_start(&w, &r, 30, on_stuck, &rep), ZY_OK);
    double t0 = zy_now();
    dist_watchdog_enter(&w, "ncclCommInitRankConfig");
    while (!rep.calls && zy_now() - t0 < 5) usleep(10000);
    dist_watchdog_leave(&w);
    dist_watchdog_stop(&w);
    pthread_join(th, NULL);
    assert_int_equal(pa.rc, ZY_OK);
    assert_int_equal(rep.calls, 1);
    assert_true(rep.at - t0 < 3); /* long before the 30 s deadline */
    assert_non_null(strstr(rep.msg, "during ncclCommInitRankConfig"));
    assert_non_null(strstr(rep.msg, "rank 1 closed its connection"));
    dist_rdv_free(&r);
}

static void test_no_callback_no_thread(void **state) {
    (void)state;
    dist_watchdog w;
    assert_int_equal(dist_watchdog_start(&w, NULL, 0.01, NULL, NULL), ZY_OK);
    assert_int_equal(w.running, 0);
    dist_watchdog_enter(&w, "x");
    dist_watchdog_leave(&w);
    dist_watchdog_stop(&w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deadline),
        cmocka_unit_test(test_dead_peer_during_guarded_call),
        cmocka_unit_test(test_no_callback_no_thread),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
