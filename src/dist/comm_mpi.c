/* The communicator's MPI backend (dist/comm.h): CPU ranks on MPI_COMM_WORLD, host buffers. It is
 * how every distributed path is tested on a machine without GPUs, so it keeps the API's promises
 * exactly rather than quickly:
 *
 * Reductions are done here, not by MPI's reduction ops: every element is reduced on one rank in
 * rank order, ((x_0 + x_1) + x_2) + ... (fp32 adds for fp32; for bf16 an fp32 add rounded to bf16
 * after each step, base/bf16.h's rounding), and the result is copied to the others. So the result
 * is the same on every rank, the same for all_reduce and reduce_scatter, the same for any message
 * size or chunking, and independent of which algorithm Open MPI picks (its choice varies with
 * message size and version; a commutative op may be applied in any order). The data moves as bytes
 * in point-to-point messages of at most COMM_MPI_CHUNK bytes (so int counts never overflow):
 *   reduce_scatter: each rank sends every other rank that rank's block, then folds the blocks it
 *                   received in rank order (the data volume of a ring: (W-1)/W of the buffer);
 *   all_reduce:     reduce_scatter on W near-equal blocks of each chunk, then all_gather;
 *   reduce:         every other rank sends the root its values, which the root folds;
 *   all_gather, all_to_all: each rank sends its blocks to every other rank directly;
 *   broadcast: point to point from the root (so a deadline names the rank that did not take
 *   part); barrier: MPI_Ibarrier.
 * Each operation completes before it returns. Waits poll with a deadline (timeout_s): a peer that
 * does not answer in time is an error naming it. A rank that dies under mpirun makes mpirun end
 * the whole job (its other ranks are killed), so peers never wait for a dead rank's deadline.
 * Requests left in flight by a failed operation make the communicator unusable (every later call
 * fails): MPI could still write into their buffers. */
#ifdef ZY_HAVE_MPI
#include "dist/comm.h"
#include "base/bf16.h"
#include "base/check.h"
#include "base/err.h"
#include "base/timer.h"

#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define COMM_MPI_CHUNK (1 << 20) /* bytes of one block in one message (a multiple of 8) */
#define TAG_COLL       1         /* the collectives' messages */
#define TAG_USER       2         /* comm_send / comm_recv */

/* MPI's description of an error code (this thread's buffer). */
static const char *mpi_describe(int code) {
    static _Thread_local char buf[MPI_MAX_ERROR_STRING + 32];
    int len = 0;
    if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS)
        snprintf(buf, sizeof buf, "code %d", code);
    return buf;
}

#define ZY_MPI_TRY(expr) ZY_LIB_TRY(int, MPI_SUCCESS, mpi_describe, #expr, expr)

typedef struct {
    MPI_Comm comm;     /* a duplicate of MPI_COMM_WORLD: no other MPI user's message matches ours */
    double timeout_s;  /* the longest one wait may take */
    MPI_Request *reqs; /* [2 W] receive from q at 2q, send to q at 2q+1; MPI_REQUEST_NULL if idle */
    MPI_Status *st;    /* [2 W] */
    int *peer;         /* [2 W] the rank of each request (-1: none, or a collective of MPI's) */
    size_t *expect;    /* [2 W] bytes each receive must bring */
    const unsigned char **sp;  /* [W] one exchange: send sc[q] bytes at sp[q] to rank q, */
    unsigned char **rp;        /* [W]   receive rc[q] bytes from it into rp[q] */
    size_t *sc, *rc;           /* [W] */
    const unsigned char **blk; /* [W] the blocks a reduction folds, in rank order */
    unsigned char *blocks;     /* [W][COMM_MPI_CHUNK] the blocks a reduction receives */
} mpi_state;

int comm_have_mpi(void) {
    return 1;
}

/* MPI is finalised when the process ends normally (status 0, or 3: stopped on request, every rank
 * together). On a failure status it is not: MPI_Finalize waits for every rank, which would keep
 * this rank alive beside peers waiting for it; a rank that ends without MPI_Finalize makes mpirun
 * end the whole job at once. */
