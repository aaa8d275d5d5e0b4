/* Fused causal grouped-query attention on the GPU (flash-attention style, bf16 in and out, fp32
 * accumulation, tensor cores through mma.sync m16n8k16), forward and backward. Same contract as
 * ops_attention_fwd/bwd in ops/ops.h: rows are tokens, N = B*T, sequence b owns rows
 * [b*T, (b+1)*T); q, out [N, Hq*d]; k, v [N, Hk*d]; query head i uses key head i/(Hq/Hk); query t
 * sees keys s <= t (and s > t - window when window > 0); lse [B, Hq, T] (natural log of the sum of
 * exp(scale * q.k) over the visible keys) is saved by the forward for the backward.
 * Pointers are device memory; q/k/v/out/dq/dk/dv rows must be 16-byte aligned (d a multiple of 8
 * and base pointers 16-byte aligned). d is one of 16, 32, 64, 128. Every call is asynchronous on
 * stream s; launch errors are checked and reported through zy_fail_runtime. Usable from C. Each
 * call runs the kernel shape measured fastest on an H100 (bench/attention_NOTES.md); the other
 * shapes are in dev/attention_variants.h, the kernels in attention_kernels.h. */
#ifndef ZY_CUDA_ATTENTION_H
#define ZY_CUDA_ATTENTION_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out [N, Hq*d] bf16 and lse [B, Hq, T] fp32 from q [N, Hq*d], k, v [N, Hk*d] (bf16). */
int cuda_attention_fwd(const void *q, const void *k, const void *v, void *out, float *lse, int B,
                       int T, int Hq, int Hk, int d, float scale, int window, cudaStream_t s);

/* Bytes of device scratch cuda_attention_bwd needs: the row sums D = rowsum(dout * out),
 * [B, Hq, T] fp32, and the stored dS tiles, B * Hq * n (n + 1) / 2 tiles of 64 x 64 bf16 for
 * n = ceil(T / 64) (about B * Hq * T^2 bytes); past 1 GiB of tiles (long contexts) dq is
 * recomputed instead and only the row sums are needed. */
size_t cuda_attention_bwd_scratch_bytes(int B, int T, int Hq, int d);

/* dq [N, Hq*d], dk, dv [N, Hk*d] (bf16, overwritten) from dout [N, Hq*d] and the forward's
 * inputs, out and lse. scratch: device memory of at least cuda_attention_bwd_scratch_bytes. dk/dv
 * are summed over the query heads of a group inside one block, dq over the key tiles inside one
 * block of a second kernel: no atomics, and the same inputs give the same bits on every call.
 * Kernel shapes: 4 warps of 16 keys, 64 query rows per step, dq from the stored dS; 8 warps when
 * dq is recomputed (d = 128 and 64). */
int cuda_attention_bwd(const void *dout, const void *q, const void *k, const void *v,
                       const void *out, const float *lse, void *dq, void *dk, void *dv,
                       void *scratch, size_t scratch_bytes, int B, int T, int Hq, int Hk, int d,
                       float scale, int window, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
