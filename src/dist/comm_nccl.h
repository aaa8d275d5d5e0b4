/* The communicator's NCCL backend (comm.h): every operation on buffers of this rank's GPU, or on
 * host buffers, which are staged through device memory and completed before the call returns
 * (meant for the small values a step reduces: a loss, token and expert counts, a norm).
 *
 * The stream rule. Operations run on the communicator's own stream (dist/nccl_comm.h). Each one
 * starts after all the work queued before the call on one stream, the stream it is ordered after
 * (comm_nccl_order_after; until set, the legacy default stream, which plain cudaMemcpy/cudaMemset
 * use), and the call returns once the operation has completed on the device. So the training step
 * orders the communicator after its context's stream once, calls comm_* right after queueing the
 * backward, and may read or overwrite the buffers on any stream when the call returns. A
 * context's stream is created non-blocking: it is not part of the legacy default stream, so a
 * step that has not set it must finish its work (ops_sync) before calling. */
#ifndef ZY_DIST_COMM_NCCL_H
#define ZY_DIST_COMM_NCCL_H

#include "dist/comm.h"
#include "dist/rdv.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A communicator over the ranks of rdv (rank and world from it; a world of one works), using CUDA
 * device `device`, which becomes the calling thread's current device. rdv carries the NCCL id and
 * is polled for dead peers while waiting: it must outlive the communicator. Every wait (an
 * operation, a peer connecting) is bounded by timeout_s: past it, or when a peer dies, the call is
 * a runtime error and the communicator is aborted (later calls fail). A blocking NCCL call that
 * does not return within timeout_s ends the process with exit status 1 (a watchdog thread: the
 * call cannot be interrupted). ZY_ERR: NCCL or the device failed (runtime), or this zayac was
 * built without CUDA (bad input). Call the operations from the thread that made it. */
int comm_init_nccl(zy_comm *c, dist_rdv *rdv, int device, double timeout_s);
/* Orders every later operation of c (an NCCL communicator) after the work queued on cuda_stream
 * (a cudaStream_t of c's device; NULL: the legacy default stream) before each call. */
void comm_nccl_order_after(zy_comm *c, void *cuda_stream);

#ifdef __cplusplus
}
#endif

#endif
