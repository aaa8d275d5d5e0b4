/* The training step, the one place that turns micro-batches into an optimizer update. `zayac
 * train` and `zayac bench train` both run it; timing and profiling are hooks on it. It owns what
 * the step works on: the model (weights, gradients, bf16 compute copy), the activations, the
 * optimizer (AdamW/Muon) and the router balancing state. One step: zero the gradients, then per
 * micro-batch a forward + backward (loss scaled by 1/tokens of the whole step) and the routed
 * counts, then global gradient-norm clipping, the optimizer update at the given learning rate and
 * the balancing-bias update from the step's counts. Everything global (loss, token counts, the
 * gradient norm, router counts) is formed here, once, in a fixed order: the place where data
 * parallel reductions go. */
#ifndef ZY_TRAIN_STEP_H
#define ZY_TRAIN_STEP_H

#include "dist/comm.h"
#include "model/model.h"
#include "optim/balance.h"
#include "optim/optim.h"
#include "train/spike.h"
#include "train/zero1.h"

#include <stdint.h>

typedef struct {
    int grad_accum;        /* micro-batches per step (>= 1) */
    float grad_clip;       /* clip the global gradient norm to this (<= 0: measure only) */
    int balance;           /* 1: update the router balancing biases after each step */
    int stop_on_nonfinite; /* 1: a non-finite loss or gradient norm fails the step before the
                              update (training); 0: the update is applied anyway (benchmarks,
                              so every step costs the same) */
    zy_spike_config spike; /* loss-spike detection (train/spike.h; factor 0: off) */
    /* 1 (cuda.overlap_optimizer): on one rank, the update runs beside the next step's forward:
     * queued on a context of its own (ops_ctx_init_beside) group by group, each group's weights
     * marked as the update finishes them, the forward waiting for each group just before it reads
     * it (model.weights_needed), then clearing the gradients. The same kernels on the same data,
     * so the same bits as 0; ignored under ZeRO-1, whose weights travel to the ranks instead. */
    int overlap_optimizer;
} zy_step_config;

/* Whether the update runs beside the next forward, for a job of `world` ranks that asks for it
 * (cfg.overlap_optimizer): on one rank only. The trainer and the benchmark ask this before
 * making the context (its stream's priority), and the step when it plans the update. */
int step_overlaps(int wanted, int world);

/* The phases of a step, in order (the phase hook is called at the end of each). */
typedef enum {
    ZY_PHASE_ZERO = 0, /* zeroing the gradients */
    ZY_PHASE_FORWARD,
    ZY_PHASE_BACKWARD,
    ZY_PHASE_ROUTE, /* routed counts */
    ZY_PHASE_CLIP,
    ZY_PHASE_OPTIM, /* optimizer update and the bf16 weight refresh; under ZeRO-1 also queueing
                       each group's updated weights to every rank right after its update */
    ZY_PHASE_SHARE, /* ZeRO-1: the end of that share (the transfers run during the next forward,
                       which waits for each group as it needs it); empty on one rank */
    ZY_PHASE_BALANCE,
    ZY_STEP_NPHASES
} zy_step_phase;
/* "zero_grads", "forward", "backward", "route_counts", "clip", "optimizer", "share_weights",
 * "balance". */
const char *step_phase_name(zy_step_phase p);

typedef struct {
    /* fills ids/targets [B, T] with the next micro-batch (NULL: they already hold it) */
    int (*next_batch)(void *user, int32_t *ids, int32_t *targets);
    /* called at the end of each phase (NULL: none). When set, forward and backward run as
     * separate passes so each can be timed (one more pass over the logits). */
    void (*phase_end)(void *user, zy_step_phase p);
    void *user;
    /* this rank's request to stop (e.g. a caught signal's number; 0 = none; NULL: never),
     * asked once the step's loss is known and agreed over ranks inside the step's own reductions
     * (s->stop_agreed), so the ranks stop at the same step without a collective of their own
     * between steps (one would wait for the weights still travelling: zero1_share_end) */
    int64_t (*stop_vote)(void *user);
} zy_step_hooks;

