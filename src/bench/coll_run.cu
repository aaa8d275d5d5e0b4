/* Collective benchmark, GPU side: buffers, the timed loop and the correctness check (see coll.h).
 * Timing follows nccl-tests: each operation uses the buffers at a rotating offset (so repeated
 * small operations do not stay in L2), warm-up operations run first, and the time per operation
 * is averaged over ranks. The warm-up operations are queued on the stream right before the timed
 * ones, with no host synchronisation between them, so the ranks enter the timed region in step.
 * The check runs after timing, on fresh inputs, and counts wrong elements on every rank. */
#include "base/timer.h"
#include "bench/coll.h"
#include "dist/nccl_comm.h"
#include "base/check.h"

#include <cuda_bf16.h>
#include <nccl.h>
#include <stdint.h>
#include <string.h>

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
#define HAVE_NCCL_ALLTOALL 1
#pragma weak ncclAlltoAll
#else
#define HAVE_NCCL_ALLTOALL 0
#endif

/* 32 well-mixed bits from (seed, rank, index). */
__device__ __forceinline__ uint32_t coll_hash(uint32_t seed, uint32_t rank, uint64_t i) {
    uint64_t x = i * 0x9E3779B97F4A7C15ull ^ ((uint64_t)rank << 40) ^
                 ((uint64_t)seed * 0xD1B54A32D192ED03ull);
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ull;
    x ^= x >> 27;
    x *= 0x81dadef4bc2dd44dull;
    x ^= x >> 33;
    return (uint32_t)x;
}

/* Rank r's input element i. Reductions get small integers in [-k, k] so every partial sum is
 * exact in the element type; data movement gets values with every mantissa bit random, so a
 * misplaced element is almost surely a different value. */
__device__ __forceinline__ float coll_value(int reduce, int bf16, int k, uint32_t seed, int r,
                                            uint64_t i) {
    uint32_t h = coll_hash(seed, (uint32_t)r, i);
    if (reduce) return (float)((int)(h % (uint32_t)(2 * k + 1)) - k);
    float mant =
        bf16 ? 1.0f + (float)(h & 127u) / 128.0f : 1.0f + (float)(h & 0x7fffffu) / 8388608.0f;
    float v = ldexpf(mant, (int)((h >> 24) & 7u) - 4);
    return (h >> 23) & 1u ? -v : v;
}

__device__ __forceinline__ float load_elt(const void *p, int bf16, size_t j) {
    return bf16 ? __bfloat162float(((const __nv_bfloat16 *)p)[j]) : ((const float *)p)[j];
}

__global__ void coll_fill(void *buf, int bf16, size_t n, int reduce, int k, uint32_t seed,
                          int rank) {
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < n;
         j += (size_t)gridDim.x * blockDim.x) {
        float v = coll_value(reduce, bf16, k, seed, rank, j);
        if (bf16)
            ((__nv_bfloat16 *)buf)[j] = __float2bfloat16_rn(v);
        else
            ((float *)buf)[j] = v;
    }
}

typedef struct {
    int kind, bf16, nranks, rank, root, k;
    uint32_t seed;
    size_t count, recv_count;
    const void *recv;
    unsigned long long *wrong;
} coll_check_args;

/* Counts received elements that differ from what the collective must produce. */
__global__ void coll_check(coll_check_args a) {
    unsigned long long bad = 0;
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < a.recv_count;
         j += (size_t)gridDim.x * blockDim.x) {
        float want = 0;
        switch (a.kind) {
        case COLL_ALL_REDUCE:
            for (int r = 0; r < a.nranks; r++) want += coll_value(1, a.bf16, a.k, a.seed, r, j);
            break;
        case COLL_REDUCE_SCATTER:
            for (int r = 0; r < a.nranks; r++)
                want += coll_value(1, a.bf16, a.k, a.seed, r, (uint64_t)a.rank * a.count + j);
            break;
        case COLL_ALL_GATHER:
            want = coll_value(0, a.bf16, a.k, a.seed, (int)(j / a.count), j % a.count);
            break;
        case COLL_BROADCAST:
            want = coll_value(0, a.bf16, a.k, a.seed, a.root, j);
            break;
        default: /* all-to-all: block p came from rank p's slot for this rank */
            want = coll_value(0, a.bf16, a.k, a.seed, (int)(j / a.count),
                              (uint64_t)a.rank * a.count + j % a.count);
            break;
        }
        float got = load_elt(a.recv, a.bf16, j);
        if (!(got == want)) bad++;
    }
    for (int o = 16; o > 0; o >>= 1) bad += __shfl_down_sync(0xffffffffu, bad, o);
    if ((threadIdx.x & 31) == 0 && bad) atomicAdd(a.wrong, bad);
}

