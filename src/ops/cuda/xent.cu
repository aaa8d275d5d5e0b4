/* CUDA fused cross-entropy: per row, the max and the sum of exp(x - max), then the loss and
 * dlogits = (softmax - onehot) * grad_scale written over the logits or into a separate buffer;
 * the softmax is never stored. A one-block kernel then sums the row losses in a fixed order. Same
 * math as ops/cpu/cpu_loss.c (which sums exp in double).
 *
 * Two row kernels. Where a bf16 row fits in the registers of a block or a cluster of blocks
 * (V <= XENT_REG_MAXV, a multiple of 8: bench-small's 32,768, zaya1's 262,272), the row is read
 * from memory once and dlogits written once: two passes of bytes. Other rows take one online pass
 * for (max, sum) and a second read for dlogits: three passes, the second read partly from L2. */
#include "ops/cuda/cuda_util.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/kernels.h"

#include <cuda_bf16.h>
#include <math.h>

typedef __nv_bfloat16 bf16;

/* exp(x - m) as exp2((x - m) log2 e): one FMA and the hardware exp2 (ex2.approx, relative error
 * ~2^-22) instead of expf's accurate range reduction, which made the two passes over bench-small's
 * logits (two exponentials per element) compute-bound. */
#define XENT_LOG2E 1.4426950408889634f
__device__ __forceinline__ float exp_shift(float x, float m) {
    return exp2f(fmaf(x, XENT_LOG2E, -m * XENT_LOG2E));
}

/* (m, s) <- the pair for the union of two sets of logits, each summarised by its max m and
 * s = sum exp(x - m); s == 0 marks an empty set. */
__device__ __forceinline__ void ms_merge(float &m, float &s, float m2, float s2) {
    if (s2 == 0.0f) return;
    if (s == 0.0f) {
        m = m2, s = s2;
        return;
    }
    float mx = fmaxf(m, m2);
    s = s * expf(m - mx) + s2 * expf(m2 - mx);
    m = mx;
}

/* The (max, sum-exp) pair over the block; every thread gets it. */
__device__ __forceinline__ void ms_block(float &m, float &s) {
    __shared__ float pm[32], ps[32];
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        ms_merge(m, s, m2, s2);
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) pm[warp] = m, ps[warp] = s;
    __syncthreads();
    m = pm[0], s = ps[0];
    for (int j = 1; j < nw; j++) ms_merge(m, s, pm[j], ps[j]);
}

/* The register-resident row kernels: up to XENT_REG_NT threads a block, each holding VPT vectors
 * of 8 bf16. A row too wide for one block is spread over a cluster of CS blocks (2, 4 or 8, on
 * the SMs of one GPC), which merge their (max, sum) pairs through distributed shared memory, so
 * the row still crosses memory twice: V <= 8 * 8 * XENT_REG_NT * 8 (zaya1's 262,272 on 8 blocks).
 * Two blocks an SM: while one reduces, the other's loads are in flight. The launch bounds leave
 * 56 registers a thread at 544 threads (65,536 / 1,088, in the allocator's steps of 8), all that
 * ptxas uses at VPT 8: a longer kernel would spill. 544 = 17 warps, because 262,272 / 8 blocks /
 * 8 per vector is 4,098 vectors, two more than 512 threads hold. */
#define XENT_REG_NT      544
#define XENT_REG_VPT_MAX 8
#define XENT_REG_CS_MAX  8
#define XENT_REG_MAXV    (8 * XENT_REG_VPT_MAX * XENT_REG_NT * XENT_REG_CS_MAX)

/* f(a, b) for each pair of logits a thread holds: slot k is vector v0 + threadIdx.x + k *
 * blockDim.x of the row, the slots at or past v1 skipped. */
template <int VPT, typename F>
__device__ __forceinline__ void xent_regs_pairs(const uint4 (&r)[VPT], int v0, int v1, F f) {
#pragma unroll
    for (int k = 0; k < VPT; k++) {
        if (v0 + (int)threadIdx.x + k * (int)blockDim.x >= v1) break;
        const __nv_bfloat162 *e = reinterpret_cast<const __nv_bfloat162 *>(&r[k]);
#pragma unroll
        for (int h = 0; h < 4; h++) {
            const float2 v = __bfloat1622float2(e[h]);
            f(v.x, v.y);
        }
    }
}

