/* Tests of the communicator (dist/comm.h). The single backend runs in this process. The MPI backend
 * runs in CPU ranks that this program starts as `mpirun --oversubscribe -n N <itself> <mode>`:
 * each rank runs every operation in every dtype on several sizes (1, a few, odd, a few MB: past
 * the backend's 1 MiB chunks) and compares its results bit for bit with references computed here
 * from every rank's known inputs (rank r's element j is a hash of (r, j)). The MPI backend
 * promises each element is folded in rank order, x_0 op x_1 op ... (dist/comm_mpi.c), so the
 * reference is that fold and the comparison is exact even for random floats. A failing rank
 * prints what differed and exits 1. Also: a rank that dies or hangs in the middle of a collective
 * must end the job within a deadline. Skipped when built without MPI or without mpirun. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/bf16.h"
#include "base/crc32c.h"
#include "base/err.h"
#include "base/fileio.h"
#include "base/timer.h"
#include "dist/comm.h"
#include "mpi_test_util.h"
#include "spawn_util.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- known inputs and references ---- */

static uint64_t mix(uint64_t x) { /* splitmix64's finaliser */
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Rank r's element j in a test with this seed, as the dtype's bits (every mantissa bit random,
 * both signs, exponents in [-8, 7]: sums round, so a wrong order shows). */
static uint64_t value(zy_comm_dtype t, uint64_t seed, int r, size_t j) {
    uint64_t h = mix(seed * 0x100000001b3ull ^ mix(((uint64_t)r << 48) ^ j));
    int e = (int)((h >> 56) & 15) - 8;
    float f = ldexpf(1.0f + (float)(h & 0x7fffff) / 8388608.0f, e) * ((h >> 60) & 1 ? -1 : 1);
    double d = ldexp(1.0 + (double)(h & 0xfffffffffffffull) / 4503599627370496.0, e) *
               ((h >> 60) & 1 ? -1 : 1);
    uint32_t fb;
    uint64_t db;
    switch (t) {
    case ZY_COMM_F32:
        memcpy(&fb, &f, 4);
        return fb;
    case ZY_COMM_BF16:
        return zy_f32_to_bf16(f);
    case ZY_COMM_F64:
        memcpy(&db, &d, 8);
        return db;
    case ZY_COMM_I64:
        return h;
    }
    return 0;
}

static float f32_of(uint64_t bits) {
    uint32_t b = (uint32_t)bits;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static uint64_t bits_of_f32(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

/* One step of the fold, on bits: a op b. bf16 sums add in fp32 and round to bf16. */
static uint64_t fold2(zy_comm_dtype t, zy_comm_op op, uint64_t a, uint64_t b) {
    switch (t) {
    case ZY_COMM_F32: {
        float x = f32_of(a), y = f32_of(b);
        return bits_of_f32(op == ZY_COMM_SUM ? x + y : y > x ? y : x);
    }
    case ZY_COMM_BF16: {
        float x = zy_bf16_to_f32((uint16_t)a), y = zy_bf16_to_f32((uint16_t)b);
        return op == ZY_COMM_SUM ? zy_f32_to_bf16(x + y) : y > x ? b : a;
    }
    case ZY_COMM_F64: {
        double x, y, z;
        memcpy(&x, &a, 8), memcpy(&y, &b, 8);
        z = op == ZY_COMM_SUM ? x + y : y > x ? y : x;
        memcpy(&a, &z, 8);
        return a;
    }
    case ZY_COMM_I64:
        return op == ZY_COMM_SUM ? a + b : (int64_t)b > (int64_t)a ? b : a; /* wraps */
    }
    return 0;
}

/* The reduction of element j over ranks 0..w-1 in rank order. */
static uint64_t reduced(zy_comm_dtype t, zy_comm_op op, uint64_t seed, int w, size_t j) {
    uint64_t a = value(t, seed, 0, j);
    for (int r = 1; r < w; r++) a = fold2(t, op, a, value(t, seed, r, j));
    return a;
}

static uint64_t load(const void *p, zy_comm_dtype t, size_t i) {
    uint64_t v = 0;
    size_t e = comm_dtype_size(t);
    memcpy(&v, (const unsigned char *)p + i * e, e);
    return v;
}

static void store(void *p, zy_comm_dtype t, size_t i, uint64_t v) {
    size_t e = comm_dtype_size(t);
    memcpy((unsigned char *)p + i * e, &v, e);
}

/* p[i] = rank r's element first + i, i < n. */
static void fill(void *p, zy_comm_dtype t, uint64_t seed, int r, size_t first, size_t n) {
    for (size_t i = 0; i < n; i++) store(p, t, i, value(t, seed, r, first + i));
}

/* ---- the ranks' side (mode --mpi-child) ---- */

static const char *dtype_name[] = {"f32", "bf16", "f64", "i64"};
static int failures; /* checks failed on this rank */
static uint32_t crc; /* of every all_reduce result on this rank */

#define EXPECT(c, cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            fprintf(stderr, "rank %d: ", (c)->rank);                                               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
    } while (0)

/* Compares n elements of got with want(i); reports the first difference. */
#define EXPECT_ELEMENTS(c, what, t, got, n, want_expr)                                             \
    do {                                                                                           \
        for (size_t i = 0; i < (n); i++) {                                                         \
            uint64_t want_ = (want_expr), got_ = load((got), (t), i);                              \
            if (got_ != want_) {                                                                   \
                EXPECT(c, 0, "%s %s n=%zu: element %zu is %#llx, want %#llx", what, dtype_name[t], \
                       (size_t)(n), i, (unsigned long long)got_, (unsigned long long)want_);       \
                break;                                                                             \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* Runs a call that must succeed. */
#define CALL(c, expr)                                                                              \
    do {                                                                                           \
        if ((expr) != ZY_OK) {                                                                     \
            EXPECT(c, 0, "%s failed: %s", #expr, zy_errmsg());                                     \
            return;                                                                                \
        }                                                                                          \
    } while (0)

static void check_all_reduce(zy_comm *c, zy_comm_dtype t, zy_comm_op op, size_t n) {
    uint64_t seed = 1 + 16 * n + 4 * t + op;
    void *buf = zy_malloc(n * comm_dtype_size(t) + 1);
    fill(buf, t, seed, c->rank, 0, n);
    CALL(c, comm_all_reduce(c, buf, n, t, op));
    EXPECT_ELEMENTS(c, op == ZY_COMM_SUM ? "all_reduce sum" : "all_reduce max", t, buf, n,
                    reduced(t, op, seed, c->world, i));
    crc = zy_crc32c(crc, buf, n * comm_dtype_size(t));
    free(buf);
}

/* in_place: recv is send + rank * npr. */
static void check_reduce_scatter(zy_comm *c, zy_comm_dtype t, zy_comm_op op, size_t npr,
                                 int in_place) {
    uint64_t seed = 2 + 16 * npr + 4 * t + op;
    size_t e = comm_dtype_size(t), r0 = (size_t)c->rank * npr;
    unsigned char *send = zy_malloc(c->world * npr * e + 1), *recv = zy_malloc(npr * e + 1);
    unsigned char *out = in_place ? send + r0 * e : recv;
    fill(send, t, seed, c->rank, 0, c->world * npr);
    CALL(c, comm_reduce_scatter(c, send, out, npr, t, op));
    EXPECT_ELEMENTS(c, in_place ? "reduce_scatter in place" : "reduce_scatter", t, out, npr,
                    reduced(t, op, seed, c->world, r0 + i));
    free(send), free(recv);
}

/* reduce to root: the root holds the reduction (the bits all_reduce gives), the others keep their
 * values; with the communicator deferred (comm_defer) the same once comm_complete returns. */
static void check_reduce(zy_comm *c, zy_comm_dtype t, zy_comm_op op, size_t n, int root,
                         int deferred) {
    uint64_t seed = 7 + 16 * n + 4 * t + op;
    void *buf = zy_malloc(n * comm_dtype_size(t) + 1);
    fill(buf, t, seed, c->rank, 0, n);
    if (deferred) CALL(c, comm_defer(c, 1));
    CALL(c, comm_reduce(c, buf, n, t, op, root));
    CALL(c, comm_complete(c));
    if (deferred) CALL(c, comm_defer(c, 0));
    if (c->rank == root)
        EXPECT_ELEMENTS(c, "reduce at the root", t, buf, n, reduced(t, op, seed, c->world, i));
    else
        EXPECT_ELEMENTS(c, "reduce off the root", t, buf, n, value(t, seed, c->rank, i));
    free(buf);
}

/* in_place: send is recv + rank * npr. */
static void check_all_gather(zy_comm *c, zy_comm_dtype t, size_t npr, int in_place) {
    uint64_t seed = 3 + 16 * npr + t;
    size_t e = comm_dtype_size(t), w = (size_t)c->world;
    unsigned char *send = zy_malloc(npr * e + 1), *recv = zy_malloc(w * npr * e + 1);
    unsigned char *src = in_place ? recv + (size_t)c->rank * npr * e : send;
    fill(src, t, seed, c->rank, 0, npr);
    CALL(c, comm_all_gather(c, src, recv, npr, t));
    EXPECT_ELEMENTS(c, in_place ? "all_gather in place" : "all_gather", t, recv, w * npr,
                    value(t, seed, (int)(i / npr), i % npr));
    free(send), free(recv);
}

static void check_all_to_all(zy_comm *c, zy_comm_dtype t, size_t npr) {
    uint64_t seed = 4 + 16 * npr + t;
    size_t e = comm_dtype_size(t), w = (size_t)c->world, me = (size_t)c->rank;
    unsigned char *send = zy_malloc(w * npr * e + 1), *recv = zy_malloc(w * npr * e + 1);
    fill(send, t, seed, c->rank, 0, w * npr); /* block q goes to rank q */
    CALL(c, comm_all_to_all(c, send, recv, npr, t));
    EXPECT_ELEMENTS(c, "all_to_all", t, recv, w * npr,
                    value(t, seed, (int)(i / npr), me * npr + i % npr));
    free(send), free(recv);
}

static void check_broadcast(zy_comm *c, zy_comm_dtype t, size_t n, int root) {
    uint64_t seed = 5 + 16 * n + t;
    void *buf = zy_malloc(n * comm_dtype_size(t) + 1);
    fill(buf, t, seed, c->rank, 0, n);
    CALL(c, comm_broadcast(c, buf, n, t, root));
    EXPECT_ELEMENTS(c, "broadcast", t, buf, n, value(t, seed, root, i));
    free(buf);
}

/* A ring: each rank sends to the next and receives from the previous (even ranks send first, so
 * a send that waits for its receiver never waits in a cycle). */
static void check_send_recv(zy_comm *c, zy_comm_dtype t, size_t n) {
    uint64_t seed = 6 + 16 * n + t;
    int next = (c->rank + 1) % c->world, prev = (c->rank + c->world - 1) % c->world;
    size_t e = comm_dtype_size(t);
    void *out = zy_malloc(n * e + 1), *in = zy_malloc(n * e + 1);
    fill(out, t, seed, c->rank, 0, n);
    if (c->rank % 2 == 0) CALL(c, comm_send(c, out, n, t, next));
    CALL(c, comm_recv(c, in, n, t, prev));
    if (c->rank % 2 == 1) CALL(c, comm_send(c, out, n, t, next));
    EXPECT_ELEMENTS(c, "send/recv", t, in, n, value(t, seed, prev, i));
    free(out), free(in);
}

/* Errors that leave the communicator usable: a message shorter than the receive, a bad peer. */
static void check_errors(zy_comm *c) {
    float x[6] = {0};
    if (c->rank == 0) CALL(c, comm_send(c, x, 5, ZY_COMM_F32, 1));
    if (c->rank == 1) {
        EXPECT(c, comm_recv(c, x, 6, ZY_COMM_F32, 0) == ZY_ERR, "a short message was accepted");
        EXPECT(c,
               strstr(zy_errmsg(), "comm_recv (mpi, rank 1 of") &&
                   strstr(zy_errmsg(), "rank 0 sent 20 bytes where 24 were expected"),
               "short message: %s", zy_errmsg());
    }
    EXPECT(c, comm_send(c, x, 1, ZY_COMM_F32, c->rank) == ZY_ERR, "send to itself accepted");
    EXPECT(c, zy_err_exit_status() == ZY_EXIT_INPUT && strstr(zy_errmsg(), "is this rank itself"),
           "send to itself: %s", zy_errmsg());
    EXPECT(c, comm_broadcast(c, x, 1, ZY_COMM_F32, c->world) == ZY_ERR, "root out of range");
    CALL(c, comm_barrier(c));
}

static int child_main(void) {
    zy_comm c;
    if (comm_init_mpi(&c, 120) != ZY_OK) {
        fprintf(stderr, "%s\n", zy_errmsg());
        return 1;
    }
    EXPECT(&c, strcmp(c.b->name, "mpi") == 0 && c.world > 1, "backend %s, world %d", c.b->name,
           c.world);
    const size_t sizes[] = {1, 3, 1001, ((size_t)1 << 20) + 3}; /* 3 < world for 4 ranks */
    const size_t per_rank[] = {1, 7, ((size_t)1 << 18) + 5};
    for (int t = 0; t < 4; t++) {
        for (int op = 0; op < 2; op++) {
            for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++)
                check_all_reduce(&c, (zy_comm_dtype)t, (zy_comm_op)op, sizes[k]);
            for (size_t k = 0; k < sizeof per_rank / sizeof *per_rank; k++)
                check_reduce_scatter(&c, (zy_comm_dtype)t, (zy_comm_op)op, per_rank[k], 0);
            for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++)
                check_reduce(&c, (zy_comm_dtype)t, (zy_comm_op)op, sizes[k], (int)k % c.world,
                             (int)k % 2);
        }
        for (size_t k = 0; k < sizeof per_rank / sizeof *per_rank; k++) {
            check_all_gather(&c, (zy_comm_dtype)t, per_rank[k], 0);
            check_all_to_all(&c, (zy_comm_dtype)t, per_rank[k]);
        }
        check_broadcast(&c, (zy_comm_dtype)t, sizes[t % 4], c.world - 1);
        check_send_recv(&c, (zy_comm_dtype)t, t == 0 ? ((size_t)3 << 20) / 4 + 1 : 5);
    }
    check_reduce_scatter(&c, ZY_COMM_F32, ZY_COMM_SUM, ((size_t)1 << 18) + 5, 1);
    check_all_gather(&c, ZY_COMM_BF16, 1001, 1);
    check_broadcast(&c, ZY_COMM_F64, 0, 0);
    check_broadcast(&c, ZY_COMM_F32, ((size_t)3 << 20) / 4 + 1, c.world / 2);
    check_errors(&c);
    /* Results are identical on every rank: every rank's checksum of its reductions */
    int64_t *sums = zy_calloc(c.world, sizeof *sums), mine = crc;
    if (comm_all_gather(&c, &mine, sums, 1, ZY_COMM_I64) != ZY_OK)
        EXPECT(&c, 0, "all_gather of the checksums: %s", zy_errmsg());
    for (int r = 0; r < c.world; r++)
        EXPECT(&c, sums[r] == mine, "rank %d's checksum %llx differs from %llx", r,
               (long long)sums[r], (long long)mine);
    free(sums);
    if (failures == 0 && c.rank == 0)
        printf("comm mpi: %d ranks agree, checksum %08x\n", c.world, crc);
    comm_free(&c);
    return failures ? 1 : 0;
}

/* Rank 1 dies (die) or hangs (hang) in the middle of a run of all_reduces; the others must not
 * wait for ever: mpirun ends the job when a rank dies, the timeout when a rank hangs. */
static int child_failure(int die) {
    zy_comm c;
    if (comm_init_mpi(&c, die ? 600 : 2) != ZY_OK) {
        fprintf(stderr, "%s\n", zy_errmsg());
        return 1;
    }
    size_t n = (size_t)1 << 20;
    float *buf = zy_calloc(n, sizeof *buf);
    for (int i = 0; i < 4; i++) {
        if (i == 2 && c.rank == 1) {
            fprintf(stderr, "rank 1: %s on purpose\n", die ? "exiting" : "hanging");
            if (die) exit(1);
            sleep(600);
        }
        if (comm_all_reduce(&c, buf, n, ZY_COMM_F32, ZY_COMM_SUM) != ZY_OK) {
            fprintf(stderr, "%s\n", zy_errmsg());
            /* its messages are still in flight: the communicator refuses any further call */
            if (comm_barrier(&c) != ZY_OK) fprintf(stderr, "then %s\n", zy_errmsg());
            exit(ZY_EXIT_RUNTIME);
        }
    }
    free(buf);
    comm_free(&c);
    return 0;
}

/* ---- this process's side ---- */

static char dir[64];
static char self[4096];
static char mpirun[4096];

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/zy_comm_XXXXXX");
    return mpi_test_self_setup(self, sizeof self, dir);
}

static int teardown(void **state) {
    (void)state;
    return zy_remove_tree(dir) == ZY_OK ? 0 : -1;
}

/* Runs `timeout DEADLINE mpirun --oversubscribe -n n <self> mode` (skips without MPI or mpirun);
 * returns its status, with the seconds it took in *elapsed and whether its output (stdout and
 * stderr) contains `want`; prints the output unless the status is `expect` and want was found. */
static int run_ranks(int n, const char *mode, int deadline, int expect, const char *want,
                     int *found, double *elapsed) {
    if (!comm_have_mpi() || !mpi_test_find_mpirun(mpirun, sizeof mpirun)) skip();
    char np[16], secs[16];
    snprintf(np, sizeof np, "%d", n);
    snprintf(secs, sizeof secs, "%d", deadline);
    const char *args[] = {"-k", "5", secs, mpirun, "--oversubscribe", "-n", np, self, mode, NULL};
    double t0 = zy_now();
    run_result r = spawn_capture("/usr/bin/timeout", dir, args);
    *elapsed = zy_now() - t0;
    *found = strstr(r.out, want) || strstr(r.err, want);
    print_message("mpirun -n %d %s: status %d after %.1f s\n", n, mode, r.code, *elapsed);
    if (r.code != expect || !*found) print_message("%s%s", r.out, r.err);
    int code = r.code;
    result_free(&r);
    return code;
}

static void check_ranks(int n) {
    char want[64];
    snprintf(want, sizeof want, "comm mpi: %d ranks agree", n);
    double t;
    int found = 0;
    assert_int_equal(run_ranks(n, "--mpi-child", 300, 0, want, &found, &t), 0);
    assert_true(found);
}

static void test_mpi_2_ranks(void **state) {
    (void)state;
    check_ranks(2);
}

static void test_mpi_4_ranks(void **state) {
    (void)state;
    check_ranks(4);
}

/* Rank 1 of 2 fails mid-collective (mode --mpi-die or --mpi-hang): the job must end with status 1
 * within 60 s, and its output must contain `want`. */
static void check_failure(const char *mode, const char *want) {
    double t;
    int found = 0;
    assert_int_equal(run_ranks(2, mode, 60, 1, want, &found, &t), 1);
    assert_true(t < 60);
    assert_true(found);
}

/* A rank that exits with status 1: mpirun ends the job (the others wait with a 600 s timeout, so
 * only mpirun can end it in time) with that rank's status. */
static void test_mpi_rank_dies(void **state) {
    (void)state;
    check_failure("--mpi-die", "rank 1: exiting on purpose");
}

/* A rank that hangs: its peer's wait times out (2 s) with an error naming it, after which the
 * peer's communicator refuses further calls. */
static void test_mpi_rank_hangs(void **state) {
    (void)state;
    check_failure("--mpi-hang", "comm_all_reduce (mpi, rank 0 of 2): no answer within 2 s from "
                                "rank 1 (stuck or dead)\nthen comm_barrier (mpi, rank 0 of 2): an "
                                "earlier operation failed with messages in flight");
}

/* Without MPI in the build, comm_init_mpi is a bad-input error saying what to install. */
static void test_without_mpi(void **state) {
    (void)state;
    if (comm_have_mpi()) skip(); /* starting MPI here would make this process a rank */
    zy_comm c;
    assert_int_equal(comm_init_mpi(&c, 10), ZY_ERR);
    assert_int_equal(zy_err_exit_status(), ZY_EXIT_INPUT);
    assert_non_null(strstr(zy_errmsg(), "built without MPI: install libopenmpi-dev"));
}

/* The single backend: reductions and broadcasts leave the data, the others copy it. */
static void test_single(void **state) {
    (void)state;
    zy_comm c;
    comm_init_single(&c);
    assert_string_equal(c.b->name, "single");
    assert_int_equal(c.rank, 0);
    assert_int_equal(c.world, 1);
    for (int t = 0; t < 4; t++) {
        size_t n = 1001, e = comm_dtype_size((zy_comm_dtype)t);
        unsigned char *a = zy_malloc(n * e), *b = zy_malloc(n * e), *keep = zy_malloc(n * e);
        fill(a, (zy_comm_dtype)t, 7, 0, 0, n);
        memcpy(keep, a, n * e);
        assert_int_equal(comm_all_reduce(&c, a, n, (zy_comm_dtype)t, ZY_COMM_SUM), ZY_OK);
        assert_int_equal(comm_all_reduce(&c, a, n, (zy_comm_dtype)t, ZY_COMM_MAX), ZY_OK);
        assert_int_equal(comm_broadcast(&c, a, n, (zy_comm_dtype)t, 0), ZY_OK);
        assert_memory_equal(a, keep, n * e);
        memset(b, 0, n * e);
        assert_int_equal(comm_reduce_scatter(&c, a, b, n, (zy_comm_dtype)t, ZY_COMM_SUM), ZY_OK);
        assert_memory_equal(b, keep, n * e);
        memset(b, 0, n * e);
        assert_int_equal(comm_all_gather(&c, a, b, n, (zy_comm_dtype)t), ZY_OK);
        assert_memory_equal(b, keep, n * e);
        memset(b, 0, n * e);
        assert_int_equal(comm_all_to_all(&c, a, b, n, (zy_comm_dtype)t), ZY_OK);
        assert_memory_equal(b, keep, n * e);
        assert_int_equal(comm_all_gather(&c, a, a, n, (zy_comm_dtype)t), ZY_OK); /* in place */
        assert_memory_equal(a, keep, n * e);
        assert_int_equal(comm_defer(&c, 1), ZY_OK);
        assert_int_equal(comm_defer(&c, 1), ZY_OK); /* nested: one end leaves it deferred */
        assert_int_equal(comm_reduce(&c, a, n, (zy_comm_dtype)t, ZY_COMM_SUM, 0), ZY_OK);
        assert_int_equal(comm_defer(&c, 0), ZY_OK);
        assert_int_equal(c.deferred, 1);
        assert_int_equal(comm_defer(&c, 0), ZY_OK);
        assert_int_equal(c.deferred, 0);
        assert_memory_equal(a, keep, n * e);
        free(a), free(b), free(keep);
    }
    assert_int_equal(comm_barrier(&c), ZY_OK);
    float x = 1;
    assert_int_equal(comm_send(&c, &x, 1, ZY_COMM_F32, 0), ZY_ERR);
    assert_int_equal(zy_err_exit_status(), ZY_EXIT_INPUT);
    assert_non_null(strstr(zy_errmsg(), "comm_send (single, rank 0 of 1): peer 0 is this rank"));
    assert_int_equal(comm_recv(&c, &x, 1, ZY_COMM_F32, 1), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "peer 1 is not a rank of the world"));
    assert_int_equal(comm_broadcast(&c, &x, 1, ZY_COMM_F32, -1), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "root -1 is not a rank"));
    assert_int_equal(comm_reduce(&c, &x, 1, ZY_COMM_F32, ZY_COMM_SUM, 1), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "comm_reduce (single, rank 0 of 1): root 1 is not a rank"));
    assert_int_equal(comm_dtype_size(ZY_COMM_BF16), 2);
    assert_int_equal(comm_dtype_size(ZY_COMM_I64), 8);
    comm_free(&c);
    assert_null(c.b);
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--mpi-child") == 0) return child_main();
    if (argc == 2 && strcmp(argv[1], "--mpi-die") == 0) return child_failure(1);
    if (argc == 2 && strcmp(argv[1], "--mpi-hang") == 0) return child_failure(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single),        cmocka_unit_test(test_without_mpi),
        cmocka_unit_test(test_mpi_2_ranks),   cmocka_unit_test(test_mpi_4_ranks),
        cmocka_unit_test(test_mpi_rank_dies), cmocka_unit_test(test_mpi_rank_hangs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