static void mpi_finalize_at_exit(int status, void *arg) {
    (void)arg;
    int done = 1;
    if (status != ZY_EXIT_OK && status != ZY_EXIT_STOPPED) return;
    if (MPI_Finalized(&done) == MPI_SUCCESS && !done) MPI_Finalize();
}

/* Requests an earlier operation left in flight (it failed or timed out). */
static int mpi_in_flight(const zy_comm *c) {
    const mpi_state *s = c->impl;
    int n = 0;
    for (int i = 0; i < 2 * c->world; i++) n += s->reqs[i] != MPI_REQUEST_NULL;
    return n;
}

/* Starts an operation: fails when MPI may still write into an earlier operation's buffers. */
static int mpi_begin(zy_comm *c) {
    mpi_state *s = c->impl;
    if (mpi_in_flight(c))
        return zy_fail_runtime("an earlier operation failed with messages in flight: this "
                               "communicator cannot be used any more");
    for (int i = 0; i < 2 * c->world; i++) s->peer[i] = -1, s->expect[i] = 0;
    return ZY_OK;
}

/* Names in who the peers with a request among [0, n) that has not completed (a receive from q or
 * a send to q that is still waiting: q has not reached this operation). */
static void mpi_pending_peers(const zy_comm *c, int n, char *who, size_t len) {
    const mpi_state *s = c->impl;
    size_t k = 0;
    who[0] = 0;
    for (int i = 0; i < n && k + 16 < len; i += 2) {
        int q = s->peer[i] >= 0 ? s->peer[i] : i + 1 < n ? s->peer[i + 1] : -1, pending = 0;
        for (int j = i; j < i + 2 && j < n && q >= 0; j++) {
            int flag = 1;
            MPI_Request_get_status(s->reqs[j], &flag, MPI_STATUS_IGNORE);
            pending |= !flag;
        }
        if (pending) k += (size_t)snprintf(who + k, len - k, "%s%d", k ? ", " : "", q);
    }
}

/* Waits for requests [0, n) until the deadline; checks each receive brought its expected size. */
static int mpi_wait(zy_comm *c, int n) {
    mpi_state *s = c->impl;
    double deadline = zy_now() + s->timeout_s;
    for (long spin = 0;; spin++) {
        int done = 0, rc = MPI_Testall(n, s->reqs, &done, s->st);
        if (rc == MPI_ERR_IN_STATUS)
            for (int i = 0; i < n; i++)
                if (s->st[i].MPI_ERROR != MPI_SUCCESS && s->st[i].MPI_ERROR != MPI_ERR_PENDING)
                    return s->peer[i] < 0 ? zy_fail_runtime("%s", mpi_describe(s->st[i].MPI_ERROR))
                                          : zy_fail_runtime("a message %s rank %d failed: %s",
                                                            i % 2 ? "to" : "from", s->peer[i],
                                                            mpi_describe(s->st[i].MPI_ERROR));
        if (rc != MPI_SUCCESS) return zy_fail_runtime("MPI_Testall failed: %s", mpi_describe(rc));
        if (done) break;
        if (zy_now() > deadline) {
            char who[256];
            mpi_pending_peers(c, n, who, sizeof who);
            return zy_fail_runtime("no answer within %g s from %s%s (stuck or dead)", s->timeout_s,
                                   who[0] ? "rank " : "the other ranks", who);
        }
        if (spin > 64) sched_yield(); /* oversubscribed ranks: let the peer run */
    }
    for (int i = 0; i < n; i += 2) {
        int got = 0;
        if (s->peer[i] < 0) continue;
        ZY_MPI_TRY(MPI_Get_count(&s->st[i], MPI_BYTE, &got));
        if ((size_t)got != s->expect[i])
            return zy_fail_runtime(
                "rank %d sent %d bytes where %zu were expected (the ranks called "
                "with different sizes)",
                s->peer[i], got, s->expect[i]);
    }
    return ZY_OK;
}

/* One exchange with every other rank q: sends s->sc[q] bytes at s->sp[q], receives s->rc[q]
 * bytes into s->rp[q], waits for all. This rank's own entries are left to the caller. A pair with
 * nothing to move either way exchanges no message (both sides see the same two sizes: what one
 * sends the other receives), so a reduce waits only for its root. */
