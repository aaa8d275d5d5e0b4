/* ZeRO-1 for the training step (train/step.h): which rank owns which tensors, the gradient
 * buckets reduced to their owners while the backward runs, and the owners' updated weights sent
 * back to every rank.
 *
 * Ownership is by whole tensors (Newton-Schulz needs whole matrices, so none is split and no
 * matrix crosses ranks): rank r owns the table entries [bound[r], bound[r+1]), contiguous ranges
 * cut where the running update cost (optim_update_cost: elementwise traffic plus Newton-Schulz
 * FLOPs) passes each rank's equal share, so the ranks' optimizer phases take about as long. Each
 * rank keeps the optimizer moments of its entries only and updates only them
 * (optim_init_owned).
 *
 * Gradients: a bucket is the entries whose gradients one grads_ready call of the backward
 * (model.h) makes final (model_grads_final_at: one layer, with the input-norm weight of the layer
 * above, or the global tensors at the end). Each bucket is
 * reduced to its owners right then: one comm_reduce per (bucket, owner) run of entries, queued on
 * the communicator while the backward goes on (comm_defer: NCCL overlaps it with the next layers'
 * backward; the host backends complete it at once). Summed over the buckets, each rank sends the
 * bytes of one reduce-scatter of the gradients, without a padded copy of them. After the
 * backward an owner's gradients hold the sums over ranks; the others' are left partial, and
 * nothing reads them: the norm is summed over owned entries (and each rank's slices of split
 * ones, below), then over ranks.
 *
 * Weights: after the update each owner broadcasts its entries. On a GPU only what the compute
 * reads goes: the bf16 compute copy of the matrices (the GEMMs read nothing else of them) and the
 * fp32 values of the rest (embedding, norms, biases), about half the bytes of the fp32 masters;
 * the receivers cast the latter into their compute copy (the tied head's GEMM reads the
 * embedding's).
 * Nothing reads the fp32 masters of other ranks' matrices, so at set-up (zero1_release_masters)
 * their device memory is given back: each rank holds fp32 masters for
 * its own matrices and for every entry the compute reads in fp32 (zero1_keeps_master), about 4/N
 * bytes per
 * matrix parameter instead of 4, at the same addresses (model_release_masters). A checkpoint
 * saves each rank's own entries and checks the replicas on the entries every rank holds. On the
 * CPU the fp32 weights are the compute weights: all of them go, and all stay.
 *
 * Replicated entries (zero1_replicates: the tied embedding when the optimizer config's
 * embedding_update is ZY_EMB_REPLICATED or ZY_EMB_SPLIT) are updated by every rank (split: a slice
 * each). Under ZY_EMB_REPLICATED every rank updates them: their gradient is all-reduced (on CPU
 * ranks and on 2 GPUs the bits the owner's reduce gives; NCCL's algorithms on more may fold in
 * another order, the same on every rank), every rank keeps their optimizer state and runs the same
 * update, and nothing is sent after it. The embedding's gradient is final last in the backward and
 * its weights are read first in the forward, so its reduce, update and broadcast were one chain
 * between the two every other rank waited for (at zaya1-base widths 2.15 GB each way, on 2 H200s
 * ~16 ms); the all-reduce moves the same bytes as the reduce on 2 ranks, and the update runs on
 * every rank at once. Its cost: the embedding's AdamW moments and update on every rank. Measured on
 * 2 H100s it pays where the embedding is a large share of the step (zaya1-base widths with 4
 * layers: 0.85 -> 0.88 per GPU) and not elsewhere (bench-small 0.97
 * -> 0.95). It still has a nominal owner within the ranges: the rank that saves it and (not split)
 * counts it in the gradient norm. Ownership balancing leaves replicated entries out (every rank
 * pays for them).
 *
 * Split entries (zero1_splits: the tied embedding under ZY_EMB_SPLIT, the default) are replicated
 * entries whose update is shared: rank r updates one slice of the elements (split_slice: W near
 * equal parts, 16-float aligned, the tail to the last rank). Their gradient is reduce-scattered
 * (each rank receives the sums of its slice; on 2 GPUs each link direction carries half the bytes
 * where a reduce to one owner sends them all one way), each rank counts its slice in the norm and
 * updates it, and the slices are all-gathered after the update in fp32 (the receivers cast them
 * into their compute copy). Each rank's optimizer holds the moments of its slice only
 * (optim_init_owned's range); for a checkpoint zero1_gather_split_state assembles them whole in
 * the nominal owner's host mirror, which it writes as it would its own: the files are the
 * same in every mode.
 */
#ifndef ZY_TRAIN_ZERO1_H
#define ZY_TRAIN_ZERO1_H

#include "dist/comm.h"
#include "model/model.h"
#include "optim/optim.h"

