/* CPU reference ops: host memory, sgemm (OpenBLAS), axpy and bias, the input embedding affine and
 * the residual scaling. Reductions over rows run per column block in double, so parameter
 * gradients do not depend on the thread count. */
#include "ops/cpu/cpu_ops.h"

#include "base/err.h"

#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* ---- memory ---- */

/* Zeroed host memory aligned to 64 bytes (a cache line, an AVX-512 vector); aborts on OOM. */
void *cpu_alloc(size_t bytes) {
    size_t n = (bytes + 63) / 64 * 64;
    if (n == 0) n = 64;
    void *p = aligned_alloc(64, n);
    if (!p)
        zy_fatal_runtime_at(__FILE__, __LINE__, "aligned_alloc",
                            "out of host memory allocating %zu bytes", bytes);
    memset(p, 0, n);
    return p;
}

/* Frees cpu_alloc memory. */
void cpu_free(void *p) {
    free(p);
}

/* memmove (overlap allowed); large copies are split over threads when they do not overlap. */
void cpu_copy(int nt, void *dst, const void *src, size_t bytes) {
    if (bytes == 0 || dst == src) return;
    const char *s = src;
    char *t = dst;
    int overlap = (t < s + bytes) && (s < t + bytes);
    if (overlap || bytes < ((size_t)1 << 22) || nt == 1) {
        memmove(dst, src, bytes);
        return;
    }
    size_t chunk = (bytes + (size_t)nt - 1) / (size_t)nt;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int i = 0; i < nt; i++) {
        size_t a = (size_t)i * chunk, b = a + chunk < bytes ? a + chunk : bytes;
        if (a < b) memcpy(t + a, s + a, b - a);
    }
}

/* x[0..n) = value. */
void cpu_fill(int nt, float *x, float value, size_t n) {
#pragma omp parallel for num_threads(nt) schedule(static) if (n >= CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) x[i] = value;
}

/* ---- dense algebra ---- */

/* The OpenMP build of OpenBLAS takes its thread count from omp_get_max_threads() at each call (and
 * runs single-threaded inside an active parallel region). openblas_set_num_threads would change
 * that OpenMP default for the whole program, so instead the calling thread's nthreads ICV is set
 * around the call and restored. */
static void sgemm_threads(int nt, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K,
                          float alpha, const float *A, int lda, const float *B, int ldb, float beta,
                          float *C, int ldc) {
    int prev = omp_in_parallel() ? nt : omp_get_max_threads();
    if (prev != nt) omp_set_num_threads(nt);
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (prev != nt) omp_set_num_threads(prev);
}

/* Strided single-threaded sgemm for head or group blocks inside the CPU ops. */
void cpu_sgemm(int transA, int transB, int M, int N, int K, const float *A, int lda, const float *B,
               int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (beta == 0.0f)
        for (int i = 0; i < M; i++) memset(C + (size_t)i * ldc, 0, (size_t)N * sizeof(float));
    if (K <= 0) return;
    sgemm_threads(1, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans, M, N,
                  K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}

/* Row-major C[M,N] = alpha op(A) op(B) + beta C through cblas_sgemm. */
void cpu_matmul(int nt, float *C, const float *A, const float *B, int M, int N, int K, int transA,
                int transB, float alpha, float beta) {
    ZY_CHECK(M >= 0 && N >= 0 && K >= 0);
    if (M == 0 || N == 0) return;
    size_t mn = (size_t)M * (size_t)N;
    /* beta == 0 must drop C's old contents even when they are NaN: clear explicitly rather than
     * rely on the BLAS's handling of beta == 0. */
    if (beta == 0.0f) cpu_fill(nt, C, 0.0f, mn);
    if (K == 0) {
        if (beta != 0.0f && beta != 1.0f) {
#pragma omp parallel for num_threads(nt) schedule(static) if (mn >= CPU_PAR_MIN)
            for (size_t i = 0; i < mn; i++) C[i] *= beta;
        }
        return;
    }
    sgemm_threads(nt, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans, M, N,
                  K, alpha, A, transA ? M : K, B, transB ? K : N, beta, C, N);
}

/* y += a x. */
void cpu_axpy(int nt, float *y, const float *x, float a, size_t n) {
#pragma omp parallel for num_threads(nt) schedule(static) if (n >= CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) y[i] += x[i] * a;
}

/* y[N,C] += bias[C]. */
void cpu_add_bias(int nt, float *y, const float *bias, int N, int C) {
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * C >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        float *row = y + (size_t)n * C;
        for (int c = 0; c < C; c++) row[c] += bias[c];
    }
}

