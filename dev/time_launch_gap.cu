/* dev/time_launch_gap: what a kernel boundary costs the GPU when the host is far ahead, and what
 * CUDA graphs or programmatic dependent launch (PDL) would save of it. bench-small's traced step
 * runs ~1,200 kernels with a median gap of ~3.8 us between dependent kernels queued ahead
 * (dev/scripts/gpu_kernel_trace.sh), so the boundary itself may be worth ~4 ms a step.
 *
 * Each case runs a chain of T_CHAIN dependent kernels, each a bandwidth-bound pass over a
 * [rows x 1024] bf16 buffer (y = x * 0.5 + y, the sizes of a small element-wise op of the step),
 * behind a long spin kernel so the host is ahead, and reports GPU microseconds per kernel:
 *   stream        plain launches on one stream
 *   graph         the same chain captured once into a CUDA graph and launched
 *   stream + PDL  launches with cudaLaunchAttributeProgrammaticStreamSerialization; each kernel
 *                 waits (griddepcontrol.wait) before it reads, and signals its dependents early
 *   graph + PDL   that chain captured into a graph
 * and the same pass as one kernel over T_CHAIN times the rows (no boundaries) for the floor.
 * Needs a GPU; exit status 1 when a CUDA call fails. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>

enum { T_CHAIN = 400, T_COLS = 1024 };

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));            \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

__global__ static void k_spin(long long cycles) {
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

/* y = x * 0.5 + y over n bf16x8 vectors; pdl: wait for the previous kernel before reading, and
 * let the next one launch once this block has issued its loads. */
template <int PDL> __global__ static void k_pass(uint4 *y, const uint4 *x, long n) {
    if (PDL) asm volatile("griddepcontrol.wait;" ::: "memory");
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x) {
        uint4 a = x[i], b = y[i];
        __nv_bfloat162 *pa = (__nv_bfloat162 *)&a, *pb = (__nv_bfloat162 *)&b;
#pragma unroll
        for (int k = 0; k < 4; k++) pb[k] = __hfma2(pa[k], __float2bfloat162_rn(0.5f), pb[k]);
        y[i] = b;
    }
    if (PDL) asm volatile("griddepcontrol.launch_dependents;");
}

static int launch(cudaStream_t st, int pdl, uint4 *y, const uint4 *x, long n, int blocks) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(blocks);
    cfg.blockDim = dim3(256);
    cfg.stream = st;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = pdl ? 1 : 0;
    CK(pdl ? cudaLaunchKernelEx(&cfg, k_pass<1>, y, x, n)
           : cudaLaunchKernelEx(&cfg, k_pass<0>, y, x, n));
    return 0;
}

static int chain(cudaStream_t st, int pdl, uint4 *y, const uint4 *x, long n, int blocks) {
    for (int i = 0; i < T_CHAIN; i++)
        if (launch(st, pdl, y, x, n, blocks)) return 1;
    return 0;
}

/* GPU us per kernel of the chain: stream launches (graph 0) or one graph launch (graph 1). */
static int time_case(cudaStream_t st, int graph, int pdl, uint4 *y, const uint4 *x, long n,
                     int blocks, double *us) {
    cudaGraphExec_t exec = NULL;
    if (graph) {
        cudaGraph_t g;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        if (chain(st, pdl, y, x, n, blocks)) return 1;
        CK(cudaStreamEndCapture(st, &g));
        CK(cudaGraphInstantiate(&exec, g, 0));
        CK(cudaGraphDestroy(g));
        CK(cudaGraphLaunch(exec, st)); /* the first launch uploads it */
    }
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        k_spin<<<1, 1, 0, st>>>(200000000LL); /* ~100 ms: the host queues everything behind it */
        CK(cudaEventRecord(e0, st));
        if (graph)
            CK(cudaGraphLaunch(exec, st));
        else if (chain(st, pdl, y, x, n, blocks))
            return 1;
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (ms * 1e3 / T_CHAIN < best) best = ms * 1e3 / T_CHAIN;
    }
    if (exec) CK(cudaGraphExecDestroy(exec));
    *us = best;
    return 0;
}

int main(void) {
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("# %s: %d kernels a chain, y = 0.5 x + y over [rows x %d] bf16\n", prop.name, T_CHAIN,
           T_COLS);
    printf("| rows | MB a pass | one kernel, same bytes (us/pass) | stream | graph | stream + PDL "
           "| graph + PDL |\n");
    printf("|---|---|---|---|---|---|---|\n");
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const int rows_list[] = {256, 2048, 16384};
    const long nmax = (long)16384 * T_COLS / 8;
    uint4 *x, *y, *bx, *by;
    CK(cudaMalloc(&x, nmax * 16));
    CK(cudaMalloc(&y, nmax * 16));
    CK(cudaMemset(x, 0, nmax * 16));
    CK(cudaMemset(y, 0, nmax * 16));
    const long big = (long)T_CHAIN * 2048 * T_COLS / 8; /* the floor: 2048-row passes as one */
    CK(cudaMalloc(&bx, big * 16));
    CK(cudaMalloc(&by, big * 16));
    CK(cudaMemset(bx, 0, big * 16));
    CK(cudaMemset(by, 0, big * 16));
    const int blocks = prop.multiProcessorCount * 8;
    for (int r = 0; r < 3; r++) {
        const long n = (long)rows_list[r] * T_COLS / 8;
        double t[4];
        for (int c = 0; c < 4; c++)
            if (time_case(st, c & 1, c >> 1, y, x, n, blocks, &t[c])) return 1;
        /* one kernel moving the chain's bytes (capped at 2048-row passes' worth) */
        const long nb = n * T_CHAIN < big ? n * T_CHAIN : big;
        cudaEvent_t e0, e1;
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
        float ms = 1e30f;
        for (int rep = 0; rep < 3; rep++) {
            CK(cudaEventRecord(e0, st));
            if (launch(st, 0, by, bx, nb, blocks)) return 1;
            CK(cudaEventRecord(e1, st));
            CK(cudaEventSynchronize(e1));
            float m;
            CK(cudaEventElapsedTime(&m, e0, e1));
            if (m < ms) ms = m;
        }
        const double floor_us = ms * 1e3 / ((double)nb / n);
        printf("| %d | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", rows_list[r], n * 16 * 3 / 1e6,
               floor_us, t[0], t[1], t[2], t[3]);
    }
    CK(cudaGetLastError());
    return 0;
}