typedef struct {
    zy_ctx *ctx;   /* the device everything lives on (owned by the caller) */
    zy_comm *comm; /* the data-parallel ranks (owned by the caller); NULL = this process alone */
    zy_step_config cfg;
    int B, T; /* this rank's micro-batch shape (B = the global batch / world size) */
    zy_model model;
    zy_acts acts;
    zy_optim opt;
    zy_balance bal;
    float **biases;                /* [L] balancing biases inside model.params */
    int32_t *ids, *targets;        /* [B, T] host: the micro-batch the next forward reads */
    int64_t *counts, *step_counts; /* [L, E+1] routed counts: of a micro-batch, of the step */
    int64_t step;                  /* optimizer steps completed */
    /* After step_run: the maximum over ranks of hooks->stop_vote (0 = carry on) */
    int64_t stop_agreed;
    zy_zero1 zero;           /* ZeRO-1 over comm's ranks (train/zero1.h), when have_zero */
    zy_spike spike;          /* the loss-spike detector's running mean */
    double fault_loss_scale; /* ZAYAC_FAULT=spike: this rank's loss sum of the next step is
                                multiplied by it before the ranks' sum (0: none) */
    int recompute; /* the activations recompute each layer in the backward (step_init_acts) */
    int *group;    /* [table.count] model_entry_group: the runs the update goes by (one rank) */
    /* cfg.overlap_optimizer (one rank): the context the update runs on, and its marks */
    zy_ctx side;
    zy_mark *grads_final; /* the gradients are complete (the update starts after it) */
    zy_mark **updated;    /* [L + 2]: group g's weights are updated (index g + 1) */
    zy_mark *update_done; /* every weight updated and the gradients cleared */
    int update_pending;   /* the forward has not yet waited for update_done */
    int grads_cleared;    /* the last update cleared the gradients (the next step need not) */
    int have_model, have_acts, have_opt, have_bal, have_zero, have_side;
} zy_step;

/* Creates the model of config mc on ctx (weights not initialised: the caller draws or loads them)
 * and the host batch buffers [B, T]. with_grads 0 makes an inference-only state (no optimizer). */
int step_init_model(zy_step *s, zy_ctx *ctx, const zy_config *mc, int B, int T, int with_grads);
/* Allocates the activations for [B, T]; recompute 1: with activation recomputation (acts_init),
 * also for the shapes step_reshape makes. */
int step_init_acts(zy_step *s, int recompute);
/* Gives the step another micro-batch shape [B, T] (a training phase with another batch or
 * sequence length): the activations and batch buffers are made again for it; no-op when equal. */
int step_reshape(zy_step *s, int B, int T);
/* Creates the optimizer (its compute copy is the model's bf16 weights) and the balancing state. */
int step_init_training(zy_step *s, const zy_step_config *cfg, const zy_optim_config *oc,
                       const zy_balance_config *bc);
/* Releases everything (safe after a failed init). */
void step_free(zy_step *s);

/* Data parallel over comm's ranks (NULL or world 1: none), set before step_init_training: every
 * rank holds the whole model and runs its share of the batch. ZeRO-1 (train/zero1.h): the
 * optimizer state is split by whole tensors in contiguous ranges balanced by state size; the last
 * micro-batch's backward reduces each layer's gradients to their owners as soon as they are final
 * (overlapping the rest of the backward on a GPU); the loss and the routed counts are summed over
 * ranks, so every rank computes the same norm and balancing step; each rank updates the tensors
 * it owns and sends them to the others, so every rank ends the step with the same weights. */
void step_set_comm(zy_step *s, zy_comm *comm);
/* The table entries [*first, *last) this rank's optimizer owns (all of them without ranks). */
void step_owned(const zy_step *s, int *first, int *last);

/* Makes the optimizer state whole where each rank updated a slice of it (dist.embedding_update =
 * split), before it is saved. Collective. Nothing without ranks. */
int step_state_whole(zy_step *s);
/* Whether every rank keeps table entry i's fp32 master current (all of them without ranks;
 * under ZeRO-1 with a compute copy, not the matrices, which only their owners keep:
 * train/zero1.h). */
int step_master_everywhere(const zy_step *s, int i);
/* Waits for weights still arriving from their owners after the last step (ZeRO-1 overlaps them
 * with the next forward, which waits by itself) or still being updated beside it
 * (cfg.overlap_optimizer): call before anything but a forward reads or writes model.params or the
 * compute copy; work issued on s->ctx afterwards comes after them. Under ZeRO-1 on GPUs, from the
 * end of step_init_training, model.params holds only the entries zero1_keeps_master marks
 * (train/zero1.h). */
int step_weights_ready(zy_step *s);

/* The context the optimizer update runs on: s->side under cfg.overlap_optimizer, else s->ctx
 * (a profiler of the step times both). */
zy_ctx *step_update_ctx(zy_step *s);

/* Runs one step at learning rate lr; *loss is the mean token loss over the step's micro-batches
 * (of every rank), *grad_norm the global gradient norm before clipping. Advances s->step. Fails
 * before the update (runtime: a retry from a checkpoint may help; the message ends "training
 * diverged") on a non-finite loss or norm when cfg.stop_on_nonfinite, or on a loss spike
 * (cfg.spike); also when next_batch fails or a collective fails. */
int step_run(zy_step *s, const zy_step_hooks *hooks, float lr, double *loss, double *grad_norm);

#endif
