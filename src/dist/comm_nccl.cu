/* The communicator's NCCL backend (comm_nccl.h): each operation of comm.h as one NCCL call (or one
 * group of sends and receives) on the communicator's stream, bracketed by the stream rule of
 * comm_nccl.h: op_begin orders it after the producer stream, op_end waits for it with
 * dist/nccl_comm.h's guarded wait (NCCL errors, dead peers and the deadline are polled).
 *
 * Identical results on every rank: in each of NCCL's all-reduce algorithms every element is
 * reduced once, by one rank (ring: the last hop of the reduce-scatter phase; tree: the root) or by
 * the switch (NVLS, CollNet), and that one value is then sent to every rank (the ring's all-gather
 * phase, the tree's broadcast, a multicast). The order of the reduction depends on the algorithm,
 * protocol and channels NCCL picks for the size and topology: fixed for a given world, machine and
 * NCCL version and settings (runs repeat bit for bit), but not the rank order a CPU sums in. */
#include "dist/comm_nccl.h"
#include "dist/nccl_comm.h"
#include "base/check.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    dist_comm dc;       /* the NCCL communicator, its stream, watchdog and guarded waits */
    cudaStream_t after; /* operations start after the work queued on it (NULL: legacy default) */
    cudaEvent_t ready;  /* recorded on `after`, waited for by the communicator's stream */
    cudaEvent_t done;   /* recorded after an operation, waited for by the host */
    float *one;         /* [1] device: the barrier's all-reduce */
    int broken;         /* an operation failed and the communicator was aborted */
    int pending;        /* operations queued under comm_defer and not yet waited for */
    cudaEvent_t *marks; /* [ZY_COMM_MARKS] comm_mark's points (created when first used) */
    void *stage;        /* device copy of host buffers (grows to the largest seen) */
    size_t stage_bytes;
    char last[160]; /* the last of them, for messages */
} nccl_impl;

typedef enum {
    OP_ALL_REDUCE,
    OP_REDUCE_SCATTER,
    OP_REDUCE,
    OP_ALL_GATHER,
    OP_BROADCAST,
    OP_SEND,
    OP_RECV,
    OP_ALL_TO_ALL
} op_kind;

/* One operation: n counts elements (per rank for reduce_scatter, all_gather and all_to_all);
 * peer is the root of a broadcast or the other rank of a send/recv. */
typedef struct {
    op_kind kind;
    const char *name; /* for messages: "all_reduce", "barrier", ... */
    const void *send;
    void *recv;
    size_t n;
    zy_comm_dtype t;
    zy_comm_op op;
    int peer;
} op_args;

static nccl_impl *impl_of(zy_comm *c) {
    return (nccl_impl *)c->impl;
}

/* NCCL's names of comm.h's dtypes and reductions (indexed by their values). */
static ncclDataType_t nccl_type(zy_comm_dtype t) {
    static const ncclDataType_t types[] = {ncclFloat32, ncclBfloat16, ncclFloat64, ncclInt64};
    ZY_CHECKF((unsigned)t < 4, "unknown zy_comm_dtype %d", (int)t);
    return types[t];
}

static ncclRedOp_t nccl_op(zy_comm_op op) {
    ZY_CHECKF(op == ZY_COMM_SUM || op == ZY_COMM_MAX, "unknown zy_comm_op %d", (int)op);
    return op == ZY_COMM_SUM ? ncclSum : ncclMax;
}

/* "all_reduce of 1024 bf16 (sum)", "all_gather of 8 f32 per rank", "send of 8 f32 to rank 1",
 * ... for messages. */
