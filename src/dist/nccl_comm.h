/* NCCL communicator setup and guarded waits. Every wait for GPU work polls the communicator, the
 * control channel and a deadline, so a dead or stuck peer turns into an error (and an aborted
 * communicator) instead of a hang. NCCL calls that can block (init, and the enqueue of an
 * operation that must first connect to its peers) run under a watchdog. The communicator is
 * blocking by default: with a non-blocking one every NCCL call cost 40-90 us of host time on
 * H200 (bench/NOTES.md), too slow for small messages. */
#ifndef ZY_DIST_NCCL_COMM_H
#define ZY_DIST_NCCL_COMM_H

#include "dist/rdv.h"
#include "dist/watchdog.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    void *nccl;       /* ncclComm_t */
    void *stream;     /* cudaStream_t, owned */
    int rank, world;  /* this process in the communicator */
    int device;       /* CUDA device of this rank */
    double timeout_s; /* the longest any single wait may take */
    dist_rdv *rdv;    /* control channel, polled for dead peers while waiting */
    int nonblocking;  /* created with NCCL's blocking = 0 */
    dist_watchdog wd; /* guards blocking NCCL calls (see ZY_NCCL_COMM_TRY) */
} dist_comm;

/* Selects device, makes rank 0's NCCL unique id known to every rank through rdv and creates the
 * communicator; within timeout_s, or an error naming what did not arrive. stuck (may be NULL) is
 * called from the watchdog thread when a blocking NCCL call outlives timeout_s or a peer dies
 * during it; the CLI's prints the reason and ends the process. */
int dist_comm_init(dist_comm *c, dist_rdv *rdv, int device, double timeout_s, int nonblocking,
                   dist_stuck_fn stuck, void *stuck_ctx);
/* Completes an NCCL call's result: ncclInProgress is polled to completion; an error is named with
 * what (the call). `result` is an ncclResult_t. */
int dist_comm_check(dist_comm *c, int result, const char *what, const char *file, int line);
/* Waits for a CUDA event (cudaEvent_t) recorded after NCCL work, polling for NCCL errors, dead
 * peers and the deadline; what says what was waited for in errors. */
int dist_comm_wait_event(dist_comm *c, void *event, const char *what);
/* Aborts the communicator (after an error: stops kernels that wait for a peer). */
void dist_comm_abort(dist_comm *c);
/* Finalizes and destroys the communicator and its stream. */
int dist_comm_free(dist_comm *c);
/* base/check.h's TRY tier for NCCL calls on a communicator: runs the call (an expression of type
 * ncclResult_t) under the watchdog and completes it with dist_comm_check; on failure (a runtime
 * error) the enclosing function returns ZY_ERR. */
#define ZY_NCCL_COMM_TRY(c, expr)                                                                  \
    do {                                                                                           \
        dist_watchdog_enter(&(c)->wd, #expr);                                                      \
        int dist_r_ = (int)(expr);                                                                 \
        dist_watchdog_leave(&(c)->wd);                                                             \
        if (dist_comm_check((c), dist_r_, #expr, __FILE__, __LINE__) != ZY_OK) return ZY_ERR;      \
    } while (0)
/* NCCL's version code of the library in use (e.g. 22803), 0 if unknown. */
int dist_nccl_version(void);

#ifdef __cplusplus
}
#endif

#endif