/* dbias[C] += sum_n dy[n,c], each column block summed in double by one thread. */
void cpu_bias_bwd(int nt, float *dbias, const float *dy, int N, int C) {
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * C >= CPU_PAR_MIN)
    for (int c0 = 0; c0 < C; c0 += CPU_COL_BLOCK) {
        int c1 = c0 + CPU_COL_BLOCK < C ? c0 + CPU_COL_BLOCK : C;
        double acc[CPU_COL_BLOCK] = {0};
        for (int n = 0; n < N; n++) {
            const float *row = dy + (size_t)n * C;
            for (int c = c0; c < c1; c++) acc[c - c0] += row[c];
        }
        for (int c = c0; c < c1; c++) dbias[c] = (float)((double)dbias[c] + acc[c - c0]);
    }
}

/* ---- embedding and input affine ---- */

/* h[N,D] = (emb[ids[n]] + bias) * scale, in fp32 in the order HF computes it. */
void cpu_embed_fwd(int nt, float *h, const float *emb, const int32_t *ids, const float *bias,
                   const float *scale, int N, int D) {
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * D >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *e = emb + (size_t)ids[n] * D;
        float *row = h + (size_t)n * D;
        for (int c = 0; c < D; c++) row[c] = (e[c] + bias[c]) * scale[c];
    }
}

/* demb[ids] += dh*scale (not for skip_id rows), dbias += sum dh*scale, dscale += sum dh*(emb+bias).
 * Parallel over column blocks: repeated ids then never race, and sums run in row order. */
void cpu_embed_bwd(int nt, float *demb, float *dbias, float *dscale, const float *dh,
                   const float *emb, const int32_t *ids, const float *bias, const float *scale,
                   int N, int D, int skip_id) {
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * D >= CPU_PAR_MIN)
    for (int c0 = 0; c0 < D; c0 += CPU_COL_BLOCK) {
        int c1 = c0 + CPU_COL_BLOCK < D ? c0 + CPU_COL_BLOCK : D;
        double sb[CPU_COL_BLOCK] = {0}, ss[CPU_COL_BLOCK] = {0};
        for (int n = 0; n < N; n++) {
            const float *g = dh + (size_t)n * D;
            const float *e = emb + (size_t)ids[n] * D;
            float *de = demb + (size_t)ids[n] * D;
            int skip = ids[n] == skip_id;
            for (int c = c0; c < c1; c++) {
                float gs = g[c] * scale[c];
                if (!skip) de[c] += gs;
                sb[c - c0] += gs;
                ss[c - c0] += (double)g[c] * (double)(e[c] + bias[c]);
            }
        }
        for (int c = c0; c < c1; c++) {
            dbias[c] = (float)((double)dbias[c] + sb[c - c0]);
            dscale[c] = (float)((double)dscale[c] + ss[c - c0]);
        }
    }
}

/* ---- residual scaling ---- */

/* out = (o + ob) * os + (h + rb) * rs, fp32 in HF's order. */
void cpu_resscale_fwd(int nt, float *out, const float *o, const float *h, const float *ob,
                      const float *os, const float *rb, const float *rs, int N, int D) {
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * D >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        size_t r = (size_t)n * D;
        for (int c = 0; c < D; c++)
            out[r + c] = (o[r + c] + ob[c]) * os[c] + (h[r + c] + rb[c]) * rs[c];
    }
}

/* Input gradients (overwrite) and the four parameter gradients (+=), per column block. Each
 * dout element is read before dh (which may alias dout) is written at the same place. */
void cpu_resscale_bwd(int nt, float *d_o, float *dh, float *dob, float *dos, float *drb, float *drs,
                      const float *dout, const float *o, const float *h, const float *ob,
                      const float *os, const float *rb, const float *rs, int N, int D) {
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * D >= CPU_PAR_MIN)
    for (int c0 = 0; c0 < D; c0 += CPU_COL_BLOCK) {
        int c1 = c0 + CPU_COL_BLOCK < D ? c0 + CPU_COL_BLOCK : D;
        double sg[CPU_COL_BLOCK] = {0}, so[CPU_COL_BLOCK] = {0}, sh[CPU_COL_BLOCK] = {0};
        for (int n = 0; n < N; n++) {
            size_t r = (size_t)n * D;
            for (int c = c0; c < c1; c++) {
                float g = dout[r + c];
                sg[c - c0] += g;
                so[c - c0] += (double)g * (double)(o[r + c] + ob[c]);
                sh[c - c0] += (double)g * (double)(h[r + c] + rb[c]);
                d_o[r + c] = g * os[c];
                dh[r + c] = g * rs[c];
            }
        }
        for (int c = c0; c < c1; c++) {
            int i = c - c0;
            dob[c] = (float)((double)dob[c] + sg[i] * os[c]);
            dos[c] = (float)((double)dos[c] + so[i]);
            drb[c] = (float)((double)drb[c] + sg[i] * rs[c]);
            drs[c] = (float)((double)drs[c] + sh[i]);
        }
    }
}