static void describe(const op_args *a, char *buf, size_t len) {
    static const char *types[] = {"f32", "bf16", "f64", "i64"};
    if (strcmp(a->name, "barrier") == 0) { /* its one element is an implementation detail */
        snprintf(buf, len, "barrier");
        return;
    }
    int k =
        snprintf(buf, len, "%s of %zu %s", a->name, a->n, (unsigned)a->t < 4 ? types[a->t] : "?");
    if (k < 0 || (size_t)k >= len) return;
    char *end = buf + k;
    size_t left = len - (size_t)k;
    switch (a->kind) {
    case OP_ALL_REDUCE:
        snprintf(end, left, " (%s)", a->op == ZY_COMM_MAX ? "max" : "sum");
        break;
    case OP_REDUCE_SCATTER:
        snprintf(end, left, " per rank (%s)", a->op == ZY_COMM_MAX ? "max" : "sum");
        break;
    case OP_REDUCE:
        snprintf(end, left, " to rank %d (%s)", a->peer, a->op == ZY_COMM_MAX ? "max" : "sum");
        break;
    case OP_ALL_GATHER:
    case OP_ALL_TO_ALL:
        snprintf(end, left, " per rank");
        break;
    case OP_BROADCAST:
    case OP_RECV:
        snprintf(end, left, " from rank %d", a->peer);
        break;
    case OP_SEND:
        snprintf(end, left, " to rank %d", a->peer);
        break;
    }
}

/* Orders the communicator's stream after the work queued so far on the producer stream. */
static int op_begin(nccl_impl *m) {
    ZY_CUDA_TRY(cudaEventRecord(m->ready, m->after));
    ZY_CUDA_TRY(cudaStreamWaitEvent((cudaStream_t)m->dc.stream, m->ready, 0));
    return ZY_OK;
}

/* Rank r's sends and receives of all_to_all (inside a group): block q of send goes to rank q,
 * block q of recv comes from rank q. */
static int queue_all_to_all(dist_comm *d, const op_args *a) {
    ncclComm_t comm = (ncclComm_t)d->nccl;
    cudaStream_t s = (cudaStream_t)d->stream;
    ncclDataType_t dt = nccl_type(a->t);
    size_t block = a->n * comm_dtype_size(a->t);
    for (int q = 0; q < d->world; q++) {
        ZY_NCCL_COMM_TRY(d, ncclSend((const char *)a->send + q * block, a->n, dt, q, comm, s));
        ZY_NCCL_COMM_TRY(d, ncclRecv((char *)a->recv + q * block, a->n, dt, q, comm, s));
    }
    return ZY_OK;
}

/* A send or a receive (inside a group). */
static int queue_p2p(dist_comm *d, const op_args *a) {
    ncclComm_t comm = (ncclComm_t)d->nccl;
    cudaStream_t s = (cudaStream_t)d->stream;
    if (a->kind == OP_SEND)
        ZY_NCCL_COMM_TRY(d, ncclSend(a->send, a->n, nccl_type(a->t), a->peer, comm, s));
    else
        ZY_NCCL_COMM_TRY(d, ncclRecv(a->recv, a->n, nccl_type(a->t), a->peer, comm, s));
    return ZY_OK;
}

/* Queues the operation on the communicator's stream. */
static int op_queue(dist_comm *d, const op_args *a) {
    ncclComm_t comm = (ncclComm_t)d->nccl;
    cudaStream_t s = (cudaStream_t)d->stream;
    ncclDataType_t dt = nccl_type(a->t);
    switch (a->kind) {
    case OP_ALL_REDUCE:
        ZY_NCCL_COMM_TRY(d, ncclAllReduce(a->send, a->recv, a->n, dt, nccl_op(a->op), comm, s));
        return ZY_OK;
    case OP_REDUCE_SCATTER:
        ZY_NCCL_COMM_TRY(d, ncclReduceScatter(a->send, a->recv, a->n, dt, nccl_op(a->op), comm, s));
        return ZY_OK;
    case OP_REDUCE:
        ZY_NCCL_COMM_TRY(d,
                         ncclReduce(a->send, a->recv, a->n, dt, nccl_op(a->op), a->peer, comm, s));
        return ZY_OK;
    case OP_ALL_GATHER:
        ZY_NCCL_COMM_TRY(d, ncclAllGather(a->send, a->recv, a->n, dt, comm, s));
        return ZY_OK;
    case OP_BROADCAST:
        ZY_NCCL_COMM_TRY(d, ncclBroadcast(a->send, a->recv, a->n, dt, a->peer, comm, s));
        return ZY_OK;
    case OP_SEND:
    case OP_RECV:
    case OP_ALL_TO_ALL: {
        /* A group, ended even when queueing inside it failed (NCCL's group state is per thread). */
        ZY_NCCL_COMM_TRY(d, ncclGroupStart());
        int st = a->kind == OP_ALL_TO_ALL ? queue_all_to_all(d, a) : queue_p2p(d, a);
        ZY_NCCL_COMM_TRY(d, ncclGroupEnd());
        return st;
    }
    }
    ZY_CHECKF(0, "unknown op_kind %d", (int)a->kind);
    return ZY_ERR;
}

