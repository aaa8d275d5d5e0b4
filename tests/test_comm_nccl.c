/* Tests of the communicator's NCCL backend (dist/comm_nccl.h).
 * Everywhere: a communicator that cannot be made is one clear error (without CUDA built in: bad
 * input naming the build; a device that does not exist: a runtime error naming it).
 * With a GPU: a world of one runs every operation for every dtype (f32, bf16, f64, i64) and
 * reduction (sum, max) and must give exactly the values computed here; with 2+ GPUs the same on
 * min(GPUs, 4) ranks (threads, one GPU each), plus an all-reduce of random values that must be
 * bit-identical on every rank (and, on 2 ranks, equal the one rounding of a + b), an operation
 * ordered after a busy producer stream, and a peer that leaves: an error naming the operation,
 * not a hang. Skipped without a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/bf16.h"
#include "base/err.h"
#include "base/rng.h"
#include "dist/comm.h"
#include "dist/comm_nccl.h"
#include "dist/launch.h"
#include "dist/rdv.h"
#include "ops/ops.h"

#ifdef ZY_HAVE_CUDA
#include "base/check.h"
#include <cuda_runtime.h>
#endif

#include <math.h>
#include <pthread.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define MAX_RANKS 4
#define NTYPES    4
#define TIMEOUT_S 60.0
/* i64 values are small integers times this: past 32 bits, so an i64 read as i32 or as f64 shows */
#define I64_SCALE ((double)((1ll << 33) + 1))

static int ngpu;

static int setup(void **state) {
    (void)state;
    ngpu = ops_cuda_device_count();
    return 0;
}

static void test_init_failure_is_one_clear_error(void **state) {
    (void)state;
    dist_rdv rdv;
    int port;
    assert_int_equal(dist_free_port(&port), ZY_OK);
    assert_int_equal(dist_rdv_init(&rdv, 0, 1, "127.0.0.1", port, TIMEOUT_S), ZY_OK);
    zy_comm c;
    zy_err_clear();
#ifndef ZY_HAVE_CUDA
    assert_int_equal(comm_init_nccl(&c, &rdv, 0, TIMEOUT_S), ZY_ERR);
    assert_int_equal(zy_err_exit_status(), ZY_EXIT_INPUT);
    assert_non_null(strstr(zy_errmsg(), "built without CUDA"));
#else
    assert_int_equal(comm_init_nccl(&c, &rdv, 0, 0), ZY_ERR);
    assert_int_equal(zy_err_exit_status(), ZY_EXIT_INPUT);
    assert_non_null(strstr(zy_errmsg(), "timeout"));
    zy_err_clear();
    assert_int_equal(comm_init_nccl(&c, &rdv, 99999, TIMEOUT_S), ZY_ERR);
    assert_int_equal(zy_err_exit_status(), ZY_EXIT_RUNTIME);
    assert_non_null(strstr(zy_errmsg(), "nccl communicator (rank 0 of 1, device 99999)"));
#endif
    printf("the error: %s\n", zy_errmsg());
    assert_null(c.impl);
    dist_rdv_free(&rdv);
}

#ifdef ZY_HAVE_CUDA
static const zy_comm_dtype types[NTYPES] = {ZY_COMM_F32, ZY_COMM_BF16, ZY_COMM_F64, ZY_COMM_I64};
static const char *type_names[NTYPES] = {"f32", "bf16", "f64", "i64"};

/* Rank q's input element i of the reductions: small integers, exact in every type and in every
 * order of summation. */
static double red_val(int q, size_t i, zy_comm_dtype t) {
    double v = (double)((int)((i * 7 + (size_t)q * 13) % 17) - 8);
    return t == ZY_COMM_I64 ? v * I64_SCALE : v;
}

/* Rank q's element i of the data movements: integers in [-127, 127] (exact in bf16) that change
 * with both the rank and the position, so a block from the wrong rank or offset shows. */
static double mov_val(int q, size_t i, zy_comm_dtype t) {
    double v = (double)((int)((i * 31 + (size_t)q * 1009) % 255) - 127);
    return t == ZY_COMM_I64 ? v * I64_SCALE : v;
}

/* Rank q's element i of the random all-reduce: every mantissa bit of the type random, magnitudes
 * in [2^-7, 2) (so the fp32 sum of two bf16 values is exact and bf16's one rounding is known). */
