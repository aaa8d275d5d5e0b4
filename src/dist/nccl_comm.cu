/* NCCL communicator with guarded waits (see comm.h). */
#include "dist/nccl_comm.h"
#include "base/check.h"

extern "C" {
#include "base/timer.h"
}

#include <nccl.h>
#include <sched.h>
#include <string.h>

static ncclComm_t nccl_of(dist_comm *c) {
    return (ncclComm_t)c->nccl;
}

/* Polls a non-blocking communicator until it leaves ncclInProgress. */
static int wait_async(dist_comm *c, const char *what, const char *file, int line) {
    double t0 = zy_now(), next_peer_check = t0;
    for (;;) {
        ncclResult_t st = ncclInProgress;
        ncclResult_t q = ncclCommGetAsyncError(nccl_of(c), &st);
        if (q != ncclSuccess)
            return zy_fail_runtime("%s:%d: ncclCommGetAsyncError after %s: %s", file, line, what,
                                   ncclGetErrorString(q));
        if (st == ncclSuccess) return ZY_OK;
        if (st != ncclInProgress)
            return zy_fail_runtime("%s:%d: %s failed: %s (%s)", file, line, what,
                                   ncclGetErrorString(st), ncclGetLastError(nccl_of(c)));
        double now = zy_now();
        if (now >= next_peer_check) {
            if (c->rdv && dist_rdv_check_peers(c->rdv) != ZY_OK)
                return zy_fail_ctx("during %s", what);
            next_peer_check = now + 0.01;
        }
        if (now - t0 > c->timeout_s)
            return zy_fail_runtime(
                "%s:%d: %s did not complete within %.0f s (a peer is stuck or gone)", file, line,
                what, c->timeout_s);
        sched_yield();
    }
}

int dist_comm_check(dist_comm *c, int result, const char *what, const char *file, int line) {
    ncclResult_t r = (ncclResult_t)result;
    if (r == ncclSuccess) return ZY_OK;
    if (r == ncclInProgress) return wait_async(c, what, file, line);
    return zy_fail_runtime("%s:%d: %s failed: %s (%s)", file, line, what, ncclGetErrorString(r),
                           c->nccl ? ncclGetLastError(nccl_of(c)) : "");
}

int dist_nccl_version(void) {
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess) return 0;
    return v;
}

int dist_comm_init(dist_comm *c, dist_rdv *rdv, int device, double timeout_s, int nonblocking,
                   dist_stuck_fn stuck, void *stuck_ctx) {
    memset(c, 0, sizeof *c);
    c->rank = rdv->rank;
    c->world = rdv->world;
    c->device = device;
    c->timeout_s = timeout_s;
    c->rdv = rdv;
    c->nonblocking = nonblocking;
    ZY_TRY(dist_watchdog_start(&c->wd, rdv, timeout_s, stuck, stuck_ctx));
    ZY_CUDA_TRY(cudaSetDevice(device));
    cudaStream_t s;
    ZY_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    c->stream = s;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (c->rank == 0) {
        ZY_NCCL_TRY(ncclGetUniqueId(&id));
    }
    if (dist_rdv_bcast(rdv, &id, sizeof id) != ZY_OK)
        return zy_fail_ctx("sending the NCCL unique id");
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = nonblocking ? 0 : 1; /* non-blocking calls return ncclInProgress: polled */
    ncclComm_t comm = NULL;
    dist_watchdog_enter(&c->wd, "ncclCommInitRankConfig");
    ncclResult_t r = ncclCommInitRankConfig(&comm, c->world, id, c->rank, &cfg);
    dist_watchdog_leave(&c->wd);
    c->nccl = comm;
    if (r != ncclSuccess && r != ncclInProgress)
        return zy_fail_runtime(
            "%s:%d: ncclCommInitRankConfig (rank %d of %d, device %d) failed: %s", __FILE__,
            __LINE__, c->rank, c->world, device, ncclGetErrorString(r));
    if (r == ncclInProgress) ZY_TRY(wait_async(c, "ncclCommInitRankConfig", __FILE__, __LINE__));
    return ZY_OK;
}

int dist_comm_wait_event(dist_comm *c, void *event, const char *what) {
    cudaEvent_t ev = (cudaEvent_t)event;
    double t0 = zy_now(), next_peer_check = t0 + 0.01;
    for (;;) {
        cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess) return ZY_OK;
        if (e != cudaErrorNotReady)
            return zy_fail_runtime("%s:%d: waiting for %s: %s", __FILE__, __LINE__, what,
                                   cudaGetErrorString(e));
        if (c->nccl) {
            ncclResult_t st = ncclSuccess;
            ncclResult_t q = ncclCommGetAsyncError(nccl_of(c), &st);
            if (q != ncclSuccess || (st != ncclSuccess && st != ncclInProgress))
                return zy_fail_runtime(
                    "%s:%d: NCCL error while waiting for %s: %s (%s)", __FILE__, __LINE__, what,
                    ncclGetErrorString(q != ncclSuccess ? q : st), ncclGetLastError(nccl_of(c)));
        }
        double now = zy_now();
        if (now >= next_peer_check) {
            if (c->rdv && dist_rdv_check_peers(c->rdv) != ZY_OK)
                return zy_fail_ctx("while waiting for %s", what);
            next_peer_check = now + 0.01;
        }
        if (now - t0 > c->timeout_s)
            return zy_fail_runtime(
                "%s did not finish within %.0f s on rank %d (a peer is stuck or gone)", what,
                c->timeout_s, c->rank);
        sched_yield();
    }
}

void dist_comm_abort(dist_comm *c) {
    dist_watchdog_stop(&c->wd);
    if (c->nccl) ncclCommAbort(nccl_of(c));
    c->nccl = NULL;
}

int dist_comm_free(dist_comm *c) {
    int st = ZY_OK;
    if (c->nccl) {
        /* Tearing down is not collective: a peer done first may exit while this one finalizes,
         * which is not a crash. From here only the deadline is watched. */
        c->wd.rdv = NULL;
        dist_watchdog_enter(&c->wd, "ncclCommFinalize");
        ncclResult_t r = ncclCommFinalize(nccl_of(c));
        dist_watchdog_leave(&c->wd);
        st = dist_comm_check(c, r, "ncclCommFinalize", __FILE__, __LINE__);
        if (st == ZY_OK) {
            dist_watchdog_enter(&c->wd, "ncclCommDestroy");
            r = ncclCommDestroy(nccl_of(c));
            dist_watchdog_leave(&c->wd);
            if (r != ncclSuccess && r != ncclInProgress)
                st = zy_fail_runtime("%s:%d: ncclCommDestroy failed: %s", __FILE__, __LINE__,
                                     ncclGetErrorString(r));
        } else {
            ncclCommAbort(nccl_of(c));
        }
        c->nccl = NULL;
    }
    dist_watchdog_stop(&c->wd);
    if (c->stream) {
        ZY_CUDA_NOTE(st, cudaStreamDestroy((cudaStream_t)c->stream));
        c->stream = NULL;
    }
    return st;
}
