/* dev/time_gemm_grouped: times the expert GEMM variants of dev/gemm_grouped.h (per expert, by
 * blocks, padded strided batches at three paddings) on bench-small's expert shapes, with one dense
 * GEMM of the same FLOPs beside them as the bar, and prints a table. Inputs are random non-zero
 * bf16 values. Needs a GPU; exit status 1 when a CUDA call fails. */
#include "gemm_grouped.h"
#include "base/check.h"

#include <stdio.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <string.h>

/* Uniform in +-[0.25, 0.5): never zero, small enough that sums over K = 1024 stay modest. */
__global__ static void k_fill(__nv_bfloat16 *p, size_t n, uint64_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
        x ^= x >> 31;
        x *= 0xbf58476d1ce4e5b9ull;
        x ^= x >> 29;
        float u = (float)((x >> 40) & 0xffffff) / 16777216.0f;
        p[i] = __float2bfloat16_rn((0.25f + 0.25f * u) * ((x >> 20) & 1 ? -1.0f : 1.0f));
    }
}

enum { T_E = 16, T_D = 1024, T_F = 1024, T_ROWS = 16384, T_ITERS = 20 };
/* The padded layout's rows per expert, as a multiple of the mean (T_ROWS / T_E) in percent: a
 * perfectly balanced step, and two plausible imbalances. */
static const int pad_pcts[3] = {100, 125, 150};
#define T_PAD_ROWS (T_ROWS * 150 / 100)

typedef struct {
    cuda_gemm_ctx *g;
    void *y, *x, *w, *dw; /* inputs (never written after the fill) and the weight gradient */
    void *out;            /* outputs of fwd, bwd_data and dense */
    const int *off;
    cudaStream_t s;
} time_bufs;

/* offsets e * cap for cap = pct% of the mean rows per expert */
static void padded_offsets(int *off, int pct) {
    int cap = T_ROWS / T_E * pct / 100;
    for (int e = 0; e <= T_E; e++) off[e] = e * cap;
}

/* what: 0 fwd, 1 bwd data, 2 bwd weight (cuda_gemm_expert_kind), 3 dense; impl as
 * dev_grouped_impl. N, K: W_e is [N,K]. */
static int run_once(time_bufs *b, int what, int impl, int N, int K, cuda_gemm_dtype dc) {
    const dev_grouped_impl gi = (dev_grouped_impl)impl;
    switch (what) {
    case 0:
        return dev_gemm_grouped(b->g, CUDA_GEMM_EXPERT_FWD, b->out, b->x, b->w, b->off, T_E, N, K,
                                0.0f, CUDA_GEMM_BF16, dc, gi, b->s);
    case 1:
        return dev_gemm_grouped(b->g, CUDA_GEMM_EXPERT_BWD_DATA, b->out, b->y, b->w, b->off, T_E, N,
                                K, 0.0f, CUDA_GEMM_BF16, dc, gi, b->s);
    case 2:
        return dev_gemm_grouped(b->g, CUDA_GEMM_EXPERT_BWD_WEIGHT, b->dw, b->y, b->x, b->off, T_E,
                                N, K, 1.0f, CUDA_GEMM_BF16, dc, gi, b->s);
    default: /* Y[rows,N] = X[rows,K] W_0^T: the same FLOPs as one dense GEMM */
        return cuda_gemm(b->g, b->out, b->x, b->w, T_ROWS, N, K, 0, 1, 1.0f, 0.0f, CUDA_GEMM_BF16,
                         dc, b->s);
    }
}

static int time_one(time_bufs *b, int what, int impl, int N, int K, cuda_gemm_dtype dc,
                    double *us) {
    cudaEvent_t e0, e1;
    ZY_CUDA_TRY(cudaEventCreate(&e0));
    ZY_CUDA_TRY(cudaEventCreate(&e1));
    int rc = ZY_OK;
    for (int i = 0; i < 3 && rc == ZY_OK; i++) rc = run_once(b, what, impl, N, K, dc);
    if (rc == ZY_OK && cudaEventRecord(e0, b->s) != cudaSuccess)
        rc = zy_fail_runtime("event record failed");
    for (int i = 0; i < T_ITERS && rc == ZY_OK; i++) rc = run_once(b, what, impl, N, K, dc);
    float ms = 0;
    if (rc == ZY_OK &&
        (cudaEventRecord(e1, b->s) != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess ||
         cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess))
        rc = zy_fail_runtime("%s:%d: timing events failed", __FILE__, __LINE__);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    *us = ms * 1e3 / T_ITERS;
    return rc;
}

