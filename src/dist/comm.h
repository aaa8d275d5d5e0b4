/* NCCL communicator setup and guarded waits. The communicator is created non-blocking and every
 * wait polls it together with the control channel and a deadline, so a dead or stuck peer turns
 * into an error (and an aborted communicator) instead of a hang. */
#ifndef ZY_DIST_COMM_H
#define ZY_DIST_COMM_H

#include "dist/rdv.h"

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
} dist_comm;

/* Selects device, makes rank 0's NCCL unique id known to every rank through rdv and creates the
 * communicator; within timeout_s, or an error naming what did not arrive. */
int dist_comm_init(dist_comm *c, dist_rdv *rdv, int device, double timeout_s);
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
/* NCCL's version code of the library in use (e.g. 22803), 0 if unknown. */
int dist_nccl_version(void);

#ifdef __cplusplus
}
#endif

#endif