/* Waits until the operation, and every one queued before it on the communicator's stream, has
 * completed on the device (guarded: NCCL errors, dead peers and the deadline are polled). */
static int op_end(nccl_impl *m, const char *what) {
    ZY_CUDA_TRY(cudaEventRecord(m->done, (cudaStream_t)m->dc.stream));
    int rc = dist_comm_wait_event(&m->dc, m->done, what);
    if (rc == ZY_OK) m->pending = 0;
    return rc;
}

/* An operation failed: abort the communicator (stopping kernels that wait for a peer), so later
 * calls fail at once. */
static int op_failed(nccl_impl *m) {
    dist_comm_abort(&m->dc);
    m->broken = 1;
    return ZY_ERR;
}

/* Runs one operation to completion, or only queues it while the communicator is deferred
 * (comm_defer: nccl_complete waits). The dispatch (comm.c) names the operation, backend and rank
 * in front of the error; here it gets the size and type. */
/* 1 when p is host memory (not a device or managed allocation CUDA knows). */
static int is_host(const void *p) {
    cudaPointerAttributes at;
    if (!p) return 0;
    if (cudaPointerGetAttributes(&at, p) != cudaSuccess) {
        cudaGetLastError(); /* older runtimes: an unknown pointer is an error, and host memory */
        return 1;
    }
    return at.type == cudaMemoryTypeHost || at.type == cudaMemoryTypeUnregistered;
}

/* Elements of the operation's send and receive buffers (per-rank counts times the world where
 * the buffer holds every rank's block). */
static void buffer_counts(const op_args *a, int world, size_t *send, size_t *recv) {
    const size_t all = a->n * (size_t)world;
    *send = a->kind == OP_REDUCE_SCATTER || a->kind == OP_ALL_TO_ALL ? all : a->n;
    *recv = a->kind == OP_ALL_GATHER || a->kind == OP_ALL_TO_ALL ? all : a->n;
}

static int stage_grow(nccl_impl *m, size_t bytes) {
    if (bytes <= m->stage_bytes) return ZY_OK;
    if (m->stage) ZY_CUDA_TRY(cudaFree(m->stage));
    m->stage = NULL;
    m->stage_bytes = 0;
    ZY_CUDA_TRY(cudaMalloc(&m->stage, bytes));
    m->stage_bytes = bytes;
    return ZY_OK;
}

/* The operation on host buffers (the step's scalars and counts: small): copied to the staging
 * buffer on the communicator's stream, run there, copied back, completed before returning (also
 * when deferred: the host buffers must be final when the call returns). */
