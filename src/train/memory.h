/* The memory a job needs, estimated from its sizes before anything is allocated, and the check that
 * refuses a job its device cannot hold (one message with what it needs and what is available,
 * exit 2) instead of an allocation failing halfway through set-up. */
#ifndef ZY_TRAIN_MEMORY_H
#define ZY_TRAIN_MEMORY_H

#include "model/config.h"
#include "ops/ops.h"
#include "optim/optim.h"

/* Bytes by part on the job's device; host: what the host needs besides (a GPU job keeps a host
 * copy of the weights and of the optimizer state for checkpoints). */
typedef struct {
    double weights; /* fp32 master weights (ZeRO-1 on GPUs: this rank's, once set up) and, on a
                       GPU, their bf16 compute copy */
    double grads;
    double optim;     /* optimizer moments of this rank (ZeRO-1: its share) */
    double acts;      /* the activation arena of one [B, T] micro-batch (acts_bytes) */
    double workspace; /* training on a GPU: attention's backward workspace at most
                       * (ops_attention_workspace_bytes) */
    double device;    /* the sum, or the set-up's peak (every master, no optimizer) where larger */
    double setup;     /* that set-up peak (ZeRO-1 on GPUs: before other ranks' masters go back) */
    double host;
} zy_mem_need;

/* Estimates the memory of model mc on ctx with micro-batches [B, T] (B = 0: no activations;
 * recompute 1: the activations of activation recomputation, acts_init's). oc NULL: inference
 * (weights and activations only); else training with that optimizer, its state split over `world`
 * data-parallel ranks. Sizes past size_t come out as infinity. */
void mem_need(zy_ctx *ctx, const zy_config *mc, int B, int T, int recompute,
              const zy_optim_config *oc, int world, zy_mem_need *need);
/* mem_need, then a bad-input error when [B, T] is more tokens than one micro-batch may hold
 * (2^31 - 1) or the device or the host has less memory available than the job needs: "needs X GB
 * (weights, gradients, optimizer, activations), Y GB available". host_ranks: the ranks of this
 * host, which share its memory (CPU ranks share the device too). `what` names the job ("training
 * model tiny with batch 8 x 128") in the message. Unknown availability passes. need (may be NULL)
 * receives the estimate. */
int mem_check(zy_ctx *ctx, const zy_config *mc, int B, int T, int recompute,
              const zy_optim_config *oc, int world, int host_ranks, const char *what,
              zy_mem_need *need);

/* The memory a GPU job keeps free of its estimate: NCCL's buffers, cuBLASLt's and cuDNN's handles
 * and plans, Muon's Newton-Schulz buffers, the sample decoder, the allocator's rounding. */
#define MEM_RESERVE_BYTES    (4.0 * 1073741824.0)
#define MEM_RESERVE_FRACTION 0.08
/* cuda.attention_workspace_gib = auto: the cap cuDNN's one-pass backward wants for model mc's
 * attention over micro-batches [B, T] (ops_attention_workspace_wanted); 0 when there is nothing to
 * grow. */
size_t mem_workspace_wanted(zy_ctx *ctx, const zy_config *mc, int B, int T);
/* cuda.attention_workspace_gib = auto: raises ctx's attention workspace cap to `want` (the largest
 * mem_workspace_wanted of the job's shapes) when its allocation fits in what the job of estimate
 * `need` (mem_check's; for several shapes, the largest) leaves past the larger of
 * MEM_RESERVE_BYTES and MEM_RESERVE_FRACTION of the available memory; then counts it in
 * need->workspace and need->device. Returns the cap in force (0 on the CPU or where cuDNN does not
 * run attention; a fixed cap stays as it was). */
size_t mem_grow_workspace(zy_ctx *ctx, zy_mem_need *need, size_t want);

#endif
