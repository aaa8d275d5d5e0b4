/* The trainer's state, shared by the training loop (train.c) and its checkpoints (train_ckpt.c);
 * not a public interface (train.h is). */
#ifndef ZY_TRAINER_H
#define ZY_TRAINER_H

#include "train/ranks.h"
#include "train/batches.h"
#include "train/metrics.h"
#include "train/phases.h"
#include "train/step.h"
#include "train/train_config.h"

#include <cjson/cJSON.h>
#include <pthread.h>

/* A checkpoint save: the snapshot a writer thread writes, and its outcome (train_save.c). */
typedef struct {
    int active; /* the writer thread was started and not yet joined */
    pthread_t thread;
    long long step;
    int rank, world, keep;
    int first, last; /* the table entries this rank owns (their weights are its to write) */
    int *bound;      /* [world + 1] every rank's entries: rank r owns [bound[r], bound[r+1]) */
    double timeout_s;
    const zy_param_table *table; /* the model's (fixed during training) */
    zy_config config;
    char root[ZY_PATH_MAX + 16], tokenizer[ZY_PATH_MAX];
    zy_state_tensor *so, *sb; /* this rank's optimizer state; rank 0: the balancing state */
    int no, nb;
    const float *params; /* the owned weights (entry first at 0), in trainer.params_host */
    char *state_json;    /* rank 0 */
    double bytes;        /* this rank's tensor bytes */
    double stall_s;      /* the training thread's pause for it: the snapshot (and the replica
                            check), then wait_s */
    double wait_s;       /* the training thread waiting for the writer: the next save came
                            before the write ended, or saves are synchronous */
    double write_s;      /* the writer's time */
    int cancel;          /* set (atomically) when the run ends without waiting for the save */
    int rc;              /* the writer's result */
    char err[1024];
    char dir[4096]; /* rank 0: the folder committed */
} trainer_save;

typedef struct {
    const zy_train_config *cfg; /* the current phase's view of the run's config (phases.h) */
    zy_ctx ctx;
    zy_step st; /* model, activations, optimizer, balancing; st.step = steps completed */
    zy_batches *train, *val;
    zy_metrics *metrics; /* rank 0 only (NULL elsewhere) */
    zy_ranks ranks;      /* the data-parallel ranks (world 1: this process alone) */
    double tokens_seen;
    char ckpt_root[ZY_PATH_MAX + 16];
    /* Host copies a save writes from, made at the start and reused by every save (a writer reads
     * them until the next save, which waits for it first): */
    float *params_host; /* [params_host_floats] the weights a save copies (pinned on a GPU:
                           ops_host_alloc): this rank's owned entries as one block laid out as
                           in model.params, then every other entry all ranks keep, packed
                           (the replica check reads them) */
    size_t *host_at;    /* [table.count] each entry's offset in params_host, or SIZE_MAX */
    size_t params_host_floats;
    float *state_copy;   /* the state a step changes under a writer: the balancing moments, and
                            on the CPU the optimizer's (a GPU's are in its pinned mirror, optim.h) */
    size_t state_floats; /* state_copy's size */
    trainer_save save;   /* the checkpoint being written, if any */
    zy_phases phases;    /* the run's phases (one when the config lists none) */
} trainer;

static inline int trainer_is_main(const trainer *tr) {
    return tr->ranks.comm.rank == 0;
}

/* Makes the host buffers saves are copied into (params_host, the optimizer's mirror), so the
 * first checkpoint pauses no longer than the others and a host that cannot hold them fails at
 * the start. */
void trainer_snapshot_init(trainer *tr);
/* Starts checkpoint step st.step under ckpt_root, collective over the ranks (ZeRO-1: each rank
 * writes the optimizer state it owns; rank 0 commits the folder): the training thread copies the
 * state (with several ranks, checking their weights agree), a writer thread writes it
 * (train_save.c). A save still in flight is finished first; its failure is reported, not
 * returned. With checkpoint_async off it also finishes this one. */
int trainer_save_checkpoint(trainer *tr);
/* Waits for the save in flight (if any) and agrees its outcome over the ranks: a runtime error
 * when any rank's part failed. Rank 0 reports it: a console line and a metrics row at the
 * checkpoint's step: checkpoint_stall_s (the step loop's pause for it), checkpoint_wait_s (the
 * part of it spent waiting for the write), checkpoint_write_s, each the slowest rank's;
 * checkpoint_bytes (every rank's tensors), checkpoint_gb_per_s, world_size. Collective. */
int trainer_finish_checkpoint(trainer *tr);
/* Waits for the writer without a collective (the run is failing) and forgets the save. */
void trainer_drop_checkpoint(trainer *tr);
/* Loads a checkpoint folder: weights, this rank's optimizer state (by global name, from whichever
 * file holds it), balancing state, counters and the data position. */
int trainer_resume_from(trainer *tr, const char *dir);
/* Compares the ranks' checksums of the weights every rank keeps (step_master_everywhere), entry i
 * read at at[i] (this rank's copy): a runtime error when they differ. Collective. */
int trainer_check_replicas(trainer *tr, const float *const *at);

/* Phases (phases.c). Checks every phase can run here (its batch splits over the ranks, its data
 * folders exist) before anything trains. */
int trainer_phases_check(const trainer *tr);
/* At the start of each step: enters the phase the step trains in when it is another (its batch
 * shape, data with each source at its saved position, RoPE bases), announced on the console. */
int trainer_phase_begin_step(trainer *tr);
/* Adds the phase record (phase, step in it, each source's position, the phases that ran; nothing
 * for a run without phases) to a checkpoint's state.json object, and the loss-spike detector's
 * mean (train/spike.h: it is the one hook the checkpoint writer calls into state.json). */
void trainer_phases_save(const trainer *tr, cJSON *state);
/* From a checkpoint's state.json: enters the phase it was in (refusing, with the reason, what the
 * config cannot continue; reporting what changed in that phase) and restores the data position
 * ("train_loader"). */
int trainer_phases_resume(trainer *tr, const cJSON *state, const char *path);

#endif
