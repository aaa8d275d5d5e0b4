/* Tests of src/dist/rdv.c over loopback, with threads playing the ranks: the rendezvous, the
 * control operations, and every failure a real job can meet (a rank that never arrives, no
 * server, a duplicate rank, a wrong world size, a rank that dies, a stuck rank, a stray
 * connection, ranks out of step). Each failure must be an error naming the rank, never a hang. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/timer.h"
#include "dist/launch.h"
#include "dist/rdv.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef enum {
    PLAY_OPS,     /* bcast, allgather, allreduces, barrier */
    PLAY_JOIN,    /* rendezvous only, then free */
    PLAY_DIE,     /* rendezvous, then close at once (a crashed process) */
    PLAY_WATCH,   /* rendezvous, then poll check_peers until it fails (at most 5 s) */
    PLAY_SLOW,    /* rendezvous, sleep 2 s, barrier */
    PLAY_BARRIER, /* rendezvous, barrier */
    PLAY_GATHER8, /* rendezvous, allgather of 8 bytes */
} play;

typedef struct {
    int rank, world, claim_world, port;
    double timeout;
    play what;
    int rc;
    char msg[1024];
    double elapsed;
    unsigned char id[128];
    int gathered[8];
    double sum, max;
    uint64_t usum;
} rank_arg;

static void *rank_main(void *p) {
    rank_arg *a = p;
    double t0 = zy_now();
    dist_rdv r;
    int world = a->claim_world ? a->claim_world : a->world;
    a->rc = dist_rdv_init(&r, a->rank, world, "127.0.0.1", a->port, a->timeout);
    if (a->rc == ZY_OK) {
        switch (a->what) {
        case PLAY_OPS: {
            if (a->rank == 0)
                for (int i = 0; i < 128; i++) a->id[i] = (unsigned char)(i * 7 + 3);
            a->rc = dist_rdv_bcast(&r, a->id, sizeof a->id);
            int mine = a->rank * 10 + 1;
            if (a->rc == ZY_OK) a->rc = dist_rdv_allgather(&r, &mine, sizeof mine, a->gathered);
            double v[2] = {a->rank + 0.5, a->rank + 0.5};
            if (a->rc == ZY_OK) a->rc = dist_rdv_allreduce_f64(&r, v, 1, DIST_OP_SUM);
            if (a->rc == ZY_OK) a->rc = dist_rdv_allreduce_f64(&r, v + 1, 1, DIST_OP_MAX);
            a->sum = v[0], a->max = v[1];
            uint64_t u = (uint64_t)a->rank + 1;
            if (a->rc == ZY_OK) a->rc = dist_rdv_allreduce_u64(&r, &u, 1, DIST_OP_SUM);
            a->usum = u;
            if (a->rc == ZY_OK) a->rc = dist_rdv_barrier(&r);
            break;
        }
        case PLAY_DIE:
            break;
        case PLAY_WATCH: {
            double end = zy_now() + 5;
            while ((a->rc = dist_rdv_check_peers(&r)) == ZY_OK && zy_now() < end) usleep(1000);
            break;
        }
        case PLAY_SLOW:
            sleep(2);
            a->rc = dist_rdv_barrier(&r);
            break;
        case PLAY_BARRIER:
            a->rc = dist_rdv_barrier(&r);
            break;
        case PLAY_GATHER8: {
            char mine[8] = "abcdefg", all[64];
            a->rc = dist_rdv_allgather(&r, mine, 8, all);
            break;
        }
        default:
            break;
        }
        dist_rdv_free(&r);
    }
    snprintf(a->msg, sizeof a->msg, "%s", zy_errmsg());
    a->elapsed = zy_now() - t0;
    return NULL;
}

static int free_port(void) {
    int port = 0;
    assert_int_equal(dist_free_port(&port), ZY_OK);
    return port;
}

