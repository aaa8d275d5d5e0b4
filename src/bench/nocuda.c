/* The GPU entry points of the benchmarks, dist/nccl_comm.h and dist/comm_nccl.h in a build without
 * CUDA (make CUDA=0): each says in one line that this zayac has no GPU support. */
#ifndef ZY_HAVE_CUDA
#include "base/err.h"
#include "bench/coll.h"
#include "bench/gemm.h"
#include "bench/membw.h"
#include "bench/util.h"
#include "dist/comm_nccl.h"
#include "dist/nccl_comm.h"

#include <string.h>

#define NO_CUDA "no CUDA GPU available (this zayac was built without CUDA)"

int bench_gpu_count(int *n) {
    *n = 0;
    return zy_fail(NO_CUDA);
}

int bench_gpu_describe(bench_machine *m, int dev) {
    (void)m, (void)dev;
    return zy_fail(NO_CUDA);
}

int bench_coll_run(const bench_coll_opts *o, dist_rdv *rdv, int device, bench_coll_result *res,
                   FILE *out, void (*on_size)(size_t bytes, void *ctx), void *ctx) {
    (void)o, (void)rdv, (void)device, (void)res, (void)out, (void)on_size, (void)ctx;
    return zy_fail(NO_CUDA);
}

int bench_gemm_run(const bench_gemm_opts *o, int dev, bench_gemm_result *res, FILE *out) {
    (void)o, (void)dev, (void)res, (void)out;
    return zy_fail(NO_CUDA);
}

int bench_membw_run(const bench_membw_opts *o, int dev, bench_membw_result *res, FILE *out) {
    (void)o, (void)dev, (void)res, (void)out;
    return zy_fail(NO_CUDA);
}

int dist_comm_init(dist_comm *c, dist_rdv *rdv, int device, double timeout_s, int nonblocking,
                   dist_stuck_fn stuck, void *stuck_ctx) {
    (void)c, (void)rdv, (void)device, (void)timeout_s, (void)nonblocking, (void)stuck;
    (void)stuck_ctx;
    return zy_fail(NO_CUDA);
}

int dist_comm_check(dist_comm *c, int result, const char *what, const char *file, int line) {
    (void)c, (void)result, (void)what, (void)file, (void)line;
    return zy_fail(NO_CUDA);
}

int dist_comm_wait_event(dist_comm *c, void *event, const char *what) {
    (void)c, (void)event, (void)what;
    return zy_fail(NO_CUDA);
}

void dist_comm_abort(dist_comm *c) {
    (void)c;
}

int dist_comm_free(dist_comm *c) {
    (void)c;
    return ZY_OK;
}

int dist_nccl_version(void) {
    return 0;
}

int comm_init_nccl(zy_comm *c, dist_rdv *rdv, int device, double timeout_s) {
    (void)rdv, (void)device, (void)timeout_s;
    memset(c, 0, sizeof *c);
    return zy_fail("the nccl communicator: " NO_CUDA);
}

void comm_nccl_order_after(zy_comm *c, void *cuda_stream) {
    (void)c, (void)cuda_stream; /* no NCCL communicator exists in this build */
}
#else
/* ISO C forbids an empty translation unit. */
typedef int bench_nocuda_unused;
#endif
