/* Multi-phase runs (the config's "phases": ZAYA1's recipe trains at 4k context, shifts the data
 * mixture, then trains at 32k with a new RoPE base). The run's config is seen through each phase
 * as a config of its own (a view: the phase's batch_size, seq_len, data, schedule and RoPE bases
 * over the run's other settings), so the loop, validation and checkpoints read the phase they are
 * in as they would read a run without phases. Also the table of every data source of the run with
 * how far it has been read, so a source that comes back in a later phase continues where it was.
 * Switching phases and their checkpoint record are the trainer's (trainer.h, phases.c). */
#ifndef ZY_PHASES_H
#define ZY_PHASES_H

#include "train/train_config.h"

#include <stdint.h>

#define ZY_MAX_RUN_SOURCES (ZY_MAX_SOURCES * (ZY_MAX_PHASES + 1))

typedef struct {
    const zy_train_config *run; /* the whole run's config (owned by the caller) */
    zy_train_config *views;     /* [n] the run's config as each phase sees it */
    int n;                      /* phases (1 when the config lists none) */
    int phased;                 /* 1: the config lists phases */
    int current;                /* the phase the trainer is in */
    /* every source of the run, by path, with the tokens drawn from it so far (windows x their
     * T: a phase with another seq_len continues at the next whole window of its own length) */
    char (*paths)[ZY_PATH_MAX]; /* [n_paths] */
    uint64_t *tokens;           /* [n_paths] */
    int n_paths;
} zy_phases;

/* Builds the views of run's phases (the run itself when it lists none); current = 0. */
void phases_init(zy_phases *ph, const zy_train_config *run);
/* Releases the views and the table (safe on a zeroed struct). */
void phases_free(zy_phases *ph);
/* The phase in which the run's step `step` (0-based: the step about to run) trains; past the end,
 * the last phase. */
int phases_at(const zy_phases *ph, int64_t step);
/* The learning rate of the run's step `step` in the current phase: the run's schedule at `step`,
 * or the phase's own schedule at the step counted from the phase's first. */
float phases_lr(const zy_phases *ph, int64_t step);
/* The index of path in the table (-1: not a source of this run). */
int phases_source(const zy_phases *ph, const char *path);

#endif