/* Runs n ranks as threads; args[i] are filled by the caller (rank, what, ...). */
static void run_ranks(rank_arg *args, int n) {
    pthread_t th[16];
    for (int i = 0; i < n; i++)
        assert_int_equal(pthread_create(&th[i], NULL, rank_main, &args[i]), 0);
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
}

static void setup(rank_arg *a, int n, int world, int port, double timeout, play what) {
    memset(a, 0, sizeof(rank_arg) * (size_t)n);
    for (int i = 0; i < n; i++) {
        a[i].rank = i;
        a[i].world = world;
        a[i].port = port;
        a[i].timeout = timeout;
        a[i].what = what;
    }
}

static void test_four_ranks_agree(void **state) {
    (void)state;
    rank_arg a[4];
    setup(a, 4, 4, free_port(), 10, PLAY_OPS);
    run_ranks(a, 4);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(a[i].rc, ZY_OK);
        for (int b = 0; b < 128; b++) assert_int_equal(a[i].id[b], (unsigned char)(b * 7 + 3));
        for (int q = 0; q < 4; q++) assert_int_equal(a[i].gathered[q], q * 10 + 1);
        assert_true(a[i].sum == 0.5 + 1.5 + 2.5 + 3.5);
        assert_true(a[i].max == 3.5);
        assert_int_equal(a[i].usum, 1 + 2 + 3 + 4);
    }
}

static void test_single_rank_needs_no_socket(void **state) {
    (void)state;
    rank_arg a[1];
    setup(a, 1, 1, 1, 1, PLAY_OPS); /* port 1 would need root to bind: it is never opened */
    run_ranks(a, 1);
    assert_int_equal(a[0].rc, ZY_OK);
    assert_int_equal(a[0].gathered[0], 1);
    assert_true(a[0].sum == 0.5);
}

static void test_missing_rank_times_out_with_its_number(void **state) {
    (void)state;
    rank_arg a[2];
    setup(a, 2, 3, free_port(), 1.0, PLAY_JOIN); /* rank 2 never comes */
    run_ranks(a, 2);
    assert_int_equal(a[0].rc, ZY_ERR);
    assert_non_null(strstr(a[0].msg, "2 of 3 ranks arrived"));
    assert_non_null(strstr(a[0].msg, "missing rank(s) 2"));
    assert_true(a[0].elapsed < 5);
    /* rank 1 learns that rank 0 gave up rather than waiting forever */
    assert_int_equal(a[1].rc, ZY_ERR);
    assert_non_null(strstr(a[1].msg, "rank 0"));
    assert_true(a[1].elapsed < 5);
}

static void test_no_server_is_a_clear_error(void **state) {
    (void)state;
    rank_arg a[1];
    setup(a, 1, 2, free_port(), 0.5, PLAY_JOIN);
    a[0].rank = 1;
    run_ranks(a, 1);
    assert_int_equal(a[0].rc, ZY_ERR);
    assert_non_null(strstr(a[0].msg, "could not reach rank 0"));
    assert_true(a[0].elapsed < 3);
}

static void test_duplicate_rank_is_refused(void **state) {
    (void)state;
    rank_arg a[3];
    setup(a, 3, 3, free_port(), 2, PLAY_JOIN);
    a[2].rank = 1; /* two processes say they are rank 1 */
    run_ranks(a, 3);
    assert_int_equal(a[0].rc, ZY_ERR);
    assert_non_null(strstr(a[0].msg, "two processes claim rank 1"));
}

static void test_world_size_mismatch_is_refused(void **state) {
    (void)state;
    rank_arg a[2];
    setup(a, 2, 2, free_port(), 2, PLAY_JOIN);
    a[1].claim_world = 3;
    run_ranks(a, 2);
    assert_int_equal(a[0].rc, ZY_ERR);
    assert_non_null(strstr(a[0].msg, "world size is 3"));
}