static int op_run_staged(zy_comm *c, const op_args *a, const char *what) {
    nccl_impl *m = impl_of(c);
    cudaStream_t st = (cudaStream_t)m->dc.stream;
    const size_t e = comm_dtype_size(a->t);
    size_t ns, nr;
    buffer_counts(a, c->world, &ns, &nr);
    const int in_place = a->send == a->recv;
    ZY_TRY(stage_grow(m, (ns + (in_place ? 0 : nr)) * e + 256));
    op_args d = *a;
    char *base = (char *)m->stage;
    d.send = a->send ? base : NULL;
    d.recv = a->recv ? (in_place ? base : base + ((ns * e + 255) / 256) * 256) : NULL;
    if (a->send)
        ZY_CUDA_TRY(cudaMemcpyAsync((void *)d.send, a->send, ns * e, cudaMemcpyHostToDevice, st));
    if (a->recv && !in_place && a->kind != OP_RECV) /* out of place: receive over a copy */
        ZY_CUDA_TRY(cudaMemcpyAsync(d.recv, a->recv, nr * e, cudaMemcpyHostToDevice, st));
    if (op_begin(m) != ZY_OK || op_queue(&m->dc, &d) != ZY_OK)
        return zy_fail_ctx("queueing %s", what);
    if (a->recv) ZY_CUDA_TRY(cudaMemcpyAsync(a->recv, d.recv, nr * e, cudaMemcpyDeviceToHost, st));
    return op_end(m, what);
}

/* Runs one operation to completion, or only queues it while the communicator is deferred
 * (comm_defer: nccl_complete waits). Host buffers are staged through device memory. The
 * dispatch (comm.c) names the operation, backend and rank in front of the error; here it gets the
 * size and type. */
static int op_run(zy_comm *c, const op_args *a) {
    nccl_impl *m = impl_of(c);
    if (m->broken)
        return zy_fail_runtime("the NCCL communicator was aborted after an earlier error");
    if (a->n == 0) return ZY_OK; /* nothing to move; NCCL versions differ on empty calls */
    char what[160];
    describe(a, what, sizeof what);
    const int host = is_host(a->send) || is_host(a->recv);
    if (host && is_host(a->send) != is_host(a->recv) && a->send && a->recv)
        return zy_fail("%s: one buffer in host and one in device memory", what);
    if (host) return op_run_staged(c, a, what) == ZY_OK ? ZY_OK : op_failed(m);
    int rc = op_begin(m) == ZY_OK && op_queue(&m->dc, a) == ZY_OK
                 ? ZY_OK
                 : zy_fail_ctx("queueing %s", what);
    if (rc == ZY_OK && c->deferred) {
        m->pending++;
        snprintf(m->last, sizeof m->last, "%s", what);
        return ZY_OK;
    }
    if (rc == ZY_OK) rc = op_end(m, what);
    return rc == ZY_OK ? ZY_OK : op_failed(m);
}

/* Records the point after the operations queued so far on the communicator's stream. */
static int nccl_mark(zy_comm *c, int slot) {
    nccl_impl *m = impl_of(c);
    if (!m->marks) m->marks = (cudaEvent_t *)zy_calloc(ZY_COMM_MARKS, sizeof *m->marks);
    if (!m->marks[slot])
        ZY_CUDA_TRY(cudaEventCreateWithFlags(&m->marks[slot], cudaEventDisableTiming));
    ZY_CUDA_TRY(cudaEventRecord(m->marks[slot], (cudaStream_t)m->dc.stream));
    return ZY_OK;
}

/* Waits (guarded, as op_end) for a recorded point; an unrecorded slot has nothing to wait for. */
static int nccl_wait_mark(zy_comm *c, int slot) {
    nccl_impl *m = impl_of(c);
    if (m->broken)
        return zy_fail_runtime("the NCCL communicator was aborted after an earlier error");
    if (!m->marks || !m->marks[slot]) return ZY_OK;
    char what[224];
    snprintf(what, sizeof what, "deferred operations up to mark %d (the last queued: %s)", slot,
             m->last);
    return dist_comm_wait_event(&m->dc, m->marks[slot], what) == ZY_OK ? ZY_OK : op_failed(m);
}

