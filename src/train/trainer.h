/* The trainer's state, shared by the training loop (train.c) and its checkpoints (train_ckpt.c);
 * not a public interface (train.h is). */
#ifndef ZY_TRAINER_H
#define ZY_TRAINER_H

#include "train/ranks.h"
#include "train/batches.h"
#include "train/metrics.h"
#include "train/step.h"
#include "train/train_config.h"

typedef struct {
    const zy_train_config *cfg;
    zy_ctx ctx;
    zy_step st; /* model, activations, optimizer, balancing; st.step = steps completed */
    zy_batches *train, *val;
    zy_metrics *metrics; /* rank 0 only (NULL elsewhere) */
    zy_ranks ranks;      /* the data-parallel ranks (world 1: this process alone) */
    double tokens_seen;
    char ckpt_root[ZY_PATH_MAX + 16];
    float *params_host; /* [table.total] host copy of the weights for checkpoints (CUDA only) */
} trainer;

/* Checkpoint step st.step under ckpt_root, collective over the ranks (ZeRO-1: each rank writes the
 * optimizer state it owns; rank 0 commits the folder). */
int trainer_save_checkpoint(trainer *tr);
/* Loads a checkpoint folder: weights, this rank's optimizer state (by global name, from whichever
 * file holds it), balancing state, counters and the data position. */
int trainer_resume_from(trainer *tr, const char *dir);
/* Compares the ranks' CRC-32C of the weights: a runtime error when they differ. */
int trainer_check_replicas(trainer *tr);

#endif