typedef struct {
    const bench_coll_opts *o;
    dist_rdv *rdv;
    dist_comm comm;
    char *send, *recv; /* [cap] bytes each */
    size_t cap;        /* bytes per buffer */
    unsigned long long *d_wrong;
    cudaEvent_t stop; /* marks the end of a timed loop or a check */
    int sms;
    int alltoall_native; /* ncclAlltoAll is available */
} coll_ctx;

static int launch_op(coll_ctx *x, bench_coll_kind kind, bench_dtype t, const void *sb, void *rb,
                     size_t count) {
    dist_comm *c = &x->comm;
    ncclComm_t comm = (ncclComm_t)c->nccl;
    cudaStream_t s = (cudaStream_t)c->stream;
    ncclDataType_t dt = t == BENCH_BF16 ? ncclBfloat16 : ncclFloat32;
    switch (kind) {
    case COLL_ALL_REDUCE:
        ZY_NCCL_COMM_TRY(c, ncclAllReduce(sb, rb, count, dt, ncclSum, comm, s));
        break;
    case COLL_REDUCE_SCATTER:
        ZY_NCCL_COMM_TRY(c, ncclReduceScatter(sb, rb, count, dt, ncclSum, comm, s));
        break;
    case COLL_ALL_GATHER:
        ZY_NCCL_COMM_TRY(c, ncclAllGather(sb, rb, count, dt, comm, s));
        break;
    case COLL_BROADCAST:
        ZY_NCCL_COMM_TRY(c, ncclBroadcast(sb, rb, count, dt, x->o->root, comm, s));
        break;
    default: {
#if HAVE_NCCL_ALLTOALL
        if (x->alltoall_native) {
            ZY_NCCL_COMM_TRY(c, ncclAlltoAll(sb, rb, count, dt, comm, s));
            break;
        }
#endif
        size_t step = count * bench_dtype_size(t);
        ZY_NCCL_COMM_TRY(c, ncclGroupStart());
        for (int r = 0; r < c->world; r++) {
            ZY_NCCL_COMM_TRY(c, ncclSend((const char *)sb + r * step, count, dt, r, comm, s));
            ZY_NCCL_COMM_TRY(c, ncclRecv((char *)rb + r * step, count, dt, r, comm, s));
        }
        ZY_NCCL_COMM_TRY(c, ncclGroupEnd());
    }
    }
    return ZY_OK;
}

/* The send and receive pointers of operation `iter` (nccl-tests' rotating shift). */
static void op_buffers(coll_ctx *x, const bench_coll_counts *n, size_t elt, int inplace, int iter,
                       const void **sb, void **rb) {
    size_t total = n->size_bytes;
    size_t steps = total ? x->cap / total : 1;
    size_t shift = total * ((size_t)iter % steps);
    char *s = x->send + shift, *r = x->recv + shift;
    int rank = x->comm.rank;
    if (inplace) {
        *sb = r + n->send_inplace_off * (size_t)rank * elt;
        *rb = r + n->recv_inplace_off * (size_t)rank * elt;
    } else {
        *sb = s;
        *rb = r;
    }
}

static int time_op(coll_ctx *x, bench_coll_kind kind, bench_dtype t, const bench_coll_counts *n,
                   int inplace, const char *what, double *sec) {
    const bench_coll_opts *o = x->o;
    size_t elt = bench_dtype_size(t);
    if (dist_rdv_barrier(x->rdv) != ZY_OK) return zy_fail_ctx("before %s", what);
    const void *sb;
    void *rb;
    cudaStream_t s = (cudaStream_t)x->comm.stream;
    for (int i = 0; i < o->warmup; i++) {
        op_buffers(x, n, elt, inplace, i, &sb, &rb);
        ZY_TRY(launch_op(x, kind, t, sb, rb, n->count));
    }
    /* Timed like nccl-tests: all ranks leave a barrier, then the host clock runs from the first
     * launch to the completion of the last operation (launch costs and rank skew included). */
    ZY_CUDA_TRY(cudaStreamSynchronize(s));
    if (dist_rdv_barrier(x->rdv) != ZY_OK) return zy_fail_ctx("before timing %s", what);
    double t0 = zy_now();
    for (int i = 0; i < o->iters; i++) {
        op_buffers(x, n, elt, inplace, i, &sb, &rb);
        ZY_TRY(launch_op(x, kind, t, sb, rb, n->count));
    }
    ZY_CUDA_TRY(cudaEventRecord(x->stop, s));
    ZY_TRY(dist_comm_wait_event(&x->comm, x->stop, what));
    double v = (zy_now() - t0) / o->iters;
    if (dist_rdv_allreduce_f64(x->rdv, &v, 1, DIST_OP_SUM) != ZY_OK)
        return zy_fail_ctx("averaging the time of %s", what);
    *sec = v / x->comm.world;
    return ZY_OK;
}