/* Cluster barrier halves (every thread of the cluster's blocks): arrive releases this block's
 * shared-memory writes, wait acquires the others'. */
__device__ __forceinline__ void xent_cluster_arrive() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void xent_cluster_wait() {
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
/* *p in the shared memory of the cluster's block `rank` (p: this block's copy of the variable). */
__device__ __forceinline__ float xent_cluster_load(const float *p, int rank) {
    uint32_t local = (uint32_t)__cvta_generic_to_shared(p), remote;
    float v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(remote) : "memory");
    return v;
}

/* Row blockIdx.x / CS (V % 8 == 0) by the CS blocks of a cluster (CS 1: no cluster): block rank r
 * loads the row's vectors [r cv, (r + 1) cv), cv = ceil(V / 8 / CS), into registers once. */
template <int VPT, int CS>
__global__ void __launch_bounds__(XENT_REG_NT, 2)
    xent_rows_regs_k(bf16 *dl, float *loss, const bf16 *x, const int32_t *targets, int V,
                     int ignore_index, float grad_scale) {
    zy_pdl_begin();
    __shared__ float xy_sh, ms_part[2], ms_row[2]; /* this block's (max, sum); the row's */
    const int row = (int)blockIdx.x / CS, rank = (int)blockIdx.x % CS; /* 1-D clusters */
    const size_t base = (size_t)row * V;
    const int nvec = V / 8, cv = (nvec + CS - 1) / CS, v0 = rank * cv;
    const int v1 = v0 + cv < nvec ? v0 + cv : nvec, y = targets[row];
    const uint4 *xv = reinterpret_cast<const uint4 *>(x + base);
    uint4 *dv = reinterpret_cast<uint4 *>(dl + base);
    if (y == ignore_index || y < 0 || y >= V) { /* uniform over the cluster: no barrier taken */
        if (threadIdx.x == 0 && rank == 0) loss[row] = y == ignore_index ? 0.0f : NAN;
        if (dl)
            for (int v = v0 + (int)threadIdx.x; v < v1; v += blockDim.x)
                dv[v] = make_uint4(0, 0, 0, 0);
        return;
    }
    uint4 r[VPT]; /* [VPT] x 8 bf16 */
#pragma unroll
    for (int k = 0; k < VPT; k++) {
        const int v = v0 + (int)threadIdx.x + k * (int)blockDim.x;
        r[k] = v < v1 ? xv[v] : make_uint4(0, 0, 0, 0);
    }
    /* the target logit, read before the cluster barrier, after which its owner may overwrite it
     * (dl may alias x); visible to the block after the reductions' barriers */
    if (threadIdx.x == 0) xy_sh = __bfloat162float(x[base + y]);
    float m = -INFINITY, s = 0.0f;
    xent_regs_pairs<VPT>(r, v0, v1, [&](float a, float b) { m = fmaxf(m, fmaxf(a, b)); });
    m = zy_block_max(m);
    /* a share that is all -inf (a masked slice of the vocabulary) sums exp(x - 0) = 0, so its
     * pair (-inf, 0) adds nothing to the cluster's merge instead of a NaN from -inf - -inf */
    const float shift = m == -INFINITY ? 0.0f : m;
    xent_regs_pairs<VPT>(r, v0, v1,
                         [&](float a, float b) { s += exp_shift(a, shift) + exp_shift(b, shift); });
    s = zy_block_sum(s);
    if constexpr (CS > 1) { /* the row's pair from the blocks' pairs, in rank order */
        if (threadIdx.x == 0) ms_part[0] = m, ms_part[1] = s;
        xent_cluster_arrive();
        xent_cluster_wait();
        if (threadIdx.x == 0) {
            float pm[CS], ps[CS], M = -INFINITY, S = 0.0f;
#pragma unroll
            for (int q = 0; q < CS; q++) {
                pm[q] = xent_cluster_load(&ms_part[0], q),
                ps[q] = xent_cluster_load(&ms_part[1], q);
                M = fmaxf(M, pm[q]);
            }
#pragma unroll
            for (int q = 0; q < CS; q++) S += ps[q] * expf(pm[q] - M);
            ms_row[0] = M, ms_row[1] = S;
        }
        xent_cluster_arrive(); /* this block has read the others' pairs; waited for at the end */
        __syncthreads();
        m = ms_row[0], s = ms_row[1];
    }
    const float xy = xy_sh;
    if (threadIdx.x == 0 && rank == 0) loss[row] = m + logf(s) - xy;
    if (dl) {
        const float a = grad_scale / s;
#pragma unroll
        for (int k = 0; k < VPT; k++) {
            const int v = v0 + (int)threadIdx.x + k * (int)blockDim.x;
            if (v >= v1) break;
            const __nv_bfloat162 *e = reinterpret_cast<const __nv_bfloat162 *>(&r[k]);
            uint4 o;
            __nv_bfloat162 *ob = reinterpret_cast<__nv_bfloat162 *>(&o);
#pragma unroll
            for (int h = 0; h < 4; h++) {
                const float2 f = __bfloat1622float2(e[h]);
                ob[h] = __floats2bfloat162_rn(exp_shift(f.x, m) * a, exp_shift(f.y, m) * a);
            }
            dv[v] = o;
        }
        __syncthreads(); /* the target slot was written above by some thread of its owner */
        if (threadIdx.x == 0 && y / 8 >= v0 && y / 8 < v1)
            dl[base + y] = __float2bfloat16_rn(exp_shift(xy, m) * a - grad_scale);
    }
    if constexpr (CS > 1) xent_cluster_wait(); /* no block leaves while its pair may be read */
}

