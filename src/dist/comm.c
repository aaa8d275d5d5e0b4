/* The communicator's dispatch (dist/comm.h) and its `single` backend (world size 1). The dispatch
 * checks what every backend would otherwise check again (a root or peer outside the world, a peer
 * that is this rank) and names the operation, the backend and the rank in front of a backend's
 * error, so a backend's messages say only what went wrong. */
#include "dist/comm.h"
#include "base/err.h"

#include <stdint.h>
#include <string.h>

size_t comm_dtype_size(zy_comm_dtype t) {
    switch (t) {
    case ZY_COMM_F32:
        return 4;
    case ZY_COMM_BF16:
        return 2;
    case ZY_COMM_F64:
        return 8;
    case ZY_COMM_I64:
        return 8;
    }
    ZY_CHECKF(0, "unknown communicator dtype %d", (int)t);
}

/* Prefixes the backend's error with the operation and where it ran; returns ZY_ERR. */
static int comm_ctx(const zy_comm *c, const char *op) {
    return zy_fail_ctx("comm_%s (%s, rank %d of %d)", op, c->b->name, c->rank, c->world);
}

/* A valid buffer description: a known dtype (and op), a buffer unless n is 0. */
static void comm_check_args(const zy_comm *c, const void *buf, size_t n, zy_comm_dtype t) {
    ZY_CHECK(c && c->b);
    (void)comm_dtype_size(t);
    ZY_CHECKF(buf || n == 0, "a NULL buffer of %zu elements", n);
}

static void comm_check_op(zy_comm_op op) {
    ZY_CHECKF(op == ZY_COMM_SUM || op == ZY_COMM_MAX, "unknown communicator op %d", (int)op);
}

/* A root or peer must be a rank of the world (and, for send/recv, another rank). */
static int comm_check_rank(const zy_comm *c, const char *op, const char *what, int r, int self_ok) {
    if (r < 0 || r >= c->world)
        return zy_fail("comm_%s (%s, rank %d of %d): %s %d is not a rank of the world", op,
                       c->b->name, c->rank, c->world, what, r);
    if (!self_ok && r == c->rank)
        return zy_fail("comm_%s (%s, rank %d of %d): %s %d is this rank itself", op, c->b->name,
                       c->rank, c->world, what, r);
    return ZY_OK;
}

int comm_all_reduce(zy_comm *c, void *buf, size_t n, zy_comm_dtype t, zy_comm_op op) {
    comm_check_args(c, buf, n, t);
    comm_check_op(op);
    return c->b->all_reduce(c, buf, n, t, op) == ZY_OK ? ZY_OK : comm_ctx(c, "all_reduce");
}

int comm_reduce_scatter(zy_comm *c, const void *send, void *recv, size_t n_per_rank,
                        zy_comm_dtype t, zy_comm_op op) {
    comm_check_args(c, send, n_per_rank, t);
    comm_check_args(c, recv, n_per_rank, t);
    comm_check_op(op);
    return c->b->reduce_scatter(c, send, recv, n_per_rank, t, op) == ZY_OK
               ? ZY_OK
               : comm_ctx(c, "reduce_scatter");
}

int comm_reduce(zy_comm *c, void *buf, size_t n, zy_comm_dtype t, zy_comm_op op, int root) {
    comm_check_args(c, buf, n, t);
    comm_check_op(op);
    ZY_TRY(comm_check_rank(c, "reduce", "root", root, 1));
    return c->b->reduce(c, buf, n, t, op, root) == ZY_OK ? ZY_OK : comm_ctx(c, "reduce");
}

int comm_all_gather(zy_comm *c, const void *send, void *recv, size_t n_per_rank, zy_comm_dtype t) {
    comm_check_args(c, send, n_per_rank, t);
    comm_check_args(c, recv, n_per_rank, t);
    return c->b->all_gather(c, send, recv, n_per_rank, t) == ZY_OK ? ZY_OK
                                                                   : comm_ctx(c, "all_gather");
}

int comm_broadcast(zy_comm *c, void *buf, size_t n, zy_comm_dtype t, int root) {
    comm_check_args(c, buf, n, t);
    ZY_TRY(comm_check_rank(c, "broadcast", "root", root, 1));
    return c->b->broadcast(c, buf, n, t, root) == ZY_OK ? ZY_OK : comm_ctx(c, "broadcast");
}

int comm_send(zy_comm *c, const void *buf, size_t n, zy_comm_dtype t, int peer) {
    comm_check_args(c, buf, n, t);
    ZY_TRY(comm_check_rank(c, "send", "peer", peer, 0));
    return c->b->send(c, buf, n, t, peer) == ZY_OK ? ZY_OK : comm_ctx(c, "send");
}

