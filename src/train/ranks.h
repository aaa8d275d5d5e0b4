/* This process's place among the ranks of a data-parallel job: the communicator its launcher's
 * variables describe (dist/env.h). One rank: the `single` backend; CPU ranks: MPI; GPU ranks: NCCL,
 * its id passed through the TCP rendezvous at MASTER_ADDR, its operations ordered after the
 * context's stream. `zayac train` and `zayac bench train` both join a job this way. */
#ifndef ZY_TRAIN_RANKS_H
#define ZY_TRAIN_RANKS_H

#include "dist/comm.h"
#include "dist/env.h"
#include "dist/rdv.h"
#include "ops/ops.h"

typedef struct {
    zy_comm comm;
    dist_rdv rdv; /* GPU ranks: the rendezvous the NCCL communicator polls (outlives it) */
    int have_comm, have_rdv;
} zy_ranks;

/* Connects to the ranks of e; ctx is this rank's device (CPU or its GPU). Every wait is bounded
 * by timeout_s. */
int ranks_connect(zy_ranks *r, const dist_env *e, zy_ctx *ctx, double timeout_s);
void ranks_free(zy_ranks *r);
/* The GPU of a rank: its local rank (0 without a launcher). */
int ranks_local_gpu(const dist_env *e);

#endif