/* Launches the register-resident kernel for [N, V] bf16 rows; ZY_ERR without a launch where the
 * shape or alignment does not allow it. */
static int xent_rows_regs(bf16 *dl, float *loss, const bf16 *x, const int32_t *targets, int N,
                          int V, int ignore_index, float grad_scale, cudaStream_t st) {
    if (V % 8 != 0 || V > XENT_REG_MAXV || !zy_aligned(x, 16) || (dl && !zy_aligned(dl, 16)))
        return ZY_ERR;
    const int nvec = V / 8, per_block = XENT_REG_VPT_MAX * XENT_REG_NT;
    const int cs = nvec <= per_block       ? 1
                   : nvec <= 2 * per_block ? 2
                   : nvec <= 4 * per_block ? 4
                                           : 8;
    const int cv = (nvec + cs - 1) / cs; /* vectors a block */
    const int vpt = cs > 1                  ? 8
                    : cv <= XENT_REG_NT     ? 1
                    : cv <= 2 * XENT_REG_NT ? 2
                    : cv <= 4 * XENT_REG_NT ? 4
                                            : 8;
    const int nt = zy_row_threads_max((cv + vpt - 1) / vpt, XENT_REG_NT);
    typedef void (*kern_t)(bf16 *, float *, const bf16 *, const int32_t *, int, int, float);
    const kern_t kern = cs == 8    ? xent_rows_regs_k<8, 8>
                        : cs == 4  ? xent_rows_regs_k<8, 4>
                        : cs == 2  ? xent_rows_regs_k<8, 2>
                        : vpt == 1 ? xent_rows_regs_k<1, 1>
                        : vpt == 2 ? xent_rows_regs_k<2, 1>
                        : vpt == 4 ? xent_rows_regs_k<4, 1>
                                   : xent_rows_regs_k<8, 1>;
    zy_launch_cluster(kern, (unsigned)N * (unsigned)cs, nt, 0, st, cs, dl, loss, x, targets, V,
                      ignore_index, grad_scale);
    return ZY_OK;
}