static int mpi_exchange(zy_comm *c) {
    mpi_state *s = c->impl;
    ZY_TRY(mpi_begin(c));
    for (int q = 0; q < c->world; q++) {
        if (q == c->rank || (s->sc[q] == 0 && s->rc[q] == 0)) continue;
        s->peer[2 * q] = s->peer[2 * q + 1] = q;
        s->expect[2 * q] = s->rc[q];
        ZY_MPI_TRY(
            MPI_Irecv(s->rp[q], (int)s->rc[q], MPI_BYTE, q, TAG_COLL, s->comm, &s->reqs[2 * q]));
        ZY_MPI_TRY(MPI_Isend(s->sp[q], (int)s->sc[q], MPI_BYTE, q, TAG_COLL, s->comm,
                             &s->reqs[2 * q + 1]));
    }
    return mpi_wait(c, 2 * c->world);
}

/* out[i] = the rank-order fold blk[0][i] op blk[1][i] op ... op blk[w-1][i], i < n. Element by
 * element, so out may be one of the blocks (in place). Max keeps a NaN; the i64 sum wraps. */
#define MPI_FOLD(T, LOAD, STORE, ADD)                                                              \
    for (size_t i = 0; i < n; i++) {                                                               \
        T a = LOAD(blk[0], i);                                                                     \
        for (int r = 1; r < w; r++) {                                                              \
            T b = LOAD(blk[r], i);                                                                 \
            a = op == ZY_COMM_SUM ? ADD(a, b) : (b > a || b != b) ? b : a;                         \
        }                                                                                          \
        STORE(out, i, a);                                                                          \
    }
#define LD_F32(p, i)     (((const float *)(p))[i])
#define ST_F32(p, i, v)  (((float *)(p))[i] = (v))
#define LD_F64(p, i)     (((const double *)(p))[i])
#define ST_F64(p, i, v)  (((double *)(p))[i] = (v))
#define LD_I64(p, i)     (((const int64_t *)(p))[i])
#define ST_I64(p, i, v)  (((int64_t *)(p))[i] = (v))
#define LD_BF16(p, i)    zy_bf16_to_f32(((const uint16_t *)(p))[i])
#define ST_BF16(p, i, v) (((uint16_t *)(p))[i] = zy_f32_to_bf16(v)) /* exact: v is a bf16 value */
#define ADD_PLAIN(a, b)  ((a) + (b))
#define ADD_BF16(a, b)   zy_bf16_to_f32(zy_f32_to_bf16((a) + (b)))
#define ADD_WRAP(a, b)   ((int64_t)((uint64_t)(a) + (uint64_t)(b)))

static void mpi_fold(void *out, const unsigned char *const *blk, int w, size_t n, zy_comm_dtype t,
                     zy_comm_op op) {
    switch (t) {
    case ZY_COMM_F32:
        MPI_FOLD(float, LD_F32, ST_F32, ADD_PLAIN);
        break;
    case ZY_COMM_BF16:
        MPI_FOLD(float, LD_BF16, ST_BF16, ADD_BF16);
        break;
    case ZY_COMM_F64:
        MPI_FOLD(double, LD_F64, ST_F64, ADD_PLAIN);
        break;
    case ZY_COMM_I64:
        MPI_FOLD(int64_t, LD_I64, ST_I64, ADD_WRAP);
        break;
    }
}

/* One reduce-scatter step. s->sp[q] / s->sc[q] are this rank's values of rank q's block; every
 * rank's values of this rank's block (mine bytes each) arrive into s->blocks and are folded in rank
 * order into out (which may be s->sp[rank]: in place). */
static int mpi_reduce_step(zy_comm *c, size_t mine, zy_comm_dtype t, zy_comm_op op, void *out) {
    mpi_state *s = c->impl;
    for (int q = 0; q < c->world; q++) {
        s->rp[q] = s->blocks + (size_t)q * COMM_MPI_CHUNK;
        s->rc[q] = mine;
    }
    ZY_TRY(mpi_exchange(c));
    for (int q = 0; q < c->world; q++) s->blk[q] = q == c->rank ? s->sp[q] : s->rp[q];
    mpi_fold(out, s->blk, c->world, mine / comm_dtype_size(t), t, op);
    return ZY_OK;
}

