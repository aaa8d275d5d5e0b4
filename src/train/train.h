/* The training loop: model, optimiser (AdamW/Muon), schedule, clipping, router balancing,
 * metrics (console, JSONL, TensorBoard), periodic validation, checkpoints and exact resume. */
#ifndef ZY_TRAIN_H
#define ZY_TRAIN_H

#include "io/hf_model.h"
#include "train/train_config.h"

typedef struct {
    int resume;         /* continue from the newest complete checkpoint in out_dir/checkpoints */
    int overwrite;      /* a fresh run into an out_dir that holds one: remove its checkpoints */
    int64_t stop_after; /* stop (with a checkpoint) after this many steps in this run; -1 = never;
                           0 = save the loaded (or initial) state at once */
    const char *config_json; /* the resolved training config, saved as out_dir/train_config.json */
} zy_train_opts;

/* train_run's result when it stopped on request (--stop-after, SIGTERM or SIGINT) before the last
 * step, after writing a checkpoint (the CLI exits ZY_EXIT_STOPPED). */
#define TRAIN_STOPPED 1

/* Trains per c; prints progress to stdout. Returns ZY_OK when every step ran, TRAIN_STOPPED when
 * stopped on request, ZY_ERR with a message on failure. SIGTERM/SIGINT let the current step
 * finish, write a checkpoint and stop. */
int train_run(const zy_train_config *c, const zy_train_opts *o);
/* Mean validation loss of a model folder (loaded by rule, see io/hf_model.h) on the config's
 * validation split. */
int train_eval(const zy_train_config *c, const char *model_dir, zy_skip_bias_rule rule,
               int64_t batches, double *loss, int64_t *tokens);

#endif