/* Waits for the operations queued under comm_defer. */
static int nccl_complete(zy_comm *c) {
    nccl_impl *m = impl_of(c);
    if (m->broken)
        return zy_fail_runtime("the NCCL communicator was aborted after an earlier error");
    if (!m->pending) return ZY_OK;
    char what[224];
    snprintf(what, sizeof what, "%d deferred operations (the last: %s)", m->pending, m->last);
    return op_end(m, what) == ZY_OK ? ZY_OK : op_failed(m);
}

static op_args args(op_kind kind, const char *name, const void *send, void *recv, size_t n,
                    zy_comm_dtype t) {
    op_args a;
    memset(&a, 0, sizeof a);
    a.kind = kind, a.name = name, a.send = send, a.recv = recv, a.n = n, a.t = t;
    return a;
}

static int nccl_all_reduce(zy_comm *c, void *buf, size_t n, zy_comm_dtype t, zy_comm_op op) {
    op_args a = args(OP_ALL_REDUCE, "all_reduce", buf, buf, n, t);
    a.op = op;
    return op_run(c, &a);
}

static int nccl_reduce_scatter(zy_comm *c, const void *send, void *recv, size_t n_per_rank,
                               zy_comm_dtype t, zy_comm_op op) {
    op_args a = args(OP_REDUCE_SCATTER, "reduce_scatter", send, recv, n_per_rank, t);
    a.op = op;
    return op_run(c, &a);
}

static int nccl_reduce(zy_comm *c, void *buf, size_t n, zy_comm_dtype t, zy_comm_op op, int root) {
    op_args a = args(OP_REDUCE, "reduce", buf, buf, n, t);
    a.op = op;
    a.peer = root;
    return op_run(c, &a);
}

static int nccl_all_gather(zy_comm *c, const void *send, void *recv, size_t n_per_rank,
                           zy_comm_dtype t) {
    op_args a = args(OP_ALL_GATHER, "all_gather", send, recv, n_per_rank, t);
    return op_run(c, &a);
}

static int nccl_broadcast(zy_comm *c, void *buf, size_t n, zy_comm_dtype t, int root) {
    op_args a = args(OP_BROADCAST, "broadcast", buf, buf, n, t);
    a.peer = root;
    return op_run(c, &a);
}

static int nccl_send(zy_comm *c, const void *buf, size_t n, zy_comm_dtype t, int peer) {
    op_args a = args(OP_SEND, "send", buf, NULL, n, t);
    a.peer = peer;
    return op_run(c, &a);
}

static int nccl_recv(zy_comm *c, void *buf, size_t n, zy_comm_dtype t, int peer) {
    op_args a = args(OP_RECV, "recv", NULL, buf, n, t);
    a.peer = peer;
    return op_run(c, &a);
}

static int nccl_all_to_all(zy_comm *c, const void *send, void *recv, size_t n_per_rank,
                           zy_comm_dtype t) {
    op_args a = args(OP_ALL_TO_ALL, "all_to_all", send, recv, n_per_rank, t);
    return op_run(c, &a);
}

/* An all-reduce of one element: it completes only once every rank has called it. */
static int nccl_barrier(zy_comm *c) {
    nccl_impl *m = impl_of(c);
    op_args a = args(OP_ALL_REDUCE, "barrier", m->one, m->one, 1, ZY_COMM_F32);
    return op_run(c, &a);
}

/* Releases the communicator (finalized when healthy, its resources only after an abort). */
static void nccl_free(zy_comm *c) {
    nccl_impl *m = impl_of(c);
    if (!m) return;
    int st = dist_comm_free(&m->dc);
    if (m->ready) ZY_CUDA_NOTE(st, cudaEventDestroy(m->ready));
    if (m->done) ZY_CUDA_NOTE(st, cudaEventDestroy(m->done));
    if (m->one) ZY_CUDA_NOTE(st, cudaFree(m->one));
    if (m->stage) ZY_CUDA_NOTE(st, cudaFree(m->stage));
    for (int i = 0; m->marks && i < ZY_COMM_MARKS; i++)
        if (m->marks[i]) ZY_CUDA_NOTE(st, cudaEventDestroy(m->marks[i]));
    free(m->marks);
    if (st != ZY_OK) /* nothing to return it to: said, as the other warnings are */
        fprintf(stderr, "warning: releasing the NCCL communicator: %s\n", zy_errmsg());
    free(m);
    c->impl = NULL;
}