static int check_op(coll_ctx *x, bench_coll_kind kind, bench_dtype t, const bench_coll_counts *n,
                    int inplace, uint32_t seed, const char *what, int64_t *wrong) {
    size_t elt = bench_dtype_size(t);
    int bf16 = t == BENCH_BF16, rank = x->comm.rank, world = x->comm.world;
    int k = bf16 ? (128 / world > 8 ? 8 : (128 / world < 1 ? 1 : 128 / world)) : 1000;
    int red = bench_coll_reduces(kind);
    cudaStream_t s = (cudaStream_t)x->comm.stream;
    int blocks = x->sms * 8, threads = 256;
    /* Poison what will be received (NaN bytes), then write this rank's input. */
    char *sbase = inplace ? x->recv + n->send_inplace_off * (size_t)rank * elt : x->send;
    char *rbase = inplace ? x->recv + n->recv_inplace_off * (size_t)rank * elt : x->recv;
    ZY_CUDA_TRY(cudaMemsetAsync(x->recv, 0xff, n->size_bytes, s));
    coll_fill<<<blocks, threads, 0, s>>>(sbase, bf16, n->send_count, red, k, seed, rank);
    ZY_CUDA_TRY_LAUNCH();
    ZY_TRY(launch_op(x, kind, t, sbase, rbase, n->count));
    if (x->o->corrupt > 0) { /* values near the type's maximum: never a correct result */
        size_t c = (size_t)x->o->corrupt < n->recv_count ? (size_t)x->o->corrupt : n->recv_count;
        ZY_CUDA_TRY(cudaMemsetAsync(rbase, 0x7f, c * elt, s));
    }
    ZY_CUDA_TRY(cudaMemsetAsync(x->d_wrong, 0, sizeof *x->d_wrong, s));
    coll_check_args a;
    a.kind = (int)kind, a.bf16 = bf16, a.nranks = world, a.rank = rank, a.root = x->o->root;
    a.k = k, a.seed = seed, a.count = n->count, a.recv_count = n->recv_count, a.recv = rbase;
    a.wrong = x->d_wrong;
    coll_check<<<blocks, threads, 0, s>>>(a);
    ZY_CUDA_TRY_LAUNCH();
    unsigned long long h = 0;
    ZY_CUDA_TRY(cudaMemcpyAsync(&h, x->d_wrong, sizeof h, cudaMemcpyDeviceToHost, s));
    ZY_CUDA_TRY(cudaEventRecord(x->stop, s));
    ZY_TRY(dist_comm_wait_event(&x->comm, x->stop, what));
    uint64_t total = h;
    if (dist_rdv_allreduce_u64(x->rdv, &total, 1, DIST_OP_SUM) != ZY_OK)
        return zy_fail_ctx("summing the wrong elements of %s", what);
    *wrong = (int64_t)total;
    return ZY_OK;
}