static double rnd_val(int q, size_t i, zy_comm_dtype t) {
    uint64_t h = zy_rng_at(20261125, (uint64_t)q, i);
    int e = -(int)(h >> 60 & 7);
    double sign = (h >> 59 & 1) ? -1.0 : 1.0;
    if (t == ZY_COMM_F64) return sign * ldexp(1.0 + (double)(h & ((1ull << 52) - 1)) * 0x1p-52, e);
    if (t == ZY_COMM_BF16) return sign * ldexp(1.0 + (double)(h & 127) / 128.0, e);
    if (t == ZY_COMM_I64) return (double)(int64_t)(h % 2000001) - 1000000.0;
    return sign * ldexp(1.0 + (double)(h & ((1u << 23) - 1)) * 0x1p-23, e);
}

/* v[n] as elements of type t. */
static void encode(zy_comm_dtype t, const double *v, size_t n, void *out) {
    for (size_t i = 0; i < n; i++) switch (t) {
        case ZY_COMM_F32:
            ((float *)out)[i] = (float)v[i];
            break;
        case ZY_COMM_BF16:
            ((uint16_t *)out)[i] = zy_f32_to_bf16((float)v[i]);
            break;
        case ZY_COMM_F64:
            ((double *)out)[i] = v[i];
            break;
        case ZY_COMM_I64:
            ((int64_t *)out)[i] = (int64_t)v[i];
            break;
        }
}

static double decode(zy_comm_dtype t, const void *p, size_t i) {
    switch (t) {
    case ZY_COMM_F32:
        return ((const float *)p)[i];
    case ZY_COMM_BF16:
        return zy_bf16_to_f32(((const uint16_t *)p)[i]);
    case ZY_COMM_F64:
        return ((const double *)p)[i];
    case ZY_COMM_I64:
        return (double)((const int64_t *)p)[i];
    }
    return NAN;
}

/* A device buffer of n elements: v[n] when given, else poison (0xff bytes: NaN, -1). */
static int dev_buf(zy_comm_dtype t, const double *v, size_t n, void **d) {
    size_t bytes = n * comm_dtype_size(t);
    ZY_CUDA_TRY(cudaMalloc(d, bytes));
    if (!v) {
        ZY_CUDA_TRY(cudaMemset(*d, 0xff, bytes));
        return ZY_OK;
    }
    void *h = zy_malloc(bytes);
    encode(t, v, n, h);
    cudaError_t e = cudaMemcpy(*d, h, bytes, cudaMemcpyHostToDevice);
    free(h);
    ZY_CUDA_TRY(e);
    return ZY_OK;
}

