/* Attention kernel shapes kept for tuning (dev/, not in libzayac): the forward and backward of
 * ops/cuda/attention.h with the tile shape and the dq path chosen by the caller, to time them
 * against each other (dev/test_attention_variants --bench) and to test every shape against the
 * CPU (dev/test_attention_variants). Same contract as attention.h otherwise. The shipped calls
 * run the measured winners (attention.cu). */
#ifndef ZY_DEV_ATTENTION_VARIANTS_H
#define ZY_DEV_ATTENTION_VARIANTS_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Kernel shape choices; 0 picks the shipped default. fwd_warps: 4 or 8, fwd_mtiles: 1 or 2
 * (16-row query tiles per warp; 2 only with 4 warps): query rows per block = 16 x warps x mtiles.
 * bwd_warps: 4 or 8 (key rows per block = 16 x warps); bwd_rows: 32 or 64 query rows per step.
 * Only d = 128 and d = 64 offer every combination; other d use the default. dq_recompute = 1
 * recomputes S, P and dS in dq's own kernel whatever the size (no dS tiles: less scratch, three
 * T x T x d products instead of one); 0 takes the default (stored dS tiles up to 1 GiB). */
typedef struct {
    int fwd_warps;
    int fwd_mtiles;
    int bwd_warps;
    int bwd_rows;
    int dq_recompute;
} dev_attention_cfg;

/* cuda_attention_bwd_scratch_bytes for a kernel shape (cfg == NULL: the default). */
size_t dev_attention_bwd_scratch_bytes_cfg(int B, int T, int Hq, int d,
                                           const dev_attention_cfg *cfg);

/* cuda_attention_fwd / cuda_attention_bwd with an explicit kernel shape (cfg == NULL: the
 * default); the backward's scratch: dev_attention_bwd_scratch_bytes_cfg. A shape outside the
 * choices above is refused with a message. */
int dev_attention_fwd_cfg(const void *q, const void *k, const void *v, void *out, float *lse, int B,
                          int T, int Hq, int Hk, int d, float scale, int window,
                          const dev_attention_cfg *cfg, cudaStream_t s);
int dev_attention_bwd_cfg(const void *dout, const void *q, const void *k, const void *v,
                          const void *out, const float *lse, void *dq, void *dk, void *dv,
                          void *scratch, size_t scratch_bytes, int B, int T, int Hq, int Hk, int d,
                          float scale, int window, const dev_attention_cfg *cfg, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