static int run_sweep(coll_ctx *x, bench_coll_result *res, FILE *out, const size_t *sizes,
                     int nsizes, void (*on_size)(size_t, void *), void *ctx) {
    const bench_coll_opts *o = x->o;
    int world = x->comm.world;
    uint32_t seed = 12345;
    for (int d = 0; d < o->ndtypes; d++)
        for (int ci = 0; ci < o->ncolls; ci++) {
            bench_coll_kind kind = o->colls[ci];
            bench_dtype t = o->dtypes[d];
            size_t elt = bench_dtype_size(t);
            if (out) bench_coll_print_header(out, kind, t, world);
            for (int si = 0; si < nsizes; si++) {
                if (on_size) on_size(sizes[si], ctx);
                bench_coll_counts n;
                bench_coll_counts_for(kind, sizes[si], elt, world, &n);
                bench_coll_row rows[2];
                int have[2] = {0, 0};
                for (int p = 0; p < 2; p++) {
                    if (o->placement != 2 && o->placement != p) continue;
                    char what[128];
                    snprintf(what, sizeof what, "%s %s %s of %zu bytes", bench_coll_name(kind),
                             bench_dtype_name(t), p ? "in-place" : "out-of-place", n.size_bytes);
                    bench_coll_row *w = &rows[p];
                    memset(w, 0, sizeof *w);
                    w->coll = kind, w->dtype = t, w->inplace = p;
                    w->size_bytes = n.size_bytes, w->count = n.count;
                    double sec = 0;
                    ZY_TRY(time_op(x, kind, t, &n, p, what, &sec));
                    w->time_us = sec * 1e6;
                    bench_coll_bw(kind, n.count, elt, sec, world, &w->algbw, &w->busbw);
                    w->wrong = -1;
                    /* NCCL defines no in-place all-to-all (its result here is not the
                     * permutation; nccl-tests does not check it either): timed, not checked. */
                    if (o->check && !(kind == COLL_ALL_TO_ALL && p == 1))
                        ZY_TRY(check_op(x, kind, t, &n, p, seed++, what, &w->wrong));
                    bench_coll_result_add(res, w);
                    have[p] = 1;
                }
                if (out)
                    bench_coll_print_line(out, have[0] ? &rows[0] : NULL,
                                          have[1] ? &rows[1] : NULL);
            }
        }
    return ZY_OK;
}

int bench_coll_run(const bench_coll_opts *o, dist_rdv *rdv, int device, bench_coll_result *res,
                   FILE *out, void (*on_size)(size_t bytes, void *ctx), void *ctx) {
    if (o->iters < 1) return zy_fail("collectives: --iters must be at least 1");
    if (o->root < 0 || o->root >= rdv->world)
        return zy_fail("collectives: broadcast root %d is not a rank (0..%d)", o->root,
                       rdv->world - 1);
    size_t *sizes;
    int nsizes;
    ZY_TRY(bench_sizes(o->min_bytes, o->max_bytes, o->factor, &sizes, &nsizes));
    coll_ctx x;
    memset(&x, 0, sizeof x);
    x.o = o;
    x.rdv = rdv;
    /* Each buffer holds the largest message of the sweep (nccl-tests allocates the same). */
    x.cap = 256;
    for (int d = 0; d < o->ndtypes; d++)
        for (int ci = 0; ci < o->ncolls; ci++)
            for (int si = 0; si < nsizes; si++) {
                bench_coll_counts n;
                bench_coll_counts_for(o->colls[ci], sizes[si], bench_dtype_size(o->dtypes[d]),
                                      rdv->world, &n);
                if (n.size_bytes > x.cap) x.cap = n.size_bytes;
            }
    bench_coll_result_init(res);
    res->nranks = rdv->world;
    res->nnodes = 1;
    res->warmup = o->warmup;
    res->iters = o->iters;
    bench_machine_host(&res->machine);
    int rc = bench_gpu_describe(&res->machine, device);
    res->machine.nccl = dist_nccl_version();
#if HAVE_NCCL_ALLTOALL
    x.alltoall_native = res->machine.nccl >= 22800 && &ncclAlltoAll != NULL;
#endif
    x.sms = res->machine.sm_count > 0 ? res->machine.sm_count : 100;
    if (rc == ZY_OK)
        rc = dist_comm_init(&x.comm, rdv, device, o->timeout_s, o->nonblocking, o->on_stuck,
                            o->stuck_ctx);
    if (rc == ZY_OK) {
        cudaError_t e = cudaMalloc((void **)&x.send, x.cap);
        if (e == cudaSuccess) e = cudaMalloc((void **)&x.recv, x.cap);
        if (e == cudaSuccess) e = cudaMalloc((void **)&x.d_wrong, sizeof *x.d_wrong);
        if (e == cudaSuccess) e = cudaEventCreate(&x.stop);
        if (e != cudaSuccess)
            rc = zy_fail_runtime("collectives: allocating 2 x %zu bytes on device %d: %s", x.cap,
                                 device, cudaGetErrorString(e));
    }
    if (rc == ZY_OK) rc = run_sweep(&x, res, out, sizes, nsizes, on_size, ctx);
    if (rc != ZY_OK)
        dist_comm_abort(&x.comm);
    else
        rc = dist_comm_free(&x.comm);
    if (x.comm.stream) cudaStreamDestroy((cudaStream_t)x.comm.stream);
    if (x.stop) cudaEventDestroy(x.stop);
    cudaFree(x.send);
    cudaFree(x.recv);
    cudaFree(x.d_wrong);
    free(sizes);
    return rc;
}