int comm_recv(zy_comm *c, void *buf, size_t n, zy_comm_dtype t, int peer) {
    comm_check_args(c, buf, n, t);
    ZY_TRY(comm_check_rank(c, "recv", "peer", peer, 0));
    return c->b->recv(c, buf, n, t, peer) == ZY_OK ? ZY_OK : comm_ctx(c, "recv");
}

int comm_all_to_all(zy_comm *c, const void *send, void *recv, size_t n_per_rank, zy_comm_dtype t) {
    comm_check_args(c, send, n_per_rank, t);
    comm_check_args(c, recv, n_per_rank, t);
    return c->b->all_to_all(c, send, recv, n_per_rank, t) == ZY_OK ? ZY_OK
                                                                   : comm_ctx(c, "all_to_all");
}

int comm_barrier(zy_comm *c) {
    ZY_CHECK(c && c->b);
    return c->b->barrier(c) == ZY_OK ? ZY_OK : comm_ctx(c, "barrier");
}

int comm_complete(zy_comm *c) {
    ZY_CHECK(c && c->b);
    if (!c->b->complete) return ZY_OK;
    return c->b->complete(c) == ZY_OK ? ZY_OK : comm_ctx(c, "complete");
}

int comm_mark(zy_comm *c, int slot) {
    ZY_CHECK(c && c->b);
    ZY_CHECKF(slot >= 0 && slot < ZY_COMM_MARKS, "comm_mark: slot %d", slot);
    if (!c->b->mark) return ZY_OK;
    return c->b->mark(c, slot) == ZY_OK ? ZY_OK : comm_ctx(c, "mark");
}

int comm_wait_mark(zy_comm *c, int slot) {
    ZY_CHECK(c && c->b);
    ZY_CHECKF(slot >= 0 && slot < ZY_COMM_MARKS, "comm_wait_mark: slot %d", slot);
    if (!c->b->wait_mark) return ZY_OK;
    return c->b->wait_mark(c, slot) == ZY_OK ? ZY_OK : comm_ctx(c, "wait_mark");
}

int comm_defer(zy_comm *c, int on) {
    ZY_CHECK(c && c->b);
    if (on) {
        c->deferred++;
        return ZY_OK;
    }
    ZY_CHECKF(c->deferred > 0, "comm_defer(c, 0) without a comm_defer(c, 1) before it");
    return --c->deferred ? ZY_OK : comm_complete(c);
}

void comm_free(zy_comm *c) {
    if (!c || !c->b) return;
    if (c->b->free) c->b->free(c);
    memset(c, 0, sizeof *c);
}

/* ---- single: world size 1 ---- */

/* dst = src (n elements), nothing when the call is in place. */
static void single_copy(void *dst, const void *src, size_t n, zy_comm_dtype t) {
    if (dst != src) memmove(dst, src, n * comm_dtype_size(t));
}

static int single_all_reduce(zy_comm *c, void *buf, size_t n, zy_comm_dtype t, zy_comm_op op) {
    return ZY_OK; /* the sum or max of one rank's values is those values */
}

static int single_reduce_scatter(zy_comm *c, const void *send, void *recv, size_t n_per_rank,
                                 zy_comm_dtype t, zy_comm_op op) {
    single_copy(recv, send, n_per_rank, t);
    return ZY_OK;
}

static int single_reduce(zy_comm *c, void *buf, size_t n, zy_comm_dtype t, zy_comm_op op,
                         int root) {
    return ZY_OK;
}

static int single_move(zy_comm *c, const void *send, void *recv, size_t n_per_rank,
                       zy_comm_dtype t) {
    single_copy(recv, send, n_per_rank, t); /* all_gather and all_to_all of one rank */
    return ZY_OK;
}

static int single_broadcast(zy_comm *c, void *buf, size_t n, zy_comm_dtype t, int root) {
    return ZY_OK;
}

/* Unreachable through the dispatch (a world of 1 has no other rank); kept so the table is full. */
static int single_send(zy_comm *c, const void *buf, size_t n, zy_comm_dtype t, int peer) {
    return zy_fail("a world of 1 has no peer to send to");
}

static int single_recv(zy_comm *c, void *buf, size_t n, zy_comm_dtype t, int peer) {
    return zy_fail("a world of 1 has no peer to receive from");
}

static int single_barrier(zy_comm *c) {
    return ZY_OK;
}

static const zy_comm_backend single_backend = {
    .name = "single",
    .all_reduce = single_all_reduce,
    .reduce_scatter = single_reduce_scatter,
    .reduce = single_reduce,
    .all_gather = single_move,
    .broadcast = single_broadcast,
    .send = single_send,
    .recv = single_recv,
    .all_to_all = single_move,
    .barrier = single_barrier,
    .free = NULL,
};

void comm_init_single(zy_comm *c) {
    memset(c, 0, sizeof *c);
    c->rank = 0;
    c->world = 1;
    c->b = &single_backend;
}
