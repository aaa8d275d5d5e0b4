/* dev/time_gemm_host: the host's cost of issuing one expert GEMM, which bounds an MoE layer when
 * each expert's GEMM runs shorter on the GPU than the host takes to issue it (bench-small: ~10 us
 * on the GPU a GEMM). Every case issues T_CALLS GEMMs of an expert's forward shape (M rows x 2048
 * x 1024, bf16) behind a long spin kernel, so no call waits for the GPU, and reports microseconds
 * of host time per call:
 *   cuda_gemm, one M          gemm.h with the same row count every call (plan cache hit)
 *   cuda_gemm, M varies       row counts changing every call within one size bucket (the expert
 *                             case: the plan's layouts are re-sized before each call)
 *   cublasLtMatmul, fixed     the library's own cost: one prebuilt descriptor, layouts and algo
 *   cublasLtMatmul, re-sized  the same with the three layouts' rows re-set before each call
 *   empty kernel              a launch's floor
 * Needs a GPU; exit status 1 when a CUDA call fails. */
#include "ops/cuda/gemm.h"
#include "base/check.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <stdio.h>
#include <stdint.h>
#include <time.h>

enum { T_CALLS = 500, T_N = 2048, T_K = 1024, T_MMAX = 1024 };

__global__ static void k_spin(long long cycles) {
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

__global__ static void k_empty(void) {}

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

/* The row count of call i: fixed, or varying within (T_MMAX/2, T_MMAX] as experts' do. */
static int rows_of(int i, int vary) {
    return vary ? T_MMAX - (int)((i * 37u) % (T_MMAX / 2)) : T_MMAX;
}

static int time_cuda_gemm(cuda_gemm_ctx *g, void *y, const void *x, const void *w, int vary,
                          cudaStream_t s, double *us) {
    /* the plans exist before timing (first calls pay the heuristic) */
    ZY_TRY(cuda_gemm(g, y, x, w, T_MMAX, T_N, T_K, 0, 1, 1.0f, 0.0f, CUDA_GEMM_BF16, CUDA_GEMM_BF16,
                     s));
    ZY_CUDA_TRY(cudaStreamSynchronize(s));
    k_spin<<<1, 1, 0, s>>>(2000000000LL);
    const double t0 = now_us();
    for (int i = 0; i < T_CALLS; i++)
        ZY_TRY(cuda_gemm(g, y, x, w, rows_of(i, vary), T_N, T_K, 0, 1, 1.0f, 0.0f, CUDA_GEMM_BF16,
                         CUDA_GEMM_BF16, s));
    *us = (now_us() - t0) / T_CALLS;
    ZY_CUDA_TRY(cudaStreamSynchronize(s));
    return ZY_OK;
}

/* Y[M,N] = X[M,K] W[N,K]^T in cuBLAS's column-major view: D^T [N,M] = W [N,K] . X^T [K,M]. */
static int time_lt(void *y, const void *x, const void *w, void *ws, size_t wsb, int vary,
                   cudaStream_t s, double *us) {
    cublasLtHandle_t lt;
    ZY_CUBLAS_TRY(cublasLtCreate(&lt));
    cublasLtMatmulDesc_t desc;
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    ZY_CUBLAS_TRY(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    ZY_CUBLAS_TRY(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    ZY_CUBLAS_TRY(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    cublasLtMatrixLayout_t la, lb, lc;
    ZY_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, T_K, T_N, T_K));
    ZY_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, T_K, T_MMAX, T_K));
    ZY_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, T_N, T_MMAX, T_N));
    cublasLtMatmulPreference_t pref;
    ZY_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&pref));
    ZY_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    ZY_CUBLAS_TRY(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 1, &h, &found));
    if (!found) return zy_fail("cuBLASLt has no algorithm for the expert shape");
    const float alpha = 1.0f, beta = 0.0f;
    k_spin<<<1, 1, 0, s>>>(2000000000LL);
    const double t0 = now_us();
    for (int i = 0; i < T_CALLS; i++) {
        if (vary) {
            const uint64_t m = (uint64_t)rows_of(i, 1);
            ZY_CUBLAS_TRY(
                cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_COLS, &m, sizeof m));
            ZY_CUBLAS_TRY(
                cublasLtMatrixLayoutSetAttribute(lc, CUBLASLT_MATRIX_LAYOUT_COLS, &m, sizeof m));
        }
        ZY_CUBLAS_TRY(cublasLtMatmul(lt, desc, &alpha, w, la, x, lb, &beta, y, lc, y, lc, &h.algo,
                                     ws, wsb, s));
    }
    *us = (now_us() - t0) / T_CALLS;
    ZY_CUDA_TRY(cudaStreamSynchronize(s));
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(lt);
    return ZY_OK;
}

static int run(void) {
    cudaStream_t s;
    ZY_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *x, *w, *y, *ws;
    ZY_CUDA_TRY(cudaMalloc(&x, (size_t)T_MMAX * T_K * 2));
    ZY_CUDA_TRY(cudaMalloc(&w, (size_t)T_N * T_K * 2));
    ZY_CUDA_TRY(cudaMalloc(&y, (size_t)T_MMAX * T_N * 2));
    ZY_CUDA_TRY(cudaMalloc(&ws, CUDA_GEMM_WORKSPACE));
    ZY_CUDA_TRY(cudaMemset(x, 0, (size_t)T_MMAX * T_K * 2));
    ZY_CUDA_TRY(cudaMemset(w, 0, (size_t)T_N * T_K * 2));
    cuda_gemm_ctx g;
    ZY_TRY(cuda_gemm_init(&g));
    double us[5];
    ZY_TRY(time_cuda_gemm(&g, y, x, w, 0, s, &us[0]));
    ZY_TRY(time_cuda_gemm(&g, y, x, w, 1, s, &us[1]));
    ZY_TRY(time_lt(y, x, w, ws, CUDA_GEMM_WORKSPACE, 0, s, &us[2]));
    ZY_TRY(time_lt(y, x, w, ws, CUDA_GEMM_WORKSPACE, 1, s, &us[3]));
    k_spin<<<1, 1, 0, s>>>(2000000000LL);
    const double t0 = now_us();
    for (int i = 0; i < T_CALLS; i++) k_empty<<<1, 32, 0, s>>>();
    us[4] = (now_us() - t0) / T_CALLS;
    ZY_CUDA_TRY(cudaStreamSynchronize(s));
    const char *names[5] = {"cuda_gemm, one M", "cuda_gemm, M varies", "cublasLtMatmul, fixed",
                            "cublasLtMatmul, re-sized", "empty kernel"};
    printf(
        "| host cost of one call (%d calls, expert forward M x %d x %d, bf16) | us |\n|---|---|\n",
        T_CALLS, T_N, T_K);
    for (int i = 0; i < 5; i++) printf("| %s | %.2f |\n", names[i], us[i]);
    cuda_gemm_free(&g);
    cudaFree(x), cudaFree(w), cudaFree(y), cudaFree(ws);
    cudaStreamDestroy(s);
    return ZY_OK;
}

int main(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("time_gemm_host: no GPU, nothing timed\n");
        return 0;
    }
    if (run() != ZY_OK) {
        fprintf(stderr, "time_gemm_host: %s\n", zy_errmsg());
        return 1;
    }
    return 0;
}
