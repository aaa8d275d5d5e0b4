/* Rendezvous and control channel over TCP. Rank 0 serves at MASTER_ADDR:MASTER_PORT; every other
 * rank connects to it (a star). The connections then carry small host-side messages: the NCCL
 * unique id (broadcast), timings and error counts (all-reduce), barriers. Every wait has a
 * deadline, and a peer whose process dies closes its socket, which the others see: a missing or
 * dead rank ends the job with an error naming it, never a hang. */
#ifndef ZY_DIST_RDV_H
#define ZY_DIST_RDV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int rank, world;
    int *fds; /* rank 0: [world] sockets to each peer (fds[0] = -1); others: [1] to rank 0 */
    double timeout_s; /* deadline of each wait */
    uint32_t seq;     /* control operations done so far; frames carry it to catch mismatches */
    char where[300];  /* "host:port", for messages */
} dist_rdv;

typedef enum { DIST_OP_SUM = 0, DIST_OP_MAX = 1, DIST_OP_MIN = 2 } dist_op;

/* Connects all ranks: rank 0 listens at port (on every interface), the others connect to
 * addr:port, retrying until timeout_s. A rank that does not arrive in time, a duplicate rank or
 * a different world size is an error naming it. world == 1 opens no socket.
 * With several ranks, sets the rank that this thread's fatal messages name (zy_err_set_rank). */
int dist_rdv_init(dist_rdv *r, int rank, int world, const char *addr, int port, double timeout_s);
/* Closes every connection (peers see it as this rank going away). */
void dist_rdv_free(dist_rdv *r);
/* Copies rank 0's len bytes at buf into buf on every rank. */
int dist_rdv_bcast(dist_rdv *r, void *buf, size_t len);
/* all[q*len .. (q+1)*len) = rank q's mine, on every rank. */
int dist_rdv_allgather(dist_rdv *r, const void *mine, size_t len, void *all);
/* Returns once every rank has called it. */
int dist_rdv_barrier(dist_rdv *r);
/* Element-wise reduction of v[n] over ranks; every rank gets bit-identical results. */
int dist_rdv_allreduce_f64(dist_rdv *r, double *v, int n, dist_op op);
int dist_rdv_allreduce_u64(dist_rdv *r, uint64_t *v, int n, dist_op op);
/* Does not block: an error if a peer (rank 0: any rank; others: rank 0) has closed its
 * connection, which is what a dead process looks like. */
int dist_rdv_check_peers(dist_rdv *r);

#ifdef __cplusplus
}
#endif

#endif