typedef struct {
    zy_comm *comm;
    zy_model *m;
    int *bound;                /* [world + 1] rank r owns table entries [bound[r], bound[r+1]) */
    unsigned char *replicated; /* [count] every rank updates the entry (zero1_replicates) */
    unsigned char *mine;       /* [count] the entries this rank's optimizer holds and updates (a
                                  split one: its slice, `range`): its own range and the
                                  replicated ones (optim_init_owned) */
    unsigned char *split;      /* [count] replicated entries each rank updates a slice of
                                  (zero1_splits) */
    size_t *range;        /* [2 count] the elements [lo, hi) of each entry this rank's update covers
                             (optim_init_owned's range: a slice of split entries, else the whole) */
    zy_param *norm_items; /* [norm_count] what this rank adds to the gradient norm: its own
                             entries and its slices of the split ones (as entries of their own) */
    int norm_count;
    int *owner;        /* [count] the owning rank of each entry */
    int *ready_at;     /* [count] the grads_ready layer after which the entry's gradient is final */
    int *group;        /* [count] the weights' group: -1 the globals read before the layers, l layer
                          l, L (the layer count) the globals read after them (final norm) */
    int *foreign;      /* [L + 2] group g + 1: whether it has entries this rank does not update */
    int failed;        /* a bucket's reduce failed: the error is in zy_errmsg */
    int share_pending; /* a share's broadcasts may still be running (zero1_weights_ready) */
    int share_error;   /* queueing a group's broadcasts failed (zero1_share_end reports it) */
    int share_failed;  /* waiting for them failed in the forward's hook: error in zy_errmsg */
    int next_group;    /* the first group (-1: global, else layer) not yet waited for */
} zy_zero1;

/* Whether every rank keeps p's optimizer state (the file comment): the tied embedding when
 * oc->embedding_update is ZY_EMB_REPLICATED or ZY_EMB_SPLIT. */
int zero1_replicates(const zy_optim_config *oc, const zy_param *p);
/* Whether each rank updates one slice of p (the file comment): the tied embedding when
 * oc->embedding_update is ZY_EMB_SPLIT. */
int zero1_splits(const zy_optim_config *oc, const zy_param *p);
/* Splits the table of m over comm's ranks by update cost (oc decides it per tensor). */
void zero1_init(zy_zero1 *z, zy_comm *comm, zy_model *m, const zy_optim_config *oc);
void zero1_free(zy_zero1 *z);
/* This rank's entries [*first, *last). */
void zero1_owned(const zy_zero1 *z, int *first, int *last);

/* Makes the next backward reduce its gradient buckets to their owners as they become final
 * (installs m->grads_ready and defers the communicator); zero1_grads_done after it. */
void zero1_reduce_in_backward(zy_zero1 *z);
/* Waits for the buckets, removes the hook; fails (runtime) if a reduce failed. */
int zero1_grads_done(zy_zero1 *z);
/* The squared L2 norm of the whole gradient: this rank's owned entries and split slices
 * (norm_items) summed, then over ranks. */
int zero1_grad_sumsq(zy_zero1 *z, double *sumsq);
/* After the optimizer step: every owner's updated weights to every rank (see the file comment),
 * queued group by group without waiting (z->group: the globals read first, the layers, then the
 * globals read last), each as soon as its update is queued: zero1_share_begin, then
 * zero1_share_group(z, g) for g = -1 .. L in order (optim_step_runs calls it after group g's
 * entries), then zero1_share_end. The next forward waits for each group just before it reads it
 * (m->weights_needed; not for the groups this rank owns whole), so the transfers overlap the
 * optimizer and the forward of the layers before. Anything else that reads the weights calls
 * zero1_weights_ready first. */
int zero1_share_begin(zy_zero1 *z);
void zero1_share_group(void *z, int group);
int zero1_share_end(zy_zero1 *z);
/* Waits for the share's broadcasts still running (nothing after a forward: it waited); ends the
 * communicator's deferred mode. Collective only in that every rank waits for the same transfers. */
int zero1_weights_ready(zy_zero1 *z);
/* Whether every rank keeps entry i's fp32 master. */
int zero1_master_everywhere(const zy_zero1 *z, int i);
/* Whether this rank keeps entry i's fp32 master: one every rank keeps, or one of its own (all but
 * other ranks' matrices when the model has a compute copy). */
int zero1_keeps_master(const zy_zero1 *z, int i);
/* Gives back the device memory of the fp32 masters this rank does not keep (zero1_keeps_master;
 * nothing on the CPU). At set-up: later loads write only the kept ones (model_set_weights). */
void zero1_release_masters(zy_zero1 *z);
/* Makes the split entries' optimizer moments whole in their nominal owner's host mirror (each
 * rank's optimizer holds its slice; optim_adam_host), which saves them. Uses those entries'
 * gradients as the buffer (between steps). Collective; after zero1_weights_ready (nothing
 * deferred). */
int zero1_gather_split_state(zy_zero1 *z, zy_optim *opt);

#endif