/* Positional (C++17 has no designated initializers): the order of zy_comm_backend's fields. */
static const zy_comm_backend nccl_backend = {
    "nccl",         nccl_all_reduce, nccl_reduce_scatter, nccl_reduce,     nccl_all_gather,
    nccl_broadcast, nccl_send,       nccl_recv,           nccl_all_to_all, nccl_barrier,
    nccl_complete,  nccl_free,       nccl_mark,           nccl_wait_mark,
};

/* The watchdog's report of a blocking NCCL call that does not return or of a peer that died
 * during one: the call cannot be interrupted, so the process ends (exit 1: a retry may help). */
static void nccl_stuck(const char *msg, void *ctx) {
    (void)ctx;
    zy_fatal_runtime_at(__FILE__, __LINE__, "NCCL watchdog", "%s", msg);
}

/* The events and the barrier's element (the communicator itself is made by the caller). */
static int impl_init(nccl_impl *m) {
    ZY_CUDA_TRY(cudaEventCreateWithFlags(&m->ready, cudaEventDisableTiming));
    ZY_CUDA_TRY(cudaEventCreateWithFlags(&m->done, cudaEventDisableTiming));
    ZY_CUDA_TRY(cudaMalloc((void **)&m->one, sizeof *m->one));
    ZY_CUDA_TRY(cudaMemset(m->one, 0, sizeof *m->one));
    return ZY_OK;
}

/* NCCL's Simple protocol unless the user chose (NCCL_PROTO), for this communicator of the training
 * step (`zayac bench collectives` keeps NCCL's own choice): the gradient reduces run beside the
 * backward, and there the protocol NCCL picked for them by itself slowed the backward's kernels
 * more than it sped the transfer: bench-small, 2 x H200, 54.4 ms a step, 52.6 with Simple (1 GPU
 * 49.9; results/data-parallel/README.md). The step's few small all-reduces lose microseconds. Set
 * before NCCL's first call in the process, which reads its environment. */
static void default_protocol(void) {
    setenv("NCCL_PROTO", "Simple", 0);
}

int comm_init_nccl(zy_comm *c, dist_rdv *rdv, int device, double timeout_s) {
    memset(c, 0, sizeof *c);
    ZY_CHECKF(rdv != NULL, "comm_init_nccl needs the ranks' rendezvous (a world of 1 has one too)");
    if (!(timeout_s > 0))
        return zy_fail("nccl communicator: the timeout must be positive (got %g s)", timeout_s);
    nccl_impl *m = (nccl_impl *)zy_calloc(1, sizeof *m);
    default_protocol();
    int rc = dist_comm_init(&m->dc, rdv, device, timeout_s, 0, nccl_stuck, NULL);
    if (rc == ZY_OK) rc = impl_init(m);
    c->rank = rdv->rank;
    c->world = rdv->world;
    c->b = &nccl_backend;
    c->impl = m;
    if (rc != ZY_OK) {
        /* The first error is the one to report: releasing may record another. */
        char why[1024];
        snprintf(why, sizeof why, "%s", zy_errmsg());
        dist_comm_abort(&m->dc); /* a half-made communicator is not finalized */
        nccl_free(c);
        memset(c, 0, sizeof *c);
        return zy_fail_runtime("nccl communicator (rank %d of %d, device %d): %s", rdv->rank,
                               rdv->world, device, why);
    }
    return ZY_OK;
}

void comm_nccl_order_after(zy_comm *c, void *cuda_stream) {
    ZY_CHECKF(c->b == &nccl_backend, "comm_nccl_order_after on a %s communicator",
              c->b ? c->b->name : "released");
    impl_of(c)->after = (cudaStream_t)cuda_stream;
}