static int grouped_time(FILE *out) {
    /* uneven split: expert e gets a share proportional to (5e mod 16); expert 0 gets no rows */
    int off[T_E + 1], wsum = 0;
    for (int e = 0; e < T_E; e++) wsum += (5 * e) % 16;
    off[0] = 0;
    for (int e = 0; e < T_E; e++) off[e + 1] = off[e] + T_ROWS * ((5 * e) % 16) / wsum;
    off[T_E] = T_ROWS;
    cuda_gemm_ctx g;
    ZY_TRY(cuda_gemm_init(&g));
    time_bufs b;
    memset(&b, 0, sizeof b);
    b.g = &g, b.off = off;
    size_t big = (size_t)T_PAD_ROWS * 2 * T_F, wn = (size_t)T_E * 2 * T_F * T_D;
    int rc = ZY_OK;
    ZY_CUDA_NOTE(rc, cudaStreamCreate(&b.s));
    ZY_CUDA_NOTE(rc, cudaMalloc(&b.y, big * 2));
    ZY_CUDA_NOTE(rc, cudaMalloc(&b.x, big * 2));
    ZY_CUDA_NOTE(rc, cudaMalloc(&b.w, wn * 2));
    ZY_CUDA_NOTE(rc, cudaMalloc(&b.dw, wn * 4));
    ZY_CUDA_NOTE(rc, cudaMalloc(&b.out, big * 4));
    if (rc == ZY_OK) {
        k_fill<<<1024, 256, 0, b.s>>>((__nv_bfloat16 *)b.x, big, 1);
        k_fill<<<1024, 256, 0, b.s>>>((__nv_bfloat16 *)b.y, big, 2);
        k_fill<<<1024, 256, 0, b.s>>>((__nv_bfloat16 *)b.w, wn, 3);
        ZY_CUDA_NOTE(rc, cudaGetLastError());
        ZY_CUDA_NOTE(rc, cudaMemsetAsync(b.dw, 0, wn * 4, b.s));
    }
    fprintf(out, "# grouped expert GEMMs: E=%d, %d rows, rows per expert:", T_E, T_ROWS);
    for (int e = 0; e < T_E; e++) fprintf(out, " %d", off[e + 1] - off[e]);
    fprintf(out, "\n%-8s %-11s %-6s %-22s %10s %9s\n", "matrix", "gemm", "out", "implementation",
            "time_us", "TFLOP/s");
    const struct {
        const char *name;
        int N, K;
    } mats[2] = {{"gate_up", 2 * T_F, T_D}, {"down", T_D, T_F}};
    const char *whats[4] = {"fwd", "bwd_data", "bwd_weight", "dense"};
    for (int m = 0; m < 2 && rc == ZY_OK; m++) {
        for (int what = 0; what < 4 && rc == ZY_OK; what++) {
            for (int v = 0; v < 6 && rc == ZY_OK; v++) {
                /* v: 0 loop bf16 out, 1 loop fp32 out (the weight gradient's accumulation type),
                 * 2-4 padded strided batch at pad_pcts[v - 2] (fp32 out for the weight gradient),
                 * 5 chunked (not the weight gradient) */
                if (what == 3 && v > 0) continue;
                if (v == 1 && what != 2) continue;
                if (v == 5 && what == 2) continue;
                cuda_gemm_dtype dc =
                    v == 1 || (v >= 2 && what == 2) ? CUDA_GEMM_FP32 : CUDA_GEMM_BF16;
                int impl = v == 5   ? DEV_GROUPED_CHUNKED
                           : v >= 2 ? DEV_GROUPED_PADDED
                                    : DEV_GROUPED_LOOP;
                int poff[T_E + 1];
                char label[40];
                if (v >= 2 && v <= 4) {
                    padded_offsets(poff, pad_pcts[v - 2]);
                    b.off = poff;
                    snprintf(label, sizeof label, "padded batch %d%%", pad_pcts[v - 2]);
                } else {
                    b.off = off;
                    snprintf(label, sizeof label, "%s",
                             what == 3 ? "one cuBLASLt GEMM"
                             : v == 5  ? "chunked ptr-array"
                                       : "per-expert cuBLASLt");
                }
                /* bwd_data: W_e [N,K] maps dY [rows,N] to dX [rows,K] */
                double us = 0;
                rc = time_one(&b, what, impl, mats[m].N, mats[m].K, dc, &us);
                if (rc != ZY_OK) break;
                /* useful FLOPs: the T_ROWS routed rows, whatever the padding adds */
                double flops = 2.0 * T_ROWS * mats[m].N * mats[m].K;
                fprintf(out, "%-8s %-11s %-6s %-22s %10.1f %9.1f\n", mats[m].name, whats[what],
                        dc == CUDA_GEMM_FP32 ? "fp32" : "bf16", label, us,
                        flops / (us * 1e-6) / 1e12);
            }
        }
    }
    fprintf(out, "# plan cache: %ld hits, %ld misses, %ld classic cuBLAS calls\n", g.hits, g.misses,
            g.legacy);
    if (b.y) cudaFree(b.y);
    if (b.x) cudaFree(b.x);
    if (b.w) cudaFree(b.w);
    if (b.dw) cudaFree(b.dw);
    if (b.out) cudaFree(b.out);
    if (b.s) cudaStreamDestroy(b.s);
    cuda_gemm_free(&g);
    return rc;
}

int main(void) {
    if (grouped_time(stdout) != ZY_OK) {
        fprintf(stderr, "time_gemm_grouped: %s\n", zy_errmsg());
        return 1;
    }
    return 0;
}