/* The device buffer d[n] must hold exactly want[n] (as type t). */
static int expect(const char *what, zy_comm_dtype t, const void *d, const double *want, size_t n) {
    size_t elt = comm_dtype_size(t), bytes = n * elt;
    unsigned char *got = zy_malloc(bytes), *ref = zy_malloc(bytes);
    int rc = ZY_OK;
    if (cudaMemcpy(got, d, bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
        rc = zy_fail_runtime("%s: reading the result back failed", what);
    encode(t, want, n, ref);
    for (size_t i = 0; rc == ZY_OK && i < n; i++)
        if (memcmp(got + i * elt, ref + i * elt, elt) != 0)
            rc = zy_fail_runtime("%s %s: element %zu of %zu is %.17g, expected %.17g", what,
                                 type_names[t], i, n, decode(t, got, i), want[i]);
    free(ref);
    free(got);
    return rc;
}

typedef struct {
    int rank, world, port;
    int rc;
    char msg[1024];
    void *ident[NTYPES][2]; /* the random all-reduce's results (host copies), two sizes */
} rank_arg;

static const size_t rnd_sizes[2] = {1031, (1u << 20) + 3};

/* Every reduction of one type and operation: all_reduce, reduce_scatter and reduce (to the last
 * rank, deferred: queued, then completed by comm_complete). */
static int check_reductions(zy_comm *c, zy_comm_dtype t, zy_comm_op op, size_t n) {
    int r = c->rank, w = c->world;
    size_t all = n * (size_t)w;
    double *in = zy_malloc(all * sizeof *in), *want = zy_malloc(all * sizeof *want);
    void *d = NULL, *rs = NULL;
    for (size_t i = 0; i < all; i++) {
        in[i] = red_val(r, i, t);
        want[i] = red_val(0, i, t);
        for (int q = 1; q < w; q++)
            want[i] =
                op == ZY_COMM_SUM ? want[i] + red_val(q, i, t) : fmax(want[i], red_val(q, i, t));
    }
    const char *name = op == ZY_COMM_SUM ? "all_reduce sum" : "all_reduce max";
    int rc = dev_buf(t, in, n, &d);
    if (rc == ZY_OK) rc = comm_all_reduce(c, d, n, t, op);
    if (rc == ZY_OK) rc = expect(name, t, d, want, n);
    cudaFree(d);
    d = NULL;
    /* reduce_scatter: this rank gets block r of the reduction */
    name = op == ZY_COMM_SUM ? "reduce_scatter sum" : "reduce_scatter max";
    if (rc == ZY_OK) rc = dev_buf(t, in, all, &d);
    if (rc == ZY_OK) rc = dev_buf(t, NULL, n, &rs);
    if (rc == ZY_OK) rc = comm_reduce_scatter(c, d, rs, n, t, op);
    if (rc == ZY_OK) rc = expect(name, t, rs, want + (size_t)r * n, n);
    cudaFree(d);
    cudaFree(rs);
    d = NULL;
    /* in place (recv is send + r n: ZeRO-1's split embedding), deferred as the backward queues it
     */
    name = op == ZY_COMM_SUM ? "reduce_scatter sum in place" : "reduce_scatter max in place";
    if (rc == ZY_OK) rc = dev_buf(t, in, all, &d);
    if (rc == ZY_OK) rc = comm_defer(c, 1);
    if (rc == ZY_OK)
        rc = comm_reduce_scatter(c, d, (unsigned char *)d + (size_t)r * n * comm_dtype_size(t), n,
                                 t, op);
    if (rc == ZY_OK) rc = comm_complete(c);
    if (rc == ZY_OK) rc = comm_defer(c, 0);
    if (rc == ZY_OK)
        rc = expect(name, t, (unsigned char *)d + (size_t)r * n * comm_dtype_size(t),
                    want + (size_t)r * n, n);
    cudaFree(d);
    d = NULL;
    /* reduce: the root holds the reduction, the others their own values */
    const int root = w - 1;
    name = op == ZY_COMM_SUM ? "reduce sum" : "reduce max";
    if (rc == ZY_OK) rc = dev_buf(t, in, n, &d);
    if (rc == ZY_OK) rc = comm_defer(c, 1);
    if (rc == ZY_OK) rc = comm_reduce(c, d, n, t, op, root);
    if (rc == ZY_OK) rc = comm_complete(c);
    if (rc == ZY_OK) rc = comm_defer(c, 0);
    if (rc == ZY_OK) rc = expect(name, t, d, r == root ? want : in, n);
    cudaFree(d);
    free(in);
    free(want);
    return rc;
}

/* Partial completion: two broadcasts from rank 0 queued while deferred, a mark after each;
 * waiting for the first mark leaves the first buffer final (on the host, without comm_complete),
 * the second mark the second; a slot never marked has nothing to wait for. */
static int check_marks(zy_comm *c) {
    const size_t n[2] = {(1u << 22) + 5, 1000};
    double *v[2];
    void *d[2] = {NULL, NULL};
    int rc = ZY_OK;
    for (int k = 0; k < 2; k++) {
        v[k] = zy_malloc(n[k] * sizeof *v[k]);
        for (size_t i = 0; i < n[k]; i++) v[k][i] = mov_val(0, i + k, ZY_COMM_F32);
        if (rc == ZY_OK) rc = dev_buf(ZY_COMM_F32, c->rank == 0 ? v[k] : NULL, n[k], &d[k]);
    }
    if (rc == ZY_OK) rc = comm_defer(c, 1);
    for (int k = 0; k < 2 && rc == ZY_OK; k++) {
        rc = comm_broadcast(c, d[k], n[k], ZY_COMM_F32, 0);
        if (rc == ZY_OK) rc = comm_mark(c, k + 1);
    }
    if (rc == ZY_OK) rc = comm_wait_mark(c, ZY_COMM_MARKS - 1); /* never marked */
    for (int k = 0; k < 2 && rc == ZY_OK; k++) {
        rc = comm_wait_mark(c, k + 1);
        if (rc == ZY_OK) rc = expect("broadcast up to its mark", ZY_COMM_F32, d[k], v[k], n[k]);
    }
    if (rc == ZY_OK) rc = comm_defer(c, 0);
    for (int k = 0; k < 2; k++) {
        cudaFree(d[k]);
        free(v[k]);
    }
    return rc;
}

/* A data movement (all_gather, all_to_all) from in[n_in] into poison must give want[n_out]; n
 * elements per rank. */
static int check_moved(zy_comm *c, const char *name,
                       int (*op)(zy_comm *, const void *, void *, size_t, zy_comm_dtype),
                       zy_comm_dtype t, const double *in, size_t n_in, const double *want,
                       size_t n_out, size_t n) {
    void *s = NULL, *d = NULL;
    int rc = dev_buf(t, in, n_in, &s);
    if (rc == ZY_OK) rc = dev_buf(t, NULL, n_out, &d);
    if (rc == ZY_OK) rc = op(c, s, d, n, t);
    if (rc == ZY_OK) rc = expect(name, t, d, want, n_out);
    cudaFree(s);
    cudaFree(d);
    return rc;
}

/* all_gather, broadcast (from the last rank) and all_to_all of one type. */
static int check_movement(zy_comm *c, zy_comm_dtype t, size_t n) {
    int r = c->rank, w = c->world, root = w - 1;
    size_t all = n * (size_t)w;
    double *in = zy_malloc(all * sizeof *in), *want = zy_malloc(all * sizeof *want);
    for (size_t i = 0; i < n; i++) in[i] = mov_val(r, i, t);
    for (size_t i = 0; i < all; i++) want[i] = mov_val((int)(i / n), i % n, t);
    int rc = check_moved(c, "all_gather", comm_all_gather, t, in, n, want, all, n);
    /* in place: this rank's block already at its place in the output (the split embedding) */
    void *g = NULL;
    double *own = zy_malloc(all * sizeof *own);
    for (size_t i = 0; i < all; i++) own[i] = i / n == (size_t)r ? in[i % n] : -7.0; /* poison */
    if (rc == ZY_OK) rc = dev_buf(t, own, all, &g);
    if (rc == ZY_OK)
        rc = comm_all_gather(c, (unsigned char *)g + (size_t)r * n * comm_dtype_size(t), g, n, t);
    if (rc == ZY_OK) rc = expect("all_gather in place", t, g, want, all);
    cudaFree(g);
    free(own);
    /* broadcast: the root's values everywhere, over poison elsewhere */
    for (size_t i = 0; i < n; i++) want[i] = mov_val(root, i, t);
    void *d = NULL;
    if (rc == ZY_OK) rc = dev_buf(t, r == root ? want : NULL, n, &d);
    if (rc == ZY_OK) rc = comm_broadcast(c, d, n, t, root);
    if (rc == ZY_OK) rc = expect("broadcast", t, d, want, n);
    cudaFree(d);
    /* all_to_all: block q of rank r's send goes to block r of rank q's recv */
    for (size_t i = 0; i < all; i++) {
        in[i] = mov_val(r, i, t);
        want[i] = mov_val((int)(i / n), (size_t)r * n + i % n, t);
    }
    if (rc == ZY_OK) rc = check_moved(c, "all_to_all", comm_all_to_all, t, in, all, want, all, n);
    free(in);
    free(want);
    return rc;
}

/* send/recv between ranks r and r^1: the lower one sends first, the upper one receives first. */
static int check_send_recv(zy_comm *c, zy_comm_dtype t, size_t n) {
    int r = c->rank, peer = r ^ 1;
    if (peer >= c->world) return ZY_OK; /* the last rank of an odd world has no partner */
    double *mine = zy_malloc(n * sizeof *mine), *theirs = zy_malloc(n * sizeof *theirs);
    for (size_t i = 0; i < n; i++) mine[i] = mov_val(r, i, t), theirs[i] = mov_val(peer, i, t);
    void *s = NULL, *d = NULL;
    int rc = dev_buf(t, mine, n, &s);
    if (rc == ZY_OK) rc = dev_buf(t, NULL, n, &d);
    if (rc == ZY_OK && r < peer) rc = comm_send(c, s, n, t, peer);
    if (rc == ZY_OK) rc = comm_recv(c, d, n, t, peer);
    if (rc == ZY_OK && r > peer) rc = comm_send(c, s, n, t, peer);
    if (rc == ZY_OK) rc = expect("send/recv", t, d, theirs, n);
    cudaFree(s);
    cudaFree(d);
    free(mine);
    free(theirs);
    return rc;
}

/* An all-reduce (sum) of random values; its result is kept for the comparison across ranks. */
static int check_random_sum(zy_comm *c, zy_comm_dtype t, size_t n, void **keep) {
    double *in = zy_malloc(n * sizeof *in);
    for (size_t i = 0; i < n; i++) in[i] = rnd_val(c->rank, i, t);
    void *d = NULL, *h = NULL;
    int rc = dev_buf(t, in, n, &d);
    if (rc == ZY_OK) rc = comm_all_reduce(c, d, n, t, ZY_COMM_SUM);
    size_t bytes = n * comm_dtype_size(t);
    if (rc == ZY_OK) {
        h = zy_malloc(bytes);
        if (cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
            rc = zy_fail_runtime("random all_reduce: reading the result back failed");
    }
    if (rc == ZY_OK)
        *keep = h;
    else
        free(h);
    cudaFree(d);
    free(in);
    return rc;
}

/* The stream rule: an all-reduce ordered after a producer stream that is still busy (writes of
 * 4 GiB, then the copy of the input) must see the input, not the poison under it. */
static int check_order_after(zy_comm *c) {
    const size_t n = 1 << 16, big = 256u << 20;
    double *in = zy_malloc(n * sizeof *in), *want = zy_malloc(n * sizeof *want);
    for (size_t i = 0; i < n; i++) {
        in[i] = red_val(c->rank, i, ZY_COMM_F32);
        want[i] = 0;
        for (int q = 0; q < c->world; q++) want[i] += red_val(q, i, ZY_COMM_F32);
    }
    void *src = NULL, *dst = NULL, *scratch = NULL;
    cudaStream_t s = NULL;
    int rc = dev_buf(ZY_COMM_F32, in, n, &src);
    if (rc == ZY_OK) rc = dev_buf(ZY_COMM_F32, NULL, n, &dst);
    if (rc == ZY_OK && cudaMalloc(&scratch, big) != cudaSuccess)
        rc = zy_fail_runtime("allocating %zu bytes", big);
    if (rc == ZY_OK && cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
        rc = zy_fail_runtime("creating a stream");
    if (rc == ZY_OK && cudaDeviceSynchronize() != cudaSuccess) rc = zy_fail_runtime("sync");
    for (int k = 0; rc == ZY_OK && k < 16; k++)
        if (cudaMemsetAsync(scratch, k, big, s) != cudaSuccess) rc = zy_fail_runtime("memset");
    if (rc == ZY_OK &&
        cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, s) != cudaSuccess)
        rc = zy_fail_runtime("copy");
    if (rc == ZY_OK) {
        comm_nccl_order_after(c, s);
        rc = comm_all_reduce(c, dst, n, ZY_COMM_F32, ZY_COMM_SUM);
        comm_nccl_order_after(c, NULL);
    }
    if (rc == ZY_OK) rc = expect("all_reduce after a busy stream", ZY_COMM_F32, dst, want, n);
    if (s) cudaStreamDestroy(s);
    cudaFree(scratch);
    cudaFree(src);
    cudaFree(dst);
    free(in);
    free(want);
    return rc;
}

/* Every operation on this rank's communicator. */
static int play_all(zy_comm *c, rank_arg *a) {
    if (strcmp(c->b->name, "nccl") != 0 || c->rank != a->rank || c->world != a->world)
        return zy_fail_runtime("communicator says %s, rank %d of %d", c->b->name, c->rank,
                               c->world);
    for (int k = 0; k < NTYPES; k++) {
        zy_comm_dtype t = types[k];
        ZY_TRY(check_reductions(c, t, ZY_COMM_SUM, 1000));
        ZY_TRY(check_reductions(c, t, ZY_COMM_MAX, 1000));
        ZY_TRY(check_movement(c, t, 777));
        ZY_TRY(check_send_recv(c, t, 4097));
        for (int s = 0; s < 2; s++) ZY_TRY(check_random_sum(c, t, rnd_sizes[s], &a->ident[k][s]));
    }
    ZY_TRY(check_order_after(c));
    ZY_TRY(check_marks(c));
    /* host buffers (the step's scalars and counts) are staged through device memory */
    double h[3] = {c->rank + 1.0, 2.0 * c->rank, -1.0};
    int64_t counts[2] = {c->rank, 5};
    ZY_TRY(comm_all_reduce(c, h, 3, ZY_COMM_F64, ZY_COMM_SUM));
    ZY_TRY(comm_all_reduce(c, counts, 2, ZY_COMM_I64, ZY_COMM_MAX));
    const double w = c->world;
    if (h[0] != w * (w + 1) / 2 || h[1] != w * (w - 1) || h[2] != -w || counts[0] != c->world - 1 ||
        counts[1] != 5)
        return zy_fail_runtime("host all_reduce: %g %g %g %lld %lld", h[0], h[1], h[2],
                               (long long)counts[0], (long long)counts[1]);
    /* nothing to move: a no-op, not an NCCL error */
    ZY_TRY(comm_all_reduce(c, NULL, 0, ZY_COMM_F32, ZY_COMM_SUM));
    return comm_barrier(c);
}

/* The leaving rank, in a process of its own (this program run with ZY_TEST_NCCL_LEAVE=port):
 * rank 1 of 2 on GPU 1 takes part in one all-reduce, then exits without a word, as a crashed rank
 * does (a thread cannot: a finalize that skips the others would wait for them). */
static int leave_main(const char *port) {
    dist_rdv rdv;
    zy_comm c;
    void *d = NULL;
    if (dist_rdv_init(&rdv, 1, 2, "127.0.0.1", atoi(port), TIMEOUT_S) != ZY_OK ||
        comm_init_nccl(&c, &rdv, 1, TIMEOUT_S) != ZY_OK ||
        dev_buf(ZY_COMM_F32, NULL, 4096, &d) != ZY_OK ||
        comm_all_reduce(&c, d, 4096, ZY_COMM_F32, ZY_COMM_SUM) != ZY_OK) {
        fprintf(stderr, "leaving rank: %s\n", zy_errmsg());
        return 1;
    }
    fflush(NULL);
    _exit(0);
}

static void *rank_main(void *p) {
    rank_arg *a = p;
    dist_rdv rdv;
    a->rc = dist_rdv_init(&rdv, a->rank, a->world, "127.0.0.1", a->port, TIMEOUT_S);
    if (a->rc == ZY_OK) {
        zy_comm c;
        a->rc = comm_init_nccl(&c, &rdv, a->rank, TIMEOUT_S);
        if (a->rc == ZY_OK) {
            a->rc = play_all(&c, a);
            comm_free(&c);
        }
        dist_rdv_free(&rdv);
    }
    snprintf(a->msg, sizeof a->msg, "%s", zy_errmsg());
    return NULL;
}

/* Runs world ranks (threads, rank r on GPU r) and asserts each succeeded. */
static void run_world(rank_arg *a, int world) {
    pthread_t th[MAX_RANKS];
    int port;
    assert_int_equal(dist_free_port(&port), ZY_OK);
    memset(a, 0, sizeof(rank_arg) * MAX_RANKS);
    for (int r = 0; r < world; r++) {
        a[r].rank = r, a[r].world = world, a[r].port = port;
        assert_int_equal(pthread_create(&th[r], NULL, rank_main, &a[r]), 0);
    }
    for (int r = 0; r < world; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < world; r++)
        if (a[r].rc != ZY_OK) fail_msg("rank %d of %d: %s", r, world, a[r].msg);
}

/* The random all-reduce: identical bytes on every rank; on one rank the input itself, on two the
 * one rounding of a + b (exact before rounding: see rnd_val). */
static void check_identical(rank_arg *a, int world) {
    for (int k = 0; k < NTYPES; k++)
        for (int s = 0; s < 2; s++) {
            zy_comm_dtype t = types[k];
            size_t n = rnd_sizes[s], elt = comm_dtype_size(t);
            for (int r = 1; r < world; r++)
                if (memcmp(a[0].ident[k][s], a[r].ident[k][s], n * elt) != 0)
                    fail_msg("random all_reduce of %zu %s: rank %d differs from rank 0", n,
                             type_names[k], r);
            if (world <= 2) {
                double *want = zy_malloc(n * sizeof *want);
                for (size_t i = 0; i < n; i++) {
                    want[i] = rnd_val(0, i, t);
                    if (world == 2) {
                        double b = rnd_val(1, i, t);
                        /* f32 and bf16 sums are taken in fp32: one rounding of a + b */
                        want[i] = t == ZY_COMM_F32 || t == ZY_COMM_BF16
                                      ? (double)((float)want[i] + (float)b)
                                      : want[i] + b;
                    }
                }
                unsigned char *ref = zy_malloc(n * elt);
                encode(t, want, n, ref);
                for (size_t i = 0; i < n; i++)
                    if (memcmp(ref + i * elt, (unsigned char *)a[0].ident[k][s] + i * elt, elt))
                        fail_msg("random all_reduce of %zu %s on %d rank(s): element %zu is "
                                 "%.17g, expected %.17g",
                                 n, type_names[k], world, i, decode(t, a[0].ident[k][s], i),
                                 want[i]);
                free(ref);
                free(want);
            }
            for (int r = 0; r < world; r++) free(a[r].ident[k][s]);
        }
}

static void test_one_rank_every_operation(void **state) {
    (void)state;
    if (ngpu < 1) skip();
    rank_arg a[MAX_RANKS];
    run_world(a, 1);
    check_identical(a, 1);
}

static void test_ranks_every_operation_identical(void **state) {
    (void)state;
    if (ngpu < 2) skip();
    int world = ngpu < MAX_RANKS ? ngpu : MAX_RANKS;
    rank_arg a[MAX_RANKS];
    run_world(a, world);
    check_identical(a, world);
    if (world > 2) { /* the exact reference on two ranks too */
        run_world(a, 2);
        check_identical(a, 2);
    }
}

/* Rank 1 (another process) leaves after one all-reduce: rank 0's second all-reduce must fail as
 * a runtime error naming the operation (not hang), and later calls must fail at once. */
static void test_peer_leaving_is_an_error(void **state) {
    (void)state;
    if (ngpu < 2) skip();
    int port;
    assert_int_equal(dist_free_port(&port), ZY_OK);
    char portstr[16], self[4096];
    snprintf(portstr, sizeof portstr, "%d", port);
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(len > 0);
    self[len] = 0;
    setenv("ZY_TEST_NCCL_LEAVE", portstr, 1);
    char *argv[] = {self, NULL};
    pid_t pid;
    int spawned = posix_spawn(&pid, self, NULL, NULL, argv, environ);
    unsetenv("ZY_TEST_NCCL_LEAVE");
    assert_int_equal(spawned, 0);

    dist_rdv rdv;
    zy_comm c;
    void *d = NULL;
    const size_t n = 4096;
    assert_int_equal(dist_rdv_init(&rdv, 0, 2, "127.0.0.1", port, TIMEOUT_S), ZY_OK);
    assert_int_equal(comm_init_nccl(&c, &rdv, 0, TIMEOUT_S), ZY_OK);
    assert_int_equal(dev_buf(ZY_COMM_F32, NULL, n, &d), ZY_OK);
    assert_int_equal(comm_all_reduce(&c, d, n, ZY_COMM_F32, ZY_COMM_SUM), ZY_OK);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    zy_err_clear();
    assert_int_equal(comm_all_reduce(&c, d, n, ZY_COMM_F32, ZY_COMM_SUM), ZY_ERR);
    printf("the error: %s\n", zy_errmsg());
    assert_non_null(strstr(zy_errmsg(), "all_reduce of 4096 f32 (sum)"));
    assert_int_equal(zy_err_exit_status(), ZY_EXIT_RUNTIME);
    assert_int_equal(comm_barrier(&c), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "aborted after an earlier error"));
    comm_free(&c);
    cudaFree(d);
    dist_rdv_free(&rdv);
}
#endif

int main(void) {
#ifdef ZY_HAVE_CUDA
    const char *leave = getenv("ZY_TEST_NCCL_LEAVE");
    if (leave) return leave_main(leave);
#endif
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_failure_is_one_clear_error),
#ifdef ZY_HAVE_CUDA
        cmocka_unit_test(test_one_rank_every_operation),
        cmocka_unit_test(test_ranks_every_operation_identical),
        cmocka_unit_test(test_peer_leaving_is_an_error),
#endif
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