/* One block per row. */
template <typename T, int W>
__global__ void __launch_bounds__(ZY_ROW_THREADS)
    xent_rows_k(T *dl, float *loss, const T *x, const int32_t *targets, int V, int ignore_index,
                float grad_scale) {
    zy_pdl_begin();
    __shared__ float xy_sh;
    size_t base = (size_t)blockIdx.x * V;
    int y = targets[blockIdx.x];
    if (y == ignore_index || y < 0 || y >= V) { /* uniform over the block */
        if (threadIdx.x == 0) loss[blockIdx.x] = y == ignore_index ? 0.0f : NAN;
        if (dl) {
            float z[W];
#pragma unroll
            for (int k = 0; k < W; k++) z[k] = 0;
            for (int v = threadIdx.x * W; v < V; v += blockDim.x * W)
                zy_store<T, W>(dl + base + v, z);
        }
        return;
    }
    /* the target logit is read before any thread can overwrite it (dl may alias x) */
    if (threadIdx.x == 0) xy_sh = zy_to_f(x[base + y]);
    float m = -INFINITY, s = 0;
    for (int v = threadIdx.x * W; v < V; v += blockDim.x * W) {
        float e[W];
        zy_load<T, W>(x + base + v, e);
#pragma unroll
        for (int k = 0; k < W; k++) {
            if (e[k] > m) {
                s = s * exp_shift(m, e[k]) + 1.0f;
                m = e[k];
            } else if (e[k] != -INFINITY) { /* a masked logit adds 0, and -inf - -inf is NaN */
                s += exp_shift(e[k], m);
            }
        }
    }
    ms_block(m, s); /* has a barrier: xy_sh is visible after it */
    float xy = xy_sh;
    if (threadIdx.x == 0) loss[blockIdx.x] = m + logf(s) - xy;
    if (!dl) return;
    float a = grad_scale / s;
    for (int v = threadIdx.x * W; v < V; v += blockDim.x * W) {
        float e[W];
        zy_load<T, W>(x + base + v, e);
#pragma unroll
        for (int k = 0; k < W; k++) e[k] = exp_shift(e[k], m) * a;
        zy_store<T, W>(dl + base + v, e);
    }
    __syncthreads(); /* the target slot was written above by some thread */
    if (threadIdx.x == 0) dl[base + y] = zy_from_f<T>(exp_shift(xy, m) * a - grad_scale);
}

/* One block: *sum = sum of loss[N] (double, fixed order), *count = rows not ignored. */
__global__ void xent_sum_k(double *sum, int *count, const float *loss, const int32_t *targets,
                           int N, int ignore_index) {
    zy_pdl_begin();
    __shared__ double ssum[256];
    __shared__ int scnt[256];
    double t = 0;
    int c = 0;
    for (int n = threadIdx.x; n < N; n += blockDim.x) {
        t += loss[n];
        c += targets[n] != ignore_index;
    }
    ssum[threadIdx.x] = t;
    scnt[threadIdx.x] = c;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h >>= 1) {
        if (threadIdx.x < h) {
            ssum[threadIdx.x] += ssum[threadIdx.x + h];
            scnt[threadIdx.x] += scnt[threadIdx.x + h];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        *sum = ssum[0];
        if (count) *count = scnt[0];
    }
}

/* The row kernel that fits: registers where the row fits, else 16-byte or element accesses. */
static void xent_rows(bf16 *dl, float *loss_rows, const bf16 *logits, const int32_t *targets, int N,
                      int V, int ignore_index, float grad_scale, cudaStream_t st) {
    constexpr int W = 8;
    if (xent_rows_regs(dl, loss_rows, logits, targets, N, V, ignore_index, grad_scale, st) == ZY_OK)
        return;
    if (V % W == 0 && zy_aligned(logits, 16) && (!dl || zy_aligned(dl, 16)))
        zy_launch(xent_rows_k<bf16, W>, N, zy_row_threads(V / W), 0, st, dl, loss_rows, logits,
                  targets, V, ignore_index, grad_scale);
    else
        zy_launch(xent_rows_k<bf16, 1>, N, zy_row_threads(V), 0, st, dl, loss_rows, logits, targets,
                  V, ignore_index, grad_scale);
}

int cuda_xent_fwd_bwd_bf16(zy_bf16 *dlogits, float *loss_rows, double *loss_sum, int *count,
                           const zy_bf16 *logits, const int32_t *targets, int N, int V,
                           int ignore_index, float grad_scale, void *stream) {
    if (N < 0 || V <= 0) return zy_fail("cuda xent: impossible shape N=%d V=%d", N, V);
    cudaStream_t st = (cudaStream_t)stream;
    if (N > 0) {
        xent_rows((bf16 *)dlogits, loss_rows, (const bf16 *)logits, targets, N, V, ignore_index,
                  grad_scale, st);
        ZY_CUDA_TRY_LAUNCH();
    }
    if (loss_sum) {
        zy_launch(xent_sum_k, 1, 256, 0, st, loss_sum, count, loss_rows, targets, N, ignore_index);
        ZY_CUDA_TRY_LAUNCH();
    }
    return ZY_OK;
}
