/* Joining the ranks of a job (see ranks.h). */
#include "train/ranks.h"
#include "base/err.h"
#include "dist/comm_nccl.h"

#include <string.h>

int ranks_connect(zy_ranks *r, const dist_env *e, zy_ctx *ctx, double timeout_s) {
    memset(r, 0, sizeof *r);
    if (e->world == 1) {
        comm_init_single(&r->comm);
    } else if (ctx->device == ZY_DEV_CPU) {
        ZY_TRY(comm_init_mpi(&r->comm, timeout_s));
        r->have_comm = 1;
        if (r->comm.world != e->world || r->comm.rank != e->rank)
            return zy_fail("MPI sees rank %d of %d but the launcher's variables (%s) say %d of %d",
                           r->comm.rank, r->comm.world, e->source, e->rank, e->world);
    } else {
        ZY_TRY(
            dist_rdv_init(&r->rdv, e->rank, e->world, e->master_addr, e->master_port, timeout_s));
        r->have_rdv = 1;
        ZY_TRY(comm_init_nccl(&r->comm, &r->rdv, ctx->gpu, timeout_s));
        /* collectives start after the ops queued on the context's stream */
        comm_nccl_order_after(&r->comm, ops_stream(ctx));
    }
    r->have_comm = 1;
    return ZY_OK;
}

void ranks_free(zy_ranks *r) {
    if (r->have_comm) comm_free(&r->comm);
    if (r->have_rdv) dist_rdv_free(&r->rdv);
    memset(r, 0, sizeof *r);
}

int ranks_local_gpu(const dist_env *e) {
    return e->local_rank >= 0 ? e->local_rank : 0;
}
