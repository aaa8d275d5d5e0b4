/* Fused causal grouped-query attention on the GPU (flash-attention style, bf16 in and out, fp32
 * accumulation, tensor cores through mma.sync m16n8k16), forward and backward. Same contract as
 * ops_attention_fwd/bwd in ops/ops.h: rows are tokens, N = B*T, sequence b owns rows
 * [b*T, (b+1)*T); q, out [N, Hq*d]; k, v [N, Hk*d]; query head i uses key head i/(Hq/Hk); query t
 * sees keys s <= t (and s > t - window when window > 0); lse [B, Hq, T] (natural log of the sum of
 * exp(scale * q.k) over the visible keys) is saved by the forward for the backward.
 * Pointers are device memory; q/k/v/out/dq/dk/dv rows must be 16-byte aligned (d a multiple of 8
 * and base pointers 16-byte aligned). d is one of 16, 32, 64, 128. Every call is asynchronous on
 * stream s; launch errors are checked and reported through zy_fail. Usable from C. */
#ifndef ZY_CUDA_ATTENTION_H
#define ZY_CUDA_ATTENTION_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Kernel shape choices; 0 picks the default. fwd_warps: 4 or 8, fwd_mtiles: 1 or 2 (16-row
 * query tiles per warp; 2 only with 4 warps): query rows per block = 16 x warps x mtiles.
 * bwd_warps: 4 or 8 (key rows per block = 16 x warps); bwd_rows: 32 or 64 query rows per step.
 * Defaults (the fastest on an H100 at d = 128): forward 4 warps x 2 m-tiles at d = 128, else
 * 4 x 1; backward 64 rows, 4 warps on the default dq path and 8 on the other two. Only d = 128 and
 * d = 64 offer every combination; other d use the default. dq: by default the main backward kernel
 * stores dS (bf16, in 64 x 64 tiles of the causal triangle, in the scratch) and a second kernel
 * over query tiles sums dS K over its key tiles in a fixed order, so the backward is bitwise
 * repeatable; when the tiles would take over 1 GiB (B * Hq * T^2 bytes: long contexts) the default
 * recomputes instead. dq_recompute = 1 instead recomputes S, P and dS in that second kernel (no dS
 * tiles: less scratch, three T x T x d products instead of one); dq_atomic = 1 adds each key
 * block's share of dq into an fp32 scratch with atomics (the rounding depends on the order the
 * blocks run in; kept for comparison). */
typedef struct {
    int fwd_warps;
    int fwd_mtiles;
    int bwd_warps;
    int bwd_rows;
    int dq_atomic;
    int dq_recompute;
} cuda_attention_cfg;

/* out [N, Hq*d] bf16 and lse [B, Hq, T] fp32 from q [N, Hq*d], k, v [N, Hk*d] (bf16). */
int cuda_attention_fwd(const void *q, const void *k, const void *v, void *out, float *lse, int B,
                       int T, int Hq, int Hk, int d, float scale, int window, cudaStream_t s);

/* Bytes of device scratch the default cuda_attention_bwd needs: the row sums
 * D = rowsum(dout * out), [B, Hq, T] fp32, and the stored dS tiles, B * Hq * n (n + 1) / 2 tiles
 * of 64 x 64 bf16 for n = ceil(T / 64) (about B * Hq * T^2 bytes). */
size_t cuda_attention_bwd_scratch_bytes(int B, int T, int Hq, int d);

/* The same for a kernel shape (cfg == NULL: the default); dq_atomic needs an fp32 dq
 * accumulator [N, Hq*d] besides the row sums. */
size_t cuda_attention_bwd_scratch_bytes_cfg(int B, int T, int Hq, int d,
                                            const cuda_attention_cfg *cfg);

/* dq [N, Hq*d], dk, dv [N, Hk*d] (bf16, overwritten) from dout [N, Hq*d] and the forward's
 * inputs, out and lse. scratch: device memory of at least cuda_attention_bwd_scratch_bytes. dk/dv
 * are summed over the query heads of a group inside one block, dq over the key tiles inside one
 * block of a second kernel: no atomics, and the same inputs give the same bits on every call. */
int cuda_attention_bwd(const void *dout, const void *q, const void *k, const void *v,
                       const void *out, const float *lse, void *dq, void *dk, void *dv,
                       void *scratch, size_t scratch_bytes, int B, int T, int Hq, int Hk, int d,
                       float scale, int window, cudaStream_t s);

/* The two calls above with an explicit kernel shape (benchmarks and tests of every variant);
 * cfg == NULL is the default. The backward's scratch: cuda_attention_bwd_scratch_bytes_cfg. */
int cuda_attention_fwd_cfg(const void *q, const void *k, const void *v, void *out, float *lse,
                           int B, int T, int Hq, int Hk, int d, float scale, int window,
                           const cuda_attention_cfg *cfg, cudaStream_t s);
int cuda_attention_bwd_cfg(const void *dout, const void *q, const void *k, const void *v,
                           const void *out, const float *lse, void *dq, void *dk, void *dv,
                           void *scratch, size_t scratch_bytes, int B, int T, int Hq, int Hk, int d,
                           float scale, int window, const cuda_attention_cfg *cfg, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