static int mpi_reduce_scatter(zy_comm *c, const void *send, void *recv, size_t n_per_rank,
                              zy_comm_dtype t, zy_comm_op op) {
    mpi_state *s = c->impl;
    size_t e = comm_dtype_size(t), k = COMM_MPI_CHUNK / e;
    for (size_t p = 0; p < n_per_rank; p += k) {
        size_t m = n_per_rank - p < k ? n_per_rank - p : k;
        for (int q = 0; q < c->world; q++) {
            s->sp[q] = (const unsigned char *)send + ((size_t)q * n_per_rank + p) * e;
            s->sc[q] = m * e;
        }
        ZY_TRY(mpi_reduce_step(c, m * e, t, op, (unsigned char *)recv + p * e));
    }
    return ZY_OK;
}

/* reduce: by chunks, every other rank sends its values to the root, which folds them in rank
 * order (the fold all_reduce uses: the same bits). */
static int mpi_reduce(zy_comm *c, void *buf, size_t n, zy_comm_dtype t, zy_comm_op op, int root) {
    mpi_state *s = c->impl;
    const int me = c->rank, w = c->world;
    size_t e = comm_dtype_size(t), k = COMM_MPI_CHUNK / e;
    unsigned char *b = buf;
    for (size_t p = 0; p < n; p += k) {
        size_t m = (n - p < k ? n - p : k) * e;
        for (int q = 0; q < w; q++) {
            s->sp[q] = b + p * e;
            s->sc[q] = q == root ? m : 0;
            s->rp[q] = s->blocks + (size_t)q * COMM_MPI_CHUNK;
            s->rc[q] = me == root ? m : 0;
        }
        ZY_TRY(mpi_exchange(c));
        if (me != root) continue;
        for (int q = 0; q < w; q++) s->blk[q] = q == me ? b + p * e : s->rp[q];
        mpi_fold(b + p * e, s->blk, w, m / e, t, op);
    }
    return ZY_OK;
}

/* all_reduce: each chunk of W * COMM_MPI_CHUNK bytes is cut into W near-equal blocks (the first
 * m % W one element longer); block q is reduced on rank q, then every rank gathers the blocks. */
static int mpi_all_reduce(zy_comm *c, void *buf, size_t n, zy_comm_dtype t, zy_comm_op op) {
    mpi_state *s = c->impl;
    int w = c->world, me = c->rank;
    size_t e = comm_dtype_size(t), k = (size_t)w * (COMM_MPI_CHUNK / e);
    unsigned char *b = buf;
    for (size_t p = 0; p < n; p += k) {
        size_t m = n - p < k ? n - p : k, base = m / w, extra = m % w;
        for (size_t q = 0; q < (size_t)w; q++) {
            size_t off = q * base + (q < extra ? q : extra);
            s->sp[q] = b + (p + off) * e;
            s->sc[q] = (base + (q < extra)) * e;
        }
        unsigned char *mine = (unsigned char *)s->sp[me];
        size_t mine_bytes = s->sc[me];
        ZY_TRY(mpi_reduce_step(c, mine_bytes, t, op, mine));
        for (int q = 0; q < w; q++) { /* gather: my block to all, block q from rank q */
            s->rp[q] = (unsigned char *)s->sp[q];
            s->rc[q] = s->sc[q];
        }
        for (int q = 0; q < w; q++) s->sp[q] = mine, s->sc[q] = mine_bytes;
        ZY_TRY(mpi_exchange(c));
    }
    return ZY_OK;
}

/* all_gather (each rank's send goes whole to every rank) and all_to_all (send block q goes to rank
 * q): recv[q * npr ..) comes from rank q. This rank's own block is copied locally. */
