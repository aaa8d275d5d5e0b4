/* The communicator: one API for the collectives data parallel training needs, with three
 * backends: `single` (world size 1: every collective is the identity, so a plain run pays nothing),
 * `mpi` (CPU ranks over Open MPI: how every distributed path is tested on a machine without GPUs)
 * and `nccl` (CUDA ranks; buffers are device memory; dist/nccl_comm.h underneath). Buffers live
 * where the backend's ranks compute: host memory for single and mpi, device memory for nccl (which
 * also takes host memory for small values, staged through the device).
 *
 * Every call is collective over all ranks (send/recv: over the pair) and returns ZY_OK, or ZY_ERR
 * with a runtime error (zy_fail_runtime) naming the operation, the peer or rank when known: a dead
 * or stuck peer becomes an error within the communicator's timeout, never a hang. Results are
 * bit-identical on every rank (each element is reduced in one fixed order for a given world size),
 * so replicated state (weights, balancing biases) stays identical across ranks.
 * bf16 sums accumulate in fp32 and round once per step of the reduction (as NCCL does). */
#ifndef ZY_DIST_COMM_H
#define ZY_DIST_COMM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    ZY_COMM_F32 = 0,
    ZY_COMM_BF16 = 1, /* uint16_t storage */
    ZY_COMM_F64 = 2,
    ZY_COMM_I64 = 3
} zy_comm_dtype;

typedef enum { ZY_COMM_SUM = 0, ZY_COMM_MAX = 1 } zy_comm_op;

typedef struct zy_comm zy_comm;

/* A backend: the operations behind the API (all counts are elements, not bytes). */
typedef struct {
    const char *name; /* "single", "mpi", "nccl" */
    int (*all_reduce)(zy_comm *c, void *buf, size_t n, zy_comm_dtype t, zy_comm_op op);
    int (*reduce_scatter)(zy_comm *c, const void *send, void *recv, size_t n_per_rank,
                          zy_comm_dtype t, zy_comm_op op);
    int (*reduce)(zy_comm *c, void *buf, size_t n, zy_comm_dtype t, zy_comm_op op, int root);
    int (*all_gather)(zy_comm *c, const void *send, void *recv, size_t n_per_rank, zy_comm_dtype t);
    int (*broadcast)(zy_comm *c, void *buf, size_t n, zy_comm_dtype t, int root);
    int (*send)(zy_comm *c, const void *buf, size_t n, zy_comm_dtype t, int peer);
    int (*recv)(zy_comm *c, void *buf, size_t n, zy_comm_dtype t, int peer);
    int (*all_to_all)(zy_comm *c, const void *send, void *recv, size_t n_per_rank, zy_comm_dtype t);
    int (*barrier)(zy_comm *c);
    /* completes the operations queued while deferred (NULL: the backend never defers) */
    int (*complete)(zy_comm *c);
    void (*free)(zy_comm *c);
    /* comm_mark / comm_wait_mark (NULL: the backend never defers, so there is nothing to wait) */
    int (*mark)(zy_comm *c, int slot);
    int (*wait_mark)(zy_comm *c, int slot);
} zy_comm_backend;

struct zy_comm {
    int rank, world;
    int deferred; /* comm_defer's depth: operations may return once queued while > 0 */
    const zy_comm_backend *b;
    void *impl; /* the backend's state */
};

/* World size 1 (rank 0): every collective copies or does nothing. */
void comm_init_single(zy_comm *c);
/* MPI_COMM_WORLD (initialising MPI when the process has not); ZY_ERR when zayac was built
 * without MPI or MPI fails to start. timeout_s bounds every wait (a dead peer: error, not hang). */
int comm_init_mpi(zy_comm *c, double timeout_s);
/* Whether this build has the MPI backend. */
int comm_have_mpi(void);
/* Releases the backend (MPI is finalised at exit, not here: it cannot be restarted). */
void comm_free(zy_comm *c);

/* The API: see the file comment. reduce_scatter: rank r receives the reduction of every rank's
 * send[r*n_per_rank ..) (recv [n_per_rank]); all_gather: recv[q*n_per_rank ..) = rank q's send;
 * all_to_all: rank r's send[q*n_per_rank ..) goes to rank q's recv[r*n_per_rank ..). */
int comm_all_reduce(zy_comm *c, void *buf, size_t n, zy_comm_dtype t, zy_comm_op op);
int comm_reduce_scatter(zy_comm *c, const void *send, void *recv, size_t n_per_rank,
                        zy_comm_dtype t, zy_comm_op op);
/* reduce: root's buf becomes the reduction of every rank's buf (the other ranks' buf is left as it
 * was). Uneven shards: the reduce-scatter of a buffer whose parts have different owners is one
 * reduce per part, each to its owner (ZeRO-1 with whole-tensor ownership); the bytes each rank
 * sends over all parts are those of one reduce-scatter. The root's result has the bits
 * all_reduce would give every rank. */
int comm_reduce(zy_comm *c, void *buf, size_t n, zy_comm_dtype t, zy_comm_op op, int root);
int comm_all_gather(zy_comm *c, const void *send, void *recv, size_t n_per_rank, zy_comm_dtype t);
int comm_broadcast(zy_comm *c, void *buf, size_t n, zy_comm_dtype t, int root);
int comm_send(zy_comm *c, const void *buf, size_t n, zy_comm_dtype t, int peer);
int comm_recv(zy_comm *c, void *buf, size_t n, zy_comm_dtype t, int peer);
int comm_all_to_all(zy_comm *c, const void *send, void *recv, size_t n_per_rank, zy_comm_dtype t);
int comm_barrier(zy_comm *c);
/* Deferred completion, so communication overlaps the work queued after it (the gradient buckets
 * reduced while the backward goes on): after comm_defer(c, 1) an operation may return once it is
 * queued on the device, before it has run; its buffers must stay untouched (on any stream) until
 * comm_complete(c) returns, which waits for every operation queued since, with the
 * communicator's deadline. The mode nests: each comm_defer(c, 0) ends one comm_defer(c, 1), and
 * the last one completes what is pending (the weights' broadcast, deferred from the end of one
 * step into the next forward, ends inside that forward, while the gradient reduces deferred
 * before it must stay deferred through the backward). The host backends (single, mpi) complete
 * each operation before returning: for them it changes nothing. An error of a deferred operation
 * is reported by comm_complete. */
int comm_defer(zy_comm *c, int on);
int comm_complete(zy_comm *c);
/* Partial completion, so the compute that needs a deferred operation's result waits for that one
 * only (the weights broadcast after the update, layer by layer, while the next forward runs):
 * comm_mark(c, slot) remembers the point after the operations queued so far; comm_wait_mark(c,
 * slot) waits until every operation before that point has completed, guarded by the
 * communicator's deadline like comm_complete (a host wait: work queued on the device before it
 * keeps running). slot: 0 <= slot < ZY_COMM_MARKS. Host backends: nothing to wait for. */
#define ZY_COMM_MARKS 1024
int comm_mark(zy_comm *c, int slot);
int comm_wait_mark(zy_comm *c, int slot);
/* Bytes of one element. */
size_t comm_dtype_size(zy_comm_dtype t);

#ifdef __cplusplus
}
#endif

#endif
