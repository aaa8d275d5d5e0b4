/* The GPU side of src/optim (optim_cuda.cu), called by optim.c, clip.c and balance.c when their
 * context is a CUDA one: the fused multi-tensor AdamW, Muon batched over same-shape matrices
 * (momentum, Newton-Schulz with bf16 GEMMs accumulating in fp32, the scaled apply), the
 * deterministic global gradient norm and its scale, and the balancing-bias update. Pointers are
 * device memory of the context unless a comment says host. Everything is issued on the context's
 * stream; only optim_cuda_sumsq waits for the device (it returns a number to the host).
 *
 * Element-wise math copies the CPU functions of optim.h operation by operation with IEEE-rounded
 * intrinsics (no fused multiply-adds), so AdamW, the Muon momentum, the apply and the bias update
 * give the same bits as the CPU; Newton-Schulz differs from the fp32 CPU by bf16 rounding. */
#ifndef ZY_OPTIM_CUDA_H
#define ZY_OPTIM_CUDA_H

#include "ops/ops.h"
#include "optim/optim.h"
#include "tensor/params.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Muon matrices per Newton-Schulz call are capped so one call's iterate holds at most this many
 * elements (bf16): 32M elements = 64 MiB per iterate buffer. */
#define OPTIM_CUDA_BATCH_ELEMS ((size_t)1 << 25)

/* How a plan came out, for tests and benchmarks. */
typedef struct {
    int adam_chunks;  /* blocks of the one AdamW launch */
    int muon_groups;  /* distinct Muon matrix shapes */
    int muon_batches; /* Newton-Schulz calls per step (a group splits when over the cap) */
    int muon_mats;    /* Muon matrices (an [E, out, in] stack counts E) */
    int lt_missing;   /* GEMM shapes cuBLASLt had no algorithm for (classic cuBLAS runs them) */
    int muon_blocked; /* Newton-Schulz shapes whose symmetric products go by block rows */
    int muon_syrk;    /* symmetric products (A and B of each shape) by the Hopper SYRK */
} zy_optim_cuda_info;

/* Plans opt (cfg, method and state_off already set from t) for the GPU: uploads the AdamW chunk
 * table and the Muon matrix offsets, groups Muon matrices by shape (all layers and experts
 * together; with key [t->count] not NULL, by shape and key: no Newton-Schulz call mixes entries
 * of two keys, and calls come in the order of their keys' first entries), splits groups into
 * calls of at most batch_elems elements (0: OPTIM_CUDA_BATCH_ELEMS), allocates the Newton-Schulz
 * workspace and plans its GEMMs in the context's GEMM module (gemm.h). Ends the process on a
 * CUDA failure. */
zy_optim_cuda *optim_cuda_init(zy_ctx *ctx, const zy_optim *opt, const zy_param_table *t,
                               size_t batch_elems, const int *key);
/* Releases what init created (NULL is ignored). */
void optim_cuda_free(zy_ctx *ctx, zy_optim_cuda *c);
/* One step of every AdamW and Muon tensor from grads * gscale (opt->step already incremented;
 * bc1, bc2 the bias corrections 1 - beta^step in double, as optim_step computes them).
 * Asynchronous. */
void optim_cuda_step(zy_ctx *ctx, zy_optim_cuda *c, const zy_optim *opt, float *params,
                     const float *grads, float lr_now, float gscale, double bc1, double bc2);
/* optim_cuda_step in parts: the AdamW tensors among table entries [first, last) (one launch), and
 * every Muon tensor (batched by shape over the whole table). */
void optim_cuda_adamw(zy_ctx *ctx, zy_optim_cuda *c, const zy_optim *opt, float *params,
                      const float *grads, float lr_now, float gscale, double bc1, double bc2,
                      int first, int last);
void optim_cuda_muon(zy_ctx *ctx, zy_optim_cuda *c, const zy_optim *opt, float *params,
                     const float *grads, float lr_now, float gscale);
/* Whether the plan was made with keys; then optim_cuda_muon_key updates the Muon tensors of the
 * entries with one key (optim_cuda_muon: every key's, in key order). */
int optim_cuda_keyed(const zy_optim_cuda *c);
void optim_cuda_muon_key(zy_ctx *ctx, zy_optim_cuda *c, const zy_optim *opt, float *params,
                         const float *grads, float lr_now, float gscale, int key);
/* Whether the plan updates any Muon tensor. */
int optim_cuda_has_muon(const zy_optim_cuda *c);
/* Test hook: 1 runs every Newton-Schulz GEMM through classic cuBLAS (cublasGemmStridedBatchedEx)
 * instead of cuBLASLt, as whole products (block rows need cuBLASLt); 0 restores the default. */
void optim_cuda_set_legacy_gemm(zy_optim_cuda *c, int legacy);
/* Bench/test hook: 1 runs Muon as before issue 19 (the normalise kernel re-reading g and the
 * momentum, A and B as whole GEMMs; planned at first use), 0 restores the default. Same math. */
void optim_cuda_set_previous(zy_optim_cuda *c, int previous);
/* Bench/test hook: 0 runs Newton-Schulz's symmetric products A = X X^T and B = c A A + b A through
 * cuBLAS (whole, or by block rows with a mirror) instead of the Hopper SYRK (ops/cuda/syrk.h,
 * where the device runs it); 1 restores the default. Same math; the products differ in rounding
 * order only. */
void optim_cuda_set_syrk(zy_optim_cuda *c, int on);
/* Fills *info from the plan. */
void optim_cuda_plan_info(const zy_optim_cuda *c, zy_optim_cuda_info *info);

/* Sum of squares of every non-buffer gradient: double per thread and per block, blocks summed in
 * a fixed order, so the result does not depend on timing. Waits for the device. */
double optim_cuda_sumsq(zy_ctx *ctx, const zy_param_table *t, const float *grads);

/* biases[l][e] -= delta[l * n + e] for l < n_layers, e < n, then each layer shifted so its last
 * (skip) class is ZY_SKIP_BIAS (balance.h's canonical form); biases are device pointers, delta is
 * host memory (passed to the kernel by value, so nothing waits). */
void optim_cuda_bias_sub(zy_ctx *ctx, float *const *biases, const float *delta, int n_layers,
                         int n);

#ifdef __cplusplus
}
#endif

#endif