static int mpi_move(zy_comm *c, const void *send, void *recv, size_t n_per_rank, zy_comm_dtype t,
                    int to_all) {
    mpi_state *s = c->impl;
    size_t e = comm_dtype_size(t), k = COMM_MPI_CHUNK / e, row = n_per_rank * e;
    const unsigned char *src = send;
    unsigned char *dst = recv;
    const unsigned char *own = src + (to_all ? 0 : (size_t)c->rank * row);
    if (dst + (size_t)c->rank * row != own) memmove(dst + (size_t)c->rank * row, own, row);
    for (size_t p = 0; p < n_per_rank; p += k) {
        size_t m = n_per_rank - p < k ? n_per_rank - p : k;
        for (int q = 0; q < c->world; q++) {
            s->sp[q] = src + (to_all ? 0 : (size_t)q * row) + p * e;
            s->rp[q] = dst + (size_t)q * row + p * e;
            s->sc[q] = s->rc[q] = m * e;
        }
        ZY_TRY(mpi_exchange(c));
    }
    return ZY_OK;
}

static int mpi_all_gather(zy_comm *c, const void *send, void *recv, size_t n_per_rank,
                          zy_comm_dtype t) {
    return mpi_move(c, send, recv, n_per_rank, t, 1);
}

static int mpi_all_to_all(zy_comm *c, const void *send, void *recv, size_t n_per_rank,
                          zy_comm_dtype t) {
    return mpi_move(c, send, recv, n_per_rank, t, 0);
}

/* Point to point from the root (not MPI_Ibcast), so a rank that does not take its part is named
 * by the deadline's error: the root names who did not receive, the others name the root. */
static int mpi_broadcast(zy_comm *c, void *buf, size_t n, zy_comm_dtype t, int root) {
    mpi_state *s = c->impl;
    size_t bytes = n * comm_dtype_size(t);
    for (size_t p = 0; p < bytes; p += COMM_MPI_CHUNK) {
        int m = (int)(bytes - p < COMM_MPI_CHUNK ? bytes - p : COMM_MPI_CHUNK);
        unsigned char *chunk = (unsigned char *)buf + p;
        ZY_TRY(mpi_begin(c));
        if (c->rank == root) {
            for (int q = 0; q < c->world; q++) {
                if (q == root) continue;
                s->peer[2 * q + 1] = q;
                ZY_MPI_TRY(
                    MPI_Isend(chunk, m, MPI_BYTE, q, TAG_COLL, s->comm, &s->reqs[2 * q + 1]));
            }
        } else {
            s->peer[2 * root] = root;
            s->expect[2 * root] = (size_t)m;
            ZY_MPI_TRY(MPI_Irecv(chunk, m, MPI_BYTE, root, TAG_COLL, s->comm, &s->reqs[2 * root]));
        }
        ZY_TRY(mpi_wait(c, 2 * c->world));
    }
    return ZY_OK;
}

/* send (recv = 0) or recv (recv = 1) of n elements with one peer, by chunks; each completes
 * before the next starts (a send may wait for the peer's matching recv). */
static int mpi_p2p(zy_comm *c, void *buf, size_t n, zy_comm_dtype t, int peer, int recv) {
    mpi_state *s = c->impl;
    size_t bytes = n * comm_dtype_size(t);
    for (size_t p = 0; p == 0 || p < bytes; p += COMM_MPI_CHUNK) { /* n = 0: one empty message */
        int m = (int)(bytes - p < COMM_MPI_CHUNK ? bytes - p : COMM_MPI_CHUNK);
        ZY_TRY(mpi_begin(c));
        s->peer[recv ? 0 : 1] = peer;
        s->expect[0] = (size_t)m;
        if (recv)
            ZY_MPI_TRY(MPI_Irecv((unsigned char *)buf + p, m, MPI_BYTE, peer, TAG_USER, s->comm,
                                 &s->reqs[0]));
        else
            ZY_MPI_TRY(MPI_Isend((unsigned char *)buf + p, m, MPI_BYTE, peer, TAG_USER, s->comm,
                                 &s->reqs[1]));
        ZY_TRY(mpi_wait(c, 2));
    }
    return ZY_OK;
}

static int mpi_send(zy_comm *c, const void *buf, size_t n, zy_comm_dtype t, int peer) {
    return mpi_p2p(c, (void *)buf, n, t, peer, 0); /* only read: MPI_Isend takes a const buffer */
}

static int mpi_recv(zy_comm *c, void *buf, size_t n, zy_comm_dtype t, int peer) {
    return mpi_p2p(c, buf, n, t, peer, 1);
}

