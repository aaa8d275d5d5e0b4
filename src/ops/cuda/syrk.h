/* Symmetric rank-k products on Hopper tensor cores: D_b = alpha X_b X_b^T + beta C_b (or
 * alpha X_b^T X_b + beta C_b) for a batch of row-major bf16 matrices, computing only the
 * [128 x 128] tiles on and below the diagonal (36 of 64 at n = 1024) and writing each
 * off-diagonal tile twice, as itself and mirrored, so D_b is the whole symmetric [n, n] result.
 * cuBLAS has no bf16 SYRK; Muon's Newton-Schulz (optim_cuda.cu) spends most of its FLOPs on two
 * such products per step.
 *
 * The kernel is persistent and warp-specialised: one warpgroup issues TMA loads of operand tiles
 * (128-byte swizzle) into a ring of stages guarded by mbarriers; two warpgroups run wgmma
 * m64n128k16 (fp32 accumulation, operands K-major or, for X^T X, MN-major) and the epilogue
 * (alpha, beta C, bf16, through shared memory for the mirrored stores). sm_90a only: elsewhere
 * cuda_syrk_supported() is 0 and callers keep their cuBLAS path. */
#ifndef ZY_OPS_CUDA_SYRK_H
#define ZY_OPS_CUDA_SYRK_H

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when the current device and this build run the kernel (compute capability 9.0, sm_90a). */
int cuda_syrk_supported(void);

/* 1 when cuda_syrk_bf16 accepts these layouts: n, k >= 1, n % 8 == 0, ldx, sx, ldd, sd multiples
 * of 8 elements, pointers 16-byte aligned, n <= ldd, X's rows fit ldx and its matrices sx. */
int cuda_syrk_fits(const void *D, const void *C, const void *X, int n, int k, int trans,
                   long long ldx, long long sx, long long ldd, long long sd);

/* Per-matrix factors: device arrays of `batch` floats, each NULL for none (syrk below). */
typedef struct {
    const float *a, *b, *d;
} cuda_syrk_scales;

/* For b < batch: D_b = alpha a_b X_b X_b^T + beta b_b C_b + d_b I with X_b [n, k] (trans 0), or
 * the same with X_b^T X_b and X_b [k, n] (trans 1), the factors from *per (per NULL: a_b = b_b = 1,
 * d_b = 0); X_b's rows ldx apart, matrices sx
 * apart; D_b [n, n] rows ldd apart, matrices sd apart; all bf16, fp32 accumulation. C_b (laid out
 * as D_b; C may be D; beta == 0 does not read C) must be symmetric, as this function's results
 * are bit for bit: below the diagonal tiles only its lower part is read and the result mirrored.
 * X must not overlap D (other CTAs would read what one has written).
 * `stream` is a cudaStream_t. ZY_ERR with a message when the arguments do not fit
 * (cuda_syrk_fits) or the device cannot run it. */
int cuda_syrk_bf16(void *D, const void *C, const void *X, int n, int k, int trans, long long ldx,
                   long long sx, long long ldd, long long sd, int batch, float alpha, float beta,
                   const cuda_syrk_scales *per, void *stream);

#ifdef __cplusplus
}
#endif

#endif
