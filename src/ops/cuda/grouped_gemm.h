/* The MoE experts' forward and input-gradient GEMMs, each one launch on Hopper, with the
 * experts' row ranges read on the device: Y[r, :] = X[r, :] W_e^T (or X[r, :] W_e) for the rows
 * r in [offsets[e], offsets[e+1]) of every expert e. The per-expert cuBLAS path
 * (ops_experts.cu) needs the offsets on the host, so the forward waited for the router's
 * dispatch once per layer, and then issued two GEMMs per expert at ~8 us of host time each while
 * each ran ~10 us on the GPU: the GPU idled after every wait.
 * With the offsets on the device the host issues a layer's MoE without waiting.
 *
 * The kernel is persistent and warp-specialised like syrk.cu (its PTX is in wgmma.h): one thread
 * TMA-loads [128 rows x 64 k] tiles of X and W_e (K-major, or for the input gradient two
 * MN-major [64 x 64] boxes) into a 4-stage mbarrier ring, two warpgroups run wgmma m64n128k16 on
 * 64 rows each and stage the bf16 tile in shared memory, where warpgroup 0's idle warps store it
 * during the next tile's MMAs. Tiles are
 * [128 x 128] of one expert: an expert's last tile is partial and its rows past the expert are
 * neither stored nor the next expert's business (each output row is computed by exactly one
 * tile, in one k order: deterministic). sm_90a only: elsewhere cuda_grouped_gemm_supported() is
 * 0 and callers keep the per-expert path. */
#ifndef ZY_OPS_CUDA_GROUPED_GEMM_H
#define ZY_OPS_CUDA_GROUPED_GEMM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when the current device and this build run the kernel (compute capability 9.0, sm_90a). */
int cuda_grouped_gemm_supported(void);

/* 1 when cuda_grouped_gemm_bf16 takes these sizes and pointers: 1 <= E <= 128, N, K >= 8 and
 * multiples of 8 (N of 64 with trans_w: the reduction must not cross into the next expert's
 * rows of W), rows_cap >= 1, Y, X, W 16-byte aligned. */
int cuda_grouped_gemm_fits(const void *Y, const void *X, const void *W, int E, int N, int K,
                           int rows_cap, int trans_w);

/* For offsets[e] <= r < offsets[e+1], e < E, with W [E, N, K]:
 *   trans_w 0 (the forward):       Y[r, :N] = X[r, :K] W[e]^T   (X [rows_cap, K], Y [rows_cap, N])
 *   trans_w 1 (the input gradient): Y[r, :K] = X[r, :N] W[e]    (X [rows_cap, N], Y [rows_cap, K])
 * bf16 row-major, fp32 accumulation; offsets: DEVICE memory, [E+1] non-decreasing from 0 with
 * offsets[E] <= rows_cap (rows at and past offsets[E] are not written). `stream` is a
 * cudaStream_t. ZY_ERR with a message when the arguments do not fit or the device cannot run
 * it. */
int cuda_grouped_gemm_bf16(void *Y, const void *X, const void *W, const int32_t *offsets, int E,
                           int N, int K, int rows_cap, int trans_w, void *stream);

/* 1 when cuda_grouped_gemm_swiglu_bf16 takes these: F and K multiples of 8, the forward's other
 * conditions with N = 2F, act 16-byte aligned. */
int cuda_grouped_gemm_swiglu_fits(const void *Y, const void *act, const void *X, const void *W,
                                  int E, int F, int K, int rows_cap);

/* The gate_up projection and its SwiGLU in one launch: with W [E, 2F, K] (W[e] = [gate; up], F
 * rows each), for offsets[e] <= r < offsets[e+1]:
 *   Y[r, :2F] = X[r, :K] W[e]^T   (as cuda_grouped_gemm_bf16's forward, the same bits)
 *   act[r, f] = silu(Y[r, f]) Y[r, F + f]   for f < F, of Y's bf16 values (the bits of
 *               cuda_swiglu_fwd_bf16 over Y)
 * act [rows_cap, F]; rows at and past offsets[E] of Y and act are not written. */
int cuda_grouped_gemm_swiglu_bf16(void *Y, void *act, const void *X, const void *W,
                                  const int32_t *offsets, int E, int F, int K, int rows_cap,
                                  void *stream);

#ifdef __cplusplus
}
#endif

#endif