static int mpi_barrier(zy_comm *c) {
    mpi_state *s = c->impl;
    ZY_TRY(mpi_begin(c));
    ZY_MPI_TRY(MPI_Ibarrier(s->comm, &s->reqs[0]));
    return mpi_wait(c, 1);
}

static void mpi_free(zy_comm *c) {
    mpi_state *s = c->impl;
    int finalized = 1;
    if (!s) return;
    /* Requests in flight may still write into our blocks: leave them (the process is ending). */
    if (mpi_in_flight(c)) return;
    if (MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) MPI_Comm_free(&s->comm);
    free(s->reqs), free(s->st), free(s->peer), free(s->expect);
    free(s->sp), free(s->rp), free(s->sc), free(s->rc), free(s->blk), free(s->blocks);
    free(s);
    c->impl = NULL;
}

static const zy_comm_backend mpi_backend = {
    .name = "mpi",
    .all_reduce = mpi_all_reduce,
    .reduce_scatter = mpi_reduce_scatter,
    .reduce = mpi_reduce,
    .all_gather = mpi_all_gather,
    .broadcast = mpi_broadcast,
    .send = mpi_send,
    .recv = mpi_recv,
    .all_to_all = mpi_all_to_all,
    .barrier = mpi_barrier,
    .free = mpi_free,
};

/* Starts MPI unless the process already has (then its owner finalises it), with the thread level
 * zayac needs: FUNNELED (only the thread that called comm_init_mpi calls the communicator; OpenMP
 * threads never do). */
static int mpi_start(void) {
    int inited = 0, finalized = 0, provided = 0;
    ZY_MPI_TRY(MPI_Finalized(&finalized));
    if (finalized) return zy_fail_runtime("MPI was finalised in this process: it cannot restart");
    ZY_MPI_TRY(MPI_Initialized(&inited));
    if (!inited) {
        ZY_MPI_TRY(MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided));
        on_exit(mpi_finalize_at_exit, NULL);
    } else {
        ZY_MPI_TRY(MPI_Query_thread(&provided));
    }
    if (provided < MPI_THREAD_FUNNELED)
        return zy_fail_runtime("MPI gives thread level %d, below MPI_THREAD_FUNNELED", provided);
    /* Errors come back as codes (each named in the error), instead of MPI aborting the job. */
    ZY_MPI_TRY(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    return ZY_OK;
}

int comm_init_mpi(zy_comm *c, double timeout_s) {
    memset(c, 0, sizeof *c);
    if (!(timeout_s > 0))
        return zy_fail("comm_init_mpi: the timeout must be more than 0 s (got %g)", timeout_s);
    MPI_Comm comm;
    int rank = 0, world = 0;
    if (mpi_start() != ZY_OK) return zy_fail_ctx("comm_init_mpi");
    ZY_MPI_TRY(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
    ZY_MPI_TRY(MPI_Comm_rank(comm, &rank));
    ZY_MPI_TRY(MPI_Comm_size(comm, &world));
    mpi_state *s = zy_calloc(1, sizeof *s);
    s->comm = comm;
    s->timeout_s = timeout_s;
    s->reqs = zy_calloc(2 * (size_t)world, sizeof *s->reqs);
    s->st = zy_calloc(2 * (size_t)world, sizeof *s->st);
    s->peer = zy_calloc(2 * (size_t)world, sizeof *s->peer);
    s->expect = zy_calloc(2 * (size_t)world, sizeof *s->expect);
    s->sp = zy_calloc(world, sizeof *s->sp);
    s->rp = zy_calloc(world, sizeof *s->rp);
    s->sc = zy_calloc(world, sizeof *s->sc);
    s->rc = zy_calloc(world, sizeof *s->rc);
    s->blk = zy_calloc(world, sizeof *s->blk);
    s->blocks = zy_malloc((size_t)world * COMM_MPI_CHUNK);
    for (int i = 0; i < 2 * world; i++) s->reqs[i] = MPI_REQUEST_NULL;
    c->rank = rank;
    c->world = world;
    c->b = &mpi_backend;
    c->impl = s;
    if (world > 1) zy_err_set_rank(rank); /* fatal messages name this process's rank */
    return ZY_OK;
}
#endif