static void test_dead_rank_is_noticed(void **state) {
    (void)state;
    rank_arg a[3];
    setup(a, 3, 3, free_port(), 10, PLAY_WATCH);
    a[2].what = PLAY_DIE; /* joins, then its sockets close like a crashed process's */
    run_ranks(a, 3);
    assert_int_equal(a[0].rc, ZY_ERR);
    assert_non_null(strstr(a[0].msg, "rank 2 closed its connection"));
    assert_true(a[0].elapsed < 4);
    /* rank 1 then sees rank 0 go away (rank 0 freed its sockets after its error) */
    assert_int_equal(a[1].rc, ZY_ERR);
    assert_non_null(strstr(a[1].msg, "rank 0 closed its connection"));
}

static void test_dead_rank_fails_a_collective_at_once(void **state) {
    (void)state;
    rank_arg a[3];
    setup(a, 3, 3, free_port(), 30, PLAY_BARRIER);
    a[2].what = PLAY_DIE;
    run_ranks(a, 3);
    assert_int_equal(a[0].rc, ZY_ERR);
    assert_non_null(strstr(a[0].msg, "rank 2"));
    assert_true(a[0].elapsed < 10); /* the closed socket ends it, not the 30 s deadline */
}

static void test_stuck_rank_times_out(void **state) {
    (void)state;
    rank_arg a[2];
    setup(a, 2, 2, free_port(), 0.5, PLAY_BARRIER);
    a[1].what = PLAY_SLOW;
    run_ranks(a, 2);
    assert_int_equal(a[0].rc, ZY_ERR);
    assert_non_null(strstr(a[0].msg, "timed out"));
    assert_non_null(strstr(a[0].msg, "rank 1"));
}

static void test_ranks_out_of_step_are_reported(void **state) {
    (void)state;
    rank_arg a[2];
    setup(a, 2, 2, free_port(), 3, PLAY_GATHER8);
    a[1].what = PLAY_BARRIER; /* sends 1 byte where rank 0 expects 8 */
    run_ranks(a, 2);
    assert_int_equal(a[0].rc, ZY_ERR);
    assert_non_null(strstr(a[0].msg, "rank 1 sent 1 bytes, expected 8"));
}

typedef struct {
    int port;
} stray_arg;

static void *stray_main(void *p) {
    stray_arg *s = p;
    for (int tries = 0; tries < 200; tries++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {0};
        sa.sin_family = AF_INET;
        sa.sin_port = htons((uint16_t)s->port);
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
            const char junk[] = "GET / HTTP/1.0\r\n\r\n";
            ssize_t n = write(fd, junk, sizeof junk);
            (void)n;
            close(fd);
            return NULL;
        }
        close(fd);
        usleep(10000);
    }
    return NULL;
}

static void test_stray_connection_is_ignored(void **state) {
    (void)state;
    rank_arg a[2];
    int port = free_port();
    setup(a, 2, 2, port, 5, PLAY_OPS);
    pthread_t th[2], st;
    stray_arg s = {port};
    pthread_create(&th[0], NULL, rank_main, &a[0]);
    pthread_create(&st, NULL, stray_main, &s);
    pthread_join(st, NULL); /* the junk arrives before rank 1 */
    pthread_create(&th[1], NULL, rank_main, &a[1]);
    pthread_join(th[0], NULL);
    pthread_join(th[1], NULL);
    assert_int_equal(a[0].rc, ZY_OK);
    assert_int_equal(a[1].rc, ZY_OK);
    assert_int_equal(a[1].gathered[0], 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_four_ranks_agree),
        cmocka_unit_test(test_single_rank_needs_no_socket),
        cmocka_unit_test(test_missing_rank_times_out_with_its_number),
        cmocka_unit_test(test_no_server_is_a_clear_error),
        cmocka_unit_test(test_duplicate_rank_is_refused),
        cmocka_unit_test(test_world_size_mismatch_is_refused),
        cmocka_unit_test(test_dead_rank_is_noticed),
        cmocka_unit_test(test_dead_rank_fails_a_collective_at_once),
        cmocka_unit_test(test_stuck_rank_times_out),
        cmocka_unit_test(test_ranks_out_of_step_are_reported),
        cmocka_unit_test(test_stray_connection_is_ignored),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
